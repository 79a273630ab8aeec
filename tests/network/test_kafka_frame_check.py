"""The strict walk over a Kafka request before kafka-python decodes it: what Kafka's parser refuses is
refused (lengths past the frame, negative counts, bytes after the request), every request kafka-python
can encode is accepted, and the entries are counted without decoding."""

from __future__ import annotations

import random
import struct
import time
from typing import Any

import pytest

from network.kafka_frame_check import EntryLimitError, MalformedRequestError, check_request
from network.kafka_wire import KAFKA_WIRE, SERVED
from protocol.errors import ProtocolError

kafka = pytest.importorskip("kafka")
from kafka.protocol.metadata.metadata import MetadataRequest  # noqa: E402

HEADER = struct.pack(">hhih", 3, 1, 7, 1) + b"c"  # Metadata v1, correlation id 7, client id "c"


def metadata_v1(body: bytes) -> bytes:
    return HEADER + body


def _simple(type_str: str, rng: random.Random, nullable: bool) -> Any:
    if nullable and rng.random() < 0.3:
        return None
    values = {
        "int8": lambda: rng.randint(-128, 127),
        "int16": lambda: rng.randint(-5, 5),
        "uint16": lambda: rng.randint(0, 5),
        "int32": lambda: rng.randint(-5, 100),
        "int64": lambda: rng.randint(-5, 10**12),
        "float64": lambda: 1.5,
        "bool": lambda: rng.random() < 0.5,
        "string": lambda: "s" * rng.randint(0, 5),
        "bytes": lambda: b"b" * rng.randint(0, 5),
        "records": lambda: b"r" * rng.randint(0, 5),
        "uuid": lambda: None,
    }
    return values[type_str]()


def _value(field: Any, version: int, rng: random.Random) -> Any:
    nullable = field.nullable_for_version_q(version)
    if field.is_array():
        if nullable and rng.random() < 0.2:
            return None
        if field.is_struct_array():
            return [_struct(field.array_of, version, rng) for _ in range(rng.randint(0, 3))]
        return [_simple(field.array_of.type_str, rng, False) for _ in range(rng.randint(0, 3))]
    if field.is_struct():
        return None if nullable and rng.random() < 0.3 else _struct(field, version, rng)
    return _simple(field.type_str, rng, nullable)


def _struct(struct_field: Any, version: int, rng: random.Random) -> Any:
    return struct_field.data_class(**{f.name: _value(f, version, rng) for f in struct_field.untagged_fields(version)})


def random_requests(rng: random.Random, per_version: int) -> list[tuple[Any, int, bytes]]:
    out = []
    for request_class, lo, hi in SERVED.values():
        for version in range(lo, hi + 1):
            for _ in range(per_version):
                fields = {f.name: _value(f, version, rng) for f in request_class._struct.untagged_fields(version)}
                request = request_class[version](**fields)
                request.with_header(correlation_id=rng.randint(0, 100), client_id=rng.choice(["c", None, ""]))
                out.append((request_class, version, bytes(request.encode(header=True))))
    return out


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
