"""Topic creation on a real cluster: a request built to stall the controller does not, and the per-topic
configs a topic is created with are honoured by the brokers or refused up front."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from client.cluster_client import ClusterClient
from client.producer import send_batch
from cluster.chaos import CHAOS_OVERRIDES
from cluster.local_cluster import LocalClusterState, free_ports, start_cluster, stop_cluster
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import CreatableTopic, CreateTopicsRequest, MetadataRequest, TopicPartition
from tests.integration.processes import ROOT, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

HEARTBEAT_MS = int(CHAOS_OVERRIDES["broker.heartbeat.interval.ms"])
SESSION_MS = int(CHAOS_OVERRIDES["broker.session.timeout.ms"])


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalClusterState]:
    ports = free_ports(4)
    state = await start_cluster(
        tmp_path / "cluster", 3, controller_port=ports[3], overrides=dict(CHAOS_OVERRIDES), broker_ports=ports[:3]
    )
    try:
        yield state
    finally:
        stop_cluster(state, timeout_s=10.0)


async def leaders_and_epochs(conn: BrokerConnection, topic: str) -> list[tuple[int, int, list[int]]]:
    md = await conn.send(MetadataRequest([topic]))
    return [(p.leader_id, p.leader_epoch, sorted(p.isr)) for p in md.topics[0].partitions]


async def test_a_create_topics_naming_one_topic_four_thousand_times_does_not_stall_the_controller(
    cluster: LocalClusterState,
) -> None:
    client = ClusterClient(cluster.bootstrap)
    try:
        created = await client.create_topic("steady", 3, 3, {"min.insync.replicas": "2"})
        assert created.topics and created.topics[0].error_code == ErrorCode.NONE, created
        await client.wait_for_leaders("steady")
    finally:
        await client.close()
    broker = cluster.brokers[0]
    async with await BrokerConnection.connect(broker.host, broker.port) as conn:
        before = await leaders_and_epochs(conn, "steady")
        # when a client sends (through a broker, which forwards it) one request naming a topic 4,000 times
        loop = asyncio.get_running_loop()
        started = loop.time()
        # (4,000: under the listener's 5,000-entry limit for CREATE_TOPICS, which refuses more before decoding)
        resp = await conn.send(CreateTopicsRequest([CreatableTopic("same", 1, 1)] * 4_000), timeout_s=30)
        answered_s = loop.time() - started
        assert resp.error_code == ErrorCode.INVALID_REQUEST, resp
        assert "create.topics.request.max.topics" in (resp.error_message or "")
        assert answered_s < 2.0
        # then over more than a session timeout no broker was fenced: leaders, epochs and ISRs are unchanged
        await asyncio.sleep((SESSION_MS + 2 * HEARTBEAT_MS) / 1000)
        assert await leaders_and_epochs(conn, "steady") == before
        md = await conn.send(MetadataRequest(None))
        assert sorted(b.broker_id for b in md.brokers) == [1, 2, 3]


async def test_per_topic_segment_and_message_size_configs_are_honoured(cluster: LocalClusterState) -> None:
    client = ClusterClient(cluster.bootstrap)
    tp = TopicPartition("small-segments", 0)
    try:
        created = await client.create_topic(
            "small-segments", 1, 3, {"segment.bytes": "65536", "max.message.bytes": "20000"}
        )
        assert created.topics[0].error_code == ErrorCode.NONE, created.topics[0].error_message
        await client.wait_for_leaders("small-segments")
        # when 400 KB are produced in 10 KB batches
        for i in range(40):
            outcome, _, message = await send_batch(client, tp, [bytes([i]) * 10_000], acks=-1)
            assert outcome == "acked", message
        # then every replica rolled its log at 64 KiB, not at the broker's 1 GiB default
        for b in cluster.brokers:
            part_dir = Path(b.dir) / "data" / "small-segments-0"

            async def rolled(d: Path = part_dir) -> bool:
                return len(list(d.glob("*.log"))) >= 5

            await wait_until(rolled, what=f"segments rolled at segment.bytes on broker {b.node_id}")
            assert all(f.stat().st_size <= 65536 + 10_100 for f in part_dir.glob("*.log"))
        # and a batch above the topic's max.message.bytes is refused, nothing appended
        outcome, _, message = await send_batch(client, tp, [b"x" * 30_000], acks=-1, retries=0)
        assert outcome == "failed" and "MESSAGE_TOO_LARGE" in message and "max.message.bytes=20000" in message
    finally:
        await client.close()


async def test_an_unknown_topic_config_is_refused_on_the_wire_and_by_the_cli(cluster: LocalClusterState) -> None:
    broker = cluster.brokers[0]
    async with await BrokerConnection.connect(broker.host, broker.port) as conn:
        resp = await conn.send(CreateTopicsRequest([CreatableTopic("typo", 1, 1, configs={"segment.byte": "1"})]))
    assert resp.topics[0].error_code == ErrorCode.INVALID_CONFIG
    assert resp.topics[0].error_message == "unknown topic config 'segment.byte'; did you mean segment.bytes?"

    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cluster", "topic", "create", "x", "--config", "foo.bar=1"]
        + ["--bootstrap-server", cluster.bootstrap.split(",")[0]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 2, result
    assert "unknown topic config 'foo.bar'" in result.stderr and "Traceback" not in result.stderr
