"""The producer's record accumulator: records gather per partition into batches of `batch.size` bytes.

How this works
--------------
As in Kafka's RecordAccumulator, each partition has one open batch. `append` adds a record to it; when
the record would take the batch past `batch.size` bytes the batch is closed and a new one opened (a
record larger than `batch.size` gets a batch of its own). A closed batch is ready at once; an open one is
ready `linger.ms` after its first record arrived, or at once when the producer flushes. `drain` hands
the ready batches to the sender, each partition's in the order they were opened.

    partition 0: [closed 16 KiB][closed 16 KiB][open 3 KiB, first record at t=10]
    partition 1: [open 15 KiB, first record at t=12]
                   drain(now=14, linger.ms=5) -> p0's two closed batches
                   drain(now=15)              -> p0's open one as well (lingered 5 ms)

Sizes are exact for records without headers (the msgpack encoding `build_batch` writes is predictable:
array and bin headers, small ints), so 16 records of 1012 bytes fill a 16384-byte batch exactly; a
record with headers is counted with its packed headers.

Pure logic: time comes in as `now_ms`; no event loop here. The producer (client/producer.py) owns the
timer that calls `drain` again when `next_ready_in_ms` says the oldest open batch will have lingered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from protocol.messages import TopicPartition
from protocol.record_batch import HEADER_SIZE, Header, build_batch

# What a batch holds besides its records: the header and the largest msgpack array header (array 32).
BATCH_OVERHEAD = HEADER_SIZE + 5


def _bin_size(value: bytes | None) -> int:  # msgpack nil or bin 8/16/32
    if value is None:
        return 1  # nil
    n = len(value)
    return n + (2 if n < 256 else 3 if n < 65536 else 5)


def record_size(delta: int, key: bytes | None, value: bytes | None, headers: Sequence[Header] = ()) -> int:
    """Bytes the record takes in the batch payload (`[offset_delta, 0, key, value(, headers)]`)."""
    size = 2 + (1 if delta < 128 else 3 if delta < 65536 else 5) + _bin_size(key) + _bin_size(value)
    if headers:
        size += len(msgpack.packb([[name, v] for name, v in headers], use_bin_type=True))
    return size


@dataclass(slots=True)
class ProducerBatch:
    """Records for one partition that travel (and succeed or fail) together."""

    tp: TopicPartition
    created_ms: int
    records: list[tuple[bytes | None, bytes | None, Sequence[Header]]] = field(default_factory=list)
    size_bytes: int = BATCH_OVERHEAD
    closed: bool = False
    # Set by the producer: what to tell about each record once the batch's outcome is known.
    callbacks: list[Any] = field(default_factory=list)

    def build(self, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
        return build_batch(
            self.records, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence
        )


class RecordAccumulator:
    def __init__(self, batch_size: int = 16384, linger_ms: int = 5) -> None:
        if batch_size < 1 or linger_ms < 0:
            raise ValueError("batch.size must be >= 1 and linger.ms >= 0")
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self._batches: dict[TopicPartition, list[ProducerBatch]] = {}
        self._flushing = False
        self.bytes_held = 0  # record bytes in batches not drained yet

    def append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        now_ms: int,
        callback: Any = None,
    ) -> ProducerBatch:
        """Add a record to `tp`'s open batch (opening one if needed) and return that batch; `callback`
        goes beside the record in `batch.callbacks`."""
        queue = self._batches.get(tp)
        if queue is None:
            queue = self._batches[tp] = []
        batch = queue[-1] if queue and not queue[-1].closed else None
        delta = len(batch.records) if batch is not None else 0
        if key is None and not headers and value is not None:
            n = len(value)  # the common case, inline: record_size without the calls
            size = 3 + (1 if delta < 128 else 3 if delta < 65536 else 5) + n + (2 if n < 256 else 3 if n < 65536 else 5)
        else:
            size = record_size(delta, key, value, headers)
        if batch is not None and batch.size_bytes + size > self.batch_size:
            batch.closed = True
            batch = None
            if delta >= 128:
                size = record_size(0, key, value, headers)
        if batch is None:
            batch = ProducerBatch(tp, now_ms)
            queue.append(batch)
        batch.records.append((key, value, headers))
        batch.callbacks.append(callback)
        batch.size_bytes += size
        self.bytes_held += size
        if batch.size_bytes >= self.batch_size:
            batch.closed = True  # full: nothing more fits, so it need not linger
        return batch

    def _is_ready(self, batch: ProducerBatch, now_ms: int) -> bool:
        return batch.closed or self._flushing or now_ms - batch.created_ms >= self.linger_ms

    def drain(self, now_ms: int) -> list[ProducerBatch]:
        """Remove and return every ready batch, partition by partition, each partition's oldest first."""
        out: list[ProducerBatch] = []
        for tp, queue in list(self._batches.items()):
            taken = 0
            for batch in queue:
                if not self._is_ready(batch, now_ms):
                    break
                batch.closed = True
                out.append(batch)
                self.bytes_held -= batch.size_bytes - BATCH_OVERHEAD
                taken += 1
            if taken == len(queue):
                del self._batches[tp]
            elif taken:
                del queue[:taken]
        if not self._batches:
            self._flushing = False
        return out

    def has_ready(self, now_ms: int) -> bool:
        return any(queue and self._is_ready(queue[0], now_ms) for queue in self._batches.values())

    def next_ready_in_ms(self, now_ms: int) -> int | None:
        """Milliseconds until the oldest open batch has lingered long enough; None when nothing waits."""
        oldest = min((queue[0].created_ms for queue in self._batches.values() if queue), default=None)
        return None if oldest is None else max(0, oldest + self.linger_ms - now_ms)

    def begin_flush(self) -> None:
        """Every batch is ready from now until the accumulator has been drained empty (Kafka's flush)."""
        self._flushing = bool(self._batches)

    @property
    def pending_batches(self) -> int:
        return sum(len(q) for q in self._batches.values())
