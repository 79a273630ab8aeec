"""The lag job's transforms: metric records in, one DataFrame per output table out.

How this works: every function here is a pure DataFrame → DataFrame transform (no I/O, no actions,
no Python UDFs), so the same code runs in the batch job, inside a streaming ``foreachBatch`` and in the
unit tests on hand-made rows. Ordered facts ("the previous sample of this follower") come from Spark
window functions (``lag``/``lead`` over ``ts_ms`` per key), which stay in the JVM and scale.

Keys: a follower is ``(topic, partition, follower_id)``; a replica's counters are keyed by
``(broker_id, topic, partition)`` because each broker keeps its own running totals.

Time: everything is in ms since the epoch taken from the records (``ts_ms``); the job never reads a
clock. "Now" for the STOP rule is the newest ``ts_ms`` in the data set unless given.

Sample durations: a sample stands for the time until the next sample of the same key, capped at
``sample_gap_max_ms`` (a longer gap means the emitter was down and the state is unknown, so it is not
counted); the last sample of a key stands for 0 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from metrics import schema as s

# Accuracy of percentile_approx: exact for groups of up to about this many samples.
PERCENTILE_ACCURACY = 10_000


@dataclass(frozen=True)
class LagJobConfig:
    """Parameters shared by the transforms.

    window_ms: tumbling window of ``lag_windows`` and ``byte_rates``, and the length of the sliding
        window the follower status is judged over (Burrow's evaluation window).
    status_min_samples: WARN and STALL need at least this many samples in the window; fewer samples
        are not evidence of a trend.
    sample_gap_max_ms: the longest time one sample may stand for (defaults to window_ms).
    """

    window_ms: int = 10_000
    status_min_samples: int = 3
    sample_gap_max_ms: int | None = None

    @property
    def gap_max_ms(self) -> int:
        return self.sample_gap_max_ms if self.sample_gap_max_ms is not None else self.window_ms


def partition_records(records: DataFrame) -> DataFrame:
    """Partition records only, rows without a timestamp dropped (a malformed line read as nulls)."""
    return records.where((F.col(s.KIND) == s.KIND_PARTITION) & F.col(s.TS_MS).isNotNull())


def _window_start(ts: Column, window_ms: int) -> Column:
    """Start of the tumbling window holding ``ts``: windows are aligned to the epoch."""
    return ts - F.pmod(ts, F.lit(window_ms))


def _sample_duration(next_ts: Column, ts: Column, gap_max_ms: int) -> Column:
    """How long a sample stands for: until the next one, at most ``gap_max_ms``, 0 for the last."""
    return F.least(F.coalesce(next_ts - ts, F.lit(0)), F.lit(gap_max_ms)).cast("long")


def follower_lag(records: DataFrame) -> DataFrame:
    """``follower_lag``: the lag time series, one row per follower sample.

    Columns: topic, partition, follower_id, ts_ms, leader_id, leader_epoch, fetch_offset,
    lag_messages, lag_ms, log_end_offset, high_watermark. Only ``role == "follower"`` records with a
    fetch offset count: leaders have no lag and offline replicas have no fetcher.
    """
    return (
        partition_records(records)
        .where((F.col(s.ROLE) == s.ROLE_FOLLOWER) & F.col(s.FETCH_OFFSET).isNotNull())
        .select(
            s.TOPIC,
            s.PARTITION,
            F.col(s.BROKER_ID).alias("follower_id"),
            s.TS_MS,
            s.LEADER_ID,
            s.LEADER_EPOCH,
            s.FETCH_OFFSET,
            s.LAG_MESSAGES,
            s.LAG_MS,
            s.LOG_END_OFFSET,
            s.HIGH_WATERMARK,
        )
    )


def lag_windows(follower_lag_df: DataFrame, config: LagJobConfig) -> DataFrame:
    """``lag_windows``: lag percentiles per follower and tumbling window of ``window_ms``.

    Columns: topic, partition, follower_id, window_start_ms, window_end_ms (exclusive), samples,
    lag_messages_p50/_p99/_max, lag_ms_p50/_p99/_max. Percentiles are nearest-rank: the smallest
    sampled value v with at least ⌈p·n⌉ samples ≤ v (``percentile_approx``, exact at these sizes), so
    p50 of the lags 1..100 is 50 and p99 is 99.
    """
    percentages = F.array(F.lit(0.5), F.lit(0.99))
    grouped = follower_lag_df.groupBy(
        s.TOPIC,
        s.PARTITION,
        "follower_id",
        _window_start(F.col(s.TS_MS), config.window_ms).alias("window_start_ms"),
    ).agg(
        F.count(F.lit(1)).alias("samples"),
        F.percentile_approx(s.LAG_MESSAGES, percentages, PERCENTILE_ACCURACY).alias("_lag_messages_p"),
        F.max(s.LAG_MESSAGES).alias("lag_messages_max"),
        F.percentile_approx(s.LAG_MS, percentages, PERCENTILE_ACCURACY).alias("_lag_ms_p"),
        F.max(s.LAG_MS).alias("lag_ms_max"),
    )
    return grouped.select(
        s.TOPIC,
        s.PARTITION,
        "follower_id",
        "window_start_ms",
        (F.col("window_start_ms") + F.lit(config.window_ms)).alias("window_end_ms"),
        "samples",
        F.col("_lag_messages_p")[0].alias("lag_messages_p50"),
        F.col("_lag_messages_p")[1].alias("lag_messages_p99"),
        "lag_messages_max",
        F.col("_lag_ms_p")[0].alias("lag_ms_p50"),
        F.col("_lag_ms_p")[1].alias("lag_ms_p99"),
        "lag_ms_max",
    )


def counter_deltas(partition_records_df: DataFrame) -> DataFrame:
    """Per replica sample: how much each running total grew since that replica's previous sample.

    Keyed by (broker_id, topic, partition), ordered by ts_ms. Rule for each counter c:
    - first sample of the key: delta 0 (no baseline; the interval is unknown);
    - reset (``broker_start_ms`` differs from the previous sample's, or c is lower than before): the
      counter restarted from 0, so everything it holds is new: delta = c;
    - otherwise delta = c − previous c.
    Hence a delta is never negative. ``interval_ms`` is the time since the previous sample (0 for the
    first), the denominator of a rate. Output: broker_id, topic, partition, ts_ms, role, interval_ms,
    and ``<counter>_delta`` for every counter in ``schema.PARTITION_COUNTERS``.
    """
    by_replica = Window.partitionBy(s.BROKER_ID, s.TOPIC, s.PARTITION).orderBy(s.TS_MS)
    prev_ts = F.lag(s.TS_MS).over(by_replica)
    restarted = F.lag(s.BROKER_START_MS).over(by_replica) != F.col(s.BROKER_START_MS)
    deltas = []
    for name in s.PARTITION_COUNTERS:
        value = F.coalesce(F.col(name), F.lit(0))
        prev = F.lag(value).over(by_replica)
        deltas.append(
            F.when(prev_ts.isNull(), F.lit(0))
            .when(restarted | (value < prev), value)
            .otherwise(value - prev)
            .cast("long")
            .alias(f"{name}_delta")
        )
    return partition_records_df.select(
        s.BROKER_ID,
        s.TOPIC,
        s.PARTITION,
        s.TS_MS,
        s.ROLE,
        F.coalesce(F.col(s.TS_MS) - prev_ts, F.lit(0)).alias("interval_ms"),
        *deltas,
    )


_RATE_COLUMNS: tuple[tuple[str, str], ...] = (
    (s.BYTES_IN, "client_in"),
    (s.BYTES_OUT, "client_out"),
    (s.REPLICATION_BYTES_IN, "replication_in"),
    (s.REPLICATION_BYTES_OUT, "replication_out"),
)


def byte_rates(counter_deltas_df: DataFrame, config: LagJobConfig) -> DataFrame:
    """``byte_rates``: bytes and rates per broker, partition and tumbling window.

    Columns: broker_id, topic, partition, window_start_ms, window_end_ms, interval_ms,
    client_in_bytes, client_out_bytes, replication_in_bytes, replication_out_bytes, messages_in,
    and ``<name>_bytes_per_s`` / ``messages_in_per_s`` = delta sum × 1000 / interval_ms. A window
    holding only a replica's first sample (interval 0) carries no rate and is left out. Deltas come
    from ``counter_deltas``, so a restart never makes a rate negative.
    """
    sums = [F.sum(f"{counter}_delta").alias(f"{name}_bytes") for counter, name in _RATE_COLUMNS]
    grouped = counter_deltas_df.groupBy(
        s.BROKER_ID,
        s.TOPIC,
        s.PARTITION,
        _window_start(F.col(s.TS_MS), config.window_ms).alias("window_start_ms"),
    ).agg(
        F.sum("interval_ms").alias("interval_ms"),
        *sums,
        F.sum(f"{s.MESSAGES_IN}_delta").alias("messages_in"),
    )
    per_s = 1000.0 / F.col("interval_ms")
    return grouped.where(F.col("interval_ms") > 0).select(
        s.BROKER_ID,
        s.TOPIC,
        s.PARTITION,
        "window_start_ms",
        (F.col("window_start_ms") + F.lit(config.window_ms)).alias("window_end_ms"),
        "interval_ms",
        *(f"{name}_bytes" for _, name in _RATE_COLUMNS),
        "messages_in",
        *((F.col(f"{name}_bytes") * per_s).alias(f"{name}_bytes_per_s") for _, name in _RATE_COLUMNS),
        (F.col("messages_in") * per_s).alias("messages_in_per_s"),
    )


def under_replicated(
    partition_records_df: DataFrame, counter_deltas_df: DataFrame, config: LagJobConfig
) -> DataFrame:
    """``under_replicated``: per partition, how long its leaders reported it under-replicated.

    From the leaders' samples of a partition (whichever broker led), ordered by ts_ms: a sample with
    ``under_replicated`` true adds its duration (see the module docstring) to under_replicated_ms;
    likewise ``under_min_isr`` to under_min_isr_ms; observed_ms is the total duration covered.
    isr_shrinks / isr_expands are the growth of the leaders' IsrShrinksPerSec / IsrExpandsPerSec
    counters (resets handled as in ``counter_deltas``). Columns: topic, partition, leader_samples,
    first_ts_ms, last_ts_ms, observed_ms, under_replicated_ms, under_min_isr_ms, isr_size_min,
    isr_shrinks, isr_expands.
    """
    leaders = partition_records_df.where(F.col(s.ROLE) == s.ROLE_LEADER)
    by_partition = Window.partitionBy(s.TOPIC, s.PARTITION).orderBy(s.TS_MS, s.BROKER_ID)
    duration = _sample_duration(F.lead(s.TS_MS).over(by_partition), F.col(s.TS_MS), config.gap_max_ms)
    timed = leaders.select(
        s.TOPIC, s.PARTITION, s.TS_MS, s.UNDER_REPLICATED, s.UNDER_MIN_ISR, s.ISR_SIZE, duration.alias("d")
    )
    zero = F.lit(0).cast("long")
    times = timed.groupBy(s.TOPIC, s.PARTITION).agg(
        F.count(F.lit(1)).alias("leader_samples"),
        F.min(s.TS_MS).alias("first_ts_ms"),
        F.max(s.TS_MS).alias("last_ts_ms"),
        F.sum("d").alias("observed_ms"),
        F.sum(F.when(F.col(s.UNDER_REPLICATED), F.col("d")).otherwise(zero)).alias("under_replicated_ms"),
        F.sum(F.when(F.col(s.UNDER_MIN_ISR), F.col("d")).otherwise(zero)).alias("under_min_isr_ms"),
        F.min(s.ISR_SIZE).alias("isr_size_min"),
    )
    isr_counts = counter_deltas_df.groupBy(s.TOPIC, s.PARTITION).agg(
        F.sum(f"{s.ISR_SHRINKS}_delta").alias("isr_shrinks"),
        F.sum(f"{s.ISR_EXPANDS}_delta").alias("isr_expands"),
    )
    return times.join(isr_counts, [s.TOPIC, s.PARTITION], "left").select(
        s.TOPIC,
        s.PARTITION,
        "leader_samples",
        "first_ts_ms",
        "last_ts_ms",
        "observed_ms",
        "under_replicated_ms",
        "under_min_isr_ms",
        "isr_size_min",
        F.coalesce("isr_shrinks", zero).alias("isr_shrinks"),
        F.coalesce("isr_expands", zero).alias("isr_expands"),
    )


def isr_changes(partition_records_df: DataFrame, config: LagJobConfig) -> DataFrame:
    """``isr_changes``: per partition and follower, ISR shrinks and expands seen by the leaders.

    Each leader sample lists its followers with ``in_sync``. Per (topic, partition, follower_id),
    ordered by ts_ms: a shrink is in_sync true → false between consecutive samples, an expand
    false → true; out_of_sync_ms sums the durations of samples with in_sync false. Columns: topic,
    partition, follower_id, samples, shrinks, expands, out_of_sync_ms, observed_ms, in_sync_last.
    """
    follower = F.explode(s.FOLLOWERS).alias("f")
    exploded = (
        partition_records_df.where((F.col(s.ROLE) == s.ROLE_LEADER) & F.col(s.FOLLOWERS).isNotNull())
        .select(s.TOPIC, s.PARTITION, s.TS_MS, follower)
        .select(
            s.TOPIC,
            s.PARTITION,
            s.TS_MS,
            F.col(f"f.{s.BROKER_ID}").alias("follower_id"),
            F.col(f"f.{s.IN_SYNC}").alias("in_sync"),
        )
    )
    by_follower = Window.partitionBy(s.TOPIC, s.PARTITION, "follower_id").orderBy(s.TS_MS)
    prev_in_sync = F.lag("in_sync").over(by_follower)
    duration = _sample_duration(F.lead(s.TS_MS).over(by_follower), F.col(s.TS_MS), config.gap_max_ms)
    flagged = exploded.select(
        s.TOPIC,
        s.PARTITION,
        "follower_id",
        s.TS_MS,
        "in_sync",
        (prev_in_sync & ~F.col("in_sync")).alias("shrink"),
        (~prev_in_sync & F.col("in_sync")).alias("expand"),
        duration.alias("d"),
    )
    zero = F.lit(0).cast("long")
    return flagged.groupBy(s.TOPIC, s.PARTITION, "follower_id").agg(
        F.count(F.lit(1)).alias("samples"),
        F.count(F.when(F.col("shrink"), True)).alias("shrinks"),
        F.count(F.when(F.col("expand"), True)).alias("expands"),
        F.sum(F.when(~F.col("in_sync"), F.col("d")).otherwise(zero)).alias("out_of_sync_ms"),
        F.sum("d").alias("observed_ms"),
        F.max_by("in_sync", s.TS_MS).alias("in_sync_last"),
    )


def follower_status(
    follower_lag_df: DataFrame,
    config: LagJobConfig,
    now_ms: int | None = None,
    partition_records_df: DataFrame | None = None,
) -> DataFrame:
    """``follower_status``: a Burrow-style verdict per follower over its last ``window_ms``.

    The window of a follower holds its samples with ts_ms > (its last ts_ms − window_ms). Rules, the
    first that matches wins (most severe first):

    - STOP: the last sample is older than the window: now − last ts_ms > window_ms, where now is the
      newest ts_ms in the data set (or ``now_ms``). The follower stopped reporting (broker down).
    - REWIND: the fetch offset went backwards between two consecutive samples in the window without a
      leader-epoch change (see TRUNCATE). Nothing legitimate does that.
    - STALL: at least ``status_min_samples`` samples, lag_messages > 0 at every one and the fetch
      offset the same at every one: the leader has data the follower does not fetch.
    - TRUNCATE: the fetch offset went backwards right after a leader-epoch change: at sample i the
      epoch is higher than at sample i−2 (i−1 when there is no i−2), because a follower may report the
      new epoch one sample before it truncates. Expected after a leader kill, not an error.
    - WARN: at least ``status_min_samples`` samples, lag_messages > 0 at every one and never lower than
      at the sample before (within the window): the follower is not catching up.
    - OK: everything else (lag 0 at some sample, or lag going down).

    A replica whose latest record (given ``partition_records_df``) says it leads the partition was
    promoted: it is no longer a follower and gets no status (Burrow drops a consumer that is gone),
    rather than a STOP for the follower samples it stopped sending.

    Columns: topic, partition, follower_id, status, samples, window_start_ms, last_ts_ms,
    lag_messages_last, lag_ms_last, fetch_offset_last, leader_id_last, leader_epoch_last,
    truncations, rewinds.
    """
    key = (s.TOPIC, s.PARTITION, "follower_id")
    ordered = Window.partitionBy(*key).orderBy(s.TS_MS)
    whole = Window.partitionBy(*key)
    epoch = F.col(s.LEADER_EPOCH)
    sampled = follower_lag_df.select(
        *key,
        s.TS_MS,
        s.LEADER_ID,
        s.LEADER_EPOCH,
        s.FETCH_OFFSET,
        s.LAG_MESSAGES,
        s.LAG_MS,
        F.lag(s.TS_MS).over(ordered).alias("prev_ts_ms"),
        F.lag(s.FETCH_OFFSET).over(ordered).alias("prev_fetch_offset"),
        F.lag(s.LAG_MESSAGES).over(ordered).alias("prev_lag_messages"),
        F.coalesce(F.lag(epoch, 2).over(ordered), F.lag(epoch, 1).over(ordered)).alias("epoch_before"),
        F.max(s.TS_MS).over(whole).alias("last_ts_ms"),
    )
    window_start = F.col("last_ts_ms") - F.lit(config.window_ms)
    in_window = sampled.where(F.col(s.TS_MS) > window_start)
    went_back = F.col(s.FETCH_OFFSET) < F.col("prev_fetch_offset")
    epoch_changed = F.coalesce(epoch > F.col("epoch_before"), F.lit(False))
    lag_dropped = (F.col("prev_ts_ms") > window_start) & (F.col(s.LAG_MESSAGES) < F.col("prev_lag_messages"))
    summary = in_window.groupBy(*key).agg(
        F.count(F.lit(1)).alias("samples"),
        F.min(s.TS_MS).alias("window_start_ms"),
        F.max(s.TS_MS).alias("last_ts_ms"),
        F.min(s.LAG_MESSAGES).alias("_lag_min"),
        F.min(s.FETCH_OFFSET).alias("_fetch_min"),
        F.max(s.FETCH_OFFSET).alias("_fetch_max"),
        F.count(F.when(lag_dropped, True)).alias("_lag_drops"),
        F.count(F.when(went_back & epoch_changed, True)).alias("truncations"),
        F.count(F.when(went_back & ~epoch_changed, True)).alias("rewinds"),
        F.max_by(s.LAG_MESSAGES, s.TS_MS).alias("lag_messages_last"),
        F.max_by(s.LAG_MS, s.TS_MS).alias("lag_ms_last"),
        F.max_by(s.FETCH_OFFSET, s.TS_MS).alias("fetch_offset_last"),
        F.max_by(s.LEADER_ID, s.TS_MS).alias("leader_id_last"),
        F.max_by(s.LEADER_EPOCH, s.TS_MS).alias("leader_epoch_last"),
    )
    if now_ms is None:
        newest = follower_lag_df.agg(F.max(s.TS_MS).alias("_now_ms"))
        summary = summary.crossJoin(F.broadcast(newest))
    else:
        summary = summary.withColumn("_now_ms", F.lit(now_ms).cast("long"))
    if partition_records_df is not None:
        promoted = (
            partition_records_df.groupBy(s.TOPIC, s.PARTITION, F.col(s.BROKER_ID).alias("follower_id"))
            .agg(F.max_by(s.ROLE, s.TS_MS).alias("_role_last"))
            .where(F.col("_role_last") == s.ROLE_LEADER)
        )
        summary = summary.join(promoted, list(key), "left_anti")
    trending = (F.col("samples") >= config.status_min_samples) & (F.col("_lag_min") > 0)
    status = (
        F.when(F.col("_now_ms") - F.col("last_ts_ms") > config.window_ms, s.STATUS_STOP)
        .when(F.col("rewinds") > 0, s.STATUS_REWIND)
        .when(trending & (F.col("_fetch_min") == F.col("_fetch_max")), s.STATUS_STALL)
        .when(F.col("truncations") > 0, s.STATUS_TRUNCATE)
        .when(trending & (F.col("_lag_drops") == 0), s.STATUS_WARN)
        .otherwise(s.STATUS_OK)
    )
    return summary.select(
        *key,
        status.alias("status"),
        "samples",
        "window_start_ms",
        "last_ts_ms",
        "lag_messages_last",
        "lag_ms_last",
        "fetch_offset_last",
        "leader_id_last",
        "leader_epoch_last",
        "truncations",
        "rewinds",
    )


def leader_timeline(partition_records_df: DataFrame) -> DataFrame:
    """``leader_timeline``: each (leader epoch, leader) a partition went through, in order.

    Any replica's record tells which leader and epoch it knows, so an epoch is first seen when the
    first replica reports it. Per (topic, partition, leader_epoch, leader_id): first_seen_ms,
    last_seen_ms, reports, confirmed (the leader itself reported ``role == "leader"`` in that
    epoch), then previous_leader_id / previous_leader_epoch of the partition's entry before it
    (null for the first). leader_id −1 means the replicas knew no leader (offline).
    """
    grouped = (
        partition_records_df.where(F.col(s.LEADER_EPOCH).isNotNull() & F.col(s.LEADER_ID).isNotNull())
        .groupBy(s.TOPIC, s.PARTITION, s.LEADER_EPOCH, s.LEADER_ID)
        .agg(
            F.min(s.TS_MS).alias("first_seen_ms"),
            F.max(s.TS_MS).alias("last_seen_ms"),
            F.count(F.lit(1)).alias("reports"),
            F.max(F.col(s.ROLE) == s.ROLE_LEADER).alias("confirmed"),
        )
    )
    by_partition = Window.partitionBy(s.TOPIC, s.PARTITION).orderBy("first_seen_ms", s.LEADER_EPOCH)
    return grouped.select(
        s.TOPIC,
        s.PARTITION,
        s.LEADER_EPOCH,
        s.LEADER_ID,
        "first_seen_ms",
        "last_seen_ms",
        "reports",
        "confirmed",
        F.lag(s.LEADER_ID).over(by_partition).alias("previous_leader_id"),
        F.lag(s.LEADER_EPOCH).over(by_partition).alias("previous_leader_epoch"),
    )


def compute_tables(
    records: DataFrame, config: LagJobConfig, now_ms: int | None = None
) -> dict[str, DataFrame]:
    """Every output table from the raw records (read with ``schema.RECORD_SCHEMA``), by table name."""
    partitions = partition_records(records)
    lag = follower_lag(records)
    deltas = counter_deltas(partitions)
    return {
        s.TABLE_FOLLOWER_LAG: lag,
        s.TABLE_LAG_WINDOWS: lag_windows(lag, config),
        s.TABLE_UNDER_REPLICATED: under_replicated(partitions, deltas, config),
        s.TABLE_ISR_CHANGES: isr_changes(partitions, config),
        s.TABLE_BYTE_RATES: byte_rates(deltas, config),
        s.TABLE_FOLLOWER_STATUS: follower_status(lag, config, now_ms, partitions),
        s.TABLE_LEADER_TIMELINE: leader_timeline(partitions),
    }
