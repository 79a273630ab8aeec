"""`minibroker chaos leader-kill --rounds 3` against a fresh cluster of real processes must be valid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.processes import ROOT

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(300)
def test_three_leader_kills_with_restarts_lose_no_acked_write(tmp_path: Path) -> None:
    report_file = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cluster",
            "chaos",
            "leader-kill",
            "--rounds",
            "3",
            "--restart",
            "--interval-ms",
            "1500",
            "--seed",
            "7",
            "--json",
            str(report_file),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert report_file.exists(), result.stderr[-3000:]
    report = json.loads(report_file.read_text())
    assert result.returncode == 0, (report, result.stderr[-3000:])
    assert report["valid"] is True
    assert report["rounds"] == 3 and len(report["kills"]) == 3
    assert report["acked"] > 100
    for key in ("lost_writes", "duplicates", "inconsistent_offsets", "divergent_replicas", "nonmonotonic"):
        assert report[key] == 0, key
    # Idempotent producers resend every write left in doubt by a kill until it is answered: with every
    # broker back before the run ends, none stays failed or indeterminate, and none lands twice.
    assert report["idempotent"] is True
    assert (report["failed"], report["indeterminate"]) == (0, 0), report["errors"]
    for kill in report["kills"]:
        assert kill["new_leaders"] and all(leader != kill["broker_id"] for leader in kill["new_leaders"].values())
        assert kill["restarted"] and kill["isr_full_after_ms"] is not None
    assert "round 3/3" in result.stderr, "progress is shown while it runs"
    assert "verdict: VALID" in result.stdout
