"""The page's aggregates with pyarrow (``lagapp.dashboard_arrow``) against the Spark queries
(``dashboard.collect_dashboard_data``) over the same written tables: the whole ``DashboardData``, in order."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from bench.lag_job import generated_records
from lagapp import dashboard, dashboard_arrow, file_pass, spark_app
from lagapp import schema as s
from lagapp.lag_job import LagJobConfig
from tests.lagapp.test_dashboard import T0, _partition_record, write_metrics_dir

pytestmark = pytest.mark.slow


def _ordered(value: Any) -> Any:
    """``value`` with every dict as its list of items and every scalar with its type: equal only when the
    order of keys (which the page draws in) and the types (1 is not 1.0, 0 is not None) are equal too."""
    if isinstance(value, dict):
        return [(_ordered(k), _ordered(v)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [_ordered(v) for v in value]
    return (type(value).__name__, value)


def _both(
    spark: SparkSession, metrics: Path, out: Path, config: LagJobConfig, **chart: int
) -> tuple[dashboard.DashboardData, dashboard.DashboardData]:
    """The page's data of the file pass's tables, from the Spark queries and from pyarrow."""
    done = file_pass.run(spark, spark_app.list_metric_files(metrics), out, config)
    assert done is not None
    tables, paths, stats = done
    runs = [dashboard.BrokerRun(*row) for row in stats.runs]
    faults = [dashboard.TimelineEvent(T0 + 3000, "pause (2)", "fault", T0 + 5000)]
    common: dict[str, Any] = {"faults": faults, "health_bucket_ms": config.health_bucket_ms, **chart}
    from_spark = dashboard.collect_dashboard_data("t", tables, config.window_ms, runs, **common)
    schemas = file_pass.table_schemas({name: df.schema for name, df in tables.items()})
    from_arrow = dashboard_arrow.collect_dashboard_data("t", paths, config.window_ms, runs, schemas, **common)
    return from_spark, from_arrow


def _assert_same(from_spark: dashboard.DashboardData, from_arrow: dashboard.DashboardData) -> None:
    assert from_arrow == from_spark
    assert _ordered(dataclasses.asdict(from_arrow)) == _ordered(dataclasses.asdict(from_spark))


@pytest.mark.timeout(300)
def test_the_page_of_the_cluster_run_is_the_same_from_arrow_as_from_spark(spark: SparkSession, tmp_path: Path) -> None:
    # Three brokers, broker 1 restarted (a catch-up time), a leader change, a stalled follower, files out of order.
    metrics = tmp_path / "metrics"
    write_metrics_dir(metrics)
    path = metrics / f"broker-3-{T0 + 10_000}.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    random.Random(7).shuffle(lines)
    path.write_text("".join(lines))
    from_spark, from_arrow = _both(spark, metrics, tmp_path / "out", LagJobConfig(window_ms=10_000))
    # what the comparison covers: every part of the page has something in it
    assert from_spark.lag and from_spark.events and from_spark.byte_rates and from_spark.statuses
    assert from_spark.health is not None and from_spark.health.leaders and from_spark.health.loop_lag_ms
    assert [r.caught_up_ms for r in from_spark.restarts] == [5500]
    _assert_same(from_spark, from_arrow)


@pytest.mark.timeout(300)
def test_the_page_is_the_same_with_short_windows_and_stopped_followers(spark: SparkSession, tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    write_metrics_dir(metrics)
    (metrics / f"broker-9-{T0}.jsonl").write_text('{"kind": "partition", "ts_ms": 17')  # a broker without rows
    (metrics / "_active" / "broker-3.jsonl").unlink()  # broker 3 goes quiet 10 s before the end: STOP
    # orders-5: a follower whose leader never reports (no under_replicated row, no leader's view of it)
    orphan = [
        _partition_record(i, 8, 5, role="follower", leader=7, epoch=0, start_ms=T0, leo=100, fetch=100 - i, lag=i)
        for i in range(10)
    ]
    (metrics / f"broker-8-{T0}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in orphan))
    config = LagJobConfig(
        window_ms=3_000, status_min_samples=2, sample_gap_max_ms=1_500, allowed_lag_messages=5, health_bucket_ms=700
    )
    # One partition drawn at once and one on demand: the charted ones are the first two of the table.
    from_spark, from_arrow = _both(spark, metrics, tmp_path / "out", config, chart_partitions_max=1, chart_more_max=1)
    assert s.STATUS_STOP in from_spark.status_counts
    [orphan_summary] = [p for p in from_spark.summary if p.partition == 5]
    assert orphan_summary.leader_id == 7 and orphan_summary.lag_messages_max == 9  # the follower names it
    _assert_same(from_spark, from_arrow)


@pytest.mark.timeout(300)
def test_the_page_is_the_same_with_more_partitions_than_the_table_shows_and_equal_lags(
    spark: SparkSession, tmp_path: Path
) -> None:
    # The bench's records, small: 6 brokers, 300 partitions, 600 followers whose lags repeat (every
    # partition has the same max lag): the "worst first" orders and the headline's partitions come down to
    # the ties' order, and the table and statuses are cut at TABLE_ROWS_MAX.
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    spark_out = tmp_path / "spark-out"
    generated_records(spark, 10, brokers=6, replicas_per_broker=150, files_per_broker=1).write.json(str(spark_out))
    for broker, part in enumerate(sorted(spark_out.glob("part-*"))):
        part.rename(metrics / f"broker-{broker}-{T0}.jsonl")
    shutil.rmtree(spark_out)
    from_spark, from_arrow = _both(spark, metrics, tmp_path / "out", LagJobConfig(window_ms=5_000))
    assert from_spark.partitions_total == 300 and len(from_spark.summary) == dashboard.TABLE_ROWS_MAX
    assert from_spark.followers_total == 600 and len(from_spark.statuses) == dashboard.TABLE_ROWS_MAX
    lags = [p.lag_messages_max for p in from_spark.summary]
    assert len(set(lags)) < len(lags)  # ties in the table's order
    _assert_same(from_spark, from_arrow)
