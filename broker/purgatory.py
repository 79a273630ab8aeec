"""DelayedOperationPurgatory: where delayed operations wait, watched by key and timed by a SystemTimer.

How this works
--------------
`try_complete_else_watch(op, keys)` tries the operation once; if it cannot complete yet it is appended
to the watch list of every key (a partition, say) and added to the timer. When something changes for a
key (data appended, HW moved) the caller runs `check_and_complete(key)`: every operation watching that
key is tried, and the completed ones leave that list. An operation that times out is completed by the
timer (`DelayedOperation.run`) but stays in its watch lists, as does one watching several keys that was
completed through only one of them.

Those completed-but-still-watched operations are the memory that would otherwise grow with the number
of requests served. `estimated_total_operations` (ops ever watched, reset at each purge) minus
`num_delayed` (ops still in the timer) estimates them; once it exceeds `purge_interval` (Kafka's
`*.purgatory.purge.interval.requests`, 1000), `maybe_purge()` sweeps every watch list, dropping completed
operations and empty lists. The `TimerReaper` calls `maybe_purge` after each advance (pass it as
`on_advance`), so a sweep happens at most once per reaper wake-up, as in Kafka's reaper thread.

`num_delayed` is the timer's size, so give each purgatory its own `SystemTimer` (Kafka does too).

Single-threaded (the broker's event loop): no shards, no locks. Re-entrancy is allowed: `on_complete`
may watch new operations or check other keys, even the key being checked.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from broker.delayed_operation import DelayedOperation
from broker.timer import SystemTimer

T = TypeVar("T", bound=DelayedOperation)

#: Kafka's fetch.purgatory.purge.interval.requests / producer.purgatory.purge.interval.requests default.
DEFAULT_PURGE_INTERVAL = 1000


class DelayedOperationPurgatory(Generic[T]):
    """Invariants: an operation in the timer is in the watch list of every key it was watched on until
    it completes or is cancelled for that key; no watch list is empty; `num_delayed` counts operations
    neither completed nor cancelled.
    """

    def __init__(self, name: str, timer: SystemTimer, purge_interval: int = DEFAULT_PURGE_INTERVAL) -> None:
        self.name = name
        self.purge_interval = purge_interval
        self._timer = timer
        self._watchers: dict[Hashable, list[T]] = {}
        self._estimated_total_operations = 0

    @property
    def timer(self) -> SystemTimer:
        return self._timer

    def try_complete_else_watch(self, operation: T, keys: Iterable[Hashable]) -> bool:
        """True if `operation` completed right now; else it is watched on every key and timed, and False.

        Kafka tries a second time after watching, because another thread may have changed the state in
        between; on a single thread nothing can, so one try is enough.
        """
        if not isinstance(keys, (tuple, list)):
            keys = tuple(keys)  # walked once below; a one-shot iterator must not be consumed by the check
        if not keys:
            raise ValueError("the watch key list can't be empty")
        if operation.try_complete():
            return True
        watchers = self._watchers
        for key in keys:
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = [operation]
            else:
                ops.append(operation)
        self._estimated_total_operations += 1
        self._timer.add(operation)
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try every operation watching `key`; returns how many this call completed."""
        ops = self._watchers.get(key)
        if ops is None:
            return 0
        # Swap in an empty list first: an on_complete that watches new operations on this key (or checks
        # it again) works on the fresh list while this loop walks a snapshot nobody else touches.
        fresh: list[T] = []
        self._watchers[key] = fresh
        still_waiting: list[T] = []
        completed = 0
        for op in ops:
            if op._completed:
                continue
            if op.try_complete():
                completed += 1
            elif not op._completed:
                still_waiting.append(op)
        current = self._watchers.get(key)
        if current is fresh:
            if still_waiting or fresh:
                still_waiting.extend(fresh)
                self._watchers[key] = still_waiting
            else:
                del self._watchers[key]
        elif still_waiting:
            # The key was cancelled or re-created re-entrantly; keep the survivors in front of newcomers.
            self._watchers[key] = still_waiting + (current or [])
        return completed

    def cancel_for_key(self, key: Hashable) -> list[T]:
        """Stop watching `key`: its pending operations leave the timer without completing, and are returned.

        They are not completed (no response); an operation also watched on other keys stays there.
        """
        ops = self._watchers.pop(key, None)
        if ops is None:
            return []
        cancelled = [op for op in ops if not op._completed]
        for op in cancelled:
            op.cancel()
        return cancelled

    def maybe_purge(self) -> int:
        """Drop completed operations from all watch lists if enough have piled up; returns how many."""
        if self._estimated_total_operations <= self.purge_interval:
            return 0  # not enough ever watched to be worth counting the pending ones
        num_delayed = self._timer.size
        if self._estimated_total_operations - num_delayed <= self.purge_interval:
            return 0
        # Counted from the pending ones again; an operation completed during the sweep is simply found by
        # the next one (the estimate stays a slight overestimate, never an underestimate of waste).
        self._estimated_total_operations = num_delayed
        return self.purge_completed()

    def purge_completed(self) -> int:
        """Sweep every watch list now, whatever the estimate says; returns how many entries were dropped."""
        purged = 0
        watchers = self._watchers
        for key in list(watchers):
            ops = watchers[key]
            live = [op for op in ops if not op._completed]
            purged += len(ops) - len(live)
            if live:
                watchers[key] = live
            else:
                del watchers[key]
        return purged

    @property
    def watched(self) -> int:
        """Kafka's PurgatorySize: entries in all watch lists, completed ones not yet dropped included."""
        return sum(len(ops) for ops in self._watchers.values())

    @property
    def num_delayed(self) -> int:
        """Kafka's NumDelayedOperations: operations waiting in the timer."""
        return self._timer.size

    @property
    def estimated_total_operations(self) -> int:
        return self._estimated_total_operations

    def watch_keys(self) -> list[Hashable]:
        return list(self._watchers)

    def shutdown(self) -> None:
        """Close the timer (pending operations never run) and forget every watch list."""
        self._timer.close()
        self._watchers.clear()
