"""The Kafka listener's wire: what it decodes, what it refuses before decoding, and the ApiVersions
fallback, on frames built by kafka-python (the same schemas, written by an independent encoder)."""

from __future__ import annotations

import struct
import time

import pytest

from network.kafka_wire import KAFKA_WIRE, UNSUPPORTED_API_VERSIONS
from network.request_limits import DATA_ENTRIES, RequestLimit, kafka_limit
from protocol.errors import ProtocolError

kafka = pytest.importorskip("kafka")
from kafka.protocol.admin.groups import DeleteGroupsRequest  # noqa: E402
from kafka.protocol.admin.topics import DeleteRecordsRequest  # noqa: E402
from kafka.protocol.metadata.api_versions import ApiVersionsRequest  # noqa: E402
from kafka.protocol.metadata.metadata import MetadataRequest  # noqa: E402
from kafka.protocol.producer.produce import ProduceRequest  # noqa: E402


def encoded(request: object) -> bytes:
    request.with_header(correlation_id=9, client_id="test")  # type: ignore[attr-defined]
    return bytes(request.encode(header=True))  # type: ignore[attr-defined]


def produce(partitions: int, records: bytes = b"") -> bytes:
    P = ProduceRequest
    data = [P.TopicProduceData.PartitionProduceData(index=i, records=records) for i in range(partitions)]
    return encoded(
        P[3](
            transactional_id=None, acks=1, timeout_ms=10, topic_data=[P.TopicProduceData(name="t", partition_data=data)]
        )
    )


def test_a_request_decodes_into_its_header_and_kafka_python_body() -> None:
    header, body = KAFKA_WIRE.decode_request(produce(3, b"xyz"))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (0, 3, 9, "test")
    assert [p.index for p in body.topic_data[0].partition_data] == [0, 1, 2]


def test_api_versions_above_the_range_is_answered_not_decoded() -> None:
    frame = bytearray(encoded(ApiVersionsRequest[3](client_software_name="x", client_software_version="1")))
    struct.pack_into(">h", frame, 2, 42)  # a version from the future, with a body this broker cannot know
    header, body = KAFKA_WIRE.decode_request(bytes(frame) + b"\xff\xff")
    assert (header.api_version, body) == (42, UNSUPPORTED_API_VERSIONS)


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">hhih", 999, 0, 1, -1),  # an API this listener does not serve
        struct.pack(">hhih", 3, 99, 1, -1),  # a version outside the range of one it serves
        struct.pack(">hhih", 3, 1, 1, 4) + b"te",  # a body that ends inside the client id
        b"\x00\x03",  # shorter than a header
    ],
)
def test_what_cannot_be_decoded_closes_the_connection(frame: bytes) -> None:
    with pytest.raises(ProtocolError):
        KAFKA_WIRE.decode_request(frame)


def test_a_large_request_other_than_produce_is_refused_before_it_is_decoded() -> None:
    M = MetadataRequest
    cap = kafka_limit(3).max_bytes
    assert cap is not None
    topics = [M.MetadataRequestTopic(name=f"topic-{i:08d}") for i in range(cap // 14 + 1)]
    frame = encoded(M[1](topics=topics))
    assert len(frame) > cap
    with pytest.raises(ProtocolError, match="bytes allowed"):
        KAFKA_WIRE.decode_request(frame)


def test_a_produce_naming_too_many_partitions_is_refused_by_counting_not_decoding() -> None:
    KAFKA_WIRE.decode_request(produce(DATA_ENTRIES - 1))  # and its topic: the limit counts both
    frame = produce(DATA_ENTRIES)
    started = time.perf_counter()
    with pytest.raises(ProtocolError, match=f"more than {DATA_ENTRIES} entries"):
        KAFKA_WIRE.decode_request(frame)
    assert time.perf_counter() - started < 0.5


def test_a_produce_of_a_million_topics_without_partitions_is_refused_at_the_limit() -> None:
    # Issue 41: the old count was of partitions only, so 1,000,000 empty topics (5.9 MB) were decoded whole.
    n = 1_000_000
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", n) + struct.pack(">hi", 0, 0) * n
    frame = struct.pack(">hhih", 0, 3, 1, -1) + body
    started = time.perf_counter()
    with pytest.raises(ProtocolError, match="entries"):
        KAFKA_WIRE.decode_request(frame)
    assert time.perf_counter() - started < 0.5


def delete_groups(version: int, groups: int) -> bytes:
    return encoded(DeleteGroupsRequest[version](groups_names=[f"g{i}" for i in range(groups)]))


def delete_records(version: int, partitions: int) -> bytes:
    """Over two topics, so that counting walks past the first one's partitions."""
    D = DeleteRecordsRequest.DeleteRecordsTopic
    first = partitions // 2
    topics = [
        D(name=name, partitions=[D.DeleteRecordsPartition(partition_index=i, offset=-1) for i in range(n)])
        for name, n in (("a", first), ("bb", partitions - first))
    ]
    return encoded(DeleteRecordsRequest[version](topics=topics, timeout_ms=1000))


@pytest.mark.parametrize(
    "build, version, topics",
    [(delete_groups, 0, 0), (delete_groups, 2, 0), (delete_records, 1, 2), (delete_records, 2, 2)],
    ids=["DeleteGroups v0", "DeleteGroups v2 (flexible)", "DeleteRecords v1", "DeleteRecords v2 (flexible)"],
)
def test_admin_requests_naming_too_many_groups_or_partitions_are_refused_by_counting(  # type: ignore[no-untyped-def]
    build, version, topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rule, on frames small enough to build fast: the limit counts every entry, topics included.
    monkeypatch.setattr("network.kafka_wire.kafka_limit", lambda api_key: RequestLimit(None, 7 + topics))
    header, body = KAFKA_WIRE.decode_request(build(version, 7))
    assert header.api_version == version
    with pytest.raises(ProtocolError, match=f"more than {7 + topics} entries"):
        KAFKA_WIRE.decode_request(build(version, 8))
