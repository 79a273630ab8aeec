"""Kafka v2 record batches to and from minibroker's batches, for the Kafka-protocol listener.

How this works
--------------
A minibroker batch (protocol/record_batch.py) has Kafka's 61-byte v2 header; only the records payload
after it differs. Kafka's payload is a run of binary records, possibly compressed as a whole:

    Record => Length varint, Attributes int8, TimestampDelta varlong, OffsetDelta varint,
              KeyLength varint (-1: null), Key, ValueLength varint (-1: null), Value,
              HeaderCount varint, then per header: KeyLength varint, Key (UTF-8),
                                                  ValueLength varint (-1: null), Value

(varints are zigzag-encoded base-128, as protobuf's sint32/sint64.) minibroker's payload is one msgpack
array of `[offset_delta, timestamp_delta, key, value]`, or `[..., value, headers]` with headers a list of
`[str, bin or nil]` when the record has any. The log and replication keep the msgpack form; the Kafka
listener converts at its edge:

* `kafka_to_native` (PRODUCE): per batch, refuse magic 0/1, check framing and Kafka's CRC-32C,
  decompress (attributes bits 0-2), decode the records, check them, and rebuild the batch with the msgpack
  payload. Every header field is kept (producer id, epoch and base sequence, both timestamps,
  last_offset_delta, record_count, partition_leader_epoch, base_offset) except three: batch_length and
  the CRC are recomputed, and the attributes become 0. The log validator (storage/log_validator.py)
  accepts only attributes 0 from a producer, so the codec bits go (the payload is no longer compressed)
  and so does bit 3, the timestamp type: the timestamp type is the topic's (`message.timestamp.type`),
  which the leader applies after this, as Kafka's LogValidator overwrites it. Transactional (bit 4) and
  control (bit 5) batches, and any higher bit, are refused.
* `native_to_kafka` (FETCH): per stored batch, the records are re-encoded in Kafka's form, uncompressed,
  with the header fields unchanged (the timestamp-type bit a leader set on a LogAppendTime topic
  included, so a client reports every record with the batch's max timestamp, the append time) and
  batch_length and the CRC recomputed. The stored CRC is not checked
  again (the log checked it on append and checks segments on recovery); the framing is. A partial batch
  at the end of the input (a FETCH answer cut at its size limit) is dropped, as Kafka clients drop it.

Errors, as Kafka's broker answers them:

* CorruptRecordError (CORRUPT_MESSAGE, 2, retriable): the bytes were damaged on the way: a batch that is
  short, longer than the input or has an impossible length, an unknown magic, a CRC mismatch.
* InvalidRecordError (INVALID_RECORD, 87): the CRC is right, so the client built it so: magic 0 or 1
  (Kafka's ProduceRequest refuses non-v2 batches with InvalidRecordException for produce v3+, which is
  87, not UNSUPPORTED_FOR_MESSAGE_FORMAT), an empty record set, an unknown codec or a payload that does
  not decompress, records that do not decode (a length past the batch, a record whose Length is not what
  it holds, bytes left over, a header key that is not UTF-8, a negative header count), offset deltas that
  are not 0..n-1, record_count != last_offset_delta + 1, transactional or control batches.

Two choices left to the listener, which knows the request version: Kafka refuses a PRODUCE (v3+) whose
records hold more than one batch for a partition (INVALID_RECORD), this converts any number; and Kafka
quietly drops a partial batch at the end of a PRODUCE's records, this refuses it (CORRUPT_MESSAGE),
since no client sends one.

Record attributes (the int8 in each record) are dropped: Kafka defines none. A negative key, value or
header value length other than -1 reads as null, as Kafka reads it.

Compression is cramjam's: gzip (RFC 1952, several members allowed), snappy (raw, as librdkafka, Sarama and
franz-go send it, or in xerial-snappy's framing, as the Java client's SnappyOutputStream writes it: Kafka
reads both, and so does this), lz4 (the standard LZ4 frame format, which Kafka uses from magic 1 on) and
zstd (standard frames, with or without the content size, several frames allowed). cramjam's
`snappy.decompress` is Google's *framing* format (`\\xff\\x06\\x00\\x00sNaPpY`), which no Kafka client
sends, so only `decompress_raw` is used.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import cramjam
import msgpack
from crc32c import crc32c

from protocol.errors import CorruptRecordError, InvalidRecordError, MessageTooLargeError
from protocol.record_batch import (
    CRC_START,
    HEADER_SIZE,
    LOG_APPEND_TIME_BIT,
    LOG_OVERHEAD,
    BatchHeader,
    assemble_batch,
    check_record_count,
    read_header,
)

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = LOG_APPEND_TIME_BIT  # 1: LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

MAGIC_OFFSET = 16  # where every message format (v0, v1, v2) keeps its magic byte
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_INT32 = struct.Struct(">i")  # a batch_length, a xerial-snappy chunk length
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_CODEC_MODULES = {CODEC_GZIP: cramjam.gzip, CODEC_LZ4: cramjam.lz4, CODEC_ZSTD: cramjam.zstd}
#: The most a produce request's records for one partition may decompress to. Kafka checks only the
#: compressed size; a bound on the expanded one keeps a small bomb from taking the broker's memory.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
_XERIAL_HEADER_SIZE = 16  # magic, then version and minimum compatible version, two int32s
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# What a stored payload of the wrong shape raises while it is re-encoded: msgpack's errors are all
# ValueErrors; a field of the wrong type fails len(), unpacking, str.encode or bytes.join.
_MALFORMED = (ValueError, TypeError, AttributeError)

# Zigzag varints of 0..63 and -64..-1 are one byte: most deltas and key lengths. _ONE_BYTE_VALUES[b] is
# the value of the one-byte varint b.
_ONE_BYTE = [bytes((i,)) for i in range(128)]
_ONE_BYTE_VALUES = [(b >> 1) ^ -(b & 1) for b in range(128)]


def kafka_to_native(batches: bytes | bytearray | memoryview, max_bytes: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """A Kafka PRODUCE record set (v2 batches end to end) as minibroker batches.

    Raises CorruptRecordError for damaged framing or a bad CRC, InvalidRecordError for a batch that is
    intact but not acceptable (see the module docstring), or whose records decompress to more than
    `max_bytes` (all batches of the set together)."""
    return b"".join(iter_kafka_to_native(batches, max_bytes))


def iter_kafka_to_native(
    batches: bytes | bytearray | memoryview,
    max_bytes: int = MAX_DECOMPRESSED_BYTES,
    max_batch_bytes: int | None = None,
) -> Iterator[bytes]:
    """`kafka_to_native` a batch at a time, so a caller may let other work run between two. Before a batch
    is decompressed: its record count is checked against MAX_RECORDS_PER_BATCH (InvalidRecordError) and,
    with `max_batch_bytes` (the topic's max.message.bytes), its size as sent, compressed, against that
    (MessageTooLargeError), as Kafka checks it."""
    view = memoryview(batches)
    end = len(view)
    if end == 0:
        raise InvalidRecordError("a produce request must have at least one record batch per partition")
    position = 0
    while position < end:
        if end - position <= MAGIC_OFFSET:
            raise CorruptRecordError(f"truncated batch at byte {position}: {end - position} bytes left")
        magic = view[position + MAGIC_OFFSET]
        if magic in (0, 1):
            raise InvalidRecordError(
                f"batch at byte {position} has magic {magic}: only record batches with magic version 2 are "
                "accepted (message formats v0 and v1 are not supported)"
            )
        header = read_header(view, position)  # magic 2, a possible length, within the input
        stop = position + header.size_in_bytes
        where = f"batch at byte {position}"
        if max_batch_bytes is not None and header.size_in_bytes > max_batch_bytes:
            raise MessageTooLargeError(
                f"{where}: {header.size_in_bytes} bytes, larger than max.message.bytes={max_batch_bytes}"
            )
        count = header.record_count
        check_record_count(count, where)
        if crc32c(view[position + CRC_START : stop]) != header.crc:
            raise CorruptRecordError(f"batch at byte {position}: CRC mismatch")
        attributes = header.attributes
        if attributes & ~(COMPRESSION_MASK | TIMESTAMP_TYPE_BIT):
            raise InvalidRecordError(f"{where}: {_attribute_problem(attributes)}")
        if count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"{where}: record_count {count} does not match last_offset_delta {header.last_offset_delta}"
            )
        data = _decompress(attributes & COMPRESSION_MASK, view[position + HEADER_SIZE : stop], where, max_bytes)
        max_bytes -= len(data)
        try:
            records = _decode_records(data, count, where)
        except IndexError:
            raise InvalidRecordError(f"{where}: the records end before the header's {count} records") from None
        yield _with_payload(header, msgpack.packb(records, use_bin_type=True))
        position = stop


def native_to_kafka(batches: bytes | bytearray | memoryview) -> bytes:
    """Stored minibroker batches as a Kafka FETCH record set: uncompressed v2 batches, without codec bits.

    A partial batch at the end is dropped. Raises CorruptRecordError when a complete batch is malformed
    (bad header, or a payload that is not `record_count` records of the documented shape)."""
    return b"".join(iter_native_to_kafka(batches))


def iter_native_to_kafka(batches: bytes | bytearray | memoryview) -> Iterator[bytes]:
    """`native_to_kafka` a batch at a time, so a caller may let other work run between two."""
    view = memoryview(batches)
    end = len(view)
    position = 0
    while end - position >= LOG_OVERHEAD:
        (batch_length,) = _INT32.unpack_from(view, position + 8)
        if batch_length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch at byte {position} has impossible length {batch_length}")
        if position + LOG_OVERHEAD + batch_length > end:
            break  # the partial batch a size-limited read ends with
        header = read_header(view, position)
        stop = position + header.size_in_bytes
        try:
            payload = _encode_records(view[position + HEADER_SIZE : stop], header.record_count)
        except _MALFORMED as exc:
            raise CorruptRecordError(
                f"stored batch at offset {header.base_offset} has malformed records: {exc}"
            ) from None
        yield _with_payload(header, payload, header.attributes & ~COMPRESSION_MASK)
        position = stop


def _with_payload(header: BatchHeader, payload: bytes, attributes: int = 0) -> bytes:
    """The batch of `header` around another records payload: every header field kept but the attributes,
    the length and the CRC."""
    return assemble_batch(
        header.base_offset,
        header.partition_leader_epoch,
        header.last_offset_delta,
        header.first_timestamp,
        header.max_timestamp,
        header.record_count,
        payload,
        (header.producer_id, header.producer_epoch, header.base_sequence),
        attributes,
    )


# -- PRODUCE: Kafka records to msgpack ---------------------------------------------------------------


def _attribute_problem(attributes: int) -> str:
    if attributes & TRANSACTIONAL_BIT:
        return "transactional batches are not supported"
    if attributes & CONTROL_BIT:
        return "control batches are written by brokers, not producers"
    return f"attributes {attributes:#x} set bits Kafka does not define for producers"


def _decompress(codec: int, data: memoryview, where: str, limit: int) -> bytes | memoryview:
    """The batch's records, decompressed into at most `limit` bytes: a few hundred compressed bytes can
    expand to gigabytes, so the output is written into a bounded buffer (first a small guess of 64 times
    the input, then the limit) and more than the limit is refused, never allocated."""
    if codec == CODEC_NONE:
        return data
    try:
        if codec == CODEC_SNAPPY:
            return _snappy_decompress(data, limit)
        module = _CODEC_MODULES.get(codec)
        if module is None:
            raise InvalidRecordError(f"{where}: unknown compression codec {codec}")
        for size in (min(limit, 64 * len(data) + 4096), limit):
            buffer = bytearray(size)
            try:
                written = module.decompress_into(data, buffer)
            except cramjam.DecompressionError as exc:
                if "whole buffer" in str(exc) and size < limit:
                    continue  # the guess was too small
                if "whole buffer" in str(exc):
                    raise InvalidRecordError(f"{where}: the records decompress to more than {limit} bytes") from None
                raise
            return memoryview(buffer)[:written]
    except (cramjam.DecompressionError, ValueError, struct.error) as exc:
        raise InvalidRecordError(f"{where}: the records do not decompress with codec {codec}: {exc}") from None
    raise AssertionError("unreachable")


def _snappy_decompress(data: memoryview, limit: int) -> bytes:
    """Raw snappy, or xerial-snappy's framing: a 16-byte header, then chunks of [int32 length, raw snappy
    block]. A header met again at a chunk boundary starts a concatenated stream (its length field could
    never begin with 0x82: that would be a negative length). Raw snappy states its decompressed length
    first, so more than `limit` bytes is refused before anything is decompressed."""
    if data[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        return _snappy_block(data, limit, limit)
    chunks = []
    total = 0
    position = _XERIAL_HEADER_SIZE
    end = len(data)
    while position < end:
        if data[position : position + len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
            position += _XERIAL_HEADER_SIZE
            continue
        (length,) = _INT32.unpack_from(data, position)
        position += 4
        if length < 0 or position + length > end:
            raise ValueError(f"xerial snappy chunk of {length} bytes runs past the payload")
        chunk = _snappy_block(data[position : position + length], limit - total, limit)
        total += len(chunk)
        chunks.append(chunk)
        position += length
    return b"".join(chunks)


def _snappy_block(data: memoryview, room: int, limit: int) -> bytes:
    if cramjam.snappy.decompress_raw_len(data) > room:
        raise InvalidRecordError(f"snappy records decompress to more than {limit} bytes")
    return bytes(cramjam.snappy.decompress_raw(data))


def _varint(data: bytes, position: int, max_bytes: int) -> tuple[int, int]:
    """A zigzag varint of any length (the decode loop inlines the one- and two-byte cases)."""
    result = shift = 0
    for _ in range(max_bytes):
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
    raise InvalidRecordError(f"a varint is longer than {max_bytes} bytes")


def _decode_records(data: bytes | memoryview, count: int, where: str) -> list[list[Any]]:
    """The `count` records of a decompressed Kafka payload as msgpack-ready lists. An IndexError means
    the payload ended inside a record; the caller turns it into InvalidRecordError.

    The hot loop of PRODUCE. Every varint is read inline when it fits one byte (`one[byte]` is its
    value) and, for the record and value lengths, two bytes (records of 64 bytes to 8 KiB); longer
    ones go through `_varint`. The offset delta must be the record's index, so it is compared as bytes
    with that index's encoding first."""
    if isinstance(data, memoryview):
        data = data.tobytes()  # bytes index and slice faster than a memoryview, and slices are the values
    varint = _varint
    one = _ONE_BYTE_VALUES
    deltas = _VARINTS
    end = len(data)
    records: list[list[Any]] = []
    append = records.append
    position = 0
    for expected_delta in range(count):
        byte = data[position]
        if byte < 0x80:
            length = one[byte]
            position += 1
        elif data[position + 1] < 0x80:
            z = (byte & 0x7F) | (data[position + 1] << 7)
            length = (z >> 1) ^ -(z & 1)
            position += 2
        else:
            length, position = varint(data, position, 5)
        stop = position + length
        if length <= 0 or stop > end:
            raise InvalidRecordError(f"{where}: record {expected_delta} has length {length}, past the payload")
        # position is on the record's attributes: Kafka defines none, they are skipped
        byte = data[position + 1]
        if byte < 0x80:
            timestamp_delta = one[byte]
            position += 2
        else:
            timestamp_delta, position = varint(data, position + 1, 10)
            if not _INT64_MIN <= timestamp_delta <= _INT64_MAX:
                raise InvalidRecordError(f"{where}: record {expected_delta} has a timestamp delta past int64")
        delta = deltas[expected_delta] if expected_delta < _SMALL_VARINTS else _zigzag(expected_delta)
        if data.startswith(delta, position):
            position += len(delta)
        else:  # another offset delta, or the same one in a longer encoding than needed
            offset_delta, position = varint(data, position, 5)
            if offset_delta != expected_delta:
                raise InvalidRecordError(
                    f"{where}: inner record offsets must be consecutive: record {expected_delta} has offset "
                    f"delta {offset_delta}"
                )
        byte = data[position]
        if byte < 0x80:
            size = one[byte]
            position += 1
        else:
            size, position = varint(data, position, 5)
        if size >= 0:
            key: bytes | None = data[position : position + size]
            position += size
        else:
            key = None
        byte = data[position]
        if byte < 0x80:
            size = one[byte]
            position += 1
        elif data[position + 1] < 0x80:
            z = (byte & 0x7F) | (data[position + 1] << 7)
            size = (z >> 1) ^ -(z & 1)
            position += 2
        else:
            size, position = varint(data, position, 5)
        if size >= 0:
            value: bytes | None = data[position : position + size]
            position += size
        else:
            value = None
        if data[position] == 0:  # no headers
            position += 1
            append([expected_delta, timestamp_delta, key, value])
        else:
            headers, position = _decode_headers(data, position, where, expected_delta)
            append([expected_delta, timestamp_delta, key, value, headers])
        if position != stop:
            raise InvalidRecordError(
                f"{where}: record {expected_delta} declares {length} bytes but holds {length + position - stop}"
            )
    if position != end:
        raise InvalidRecordError(f"{where}: {end - position} bytes follow the header's {count} records")
    return records


def _decode_headers(data: bytes, position: int, where: str, index: int) -> tuple[list[list[Any]], int]:
    count, position = _varint(data, position, 5)
    if count < 0:
        raise InvalidRecordError(f"{where}: record {index} has a header count of {count}")
    headers: list[list[Any]] = []
    for _ in range(count):
        size, position = _varint(data, position, 5)
        if size < 0:
            raise InvalidRecordError(f"{where}: record {index} has a header key of length {size}")
        raw = data[position : position + size]
        position += size
        if len(raw) != size:
            raise IndexError  # ran past the payload
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecordError(f"{where}: record {index} has a header key that is not UTF-8") from None
        size, position = _varint(data, position, 5)
        if size >= 0:
            headers.append([name, data[position : position + size]])
            position += size
        else:
            headers.append([name, None])
    return headers, position


# -- FETCH: msgpack to Kafka records -----------------------------------------------------------------


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _ONE_BYTE[z]
    if z < 0x4000:
        return bytes((z & 0x7F | 0x80, z >> 7))
    out = bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# The encodings of 0 .. _SMALL_VARINTS - 1 (up to two bytes): record, key and value lengths in ordinary
# batches, offset deltas, most timestamp deltas.
_SMALL_VARINTS = 1 << 13
_VARINTS = [_zigzag(n) for n in range(_SMALL_VARINTS)]
_NULL = _zigzag(-1)
_ZERO = _zigzag(0)  # also a record's attributes byte and an empty header count


def _encode_records(payload: memoryview, count: int) -> bytes:
    """Kafka's records for a stored msgpack payload. Malformed input surfaces as TypeError or ValueError
    (a field of the wrong type) or one of msgpack's errors; the caller turns them into CorruptRecordError.

    The hot loop of FETCH: the varints of lengths and deltas below _SMALL_VARINTS come from a table."""
    items = msgpack.unpackb(payload, raw=False, use_list=False)
    if type(items) is not tuple or len(items) != count:
        raise ValueError(f"the payload is not an array of the header's {count} records")
    zigzag = _zigzag
    small = _VARINTS
    limit = _SMALL_VARINTS
    zero = _ZERO
    null = _NULL
    parts: list[bytes] = []
    extend = parts.extend
    for item in items:
        if len(item) == 4:
            offset_delta, timestamp_delta, key, value = item
            headers = zero
        else:
            offset_delta, timestamp_delta, key, value, raw_headers = item
            headers = _encode_headers(raw_headers)
        prefix = zero + (small[timestamp_delta] if 0 <= timestamp_delta < limit else zigzag(timestamp_delta))
        prefix += small[offset_delta] if 0 <= offset_delta < limit else zigzag(offset_delta)
        if key is None:
            key_length = null
            key = b""
        else:
            size = len(key)
            key_length = small[size] if size < limit else zigzag(size)
        if value is None:
            value_length = null
            value = b""
        else:
            size = len(value)
            value_length = small[size] if size < limit else zigzag(size)
        size = len(prefix) + len(key_length) + len(key) + len(value_length) + len(value) + len(headers)
        extend((small[size] if size < limit else zigzag(size), prefix, key_length, key, value_length, value, headers))
    return b"".join(parts)


def _encode_headers(headers: tuple[tuple[str, bytes | None], ...]) -> bytes:
    parts = [_zigzag(len(headers))]
    for name, value in headers:
        raw = name.encode("utf-8")
        parts.append(_zigzag(len(raw)))
        parts.append(raw)
        if value is None:
            parts.append(_NULL)
        else:
            parts.append(_zigzag(len(value)))
            parts.append(value)
    return b"".join(parts)
