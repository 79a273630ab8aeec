"""A controller quorum and three brokers as real processes: leader failover under acks=all load, the old leader
rejoining and truncating to match, and the active controller's death, which keeps the metadata."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from client.cluster_client import ClusterClient
from client.consumer import read_replica
from client.producer import send_batch
from cluster.chaos import CHAOS_OVERRIDES
from cluster.local_cluster import (
    LocalClusterState,
    free_ports,
    log_size,
    pid_alive,
    restart_broker,
    spawn,
    start_cluster,
    stop_cluster,
    wait_for_listening,
)
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import DescribeLogDirsRequest, TopicPartition
from protocol.record_batch import iter_records
from tests.integration.processes import active_controller, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SESSION_TIMEOUT_MS = int(CHAOS_OVERRIDES["broker.session.timeout.ms"])
HEARTBEAT_MS = int(CHAOS_OVERRIDES["broker.heartbeat.interval.ms"])


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


async def read_partition(state: LocalClusterState, broker_id: int, tp: TopicPartition) -> bytes:
    b = state.broker(broker_id)
    async with await BrokerConnection.connect(b.host, b.port) as conn:
        return await read_replica(conn, tp)


async def test_killing_a_leader_under_load_elects_a_new_one_loses_nothing_and_the_old_leader_rejoins(
    cluster: LocalClusterState,
) -> None:
    client = ClusterClient(cluster.bootstrap)
    tp = TopicPartition("failover", 0)
    try:
        resp = await client.create_topic("failover", 1, 3, {"min.insync.replicas": "2"})
        assert resp.topics[0].error_code == ErrorCode.NONE, resp.topics[0].error_message
        await client.wait_for_leaders("failover")
        old = client.leader_of(tp)
        acked: list[tuple[int, bytes]] = []
        stop = asyncio.Event()

        async def load() -> None:
            i = 0
            while not stop.is_set():
                value = f"r{i}".encode()
                i += 1
                outcome, base, _ = await send_batch(client, tp, [value], acks=-1, retries=0, timeout_ms=3000)
                if outcome == "acked":
                    acked.append((base, value))
                else:
                    await asyncio.sleep(0.02)
                    try:
                        await client.refresh_metadata(["failover"])
                    except ConnectionError:
                        pass

        task = asyncio.create_task(load())
        await wait_until(lambda: _async(len(acked) > 50), what="writes before the kill")
        victim = cluster.broker(old.leader_id)
        killed_at = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)

        async def new_leader() -> int | None:
            try:
                await client.refresh_metadata(["failover"])
            except ConnectionError:
                return None
            info = client.leader_of(tp)
            return info.leader_id if info.leader_id not in (-1, old.leader_id) else None

        leader = await wait_until(new_leader, timeout_s=10, interval_s=0.02, what="a new leader")
        elected_after_ms = (time.monotonic() - killed_at) * 1000
        assert elected_after_ms <= SESSION_TIMEOUT_MS + HEARTBEAT_MS + 1000, elected_after_ms
        assert client.leader_of(tp).leader_epoch > old.leader_epoch
        count_at_failover = len(acked)
        await wait_until(lambda: _async(len(acked) > count_at_failover + 20), what="writes on the new leader")
        stop.set()
        await task

        await restart_broker(cluster, victim.node_id)

        async def isr_full() -> bool:
            await client.refresh_metadata(["failover"])
            return sorted(client.leader_of(tp).isr) == [1, 2, 3]

        await wait_until(isr_full, timeout_s=30, what="the old leader back in the ISR")
        copies = {b: await read_partition(cluster, b, tp) for b in (1, 2, 3)}

        async def same_everywhere() -> bool:
            copies.update({b: await read_partition(cluster, b, tp) for b in (1, 2, 3)})
            return copies[1] == copies[2] == copies[3]

        await wait_until(same_everywhere, what="byte-identical replicas")
        by_offset = {r.offset: r.value for r in iter_records(copies[leader])}
        missing = [(o, v) for o, v in acked if by_offset.get(o) != v]
        assert not missing, f"acked writes lost or moved: {missing[:5]}"
        assert len(set(by_offset.values())) == len(by_offset), "no value twice"
    finally:
        await client.close()


async def test_the_active_controllers_death_elects_another_that_keeps_topics_leaders_and_epochs(
    cluster: LocalClusterState,
) -> None:
    client = ClusterClient(cluster.bootstrap)
    try:
        resp = await client.create_topic("durable", 3, 3)
        assert resp.topics[0].error_code == ErrorCode.NONE
        await client.wait_for_leaders("durable")
        before = {tp: (i.leader_id, i.leader_epoch) for tp, i in client.partitions.items()}
        c = await active_controller(cluster)
        os.kill(c.pid, signal.SIGKILL)
        await wait_until(lambda: _async(not pid_alive(c.pid)), what="controller gone")
        successor = await active_controller(cluster)
        assert successor.node_id != c.node_id
        # The killed one comes back as a follower of the new leader, with the same metadata.
        offset = log_size(Path(c.log))
        proc = spawn("controller", Path(c.config), Path(c.log))
        c.pid = proc.pid
        await wait_for_listening(Path(c.log), proc, 20, offset)
        async with await BrokerConnection.connect(c.host, c.port) as conn:
            from protocol.messages import MetadataRequest

            async def caught_up() -> bool:
                meta = await conn.send(MetadataRequest(["durable"]))
                return meta.topics[0].error_code == ErrorCode.NONE and len(meta.brokers) == 3

            await wait_until(caught_up, what="the restarted controller replaying the committed metadata")
            meta = await conn.send(MetadataRequest(["durable"]))
        after = {
            TopicPartition("durable", p.partition): (p.leader_id, p.leader_epoch) for p in meta.topics[0].partitions
        }
        assert after == before  # a failover moves no leadership and fences no broker
        # The cluster still works end to end through the new active controller.
        resp = await client.create_topic("after-failover", 1, 3)
        assert resp.topics[0].error_code == ErrorCode.NONE
    finally:
        await client.close()


async def test_sigterm_on_a_broker_moves_its_leaderships_away_first(cluster: LocalClusterState) -> None:
    client = ClusterClient(cluster.bootstrap)
    try:
        await client.create_topic("moving", 3, 3)
        await client.wait_for_leaders("moving")
        victim = next(i.leader_id for i in client.partitions.values())
        led = [tp for tp, i in client.partitions.items() if i.leader_id == victim]
        os.kill(cluster.broker(victim).pid, signal.SIGTERM)
        await wait_until(lambda: _async(not pid_alive(cluster.broker(victim).pid)), timeout_s=20, what="broker exit")
        log = Path(cluster.broker(victim).log).read_text()
        assert "leaderships moved away: True" in log
        await client.refresh_metadata(["moving"])
        assert all(client.leader_of(tp).leader_id not in (victim, -1) for tp in led)
    finally:
        await client.close()


async def _async(value: object) -> object:
    return value


async def test_describe_log_dirs_reports_every_replica(cluster: LocalClusterState) -> None:
    client = ClusterClient(cluster.bootstrap)
    try:
        await client.create_topic("described", 2, 3)
        await client.wait_for_leaders("described")
        b = cluster.brokers[0]
        async with await BrokerConnection.connect(b.host, b.port) as conn:

            async def both_replicas() -> object:
                # LEADER_AND_ISR reaches each broker on its own channel: wait for this one's.
                resp = await conn.send(DescribeLogDirsRequest(["described"]))
                return resp if len(resp.replicas) == 2 else None

            resp = await wait_until(both_replicas, what="both replicas created on broker 1")
        assert sorted((r.topic, r.partition) for r in resp.replicas) == [("described", 0), ("described", 1)]
        assert all(r.log_end_offset == 0 and r.high_watermark == 0 for r in resp.replicas)
    finally:
        await client.close()
