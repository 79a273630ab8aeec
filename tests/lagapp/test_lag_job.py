"""The lag job's transforms on hand-made records with known answers, one scenario per rule."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from lagapp import lag_job
from lagapp import schema as s
from lagapp.lag_job import LagJobConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

T0 = 1_700_000_000_000  # a round epoch ms; windows of 10 s start on it
START = T0 - 60_000  # broker start before the samples


def follower(
    ts_ms: int,
    *,
    broker_id: int = 2,
    fetch_offset: int | None,
    lag_messages: int | None,
    lag_ms: int = 0,
    leader_id: int = 1,
    leader_epoch: int = 0,
    topic: str = "t",
    partition: int = 0,
    **counters: int,
) -> dict[str, Any]:
    return {
        s.KIND: s.KIND_PARTITION,
        s.TS_MS: ts_ms,
        s.BROKER_ID: broker_id,
        s.BROKER_START_MS: START,
        s.TOPIC: topic,
        s.PARTITION: partition,
        s.ROLE: s.ROLE_FOLLOWER,
        s.LEADER_ID: leader_id,
        s.LEADER_EPOCH: leader_epoch,
        s.LOG_START_OFFSET: 0,
        s.LOG_END_OFFSET: fetch_offset,
        s.HIGH_WATERMARK: fetch_offset,
        s.FETCH_OFFSET: fetch_offset,
        s.LAG_MESSAGES: lag_messages,
        s.LAG_MS: lag_ms,
        **counters,
    }


def leader(
    ts_ms: int,
    *,
    broker_id: int = 1,
    leader_epoch: int = 0,
    isr_size: int = 3,
    replica_count: int = 3,
    in_sync: dict[int, bool] | None = None,
    behind: dict[int, tuple[int, int | None]] | None = None,
    topic: str = "t",
    partition: int = 0,
    broker_start_ms: int = START,
    **counters: int,
) -> dict[str, Any]:
    # behind: follower -> (lag in messages, ms since it was last caught up), the leader's view
    followers = [
        {
            s.BROKER_ID: b,
            s.LOG_END_OFFSET: 0,
            s.LAST_CAUGHT_UP_MS: ts_ms,
            s.IN_SYNC: ok,
            s.LAG_MESSAGES: (behind or {}).get(b, (0, 0))[0],
            s.TIME_SINCE_CAUGHT_UP_MS: (behind or {}).get(b, (0, 0))[1],
        }
        for b, ok in (in_sync or {}).items()
    ]
    return {
        s.KIND: s.KIND_PARTITION,
        s.TS_MS: ts_ms,
        s.BROKER_ID: broker_id,
        s.BROKER_START_MS: broker_start_ms,
        s.TOPIC: topic,
        s.PARTITION: partition,
        s.ROLE: s.ROLE_LEADER,
        s.LEADER_ID: broker_id,
        s.LEADER_EPOCH: leader_epoch,
        s.LOG_START_OFFSET: 0,
        s.LOG_END_OFFSET: 100,
        s.HIGH_WATERMARK: 100,
        s.ISR_SIZE: isr_size,
        s.REPLICA_COUNT: replica_count,
        s.UNDER_REPLICATED: isr_size < replica_count,
        s.UNDER_MIN_ISR: isr_size < 2,
        s.FOLLOWERS: followers,
        **counters,
    }


def records(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    names = s.RECORD_SCHEMA.fieldNames()
    return spark.createDataFrame([tuple(row.get(n) for n in names) for row in rows], s.RECORD_SCHEMA)


def statuses(spark: SparkSession, rows: list[dict[str, Any]], **config: int) -> list[Row]:
    lag = lag_job.follower_lag(records(spark, rows))
    result = lag_job.follower_status(lag, LagJobConfig(**config))
    return result.select("follower_id", "status").collect()


# ---- follower_lag and lag_windows ----


def test_only_follower_samples_make_the_lag_series(spark: SparkSession) -> None:
    rows = [
        leader(T0),
        follower(T0, fetch_offset=90, lag_messages=10, lag_ms=300),
        {s.KIND: s.KIND_BROKER, s.TS_MS: T0, s.BROKER_ID: 1, s.BROKER_START_MS: START},
    ]
    result = lag_job.follower_lag(records(spark, rows)).select(
        "topic", "partition", "follower_id", "ts_ms", "fetch_offset", "lag_messages", "lag_ms"
    )
    assertDataFrameEqual(
        result,
        [Row(topic="t", partition=0, follower_id=2, ts_ms=T0, fetch_offset=90, lag_messages=10, lag_ms=300)],
    )


def test_lag_percentiles_of_a_known_series_are_nearest_rank(spark: SparkSession) -> None:
    # given lags 1..100 spread over one 10 s window (100 ms apart) and lag 7 at the next window
    rows = [follower(T0 + i * 100, fetch_offset=i, lag_messages=i + 1, lag_ms=(i + 1) * 10) for i in range(100)]
    rows.append(follower(T0 + 10_000, fetch_offset=500, lag_messages=7, lag_ms=70))
    lag = lag_job.follower_lag(records(spark, rows))
    result = lag_job.lag_windows(lag, LagJobConfig(window_ms=10_000))
    assertDataFrameEqual(
        result,
        [
            Row(
                topic="t",
                partition=0,
                follower_id=2,
                window_start_ms=T0,
                window_end_ms=T0 + 10_000,
                samples=100,
                lag_messages_p50=50,
                lag_messages_p99=99,
                lag_messages_max=100,
                lag_ms_p50=500,
                lag_ms_p99=990,
                lag_ms_max=1000,
            ),
            Row(
                topic="t",
                partition=0,
                follower_id=2,
                window_start_ms=T0 + 10_000,
                window_end_ms=T0 + 20_000,
                samples=1,
                lag_messages_p50=7,
                lag_messages_p99=7,
                lag_messages_max=7,
                lag_ms_p50=70,
                lag_ms_p99=70,
                lag_ms_max=70,
            ),
        ],
    )


# ---- counters and byte_rates ----


def test_byte_rates_are_counter_growth_over_the_sampled_interval(spark: SparkSession) -> None:
    rows = [
        leader(
            T0 + i * 1000,
            BytesInPerSec=i * 5000,
            BytesOutPerSec=i * 1000,
            ReplicationBytesOutPerSec=i * 10_000,
            MessagesInPerSec=i * 50,
        )
        for i in range(4)
    ]
    result = lag_job.byte_rates(lag_job.counter_deltas(records(spark, rows)), LagJobConfig())
    assertDataFrameEqual(
        result.select(
            "broker_id",
            "window_start_ms",
            "interval_ms",
            "client_in_bytes",
            "client_in_bytes_per_s",
            "client_out_bytes_per_s",
            "replication_in_bytes_per_s",
            "replication_out_bytes_per_s",
            "messages_in_per_s",
        ),
        [
            Row(
                broker_id=1,
                window_start_ms=T0,
                interval_ms=3000,
                client_in_bytes=15_000,
                client_in_bytes_per_s=5000.0,
                client_out_bytes_per_s=1000.0,
                replication_in_bytes_per_s=0.0,
                replication_out_bytes_per_s=10_000.0,
                messages_in_per_s=50.0,
            )
        ],
    )


def test_a_broker_restart_resets_counters_without_a_negative_rate(spark: SparkSession) -> None:
    # given a leader whose counter reached 30000, then restarted (new broker_start_ms) and counted 2000
    restarted = T0 + 2500
    rows = [
        leader(T0, BytesInPerSec=10_000),
        leader(T0 + 1000, BytesInPerSec=20_000),
        leader(T0 + 2000, BytesInPerSec=30_000),
        leader(T0 + 3000, BytesInPerSec=2000, broker_start_ms=restarted),
        leader(T0 + 4000, BytesInPerSec=5000, broker_start_ms=restarted),
        # and a counter that went down without a new start time (a reset the start time missed)
        leader(T0 + 5000, BytesInPerSec=1000, broker_start_ms=restarted),
    ]
    deltas = lag_job.counter_deltas(records(spark, rows))
    assertDataFrameEqual(
        deltas.select("ts_ms", "interval_ms", "BytesInPerSec_delta"),
        [
            # the first sample of an incarnation counts from zero: the 10000 bytes since the broker started
            Row(ts_ms=T0, interval_ms=0, BytesInPerSec_delta=10_000),
            Row(ts_ms=T0 + 1000, interval_ms=1000, BytesInPerSec_delta=10_000),
            Row(ts_ms=T0 + 2000, interval_ms=1000, BytesInPerSec_delta=10_000),
            Row(ts_ms=T0 + 3000, interval_ms=1000, BytesInPerSec_delta=2000),
            Row(ts_ms=T0 + 4000, interval_ms=1000, BytesInPerSec_delta=3000),
            Row(ts_ms=T0 + 5000, interval_ms=1000, BytesInPerSec_delta=1000),
        ],
    )
    rates = lag_job.byte_rates(deltas, LagJobConfig())
    # the window holds what was counted inside it: not the 10000 bytes before T0 (the first broker
    # started long before the window), but the 2000 the restarted one counted in its first 500 ms
    assertDataFrameEqual(
        rates.select("interval_ms", "client_in_bytes", "client_in_bytes_per_s"),
        [Row(interval_ms=4500, client_in_bytes=26_000, client_in_bytes_per_s=26_000 / 4.5)],
    )


def test_the_first_sample_counts_from_the_broker_start(spark: SparkSession) -> None:
    # given a broker that started at T0 and had taken 700 kB before its first sample at T0 + 1 s
    rows = [
        leader(T0 + 1000, BytesInPerSec=700_000, broker_start_ms=T0),
        leader(T0 + 2000, BytesInPerSec=800_000, broker_start_ms=T0),
    ]
    rates = lag_job.byte_rates(lag_job.counter_deltas(records(spark, rows)), LagJobConfig())
    # then the 700 kB appear, over the 2 s since the start
    assertDataFrameEqual(
        rates.select("interval_ms", "client_in_bytes", "client_in_bytes_per_s"),
        [Row(interval_ms=2000, client_in_bytes=800_000, client_in_bytes_per_s=400_000.0)],
    )


# ---- under_replicated and isr_changes ----


def under_replicated(spark: SparkSession, rows: list[dict[str, Any]], config: LagJobConfig) -> DataFrame:
    recs = records(spark, rows)
    return lag_job.under_replicated(recs, lag_job.isr_changes(recs, config), config)


def test_time_under_replicated_counts_the_leader_samples_with_a_short_isr(spark: SparkSession) -> None:
    # given a leader that reports ISR 3, 2, 1, 2, 3 one second apart: followers 2 and 3 drop out in turn
    flags = [
        {2: True, 3: True},
        {2: False, 3: True},
        {2: False, 3: False},
        {2: False, 3: True},
        {2: True, 3: True},
    ]
    rows = [leader(T0 + i * 1000, isr_size=1 + sum(f.values()), in_sync=f) for i, f in enumerate(flags)]
    result = under_replicated(spark, rows, LagJobConfig())
    assertDataFrameEqual(
        result,
        [
            Row(
                topic="t",
                partition=0,
                leader_samples=5,
                first_ts_ms=T0,
                last_ts_ms=T0 + 4000,
                observed_ms=4000,
                under_replicated_ms=3000,
                under_min_isr_ms=1000,
                isr_size_min=1,
                isr_shrinks=2,
                isr_expands=2,
            )
        ],
    )


def test_the_partition_summary_counts_the_isr_changes_its_follower_table_shows(spark: SparkSession) -> None:
    # given the controller shrank the ISR when it fenced dead follower 2 (the leader's IsrShrinksPerSec does
    # not count that) and the leader, freshly restarted, already counts 6 expands from before the samples
    flags = [True, False, False, True]
    rows = [
        leader(T0 + i * 1000, isr_size=2 + ok, in_sync={2: ok, 3: True}, IsrShrinksPerSec=0, IsrExpandsPerSec=6)
        for i, ok in enumerate(flags)
    ]
    summary = under_replicated(spark, rows, LagJobConfig()).first()
    changes = lag_job.isr_changes(records(spark, rows), LagJobConfig()).agg({"shrinks": "sum", "expands": "sum"})
    assert summary is not None
    assert (summary["isr_shrinks"], summary["isr_expands"], summary["under_replicated_ms"]) == (1, 1, 2000)
    assert tuple(changes.first() or ()) == (1, 1)  # what the isr_changes table says


def test_a_gap_in_the_leader_samples_is_not_counted_as_under_replicated(spark: SparkSession) -> None:
    rows = [leader(T0, isr_size=2), leader(T0 + 60_000, isr_size=2)]
    result = under_replicated(spark, rows, LagJobConfig(window_ms=10_000))
    assertDataFrameEqual(
        result.select("observed_ms", "under_replicated_ms"),
        [Row(observed_ms=10_000, under_replicated_ms=10_000)],
    )


def test_isr_shrinks_and_expands_per_follower_follow_the_leaders_in_sync_flags(spark: SparkSession) -> None:
    # given follower 2 drops out of sync for two samples and comes back; follower 3 stays in sync,
    # and the leader changes to broker 3 half way (it then reports broker 1 as its follower)
    rows = [
        leader(T0, in_sync={2: True, 3: True}),
        leader(T0 + 1000, in_sync={2: False, 3: True}),
        leader(T0 + 2000, in_sync={2: False, 3: True}),
        leader(T0 + 3000, in_sync={2: True, 3: True}),
        leader(T0 + 4000, broker_id=3, leader_epoch=1, in_sync={2: True, 1: False}),
    ]
    result = lag_job.isr_changes(records(spark, rows), LagJobConfig())
    assertDataFrameEqual(
        result,
        [
            Row(
                topic="t",
                partition=0,
                follower_id=1,
                samples=1,
                shrinks=0,
                expands=0,
                out_of_sync_ms=0,
                observed_ms=0,
                in_sync_last=False,
            ),
            Row(
                topic="t",
                partition=0,
                follower_id=2,
                samples=5,
                shrinks=1,
                expands=1,
                out_of_sync_ms=2000,
                observed_ms=4000,
                in_sync_last=True,
            ),
            Row(
                topic="t",
                partition=0,
                follower_id=3,
                samples=4,
                shrinks=0,
                expands=0,
                out_of_sync_ms=0,
                observed_ms=3000,
                in_sync_last=True,
            ),
        ],
    )


# ---- leader_timeline ----


def test_leader_changes_appear_in_epoch_order_with_the_previous_leader(spark: SparkSession) -> None:
    rows = [
        leader(T0),
        follower(T0, broker_id=3, fetch_offset=5, lag_messages=0),
        leader(T0 + 1000),
        follower(T0 + 2000, broker_id=3, fetch_offset=5, lag_messages=0),
        leader(T0 + 3000, broker_id=3, leader_epoch=1),
        follower(T0 + 4000, broker_id=1, leader_id=3, leader_epoch=1, fetch_offset=5, lag_messages=0),
    ]
    result = lag_job.leader_timeline(records(spark, rows))
    assertDataFrameEqual(
        result,
        [
            Row(
                topic="t",
                partition=0,
                leader_epoch=0,
                leader_id=1,
                first_seen_ms=T0,
                last_seen_ms=T0 + 2000,
                reports=4,
                confirmed=True,
                previous_leader_id=None,
                previous_leader_epoch=None,
            ),
            Row(
                topic="t",
                partition=0,
                leader_epoch=1,
                leader_id=3,
                first_seen_ms=T0 + 3000,
                last_seen_ms=T0 + 4000,
                reports=2,
                confirmed=True,
                previous_leader_id=1,
                previous_leader_epoch=0,
            ),
        ],
    )


# ---- follower_status: one scenario per Burrow rule ----


def test_a_follower_whose_lag_goes_down_is_ok(spark: SparkSession) -> None:
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=lag) for i, lag in enumerate([5, 9, 3, 4])]
    assert statuses(spark, rows) == [Row(follower_id=2, status="OK")]


def test_a_caught_up_follower_is_ok_even_with_a_still_fetch_offset(spark: SparkSession) -> None:
    rows = [follower(T0 + i * 1000, fetch_offset=10, lag_messages=0) for i in range(5)]
    assert statuses(spark, rows) == [Row(follower_id=2, status="OK")]


def test_a_follower_whose_lag_never_decreases_is_warn(spark: SparkSession) -> None:
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=lag) for i, lag in enumerate([2, 2, 5, 8])]
    assert statuses(spark, rows) == [Row(follower_id=2, status="WARN")]


def test_warn_needs_enough_samples(spark: SparkSession) -> None:
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=lag) for i, lag in enumerate([2, 5])]
    assert statuses(spark, rows, status_min_samples=3) == [Row(follower_id=2, status="OK")]


def test_only_the_last_window_counts_for_the_status(spark: SparkSession) -> None:
    # given lag falling early on, then rising at every sample of the last 10 s
    lags = [9, 5, 1, 1, 2, 3, 4, 5]
    rows = [follower(T0 + i * 2000, fetch_offset=10 * i, lag_messages=lag) for i, lag in enumerate(lags)]
    assert statuses(spark, rows, window_ms=10_000) == [Row(follower_id=2, status="WARN")]


def test_lag_with_an_unchanged_fetch_offset_is_stall_even_though_it_is_also_warn(spark: SparkSession) -> None:
    rows = [follower(T0 + i * 1000, fetch_offset=42, lag_messages=lag) for i, lag in enumerate([3, 3, 6, 9])]
    assert statuses(spark, rows) == [Row(follower_id=2, status="STALL")]


def test_a_follower_silent_for_longer_than_the_window_is_stop(spark: SparkSession) -> None:
    # given follower 2 stopped reporting at T0+2s while follower 3 reports until T0+20s
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=0) for i in range(3)]
    rows += [follower(T0 + i * 1000, broker_id=3, fetch_offset=10 * i, lag_messages=0) for i in range(21)]
    assert sorted(statuses(spark, rows, window_ms=10_000)) == [
        Row(follower_id=2, status="STOP"),
        Row(follower_id=3, status="OK"),
    ]


def test_a_single_silent_follower_is_stop_while_its_leader_goes_on(spark: SparkSession) -> None:
    # given the only follower stopped reporting at T0+2s; its leader reports until T0+20s
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=0) for i in range(3)]
    rows += [leader(T0 + i * 1000, in_sync={2: i < 8}) for i in range(21)]
    samples = lag_job.replica_samples(records(spark, rows))
    result = lag_job.follower_status_of_samples(samples, LagJobConfig(window_ms=10_000))
    assert [(r["follower_id"], r["status"]) for r in result.collect()] == [(2, "STOP")]


def test_a_lag_within_allowed_lag_counts_as_caught_up(spark: SparkSession) -> None:
    # given a follower always a batch or two behind under load (Burrow's allowed-lag)
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=lag) for i, lag in enumerate([1, 2, 2, 2])]
    assert statuses(spark, rows) == [Row(follower_id=2, status="WARN")]
    assert statuses(spark, rows, allowed_lag_messages=2) == [Row(follower_id=2, status="OK")]


def test_fetch_offset_going_back_after_a_leader_epoch_change_is_truncate(spark: SparkSession) -> None:
    # given the follower learns epoch 1 one sample before it truncates from 120 to 100
    rows = [
        follower(T0, fetch_offset=110, lag_messages=0, leader_epoch=0),
        follower(T0 + 1000, fetch_offset=120, lag_messages=0, leader_epoch=0),
        follower(T0 + 2000, fetch_offset=120, lag_messages=0, leader_epoch=1, leader_id=3),
        follower(T0 + 3000, fetch_offset=100, lag_messages=0, leader_epoch=1, leader_id=3),
        follower(T0 + 4000, fetch_offset=105, lag_messages=0, leader_epoch=1, leader_id=3),
    ]
    result = lag_job.follower_status(lag_job.follower_lag(records(spark, rows)), LagJobConfig())
    assert result.select("status", "truncations", "rewinds", "leader_epoch_last").collect() == [
        Row(status="TRUNCATE", truncations=1, rewinds=0, leader_epoch_last=1)
    ]


def test_fetch_offset_going_back_without_an_epoch_change_is_rewind(spark: SparkSession) -> None:
    rows = [
        follower(T0, fetch_offset=110, lag_messages=0),
        follower(T0 + 1000, fetch_offset=120, lag_messages=0),
        follower(T0 + 2000, fetch_offset=121, lag_messages=0),
        follower(T0 + 3000, fetch_offset=100, lag_messages=0),
    ]
    result = lag_job.follower_status(lag_job.follower_lag(records(spark, rows)), LagJobConfig())
    assert result.select("status", "truncations", "rewinds").collect() == [
        Row(status="REWIND", truncations=0, rewinds=1)
    ]


def test_the_status_of_each_follower_is_judged_on_its_own_samples(spark: SparkSession) -> None:
    rows = [follower(T0 + i * 1000, broker_id=2, fetch_offset=42, lag_messages=5) for i in range(4)]
    rows += [follower(T0 + i * 1000, broker_id=3, fetch_offset=i, lag_messages=0) for i in range(4)]
    rows += [follower(T0 + i * 1000, broker_id=2, partition=1, fetch_offset=i, lag_messages=i + 1) for i in range(4)]
    result = lag_job.follower_status(lag_job.follower_lag(records(spark, rows)), LagJobConfig())
    assertDataFrameEqual(
        result.select("partition", "follower_id", "status", "samples", "lag_messages_last"),
        [
            Row(partition=0, follower_id=2, status="STALL", samples=4, lag_messages_last=5),
            Row(partition=0, follower_id=3, status="OK", samples=4, lag_messages_last=0),
            Row(partition=1, follower_id=2, status="WARN", samples=4, lag_messages_last=4),
        ],
    )


def test_every_table_is_computed_from_one_record_set(spark: SparkSession) -> None:
    rows = [leader(T0 + i * 1000, in_sync={2: True}) for i in range(3)]
    rows += [follower(T0 + i * 1000, fetch_offset=i, lag_messages=0) for i in range(3)]
    tables = lag_job.compute_tables(records(spark, rows), LagJobConfig())
    assert sorted(tables) == sorted(s.TABLES)
    assert {name: df.count() for name, df in tables.items()} == {
        s.TABLE_FOLLOWER_LAG: 3,
        s.TABLE_REPLICA_LAG: 3,
        s.TABLE_LAG_WINDOWS: 1,
        s.TABLE_UNDER_REPLICATED: 1,
        s.TABLE_ISR_CHANGES: 1,
        s.TABLE_BYTE_RATES: 2,
        s.TABLE_FOLLOWER_STATUS: 1,
        s.TABLE_LEADER_TIMELINE: 1,
        s.TABLE_CLUSTER_HEALTH: 3,
        s.TABLE_BROKER_HEALTH: 0,  # no broker records
    }


def test_a_follower_promoted_to_leader_gets_no_status_instead_of_stop(spark: SparkSession) -> None:
    # given broker 2 followed until T0+2s, then led the partition until T0+20s
    rows = [follower(T0 + i * 1000, fetch_offset=i, lag_messages=0) for i in range(3)]
    rows += [leader(T0 + i * 1000, broker_id=2, leader_epoch=1) for i in range(3, 21)]
    rows += [follower(T0 + i * 1000, broker_id=3, leader_id=2, fetch_offset=i, lag_messages=0) for i in range(21)]
    recs = records(spark, rows)
    result = lag_job.follower_status(lag_job.follower_lag(recs), LagJobConfig(), None, lag_job.partition_records(recs))
    assert result.select("follower_id", "status").collect() == [Row(follower_id=3, status="OK")]


def test_a_promoted_follower_is_still_promoted_when_its_partition_goes_offline(spark: SparkSession) -> None:
    # given broker 2 followed until T0+2s, led until T0+18s, then reported the partition offline (no
    # leader), as every replica does while a cluster shuts down; broker 3 followed, then went offline too
    def offline(ts_ms: int, broker_id: int) -> dict[str, Any]:
        return {
            **follower(ts_ms, broker_id=broker_id, fetch_offset=9, lag_messages=None),
            s.ROLE: s.ROLE_OFFLINE,
            s.LEADER_ID: -1,
        }

    rows = [follower(T0 + i * 1000, fetch_offset=i, lag_messages=0) for i in range(3)]
    rows += [leader(T0 + i * 1000, broker_id=2, leader_epoch=1) for i in range(3, 19)]
    rows += [follower(T0 + i * 1000, broker_id=3, leader_id=2, fetch_offset=i, lag_messages=0) for i in range(19)]
    rows += [offline(T0 + i * 1000, broker_id) for i in (19, 20) for broker_id in (2, 3)]
    recs = records(spark, rows)
    result = lag_job.follower_status(lag_job.follower_lag(recs), LagJobConfig(), None, lag_job.partition_records(recs))
    assert result.select("follower_id", "status").collect() == [Row(follower_id=3, status="OK")]
    of_samples = lag_job.follower_status_of_samples(lag_job.replica_samples(recs), LagJobConfig())
    assert [(r["follower_id"], r["status"]) for r in of_samples.collect()] == [(3, "OK")]


def test_the_leader_reports_the_lag_of_a_follower_that_reports_nothing(spark: SparkSession) -> None:
    # given follower 2 died at T0: from then on only its leader speaks of it, and its lag climbs
    rows = [
        leader(T0 + i * 1000, in_sync={2: i < 2, 3: True}, behind={2: (i * 50, i * 1000), 3: (0, 0)}) for i in range(5)
    ]
    rows += [follower(T0, fetch_offset=0, lag_messages=0, broker_id=3)]
    lag = lag_job.replica_lag(records(spark, rows)).where("follower_id = 2").orderBy("ts_ms")
    assert [(r["lag_messages"], r["time_since_caught_up_ms"], r["in_sync"]) for r in lag.collect()] == [
        (0, 0, True),
        (50, 1000, True),
        (100, 2000, False),
        (150, 3000, False),
        (200, 4000, False),
    ]
    # and the follower's own series has nothing of it
    assert lag_job.follower_lag(records(spark, rows)).where("follower_id = 2").count() == 0


# ---- cluster_health and catch_up_times ----


def test_the_health_row_counts_under_replicated_under_min_isr_and_offline_partitions_per_bucket(
    spark: SparkSession,
) -> None:
    # given t-0 led by broker 1 (ISR 2 at 1.0 s, 1 at 1.5 s), and t-1 led by broker 2 until it dies after
    # 1.5 s, then by broker 3 from 4 s: nobody leads t-1 in the bucket at 3 s; samples every 500 ms
    isr0 = {T0 + 1000: 2, T0 + 1500: 1}
    rows = [leader(T0 + i * 500, isr_size=isr0.get(T0 + i * 500, 3)) for i in range(12)]
    rows += [leader(T0 + i * 500, broker_id=2, partition=1) for i in range(4)]
    rows += [leader(T0 + i * 500, broker_id=3, partition=1, leader_epoch=1) for i in range(8, 12)]
    health = lag_job.cluster_health(lag_job.replica_samples(records(spark, rows)), LagJobConfig())
    got = [
        (
            r["bucket_start_ms"] - T0,
            r["partitions"],
            r["under_replicated_partitions"],
            r["under_min_isr_partitions"],
            r["offline_partitions"],
            dict(r["leaders"]),
        )
        for r in health.orderBy("bucket_start_ms").collect()
    ]
    assert got == [
        (0, 2, 0, 0, 0, {1: 1, 2: 1}),
        (1000, 2, 1, 1, 0, {1: 1, 2: 1}),
        (2000, 2, 0, 0, 0, {1: 1, 2: 1}),  # broker 2's last sample stands for up to two intervals
        (3000, 2, 0, 0, 1, {1: 1}),
        (4000, 2, 0, 0, 0, {1: 1, 3: 1}),
        (5000, 2, 0, 0, 0, {1: 1, 3: 1}),
    ]


def test_the_catch_up_time_of_a_restart_runs_until_its_last_partition_is_back_in_the_isr(
    spark: SparkSession,
) -> None:
    # given broker 2 down after 1 s and restarted at 4 s: back in the ISR of t-0 at 6 s, of t-1 at 8 s;
    # broker 3 down after 1 s, restarted at 4 s, still out of t-0's ISR at the end
    rows = [leader(T0 + i * 1000, in_sync={2: not 2 <= i < 6, 3: i < 2}, isr_size=3) for i in range(11)]
    rows += [leader(T0 + i * 1000, partition=1, in_sync={2: not 2 <= i < 8}) for i in range(11)]
    restarts = spark.createDataFrame(
        [(2, T0 + 1000, T0 + 4000, T0 + 10_000), (3, T0 + 1000, T0 + 4000, T0 + 10_000)],
        "broker_id int, down_ms long, restart_ms long, until_ms long",
    )
    result = lag_job.catch_up_times(lag_job.replica_lag(records(spark, rows)), restarts)
    got = {r["broker_id"]: (r["partitions_out"], r["partitions_behind"], r["caught_up_ms"]) for r in result.collect()}
    assert got == {2: (2, 0, 4000), 3: (1, 1, None)}


def test_a_follower_sample_without_a_fetch_offset_is_no_truncation(spark: SparkSession) -> None:
    # given a follower restarted under a new leader: its first sample (no answer yet) has no position.
    # Brokers used to write -1 for it; neither that nor a null is a step back from 120.
    for unknown in (-1, None):
        rows = [
            follower(T0, fetch_offset=110, lag_messages=0, leader_epoch=0),
            follower(T0 + 1000, fetch_offset=120, lag_messages=0, leader_epoch=0),
            follower(T0 + 2000, fetch_offset=unknown, lag_messages=None, leader_epoch=1, leader_id=3),
            follower(T0 + 3000, fetch_offset=120, lag_messages=0, leader_epoch=1, leader_id=3),
            follower(T0 + 4000, fetch_offset=125, lag_messages=0, leader_epoch=1, leader_id=3),
        ]
        lag = lag_job.follower_lag(records(spark, rows))
        assert [r[s.FETCH_OFFSET] for r in lag.orderBy(s.TS_MS).collect()] == [110, 120, 120, 125], unknown
        result = lag_job.follower_status(lag, LagJobConfig())
        assert result.select("status", "truncations", "rewinds").collect() == [
            Row(status="OK", truncations=0, rewinds=0)
        ], unknown
        samples = lag_job.replica_samples(records(spark, rows))
        of_samples = lag_job.follower_status_of_samples(samples, LagJobConfig())
        assert [(r["status"], r["truncations"]) for r in of_samples.collect()] == [("OK", 0)], unknown
