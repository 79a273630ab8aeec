"""Per-partition state of idempotent producers (Kafka's ProducerStateManager, KIP-98).

How this works
--------------
An idempotent producer gets a producer id and epoch from INIT_PRODUCER_ID and numbers the records it
sends to each partition from 0: a batch carries its producer id, epoch and `base_sequence` (the first
record's number) in its header. For each producer id the log keeps the epoch and the sequence and offset
ranges of the producer's last five batches (`BATCHES_PER_PRODUCER`, which is why a producer keeps at
most five requests in flight). A leader checks each producer batch before it appends it:

* a batch whose sequences equal one of the five is a **duplicate** (the producer resent it after an
  answer it never got): it is not appended, and the PRODUCE is answered with the original batch's
  offset, as Kafka answers (it never sends DUPLICATE_SEQUENCE_NUMBER);
* an epoch older than the producer's is INVALID_PRODUCER_EPOCH;
* a newer epoch must start again at sequence 0 (OUT_OF_ORDER_SEQUENCE_NUMBER otherwise);
* an unknown producer id must start at sequence 0: anything else means its earlier batches were lost to
  truncation or deletion, UNKNOWN_PRODUCER_ID;
* otherwise `base_sequence` must be the last sequence + 1: a gap is OUT_OF_ORDER_SEQUENCE_NUMBER.

Followers apply the same batches without the checks (they copy the leader's log), so a follower that
becomes leader deduplicates too. The state is derived from the log alone: on opening the log and after
every truncation it is rebuilt from the newest snapshot at or below the log end plus the producer batches
after it. A snapshot (`<offset>.snapshot`, the state of every batch below `offset`) is written when a
segment rolls, as Kafka does, so a rebuild reads at most the headers of the segments after it.

Bounded, so invented producer ids cannot grow a broker without limit (each entry costs about 1 KB):
* `producer.id.expiration.ms` (KIP-854, a day by default): an entry whose newest batch is older than that
  is dropped at the next retention check (`remove_expired`), as Kafka's removeExpiredProducers does; a
  producer that comes back after that starts again at sequence 0 or gets UNKNOWN_PRODUCER_ID;
* at most `MAX_PRODUCERS_PER_PARTITION` entries: a new producer past that evicts the one that wrote least
  recently. Eviction follows the order batches are applied, which is the log's order, so followers and a
  rebuild evict exactly what the leader did and every replica deduplicates the same way;
* at most `producer.state.max.entries` (50,000) over all the partitions of a broker (`ProducerEntries`,
  shared by its logs): past that, a partition taking a new producer first evicts its own least recently
  used one, so real producer ids spread over many partitions cannot grow every broker without bound
  either. This eviction depends on the broker's other partitions, so replicas may differ in what they
  still deduplicate, as with Kafka's expiration by time: a producer whose entry went gets
  UNKNOWN_PRODUCER_ID from a new leader for a batch resent past that point, never a duplicate append.
Transactions are not supported.
"""

from __future__ import annotations

import logging
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import msgpack
from crc32c import crc32c

from protocol.errors import InvalidProducerEpochError, OutOfOrderSequenceError, UnknownProducerIdError
from protocol.record_batch import next_sequence
from storage.storage import OS_STORAGE, Storage

logger = logging.getLogger(__name__)

BATCHES_PER_PRODUCER = 5
MAX_PRODUCERS_PER_PARTITION = 10_000
MAX_PRODUCER_ENTRIES = 50_000  # producer.state.max.entries: over all of a broker's partitions
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
_SNAPSHOT_VERSION = 1


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    # The batch's max timestamp (on a LogAppendTime topic its append time), which PRODUCE answers a
    # duplicate with; -1 in entries read from a snapshot written before it was kept.
    timestamp: int = -1


class ProducerBatch(NamedTuple):
    """What the state needs from one batch header."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class ProducerStateEntry:
    __slots__ = ("producer_id", "producer_epoch", "batches", "last_timestamp")

    def __init__(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_PER_PRODUCER)
        self.last_timestamp = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def add(self, epoch: int, batch: BatchMetadata, timestamp: int) -> None:
        if epoch != self.producer_epoch:
            self.producer_epoch = epoch
            self.batches.clear()
        self.batches.append(batch)
        self.last_timestamp = max(self.last_timestamp, timestamp)


class ProducerEntries:
    """How many producer entries the partitions of one broker hold together, against `max_entries`."""

    def __init__(self, max_entries: int = MAX_PRODUCER_ENTRIES) -> None:
        self.max_entries = max_entries
        self.total = 0

    @property
    def full(self) -> bool:
        return self.total >= self.max_entries


class ProducerStateManager:
    """The producer entries of one partition's log, and its snapshots in the log directory.

    Invariant: `shared.total` counts `len(producers)` of every open manager sharing it (`_set`, `release`)."""

    def __init__(
        self,
        dir: Path,
        storage: Storage = OS_STORAGE,
        max_producers: int = MAX_PRODUCERS_PER_PARTITION,
        shared: ProducerEntries | None = None,
    ) -> None:
        self._dir = dir
        self._storage = storage
        self.max_producers = max_producers
        self.evicted = 0  # entries dropped to stay within max_producers or the broker's shared limit
        self._shared = shared or ProducerEntries(2**63 - 1)
        self.producers: dict[int, ProducerStateEntry] = {}

    def _set(self, producers: dict[int, ProducerStateEntry]) -> None:
        self._shared.total += len(producers) - len(self.producers)
        self.producers = producers

    def release(self) -> None:
        """The log is closed or deleted: its entries no longer count against the broker's limit."""
        self._set({})

    # -- the leader's check ------------------------------------------------------------------------

    def check(self, batch: ProducerBatch, pending: dict[int, tuple[int, int]] | None = None) -> BatchMetadata | None:
        """The original of a duplicate batch, or None when `batch` may be appended; raises
        INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID otherwise. `pending`
        holds (epoch, last sequence) of batches earlier in the same append, not yet in the state."""
        pid, epoch, first_seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
        last_seq = next_sequence(first_seq, batch.last_offset - batch.base_offset)
        entry = self.producers.get(pid)
        if pending is not None and pid in pending:
            current_epoch, current_last = pending[pid]
        elif entry is not None:
            current_epoch, current_last = entry.producer_epoch, entry.last_seq
        else:
            if first_seq != 0:
                raise UnknownProducerIdError(
                    f"no state for producer {pid} (its earlier batches were truncated or deleted) and the batch "
                    f"starts at sequence {first_seq}, not 0"
                )
            return None
        if epoch < current_epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} epoch {epoch} is older than its current epoch {current_epoch}"
            )
        if epoch > current_epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} began epoch {epoch} at sequence {first_seq}; a new epoch starts at 0"
                )
            return None
        if entry is not None and entry.producer_epoch == epoch and (pending is None or pid not in pending):
            duplicate = entry.find_duplicate(first_seq, last_seq)
            if duplicate is not None:
                return duplicate
        if first_seq != next_sequence(current_last):
            raise OutOfOrderSequenceError(
                f"producer {pid} epoch {epoch}: expected sequence {next_sequence(current_last)}, got {first_seq}"
            )
        return None

    # -- updates (leader after its check, followers and recovery as they are) ----------------------

    def update(self, batch: ProducerBatch) -> None:
        entry = self.producers.pop(batch.producer_id, None)  # re-inserted last: the dict is in LRU order
        if entry is None:
            entry = ProducerStateEntry(batch.producer_id, batch.producer_epoch)
            if self.producers and (len(self.producers) >= self.max_producers or self._shared.full):
                evicted = next(iter(self.producers))
                del self.producers[evicted]
                self.evicted += 1
            else:
                self._shared.total += 1
        self.producers[batch.producer_id] = entry
        last_seq = next_sequence(batch.base_sequence, batch.last_offset - batch.base_offset)
        meta = BatchMetadata(batch.base_sequence, last_seq, batch.base_offset, batch.last_offset, batch.max_timestamp)
        entry.add(batch.producer_epoch, meta, batch.max_timestamp)

    def clear(self) -> None:
        self._set({})

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Drop the producers whose newest batch is older than `expiration_ms`; how many were dropped."""
        expired = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp > expiration_ms]
        for pid in expired:
            del self.producers[pid]
        self._shared.total -= len(expired)
        return len(expired)

    # -- snapshots ---------------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        try:
            names = os.listdir(self._dir)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for name in names if (m := _SNAPSHOT_FILE.match(name)))

    def _path(self, offset: int) -> Path:
        return self._dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def take_snapshot(self, offset: int) -> None:
        """Write the state of every batch below `offset` (the caller's log end) to `<offset>.snapshot`."""
        producers = [
            [e.producer_id, e.producer_epoch, e.last_timestamp, [list(b) for b in e.batches]]
            for e in self.producers.values()
        ]
        body = msgpack.packb({"version": _SNAPSHOT_VERSION, "offset": offset, "producers": producers})
        data = crc32c(body).to_bytes(4, "big") + body
        path = self._path(offset)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            self._storage.fsync(f.fileno())
        os.replace(tmp, path)

    def _read_snapshot(self, offset: int) -> dict[int, ProducerStateEntry] | None:
        path = self._path(offset)
        try:
            data = path.read_bytes()
            body = data[4:]
            if len(data) < 4 or crc32c(body) != int.from_bytes(data[:4], "big"):
                raise ValueError("CRC mismatch")
            doc = msgpack.unpackb(body)
            if doc.get("version") != _SNAPSHOT_VERSION or doc.get("offset") != offset:
                raise ValueError(f"version {doc.get('version')} offset {doc.get('offset')}")
            producers: dict[int, ProducerStateEntry] = {}
            for pid, epoch, last_ts, batches in doc["producers"]:
                entry = ProducerStateEntry(int(pid), int(epoch))
                entry.last_timestamp = int(last_ts)
                entry.batches.extend(BatchMetadata(*map(int, b)) for b in batches)
                producers[entry.producer_id] = entry
            return producers
        except (OSError, ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
            logger.warning("ignoring producer snapshot %s: %s", path, exc)
            path.unlink(missing_ok=True)
            return None

    def delete_snapshots_above(self, offset: int) -> None:
        for snapshot in self.snapshot_offsets():
            if snapshot > offset:
                self._path(snapshot).unlink(missing_ok=True)

    def delete_snapshots_below(self, offset: int) -> None:
        """Drop snapshots below `offset` (the log start), keeping the newest one: it still holds producers
        whose batches were all deleted."""
        offsets = self.snapshot_offsets()
        for snapshot in offsets[:-1]:
            if snapshot < offset:
                self._path(snapshot).unlink(missing_ok=True)

    def rebuild(self, log_end_offset: int, batches_from: Callable[[int], Iterable[ProducerBatch]]) -> int:
        """Rebuild from the newest readable snapshot at or below `log_end_offset` and the producer batches
        from its offset on (`batches_from(offset)`); snapshots above the log end are deleted first.
        Returns the offset replay started from."""
        self.delete_snapshots_above(log_end_offset)
        start = 0
        self._set({})
        for offset in reversed(self.snapshot_offsets()):
            loaded = self._read_snapshot(offset)
            if loaded is not None:
                self._set(loaded)
                start = offset
                break
        for batch in batches_from(start):
            if batch.base_offset >= start:
                self.update(batch)
        return start

    def __iter__(self) -> Iterator[ProducerStateEntry]:
        return iter(self.producers.values())
