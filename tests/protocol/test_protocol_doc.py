"""docs/protocol.md must describe exactly the schemas the code speaks."""

from __future__ import annotations

from pathlib import Path

from protocol.codec import packb, to_wire
from protocol.errors import ErrorCode
from protocol.framing import encode_frame
from protocol.messages import MetadataRequest, RequestHeader
from protocol.schema_doc import BEGIN, ERRORS_BEGIN, ERRORS_END, render, render_errors

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def test_the_generated_schema_section_matches_the_code() -> None:
    text = DOC.read_text()
    section = text[text.index(BEGIN) :]
    assert section == render(), "docs/protocol.md is stale: regenerate with python -m protocol.schema_doc --write"


def test_every_error_code_is_in_the_documented_table() -> None:
    text = DOC.read_text()
    block = text[text.index(ERRORS_BEGIN) : text.index(ERRORS_END) + len(ERRORS_END) + 1]
    assert block == render_errors(), "docs/protocol.md is stale: regenerate with python -m protocol.schema_doc --write"
    for code in ErrorCode:
        assert f"| {int(code)} | {code.name} |" in block


def test_the_documented_example_bytes_are_what_the_codec_produces() -> None:
    frame = encode_frame(packb([to_wire(RequestHeader(3, 0, 1, "cli")), to_wire(MetadataRequest(["orders"]))]))
    documented = "00 00 00 46 92 84 a7 61 70 69 5f 6b 65 79 03"
    assert " ".join(f"{b:02x}" for b in frame).startswith(documented)
    assert len(frame) == 4 + 0x46


# -- what the prose claims, checked against the code that answers -------------------------------------

README = DOC.parents[1] / "README.md"


def _prose(path: Path) -> str:
    """The text with its line breaks and runs of spaces folded, so a claim can be found across lines."""
    return " ".join(path.read_text().split())


def test_a_last_fetched_epoch_newer_than_the_leaders_gets_minus_one_as_documented(tmp_path: Path) -> None:
    from storage.epoch_cache import LeaderEpochFileCache

    claim = "when `last_fetched_epoch` is newer than every epoch the leader has, the lookup answers `-1, -1` instead"
    assert claim in _prose(DOC)
    cache = LeaderEpochFileCache(None)
    cache.assign(1, 0)
    cache.assign(3, 10)
    # the leader's largest epoch at or below 5 is 3, ending at the log end: the doc used to promise that
    assert cache.end_offset_for(5, 20) == (-1, -1)
    assert cache.end_offset_for(2, 20) == (1, 10)


def test_a_batch_at_the_old_producer_epoch_is_appended_until_the_new_epoch_was_seen_as_documented(
    tmp_path: Path,
) -> None:
    import pytest

    from protocol.errors import KafkaError
    from storage.producer_state import ProducerBatch, ProducerStateManager

    claim = "after a bump 0 → 1 a batch at epoch 0 is still appended until one at epoch 1 has been"
    assert claim in _prose(DOC)
    state = ProducerStateManager(tmp_path)
    state.update(ProducerBatch(7, 0, 0, 0, 0, 0))
    # INIT_PRODUCER_ID gave the producer epoch 1 (at the controller); this leader has not seen a batch at it
    assert state.check(ProducerBatch(7, 0, 1, 1, 1, 0)) is None
    state.update(ProducerBatch(7, 0, 1, 1, 1, 0))
    state.update(ProducerBatch(7, 1, 0, 2, 2, 0))
    with pytest.raises(KafkaError) as info:
        state.check(ProducerBatch(7, 0, 2, 3, 3, 0))
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_legacy_magic_is_refused_as_invalid_record_as_documented() -> None:
    import struct

    import pytest
    from crc32c import crc32c

    from protocol.errors import KafkaError
    from protocol.record_batch import CRC_START, build_batch
    from storage.log_validator import validate_records

    claim = (
        "a PRODUCE batch of magic 0 or 1 (Kafka's legacy formats) gets 87 INVALID_RECORD, "
        "any other value 2 CORRUPT_MESSAGE"
    )
    assert claim in _prose(DOC)
    for magic, code in ((0, ErrorCode.INVALID_RECORD), (1, ErrorCode.INVALID_RECORD), (3, ErrorCode.CORRUPT_MESSAGE)):
        raw = bytearray(build_batch([b"v"]))
        raw[16] = magic  # outside the CRC, which stays valid
        struct.pack_into(">I", raw, 17, crc32c(bytes(raw[CRC_START:])))
        with pytest.raises(KafkaError) as info:
            validate_records(bytes(raw))
        assert info.value.code == code, magic


def test_the_readme_says_what_a_woken_zombie_does_with_the_writes_it_queued() -> None:
    row = next(line for line in README.read_text().splitlines() if line.startswith("| `pause` |"))
    assert "must refuse them" not in row
    # what the chaos runs showed: part of the queued writes appended at the old epoch, none acknowledged
    assert "acknowledges none of them" in row and "at its old epoch" in row and "truncated away" in row
