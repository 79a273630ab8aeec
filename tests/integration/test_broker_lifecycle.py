"""`minibroker broker|controller start|stop|kill|pause|resume`, and `cluster status`/`cluster down` seeing
every node however it was started (issue: a broker restarted by hand showed as dead and outlived `cluster
down`)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cluster.local_cluster import LocalClusterState, free_ports, pid_alive, random_base_address, wait_exit
from cluster.status import collect_status
from tests.integration.processes import ROOT
from tests.integration.test_cli import clean_env, cli, cluster_up, error_line, eventually

pytestmark = [pytest.mark.slow]


def status(cluster_dir: Path) -> dict[int, dict[str, object]]:
    result = cli("cluster", "status", "--dir", str(cluster_dir), "--json")
    assert result.returncode == 0, result.stderr
    return {b["id"]: b for b in json.loads(result.stdout)["brokers"]}


def broker(action: str, broker_id: int, cluster_dir: Path, role: str = "broker") -> dict[str, object]:
    result = cli(role, action, "--id", str(broker_id), "--dir", str(cluster_dir), "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    out: dict[str, object] = json.loads(result.stdout)
    return out


def controller(action: str, node_id: int, cluster_dir: Path) -> dict[str, object]:
    return broker(action, node_id, cluster_dir, role="controller")


def quorum(cluster_dir: Path) -> tuple[int, dict[int, dict[str, Any]]]:
    """The active controller's id (-1: none answers) and each controller, as `cluster status --json` has
    them (collected in this process: a CLI run costs seconds of start-up on a loaded machine)."""
    st = asyncio.run(collect_status(LocalClusterState.load(cluster_dir)))
    return st["controller"]["id"], {c["id"]: c for c in st["controllers"]}


@pytest.mark.timeout(120)
def test_one_broker_stops_starts_pauses_and_a_hand_started_one_is_seen_and_stopped(tmp_path: Path) -> None:
    cluster_dir = tmp_path / "c"
    ports = free_ports(2)
    up = cli(
        *("cluster", "up", "--dir", str(cluster_dir), "--brokers", "2", "--base-port", str(ports[0])),
        *("--base-address", random_base_address(), "--detach", "--json"),
        timeout=90,
    )
    assert up.returncode == 0, up.stderr
    hand_started: subprocess.Popen[bytes] | None = None
    try:
        first_pid = status(cluster_dir)[2]["pid"]
        assert broker("kill", 2, cluster_dir)["result"] == "killed"
        assert status(cluster_dir)[2]["alive"] is False

        started = broker("start", 2, cluster_dir)
        assert started["result"] == "started" and started["pid"] != first_pid
        now = status(cluster_dir)[2]
        assert (now["alive"], now["pid"]) == (True, started["pid"])
        assert (cluster_dir / "broker-2" / "broker.pid").read_text().strip() == str(started["pid"])

        assert broker("pause", 2, cluster_dir)["result"] == "paused"
        assert status(cluster_dir)[2]["paused"] is True
        assert "PAUSED" in cli("cluster", "status", "--dir", str(cluster_dir)).stdout
        assert broker("resume", 2, cluster_dir)["result"] == "resumed"
        assert status(cluster_dir)[2]["paused"] is False

        # Stopped, then started again by its own command line, by hand, from another directory.
        assert broker("stop", 2, cluster_dir)["result"] == "stopped"
        assert broker("stop", 2, cluster_dir)["result"] == "not running"
        config = os.path.relpath(cluster_dir / "broker-2" / "broker.properties", tmp_path)
        with open(tmp_path / "by-hand.log", "wb") as log:
            hand_started = subprocess.Popen(
                [sys.executable, "-m", "cluster", "broker", "--config", config],
                cwd=tmp_path,
                env={**clean_env(), "PYTHONPATH": str(ROOT)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        for _ in range(60):  # each status call takes a moment
            if status(cluster_dir)[2]["alive"]:
                break
        assert status(cluster_dir)[2]["pid"] == hand_started.pid
        assert broker("start", 2, cluster_dir)["result"] == "already running"

        missing = cli("broker", "pause", "--id", "9", "--dir", str(cluster_dir))
        assert missing.returncode == 2 and "no broker 9" in error_line(missing)
    finally:
        down = cli("cluster", "down", "--dir", str(cluster_dir), "--json", timeout=60)
    assert down.returncode == 0, down.stderr
    assert set(json.loads(down.stdout).values()) == {"stopped"}
    assert hand_started is not None and wait_exit(hand_started.pid, 5.0) and not pid_alive(hand_started.pid)


@pytest.mark.timeout(180)
def test_one_controller_is_killed_started_paused_and_stopped_by_id_and_status_follows(tmp_path: Path) -> None:
    cluster_dir = tmp_path / "c"
    cluster_up(cluster_dir, 1)
    try:
        active, _ = quorum(cluster_dir)
        assert active >= 3000
        killed = controller("kill", active, cluster_dir)
        assert killed == {"controller": active, "pid": killed["pid"], "result": "killed"}
        eventually(lambda: quorum(cluster_dir)[0] not in (-1, active), what="another active controller")
        assert quorum(cluster_dir)[1][active]["alive"] is False

        started = controller("start", active, cluster_dir)
        assert started["result"] == "started" and started["pid"] != killed["pid"]
        pid_file = cluster_dir / f"controller-{active}" / "controller.pid"
        assert pid_file.read_text().strip() == str(started["pid"])
        eventually(lambda: quorum(cluster_dir)[1][active]["alive"], what="the restarted controller answering")
        assert controller("start", active, cluster_dir)["result"] == "already running"

        leader, _ = quorum(cluster_dir)
        assert controller("pause", leader, cluster_dir)["result"] == "paused"
        seen = quorum(cluster_dir)[1][leader]
        assert seen["paused"] is True and seen["alive"] is False
        text = cli("cluster", "status", "--dir", str(cluster_dir)).stdout
        [line] = [line for line in text.splitlines() if line.strip().startswith(f"controller {leader}")]
        assert "PAUSED" in line, text
        assert controller("resume", leader, cluster_dir)["result"] == "resumed"
        eventually(lambda: quorum(cluster_dir)[1][leader]["alive"], what="the resumed controller answering")
        assert quorum(cluster_dir)[1][leader]["paused"] is False

        assert controller("stop", leader, cluster_dir)["result"] == "stopped"
        assert controller("stop", leader, cluster_dir)["result"] == "not running"
        eventually(lambda: quorum(cluster_dir)[0] not in (-1, leader), what="a leader after the resignation")

        missing = cli("controller", "pause", "--id", "9", "--dir", str(cluster_dir))
        assert missing.returncode == 2 and "no controller 9" in error_line(missing)
        stopped = cli("controller", "resume", "--id", str(leader), "--dir", str(cluster_dir))
        assert stopped.returncode == 3 and f"controller {leader} is not running" in error_line(stopped)
    finally:
        down = cli("cluster", "down", "--dir", str(cluster_dir), "--json", timeout=60)
    assert down.returncode == 0, down.stderr
