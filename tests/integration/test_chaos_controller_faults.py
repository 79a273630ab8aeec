"""`minibroker chaos run` faults on the active controller, on one cluster of real processes (three
controllers, three brokers journalling what they acknowledge): killed, paused, cut off from the other
voters, isolated. Under acks=all load each keeps every acknowledged write, and each round measures how long
no voter answered DESCRIBE_QUORUM as an active controller, and who leads after."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.chaos import CHAOS_OVERRIDES
from cluster.chaos_faults import FaultRun
from cluster.local_cluster import (
    LocalClusterState,
    free_ports,
    random_base_address,
    start_cluster,
    stop_cluster,
)
from cluster.network_faults import NetworkFaults, leftovers
from tests.integration.processes import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

needs_iptables = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("iptables") is None or shutil.which("tc") is None,
    reason="network faults need root, iptables and tc (scripts/test.sh installs them; CI runs as root)",
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterState]:
    ports = free_ports(4)
    state = asyncio.run(
        start_cluster(
            tmp_path_factory.mktemp("chaos-controller") / "c",
            3,
            controller_port=ports[3],
            broker_ports=ports[:3],
            overrides=dict(CHAOS_OVERRIDES),
            base_address=random_base_address(),
            ack_journal=True,
        )
    )
    try:
        yield state
    finally:
        stop_cluster(state, timeout_s=10.0)


async def run_faults(state: LocalClusterState, faults: str, topic: str, fault_ms: int) -> dict[str, Any]:
    """One run against the module's cluster, a topic of its own (the journals and the oracle look at the
    run's topic only), one round per fault named."""
    args = argparse.Namespace(
        faults=faults,
        rounds=len(faults.split(",")),
        seed=3,
        fault_ms=fault_ms,
        interval_ms=0,
        topic=topic,
        partitions=4,
        producers=2,
    )
    net = NetworkFaults(Path(state.dir))
    try:
        return await FaultRun(state, args, lambda message: None, net).run()
    finally:
        net.remove()


def assert_valid(report: dict[str, Any]) -> None:
    assert report["valid"] is True, (report["examples"], report["acknowledgements"])
    for key in ("lost_writes", "duplicates", "inconsistent_offsets", "divergent_replicas", "nonmonotonic"):
        assert report[key] == 0, (key, report["examples"])
    assert report["acknowledgements"]["evidence"] == "produce.ack.journal of every broker"
    assert report["converged"] is True and report["acked"] > 50


def assert_brokers_kept_their_leaders(fault: dict[str, Any]) -> None:
    """No partition of the topic was without a leader: the brokers lead on without a controller."""
    assert fault["no_leader_ms"] and set(fault["no_leader_ms"].values()) == {0.0}, fault["no_leader_ms"]


async def test_the_active_controller_killed_then_paused_under_load_loses_no_acknowledged_write(
    cluster: LocalClusterState,
) -> None:
    # Paused 5 s: longer than the followers' fetch timeout (2 s), so they elect another leader meanwhile.
    report = await run_faults(cluster, "kill-controller,pause-controller", "controller-kill-pause", 5000)
    assert_valid(report)
    kill, pause = report["faults"]
    for fault in (kill, pause):
        outage = fault["controller"]
        assert fault["target"] == outage["old_leader"] and fault["target"] in {c.node_id for c in cluster.controllers}
        assert outage["no_active_controller_ms"] is not None and outage["no_active_controller_ms"] > 0, outage
        assert outage["leader_changed"] is True and outage["epoch_bumped"] is True, outage
        assert outage["quorum_whole_after_heal_ms"] is not None, outage
        assert outage["samples"] > 50  # every voter asked every 20 ms while the round lasted
        assert_brokers_kept_their_leaders(fault)
    assert kill["how"].startswith("SIGKILL") and kill["controller"]["old_leader_resigned_after_ms"] is None
    assert pause["how"].startswith("SIGSTOP") and pause["healed_after_ms"] >= 5000
    summary = report["controller_faults"]
    assert summary["faults"] == 2 and summary["unresolved"] == 0 and summary["leader_changes"] == 2
    times = [f["controller"]["no_active_controller_ms"] for f in report["faults"]]
    assert summary["no_active_controller_ms"]["total"] == round(sum(times), 1)


@needs_iptables
async def test_a_leader_cut_from_the_other_voters_resigns_and_another_leads_while_the_brokers_serve(
    cluster: LocalClusterState,
) -> None:
    assert leftovers() == []
    report = await run_faults(cluster, "partition:active-controller-from-voters", "controller-from-voters", 1500)
    assert leftovers() == []
    assert_valid(report)
    [fault] = report["faults"]
    outage = fault["controller"]
    old = cluster.controller(outage["old_leader"]).host
    voters = {c.host for c in cluster.controllers} - {old}
    assert all(f"{old}->{v}" in fault["how"] and f"{v}->{old}" in fault["how"] for v in voters)
    assert all(b.host not in fault["how"] for b in cluster.brokers)  # it still talks to the brokers
    # It lost its quorum: no majority fetched from it, so it resigned (check quorum), and the other two
    # elected a leader of a newer epoch.
    assert outage["old_leader_resigned_after_ms"] is not None, outage
    assert outage["leader_changed"] is True and outage["epoch_bumped"] is True, outage
    assert outage["new_leader"] != outage["old_leader"] and outage["no_active_controller_ms"] is not None
    assert_brokers_kept_their_leaders(fault)
    # acks=all writes were acknowledged while it lasted: the longest stretch without one is shorter
    assert fault["acks_all_failed_ms"] < fault["healed_after_ms"], fault


@needs_iptables
async def test_an_isolated_active_controller_is_replaced_and_no_acknowledged_write_is_lost(
    cluster: LocalClusterState,
) -> None:
    report = await run_faults(cluster, "partition:isolate-active-controller", "controller-isolated", 1500)
    assert leftovers() == []
    assert_valid(report)
    [fault] = report["faults"]
    outage = fault["controller"]
    old = cluster.controller(outage["old_leader"]).host
    assert all(f"{old}->{n.host}" in fault["how"] for n in cluster.nodes if n.host != old)
    assert outage["leader_changed"] is True and outage["old_leader_resigned_after_ms"] is not None, outage
    assert_brokers_kept_their_leaders(fault)


def chaos_run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cluster", "chaos", "run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env or dict(os.environ),
    )


def test_a_controller_partition_without_iptables_is_refused_before_anything_starts() -> None:
    result = chaos_run(
        "--faults", "kill-controller,partition:isolate-active-controller", env={**os.environ, "PATH": "/nonexistent"}
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "minibroker: error: partition: network faults need iptables and tc "
        "(apt-get install iptables iproute2; scripts/test.sh installs them)"
    )


def test_controller_faults_on_a_cluster_of_one_controller_are_refused(tmp_path: Path) -> None:
    def node(role: str, node_id: int, host: str) -> dict[str, Any]:
        return {"role": role, "node_id": node_id, "host": host, "port": 1, "pid": 0, "dir": "", "log": "", "config": ""}

    brokers = [node("broker", i, f"127.3.0.{10 + i}") for i in (1, 2, 3)]
    state = {"dir": str(tmp_path), "controllers": [node("controller", 3000, "127.3.0.10")], "brokers": brokers}
    (tmp_path / "cluster.json").write_text(json.dumps(state))
    result = chaos_run("--dir", str(tmp_path), "--faults", "kill,pause-controller")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"minibroker: error: pause-controller: controller faults need a quorum of at least 3 controllers, so "
        f"that one can fail; {tmp_path} has 1 (`cluster up --controllers 3`)"
    )
