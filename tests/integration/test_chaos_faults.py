"""`minibroker chaos run` faults on real processes: partitions and one-way cuts with iptables, a paused
leader, acks=1 clients on an isolated leader; and no rule of ours left behind, whatever happens."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.chaos import CHAOS_OVERRIDES
from cluster.chaos_faults import FaultRun
from cluster.local_cluster import LocalClusterState, random_base_address
from cluster.network_faults import CHAIN_PREFIX, NetworkFaults, leftovers
from lagapp.dashboard import fault_events
from metrics.fields import FAULTS_FILE
from tests.integration.processes import ROOT, default_sigint, three_brokers

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(60),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("iptables") is None or shutil.which("tc") is None,
        reason="network faults need root, iptables and tc (scripts/test.sh installs them; CI runs as root)",
    ),
]


@pytest.fixture(autouse=True)
def no_rule_of_ours_is_left() -> Iterator[None]:
    assert leftovers() == [], "a previous run left rules behind"
    yield
    assert leftovers() == [], "this test left rules behind"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalClusterState]:
    async with three_brokers(tmp_path / "c", dict(CHAOS_OVERRIDES), random_base_address()) as state:
        yield state


async def run_faults(state: LocalClusterState, faults: str, fault_ms: int = 1500) -> dict[str, Any]:
    args = argparse.Namespace(
        faults=faults, rounds=1, seed=3, fault_ms=fault_ms, interval_ms=0, topic="t", partitions=4, producers=2
    )
    net = NetworkFaults(Path(state.dir))
    try:
        return await FaultRun(state, args, lambda message: None, net).run()
    finally:
        net.remove()


def assert_valid(report: dict[str, Any]) -> None:
    assert report["valid"] is True, report
    for key in ("lost_writes", "duplicates", "inconsistent_offsets", "divergent_replicas", "nonmonotonic"):
        assert report[key] == 0, (key, report["examples"])
    assert report["converged"] is True and report["acked"] > 50


async def test_a_leader_cut_from_its_followers_under_acks_all_min_isr_2_loses_no_acked_write(
    cluster: LocalClusterState,
) -> None:
    report = await run_faults(cluster, "partition:leader-from-followers", fault_ms=2000)
    assert_valid(report)
    fault = report["faults"][0]
    leader = cluster.broker(fault["target"]).host
    followers = {b.host for b in cluster.brokers} - {leader}
    assert all(f"{leader}->{f}" in fault["how"] and f"{f}->{leader}" in fault["how"] for f in followers)
    assert all(c.host not in fault["how"] for c in cluster.controllers)
    # the cut was real: no acks=all write on the leader's partitions was acknowledged while it lasted
    assert fault["acks_all_failed_ms"] >= 2000


async def test_a_paused_leader_is_fenced_on_waking_and_its_late_writes_are_not_acknowledged(
    cluster: LocalClusterState,
) -> None:
    report = await run_faults(cluster, "pause")
    assert_valid(report)
    fault = report["faults"][0]
    zombie = fault["zombie"]
    assert zombie["sent"] >= 1 and zombie["acked"] == 0 and report["zombie_acked"] == 0, zombie
    assert "NONE" not in zombie["errors"]
    assert fault["new_leaders"] and fault["target"] not in fault["new_leaders"].values()
    # the fault's window is in the metrics dir, where the dashboard shades it on the lag charts
    [window] = fault_events(Path(cluster.metrics_dir) / FAULTS_FILE)
    assert window.label == f"pause ({fault['target']})"
    assert window.ts_ms == fault["window_start_ms"] and window.end_ts_ms == fault["window_end_ms"]


async def test_a_one_way_cut_heals_and_the_replicas_converge_byte_identical(cluster: LocalClusterState) -> None:
    report = await run_faults(cluster, "partition:one-way")
    assert_valid(report)
    fault = report["faults"][0]
    leader = cluster.broker(fault["target"]).host
    assert fault["how"].count("->") == 2 and all(
        part.split("->")[0].endswith(leader) for part in fault["how"].split(", ")
    )
    assert fault["isr_full_after_heal_ms"] is not None


async def test_acks_1_writes_to_an_isolated_leader_are_reported_lost_and_classified_expected(
    cluster: LocalClusterState,
) -> None:
    report = await run_faults(cluster, "clients-see-old-leader")
    assert_valid(report)  # the acks=all verdict is untouched by the acks=1 losses
    acks1 = report["faults"][0]["acks1"]
    assert acks1["acked"] > 0 and acks1["lost"] > 0 and acks1["expected"] is True, acks1
    assert report["acks1"]["lost"] == acks1["lost"] and report["acks1"]["classified"].startswith("expected")


def test_ctrl_c_in_the_middle_of_a_partition_removes_every_rule(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cluster", "chaos", "run", "--faults", "partition", "--rounds", "1"]
        + ["--fault-ms", "30000"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,  # stopped by SIGINT below, as Ctrl-C stops it
    )
    try:
        deadline = time.monotonic() + 40
        while not any("DROP" in rule for rule in leftovers()):
            assert proc.poll() is None and time.monotonic() < deadline, "no rule appeared"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    assert "faults removed" in stderr


def test_chaos_heal_removes_what_a_crashed_run_left(tmp_path: Path) -> None:
    net = NetworkFaults(tmp_path)
    try:
        net.cut([("127.200.0.11", "127.200.0.12")])
        assert any(CHAIN_PREFIX in rule for rule in leftovers())
        result = subprocess.run(
            [sys.executable, "-m", "cluster", "chaos", "heal", "--dir", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 0, result.stderr
        assert leftovers() == []
    finally:
        net.remove()


def test_without_iptables_and_tc_the_network_faults_are_a_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cluster", "chaos", "run", "--faults", "kill,partition"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PATH": "/nonexistent"},
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "minibroker: error: partition: network faults need iptables and tc "
        "(apt-get install iptables iproute2; scripts/test.sh installs them)"
    )
