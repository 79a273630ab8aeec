"""An in-memory replica log holding real batch bytes, with Kafka's leader-epoch cache rules.

Used as the follower's local log and as the scripted leader's log, so "byte-identical to the leader"
is a plain comparison of batch lists. Truncation and deletion work on whole batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import (
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
    UnknownTopicOrPartitionError,
)
from protocol.messages import TopicPartition
from protocol.record_batch import BatchHeader, build_batch, read_header, validate_record_set


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    num_records: int
    size_bytes: int


class EpochCache:
    """Kafka's LeaderEpochFileCache: (epoch, start offset) entries, both strictly increasing."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1][0] if self.entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        if self.entries and self.entries[-1][0] == epoch:
            return
        self.entries = [(e, s) for e, s in self.entries if e < epoch and s < start_offset]
        self.entries.append((epoch, start_offset))

    def truncate_from_end(self, end_offset: int) -> None:
        self.entries = [(e, s) for e, s in self.entries if s < end_offset]

    def truncate_from_start(self, start_offset: int) -> None:
        below = [(e, s) for e, s in self.entries if s <= start_offset]
        above = [(e, s) for e, s in self.entries if s > start_offset]
        self.entries = ([(below[-1][0], start_offset)] if below else []) + above

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        if requested_epoch < 0 or not self.entries:
            return -1, -1
        if requested_epoch == self.entries[-1][0]:
            return requested_epoch, log_end_offset
        higher = next(((e, s) for e, s in self.entries if e > requested_epoch), None)
        if higher is None:
            return -1, -1
        floor = [(e, s) for e, s in self.entries if e <= requested_epoch]
        if not floor:
            return requested_epoch, higher[1]
        return floor[-1][0], higher[1]


@dataclass
class MemoryLog:
    """A FollowerLog. Failure hooks: set `fail_append` / `fail_truncate` to an exception to raise."""

    tp: TopicPartition = TopicPartition("t", 0)
    batches: list[bytes] = field(default_factory=list)
    _log_start_offset: int = 0
    _log_end_offset: int = 0
    _high_watermark: int = 0
    epochs: EpochCache = field(default_factory=EpochCache)
    truncations: list[int] = field(default_factory=list)
    full_truncations: list[int] = field(default_factory=list)
    fail_append: KafkaError | Exception | None = None
    fail_truncate: KafkaError | Exception | None = None

    # -- FollowerLog ------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def latest_epoch(self) -> int | None:
        return self.epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, self._log_end_offset)

    def truncate_to(self, offset: int) -> bool:
        if self.fail_truncate is not None:
            raise self.fail_truncate
        self.truncations.append(offset)
        if offset >= self._log_end_offset:
            return False
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        self.batches = [b for b in self.batches if _header(b).last_offset < offset]
        self._log_end_offset = _header(self.batches[-1]).next_offset if self.batches else self._log_start_offset
        self.epochs.truncate_from_end(self._log_end_offset)
        self._high_watermark = min(self._high_watermark, self._log_end_offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.full_truncations.append(offset)
        self.batches = []
        self.epochs = EpochCache()
        self._log_start_offset = self._log_end_offset = self._high_watermark = offset

    def append_as_follower(self, records: bytes) -> AppendInfo:
        if self.fail_append is not None:
            raise self.fail_append
        headers = validate_record_set(records)
        if not headers:
            return AppendInfo(-1, -1, 0, 0)
        first, last = headers[0].base_offset, headers[-1].last_offset
        if first != self._log_end_offset:
            raise UnexpectedAppendOffsetError(
                f"first offset {first} is not the log end offset {self._log_end_offset}", first, last
            )
        for h in headers:
            if h.partition_leader_epoch >= 0:
                self.epochs.assign(h.partition_leader_epoch, h.base_offset)
            self.batches.append(bytes(records[h.position : h.position + h.size_in_bytes]))
        self._log_end_offset = last + 1
        return AppendInfo(first, last, sum(h.record_count for h in headers), len(records))

    def update_high_watermark(self, hw: int) -> int:
        self._high_watermark = min(max(hw, self._log_start_offset), self._log_end_offset)
        return self._high_watermark

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        if offset <= self._log_start_offset:
            return False
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(f"log start {offset} above the high watermark {self._high_watermark}")
        self._log_start_offset = offset
        self.batches = [b for b in self.batches if _header(b).last_offset >= offset]
        self.epochs.truncate_from_start(offset)
        return True

    # -- leader side ------------------------------------------------------------------------------

    def append_as_leader(self, count: int, epoch: int, value: bytes = b"v") -> bytes:
        """Append one batch of `count` records stamped with `epoch` (the HW is left alone)."""
        batch = build_batch(
            [value] * count, base_offset=self._log_end_offset, partition_leader_epoch=epoch, timestamp_ms=0
        )
        if epoch >= 0:
            self.epochs.assign(epoch, self._log_end_offset)
        self.batches.append(batch)
        self._log_end_offset += count
        return batch

    def read(self, fetch_offset: int, max_batches: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding `fetch_offset`: at least one, then up to the limits."""
        out: list[bytes] = []
        size = 0
        for batch in self.batches:
            if _header(batch).last_offset < fetch_offset:
                continue
            if out and (len(out) >= max_batches or size + len(batch) > max_bytes):
                break
            out.append(batch)
            size += len(batch)
        return b"".join(out)

    def delete_records_before(self, offset: int) -> None:
        self._high_watermark = max(self._high_watermark, offset)
        self.maybe_increment_log_start_offset(offset)

    def become_leader(self, epoch: int) -> None:
        """What a new leader does first (KAFKA-7415): its epoch starts at its LEO."""
        if self.epochs.latest_epoch is None or epoch > self.epochs.latest_epoch:
            self.epochs.assign(epoch, self._log_end_offset)

    def set_high_watermark(self, hw: int) -> None:
        self._high_watermark = hw

    @staticmethod
    def with_batches(tp: TopicPartition, spec: list[tuple[int, int]], high_watermark: int | None = None) -> MemoryLog:
        """A log with one batch per (record count, epoch) in `spec`."""
        mlog = MemoryLog(tp)
        for count, epoch in spec:
            mlog.append_as_leader(count, epoch, value=f"{tp}-{epoch}".encode())
        mlog.set_high_watermark(mlog.log_end_offset if high_watermark is None else high_watermark)
        return mlog


def _header(batch: bytes) -> BatchHeader:
    return read_header(batch)


class MemoryReplicas:
    """FollowerReplicas over MemoryLogs. `offline` partitions raise KafkaStorageError."""

    def __init__(self) -> None:
        self.logs: dict[TopicPartition, MemoryLog] = {}
        self.offline: set[TopicPartition] = set()

    def follower_log(self, tp: TopicPartition) -> MemoryLog:
        if tp in self.offline:
            raise KafkaStorageError(f"log of {tp} is offline")
        try:
            return self.logs[tp]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"no log for {tp}") from None
