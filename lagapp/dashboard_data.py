"""What the page shows (``dashboard.DashboardData``), from the written Parquet tables with pyarrow and
numpy, in the driver: no Spark job.

How this works: the lag job (``lagapp.file_pass``, or a ``--follow`` round) leaves every table as a
folder of Parquet files. Each function here reads the columns its aggregate needs (``pyarrow.dataset``,
with the tables' schemas ``schema.TABLE_SCHEMAS``; the charted partitions' rows of ``follower_lag`` and
``replica_lag`` by a filter, then a semi join) and computes one piece of the page with pyarrow's
grouping and numpy: the partition summaries with the totals and the headline (``summary``), the worst
follower statuses (``worst_statuses``), byte rates of the busiest brokers (``byte_rates``), the cluster
health row, the event-loop lag and the metadata quorum as the brokers see it (``health``, ``loop_lag``,
``quorum``), the catch-up time of each broker restart (``restarts``), the charted partitions' lag series
(``lag``) and their leader changes (``leader_changes``). Orders are total: "worst first" and the
headline's partition break ties by topic and partition, series run in time order, and an empty aggregate
is ``None`` (a max over no values), as the page has always shown them. Sums of doubles (byte rates) add
in file order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lagapp import dashboard as d
from lagapp import schema as s

KEY = [s.TOPIC, s.PARTITION]


def broker_events(runs: Sequence[d.BrokerRun], newest_ts_ms: int, window_ms: int) -> list[d.TimelineEvent]:
    """Broker restarts (a new broker_start_ms) and the last sample before a broker went quiet.

    ``runs`` by broker, then first_ts_ms (``file_pass.broker_runs``).
    """
    events: list[d.TimelineEvent] = []
    for i, run in enumerate(runs):
        broker = run.broker_id
        first_of_broker = i == 0 or runs[i - 1].broker_id != broker
        last_of_broker = i == len(runs) - 1 or runs[i + 1].broker_id != broker
        if not first_of_broker:
            started = run.broker_start_ms or run.first_ts_ms
            events.append(d.TimelineEvent(started, f"broker {broker} restarted", "broker"))
        if not last_of_broker or run.last_ts_ms < newest_ts_ms - window_ms:
            events.append(d.TimelineEvent(run.last_ts_ms, f"broker {broker} down", "broker"))
    return events


def restarts_of_runs(runs: Sequence[d.BrokerRun], newest_ts_ms: int, window_ms: int) -> list[d.Restart]:
    """Each time a broker went down: a new run after a gap (restarted), or a last run that ended more than
    a window before the newest record (still down). ``runs`` by broker, then first_ts_ms."""
    out: list[d.Restart] = []
    for i, run in enumerate(runs):
        if run.broker_id is None:
            continue
        nxt = runs[i + 1] if i + 1 < len(runs) and runs[i + 1].broker_id == run.broker_id else None
        if nxt is not None:
            out.append(d.Restart(run.broker_id, run.last_ts_ms, nxt.broker_start_ms or nxt.first_ts_ms, nxt.last_ts_ms))
        elif run.last_ts_ms < newest_ts_ms - window_ms:
            out.append(d.Restart(run.broker_id, run.last_ts_ms, None))
    return sorted(out, key=lambda r: (r.down_ms, r.broker_id))


def chart_bucket_ms(first_ms: int, last_ms: int, step_ms: int) -> int:
    """The bucket a chart over [first_ms, last_ms] draws at most ``d.CHART_POINTS_MAX`` points with, never
    finer than ``step_ms``."""
    return max(step_ms, -(-(last_ms - first_ms) // d.CHART_POINTS_MAX))


def _none_first(value: Any) -> tuple[bool, Any]:
    return (value is not None, value)


def leader_change_events(changes: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], list[d.TimelineEvent]]:
    """Leader changes (``leader_timeline`` rows with a previous leader) as chart events per partition, in
    time order (then epoch; ties by partition and leader, so the order never depends on the rows' order)."""
    keys = ("first_seen_ms", s.LEADER_EPOCH, s.TOPIC, s.PARTITION, s.LEADER_ID)
    ordered = sorted(changes, key=lambda r: tuple(_none_first(r[k]) for k in keys))
    events: dict[tuple[str, int], list[d.TimelineEvent]] = {}
    for r in ordered:
        label = f"epoch {r[s.LEADER_EPOCH]}: leader {r[s.LEADER_ID]}"
        events.setdefault((r[s.TOPIC], r[s.PARTITION]), []).append(d.TimelineEvent(r["first_seen_ms"], label, "leader"))
    return events


def partition_summary(r: Mapping[str, Any]) -> d.PartitionSummary:
    """One row of the partitions table from a summary row (``partition_summaries``; nulls of counts and
    times as 0)."""
    return d.PartitionSummary(
        topic=r[s.TOPIC],
        partition=r[s.PARTITION],
        leader_id=r["leader_id"],
        leader_epoch=r["leader_epoch"],
        epoch_changes=r["epoch_changes"] or 0,
        lag_messages_max=r["lag_messages_max"],
        lag_ms_max=r["lag_ms_max"],
        status_counts={x: r[f"n_{x}"] or 0 for x in s.STATUSES},
        under_replicated_ms=r["under_replicated_ms"] or 0,
        isr_shrinks=r["isr_shrinks"] or 0,
        isr_expands=r["isr_expands"] or 0,
        under_min_isr_ms=r["under_min_isr_ms"] or 0,
    )


class Tables:
    """The written tables by name: ``read`` gives a table's columns (and rows by a filter)."""

    def __init__(self, paths: Mapping[str, str]) -> None:
        self._paths = paths

    def __contains__(self, name: str) -> bool:
        return name in self._paths

    def _dataset(self, name: str) -> ds.Dataset:
        # The known schema: a folder without files still reads (empty), and no footer is read for it.
        return ds.dataset(self._paths[name], format="parquet", schema=s.TABLE_SCHEMAS[name])

    def read(self, name: str, columns: Sequence[str] | None = None, where: ds.Expression | None = None) -> pa.Table:
        """The table's ``columns`` (all when None), its rows where ``where`` holds."""
        return self._dataset(name).to_table(columns=None if columns is None else list(columns), filter=where)


def _order(table: pa.Table, keys: Sequence[tuple[str, str]]) -> pa.Array:
    """The rows' order by ``keys`` ((column, "ascending" or "descending")): nulls first when ascending, last
    when descending (SQL's default); a stable sort, so ties keep the rows' order."""
    columns: dict[str, Any] = {}
    sort_keys = []
    for i, (name, how) in enumerate(keys):
        column = table[name]
        columns[f"_f{i}"] = pc.is_valid(column) if how == "ascending" else pc.is_null(column)
        columns[f"_v{i}"] = column
        sort_keys += [(f"_f{i}", "ascending"), (f"_v{i}", how)]
    return pc.sort_indices(pa.table(columns), sort_keys=sort_keys)


def _ascending(*names: str) -> list[tuple[str, str]]:
    return [(n, "ascending") for n in names]


def _max_of(table: pa.Table, keys: Sequence[str], columns: Mapping[str, str]) -> pa.Table:
    """Per ``keys``: the max of each column (null when all are null), named as ``columns`` maps them."""
    grouped = table.group_by(list(keys), use_threads=False).aggregate([(c, "max") for c in columns])
    names = {f"{c}_max": name for c, name in columns.items()}
    return grouped.rename_columns([names.get(c, c) for c in grouped.column_names])


def _severity(status: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A status's severity, for "worst first": 1 for STOP … len(STATUSES) for OK, 0 for another status,
    null for null."""
    index = pc.index_in(status, value_set=pa.array(s.STATUSES))
    found = pc.add(index, 1)
    return pc.if_else(pc.is_valid(status), pc.fill_null(found, 0), pa.scalar(None, pa.int32()))


def _full_join(left: pa.Table, right: pa.Table) -> pa.Table:
    return left.join(right, KEY, join_type="full outer", use_threads=False)


def partition_summaries(tables: Tables) -> pa.Table:
    """One row per partition of any of the tables: its leader (of the newest leader_timeline entry) and
    epoch, epoch changes, the max lag of either view (the leader's view sees followers that are down),
    the followers per status and the worst one, time under-replicated and under min ISR, ISR changes."""
    timeline = tables.read(s.TABLE_LEADER_TIMELINE, [*KEY, s.LEADER_ID, s.LEADER_EPOCH, "first_seen_ms"])
    # max_by(leader_id, (first_seen_ms, leader_epoch, leader_id)): the last of the partition in that order
    ordered = timeline.take(_order(timeline, _ascending(*KEY, "first_seen_ms", s.LEADER_EPOCH, s.LEADER_ID)))
    n = ordered.num_rows
    topic_codes = pc.dictionary_encode(ordered[s.TOPIC].combine_chunks()).indices.to_numpy(zero_copy_only=False)
    part = pc.fill_null(ordered[s.PARTITION], 0).to_numpy(zero_copy_only=False) if n else np.zeros(0)
    part_null = pc.is_null(ordered[s.PARTITION]).to_numpy(zero_copy_only=False) if n else np.zeros(0, bool)
    last = np.ones(n, dtype=bool)
    if n:
        last[:-1] = (topic_codes[1:] != topic_codes[:-1]) | (part[1:] != part[:-1]) | (part_null[1:] != part_null[:-1])
    ends = pa.array(np.flatnonzero(last))
    leaders = pa.table(
        {
            s.TOPIC: ordered[s.TOPIC].take(ends),
            s.PARTITION: ordered[s.PARTITION].take(ends),
            "leader_id": ordered[s.LEADER_ID].take(ends),
        }
    )
    counts = timeline.group_by(KEY, use_threads=False).aggregate([(s.LEADER_EPOCH, "max"), ([], "count_all")])
    counts = pa.table(
        {
            s.TOPIC: counts[s.TOPIC],
            s.PARTITION: counts[s.PARTITION],
            "leader_epoch": counts[f"{s.LEADER_EPOCH}_max"],
            "epoch_changes": pc.subtract(counts["count_all"], 1),
        }
    )
    leaders = leaders.join(counts, KEY, use_threads=False)
    lags = _max_of(
        tables.read(s.TABLE_LAG_WINDOWS, [*KEY, "lag_messages_max", "lag_ms_max"]),
        KEY,
        {"lag_messages_max": "lag_messages_max", "lag_ms_max": "lag_ms_max"},
    )
    if s.TABLE_REPLICA_LAG in tables:
        # The leader's view sees the followers that are down, which report nothing themselves.
        view = _max_of(
            tables.read(s.TABLE_REPLICA_LAG, [*KEY, s.LAG_MESSAGES, s.TIME_SINCE_CAUGHT_UP_MS]),
            KEY,
            {s.LAG_MESSAGES: "_leader_lag_messages", s.TIME_SINCE_CAUGHT_UP_MS: "_leader_lag_ms"},
        )
        both = _full_join(lags, view)
        lags = pa.table(
            {
                s.TOPIC: both[s.TOPIC],
                s.PARTITION: both[s.PARTITION],
                "lag_messages_max": pc.max_element_wise(both["lag_messages_max"], both["_leader_lag_messages"]),
                "lag_ms_max": pc.max_element_wise(both["lag_ms_max"], both["_leader_lag_ms"]),
            }
        )
    status = tables.read(s.TABLE_FOLLOWER_STATUS, [*KEY, "status"])
    columns: dict[str, Any] = {s.TOPIC: status[s.TOPIC], s.PARTITION: status[s.PARTITION]}
    for x in s.STATUSES:
        columns[f"n_{x}"] = pc.cast(pc.fill_null(pc.equal(status["status"], x), False), pa.int64())
    columns["worst"] = _severity(status["status"])
    per_status = (
        pa.table(columns)
        .group_by(KEY, use_threads=False)
        .aggregate([*((f"n_{x}", "sum") for x in s.STATUSES), ("worst", "min")])
    )
    per_status = per_status.rename_columns(
        [c.removesuffix("_sum").removesuffix("_min") for c in per_status.column_names]
    )
    under = tables.read(
        s.TABLE_UNDER_REPLICATED, [*KEY, "under_replicated_ms", "under_min_isr_ms", "isr_shrinks", "isr_expands"]
    )
    joined = _full_join(_full_join(_full_join(leaders, lags), per_status), under)
    worst = pc.fill_null(joined["worst"], len(s.STATUSES))
    return joined.set_column(joined.schema.get_field_index("worst"), "worst", worst)


def summary(tables: Tables) -> tuple[list[d.PartitionSummary], int, dict[str, int], d.Headline]:
    """The worst ``TABLE_ROWS_MAX`` partitions (worst status first, then the largest lag, then topic and
    partition), the partition count, the followers per status, and the headline: the worst values over
    every partition, each with the first partition (by topic and partition) that has it."""
    rows = partition_summaries(tables)
    total = rows.num_rows
    if total == 0:
        return [], 0, {}, d.Headline()
    counts = {}
    for x in s.STATUSES:
        n = pc.sum(rows[f"n_{x}"]).as_py()
        if n:
            counts[x] = n
    names = pc.binary_join_element_wise(rows[s.TOPIC], pc.cast(rows[s.PARTITION], pa.string()), "-")
    topic_order = _order(rows, _ascending(*KEY))
    rank = np.empty(total, dtype=np.int64)
    rank[topic_order.to_numpy()] = np.arange(total)
    headline: dict[str, Any] = {}
    for column, field, at_field in (
        ("lag_messages_max", "lag_messages", "lag_messages_at"),
        ("lag_ms_max", "lag_ms", "lag_ms_at"),
        ("under_replicated_ms", "under_replicated_ms", "under_replicated_at"),
        ("under_min_isr_ms", "under_min_isr_ms", "under_min_isr_at"),
    ):
        values = rows[column]
        top = pc.max(values).as_py()
        headline[field] = top
        at = ""
        if top is not None:
            # The first partition (by topic, partition) with the largest value.
            hits = np.flatnonzero(pc.fill_null(pc.equal(values, top), False).to_numpy(zero_copy_only=False))
            at = names[int(hits[np.argmin(rank[hits])])].as_py() or ""
        headline[at_field] = at
    order = _order(rows, [("worst", "ascending"), ("lag_messages_max", "descending"), *_ascending(*KEY)])
    top_rows = rows.take(order[: d.TABLE_ROWS_MAX]).to_pylist()
    summaries = [partition_summary(r) for r in top_rows]
    return summaries, total, counts, d.Headline(**headline)


def worst_statuses(tables: Tables) -> list[dict[str, Any]]:
    """The ``TABLE_ROWS_MAX`` worst followers (severity, then the largest last lag, then topic, partition
    and follower), every column."""
    status = tables.read(s.TABLE_FOLLOWER_STATUS)
    keys = status.append_column("_severity", _severity(status["status"]))
    order = _order(
        keys,
        [("_severity", "ascending"), ("lag_messages_last", "descending"), *_ascending(*KEY, "follower_id")],
    )
    rows: list[dict[str, Any]] = status.take(order[: d.TABLE_ROWS_MAX]).to_pylist()
    return rows


def byte_rates(tables: Tables) -> list[d.BrokerRates]:
    """Per broker and window, the sum of the byte rates over its partitions, of the
    ``BYTE_RATE_BROKERS_MAX`` brokers with the most bytes."""
    names = [f"{n}_bytes_per_s" for n in d.RATE_NAMES]
    rates = tables.read(s.TABLE_BYTE_RATES, [s.BROKER_ID, "window_start_ms", *names])
    per_window = rates.group_by([s.BROKER_ID, "window_start_ms"], use_threads=False).aggregate(
        [(n, "sum") for n in names]
    )
    sums = [per_window[f"{n}_sum"] for n in names]
    window_total = pa.scalar(0.0)
    for one in sums:
        window_total = pc.add(window_total, one)
    totals = (
        pa.table({s.BROKER_ID: per_window[s.BROKER_ID], "total": window_total})
        .group_by([s.BROKER_ID], use_threads=False)
        .aggregate([("total", "sum")])
    )
    order = _order(totals, [("total_sum", "descending"), (s.BROKER_ID, "ascending")])
    busiest = totals.take(order[: d.BYTE_RATE_BROKERS_MAX])[s.BROKER_ID]
    keep = pc.is_in(per_window[s.BROKER_ID], value_set=pc.drop_null(busiest.combine_chunks()))
    rows = per_window.filter(keep)
    rows = rows.take(_order(rows, _ascending(s.BROKER_ID, "window_start_ms")))
    brokers = rows[s.BROKER_ID].to_pylist()
    starts = rows["window_start_ms"].to_pylist()
    values = {n: [0.0 if v is None else v for v in rows[f"{n}_bytes_per_s_sum"].to_pylist()] for n in d.RATE_NAMES}
    out: dict[int, d.BrokerRates] = {}
    for i, broker in enumerate(brokers):
        b = out.setdefault(broker, d.BrokerRates(broker, [], {n: [] for n in d.RATE_NAMES}))
        b.window_start_ms.append(starts[i])
        for n in d.RATE_NAMES:
            b.rates_bytes_per_s[n].append(values[n][i])
    return [out[k] for k in sorted(out)]


def _bucket_start(ts: pa.ChunkedArray | pa.Array, bucket_ms: int) -> pa.Array:
    column = ts.combine_chunks() if isinstance(ts, pa.ChunkedArray) else ts
    values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    start = values - np.mod(values, bucket_ms)
    return pa.array(start, type=pa.int64(), mask=pc.is_null(column).to_numpy(zero_copy_only=False))


def health(tables: Tables, first_ms: int, last_ms: int, step_ms: int) -> d.HealthSeries:
    """``cluster_health`` re-bucketed to at most ``CHART_POINTS_MAX`` points: the max of each count, and
    per broker the most partitions it led in a bucket (0 where it led none)."""
    bucket_ms = chart_bucket_ms(first_ms, last_ms, step_ms)
    columns = ["bucket_start_ms", "under_replicated_partitions", "under_min_isr_partitions", "offline_partitions"]
    rows = tables.read(s.TABLE_CLUSTER_HEALTH, [*columns, "leaders"])
    b = _bucket_start(rows["bucket_start_ms"], bucket_ms)
    counts = (
        pa.table({"_b": b, **{c: rows[c] for c in columns[1:]}})
        .group_by(["_b"], use_threads=False)
        .aggregate([(c, "max") for c in columns[1:]])
    )
    counts = counts.take(_order(counts, _ascending("_b")))
    series = d.HealthSeries()
    series.bucket_start_ms = counts["_b"].to_pylist()
    series.under_replicated = counts["under_replicated_partitions_max"].to_pylist()
    series.under_min_isr = counts["under_min_isr_partitions_max"].to_pylist()
    series.offline = counts["offline_partitions_max"].to_pylist()
    # leaders: per bucket and broker, the largest count of any row (0 when the broker led nothing there)
    leaders = rows["leaders"].combine_chunks()
    offsets = leaders.offsets.to_numpy()
    span = int(offsets[-1] - offsets[0]) if len(offsets) else 0
    if span:
        # the maps' entries, map after map (``keys`` and ``items`` may hold the entries outside a slice too)
        keys, items = leaders.keys, leaders.items
        if len(keys) > span:
            keys, items = keys.slice(offsets[0], span), items.slice(offsets[0], span)
        parents = pa.array(np.repeat(np.arange(len(leaders)), np.diff(offsets)))
        entries = (
            pa.table({"_b": b.take(parents), "broker": keys, "n": items})
            .group_by(["_b", "broker"], use_threads=False)
            .aggregate([("n", "max")])
        )
        slot = {t: i for i, t in enumerate(series.bucket_start_ms)}
        for broker in sorted(set(entries["broker"].to_pylist())):
            series.leaders[broker] = [0] * len(slot)
        for bucket, broker, n in zip(
            entries["_b"].to_pylist(), entries["broker"].to_pylist(), entries["n_max"].to_pylist(), strict=True
        ):
            series.leaders[broker][slot[bucket]] = max(0, n)
    return series


def loop_lag(tables: Tables, first_ms: int, last_ms: int, step_ms: int) -> dict[int, tuple[list[int], list[float]]]:
    """``broker_health`` per broker, re-bucketed to at most ``CHART_POINTS_MAX`` points: the largest
    event-loop wait in each bucket."""
    bucket_ms = chart_bucket_ms(first_ms, last_ms, step_ms)
    rows = tables.read(
        s.TABLE_BROKER_HEALTH, [s.BROKER_ID, s.TS_MS, "loop_lag_max_ms"], ds.field("loop_lag_max_ms").is_valid()
    )
    grouped = (
        pa.table(
            {
                s.BROKER_ID: rows[s.BROKER_ID],
                "_b": _bucket_start(rows[s.TS_MS], bucket_ms),
                "lag": rows["loop_lag_max_ms"],
            }
        )
        .group_by([s.BROKER_ID, "_b"], use_threads=False)
        .aggregate([("lag", "max")])
    )
    grouped = grouped.take(_order(grouped, _ascending(s.BROKER_ID, "_b")))
    out: dict[int, tuple[list[int], list[float]]] = {}
    for broker, bucket, lag in zip(
        grouped[s.BROKER_ID].to_pylist(), grouped["_b"].to_pylist(), grouped["lag_max"].to_pylist(), strict=True
    ):
        xs, ys = out.setdefault(broker, ([], []))
        xs.append(bucket)
        ys.append(lag)
    return out


def quorum(tables: Tables, first_ms: int, last_ms: int, step_ms: int) -> d.QuorumSeries:
    """The metadata quorum as the brokers follow it (``broker_health``'s metadata columns), re-bucketed to at
    most ``CHART_POINTS_MAX`` points: per bucket the highest epoch in which a broker saw a quorum leader
    and that leader (the active controller; of two brokers in one epoch, the larger id, though Raft gives
    an epoch one leader), or, where no broker saw one, the highest epoch they reported; and per broker
    the largest metadata lag in the bucket, in records and in ms. Records without the quorum (an older
    broker, one that follows no quorum) are not read."""
    bucket_ms = chart_bucket_ms(first_ms, last_ms, step_ms)
    columns = ["metadata_leader_id", "metadata_leader_epoch", "metadata_lag_records", "metadata_lag_ms"]
    rows = tables.read(s.TABLE_BROKER_HEALTH, [s.BROKER_ID, s.TS_MS, *columns], ds.field(columns[0]).is_valid())
    series = d.QuorumSeries()
    if rows.num_rows == 0:
        return series
    b = _bucket_start(rows[s.TS_MS], bucket_ms).to_numpy(zero_copy_only=False)
    leader = rows[columns[0]].to_numpy().astype(np.int64)
    epoch, epoch_valid = (
        pc.fill_null(rows[columns[1]], -1).to_numpy(zero_copy_only=False).astype(np.int64),
        pc.is_valid(rows[columns[1]]).to_numpy(zero_copy_only=False),
    )
    buckets = np.unique(b)
    slot = np.searchsorted(buckets, b)
    led = (leader >= 0) & epoch_valid
    # Per bucket, the last row in (bucket, saw a leader, epoch, leader) order: the highest epoch with a
    # leader when any broker saw one, else the highest epoch reported without one.
    order = np.lexsort((leader, epoch, led, slot))
    last = order[np.append(slot[order][1:] != slot[order][:-1], True)]
    series.bucket_start_ms = buckets.tolist()
    for row in last:
        seen = bool(led[row])
        shown = int(epoch[row]) if epoch_valid[row] else None
        series.leader_epoch.append(shown if seen else None)
        series.leader_id.append(int(leader[row]) if seen else None)
        series.no_leader_epoch.append(None if seen else shown)
    lagging = (
        pa.table(
            {
                s.BROKER_ID: rows[s.BROKER_ID],
                "_b": pa.array(b),
                "records": rows[columns[2]],
                "ms": rows[columns[3]],
            }
        )
        .filter(pc.is_valid(rows[columns[2]]))
        .group_by([s.BROKER_ID, "_b"], use_threads=False)
        .aggregate([("records", "max"), ("ms", "max")])
    )
    lagging = lagging.take(_order(lagging, _ascending(s.BROKER_ID, "_b")))
    for broker, bucket, records, ms in zip(
        lagging[s.BROKER_ID].to_pylist(),
        lagging["_b"].to_pylist(),
        lagging["records_max"].to_pylist(),
        lagging["ms_max"].to_pylist(),
        strict=True,
    ):
        one = series.metadata_lag.setdefault(broker, d.MetadataLag())
        one.bucket_start_ms.append(bucket)
        one.records.append(records)
        one.ms.append(ms)
    return series


def restarts(tables: Tables, runs: Sequence[d.BrokerRun], newest_ts_ms: int, window_ms: int) -> list[d.Restart]:
    """Each broker restart (``restarts_of_runs``) with its catch-up time: from the leaders' view of the
    restarted broker (``replica_lag``) between its last record before it went down and its last record
    after the restart, the partitions whose ISR it was out of, and for each the first sample back in after
    its last sample out; the catch-up time runs from the restart to the last of these (None while any is
    still out, or when it was out of none)."""
    found = restarts_of_runs(runs, newest_ts_ms, window_ms)
    back = [r for r in found if r.restart_ms is not None]
    if not back:
        return found
    brokers = pa.array(sorted({r.broker_id for r in back}), pa.int32())
    rows = tables.read(
        s.TABLE_REPLICA_LAG,
        [*KEY, "follower_id", s.TS_MS, s.IN_SYNC],
        ds.field("follower_id").isin(brokers),
    )
    follower = pc.fill_null(rows["follower_id"], -1).to_numpy(zero_copy_only=False)
    ts_valid = pc.is_valid(rows[s.TS_MS]).to_numpy(zero_copy_only=False)
    ts = pc.fill_null(rows[s.TS_MS], 0).to_numpy(zero_copy_only=False)
    out_of_sync = pc.fill_null(pc.invert(rows[s.IN_SYNC]), False).to_numpy(zero_copy_only=False)
    in_sync = pc.fill_null(rows[s.IN_SYNC], False).to_numpy(zero_copy_only=False)
    result = []
    for r in found:
        if r.restart_ms is None:
            result.append(r)
            continue
        until = r.until_ms or newest_ts_ms
        mine = (follower == r.broker_id) & ts_valid & (ts >= r.down_ms) & (ts <= until)
        idx = np.flatnonzero(mine)
        part = rows.select(KEY).take(pa.array(idx))
        t, out_flag, in_flag = ts[idx], out_of_sync[idx], in_sync[idx]
        groups = part.append_column("_row", pa.array(np.arange(len(idx)))).group_by(KEY, use_threads=False)
        listed = groups.aggregate([("_row", "list")])["_row_list"].to_pylist()
        partitions_out = behind = 0
        last_back: int | None = None
        for members in listed:
            m = np.asarray(members, dtype=np.int64)
            outs = t[m][out_flag[m]]
            if len(outs) == 0:
                continue
            partitions_out += 1
            last_out = outs.max()
            returns = t[m][in_flag[m] & (t[m] > last_out)]
            if len(returns) == 0:
                behind += 1
            else:
                first_back = int(returns.min())
                last_back = first_back if last_back is None else max(last_back, first_back)
        caught_up = None
        if partitions_out > 0 and behind == 0 and last_back is not None:
            caught_up = last_back - r.restart_ms
        result.append(d.Restart(r.broker_id, r.down_ms, r.restart_ms, r.until_ms, partitions_out, behind, caught_up))
    return result


def _partitions_filter(charted: Sequence[tuple[str, int]]) -> tuple[ds.Expression, pa.Table]:
    """A filter the Parquet reader applies (topics and partition numbers of the charted partitions: a
    superset) and the exact pairs, for a semi join."""
    chosen = pa.table(
        {
            s.TOPIC: pa.array([k[0] for k in charted], pa.string()),
            s.PARTITION: pa.array([k[1] for k in charted], pa.int32()),
        }
    )
    where = ds.field(s.TOPIC).isin(pc.unique(chosen[s.TOPIC])) & ds.field(s.PARTITION).isin(
        pc.unique(chosen[s.PARTITION])
    )
    return where, chosen


def _series_rows(
    tables: Tables, name: str, lag_ms: str, where: ds.Expression, chosen: pa.Table, bucket_ms: int, view: int
) -> pa.Table:
    rows = tables.read(name, [*KEY, "follower_id", s.TS_MS, s.LAG_MESSAGES, lag_ms], where)
    rows = rows.join(chosen, KEY, join_type="left semi", use_threads=False)
    grouped = (
        pa.table(
            {
                s.TOPIC: rows[s.TOPIC],
                s.PARTITION: rows[s.PARTITION],
                "follower_id": rows["follower_id"],
                "bucket_ms": _bucket_start(rows[s.TS_MS], bucket_ms),
                "lag_messages": rows[s.LAG_MESSAGES],
                "lag_ms": rows[lag_ms],
            }
        )
        .group_by([*KEY, "follower_id", "bucket_ms"], use_threads=False)
        .aggregate([("lag_messages", "max"), ("lag_ms", "max")])
    )
    return grouped.append_column("view", pa.array(np.full(grouped.num_rows, view, dtype=np.int8)))


def lag(
    tables: Tables, charted: Sequence[tuple[str, int]], bucket_ms: int
) -> dict[tuple[str, int], list[d.FollowerSeries]]:
    """Both views' lag of the charted partitions, the max of each bucket of ``bucket_ms``, per partition by
    follower, the leader's view (``replica_lag``) before the follower's own (``follower_lag``)."""
    where, chosen = _partitions_filter(charted)
    parts = [_series_rows(tables, s.TABLE_FOLLOWER_LAG, s.LAG_MS, where, chosen, bucket_ms, 1)]
    if s.TABLE_REPLICA_LAG in tables:
        parts.append(_series_rows(tables, s.TABLE_REPLICA_LAG, s.TIME_SINCE_CAUGHT_UP_MS, where, chosen, bucket_ms, 0))
    rows = pa.concat_tables(parts)
    rows = rows.take(_order(rows, _ascending(*KEY, "follower_id", "view", "bucket_ms")))
    topics, partitions = rows[s.TOPIC].to_pylist(), rows[s.PARTITION].to_pylist()
    followers, views = rows["follower_id"].to_pylist(), rows["view"].to_pylist()
    buckets = rows["bucket_ms"].to_pylist()
    lag_messages, lag_ms = rows["lag_messages_max"].to_pylist(), rows["lag_ms_max"].to_pylist()
    out: dict[tuple[str, int], list[d.FollowerSeries]] = {}
    one: d.FollowerSeries | None = None
    previous: tuple[Any, ...] | None = None
    for i in range(rows.num_rows):
        key = (topics[i], partitions[i], followers[i], views[i])
        if key != previous:
            one = d.FollowerSeries(followers[i], [], [], [], "follower" if views[i] else "leader")
            out.setdefault((topics[i], partitions[i]), []).append(one)
            previous = key
        assert one is not None
        one.ts_ms.append(buckets[i])
        one.lag_messages.append(lag_messages[i])
        one.lag_ms.append(lag_ms[i])
    return out


def leader_changes(tables: Tables, charted: Sequence[tuple[str, int]]) -> dict[tuple[str, int], list[d.TimelineEvent]]:
    """The charted partitions' leader changes (``leader_timeline`` entries with a previous leader), in time
    order."""
    where, chosen = _partitions_filter(charted)
    columns = [*KEY, s.LEADER_ID, s.LEADER_EPOCH, "first_seen_ms", "previous_leader_id"]
    rows = tables.read(s.TABLE_LEADER_TIMELINE, columns, where & ds.field("previous_leader_id").is_valid())
    rows = rows.join(chosen, KEY, join_type="left semi", use_threads=False).to_pylist()
    return leader_change_events(rows)


def collect_dashboard_data(
    title: str,
    paths: Mapping[str, str],
    window_ms: int,
    runs: Sequence[d.BrokerRun],
    chart_partitions_max: int = d.CHART_PARTITIONS_MAX,
    chart_more_max: int = d.CHART_MORE_MAX,
    health_bucket_ms: int = 1000,
    faults: Sequence[d.TimelineEvent] = (),
) -> d.DashboardData:
    """What the page shows, from the tables written at ``paths``. ``runs``: the broker runs of the records
    the tables came from (the record count, the time span, broker restarts); ``faults``: chaos fault
    windows to shade. Never reads a whole large table: the charted partitions' rows by a filter, every other
    aggregate over the small tables."""
    tables = Tables(paths)
    records = sum(run.records for run in runs)
    first = min((run.first_ts_ms for run in runs), default=None)
    last = max((run.last_ts_ms for run in runs), default=None)
    summaries, partitions_total, status_counts, headline = summary(tables)
    data = d.DashboardData(
        title=title,
        records=records,
        first_ts_ms=first,
        last_ts_ms=last,
        window_ms=window_ms,
        partitions_total=partitions_total,
        summary=summaries,
        charted_eager=chart_partitions_max,
    )
    if partitions_total:
        data.status_counts = status_counts
        data.followers_total = sum(status_counts.values())
        data.headline = headline
    charted = [(p.topic, p.partition) for p in summaries[: chart_partitions_max + chart_more_max]]
    if records and charted and first is not None and last is not None:
        bucket_ms = chart_bucket_ms(first, last, d.CHART_BUCKET_MIN_MS)
        series = lag(tables, charted, bucket_ms)
        data.lag = {key: series[key] for key in charted if key in series}  # worst first, as in the table
        data.events = leader_changes(tables, charted)
    if records and last is not None:
        data.broker_events = broker_events(runs, last, window_ms)
    data.broker_events = sorted([*data.broker_events, *faults], key=lambda e: e.ts_ms)
    data.byte_rates = byte_rates(tables)
    data.statuses = worst_statuses(tables)
    if records and first is not None and last is not None:
        if s.TABLE_CLUSTER_HEALTH in tables:
            data.health = health(tables, first, last, health_bucket_ms)
            if s.TABLE_BROKER_HEALTH in tables:
                data.health.loop_lag_ms = loop_lag(tables, first, last, health_bucket_ms)
                data.health.quorum = quorum(tables, first, last, health_bucket_ms)
        if s.TABLE_REPLICA_LAG in tables:
            data.restarts = restarts(tables, runs, last, window_ms)
    return data
