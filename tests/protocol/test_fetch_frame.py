"""FETCH v1's layout: the msgpack part, then each partition's records as they are."""

from __future__ import annotations

import struct

import pytest

from protocol.codec import packb, to_wire
from protocol.errors import ErrorCode, ProtocolError
from protocol.fetch_frame import encode_fetch_response, fetch_response_of, is_records_apart, split_frame
from protocol.messages import ErrorResponse, FetchPartitionResponse, FetchResponse
from protocol.record_batch import build_batch

pytestmark = pytest.mark.timeout(10)


def body_of(buffers: list[bytes]) -> bytes:
    """The frame body the buffers make, checking the length prefix covers exactly that."""
    (length,) = struct.unpack(">I", buffers[0])
    body = b"".join(buffers[1:])
    assert length == len(body)
    return body


def test_records_travel_as_the_same_objects_and_come_back_as_views_of_the_frame() -> None:
    a, b = build_batch([b"a1", b"a2"]), build_batch([b"b1"], base_offset=7)
    response = FetchResponse(
        partitions=[
            FetchPartitionResponse("t", 0, high_watermark=2, records=a),
            FetchPartitionResponse("t", 1, error_code=ErrorCode.OFFSET_OUT_OF_RANGE),
            FetchPartitionResponse("u", 0, high_watermark=8, records=b),
        ],
        session_id=5,
    )
    buffers = encode_fetch_response(41, response)
    assert buffers[-2] is a and buffers[-1] is b  # handed to the socket as read, not packed
    frame = bytearray(body_of(buffers))
    assert is_records_apart(frame)

    header, body, parts = split_frame(frame)
    assert header == {"correlation_id": 41, "records_sizes": [len(a), 0, len(b)]}
    decoded = fetch_response_of(body, parts)
    assert [bytes(p.records) for p in decoded.partitions] == [a, b"", b]
    assert isinstance(decoded.partitions[0].records, memoryview)
    assert decoded.partitions[0].records.obj is frame  # a view, no copy
    assert (decoded.session_id, decoded.partitions[1].error_code) == (5, ErrorCode.OFFSET_OUT_OF_RANGE)
    assert response.partitions[0].records is a  # the broker's response object is left as it was


def test_an_error_answer_has_the_same_layout_and_decodes_with_no_partitions() -> None:
    frame = body_of(encode_fetch_response(3, ErrorResponse(int(ErrorCode.INVALID_REQUEST), "bad")))
    header, body, parts = split_frame(frame)
    decoded = fetch_response_of(body, parts)
    assert (header["records_sizes"], decoded.error_code, decoded.partitions) == ([], ErrorCode.INVALID_REQUEST, [])


def test_a_version_0_body_is_told_apart_by_its_first_byte() -> None:
    v0 = packb([{"correlation_id": 1}, to_wire(FetchResponse())])
    assert not is_records_apart(v0)


def v1_frame(header: dict[str, object], body: object, tail: bytes) -> bytes:
    meta = packb([header, body])
    return struct.pack(">I", len(meta)) + meta + tail


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"\x00\x00", "no length"),
        (struct.pack(">I", 100) + b"\x90", "announces a 100-byte msgpack part"),
        (v1_frame({"correlation_id": 1}, {}, b""), "records_sizes"),
        (v1_frame({"correlation_id": 1, "records_sizes": [-1]}, {}, b""), "records_sizes"),
        (v1_frame({"correlation_id": 1, "records_sizes": [4]}, {}, b"abc"), "add up to 4 bytes; 3 follow"),
        (v1_frame({"correlation_id": 1, "records_sizes": [3]}, {}, b"abcd"), "add up to 3 bytes; 4 follow"),
        (struct.pack(">I", 1) + b"\x01", "2-element array"),
    ],
)
def test_a_malformed_v1_answer_is_a_protocol_error(frame: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        split_frame(frame)


def test_sizes_that_do_not_match_the_partitions_or_records_inside_the_msgpack_are_refused() -> None:
    one = to_wire(FetchResponse(partitions=[FetchPartitionResponse("t", 0)]))
    with pytest.raises(ProtocolError, match="1 partitions"):
        fetch_response_of(one, [])
    inside = to_wire(FetchResponse(partitions=[FetchPartitionResponse("t", 0, records=b"xx")]))
    with pytest.raises(ProtocolError, match="records inside the msgpack part"):
        fetch_response_of(inside, [memoryview(b"")])
