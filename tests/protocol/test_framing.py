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


def feed(decoder: FrameDecoder, data: bytes, chunk: int = 65536) -> list[bytes]:
    """Drive the decoder as asyncio's BufferedProtocol does, `chunk` bytes per read at most."""
    frames: list[bytes] = []
    pos = 0
    while pos < len(data):
        target = decoder.get_buffer()
        n = min(len(target), chunk, len(data) - pos)
        target[:n] = data[pos : pos + n]
        del target
        decoder.buffer_updated(n)
        pos += n
        while (frame := decoder.next_frame()) is not None:
            frames.append(bytes(frame))
    return frames


def test_a_huge_length_prefix_costs_only_what_arrived() -> None:
    # given the 5 bytes of the memory bomb: a 100 MB length prefix and one byte of body
    decoder = FrameDecoder()
    assert feed(decoder, bytes.fromhex("0640000092")) == []
    # then the decoder holds its small initial scratch, not the announced 100 MB
    assert decoder.pending
    assert decoder.held_bytes <= 16 * 1024


def test_an_idle_decoder_holds_no_buffer_and_gives_its_scratch_back_when_drained() -> None:
    decoder = FrameDecoder()
    assert decoder.held_bytes == 0
    assert feed(decoder, encode_frame(b"x" * 100)) == [b"x" * 100]
    assert decoder.held_bytes > 0 and not decoder.pending
    assert decoder.release() and decoder.held_bytes == 0
    # and it still works afterwards
    assert feed(decoder, encode_frame(b"again")) == [b"again"]


def test_a_large_frame_holds_at_most_twice_what_has_arrived() -> None:
    body = bytes(range(256)) * 4096 * 4  # 4 MiB
    wire = encode_frame(body)
    decoder = FrameDecoder()
    received = 0
    for cut in (1000, 70_000, 300_000, 1_000_000, 2_500_000):
        assert feed(decoder, wire[received:cut], chunk=8192) == []
        received = cut
        assert decoder.held_bytes <= max(2 * received, 256 * 1024) + 16 * 1024
    assert feed(decoder, wire[received:]) == [body]


def test_a_prefix_that_is_refused_is_refused_however_the_bytes_come_in() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000, scratch_bytes=64, initial_bytes=16)
    with pytest.raises(FrameTooLargeError):
        feed(decoder, (5000).to_bytes(4, "big") + b"z" * 100, chunk=16)


@given(st.lists(st.binary(max_size=3000), max_size=10), st.lists(st.integers(1, 700), min_size=1, max_size=30))
def test_a_trusting_decoder_round_trips_too(bodies: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(encode_frame(b) for b in bodies)
    decoder = FrameDecoder(scratch_bytes=256, initial_bytes=64, trust_prefix=True)
    out: list[bytes] = []
    pos = i = 0
    while pos < len(wire):
        out += feed(decoder, wire[pos : pos + cuts[i % len(cuts)]])
        pos += cuts[i % len(cuts)]
        i += 1
    assert out == bodies and decoder.buffered == 0


@given(st.lists(st.binary(max_size=3000), max_size=10), st.lists(st.integers(1, 700), min_size=1, max_size=30))
def test_growing_buffers_round_trip_whatever_the_reads(bodies: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(encode_frame(b) for b in bodies)
    decoder = FrameDecoder(scratch_bytes=256, initial_bytes=16)
    out: list[bytes] = []
    pos = i = 0
    while pos < len(wire):
        out += feed(decoder, wire[pos : pos + cuts[i % len(cuts)]], chunk=cuts[(i + 1) % len(cuts)])
        pos += cuts[i % len(cuts)]
        i += 1
    assert out == bodies and decoder.buffered == 0
