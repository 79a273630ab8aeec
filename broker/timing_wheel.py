"""Hierarchical timing wheel: O(1) insert and cancel of timer tasks (Kafka's TimingWheel, TimerTaskList).

How this works
--------------
A wheel is a circular array of `wheel_size` buckets; each bucket (`TimerTaskList`) holds the tasks whose
expiration falls in one `tick_ms` wide slot. `current_time_ms` is a multiple of `tick_ms`; the wheel
covers `[current_time_ms, current_time_ms + interval_ms)` with `interval_ms = tick_ms * wheel_size`.
A task whose expiration lies beyond that goes to the *overflow wheel*, created lazily, whose tick is this
wheel's whole interval. With tick 1 ms and 20 buckets (the defaults) the levels are::

    level 0  tick    1 ms  interval     20 ms   [ 0| 1| 2| ... |19]   bucket = (exp //    1) % 20
    level 1  tick   20 ms  interval    400 ms   [ 0| 1| 2| ... |19]   bucket = (exp //   20) % 20
    level 2  tick  400 ms  interval  8 000 ms   [ 0| 1| 2| ... |19]   bucket = (exp //  400) % 20
    ...      (one more level each time a task lands beyond the highest interval)

Every bucket that receives its first task gets an expiration (`virtual_id * tick_ms`, the start of its
slot) and is offered to a queue ordered by expiration (Kafka's DelayQueue, here `timer.DelayQueue`).
The timer pops the earliest bucket once it is due, advances the wheels to the bucket's expiration and
*flushes* it: every task is re-added from level 0. A task that is now within one tick of its
expiration is expired (the timer runs it); the others fall into a finer bucket. That is the cascade,
drawn for a task due at t=437 ms added at t=0 (tick 1, size 20)::

    t=0    437 >= 0+400        -> level 2, slot 437//400 = 1, bucket expiration 400
    t=400  level-2 bucket due  -> flush, re-add: 437 < 400+20? no; 437 < 400+400 -> level 1,
                                  slot (437//20)%20 = 1, bucket expiration 420
    t=420  level-1 bucket due  -> flush, re-add: 437 < 420+20 -> level 0, slot 437%20 = 17, expiration 437
    t=437  level-0 bucket due  -> flush, re-add: 437 < 437+1 -> expired, the timer runs the task

So a task is touched once per level it passes through and is never run before its expiration: a bucket
expires at the *start* of its slot and only level 0, whose slots are one tick wide, ever expires a task.

Cancelling is O(1): the task knows its bucket and the bucket is a dict used as an insertion-ordered
set, so `remove` is a single hash delete (Kafka uses a doubly linked list for the same guarantee).

Kafka wraps each task in a TimerTaskEntry (its place in a bucket, with the expiration); re-adding a task
makes a new entry and leaves the old one behind, marked cancelled, for the flush to skip, because its
buckets are shared between threads. On one thread the task can hold those two fields itself: it sits in
at most one bucket, moving it takes it out of the old one first, and no bucket ever holds a stale entry.
That saves an object per delayed operation (about 70 bytes, and its construction on every add).

Everything runs on one thread (the broker's event loop): there are no locks and no atomics. Kafka keeps
a shared atomic task counter that every add, cancel and flush updates; here a timer's size is counted from
its buckets when asked (a metric, and the purgatory's purge check), which costs nothing per task.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Protocol


class TimerTask(ABC):
    """Something to run once `delay_ms` after it is added to a timer, unless cancelled first.

    Invariant: a task is in at most one bucket (`bucket`, None when it is in none); adding it to a bucket
    takes it out of the one it was in, so re-adding a task never makes it run twice. `expiration_ms` is
    the absolute expiration the timer computed when it added the task: the exact due time while the task
    waits in the timer's staging bucket, rounded up to a whole millisecond once it is in the wheel.
    """

    __slots__ = ("delay_ms", "bucket", "expiration_ms")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.bucket: TimerTaskList | None = None
        self.expiration_ms = -1

    def cancel(self) -> None:
        """Take the task out of its bucket; it will not run (unless added to a timer again)."""
        bucket = self.bucket
        if bucket is not None:
            # bucket.remove(self), inlined: every delayed operation completed early comes here.
            del bucket._entries[self]
            self.bucket = None

    @property
    def scheduled(self) -> bool:
        """Whether the task waits in a bucket of some timer."""
        return self.bucket is not None

    @abstractmethod
    def run(self) -> None:
        """Called once the task's expiration has passed (on the event loop thread)."""


class TimerTaskList:
    """One bucket: the tasks expiring in one slot of one wheel, and the slot's expiration.

    Invariants: `task.bucket is self` exactly for the tasks held here; `expiration_ms` is -1 while the
    bucket is not scheduled in the delay queue (new, or just flushed).
    """

    __slots__ = ("_entries", "_expiration_ms")

    def __init__(self) -> None:
        # A dict is an insertion-ordered set with O(1) add and delete, done in C.
        self._entries: dict[TimerTask, None] = {}
        self._expiration_ms = -1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the slot's expiration; True if it changed (then the caller must (re)queue the bucket)."""
        changed = self._expiration_ms != expiration_ms
        self._expiration_ms = expiration_ms
        return changed

    def get_expiration(self) -> int:
        return self._expiration_ms

    @property
    def expiration_ms(self) -> int:
        return self._expiration_ms

    def add(self, task: TimerTask) -> None:
        """Append `task`, first taking it out of whichever bucket held it (so it is in at most one)."""
        task.cancel()
        self._entries[task] = None
        task.bucket = self

    def remove(self, task: TimerTask) -> None:
        if task.bucket is self:
            task.cancel()

    def flush(self, reinsert: Callable[[TimerTask], object]) -> None:
        """Empty the bucket, handing every task to `reinsert` in insertion order; expiration back to -1."""
        entries = self._entries
        # A fresh dict: tasks re-added during the loop cannot disturb the iteration, and the old table
        # (which never shrinks on delete) is freed with it.
        self._entries = {}
        self._expiration_ms = -1
        for task in entries:
            task.bucket = None
            reinsert(task)

    def tasks(self) -> list[TimerTask]:
        """The tasks in this bucket, oldest first."""
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class BucketQueue(Protocol):
    """Where a bucket goes when it gets a new expiration: the timer's delay queue."""

    def offer(self, bucket: TimerTaskList) -> None: ...


class TimingWheel:
    """One level of the hierarchy; `overflow_wheel` is the next, coarser level (None until needed).

    Invariants: `current_time_ms % tick_ms == 0`; every task held by this wheel's buckets expires at or
    after `current_time_ms + tick_ms` when added; an overflow wheel's tick is this wheel's interval and
    its current time is never ahead of this wheel's.
    """

    __slots__ = (
        "tick_ms",
        "wheel_size",
        "interval_ms",
        "current_time_ms",
        "buckets",
        "overflow_wheel",
        "_queue",
    )

    def __init__(self, tick_ms: int, wheel_size: int, start_ms: int, queue: BucketQueue) -> None:
        if tick_ms <= 0 or wheel_size <= 0:
            raise ValueError(f"tick_ms and wheel_size must be positive, got {tick_ms} and {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        # Rounded down to a tick, so slot boundaries are multiples of tick_ms.
        self.current_time_ms = start_ms - (start_ms % tick_ms)
        self.buckets = [TimerTaskList() for _ in range(wheel_size)]
        self.overflow_wheel: TimingWheel | None = None
        self._queue = queue

    def _add_overflow_wheel(self) -> TimingWheel:
        self.overflow_wheel = TimingWheel(self.interval_ms, self.wheel_size, self.current_time_ms, self._queue)
        return self.overflow_wheel

    def add(self, task: TimerTask) -> bool:
        """Put `task` in its bucket on this wheel or a coarser one, by its `expiration_ms`.

        False when the task is already expired (due within one tick of `current_time_ms`): the caller then
        runs it. The task must not be in a bucket (a new task, or one just flushed or cancelled).
        """
        expiration_ms = task.expiration_ms
        wheel = self
        # A loop instead of Kafka's recursion: same decisions, no call per level.
        while True:
            current_time_ms = wheel.current_time_ms
            tick_ms = wheel.tick_ms
            if expiration_ms < current_time_ms + tick_ms:
                return False
            if expiration_ms < current_time_ms + wheel.interval_ms:
                virtual_id = expiration_ms // tick_ms
                bucket = wheel.buckets[virtual_id % wheel.wheel_size]
                # bucket.add(task) and bucket.set_expiration(...), inlined on this once-per-task path.
                bucket._entries[task] = None
                task.bucket = bucket
                # Only a bucket whose expiration changed needs queueing: a bucket already queued for this
                # slot will be flushed at the right time with the new task in it.
                bucket_expiration_ms = virtual_id * tick_ms
                if bucket._expiration_ms != bucket_expiration_ms:
                    bucket._expiration_ms = bucket_expiration_ms
                    wheel._queue.offer(bucket)
                return True
            overflow = wheel.overflow_wheel
            wheel = overflow if overflow is not None else wheel._add_overflow_wheel()

    def advance_clock(self, time_ms: int) -> None:
        """Move `current_time_ms` up to `time_ms` (rounded down to a tick), overflow wheels with it."""
        wheel: TimingWheel | None = self
        while wheel is not None and time_ms >= wheel.current_time_ms + wheel.tick_ms:
            wheel.current_time_ms = time_ms - (time_ms % wheel.tick_ms)
            time_ms = wheel.current_time_ms
            wheel = wheel.overflow_wheel

    def task_count(self) -> int:
        """Tasks in the buckets of this wheel and its overflow wheels."""
        return sum(len(bucket._entries) for wheel in self.levels() for bucket in wheel.buckets)

    def levels(self) -> list[TimingWheel]:
        """This wheel and every overflow wheel created so far, finest first."""
        result: list[TimingWheel] = []
        wheel: TimingWheel | None = self
        while wheel is not None:
            result.append(wheel)
            wheel = wheel.overflow_wheel
        return result
