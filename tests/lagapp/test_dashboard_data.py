"""What the page shows (``lagapp.dashboard_data``), from the tables the job wrote: each piece on scenarios
whose answers are known (the cluster run's restart, leader change and stall; stopped followers and a
partition whose leader never reports; 300 partitions whose lags tie), and the orders the page promises
("worst first" with ties by topic and partition, series in time order) checked against the tables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from bench.lag_job import generated_records
from lagapp import dashboard, dashboard_data, file_pass, spark_app
from lagapp import schema as s
from lagapp.tables import LagJobConfig
from tests.lagapp.test_dashboard import LOOP_STALL, T0, _partition_record, write_metrics_dir

pytestmark = pytest.mark.slow


def _page(
    spark: SparkSession, metrics: Path, out: Path, config: LagJobConfig, **chart: int
) -> tuple[dashboard.DashboardData, dict[str, str]]:
    """The page's data of the job's tables (and the tables' paths)."""
    done = file_pass.run(spark, spark_app.list_metric_files(metrics), out, config)
    assert done is not None
    paths, stats = done
    runs = [dashboard.BrokerRun(*row) for row in stats.runs]
    faults = [dashboard.TimelineEvent(T0 + 3000, "pause (2)", "fault", T0 + 5000)]
    data = dashboard_data.collect_dashboard_data(
        "t", paths, config.window_ms, runs, faults=faults, health_bucket_ms=config.health_bucket_ms, **chart
    )
    return data, paths


def _worst_first(p: dashboard.PartitionSummary) -> tuple[Any, ...]:
    """The partitions table's order: the worst status, then the largest lag (none last), then the name."""
    worst = min((i for i, x in enumerate(s.STATUSES) if p.status_counts[x]), default=len(s.STATUSES) - 1)
    lag = p.lag_messages_max
    return (worst, lag is None, -(lag or 0), p.topic, p.partition)


@pytest.mark.timeout(300)
def test_the_page_of_the_cluster_run_has_its_restart_leader_change_stall_and_loop_stall(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Three brokers, broker 1 (leader of orders-0) down from 19 s and back at 29.5 s, orders-0's new leader
    # broker 2 in epoch 1 from 21 s, broker 3 stalled on orders-1, broker 3's loop held 1.8 s at 12 s.
    metrics = tmp_path / "metrics"
    write_metrics_dir(metrics)
    data, _ = _page(spark, metrics, tmp_path / "out", LagJobConfig(window_ms=10_000))
    assert (data.partitions_total, data.followers_total, data.status_counts) == (2, 4, {"OK": 3, "STALL": 1})
    assert [(p.topic, p.partition, p.leader_id, p.leader_epoch, p.epoch_changes) for p in data.summary] == [
        ("orders", 1, 2, 0, 0),  # the stalled follower's partition first
        ("orders", 0, 2, 1, 1),
    ]
    # the leader's view of broker 1 on orders-1 while it was down: 200 messages and 20 s behind at 39 s
    assert (data.headline.lag_messages, data.headline.lag_messages_at) == (200, "orders-1")
    assert (data.headline.lag_ms, data.headline.lag_ms_at) == (20_000, "orders-1")
    assert [(r.broker_id, r.down_ms, r.restart_ms, r.partitions_out, r.caught_up_ms) for r in data.restarts] == [
        (1, T0 + 19_000, T0 + 29_500, 2, 5500)
    ]
    assert [(e.ts_ms, e.label) for e in data.events[("orders", 0)]] == [(T0 + 21_000, "epoch 1: leader 2")]
    assert [(e.ts_ms, e.label, e.kind) for e in data.broker_events] == [
        (T0 + 3000, "pause (2)", "fault"),
        (T0 + 19_000, "broker 1 down", "broker"),
        (T0 + 29_500, "broker 1 restarted", "broker"),
    ]
    # by follower, the leader's view first, then its own; every series in time order
    for key, series in data.lag.items():
        order = [(one.follower_id, one.view != "leader") for one in series]
        assert order == sorted(order) and len(set(order)) == len(order), key
        for one in series:
            assert one.ts_ms == sorted(set(one.ts_ms)), (key, one.follower_id, one.view)
    assert data.health is not None
    assert max(data.health.loop_lag_ms[3][1]) == 1800.0 and max(data.health.loop_lag_ms[1][1]) == 2.5
    assert data.health.loop_lag_ms[3][0][data.health.loop_lag_ms[3][1].index(1800.0)] == T0 + LOOP_STALL * 1000
    # the controller quorum as the brokers followed it: 3000 in epoch 1, no leader at 20 s, 3001 in epoch 3
    q = data.health.quorum
    assert q.bucket_start_ms == [T0 + 1000 * i for i in range(40)]
    assert q.leader_epoch == [1] * 20 + [None] + [3] * 19
    assert q.leader_id == [3000] * 20 + [None] + [3001] * 19
    assert q.metadata_lag[3].records == [0] * 21 + [25] + [0] * 18 and q.metadata_lag[3].ms[21] == 800
    assert q.metadata_lag[1].bucket_start_ms == [T0 + 1000 * i for i in (*range(20), *range(30, 40))]
    assert q.metadata_lag[1].records == [0] * 20 + [60] + [0] * 9
    assert [b.broker_id for b in data.byte_rates] == [1, 2, 3]
    assert [(r["partition"], r["follower_id"], r["status"]) for r in data.statuses][:1] == [(1, 3, "STALL")]


@pytest.mark.timeout(300)
def test_the_page_with_short_windows_stopped_followers_and_a_partition_whose_leader_never_reports(
    spark: SparkSession, tmp_path: Path
) -> None:
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
    data, _ = _page(spark, metrics, tmp_path / "out", config, chart_partitions_max=1, chart_more_max=1)
    assert data.status_counts[s.STATUS_STOP] == 3  # broker 3's two followers and the orphan (quiet since 9 s)
    [orphan_summary] = [p for p in data.summary if p.partition == 5]
    assert orphan_summary.leader_id == 7 and orphan_summary.lag_messages_max == 9  # the follower names it
    assert (orphan_summary.under_replicated_ms, orphan_summary.isr_shrinks) == (0, 0)
    assert data.summary == sorted(data.summary, key=_worst_first)
    assert list(data.lag) == [(p.topic, p.partition) for p in data.summary[:2]] and data.charted_eager == 1


@pytest.mark.timeout(300)
def test_with_more_partitions_than_the_table_shows_and_equal_lags_ties_go_to_the_first_partition(
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
    data, paths = _page(spark, metrics, tmp_path / "out", LagJobConfig(window_ms=5_000))
    assert data.partitions_total == 300 and len(data.summary) == dashboard.TABLE_ROWS_MAX
    assert data.followers_total == 600 and len(data.statuses) == dashboard.TABLE_ROWS_MAX
    lags = [p.lag_messages_max for p in data.summary]
    assert len(set(lags)) < len(lags)  # ties in the table's order
    assert data.summary == sorted(data.summary, key=_worst_first)
    # the headline's worst lag, from the tables themselves: the largest of either view, at the first
    # partition (by topic, partition) that has it
    views = [
        pq.read_table(paths[s.TABLE_LAG_WINDOWS], columns=[s.TOPIC, s.PARTITION, "lag_messages_max"]),
        pq.read_table(paths[s.TABLE_REPLICA_LAG], columns=[s.TOPIC, s.PARTITION, s.LAG_MESSAGES]).rename_columns(
            [s.TOPIC, s.PARTITION, "lag_messages_max"]
        ),
    ]
    lag = pa.concat_tables(views)
    top = pc.max(lag["lag_messages_max"]).as_py()
    at = min((r[s.TOPIC], r[s.PARTITION]) for r in lag.filter(pc.equal(lag["lag_messages_max"], top)).to_pylist())
    assert (data.headline.lag_messages, data.headline.lag_messages_at) == (top, f"{at[0]}-{at[1]}")
    # the worst statuses: severity, then the largest last lag, then topic, partition and follower
    severity = {x: i for i, x in enumerate(s.STATUSES)}
    order = [
        (severity[r["status"]], -(r["lag_messages_last"] or 0), r[s.TOPIC], r[s.PARTITION], r["follower_id"])
        for r in data.statuses
    ]
    assert order == sorted(order)
