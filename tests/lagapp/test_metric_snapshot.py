"""The batch job reads a consistent set of metric files even when one rolls while it is listed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lagapp.spark_app import snapshot_metric_files


def lines(broker: int, start: int, count: int) -> bytes:
    return b"".join(json.dumps({"ts_ms": start + i, "broker_id": broker}).encode() + b"\n" for i in range(count))


def roll(metrics: Path, broker: int, first_ts: int) -> None:
    os.replace(metrics / "_active" / f"broker-{broker}.jsonl", metrics / f"broker-{broker}-{first_ts}.jsonl")


def read_all(files: list[Path]) -> list[int]:
    return sorted(json.loads(line)["ts_ms"] for f in files for line in f.read_bytes().splitlines())


@pytest.fixture
def metrics(tmp_path: Path) -> Path:
    root = tmp_path / "metrics"
    (root / "_active").mkdir(parents=True)
    (root / "broker-1-0.jsonl").write_bytes(lines(1, 0, 10))  # rolled earlier
    (root / "_active" / "broker-1.jsonl").write_bytes(lines(1, 10, 5) + b'{"ts_ms": 15, "bro')  # a line half-written
    return root


def test_a_file_that_rolls_after_its_copy_is_read_once_from_its_rolled_name(metrics: Path, tmp_path: Path) -> None:
    def on_step(step: str) -> None:
        if step == "list rolled":
            # the sink finishes the line, rolls the file and starts a new one
            active = metrics / "_active" / "broker-1.jsonl"
            active.write_bytes(lines(1, 10, 8))
            roll(metrics, 1, 10)
            active.write_bytes(lines(1, 18, 2))

    files = snapshot_metric_files(metrics, tmp_path / "snap", on_step)
    assert read_all(files) == list(range(18))  # 0-17: nothing lost, nothing twice (18-19 came after)


def test_a_file_that_rolls_before_its_copy_is_found_rolled(metrics: Path, tmp_path: Path) -> None:
    def on_step(step: str) -> None:
        if step == "read broker-1.jsonl":
            active = metrics / "_active" / "broker-1.jsonl"
            active.write_bytes(lines(1, 10, 6))
            roll(metrics, 1, 10)
            active.write_bytes(lines(1, 16, 3))

    files = snapshot_metric_files(metrics, tmp_path / "snap", on_step)
    assert read_all(files) == list(range(19))


def test_without_a_roll_the_active_lines_are_read_whole(metrics: Path, tmp_path: Path) -> None:
    files = snapshot_metric_files(metrics, tmp_path / "snap")
    assert read_all(files) == list(range(15))  # the half-written line is left for the next read
