"""A real broker process fed garbage: each bad connection is closed or answered, the broker keeps serving
and the data it acknowledged is still there."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from cluster.local_cluster import free_ports
from network.connection import BrokerConnection
from protocol.codec import packb
from protocol.errors import ErrorCode
from protocol.messages import (
    FetchPartition,
    FetchRequest,
    MetadataRequest,
    ProducePartition,
    ProduceRequest,
)
from protocol.record_batch import build_batch, iter_records
from tests.integration.processes import BrokerProcess, assign, standalone_broker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp = tmp_path_factory.mktemp("bad-input")
    (port,) = free_ports(1)
    b = standalone_broker(tmp, 1, port, "socket.request.max.bytes=1048576")
    b.start()
    asyncio.run(assign([b], "t", 1, {0: 1}, replicas=[1]))
    yield b
    assert b.stop() == 0, b.log_text()[-3000:]


def raw_exchange(port: int, payload: bytes, read: bool = True, timeout_s: float = 5.0) -> bytes:
    """Send bytes on a fresh socket; return what comes back until the server closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(payload)
        if not read:
            return b""
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            pass
        return b"".join(chunks)


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


async def produce_and_read_back(port: int, value: bytes) -> tuple[int, list[bytes]]:
    async with await BrokerConnection.connect("127.0.0.1", port) as conn:
        resp = await conn.send(ProduceRequest(1, 5000, [ProducePartition("t", 0, build_batch([value]))]))
        (p,) = resp.partitions
        assert p.error_code == ErrorCode.NONE, p.error_message
        fetched = await conn.send(FetchRequest(-1, 0, 1, 1 << 20, [FetchPartition("t", 0, 0, 1 << 20)]))
        values = [r.value for r in iter_records(fetched.partitions[0].records)]
        return p.base_offset, values  # type: ignore[return-value]


def still_serves_and_keeps_data(port: int, marker: bytes) -> None:
    offset, values = asyncio.run(produce_and_read_back(port, marker))
    assert values[offset] == marker
    assert values == sorted(set(values), key=values.index), "no record may be duplicated or lost"


def test_garbage_bytes_close_only_that_connection(broker: BrokerProcess) -> None:
    still_serves_and_keeps_data(broker.port, b"before-garbage")
    reply = raw_exchange(broker.port, frame(b"\xc1\xc1\xc1 not msgpack"))
    assert reply == b""  # closed without an answer: the header could not be read
    still_serves_and_keeps_data(broker.port, b"after-garbage")
    assert "bad" in broker.log_text().lower() or "undecodable" in broker.log_text()


def test_an_oversize_length_prefix_is_refused_without_reading_the_body(broker: BrokerProcess) -> None:
    reply = raw_exchange(broker.port, struct.pack(">I", 50 * 1024 * 1024) + b"x" * 10)
    assert reply == b""
    assert "socket.request.max.bytes" in broker.log_text()
    still_serves_and_keeps_data(broker.port, b"after-oversize")


def test_a_truncated_frame_then_hang_up_does_not_hurt(broker: BrokerProcess) -> None:
    body = packb([{"api_key": 3, "api_version": 0, "correlation_id": 1}, {}])
    raw_exchange(broker.port, struct.pack(">I", len(body)) + body[:3], read=False)
    still_serves_and_keeps_data(broker.port, b"after-truncated")


def test_wrong_types_get_an_invalid_request_answer_and_the_connection_stays(broker: BrokerProcess) -> None:
    bad = packb([{"api_key": 1, "api_version": 0, "correlation_id": 7}, {"replica_id": "me"}])
    good = packb([{"api_key": 3, "api_version": 0, "correlation_id": 8}, {"topics": None}])
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
        s.sendall(frame(bad) + frame(good))
        buf = b""
        answers = []
        while len(answers) < 2:
            buf += s.recv(65536)
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                n = struct.unpack(">I", buf[:4])[0]
                answers.append(msgpack.unpackb(buf[4 : 4 + n], raw=False))
                buf = buf[4 + n :]
    (h1, b1), (h2, b2) = answers
    assert h1["correlation_id"] == 7 and b1["error_code"] == ErrorCode.INVALID_REQUEST
    assert "FetchRequest.replica_id: expected int, got str" in b1["error_message"]
    assert h2["correlation_id"] == 8 and b2["error_code"] == ErrorCode.NONE
    assert [t["topic"] for t in b2["topics"]] == ["t"]


def test_unknown_api_and_unknown_topic_are_answered_with_kafka_error_codes(broker: BrokerProcess) -> None:
    async def go() -> None:
        async with await BrokerConnection.connect("127.0.0.1", broker.port) as conn:
            resp = await conn.send(MetadataRequest(["nope"]))
            assert resp.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            produce = await conn.send(ProduceRequest(1, 1000, [ProducePartition("nope", 0, build_batch([b"x"]))]))
            assert produce.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            fetch = await conn.send(FetchRequest(-1, 0, 1, 100, [FetchPartition("t", 0, 10**9, 100)]))
            assert fetch.partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE

    asyncio.run(go())
    reply = raw_exchange(
        broker.port, frame(packb([{"api_key": 999, "api_version": 0, "correlation_id": 3}, {}])), timeout_s=1.0
    )
    (header, body) = msgpack.unpackb(reply[4:], raw=False)
    assert header["correlation_id"] == 3
    assert body["error_code"] == ErrorCode.INVALID_REQUEST and "999" in body["error_message"]


def test_a_corrupt_batch_is_refused_and_nothing_is_appended(broker: BrokerProcess) -> None:
    async def go() -> None:
        async with await BrokerConnection.connect("127.0.0.1", broker.port) as conn:
            before = await conn.send(FetchRequest(-1, 0, 1, 1 << 20, [FetchPartition("t", 0, 0, 1 << 20)]))
            batch = bytearray(build_batch([b"flipped"]))
            batch[-1] ^= 0xFF
            resp = await conn.send(ProduceRequest(1, 1000, [ProducePartition("t", 0, bytes(batch))]))
            assert resp.partitions[0].error_code == ErrorCode.CORRUPT_MESSAGE
            after = await conn.send(FetchRequest(-1, 0, 1, 1 << 20, [FetchPartition("t", 0, 0, 1 << 20)]))
            assert after.partitions[0].records == before.partitions[0].records

    asyncio.run(go())


def test_the_broker_survives_everything_and_shuts_down_cleanly(broker: BrokerProcess, tmp_path: Path) -> None:
    assert broker.alive
    still_serves_and_keeps_data(broker.port, b"last")
