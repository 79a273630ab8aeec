"""The log of one partition replica: an ordered run of segments plus its epoch cache and offsets.

How this works
--------------
A replica directory `<log.dir>/<topic>-<partition>/` holds:

    00000000000000000000.log / .index     segments, named by base offset; the last one is active
    00000000000000052113.log / .index
    leader-epoch-checkpoint               the epoch cache (epoch, start offset) pairs
    log-start-offset                      the first offset still readable (can lie inside segment 0)
    00000000000000052113.snapshot         idempotent producers' state below that offset (at each roll)
    clean-shutdown                        present only between a clean close() and the next open()

    offsets:  log_start_offset ≤ high_watermark ≤ log_end_offset
              |<- consumers read ->|<- replicated to followers, not yet committed ->|

A leader appends producer batches with `append_as_leader`, which assigns offsets from the log end and
stamps its epoch; a follower appends the leader's bytes unchanged with `append_as_follower`. Before an
append the active segment rolls when it would pass segment.bytes, is older than segment.ms, or its index
is full (Kafka's maybeRoll). Reads return whole batches, possibly from several segments.

Opening a log recovers what a crash may have torn: without the clean-shutdown marker every segment is
re-validated batch by batch (header and CRC); with it only the active segment is. Either way the base
offsets of every closed segment's batches are then checked against each other from the headers alone
(they are outside the CRC): a segment whose offsets do not run on takes the replica offline at open,
as a corrupt batch found by a read does, instead of at the first read of that range. Recovery cuts the log
at the first bad batch, drops any later segments, rebuilds the epoch cache from batch headers when its
checkpoint is missing, and trims the cache to the recovered log. The idempotent producers' state
(producer_state.py) is rebuilt on opening and after each truncation from the newest snapshot at or below
the log end plus the producer batches after it, so it always describes exactly the batches in the log.

Every truncation is told to the log's `ReplicationObserver` (server_common/replication_observer.py) once
it is done; nobody watches a broker's logs but the simulator, so by default nobody is told.

Invariants: log_start_offset ≤ high_watermark ≤ log_end_offset; the log end offset is always a batch
boundary; segments are contiguous and ordered by base offset; the epoch cache never mentions an offset at
or past the log end. The high watermark lives only in memory here (the broker checkpoints it).
Everything is synchronous and single-threaded.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import re
import shutil
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from protocol.errors import (
    CorruptRecordError,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from protocol.messages import TopicPartition
from protocol.record_batch import LOG_OVERHEAD, next_sequence
from server_common.log_config import LogConfig
from server_common.replication_observer import NO_OBSERVER, ReplicationObserver
from server_common.storage import fsync_dir, write_atomically
from server_common.time import Time
from storage.batches import OFFSET_LENGTH_DELTA, OFFSET_LENGTH_EPOCH, Buffer, scan, single_batch
from storage.checkpoint import (
    CorruptCheckpointError,
    LeaderEpochCheckpoint,
    LogStartOffsetCheckpoint,
)
from storage.epoch_cache import LeaderEpochFileCache
from storage.file_records import FileRecords
from storage.offset_index import INDEX_SUFFIX
from storage.offset_metadata import LogOffsetMetadata
from storage.producer_state import ProducerBatch, ProducerEntries, ProducerStateManager
from storage.segment import LOG_SUFFIX, NO_TIMESTAMP, LogSegment
from storage.storage import OS_STORAGE, Storage

__all__ = ["AppendInfo", "Log", "LogConfig", "LogOffsetMetadata", "parse_topic_partition"]

CLEAN_SHUTDOWN_FILE = "clean-shutdown"
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset"

_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")

logger = logging.getLogger(__name__)


@dataclass(slots=True)  # not frozen: a frozen dataclass costs 0.4 us more to build, once per append
class AppendInfo:
    """What one append wrote (read-only by convention). An empty record set appends nothing: num_batches 0,
    last = first - 1."""

    first_offset: int
    last_offset: int
    num_batches: int
    num_records: int
    size_bytes: int
    max_timestamp: int
    # An idempotent producer's resent batch: nothing was appended, the offsets are the original batch's.
    duplicate: bool = False


def parse_topic_partition(dir_name: str) -> tuple[str, int]:
    """'orders-eu-3' -> ('orders-eu', 3): the partition is after the last dash; topics may contain dashes."""
    topic, dash, partition = dir_name.rpartition("-")
    if not dash or not topic or not partition.isdigit():
        raise ValueError(f"log directory {dir_name!r} is not named <topic>-<partition>")
    return topic, int(partition)


P = ParamSpec("P")
R = TypeVar("R")


def _storage_errors(method: Callable[Concatenate[Log, P], R]) -> Callable[Concatenate[Log, P], R]:
    """A disk error (full, read-only, failing) in a write path takes this replica offline, as Kafka takes a
    failed log dir offline: one log line, KafkaStorageError (56) to the caller, and the broker reports the
    replica to the controller, which moves its leadership. It stays offline until the broker restarts."""

    @functools.wraps(method)
    def wrapper(log: Log, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(log, *args, **kwargs)
        except OSError as exc:
            raise log._storage_error(method.__name__, exc) from None

    return wrapper


class Log:
    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        time: Time,
        segments: list[LogSegment],
        log_start_offset: int,
        epoch_cache: LeaderEpochFileCache,
        storage: Storage = OS_STORAGE,
        producer_entries: ProducerEntries | None = None,
        observer: ReplicationObserver = NO_OBSERVER,
    ) -> None:
        self._dir = dir
        self._storage = storage
        self._observer = observer  # told of every truncation
        self.config = config
        self._time = time
        self._topic, self._partition = parse_topic_partition(dir.name)
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._log_start_checkpoint = LogStartOffsetCheckpoint(dir / LOG_START_OFFSET_FILE)
        self._epoch_cache = epoch_cache
        self.producer_state = ProducerStateManager(dir, storage, shared=producer_entries)
        self._high_watermark = log_start_offset
        self._unflushed_messages = 0
        self._last_flush_ms = time.milliseconds()
        self._closed = False
        self.truncations = 0  # how many times the log was cut back (observers re-read after one)
        # Why this replica must not be served (corruption found, the disk failed), or None. Once set, reads
        # and appends raise KafkaStorageError: a replica never serves a hole or leads with one.
        self.offline_reason: str | None = None

    # -- opening -----------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dir: Path,
        config: LogConfig,
        time: Time,
        storage: Storage = OS_STORAGE,
        producer_entries: ProducerEntries | None = None,
        observer: ReplicationObserver = NO_OBSERVER,
    ) -> Log:
        """Open (creating if missing) the replica directory `dir`, recovering after an unclean shutdown.
        `observer` hears of every truncation, from the one this recovery may make on."""
        parse_topic_partition(dir.name)
        dir.mkdir(parents=True, exist_ok=True)
        marker = dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        _remove_leftovers(dir)

        start_checkpoint = LogStartOffsetCheckpoint(dir / LOG_START_OFFSET_FILE)
        try:
            checkpointed_start = start_checkpoint.read()
        except CorruptCheckpointError as exc:
            logger.warning("ignoring %s; the log start offset is taken from the first segment", exc)
            checkpointed_start = None

        recovered_epochs: list[tuple[int, int]] = []
        segments = _load_segments(dir, config, time, clean, checkpointed_start or 0, recovered_epochs.append, storage)
        if not segments:
            base = checkpointed_start if checkpointed_start is not None else 0
            segments = [_new_segment(dir, base, config, time, storage)]

        log_start = max(checkpointed_start or 0, segments[0].base_offset)
        epoch_cache = _open_epoch_cache(dir, segments, log_start, recovered_epochs)
        log = cls(dir, config, time, segments, log_start, epoch_cache, storage, producer_entries, observer)
        if log_start > log.log_end_offset:
            # Everything the segments hold was deleted before the crash; the log restarts at log start.
            log.truncate_fully_and_start_at(log_start)
        epoch_cache.truncate_from_end(log.log_end_offset)
        epoch_cache.truncate_from_start(log.log_start_offset)
        epoch_cache.flush_if_changed()
        log._rebuild_producer_state()
        # A missing checkpoint means "the first segment's base offset" (above), so a new log's is not
        # written. With the epoch cache's flush_if_changed, creating a replica takes two atomic writes
        # (four fsyncs) fewer.
        if checkpointed_start != log.log_start_offset and not (
            checkpointed_start is None and log.log_start_offset == log._segments[0].base_offset
        ):
            log._persist_log_start_offset()
        if clean:
            marker.unlink()
            fsync_dir(dir)
        for before, after in itertools.pairwise(log._segments):
            if before.next_offset != after.base_offset:
                # A closed segment's offsets do not reach the next one: a base offset changed on disk. The
                # replica goes offline rather than serve (or lead with) a hole.
                log.mark_offline(
                    f"segment {before.base_offset} ends at offset {before.next_offset} but the next segment "
                    f"starts at {after.base_offset}"
                )
                break
        if log.offline_reason is None:
            # Inside each closed segment too, before anything is read: a base offset changed on disk would
            # otherwise be found only by the first read of its range, while the replica stayed in the ISR.
            for segment in log._segments[:-1]:
                try:
                    segment.check_offsets()
                except CorruptRecordError as exc:
                    log.mark_offline(str(exc))
                    break
        if config.preallocate and log.offline_reason is None:
            # The active segment was cut back to its data when the log closed (or by recovery): appends
            # after a restart fill reserved space too.
            log._segments[-1].preallocate(config.segment_bytes)
        return log

    def mark_offline(self, reason: str) -> None:
        if self.offline_reason is None:
            logger.error("%s-%d is offline: %s", self._topic, self._partition, reason)
            self.offline_reason = reason

    def _storage_error(self, what: str, exc: OSError) -> KafkaError:
        """Take the replica offline after a disk error in `what`; the error to raise to the caller."""
        self.mark_offline(f"{what} failed: {exc}")
        return KafkaStorageError(f"{self.topic}-{self.partition}: {what} failed: {exc}")

    def _check_online(self) -> None:
        if self.offline_reason is not None:
            raise KafkaStorageError(f"{self._topic}-{self._partition} is offline on this broker: {self.offline_reason}")

    # -- properties --------------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition(self) -> int:
        return self._partition

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def latest_epoch(self) -> int | None:
        return self._epoch_cache.latest_epoch

    @property
    def epoch_cache(self) -> LeaderEpochFileCache:
        return self._epoch_cache

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size_in_bytes for s in self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def unflushed_messages(self) -> int:
        """Records appended since the last flush (what log.flush.interval.messages counts)."""
        return self._unflushed_messages

    # -- append ------------------------------------------------------------------------------------

    def append_as_leader(self, records: Buffer, leader_epoch: int) -> AppendInfo:
        """Validate every batch, assign offsets from the log end, stamp `leader_epoch`, and append.
        Raises CorruptRecordError (appending nothing) if any batch is torn, corrupt or inconsistent."""
        # What @_storage_errors does, without a wrapper call on the path every produced batch takes.
        try:
            single = single_batch(records)
            if single is None or single[1] + 1 != single[3] or self.offline_reason is not None or self._closed:
                return self._append_as_leader(records, leader_epoch)
            # One producer batch: the hot path, in one frame, with nothing allocated but the stamped copy.
            _, delta, max_timestamp, count, pid, producer_epoch, sequence = single
            segment = self._segments[-1]
            first_offset = segment.next_offset
            last_offset = first_offset + delta
            producer_batch = None
            if pid >= 0:
                producer_batch = ProducerBatch(pid, producer_epoch, sequence, first_offset, last_offset, max_timestamp)
                duplicate = self.producer_state.check(producer_batch)
                if duplicate is not None:
                    return AppendInfo(
                        duplicate.first_offset, duplicate.last_offset, 0, 0, 0, duplicate.timestamp, duplicate=True
                    )
            size = len(records)
            stamped = bytearray(records)
            OFFSET_LENGTH_EPOCH.pack_into(stamped, 0, first_offset, size - LOG_OVERHEAD, leader_epoch)
            self._epoch_cache.assign(leader_epoch, first_offset)
            now_ms = self._time.milliseconds()
            config = self.config
            if not segment.append_batch(
                stamped, first_offset, last_offset, max_timestamp, now_ms, config.segment_bytes, config.segment_ms
            ):
                self.roll().append_batch(
                    stamped, first_offset, last_offset, max_timestamp, now_ms, config.segment_bytes, config.segment_ms
                )
            self._count_unflushed(count, now_ms)
            if producer_batch is not None:
                self.producer_state.update(producer_batch)
            return AppendInfo(first_offset, last_offset, 1, count, size, max_timestamp)
        except OSError as exc:
            raise self._storage_error("append_as_leader", exc) from None

    def _append_as_leader(self, records: Buffer, leader_epoch: int) -> AppendInfo:
        """Any number of batches (`append_as_leader` takes the one-batch case itself)."""
        self._check_online()
        result = scan(records, verify_crc=True)
        if result.error is not None:
            raise CorruptRecordError(result.error)
        batches = result.batches
        first_offset = self.log_end_offset
        if not batches:
            return AppendInfo(first_offset, first_offset - 1, 0, 0, 0, NO_TIMESTAMP)
        stamped = bytearray(records)
        pack = OFFSET_LENGTH_EPOCH.pack_into
        placed: list[tuple[int, int]] = []
        next_offset = first_offset
        max_timestamp = NO_TIMESTAMP
        num_records = 0
        producer_batches: list[ProducerBatch] = []
        pending: dict[int, tuple[int, int]] = {}
        for batch in batches:
            if batch.last_offset_delta + 1 != batch.record_count:
                raise CorruptRecordError(
                    f"batch at byte {batch.position} says {batch.record_count} records "
                    f"but spans {batch.last_offset_delta + 1} offsets"
                )
            if batch.producer_id >= 0:
                last = next_offset + batch.last_offset_delta
                pb = ProducerBatch(
                    batch.producer_id, batch.producer_epoch, batch.base_sequence, next_offset, last, batch.max_timestamp
                )
                duplicate = self.producer_state.check(pb, pending)
                if duplicate is not None:
                    # As Kafka: the first duplicate answers for the whole append, which writes nothing.
                    return AppendInfo(
                        duplicate.first_offset, duplicate.last_offset, 0, 0, 0, duplicate.timestamp, duplicate=True
                    )
                pending[pb.producer_id] = (pb.producer_epoch, next_sequence(pb.base_sequence, batch.last_offset_delta))
                producer_batches.append(pb)
            pack(stamped, batch.position, next_offset, batch.size - LOG_OVERHEAD, leader_epoch)
            placed.append((next_offset, batch.size))
            next_offset += batch.last_offset_delta + 1
            num_records += batch.record_count
            if batch.max_timestamp > max_timestamp:
                max_timestamp = batch.max_timestamp
        self._epoch_cache.assign(leader_epoch, first_offset)
        self._append(stamped, next_offset - 1, max_timestamp, placed, num_records)
        for pb in producer_batches:
            self.producer_state.update(pb)
        return AppendInfo(first_offset, next_offset - 1, len(batches), num_records, len(stamped), max_timestamp)

    @_storage_errors
    def append_as_follower(self, records: Buffer) -> AppendInfo:
        """Append the leader's batches unchanged, keeping their offsets and epochs. The first batch must
        start at the log end (UnexpectedAppendOffsetError otherwise) and offsets must increase
        (CorruptRecordError otherwise, as for a bad CRC); nothing is appended on error."""
        self._check_online()
        result = scan(records, verify_crc=True)
        if result.error is not None:
            raise CorruptRecordError(result.error)
        batches = result.batches
        log_end = self.log_end_offset
        if not batches:
            return AppendInfo(log_end, log_end - 1, 0, 0, 0, NO_TIMESTAMP)
        first_offset = batches[0].base_offset
        last_offset = batches[-1].base_offset + batches[-1].last_offset_delta
        if first_offset != log_end:
            raise UnexpectedAppendOffsetError(
                f"{self._topic}-{self._partition}: follower append starts at offset {first_offset} "
                f"but the log ends at {log_end}",
                first_offset,
                last_offset,
            )
        placed: list[tuple[int, int]] = []
        epochs: list[tuple[int, int]] = []
        expected = first_offset
        max_timestamp = NO_TIMESTAMP
        num_records = 0
        gapless = True
        for batch in batches:
            if batch.base_offset < expected:
                raise CorruptRecordError(
                    f"batch at byte {batch.position} starts at offset {batch.base_offset}, before {expected}"
                )
            gapless = gapless and batch.base_offset == expected
            epoch = batch.partition_leader_epoch
            if epoch >= 0 and (not epochs or epochs[-1][0] != epoch):
                epochs.append((epoch, batch.base_offset))
            placed.append((batch.base_offset, batch.size))
            expected = batch.base_offset + batch.last_offset_delta + 1
            num_records += batch.record_count
            if batch.max_timestamp > max_timestamp:
                max_timestamp = batch.max_timestamp
        for epoch, start_offset in epochs:
            self._epoch_cache.assign(epoch, start_offset)
        self._append(records, last_offset, max_timestamp, placed, num_records, contiguous=gapless)
        for batch in batches:
            if batch.producer_id >= 0:  # the leader checked it; a follower keeps the state to lead with
                self.producer_state.update(
                    ProducerBatch(
                        batch.producer_id,
                        batch.producer_epoch,
                        batch.base_sequence,
                        batch.base_offset,
                        batch.base_offset + batch.last_offset_delta,
                        batch.max_timestamp,
                    )
                )
        return AppendInfo(first_offset, last_offset, len(batches), num_records, len(records), max_timestamp)

    def _append(
        self,
        records: Buffer,
        last_offset: int,
        max_timestamp: int,
        placed: Sequence[tuple[int, int]],
        num_records: int,
        contiguous: bool = True,
    ) -> None:
        if self._closed:
            self._check_open()
        now_ms = self._time.milliseconds()
        config = self.config
        segment = self._segments[-1]
        if segment.should_roll(len(records), last_offset, now_ms, config.segment_bytes, config.segment_ms):
            segment = self.roll()
        segment.append(records, last_offset, max_timestamp, placed, contiguous)
        self._count_unflushed(num_records, now_ms)

    def _count_unflushed(self, num_records: int, now_ms: int) -> None:
        """Flush once flush.messages records or flush.ms have passed since the last flush."""
        self._unflushed_messages += num_records
        config = self.config
        if self._unflushed_messages >= config.flush_interval_messages or (
            config.flush_interval_ms is not None and now_ms - self._last_flush_ms >= config.flush_interval_ms
        ):
            self.flush()

    @_storage_errors
    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (a no-op when the active segment is empty)."""
        active = self._segments[-1]
        if active.is_empty:
            return active
        active.index.flush(fsync=False)
        active.trim()
        # As Kafka: a snapshot at each roll (empty or not) bounds what a rebuild (open, truncation) has to read
        # to the segments after it.
        self.producer_state.take_snapshot(self.log_end_offset)
        segment = _new_segment(self._dir, self.log_end_offset, self.config, self._time, self._storage)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        return segment

    # -- read --------------------------------------------------------------------------------------

    def read(
        self, start_offset: int, max_bytes: int, upper_bound: int | None = None, min_one_message: bool = True
    ) -> bytes:
        """Whole batches from the one holding `start_offset`, stopping before any batch whose base offset
        is ≥ `upper_bound` (the log end when None; leaders pass the high watermark for consumers), at most
        `max_bytes` long, except that `min_one_message` returns the first batch even when it is larger
        (KIP-74). Raises OffsetOutOfRangeError outside [log_start_offset, log_end_offset]."""
        parts: list[bytes] = []
        for segment, start, end in self._spans(start_offset, max_bytes, upper_bound, min_one_message):
            try:
                parts.append(segment.read_span(start, end))
            except CorruptRecordError as exc:
                self.mark_offline(str(exc))
                raise KafkaStorageError(f"{self._topic}-{self._partition}: {exc}") from None
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._check_contiguous(start_offset, data)
        return data

    def read_file_records(
        self, start_offset: int, max_bytes: int, upper_bound: int | None = None, min_one_message: bool = True
    ) -> FileRecords | None:
        """What `read` returns, as slices of the segment files to send without reading them (Kafka's
        FileRecords), when every byte of it lies in the segments' verified prefixes (CRCs and offsets
        checked by this process); None when some of it was never verified (`read` then checks it)."""
        spans = self._spans(start_offset, max_bytes, upper_bound, min_one_message)
        if not all(segment.is_verified(end) for segment, _, end in spans):
            return None
        return FileRecords([(segment, start, end - start) for segment, start, end in spans])

    def _spans(
        self, start_offset: int, max_bytes: int, upper_bound: int | None, min_one_message: bool
    ) -> list[tuple[LogSegment, int, int]]:
        """The (segment, start, end) byte ranges a read returns, in order; none when it returns nothing."""
        self._check_online()
        log_end = self.log_end_offset
        if start_offset < self._log_start_offset or start_offset > log_end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self._log_start_offset}, {log_end}] "
                f"of {self._topic}-{self._partition}"
            )
        bound = log_end if upper_bound is None else min(upper_bound, log_end)
        spans: list[tuple[LogSegment, int, int]] = []
        if start_offset >= bound or max_bytes < 0:
            return spans
        segments = self._segments
        i = bisect_right(self._bases, start_offset) - 1
        remaining = max_bytes
        offset = start_offset
        while i < len(segments):
            segment = segments[i]
            max_position = None
            try:
                if bound < segment.next_offset:
                    max_position = segment.position_of_first_batch_from(bound)
                found = segment.span(offset, remaining, max_position, min_one_message and not spans)
            except CorruptRecordError as exc:
                self.mark_offline(str(exc))
                raise KafkaStorageError(f"{self._topic}-{self._partition}: {exc}") from None
            if found is not None:
                start, end = found
                if start == end:
                    break
                spans.append((segment, start, end))
                remaining -= end - start
                if remaining <= 0 or max_position is not None or end != segment.size_in_bytes:
                    break
            i += 1
            if i < len(segments):
                offset = segments[i].base_offset
        return spans

    def _check_contiguous(self, start_offset: int, data: bytes) -> None:
        """Offsets in this log have no gaps (leaders assign them in sequence, followers append at the log
        end): the first batch read must hold `start_offset` and each next one start right after it. A batch
        whose base offset changed on disk (outside its CRC) breaks that: the log goes offline."""
        unpack = OFFSET_LENGTH_DELTA.unpack_from
        expected = start_offset
        first = True
        position = 0
        end = len(data)
        while position < end:
            base, length, delta = unpack(data, position)
            if (base > expected) if first else (base != expected):
                reason = f"offsets jump from {expected} to {base} in a read from offset {start_offset}"
                self.mark_offline(reason)
                raise KafkaStorageError(f"{self._topic}-{self._partition}: {reason}")
            expected = base + delta + 1
            first = False
            position += LOG_OVERHEAD + length

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Segment and byte position of the batch holding `offset` (the log end maps to the active
        segment's size). Raises OffsetOutOfRangeError outside [log_start_offset, log_end_offset]."""
        log_end = self.log_end_offset
        if offset == log_end:
            return self.log_end_offset_metadata
        if offset < self._log_start_offset or offset > log_end:
            raise OffsetOutOfRangeError(f"offset {offset} is outside [{self._log_start_offset}, {log_end}]")
        i = bisect_right(self._bases, offset) - 1
        segment = self._segments[i]
        position = segment.translate_offset(offset)
        if position is None:  # a gap at the end of the segment: the offset's data starts the next one
            return LogOffsetMetadata(offset, self._segments[i + 1].base_offset, 0)
        return LogOffsetMetadata(offset, segment.base_offset, position)

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        active = self._segments[-1]
        return LogOffsetMetadata(active.next_offset, active.base_offset, active.size_in_bytes)

    def bytes_available(self, from_offset: int, to_offset: int) -> int:
        """Bytes of the log between the batches holding `from_offset` and `to_offset`."""
        if to_offset <= from_offset:
            return 0
        start = self.offset_metadata(from_offset)
        end = self.offset_metadata(to_offset)
        if start.segment_base_offset == end.segment_base_offset:
            return end.relative_position - start.relative_position
        total = end.relative_position - start.relative_position
        for segment in self._segments:
            if start.segment_base_offset <= segment.base_offset < end.segment_base_offset:
                total += segment.size_in_bytes
        return total

    # -- high watermark ----------------------------------------------------------------------------

    def update_high_watermark(self, high_watermark: int) -> int:
        """Follower: take the leader's high watermark, clamped into [log_start_offset, log_end_offset]."""
        self._high_watermark = min(max(high_watermark, self._log_start_offset), self.log_end_offset)
        return self._high_watermark

    def maybe_increment_high_watermark(self, new_high_watermark: int) -> bool:
        """Leader: move the high watermark forward (never back); it may not pass the log end."""
        if new_high_watermark > self.log_end_offset:
            raise ValueError(f"high watermark {new_high_watermark} would pass the log end offset {self.log_end_offset}")
        if new_high_watermark <= self._high_watermark:
            return False
        self._high_watermark = new_high_watermark
        return True

    # -- truncation --------------------------------------------------------------------------------

    @_storage_errors
    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch at or after `target_offset` (a batch holding it is removed whole). False
        when there is nothing to remove. Below the first segment the log is emptied and restarts there."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate to negative offset {target_offset}")
        if target_offset >= self.log_end_offset:
            # Nothing to cut, but an epoch entry may start at the log end with no batch in it: this replica
            # led briefly and appended nothing before another leader was elected. Drop it, as Kafka does,
            # or the follower would keep sending that epoch (which the leader never had) as its last
            # fetched one and be told it diverges, forever.
            self._check_open()
            self._epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        self._check_open()
        # One line per real truncation: operators (and the chaos report) count them.
        self.truncations += 1
        logger.info("%s: truncated from log end offset %d to %d", self._name(), self.log_end_offset, target_offset)
        if target_offset < self._segments[0].base_offset:
            self._truncate_fully_and_start_at(target_offset)
            self._told_truncated(target_offset)
            return True
        while self._segments[-1].base_offset > target_offset:
            self._segments.pop().delete()
            self._bases.pop()
        self._segments[-1].truncate_to(target_offset)
        if self.config.preallocate:
            # Cutting the file gave the reserved space back: the active segment reserves it again.
            self._segments[-1].preallocate(self.config.segment_bytes)
        log_end = self.log_end_offset
        self._epoch_cache.truncate_from_end(log_end)
        if self._log_start_offset > log_end:
            self._log_start_offset = log_end
            self._persist_log_start_offset()
        self._high_watermark = min(self._high_watermark, log_end)
        self._high_watermark = max(self._high_watermark, self._log_start_offset)
        if self.producer_state.producers:
            self._rebuild_producer_state()
        else:
            # No producer state: the log holds no idempotent batch, and cutting it cannot add one.
            self.producer_state.delete_snapshots_above(log_end)
        self._told_truncated(target_offset)
        return True

    def _told_truncated(self, to_offset: int) -> None:
        self._observer.log_truncated(
            TopicPartition(self._topic, self._partition), to_offset, self.log_end_offset, self._high_watermark
        )

    def _rebuild_producer_state(self) -> None:
        """The producer state of exactly the batches in the log: from the newest snapshot at or below the
        log end, plus the producer batches after it."""

        def batches_from(offset: int) -> Iterator[ProducerBatch]:
            for segment in self._segments:
                if segment.next_offset > offset:
                    for pid, epoch, seq, base, last, max_ts in segment.producer_batches(offset):
                        yield ProducerBatch(pid, epoch, seq, base, last, max_ts)

        self.producer_state.rebuild(self.log_end_offset, batches_from)

    def _name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @_storage_errors
    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart empty at `new_offset` (log start = log end = HW = new_offset)."""
        self._truncate_fully_and_start_at(new_offset)
        self._told_truncated(new_offset)

    def _truncate_fully_and_start_at(self, new_offset: int) -> None:
        if new_offset < 0:
            raise ValueError(f"cannot restart the log at negative offset {new_offset}")
        self._check_open()
        self.truncations += 1
        for segment in reversed(self._segments):
            segment.delete()
        self._segments = [_new_segment(self._dir, new_offset, self.config, self._time, self._storage)]
        self._bases = [new_offset]
        self._log_start_offset = new_offset
        self._persist_log_start_offset()
        self._high_watermark = new_offset
        self._epoch_cache.clear()
        self.producer_state.clear()
        self.producer_state.delete_snapshots_above(-1)

    # -- offsets by timestamp ----------------------------------------------------------------------

    @_storage_errors
    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """(timestamp, offset, leader epoch) of the earliest record at or after the log start whose
        timestamp is at least `timestamp` (≥ 0), or None when no record is that recent: Kafka's
        UnifiedLog.fetchOffsetByTimestamp, which ListOffsets answers with.

        There is no time index (Kafka's .timeindex). Segments are skipped by their largest timestamp, which
        each keeps in memory (read at open, by recovery or by the offset check of closed segments, which
        read every batch header anyway; after a truncation by one walk over the segment's headers; kept up
        by appends); in the first segment that can hold the answer the batch headers are walked from its
        start to the first batch whose max timestamp is large enough, and only that batch is read and
        decoded. docs/benchmarks.md ("offsets_by_timestamp") has what the walk costs and why there is no
        index."""
        self._check_online()
        start = self._log_start_offset
        for segment in self._segments:
            if segment.next_offset <= start or segment.largest_timestamp < timestamp:
                continue
            try:
                found = segment.find_offset_by_timestamp(timestamp, start)
            except CorruptRecordError as exc:  # as a read that finds it
                self.mark_offline(str(exc))
                raise KafkaStorageError(f"{self._topic}-{self._partition}: {exc}") from None
            if found is not None:
                return found
        return None

    # -- leader epochs -----------------------------------------------------------------------------

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetsForLeaderEpoch answers; see LeaderEpochFileCache.end_offset_for."""
        return self._epoch_cache.end_offset_for(epoch, self.log_end_offset)

    @_storage_errors
    def maybe_assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        """A new leader records where its epoch starts before it appends anything (KAFKA-7415)."""
        self._epoch_cache.assign(epoch, start_offset)

    # -- log start and retention -------------------------------------------------------------------

    @_storage_errors
    def maybe_increment_log_start_offset(self, new_offset: int) -> bool:
        """Advance the log start (DeleteRecords, or a follower following its leader's log start). It may
        not pass the high watermark. Segments wholly below the new start are deleted."""
        if new_offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset to {new_offset}: it is past the high watermark "
                f"{self._high_watermark}"
            )
        if new_offset <= self._log_start_offset:
            return False
        self._log_start_offset = new_offset
        self._persist_log_start_offset()
        self._epoch_cache.truncate_from_start(new_offset)
        self._delete_segments_while(lambda segment, next_segment: next_segment.base_offset <= new_offset)
        return True

    @_storage_errors
    def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords: make `offset` the log start (≤ HW); returns the log start afterwards."""
        self.maybe_increment_log_start_offset(offset)
        return self._log_start_offset

    def remove_expired_producers(self) -> int:
        """producer.id.expiration.ms: forget idempotent producers idle for longer (producer_state.py)."""
        return self.producer_state.remove_expired(self._time.milliseconds(), self.config.producer_id_expiration_ms)

    def delete_old_segments(self) -> int:
        """Apply retention.ms (by each segment's largest timestamp), retention.bytes (by total size) and
        the log start offset. Only segments wholly below the high watermark go; the active segment stays.
        Returns the number of segments deleted."""
        now_ms = self._time.milliseconds()
        retention_ms = self.config.retention_ms
        deleted = 0
        if retention_ms >= 0:
            deleted += self._delete_segments_while(
                lambda segment, _next: now_ms - segment.largest_timestamp > retention_ms
            )
        if self.config.retention_bytes >= 0:
            excess = self.size_in_bytes - self.config.retention_bytes

            def over_size(segment: LogSegment, _next: LogSegment) -> bool:
                nonlocal excess
                if excess - segment.size_in_bytes < 0:
                    return False
                excess -= segment.size_in_bytes
                return True

            deleted += self._delete_segments_while(over_size)
        start = self._log_start_offset
        deleted += self._delete_segments_while(lambda _segment, next_segment: next_segment.base_offset <= start)
        return deleted

    def _delete_segments_while(self, deletable: Callable[[LogSegment, LogSegment], bool]) -> int:
        """Delete segments from the oldest while `deletable(segment, next segment)` holds and the segment
        lies wholly below the high watermark; never the active segment."""
        count = 0
        while count < len(self._segments) - 1:
            segment, next_segment = self._segments[count], self._segments[count + 1]
            if next_segment.base_offset > self._high_watermark or not deletable(segment, next_segment):
                break
            count += 1
        if count == 0:
            return 0
        doomed = self._segments[:count]
        self._segments = self._segments[count:]
        self._bases = self._bases[count:]
        if self._segments[0].base_offset > self._log_start_offset:
            # The new start is made durable before the files go, so a crash cannot resurrect them.
            self._log_start_offset = self._segments[0].base_offset
            self._persist_log_start_offset()
            self._epoch_cache.truncate_from_start(self._log_start_offset)
        for segment in doomed:
            segment.delete()
        self.producer_state.delete_snapshots_below(self._log_start_offset)
        return count

    # -- lifecycle ---------------------------------------------------------------------------------

    @_storage_errors
    def flush(self) -> None:
        """fsync every segment with unflushed appends."""
        for segment in self._segments:
            segment.flush()
        self._unflushed_messages = 0
        self._last_flush_ms = self._time.milliseconds()

    def close(self) -> None:
        """Flush, persist checkpoints and leave the clean-shutdown marker so the next open skips recovery
        of all but the active segment."""
        if self._closed:
            return
        if self.offline_reason is not None:
            # No clean-shutdown marker for a replica that went offline: the next open recovers it in full.
            for segment in self._segments:
                with contextlib.suppress(OSError):
                    segment.close()
            self.producer_state.release()
            self._closed = True
            return
        self.flush()
        self._epoch_cache.flush()
        self._persist_log_start_offset()
        # As Kafka on a clean shutdown: the next open reads the state instead of the batch headers.
        self.producer_state.take_snapshot(self.log_end_offset)
        for segment in self._segments:
            segment.trim()
            segment.close()
        write_atomically(self._dir / CLEAN_SHUTDOWN_FILE, b"")
        self.producer_state.release()
        self._closed = True

    def abandon(self) -> None:
        """Close the files as a killed process would: no flush, no checkpoint, no clean-shutdown marker."""
        for segment in self._segments:
            with contextlib.suppress(OSError):
                segment.close()
        self.producer_state.release()
        self._closed = True

    def delete(self) -> None:
        """Remove the replica directory and everything in it."""
        for segment in self._segments:
            segment.close()
        self.producer_state.release()
        self._closed = True
        shutil.rmtree(self._dir, ignore_errors=True)

    def _persist_log_start_offset(self) -> None:
        self._log_start_checkpoint.write(self._log_start_offset)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"log {self._dir} is closed")

    def __repr__(self) -> str:
        return (
            f"Log({self._topic}-{self._partition}, log_start={self._log_start_offset}, "
            f"hw={self._high_watermark}, leo={self.log_end_offset}, segments={len(self._segments)})"
        )


# -- opening helpers ---------------------------------------------------------------------------------


def _new_segment(dir: Path, base_offset: int, config: LogConfig, time: Time, storage: Storage) -> LogSegment:
    return LogSegment.create(
        dir,
        base_offset,
        time=time,
        storage=storage,
        index_interval_bytes=config.index_interval_bytes,
        segment_index_bytes=config.segment_index_bytes,
        preallocate_bytes=config.segment_bytes if config.preallocate else 0,
    )


def _remove_leftovers(dir: Path) -> None:
    """Temporary checkpoint files from an interrupted write, and index files whose segment is gone."""
    names = set(os.listdir(dir))
    for name in names:
        if name.endswith(".tmp"):
            (dir / name).unlink(missing_ok=True)
        elif name.endswith(INDEX_SUFFIX) and name.removesuffix(INDEX_SUFFIX) + LOG_SUFFIX not in names:
            (dir / name).unlink(missing_ok=True)


def _load_segments(
    dir: Path,
    config: LogConfig,
    time: Time,
    clean: bool,
    log_start_offset: int,
    on_batch_epoch: Callable[[tuple[int, int]], None],
    storage: Storage,
) -> list[LogSegment]:
    """Open every segment in order. The active segment is always recovered, the others only after an
    unclean shutdown (or when their headers do not add up). A recovery that cuts a segment short makes
    every later segment garbage: they are deleted. Recovered batches from `log_start_offset` on report
    their epochs through `on_batch_epoch`."""
    bases = sorted(int(m.group(1)) for name in os.listdir(dir) if (m := _SEGMENT_FILE.match(name)))
    segments: list[LogSegment] = []
    interval, index_bytes = config.index_interval_bytes, config.segment_index_bytes
    for i, base in enumerate(bases):
        last = i == len(bases) - 1
        segment: LogSegment | None = None
        if clean and not last:
            try:
                segment = LogSegment.open_existing(
                    dir,
                    base,
                    time=time,
                    index_interval_bytes=interval,
                    segment_index_bytes=index_bytes,
                    storage=storage,
                )
            except CorruptRecordError as exc:
                logger.warning("segment %d of %s needs recovery: %s", base, dir, exc)
        if segment is None:
            segment = LogSegment(
                dir, base, time=time, index_interval_bytes=interval, segment_index_bytes=index_bytes, storage=storage
            )
            truncated = segment.recover(lambda epoch, offset: on_batch_epoch((epoch, offset)), log_start_offset)
            if truncated and not last:
                segments.append(segment)
                for later in bases[i + 1 :]:
                    logger.warning("deleting segment %d of %s: it follows a torn segment", later, dir)
                    (dir / f"{later:020d}{LOG_SUFFIX}").unlink(missing_ok=True)
                    (dir / f"{later:020d}{INDEX_SUFFIX}").unlink(missing_ok=True)
                break
        segments.append(segment)
    return segments


def _open_epoch_cache(
    dir: Path, segments: list[LogSegment], log_start_offset: int, recovered_epochs: list[tuple[int, int]]
) -> LeaderEpochFileCache:
    """The epoch cache from its checkpoint plus the epochs of recovered batches; rebuilt from the headers
    of every batch still readable (ending at or after the log start) when the checkpoint is missing or
    unreadable."""
    checkpoint = LeaderEpochCheckpoint(dir / LEADER_EPOCH_CHECKPOINT_FILE)
    rebuild = not checkpoint.path.exists()
    cache: LeaderEpochFileCache | None = None
    if not rebuild:
        try:
            cache = LeaderEpochFileCache(checkpoint)
        except (CorruptCheckpointError, ValueError) as exc:
            logger.warning("rebuilding the epoch cache of %s from batch headers: %s", dir, exc)
            checkpoint.path.unlink()
            rebuild = True
    if cache is None:
        cache = LeaderEpochFileCache(checkpoint)
    if rebuild:
        recovered_epochs = [pair for segment in segments for pair in segment.batch_epochs(log_start_offset)]
    for epoch, start_offset in recovered_epochs:
        # Only epochs newer than the cache knows are added (as Kafka's segment recovery does): the
        # checkpoint is written before the batches of a new epoch, so it already knows every older start.
        latest = cache.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            cache.assign(epoch, start_offset, flush=False)
    return cache
