"""The lag job's tables: every table computed from metric records with numpy and pyarrow, once.

How this works: a replica (``REPLICA_KEY``: topic, partition, broker_id, kind) writes its samples in
time order, so every per-row fact a table needs is a comparison with the replica's previous sample.
``derive`` takes rows grouped by replica in time order and computes those facts once (counter deltas, the
sampled interval, the first sample of a broker incarnation, whether a row is a follower's sample, the
replica's role at its newest record). Every table is then a filter of those rows or a grouping over
runs of them: a replica's (or a follower's) rows are consecutive and in time order, so a group is a run
of rows and an aggregate is a ``reduceat`` over the runs' starts.

Some tables cross replicas: a partition's leader samples come from whichever broker led it
(``under_replicated``, ``cluster_health``), a follower's ISR flags from its leaders' samples
(``isr_changes``), a leader epoch from any replica's record (``leader_timeline``), the STOP status from
the newest record of any broker. Those are built from per-replica **partials** (``*_partial``: counts,
sums, min, max and a few rows, over rows in a time range ``lo <= ts_ms < hi``) that merge, so rows can be
computed apart (one broker per Spark task in ``lagapp.file_pass``, one round at a time in
``lagapp.follow_round``) and the partials put together (``finish_tables``; ``follow_round.merge``).
``compute_tables`` runs both steps over rows held in one table.

Keys: a follower is ``(topic, partition, follower_id)``; a replica's counters are keyed by
``(broker_id, topic, partition)`` because each broker keeps its own running totals. A follower's
``follower_id`` is the ``broker_id`` of its records, so a follower is one replica.

Time: everything is in ms since the epoch taken from the records (``ts_ms``); nothing reads a clock.
"Now" for the STOP rule is the newest ``ts_ms`` of any record in the data set. Windows are tumbling and
aligned to the epoch (``window_start_ms = ts_ms - ts_ms % window_ms``).

Sample durations: a sample stands for the time until the next sample of the same key, capped at
``gap_max_ms`` (a longer gap means the emitter was down and the state is unknown, so it is not counted);
the last sample of a key stands for 0 ms. A duration is counted at the next sample, from the previous
one's flags, so every per-row fact looks only backwards: a row's facts are final once every earlier row
of its key has arrived, which is what ``--follow`` relies on to merge rounds.

Every table is written with the schema ``schema.TABLE_SCHEMAS`` gives it; rounding follows Spark's
(``round_half_up``), as the tables always have. ``tests/lagapp/test_tables.py`` holds each rule to
hand-computed answers on small record sets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lagapp import schema as s

INTERVAL_MS = "interval_ms"  # time since the replica's previous sample (0 for its first)
WINDOW_START_MS = "window_start_ms"
# The key of a replica's records, and their order. ``kind`` keeps broker records (no topic) apart from a
# partition record that lacks one.
REPLICA_KEY: tuple[str, ...] = (s.TOPIC, s.PARTITION, s.BROKER_ID, s.KIND)
# Nearest-rank percentiles of ``lag_windows``.
PERCENTS = (50, 99)


@dataclass(frozen=True)
class LagJobConfig:
    """Parameters shared by the tables.

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


# How partials of disjoint row sets merge, per column: "sum", "min", "max", or ("max_by", ordering
# column) for the value of the partial with the largest ordering column (``follow_round.merge``).
AggSpec = str | tuple[str, str]
LEADER_TIMELINE_KEY: tuple[str, ...] = (s.TOPIC, s.PARTITION, s.LEADER_EPOCH, s.LEADER_ID)
LEADER_TIMELINE_MERGE: dict[str, AggSpec] = {
    "first_seen_ms": "min",
    "last_seen_ms": "max",
    "reports": "sum",
    "confirmed": "max",
}
BROKER_RUNS_KEY: tuple[str, ...] = (s.BROKER_ID, s.BROKER_START_MS)
BROKER_RUNS_MERGE: dict[str, AggSpec] = {"records": "sum", "first_ts_ms": "min", "last_ts_ms": "max"}
FIRST_SEEN_KEY: tuple[str, ...] = (s.TOPIC, s.PARTITION)
FIRST_SEEN_MERGE: dict[str, AggSpec] = {"first_ts_ms": "min", "last_ts_ms": "max"}
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


# ---------------------------------------------------------------------------------------------------------
# Columns as numpy arrays.


def codes_of(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Integer codes of a column's values, null its own code (-1 for strings, below every value for
    integers): equal values, equal codes; integer codes keep the values' order."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()  # one array, so one dictionary for strings
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        encoded = pc.dictionary_encode(column)
        codes: np.ndarray = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        return codes
    values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    return np.where(valid, values - values.min(initial=0) + 1, 0)


def values_of(
    column: pa.ChunkedArray | pa.Array, fill: Any = 0, dtype: Any = np.int64
) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls as ``fill``, validity) of a numeric or boolean column."""
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    values = pc.fill_null(column, fill).to_numpy(zero_copy_only=False).astype(dtype)
    return values, valid


def _shift(values: np.ndarray, by: int, fill: Any) -> np.ndarray:
    """``values`` moved down ``by`` places (the row ``by`` before), ``fill`` at the top."""
    out = np.empty_like(values)
    out[:by] = fill
    out[by:] = values[:-by] if by < len(values) else values[:0]
    return out


def equals(column: pa.ChunkedArray | pa.Array, value: str) -> np.ndarray:
    """column == value, null as False."""
    result: np.ndarray = pc.fill_null(pc.equal(column, value), False).to_numpy(zero_copy_only=False)
    return result


def in_range(ts: np.ndarray, lo: int | None, hi: int | None) -> np.ndarray:
    """``lo <= ts < hi`` (either bound left out when None)."""
    keep = np.ones(len(ts), dtype=bool)
    if lo is not None:
        keep &= ts >= lo
    if hi is not None:
        keep &= ts < hi
    return keep


def group_starts(*keys: np.ndarray) -> np.ndarray:
    """Over rows grouped by ``keys``: True at the first row of each group."""
    n = len(keys[0]) if keys else 0
    first = np.ones(n, dtype=bool)
    if n:
        first[1:] = np.logical_or.reduce([k[1:] != k[:-1] for k in keys])
    return first


# ---------------------------------------------------------------------------------------------------------
# Rows in replica and time order, and the facts derived from them.


def drop_repeats(order: np.ndarray, first: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``order`` (rows grouped by replica in time order; ``first``: each replica's first) without the rows
    that repeat their replica's previous ts_ms (``schema.DEDUP_KEY``), and how many were dropped."""
    repeated = np.zeros(len(order), dtype=bool)
    repeated[1:] = (ts[order][1:] == ts[order][:-1]) & ~first[1:]
    duplicates = int(np.count_nonzero(repeated))
    if duplicates:
        order, first = order[~repeated], first[~repeated]
    return order, first, duplicates


def in_replica_order(rows: pa.Table) -> tuple[pa.Table, np.ndarray, int]:
    """``rows`` grouped by replica (``REPLICA_KEY``) in ts_ms order, records of equal ts_ms kept in the order
    given: (the rows, each replica's first row, repeats dropped). A record with its replica's previous
    ts_ms is a repeat (``schema.DEDUP_KEY``: an MQTT QoS 1 redelivery the sink appended again) and is
    dropped, as ``--follow``'s stream drops it; the row after it took it for its previous row, which is
    the same record again, so no other row changes."""
    keys = [codes_of(rows[name]) for name in REPLICA_KEY]
    ts = rows[s.TS_MS].to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((ts, *reversed(keys)))
    first = group_starts(*(k[order] for k in keys))
    order, first, duplicates = drop_repeats(order, first, ts)
    return rows.take(pa.array(order)), first, duplicates


@dataclass
class Rows:
    """Rows grouped by replica in time order (a broker's, or a round's) with the facts every table derives
    from a row and its replica's previous row (``derive``)."""

    t: pa.Table
    first: np.ndarray  # a replica's first row
    rep: np.ndarray  # replica number
    ts: np.ndarray
    partition_row: np.ndarray  # kind partition
    follower: np.ndarray  # a follower's sample: role follower with a fetch offset (``follower_lag``'s rows)
    interval_ms: np.ndarray  # time since the replica's previous sample (0 for its first)
    incarnation_first: np.ndarray  # the replica's first sample since its broker (re)started
    deltas: dict[str, np.ndarray]  # per counter: its growth since the replica's previous sample
    role_last_leader: np.ndarray  # per row: its replica's role at the newest record is leader


def derive(t: pa.Table, first: np.ndarray) -> Rows:
    """The per-row facts of rows grouped by replica in time order (``first``: each replica's first row).

    - A follower's sample: a partition record with role follower and a fetch offset. Brokers used to write
      ``fetch_offset: -1`` for a follower whose fetcher had no answer yet (just restarted, or following a
      new leader); that is no position, so a negative offset counts as none (read as one, the drop from the
      previous offset made a TRUNCATE out of nothing).
    - Counter deltas: counters are running totals since the broker process started (``broker_start_ms``).
      A counter's delta is the counter itself at the first sample of an incarnation (no previous sample, or
      one with another ``broker_start_ms``) and after a value lower than the previous one (the counter
      restarted from 0: a replica re-created), else the difference; so a delta is never negative.
    - The replica's role at its newest record that has one: a promoted follower reads leader; "offline"
      (its partition has no leader, as when a cluster shuts down) is skipped, so a leader whose partition
      went offline still reads leader.
    """
    n = t.num_rows
    ts = t[s.TS_MS].to_numpy().astype(np.int64)
    rep = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    prev_ts = _shift(ts, 1, 0)
    start_ms, start_valid = values_of(t[s.BROKER_START_MS])
    prev_start, prev_start_valid = _shift(start_ms, 1, 0), _shift(start_valid, 1, False)
    both = start_valid & prev_start_valid
    restarted_true = ~first & both & (start_ms != prev_start)
    restarted_null = ~first & ~both
    deltas = {}
    for name in s.PARTITION_COUNTERS:
        value, _ = values_of(t[name])
        before = _shift(value, 1, 0)
        counts_all = first | restarted_true | (value < before)
        deltas[name] = np.where(counts_all, value, value - before)
    kind = t[s.KIND]
    role = t[s.ROLE]
    fetch, fetch_valid = values_of(t[s.FETCH_OFFSET])
    partition_row = equals(kind, s.KIND_PARTITION)
    follower = partition_row & equals(role, s.ROLE_FOLLOWER) & fetch_valid & (fetch >= 0)
    # The replica's role at its newest record with a role other than offline.
    has_role = pc.fill_null(pc.not_equal(role, s.ROLE_OFFLINE), False).to_numpy(zero_copy_only=False)
    candidate = np.where(has_role, np.arange(n), -1)
    last = np.maximum.reduceat(candidate, starts)[rep] if n else np.zeros(0, dtype=np.int64)
    is_leader = equals(role, s.ROLE_LEADER)
    role_last_leader = (last >= 0) & is_leader[np.maximum(last, 0)] if n else np.zeros(0, dtype=bool)
    return Rows(
        t=t,
        first=first,
        rep=rep,
        ts=ts,
        partition_row=partition_row,
        follower=follower,
        interval_ms=np.where(first, 0, ts - prev_ts),
        incarnation_first=first | restarted_true | restarted_null,
        deltas=deltas,
        role_last_leader=role_last_leader,
    )


def build_table(columns: dict[str, Any], schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` from arrays or (values, validity) pairs, by name."""
    arrays = []
    for field in schema:
        value = columns[field.name]
        if isinstance(value, tuple):
            values, valid = value
            value = pa.array(values, mask=~valid)
        elif isinstance(value, np.ndarray):
            value = pa.array(value)
        arrays.append(value.cast(field.type) if value.type != field.type else value)
    return pa.Table.from_arrays(arrays, schema=schema)


def _window_start(ts: np.ndarray, window_ms: int) -> np.ndarray:
    """Start of the epoch-aligned window of ``window_ms`` holding each ``ts``."""
    start: np.ndarray = ts - np.mod(ts, window_ms)
    return start


def round_half_up(x: np.ndarray) -> np.ndarray:
    """Spark's ``round(x)`` of a double: halves away from zero (numpy's ``round`` goes to even)."""
    magnitude = np.abs(x)
    whole = np.floor(magnitude)
    up = (magnitude - whole) >= 0.5  # exact: x − floor(x) is a double without rounding
    rounded: np.ndarray = np.sign(x) * (whole + up)
    return rounded


def group_first_last(first: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group number per row, first row of each group, last row of each group) of consecutive groups."""
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(first))[: len(starts)] - 1
    return np.cumsum(first) - 1, starts, ends


def _percentiles(
    values: np.ndarray, valid: np.ndarray, group: np.ndarray, groups: int
) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], tuple[np.ndarray, np.ndarray]]:
    """Nearest-rank percentiles (``PERCENTS``: the smallest value v with at least ⌈p·n⌉ of the group's n
    non-null values ≤ v, in integer arithmetic) and the max of the non-null values per group."""
    g = group[valid]
    v = values[valid]
    order = np.lexsort((v, g))
    v = v[order]
    counts = np.bincount(g, minlength=groups)
    offsets = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    has = counts > 0
    out = {}
    for p in PERCENTS:
        rank = (counts * p + 99) // 100
        index = np.where(has, offsets + rank - 1, 0)
        out[p] = (v[index] if len(v) else np.zeros(groups, dtype=np.int64), has)
    top = np.where(has, offsets + counts - 1, 0)
    return out, (v[top] if len(v) else np.zeros(groups, dtype=np.int64), has)


def follower_lag(r: Rows) -> pa.Table:
    """``follower_lag``: the lag time series, one row per follower sample (the follower's own view).
    Leaders have no lag and offline replicas no fetcher: only followers' samples with a fetch offset."""
    rows = r.t.filter(pa.array(r.follower))
    schema = s.TABLE_SCHEMAS[s.TABLE_FOLLOWER_LAG]
    return build_table({**{n: rows[n] for n in rows.column_names}, "follower_id": rows[s.BROKER_ID]}, schema)


def replica_lag(r: Rows) -> pa.Table:
    """``replica_lag``: the leader's view of each follower's lag, one row per follower per leader sample
    (lag in messages: the leader's LEO minus the follower's as the leader knows it, the time since it was
    last caught up, in sync). The primary lag series: a follower that is dead, paused or cut off emits
    nothing itself, but its leader goes on reporting it."""
    keep = (
        r.partition_row
        & equals(r.t[s.ROLE], s.ROLE_LEADER)
        & pc.is_valid(r.t[s.FOLLOWERS]).to_numpy(zero_copy_only=False)
    )
    rows = r.t.filter(pa.array(keep))
    lists = rows[s.FOLLOWERS].combine_chunks()
    parent = pc.list_parent_indices(lists)
    # flatten(): a null follower's fields are null (``explode`` of a null element, then its fields).
    followers = pc.list_flatten(lists)
    fields = dict(zip([f.name for f in followers.type], followers.flatten(), strict=True))
    base = rows.select([s.TOPIC, s.PARTITION, s.TS_MS, s.LEADER_ID, s.LEADER_EPOCH]).take(parent)
    columns = {n: base[n] for n in base.column_names}
    columns.update(
        {
            "follower_id": fields[s.BROKER_ID],
            s.LAG_MESSAGES: fields[s.LAG_MESSAGES],
            s.TIME_SINCE_CAUGHT_UP_MS: fields[s.TIME_SINCE_CAUGHT_UP_MS],
            s.IN_SYNC: fields[s.IN_SYNC],
        }
    )
    return build_table(columns, s.TABLE_SCHEMAS[s.TABLE_REPLICA_LAG])


def broker_health(r: Rows) -> pa.Table:
    """``broker_health``: one row per broker record, how long ready work waited for that broker's event
    loop over the interval (``LoopLagMaxMs``, ``LoopLagAvgMs``) and the metadata quorum as the broker
    follows it (``schema.METADATA_COLUMNS``: the quorum leader, -1 when it knows none, its epoch, and how
    far the broker's copy of the metadata log is behind, in records and ms). A record without a gauge
    has a null there (an older broker, a broker that follows no quorum); a record with neither the loop
    lag nor the quorum is left out."""
    reported = pc.or_(pc.is_valid(r.t[s.LOOP_LAG_MAX_MS]), pc.is_valid(r.t[s.METADATA_LEADER_ID]))
    keep = equals(r.t[s.KIND], s.KIND_BROKER) & reported.to_numpy(zero_copy_only=False)
    rows = r.t.filter(pa.array(keep))
    columns = {n: rows[n] for n in rows.column_names}
    columns.update({"loop_lag_max_ms": rows[s.LOOP_LAG_MAX_MS], "loop_lag_avg_ms": rows[s.LOOP_LAG_AVG_MS]})
    columns.update({column: rows[field] for field, column in s.METADATA_COLUMNS.items()})
    return build_table(columns, s.TABLE_SCHEMAS[s.TABLE_BROKER_HEALTH])


def lag_windows(r: Rows, config: LagJobConfig) -> pa.Table:
    """``lag_windows``: per follower and tumbling window of ``window_ms``, the samples and the lag
    percentiles (nearest-rank, exact: p50 of the lags 1..100 is 50, p99 is 99) and maximum, in messages
    and in ms. A follower's rows are consecutive and in time order, so each (follower, window) is a run
    of its rows."""
    idx = np.flatnonzero(r.follower)
    t = r.t.take(pa.array(idx))
    ws = _window_start(r.ts[idx], config.window_ms)
    group, starts, _ = group_first_last(group_starts(r.rep[idx], ws))
    groups = len(starts)
    columns: dict[str, Any] = {
        s.TOPIC: t[s.TOPIC].take(pa.array(starts)),
        s.PARTITION: t[s.PARTITION].take(pa.array(starts)),
        "follower_id": t[s.BROKER_ID].take(pa.array(starts)),
        WINDOW_START_MS: ws[starts],
        "window_end_ms": ws[starts] + config.window_ms,
        "samples": np.bincount(group, minlength=groups).astype(np.int64),
    }
    for name in (s.LAG_MESSAGES, s.LAG_MS):
        values, valid = values_of(t[name])
        ranks, top = _percentiles(values, valid, group, groups)
        for p, column in ranks.items():
            columns[f"{name}_p{p}"] = column
        columns[f"{name}_max"] = top
    return build_table(columns, s.TABLE_SCHEMAS[s.TABLE_LAG_WINDOWS])


_RATES = (
    (s.BYTES_IN, "client_in"),
    (s.BYTES_OUT, "client_out"),
    (s.REPLICATION_BYTES_IN, "replication_in"),
    (s.REPLICATION_BYTES_OUT, "replication_out"),
)


def byte_rates(r: Rows, config: LagJobConfig) -> pa.Table:
    """``byte_rates``: bytes and messages per broker, partition and tumbling window, and the rates:
    the deltas' sum × 1000 / the time they cover (``interval_ms``). The first sample of an incarnation
    carries everything counted since the broker started, spread evenly over that time: a window gets the
    share that falls inside it (rounded half up, as Spark's ``round``), over the time inside it. A window
    with no elapsed time carries no rate and is left out. Per replica and window, a run of its rows."""
    idx = np.flatnonzero(r.partition_row)
    t = r.t.select([s.BROKER_ID, s.TOPIC, s.PARTITION, s.BROKER_START_MS]).take(pa.array(idx))
    ts = r.ts[idx]
    ws = _window_start(ts, config.window_ms)
    group, starts, _ = group_first_last(group_starts(r.rep[idx], ws))
    broker_start, broker_start_valid = values_of(t[s.BROKER_START_MS])
    start = np.minimum(np.where(broker_start_valid, broker_start, ts), ts)
    inside_ms = ts - np.maximum(start, ws)
    first = r.incarnation_first[idx]
    spread = first & (ts > start)
    share = np.ones(len(idx))
    share[spread] = inside_ms[spread] / (ts - start)[spread]
    interval = np.where(first, inside_ms, r.interval_ms[idx])

    def total(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, starts) if len(starts) else np.zeros(0, dtype=np.int64)

    intervals = total(interval)
    sums = {out: total(round_half_up(r.deltas[c][idx] * share).astype(np.int64)) for c, out in _RATES}
    messages = total(round_half_up(r.deltas[s.MESSAGES_IN][idx] * share).astype(np.int64))
    keep = intervals > 0
    firsts = pa.array(starts[keep])
    per_s = 1000.0 / intervals[keep]
    columns: dict[str, Any] = {
        s.BROKER_ID: t[s.BROKER_ID].take(firsts),
        s.TOPIC: t[s.TOPIC].take(firsts),
        s.PARTITION: t[s.PARTITION].take(firsts),
        WINDOW_START_MS: ws[starts][keep],
        "window_end_ms": ws[starts][keep] + config.window_ms,
        INTERVAL_MS: intervals[keep],
        "messages_in": messages[keep],
        "messages_in_per_s": messages[keep] * per_s,
    }
    for _, out in _RATES:
        columns[f"{out}_bytes"] = sums[out][keep]
        columns[f"{out}_bytes_per_s"] = sums[out][keep] * per_s
    return build_table(columns, s.TABLE_SCHEMAS[s.TABLE_BYTE_RATES])


def _status(
    samples: np.ndarray,
    lag_min: np.ndarray,
    lag_min_valid: np.ndarray,
    fetch_min: np.ndarray,
    fetch_max: np.ndarray,
    lag_drops: np.ndarray,
    truncations: np.ndarray,
    rewinds: np.ndarray,
    config: LagJobConfig,
) -> np.ndarray:
    """The status rule (``follower_status_partial``) but for STOP, which needs every broker's records."""
    trending = (samples >= config.status_min_samples) & lag_min_valid & (lag_min > config.allowed_lag_messages)
    return np.select(
        [rewinds > 0, trending & (fetch_min == fetch_max), truncations > 0, trending & (lag_drops == 0)],
        [s.STATUS_REWIND, s.STATUS_STALL, s.STATUS_TRUNCATE, s.STATUS_WARN],
        default=s.STATUS_OK,
    ).astype(object)


def follower_status_partial(r: Rows, config: LagJobConfig) -> pa.Table:
    """``follower_status`` of these rows' followers but for STOP (``follower_status`` applies it against
    the newest record of any broker): a Burrow-style verdict per follower over its samples in the last
    ``window_ms`` before its own last sample. The first rule that matches wins (most severe first):

    - REWIND: the fetch offset went backwards between two consecutive samples in the window without a
      leader-epoch change. Nothing legitimate does that.
    - STALL: at least ``status_min_samples`` samples, a lag above ``allowed_lag_messages`` at every one and
      the fetch offset the same at every one: the leader has data the follower does not fetch.
    - TRUNCATE: the fetch offset went backwards right after a leader-epoch change: at sample i the epoch is
      higher than at sample i−2 (i−1 when there is no i−2), because a follower may report the new epoch one
      sample before it truncates. Expected after a leader kill, not an error.
    - WARN: at least ``status_min_samples`` samples, a lag above ``allowed_lag_messages`` at every one and
      never lower than at the sample before (within the window): the follower is not catching up.
    - OK: everything else.

    A replica whose newest record says it leads the partition was promoted: it is no longer a follower and
    gets no status (Burrow drops a consumer that is gone), rather than a STOP for the samples it stopped
    sending."""
    idx = np.flatnonzero(r.follower)
    t = r.t.take(pa.array(idx))
    ts = r.ts[idx]
    frep = r.rep[idx]
    m = len(idx)
    fetch, _ = values_of(t[s.FETCH_OFFSET])
    lag, lag_valid = values_of(t[s.LAG_MESSAGES])
    epoch, epoch_valid = values_of(t[s.LEADER_EPOCH])
    has1 = np.zeros(m, dtype=bool)
    has1[1:] = frep[1:] == frep[:-1]
    has2 = np.zeros(m, dtype=bool)
    has2[2:] = frep[2:] == frep[:-2]
    e1, e1v = _shift(epoch, 1, 0), _shift(epoch_valid, 1, False) & has1
    e2, e2v = _shift(epoch, 2, 0), _shift(epoch_valid, 2, False) & has2
    before = np.where(e2v, e2, e1)
    before_valid = e2v | e1v
    group, starts, ends = group_first_last(~has1)
    last_ts = ts[ends][group] if m else np.zeros(0, dtype=np.int64)
    window_start = last_ts - config.window_ms
    inside = ts > window_start
    prev_ts = _shift(ts, 1, 0)
    prev_fetch = _shift(fetch, 1, 0)
    prev_lag, prev_lag_valid = _shift(lag, 1, 0), _shift(lag_valid, 1, False)
    went_back = has1 & (fetch < prev_fetch)
    epoch_changed = epoch_valid & before_valid & (epoch > before)
    dropped = has1 & (prev_ts > window_start) & lag_valid & prev_lag_valid & (lag < prev_lag)
    # The window's rows are the tail of each follower's run: the groups of the rows inside.
    keep = inside & ~r.role_last_leader[idx]
    kidx = np.flatnonzero(keep)
    kgroup, kstarts, kends = group_first_last(group_starts(group[kidx]))
    groups = len(kstarts)

    def count(flags: np.ndarray) -> np.ndarray:
        return np.bincount(kgroup, weights=flags[kidx], minlength=groups).astype(np.int64)

    big = np.iinfo(np.int64).max
    lag_in = np.where(lag_valid[kidx], lag[kidx], big)
    lag_min = np.minimum.reduceat(lag_in, kstarts) if groups else np.zeros(0, dtype=np.int64)
    fetch_min = np.minimum.reduceat(fetch[kidx], kstarts) if groups else np.zeros(0, dtype=np.int64)
    fetch_max = np.maximum.reduceat(fetch[kidx], kstarts) if groups else np.zeros(0, dtype=np.int64)
    lag_min_valid = lag_min != big if groups else np.zeros(0, dtype=bool)
    truncations = count(went_back & epoch_changed)
    rewinds = count(went_back & ~epoch_changed)
    samples = np.bincount(kgroup, minlength=groups).astype(np.int64)
    status = _status(
        samples, lag_min, lag_min_valid, fetch_min, fetch_max, count(dropped), truncations, rewinds, config
    )
    firsts = pa.array(kidx[kstarts])
    lasts = pa.array(kidx[kends])
    columns: dict[str, Any] = {
        s.TOPIC: t[s.TOPIC].take(firsts),
        s.PARTITION: t[s.PARTITION].take(firsts),
        "follower_id": t[s.BROKER_ID].take(firsts),
        "status": pa.array(status, pa.string()),
        "samples": samples,
        "window_start_ms": ts[kidx][kstarts] if groups else np.zeros(0, dtype=np.int64),
        "last_ts_ms": ts[kidx][kends] if groups else np.zeros(0, dtype=np.int64),
        "lag_messages_last": t[s.LAG_MESSAGES].take(lasts),
        "lag_ms_last": t[s.LAG_MS].take(lasts),
        "fetch_offset_last": t[s.FETCH_OFFSET].take(lasts),
        "leader_id_last": t[s.LEADER_ID].take(lasts),
        "leader_epoch_last": t[s.LEADER_EPOCH].take(lasts),
        "truncations": truncations,
        "rewinds": rewinds,
    }
    return build_table(columns, s.TABLE_SCHEMAS[s.TABLE_FOLLOWER_STATUS])


TIMELINE_PARTIAL = pa.schema(
    [
        (s.TOPIC, pa.string()),
        (s.PARTITION, pa.int32()),
        (s.LEADER_EPOCH, pa.int32()),
        (s.LEADER_ID, pa.int32()),
        ("first_seen_ms", pa.int64()),
        ("last_seen_ms", pa.int64()),
        ("reports", pa.int64()),
        ("confirmed", pa.bool_()),
    ]
)


def _grouped(keys: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row order, group number per ordered row, first ordered row of each group) for rows grouped by
    ``keys`` (codes; the last key is the most significant)."""
    order = np.lexsort(tuple(keys))
    first = group_starts(*(k[order] for k in keys))
    return order, np.cumsum(first) - 1, np.flatnonzero(first)


def bool_max(values: np.ndarray, valid: np.ndarray, group: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Spark's ``max`` of a boolean per group: nulls ignored, null when all are."""
    any_valid = np.bincount(group, weights=valid, minlength=groups) > 0
    any_true = np.bincount(group, weights=values & valid, minlength=groups) > 0
    return any_true, any_valid


def leader_timeline_partial(r: Rows, lo: int | None = None, hi: int | None = None) -> pa.Table:
    """Per (topic, partition, leader_epoch, leader_id), the mergeable ``leader_timeline`` columns over the
    partition records with ``lo <= ts_ms < hi`` (``LEADER_TIMELINE_MERGE``): first and last seen, reports,
    and confirmed (the leader itself reported role leader in that epoch)."""
    t = r.t
    epoch_valid = pc.is_valid(t[s.LEADER_EPOCH]).to_numpy(zero_copy_only=False)
    leader_valid = pc.is_valid(t[s.LEADER_ID]).to_numpy(zero_copy_only=False)
    idx = np.flatnonzero(r.partition_row & epoch_valid & leader_valid & in_range(r.ts, lo, hi))
    rows = t.select([s.TOPIC, s.PARTITION, s.LEADER_EPOCH, s.LEADER_ID, s.ROLE]).take(pa.array(idx))
    keys = [codes_of(rows[n]) for n in reversed(LEADER_TIMELINE_KEY)]
    order, group, starts = _grouped(keys)
    groups = len(starts)
    ts = r.ts[idx][order]
    role = rows[s.ROLE].take(pa.array(order))
    leader, leader_valid_role = equals(role, s.ROLE_LEADER), pc.is_valid(role).to_numpy(zero_copy_only=False)
    confirmed, confirmed_valid = bool_max(leader, leader_valid_role, group, groups)
    firsts = pa.array(order[starts])
    columns: dict[str, Any] = {n: rows[n].take(firsts) for n in LEADER_TIMELINE_KEY}
    columns.update(
        {
            "first_seen_ms": np.minimum.reduceat(ts, starts) if groups else ts[:0],
            "last_seen_ms": np.maximum.reduceat(ts, starts) if groups else ts[:0],
            "reports": np.bincount(group, minlength=groups).astype(np.int64),
            "confirmed": (confirmed, confirmed_valid),
        }
    )
    return build_table(columns, TIMELINE_PARTIAL)


RUNS_PARTIAL = pa.schema(
    [
        (s.BROKER_ID, pa.int32()),
        (s.BROKER_START_MS, pa.int64()),
        ("records", pa.int64()),
        ("first_ts_ms", pa.int64()),
        ("last_ts_ms", pa.int64()),
    ]
)


def broker_runs_partial(r: Rows, lo: int | None = None, hi: int | None = None) -> pa.Table:
    """Per (broker_id, broker_start_ms): records, first and last ts_ms over the records (any kind) with
    ``lo <= ts_ms < hi``; merged with ``BROKER_RUNS_MERGE``."""
    idx = np.flatnonzero(in_range(r.ts, lo, hi))
    t = r.t.select([s.BROKER_ID, s.BROKER_START_MS]).take(pa.array(idx))
    order, group, starts = _grouped([codes_of(t[s.BROKER_START_MS]), codes_of(t[s.BROKER_ID])])
    groups = len(starts)
    ts = r.ts[idx][order]
    firsts = pa.array(order[starts])
    return build_table(
        {
            s.BROKER_ID: t[s.BROKER_ID].take(firsts),
            s.BROKER_START_MS: t[s.BROKER_START_MS].take(firsts),
            "records": np.bincount(group, minlength=groups).astype(np.int64),
            "first_ts_ms": np.minimum.reduceat(ts, starts) if groups else ts[:0],
            "last_ts_ms": np.maximum.reduceat(ts, starts) if groups else ts[:0],
        },
        RUNS_PARTIAL,
    )


SEEN_PARTIAL = pa.schema(
    [(s.TOPIC, pa.string()), (s.PARTITION, pa.int32()), ("first_ts_ms", pa.int64()), ("last_ts_ms", pa.int64())]
)


def partitions_seen_partial(r: Rows, lo: int | None = None, hi: int | None = None) -> pa.Table:
    """Per partition, the first and last ts_ms of its records with ``lo <= ts_ms < hi`` (``cluster_health``
    counts a partition from its first record and its span ends at the newest); merged with
    ``FIRST_SEEN_MERGE``."""
    idx = np.flatnonzero(r.partition_row & in_range(r.ts, lo, hi))
    rows = r.t.select([s.TOPIC, s.PARTITION]).take(pa.array(idx))
    order, group, starts = _grouped([codes_of(rows[s.PARTITION]), codes_of(rows[s.TOPIC])])
    groups = len(starts)
    ts = r.ts[idx][order]
    firsts = pa.array(order[starts])
    return build_table(
        {
            s.TOPIC: rows[s.TOPIC].take(firsts),
            s.PARTITION: rows[s.PARTITION].take(firsts),
            "first_ts_ms": np.minimum.reduceat(ts, starts) if groups else ts[:0],
            "last_ts_ms": np.maximum.reduceat(ts, starts) if groups else ts[:0],
        },
        SEEN_PARTIAL,
    )


LEADERS_PARTIAL = pa.schema(
    [
        (s.TOPIC, pa.string()),
        (s.PARTITION, pa.int32()),
        (s.TS_MS, pa.int64()),
        (s.BROKER_ID, pa.int32()),
        (s.UNDER_REPLICATED, pa.bool_()),
        (s.UNDER_MIN_ISR, pa.bool_()),
        (s.ISR_SIZE, pa.int32()),
        (INTERVAL_MS, pa.int64()),
    ]
)


def leader_samples_partial(r: Rows) -> pa.Table:
    """The leader samples of these rows, with their replica's sampled interval (``under_replicated`` and
    ``cluster_health`` order a partition's samples across brokers)."""
    idx = np.flatnonzero(r.partition_row & equals(r.t[s.ROLE], s.ROLE_LEADER))
    rows = r.t.take(pa.array(idx))
    columns = {n: rows[n] for n in rows.column_names}
    columns[INTERVAL_MS] = pa.array(r.interval_ms[idx], pa.int64())
    return build_table(columns, LEADERS_PARTIAL)


# The tables the rows of one broker decide (``broker_tables``), and the partials they leave for what
# crosses brokers (``finish_tables``), each with its schema.
ROW_TABLES: tuple[str, ...] = (
    s.TABLE_FOLLOWER_LAG,
    s.TABLE_REPLICA_LAG,
    s.TABLE_BROKER_HEALTH,
    s.TABLE_LAG_WINDOWS,
    s.TABLE_BYTE_RATES,
)
P_STATUS = "follower_status"
P_TIMELINE = "leader_timeline"
P_RUNS = "broker_runs"
P_SEEN = "partitions_seen"
P_LEADERS = "leader_samples"
PARTIAL_SCHEMAS: dict[str, pa.Schema] = {
    P_STATUS: s.TABLE_SCHEMAS[s.TABLE_FOLLOWER_STATUS],
    P_TIMELINE: TIMELINE_PARTIAL,
    P_RUNS: RUNS_PARTIAL,
    P_SEEN: SEEN_PARTIAL,
    P_LEADERS: LEADERS_PARTIAL,
}


def broker_tables(r: Rows, config: LagJobConfig) -> tuple[dict[str, pa.Table], dict[str, pa.Table]]:
    """What rows of whole replicas decide: the ``ROW_TABLES`` and the partials (``PARTIAL_SCHEMAS``)."""
    tables = {
        s.TABLE_FOLLOWER_LAG: follower_lag(r),
        s.TABLE_REPLICA_LAG: replica_lag(r),
        s.TABLE_BROKER_HEALTH: broker_health(r),
        s.TABLE_LAG_WINDOWS: lag_windows(r, config),
        s.TABLE_BYTE_RATES: byte_rates(r, config),
    }
    partials = {
        P_STATUS: follower_status_partial(r, config),
        P_TIMELINE: leader_timeline_partial(r),
        P_RUNS: broker_runs_partial(r),
        P_SEEN: partitions_seen_partial(r),
        P_LEADERS: leader_samples_partial(r),
    }
    return tables, partials


def finish_tables(partials: Mapping[str, pa.Table], isr: pa.Table, config: LagJobConfig) -> dict[str, pa.Table]:
    """The tables that cross brokers, from every broker's partials (concatenated) and ``replica_lag``'s
    rows (``isr``: at least topic, partition, follower_id, ts_ms and in_sync)."""
    runs = partials[P_RUNS]
    now_ms = int(pc.max(runs["last_ts_ms"]).as_py() or 0) if runs.num_rows else 0
    changes = isr_changes(isr, config)
    leaders = partials[P_LEADERS]
    return {
        s.TABLE_FOLLOWER_STATUS: follower_status(partials[P_STATUS], config, now_ms),
        s.TABLE_LEADER_TIMELINE: leader_timeline(partials[P_TIMELINE]),
        s.TABLE_ISR_CHANGES: changes,
        s.TABLE_UNDER_REPLICATED: under_replicated(leaders, changes, config),
        s.TABLE_CLUSTER_HEALTH: cluster_health(leaders, partials[P_SEEN], config),
    }


def compute_tables(records: pa.Table, config: LagJobConfig) -> dict[str, pa.Table]:
    """Every table of ``records`` (``LAG_JOB_SCHEMA``'s columns) held in one table: the two steps above
    over all of them at once, where the file pass takes them a broker at a time."""
    r = derive(*in_replica_order(records)[:2])
    tables, partials = broker_tables(r, config)
    return {**tables, **finish_tables(partials, tables[s.TABLE_REPLICA_LAG], config)}


# ---------------------------------------------------------------------------------------------------------
# What crosses brokers: from every broker's partials (``finish_tables``).


def follower_status(partials: pa.Table, config: LagJobConfig, now_ms: int) -> pa.Table:
    """``follower_status``: the statuses of ``follower_status_partial`` with STOP applied: STOP when the
    follower's last sample is older than the window against ``now_ms``, the newest record of any broker
    (leaders included): it stopped reporting while others went on. Burrow's ``now`` is the evaluation
    time; this one is the newest record, so an old metrics dir read later is not all STOP."""
    stopped = (now_ms - partials["last_ts_ms"].to_numpy()) > config.window_ms
    status = pc.if_else(pa.array(stopped), s.STATUS_STOP, partials["status"].combine_chunks())
    return partials.set_column(partials.schema.get_field_index("status"), "status", status)


def leader_timeline(partials: pa.Table) -> pa.Table:
    """``leader_timeline``: each (leader epoch, leader) a partition went through, from the partials of
    ``leader_timeline_partial`` merged, with the previous entry's leader and epoch in its partition (by
    first seen, then epoch; null for the first). Any replica's record tells which leader and epoch it
    knows, so an epoch is first seen when the first replica reports it; leader_id −1 means the replicas
    knew no leader (offline)."""
    keys = [codes_of(partials[n]) for n in reversed(LEADER_TIMELINE_KEY)]
    order, group, starts = _grouped(keys)
    groups = len(starts)
    t = partials.take(pa.array(order))
    confirmed, valid = values_of(t["confirmed"], False, bool)
    conf, conf_valid = bool_max(confirmed, valid, group, groups)
    firsts = pa.array(starts)
    first_seen = np.minimum.reduceat(t["first_seen_ms"].to_numpy(), starts) if groups else np.zeros(0, np.int64)
    merged = pa.table(
        {
            **{n: t[n].take(firsts) for n in LEADER_TIMELINE_KEY},
            "first_seen_ms": first_seen,
            "last_seen_ms": np.maximum.reduceat(t["last_seen_ms"].to_numpy(), starts) if groups else first_seen,
            "reports": np.add.reduceat(t["reports"].to_numpy(), starts) if groups else first_seen,
            "confirmed": pa.array(conf, mask=~conf_valid),
        }
    )
    # The partition's entries by (first_seen_ms, leader_epoch): the previous one's leader and epoch.
    epoch = codes_of(merged[s.LEADER_EPOCH])
    by_partition = np.lexsort((epoch, first_seen, codes_of(merged[s.PARTITION]), codes_of(merged[s.TOPIC])))
    m = merged.take(pa.array(by_partition))
    same = ~group_starts(codes_of(m[s.TOPIC]), codes_of(m[s.PARTITION]))
    leader_id, leader_valid = values_of(m[s.LEADER_ID])
    epochs, epochs_valid = values_of(m[s.LEADER_EPOCH])
    columns = {n: m[n] for n in m.column_names}
    columns["previous_leader_id"] = (_shift(leader_id, 1, 0), same & _shift(leader_valid, 1, False))
    columns["previous_leader_epoch"] = (_shift(epochs, 1, 0), same & _shift(epochs_valid, 1, False))
    return build_table(columns, s.TABLE_SCHEMAS[s.TABLE_LEADER_TIMELINE])


def _previous_duration(ts: np.ndarray, has_prev: np.ndarray, gap_max_ms: int) -> np.ndarray:
    """How long each row's previous row of its key stood for, counted at this row (see the module docstring):
    until this row, at most ``gap_max_ms``; 0 at a key's first row (``has_prev`` false)."""
    return np.where(has_prev, np.minimum(ts - _shift(ts, 1, 0), gap_max_ms), 0)


ISR_PARTIAL = pa.schema(
    [
        (s.TOPIC, pa.string()),
        (s.PARTITION, pa.int32()),
        ("follower_id", pa.int32()),
        ("samples", pa.int64()),
        ("shrinks", pa.int64()),
        ("expands", pa.int64()),
        ("out_of_sync_ms", pa.int64()),
        ("observed_ms", pa.int64()),
        ("in_sync_last", pa.bool_()),
        ("last_ts_ms", pa.int64()),
    ]
)


def isr_changes_partial(isr: pa.Table, config: LagJobConfig, lo: int | None = None, hi: int | None = None) -> pa.Table:
    """Per follower, the mergeable counts of ``isr_changes`` (``ISR_CHANGES_MERGE``) from ``replica_lag``'s
    rows (the leaders' samples, a row per follower listed): the follower's samples with ``lo <= ts_ms < hi``,
    each compared with the one before it, whatever its time; ``last_ts_ms`` orders ``in_sync_last``."""
    ts_all = isr[s.TS_MS].to_numpy()
    keys = [ts_all, *(codes_of(isr[n]) for n in reversed(ISR_CHANGES_KEY))]
    order = np.lexsort(tuple(keys))
    ts = ts_all[order]
    first = group_starts(*(k[order] for k in keys[1:]))
    flag, valid = values_of(isr[s.IN_SYNC].take(pa.array(order)), False, bool)
    prev, prev_valid = _shift(flag, 1, False), _shift(valid, 1, False) & ~first
    shrink = prev_valid & prev & valid & ~flag
    expand = prev_valid & ~prev & valid & flag
    was_out = prev_valid & ~prev
    d = _previous_duration(ts, ~first, config.gap_max_ms)
    kept = np.flatnonzero(in_range(ts, lo, hi))
    group_of = np.cumsum(first) - 1
    group, starts, ends = group_first_last(group_starts(group_of[kept]))
    groups = len(starts)
    t = isr.take(pa.array(order[kept]))

    def total(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values[kept].astype(np.int64), starts) if groups else np.zeros(0, dtype=np.int64)

    firsts = pa.array(starts)
    return build_table(
        {
            **{n: t[n].take(firsts) for n in ISR_CHANGES_KEY},
            "samples": np.bincount(group, minlength=groups).astype(np.int64),
            "shrinks": total(shrink),
            "expands": total(expand),
            "out_of_sync_ms": total(np.where(was_out, d, 0)),
            "observed_ms": total(d),
            "in_sync_last": t[s.IN_SYNC].take(pa.array(ends)),
            "last_ts_ms": ts[kept][ends] if groups else ts[:0],
        },
        ISR_PARTIAL,
    )


def isr_changes(isr: pa.Table, config: LagJobConfig) -> pa.Table:
    """``isr_changes``: per partition and follower, the ISR shrinks and expands its leaders saw, from
    ``replica_lag``'s rows. Per follower in ts_ms order, a shrink is in_sync true → false between
    consecutive samples, an expand false → true; out_of_sync_ms sums the durations of the samples with
    in_sync false, observed_ms all of them (whichever broker led)."""
    return isr_changes_of(isr_changes_partial(isr, config))


def isr_changes_of(partial: pa.Table) -> pa.Table:
    """``isr_changes`` of one partial holding a row per follower (``isr_changes_partial``, merged)."""
    schema = s.TABLE_SCHEMAS[s.TABLE_ISR_CHANGES]
    return build_table({name: partial[name] for name in schema.names}, schema)


def _leader_order(leaders: pa.Table) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The leader samples per partition by (ts_ms, broker_id), whichever broker led: (rows, ts, first row
    of a partition)."""
    ts_all = leaders[s.TS_MS].to_numpy()
    topic, partition = codes_of(leaders[s.TOPIC]), codes_of(leaders[s.PARTITION])
    order = np.lexsort((codes_of(leaders[s.BROKER_ID]), ts_all, partition, topic))
    return leaders.take(pa.array(order)), ts_all[order], group_starts(topic[order], partition[order])


UNDER_REPLICATED_PARTIAL = pa.schema(
    [
        (s.TOPIC, pa.string()),
        (s.PARTITION, pa.int32()),
        ("leader_samples", pa.int64()),
        ("first_ts_ms", pa.int64()),
        ("last_ts_ms", pa.int64()),
        ("observed_ms", pa.int64()),
        ("under_replicated_ms", pa.int64()),
        ("under_min_isr_ms", pa.int64()),
        ("isr_size_min", pa.int32()),
    ]
)


def under_replicated_partial(
    leaders: pa.Table, config: LagJobConfig, lo: int | None = None, hi: int | None = None
) -> pa.Table:
    """Per partition, the mergeable sums of ``under_replicated`` (``UNDER_REPLICATED_MERGE``) over its leader
    samples (every broker's) with ``lo <= ts_ms < hi``, each sample's duration counted at the next one."""
    t, ts, first = _leader_order(leaders)
    d = _previous_duration(ts, ~first, config.gap_max_ms)
    ur, ur_valid = values_of(t[s.UNDER_REPLICATED], False, bool)
    umi, umi_valid = values_of(t[s.UNDER_MIN_ISR], False, bool)
    prev_ur = _shift(ur & ur_valid, 1, False) & ~first
    prev_umi = _shift(umi & umi_valid, 1, False) & ~first
    isr_size, isr_valid = values_of(t[s.ISR_SIZE])
    kept = np.flatnonzero(in_range(ts, lo, hi))
    group, starts, _ = group_first_last(group_starts((np.cumsum(first) - 1)[kept]))
    groups = len(starts)
    big = np.iinfo(np.int64).max
    isr_min = np.minimum.reduceat(np.where(isr_valid, isr_size, big)[kept], starts) if groups else np.zeros(0, np.int64)

    def total(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values[kept].astype(np.int64), starts) if groups else np.zeros(0, dtype=np.int64)

    firsts = pa.array(kept[starts])
    return build_table(
        {
            s.TOPIC: t[s.TOPIC].take(firsts),
            s.PARTITION: t[s.PARTITION].take(firsts),
            "leader_samples": np.bincount(group, minlength=groups).astype(np.int64),
            "first_ts_ms": np.minimum.reduceat(ts[kept], starts) if groups else ts[:0],
            "last_ts_ms": np.maximum.reduceat(ts[kept], starts) if groups else ts[:0],
            "observed_ms": total(d),
            "under_replicated_ms": total(np.where(prev_ur, d, 0)),
            "under_min_isr_ms": total(np.where(prev_umi, d, 0)),
            "isr_size_min": (isr_min, isr_min != big),
        },
        UNDER_REPLICATED_PARTIAL,
    )


def under_replicated(leaders: pa.Table, changes: pa.Table, config: LagJobConfig) -> pa.Table:
    """``under_replicated``: per partition, how long its leaders (whichever broker led) reported it
    under-replicated, from the leader samples (``leader_samples_partial``) and ``isr_changes``. In ts_ms
    order, a sample with ``under_replicated`` true adds its duration to under_replicated_ms, likewise
    ``under_min_isr``; observed_ms is the total duration covered. (The leaders' IsrShrinksPerSec counter
    misses the shrinks the controller makes when it fences a dead broker, so it is not used.)"""
    return under_replicated_of(under_replicated_partial(leaders, config), changes)


def under_replicated_of(partial: pa.Table, changes: pa.Table) -> pa.Table:
    """``under_replicated`` of one partial holding a row per partition (``under_replicated_partial``,
    merged) and ``isr_changes``: isr_shrinks / isr_expands are the partition's sums over its followers
    (0 when none), so the summary and the per-follower table agree."""
    counts = changes.group_by([s.TOPIC, s.PARTITION], use_threads=False).aggregate(
        [("shrinks", "sum"), ("expands", "sum")]
    )
    joined = partial.append_column("_row", pa.array(np.arange(partial.num_rows))).join(
        counts, [s.TOPIC, s.PARTITION], join_type="left outer", use_threads=False
    )
    joined = joined.sort_by("_row")
    columns: dict[str, Any] = {name: joined[name] for name in UNDER_REPLICATED_PARTIAL.names}
    columns["isr_shrinks"] = pc.fill_null(joined["shrinks_sum"], 0)
    columns["isr_expands"] = pc.fill_null(joined["expands_sum"], 0)
    return build_table(columns, s.TABLE_SCHEMAS[s.TABLE_UNDER_REPLICATED])


def cluster_health(leaders: pa.Table, seen: pa.Table, config: LagJobConfig, from_ms: int | None = None) -> pa.Table:
    """``cluster_health``: the SRE's health row over time, one row per bucket of ``health_bucket_ms``, from
    every broker's leader samples (``leader_samples_partial``) and partitions seen
    (``partitions_seen_partial``): partitions (known by then: a partition counts from its first record),
    led, under-replicated, under min ISR and offline (known but led by no one) partitions, and leaders
    (broker → partitions it led).

    A leader sample stands for the time until the partition's next leader sample, at most twice its
    leader's sampling interval (at least one bucket, at most ``gap_max_ms``): a leader that died stops
    standing for its partition one or two intervals later, so a partition nobody leads reads offline, not
    led by the dead broker. In a bucket a partition is under-replicated (under min ISR) when any leader
    sample standing for part of it says so, and led by the broker of its newest such sample.

    ``from_ms`` (a bucket start): only the buckets from there on; ``leaders`` must then hold every sample
    from ``from_ms - gap_max_ms`` on, and ``seen`` every partition."""
    schema = s.TABLE_SCHEMAS[s.TABLE_CLUSTER_HEALTH]
    bucket = config.health_bucket_ms
    if seen.num_rows == 0:
        return schema.empty_table()
    t, ts, first = _leader_order(leaders)
    n = t.num_rows
    last_of_partition = np.append(first[1:], True)
    next_ts = np.append(ts[1:], 0)
    interval, interval_valid = values_of(t[INTERVAL_MS])
    interval = np.where(interval_valid, interval, 0)
    cap = np.minimum(config.gap_max_ms, np.maximum(interval * 2, bucket))
    stands_for = np.where(last_of_partition, cap, np.minimum(next_ts - ts, cap))
    last_covered = ts + np.maximum(stands_for - 1, 0)
    first_bucket = _window_start(ts, bucket)
    covered = (_window_start(last_covered, bucket) - first_bucket) // bucket + 1
    covered = np.maximum(covered, 0)
    rows = np.repeat(np.arange(n), covered)
    offset = np.arange(len(rows)) - np.repeat(np.cumsum(covered) - covered, covered)
    bucket_start = first_bucket[rows] + offset * bucket
    ur, ur_valid = values_of(t[s.UNDER_REPLICATED], False, bool)
    umi, umi_valid = values_of(t[s.UNDER_MIN_ISR], False, bool)
    broker, _ = values_of(t[s.BROKER_ID])
    partition_no = np.cumsum(first) - 1
    # Per (bucket, partition): any sample under-replicated / under min ISR; led by the newest sample's broker
    # (rows of a partition are in (ts, broker) order, so the last of each group).
    order = np.lexsort((rows, partition_no[rows], bucket_start))
    rows, bucket_start = rows[order], bucket_start[order]
    group, starts, ends = group_first_last(group_starts(bucket_start, partition_no[rows]))
    groups = len(starts)
    any_ur = np.bincount(group, weights=(ur & ur_valid)[rows], minlength=groups) > 0
    any_umi = np.bincount(group, weights=(umi & umi_valid)[rows], minlength=groups) > 0
    leader = broker[rows[ends]]
    b = bucket_start[starts]
    # Every bucket of the span: from the first partition's first record to the newest partition record.
    first_ts, last_ts = seen["first_ts_ms"].to_numpy(), seen["last_ts_ms"].to_numpy()
    seen_keys = [codes_of(seen[s.PARTITION]), codes_of(seen[s.TOPIC])]
    _, seen_group, seen_starts = _grouped(seen_keys)
    seen_order = np.lexsort(tuple(seen_keys))
    partition_first = np.minimum.reduceat(first_ts[seen_order], seen_starts)
    span_from = _window_start(np.array([first_ts.min()]), bucket)[0]
    if from_ms is not None:
        span_from = max(span_from, from_ms)
    span_to = _window_start(np.array([last_ts.max()]), bucket)[0]
    buckets = np.arange(span_from, span_to + 1, bucket, dtype=np.int64)
    if len(buckets) == 0:
        return schema.empty_table()
    appeared = np.searchsorted(buckets, _window_start(partition_first, bucket))
    known = np.cumsum(np.bincount(appeared, minlength=len(buckets))[: len(buckets)]).astype(np.int64)
    # Per bucket: partitions led, under-replicated, under min ISR, and per leader.
    slot = np.searchsorted(buckets, b)
    inside = (slot < len(buckets)) & (buckets[np.minimum(slot, len(buckets) - 1)] == b)
    led = np.bincount(slot[inside], minlength=len(buckets)).astype(np.int64)
    ur_n = np.bincount(slot[inside], weights=any_ur[inside], minlength=len(buckets)).astype(np.int64)
    umi_n = np.bincount(slot[inside], weights=any_umi[inside], minlength=len(buckets)).astype(np.int64)
    pairs = np.lexsort((leader[inside], slot[inside]))
    ps, pl = slot[inside][pairs], leader[inside][pairs]
    pfirst = group_starts(ps, pl)
    pstarts = np.flatnonzero(pfirst)
    pcount = np.diff(np.append(pstarts, len(ps)))
    entries = np.bincount(ps[pstarts], minlength=len(buckets))
    offsets = np.concatenate(([0], np.cumsum(entries))).astype(np.int32)
    leaders_map = pa.MapArray.from_arrays(
        pa.array(offsets), pa.array(pl[pstarts], pa.int32()), pa.array(pcount.astype(np.int64))
    )
    return build_table(
        {
            "bucket_start_ms": buckets,
            "partitions": known,
            "led_partitions": led,
            "under_replicated_partitions": ur_n,
            "under_min_isr_partitions": umi_n,
            "offline_partitions": np.maximum(known - led, 0),
            "leaders": leaders_map,
        },
        schema,
    )
