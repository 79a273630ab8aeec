"""The leader's check of a producer's records (Kafka's LogValidator): batches whose CRC is right but whose
contents are poison are refused with INVALID_RECORD, naming the rule; good batches pass."""

from __future__ import annotations

import msgpack
import pytest

from protocol.errors import CorruptRecordError, ErrorCode
from protocol.record_batch import assemble_batch, build_batch
from storage.log_validator import InvalidRecordError, validate_records


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


def batch_with_header(**fields: int) -> bytes:
    """A one-record batch with a correct CRC whose header fields are set to `fields` (magic outside the CRC)."""
    import struct

    from crc32c import crc32c

    from protocol.record_batch import _HEADER, CRC_START

    raw = bytearray(build_batch([b"v"], timestamp_ms=1_000))
    names = [
        "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes", "last_offset_delta",
        "first_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count",
    ]  # fmt: skip
    values = dict(zip(names, _HEADER.unpack_from(raw), strict=True))
    values.update(fields)
    struct.pack_into(_HEADER.format, raw, 0, *values.values())
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[CRC_START:])))
    return bytes(raw)


HEADER_POISON = {
    # Kafka's ProduceRequest.validateRecords: produce v3+ carries magic 2 only, InvalidRecordException (87).
    "magic 1": batch_with_header(magic=1),
    "magic 0": batch_with_header(magic=0),
    # Kafka: a producer id below -1 does not exist; -1 means no producer, so no epoch and no sequence either.
    "producer id -2": batch_with_header(producer_id=-2),
    "producer epoch -5": batch_with_header(producer_id=7, producer_epoch=-5, base_sequence=0),
    # Kafka's LogValidator.validateBatch: "Invalid sequence number ... in record batch with producerId".
    "producer id without a sequence": batch_with_header(producer_id=7, producer_epoch=0, base_sequence=-1),
}
POISON.update(HEADER_POISON)


@pytest.mark.parametrize("name", sorted(HEADER_POISON))
def test_header_fields_that_contradict_each_other_are_refused_as_invalid_record(name: str) -> None:
    with pytest.raises(InvalidRecordError, match="batch at byte 0"):
        validate_records(HEADER_POISON[name])


def test_a_magic_kafka_does_not_know_stays_a_corrupt_message() -> None:
    # Kafka's ByteBufferLogInputStream: "Invalid magic found in record" (CorruptRecordException) for magic > 2.
    with pytest.raises(CorruptRecordError):
        validate_records(batch_with_header(magic=3))


def test_max_timestamp_is_recomputed_from_the_records_as_kafka_does() -> None:
    from protocol.record_batch import is_crc_valid, read_header

    # given a batch whose max_timestamp (5) lies below its first_timestamp (1000), with a correct CRC
    bad = batch_with_header(max_timestamp=5)
    fixed = validate_records(bad)
    header = read_header(fixed)
    # the leader stores the largest record timestamp instead, with the CRC recomputed over the new value
    assert header.max_timestamp == 1_000 and is_crc_valid(fixed, header)
    assert bytes(fixed)[:35] == bad[:17] + bytes(fixed)[17:21] + bad[21:35]
    good = build_batch([b"v"], timestamp_ms=1_000)
    assert validate_records(good) is good, "a consistent batch is passed on as is, not copied"


def test_a_wrong_max_timestamp_does_not_launder_a_bad_crc() -> None:
    bad = bytearray(batch_with_header(max_timestamp=5))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        validate_records(bytes(bad))


def test_without_a_producer_id_the_epoch_and_sequence_are_not_read_as_in_kafka() -> None:
    # aiokafka's non-idempotent producer writes base_sequence 0 with producer_id -1; Kafka accepts it.
    for records in (
        batch_with_header(producer_id=-1, base_sequence=0),
        batch_with_header(producer_id=-1, producer_epoch=0),
    ):
        validate_records(records)


def test_on_a_log_append_time_topic_the_leader_stamps_each_batch_with_its_append_time() -> None:
    from protocol.record_batch import LOG_APPEND_TIME, is_crc_valid, iter_headers, iter_records

    produced = build_batch([b"a", b"b"], timestamp_ms=1_000) + build_batch([b"c"], timestamp_ms=2_000)
    stamped = validate_records(produced, log_append_time_ms=9_000)
    headers = list(iter_headers(stamped))
    # the timestamp-type bit and the append time as max timestamp, the CRC recomputed; the rest as sent
    assert [(h.attributes, h.first_timestamp, h.max_timestamp) for h in headers] == [
        (8, 1_000, 9_000),
        (8, 2_000, 9_000),
    ]
    assert all(is_crc_valid(stamped, h) for h in headers)
    # and a reader gives every record the append time, as LogAppendTime
    assert [(r.value, r.timestamp, r.timestamp_type) for r in iter_records(stamped)] == [
        (b"a", 9_000, LOG_APPEND_TIME),
        (b"b", 9_000, LOG_APPEND_TIME),
        (b"c", 9_000, LOG_APPEND_TIME),
    ]


def test_a_producer_may_not_set_the_timestamp_type_bit_itself() -> None:
    produced = batch_with_payload(records([0, 0, None, b"v"]), attributes=0x08)
    for log_append_time_ms in (None, 9_000):
        with pytest.raises(InvalidRecordError, match="attributes 0x8"):
            validate_records(produced, log_append_time_ms)


def test_a_stamped_batch_with_a_bad_crc_stays_corrupt() -> None:
    bad = bytearray(build_batch([b"v"], timestamp_ms=1_000))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        validate_records(bytes(bad), log_append_time_ms=9_000)
