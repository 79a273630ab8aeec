"""What a leader checks in a producer's records before it appends them (Kafka's LogValidator).

How this works
--------------
The log's append already refuses what breaks the framing: a short or torn batch, a wrong magic, a
negative delta, a bad CRC (CORRUPT_MESSAGE). A batch can pass all that and still be poison: its CRC is
right because the producer computed it over garbage. Followers copy the leader's bytes and consumers
decode them, so one such batch accepted by a leader breaks every reader of the partition, forever. So
before the append the leader checks each batch as Kafka's LogValidator does for uncompressed v2 batches,
and refuses the whole partition's records with INVALID_RECORD (87), naming the batch and the rule:

* magic is 2: a batch of magic 0 or 1 (the legacy formats, which a produce request of version 3 or later
  may not carry in Kafka either: ProduceRequest.validateRecords) is INVALID_RECORD; a magic no Kafka
  format has stays CORRUPT_MESSAGE, as Kafka's "Invalid magic found in record";
* attributes are 0: no compression codec, no transactional or control bit (minibroker writes neither,
  so a set bit means a producer this broker cannot serve);
* the producer fields agree with each other, as Kafka's record batch and ProducerStateManager read them:
  `producer_id` is -1 (no producer) or a real id (>= 0); `producer_epoch` is never below -1; with a
  producer id `base_sequence` is >= 0 (LogValidator.validateBatch: "Invalid sequence number"); without
  one the epoch and sequence are not read, as in Kafka (aiokafka writes sequence 0 there);
* `record_count == last_offset_delta + 1`, and at most MAX_RECORDS_PER_BATCH (10,000: checking one batch
  is one piece of work on the event loop, so it is bounded before the payload is decoded);
* the payload is one msgpack array of exactly `record_count` records, nothing after it;
* each record is `[offset_delta, timestamp_delta, key, value]` or the same with `headers`, the offset
  deltas run 0, 1, ..., n-1 (Kafka: "inner record offsets must be consecutive"), the timestamp delta is
  an integer, key and value are bin or nil, headers `[str, bin or nil]` pairs.

Base offsets and partition leader epochs are the leader's to assign, so whatever a producer put there
is overwritten, not checked. So is `max_timestamp`: as Kafka's LogValidator.assignOffsetsNonCompressed
(`batch.setMaxTimestamp(timestampType, maxBatchTimestamp)`), the leader sets it to the largest record
timestamp (`first_timestamp` + the largest timestamp delta) rather than refusing a batch whose header
disagrees; only when it changes is the batch copied and its CRC recomputed, after the CRC the producer
sent was checked (a rewrite must not make a corrupt batch look whole). The cost is one msgpack decode of
the payload per batch: see docs/benchmarks.md for what it adds per 16 KiB batch.

On a topic whose `message.timestamp.type` is LogAppendTime the leader stamps every batch as Kafka's
LogValidator does for uncompressed v2 batches (`setMaxTimestamp(LOG_APPEND_TIME, now)`): the
timestamp-type bit (0x08) is set in the attributes and `max_timestamp` becomes the append time; the
records keep their deltas (and `first_timestamp` is kept), since a reader takes the max timestamp as every
record's timestamp in such a batch. The CRC is recomputed, after the producer's was checked. This is the
one attribute bit a stored batch may carry: followers append the leader's bytes as they are, and readers
(protocol/record_batch.py's iter_records, the Kafka listener's FETCH) keep it.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
from crc32c import crc32c

from protocol.errors import CorruptRecordError, InvalidRecordError
from protocol.record_batch import (
    CRC_START,
    HEADER_SIZE,
    LOG_APPEND_TIME_BIT,
    MAGIC,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    BatchHeader,
    check_record_count,
    read_header,
)

_MAGIC_POSITION = 16  # the same byte in Kafka's legacy (v0, v1) formats and in v2
_MAX_TIMESTAMP_POSITION = 35
_ATTRIBUTES_POSITION = 21
_CRC_POSITION = 17
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)

__all__ = ["InvalidRecordError", "validate_records"]


Records = bytes | bytearray | memoryview


def validate_records(records: Records, log_append_time_ms: int | None = None) -> Records:
    """The records to append: `records` itself, or a copy with max timestamps (and CRCs) recomputed. Raise
    InvalidRecordError (or CorruptRecordError for broken framing) for the first bad batch.

    With `log_append_time_ms` (the topic's message.timestamp.type is LogAppendTime) every batch is stamped
    with it: the timestamp-type bit set in its attributes and its max timestamp that time."""
    view = memoryview(records)
    end = len(view)
    position = 0
    fixes: list[tuple[BatchHeader, int]] = []
    while position < end:
        if end - position > _MAGIC_POSITION and view[position + _MAGIC_POSITION] in _LEGACY_MAGICS:
            magic = view[position + _MAGIC_POSITION]
            raise InvalidRecordError(f"batch at byte {position}: magic {magic} is not accepted, only magic {MAGIC}")
        header = read_header(view, position)
        max_timestamp = _validate_batch(view[position + HEADER_SIZE : position + header.size_in_bytes], header)
        if log_append_time_ms is not None:
            fixes.append((header, log_append_time_ms))
        elif max_timestamp != header.max_timestamp:
            fixes.append((header, max_timestamp))
        position += header.size_in_bytes
    if not fixes:
        return records
    fixed = bytearray(records)
    for header, max_timestamp in fixes:
        stop = header.position + header.size_in_bytes
        if crc32c(fixed[header.position + CRC_START : stop]) != header.crc:
            raise CorruptRecordError(f"CRC mismatch in batch at byte {header.position}")
        struct.pack_into(">q", fixed, header.position + _MAX_TIMESTAMP_POSITION, max_timestamp)
        if log_append_time_ms is not None:
            struct.pack_into(">h", fixed, header.position + _ATTRIBUTES_POSITION, LOG_APPEND_TIME_BIT)
        struct.pack_into(
            ">I", fixed, header.position + _CRC_POSITION, crc32c(fixed[header.position + CRC_START : stop])
        )
    return fixed


def _validate_producer_fields(header: BatchHeader, where: str) -> None:
    pid, epoch, sequence = header.producer_id, header.producer_epoch, header.base_sequence
    if pid < NO_PRODUCER_ID:
        raise InvalidRecordError(f"{where}: producer_id {pid} is invalid (-1 for none, or an id >= 0)")
    if epoch < NO_PRODUCER_EPOCH:
        raise InvalidRecordError(f"{where}: producer_epoch {epoch} is invalid (-1 for none, or an epoch >= 0)")
    # Without a producer id Kafka reads neither the epoch nor the sequence (RecordBatch.hasProducerId), and
    # real clients rely on it: aiokafka writes base_sequence 0 into its non-idempotent batches.
    if pid != NO_PRODUCER_ID and sequence < 0:
        raise InvalidRecordError(f"{where}: invalid base_sequence {sequence} in a batch with producer_id {pid}")


def _validate_batch(payload: memoryview, header: BatchHeader) -> int:
    """Check one batch; answer its max timestamp as computed from its records."""
    where = f"batch at byte {header.position}"
    _validate_producer_fields(header, where)
    if header.attributes != 0:
        raise InvalidRecordError(
            f"{where}: attributes {header.attributes:#x} are not supported (no compression or transaction bits)"
        )
    count = header.record_count
    if count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"{where}: record_count {count} does not match last_offset_delta {header.last_offset_delta}"
        )
    check_record_count(count, where)
    try:
        items: Any = msgpack.unpackb(payload, raw=False, use_list=False, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise InvalidRecordError(f"{where}: the records payload is not one msgpack value: {exc}") from None
    if type(items) is not tuple:
        raise InvalidRecordError(f"{where}: the records payload is a {type(items).__name__}, not an array")
    if len(items) != count:
        raise InvalidRecordError(f"{where}: the header says {count} records, the payload holds {len(items)}")
    # Each rule is checked for all records at once with C-level iteration (zip, map, set, tuple equality):
    # a Python loop over the records would cost more than the append itself for batches of small records.
    if set(map(type, items)) != _TUPLE:
        raise InvalidRecordError(f"{where}: a record is not an array of 4 or 5 fields")
    lengths = set(map(len, items))
    if not lengths <= _RECORD_LENGTHS:
        raise InvalidRecordError(f"{where}: a record is not an array of 4 or 5 fields")
    if lengths == _FOUR:
        deltas, ts_deltas, keys, values = zip(*items, strict=True)
    else:  # some records carry headers: the columns of the first four fields, then the headers
        deltas, ts_deltas, keys, values = zip(*(item[:4] for item in items), strict=True)
        for item in items:
            if len(item) == 5 and not _valid_headers(item[4]):
                raise InvalidRecordError(f"{where}: record {item[0]} has headers that are not [str, bin or nil] pairs")
    if deltas != tuple(range(count)) or set(map(type, deltas)) != _INT:
        raise InvalidRecordError(f"{where}: offset deltas are not 0..{count - 1} in order")
    if set(map(type, ts_deltas)) != _INT:
        raise InvalidRecordError(f"{where}: a record has a timestamp delta that is not an integer")
    if not set(map(type, keys)) <= _BIN_OR_NIL or not set(map(type, values)) <= _BIN_OR_NIL:
        raise InvalidRecordError(f"{where}: a record has a key or value that is not bin or nil")
    max_timestamp: int = header.first_timestamp + max(ts_deltas)
    if not _INT64_MIN <= max_timestamp <= _INT64_MAX:
        raise InvalidRecordError(f"{where}: a record's timestamp is outside the int64 range")
    return max_timestamp


_LEGACY_MAGICS = (0, 1)
_TUPLE = {tuple}
_RECORD_LENGTHS = {4, 5}
_FOUR = {4}
_INT = {int}
_BIN_OR_NIL = {bytes, type(None)}


def _valid_headers(raw: object) -> bool:
    return type(raw) is tuple and all(
        type(h) is tuple and len(h) == 2 and type(h[0]) is str and (h[1] is None or type(h[1]) is bytes) for h in raw
    )
