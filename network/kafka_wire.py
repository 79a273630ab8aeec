"""Kafka's binary protocol on a listener: the request header, the versions served and the message codec.

How this works
--------------
A Kafka frame is the same 4-byte big-endian size the msgpack listener reads, then a request header
(api_key int16, api_version int16, correlation_id int32, client_id nullable string; in a flexible
version, KIP-482, header v2: the same plus tagged fields) and the request body of that API and version.
The response is a response header (v0: correlation_id; v1 for a flexible version adds tagged fields;
ApiVersions always answers with v0, KIP-511, so a client can read it whatever version it asked for)
and the body.

The message schemas come from kafka-python's `kafka.protocol` (3.0), which is generated from Kafka's
own JSON message definitions: every API, every version, flexible ones included. It decodes requests
and encodes responses here; nothing about the layout of a message is written by hand.

What is served is `SERVED_VERSIONS`: the ranges this listener advertises in ApiVersions and answers in
full. Ranges start low on purpose: librdkafka up to 2.11 turns a feature off unless the range holds an
exact version (Produce v3 and Fetch v4 for v2 batches, FindCoordinator v0 for lz4), and kafka-python
guesses the broker's release from the maxima. As Kafka 4 does, Produce v0-2 are advertised (old
librdkafka checks them) and answered UNSUPPORTED_VERSION.

Failure handling, as Kafka's SocketServer does it: a request for an API this listener does not serve,
in a version outside its range (except ApiVersions, answered with error 35 and the ranges), over its
API's size or entry limit (network/request_limits.py), malformed (a length or count the frame cannot
hold, a negative count, bytes after the request: network/kafka_frame_check.py) or whose body does not
decode closes the connection with a log line; the broker goes on.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from kafka.protocol.admin import DescribeQuorumRequest
from kafka.protocol.admin.configs import AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest
from kafka.protocol.admin.groups import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.producer.transaction import InitProducerIdRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from network.kafka_frame_check import check_request
from network.request_limits import kafka_limit
from protocol.errors import ProtocolError
from protocol.framing import frame_prefix
from protocol.messages import RequestHeader

#: API key -> (request class, lowest version served, highest version served).
SERVED: dict[int, tuple[type[ApiMessage], int, int]] = {
    0: (ProduceRequest, 0, 8),
    1: (FetchRequest, 4, 11),
    2: (ListOffsetsRequest, 1, 5),
    3: (MetadataRequest, 0, 8),
    8: (OffsetCommitRequest, 2, 7),
    9: (OffsetFetchRequest, 1, 5),
    10: (FindCoordinatorRequest, 0, 2),
    11: (JoinGroupRequest, 0, 5),
    12: (HeartbeatRequest, 0, 3),
    13: (LeaveGroupRequest, 0, 3),
    14: (SyncGroupRequest, 0, 3),
    15: (DescribeGroupsRequest, 0, 4),
    16: (ListGroupsRequest, 0, 2),
    # v0 is advertised because librdkafka up to 2.11 wants it in the range before it tries SASL at all;
    # a v0 handshake (raw SASL tokens follow it, not Kafka requests) is answered UNSUPPORTED_VERSION.
    17: (SaslHandshakeRequest, 0, 1),
    18: (ApiVersionsRequest, 0, 3),
    19: (CreateTopicsRequest, 2, 4),
    20: (DeleteTopicsRequest, 1, 3),
    21: (DeleteRecordsRequest, 0, 2),
    22: (InitProducerIdRequest, 0, 1),
    23: (OffsetForLeaderEpochRequest, 2, 3),
    32: (DescribeConfigsRequest, 1, 2),
    33: (AlterConfigsRequest, 0, 1),
    36: (SaslAuthenticateRequest, 0, 1),
    37: (CreatePartitionsRequest, 0, 1),
    42: (DeleteGroupsRequest, 0, 2),
    44: (IncrementalAlterConfigsRequest, 0, 0),
    # The controller quorum, as kafka-metadata-quorum.sh --bootstrap-server asks a broker (KIP-919): the
    # broker forwards it to the quorum's leader. v2 adds the controllers' listeners and directory ids.
    55: (DescribeQuorumRequest, 0, 2),
}

API_VERSIONS_KEY = 18
_HEADER_START = struct.Struct(">hhi")


class UnsupportedApiVersions:
    """An ApiVersions request in a version above the served range: its body is not read (it may be a
    layout this broker does not know), and the answer is error 35 with the ranges in the v0 layout."""

    __slots__ = ()


UNSUPPORTED_API_VERSIONS = UnsupportedApiVersions()


def served_versions(
    served: Mapping[int, tuple[type[ApiMessage], int, int]] | None = None,
) -> list[tuple[int, int, int]]:
    """(api_key, min, max) of every API this listener serves, for the ApiVersions answer."""
    table = SERVED if served is None else served
    return [(key, lo, hi) for key, (_, lo, hi) in sorted(table.items())]


class KafkaWire:
    """The `Wire` of a Kafka listener (network/socket_server.py): Kafka's header and messages."""

    def __init__(self, served: Mapping[int, tuple[type[ApiMessage], int, int]] | None = None) -> None:
        self.served = dict(SERVED if served is None else served)

    def decode_request(self, frame: bytes | bytearray) -> tuple[RequestHeader, Any]:
        if len(frame) < _HEADER_START.size + 2:
            raise ProtocolError(f"a Kafka request of {len(frame)} bytes is shorter than its header")
        api_key, api_version, correlation_id = _HEADER_START.unpack_from(frame)
        entry = self.served.get(api_key)
        if entry is None:
            raise ProtocolError(f"API key {api_key} (version {api_version}) is not served on this listener")
        request_class, lo, hi = entry
        if not lo <= api_version <= hi:
            if api_key == API_VERSIONS_KEY and api_version > hi:
                return RequestHeader(api_key, api_version, correlation_id), UNSUPPORTED_API_VERSIONS
            raise ProtocolError(
                f"{request_class.__name__} version {api_version} is not served on this listener (served: {lo}-{hi})"
            )
        # What decoding may cost is bounded before anything is decoded (network/request_limits.py): the
        # frame's size, then a walk that checks every length inside it and counts its entries.
        limit = kafka_limit(api_key)
        if limit.max_bytes is not None and len(frame) > limit.max_bytes:
            raise ProtocolError(
                f"a {request_class.__name__} of {len(frame)} bytes is over the {limit.max_bytes} bytes allowed"
            )
        try:
            check_request(request_class, api_version, frame, limit.max_entries)
        except ProtocolError as exc:
            raise ProtocolError(f"{request_class.__name__} v{api_version}: {exc}") from None
        try:
            request = request_class.decode(memoryview(frame), version=api_version, header=True)
        except Exception as exc:  # noqa: BLE001 - any decoding failure is the peer's malformed frame
            raise ProtocolError(
                f"{request_class.__name__} v{api_version} does not decode: {type(exc).__name__}: {exc}"
            ) from None
        return RequestHeader(api_key, api_version, correlation_id, request.header.client_id), request

    def encode_response(self, header: RequestHeader, response: Any) -> list[Any] | None:
        """`response` is a kafka-python response object built at the version to answer in (the request's,
        or 0 for the ApiVersions fallback); anything else (the server's own error for a handler that
        failed) has no Kafka layout, so the connection is closed, as Kafka does for a request it cannot
        answer."""
        if not isinstance(response, ApiMessage):
            return None
        response.with_header(correlation_id=header.correlation_id)
        payload = response.encode(header=True)
        return [frame_prefix(len(payload)), bytes(payload)]


KAFKA_WIRE = KafkaWire()
