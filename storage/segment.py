"""One segment of a partition's log: the file `<base offset, 20 digits>.log` plus its sparse offset index.

How this works
--------------
A segment holds whole record batches laid end to end, in offset order, starting at `base_offset`:

    00000000000000001000.log   | batch 1000-1004 | batch 1005-1005 | batch 1006-1099 | ...
                               0                 4120              4211              ...
    00000000000000001000.index   (1005 -> 4120), ...   an entry every index.interval.bytes

Appends go to the end of the file with plain positional writes (the OS page cache does the buffering;
`flush` fsyncs). Reads find the first wanted batch through the index plus a short walk over batch
headers, then return whole batches with a single positional read, so a read never cuts a batch.

Only the active (last) segment of a log is appended to. Truncation cuts the file at a batch boundary
and trims the index. `recover` re-validates every batch header and CRC from the start of the file after
an unclean shutdown, cuts the file at the first torn or corrupt batch and rebuilds the index.

Every read checks the CRC of what it returns past the CRC-verified prefix before it is served
(`_check_read`): what this process appended or recovered is in the prefix, so a segment loaded after a
clean shutdown is checked as it is first served, once. A payload byte flipped on disk is found the first
time it would be served and the read raises CorruptRecordError instead of serving it (the log checks that
offsets are contiguous, which the CRC does not cover, and takes the partition offline on either).

With `preallocate` (Kafka's log.preallocate) a new segment reserves segment.bytes of disk when it is
created, so an append fills blocks the file system already allocated (on ext4 a 16 KiB append then costs
the kernel ~3.7 µs instead of ~5): the file is longer than its data, zeros past the last batch, until
`trim` cuts it back when the segment rolls or the log closes (a truncation cuts it too, and the log
reserves the space again). After a crash, recovery cuts the zeros.

Invariants: `size_in_bytes` is the length of the data (the file length, except past it in a preallocated
active segment) and always a batch boundary; `next_offset` is one past the last offset in the segment
(`base_offset` when empty); batch base offsets increase.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import msgpack
from crc32c import crc32c

from protocol.errors import CorruptRecordError
from protocol.record_batch import CRC_START, HEADER_SIZE, LOG_APPEND_TIME_BIT, LOG_OVERHEAD, MAGIC
from server_common.time import Time
from storage.batches import HEADER, Buffer, scan
from storage.offset_index import INDEX_SUFFIX, OffsetIndex
from storage.storage import OS_STORAGE, Storage

LOG_SUFFIX = ".log"
MAX_RELATIVE_OFFSET = 2**31 - 1  # index entries store offsets relative to the base as int32
NO_TIMESTAMP = -1

_BATCH_LENGTH = struct.Struct(">i")

_WALK_CHUNK_BYTES = 8192  # header walks start near an index entry, so they rarely need more
_RECENT_BATCHES = 64  # LogSegment._recent: positions of the last batches appended, at most this many
_RECOVERY_CHUNK_BYTES = 8 * 1024 * 1024

logger = logging.getLogger(__name__)


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{LOG_SUFFIX}"


class LogSegment:
    def __init__(
        self,
        dir: Path,
        base_offset: int,
        *,
        time: Time,
        index_interval_bytes: int,
        segment_index_bytes: int,
        storage: Storage = OS_STORAGE,
    ) -> None:
        self.dir = dir
        self._storage = storage
        self.base_offset = base_offset
        self.log_path = dir / segment_file_name(base_offset)
        self.index = OffsetIndex(dir / f"{base_offset:020d}{INDEX_SUFFIX}", base_offset, segment_index_bytes)
        self._time = time
        self._index_interval_bytes = index_interval_bytes
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._next_offset = base_offset
        self._max_timestamp: int | None = NO_TIMESTAMP if self._size == 0 else None  # None: not yet scanned
        self._bytes_since_last_index_entry = 0
        self._dirty = False
        self.created_ms = time.milliseconds()
        # Bytes [0, _crc_verified_end) hold batches whose CRC this process has checked, and whose offsets
        # follow on from the segment's base without a gap: what it appended (validated before the append)
        # or recovered. Reads check the batches past it once, so a segment loaded after a clean shutdown is
        # verified as it is first served, never served unverified; the prefix grows as reads verify what
        # follows it. `_verified_next` is the offset after the prefix. Only the verified prefix is sent
        # from the file without being read (`span`, FileRecords).
        self._crc_verified_end = 0
        self._verified_next = base_offset
        # Byte positions of the batches this process appended last, by base offset: where a tail fetch (a
        # follower's or consumer's next offset) starts, found without walking headers from the index entry
        # before it when batches are smaller than index.interval.bytes. Cleared whenever bytes may move.
        self._recent: dict[int, int] = {}
        # Bumped whenever bytes already written may change (truncation, close): a FileRecords slice taken
        # before is then no longer what was read.
        self.generation = 0

    # -- opening -----------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        dir: Path,
        base_offset: int,
        *,
        time: Time,
        index_interval_bytes: int,
        segment_index_bytes: int,
        storage: Storage = OS_STORAGE,
        preallocate_bytes: int = 0,
    ) -> LogSegment:
        """A new, empty segment; it is an error if a non-empty file with that base offset exists. With
        `preallocate_bytes`, that much disk is reserved for it (`preallocate`)."""
        path = dir / segment_file_name(base_offset)
        if path.exists() and path.stat().st_size > 0:
            raise FileExistsError(f"segment {path} already exists")
        segment = cls(
            dir,
            base_offset,
            time=time,
            index_interval_bytes=index_interval_bytes,
            segment_index_bytes=segment_index_bytes,
            storage=storage,
        )
        segment.index.reset()
        segment.index.delete()
        if preallocate_bytes:
            segment.preallocate(preallocate_bytes)
        return segment

    @classmethod
    def open_existing(
        cls,
        dir: Path,
        base_offset: int,
        *,
        time: Time,
        index_interval_bytes: int,
        segment_index_bytes: int,
        storage: Storage = OS_STORAGE,
    ) -> LogSegment:
        """A segment from a cleanly closed log: its index is loaded (rebuilt from batch headers if missing
        or inconsistent) and its next offset found from the last index entry. Raises CorruptRecordError
        if the batch headers do not add up, in which case the caller should `recover` instead."""
        segment = cls(
            dir,
            base_offset,
            time=time,
            index_interval_bytes=index_interval_bytes,
            segment_index_bytes=segment_index_bytes,
            storage=storage,
        )
        try:
            if not segment.index.load(segment._size):
                segment._rebuild_index_from_headers()
            segment._recompute_tail()
        except CorruptRecordError:
            segment.close()
            raise
        return segment

    # -- properties --------------------------------------------------------------------------------

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def is_empty(self) -> bool:
        return self._size == 0

    @property
    def largest_timestamp(self) -> int:
        """The largest batch max timestamp in the segment (NO_TIMESTAMP when empty)."""
        if self._max_timestamp is None:
            largest = NO_TIMESTAMP
            for _, _, header in self._mapped_headers():
                if header[8] > largest:
                    largest = header[8]
            self._max_timestamp = largest
        return self._max_timestamp

    # -- append ------------------------------------------------------------------------------------

    def should_roll(
        self, incoming_bytes: int, largest_offset: int, now_ms: int, segment_bytes: int, segment_ms: int
    ) -> bool:
        """Kafka's LogSegment.shouldRoll: a non-empty segment rolls when the append would take it past
        segment.bytes, when it is older than segment.ms, when its index is full, or when the append's
        offsets no longer fit the index's 32-bit relative offsets. Age is measured by the injected clock
        from when the segment was created or last opened, not from record timestamps, and without
        Kafka's roll jitter. `append_batch` repeats these conditions for the leader's one-batch path: a
        change here goes there too (a property test holds the two equal)."""
        if self._size == 0:
            return False
        return (
            self._size > segment_bytes - incoming_bytes
            or now_ms - self.created_ms > segment_ms
            or self.index.is_full
            or largest_offset - self.base_offset > MAX_RELATIVE_OFFSET
        )

    def append(
        self,
        records: Buffer,
        largest_offset: int,
        largest_timestamp: int,
        batches: Sequence[tuple[int, int]],
        contiguous: bool = True,
    ) -> None:
        """Write `records` (whole batches; `batches` lists each one's (base offset, size) in order) at the
        end of the segment, indexing a batch whenever index.interval.bytes have passed since the last one.
        `contiguous`: each batch starts right after the previous one ends (no offset gap). `append_batch`
        repeats this for one batch: a change here goes there too."""
        position = self._size
        total = len(records)
        # The log validated these batches' CRCs already; they extend the verified prefix when it reaches
        # the end and their offsets follow on from it.
        verified = (
            self._crc_verified_end == position and contiguous and bool(batches) and batches[0][0] == self._verified_next
        )
        written = os.pwrite(self._fd, records, position)
        if written != total:
            self._write_rest(records, position, written)
        index = self.index
        interval = self._index_interval_bytes
        since = self._bytes_since_last_index_entry
        recent = self._recent
        if len(recent) + len(batches) > _RECENT_BATCHES:
            recent.clear()
        for base_offset, size in batches:
            if since > interval and index.append_if_room(base_offset, position):
                since = 0
            recent[base_offset] = position
            since += size
            position += size
        self._bytes_since_last_index_entry = since
        self._size += total
        if verified:
            self._crc_verified_end = self._size
            self._verified_next = largest_offset + 1
        self._next_offset = largest_offset + 1
        if self._max_timestamp is not None and largest_timestamp > self._max_timestamp:
            self._max_timestamp = largest_timestamp
        self._dirty = True

    def append_batch(
        self,
        batch: Buffer,
        base_offset: int,
        last_offset: int,
        max_timestamp: int,
        now_ms: int,
        segment_bytes: int,
        segment_ms: int,
    ) -> bool:
        """`should_roll` then `append`, for one batch whose offsets follow on from the segment's, in one
        call: False (nothing written) when the segment must roll first. The path every produced batch
        takes; it does what those two do, without the list of placed batches."""
        position = self._size
        total = len(batch)
        if position and (
            position > segment_bytes - total
            or now_ms - self.created_ms > segment_ms
            or self.index.is_full
            or last_offset - self.base_offset > MAX_RELATIVE_OFFSET
        ):
            return False
        written = os.pwrite(self._fd, batch, position)
        if written != total:
            self._write_rest(batch, position, written)
        since = self._bytes_since_last_index_entry
        if since > self._index_interval_bytes and self.index.append_if_room(base_offset, position):
            since = 0
        recent = self._recent
        if len(recent) >= _RECENT_BATCHES:
            recent.clear()
        recent[base_offset] = position
        self._bytes_since_last_index_entry = since + total
        self._size = size = position + total
        if self._crc_verified_end == position and base_offset == self._verified_next:
            self._crc_verified_end = size
            self._verified_next = last_offset + 1
        self._next_offset = last_offset + 1
        if self._max_timestamp is not None and max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
        self._dirty = True
        return True

    def _write_rest(self, records: Buffer, position: int, written: int) -> None:
        view = memoryview(records)
        try:
            while written < len(view):
                n = os.pwrite(self._fd, view[written:], position + written)
                if n <= 0:
                    raise OSError(f"short write to {self.log_path}")
                written += n
        except OSError:
            os.ftruncate(self._fd, position)  # never leave half a batch behind
            raise

    # -- read --------------------------------------------------------------------------------------

    def translate_offset(self, offset: int) -> int | None:
        """Byte position of the first batch whose last offset is ≥ `offset`; None if there is none."""
        found = self._locate(offset, by_base=False)
        return None if found is None else found[0]

    def position_of_first_batch_from(self, offset: int) -> int | None:
        """Byte position of the first batch whose base offset is ≥ `offset`; None if there is none."""
        found = self._locate(offset, by_base=True)
        return None if found is None else found[0]

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> bytes | None:
        """Whole batches from the batch holding `start_offset`, ending at or before byte `max_position`,
        at most `max_bytes` long except that `min_one_message` always returns the first batch (KIP-74).
        None when the segment has nothing at or after `start_offset`; b"" when nothing fits."""
        found = self.read_at(start_offset, max_bytes, max_position, min_one_message)
        return None if found is None else found[1]

    def read_at(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> tuple[int, bytes] | None:
        """Like `read`, also giving the byte position the returned batches start at."""
        found = self.span(start_offset, max_bytes, max_position, min_one_message)
        if found is None:
            return None
        start, end = found
        return start, self.read_span(start, end) if start < end else b""

    def read_span(self, start: int, end: int) -> bytes:
        """The batches between two batch boundaries, each past the verified prefix checked once."""
        data = self._pread(start, end - start)
        self._check_read(start, data)
        return data

    def is_verified(self, end: int) -> bool:
        """Whether bytes [0, end) are all verified (CRCs and offsets): sendable without reading them."""
        return end <= self._crc_verified_end

    def span(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> tuple[int, int] | None:
        """The byte range [start, end) `read_at` returns, without reading it (start == end: nothing fits)."""
        limit = self._size if max_position is None else min(max_position, self._size)
        # A fetch from a batch's first offset (a follower's or consumer's next offset) that takes everything up
        # to `limit`, a batch boundary: when the index names that batch, no header needs reading, and the
        # read is the one pread of the data (the tail fetches that keep replicas in sync are all like this).
        indexed_position = self._recent.get(start_offset)
        if indexed_position is None:
            indexed_offset, indexed_position = self.index.lookup(start_offset)
        else:
            indexed_offset = start_offset
        if indexed_offset == start_offset and indexed_position < limit and limit - indexed_position <= max_bytes:
            return indexed_position, limit
        found = self._locate(start_offset, by_base=False)
        if found is None:
            return None
        start, first_size, _ = found
        if start >= limit:
            return start, start
        if first_size > max_bytes:
            if not min_one_message:
                return start, start
            return start, start + first_size
        return start, self._last_boundary_at_or_before(min(limit, start + max_bytes), start + first_size)

    def _check_read(self, position: int, data: bytes) -> None:
        """Raise CorruptRecordError if a batch in `data` (read at byte `position`) that lies past the
        CRC-verified prefix fails its CRC; the prefix then grows over the batches checked."""
        end = position + len(data)
        verified_end = self._crc_verified_end
        if end <= verified_end:
            return
        verified_next = self._verified_next
        view = memoryview(data)
        unpack = HEADER.unpack_from
        rel = 0
        while rel < len(data):
            base, length, _epoch, _magic, crc, _attrs, delta, *_ = unpack(view, rel)
            size = LOG_OVERHEAD + length
            absolute = position + rel
            if absolute + size > verified_end:
                if crc32c(view[rel + CRC_START : rel + size]) != crc:
                    raise CorruptRecordError(f"CRC mismatch in the batch at byte {absolute} of {self.log_path}")
                if absolute == verified_end and base == verified_next:  # the prefix grows only without a gap
                    verified_end = absolute + size
                    verified_next = base + delta + 1
            rel += size
        self._crc_verified_end = verified_end
        self._verified_next = verified_next

    def fileno(self) -> int:
        return self._fd

    def read_bytes(self, start: int, end: int) -> bytes:
        """The raw bytes between two batch boundaries."""
        return self._pread(start, end - start)

    def _pread(self, position: int, length: int) -> bytes:
        data = os.pread(self._fd, length, position)
        while len(data) < length:  # preads of regular files are short only at end of file
            more = os.pread(self._fd, length - len(data), position + len(data))
            if not more:
                raise CorruptRecordError(f"{self.log_path} is shorter than expected")
            data += more
        return data

    def _locate(self, offset: int, by_base: bool) -> tuple[int, int, int] | None:
        """(position, size, base offset) of the first batch whose last (or base) offset is ≥ `offset`."""
        # A batch appended here that starts at `offset` is that batch either way: the ones before it end below.
        position = self._recent.get(offset)
        if position is None:
            _, position = self.index.lookup(offset)
        for batch_position, size, base, last, _, _ in self._walk(position):
            if (base if by_base else last) >= offset:
                return batch_position, size, base
        return None

    def _last_boundary_at_or_before(self, limit: int, known_boundary: int) -> int:
        """The largest batch boundary ≤ `limit`, given that `known_boundary` ≤ `limit` is one."""
        _, indexed = self.index.floor_position(limit)
        end = max(indexed, known_boundary)
        for batch_position, size, _, _, _, _ in self._walk(end):
            if batch_position + size > limit:
                break
            end = batch_position + size
        return end

    def _walk(self, position: int) -> Iterator[tuple[int, int, int, int, int, int]]:
        """(position, size, base offset, last offset, max timestamp, epoch) of every batch from byte
        `position` (a batch boundary) to the end of the segment, reading headers only."""
        for batch_position, size, h in self._walk_headers(position):
            yield batch_position, size, h[0], h[0] + h[6], h[8], h[2]

    def _walk_headers(self, position: int) -> Iterator[tuple[int, int, tuple[int, ...]]]:
        """(position, size, unpacked header) of every batch from byte `position` to the end of the segment."""
        size_limit = self._size
        buf = b""
        buf_start = position
        unpack = HEADER.unpack_from
        while position < size_limit:
            rel = position - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(self._fd, _WALK_CHUNK_BYTES, position)
                buf_start, rel = position, 0
                if len(buf) < HEADER_SIZE:
                    raise CorruptRecordError(f"torn batch header at byte {position} of {self.log_path}")
            header = unpack(buf, rel)
            length, magic = header[1], header[3]
            size = LOG_OVERHEAD + length
            if magic != MAGIC or length < HEADER_SIZE - LOG_OVERHEAD or position + size > size_limit:
                raise CorruptRecordError(f"bad batch header at byte {position} of {self.log_path}")
            yield position, size, header
            position += size

    def check_offsets(self) -> None:
        """Headers only: the first batch starts at the base offset and each next one right after the one
        before it (offsets in a log have no gaps: leaders assign them in sequence, followers append at the
        log end), all within the int32 range the index stores. A base offset is outside the CRC, so a
        closed segment loaded after a clean shutdown is checked this way at open; raises
        CorruptRecordError naming the first batch out of place.

        The headers are read through a read-only mapping, without a system call per batch. On ~1 GiB of
        closed segments in 16 KiB batches this adds about 0.3 s to an open with the files in the page
        cache and 0.9 s cold (the kernel's read-ahead then reads the files); a pread per header cost about
        as much warm and 1.5 s cold, and random-access advice 6 s cold (one disk read per header)."""
        size = self._size
        if size == 0:
            return
        expected = self.base_offset
        limit = self.base_offset + MAX_RELATIVE_OFFSET
        largest = NO_TIMESTAMP
        for position, _, header in self._mapped_headers():
            base, delta = header[0], header[6]
            if base != expected or delta < 0 or base + delta > limit:
                raise CorruptRecordError(
                    f"batch at byte {position} of {self.log_path} holds offsets {base} to {base + delta}, "
                    f"expected {expected} on"
                )
            expected = base + delta + 1
            if header[8] > largest:
                largest = header[8]
        if self._max_timestamp is None:  # read anyway: what offsets by timestamp and retention go by
            self._max_timestamp = largest

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int, int] | None:
        """(timestamp, offset, partition leader epoch) of the first record at or after `start_offset` whose
        timestamp is at least `timestamp`, or None when the segment has none (Kafka's
        LogSegment.findOffsetByTimestamp, without a time index: see Log.fetch_offset_by_timestamp).

        The batch headers are walked from the start of the segment; the first batch whose max timestamp
        reaches `timestamp` (and whose offsets reach `start_offset`) is read, CRC checked, and its records
        decoded, since records inside a batch need not be in timestamp order. A batch stamped with
        LogAppendTime (attributes bit 3) gives every record its max timestamp, as Kafka's
        DefaultRecordBatch does."""
        if self._size == 0 or self.largest_timestamp < timestamp:
            return None
        for position, size, h in self._batches_reaching(timestamp, start_offset):
            base, epoch, attributes, max_timestamp = h[0], h[2], h[5], h[8]
            if attributes & LOG_APPEND_TIME_BIT:
                return max_timestamp, max(base, start_offset), epoch
            data = self.read_span(position, position + size)
            try:
                records = msgpack.unpackb(memoryview(data)[HEADER_SIZE:], raw=False, use_list=False)
                first_timestamp = h[7]
                for record in records:
                    offset, record_timestamp = base + record[0], first_timestamp + record[1]
                    if record_timestamp >= timestamp and offset >= start_offset:
                        return record_timestamp, offset, epoch
            except (ValueError, TypeError, IndexError, msgpack.ExtraData) as exc:
                raise CorruptRecordError(
                    f"batch at byte {position} of {self.log_path} has records that do not decode: {exc}"
                ) from None
        return None

    def _batches_reaching(self, timestamp: int, start_offset: int) -> Iterator[tuple[int, int, tuple[int, ...]]]:
        """(position, size, unpacked header) of each batch whose max timestamp is at least `timestamp` and
        whose last offset is at least `start_offset`, in order."""
        for position, batch_size, header in self._mapped_headers():
            if header[8] >= timestamp and header[0] + header[6] >= start_offset:
                yield position, batch_size, header

    def _mapped_headers(self) -> Iterator[tuple[int, int, tuple[int, ...]]]:
        """(position, size, unpacked header) of every batch, its framing checked, read through a read-only
        mapping: a pread per header (`_walk_headers`, whose 8 KiB reads hold one header of a 16 KiB batch)
        cost about 4 times as much (docs/benchmarks.md)."""
        size = self._size
        if size == 0:
            return
        unpack = HEADER.unpack_from
        with mmap.mmap(self._fd, size, access=mmap.ACCESS_READ) as view:
            position = 0
            while position < size:
                if position + HEADER_SIZE > size:
                    raise CorruptRecordError(f"torn batch header at byte {position} of {self.log_path}")
                header = unpack(view, position)
                length, magic = header[1], header[3]
                batch_size = LOG_OVERHEAD + length
                if magic != MAGIC or length < HEADER_SIZE - LOG_OVERHEAD or position + batch_size > size:
                    raise CorruptRecordError(f"bad batch header at byte {position} of {self.log_path}")
                yield position, batch_size, header
                position += batch_size

    def producer_batches(self, from_offset: int = 0) -> Iterator[tuple[int, int, int, int, int, int]]:
        """(producer id, producer epoch, base sequence, base offset, last offset, max timestamp) of every
        batch written by an idempotent producer that ends at or after `from_offset`: what rebuilds the
        producer state (storage/producer_state.py)."""
        for _, _, h in self._walk_headers(0):
            base, last = h[0], h[0] + h[6]
            if h[9] >= 0 and last >= from_offset:
                yield h[9], h[10], h[11], base, last, h[8]

    def batch_epochs(self, from_offset: int = 0) -> Iterator[tuple[int, int]]:
        """(partition leader epoch, base offset) of every batch that ends at or after `from_offset`."""
        for _, _, base, last, _, epoch in self._walk(0):
            if last >= from_offset:
                yield epoch, base

    # -- truncation and recovery -------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding `offset` and everything after it; returns the bytes removed."""
        found = self._locate(offset, by_base=False)
        if found is None:
            return 0
        position, _, base = found
        removed = self._size - position
        os.ftruncate(self._fd, position)
        self._size = position
        self._recent.clear()
        self.generation += 1
        self.index.truncate_to(base)
        self._recompute_tail()
        if self._crc_verified_end >= position:  # the prefix now ends where the segment does
            self._crc_verified_end = position
            self._verified_next = self._next_offset
        self._max_timestamp = NO_TIMESTAMP if position == 0 else None
        if position == 0:
            self.created_ms = self._time.milliseconds()  # an emptied segment starts its roll clock again
        self._dirty = True
        return removed

    def recover(self, on_batch_epoch: Callable[[int, int], None] | None = None, epochs_from_offset: int = 0) -> int:
        """Validate every batch (framing, CRC, increasing offsets) from the start of the file, cut the file
        at the first bad or torn one, and rebuild the index. Calls `on_batch_epoch(epoch, base_offset)`
        for each batch whose epoch differs from the previous one's, ignoring batches that end before
        `epochs_from_offset` (the log start: they are logically deleted). Returns the bytes truncated."""
        self.index.reset()
        file_size = os.fstat(self._fd).st_size
        position = 0
        next_offset = self.base_offset
        largest = NO_TIMESTAMP
        since = 0
        last_epoch: int | None = None
        read_size = _RECOVERY_CHUNK_BYTES
        problem: str | None = None
        gap: tuple[int, int] | None = None  # (byte, offset expected there) of the first offset gap
        while position < file_size and problem is None:
            buf = os.pread(self._fd, read_size, position)
            result = scan(buf, verify_crc=True)
            consumed = 0
            for batch in result.batches:
                if batch.base_offset < next_offset:
                    problem = f"batch at byte {position + batch.position} goes back to offset {batch.base_offset}"
                    break
                if batch.base_offset > next_offset and gap is None:
                    gap = (position + batch.position, next_offset)
                if since > self._index_interval_bytes and not self.index.is_full:
                    self.index.append(batch.base_offset, position + batch.position)
                    since = 0
                since += batch.size
                next_offset = batch.base_offset + batch.last_offset_delta + 1
                if next_offset > epochs_from_offset and batch.partition_leader_epoch != last_epoch:
                    if on_batch_epoch is not None:
                        on_batch_epoch(batch.partition_leader_epoch, batch.base_offset)
                    last_epoch = batch.partition_leader_epoch
                largest = max(largest, batch.max_timestamp)
                consumed = batch.position + batch.size
            position += consumed
            if problem is not None or result.error is None:
                continue
            if result.incomplete and result.batches:
                continue  # the next read starts at the batch that straddled the end of this chunk
            needed = _batch_size_if_known(buf) if result.incomplete else None
            if needed is not None and needed > read_size and position + needed <= file_size:
                read_size = needed  # one batch larger than the read chunk: read it whole
                continue
            problem = result.error
        truncated = file_size - position
        if truncated:
            if not any(os.pread(self._fd, HEADER_SIZE, position)):
                # Zeros where the next batch would start: a preallocated file's unused space (or, after a
                # power loss, blocks whose data never reached the disk).
                logger.info(
                    "recovery of %s cut %d zero bytes after its data at byte %d", self.log_path, truncated, position
                )
            else:
                logger.warning(
                    "recovery of %s truncated %d bytes at byte %d: %s",
                    self.log_path,
                    truncated,
                    position,
                    problem or "torn tail",
                )
            os.ftruncate(self._fd, position)
            self._storage.fsync(self._fd, position)
        self._size = position
        self._recent.clear()
        # Recovery checked every CRC it kept; a gap in the offsets ends what counts as verified there.
        self._crc_verified_end, self._verified_next = gap if gap is not None else (position, next_offset)
        self._next_offset = next_offset
        self._max_timestamp = largest
        self._bytes_since_last_index_entry = since
        self.index.flush(fsync=False)
        return truncated

    def _rebuild_index_from_headers(self) -> None:
        self.index.reset()
        since = 0
        for position, size, base, _, _, _ in self._walk(0):
            if since > self._index_interval_bytes and not self.index.is_full:
                self.index.append(base, position)
                since = 0
            since += size

    def _recompute_tail(self) -> None:
        """Find next_offset and the bytes since the last index entry by walking from that entry."""
        _, position = self.index.last_entry()
        next_offset = self.base_offset
        since = 0
        for _, size, _, last, _, _ in self._walk(position):
            next_offset = last + 1
            since += size
        self._next_offset = next_offset
        self._bytes_since_last_index_entry = since

    # -- lifecycle ---------------------------------------------------------------------------------

    def preallocate(self, total_bytes: int) -> None:
        """Reserve disk for the file up to `total_bytes` (fallocate: the blocks are allocated and read as
        zeros). The reservation is real (not a sparse file), so it is skipped when it would leave less
        than a tenth of the file system free: many partitions times segment.bytes must not fill the disk
        with zeros. A file system that cannot (no room, no support) leaves the file as it was too: appends
        then allocate as they go, as without preallocation."""
        needed = total_bytes - self._size
        if needed <= 0 or os.fstat(self._fd).st_size >= total_bytes:
            return  # nothing to reserve, or reserved already (a log just created, then opened)
        fs = os.fstatvfs(self._fd)
        if fs.f_bavail * fs.f_frsize - needed < fs.f_blocks * fs.f_frsize // 10:
            logger.info(
                "not preallocating %d bytes for %s: it would leave under a tenth of the disk free",
                needed,
                self.log_path,
            )
            return
        try:
            os.posix_fallocate(self._fd, self._size, needed)
        except OSError as exc:
            logger.warning("could not preallocate %d bytes for %s: %s", total_bytes, self.log_path, exc)
            os.ftruncate(self._fd, self._size)

    def trim(self) -> None:
        """Cut the file back to its data: what preallocation reserved past the last batch is given back.
        Kafka trims a segment when it stops being the active one and when it closes."""
        if self._fd >= 0 and os.fstat(self._fd).st_size > self._size:
            os.ftruncate(self._fd, self._size)

    def flush(self) -> None:
        """fsync the segment file and write the index (index files are rebuilt after a crash anyway)."""
        if self._dirty:
            self._storage.fsync(self._fd, self._size)
            self._dirty = False
        self.index.flush(fsync=True)

    def close(self) -> None:
        if self._fd >= 0:
            self.index.flush(fsync=False)
            os.close(self._fd)
            self._fd = -1
            self.generation += 1

    def delete(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self.generation += 1
        self.log_path.unlink(missing_ok=True)
        self.index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size}, next_offset={self._next_offset})"


def _batch_size_if_known(buf: bytes) -> int | None:
    """The size a batch header at the start of `buf` claims, when enough of it is there to tell."""
    if len(buf) < LOG_OVERHEAD:
        return None
    size = LOG_OVERHEAD + int(_BATCH_LENGTH.unpack_from(buf, 8)[0])
    return size if size >= HEADER_SIZE else None
