"""The per-file pass (``metrics.file_pass``) against the shuffle-and-sort path: every table, row for row."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from metrics import file_pass, lag_job, spark_app
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
    # and active files with a line cut by a crash; one rolled file written out of order.
    metrics = tmp_path / "metrics"
    write_metrics_dir(metrics)
    _shuffle_lines(metrics / f"broker-3-{T0 + 10_000}.jsonl", seed=7)
    old, new, sorted_files = _both(spark, metrics, LagJobConfig(window_ms=10_000))
    assert sorted_files == 1
    assert sorted(old) == sorted(new) == sorted(s.TABLES)
    for name in s.TABLES:
        assert new[name].columns == old[name].columns, name
        old_rows, new_rows = _rows(old[name]), _rows(new[name])
        assert old_rows, name
        assert new_rows == old_rows, name


@pytest.mark.timeout(300)
def test_a_replica_going_back_across_files_sorts_its_broker(spark: SparkSession, tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    write_metrics_dir(metrics)
    # broker 2's second rolled file's records moved into its first file's name slot and vice versa
    first, second = (metrics / f"broker-2-{T0 + k * 10_000}.jsonl" for k in (0, 1))
    a, b = first.read_text(), second.read_text()
    first.write_text(b)
    second.write_text(a)
    old, new, sorted_files = _both(spark, metrics, LagJobConfig(window_ms=10_000))
    assert sorted_files > 0
    for name in s.TABLES:
        assert _rows(new[name]) == _rows(old[name]), name


def test_records_of_another_broker_are_counted_for_the_fallback(spark: SparkSession, tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    record = {"kind": "partition", "ts_ms": T0, "broker_id": 2, "topic": "t", "partition": 0, "role": "leader"}
    (metrics / f"broker-1-{T0}.jsonl").write_text(json.dumps(record) + "\n")
    samples, stats = file_pass.replica_samples_of_files(spark, spark_app.list_metric_files(metrics))
    assert samples.count() == 1
    assert stats.foreign_records.value == 1


@pytest.mark.timeout(300)
def test_the_batch_job_falls_back_to_the_sort_for_files_of_mixed_brokers(spark: SparkSession, tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    write_metrics_dir(metrics)
    # every rolled file's records under one name: each broker's samples are spread over two "brokers" files
    rolled = sorted(metrics.glob("broker-*.jsonl"))
    text = "".join(p.read_text() for p in rolled)
    for p in rolled:
        p.unlink()
    half = text.count("\n") // 2
    lines = text.splitlines(keepends=True)
    (metrics / f"broker-1-{T0}.jsonl").write_text("".join(lines[:half]))
    (metrics / f"broker-2-{T0}.jsonl").write_text("".join(lines[half:]))
    files = spark_app.list_metric_files(metrics)
    records = spark_app.read_records(spark, files)
    out_new, out_old = tmp_path / "new", tmp_path / "old"
    config = LagJobConfig(window_ms=10_000)
    new = spark_app.publish(records, out_new, config, "t", files=files)
    old = spark_app.publish(records, out_old, config, "t")
    assert new[1:] == old[1:]
    for name in s.TABLES:
        assert _rows(spark.read.parquet(new[0][name])) == _rows(spark.read.parquet(old[0][name])), name
