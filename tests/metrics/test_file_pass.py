"""The per-file pass prototype (``bench.lag_file_pass``) against the shuffle-and-sort path: every table, row for row."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from bench import lag_file_pass as file_pass
from metrics import lag_job, spark_app
from metrics import schema as s
from metrics.lag_job import LagJobConfig
from tests.metrics.test_dashboard import T0, write_metrics_dir


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def _both(
    spark: SparkSession, metrics: Path, config: LagJobConfig
) -> tuple[dict[str, DataFrame], dict[str, DataFrame], int]:
    files = spark_app.list_metric_files(metrics)
    records = spark_app.read_records(spark, files)
    now_ms = records.agg({s.TS_MS: "max"}).first()[0]  # type: ignore[index]
    old = lag_job.compute_tables(records, config, now_ms=now_ms)
    samples, stats = file_pass.replica_samples_of_files(spark, files)
    samples = samples.cache()
    samples.count()
    new = lag_job.tables_of_samples(samples, config, now_ms=now_ms)
    return old, new, stats.files_sorted.value


def _shuffle_lines(path: Path, seed: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    random.Random(seed).shuffle(lines)
    path.write_text("".join(lines))


@pytest.mark.timeout(300)
def test_every_table_of_the_per_file_pass_equals_the_sorted_one_row_for_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Three brokers, broker 1 restarted, leadership of orders-0 moved from 1 to 2, a follower stalled, rolled
    # and active files with a line cut by a crash. Broker 3's second rolled file is written out of order
    # (sorted alone), and broker 2's first two rolled files hold each other's records (its replicas go back
    # across files: its rows are sorted).
    metrics = tmp_path / "metrics"
    write_metrics_dir(metrics)
    _shuffle_lines(metrics / f"broker-3-{T0 + 10_000}.jsonl", seed=7)
    first, second = (metrics / f"broker-2-{T0 + k * 10_000}.jsonl" for k in (0, 1))
    a, b = first.read_text(), second.read_text()
    first.write_text(b)
    second.write_text(a)
    broker_2_files = sum(1 for p in spark_app.list_metric_files(metrics) if file_pass.file_broker(p) == 2)
    old, new, sorted_files = _both(spark, metrics, LagJobConfig(window_ms=10_000))
    assert sorted_files == 1 + broker_2_files
    assert sorted(old) == sorted(new) == sorted(s.TABLES)
    for name in s.TABLES:
        assert new[name].columns == old[name].columns, name
        old_rows, new_rows = _rows(old[name]), _rows(new[name])
        assert old_rows, name
        assert new_rows == old_rows, name


def test_records_of_another_broker_are_counted_for_the_fallback(spark: SparkSession, tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    record = {"kind": "partition", "ts_ms": T0, "broker_id": 2, "topic": "t", "partition": 0, "role": "leader"}
    (metrics / f"broker-1-{T0}.jsonl").write_text(json.dumps(record) + "\n")
    samples, stats = file_pass.replica_samples_of_files(spark, spark_app.list_metric_files(metrics))
    assert samples.count() == 1
    assert stats.foreign_records.value == 1
