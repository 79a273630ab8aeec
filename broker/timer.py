"""The timer: a timing wheel plus a queue of buckets ordered by expiration, and the reaper that drives it.

How this works
--------------
`SystemTimer.add(task)` stamps the task with an absolute expiration (`now + delay_ms`, rounded *up* to a
whole millisecond so it can never fire before its delay has fully passed on the clock) and puts it in the
timing wheel; a task already due runs at once, synchronously. Each bucket that gets a new expiration is
offered to the `DelayQueue`, a heap ordered by bucket expiration (Kafka's `java.util.concurrent.
DelayQueue`). `advance_clock()` pops every bucket whose expiration is <= now, advances the wheel to it and
flushes it (see timing_wheel.py): tasks due by then run, the rest cascade into finer buckets.

Kafka's reaper thread blocks in `DelayQueue.poll(200 ms)`. Here nothing blocks: `TimerReaper` is an
asyncio task that sleeps until `next_expiration_ms()` (at most `max_wait_ms`, 200 by default), calls
`advance_clock()`, and is woken early when a task lands in a bucket that expires before its planned
wake-up. Tasks therefore run on the event loop thread, one tick (plus loop latency) after their
expiration at worst, and the reaper does not wake once per tick when nothing is due.

Single-threaded: the timer, its tasks and the reaper all live on one event loop, so no locks.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
from collections.abc import Callable
from itertools import count
from types import TracebackType

from broker.timing_wheel import TaskCounter, TimerTask, TimerTaskList, TimingWheel
from protocol.time import Time

log = logging.getLogger(__name__)
_ceil = math.ceil

#: Kafka's `SystemTimerReaper.WORK_TIMEOUT_MS` / the purgatory reaper's `advanceClock(200)`.
REAPER_MAX_WAIT_MS = 200


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
        heap = self._heap
        is_new_head = not heap or expiration_ms < heap[0][0]
        heapq.heappush(heap, (expiration_ms, next(self._sequence), bucket))
        if is_new_head and self.on_new_head is not None:
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

    __slots__ = ("_time", "_now_ms", "_delay_queue", "_task_counter", "_timing_wheel", "_closed")

    def __init__(self, time: Time, tick_ms: int = 1, wheel_size: int = 20) -> None:
        self._time = time
        self._now_ms = time.hi_res_milliseconds  # bound once: read on every add
        self._delay_queue = DelayQueue()
        self._task_counter = TaskCounter()
        self._timing_wheel = TimingWheel(
            tick_ms, wheel_size, math.floor(time.hi_res_milliseconds()), self._task_counter, self._delay_queue
        )
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
        timer_task.expiration_ms = _ceil(self._now_ms() + timer_task.delay_ms)
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
        queue = self._delay_queue
        bucket = queue.poll(now_ms)
        if bucket is None:
            return False
        wheel = self._timing_wheel
        reinsert = self._reinsert
        while bucket is not None:
            wheel.advance_clock(bucket.expiration_ms)
            bucket.flush(reinsert)
            bucket = queue.poll(now_ms)
        return True

    @property
    def size(self) -> int:
        """Tasks waiting in the wheel (Kafka's NumDelayedOperations when the timer serves one purgatory)."""
        return self._task_counter.value

    def next_expiration_ms(self) -> int | None:
        """Expiration of the earliest queued bucket (time base: `hi_res_milliseconds`), None if none."""
        return self._delay_queue.peek_expiration_ms()

    def set_new_head_listener(self, listener: Callable[[int], None] | None) -> None:
        """`listener(expiration_ms)` runs whenever a bucket expiring before every queued one is queued."""
        self._delay_queue.on_new_head = listener

    def close(self) -> None:
        """Drop every waiting task without running it; later `add` calls raise."""
        self._closed = True
        self._delay_queue.clear()
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
    """Owns the one asyncio task that advances a `SystemTimer` on the event loop.

    Use `async with TimerReaper(timer, time):` or `await start()` / `await stop()`. The loop: advance the
    timer, call `on_advance` (a purgatory's `maybe_purge`), then wait until the next bucket expires, at
    most `max_wait_ms`, or until a task with an earlier expiration is added.

    The wait uses the event loop's own timer (`loop.call_later`) rather than `Time.sleep` because it must
    be interruptible; `time` (the same clock the timer reads) decides how long to wait.
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
        self._task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._wake_at_ms = math.inf

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("reaper already started")
        self._timer.set_new_head_listener(self._on_new_head)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="timer-reaper")

    async def stop(self) -> None:
        """Cancel the reaper task and wait for it to finish; idempotent."""
        task, self._task = self._task, None
        self._timer.set_new_head_listener(None)
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            # Our own cancellation of the reaper; re-raise only if the caller itself is being cancelled.
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def __aenter__(self) -> TimerReaper:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _on_new_head(self, expiration_ms: int) -> None:
        waiter = self._waiter
        if waiter is not None and expiration_ms < self._wake_at_ms and not waiter.done():
            waiter.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        timer = self._timer
        while True:
            timer.advance_clock()
            if self._on_advance is not None:
                self._on_advance()
            now_ms = self._time.hi_res_milliseconds()
            next_ms = timer.next_expiration_ms()
            wait_ms = float(self._max_wait_ms)
            if next_ms is not None:
                wait_ms = min(wait_ms, max(0.0, next_ms - now_ms))
            self._wake_at_ms = now_ms + wait_ms
            waiter = loop.create_future()
            self._waiter = waiter
            handle = loop.call_later(wait_ms / 1000.0, _wake, waiter)
            try:
                await waiter
            finally:
                handle.cancel()
                self._waiter = None
                self._wake_at_ms = math.inf


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
