"""Leader-kill chaos driven by a real Kafka client: confluent-kafka's idempotent producer writes through the
Kafka listeners while a consumer group of two rides along; the oracle finds no acknowledged write lost and
the group's committed offsets never go backwards across the coordinator's moves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.processes import ROOT

pytest.importorskip("confluent_kafka")
pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(300)
def test_leader_kills_under_a_confluent_kafka_producer_and_group_lose_nothing(tmp_path: Path) -> None:
    report_file = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "cluster", "chaos", "leader-kill", "--rounds", "2", "--restart",
         "--interval-ms", "1500", "--seed", "3", "--client", "confluent-kafka", "--json", str(report_file)],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert report_file.exists(), result.stderr[-3000:]
    report = json.loads(report_file.read_text())
    assert result.returncode == 0, (report.get("client_problems"), result.stderr[-3000:])
    assert report["valid"] is True and report["acked"] > 100
    for key in ("lost_writes", "duplicates", "inconsistent_offsets", "divergent_replicas"):
        assert report[key] == 0, key
    client = report["client"]
    assert client["client"] == "confluent-kafka"
    assert len(client["first_report_after_kill_ms"]) == 2
    group = client["group"]
    assert group["read_to_the_end"] is True
    assert group["acked_not_read"] == 0
    assert group["commit_regressions"] == []
    assert len(group["committed"]) == 6  # every partition has a committed offset, read from the coordinator
    assert "consumer group of 2" in result.stdout


def test_an_unknown_client_is_refused_before_anything_starts() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cluster", "chaos", "leader-kill", "--rounds", "1", "--client", "franz-go"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert "invalid choice: 'franz-go'" in result.stderr
