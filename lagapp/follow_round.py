"""One ``--follow`` round computed with the batch job's tables (``lagapp.tables``), in the driver.

A round's rows (the tail carried from the last round and the micro-batch: about a minute of data,
whatever the history) are collected once through Arrow. Everything ``follow.FollowJob.merge`` writes is
computed from them with ``lagapp.tables``, the functions that compute the batch job's tables, and written
with pyarrow: no Spark job but the collect. The
rules are ``follow``'s (its module docstring): the facts of a row are final once every earlier row has
arrived, so

- the timed tables get the rows from the settled horizon of the last round (``since``) on;
- each per-key table is the merge of its settled partials (the rows before the new horizon ``until``)
  with the partial of the rows after it; a partial here is ``tables``' with a time range
  (``lo <= ts_ms < hi``), each row's facts computed over the whole round (its previous row may be
  older than ``lo``);
- the tail keeps what a later round needs (``tail_of``).

The rows are grouped by replica in time order here (``ordered``), not in the files' order: a round's
rows come from several files and the tail, and the stream has already dropped repeated records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from lagapp import schema as s
from lagapp import tables as tb
from lagapp.tables import LagJobConfig

#: The records' columns as the round reads them (``schema.LAG_JOB_SCHEMA``).
RECORDS = to_arrow_schema(s.LAG_JOB_SCHEMA)

PARTIAL_BROKER_RUNS = "broker_runs"
PARTIAL_FIRST_SEEN = "first_seen"

Merge = Mapping[str, tb.AggSpec]

#: Partials merged into the settled state: name → (key, how each other column merges, schema), with the
#: tables' merge specs (``tables.AggSpec``: "sum", "min", "max", ("max_by", ordering column)).
PARTIALS: dict[str, tuple[tuple[str, ...], Merge, pa.Schema]] = {
    s.TABLE_UNDER_REPLICATED: (
        tb.UNDER_REPLICATED_KEY,
        tb.UNDER_REPLICATED_MERGE,
        tb.UNDER_REPLICATED_PARTIAL,
    ),
    s.TABLE_ISR_CHANGES: (tb.ISR_CHANGES_KEY, tb.ISR_CHANGES_MERGE, tb.ISR_PARTIAL),
    s.TABLE_LEADER_TIMELINE: (tb.LEADER_TIMELINE_KEY, tb.LEADER_TIMELINE_MERGE, tb.TIMELINE_PARTIAL),
    PARTIAL_BROKER_RUNS: (tb.BROKER_RUNS_KEY, tb.BROKER_RUNS_MERGE, tb.RUNS_PARTIAL),
    PARTIAL_FIRST_SEEN: (tb.FIRST_SEEN_KEY, tb.FIRST_SEEN_MERGE, tb.SEEN_PARTIAL),
}


@dataclass
class RoundTables:
    """What a round writes: each timed table's rows from ``since`` on, the small tables whole, the settled
    partials and the merged broker runs (the state), and the tail."""

    timed: dict[str, pa.Table]
    whole: dict[str, pa.Table]
    settled: dict[str, pa.Table]
    runs: pa.Table
    tail: pa.Table


def conform(rows: pa.Table) -> pa.Table:
    """``rows`` (record columns) in ``RECORDS``' column order and types, without the rows that have no
    kind or ts_ms (``spark_app.read_records`` drops those too)."""
    rows = rows.select(RECORDS.names).cast(RECORDS)
    return rows.filter(pc.and_(pc.is_valid(rows[s.TS_MS]), pc.is_valid(rows[s.KIND])))


def ordered(rows: pa.Table) -> tb.Rows:
    """The rows grouped by replica in time order with ``tables.derive``'s columns (a record repeating its
    replica's previous ts_ms dropped: ``tables.in_replica_order``)."""
    t, first, _ = tb.in_replica_order(rows)
    return tb.derive(t, first)


def merge(partials: pa.Table, key: tuple[str, ...], how: Merge, schema: pa.Schema) -> pa.Table:
    """Partials of disjoint row sets merged into the partial of their union, a row per ``key``."""
    if partials.num_rows == 0:
        return schema.empty_table()
    codes = [tb.codes_of(partials[k]) for k in reversed(key)]
    by = [tb.codes_of(partials[spec[1]]) for spec in how.values() if isinstance(spec, tuple)]
    order = np.lexsort((*by, *codes))
    group, starts, ends = tb.group_first_last(tb.group_starts(*(c[order] for c in codes)))
    groups = len(starts)
    t = partials.take(pa.array(order))
    columns: dict[str, Any] = {k: t[k].take(pa.array(starts)) for k in key}
    big = np.iinfo(np.int64).max
    for column, spec in how.items():
        if isinstance(spec, tuple):  # max_by: the rows are in that column's order within a key
            columns[column] = t[column].take(pa.array(ends))
        elif pa.types.is_boolean(t[column].type):  # max of a boolean: any true
            flags, valid = tb.values_of(t[column], False, bool)
            columns[column] = tb.bool_max(flags, valid, group, groups)
        else:
            values, valid = tb.values_of(t[column])
            has = np.add.reduceat(valid.astype(np.int64), starts) > 0
            if spec == "sum":
                columns[column] = (np.add.reduceat(np.where(valid, values, 0), starts), has)
            elif spec == "min":
                columns[column] = (np.minimum.reduceat(np.where(valid, values, big), starts), has)
            else:
                columns[column] = (np.maximum.reduceat(np.where(valid, values, -big), starts), has)
    return tb.build_table(columns, schema)


def tail_of(r: tb.Rows, cut_ms: int, config: LagJobConfig) -> pa.Table:
    """The rows of ``r`` a later round needs when nothing before ``cut_ms`` can change (``follow``'s step 5):
    every row from ``cut_ms`` on; before it, the partition records that are the newest of each replica (and
    its newest with a role other than offline), of each partition's leader sequence and of each follower
    in the leaders' ISR lists, and each follower's samples in its last window plus the two before them."""
    t, ts, rep = r.t, r.ts, r.rep
    keep = ts >= cut_ms
    before = r.partition_row & ~keep

    def keep_last(rows: np.ndarray, *keys: np.ndarray) -> None:
        """Keep the last of ``rows`` (grouped by ``keys``, given per row of ``rows``) of each group."""
        if len(rows):
            keep[rows[np.append(tb.group_starts(*keys)[1:], True)]] = True

    role = t[s.ROLE]
    with_role = pc.fill_null(pc.not_equal(role, s.ROLE_OFFLINE), False).to_numpy(zero_copy_only=False)
    for rows in (np.flatnonzero(before), np.flatnonzero(before & with_role)):
        keep_last(rows, rep[rows])
    # A partition's leader sequence is ordered by (ts_ms, broker_id) across brokers.
    topic, partition = tb.codes_of(t[s.TOPIC]), tb.codes_of(t[s.PARTITION])
    broker, _ = tb.values_of(t[s.BROKER_ID])
    leading = np.flatnonzero(before & tb.equals(role, s.ROLE_LEADER))
    by_partition = leading[np.lexsort((broker[leading], ts[leading], partition[leading], topic[leading]))]
    keep_last(by_partition, topic[by_partition], partition[by_partition])
    # The newest leader row listing each follower.
    listing = leading[pc.is_valid(t[s.FOLLOWERS].take(pa.array(leading))).to_numpy(zero_copy_only=False)]
    lists = t[s.FOLLOWERS].take(pa.array(listing)).combine_chunks()
    row = listing[pc.list_parent_indices(lists).to_numpy()]
    follower, _ = tb.values_of(pc.list_flatten(lists).field(s.BROKER_ID))
    per_follower = np.lexsort((broker[row], ts[row], follower, partition[row], topic[row]))
    listed = row[per_follower]
    keep_last(listed, topic[listed], partition[listed], follower[per_follower])
    # Each follower's samples after (its newest − window), and the two newest before that.
    samples = np.flatnonzero(r.follower)
    group, _, ends = tb.group_first_last(tb.group_starts(rep[samples]))
    inside = ts[samples] > ts[samples][ends][group] - config.window_ms
    keep[samples[inside]] = True
    older = samples[~inside]
    group, _, ends = tb.group_first_last(tb.group_starts(rep[older]))
    keep[older[ends[group] - np.arange(len(older)) < 2]] = True
    return t.filter(pa.array(keep))


def compute(
    rows: pa.Table,
    settled_before: Mapping[str, pa.Table] | None,
    since: int | None,
    until: int,
    newest: int,
    config: LagJobConfig,
) -> RoundTables:
    """Every output of a round over ``rows`` (``conform``ed: the tail and the micro-batch), given the
    settled partials of the last round (None on the first) and the horizons (``follow.settled_horizon``)."""
    r = ordered(rows)
    leaders = tb.leader_samples_partial(r)
    isr = tb.replica_lag(r)

    def partial(name: str, lo: int | None, hi: int | None) -> pa.Table:
        if name == s.TABLE_UNDER_REPLICATED:
            return tb.under_replicated_partial(leaders, config, lo, hi)
        if name == s.TABLE_ISR_CHANGES:
            return tb.isr_changes_partial(isr, config, lo, hi)
        if name == s.TABLE_LEADER_TIMELINE:
            return tb.leader_timeline_partial(r, lo, hi)
        if name == PARTIAL_BROKER_RUNS:
            return tb.broker_runs_partial(r, lo, hi)
        return tb.partitions_seen_partial(r, lo, hi)

    settled: dict[str, pa.Table] = {}
    merged: dict[str, pa.Table] = {}
    for name, (key, how, schema) in PARTIALS.items():
        added = partial(name, since, until)
        if settled_before is not None:
            added = merge(pa.concat_tables([settled_before[name].cast(schema), added]), key, how, schema)
        settled[name] = added
        merged[name] = merge(pa.concat_tables([added, partial(name, until, None)]), key, how, schema)

    def from_since(table: pa.Table, column: str) -> pa.Table:
        return table if since is None else table.filter(pc.greater_equal(table[column], since))

    window = tb.WINDOW_START_MS
    timed = {
        s.TABLE_FOLLOWER_LAG: from_since(tb.follower_lag(r), s.TS_MS),
        s.TABLE_REPLICA_LAG: from_since(isr, s.TS_MS),
        s.TABLE_LAG_WINDOWS: from_since(tb.lag_windows(r, config), window),
        s.TABLE_BYTE_RATES: from_since(tb.byte_rates(r, config), window),
        s.TABLE_CLUSTER_HEALTH: tb.cluster_health(leaders, merged[PARTIAL_FIRST_SEEN], config, since),
        s.TABLE_BROKER_HEALTH: from_since(tb.broker_health(r), s.TS_MS),
    }
    changes = tb.isr_changes_of(merged[s.TABLE_ISR_CHANGES])
    statuses = tb.follower_status_partial(r, config)
    whole = {
        s.TABLE_UNDER_REPLICATED: tb.under_replicated_of(merged[s.TABLE_UNDER_REPLICATED], changes),
        s.TABLE_ISR_CHANGES: changes,
        s.TABLE_FOLLOWER_STATUS: tb.follower_status(statuses, config, newest),
        s.TABLE_LEADER_TIMELINE: tb.leader_timeline(merged[s.TABLE_LEADER_TIMELINE]),
    }
    tail = tail_of(r, until - config.gap_max_ms, config)
    return RoundTables(timed, whole, settled, merged[PARTIAL_BROKER_RUNS], tail)


def broker_runs(runs: pa.Table) -> list[tuple[Any, ...]]:
    """(broker_id, broker_start_ms, records, first_ts_ms, last_ts_ms) per broker run, as ``file_pass.broker_runs``
    orders them."""
    rows = [tuple(row.values()) for row in runs.select(tb.RUNS_PARTIAL.names).to_pylist()]
    return sorted(rows, key=lambda row: (row[0] is not None, row[0] or 0, row[3]))
