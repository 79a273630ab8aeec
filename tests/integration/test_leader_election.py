"""`minibroker topic elect-leaders` on a real 3-broker cluster (kafka-leader-election.sh --election-type
PREFERRED): after a leader is killed and restarted, leadership stays on the survivor until the election
moves it back to the preferred replica, with a leader epoch bump and every acknowledged record kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cli import cli, cluster_up, error_line, eventually

pytestmark = [pytest.mark.slow]

FAST_FENCING = ("--override", "broker.session.timeout.ms=3000", "--override", "broker.heartbeat.interval.ms=500")


def orders_with_records(tmp_path: Path, *extra: str) -> tuple[str, str]:
    """A 3-broker cluster with topic orders (one partition on all three) holding r0..r49, acks=all."""
    d = cluster_up(tmp_path / "c", 3, *FAST_FENCING, *extra)
    try:
        created = cli("topic", "create", "orders", "--partitions", "1", "--replication-factor", "3", *d)
        assert created.returncode == 0, created.stderr
        produced = cli("produce", "orders", "--acks", "all", *d, stdin="".join(f"r{i}\n" for i in range(50)))
        assert produced.returncode == 0, produced.stderr
    except BaseException:
        cli("cluster", "down", *d, timeout=60)
        raise
    return d


def partition_0(d: tuple[str, str]) -> dict[str, Any]:
    (topic,) = json.loads(cli("topic", "describe", "orders", "--json", *d).stdout)
    partition: dict[str, Any] = topic["partitions"][0]
    return partition


@pytest.mark.timeout(180)
def test_a_preferred_election_moves_leadership_back_after_a_kill_and_restart(tmp_path: Path) -> None:
    d = orders_with_records(tmp_path)
    try:
        before = partition_0(d)
        preferred = before["replicas"][0]
        assert before["leader"] == preferred

        not_needed = cli("topic", "elect-leaders", "--topic", "orders", "--json", *d)
        assert not_needed.returncode == 0, not_needed.stderr
        assert [r["error"] for r in json.loads(not_needed.stdout)["results"]] == ["ELECTION_NOT_NEEDED"]

        assert cli("broker", "kill", "--id", str(preferred), *d).returncode == 0
        eventually(lambda: partition_0(d)["leader"] not in (preferred, -1), what="a new leader")
        refused = cli("topic", "elect-leaders", "--all-topic-partitions", *d)
        assert refused.returncode == 4
        assert error_line(refused).startswith(
            "minibroker: error: election for orders-0 failed: PREFERRED_LEADER_NOT_AVAILABLE: "
            f"preferred replica {preferred} of orders-0"
        )
        more = cli("produce", "orders", "--acks", "all", *d, stdin="".join(f"s{i}\n" for i in range(50)))
        assert more.returncode == 0, more.stderr
        assert cli("broker", "start", "--id", str(preferred), *d).returncode == 0
        eventually(lambda: preferred in partition_0(d)["isr"], what="the restarted broker back in the ISR")
        moved = partition_0(d)
        assert moved["leader"] != preferred  # nothing moves it back by itself

        elected = cli("topic", "elect-leaders", "--all-topic-partitions", *d)

        assert elected.returncode == 0, elected.stderr
        assert elected.stdout == "Successfully completed leader election (PREFERRED) for partitions orders-0\n"
        eventually(lambda: partition_0(d)["leader"] == preferred, what="the preferred replica leading")
        after = partition_0(d)
        assert after["leader_epoch"] == moved["leader_epoch"] + 1
        consumed = cli("consume", "orders", "--from-beginning", "--max-messages", "100", "--timeout-ms", "20000", *d)
        assert consumed.stdout.split() == [f"r{i}" for i in range(50)] + [f"s{i}" for i in range(50)]
        again = cli("topic", "elect-leaders", "--all-topic-partitions", *d)
        assert (again.returncode, again.stdout) == (0, "Every partition is led by its preferred replica\n")
    finally:
        cli("cluster", "down", *d, timeout=60)


@pytest.mark.timeout(60)
def test_elect_leaders_usage_errors_name_the_flag() -> None:
    d = ("--bootstrap-server", "127.0.0.1:1")  # never reached: the flags are checked first
    neither = cli("topic", "elect-leaders", *d)
    other = cli("topic", "elect-leaders", "--election-type", "random", "--all-topic-partitions", *d)
    assert (neither.returncode, other.returncode) == (2, 2)
    assert error_line(neither) == (
        "minibroker: error: give --all-topic-partitions, or --topic T (with --partition P for one partition)"
    )
    assert error_line(other) == "minibroker: error: --election-type random: preferred or unclean"


@pytest.mark.timeout(180)
def test_the_controller_gives_leadership_back_by_itself_every_check_interval(tmp_path: Path) -> None:
    d = orders_with_records(tmp_path, "--override", "leader.imbalance.check.interval.seconds=2")
    try:
        preferred = partition_0(d)["replicas"][0]
        assert cli("broker", "kill", "--id", str(preferred), *d).returncode == 0
        eventually(lambda: partition_0(d)["leader"] not in (preferred, -1), what="a new leader")
        moved = partition_0(d)

        assert cli("broker", "start", "--id", str(preferred), *d).returncode == 0

        eventually(lambda: partition_0(d)["leader"] == preferred, what="the preferred replica leading again")
        assert partition_0(d)["leader_epoch"] == moved["leader_epoch"] + 1
    finally:
        cli("cluster", "down", *d, timeout=60)


@pytest.mark.timeout(180)
def test_an_unclean_election_brings_an_offline_partition_back_without_what_only_its_isr_held(tmp_path: Path) -> None:
    d = orders_with_records(tmp_path)
    try:
        leader, *followers = partition_0(d)["replicas"]
        for follower in followers:
            assert cli("broker", "kill", "--id", str(follower), *d).returncode == 0
        eventually(lambda: partition_0(d)["isr"] == [leader], what="the ISR down to the leader")
        only_leader = cli("produce", "orders", "--acks", "1", *d, stdin="".join(f"s{i}\n" for i in range(50)))
        assert only_leader.returncode == 0, only_leader.stderr
        assert cli("broker", "kill", "--id", str(leader), *d).returncode == 0
        assert cli("broker", "start", "--id", str(followers[0]), *d).returncode == 0  # out of sync
        eventually(lambda: partition_0(d)["leader"] == -1, what="the partition offline")
        clean = cli("topic", "elect-leaders", "--topic", "orders", *d)
        assert clean.returncode == 4  # preferred: the preferred replica is down
        assert partition_0(d)["leader"] == -1  # unclean.leader.election.enable is off: it stays offline

        unclean = cli("topic", "elect-leaders", "--election-type", "unclean", "--topic", "orders", *d)

        assert unclean.returncode == 0, unclean.stderr
        assert unclean.stdout == "Successfully completed leader election (UNCLEAN) for partitions orders-0\n"
        eventually(lambda: partition_0(d)["leader"] == followers[0], what="the out-of-sync replica leading")
        assert partition_0(d)["isr"] == [followers[0]]
        consumed = cli("consume", "orders", "--from-beginning", "--timeout-ms", "3000", *d)
        assert consumed.stdout.split() == [f"r{i}" for i in range(50)]  # the acks=1 records died with the leader
    finally:
        cli("cluster", "down", *d, timeout=60)
