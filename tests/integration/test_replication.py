"""Three real broker processes replicating with leaders assigned by the test (no controller): acks=all
writes end up byte-identical on every replica; a parked FETCH answers early on new data and at once on
a leadership change."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from client.consumer import read_replica
from cluster.local_cluster import free_ports
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import (
    DescribeLogDirsRequest,
    FetchPartition,
    FetchRequest,
    ProducePartition,
    ProduceRequest,
    TopicPartition,
)
from protocol.record_batch import build_batch, iter_records
from tests.integration.processes import BrokerProcess, assign, running, standalone_broker, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PARTITIONS = 3


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    ports = free_ports(3)
    with running(*(standalone_broker(tmp_path, i + 1, ports[i]) for i in range(3))) as procs:
        yield list(procs)


async def replica_bytes(port: int, tp: TopicPartition) -> bytes:
    async with await BrokerConnection.connect("127.0.0.1", port) as conn:
        return await read_replica(conn, tp)


async def ends(port: int) -> dict[TopicPartition, tuple[int, int]]:
    async with await BrokerConnection.connect("127.0.0.1", port) as conn:
        resp = await conn.send(DescribeLogDirsRequest())
        return {TopicPartition(r.topic, r.partition): (r.log_end_offset, r.high_watermark) for r in resp.replicas}


async def test_acks_all_writes_are_on_every_replica_byte_for_byte(brokers: list[BrokerProcess]) -> None:
    leader_of = {p: (p % 3) + 1 for p in range(PARTITIONS)}
    for resp in await assign(brokers, "r", PARTITIONS, leader_of):
        assert all(p.error_code == ErrorCode.NONE for p in resp.partitions)
    acked: dict[TopicPartition, list[tuple[int, list[bytes]]]] = {}
    conns = {b.broker_id: await BrokerConnection.connect("127.0.0.1", b.port) for b in brokers}
    try:
        for i in range(60):
            p = i % PARTITIONS
            tp = TopicPartition("r", p)
            values = [f"v{i}-{j}".encode() for j in range(5)]
            resp = await conns[leader_of[p]].send(
                ProduceRequest(-1, 10000, [ProducePartition("r", p, build_batch(values))])
            )
            part = resp.partitions[0]
            assert part.error_code == ErrorCode.NONE, part.error_message
            acked.setdefault(tp, []).append((part.base_offset, values))
    finally:
        for c in conns.values():
            await c.close()

    async def converged() -> bool:
        all_ends = [await ends(b.port) for b in brokers]
        return all(
            len({e[tp] for e in all_ends}) == 1 and all_ends[0][tp][0] == all_ends[0][tp][1] for tp in all_ends[0]
        )

    await wait_until(converged, what="every replica at the same LEO = HW")
    for p in range(PARTITIONS):
        tp = TopicPartition("r", p)
        copies = [await replica_bytes(b.port, tp) for b in brokers]
        assert copies[0] and copies[0] == copies[1] == copies[2]
        by_offset = {r.offset: r.value for r in iter_records(copies[0])}
        for base, values in acked[tp]:
            assert [by_offset[base + k] for k in range(len(values))] == values
        assert sorted(by_offset) == list(range(100)), "every offset exactly once, no gaps"

    # and every broker checkpoints those HWs periodically (replication-offset-checkpoint, Kafka's name)
    from storage.checkpoint import HighWatermarkCheckpoint

    async def checkpointed() -> bool:
        return all(
            HighWatermarkCheckpoint(b.log_dir / "data" / "replication-offset-checkpoint").read()
            == {("r", p): 100 for p in range(PARTITIONS)}
            for b in brokers
        )

    await wait_until(checkpointed, what="HW checkpoints on every broker")


async def test_a_parked_fetch_answers_early_when_data_arrives(brokers: list[BrokerProcess]) -> None:
    await assign(brokers, "d", 1, {0: 1})
    async with (
        await BrokerConnection.connect("127.0.0.1", brokers[0].port) as consumer,
        await BrokerConnection.connect("127.0.0.1", brokers[0].port) as producer,
    ):
        started = time.monotonic()
        parked = asyncio.ensure_future(
            consumer.send(FetchRequest(-1, 5000, 1, 1 << 20, [FetchPartition("d", 0, 0, 1 << 20)]))
        )
        await asyncio.sleep(0.2)
        assert not parked.done()
        resp = await producer.send(ProduceRequest(-1, 5000, [ProducePartition("d", 0, build_batch([b"wake"]))]))
        assert resp.partitions[0].error_code == ErrorCode.NONE
        fetched = await asyncio.wait_for(parked, 4.0)
        elapsed = time.monotonic() - started
    assert [r.value for r in iter_records(fetched.partitions[0].records)] == [b"wake"]
    assert elapsed < 4.0, "the fetch must not wait for max_wait_ms once min_bytes is reached"


async def test_a_parked_fetch_answers_at_once_when_leadership_moves(brokers: list[BrokerProcess]) -> None:
    await assign(brokers, "m", 1, {0: 1})
    async with await BrokerConnection.connect("127.0.0.1", brokers[0].port) as consumer:
        parked = asyncio.ensure_future(
            consumer.send(
                FetchRequest(-1, 10000, 1, 1 << 20, [FetchPartition("m", 0, 0, 1 << 20, current_leader_epoch=0)])
            )
        )
        await asyncio.sleep(0.2)
        assert not parked.done()
        started = time.monotonic()
        await assign(brokers, "m", 1, {0: 2}, leader_epoch=1)
        resp = await asyncio.wait_for(parked, 5.0)
        assert time.monotonic() - started < 5.0
    assert resp.partitions[0].error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)
