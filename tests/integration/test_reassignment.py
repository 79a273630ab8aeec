"""Partition reassignment (KIP-455) on a real 4-broker cluster under load: `minibroker topic reassign`
adds a replica that copies the log from empty and joins the ISR, then the removed replica (here the
leader) is stopped and deleted; no acknowledged write is lost and the replicas end byte-identical."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.processes import ROOT
from tests.integration.test_cli import clean_env, cli, cluster_up, eventually

pytestmark = [pytest.mark.slow]


def log_bytes(cluster_dir: Path, broker_id: int, name: str) -> bytes:
    """Every record batch of a replica, segment after segment (what a follower copied byte for byte)."""
    segments = sorted((cluster_dir / f"broker-{broker_id}" / "data" / name).glob("*.log"))
    return b"".join(p.read_bytes() for p in segments)


def describe(d: tuple[str, str], topic: str) -> dict[str, object]:
    out = cli("topic", "describe", topic, "--json", *d)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    topics = data if isinstance(data, list) else data["topics"]
    return topics[0]["partitions"][0]  # type: ignore[no-any-return]


@pytest.mark.timeout(240)
def test_moving_a_partition_off_its_leader_under_load_loses_nothing(tmp_path: Path) -> None:
    cluster_dir = tmp_path / "c"
    d = cluster_up(cluster_dir, 4)
    try:
        created = cli(
            *("topic", "create", "moving", "--partitions", "1", "--replication-factor", "3"),
            *("--config", "min.insync.replicas=2", "--config", "segment.bytes=65536", *d),
        )
        assert created.returncode == 0, created.stderr
        before = describe(d, "moving")
        leader, replicas = int(before["leader"]), [int(r) for r in before["replicas"]]  # type: ignore[call-overload]
        newcomer = next(b for b in (1, 2, 3, 4) if b not in replicas)
        target = [newcomer, *[r for r in replicas if r != leader]]

        # a producer writing 6000 numbered records with acks=all, in small batches, all through the move
        values = [f"r{i:05d}" for i in range(6000)]
        producer = subprocess.Popen(
            [sys.executable, "-m", "cluster", "produce", "moving", "--acks", "all", "--batch-size", "5", "--json", *d],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=clean_env(),
        )
        assert producer.stdin is not None
        producer.stdin.write("\n".join(values[:3000]) + "\n")
        producer.stdin.flush()

        # the move starts while the first half is being written; the second half is written during it
        moved = cli("topic", "reassign", "moving", "--partition", "0", "--replicas", ",".join(map(str, target)), *d)
        assert moved.returncode == 0, moved.stderr
        producer.stdin.write("\n".join(values[3000:]) + "\n")
        producer.stdin.close()
        producer.stdin = None  # closed: communicate() must not flush it
        out, err = producer.communicate(timeout=120)
        result = json.loads(out)
        # A batch parked on the old leader when it is stopped was appended there and may have reached the
        # new replicas: it is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND. The producer is idempotent, so it
        # resends it and the new leader answers a copy it has with the original offset: nothing fails.
        assert producer.returncode == 0, err
        assert result["idempotent"] is True
        assert (result["acked"], result["failed"]) == (len(values), 0), result

        # --verify exits 1 while the newcomer catches up, then 0; the old leader's replica is deleted
        eventually(lambda: cli("topic", "reassign", "--verify", "moving", *d).returncode == 0, what="move done")
        after = describe(d, "moving")
        assert [int(r) for r in after["replicas"]] == target  # type: ignore[union-attr]
        assert int(after["leader"]) in target and int(after["leader"]) != leader  # type: ignore[call-overload]
        eventually(lambda: not (cluster_dir / f"broker-{leader}" / "data" / "moving-0").exists(), what="deletion")

        # every record is there exactly once, in the order it was written
        consumed = cli("consume", "moving", "--from-beginning", "--max-messages", "7000", "--timeout-ms", "3000", *d)
        assert consumed.returncode == 0, consumed.stderr
        assert consumed.stdout.split() == values
        # and the replicas are byte-identical, the newcomer's copy included
        eventually(
            lambda: len({log_bytes(cluster_dir, b, "moving-0") for b in target}) == 1,
            what="identical replicas",
        )
        assert len(log_bytes(cluster_dir, newcomer, "moving-0")) > 6000 * 6
    finally:
        cli("cluster", "down", *d, timeout=60)


@pytest.mark.timeout(120)
def test_a_throttled_move_copies_at_the_throttle_and_verify_removes_it(tmp_path: Path) -> None:
    # Given a 1-replica topic holding ~1.5 MB on one of two brokers
    cluster_dir = tmp_path / "c"
    d = cluster_up(cluster_dir, 2)
    try:
        assert cli("topic", "create", "big", "--partitions", "1", "--replication-factor", "1", *d).returncode == 0
        produced = cli("produce", "big", "--count", "1500", "--size", "1000", *d)
        assert produced.returncode == 0, produced.stderr
        leader = int(describe(d, "big")["leader"])  # type: ignore[call-overload]
        other = 3 - leader

        # When it gains a replica on the other broker with --throttle 200000 (200 kB/s)
        start = time.monotonic()
        moved = cli(
            "topic",
            "reassign",
            "big",
            "--partition",
            "0",
            "--replicas",
            f"{leader},{other}",
            "--throttle",
            "200000",
            *d,
        )
        assert moved.returncode == 0, moved.stderr
        # then the brokers throttle exactly the moving replicas, as kafka-reassign-partitions sets them
        configs = json.loads(cli("topic", "describe", "big", "--json", *d).stdout)[0]["configs"]
        assert configs["leader.replication.throttled.replicas"] == f"0:{leader}"
        assert configs["follower.replication.throttled.replicas"] == f"0:{other}"
        # and the copy takes seconds (unthrottled it takes well under one: 1 MiB per fetch)
        eventually(lambda: cli("topic", "reassign", "--verify", "big", *d).returncode == 0, what="move done")
        took = time.monotonic() - start
        assert took >= 3.0, f"1.5 MB at 200 kB/s (after a first 1 MiB fetch) took only {took:.1f} s"
        # and --verify removed the throttle once the move was done
        after = json.loads(cli("topic", "describe", "big", "--json", *d).stdout)[0]["configs"]
        assert not any("throttled" in key for key in after), after
        assert log_bytes(cluster_dir, leader, "big-0") == log_bytes(cluster_dir, other, "big-0")
    finally:
        cli("cluster", "down", *d, timeout=60)
