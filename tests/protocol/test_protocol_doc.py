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
