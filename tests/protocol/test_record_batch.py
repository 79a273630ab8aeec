"""Record batches: header layout, CRC coverage, leader stamping and record iteration."""

from __future__ import annotations

import msgpack
import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import CorruptRecordError
from protocol.record_batch import (
    CRC_START,
    HEADER_SIZE,
    build_batch,
    iter_headers,
    iter_records,
    stamp,
    validate_record_set,
)


def test_a_built_batch_has_the_documented_header() -> None:
    batch = build_batch([b"a", (b"k", b"v"), b"c"], base_offset=10, partition_leader_epoch=4, timestamp_ms=1234)
    (h,) = validate_record_set(batch)
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset_delta, h.record_count) == (10, 4, 2, 3)
    assert (h.first_timestamp, h.max_timestamp, h.magic, h.attributes) == (1234, 1234, 2, 0)
    assert h.size_in_bytes == len(batch)
    assert h.last_offset == 12 and h.next_offset == 13
    assert batch[:8] == (10).to_bytes(8, "big")


def test_records_come_back_with_absolute_offsets_keys_and_values() -> None:
    batch = build_batch([b"a", (b"k", b"v"), None], base_offset=7, timestamp_ms=99)
    records = list(iter_records(batch))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (7, None, b"a", 99),
        (8, b"k", b"v", 99),
        (9, None, None, 99),
    ]


@pytest.mark.parametrize("byte_index", [CRC_START, 30, HEADER_SIZE, -1])
def test_a_flipped_bit_after_the_crc_field_is_detected(byte_index: int) -> None:
    batch = bytearray(build_batch([b"payload-1", b"payload-2"]))
    batch[byte_index] ^= 0x01
    with pytest.raises(CorruptRecordError):
        validate_record_set(batch)


def test_stamping_offset_and_epoch_keeps_the_crc_valid() -> None:
    batch = bytearray(build_batch([b"x", b"y"]))
    (h,) = validate_record_set(batch)
    stamp(batch, h, base_offset=500, partition_leader_epoch=9)
    (h2,) = validate_record_set(batch)
    assert (h2.base_offset, h2.partition_leader_epoch, h2.crc) == (500, 9, h.crc)


def test_a_truncated_record_set_is_corrupt() -> None:
    data = build_batch([b"one"]) + build_batch([b"two"])
    with pytest.raises(CorruptRecordError):
        list(iter_headers(data[:-1]))
    with pytest.raises(CorruptRecordError):
        list(iter_headers(data[: HEADER_SIZE - 1]))


def test_wrong_magic_is_corrupt() -> None:
    batch = bytearray(build_batch([b"x"]))
    batch[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_record_set(batch)


@given(st.lists(st.lists(st.binary(max_size=64), min_size=1, max_size=10), min_size=1, max_size=10))
def test_concatenated_batches_iterate_in_order(batches: list[list[bytes]]) -> None:
    data = b""
    offset = 0
    for values in batches:
        data += build_batch(values, base_offset=offset)  # type: ignore[arg-type]
        offset += len(values)
    headers = validate_record_set(data)
    assert [h.base_offset for h in headers] == [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    assert [r.value for r in iter_records(data)] == [v for values in batches for v in values]


def test_headers_round_trip_and_a_record_without_headers_keeps_the_four_element_form() -> None:
    batch = build_batch(
        [(b"k", b"v", [("trace", b"1"), ("trace", b"2"), ("empty", None)]), (b"k2", b"v2", []), b"plain"],
        timestamp_ms=5,
    )
    records = list(iter_records(batch))
    assert [r.headers for r in records] == [(("trace", b"1"), ("trace", b"2"), ("empty", None)), (), ()]
    assert [(r.key, r.value) for r in records] == [(b"k", b"v"), (b"k2", b"v2"), (None, b"plain")]
    # A batch without headers is byte-identical to one built from plain (key, value) pairs.
    assert build_batch([(b"k2", b"v2", [])], timestamp_ms=5) == build_batch([(b"k2", b"v2")], timestamp_ms=5)


def test_malformed_headers_are_corrupt() -> None:
    payload = msgpack.packb([[0, 0, None, b"v", [["name"]]]], use_bin_type=True)
    good = build_batch([b"v"], timestamp_ms=0)
    body = good[CRC_START:HEADER_SIZE] + payload
    batch = good[:8] + (len(body) + 9).to_bytes(4, "big") + good[12:17] + crc32c(body).to_bytes(4, "big") + body
    with pytest.raises(CorruptRecordError, match="malformed record headers"):
        list(iter_records(batch))
