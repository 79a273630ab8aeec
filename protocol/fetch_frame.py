"""FETCH version 1: record bytes travel beside the msgpack, not inside it.

In version 0 every partition's `records` is a msgpack bin inside the response, so the broker copies
each byte read from the log into the packed message and the client copies it out again. In version 1
(asked for with `api_version: 1` in the request header; the request body is the same) the body of the
response frame is:

    u32 N (big-endian) | N bytes: msgpack [header, body] | records of partition 0 | records of partition 1 | ...

The msgpack part is the version-0 response with every `records` empty; the header map carries
`records_sizes`, the byte count of each partition's records in the order of `body.partitions`. The
broker hands the log's bytes to the socket as they are (one `writelines`, no copy into a message), and
the client gives each partition a `memoryview` of the frame it received (no copy out of it). The first
byte tells the layouts apart: a version-0 body starts with 0x92 (a msgpack array of 2) and a version-1
body with the high byte of N, 0x00 for any msgpack part under 16 MiB. Every answer to a version-1 FETCH,
including an error answer, has this layout. This is Kafka's reason for sending a fetch's records with
`sendfile` rather than through its serializer: the bytes are the bulk of a fetch and need no decoding.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, cast

from protocol.codec import Message, from_wire, packb, to_wire, unpackb
from protocol.errors import ProtocolError
from protocol.framing import frame_prefix
from protocol.messages import FetchResponse

FETCH_RECORDS_APART = 1  # the FETCH version whose records follow the msgpack part
V0_FIRST_BYTE = 0x92  # msgpack fixarray of 2: what every version-0 response body starts with
_LENGTH = struct.Struct(">I")


def encode_fetch_response(correlation_id: int, response: Message) -> list[Any]:
    """The parts of one version-1 answer frame, its length prefix first: bytes for `writelines`, and any
    partition's records that are not bytes (a broker's FileRecords, slices of its segment files) as they
    are, for the server to send from the files."""
    wire = to_wire(response)
    records: list[Any] = []
    sizes: list[int] = []
    if type(response) is FetchResponse:
        for p, p_wire in zip(response.partitions, wire["partitions"], strict=True):
            data = p.records
            sizes.append(len(data))
            if data:
                records.append(data)
                p_wire["records"] = b""
    meta = packb([{"correlation_id": correlation_id, "records_sizes": sizes}, wire])
    length = _LENGTH.pack(len(meta))
    return [frame_prefix(len(length) + len(meta) + sum(sizes)), length, meta, *records]


def is_records_apart(frame: bytes | bytearray | memoryview) -> bool:
    """Whether a response frame body has the version-1 layout (else it is one msgpack value)."""
    return len(frame) > 0 and frame[0] != V0_FIRST_BYTE


def split_frame(frame: bytes | bytearray) -> tuple[Any, Any, list[memoryview]]:
    """(header map, body value, records of each partition) of a version-1 answer frame body."""
    if len(frame) < _LENGTH.size:
        raise ProtocolError(f"a FETCH v1 answer of {len(frame)} bytes has no length of its msgpack part")
    (n,) = _LENGTH.unpack_from(frame, 0)
    view = memoryview(frame)
    end = _LENGTH.size + n
    if end > len(frame):
        raise ProtocolError(f"a FETCH v1 answer announces a {n}-byte msgpack part in {len(frame)} bytes")
    value = unpackb(view[_LENGTH.size : end])
    if type(value) is not list or len(value) != 2 or type(value[0]) is not dict:
        raise ProtocolError("a response is a 2-element array [header, body]")
    sizes = value[0].get("records_sizes")
    if type(sizes) is not list or not all(type(s) is int and s >= 0 for s in sizes):
        raise ProtocolError("a FETCH v1 answer's header needs records_sizes: an array of sizes")
    if end + sum(sizes) != len(frame):
        raise ProtocolError(f"records_sizes add up to {sum(sizes)} bytes; {len(frame) - end} follow the msgpack part")
    parts = []
    for size in sizes:
        parts.append(view[end : end + size])
        end += size
    return value[0], value[1], parts


def fetch_response_of(body: Any, parts: Sequence[memoryview]) -> FetchResponse:
    """The typed response, each partition's `records` a view of the frame (bytes-like, not bytes)."""
    response = from_wire(FetchResponse, body)
    if len(parts) != len(response.partitions):
        raise ProtocolError(f"records_sizes has {len(parts)} entries for {len(response.partitions)} partitions")
    for p, data in zip(response.partitions, parts, strict=True):
        if p.records:
            raise ProtocolError(f"{p.topic}-{p.partition}: records inside the msgpack part of a FETCH v1 answer")
        if data:
            # Code that reads records uses the buffer protocol only (struct, slicing, CRC, pwrite).
            p.records = cast(bytes, data)
    return response
