"""The metrics emitter: one snapshot per `metrics.interval.ms`, handed to every sink without ever blocking.

How this works
--------------
The broker gives the emitter a `snapshot(now_ms)` callable that returns this interval's records (one
partition record per hosted replica plus one broker record; the schema is in docs and in the Spark job).
The emitter owns one tick task and one delivery task per sink:

    tick task:  every interval ── snapshot(now_ms) ──▶ MetricsBatch ──put_nowait──▶ queue[sink] (bounded)
    delivery:   queue[sink] ──get──▶ await sink.write(batch)          (one task per sink, in order)

The tick task never awaits a sink. When a sink is slow or disconnected its queue fills; the next batch
then evicts the oldest queued one (the freshest metrics are the useful ones) and `dropped` grows. The
broker reports `dropped` as `MetricsDropped`, so lost intervals are visible rather than silent.

Ticks are scheduled on absolute deadlines (start + k * interval) from `Time.hi_res_milliseconds()`, so
the cadence does not drift with the time a snapshot takes; if the loop was held up past a whole
interval, the missed ticks are skipped rather than emitted in a burst.

Stopping cancels the tick task, lets each delivery task drain its queue for at most
`flush_timeout_ms`, cancels what is left and closes every sink.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from server_common.time import SYSTEM_TIME, Time

log = logging.getLogger(__name__)

Record = dict[str, object]
"""One metric record: a JSON object with the fields of the metric record schema."""

SnapshotProvider = Callable[[int], list[Record]]
"""Returns the records of one interval; called with the emission time (ms since the epoch)."""

DEFAULT_INTERVAL_MS = 1000
DEFAULT_QUEUE_SIZE = 60
DEFAULT_FLUSH_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class MetricsBatch:
    """All records one broker emitted at one tick. Every record carries the same `broker_id`."""

    broker_id: int
    ts_ms: int
    records: Sequence[Record]


class MetricsSink(Protocol):
    """Where batches go: a JSON-lines file, an MQTT topic. `write` may wait; the emitter never waits on it."""

    async def write(self, batch: MetricsBatch) -> None: ...

    async def close(self) -> None: ...


class MetricsEmitter:
    """Calls `snapshot` every `interval_ms` and delivers each batch to every sink through a bounded queue.

    Invariants: the tick task never awaits a sink; each sink sees batches in emission order; a batch is
    either delivered to a sink or counted once in `dropped` (per sink) or still queued.
    """

    def __init__(
        self,
        broker_id: int,
        snapshot: SnapshotProvider,
        sinks: Sequence[MetricsSink],
        time: Time = SYSTEM_TIME,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        flush_timeout_ms: int = DEFAULT_FLUSH_TIMEOUT_MS,
    ) -> None:
        if interval_ms <= 0:
            raise ValueError(f"metrics.interval.ms must be positive, got {interval_ms}")
        if queue_size <= 0:
            raise ValueError(f"metrics queue size must be positive, got {queue_size}")
        self.broker_id = broker_id
        self.interval_ms = interval_ms
        self._snapshot = snapshot
        self._sinks = list(sinks)
        self._time = time
        self._flush_timeout_ms = flush_timeout_ms
        self._queues: list[asyncio.Queue[MetricsBatch]] = [asyncio.Queue(maxsize=queue_size) for _ in self._sinks]
        self._tasks: list[asyncio.Task[None]] = []
        self._tick_task: asyncio.Task[None] | None = None
        self._stopped = False
        self.dropped = 0
        """Running total of batches evicted from a full sink queue (reported as MetricsDropped)."""
        self.emitted = 0
        """Batches produced by the tick task (each offered to every sink)."""
        self.write_errors = 0
        """Batches a sink raised on; they are not retried by the emitter."""

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._tick_task is not None or self._stopped:
            raise RuntimeError("a MetricsEmitter starts once")
        for sink, queue in zip(self._sinks, self._queues, strict=True):
            self._tasks.append(asyncio.create_task(self._deliver(sink, queue), name=f"metrics-{_name(sink)}"))
        self._tick_task = asyncio.create_task(self._tick_loop(), name="metrics-tick")

    async def stop(self) -> None:
        """Stop ticking, flush queued batches (bounded by `flush_timeout_ms`), then close every sink."""
        if self._stopped:
            return
        self._stopped = True
        if self._tick_task is not None:
            await _cancel_and_wait([self._tick_task])
        if self._tasks:
            try:
                await asyncio.wait_for(
                    asyncio.gather(*(queue.join() for queue in self._queues)),
                    timeout=self._flush_timeout_ms / 1000.0,
                )
            except TimeoutError:
                left = sum(queue.qsize() for queue in self._queues)
                log.warning("metrics: %d queued batches not flushed within %d ms", left, self._flush_timeout_ms)
            await _cancel_and_wait(self._tasks)
        for sink in self._sinks:
            try:
                await asyncio.wait_for(sink.close(), timeout=self._flush_timeout_ms / 1000.0)
            except Exception:
                log.exception("metrics: closing %s failed", _name(sink))

    async def __aenter__(self) -> MetricsEmitter:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- one tick ----------------------------------------------------------------------------------

    def emit_once(self, now_ms: int | None = None) -> MetricsBatch | None:
        """Take one snapshot and offer it to every sink queue. Never blocks; returns the batch offered.

        A snapshot that raises is logged and skipped: metrics must never take the broker down.
        """
        ts_ms = self._time.milliseconds() if now_ms is None else now_ms
        try:
            records = self._snapshot(ts_ms)
        except Exception:
            log.exception("metrics: snapshot failed; interval skipped")
            return None
        if not records:
            return None
        batch = MetricsBatch(self.broker_id, ts_ms, list(records))
        self.emitted += 1
        for queue in self._queues:
            self._offer(queue, batch)
        return batch

    def _offer(self, queue: asyncio.Queue[MetricsBatch], batch: MetricsBatch) -> None:
        if queue.full():
            # Evict the oldest: after an outage the newest intervals matter most.
            queue.get_nowait()
            queue.task_done()
            self.dropped += 1
        queue.put_nowait(batch)

    # -- tasks -------------------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        next_tick_ms = self._time.hi_res_milliseconds() + self.interval_ms
        while True:
            delay_ms = next_tick_ms - self._time.hi_res_milliseconds()
            if delay_ms > 0:
                await self._time.sleep(delay_ms / 1000.0)
            self.emit_once()
            next_tick_ms += self.interval_ms
            now_ms = self._time.hi_res_milliseconds()
            if next_tick_ms <= now_ms:
                missed = int((now_ms - next_tick_ms) // self.interval_ms) + 1
                log.warning("metrics: loop held up; skipping %d interval(s)", missed)
                next_tick_ms += missed * self.interval_ms

    async def _deliver(self, sink: MetricsSink, queue: asyncio.Queue[MetricsBatch]) -> None:
        while True:
            batch = await queue.get()
            try:
                await sink.write(batch)
            except Exception:
                self.write_errors += 1
                log.exception("metrics: %s failed to write a batch", _name(sink))
            finally:
                queue.task_done()


def _name(sink: MetricsSink) -> str:
    return type(sink).__name__


async def _cancel_and_wait(tasks: Sequence[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception):
            log.error("metrics: task ended with %r", result)
