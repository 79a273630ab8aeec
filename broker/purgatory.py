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
of requests served. The purgatory counts the entries in its watch lists exactly (`watched`, Kafka's
PurgatorySize, without walking the lists). Entries minus `num_delayed` (operations still in the timer)
bounds the stale ones from above, since each pending operation holds at least one entry; once that
exceeds `purge_interval` (Kafka's `*.purgatory.purge.interval.requests`, 1000), `maybe_purge()` sweeps
every watch list, dropping completed operations and empty lists. The `TimerReaper` calls `maybe_purge`
after each advance (pass it as `on_advance`), so a sweep happens at most once per reaper wake-up, as in
Kafka's reaper thread.

Kafka estimates the waste in operations instead: every operation watched since the last purge counts,
even one that `check_and_complete` already took out of its list. Under load that sweeps every list about
once per `purge_interval` new operations, although most of them completed through their key and left
nothing behind. Counting entries only counts what is really left behind: operations that expired,
were cancelled, or completed through one of several keys. Pending operations watched on several keys
hold more than one entry each; what they hold beyond one at a purge is remembered (`_pending_extra`)
and not counted as waste until the next, so a steady set of multi-key fetches does not set off a sweep
at every wake-up. Stale entries are therefore held at most to `purge_interval` plus that excess.

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
        self._entries = 0  # entries in all watch lists, completed operations' included
        self._pending_extra = 0  # at the last purge: entries beyond one per pending operation

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
        self._entries += len(keys)
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
        self._entries -= len(ops) - len(still_waiting)
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
        self._entries -= len(ops)
        cancelled = [op for op in ops if not op._completed]
        for op in cancelled:
            op.cancel()
        return cancelled

    def maybe_purge(self) -> int:
        """Drop completed operations from all watch lists if enough have piled up; returns how many."""
        allowed = self.purge_interval + self._pending_extra
        if self._entries <= allowed:
            return 0  # even with nothing pending, no more than allowed could be stale: no need to ask the timer
        if self._entries - self._timer.size <= allowed:
            return 0
        return self.purge_completed()

    def purge_completed(self) -> int:
        """Sweep every watch list now, whatever the count says; returns how many entries were dropped."""
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
        self._entries -= purged
        self._pending_extra = max(0, self._entries - self._timer.size)
        return purged

    @property
    def watched(self) -> int:
        """Kafka's PurgatorySize: entries in all watch lists, completed ones not yet dropped included."""
        return self._entries

    @property
    def num_delayed(self) -> int:
        """Kafka's NumDelayedOperations: operations waiting in the timer."""
        return self._timer.size

    def watch_keys(self) -> list[Hashable]:
        return list(self._watchers)

    def shutdown(self) -> None:
        """Close the timer (pending operations never run) and forget every watch list."""
        self._timer.close()
        self._watchers.clear()
        self._entries = self._pending_extra = 0
