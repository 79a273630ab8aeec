"""The controller quorum on real processes: the active controller killed under acks=all load, a broker
killed while no controller was active, every controller paused; nothing acknowledged is lost, and the
brokers keep serving their partitions without a controller."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from client.cluster_client import ClusterClient
from client.consumer import read_replica
from client.producer import Producer
from cluster.chaos import CHAOS_OVERRIDES
from cluster.local_cluster import (
    LocalClusterState,
    log_size,
    random_base_address,
    restart_broker,
    spawn,
    wait_for_listening,
)
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import TopicPartition
from protocol.record_batch import iter_records
from tests.integration.processes import active_controller, three_brokers, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "quorum"
PARTITIONS = 3


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalClusterState]:
    async with three_brokers(tmp_path / "c", dict(CHAOS_OVERRIDES), random_base_address()) as state:
        yield state


async def _async(value: bool) -> bool:
    return value


async def _cli(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cluster.cli", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


class Load:
    """An idempotent producer writing to every partition of the topic, remembering what was acknowledged."""

    def __init__(self, client: ClusterClient, name: str) -> None:
        self.producer = Producer(client, acks=-1, request_timeout_ms=5000, retries=50)
        self.name = name
        self.acked: dict[TopicPartition, list[tuple[int, bytes]]] = {}
        self.failed = 0
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    async def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            tp = TopicPartition(TOPIC, i % PARTITIONS)
            value = f"{self.name}-{i}".encode()
            i += 1

            def on_ack(offset: int, error: str | None, tp: TopicPartition = tp, value: bytes = value) -> None:
                if error is None:
                    self.acked.setdefault(tp, []).append((offset, value))
                else:
                    self.failed += 1

            await self.producer.send(tp, value, callback=on_ack)
            await asyncio.sleep(0.002)
        await self.producer.flush()

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())

    async def finish(self) -> None:
        self.stop.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, 60)


async def _every_acknowledged_record_is_on_every_replica(
    cluster: LocalClusterState, client: ClusterClient, loads: list[Load]
) -> None:
    for p in range(PARTITIONS):
        tp = TopicPartition(TOPIC, p)

        async def same_everywhere(tp: TopicPartition = tp) -> bytes | None:
            copies = []
            for b in cluster.brokers:
                async with await BrokerConnection.connect(b.host, b.port) as conn:
                    copies.append(await read_replica(conn, tp))
            return copies[0] if len(set(copies)) == 1 else None

        data = await wait_until(same_everywhere, timeout_s=30, what=f"byte-identical replicas of {tp}")
        by_offset = {r.offset: r.value for r in iter_records(data)}
        for load in loads:
            lost = [(o, v) for o, v in load.acked.get(tp, []) if by_offset.get(o) != v]
            assert not lost, f"{tp}: acknowledged writes lost or moved: {lost[:5]}"
        values = list(by_offset.values())
        assert len(values) == len(set(values)), f"{tp}: a record written twice"


async def test_the_active_controllers_death_under_load_loses_nothing_and_a_broker_killed_meanwhile_is_fenced(
    cluster: LocalClusterState,
) -> None:
    client = ClusterClient(cluster.bootstrap)
    try:
        created = await client.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        assert created.topics[0].error_code == ErrorCode.NONE
        await client.wait_for_leaders(TOPIC, partitions=PARTITIONS)
        load = Load(client, "a")
        load.start()
        await wait_until(lambda: _async(load.count > 100), what="writes before the kill")
        old = await active_controller(cluster)
        # The active controller dies, and at once the leader of partition 0: no controller is active then.
        await client.refresh_metadata([TOPIC])
        victim = client.leader_of(TopicPartition(TOPIC, 0)).leader_id
        os.kill(old.pid, signal.SIGKILL)
        os.kill(cluster.broker(victim).pid, signal.SIGKILL)
        new = await active_controller(cluster)
        assert new.node_id != old.node_id

        async def moved() -> bool:
            try:
                await client.refresh_metadata([TOPIC])
            except ConnectionError:
                return False
            return all(
                client.leader_of(TopicPartition(TOPIC, p)).leader_id not in (victim, -1) for p in range(PARTITIONS)
            )

        await wait_until(moved, timeout_s=30, what="the dead broker's leaderships moved by the new controller")
        at_failover = load.count
        await wait_until(lambda: _async(load.count > at_failover + 100), timeout_s=60, what="writes after failover")
        await load.finish()
        # Both come back: the broker rejoins the ISR, the controller follows the new leader.
        await restart_broker(cluster, victim)
        offset = log_size(Path(old.log))
        proc = spawn("controller", Path(old.config), Path(old.log))
        old.pid = proc.pid
        await wait_for_listening(Path(old.log), proc, 30, offset)
        await _every_acknowledged_record_is_on_every_replica(cluster, client, [load])
    finally:
        await client.close()


async def test_with_every_controller_paused_the_brokers_serve_old_and_new_idempotent_producers(
    cluster: LocalClusterState,
) -> None:
    client = ClusterClient(cluster.bootstrap)
    try:
        created = await client.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        assert created.topics[0].error_code == ErrorCode.NONE
        await client.wait_for_leaders(TOPIC, partitions=PARTITIONS)
        before = Load(client, "before")
        before.start()
        await wait_until(lambda: _async(before.count > 100), what="writes before the pause")
        for c in cluster.controllers:
            os.kill(c.pid, signal.SIGSTOP)
        paused_at = before.count
        # The producer that started before goes on writing to the leaders it has.
        await wait_until(lambda: _async(before.count > paused_at + 200), timeout_s=30, what="writes, no controller")
        # A new idempotent producer gets its id from a broker's block, with no controller to ask.
        fresh = ClusterClient(cluster.bootstrap)
        try:
            await fresh.wait_for_leaders(TOPIC, partitions=PARTITIONS)  # metadata from a broker
            after = Load(fresh, "after")
            after.start()
            await wait_until(lambda: _async(after.count > 100), timeout_s=30, what="a new producer's writes")
            assert after.producer.producer_id >= 0 and after.producer.producer_id != before.producer.producer_id
            await after.finish()
        finally:
            await fresh.close()
        # cluster status says no controller is reachable, from the brokers' own metadata: no broker fenced.
        returncode, out = await _cli("cluster", "status", "--dir", cluster.dir, "--json")
        assert returncode == 0, out
        st = json.loads(out)
        assert st["controller"]["alive"] is False and st["quorum"] is None
        assert all(b["alive"] and b["registered"] for b in st["brokers"])
        assert {p["topic"] for p in st["partitions"]} == {TOPIC}
        _, text = await _cli("cluster", "status", "--dir", cluster.dir)
        assert "NO ACTIVE CONTROLLER" in text and "fenced" not in text
        await before.finish()
        for c in cluster.controllers:
            os.kill(c.pid, signal.SIGCONT)
        await active_controller(cluster)
        await _every_acknowledged_record_is_on_every_replica(cluster, client, [before, after])
    finally:
        await client.close()
