"""The page's aggregates (``dashboard.collect_dashboard_data``) from the written Parquet tables with pyarrow
and numpy, in the driver, without Spark: the per-broker file pass's page.

How this works: the file pass (``lagapp.file_pass``) leaves every table as a folder of a few Parquet
files. Each function here reads the columns its aggregate needs (``pyarrow.dataset``; the charted
partitions' rows of ``follower_lag`` and ``replica_lag`` by a filter, then a semi join) and computes with
pyarrow's grouping and numpy what its Spark counterpart in ``dashboard`` computes, to the same
``DashboardData``: the same rows, order, ``None`` where Spark gives null, and the same tie-breaks
(``dashboard``'s queries order ties by topic and partition). The Spark functions stay for the sorted path
and ``--follow``, whose tables live in Spark's cache. A test compares the two on the same tables, field
for field. Sums of doubles (byte rates) add in file order; Spark adds each task's partial sums, so a
non-integral rate may differ from Spark's in the last bit.

One function per piece of the page, as in ``dashboard``: the partition summaries with the totals and the
headline (``summary``), the worst follower statuses (``worst_statuses``), byte rates of the busiest
brokers (``byte_rates``), the cluster health row and the event-loop lag (``health``, ``loop_lag``), the
catch-up time of each broker restart (``restarts``), the charted partitions' lag series (``lag``) and
their leader changes (``leader_changes``).
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


class Tables:
    """The written tables by name: ``read`` gives a table's columns (and rows by a filter)."""

    def __init__(self, paths: Mapping[str, str], schemas: Mapping[str, pa.Schema] | None = None) -> None:
        self._paths = paths
        self._schemas = schemas or {}

    def __contains__(self, name: str) -> bool:
        return name in self._paths

    def _dataset(self, name: str) -> ds.Dataset:
        return ds.dataset(self._paths[name], format="parquet", schema=self._schemas.get(name))

    def read(self, name: str, columns: Sequence[str] | None = None, where: ds.Expression | None = None) -> pa.Table:
        """The table's ``columns`` (all when None), its rows where ``where`` holds."""
        return self._dataset(name).to_table(columns=None if columns is None else list(columns), filter=where)


def _order(table: pa.Table, keys: Sequence[tuple[str, str]]) -> pa.Array:
    """The rows' order under Spark's ``orderBy`` of ``keys`` ((column, "ascending" or "descending")):
    nulls first when ascending, last when descending; a stable sort, so ties keep the rows' order."""
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
    """``dashboard._severity``: 1 for STOP … len(STATUSES) for OK, 0 for another status, null for null."""
    index = pc.index_in(status, value_set=pa.array(s.STATUSES))
    found = pc.add(index, 1)
    return pc.if_else(pc.is_valid(status), pc.fill_null(found, 0), pa.scalar(None, pa.int32()))


def _full_join(left: pa.Table, right: pa.Table) -> pa.Table:
    return left.join(right, KEY, join_type="full outer", use_threads=False)


def partition_summaries(tables: Tables) -> pa.Table:
    """``dashboard._partition_summaries``: one row per partition of any of the tables."""
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
    """``dashboard._summary_rows`` and what ``collect_dashboard_data`` makes of them: the worst
    ``TABLE_ROWS_MAX`` partitions, the partition count, the followers per status, the headline."""
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
    summaries = [d.partition_summary(r) for r in top_rows]
    return summaries, total, counts, d.Headline(**headline)


def worst_statuses(tables: Tables) -> list[dict[str, Any]]:
    """``dashboard._worst_statuses``: the ``TABLE_ROWS_MAX`` worst followers, every column."""
    status = tables.read(s.TABLE_FOLLOWER_STATUS)
    keys = status.append_column("_severity", _severity(status["status"]))
    order = _order(
        keys,
        [("_severity", "ascending"), ("lag_messages_last", "descending"), *_ascending(*KEY, "follower_id")],
    )
    rows: list[dict[str, Any]] = status.take(order[: d.TABLE_ROWS_MAX]).to_pylist()
    return rows


def byte_rates(tables: Tables) -> list[d.BrokerRates]:
    """``dashboard._collect_byte_rates``: per broker and window, the sum over its partitions, of the
    ``BYTE_RATE_BROKERS_MAX`` brokers with the most bytes."""
    names = [f"{n}_bytes_per_s" for n in d._RATE_NAMES]
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
    values = {n: [0.0 if v is None else v for v in rows[f"{n}_bytes_per_s_sum"].to_pylist()] for n in d._RATE_NAMES}
    out: dict[int, d.BrokerRates] = {}
    for i, broker in enumerate(brokers):
        b = out.setdefault(broker, d.BrokerRates(broker, [], {n: [] for n in d._RATE_NAMES}))
        b.window_start_ms.append(starts[i])
        for n in d._RATE_NAMES:
            b.rates_bytes_per_s[n].append(values[n][i])
    return [out[k] for k in sorted(out)]


def _bucket_start(ts: pa.ChunkedArray | pa.Array, bucket_ms: int) -> pa.Array:
    column = ts.combine_chunks() if isinstance(ts, pa.ChunkedArray) else ts
    values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    start = values - np.mod(values, bucket_ms)
    return pa.array(start, type=pa.int64(), mask=pc.is_null(column).to_numpy(zero_copy_only=False))


def health(tables: Tables, first_ms: int, last_ms: int, step_ms: int) -> d.HealthSeries:
    """``dashboard._collect_health``: ``cluster_health`` re-bucketed, the max of each count."""
    bucket_ms = d.chart_bucket_ms(first_ms, last_ms, step_ms)
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
    """``dashboard._collect_loop_lag``: per broker, the largest event-loop wait in each bucket."""
    bucket_ms = d.chart_bucket_ms(first_ms, last_ms, step_ms)
    rows = tables.read(s.TABLE_BROKER_HEALTH, [s.BROKER_ID, s.TS_MS, "loop_lag_max_ms"])
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


def restarts(tables: Tables, runs: Sequence[d.BrokerRun], newest_ts_ms: int, window_ms: int) -> list[d.Restart]:
    """``dashboard._collect_restarts``: each restart's catch-up time (``lag_job.catch_up_times``) from the
    leaders' view of the restarted broker (``replica_lag``)."""
    found = d.restarts_of_runs(runs, newest_ts_ms, window_ms)
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
    """``dashboard._collect_lag``: both views' bucketed series of the charted partitions, per partition by
    follower, the leader's view first."""
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
    """``dashboard._collect_leader_changes``: the charted partitions' leader changes, in time order."""
    where, chosen = _partitions_filter(charted)
    columns = [*KEY, s.LEADER_ID, s.LEADER_EPOCH, "first_seen_ms", "previous_leader_id"]
    rows = tables.read(s.TABLE_LEADER_TIMELINE, columns, where & ds.field("previous_leader_id").is_valid())
    rows = rows.join(chosen, KEY, join_type="left semi", use_threads=False).to_pylist()
    return d.leader_change_events(rows)


def collect_dashboard_data(
    title: str,
    paths: Mapping[str, str],
    window_ms: int,
    runs: Sequence[d.BrokerRun],
    schemas: Mapping[str, pa.Schema] | None = None,
    chart_partitions_max: int = d.CHART_PARTITIONS_MAX,
    chart_more_max: int = d.CHART_MORE_MAX,
    health_bucket_ms: int = 1000,
    faults: Sequence[d.TimelineEvent] = (),
) -> d.DashboardData:
    """``dashboard.collect_dashboard_data`` over the tables written at ``paths`` (``schemas``: their Arrow
    schemas, for a folder without files)."""
    tables = Tables(paths, schemas)
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
        bucket_ms = d.chart_bucket_ms(first, last, d.CHART_BUCKET_MIN_MS)
        series = lag(tables, charted, bucket_ms)
        data.lag = {key: series[key] for key in charted if key in series}  # worst first, as in the table
        data.events = leader_changes(tables, charted)
    if records and last is not None:
        data.broker_events = d.broker_events(runs, last, window_ms)
    data.broker_events = sorted([*data.broker_events, *faults], key=lambda e: e.ts_ms)
    data.byte_rates = byte_rates(tables)
    data.statuses = worst_statuses(tables)
    if records and first is not None and last is not None:
        if s.TABLE_CLUSTER_HEALTH in tables:
            data.health = health(tables, first, last, health_bucket_ms)
            if s.TABLE_BROKER_HEALTH in tables:
                data.health.loop_lag_ms = loop_lag(tables, first, last, health_bucket_ms)
        if s.TABLE_REPLICA_LAG in tables:
            data.restarts = restarts(tables, runs, last, window_ms)
    return data
