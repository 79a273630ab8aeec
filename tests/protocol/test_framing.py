"""Framing: a byte stream in, whole frame bodies out, however the bytes were split."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.framing import FrameDecoder, FrameTooLargeError, encode_frame


def test_a_frame_split_across_many_reads_comes_out_whole() -> None:
    decoder = FrameDecoder()
    wire = encode_frame(b"hello world")
    for i in range(len(wire) - 1):
        decoder.receive_data(wire[i : i + 1])
        assert decoder.next_frame() is None
    decoder.receive_data(wire[-1:])
    assert decoder.next_frame() == b"hello world"
    assert decoder.next_frame() is None


def test_several_frames_in_one_read_come_out_in_order() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(b"a") + encode_frame(b"") + encode_frame(b"ccc") + encode_frame(b"d")[:3])
    assert decoder.next_frame() == b"a"
    assert decoder.next_frame() == b""
    assert decoder.next_frame() == b"ccc"
    assert decoder.next_frame() is None
    decoder.receive_data(encode_frame(b"d")[3:])
    assert decoder.next_frame() == b"d"


def test_an_oversize_length_prefix_is_rejected_before_the_body_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    decoder.receive_data((1025).to_bytes(4, "big"))
    with pytest.raises(FrameTooLargeError) as info:
        decoder.next_frame()
    assert info.value.size == 1025
    assert "socket.request.max.bytes" in str(info.value)


def test_a_frame_exactly_at_the_limit_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_bytes=8)
    decoder.receive_data(encode_frame(b"12345678"))
    assert decoder.next_frame() == b"12345678"


@given(st.lists(st.binary(max_size=300), max_size=20), st.lists(st.integers(1, 50), min_size=1, max_size=30))
def test_any_split_of_any_frames_round_trips(bodies: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(encode_frame(b) for b in bodies)
    decoder = FrameDecoder()
    out: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(wire):
        step = cuts[i % len(cuts)]
        decoder.receive_data(wire[pos : pos + step])
        pos += step
        i += 1
        while (frame := decoder.next_frame()) is not None:
            out.append(frame)
    assert out == bodies
    assert decoder.buffered == 0


@given(
    st.lists(st.binary(max_size=300), max_size=20),
    st.lists(st.integers(1, 120), min_size=1, max_size=30),
    st.booleans(),
)
def test_frames_larger_than_the_scratch_buffer_round_trip(
    bodies: list[bytes], cuts: list[int], pull_late: bool
) -> None:
    """With a 64-byte scratch buffer most frames take the frame-sized buffer path and compaction runs."""
    wire = b"".join(encode_frame(b) for b in bodies)
    decoder = FrameDecoder(scratch_bytes=64)
    out: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(wire):
        step = cuts[i % len(cuts)]
        decoder.receive_data(wire[pos : pos + step])
        pos += step
        i += 1
        if not pull_late:
            while (frame := decoder.next_frame()) is not None:
                out.append(bytes(frame))
    while (frame := decoder.next_frame()) is not None:
        out.append(bytes(frame))
    assert out == bodies


def test_the_buffered_protocol_path_reads_a_large_frame_into_its_own_buffer() -> None:
    """get_buffer/buffer_updated as asyncio's BufferedProtocol drives them, a 1 MiB frame in 64 KiB reads."""
    body = bytes(range(256)) * 4096
    wire = encode_frame(body) + encode_frame(b"tail")
    decoder = FrameDecoder(scratch_bytes=1024)
    frames: list[bytes] = []
    pos = 0
    while pos < len(wire):
        target = decoder.get_buffer()
        assert len(target) > 0
        n = min(len(target), 65536, len(wire) - pos)
        target[:n] = wire[pos : pos + n]
        del target
        decoder.buffer_updated(n)
        pos += n
        while (frame := decoder.next_frame()) is not None:
            frames.append(bytes(frame))
    assert frames == [body, b"tail"]
