"""The README's Quick start: `scripts/demo.sh` runs end to end on this machine (cluster, topic, acks=all
writes, leader-kill chaos with a valid verdict, a preferred leader election, the Spark lag dashboard,
cluster down)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cluster.local_cluster import free_ports
from tests.integration.processes import ROOT
from tests.integration.test_cli import clean_env

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(600)
def test_the_quick_start_demo_runs_to_a_valid_verdict_and_a_dashboard(tmp_path: Path) -> None:
    demo_dir = tmp_path / "demo"
    env = clean_env(MINIBROKER_DEMO_DIR=str(demo_dir), MINIBROKER_DEMO_BASE_PORT=str(free_ports(1)[0]))
    result = subprocess.run(
        [str(ROOT / "scripts" / "demo.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=540
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "chaos verdict (JSON)" in result.stdout and "(valid)" in result.stdout
    report = json.loads((demo_dir / "chaos-report.json").read_text())
    assert report["valid"] is True, report
    assert (demo_dir / "dashboard" / "dashboard.html").stat().st_size > 100_000
    # after the chaos, the preferred leader election ran: it moved leaderships back, found none to move (a
    # later kill can hand a partition back to its preferred replica by itself), or left some for later
    outcomes = (
        "Successfully completed leader election (PREFERRED) for partitions ",
        "Every partition is led by its preferred replica",
        "(a preferred replica is still catching up: it stays a follower for now)",
    )
    assert any(outcome in result.stdout for outcome in outcomes), result.stdout[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    # and it stopped what it started
    assert [line for line in result.stdout.splitlines() if line.endswith(": stopped")] == [
        "broker-1: stopped",
        "broker-2: stopped",
        "broker-3: stopped",
        "controller-3000: stopped",
        "controller-3001: stopped",
        "controller-3002: stopped",
    ]
