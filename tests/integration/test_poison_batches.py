"""Poison on a real cluster: batches whose CRC is right but whose records are not are refused by the leader;
and a consumer that meets one anyway (written before validation existed) says where and reads on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from client.cluster_client import ClusterClient
from client.producer import send_batch
from cluster.local_cluster import LocalClusterState, free_ports, pid_alive, restart_broker, start_cluster, stop_cluster
from protocol.errors import ErrorCode
from protocol.messages import ProducePartition, ProduceRequest, TopicPartition
from tests.integration.processes import ROOT, wait_until
from tests.storage.test_log_validator import POISON, batch_with_payload, records

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalClusterState]:
    ports = free_ports(2)
    state = await start_cluster(tmp_path / "c", 1, controller_port=ports[1], broker_ports=ports[:1])
    try:
        yield state
    finally:
        stop_cluster(state)


async def test_the_leader_refuses_every_kind_of_poison_and_keeps_serving(cluster: LocalClusterState) -> None:
    client = ClusterClient(cluster.bootstrap)
    tp = TopicPartition("poison", 0)
    try:
        await client.create_topic("poison", 1, 1)
        await client.wait_for_leaders("poison")
        outcome, _, message = await send_batch(client, tp, [b"before"], acks=-1)
        assert outcome == "acked", message
        for name, batch in POISON.items():
            resp = await client.send_to(1, ProduceRequest(-1, 5000, [ProducePartition("poison", 0, batch)]))
            [p] = resp.partitions
            assert p.error_code == ErrorCode.INVALID_RECORD, (name, p)
            assert "batch at byte 0" in (p.error_message or ""), (name, p.error_message)
        outcome, base, message = await send_batch(client, tp, [b"after"], acks=-1)
        assert outcome == "acked" and base == 1, message  # nothing of the poison was appended
    finally:
        await client.close()
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cluster", "consume", "poison", "--from-beginning", "--max-messages", "2"]
        + ["--bootstrap-server", cluster.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0 and result.stdout.split() == ["before", "after"], result


async def test_a_consumer_that_meets_a_corrupt_batch_names_it_and_reads_the_other_partitions(
    cluster: LocalClusterState,
) -> None:
    client = ClusterClient(cluster.bootstrap)
    try:
        await client.create_topic("old", 2, 1)
        await client.wait_for_leaders("old")
        for p in (0, 1):
            for i in range(3):
                outcome, _, message = await send_batch(client, TopicPartition("old", p), [f"p{p}-{i}".encode()], acks=1)
                assert outcome == "acked", message
    finally:
        await client.close()
    # given a poison batch (valid CRC) at offset 3 of partition 1, as an older broker could have written it
    broker = cluster.brokers[0]
    os.kill(broker.pid, signal.SIGTERM)

    async def stopped() -> bool:
        return not pid_alive(broker.pid)

    await wait_until(stopped, what="the broker stopped")
    [segment] = sorted((Path(broker.dir) / "data" / "old-1").glob("*.log"))
    poison = bytearray(batch_with_payload(records([0, 0, None, "not bytes"])))
    poison[0:8] = (3).to_bytes(8, "big")  # its base offset continues the log
    with open(segment, "ab") as f:
        f.write(poison)
    await restart_broker(cluster, broker.node_id)

    # when the topic is consumed from the beginning
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "cluster", "consume", "old", "--from-beginning", "--max-messages", "10"]
        + ["--timeout-ms", "3000", "--bootstrap-server", cluster.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    # then every readable record is printed, the bad batch is named, and the exit code says something broke
    assert sorted(result.stdout.split()) == sorted([f"p{p}-{i}" for p in (0, 1) for i in range(3)]), result
    assert "old partition 1: corrupt batch at offset 3" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert result.returncode == 4
