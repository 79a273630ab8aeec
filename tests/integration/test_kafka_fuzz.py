"""A real broker's Kafka listener fed random and mutated Kafka frames for a bounded time: the broker stays
up, its memory stays bounded, the msgpack listener keeps serving, and what a Kafka client produced before
reads back byte-identical."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.local_cluster import free_ports
from network.connection import BrokerConnection
from protocol.messages import ApiVersionsRequest, FetchPartition, FetchRequest
from tests.integration.processes import BrokerProcess, assign, standalone_broker
from tests.integration.test_fuzz import mutate, rss_mb, send_fuzz

kafka = pytest.importorskip("kafka")
from kafka.protocol.consumer.fetch import FetchRequest as KFetch  # noqa: E402
from kafka.protocol.consumer.group import JoinGroupRequest as KJoin  # noqa: E402
from kafka.protocol.consumer.offsets import ListOffsetsRequest as KListOffsets  # noqa: E402
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as KApiVersions  # noqa: E402
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest as KFindCoordinator  # noqa: E402
from kafka.protocol.metadata.metadata import MetadataRequest as KMetadata  # noqa: E402
from kafka.protocol.producer.produce import ProduceRequest as KProduce  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

FUZZ_SECONDS = 8.0
SEED = 20261126


def kafka_batch(values: list[bytes], compression: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, compression, False, -1, -1, -1, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k", value=value, headers=[("h", b"x")])
    return bytes(builder.build())


def frame(request: object, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="fuzz")  # type: ignore[attr-defined]
    body = bytes(request.encode(header=True))  # type: ignore[attr-defined]
    return body


def produce_request(values: list[bytes], partition: int = 1, compression: int = 0) -> object:
    P = KProduce
    topic = P.TopicProduceData(
        name="t",
        partition_data=[
            P.TopicProduceData.PartitionProduceData(index=partition, records=kafka_batch(values, compression))
        ],
    )
    return P[3](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[topic])


def valid_frames() -> list[bytes]:
    F = KFetch
    fetch = F[11](
        replica_id=-1,
        max_wait_ms=10,
        min_bytes=1,
        max_bytes=1 << 16,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        rack_id="",
        topics=[
            F.FetchTopic(
                topic="t",
                partitions=[
                    F.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 16,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
    )
    L = KListOffsets
    list_offsets = L[5](
        replica_id=-1,
        isolation_level=0,
        topics=[
            L.ListOffsetsTopic(
                name="t",
                partitions=[
                    L.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)
                ],
            )
        ],
    )
    J = KJoin
    join = J[5](
        group_id="g",
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
    )
    requests = [
        KApiVersions[3](client_software_name="fuzz", client_software_version="1"),
        KApiVersions[0](),
        KMetadata[8](
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
        KMetadata[0](topics=[]),
        produce_request([b"fuzz"], partition=0),
        produce_request([b"zipped"] * 3, partition=0, compression=1),
        fetch,
        list_offsets,
        KFindCoordinator[2](key="g", key_type=0),
        join,
    ]
    return [frame(r, i) for i, r in enumerate(requests)]


def fuzz_payloads(rng: random.Random, frames: list[bytes]) -> Iterator[bytes]:
    while True:
        kind = rng.randrange(6)
        if kind == 0:
            yield rng.randbytes(rng.randrange(1, 200))  # noise, size prefix included
        elif kind == 1:
            body = mutate(rng, rng.choice(frames))
            yield struct.pack(">I", len(body)) + body
        elif kind == 2:  # a valid header with an API key, version and body drawn at random
            body = struct.pack(">hhih", rng.randrange(-2, 80), rng.randrange(-1, 20), 1, 4) + b"fuzz"
            yield struct.pack(">I", len(body) + 8) + body + rng.randbytes(8)
        elif kind == 3:
            body = rng.choice(frames)
            yield struct.pack(">I", len(body) + rng.randrange(1, 50)) + body  # announces more than it sends
        elif kind == 4:
            yield struct.pack(">I", rng.choice([2**31, 2**32 - 1, 100 * 2**20 + 1])) + rng.randbytes(5)
        else:
            body = rng.choice(frames)
            yield struct.pack(">I", len(body)) + body  # valid, mixed in so state actually changes


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, int]]:
    port, kafka_port = free_ports(2)
    b = standalone_broker(tmp_path, 1, port, "socket.request.read.timeout.ms=500", "socket.request.max.bytes=1048576")
    b.args[b.args.index("--listeners") + 1] = f"127.0.0.1:{port},PLAINTEXT://127.0.0.1:{kafka_port}"
    b.start()
    asyncio.run(assign([b], "t", 2, {0: 1, 1: 1}, replicas=[1]))
    yield b, kafka_port
    assert b.stop() == 0, b.log_text()[-3000:]


def send_and_read(kafka_port: int, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", kafka_port), timeout=10) as s:
        s.sendall(struct.pack(">I", len(body)) + body)
        size = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
        return s.recv(size, socket.MSG_WAITALL)


async def read_partition(port: int, partition: int) -> bytes:
    async with await BrokerConnection.connect("127.0.0.1", port) as conn:
        resp = await conn.send(FetchRequest(-1, 0, 1, 1 << 22, [FetchPartition("t", partition, 0, 1 << 22)]))
        return bytes(resp.partitions[0].records)


def test_random_and_mutated_kafka_frames_leave_the_broker_serving_with_its_data_intact(
    broker: tuple[BrokerProcess, int],
) -> None:
    b, kafka_port = broker
    assert b.proc is not None
    for i in range(10):
        answer = send_and_read(kafka_port, frame(produce_request([f"acked-{i}".encode()] * 5), 100 + i))
        assert answer[:4] == struct.pack(">i", 100 + i)
    before = asyncio.run(read_partition(b.port, 1))
    assert before.count(b"acked-") == 50
    before_rss = rss_mb(b.proc.pid)

    rng = random.Random(SEED)
    sent = send_fuzz(kafka_port, rng, fuzz_payloads(rng, valid_frames()), FUZZ_SECONDS)
    assert sent > 500

    assert b.alive, b.log_text()[-3000:]

    async def msgpack_answers() -> bool:
        async with await BrokerConnection.connect("127.0.0.1", b.port) as conn:
            return bool((await conn.send(ApiVersionsRequest())).api_keys)

    assert asyncio.run(msgpack_answers())
    assert send_and_read(kafka_port, frame(KApiVersions[0](), 7))[:6] == struct.pack(">ih", 7, 0)
    grown = rss_mb(b.proc.pid) - before_rss
    assert grown < 100, f"RSS grew {grown:.0f} MB over {sent} fuzz frames"
    assert asyncio.run(read_partition(b.port, 1))[: len(before)] == before
    # Nothing a client sent escaped as an exception: every bad frame was a closed connection or an error.
    assert "Traceback" not in b.log_text(), b.log_text()[-3000:]
