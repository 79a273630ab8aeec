"""Kafka v2 batches to and from minibroker's batches, with kafka-python's record code as the independent
encoder and decoder (and its codec functions, backed by python-snappy, lz4 and zstandard, as the
independent compressors)."""

from __future__ import annotations

import ast
import gzip
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kcodec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from protocol.errors import CorruptRecordError, ErrorCode, InvalidRecordError, MessageTooLargeError
from protocol.kafka_records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    CONTROL_BIT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    iter_kafka_to_native,
    kafka_to_native,
    native_to_kafka,
)
from protocol.record_batch import (
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_RECORDS_PER_BATCH,
    assemble_batch,
    build_batch,
    iter_headers,
    iter_records,
    validate_record_set,
)
from storage.log_validator import validate_records

KRecord = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]

_AVAILABLE = {
    CODEC_NONE: True,
    CODEC_GZIP: kcodec.has_gzip(),
    CODEC_SNAPPY: kcodec.has_snappy(),
    CODEC_LZ4: kcodec.has_lz4(),
    CODEC_ZSTD: kcodec.has_zstd(),
}
CODECS = [
    pytest.param(c, id=name, marks=pytest.mark.skipif(not _AVAILABLE[c], reason=f"kafka-python has no {name} codec"))
    for c, name in [
        (CODEC_NONE, "none"),
        (CODEC_GZIP, "gzip"),
        (CODEC_SNAPPY, "snappy"),
        (CODEC_LZ4, "lz4"),
        (CODEC_ZSTD, "zstd"),
    ]
]


# -- the independent side: kafka-python ---------------------------------------------------------------


def kafka_batch(
    records: list[KRecord],
    codec: int = CODEC_NONE,
    producer: tuple[int, int, int] = (-1, -1, -1),
    base_offset: int = 0,
    epoch: int = 0,
    compress_anyway: bool = True,
) -> bytes:
    """A v2 batch written by kafka-python. Its builder sends uncompressed when compression does not
    shrink the payload; `compress_anyway` compresses by hand then, so every test batch has its codec."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 30,
    )
    for offset, timestamp, key, value, headers in records:
        assert builder.append(offset, timestamp, key, value, headers) is not None
    batch = bytearray(builder.build())
    if codec != CODEC_NONE and batch[22] & 0x07 == 0 and compress_anyway:
        batch = bytearray(recompress(bytes(batch), codec, _KP_ENCODERS[codec](bytes(batch[HEADER_SIZE:]))))
    struct.pack_into(">q", batch, 0, base_offset)
    struct.pack_into(">i", batch, 12, epoch)  # neither is covered by the CRC
    return bytes(batch)


_KP_ENCODERS = {
    CODEC_GZIP: kcodec.gzip_encode,
    CODEC_SNAPPY: kcodec.snappy_encode,
    CODEC_LZ4: kcodec.lz4_encode,
    CODEC_ZSTD: kcodec.zstd_encode,
}


def reseal(batch: bytes | bytearray, attributes: int | None = None) -> bytes:
    """The batch with its length and CRC made right again after an edit (attributes optionally set)."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    if attributes is not None:
        struct.pack_into(">h", out, 21, attributes)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[CRC_START:])))
    return bytes(out)


def recompress(uncompressed_batch: bytes, codec: int, compressed_payload: bytes) -> bytes:
    """An uncompressed batch's records replaced by `compressed_payload`, marked with `codec`."""
    (attributes,) = struct.unpack_from(">h", uncompressed_batch, 21)
    return reseal(uncompressed_batch[:HEADER_SIZE] + compressed_payload, (attributes & ~0x07) | codec)


def kafka_read(buf: bytes) -> list[KRecord]:
    """Every record kafka-python reads from a record set, CRCs checked."""
    out: list[KRecord] = []
    records = MemoryRecords(buf)
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc(), "kafka-python finds a bad CRC"
        out.extend((r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch)
    return out


def native_read(buf: bytes) -> list[KRecord]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in iter_records(buf)]


def kafka_header(batch: bytes) -> tuple[int, ...]:
    """Every header field but batch_length, crc and attributes."""
    f = struct.unpack_from(">qiibIhiqqqhii", batch)
    return (f[0], f[2], f[3], *f[6:])


SAMPLE: list[KRecord] = [
    (0, 1_700_000_000_000, b"key-0", b"value-0", []),
    (1, 1_700_000_000_005, None, b"no key", []),
    (2, 1_699_999_999_990, b"no value", None, []),
    (3, 1_700_000_000_001, None, None, [("trace", b"abc"), ("empty", b""), ("null", None)]),
    (4, 1_700_000_000_100, b"", b"", [("\u00e9t\u00e9", b"\x00\xff")]),
    (5, 1_700_000_000_100, b"k" * 300, b"v" * 20_000, []),  # multi-byte varints
] + [(i, 1_700_000_000_200 + i, b"%d" % i, b"repeat " * 20, []) for i in range(6, 200)]


# -- PRODUCE: Kafka to native --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_decodes_to_the_exact_records_with_the_header_kept(codec: int) -> None:
    batch = kafka_batch(SAMPLE, codec, producer=(4711, 3, 17), base_offset=0, epoch=-1)
    assert batch[22] & 0x07 == codec
    native = kafka_to_native(batch)
    validate_records(native)  # the leader's validator accepts it
    (h,) = validate_record_set(native)  # framing and CRC
    assert h.attributes == 0
    assert kafka_header(native) == kafka_header(batch)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (4711, 3, 17, len(SAMPLE))
    assert native_read(native) == SAMPLE == kafka_read(batch)


def test_records_without_headers_are_stored_in_the_four_field_form() -> None:
    native = kafka_to_native(kafka_batch(SAMPLE[:4]))
    items = msgpack.unpackb(native[HEADER_SIZE:])
    assert [len(item) for item in items] == [4, 4, 4, 5]
    assert items[3][4] == [["trace", b"abc"], ["empty", b""], ["null", None]]


def test_several_batches_end_to_end_convert_one_by_one() -> None:
    first = kafka_batch(SAMPLE[:3], CODEC_NONE, base_offset=0, epoch=2)
    second = kafka_batch([(0, 5, b"k", b"v", [])], CODEC_GZIP, producer=(1, 0, 3), base_offset=3, epoch=2)
    native = kafka_to_native(first + second)
    assert native == kafka_to_native(first) + kafka_to_native(second)
    assert [h.base_offset for h in validate_record_set(native)] == [0, 3]


@pytest.mark.skipif(not kcodec.has_snappy(), reason="no python-snappy")
def test_snappy_is_read_raw_as_librdkafka_sends_it_and_in_xerial_framing_as_java_sends_it() -> None:
    plain = kafka_batch(SAMPLE)
    records = plain[HEADER_SIZE:]
    raw = kcodec.snappy_encode(records, xerial_compatible=False)
    xerial = kcodec.snappy_encode(records, xerial_compatible=True, xerial_blocksize=4096)  # many chunks
    assert xerial.startswith(b"\x82SNAPPY\x00") and not raw.startswith(b"\x82SNAPPY\x00")
    expected = kafka_to_native(plain)
    for payload in (raw, xerial):
        assert kafka_to_native(recompress(plain, CODEC_SNAPPY, payload)) == expected
    # xerial-snappy's reader also takes two streams written one after the other
    half = len(records) // 2
    twice = kcodec.snappy_encode(records[:half]) + kcodec.snappy_encode(records[half:])
    assert kafka_to_native(recompress(plain, CODEC_SNAPPY, twice)) == expected


def test_gzip_with_several_members_is_read_whole() -> None:
    plain = kafka_batch(SAMPLE)
    records = plain[HEADER_SIZE:]
    payload = gzip.compress(records[:1000]) + gzip.compress(records[1000:])
    assert kafka_to_native(recompress(plain, CODEC_GZIP, payload)) == kafka_to_native(plain)


@pytest.mark.skipif(not (kcodec.has_lz4() and kcodec.has_zstd()), reason="no lz4 or zstandard")
def test_lz4_and_zstd_frames_as_other_clients_write_them() -> None:
    import lz4.frame
    import zstandard

    plain = kafka_batch(SAMPLE)
    records = plain[HEADER_SIZE:]
    expected = kafka_to_native(plain)
    lz4_frames = [
        lz4.frame.compress(records, block_linked=False, content_checksum=True, store_size=True),  # librdkafka
        lz4.frame.compress(records, block_linked=False, block_size=lz4.frame.BLOCKSIZE_MAX64KB, store_size=False),
    ]
    for payload in lz4_frames:
        assert kafka_to_native(recompress(plain, CODEC_LZ4, payload)) == expected
    streamed = zstandard.ZstdCompressor().compressobj()  # a frame without the content size, as zstd-jni streams
    payload = streamed.compress(records) + streamed.flush()
    assert zstandard.get_frame_parameters(payload).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert kafka_to_native(recompress(plain, CODEC_ZSTD, payload)) == expected


def test_the_timestamp_type_bit_is_cleared_as_the_log_takes_attributes_zero() -> None:
    plain = kafka_batch(SAMPLE[:3])
    native = kafka_to_native(reseal(plain, TIMESTAMP_TYPE_BIT))
    assert native == kafka_to_native(plain)
    validate_records(native)


# -- FETCH: native to Kafka ----------------------------------------------------------------------------


def test_kafka_python_reads_the_converted_batches_exactly() -> None:
    native = build_batch(
        [b"a", (b"k", None), (None, b"v", [("h", b"1"), ("n", None)]), None, (b"k" * 200, b"v" * 5000)],
        base_offset=42,
        partition_leader_epoch=7,
        timestamp_ms=1_700_000_000_000,
        producer_id=9,
        producer_epoch=2,
        base_sequence=100,
    ) + build_batch([b"next"], base_offset=47, partition_leader_epoch=8, timestamp_ms=5)
    kafka = native_to_kafka(native)
    assert kafka_read(kafka) == native_read(native)
    batches = []
    records = MemoryRecords(kafka)
    while records.has_next():
        batches.append(records.next_batch())
    assert [
        (
            b.base_offset,
            b.leader_epoch,
            b.attributes,
            b.producer_id,
            b.producer_epoch,
            b.base_sequence,
            b.last_offset_delta,
            b.records_count,
        )
        for b in batches
    ] == [
        (42, 7, 0, 9, 2, 100, 4, 5),
        (47, 8, 0, -1, -1, -1, 0, 1),
    ]
    assert [kafka_header(kafka[h.position :]) for h in iter_headers(kafka)] == [
        kafka_header(native[h.position :]) for h in iter_headers(native)
    ]


def test_a_partial_batch_at_the_end_is_dropped() -> None:
    first = build_batch([b"one", b"two"], base_offset=0, timestamp_ms=1)
    second = build_batch([b"three" * 50], base_offset=2, timestamp_ms=2)
    complete = native_to_kafka(first)
    for cut in range(len(second)):
        assert native_to_kafka(first + second[:cut]) == complete, cut
    assert native_to_kafka(b"") == b""
    assert native_to_kafka(memoryview(first + second)) == complete + native_to_kafka(second)


def test_a_malformed_stored_batch_is_corrupt() -> None:
    good = build_batch([b"x"])
    with pytest.raises(CorruptRecordError, match="impossible length"):
        native_to_kafka(good + struct.pack(">qi", 0, 3) + b"\0" * 60)
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        native_to_kafka(good + bytes(bad_magic))
    for payload in (
        b"\xc1",
        msgpack.packb([[0, 0, None]]),
        msgpack.packb([[0, 0, 5, b"v"]]),
        msgpack.packb([[0, 0, None, b"v"], [1, 0, None, b"v"]]),
        msgpack.packb([[0, 0, None, b"v", [[1, b""]]]]),
        msgpack.packb([[0, 0, None, b"v"]]) + b"\x00",
    ):
        with pytest.raises(CorruptRecordError, match="malformed records"):
            native_to_kafka(assemble_batch(0, -1, 0, 0, 0, 1, payload))


# -- round trips ---------------------------------------------------------------------------------------

_bytes_or_none = st.none() | st.binary(max_size=300)
_headers = st.lists(st.tuples(st.text(max_size=20), _bytes_or_none), max_size=4)
_int64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def native_batches(draw: st.DrawFn) -> bytes:
    """A valid stored batch, built without the converter: msgpack records with any deltas and fields."""
    n = draw(st.integers(1, 30))
    first_ts = draw(st.integers(-(2**40), 2**41))
    items: list[list[Any]] = []
    for delta in range(n):
        ts_delta = draw(st.integers(-(2**31), 2**40))
        item: list[Any] = [delta, ts_delta, draw(_bytes_or_none), draw(_bytes_or_none)]
        headers = draw(_headers)
        if headers:
            item.append([list(h) for h in headers])
        items.append(item)
    producer = draw(
        st.sampled_from([(-1, -1, -1)])
        | st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**15 - 1), st.integers(0, 2**31 - 1))
    )
    return assemble_batch(
        draw(st.integers(0, 2**62)),
        draw(st.integers(-1, 2**31 - 1)),
        n - 1,
        first_ts,
        draw(_int64),
        n,
        msgpack.packb(items, use_bin_type=True),
        producer,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(native_batches(), min_size=1, max_size=3))
def test_native_to_kafka_to_native_is_the_identity(batches: list[bytes]) -> None:
    native = b"".join(batches)
    validate_records(native)
    kafka = native_to_kafka(native)
    assert kafka_read(kafka) == native_read(native)  # what a Kafka client sees
    assert kafka_to_native(kafka) == native


@st.composite
def kafka_records(draw: st.DrawFn) -> list[KRecord]:
    n = draw(st.integers(1, 30))
    first = draw(st.integers(0, 2**41))
    return [
        (
            i,
            first + draw(st.integers(-(2**31), 2**31)) if i else first,
            draw(_bytes_or_none),
            draw(_bytes_or_none),
            draw(_headers),
        )
        for i in range(n)
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kafka_records(),
    st.integers(0, 2**40),
    st.integers(-1, 2**31 - 1),
    st.sampled_from([(-1, -1, -1), (123456789, 5, 2**31 - 10)]),
)
def test_kafka_to_native_to_kafka_is_the_identity_for_uncompressed_batches(
    records: list[KRecord], base_offset: int, epoch: int, producer: tuple[int, int, int]
) -> None:
    batch = kafka_batch(records, producer=producer, base_offset=base_offset, epoch=epoch)
    native = kafka_to_native(batch)
    assert [r[1:] for r in native_read(native)] == [r[1:] for r in kafka_read(batch)]
    assert native_to_kafka(native) == batch


@pytest.mark.parametrize("codec", [c for c in CODECS if c.values[0] != CODEC_NONE])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=kafka_records())
def test_compressed_batches_decode_to_what_kafka_python_reads(codec: int, records: list[KRecord]) -> None:
    batch = kafka_batch(records, codec)
    native = kafka_to_native(batch)
    assert native_read(native) == kafka_read(batch)
    assert native_to_kafka(native) == kafka_batch(records)  # the same batch, uncompressed


# -- refusals -----------------------------------------------------------------------------------------


def test_error_classes_carry_kafkas_codes() -> None:
    assert CorruptRecordError().code == ErrorCode.CORRUPT_MESSAGE == 2
    assert InvalidRecordError().code == ErrorCode.INVALID_RECORD == 87


@pytest.mark.parametrize("byte_index", [CRC_START, 30, HEADER_SIZE, -1])
def test_a_crc_mismatch_is_corrupt(byte_index: int) -> None:
    batch = bytearray(kafka_batch(SAMPLE[:3]))
    batch[byte_index] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC"):
        kafka_to_native(bytes(batch))


def test_torn_framing_is_corrupt() -> None:
    batch = kafka_batch(SAMPLE[:3])
    for cut in (1, 16, 17, HEADER_SIZE, len(batch) - 1):
        with pytest.raises(CorruptRecordError):
            kafka_to_native(batch + batch[:cut])
    too_short = bytearray(batch)
    struct.pack_into(">i", too_short, 8, 10)
    with pytest.raises(CorruptRecordError, match="impossible length"):
        kafka_to_native(bytes(too_short))
    magic_3 = bytearray(batch)
    magic_3[16] = 3
    with pytest.raises(CorruptRecordError, match="magic 3"):
        kafka_to_native(bytes(magic_3))


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_are_refused_as_invalid_records(magic: int) -> None:
    # A v1 message set entry: offset, size, crc, magic, attributes, timestamp, key, value.
    message = struct.pack(">bbq", magic, 0, 0)[: 2 if magic == 0 else 10] + struct.pack(">ii", -1, 1) + b"x"
    entry = struct.pack(">qiI", 0, 4 + len(message), 0) + message
    with pytest.raises(InvalidRecordError, match=f"magic {magic}.*magic version 2"):
        kafka_to_native(entry)
    with pytest.raises(InvalidRecordError, match=f"magic {magic}"):
        kafka_to_native(kafka_batch(SAMPLE[:1]) + entry)


def test_an_empty_record_set_is_invalid() -> None:
    with pytest.raises(InvalidRecordError, match="at least one record batch"):
        kafka_to_native(b"")


@pytest.mark.parametrize(
    ("bits", "message"),
    [
        (TRANSACTIONAL_BIT, "transactional"),
        (CONTROL_BIT, "control"),
        (0x40, "attributes 0x40"),
        (0x05, "unknown compression codec 5"),
        (0x07, "unknown compression codec 7"),
    ],
)
def test_attributes_the_log_cannot_carry_are_invalid(bits: int, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        kafka_to_native(reseal(kafka_batch(SAMPLE[:2]), bits))


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_a_payload_that_does_not_decompress_is_invalid(codec: int) -> None:
    plain = kafka_batch(SAMPLE[:3])
    for payload in (b"\x82SNAPPY\x00" + b"\0" * 8 + b"\x00\x00\x10\x00abc", b"not compressed at all", b""):
        with pytest.raises(InvalidRecordError, match="do not decompress"):
            kafka_to_native(recompress(plain, codec, payload))


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD])
def test_a_truncated_compressed_payload_is_invalid(codec: int) -> None:
    plain = kafka_batch(SAMPLE)
    payload = _KP_ENCODERS[codec](plain[HEADER_SIZE:])
    with pytest.raises(InvalidRecordError):
        kafka_to_native(recompress(plain, codec, payload[: len(payload) // 2]))


def test_record_count_must_match_last_offset_delta() -> None:
    batch = bytearray(kafka_batch(SAMPLE[:3]))
    struct.pack_into(">i", batch, 57, 4)
    with pytest.raises(InvalidRecordError, match="record_count 4 does not match last_offset_delta 2"):
        kafka_to_native(reseal(batch))


def test_inner_offsets_must_run_from_zero_without_gaps() -> None:
    records = [(0, 1, None, b"a", []), (0, 1, None, b"b", []), (2, 1, None, b"c", [])]
    with pytest.raises(InvalidRecordError, match="inner record offsets must be consecutive"):
        kafka_to_native(kafka_batch(records))


def _records_bytes(records: list[KRecord]) -> bytes:
    return kafka_batch(records)[HEADER_SIZE:]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r[: r[0] // 2 + 1], "end before"),  # only the first of the two records
        (lambda r: r[:-1], "past the payload"),  # the last record ends early
        (lambda r: r + b"\x00", "bytes follow"),  # something after the last record
        (lambda r: bytes([r[0] + 2]) + r[1:], "declares"),  # record 0 claims one more byte
        (lambda r: bytes([0x7F]) + r[1:], "past the payload"),  # record 0 claims more than there is
        (lambda r: b"\x00" + r[1:], "length 0"),
        (lambda r: b"\xff\xff\xff\xff\xff\xff" + r[1:], "varint is longer"),
    ],
)
def test_records_that_do_not_decode_are_invalid(edit: Any, message: str) -> None:
    records = [(0, 10, b"k", b"v", []), (1, 10, None, b"w", [("h", None)])]
    plain = kafka_batch(records)
    with pytest.raises(InvalidRecordError, match=message):
        kafka_to_native(reseal(plain[:HEADER_SIZE] + edit(_records_bytes(records))))


def test_a_header_key_must_be_utf8() -> None:
    records = [(0, 10, b"k", b"v", [("\u00e9", b"x")])]
    raw = _records_bytes(records).replace("\u00e9".encode(), b"\xff\xfe")
    with pytest.raises(InvalidRecordError, match="not UTF-8"):
        kafka_to_native(reseal(kafka_batch(records)[:HEADER_SIZE] + raw))


def test_negative_lengths_other_than_minus_one_read_as_null_as_kafka_reads_them() -> None:
    records = [(0, 10, None, None, [])]
    raw = _records_bytes(records)
    assert raw[4:6] == b"\x01\x01"  # key and value lengths -1
    edited = raw[:4] + b"\x03\x05" + raw[6:]  # -2 and -3
    native = kafka_to_native(reseal(kafka_batch(records)[:HEADER_SIZE] + edited))
    assert native_read(native) == [(0, 10, None, None, [])]


# -- layering -----------------------------------------------------------------------------------------


def test_the_module_imports_only_the_wire_layer_and_third_party_libraries() -> None:
    source = Path(__file__).resolve().parents[2] / "protocol" / "kafka_records.py"
    tree = ast.parse(source.read_text())
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    local = {m for m in modules if m.split(".")[0] in {"broker", "client", "cluster", "fetcher", "metrics", "sim"}}
    assert not local, local


def test_an_offset_delta_in_a_longer_encoding_than_needed_is_accepted_as_kafka_accepts_it() -> None:
    records = [(0, 10, None, b"v", [])]
    plain = kafka_batch(records)
    raw = _records_bytes(records)
    assert raw == b"\x0e\x00\x00\x00\x01\x02v\x00"  # length 7, attributes, ts delta 0, offset delta 0, ...
    longer = b"\x10\x00\x00\x80\x00\x01\x02v\x00"  # offset delta 0 in two bytes, length 8
    assert kafka_to_native(reseal(plain[:HEADER_SIZE] + longer)) == kafka_to_native(plain)


def test_batches_past_the_small_varint_table_convert_both_ways() -> None:
    records: list[KRecord] = [(i, 1000 + i, None, b"x", []) for i in range(9000)]
    records.append((9000, 5, b"k" * 9000, b"v" * 70_000, [("h" * 200, b"w" * 9000)]))
    batch = kafka_batch(records)
    native = kafka_to_native(batch)
    assert native_read(native) == records
    assert native_to_kafka(native) == batch


@pytest.mark.parametrize("codec", [c for c in CODECS if c.values[0] != CODEC_NONE])
def test_records_that_decompress_past_the_limit_are_refused_without_being_expanded(codec: int) -> None:
    # A batch whose 200 records of 10 KiB zeros compress to little but expand to about 2 MB.
    bomb = kafka_batch([(i, 1_700_000_000_000, None, bytes(10240), []) for i in range(200)], codec)
    assert len(bomb) < 200_000
    assert len(native_read(kafka_to_native(bomb))) == 200  # under the default limit it converts
    with pytest.raises(InvalidRecordError, match="more than 1000000 bytes"):
        kafka_to_native(bomb, max_bytes=1_000_000)


def test_the_decompression_limit_holds_for_all_batches_of_a_request_together() -> None:
    batch = kafka_batch([(0, 1_700_000_000_000, None, bytes(600_000), [])], CODEC_GZIP)
    kafka_to_native(batch, max_bytes=1_000_000)
    with pytest.raises(InvalidRecordError, match="decompress to more than"):
        kafka_to_native(batch + batch, max_bytes=1_000_000)


# -- what a batch may cost: its size as sent, its record count ------------------------------------------


def test_a_compressed_batch_is_checked_against_max_message_bytes_by_the_size_it_was_sent_in() -> None:
    # Kafka accepts a 300-byte gzip batch of 200,000 bytes on a topic whose max.message.bytes is 100,000.
    batch = kafka_batch([(i, 1_700_000_000_000, None, b"\x00" * 2000, []) for i in range(100)], CODEC_GZIP)
    assert len(batch) < 1000
    (converted,) = iter_kafka_to_native(batch, max_batch_bytes=100_000)
    assert len(converted) > 200_000 and [r.value for r in iter_records(converted)] == [b"\x00" * 2000] * 100
    with pytest.raises(MessageTooLargeError, match="max.message.bytes=500"):
        list(iter_kafka_to_native(batch, max_batch_bytes=500))


def test_a_batch_of_more_records_than_a_batch_may_hold_is_refused_before_it_is_decompressed() -> None:
    # The header says how many records follow: 2,000,000 empty records were 1.5 MB of zstd, and seconds of
    # conversion on the event loop. The count is checked first, so a payload that is not even zstd (the
    # CRC is right: the producer made it so) is refused for its count, not its codec.
    too_many = MAX_RECORDS_PER_BATCH + 1
    header = struct.pack(">hiqqqhii", CODEC_ZSTD, too_many - 1, 0, 0, -1, -1, -1, too_many)
    body = header + b"not zstd at all"
    batch = struct.pack(">qiib", 0, 9 + len(body), -1, 2) + struct.pack(">I", crc32c(body)) + body
    with pytest.raises(InvalidRecordError, match=f"{too_many} records, more than the {MAX_RECORDS_PER_BATCH}"):
        kafka_to_native(batch)
    stored = assemble_batch(0, -1, too_many - 1, 0, 0, too_many, msgpack.packb([[0, 0, None, b""]] * too_many))
    with pytest.raises(InvalidRecordError, match="more than"):
        validate_records(stored)
