"""What a replica fetcher needs from the follower's local replicas (the broker's Log satisfies it).

Invariants the fetcher relies on: log_start_offset <= high_watermark <= log_end_offset; truncation
never removes offsets below `offset`; `append_as_follower` keeps the leader's offsets, epochs and bytes.
"""

from __future__ import annotations

from typing import Protocol

from protocol.messages import TopicPartition


class AppendInfo(Protocol):
    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def num_records(self) -> int: ...

    @property
    def size_bytes(self) -> int: ...


class FollowerLog(Protocol):
    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def latest_epoch(self) -> int | None: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, end offset of that epoch); (-1, -1) when unknown."""
        ...

    def truncate_to(self, offset: int) -> bool: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def append_as_follower(self, records: bytes) -> AppendInfo:
        """Raises UnexpectedAppendOffsetError when the first offset is not the LEO, CorruptRecordError
        when a batch fails validation."""
        ...

    def update_high_watermark(self, hw: int) -> int: ...

    def maybe_increment_log_start_offset(self, offset: int) -> bool: ...


class FollowerReplicas(Protocol):
    def follower_log(self, tp: TopicPartition) -> FollowerLog:
        """The local log of a followed partition; raises a KafkaError (e.g. KafkaStorageError) if none."""
        ...
