"""The strict walk over a Kafka request before kafka-python decodes it: what Kafka's parser refuses is
refused (lengths past the frame, negative counts, bytes after the request), every request kafka-python
can encode is accepted, and the entries are counted without decoding."""

from __future__ import annotations

import random
import struct
import time

import pytest

from bench.kafka_fuzz import random_requests
from network.kafka_frame_check import EntryLimitError, MalformedRequestError, check_request
from network.kafka_wire import KAFKA_WIRE
from protocol.errors import ProtocolError

kafka = pytest.importorskip("kafka")
from kafka.protocol.metadata.metadata import MetadataRequest  # noqa: E402

HEADER = struct.pack(">hhih", 3, 1, 7, 1) + b"c"  # Metadata v1, correlation id 7, client id "c"


def metadata_v1(body: bytes) -> bytes:
    return HEADER + body


def test_every_request_kafka_python_encodes_is_walked_to_its_end_and_anything_more_or_less_is_refused() -> None:
    requests = random_requests(random.Random(41), per_version=20)
    assert len(requests) > 1000
    for request_class, version, frame in requests:
        check_request(request_class, version, frame, 10**6)
        with pytest.raises(MalformedRequestError):
            check_request(request_class, version, frame + b"\x00", 10**6)
        with pytest.raises(MalformedRequestError):
            check_request(request_class, version, frame[:-1], 10**6)


def test_a_string_whose_length_runs_past_the_frame_is_refused() -> None:
    frame = metadata_v1(struct.pack(">ih", 1, 200) + b"orders")  # 200 announced, 6 there
    kafka_python = MetadataRequest.decode(memoryview(frame), version=1, header=True)
    assert kafka_python.topics[0].name == "orders"  # what decoding alone made of it
    with pytest.raises(ProtocolError, match="run past the frame"):
        KAFKA_WIRE.decode_request(frame)


@pytest.mark.parametrize("count", [-5, -2])
def test_a_negative_or_impossible_count_is_refused(count: int) -> None:
    with pytest.raises(ProtocolError):
        KAFKA_WIRE.decode_request(metadata_v1(struct.pack(">ih", count, 1) + b"x"))


def test_null_is_refused_where_the_schema_does_not_allow_it_and_read_where_it_does() -> None:
    assert KAFKA_WIRE.decode_request(metadata_v1(struct.pack(">i", -1)))[1].topics is None  # v1: every topic
    v0 = struct.pack(">hhih", 3, 0, 7, 1) + b"c"
    with pytest.raises(ProtocolError, match="not nullable"):
        KAFKA_WIRE.decode_request(v0 + struct.pack(">i", -1))
    with pytest.raises(ProtocolError, match="not nullable"):
        KAFKA_WIRE.decode_request(metadata_v1(struct.pack(">ih", 1, -1)))  # a null topic name


def test_bytes_after_the_request_are_refused() -> None:
    with pytest.raises(ProtocolError, match="1 bytes after the request"):
        KAFKA_WIRE.decode_request(metadata_v1(struct.pack(">ih", 1, 1) + b"x" + b"\x00"))


def test_entries_are_counted_until_the_limit_and_no_further() -> None:
    names = 2_000_000
    frame = metadata_v1(struct.pack(">i", names) + struct.pack(">h", 0) * names)
    assert check_request(MetadataRequest, 1, frame, names) == names
    started = time.perf_counter()
    with pytest.raises(EntryLimitError):
        check_request(MetadataRequest, 1, frame, 1000)
    assert time.perf_counter() - started < 0.05
