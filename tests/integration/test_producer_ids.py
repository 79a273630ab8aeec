"""Producer ids cannot be invented: a leader appends an idempotent batch only with an id INIT_PRODUCER_ID handed
out, including one handed out a moment ago through another broker, and refuses a flood of invented ids with
UNKNOWN_PRODUCER_ID while appending none of them (real broker processes, real TCP)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cluster.local_cluster import LocalClusterState
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import (
    InitProducerIdRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    MetadataRequest,
    ProducePartition,
    ProduceRequest,
)
from protocol.record_batch import build_batch
from tests.integration.processes import three_brokers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TOPIC = "ids"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalClusterState]:
    # A heartbeat every 5 s: a leader that learned of a new id only from heartbeats would refuse it.
    overrides = {"broker.heartbeat.interval.ms": "5000", "broker.session.timeout.ms": "15000"}
    async with three_brokers(tmp_path / "cluster", overrides) as state:
        from client.cluster_client import ClusterClient

        client = ClusterClient(state.bootstrap)
        try:
            assert (await client.create_topic(TOPIC, 1, 3)).topics[0].error_code == 0
            await client.wait_for_leaders(TOPIC)
        finally:
            await client.close()
        yield state


def produce(producer_id: int, sequence: int = 0, value: bytes = b"v") -> ProduceRequest:
    batch = build_batch([value], producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    return ProduceRequest(-1, 10_000, [ProducePartition(TOPIC, 0, batch)])


async def test_a_leader_appends_only_producer_ids_that_were_handed_out(cluster: LocalClusterState) -> None:
    first = cluster.brokers[0]
    async with await BrokerConnection.connect(first.host, first.port) as conn:
        partition = (await conn.send(MetadataRequest([TOPIC]))).topics[0].partitions[0]
    leader = next(b for b in cluster.brokers if b.node_id == partition.leader_id)
    other = next(b for b in cluster.brokers if b.node_id != leader.node_id)

    async with (
        await BrokerConnection.connect(leader.host, leader.port) as to_leader,
        await BrokerConnection.connect(other.host, other.port) as to_other,
    ):
        # An id handed out through another broker a moment ago, long before the leader's next heartbeat
        given = await to_other.send(InitProducerIdRequest())
        assert given.error_code == 0 and given.producer_id >= 0
        answer = (await to_leader.send(produce(given.producer_id))).partitions[0]
        assert (answer.error_code, answer.base_offset) == (0, 0)

        # An invented id is refused, and said why
        invented = given.producer_id + 1_000_000
        refused = (await to_leader.send(produce(invented))).partitions[0]
        assert refused.error_code == ErrorCode.UNKNOWN_PRODUCER_ID
        assert f"producer id {invented} was never handed out" in (refused.error_message or "")

        # A flood of invented ids, pipelined on one connection: each refused, none appended
        flood = [to_leader.send(produce(invented + i)) for i in range(1, 2001)]
        answers = await asyncio.wait_for(asyncio.gather(*flood), 60)
        assert {a.partitions[0].error_code for a in answers} == {int(ErrorCode.UNKNOWN_PRODUCER_ID)}

        # Batches without a producer id are not affected, and the log holds exactly the two accepted ones
        plain = (await to_leader.send(produce(-1))).partitions[0]
        assert (plain.error_code, plain.base_offset) == (0, 1)
        offsets = await to_leader.send(ListOffsetsRequest(-1, [ListOffsetsPartition(TOPIC, 0, -1)]))
        assert offsets.partitions[0].offset == 2
