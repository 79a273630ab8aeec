"""Bad disks under a real cluster: a byte changed on disk while a broker was cleanly stopped, and a disk
that fills up. In both the damaged replica goes offline, the controller is told and moves leadership to a
healthy replica, and no acknowledged record is skipped or lost."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from client.cluster_client import ClusterClient
from client.consumer import consume_all
from client.producer import send_batch
from cluster.chaos import CHAOS_OVERRIDES
from cluster.local_cluster import LocalClusterState, free_ports, pid_alive, restart_broker, start_cluster, stop_cluster
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import (
    DEBUGGING_REPLICA_ID,
    FetchPartition,
    FetchRequest,
    MetadataRequest,
    PartitionMetadata,
    TopicPartition,
)
from protocol.record_batch import iter_headers
from tests.integration.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

TOPIC = "stored"
TP = TopicPartition(TOPIC, 0)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalClusterState]:
    ports = free_ports(4)
    state = await start_cluster(
        tmp_path / "c", 3, controller_port=ports[3], overrides=dict(CHAOS_OVERRIDES), broker_ports=ports[:3]
    )
    try:
        yield state
    finally:
        stop_cluster(state, timeout_s=10.0)


async def isr_and_leader(client: ClusterClient) -> tuple[list[int], int]:
    """The ISR and leader of TP as a broker that knows the topic tells them: a broker that has just
    restarted answers UNKNOWN_TOPIC_OR_PARTITION until the controller's metadata reaches it."""

    async def partition() -> PartitionMetadata | None:
        md = await client.send_any(MetadataRequest([TOPIC]))
        return md.topics[0].partitions[0] if md.topics[0].partitions else None

    p = await wait_until(partition, what=f"a broker that knows {TOPIC}")
    return sorted(p.isr), p.leader_id


async def produce(client: ClusterClient, count: int, start: int = 0) -> list[bytes]:
    values = []
    for i in range(start, start + count):
        value = f"r{i:06d}".encode() * 10
        outcome, _, message = await send_batch(client, TP, [value], acks=-1)
        assert outcome == "acked", message
        values.append(value)
    return values


async def stopped(pid: int) -> None:
    async def gone() -> bool:
        return not pid_alive(pid)

    await wait_until(gone, timeout_s=20, what=f"pid {pid} to exit")


async def debug_read(state: LocalClusterState, broker_id: int) -> int:
    """Read the whole replica on `broker_id` as the debugging replica id does; the error code of the read."""
    b = state.broker(broker_id)
    offset = 0
    async with await BrokerConnection.connect(b.host, b.port) as conn:
        while True:
            resp = await conn.send(
                FetchRequest(DEBUGGING_REPLICA_ID, 0, 1, 1 << 20, [FetchPartition(TOPIC, 0, offset, 1 << 20)])
            )
            [p] = resp.partitions
            if p.error_code != ErrorCode.NONE or not p.records:
                return p.error_code
            offset = list(iter_headers(p.records))[-1].next_offset


async def test_a_replica_damaged_while_stopped_goes_offline_at_open_and_is_never_elected(
    cluster: LocalClusterState,
) -> None:
    client = ClusterClient(cluster.bootstrap)
    try:
        created = await client.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2", "segment.bytes": "16384"})
        assert created.topics[0].error_code == ErrorCode.NONE, created.topics[0].error_message
        await client.wait_for_leaders(TOPIC)
        values = await produce(client, 600)
        _, leader = await isr_and_leader(client)
        damaged_id = min(b.node_id for b in cluster.brokers if b.node_id != leader)
        damaged = cluster.broker(damaged_id)

        # given a follower stopped cleanly, one base offset in a closed segment flipped on its disk, restarted
        os.kill(damaged.pid, signal.SIGTERM)
        await stopped(damaged.pid)
        segments = sorted((Path(damaged.dir) / "data" / f"{TOPIC}-0").glob("*.log"))
        assert len(segments) >= 3
        raw = bytearray(segments[1].read_bytes())
        second = list(iter_headers(bytes(raw)))[1]
        raw[second.position + 7] ^= 0x40  # outside the CRC: the batch now claims offsets 64 away
        segments[1].write_bytes(raw)
        await restart_broker(cluster, damaged_id)

        # then opening the log finds it, before anything reads that range: the replica is offline at once
        broker_log = Path(damaged.dir) / "storage"

        async def offline_at_open() -> bool:
            return f"{TOPIC}-0 is offline: batch at byte {second.position} of" in broker_log.read_text()

        await wait_until(offline_at_open, what="the damaged replica offline at open")
        # and it never rejoins the ISR, while a read of it refuses with KAFKA_STORAGE_ERROR instead of a hole
        for _ in range(10):
            isr, _ = await isr_and_leader(client)
            assert damaged_id not in isr
            await asyncio.sleep(0.3)
        assert await debug_read(cluster, damaged_id) == ErrorCode.KAFKA_STORAGE_ERROR

        # and when the leader dies, the healthy replica leads, and every acknowledged record reads back in order
        os.kill(cluster.broker(leader).pid, signal.SIGKILL)

        async def new_leader() -> int | None:
            await client.refresh_metadata([TOPIC])
            info = client.partitions.get(TP)
            return info.leader_id if info is not None and info.leader_id not in (-1, leader) else None

        elected = await wait_until(new_leader, what="a new leader")
        assert elected != damaged_id
        consumer = await consume_all(client, [TP], True, len(values), 10_000)
        assert consumer.positions[TP] == len(values) and consumer.nonmonotonic == 0
    finally:
        await client.close()


def mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return (
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=False).returncode == 0
    )


@pytest.fixture
async def cluster_with_a_small_disk(tmp_path: Path) -> AsyncIterator[LocalClusterState]:
    """Broker 2's log dir on a 1 MiB tmpfs; needs root (CI runs as root)."""
    small = tmp_path / "c" / "broker-2" / "data"
    if not mount_tmpfs(small, "1m"):
        pytest.skip("needs root and tmpfs to fill a disk")
    ports = free_ports(4)
    try:
        state = await start_cluster(
            tmp_path / "c", 3, controller_port=ports[3], overrides=dict(CHAOS_OVERRIDES), broker_ports=ports[:3]
        )
        try:
            yield state
        finally:
            stop_cluster(state, timeout_s=10.0)
    finally:
        with contextlib.suppress(OSError):
            await asyncio.to_thread(subprocess.run, ["umount", "-l", str(small)], check=False)


async def test_a_full_disk_takes_its_replicas_offline_and_writes_go_on_through_the_others(
    cluster_with_a_small_disk: LocalClusterState,
) -> None:
    cluster = cluster_with_a_small_disk
    client = ClusterClient(cluster.bootstrap)
    try:
        created = await client.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
        assert created.topics[0].error_code == ErrorCode.NONE, created.topics[0].error_message
        await client.wait_for_leaders(TOPIC)
        # when 2 MiB are produced with acks=all (the small disk holds 1 MiB)
        acked = 0
        codes: set[str] = set()
        for i in range(200):
            outcome, _, message = await send_batch(client, TP, [bytes([i % 256]) * 10_000], acks=-1, timeout_ms=5000)
            if outcome == "acked":
                acked += 1
            else:
                codes.add(message.split(":")[0])
        # then writes went on through the two healthy replicas (a storage error is retried, never -1)
        assert acked >= 190, (acked, codes)
        assert "UNKNOWN_SERVER_ERROR" not in codes
        isr, leader = await isr_and_leader(client)
        assert 2 not in isr and leader != 2
        # the broker with the full disk is still up, said so once, and serves metadata
        small = cluster.broker(2)
        assert pid_alive(small.pid)
        text = Path(small.log).read_text()
        assert text.count(f"{TOPIC}-0 is offline:") == 1, text[-2000:]
        assert text.count("Traceback") == 0
        async with await BrokerConnection.connect(small.host, small.port) as conn:
            assert (await conn.send(MetadataRequest([TOPIC]))).topics[0].error_code == ErrorCode.NONE
    finally:
        await client.close()
