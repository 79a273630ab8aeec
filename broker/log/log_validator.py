"""What a leader checks in a producer's records before it appends them (Kafka's LogValidator).

How this works
--------------
The log's append already refuses what breaks the framing: a short or torn batch, a wrong magic, a
negative delta, a bad CRC (CORRUPT_MESSAGE). A batch can pass all that and still be poison: its CRC is
right because the producer computed it over garbage. Followers copy the leader's bytes and consumers
decode them, so one such batch accepted by a leader breaks every reader of the partition, forever. So
before the append the leader checks each batch as Kafka's LogValidator does for uncompressed v2 batches,
and refuses the whole partition's records with INVALID_RECORD (87), naming the batch and the rule:

* attributes are 0: no compression codec, no transactional or control bit (minibroker writes neither,
  so a set bit means a producer this broker cannot serve);
* `record_count == last_offset_delta + 1`;
* the payload is one msgpack array of exactly `record_count` records, nothing after it;
* each record is `[offset_delta, timestamp_delta, key, value]` or the same with `headers`, the offset
  deltas run 0, 1, ..., n-1 (Kafka: "inner record offsets must be consecutive"), the timestamp delta is
  an integer, key and value are bin or nil, headers `[str, bin or nil]` pairs.

Base offsets and partition leader epochs are the leader's to assign, so whatever a producer put there
is overwritten, not checked. The cost is one msgpack decode of the payload per batch: see
docs/benchmarks.md for what it adds per 16 KiB batch.
"""

from __future__ import annotations

from typing import Any

import msgpack

from protocol.errors import InvalidRecordError
from protocol.record_batch import HEADER_SIZE, BatchHeader, iter_headers

__all__ = ["InvalidRecordError", "validate_records"]


def validate_records(records: bytes | bytearray | memoryview) -> None:
    """Raise InvalidRecordError (or CorruptRecordError for broken framing) for the first bad batch."""
    view = memoryview(records)
    for header in iter_headers(records):
        _validate_batch(view[header.position + HEADER_SIZE : header.position + header.size_in_bytes], header)


def _validate_batch(payload: memoryview, header: BatchHeader) -> None:
    where = f"batch at byte {header.position}"
    if header.attributes != 0:
        raise InvalidRecordError(
            f"{where}: attributes {header.attributes:#x} are not supported (no compression or transaction bits)"
        )
    count = header.record_count
    if count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"{where}: record_count {count} does not match last_offset_delta {header.last_offset_delta}"
        )
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


_TUPLE = {tuple}
_RECORD_LENGTHS = {4, 5}
_FOUR = {4}
_INT = {int}
_BIN_OR_NIL = {bytes, type(None)}


def _valid_headers(raw: object) -> bool:
    return type(raw) is tuple and all(
        type(h) is tuple and len(h) == 2 and type(h[0]) is str and (h[1] is None or type(h[1]) is bytes) for h in raw
    )
