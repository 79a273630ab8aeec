"""Controller-only requests need the cluster secret; `cluster up` in the foreground stops everything on
Ctrl-C; a broker's metric records match what it serves."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from client.cluster_client import ClusterClient
from cluster.local_cluster import free_ports, pid_alive, start_cluster, stop_cluster
from metrics.file_sink import read_records
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import (
    BrokerRegistrationRequest,
    DescribeLogDirsRequest,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    SaslAuthenticateRequest,
    TopicPartition,
)
from tests.integration.processes import ROOT, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def test_with_a_cluster_secret_only_authenticated_connections_may_change_state(tmp_path: Path) -> None:
    ports = free_ports(4)
    state = await start_cluster(
        tmp_path / "c",
        3,
        controller_port=ports[3],
        broker_ports=ports[:3],
        secret="s3cret",
        overrides={"metrics.interval.ms": "200"},
    )
    try:
        b = state.brokers[0]
        async with await BrokerConnection.connect(b.host, b.port) as conn:
            state_change = LeaderAndIsrRequest(0, 99, [LeaderAndIsrPartition("evil", 0, 1, 5, [1], 5, [1])])
            refused = await conn.send(state_change)
            assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            logs = await conn.send(DescribeLogDirsRequest())
            assert all(r.topic != "evil" for r in logs.replicas), "nothing was applied"
            # an unauthenticated client does not learn where the data lives on the host
            assert not logs.log_dir.startswith("/") and logs.log_dir == Path(b.dir, "data").name
            # a wrong secret is answered after a delay, and the connection is closed
            started = time.monotonic()
            wrong = await conn.send(SaslAuthenticateRequest(b"guess"))
            assert wrong.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            assert time.monotonic() - started >= 0.09
            await asyncio.wait_for(conn.wait_closed(), 5.0)
        c = state.controllers[0]
        async with await BrokerConnection.connect(c.host, c.port) as conn:
            resp = await conn.send(BrokerRegistrationRequest(9, "127.0.0.1", 1, "intruder"))
            assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        # CREATE_TOPICS through a broker needs the secret too: the broker does not lend its own link.
        anonymous = ClusterClient(state.bootstrap)
        try:
            refused_create = await anonymous.create_topic("guarded", 2, 3)
            assert refused_create.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            refused_election = await anonymous.elect_leaders()  # leadership moves are an admin's too
            assert refused_election.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        finally:
            await anonymous.close()
        client = ClusterClient(state.bootstrap, secret="s3cret")
        try:
            created = await client.create_topic("guarded", 2, 3)
            assert created.topics[0].error_code == ErrorCode.NONE, created.topics[0].error_message
            await client.wait_for_leaders("guarded")
        finally:
            await client.close()
    finally:
        stop_cluster(state)


async def test_metric_records_match_what_the_broker_serves(tmp_path: Path) -> None:
    ports = free_ports(4)
    state = await start_cluster(
        tmp_path / "c", 3, controller_port=ports[3], broker_ports=ports[:3], overrides={"metrics.interval.ms": "100"}
    )
    client = ClusterClient(state.bootstrap)
    try:
        await client.create_topic("measured", 1, 3)
        await client.wait_for_leaders("measured")
        tp = TopicPartition("measured", 0)
        from client.producer import send_batch

        for _ in range(10):
            outcome, _, message = await send_batch(client, tp, [b"m" * 100] * 10, acks=-1)
            assert outcome == "acked", message
        leader = state.broker(client.leader_of(tp).leader_id)
        async with await BrokerConnection.connect(leader.host, leader.port) as conn:
            (served,) = (await conn.send(DescribeLogDirsRequest(["measured"]))).replicas
        assert served.log_end_offset == 100

        def latest() -> dict[str, object] | None:
            rows = [
                r
                for r in read_records(Path(state.metrics_dir))
                if r.get("kind") == "partition"
                and r.get("topic") == "measured"
                and r.get("broker_id") == leader.node_id
            ]
            return max(rows, key=lambda r: r["ts_ms"]) if rows else None  # type: ignore[arg-type, return-value]

        async def caught_up() -> dict[str, object] | None:
            rec = latest()
            return rec if rec and rec["high_watermark"] == 100 else None

        record = await wait_until(caught_up, what="a metrics record with the final HW")
        assert record["role"] == "leader" and record["log_end_offset"] == served.log_end_offset
        assert record["MessagesInPerSec"] == 100
        assert record["BytesInPerSec"] > 100 * 100
        assert record["isr_size"] == 3 and record["replica_count"] == 3 and record["under_replicated"] is False
        assert sorted(f["broker_id"] for f in record["followers"]) == sorted(  # type: ignore[union-attr]
            b.node_id for b in state.brokers if b.node_id != leader.node_id
        )

        # Each broker writes its broker record on its own schedule: wait for all three, do not assume it.
        async def every_broker_reported() -> list[dict[str, object]] | None:
            rows = [r for r in read_records(Path(state.metrics_dir)) if r.get("kind") == "broker"]
            return rows if {r["broker_id"] for r in rows} == {1, 2, 3} else None

        brokers = await wait_until(every_broker_reported, what="a broker record from every broker")
        assert all(r["MetricsDropped"] == 0 for r in brokers)
        # the event-loop lag of the interval, measured: a probe ran, and an idle broker's loop waits little
        assert all(0.0 <= float(r["LoopLagAvgMs"]) <= float(r["LoopLagMaxMs"]) < 1000.0 for r in brokers)  # type: ignore[arg-type]
    finally:
        await client.close()
        stop_cluster(state)


def test_cluster_up_in_the_foreground_stops_every_process_on_ctrl_c(tmp_path: Path) -> None:
    import socket

    base = None
    for _ in range(50):
        (candidate,) = free_ports(1)
        try:
            socks = []
            for port in (candidate, candidate + 1, candidate + 100):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            base = candidate
            break
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    assert base is not None
    cluster_dir = tmp_path / "fg"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cluster",
            "cluster",
            "up",
            "--brokers",
            "2",
            "--dir",
            str(cluster_dir),
            "--base-port",
            str(base),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 60
        while not (cluster_dir / "cluster.json").exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "cluster did not come up"
            time.sleep(0.05)
        pids = [p["pid"] for p in json.loads((cluster_dir / "cluster.json").read_text())["controllers"]]
        pids += [b["pid"] for b in json.loads((cluster_dir / "cluster.json").read_text())["brokers"]]
        assert all(pid_alive(pid) for pid in pids)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "cluster running in" in out
        assert "stopping the cluster" in err
        asyncio.run(asyncio.sleep(0))
        assert not any(pid_alive(pid) for pid in pids)
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_with_a_cluster_secret_forged_follower_fetches_cannot_move_the_high_watermark(tmp_path: Path) -> None:
    from client.producer import send_batch
    from protocol.messages import FetchPartition, FetchRequest

    ports = free_ports(4)
    state = await start_cluster(tmp_path / "c", 3, controller_port=ports[3], broker_ports=ports[:3], secret="s3cret")
    client = ClusterClient(state.bootstrap, secret="s3cret")
    paused: list[int] = []
    try:
        created = await client.create_topic("forged", 1, 3, {"min.insync.replicas": "2"})
        assert created.topics[0].error_code == ErrorCode.NONE, created.topics[0].error_message
        await client.wait_for_leaders("forged")
        tp = TopicPartition("forged", 0)
        outcome, _, message = await send_batch(client, tp, [b"replicated"], acks=-1)
        assert outcome == "acked", message  # the real followers replicate through authenticated fetches
        leader = client.leader_of(tp)
        followers = [b for b in state.brokers if b.node_id != leader.leader_id]
        # given both real followers paused (well within the session timeout, so nobody is fenced yet)
        for f in followers:
            os.kill(f.pid, signal.SIGSTOP)
            paused.append(f.pid)
        # when an acks=all produce waits for them and a client claims to be each follower, at the log end
        produce = asyncio.ensure_future(send_batch(client, tp, [b"unreplicated"], acks=-1, retries=0, timeout_ms=3000))
        ep = state.broker(leader.leader_id)
        async with await BrokerConnection.connect(ep.host, ep.port) as forger:
            for _ in range(20):
                for f in followers:
                    forged = await forger.send(
                        FetchRequest(
                            replica_id=f.node_id,
                            max_wait_ms=0,
                            min_bytes=1,
                            max_bytes=1 << 20,
                            partitions=[FetchPartition("forged", 0, 2, 1 << 20)],
                        )
                    )
                    # then the leader refuses them: only authenticated brokers may fetch as replicas
                    assert forged.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                await asyncio.sleep(0.05)
        # and the produce is not acknowledged: no follower holds the record
        outcome, _, message = await produce
        assert outcome != "acked", "the HW moved on forged fetches"
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        await client.close()
        stop_cluster(state)


def test_with_a_secret_a_kafka_client_that_did_not_authenticate_creates_no_topic_and_sees_no_paths(
    tmp_path: Path,
) -> None:
    # Metadata auto-created topics for any client (1,000 a request) while CreateTopics was refused; and
    # DescribeConfigs showed log.dirs, which DescribeLogDirs hides from the same client.
    confluent_kafka = pytest.importorskip("confluent_kafka")
    admin_api = pytest.importorskip("confluent_kafka.admin")
    from tests.integration.processes import kafka_cluster

    with kafka_cluster(tmp_path / "c", {}, secret="s3cret") as state:
        producer = confluent_kafka.Producer({"bootstrap.servers": state.kafka_bootstrap})
        asked = producer.list_topics(topic="made-up", timeout=20).topics["made-up"]  # allow_auto_topic_creation
        assert asked.error is not None and asked.error.code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART

        async def topics() -> set[str]:
            async with ClusterClient(state.bootstrap, secret="s3cret") as client:
                return {t.topic for t in (await client.refresh_metadata()).topics}

        assert "made-up" not in asyncio.run(topics())
        admin = admin_api.AdminClient({"bootstrap.servers": state.kafka_bootstrap})
        broker = admin_api.ConfigResource(admin_api.ResourceType.BROKER, "1")
        configs = admin.describe_configs([broker])[broker].result(timeout=20)
        assert configs["log.dirs"].value == "data"  # the directory's name, not where it is on the host
