"""The msgpack listener's per-API limits (network/request_limits.py), on frames built as clients build them:
a request with more entries than its API takes is answered INVALID_REQUEST before its typed message is
built (refused by the parser at the over-long array's header when the frame is large), one larger than its
API's byte limit is not unpacked at all, and the requests nodes send each other keep the codec's cap."""

from __future__ import annotations

import time

import pytest

from network.kafka_wire import SERVED
from network.request_limits import DATA_ENTRIES, KAFKA_LIMITS, MSGPACK_LIMITS, msgpack_limit
from network.socket_server import MSGPACK_WIRE
from protocol.api_keys import ApiKey
from protocol.codec import MAX_ENTRIES, Message, packb, to_wire
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import (
    FetchPartition,
    FetchRequest,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    MetadataRequest,
    RequestDecodeError,
    RequestHeader,
    api_key_of,
)


def frame(body: Message) -> bytes:
    return packb([to_wire(RequestHeader(int(api_key_of(body)), 0, 7, "test")), to_wire(body)])


def fetch(partitions: int) -> FetchRequest:
    return FetchRequest(-1, 0, 1, 1 << 20, [FetchPartition("t", i, 0, 1) for i in range(partitions)])


def test_a_request_at_its_limit_decodes_and_one_entry_more_is_answered_invalid_request() -> None:
    header, body = MSGPACK_WIRE.decode_request(frame(fetch(DATA_ENTRIES)))
    assert header.correlation_id == 7 and len(body.partitions) == DATA_ENTRIES
    with pytest.raises(RequestDecodeError) as refused:
        MSGPACK_WIRE.decode_request(frame(fetch(DATA_ENTRIES + 1)))  # large: refused by the parser
    assert refused.value.code == ErrorCode.INVALID_REQUEST and refused.value.header.correlation_id == 7
    small = frame(MetadataRequest(["t"] * (DATA_ENTRIES + 1)))  # under 64 KiB: counted before typing
    assert len(small) < 64 * 1024
    with pytest.raises(RequestDecodeError, match=f"more than {DATA_ENTRIES} entries"):
        MSGPACK_WIRE.decode_request(small)


def test_a_hundred_thousand_partitions_are_refused_before_anything_is_unpacked() -> None:
    # At the codec's old cap (100,000) a FETCH cost the loop about a second to decode and answer; its 12 MB
    # are over FETCH's byte limit, read from the header alone.
    big = frame(fetch(MAX_ENTRIES))
    started = time.perf_counter()
    with pytest.raises(ProtocolError, match="is over"):
        MSGPACK_WIRE.decode_request(big)
    assert time.perf_counter() - started < 0.1


def test_a_frame_over_its_apis_byte_limit_closes_the_connection_unread() -> None:
    cap = msgpack_limit(3).max_bytes
    assert cap is not None
    over = frame(MetadataRequest(["x" * 1000] * (cap // 1000 + 1)))
    with pytest.raises(ProtocolError, match="is over"):
        MSGPACK_WIRE.decode_request(over)


def test_requests_between_nodes_keep_the_codecs_cap() -> None:
    states = [LeaderAndIsrPartition("t", i, 1, 0, [1], 0, [1]) for i in range(DATA_ENTRIES * 2)]
    _, body = MSGPACK_WIRE.decode_request(frame(LeaderAndIsrRequest(3000, 1, states)))
    assert len(body.partitions) == DATA_ENTRIES * 2


def test_every_api_either_listener_serves_has_its_own_limits() -> None:
    # A new API would otherwise fall to the small default, fitting some requests and not others, found out
    # only when a large one is refused (or, with too generous a default, when one stalls a broker).
    assert sorted(set(ApiKey) - set(MSGPACK_LIMITS)) == []
    assert sorted(set(SERVED) - set(KAFKA_LIMITS)) == []
