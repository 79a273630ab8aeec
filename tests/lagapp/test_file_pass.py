"""The job's two ways to a broker's records, against each other and against the tables of every record at
once: each broker's files read in order (``file_pass.run``), and Spark's reader with a sort by broker
(``file_pass.run_records``), then the same pass. Every table, row for row, on records in the emitter's
layout, out of order, redelivered, and in another layout."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from lagapp import file_pass, spark_app
from lagapp import schema as s
from lagapp import tables as tb
from lagapp.tables import LagJobConfig
from tests.lagapp.test_dashboard import T0, write_metrics_dir

pytestmark = pytest.mark.slow


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def _shuffle_lines(path: Path, seed: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    random.Random(seed).shuffle(lines)
    path.write_text("".join(lines))


def _all_records(metrics: Path) -> pa.Table:
    """Every readable record of the metrics dir in one table (the pass's parser, file by file)."""
    return pa.concat_tables([file_pass.parse_file(str(p)) for p in spark_app.list_metric_files(metrics)])


def _assert_same_tables(
    spark: SparkSession,
    metrics: Path,
    out: Path,
    config: LagJobConfig,
    expected: dict[str, list[tuple[Any, ...]]] | None = None,
) -> file_pass.FilePassStats:
    """Every table of the per-broker file pass equals the Spark-read and sorted pass's and the tables of every
    record at once (``tables.compute_tables``), row for row (and ``expected``'s rows when given); returns
    the file pass's statistics."""
    files = spark_app.list_metric_files(metrics)
    records = spark_app.read_records(spark, files)
    done = file_pass.run(spark, files, out / "files", config)
    assert done is not None
    paths, stats = done
    sorted_paths, sorted_stats = file_pass.run_records(records, out / "sorted", config)
    at_once = tb.compute_tables(_all_records(metrics), config)
    assert sorted(paths) == sorted(sorted_paths) == sorted(s.TABLES)
    assert stats.records + stats.duplicates == records.count()
    assert (sorted_stats.records, sorted_stats.duplicates, sorted_stats.runs) == (
        stats.records,
        stats.duplicates,
        stats.runs,
    )
    assert not (out / "files" / file_pass.STAGING_DIR).exists()
    assert not (out / "sorted" / file_pass.STAGING_DIR).exists()
    for name in s.TABLES:
        written = pq.read_table(paths[name])
        assert written.schema == s.TABLE_SCHEMAS[name], name
        # Spark reads the written tables back with the types they were written with
        assert spark.read.parquet(paths[name]).columns == s.TABLE_SCHEMAS[name].names, name
        rows = _rows(written)
        assert rows, name
        assert _rows(pq.read_table(sorted_paths[name])) == rows, name
        assert _rows(at_once[name]) == rows, name
        if expected is not None:
            assert rows == expected[name], name
    return stats


@pytest.mark.timeout(300)
def test_every_table_is_the_same_by_files_by_spark_and_at_once(spark: SparkSession, tmp_path: Path) -> None:
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
    stats = _assert_same_tables(spark, metrics, tmp_path / "out", LagJobConfig(window_ms=10_000))
    assert (stats.files_sorted, stats.duplicates) == (1 + broker_2_files, 0)


@pytest.mark.timeout(300)
def test_tables_match_with_other_windows_and_thresholds(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short windows and gaps: more windows, byte-rate shares and health buckets cut, STOP statuses. One
    # task per core: a task takes several brokers, appending each one's rows to its files.
    monkeypatch.setattr(file_pass, "TASKS_PER_CORE", 1)
    metrics = tmp_path / "metrics"
    write_metrics_dir(metrics)
    # A broker whose only file holds nothing readable (a line cut by a crash): its task has no rows.
    (metrics / f"broker-9-{T0}.jsonl").write_text('{"kind": "partition", "ts_ms": 17')
    config = LagJobConfig(
        window_ms=3_000, status_min_samples=2, sample_gap_max_ms=1_500, allowed_lag_messages=5, health_bucket_ms=700
    )
    assert _assert_same_tables(spark, metrics, tmp_path / "out", config).files_sorted == 0


@pytest.mark.timeout(300)
def test_a_redelivered_batch_changes_no_table_on_either_path(spark: SparkSession, tmp_path: Path) -> None:
    # MQTT QoS 1 may deliver a broker's message (its records of one interval) twice, and the sink appends
    # it again: here broker 1's third batch after its fourth, and broker 2's last batch of its first rolled
    # file at the top of its second. Both paths drop the repeats, as --follow does: every table is the
    # one of the files without them.
    config = LagJobConfig(window_ms=10_000)
    write_metrics_dir(tmp_path / "clean")
    clean = tb.compute_tables(_all_records(tmp_path / "clean"), config)
    expected = {name: _rows(table) for name, table in clean.items()}
    metrics = tmp_path / "metrics"
    write_metrics_dir(metrics)

    def batches(path: Path) -> dict[int, list[str]]:
        by_ts: dict[int, list[str]] = {}
        for line in path.read_text().splitlines(keepends=True):
            by_ts.setdefault(json.loads(line)["ts_ms"], []).append(line)
        return by_ts

    one = metrics / f"broker-1-{T0}.jsonl"
    ones = list(batches(one).values())
    one.write_text("".join(sum([*ones[:4], ones[2], *ones[4:]], [])))
    first, second = (metrics / f"broker-2-{T0 + k * 10_000}.jsonl" for k in (0, 1))
    again = list(batches(first).values())[-1]
    second.write_text("".join(again) + second.read_text())

    stats = _assert_same_tables(spark, metrics, tmp_path / "out", config, expected)
    assert stats.duplicates == len(ones[2]) + len(again) > 0


@pytest.mark.timeout(120)
def test_records_of_another_broker_make_the_pass_step_aside(spark: SparkSession, tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    record = {"kind": "partition", "ts_ms": T0, "broker_id": 2, "topic": "t", "partition": 0, "role": "leader"}
    (metrics / f"broker-1-{T0}.jsonl").write_text(json.dumps(record) + "\n")
    out = tmp_path / "out"
    assert file_pass.run(spark, spark_app.list_metric_files(metrics), out, LagJobConfig()) is None
    assert not any(out.iterdir())


@pytest.mark.timeout(60)
def test_a_file_named_after_no_broker_makes_the_pass_step_aside(spark: SparkSession, tmp_path: Path) -> None:
    assert file_pass.broker_groups([tmp_path / "broker-1-5.jsonl", tmp_path / "other.jsonl"]) is None
    assert file_pass.broker_groups([tmp_path / "broker-1-5.jsonl", tmp_path / "broker-1.jsonl"]) == [
        (1, [str(tmp_path / "broker-1-5.jsonl"), str(tmp_path / "broker-1.jsonl")])
    ]


@pytest.mark.timeout(10)
def test_round_half_up_matches_spark_not_numpy() -> None:
    import numpy as np

    values = np.array([0.5, 1.5, 2.5, 2.4999999999999996, -0.5, -2.5, 3.0, 0.49999999999999994])
    assert tb.round_half_up(values).tolist() == [1.0, 2.0, 3.0, 2.0, -1.0, -3.0, 3.0, 0.0]


@pytest.mark.timeout(300)
def test_files_of_mixed_brokers_give_the_tables_of_the_emitters_layout(spark: SparkSession, tmp_path: Path) -> None:
    # The same records in files that are not one broker's each (as a copy of a metrics dir merged by hand
    # might be): the job cannot read them broker by broker, so Spark reads and sorts them, and every table
    # and the page's numbers are those of the emitter's layout.
    config = LagJobConfig(window_ms=10_000)
    write_metrics_dir(tmp_path / "emitted")
    by_broker = spark_app.run_batch(spark, tmp_path / "emitted", tmp_path / "out-emitted", config)
    lines = [line + "\n" for r in _all_records(tmp_path / "emitted").to_pylist() for line in [json.dumps(r)]]
    random.Random(3).shuffle(lines)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for k in range(3):
        (mixed / f"broker-{k}-{T0}.jsonl").write_text("".join(lines[k::3]))
    result = spark_app.run_batch(spark, mixed, tmp_path / "out-mixed", config)
    assert "sort_pass_s" in result.extra and "file_pass_s" not in result.extra  # Spark read and sorted them
    assert "file_pass_s" in by_broker.extra
    assert (result.records, result.row_counts, result.status_counts) == (
        by_broker.records,
        by_broker.row_counts,
        by_broker.status_counts,
    )
    for name in s.TABLES:
        assert _rows(pq.read_table(result.tables[name])) == _rows(pq.read_table(by_broker.tables[name])), name


@pytest.mark.timeout(300)
def test_a_pass_that_fails_reading_the_files_falls_back_to_spark_reading_them(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The broker tasks of the file layout call this (pickled with the task, so the replacement raises in
    # the Spark worker); Spark's reader and sort then bring the same records to the same pass.
    def failing_files_pass(*args: Any, **kwargs: Any) -> dict[str, int]:
        raise RuntimeError("reading the files broke")

    monkeypatch.setenv("MINIBROKER_QUIET", "0")
    monkeypatch.setattr(file_pass, "files_pass", failing_files_pass)
    metrics, out = tmp_path / "metrics", tmp_path / "out"
    rolled, active = write_metrics_dir(metrics)
    result = spark_app.run_batch(spark, metrics, out, LagJobConfig(window_ms=10_000))
    err = capsys.readouterr().err
    assert "reading each broker's files failed (PythonException: " in err, err
    assert "RuntimeError: reading the files broke); shuffling and sorting instead" in err, err
    assert "sort_pass_s" in result.extra and "file_pass_s" not in result.extra
    assert not (out / file_pass.STAGING_DIR).exists()
    # every table and the page, from the same records
    assert result.records == rolled + active
    assert sorted(result.tables) == sorted(s.TABLES)
    assert all(result.row_counts[name] > 0 for name in s.TABLES), result.row_counts
    assert result.row_counts[s.TABLE_FOLLOWER_LAG] == 21 + 40 + 10 + 30 + 40  # as test_dashboard counts them
    assert result.status_counts == {"OK": 3, "STALL": 1}
    assert Path(result.dashboard_html).stat().st_size > 0
