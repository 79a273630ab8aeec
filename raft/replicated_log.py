"""The replicated metadata log, `__cluster_metadata-0`: the project's `Log` plus snapshots (Kafka's
KafkaMetadataLog around a UnifiedLog).

How this works
--------------
Records are stored as the data plane stores them: record batches in segments, each batch stamped with the
epoch of the leader that appended it, and a leader-epoch cache that says where each epoch starts. So the
rules that keep data replicas identical keep the quorum's logs identical too: a follower tells the leader
the epoch of its last batch (`last_fetched_epoch`), the leader answers a *diverging epoch* when its own log
ends that epoch elsewhere (`validate_offset_and_epoch`, the leader side of truncate-on-fetch), and the
follower cuts its log with the data plane's rule (fetcher/truncation.py).

One batch holds one command's records (each record a value; keys are unused) and goes in or out whole.
A *control* batch (attributes bit 0x20, as Kafka's) marks where a leader's epoch begins (its LeaderChange
record); the state machine skips it.

Snapshots (KIP-630). A node writes the state its committed records build as a snapshot file
`<end offset>-<epoch>.checkpoint` in the log's directory: `crc32c: u32 BE | msgpack {"end_offset",
"epoch", "values": [record, ...]}`, where `end_offset` is the first offset the snapshot does not cover and
`epoch` the epoch of the record before it. Once a snapshot is durable, the log's start moves up to it and
the segments below are deleted; a fetcher asking for an offset below the log start is told to fetch the
snapshot instead (`SnapshotNeeded`). A follower that installs a snapshot empties its log and starts it at
the snapshot's end offset; its last fetched epoch is then the snapshot's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgpack
from crc32c import crc32c

from protocol.errors import CorruptRecordError
from protocol.record_batch import assemble_batch, iter_headers, iter_records
from server_common.log_config import LogConfig
from server_common.replication_observer import NO_OBSERVER, ReplicationObserver
from server_common.storage import fsync_dir, write_atomically
from server_common.time import Time
from storage.log import AppendInfo, Log
from storage.storage import OS_STORAGE, Storage

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_LOG_DIR_NAME = f"{METADATA_TOPIC}-{METADATA_PARTITION}"
CONTROL_BIT = 0x20  # Kafka's control batch attribute
SNAPSHOT_SUFFIX = ".checkpoint"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_CRC_BYTES = 4


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One batch as the state machine sees it."""

    base_offset: int
    last_offset: int
    epoch: int
    append_time_ms: int
    is_control: bool
    values: list[bytes]


@dataclass(frozen=True, slots=True)
class Snapshot:
    end_offset: int
    epoch: int
    values: list[bytes]

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.end_offset, self.epoch)


# What the leader makes of a follower's fetch position (Kafka's ValidOffsetAndEpoch).
@dataclass(frozen=True, slots=True)
class ValidOffset:
    pass


@dataclass(frozen=True, slots=True)
class Diverging:
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class SnapshotNeeded:
    snapshot_id: OffsetAndEpoch


Validation = ValidOffset | Diverging | SnapshotNeeded


class SnapshotError(Exception):
    """A snapshot file is torn or corrupt."""


def encode_snapshot(snapshot: Snapshot) -> bytes:
    payload: bytes = msgpack.packb(
        {"end_offset": snapshot.end_offset, "epoch": snapshot.epoch, "values": snapshot.values}, use_bin_type=True
    )
    return crc32c(payload).to_bytes(_CRC_BYTES, "big") + payload


def decode_snapshot(data: bytes) -> Snapshot:
    if len(data) < _CRC_BYTES or int.from_bytes(data[:_CRC_BYTES], "big") != crc32c(data[_CRC_BYTES:]):
        raise SnapshotError("snapshot checksum mismatch")
    try:
        body = msgpack.unpackb(data[_CRC_BYTES:], raw=False)
        values = body["values"]
        if not all(isinstance(v, bytes) for v in values):
            raise TypeError("a snapshot value is not bytes")
        return Snapshot(int(body["end_offset"]), int(body["epoch"]), list(values))
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(f"unreadable snapshot: {exc}") from None


def snapshot_file_name(snapshot_id: OffsetAndEpoch) -> str:
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def build_values_batch(values: Sequence[bytes], timestamp_ms: int, control: bool = False) -> bytes:
    """A batch holding `values` as records (no keys), its offsets and epoch left for the leader to stamp."""
    payload = msgpack.packb([[delta, 0, None, value] for delta, value in enumerate(values)], use_bin_type=True)
    return assemble_batch(
        0,
        -1,
        len(values) - 1,
        timestamp_ms,
        timestamp_ms,
        len(values),
        payload,
        attributes=CONTROL_BIT if control else 0,
    )


class ReplicatedLog:
    """`__cluster_metadata-0` under `directory`, with its snapshots beside the segments."""

    def __init__(
        self,
        directory: Path,
        time: Time,
        storage: Storage = OS_STORAGE,
        segment_bytes: int = 8 << 20,
        observer: ReplicationObserver = NO_OBSERVER,
    ):
        self.dir = directory / METADATA_LOG_DIR_NAME
        self._time = time
        # Retention is the snapshots' business: nothing goes by age or size.
        config = LogConfig(segment_bytes=segment_bytes, retention_ms=-1, retention_bytes=-1)
        # `observer` hears of every truncation of the log, as a replica's log's does.
        self.log = Log.open(self.dir, config, time, storage, observer=observer)
        self._snapshots: list[OffsetAndEpoch] = self._list_snapshots()
        latest = self.latest_snapshot_id()
        if latest is not None and latest.offset > self.log.log_end_offset:
            # The log holds less than the newest snapshot covers (it was installed, or the log was lost):
            # the log starts where the snapshot ends.
            self.log.truncate_fully_and_start_at(latest.offset)

    # -- positions ---------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_fetched_epoch(self) -> int:
        """The epoch of the last batch held, or of the snapshot the log starts at; 0 when empty."""
        epoch = self.log.latest_epoch
        if epoch is not None:
            return epoch
        latest = self.latest_snapshot_id()
        return latest.epoch if latest is not None and latest.offset == self.log_end_offset else 0

    def end_offset_and_epoch(self) -> OffsetAndEpoch:
        """(log end, last epoch): what a candidate's log is compared by."""
        return OffsetAndEpoch(self.log_end_offset, self.last_fetched_epoch)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, where it ends); the snapshot's when the log holds no batch of such an
        epoch but starts at a snapshot of it; (-1, -1) when unknown."""
        found_epoch, end = self.log.end_offset_for_epoch(epoch)
        if found_epoch >= 0:
            return found_epoch, end
        latest = self.latest_snapshot_id()
        if latest is not None and latest.epoch <= epoch and latest.offset == self.log_start_offset:
            return latest.epoch, latest.offset
        return -1, -1

    def validate_offset_and_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> Validation:
        """The leader's judgement of a fetcher's position (Kafka's validateOffsetAndEpoch): below our log
        start, fetch the snapshot; where our log ends `last_fetched_epoch` elsewhere (or never had it), the
        fetcher diverges; otherwise it may fetch on."""
        latest = self.latest_snapshot_id()
        if fetch_offset < self.log_start_offset:
            if latest is None:
                raise RuntimeError(f"{self.dir}: the log starts at {self.log_start_offset} with no snapshot below")
            return SnapshotNeeded(latest)
        if fetch_offset == 0:
            return ValidOffset()  # an empty fetcher: nothing to diverge
        epoch, end = self.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0:
            # Nothing we hold is that old (or that new): only a snapshot brings the fetcher to a known point.
            return SnapshotNeeded(latest) if latest is not None else Diverging(-1, -1)
        if epoch != last_fetched_epoch or end < fetch_offset:
            return Diverging(epoch, end)
        return ValidOffset()

    # -- appends -----------------------------------------------------------------------------------

    def append_as_leader(self, values: Sequence[bytes], epoch: int, control: bool = False) -> AppendInfo:
        if not values:
            raise ValueError("a batch holds at least one record")
        batch = build_values_batch(values, self._time.milliseconds(), control)
        return self.log.append_as_leader(batch, epoch)

    def append_as_follower(self, records: bytes) -> AppendInfo:
        return self.log.append_as_follower(records)

    def flush(self) -> None:
        self.log.flush()

    def read(self, offset: int, max_bytes: int) -> bytes:
        if offset >= self.log_end_offset:
            return b""
        return self.log.read(offset, max_bytes)

    def truncate_to(self, offset: int) -> bool:
        return self.log.truncate_to(offset)

    def update_high_watermark(self, high_watermark: int) -> None:
        self.log.update_high_watermark(high_watermark)

    def batches(self, start: int, end: int) -> Iterator[LogBatch]:
        """Every batch with base offset in [start, end), in order; the batch holding `start` whole."""
        offset = start
        while offset < end:
            data = self.log.read(offset, 1 << 20, upper_bound=end)
            if not data:
                return
            next_offset = offset
            for header in iter_headers(data):
                if header.base_offset >= end:
                    return
                raw = data[header.position : header.position + header.size_in_bytes]
                values = [r.value or b"" for r in iter_records(raw)]
                yield LogBatch(
                    header.base_offset,
                    header.last_offset,
                    header.partition_leader_epoch,
                    header.max_timestamp,
                    bool(header.attributes & CONTROL_BIT),
                    values,
                )
                next_offset = header.next_offset
            if next_offset <= offset:
                raise CorruptRecordError(f"{self.dir}: no progress reading from offset {offset}")
            offset = next_offset

    # -- snapshots ---------------------------------------------------------------------------------

    def _list_snapshots(self) -> list[OffsetAndEpoch]:
        found: list[OffsetAndEpoch] = []
        for path in self.dir.iterdir():
            match = _SNAPSHOT_NAME.match(path.name)
            if match:
                found.append(OffsetAndEpoch(int(match.group(1)), int(match.group(2))))
            elif path.name.endswith(SNAPSHOT_SUFFIX + ".tmp") or path.name.endswith(".part"):
                path.unlink(missing_ok=True)  # a write a crash cut short
        return sorted(found)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self._snapshots[-1] if self._snapshots else None

    def snapshot_path(self, snapshot_id: OffsetAndEpoch) -> Path:
        return self.dir / snapshot_file_name(snapshot_id)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch | None = None) -> Snapshot | None:
        wanted = snapshot_id or self.latest_snapshot_id()
        if wanted is None or wanted not in self._snapshots:
            return None
        try:
            snapshot = decode_snapshot(self.snapshot_path(wanted).read_bytes())
        except OSError as exc:
            raise SnapshotError(f"{self.snapshot_path(wanted)}: {exc}") from None
        if snapshot.snapshot_id != wanted:
            raise SnapshotError(f"{self.snapshot_path(wanted)} holds snapshot {snapshot.snapshot_id}")
        return snapshot

    def snapshot_bytes(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        if snapshot_id not in self._snapshots:
            return None
        return self.snapshot_path(snapshot_id).read_bytes()

    def write_snapshot(self, snapshot: Snapshot) -> None:
        """Make `snapshot` durable (at or below the HW: committed state only), then let the log start move
        up to it and drop older snapshots."""
        if snapshot.end_offset > self.log.high_watermark:
            raise ValueError(f"snapshot end {snapshot.end_offset} is past the high watermark {self.log.high_watermark}")
        if snapshot.snapshot_id in self._snapshots:
            return
        write_atomically(self.snapshot_path(snapshot.snapshot_id), encode_snapshot(snapshot))
        self._snapshots = sorted([*self._snapshots, snapshot.snapshot_id])
        self._prune(snapshot.snapshot_id)

    def install_snapshot(self, data: bytes) -> Snapshot:
        """A follower's: the leader's snapshot, checked, made durable, and the log emptied to start at its end."""
        snapshot = decode_snapshot(data)
        write_atomically(self.snapshot_path(snapshot.snapshot_id), data)
        self._snapshots = sorted({*self._snapshots, snapshot.snapshot_id})
        self.log.truncate_fully_and_start_at(snapshot.end_offset)
        self._prune(snapshot.snapshot_id)
        return snapshot

    def _prune(self, newest: OffsetAndEpoch) -> None:
        """Keep the newest snapshot only, and move the log start up to it."""
        for old in [s for s in self._snapshots if s < newest]:
            self.snapshot_path(old).unlink(missing_ok=True)
        self._snapshots = [s for s in self._snapshots if s >= newest]
        fsync_dir(self.dir)
        if newest.offset > self.log.log_start_offset and newest.offset <= self.log.high_watermark:
            self.log.maybe_increment_log_start_offset(newest.offset)

    # -- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        self.log.close()

    def abandon(self) -> None:
        """SIGKILL: nothing flushed or marked clean."""
        self.log.abandon()
