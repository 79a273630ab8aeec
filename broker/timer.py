"""The timer: a timing wheel plus a queue of buckets ordered by expiration, and the reaper that drives it.

How this works
--------------
`SystemTimer.add(task)` stamps the task with an absolute expiration (`now + delay_ms`, rounded *up* to a
whole millisecond so it can never fire before its delay has fully passed on the clock) and puts it in the
timing wheel; a task already due runs at once, synchronously. Each bucket that gets a new expiration is
offered to the `DelayQueue`, a heap ordered by bucket expiration (Kafka's `java.util.concurrent.
DelayQueue`). `advance_clock()` pops every bucket whose expiration is <= now, advances the wheel to it and
flushes it (see timing_wheel.py): tasks due by then run, the rest cascade into finer buckets.

One departure from Kafka, for speed: a new task does not go into the wheel at once. It waits in a staging
bucket, and the timer remembers the earliest expiration staged (`_staging_due_ms`, which also wakes the
reaper). When that moment comes, `advance_clock` hands every task still staged to the wheel, where it
takes the place it would have had all along. Most delayed operations complete long before their
timeout: a fetch is answered when data arrives, a produce when the followers catch up. Such a task is
added and cancelled with one dict insert and one delete, and the wheel never sees it; in
`bench.purgatory` about 2% of the operations ever reach the wheel. What stays the same: a task never
runs before its expiration (a staged task is due no earlier than the staging is flushed, and the wheel
then runs it when its own bucket is due), it runs at most one tick late, and cancelling stays O(1).

Kafka's reaper thread blocks in `DelayQueue.poll(200 ms)`. Here nothing blocks: `TimerReaper` is a
loop timer callback that calls `advance_clock()` and re-arms itself for `next_expiration_ms()` (at most
`max_wait_ms`, 200 by default), and is brought forward when a task lands in a bucket that expires before
its planned wake-up. Tasks therefore run on the event loop thread, one tick (plus loop latency) after their
expiration at worst, and the reaper does not wake once per tick when nothing is due.

Single-threaded: the timer, its tasks and the reaper all live on one event loop, so no locks.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import time as time_module
from collections.abc import Callable
from itertools import count
from types import TracebackType

from broker.timing_wheel import TimerTask, TimerTaskList, TimingWheel
from server_common.time import SystemTime, Time

log = logging.getLogger(__name__)
_ceil = math.ceil
_monotonic = time_module.monotonic

#: Kafka's `SystemTimerReaper.WORK_TIMEOUT_MS` / the purgatory reaper's `advanceClock(200)`.
REAPER_MAX_WAIT_MS = 200
#: The shortest wait the reaper asks the event loop for: uvloop's (libuv's) timers count whole milliseconds.
MIN_WAIT_MS = 1.0


class DelayQueue:
    """Buckets ordered by expiration. A bucket is queued only when its expiration changes, which happens
    only after it was popped and flushed, so each bucket is in the heap at most once and the expiration
    stored beside it is current.
    """

    __slots__ = ("_heap", "_sequence", "on_new_head")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, TimerTaskList]] = []
        # Tie-breaker so equal expirations never compare the buckets themselves.
        self._sequence = count()
        #: Called with the new earliest expiration when an offered bucket becomes the head.
        self.on_new_head: Callable[[int], None] | None = None

    def offer(self, bucket: TimerTaskList) -> None:
        expiration_ms = bucket.expiration_ms
        self.new_expiration(expiration_ms)  # compared with the head before this bucket joins the heap
        heapq.heappush(self._heap, (expiration_ms, next(self._sequence), bucket))

    def new_expiration(self, expiration_ms: int) -> None:
        """Something (a bucket being offered, the timer's staged tasks) now expires at `expiration_ms`: tell
        the listener if that is earlier than every queued bucket."""
        heap = self._heap
        if (not heap or expiration_ms < heap[0][0]) and self.on_new_head is not None:
            self.on_new_head(expiration_ms)

    def poll(self, now_ms: int) -> TimerTaskList | None:
        """The earliest bucket if it is due at `now_ms` (removed from the queue), else None."""
        heap = self._heap
        if heap and heap[0][0] <= now_ms:
            return heapq.heappop(heap)[2]
        return None

    def peek_expiration_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)


class SystemTimer:
    """Kafka's Timer/SystemTimer: `add`, `advance_clock`, `size`, plus `next_expiration_ms` for the reaper.

    Time is `time.hi_res_milliseconds()` (monotonic). Invariants: a task runs at most once per `add`,
    never before `add time + delay_ms`; `size` is the number of added tasks neither run nor cancelled.
    """

    __slots__ = (
        "_time",
        "_clock",
        "_clock_scale",
        "_delay_queue",
        "_timing_wheel",
        "_staging",
        "_staging_due_ms",
        "_closed",
    )

    def __init__(self, time: Time, tick_ms: int = 1, wheel_size: int = 20) -> None:
        self._time = time
        # Read on every add: `_clock() * _clock_scale` is `hi_res_milliseconds()`; for the system clock it
        # is `time.monotonic` called directly, without the method's Python frame (~30 ns of ~200 per add).
        self._clock, self._clock_scale = (
            (_monotonic, 1000.0) if type(time) is SystemTime else (time.hi_res_milliseconds, 1.0)
        )
        self._delay_queue = DelayQueue()
        self._timing_wheel = TimingWheel(tick_ms, wheel_size, math.floor(time.hi_res_milliseconds()), self._delay_queue)
        # New tasks wait here until the earliest of them is due (see the module docstring).
        self._staging = TimerTaskList()
        self._staging_due_ms = math.inf
        self._closed = False

    @property
    def timing_wheel(self) -> TimingWheel:
        return self._timing_wheel

    def add(self, timer_task: TimerTask) -> None:
        """Schedule `timer_task` to run `delay_ms` from now; one already due (delay <= 0) runs right here."""
        if self._closed:
            raise RuntimeError("timer is closed")
        if timer_task.delay_ms <= 0:
            # Due now. Decided here rather than by the wheel, whose current time only moves when a bucket
            # is flushed and may lag `now` (it would park the task in a bucket that is already due).
            timer_task.cancel()
            _run_expired(timer_task)
            return
        if timer_task.bucket is not None:
            timer_task.cancel()  # added again: it leaves its old bucket, and runs once
        # Not rounded up yet: `_unstage` does it for the tasks that reach the wheel, and comparing a
        # fractional due time with a whole-millisecond `now` gives the same answer as its ceiling would.
        due_ms = self._clock() * self._clock_scale + timer_task.delay_ms
        timer_task.expiration_ms = due_ms  # type: ignore[assignment]  # fractional while staged
        # staging.add(timer_task), inlined: this is the per-operation path.
        staging = self._staging
        staging._entries[timer_task] = None
        timer_task.bucket = staging
        if due_ms < self._staging_due_ms:
            self._staging_due_ms = due_ms
            self._delay_queue.new_expiration(_ceil(due_ms))

    def _unstage(self, timer_task: TimerTask) -> None:
        timer_task.expiration_ms = _ceil(timer_task.expiration_ms)
        if not self._timing_wheel.add(timer_task):
            _run_expired(timer_task)

    def _reinsert(self, timer_task: TimerTask) -> None:
        if not self._timing_wheel.add(timer_task):
            _run_expired(timer_task)

    def advance_clock(self, timeout_ms: int = 0) -> bool:
        """Process every bucket due by now; True if there was one.

        Never blocks: Kafka's `advanceClock(timeoutMs)` waits up to `timeout_ms` for a bucket inside
        `DelayQueue.poll`; here that waiting is the `TimerReaper`'s job (it sleeps until
        `next_expiration_ms()`), so `timeout_ms` only keeps the call shape.
        """
        now_ms = math.floor(self._time.hi_res_milliseconds())
        staged = self._staging_due_ms <= now_ms
        if staged:
            self._staging_due_ms = math.inf
            self._staging.flush(self._unstage)
        queue = self._delay_queue
        bucket = queue.poll(now_ms)
        if bucket is None:
            return staged
        wheel = self._timing_wheel
        reinsert = self._reinsert
        while bucket is not None:
            wheel.advance_clock(bucket.expiration_ms)
            bucket.flush(reinsert)
            bucket = queue.poll(now_ms)
        return True

    @property
    def size(self) -> int:
        """Tasks waiting, staged or in the wheel (Kafka's NumDelayedOperations when the timer serves one
        purgatory). Counted when asked: a sum over the buckets, O(levels x wheel_size)."""
        return len(self._staging) + self._timing_wheel.task_count()

    def next_expiration_ms(self) -> int | None:
        """When `advance_clock` next has work (time base: `hi_res_milliseconds`): the earliest queued bucket
        or the earliest staged task, None if neither."""
        head_ms = self._delay_queue.peek_expiration_ms()
        staging_due_ms = self._staging_due_ms
        if staging_due_ms == math.inf:
            return head_ms
        return _ceil(staging_due_ms) if head_ms is None else min(head_ms, _ceil(staging_due_ms))

    def set_new_head_listener(self, listener: Callable[[int], None] | None) -> None:
        """`listener(expiration_ms)` runs whenever the timer's earliest expiration moves earlier: a bucket
        queued ahead of every queued one, or a task staged with an earlier due time than all of them."""
        self._delay_queue.on_new_head = listener

    def close(self) -> None:
        """Drop every waiting task without running it; later `add` calls raise."""
        self._closed = True
        self._delay_queue.clear()
        self._staging_due_ms = math.inf
        self._staging.flush(_forget)
        for wheel in self._timing_wheel.levels():
            for bucket in wheel.buckets:
                bucket.flush(_forget)

    @property
    def closed(self) -> bool:
        return self._closed


def _run_expired(timer_task: TimerTask) -> None:
    # The task sits in no bucket (flushed, or never placed): a later cancel() is a no-op.
    try:
        timer_task.run()
    except Exception:
        # Like Kafka's timer executor: one failing task must not stop the others in the same bucket
        # (the flush is mid-iteration) nor kill the reaper.
        log.exception("timer task %r failed", timer_task)


def _forget(timer_task: TimerTask) -> None:
    """A closed timer drops its tasks (flush has taken each out of its bucket already)."""


class TimerReaper:
    """Advances a `SystemTimer` on the event loop, from a chain of loop timer callbacks.

    Use `async with TimerReaper(timer, time):` or `await start()` / `await stop()`. Each wake-up: advance
    the timer, call `on_advance` (a purgatory's `maybe_purge`), then arm the loop's timer for the next
    bucket's expiration, at most `max_wait_ms` away; a task added with an earlier expiration re-arms it
    for the next loop iteration.

    A plain callback rather than an asyncio task awaiting a future: a failure cannot end it (an exception
    from `advance_clock` or `on_advance` is logged and the reaper carries on, as Kafka's reaper thread
    does), and a wake-up skips the future and the task step (measured: 21.5 µs of CPU per expiry with one
    task due every millisecond, against 22.5; most of it is the idle loop waking up, which a `call_later`
    per task pays as well). `time` (the same clock the timer reads) decides how long to wait.
    """

    def __init__(
        self,
        timer: SystemTimer,
        time: Time,
        *,
        max_wait_ms: int = REAPER_MAX_WAIT_MS,
        on_advance: Callable[[], object] | None = None,
    ) -> None:
        self._timer = timer
        self._time = time
        self._max_wait_ms = max_wait_ms
        self._on_advance = on_advance
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.Handle | None = None
        # When the armed callback runs (time base: `time.hi_res_milliseconds()`); -inf while a wake-up is
        # already due or under way, so a new head then changes nothing.
        self._wake_at_ms = -math.inf

    async def start(self) -> None:
        if self._loop is not None:
            raise RuntimeError("reaper already started")
        loop = self._loop = asyncio.get_running_loop()
        self._timer.set_new_head_listener(self._on_new_head)
        self._wake_at_ms = -math.inf
        self._handle = loop.call_soon(self._wake)

    async def stop(self) -> None:
        """Stop waking; idempotent. Tasks still in the timer stay there, unrun."""
        if self._loop is None:
            return
        self._loop = None
        self._timer.set_new_head_listener(None)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    async def __aenter__(self) -> TimerReaper:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def running(self) -> bool:
        return self._loop is not None

    def _on_new_head(self, expiration_ms: int) -> None:
        loop = self._loop
        if loop is not None and expiration_ms < self._wake_at_ms:
            if self._handle is not None:
                self._handle.cancel()
            self._wake_at_ms = -math.inf
            self._handle = loop.call_soon(self._wake)

    def _wake(self) -> None:
        self._handle = None
        self._wake_at_ms = -math.inf  # buckets queued while advancing need no extra wake-up: see below
        timer = self._timer
        try:
            timer.advance_clock()
            if self._on_advance is not None:
                self._on_advance()
        except Exception:
            log.exception("timer reaper: advancing the timer failed; carrying on")
        loop = self._loop
        if loop is None:
            return  # stopped from inside on_advance
        now_ms = self._time.hi_res_milliseconds()
        next_ms = timer.next_expiration_ms()
        wait_ms = float(self._max_wait_ms)
        if next_ms is not None:
            wait_ms = min(wait_ms, max(0.0, next_ms - now_ms))
            if 0.0 < wait_ms < MIN_WAIT_MS:
                # uvloop's timers count whole milliseconds: a shorter wait fires at once, so the reaper
                # would spin until the bucket is due (measured: 26 wake-ups per expiry, ~85 µs of CPU per expiry).
                wait_ms = MIN_WAIT_MS
        self._wake_at_ms = now_ms + wait_ms
        self._handle = loop.call_later(wait_ms / 1000.0, self._wake)
