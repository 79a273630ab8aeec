"""Record batches: the unit the log stores and replication moves, as opaque bytes.

How this works
--------------
A batch is a fixed 61-byte big-endian header followed by an opaque records payload. Brokers look only
at the header; the payload is produced and consumed by clients. Many batches laid end to end form a
"record set": that is what a segment file holds and what FETCH and PRODUCE carry (as one msgpack `bin`).

    offset size field                  type    notes
    0      8    base_offset            int64   offset of the first record; assigned by the leader
    8      4    batch_length           int32   bytes after this field (header rest + payload)
    12     4    partition_leader_epoch int32   epoch of the leader that appended it; stamped by the leader
    16     1    magic                  int8    always 2
    17     4    crc                    uint32  CRC-32C of every byte after this field (21 .. end)
    21     2    attributes             int16   0 (no compression, no transactions); 0x08 on LogAppendTime
    23     4    last_offset_delta      int32   last offset = base_offset + last_offset_delta
    27     8    first_timestamp        int64   ms since the epoch
    35     8    max_timestamp          int64   largest record timestamp; the leader recomputes it (or
                                               stamps its append time: every record's, with 0x08)
    43     8    producer_id            int64   -1 unless the producer is idempotent (KIP-98)
    51     2    producer_epoch         int16   -1 unless idempotent
    53     4    base_sequence          int32   sequence of the first record, -1 unless idempotent
    57     4    record_count           int32
    61     ...  records payload               msgpack array of records (below)

This is Kafka's v2 batch header, field for field. An idempotent producer numbers its records per
partition from 0 (`base_sequence` is the first record's number, the last is base_sequence +
last_offset_delta); the leader uses the producer id, epoch and sequences to answer a resent batch with
its original offset instead of appending it twice (storage/producer_state.py).

A record is `[offset_delta, timestamp_delta, key, value]`, or `[..., value, headers]` when it has
headers: an array of `[name: str, value: bin or nil]` pairs, like Kafka's record headers. A record
without headers is written in the 4-element form, so batches without headers are byte-identical to
what older writers produced, and readers accept both forms.

Because the CRC starts after the epoch field, a leader assigns offsets and stamps its epoch into a
producer's batch without recomputing the CRC, exactly as Kafka's v2 format allows; a follower appends
the leader's bytes unchanged, so replicas stay byte-identical.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import msgpack
from crc32c import crc32c

from protocol.errors import CorruptRecordError, InvalidRecordError

MAGIC = 2
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: the bytes not counted by batch_length
CRC_START = 21  # first byte the CRC covers
NO_PARTITION_LEADER_EPOCH = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
MAX_SEQUENCE = 2**31 - 1
LOG_APPEND_TIME_BIT = 0x08  # attributes bit 3: the batch's max timestamp is every record's (LogAppendTime)
#: The most records a producer's batch may hold. Checking a batch (and, on the Kafka listener, converting
#: it) is one piece of work on the event loop, a few microseconds a record; clients batch no more
#: (librdkafka's batch.num.messages is 10,000, the Java producer's 16 KiB batch.size a few thousand).
MAX_RECORDS_PER_BATCH = 10_000


def check_record_count(count: int, where: str) -> None:
    """InvalidRecordError (87) for a batch of more than MAX_RECORDS_PER_BATCH records, before its payload is read."""
    if count > MAX_RECORDS_PER_BATCH:
        raise InvalidRecordError(f"{where}: {count} records, more than the {MAX_RECORDS_PER_BATCH} a batch may hold")


CREATE_TIME, LOG_APPEND_TIME = 0, 1  # Kafka's TimestampType ids

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_OFFSET_AND_EPOCH = struct.Struct(">qii")  # base_offset, batch_length, partition_leader_epoch
_EPOCH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")
_PRE_CRC = struct.Struct(">qiibI")  # base_offset, batch_length, partition_leader_epoch, magic, crc
_CRC_FIELDS = struct.Struct(">hiqqqhii")  # attributes .. record_count: the header bytes the CRC covers

assert _HEADER.size == HEADER_SIZE == _PRE_CRC.size + _CRC_FIELDS.size
assert _PRE_CRC.size == CRC_START


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The header of one batch and where it sits in the buffer it was parsed from."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int  # byte position of the batch in the buffer it was read from

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.last_offset_delta if self.base_sequence >= 0 else NO_SEQUENCE

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length


Header = tuple[str, bytes | None]


def next_sequence(sequence: int, increment: int = 1) -> int:
    """An idempotent producer's sequence `increment` records on: sequences wrap from 2**31 - 1 to 0, as
    Kafka's do."""
    return (sequence + increment) % (MAX_SEQUENCE + 1)


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    # Kafka's TimestampType: 0 CreateTime (the producer's), 1 LogAppendTime (the leader's append time: the
    # batch's max timestamp, every record's timestamp in a batch whose attributes have bit 3 set).
    timestamp_type: int = 0


def build_batch(
    records: Sequence[
        bytes | None | tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, Sequence[Header]]
    ],
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_ms: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """A batch holding `records`: each a value, a (key, value) pair or a (key, value, headers) triple.

    Offsets run from `base_offset`; an idempotent producer passes its id, epoch and the partition's next
    sequence number."""
    if not records:
        raise ValueError("a batch holds at least one record")
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    items: list[list[object]] = []
    for delta, rec in enumerate(records):
        if not isinstance(rec, tuple):
            items.append([delta, 0, None, rec])
        elif len(rec) == 3 and rec[2]:
            items.append([delta, 0, rec[0], rec[1], [[name, value] for name, value in rec[2]]])
        else:
            items.append([delta, 0, rec[0], rec[1]])
    payload = msgpack.packb(items, use_bin_type=True)
    return assemble_batch(
        base_offset,
        partition_leader_epoch,
        len(records) - 1,
        ts,
        ts,
        len(records),
        payload,
        (producer_id, producer_epoch, base_sequence),
    )


def assemble_batch(
    base_offset: int,
    epoch: int,
    last_offset_delta: int,
    first_ts: int,
    max_ts: int,
    count: int,
    payload: bytes | bytearray | memoryview,
    producer: tuple[int, int, int] = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE),
    attributes: int = 0,
) -> bytes:
    """One batch from its header fields and an already encoded records payload: batch_length and the
    CRC are computed here. The payload is copied once (the CRC is taken over the fields, then continued
    over the payload in place)."""
    fields = _CRC_FIELDS.pack(attributes, last_offset_delta, first_ts, max_ts, *producer, count)
    crc = crc32c(payload, crc32c(fields))
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    return b"".join((_PRE_CRC.pack(base_offset, batch_length, epoch, MAGIC, crc), fields, payload))


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at `position`; raises CorruptRecordError when it is short or malformed."""
    if len(buf) - position < HEADER_SIZE:
        raise CorruptRecordError(f"truncated batch header at byte {position}")
    header = BatchHeader(*_HEADER.unpack_from(buf, position), position)  # type: ignore[call-arg]
    if header.magic != MAGIC:
        raise CorruptRecordError(f"batch at byte {position} has magic {header.magic}, expected {MAGIC}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch at byte {position} has impossible length {header.batch_length}")
    if header.last_offset_delta < 0 or header.record_count <= 0:
        raise CorruptRecordError(f"batch at byte {position} has no records")
    if position + header.size_in_bytes > len(buf):
        raise CorruptRecordError(f"batch at byte {position} runs past the end of the buffer")
    return header


def iter_headers(buf: bytes | bytearray | memoryview, verify_crc: bool = False) -> Iterator[BatchHeader]:
    """Every batch header in a record set, in order. Raises CorruptRecordError on the first bad one."""
    position = 0
    end = len(buf)
    view = memoryview(buf)
    while position < end:
        header = read_header(buf, position)
        if verify_crc:
            stop = position + header.size_in_bytes
            if crc32c(view[position + CRC_START : stop]) != header.crc:
                raise CorruptRecordError(f"CRC mismatch in batch at offset {header.base_offset}")
        yield header
        position += header.size_in_bytes


def validate_record_set(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """All headers of a record set after checking framing and every CRC."""
    return list(iter_headers(buf, verify_crc=True))


def is_crc_valid(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    view = memoryview(buf)
    return crc32c(view[header.position + CRC_START : header.position + header.size_in_bytes]) == header.crc


def stamp(buf: bytearray, header: BatchHeader, base_offset: int, partition_leader_epoch: int) -> None:
    """Leader-side: write the assigned base offset and the leader epoch in place (CRC unaffected)."""
    _BASE_OFFSET.pack_into(buf, header.position, base_offset)
    _EPOCH.pack_into(buf, header.position + 12, partition_leader_epoch)


def iter_records(buf: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Consumer-side: every record of every batch in a record set, with absolute offsets."""
    view = memoryview(buf)
    for header in iter_headers(buf):
        payload = view[header.position + HEADER_SIZE : header.position + header.size_in_bytes]
        log_append_time = header.attributes & LOG_APPEND_TIME_BIT
        try:
            items = msgpack.unpackb(payload, raw=False, use_list=True)
        except Exception as exc:  # msgpack raises several types for bad input
            raise CorruptRecordError(f"undecodable records in batch at offset {header.base_offset}") from exc
        if not isinstance(items, list):
            raise CorruptRecordError(f"records payload of batch {header.base_offset} is not an array")
        for item in items:
            if not (isinstance(item, list) and len(item) in (4, 5)):
                raise CorruptRecordError(f"malformed record in batch at offset {header.base_offset}")
            headers = _headers(item[4], header.base_offset) if len(item) == 5 else ()
            delta, ts_delta, key, value = item[:4]
            if (
                type(delta) is not int
                or type(ts_delta) is not int
                or not (key is None or type(key) is bytes)
                or not (value is None or type(value) is bytes)
            ):
                raise CorruptRecordError(
                    f"record with fields of the wrong types in batch at offset {header.base_offset}"
                )
            if log_append_time:
                yield Record(header.base_offset + delta, header.max_timestamp, key, value, headers, LOG_APPEND_TIME)
            else:
                yield Record(header.base_offset + delta, header.first_timestamp + ts_delta, key, value, headers)


def _headers(raw: object, base_offset: int) -> tuple[Header, ...]:
    if not isinstance(raw, list) or not all(
        isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) and isinstance(h[1], bytes | None) for h in raw
    ):
        raise CorruptRecordError(f"malformed record headers in batch at offset {base_offset}")
    return tuple((h[0], h[1]) for h in raw)


def concat(batches: Iterable[bytes]) -> bytes:
    return b"".join(batches)
