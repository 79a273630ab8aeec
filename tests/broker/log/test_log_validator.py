"""The leader's check of a producer's records (Kafka's LogValidator): batches whose CRC is right but whose
contents are poison are refused with INVALID_RECORD, naming the rule; good batches pass."""

from __future__ import annotations

import msgpack
import pytest

from broker.log.log_validator import InvalidRecordError, validate_records
from protocol.errors import CorruptRecordError, ErrorCode
from protocol.record_batch import assemble_batch, build_batch


def batch_with_payload(payload: bytes, count: int = 1, last_delta: int | None = None, attributes: int = 0) -> bytes:
    """A batch with a correct CRC around any payload: what a broken or hostile producer can send."""
    raw = bytearray(assemble_batch(0, -1, count - 1 if last_delta is None else last_delta, 0, 0, count, payload))
    if attributes:
        import struct

        from crc32c import crc32c

        from protocol.record_batch import CRC_START

        struct.pack_into(">h", raw, 21, attributes)
        struct.pack_into(">I", raw, 17, crc32c(bytes(raw[CRC_START:])))
    return bytes(raw)


def records(*items: object) -> bytes:
    return msgpack.packb(list(items), use_bin_type=True)


POISON = {
    "garbage payload": batch_with_payload(b"\xc1\xc1\xc1"),
    "empty payload": batch_with_payload(b""),
    "payload not an array": batch_with_payload(msgpack.packb({"a": 1})),
    "trailing bytes after the array": batch_with_payload(records([0, 0, None, b"v"]) + b"\x00"),
    "fewer records than the header says": batch_with_payload(records([0, 0, None, b"v"]), count=2),
    "count and last delta disagree": batch_with_payload(records([0, 0, None, b"v"], [1, 0, None, b"w"]), 2, 0),
    "record not an array": batch_with_payload(records(b"value")),
    "record of 3 fields": batch_with_payload(records([0, 0, b"v"])),
    "repeated offset delta": batch_with_payload(records([0, 0, None, b"v"], [0, 0, None, b"w"]), count=2),
    "offset deltas out of order": batch_with_payload(records([1, 0, None, b"v"], [0, 0, None, b"w"]), count=2),
    "bool offset delta": batch_with_payload(records([False, 0, None, b"v"])),
    "string value": batch_with_payload(records([0, 0, None, "text"])),
    "float timestamp delta": batch_with_payload(records([0, 1.5, None, b"v"])),
    "int key": batch_with_payload(records([0, 0, 7, b"v"])),
    "bad headers": batch_with_payload(records([0, 0, None, b"v", [["h"]]])),
    "compression bit set": batch_with_payload(records([0, 0, None, b"v"]), attributes=1),
    "transactional bit set": batch_with_payload(records([0, 0, None, b"v"]), attributes=0x10),
}


@pytest.mark.parametrize("name", sorted(POISON))
def test_a_poison_batch_with_a_valid_crc_is_refused_as_invalid_record(name: str) -> None:
    with pytest.raises(InvalidRecordError) as info:
        validate_records(POISON[name])
    assert info.value.code == ErrorCode.INVALID_RECORD
    assert "batch at byte 0" in str(info.value)


def test_a_poison_batch_behind_a_good_one_is_found_and_named_by_position() -> None:
    good = build_batch([b"a", b"b"])
    with pytest.raises(InvalidRecordError, match=f"batch at byte {len(good)}"):
        validate_records(good + POISON["repeated offset delta"])


def test_good_batches_pass_whatever_they_carry() -> None:
    validate_records(build_batch([b"v"]))
    validate_records(build_batch([None, b"", (b"k", None), (b"k", b"v", [("h", b"x"), ("n", None)])] * 50))
    validate_records(build_batch([b"x" * 100] * 160) + build_batch([b"y" * 16000]))


def test_broken_framing_stays_a_corrupt_message() -> None:
    with pytest.raises(CorruptRecordError):
        validate_records(build_batch([b"v"])[:-1])
