"""The lag job's transforms: metric records in, one DataFrame per output table out.

How this works: every function here is a pure DataFrame → DataFrame transform (no I/O, no actions,
no Python UDFs), so the same code runs in the batch job, inside a streaming ``foreachBatch`` and in the
unit tests on hand-made rows.

Ordered facts ("the previous sample of this replica") come from ONE shuffle and sort,
``replica_samples``: the records are clustered by partition and ordered by ``ts_ms`` per replica
``(topic, partition, broker_id)``, and the per-row facts several tables need are derived in that pass
(counter deltas and the sampled interval, the replica's role at its latest record). The batch job
caches that frame once; the tables are groupBy aggregations over it. The follower status reads the
previous follower samples with a window over the same key and order, which on the cached rows is a
pass without a shuffle or sort; only the per-partition leader sequence (``leader_samples``, read by
``under_replicated`` and ``cluster_health``) and the per-follower ISR flags (``isr_changes``, whose sums
``under_replicated`` reports too), ordered by another key, sort their (leader) rows again, still
without a shuffle, and each is computed once (``tables_of_samples``' ``keep``).

Keys: a follower is ``(topic, partition, follower_id)``; a replica's counters are keyed by
``(broker_id, topic, partition)`` because each broker keeps its own running totals. A follower's
``follower_id`` is the ``broker_id`` of its records, so a follower is one replica.

Time: everything is in ms since the epoch taken from the records (``ts_ms``); the job never reads a
clock. "Now" for the STOP rule is the newest ``ts_ms`` in the data set unless given.

Sample durations: a sample stands for the time until the next sample of the same key, capped at
``sample_gap_max_ms`` (a longer gap means the emitter was down and the state is unknown, so it is not
counted); the last sample of a key stands for 0 ms. A duration is counted at the next sample, from the
previous one's flags, so every per-row fact looks only backwards.

Incremental use (``lagapp.follow``): because every per-row fact looks backwards, the facts of a row are
final once every earlier row is there. The per-key tables (``under_replicated``, ``isr_changes``,
``leader_timeline``, the broker runs) are therefore built from mergeable partials over time ranges
(``*_partial``, ``merge_partials``, ``*_of_partials``), and the windowed tables take a ``from_ms``, so the
follow job aggregates only new rows and merges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from lagapp import schema as s

# Columns of the derived frame (``replica_samples``) beyond the record fields.
FOLLOWER_SAMPLE = "follower_sample"  # a follower's sample: role follower with a fetch offset
INTERVAL_MS = "interval_ms"  # time since the replica's previous sample (0 for its first)
INCARNATION_FIRST = "incarnation_first"  # the first sample of this replica since its broker (re)started
ROLE_LAST = "role_last"  # the replica's role at its newest record
WINDOW_START_MS = "window_start_ms"
# The replica window: the key of a replica's records and their order. ``kind`` keeps broker records
# (no topic) apart from a partition record that lacks one.
REPLICA_KEY: tuple[str, ...] = (s.TOPIC, s.PARTITION, s.BROKER_ID, s.KIND)


def delta_column(counter: str) -> str:
    """Name of the column holding the growth of ``counter`` since the replica's previous sample."""
    return f"{counter}_delta"


@dataclass(frozen=True)
class LagJobConfig:
    """Parameters shared by the transforms.

    window_ms: tumbling window of ``lag_windows`` and ``byte_rates``, and the length of the sliding
        window the follower status is judged over (Burrow's evaluation window).
    status_min_samples: WARN and STALL need at least this many samples in the window; fewer samples
        are not evidence of a trend.
    sample_gap_max_ms: the longest time one sample may stand for (defaults to window_ms).
    allowed_lag_messages: a lag this small counts as caught up (Burrow's ``allowed-lag``): a follower
        that is always a batch or two behind under load is OK, not WARN or STALL.
    health_bucket_ms: the time step of ``cluster_health`` (partition counts over time).
    """

    window_ms: int = 10_000
    status_min_samples: int = 3
    sample_gap_max_ms: int | None = None
    allowed_lag_messages: int = 0
    health_bucket_ms: int = 1000

    @property
    def gap_max_ms(self) -> int:
        return self.sample_gap_max_ms if self.sample_gap_max_ms is not None else self.window_ms


def is_follower_sample() -> Column:
    """A partition record of a follower that knows where it fetches from: role follower and a fetch
    offset. Brokers used to write ``fetch_offset: -1`` for a follower whose fetcher had no answer yet
    (just restarted, or following a new leader). That is no position, so a negative offset counts as
    none: read as one, the drop from the previous offset made a TRUNCATE status out of nothing."""
    return (F.col(s.KIND) == s.KIND_PARTITION) & (F.col(s.ROLE) == s.ROLE_FOLLOWER) & (F.col(s.FETCH_OFFSET) >= 0)


def partition_records(records: DataFrame) -> DataFrame:
    """Partition records only, rows without a timestamp dropped (a malformed line read as nulls)."""
    return records.where((F.col(s.KIND) == s.KIND_PARTITION) & F.col(s.TS_MS).isNotNull())


def _window_start(ts: Column, window_ms: int) -> Column:
    """Start of the tumbling window holding ``ts``: windows are aligned to the epoch."""
    return ts - F.pmod(ts, F.lit(window_ms))


def _previous_duration(ts: Column, prev_ts: Column, gap_max_ms: int) -> Column:
    """How long the previous sample of a key stood for, counted at this one: until this sample, at most
    ``gap_max_ms``; 0 at the first sample. Summed over a key's samples this is the sum of every sample's
    duration (the last one stands for 0), and each addend is known once both samples are, so a sum over
    a time range never changes when later samples arrive (what ``--follow`` merges relies on)."""
    return F.least(F.coalesce(ts - prev_ts, F.lit(0)), F.lit(gap_max_ms)).cast("long")


def in_range(
    df: DataFrame, from_ms: int | None = None, until_ms: int | None = None, column: str = s.TS_MS
) -> DataFrame:
    """Rows of ``df`` with ``from_ms <= column < until_ms`` (either bound left out when None)."""
    if from_ms is not None:
        df = df.where(F.col(column) >= from_ms)
    if until_ms is not None:
        df = df.where(F.col(column) < until_ms)
    return df


AggSpec = str | tuple[str, str]


def merge_partials(
    partials: DataFrame, key: tuple[str, ...], spec: dict[str, AggSpec], single: bool = False
) -> DataFrame:
    """Merge partial aggregates of the same key: ``spec`` maps each column to "sum", "min" or "max", or to
    ("max_by", ordering column) for a value taken from the partial with the largest ordering column.
    Partials of disjoint row sets merge into the aggregate of their union. ``single``: ``partials`` is one
    partial (a row per key) and is returned as it is, without an aggregation pass (the batch job)."""
    if single:
        return partials
    aggs = []
    for column, how in spec.items():
        if isinstance(how, tuple):
            aggs.append(F.max_by(column, how[1]).alias(column))
        else:
            aggs.append(getattr(F, how)(column).alias(column))
    return partials.groupBy(*key).agg(*aggs)


# What ``replica_samples`` and ``follower_status_of_samples`` read from a record.
_SAMPLE_FIELDS: tuple[str, ...] = (
    s.KIND,
    s.TS_MS,
    s.BROKER_ID,
    s.BROKER_START_MS,
    s.TOPIC,
    s.PARTITION,
    s.ROLE,
    s.LEADER_ID,
    s.LEADER_EPOCH,
    s.FETCH_OFFSET,
    s.LAG_MESSAGES,
    s.LAG_MS,
    *s.PARTITION_COUNTERS,
)


def _sample_fields(df: DataFrame) -> DataFrame:
    """``df`` projected to ``_SAMPLE_FIELDS``, a field it lacks as a typed null."""
    present = set(df.columns)
    return df.select(
        *(
            F.col(name) if name in present else F.lit(None).cast(s.RECORD_SCHEMA[name].dataType).alias(name)
            for name in _SAMPLE_FIELDS
        )
    )


def replica_samples(records: DataFrame) -> DataFrame:
    """The one window pass: every record with the per-row facts the tables derive from its replica.

    The records are shuffled once, by (topic, partition), and sorted by replica (``REPLICA_KEY``:
    topic, partition, broker_id, kind) and ts_ms. Every later window and grouping (per partition, per
    replica, per follower) holds whole partitions, so on the cached result none of them shuffles
    again, and the per-follower window of ``follower_status_of_samples`` finds the rows already in its
    order. Added columns:

    - ``follower_sample``: a partition record with role follower and a fetch offset (what
      ``follower_lag`` keeps);
    - ``interval_ms`` and ``<counter>_delta``: see ``counter_deltas``; the running totals themselves
      are dropped (every table reads their deltas);
    - ``role_last``: the replica's role in its newest record that has one: a promoted follower reads
      "leader"; "offline" (its partition has no leader, as when a cluster shuts down) is skipped, so a
      leader whose partition went offline still reads "leader" and a follower "follower".

    Rows keep every other input column, so the tables read the record fields from this frame too.
    """
    by_replica = Window.partitionBy(*REPLICA_KEY).orderBy(s.TS_MS)
    whole = by_replica.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    is_follower = is_follower_sample()
    # Each lag is one window column, computed once; the delta rule reads them in a later projection
    # (written inline, every use of a lag would be a window expression of its own).
    prev = {name: f"_prev_{name}" for name in (s.TS_MS, s.BROKER_START_MS, *s.PARTITION_COUNTERS)}
    by_partition = records.repartition(s.TOPIC, s.PARTITION)
    windowed = by_partition.select(
        "*",
        F.coalesce(is_follower, F.lit(False)).alias(FOLLOWER_SAMPLE),
        F.lag(s.TS_MS).over(by_replica).alias(prev[s.TS_MS]),
        F.lag(s.BROKER_START_MS).over(by_replica).alias(prev[s.BROKER_START_MS]),
        *(F.lag(F.coalesce(F.col(c), F.lit(0))).over(by_replica).alias(prev[c]) for c in s.PARTITION_COUNTERS),
        F.last(F.when(F.col(s.ROLE) != s.ROLE_OFFLINE, F.col(s.ROLE)), ignorenulls=True).over(whole).alias(ROLE_LAST),
    )
    prev_ts = F.col(prev[s.TS_MS])
    restarted = F.col(prev[s.BROKER_START_MS]) != F.col(s.BROKER_START_MS)
    deltas = []
    for name in s.PARTITION_COUNTERS:
        value = F.coalesce(F.col(name), F.lit(0))
        before_value = F.col(prev[name])
        # Counters are totals since the process started: the first sample of an incarnation (no previous
        # sample, or a previous one from another broker_start_ms) counts everything from zero.
        deltas.append(
            F.when(prev_ts.isNull() | restarted | (value < before_value), value)
            .otherwise(value - before_value)
            .cast("long")
            .alias(delta_column(name))
        )
    dropped = {*prev.values(), *s.PARTITION_COUNTERS}
    # A record with its replica's previous ts_ms is a duplicate (``schema.DEDUP_KEY``: an MQTT QoS 1
    # redelivery), dropped as ``--follow`` drops it. The row after it took it for its previous row, which
    # is the same record again, so no other row changes.
    return windowed.where(prev_ts.isNull() | (prev_ts != F.col(s.TS_MS))).select(
        *(c for c in windowed.columns if c not in dropped),
        F.coalesce(F.col(s.TS_MS) - prev_ts, F.lit(0)).alias(INTERVAL_MS),
        F.coalesce(prev_ts.isNull() | restarted, F.lit(True)).alias(INCARNATION_FIRST),
        *deltas,
    )


def follower_lag(records: DataFrame) -> DataFrame:
    """``follower_lag``: the lag time series, one row per follower sample.

    Columns: topic, partition, follower_id, ts_ms, leader_id, leader_epoch, fetch_offset,
    lag_messages, lag_ms, log_end_offset, high_watermark. Only ``role == "follower"`` records with a
    fetch offset count: leaders have no lag and offline replicas have no fetcher.
    """
    return (
        partition_records(records)
        .where(is_follower_sample())
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


def replica_lag(records: DataFrame) -> DataFrame:
    """``replica_lag``: the leader's view of each follower's lag, one row per follower per leader sample.

    Columns: topic, partition, follower_id, ts_ms, leader_id, leader_epoch, lag_messages (leader LEO −
    the follower's LEO as the leader knows it), time_since_caught_up_ms, in_sync. This is the primary lag
    series: a follower that is dead, paused or cut off emits nothing itself, but its leader goes on
    reporting it, so its lag climbs while the load continues and falls as it catches up.
    """
    follower = F.col("_follower")
    return (
        partition_records(records)
        .where((F.col(s.ROLE) == s.ROLE_LEADER) & F.col(s.FOLLOWERS).isNotNull())
        .select(s.TOPIC, s.PARTITION, s.TS_MS, s.LEADER_ID, s.LEADER_EPOCH, F.explode(s.FOLLOWERS).alias("_follower"))
        .select(
            s.TOPIC,
            s.PARTITION,
            follower[s.BROKER_ID].alias("follower_id"),
            s.TS_MS,
            s.LEADER_ID,
            s.LEADER_EPOCH,
            follower[s.LAG_MESSAGES].alias(s.LAG_MESSAGES),
            follower[s.TIME_SINCE_CAUGHT_UP_MS].alias(s.TIME_SINCE_CAUGHT_UP_MS),
            follower[s.IN_SYNC].alias(s.IN_SYNC),
        )
    )


_PERCENTS = (50, 99)


def _nearest_rank(sorted_values: Column, percent: int) -> Column:
    """The p-th percentile of a sorted array, nearest-rank: element ⌈p·n⌉ (1-based), null when empty.

    Integer arithmetic ((percent·n + 99) div 100), so p99 of 100 values is exactly the 99th.
    """
    n = F.size(sorted_values)
    rank = F.floor((n * percent + 99) / 100).cast("int")
    return F.get(sorted_values, rank - 1)


def lag_windows(follower_lag_df: DataFrame, config: LagJobConfig, from_ms: int | None = None) -> DataFrame:
    """``lag_windows``: lag percentiles per follower and tumbling window of ``window_ms``.

    Columns: topic, partition, follower_id, window_start_ms, window_end_ms (exclusive), samples,
    lag_messages_p50/_p99/_max, lag_ms_p50/_p99/_max. Percentiles are nearest-rank and exact: the
    smallest sampled value v with at least ⌈p·n⌉ samples ≤ v (n the non-null samples), so p50 of
    the lags 1..100 is 50 and p99 is 99. A window holds a follower's samples of ``window_ms``, a few
    per second, so sorting them is cheap. ``from_ms`` (a window start): only the windows from there on.
    """
    grouped = (
        in_range(follower_lag_df, from_ms)
        .groupBy(
            s.TOPIC,
            s.PARTITION,
            "follower_id",
            _window_start(F.col(s.TS_MS), config.window_ms).alias(WINDOW_START_MS),
        )
        .agg(
            F.count(F.lit(1)).alias("samples"),
            F.sort_array(F.collect_list(s.LAG_MESSAGES)).alias("_lag_messages"),
            F.max(s.LAG_MESSAGES).alias("lag_messages_max"),
            F.sort_array(F.collect_list(s.LAG_MS)).alias("_lag_ms"),
            F.max(s.LAG_MS).alias("lag_ms_max"),
        )
    )
    return grouped.select(
        s.TOPIC,
        s.PARTITION,
        "follower_id",
        WINDOW_START_MS,
        (F.col(WINDOW_START_MS) + F.lit(config.window_ms)).alias("window_end_ms"),
        "samples",
        *(_nearest_rank(F.col("_lag_messages"), p).alias(f"lag_messages_p{p}") for p in _PERCENTS),
        "lag_messages_max",
        *(_nearest_rank(F.col("_lag_ms"), p).alias(f"lag_ms_p{p}") for p in _PERCENTS),
        "lag_ms_max",
    )


def counter_deltas(partition_records_df: DataFrame) -> DataFrame:
    """Per replica sample: how much each running total grew since that replica's previous sample.

    Keyed by (broker_id, topic, partition), ordered by ts_ms. Counters are totals since the broker
    process started (``broker_start_ms``). Rule for each counter c:
    - first sample of an incarnation (no previous sample, or the previous one has another
      ``broker_start_ms``): the counter started from 0 at broker_start_ms, so delta = c and the interval
      runs from broker_start_ms;
    - c lower than before in the same incarnation (a replica re-created): delta = c;
    - otherwise delta = c − previous c, over the time since the previous sample.
    Hence a delta is never negative, and the bytes of a known produce all appear. ``interval_ms`` is the
    denominator of a rate. Output: broker_id, topic, partition, ts_ms, role, interval_ms,
    and ``<counter>_delta`` for every counter in ``schema.PARTITION_COUNTERS``. The columns come from
    ``replica_samples``, the pass the batch job computes once for every table.
    """
    samples = replica_samples(partition_records(partition_records_df))
    return samples.select(
        s.BROKER_ID,
        s.TOPIC,
        s.PARTITION,
        s.TS_MS,
        s.ROLE,
        s.BROKER_START_MS,
        INTERVAL_MS,
        INCARNATION_FIRST,
        *(delta_column(name) for name in s.PARTITION_COUNTERS),
    )


_RATE_COLUMNS: tuple[tuple[str, str], ...] = (
    (s.BYTES_IN, "client_in"),
    (s.BYTES_OUT, "client_out"),
    (s.REPLICATION_BYTES_IN, "replication_in"),
    (s.REPLICATION_BYTES_OUT, "replication_out"),
)


def byte_rates(counter_deltas_df: DataFrame, config: LagJobConfig, from_ms: int | None = None) -> DataFrame:
    """``byte_rates``: bytes and rates per broker, partition and tumbling window.

    Columns: broker_id, topic, partition, window_start_ms, window_end_ms, interval_ms,
    client_in_bytes, client_out_bytes, replication_in_bytes, replication_out_bytes, messages_in,
    and ``<name>_bytes_per_s`` / ``messages_in_per_s`` = delta sum × 1000 / interval_ms. The first
    sample of a broker incarnation counts its counters from zero at the broker's start, spread evenly
    over the time since: a window gets the share of it that falls inside the window. A window with no
    elapsed time carries no rate and is left out. Deltas come
    from ``counter_deltas`` (or ``replica_samples``), so a restart never makes a rate negative.
    ``from_ms`` (a window start): only the windows from there on.
    """
    ts = F.col(s.TS_MS)
    window_start = _window_start(ts, config.window_ms)
    # The first sample of an incarnation carries everything counted since the broker started, spread
    # evenly over that time: the window gets the share that falls inside it, over the time inside it.
    start = F.least(F.coalesce(F.col(s.BROKER_START_MS), ts), ts)
    inside_ms = ts - F.greatest(start, window_start)
    first = F.col(INCARNATION_FIRST)
    share = F.when(first & (ts > start), inside_ms / (ts - start)).otherwise(F.lit(1.0))
    interval = F.when(first, inside_ms).otherwise(F.col(INTERVAL_MS))

    def in_window(counter: str) -> Column:
        return F.round(F.col(delta_column(counter)) * share).cast("long")

    grouped = (
        in_range(counter_deltas_df, from_ms)
        .groupBy(
            s.BROKER_ID,
            s.TOPIC,
            s.PARTITION,
            window_start.alias(WINDOW_START_MS),
        )
        .agg(
            F.sum(interval).alias(INTERVAL_MS),
            *(F.sum(in_window(counter)).alias(f"{name}_bytes") for counter, name in _RATE_COLUMNS),
            F.sum(in_window(s.MESSAGES_IN)).alias("messages_in"),
        )
    )
    per_s = 1000.0 / F.col(INTERVAL_MS)
    return grouped.where(F.col(INTERVAL_MS) > 0).select(
        s.BROKER_ID,
        s.TOPIC,
        s.PARTITION,
        WINDOW_START_MS,
        (F.col(WINDOW_START_MS) + F.lit(config.window_ms)).alias("window_end_ms"),
        INTERVAL_MS,
        *(f"{name}_bytes" for _, name in _RATE_COLUMNS),
        "messages_in",
        *((F.col(f"{name}_bytes") * per_s).alias(f"{name}_bytes_per_s") for _, name in _RATE_COLUMNS),
        (F.col("messages_in") * per_s).alias("messages_in_per_s"),
    )


NEXT_TS_MS = "next_ts_ms"  # ts_ms of the partition's next leader sample (null for its last)
PREV_TS_MS = "prev_ts_ms"  # ts_ms of the partition's previous leader sample (null for its first)
PREV_UNDER_REPLICATED = "prev_under_replicated"
PREV_UNDER_MIN_ISR = "prev_under_min_isr"


def leader_samples(samples: DataFrame) -> DataFrame:
    """The partitions' leader samples in time order, each with the time of the partition's next one.

    ``samples`` is ``replica_samples`` output (or partition records: ``interval_ms`` is then null).
    Per (topic, partition), ordered by (ts_ms, broker_id) whichever broker led, ``next_ts_ms`` is the
    ts_ms of the next leader sample; ``prev_ts_ms``, ``prev_under_replicated`` and
    ``prev_under_min_isr`` are the previous one's. ``under_replicated`` and ``cluster_health`` both read
    this one ordered pass (the batch job caches it). Columns: topic, partition, ts_ms, broker_id,
    under_replicated, under_min_isr, isr_size, interval_ms, next_ts_ms, prev_ts_ms,
    prev_under_replicated, prev_under_min_isr.
    """
    by_partition = Window.partitionBy(s.TOPIC, s.PARTITION).orderBy(s.TS_MS, s.BROKER_ID)
    interval = F.col(INTERVAL_MS) if INTERVAL_MS in samples.columns else F.lit(None).cast("long")
    return samples.where(F.col(s.ROLE) == s.ROLE_LEADER).select(
        s.TOPIC,
        s.PARTITION,
        s.TS_MS,
        s.BROKER_ID,
        s.UNDER_REPLICATED,
        s.UNDER_MIN_ISR,
        s.ISR_SIZE,
        interval.alias(INTERVAL_MS),
        F.lead(s.TS_MS).over(by_partition).alias(NEXT_TS_MS),
        F.lag(s.TS_MS).over(by_partition).alias(PREV_TS_MS),
        F.lag(s.UNDER_REPLICATED).over(by_partition).alias(PREV_UNDER_REPLICATED),
        F.lag(s.UNDER_MIN_ISR).over(by_partition).alias(PREV_UNDER_MIN_ISR),
    )


UNDER_REPLICATED_KEY: tuple[str, ...] = (s.TOPIC, s.PARTITION)
UNDER_REPLICATED_MERGE: dict[str, AggSpec] = {
    "leader_samples": "sum",
    "first_ts_ms": "min",
    "last_ts_ms": "max",
    "observed_ms": "sum",
    "under_replicated_ms": "sum",
    "under_min_isr_ms": "sum",
    "isr_size_min": "min",
}


def under_replicated_partial(
    leaders: DataFrame, config: LagJobConfig, from_ms: int | None = None, until_ms: int | None = None
) -> DataFrame:
    """Per partition, the mergeable sums of ``under_replicated`` over the leader samples (``leader_samples``)
    with ``from_ms <= ts_ms < until_ms``; ``merge_partials`` with ``UNDER_REPLICATED_MERGE`` adds up the
    partials of disjoint ranges. A sample's duration is counted at the next sample (``_previous_duration``)."""
    d = _previous_duration(F.col(s.TS_MS), F.col(PREV_TS_MS), config.gap_max_ms)
    zero = F.lit(0).cast("long")
    return (
        in_range(leaders, from_ms, until_ms)
        .groupBy(*UNDER_REPLICATED_KEY)
        .agg(
            F.count(F.lit(1)).alias("leader_samples"),
            F.min(s.TS_MS).alias("first_ts_ms"),
            F.max(s.TS_MS).alias("last_ts_ms"),
            F.sum(d).alias("observed_ms"),
            F.sum(F.when(F.col(PREV_UNDER_REPLICATED), d).otherwise(zero)).alias("under_replicated_ms"),
            F.sum(F.when(F.col(PREV_UNDER_MIN_ISR), d).otherwise(zero)).alias("under_min_isr_ms"),
            F.min(s.ISR_SIZE).alias("isr_size_min"),
        )
    )


def under_replicated_of_partials(partials: DataFrame, isr_changes_df: DataFrame, single: bool = False) -> DataFrame:
    """``under_replicated`` from its partials (``under_replicated_partial``) and ``isr_changes``; ``single``:
    see ``merge_partials``."""
    times = merge_partials(partials, UNDER_REPLICATED_KEY, UNDER_REPLICATED_MERGE, single)
    isr_counts = isr_changes_df.groupBy(s.TOPIC, s.PARTITION).agg(
        F.sum("shrinks").alias("isr_shrinks"),
        F.sum("expands").alias("isr_expands"),
    )
    zero = F.lit(0).cast("long")
    return times.join(isr_counts, [s.TOPIC, s.PARTITION], "left").select(
        s.TOPIC,
        s.PARTITION,
        F.col("leader_samples").cast("long").alias("leader_samples"),
        "first_ts_ms",
        "last_ts_ms",
        "observed_ms",
        "under_replicated_ms",
        "under_min_isr_ms",
        "isr_size_min",
        F.coalesce("isr_shrinks", zero).cast("long").alias("isr_shrinks"),
        F.coalesce("isr_expands", zero).cast("long").alias("isr_expands"),
    )


def under_replicated(
    partition_records_df: DataFrame,
    isr_changes_df: DataFrame,
    config: LagJobConfig,
    leaders: DataFrame | None = None,
) -> DataFrame:
    """``under_replicated``: per partition, how long its leaders reported it under-replicated.

    From the leaders' samples of a partition (whichever broker led), ordered by ts_ms: a sample with
    ``under_replicated`` true adds its duration (see the module docstring) to under_replicated_ms;
    likewise ``under_min_isr`` to under_min_isr_ms; observed_ms is the total duration covered.
    isr_shrinks / isr_expands are the sums over the partition's followers in ``isr_changes_df``
    (``isr_changes``): the same leader samples, so the summary and the per-follower table agree. (The
    leaders' IsrShrinksPerSec counter misses the shrinks the controller makes when it fences a dead
    broker, so it is not used here.) Columns: topic, partition, leader_samples, first_ts_ms,
    last_ts_ms, observed_ms, under_replicated_ms, under_min_isr_ms, isr_size_min, isr_shrinks,
    isr_expands. ``leaders``: ``leader_samples`` of the same records when already computed.
    """
    if leaders is None:
        leaders = leader_samples(partition_records_df)
    return under_replicated_of_partials(under_replicated_partial(leaders, config), isr_changes_df, single=True)


ISR_CHANGES_KEY: tuple[str, ...] = (s.TOPIC, s.PARTITION, "follower_id")
ISR_CHANGES_MERGE: dict[str, AggSpec] = {
    "samples": "sum",
    "shrinks": "sum",
    "expands": "sum",
    "out_of_sync_ms": "sum",
    "observed_ms": "sum",
    "in_sync_last": ("max_by", "last_ts_ms"),
    "last_ts_ms": "max",
}


def isr_changes_partial(
    partition_records_df: DataFrame, config: LagJobConfig, from_ms: int | None = None, until_ms: int | None = None
) -> DataFrame:
    """Per follower, the mergeable counts of ``isr_changes`` over the leader samples with
    ``from_ms <= ts_ms < until_ms`` (each compared with the sample before it, whatever its time), and
    ``last_ts_ms`` to merge ``in_sync_last`` by (``ISR_CHANGES_MERGE``)."""
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
    by_follower = Window.partitionBy(*ISR_CHANGES_KEY).orderBy(s.TS_MS)
    prev_in_sync = F.lag("in_sync").over(by_follower)
    flagged = exploded.select(
        *ISR_CHANGES_KEY,
        s.TS_MS,
        "in_sync",
        (prev_in_sync & ~F.col("in_sync")).alias("shrink"),
        (~prev_in_sync & F.col("in_sync")).alias("expand"),
        (~prev_in_sync).alias("_was_out"),
        _previous_duration(F.col(s.TS_MS), F.lag(s.TS_MS).over(by_follower), config.gap_max_ms).alias("d"),
    )
    zero = F.lit(0).cast("long")
    return (
        in_range(flagged, from_ms, until_ms)
        .groupBy(*ISR_CHANGES_KEY)
        .agg(
            F.count(F.lit(1)).alias("samples"),
            F.count(F.when(F.col("shrink"), True)).alias("shrinks"),
            F.count(F.when(F.col("expand"), True)).alias("expands"),
            F.sum(F.when(F.col("_was_out"), F.col("d")).otherwise(zero)).alias("out_of_sync_ms"),
            F.sum("d").alias("observed_ms"),
            F.max_by("in_sync", s.TS_MS).alias("in_sync_last"),
            F.max(s.TS_MS).alias("last_ts_ms"),
        )
    )


def isr_changes_of_partials(partials: DataFrame, single: bool = False) -> DataFrame:
    """``isr_changes`` from its partials (``isr_changes_partial``); ``single``: see ``merge_partials``."""
    merged = merge_partials(partials, ISR_CHANGES_KEY, ISR_CHANGES_MERGE, single)
    return merged.select(
        *ISR_CHANGES_KEY,
        F.col("samples").cast("long").alias("samples"),
        F.col("shrinks").cast("long").alias("shrinks"),
        F.col("expands").cast("long").alias("expands"),
        "out_of_sync_ms",
        "observed_ms",
        "in_sync_last",
    )


def isr_changes(partition_records_df: DataFrame, config: LagJobConfig) -> DataFrame:
    """``isr_changes``: per partition and follower, ISR shrinks and expands seen by the leaders.

    Each leader sample lists its followers with ``in_sync``. Per (topic, partition, follower_id),
    ordered by ts_ms: a shrink is in_sync true → false between consecutive samples, an expand
    false → true; out_of_sync_ms sums the durations of samples with in_sync false. Columns: topic,
    partition, follower_id, samples, shrinks, expands, out_of_sync_ms, observed_ms, in_sync_last.
    """
    return isr_changes_of_partials(isr_changes_partial(partition_records_df, config), single=True)


def cluster_health(
    samples: DataFrame,
    config: LagJobConfig,
    leaders: DataFrame | None = None,
    from_ms: int | None = None,
    seen: DataFrame | None = None,
) -> DataFrame:
    """``cluster_health``: the SRE's health row over time, one row per bucket of ``health_bucket_ms``.

    Columns: bucket_start_ms, partitions (known by then: a partition counts from its first record),
    led_partitions, under_replicated_partitions, under_min_isr_partitions, offline_partitions
    (known but led by no one), leaders (map broker_id → partitions it led).

    ``samples`` is ``replica_samples`` output (it reads ``interval_ms``). A leader sample stands for
    the time until the partition's next leader sample, at most twice its leader's sampling interval
    (at least one bucket, at most ``gap_max_ms``): a leader that died stops standing for its
    partition one or two intervals later, so a partition nobody leads reads offline, not led by the
    dead broker. In a bucket, a partition is under-replicated (under min ISR) when any leader sample
    standing for part of it says so, and led by the broker of its newest such sample.
    ``leaders``: ``leader_samples`` of ``samples`` when already computed.

    ``from_ms`` (a bucket start): only the buckets from there on; ``samples`` must then hold every record
    from ``from_ms - gap_max_ms`` on (a sample stands for at most that long before a bucket), and
    ``seen`` every partition's first record (``first_seen``), which ``samples`` alone may lack.
    """
    bucket = config.health_bucket_ms
    step = F.lit(bucket).cast("long")
    ts = F.col(s.TS_MS)
    parts = partition_records(samples)
    if leaders is None:
        leaders = leader_samples(parts)
    interval = F.coalesce(F.col(INTERVAL_MS), F.lit(0))
    cap = F.least(F.lit(config.gap_max_ms), F.greatest(interval * 2, F.lit(bucket))).cast("long")
    stands_for = F.least(F.coalesce(F.col(NEXT_TS_MS) - ts, cap), cap)
    timed = leaders.select(
        s.TOPIC,
        s.PARTITION,
        s.TS_MS,
        s.BROKER_ID,
        F.coalesce(F.col(s.UNDER_REPLICATED), F.lit(False)).cast("int").alias("_ur"),
        F.coalesce(F.col(s.UNDER_MIN_ISR), F.lit(False)).cast("int").alias("_umi"),
        stands_for.alias("_d"),
    )
    last_covered = ts + F.greatest(F.col("_d") - 1, F.lit(0))
    covering = timed.select(
        "*",
        F.explode(F.sequence(_window_start(ts, bucket), _window_start(last_covered, bucket), step)).alias(
            "bucket_start_ms"
        ),
    )
    per_partition = (
        in_range(covering, from_ms, column="bucket_start_ms")
        .groupBy("bucket_start_ms", s.TOPIC, s.PARTITION)
        .agg(
            F.max("_ur").alias("_ur"),
            F.max("_umi").alias("_umi"),
            F.max_by(s.BROKER_ID, s.TS_MS).alias("_leader"),
        )
    )
    # One pass over the per-partition rows: per leader first, then per bucket (the totals are the sums).
    counts = (
        per_partition.groupBy("bucket_start_ms", "_leader")
        .agg(F.count(F.lit(1)).alias("_n"), F.sum("_ur").alias("_ur"), F.sum("_umi").alias("_umi"))
        .groupBy("bucket_start_ms")
        .agg(
            F.sum("_n").cast("long").alias("led_partitions"),
            F.sum("_ur").cast("long").alias("under_replicated_partitions"),
            F.sum("_umi").cast("long").alias("under_min_isr_partitions"),
            F.map_from_entries(F.collect_list(F.struct("_leader", "_n"))).alias("leaders"),
        )
    )
    # Every bucket of the data set's span (from ``from_ms``), and how many partitions had appeared by
    # each: a partition that appeared before the first bucket counts in it.
    if seen is None:
        seen = first_seen(parts)
    first_bucket = _window_start(F.col("_first"), bucket)
    if from_ms is not None:
        first_bucket = F.greatest(first_bucket, F.lit(from_ms).cast("long"))
    span = seen.agg(F.min("first_ts_ms").alias("_first")).crossJoin(parts.agg(F.max(s.TS_MS).alias("_last")))
    buckets = (
        span.select(first_bucket.alias("_from"), _window_start(F.col("_last"), bucket).alias("_to"))
        .where(F.col("_from") <= F.col("_to"))
        .select(F.explode(F.sequence("_from", "_to", step)).alias("bucket_start_ms"))
    )
    appeared_at = _window_start(F.col("first_ts_ms"), bucket)
    if from_ms is not None:
        appeared_at = F.greatest(appeared_at, F.lit(from_ms).cast("long"))
    appeared = seen.groupBy(appeared_at.alias("bucket_start_ms")).agg(F.count(F.lit(1)).alias("_new"))
    in_time = Window.orderBy("bucket_start_ms").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    zero = F.lit(0).cast("long")
    known = F.sum(F.coalesce(F.col("_new"), zero)).over(in_time).cast("long")
    led = F.coalesce(F.col("led_partitions"), zero)
    return (
        buckets.join(appeared, "bucket_start_ms", "left")
        .join(counts, "bucket_start_ms", "left")
        .select(
            "bucket_start_ms",
            known.alias("partitions"),
            led.alias("led_partitions"),
            F.coalesce("under_replicated_partitions", zero).alias("under_replicated_partitions"),
            F.coalesce("under_min_isr_partitions", zero).alias("under_min_isr_partitions"),
            F.greatest(known - led, zero).alias("offline_partitions"),
            F.coalesce("leaders", F.create_map().cast("map<int,bigint>")).alias("leaders"),
        )
    )


def catch_up_times(replica_lag_df: DataFrame, restarts: DataFrame) -> DataFrame:
    """Per broker restart: how long after it its follower replicas were all back in the ISR.

    ``restarts``: broker_id, down_ms (its last record before it went down), restart_ms (its new start),
    until_ms (its last record in the new run). Per restart, from the leaders' view of that follower
    (``replica_lag``) between down_ms and until_ms: the partitions where it was out of the ISR, and
    for each the first sample back in it after its last sample out. Columns: broker_id, down_ms,
    restart_ms, until_ms, partitions_out (where it was out of the ISR), partitions_behind (still out
    at until_ms), caught_up_ms (the last of those returns − restart_ms; null while any is behind or
    none was out).
    """
    joined = replica_lag_df.join(
        F.broadcast(restarts),
        (replica_lag_df["follower_id"] == restarts[s.BROKER_ID])
        & (replica_lag_df[s.TS_MS] >= restarts["down_ms"])
        & (replica_lag_df[s.TS_MS] <= restarts["until_ms"]),
    )
    key = (s.BROKER_ID, "down_ms", "restart_ms", "until_ms")
    per_partition = joined.groupBy(*key, s.TOPIC, s.PARTITION).agg(
        F.max(F.when(~F.col(s.IN_SYNC), F.col(s.TS_MS))).alias("_last_out"),
        F.collect_list(F.when(F.col(s.IN_SYNC), F.col(s.TS_MS))).alias("_in"),
    )
    back = F.array_min(F.filter("_in", lambda t: t > F.col("_last_out")))
    returns = per_partition.where(F.col("_last_out").isNotNull()).select(*key, back.alias("_back"))
    summary = returns.groupBy(*key).agg(
        F.count(F.lit(1)).alias("partitions_out"),
        F.count(F.when(F.col("_back").isNull(), True)).alias("partitions_behind"),
        F.max("_back").alias("_last_back"),
    )
    caught_up = F.when(F.col("partitions_behind") == 0, F.col("_last_back") - F.col("restart_ms"))
    return restarts.join(summary, list(key), "left").select(
        *key,
        F.coalesce("partitions_out", F.lit(0)).cast("long").alias("partitions_out"),
        F.coalesce("partitions_behind", F.lit(0)).cast("long").alias("partitions_behind"),
        F.when(F.col("partitions_out") > 0, caught_up).cast("long").alias("caught_up_ms"),
    )


def follower_status(
    follower_lag_df: DataFrame,
    config: LagJobConfig,
    now_ms: int | None = None,
    partition_records_df: DataFrame | None = None,
) -> DataFrame:
    """``follower_status`` from a lag series (and, to drop promoted followers, the partition records).

    The follower samples of ``follower_lag_df`` and the other samples of ``partition_records_df``
    (its leader and offline records: its follower samples are the ones ``follower_lag_df`` already
    holds) go through ``replica_samples`` and ``follower_status_of_samples``, the code the batch job
    runs. See ``follower_status_of_samples`` for the rules.
    """
    followers = _sample_fields(
        follower_lag_df.withColumnRenamed("follower_id", s.BROKER_ID)
        .withColumn(s.KIND, F.lit(s.KIND_PARTITION))
        .withColumn(s.ROLE, F.lit(s.ROLE_FOLLOWER))
    )
    rows = followers
    if partition_records_df is not None:
        others = partition_records(partition_records_df).where(~F.coalesce(is_follower_sample(), F.lit(False)))
        rows = followers.unionByName(_sample_fields(others))
    return follower_status_of_samples(replica_samples(rows), config, now_ms)


def follower_status_of_samples(samples: DataFrame, config: LagJobConfig, now_ms: int | None = None) -> DataFrame:
    """``follower_status``: a Burrow-style verdict per follower over its last ``window_ms``.

    ``samples`` is ``replica_samples`` output. The window of a follower holds its samples with
    ts_ms > (its last ts_ms − window_ms). Rules, the first that matches wins (most severe first):

    - STOP: the last sample is older than the window: now − last ts_ms > window_ms, where now is the
      newest ts_ms of any record in the data set, any broker (or ``now_ms``: the batch job passes the
      newest sample it read). The follower stopped reporting while others went on.
    - REWIND: the fetch offset went backwards between two consecutive samples in the window without a
      leader-epoch change (see TRUNCATE). Nothing legitimate does that.
    - STALL: at least ``status_min_samples`` samples, lag_messages > 0 at every one and the fetch
      offset the same at every one: the leader has data the follower does not fetch.
    - TRUNCATE: the fetch offset went backwards right after a leader-epoch change: at sample i the
      epoch is higher than at sample i−2 (i−1 when there is no i−2), because a follower may report the
      new epoch one sample before it truncates. Expected after a leader kill, not an error.
    - WARN: at least ``status_min_samples`` samples, lag_messages > 0 at every one and never lower than
      at the sample before (within the window): the follower is not catching up.
    - OK: everything else (lag at most ``allowed_lag_messages`` at some sample, or lag going down).

    A replica whose latest record says it leads the partition was promoted: it is no longer a
    follower and gets no status (Burrow drops a consumer that is gone), rather than a STOP for the
    follower samples it stopped sending. Records of a partition without a leader (role offline) do not
    change that: a leader whose partition went offline, as every partition does when the cluster shuts
    down, was still promoted.

    Columns: topic, partition, follower_id, status, samples, window_start_ms, last_ts_ms,
    lag_messages_last, lag_ms_last, fetch_offset_last, leader_id_last, leader_epoch_last,
    truncations, rewinds.
    """
    key = (s.TOPIC, s.PARTITION, "follower_id")
    # The follower's samples in ts order: the replica window restricted to its follower samples. The
    # rows are already clustered and sorted that way (``replica_samples``), so this is a pass over
    # the cached rows, not a shuffle or a sort.
    ordered = Window.partitionBy(*REPLICA_KEY).orderBy(s.TS_MS)
    whole = ordered.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    epoch = F.col(s.LEADER_EPOCH)
    followers = samples.where(F.col(FOLLOWER_SAMPLE)).select(
        *REPLICA_KEY,
        F.col(s.BROKER_ID).alias("follower_id"),
        s.TS_MS,
        s.LEADER_ID,
        s.LEADER_EPOCH,
        s.FETCH_OFFSET,
        s.LAG_MESSAGES,
        s.LAG_MS,
        ROLE_LAST,
        F.lag(s.TS_MS).over(ordered).alias("prev_ts_ms"),
        F.lag(s.FETCH_OFFSET).over(ordered).alias("prev_fetch_offset"),
        F.lag(s.LAG_MESSAGES).over(ordered).alias("prev_lag_messages"),
        F.coalesce(F.lag(epoch, 2).over(ordered), F.lag(epoch, 1).over(ordered)).alias("epoch_before"),
        F.max(s.TS_MS).over(whole).alias("_last_ts_ms"),
    )
    window_start = F.col("_last_ts_ms") - F.lit(config.window_ms)
    in_window = followers.where(F.col(s.TS_MS) > window_start)
    went_back = F.col(s.FETCH_OFFSET) < F.col("prev_fetch_offset")
    epoch_changed = F.coalesce(epoch > F.col("epoch_before"), F.lit(False))
    lag_dropped = (F.col("prev_ts_ms") > window_start) & (F.col(s.LAG_MESSAGES) < F.col("prev_lag_messages"))
    summary = (
        in_window.groupBy(*key)
        .agg(
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
            F.max(F.coalesce(F.col(ROLE_LAST) == s.ROLE_LEADER, F.lit(False))).alias("_promoted"),
        )
        .where(~F.col("_promoted"))
    )
    if now_ms is None:
        # The newest sample of anyone: a single silent follower is measured against the brokers that go on.
        newest = samples.agg(F.max(s.TS_MS).alias("_now_ms"))
        summary = summary.crossJoin(F.broadcast(newest))
    else:
        summary = summary.withColumn("_now_ms", F.lit(now_ms).cast("long"))
    trending = (F.col("samples") >= config.status_min_samples) & (F.col("_lag_min") > config.allowed_lag_messages)
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


LEADER_TIMELINE_KEY: tuple[str, ...] = (s.TOPIC, s.PARTITION, s.LEADER_EPOCH, s.LEADER_ID)
LEADER_TIMELINE_MERGE: dict[str, AggSpec] = {
    "first_seen_ms": "min",
    "last_seen_ms": "max",
    "reports": "sum",
    "confirmed": "max",
}


def leader_timeline_partial(
    partition_records_df: DataFrame, from_ms: int | None = None, until_ms: int | None = None
) -> DataFrame:
    """Per (topic, partition, leader_epoch, leader_id), the mergeable ``leader_timeline`` columns over the
    records with ``from_ms <= ts_ms < until_ms`` (``LEADER_TIMELINE_MERGE``)."""
    return (
        in_range(partition_records_df, from_ms, until_ms)
        .where(F.col(s.LEADER_EPOCH).isNotNull() & F.col(s.LEADER_ID).isNotNull())
        .groupBy(*LEADER_TIMELINE_KEY)
        .agg(
            F.min(s.TS_MS).alias("first_seen_ms"),
            F.max(s.TS_MS).alias("last_seen_ms"),
            F.count(F.lit(1)).alias("reports"),
            F.max(F.col(s.ROLE) == s.ROLE_LEADER).alias("confirmed"),
        )
    )


def leader_timeline_of_partials(partials: DataFrame, single: bool = False) -> DataFrame:
    """``leader_timeline`` from its partials (``leader_timeline_partial``); ``single``: see ``merge_partials``."""
    grouped = merge_partials(partials, LEADER_TIMELINE_KEY, LEADER_TIMELINE_MERGE, single)
    by_partition = Window.partitionBy(s.TOPIC, s.PARTITION).orderBy("first_seen_ms", s.LEADER_EPOCH)
    return grouped.select(
        s.TOPIC,
        s.PARTITION,
        s.LEADER_EPOCH,
        s.LEADER_ID,
        "first_seen_ms",
        "last_seen_ms",
        F.col("reports").cast("long").alias("reports"),
        "confirmed",
        F.lag(s.LEADER_ID).over(by_partition).alias("previous_leader_id"),
        F.lag(s.LEADER_EPOCH).over(by_partition).alias("previous_leader_epoch"),
    )


def leader_timeline(partition_records_df: DataFrame) -> DataFrame:
    """``leader_timeline``: each (leader epoch, leader) a partition went through, in order.

    Any replica's record tells which leader and epoch it knows, so an epoch is first seen when the
    first replica reports it. Per (topic, partition, leader_epoch, leader_id): first_seen_ms,
    last_seen_ms, reports, confirmed (the leader itself reported ``role == "leader"`` in that
    epoch), then previous_leader_id / previous_leader_epoch of the partition's entry before it
    (null for the first). leader_id −1 means the replicas knew no leader (offline).
    """
    return leader_timeline_of_partials(leader_timeline_partial(partition_records_df), single=True)


BROKER_RUNS_KEY: tuple[str, ...] = (s.BROKER_ID, s.BROKER_START_MS)
BROKER_RUNS_MERGE: dict[str, AggSpec] = {"records": "sum", "first_ts_ms": "min", "last_ts_ms": "max"}


def broker_runs_partial(records: DataFrame, from_ms: int | None = None, until_ms: int | None = None) -> DataFrame:
    """Per (broker_id, broker_start_ms): records, first and last ts_ms over the records (any kind) with
    ``from_ms <= ts_ms < until_ms``; merged with ``BROKER_RUNS_MERGE``."""
    return (
        in_range(records.where(F.col(s.TS_MS).isNotNull()), from_ms, until_ms)
        .groupBy(*BROKER_RUNS_KEY)
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.min(s.TS_MS).alias("first_ts_ms"),
            F.max(s.TS_MS).alias("last_ts_ms"),
        )
    )


def broker_health(records: DataFrame) -> DataFrame:
    """One row per broker record: how long ready work waited for that broker's event loop over the
    interval (``LoopLagMaxMs``, ``LoopLagAvgMs``); a record from a broker too old to report it is left out."""
    return records.where((F.col(s.KIND) == s.KIND_BROKER) & F.col(s.LOOP_LAG_MAX_MS).isNotNull()).select(
        s.BROKER_ID,
        s.BROKER_START_MS,
        s.TS_MS,
        F.col(s.LOOP_LAG_MAX_MS).alias("loop_lag_max_ms"),
        F.col(s.LOOP_LAG_AVG_MS).alias("loop_lag_avg_ms"),
    )


FIRST_SEEN_KEY: tuple[str, ...] = (s.TOPIC, s.PARTITION)
FIRST_SEEN_MERGE: dict[str, AggSpec] = {"first_ts_ms": "min"}


def first_seen(partition_records_df: DataFrame) -> DataFrame:
    """Per partition, the ts_ms of its first record (``cluster_health`` counts a partition from then)."""
    return partition_records(partition_records_df).groupBy(*FIRST_SEEN_KEY).agg(F.min(s.TS_MS).alias("first_ts_ms"))


def tables_of_samples(
    samples: DataFrame,
    config: LagJobConfig,
    now_ms: int | None = None,
    keep: Callable[[DataFrame], DataFrame] = lambda df: df,
) -> dict[str, DataFrame]:
    """Every output table from ``replica_samples`` output (cache it: every table reads it).

    ``keep`` is applied to the intermediates more than one table reads (the leader sequence, the ISR
    changes): the batch job passes a function that caches them, so each is computed once.
    """
    partitions = partition_records(samples)
    lag = follower_lag(partitions)
    changes = keep(isr_changes(partitions, config))
    leaders = keep(leader_samples(partitions))
    return {
        s.TABLE_FOLLOWER_LAG: lag,
        s.TABLE_REPLICA_LAG: replica_lag(partitions),
        s.TABLE_LAG_WINDOWS: lag_windows(lag, config),
        s.TABLE_UNDER_REPLICATED: under_replicated(partitions, changes, config, leaders),
        s.TABLE_ISR_CHANGES: changes,
        s.TABLE_BYTE_RATES: byte_rates(partitions, config),
        s.TABLE_FOLLOWER_STATUS: follower_status_of_samples(partitions, config, now_ms),
        s.TABLE_LEADER_TIMELINE: leader_timeline(partitions),
        s.TABLE_CLUSTER_HEALTH: cluster_health(partitions, config, leaders),
        s.TABLE_BROKER_HEALTH: broker_health(samples),
    }


def compute_tables(records: DataFrame, config: LagJobConfig, now_ms: int | None = None) -> dict[str, DataFrame]:
    """Every output table from the raw records (read with ``schema.RECORD_SCHEMA``), by table name."""
    return tables_of_samples(replica_samples(records), config, now_ms)
