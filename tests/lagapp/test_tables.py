"""The lag tables (``lagapp.tables``) on hand-made records with answers worked out by hand, one scenario
per rule: the oracle the job's tables are held to (the file pass, the Spark sort, ``--follow`` and the
page all compute them with these functions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lagapp import dashboard, dashboard_data, follow_round
from lagapp import schema as s
from lagapp import tables as tb
from lagapp.tables import LagJobConfig

pytestmark = [pytest.mark.timeout(60)]

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


def records(rows: list[dict[str, Any]]) -> pa.Table:
    """The records as the job reads them (``LAG_JOB_SCHEMA``'s fields; the others are left out)."""
    return pa.Table.from_pylist(rows, schema=follow_round.RECORDS)


def tables(rows: list[dict[str, Any]], **config: Any) -> dict[str, pa.Table]:
    return tb.compute_tables(records(rows), LagJobConfig(**config))


def table_rows(table: pa.Table, *columns: str) -> list[tuple[Any, ...]]:
    """The rows of ``columns`` (all when none), sorted (the tables' row order is not part of them)."""
    picked = table.select(list(columns)) if columns else table
    return sorted((tuple(r.values()) for r in picked.to_pylist()), key=repr)


def statuses(rows: list[dict[str, Any]], **config: Any) -> list[tuple[Any, ...]]:
    return table_rows(tables(rows, **config)[s.TABLE_FOLLOWER_STATUS], "follower_id", "status")


def derived(rows: list[dict[str, Any]]) -> tb.Rows:
    return tb.derive(*tb.in_replica_order(records(rows))[:2])


# ---- follower_lag and lag_windows ----


def test_only_follower_samples_make_the_lag_series() -> None:
    rows = [
        leader(T0),
        follower(T0, fetch_offset=90, lag_messages=10, lag_ms=300),
        {s.KIND: s.KIND_BROKER, s.TS_MS: T0, s.BROKER_ID: 1, s.BROKER_START_MS: START},
    ]
    result = tables(rows)[s.TABLE_FOLLOWER_LAG]
    columns = ("topic", "partition", "follower_id", "ts_ms", "fetch_offset", "lag_messages", "lag_ms")
    assert table_rows(result, *columns) == [("t", 0, 2, T0, 90, 10, 300)]


def test_lag_percentiles_of_a_known_series_are_nearest_rank() -> None:
    # given lags 1..100 spread over one 10 s window (100 ms apart) and lag 7 at the next window
    rows = [follower(T0 + i * 100, fetch_offset=i, lag_messages=i + 1, lag_ms=(i + 1) * 10) for i in range(100)]
    rows.append(follower(T0 + 10_000, fetch_offset=500, lag_messages=7, lag_ms=70))
    result = tables(rows, window_ms=10_000)[s.TABLE_LAG_WINDOWS]
    assert result.schema == s.TABLE_SCHEMAS[s.TABLE_LAG_WINDOWS]
    assert table_rows(result) == [
        # topic, partition, follower, window, samples, lag_messages p50/p99/max, lag_ms p50/p99/max
        ("t", 0, 2, T0, T0 + 10_000, 100, 50, 99, 100, 500, 990, 1000),
        ("t", 0, 2, T0 + 10_000, T0 + 20_000, 1, 7, 7, 7, 70, 70, 70),
    ]


# ---- counters and byte_rates ----


def test_byte_rates_are_counter_growth_over_the_sampled_interval() -> None:
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
    result = tables(rows)[s.TABLE_BYTE_RATES]
    columns = (
        "broker_id",
        "window_start_ms",
        "interval_ms",
        "client_in_bytes",
        "client_in_bytes_per_s",
        "client_out_bytes_per_s",
        "replication_in_bytes_per_s",
        "replication_out_bytes_per_s",
        "messages_in_per_s",
    )
    assert table_rows(result, *columns) == [(1, T0, 3000, 15_000, 5000.0, 1000.0, 0.0, 10_000.0, 50.0)]


def test_a_broker_restart_resets_counters_without_a_negative_rate() -> None:
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
    r = derived(rows)
    # the first sample of an incarnation counts from zero: the 10000 bytes since the broker started
    assert list(zip(r.ts.tolist(), r.interval_ms.tolist(), r.deltas[s.BYTES_IN].tolist(), strict=True)) == [
        (T0, 0, 10_000),
        (T0 + 1000, 1000, 10_000),
        (T0 + 2000, 1000, 10_000),
        (T0 + 3000, 1000, 2000),
        (T0 + 4000, 1000, 3000),
        (T0 + 5000, 1000, 1000),
    ]
    # the window holds what was counted inside it: not the 10000 bytes before T0 (the first broker
    # started long before the window), but the 2000 the restarted one counted in its first 500 ms
    rates = tables(rows)[s.TABLE_BYTE_RATES]
    assert table_rows(rates, "interval_ms", "client_in_bytes", "client_in_bytes_per_s") == [
        (4500, 26_000, 26_000 / 4.5)
    ]


def test_the_first_sample_counts_from_the_broker_start() -> None:
    # given a broker that started at T0 and had taken 700 kB before its first sample at T0 + 1 s
    rows = [
        leader(T0 + 1000, BytesInPerSec=700_000, broker_start_ms=T0),
        leader(T0 + 2000, BytesInPerSec=800_000, broker_start_ms=T0),
    ]
    rates = tables(rows)[s.TABLE_BYTE_RATES]
    # then the 700 kB appear, over the 2 s since the start
    assert table_rows(rates, "interval_ms", "client_in_bytes", "client_in_bytes_per_s") == [(2000, 800_000, 400_000.0)]


def test_a_share_of_a_first_sample_is_rounded_half_up() -> None:
    # given a broker started 3 s before T0 whose first sample, at T0 + 1 s, counts 10 bytes: the window
    # from T0 holds 1 s of the 4, 2.5 bytes, which the table rounds half up (Spark's round) to 3, not to
    # even (numpy's) 2
    rows = [leader(T0 + 1000, BytesInPerSec=10, broker_start_ms=T0 - 3000)]
    rates = tables(rows, window_ms=10_000)[s.TABLE_BYTE_RATES]
    assert table_rows(rates, "window_start_ms", "interval_ms", "client_in_bytes", "client_in_bytes_per_s") == [
        (T0, 1000, 3, 3.0)
    ]


# ---- under_replicated and isr_changes ----


def under_replicated(rows: list[dict[str, Any]], **config: Any) -> pa.Table:
    return tables(rows, **config)[s.TABLE_UNDER_REPLICATED]


def test_time_under_replicated_counts_the_leader_samples_with_a_short_isr() -> None:
    # given a leader that reports ISR 3, 2, 1, 2, 3 one second apart: followers 2 and 3 drop out in turn
    flags = [
        {2: True, 3: True},
        {2: False, 3: True},
        {2: False, 3: False},
        {2: False, 3: True},
        {2: True, 3: True},
    ]
    rows = [leader(T0 + i * 1000, isr_size=1 + sum(f.values()), in_sync=f) for i, f in enumerate(flags)]
    # topic, partition, leader samples, first and last ts_ms, observed, under-replicated and under min ISR
    # ms, smallest ISR, ISR shrinks and expands
    assert table_rows(under_replicated(rows)) == [("t", 0, 5, T0, T0 + 4000, 4000, 3000, 1000, 1, 2, 2)]


def test_the_partition_summary_counts_the_isr_changes_its_follower_table_shows() -> None:
    # given the controller shrank the ISR when it fenced dead follower 2 (the leader's IsrShrinksPerSec does
    # not count that) and the leader, freshly restarted, already counts 6 expands from before the samples
    flags = [True, False, False, True]
    rows = [
        leader(T0 + i * 1000, isr_size=2 + ok, in_sync={2: ok, 3: True}, IsrShrinksPerSec=0, IsrExpandsPerSec=6)
        for i, ok in enumerate(flags)
    ]
    out = tables(rows)
    assert table_rows(out[s.TABLE_UNDER_REPLICATED], "isr_shrinks", "isr_expands", "under_replicated_ms") == [
        (1, 1, 2000)
    ]
    changes = out[s.TABLE_ISR_CHANGES]
    assert (sum(changes["shrinks"].to_pylist()), sum(changes["expands"].to_pylist())) == (1, 1)


def test_a_gap_in_the_leader_samples_is_not_counted_as_under_replicated() -> None:
    rows = [leader(T0, isr_size=2), leader(T0 + 60_000, isr_size=2)]
    result = under_replicated(rows, window_ms=10_000)
    assert table_rows(result, "observed_ms", "under_replicated_ms") == [(10_000, 10_000)]


def test_isr_shrinks_and_expands_per_follower_follow_the_leaders_in_sync_flags() -> None:
    # given follower 2 drops out of sync for two samples and comes back; follower 3 stays in sync,
    # and the leader changes to broker 3 half way (it then reports broker 1 as its follower)
    rows = [
        leader(T0, in_sync={2: True, 3: True}),
        leader(T0 + 1000, in_sync={2: False, 3: True}),
        leader(T0 + 2000, in_sync={2: False, 3: True}),
        leader(T0 + 3000, in_sync={2: True, 3: True}),
        leader(T0 + 4000, broker_id=3, leader_epoch=1, in_sync={2: True, 1: False}),
    ]
    result = tables(rows)[s.TABLE_ISR_CHANGES]
    # topic, partition, follower, samples, shrinks, expands, out of sync ms, observed ms, in sync at the end
    assert table_rows(result) == [
        ("t", 0, 1, 1, 0, 0, 0, 0, False),
        ("t", 0, 2, 5, 1, 1, 2000, 4000, True),
        ("t", 0, 3, 4, 0, 0, 0, 3000, True),
    ]


# ---- leader_timeline ----


def test_leader_changes_appear_in_epoch_order_with_the_previous_leader() -> None:
    rows = [
        leader(T0),
        follower(T0, broker_id=3, fetch_offset=5, lag_messages=0),
        leader(T0 + 1000),
        follower(T0 + 2000, broker_id=3, fetch_offset=5, lag_messages=0),
        leader(T0 + 3000, broker_id=3, leader_epoch=1),
        follower(T0 + 4000, broker_id=1, leader_id=3, leader_epoch=1, fetch_offset=5, lag_messages=0),
    ]
    result = tables(rows)[s.TABLE_LEADER_TIMELINE]
    # topic, partition, epoch, leader, first and last seen, reports, confirmed, previous leader and epoch
    assert table_rows(result) == [
        ("t", 0, 0, 1, T0, T0 + 2000, 4, True, None, None),
        ("t", 0, 1, 3, T0 + 3000, T0 + 4000, 2, True, 1, 0),
    ]


# ---- follower_status: one scenario per Burrow rule ----


def test_a_follower_whose_lag_goes_down_is_ok() -> None:
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=lag) for i, lag in enumerate([5, 9, 3, 4])]
    assert statuses(rows) == [(2, "OK")]


def test_a_caught_up_follower_is_ok_even_with_a_still_fetch_offset() -> None:
    rows = [follower(T0 + i * 1000, fetch_offset=10, lag_messages=0) for i in range(5)]
    assert statuses(rows) == [(2, "OK")]


def test_a_follower_whose_lag_never_decreases_is_warn() -> None:
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=lag) for i, lag in enumerate([2, 2, 5, 8])]
    assert statuses(rows) == [(2, "WARN")]


def test_warn_needs_enough_samples() -> None:
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=lag) for i, lag in enumerate([2, 5])]
    assert statuses(rows, status_min_samples=3) == [(2, "OK")]


def test_only_the_last_window_counts_for_the_status() -> None:
    # given lag falling early on, then rising at every sample of the last 10 s
    lags = [9, 5, 1, 1, 2, 3, 4, 5]
    rows = [follower(T0 + i * 2000, fetch_offset=10 * i, lag_messages=lag) for i, lag in enumerate(lags)]
    assert statuses(rows, window_ms=10_000) == [(2, "WARN")]


def test_lag_with_an_unchanged_fetch_offset_is_stall_even_though_it_is_also_warn() -> None:
    rows = [follower(T0 + i * 1000, fetch_offset=42, lag_messages=lag) for i, lag in enumerate([3, 3, 6, 9])]
    assert statuses(rows) == [(2, "STALL")]


def test_a_follower_silent_for_longer_than_the_window_is_stop() -> None:
    # given follower 2 stopped reporting at T0+2s while follower 3 reports until T0+20s
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=0) for i in range(3)]
    rows += [follower(T0 + i * 1000, broker_id=3, fetch_offset=10 * i, lag_messages=0) for i in range(21)]
    assert statuses(rows, window_ms=10_000) == [(2, "STOP"), (3, "OK")]


def test_a_single_silent_follower_is_stop_while_its_leader_goes_on() -> None:
    # given the only follower stopped reporting at T0+2s; its leader reports until T0+20s
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=0) for i in range(3)]
    rows += [leader(T0 + i * 1000, in_sync={2: i < 8}) for i in range(21)]
    assert statuses(rows, window_ms=10_000) == [(2, "STOP")]


def test_a_lag_within_allowed_lag_counts_as_caught_up() -> None:
    # given a follower always a batch or two behind under load (Burrow's allowed-lag)
    rows = [follower(T0 + i * 1000, fetch_offset=10 * i, lag_messages=lag) for i, lag in enumerate([1, 2, 2, 2])]
    assert statuses(rows) == [(2, "WARN")]
    assert statuses(rows, allowed_lag_messages=2) == [(2, "OK")]


def test_fetch_offset_going_back_after_a_leader_epoch_change_is_truncate() -> None:
    # given the follower learns epoch 1 one sample before it truncates from 120 to 100
    rows = [
        follower(T0, fetch_offset=110, lag_messages=0, leader_epoch=0),
        follower(T0 + 1000, fetch_offset=120, lag_messages=0, leader_epoch=0),
        follower(T0 + 2000, fetch_offset=120, lag_messages=0, leader_epoch=1, leader_id=3),
        follower(T0 + 3000, fetch_offset=100, lag_messages=0, leader_epoch=1, leader_id=3),
        follower(T0 + 4000, fetch_offset=105, lag_messages=0, leader_epoch=1, leader_id=3),
    ]
    result = tables(rows)[s.TABLE_FOLLOWER_STATUS]
    assert table_rows(result, "status", "truncations", "rewinds", "leader_epoch_last") == [("TRUNCATE", 1, 0, 1)]


def test_fetch_offset_going_back_without_an_epoch_change_is_rewind() -> None:
    rows = [
        follower(T0, fetch_offset=110, lag_messages=0),
        follower(T0 + 1000, fetch_offset=120, lag_messages=0),
        follower(T0 + 2000, fetch_offset=121, lag_messages=0),
        follower(T0 + 3000, fetch_offset=100, lag_messages=0),
    ]
    result = tables(rows)[s.TABLE_FOLLOWER_STATUS]
    assert table_rows(result, "status", "truncations", "rewinds") == [("REWIND", 0, 1)]


def test_the_status_of_each_follower_is_judged_on_its_own_samples() -> None:
    rows = [follower(T0 + i * 1000, broker_id=2, fetch_offset=42, lag_messages=5) for i in range(4)]
    rows += [follower(T0 + i * 1000, broker_id=3, fetch_offset=i, lag_messages=0) for i in range(4)]
    rows += [follower(T0 + i * 1000, broker_id=2, partition=1, fetch_offset=i, lag_messages=i + 1) for i in range(4)]
    result = tables(rows)[s.TABLE_FOLLOWER_STATUS]
    assert table_rows(result, "partition", "follower_id", "status", "samples", "lag_messages_last") == [
        (0, 2, "STALL", 4, 5),
        (0, 3, "OK", 4, 0),
        (1, 2, "WARN", 4, 4),
    ]


def test_every_table_is_computed_from_one_record_set() -> None:
    rows = [leader(T0 + i * 1000, in_sync={2: True}) for i in range(3)]
    rows += [follower(T0 + i * 1000, fetch_offset=i, lag_messages=0) for i in range(3)]
    out = tables(rows)
    assert {name: table.schema for name, table in out.items()} == s.TABLE_SCHEMAS
    assert {name: table.num_rows for name, table in out.items()} == {
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


def test_a_follower_promoted_to_leader_gets_no_status_instead_of_stop() -> None:
    # given broker 2 followed until T0+2s, then led the partition until T0+20s
    rows = [follower(T0 + i * 1000, fetch_offset=i, lag_messages=0) for i in range(3)]
    rows += [leader(T0 + i * 1000, broker_id=2, leader_epoch=1) for i in range(3, 21)]
    rows += [follower(T0 + i * 1000, broker_id=3, leader_id=2, fetch_offset=i, lag_messages=0) for i in range(21)]
    assert statuses(rows) == [(3, "OK")]


def test_a_promoted_follower_is_still_promoted_when_its_partition_goes_offline() -> None:
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
    assert statuses(rows) == [(3, "OK")]


def test_the_leader_reports_the_lag_of_a_follower_that_reports_nothing() -> None:
    # given follower 2 died at T0: from then on only its leader speaks of it, and its lag climbs
    rows = [
        leader(T0 + i * 1000, in_sync={2: i < 2, 3: True}, behind={2: (i * 50, i * 1000), 3: (0, 0)}) for i in range(5)
    ]
    rows += [follower(T0, fetch_offset=0, lag_messages=0, broker_id=3)]
    out = tables(rows)
    lag = out[s.TABLE_REPLICA_LAG].filter(pa.compute.equal(out[s.TABLE_REPLICA_LAG]["follower_id"], 2))
    assert table_rows(lag, "ts_ms", "lag_messages", "time_since_caught_up_ms", "in_sync") == [
        (T0, 0, 0, True),
        (T0 + 1000, 50, 1000, True),
        (T0 + 2000, 100, 2000, False),
        (T0 + 3000, 150, 3000, False),
        (T0 + 4000, 200, 4000, False),
    ]
    # and the follower's own series has nothing of it
    assert 2 not in out[s.TABLE_FOLLOWER_LAG]["follower_id"].to_pylist()


# ---- cluster_health and the catch-up time of a restart ----


def test_the_health_row_counts_under_replicated_under_min_isr_and_offline_partitions_per_bucket() -> None:
    # given t-0 led by broker 1 (ISR 2 at 1.0 s, 1 at 1.5 s), and t-1 led by broker 2 until it dies after
    # 1.5 s, then by broker 3 from 4 s: nobody leads t-1 in the bucket at 3 s; samples every 500 ms
    isr0 = {T0 + 1000: 2, T0 + 1500: 1}
    rows = [leader(T0 + i * 500, isr_size=isr0.get(T0 + i * 500, 3)) for i in range(12)]
    rows += [leader(T0 + i * 500, broker_id=2, partition=1) for i in range(4)]
    rows += [leader(T0 + i * 500, broker_id=3, partition=1, leader_epoch=1) for i in range(8, 12)]
    health = tables(rows)[s.TABLE_CLUSTER_HEALTH]
    got = [
        (
            r["bucket_start_ms"] - T0,
            r["partitions"],
            r["under_replicated_partitions"],
            r["under_min_isr_partitions"],
            r["offline_partitions"],
            dict(r["leaders"]),
        )
        for r in health.sort_by("bucket_start_ms").to_pylist()
    ]
    assert got == [
        (0, 2, 0, 0, 0, {1: 1, 2: 1}),
        (1000, 2, 1, 1, 0, {1: 1, 2: 1}),
        (2000, 2, 0, 0, 0, {1: 1, 2: 1}),  # broker 2's last sample stands for up to two intervals
        (3000, 2, 0, 0, 1, {1: 1}),
        (4000, 2, 0, 0, 0, {1: 1, 3: 1}),
        (5000, 2, 0, 0, 0, {1: 1, 3: 1}),
    ]


def broker(ts_ms: int, broker_id: int, **gauges: Any) -> dict[str, Any]:
    """A broker record with ``gauges`` (record field names) and no others."""
    return {s.KIND: s.KIND_BROKER, s.TS_MS: ts_ms, s.BROKER_ID: broker_id, s.BROKER_START_MS: START, **gauges}


def quorum(leader_id: int, epoch: int, lag_records: int = 0, lag_ms: int = 0) -> dict[str, int]:
    """A broker's view of the metadata quorum, as its record carries it."""
    return {
        s.METADATA_LEADER_ID: leader_id,
        s.METADATA_LEADER_EPOCH: epoch,
        s.METADATA_LAG_RECORDS: lag_records,
        s.METADATA_LAG_MS: lag_ms,
    }


def test_broker_health_carries_each_brokers_view_of_the_metadata_quorum() -> None:
    loop = {s.LOOP_LAG_MAX_MS: 2.5, s.LOOP_LAG_AVG_MS: 0.5}
    rows = [
        broker(T0, 1, **loop, **quorum(3000, 1)),
        broker(T0 + 1000, 1, **loop, **quorum(-1, 2)),  # an election: no leader known
        broker(T0, 2, **loop),  # an older broker, or one that follows no quorum
        broker(T0, 3, **quorum(3002, 3, lag_records=40, lag_ms=1500)),  # the quorum without the loop lag
        broker(T0, 4),  # neither
    ]
    health = tables(rows)[s.TABLE_BROKER_HEALTH]
    columns = ("metadata_leader_id", "metadata_leader_epoch", "metadata_lag_records", "metadata_lag_ms")
    assert table_rows(health, "broker_id", "ts_ms", "loop_lag_max_ms", *columns) == [
        (1, T0, 2.5, 3000, 1, 0, 0),
        (1, T0 + 1000, 2.5, -1, 2, 0, 0),
        (2, T0, 2.5, None, None, None, None),
        (3, T0, None, 3002, 3, 40, 1500),
    ]


def _quorum_run() -> list[dict[str, Any]]:
    """Brokers 1 and 3 follow the controller quorum, broker 2 reports no quorum (an older broker); a sample
    a second from T0 to T0 + 9 s. The quorum's leader is controller 3000 in epoch 1, then none in epoch 2
    (an election: broker 1 sees it from 3 s, broker 3 from 4 s), then controller 3002 in epoch 3 (broker 1
    from 5 s, broker 3 from 6 s); broker 3 is then 40 records (1.5 s) and 12 records (2.5 s) behind. So
    at 3 s one broker still sees 3000 and at 5 s one already sees 3002; at 4 s neither sees a leader.
    Broker 1 leads t-0."""
    rows = []
    for i in range(10):
        ts = T0 + i * 1000
        rows.append(leader(ts))
        for b, election, elected in ((1, 3, 5), (3, 4, 6)):
            view = quorum(3000, 1) if i < election else quorum(-1, 2) if i < elected else quorum(3002, 3)
            if b == 3 and i in (6, 7):
                view = quorum(3002, 3, lag_records=40 if i == 6 else 12, lag_ms=1500 if i == 6 else 2500)
            rows.append(broker(ts, b, **view))
        rows.append(broker(ts, 2, **{s.LOOP_LAG_MAX_MS: 2.5, s.LOOP_LAG_AVG_MS: 0.5}))
    return rows


def _written(out: dict[str, pa.Table], root: Path) -> dict[str, str]:
    """Each table as the job leaves it, a folder of Parquet files under ``root``: the paths by name."""
    paths = {}
    for name, table in out.items():
        (root / name).mkdir()
        pq.write_table(table, root / name / "part-00000.parquet")
        paths[name] = str(root / name)
    return paths


def test_the_quorum_row_has_the_leader_epoch_its_gaps_and_each_brokers_metadata_lag(tmp_path: Path) -> None:
    paths = _written(tables(_quorum_run()), tmp_path)
    runs = [dashboard.BrokerRun(b, START, 20 if b == 1 else 10, T0, T0 + 9000) for b in (1, 2, 3)]
    data = dashboard_data.collect_dashboard_data("t", paths, 10_000, runs, health_bucket_ms=1000)
    assert data.health is not None
    q = data.health.quorum
    assert q.bucket_start_ms == [T0 + 1000 * i for i in range(10)]
    # a bucket in which any broker saw a leader shows it (3 s, 5 s); none did at 4 s: a gap
    assert q.leader_epoch == [1, 1, 1, 1, None, 3, 3, 3, 3, 3]
    assert q.leader_id == [3000] * 4 + [None] + [3002] * 5
    assert q.no_leader_epoch == [None] * 4 + [2] + [None] * 5
    assert sorted(q.metadata_lag) == [1, 3]  # broker 2 reports no quorum
    assert q.metadata_lag[1].records == [0] * 10
    assert q.metadata_lag[3].records == [0] * 6 + [40, 12] + [0] * 2
    assert q.metadata_lag[3].ms == [0] * 6 + [1500, 2500] + [0] * 2
    # in 2 s buckets: the highest epoch a broker saw a leader in, and the largest lag of each kind
    two = dashboard_data.quorum(dashboard_data.Tables(paths), T0, T0 + 9000, 2000)
    assert (two.leader_epoch, two.leader_id) == ([1, 1, 3, 3, 3], [3000, 3000, 3002, 3002, 3002])
    assert (two.metadata_lag[3].records, two.metadata_lag[3].ms) == ([0, 0, 0, 40, 0], [0, 0, 0, 2500, 0])
    page = dashboard.render_dashboard(data)
    for text in (
        "metadata quorum: leader epoch",
        "metadata lag (records)",
        "epoch 1: leader 3000",
        "epoch 3: leader 3002",
        "no active controller (epoch 2)",
        "broker 3: 40 records, 1.5 s behind",
        "controllers emit no metrics, so this is the brokers' view",
    ):
        assert text in page, text


def test_the_catch_up_time_of_a_restart_runs_until_its_last_partition_is_back_in_the_isr(tmp_path: Path) -> None:
    # given broker 2 down after 1 s and restarted at 4 s: back in the ISR of t-0 at 6 s, of t-1 at 8 s;
    # broker 3 down after 1 s, restarted at 4 s, still out of t-0's ISR at the end
    rows = [leader(T0 + i * 1000, in_sync={2: not 2 <= i < 6, 3: i < 2}, isr_size=3) for i in range(11)]
    rows += [leader(T0 + i * 1000, partition=1, in_sync={2: not 2 <= i < 8}) for i in range(11)]
    (tmp_path / s.TABLE_REPLICA_LAG).mkdir()
    pq.write_table(tables(rows)[s.TABLE_REPLICA_LAG], tmp_path / s.TABLE_REPLICA_LAG / "part-00000.parquet")
    runs = [
        dashboard.BrokerRun(broker, start, 2, first, last)
        for broker in (2, 3)
        for start, first, last in ((START, T0, T0 + 1000), (T0 + 4000, T0 + 4000, T0 + 10_000))
    ]
    paths = {s.TABLE_REPLICA_LAG: str(tmp_path / s.TABLE_REPLICA_LAG)}
    found = dashboard_data.restarts(dashboard_data.Tables(paths), runs, T0 + 10_000, 10_000)
    got = {r.broker_id: (r.down_ms, r.restart_ms, r.partitions_out, r.partitions_behind, r.caught_up_ms) for r in found}
    assert got == {2: (T0 + 1000, T0 + 4000, 2, 0, 4000), 3: (T0 + 1000, T0 + 4000, 1, 1, None)}


def test_a_follower_sample_without_a_fetch_offset_is_no_truncation() -> None:
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
        out = tables(rows)
        assert sorted(out[s.TABLE_FOLLOWER_LAG][s.FETCH_OFFSET].to_pylist()) == [110, 120, 120, 125], unknown
        assert table_rows(out[s.TABLE_FOLLOWER_STATUS], "status", "truncations", "rewinds") == [("OK", 0, 0)], unknown


def test_a_repeated_record_is_dropped_and_changes_no_table() -> None:
    # given the leader's second sample delivered twice (MQTT QoS 1), the second copy at the end
    rows = [leader(T0 + i * 1000, in_sync={2: i != 1}, BytesInPerSec=1000 * i) for i in range(4)]
    once = tables(rows)
    twice = tb.compute_tables(records([*rows, rows[1]]), LagJobConfig())
    assert tb.in_replica_order(records([*rows, rows[1]]))[2] == 1
    assert {name: table_rows(t) for name, t in twice.items()} == {name: table_rows(t) for name, t in once.items()}
