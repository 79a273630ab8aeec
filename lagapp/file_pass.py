"""The lag job's tables from each broker's files read in order: no shuffle, no sort, no rows back in Spark.

How this works: a broker writes its own samples, in time order, to its files (``broker-<id>-<first
ts_ms>.jsonl``, then ``_active/broker-<id>.jsonl``). So every sample of a replica (topic, partition,
broker_id, kind) is in the files of its broker, and in those files' order. ``run`` starts a few Spark
tasks per core (``mapInArrow`` over the list of brokers), each taking a run of brokers. For each broker,
the task parses its files with pyarrow's JSON reader (the job's fields only), groups the rows by replica
(a stable order of the row numbers, which keeps each replica's samples in file order), checks that each
replica's ``ts_ms`` never goes back, and computes with numpy what ``lag_job.replica_samples`` derives
(counter deltas, interval, incarnation start, follower sample, role at the newest record). From those
rows it computes, still in the task, every table or partial that one broker's rows decide:

- written as Parquet by the task (``part-<task>.parquet`` of the table's folder, a row group per
  broker): ``follower_lag``, ``replica_lag`` and ``broker_health`` (filters of the rows),
  ``lag_windows`` (per follower and window) and ``byte_rates`` (per replica and window): a replica's
  rows are consecutive and in time order, so each group is a run of rows;
- written as small Arrow files for the driver (``_partials``): the follower status of each follower
  but for STOP (which compares with the newest record of any broker), the ``leader_timeline``
  counts per (topic, partition, epoch, leader), the broker runs, each partition's first and last
  ``ts_ms``, and the leader samples (role leader: a third of the records in a three-replica cluster).

Only task statistics go back through Spark. The driver (``finish``) then reads the partials with
pyarrow and computes with numpy what crosses brokers: ``follower_status`` (STOP from the newest
record), ``leader_timeline`` (the counts merged, each entry's previous one), and the sequences of a
partition's leader samples, which move from broker to broker with the leadership: ``under_replicated``
and ``cluster_health`` from the leader samples, ``isr_changes`` from ``replica_lag`` (the leaders' view
of each follower, already written). Each table has the columns and types of the sorted path's
(``lag_job.tables_of_samples``), taken from Spark's plan of it on an empty frame; the tests compare
every table row for row. Rounding follows Spark's: ``byte_rates`` rounds a share half up, not to even.

Everything is built under ``<out>/_file_pass`` and each table folder renamed into place at the end, so
a run that falls back leaves nothing behind. The pass cannot be used, and ``run`` returns None for the
caller to take the sorted path, when a file's name names no broker, or a record's ``broker_id`` is not
its file's broker (``FilePassStats.foreign_records``): then a replica's samples may be in files of
other brokers. Out of order is handled, not a fallback: a file in which some replica's ``ts_ms`` goes
back (a wall-clock step) is sorted alone, by replica and ``ts_ms``; if a replica's samples go back
across two files, the broker's rows are sorted (``FilePassStats.files_sorted`` counts either).

Lines pyarrow cannot parse (a line cut by a crash) are dropped, as the Spark reader's DROPMALFORMED
drops them, and so are rows without kind or ts_ms (``spark_app.read_records``). The tasks write to the
output dir, which a cluster's executors must share with the driver (as they must for Spark's writes).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

from lagapp import lag_job
from lagapp import schema as s
from lagapp.lag_job import LagJobConfig

STAGING_DIR = "_file_pass"
PARTIALS_DIR = "_partials"
# Tables the broker tasks write themselves; the driver writes the others (``finish``).
TASK_TABLES: tuple[str, ...] = (
    s.TABLE_FOLLOWER_LAG,
    s.TABLE_REPLICA_LAG,
    s.TABLE_BROKER_HEALTH,
    s.TABLE_LAG_WINDOWS,
    s.TABLE_BYTE_RATES,
)
# The partials each task leaves for the driver.
P_STATUS = "follower_status"
P_TIMELINE = "leader_timeline"
P_RUNS = "broker_runs"
P_SEEN = "partitions_seen"
P_LEADERS = "leader_samples"
PARTIALS: tuple[str, ...] = (P_STATUS, P_TIMELINE, P_RUNS, P_SEEN, P_LEADERS)

# Tasks of the pass per core Spark has (each task takes a run of brokers).
TASKS_PER_CORE = 2
_BROKER_FILE = re.compile(r"^broker-(-?\d+)(?:-.*)?$")
_STATS_SCHEMA = "records long, files_sorted long, foreign long, duplicates long"


def file_broker(path: Path) -> int | None:
    """The broker a metrics file belongs to, from its name (``broker-<id>-<ts>`` or ``broker-<id>``)."""
    match = _BROKER_FILE.match(path.stem)
    return int(match.group(1)) if match else None


def spark_schemas(spark: SparkSession, config: LagJobConfig) -> dict[str, StructType]:
    """Every table's schema as the sorted path writes it (its plan on an empty frame), every field
    nullable as Spark reads Parquet back. Reading the written tables with it spares Spark a job per
    table that reads the Parquet footers for their schema."""
    empty = spark.createDataFrame([], s.LAG_JOB_SCHEMA)
    tables = lag_job.compute_tables(empty, config, now_ms=0)
    return {
        name: StructType([StructField(f.name, f.dataType, True) for f in df.schema.fields])
        for name, df in tables.items()
    }


def table_schemas(spark_schemas: dict[str, StructType]) -> dict[str, pa.Schema]:
    """The Arrow schemas the tables are written with (``spark_schemas``' types)."""
    return {name: to_arrow_schema(schema) for name, schema in spark_schemas.items()}


@dataclass(frozen=True)
class FilePassStats:
    """What the broker tasks found."""

    records: int
    files_sorted: int
    foreign_records: int
    duplicates: int = 0  # records dropped as a repeat of one before them (an MQTT redelivery)
    # (broker_id, broker_start_ms, records, first_ts_ms, last_ts_ms) per broker run (``broker_runs``)
    runs: tuple[tuple[Any, ...], ...] = ()


def broker_groups(paths: Sequence[Path]) -> list[tuple[int, list[str]]] | None:
    """The files of each broker, in the given order (rolled files by first ts, then the active one);
    None when a file's name names no broker."""
    groups: dict[int, list[str]] = {}
    for path in paths:
        broker = file_broker(path)
        if broker is None:
            return None
        groups.setdefault(broker, []).append(str(path))
    return list(groups.items())


def run(
    spark: SparkSession, paths: Sequence[Path], out_dir: Path, config: LagJobConfig
) -> tuple[dict[str, DataFrame], dict[str, str], FilePassStats] | None:
    """Every table of ``paths`` under ``out_dir/<table>`` (see the module docstring): (the tables as frames
    reading them, their paths, stats), or None when the pass cannot be used (nothing is then left in
    ``out_dir``)."""
    work = broker_groups(paths)
    if work is None:
        return None
    staging = out_dir / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    for name in (*TASK_TABLES, PARTIALS_DIR):
        (staging / name).mkdir(parents=True)
    read_schemas = spark_schemas(spark, config)
    schemas = table_schemas(read_schemas)
    in_schema = to_arrow_schema(s.LAG_JOB_SCHEMA)
    where = str(staging)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        out = PartWriter(Path(where), f"part-{context.partitionId() if context else 0:05d}")
        try:
            for batch in batches:
                for index in batch.column(0).to_pylist():
                    broker, files = work[index]
                    stats = broker_pass(files, broker, in_schema, schemas, config, out)
                    yield pa.RecordBatch.from_pydict({k: [v] for k, v in stats.items()})
        finally:
            out.close()

    # A few tasks per core, each taking a run of brokers: a task per broker costs a task's start-up and
    # a file per table for each broker, which the page's queries then open one by one.
    tasks = max(1, min(len(work), spark.sparkContext.defaultParallelism * TASKS_PER_CORE))
    try:
        rows = spark.range(len(work), numPartitions=tasks).mapInArrow(task, _STATS_SCHEMA).collect()
        foreign = sum(r["foreign"] for r in rows)
        if foreign:
            return None
        stats = FilePassStats(
            records=sum(r["records"] for r in rows),
            files_sorted=sum(r["files_sorted"] for r in rows),
            foreign_records=foreign,
            duplicates=sum(r["duplicates"] for r in rows),
            runs=tuple(broker_runs(staging)),
        )
        finish(staging, config, schemas)
        paths_out = {}
        for name in s.TABLES:
            final = out_dir / name
            shutil.rmtree(final, ignore_errors=True)
            (staging / name).rename(final)
            paths_out[name] = str(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    tables = {name: spark.read.schema(read_schemas[name]).parquet(path) for name, path in paths_out.items()}
    return tables, paths_out, stats


# ---------------------------------------------------------------------------------------------------------
# The broker task: parse, order, derive.


def parse_file(path: str, schema: pa.Schema) -> pa.Table:
    """The file's records with the job's fields; lines that do not parse are dropped, as are records
    without kind or ts_ms."""
    from pyarrow import json as pa_json

    read = pa_json.ReadOptions(use_threads=False)
    parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pa_json.read_json(path, read_options=read, parse_options=parse)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # A line cut by a crash (or otherwise malformed): parse line by line and keep the good ones.
        import io

        pieces = []
        with open(path, "rb") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    pieces.append(pa_json.read_json(io.BytesIO(line), read_options=read, parse_options=parse))
                except (pa.ArrowInvalid, pa.ArrowTypeError):
                    continue
        table = pa.concat_tables(pieces) if pieces else schema.empty_table()
    if table.num_rows == 0:
        return table
    keep = pc.and_(pc.is_valid(table[s.KIND]), pc.is_valid(table[s.TS_MS]))
    return table.filter(keep)


def _codes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
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


def _values(column: pa.ChunkedArray | pa.Array, fill: Any = 0, dtype: Any = np.int64) -> tuple[np.ndarray, np.ndarray]:
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


def _is(column: pa.ChunkedArray | pa.Array, value: str) -> np.ndarray:
    """column == value, null as False."""
    result: np.ndarray = pc.fill_null(pc.equal(column, value), False).to_numpy(zero_copy_only=False)
    return result


def in_range(ts: np.ndarray, lo: int | None, hi: int | None) -> np.ndarray:
    """``lo <= ts < hi`` (either bound left out when None): ``lag_job.in_range`` over an array."""
    keep = np.ones(len(ts), dtype=bool)
    if lo is not None:
        keep &= ts >= lo
    if hi is not None:
        keep &= ts < hi
    return keep


def _starts(*keys: np.ndarray) -> np.ndarray:
    """Over rows grouped by ``keys``: True at the first row of each group."""
    n = len(keys[0]) if keys else 0
    first = np.ones(n, dtype=bool)
    if n:
        first[1:] = np.logical_or.reduce([k[1:] != k[:-1] for k in keys])
    return first


def ordered_rows(files: Sequence[str], broker: int, in_schema: pa.Schema) -> tuple[pa.Table, np.ndarray, int, int, int]:
    """One broker's files → (its rows grouped by replica in time order, each replica's first row,
    files sorted, foreign records, duplicates dropped).

    A record with the ts_ms of the replica's record before it is a duplicate (``schema.DEDUP_KEY``: an
    MQTT QoS 1 redelivery, appended to the file again) and is dropped, as ``--follow`` drops it and as
    ``lag_job.replica_samples`` does."""
    tables = [parse_file(path, in_schema) for path in files]
    table = pa.concat_tables(tables) if tables else in_schema.empty_table()
    n = table.num_rows
    if n == 0:
        return table, np.zeros(0, dtype=bool), 0, 0, 0
    file_no = np.concatenate([np.full(t.num_rows, i, dtype=np.int64) for i, t in enumerate(tables)])
    broker_ids, broker_valid = _values(table[s.BROKER_ID])
    foreign = int(np.count_nonzero(~broker_valid | (broker_ids != broker)))
    if foreign:
        return table, np.zeros(0, dtype=bool), 0, foreign, 0
    keys = [_codes(table[name]) for name in lag_job.REPLICA_KEY]  # topic, partition, broker_id, kind
    ts = table[s.TS_MS].to_numpy().astype(np.int64)
    rows = np.arange(n)
    # Stable grouping by replica: each replica's rows stay in file order.
    order = np.lexsort((rows, *reversed(keys)))
    first = _starts(*(k[order] for k in keys))
    back = np.zeros(n, dtype=bool)
    back[1:] = (ts[order][1:] < ts[order][:-1]) & ~first[1:]
    files_sorted = 0
    if back.any():
        same_file = np.zeros(n, dtype=bool)
        same_file[1:] = file_no[order][1:] == file_no[order][:-1]
        bad_files = np.unique(file_no[order][back & same_file])
        files_sorted = len(bad_files)
        # Each out-of-order file sorted alone: its rows of a replica by ts_ms, the other files as written.
        within = np.where(np.isin(file_no, bad_files), ts, rows)
        order = np.lexsort((within, file_no, *reversed(keys)))
        if (ts[order][1:] < ts[order][:-1])[~first[1:]].any():
            # A replica's samples go back across files: the broker's rows by replica and ts_ms.
            order = np.lexsort((rows, ts, *reversed(keys)))
            files_sorted = len(tables)
    order, first, duplicates = drop_repeats(order, first, ts)
    return table.take(pa.array(order)), first, files_sorted, 0, duplicates


def drop_repeats(order: np.ndarray, first: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``order`` (rows grouped by replica in time order; ``first``: each replica's first) without the rows
    that repeat their replica's previous ts_ms (``schema.DEDUP_KEY``), and how many were dropped."""
    repeated = np.zeros(len(order), dtype=bool)
    repeated[1:] = (ts[order][1:] == ts[order][:-1]) & ~first[1:]
    duplicates = int(np.count_nonzero(repeated))
    if duplicates:
        order, first = order[~repeated], first[~repeated]
    return order, first, duplicates


@dataclass
class _Rows:
    """A broker's rows in replica and time order with the derived columns (numpy), as ``replica_samples``."""

    t: pa.Table
    first: np.ndarray  # a replica's first row
    rep: np.ndarray  # replica number
    ts: np.ndarray
    partition_row: np.ndarray  # kind partition
    follower: np.ndarray  # FOLLOWER_SAMPLE
    interval_ms: np.ndarray
    incarnation_first: np.ndarray
    deltas: dict[str, np.ndarray]
    role_last_leader: np.ndarray  # per row: its replica's role at the newest record is leader


def derive(t: pa.Table, first: np.ndarray) -> _Rows:
    """``replica_samples``' columns over rows grouped by replica in time order."""
    n = t.num_rows
    ts = t[s.TS_MS].to_numpy().astype(np.int64)
    rep = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    prev_ts = _shift(ts, 1, 0)
    start_ms, start_valid = _values(t[s.BROKER_START_MS])
    prev_start, prev_start_valid = _shift(start_ms, 1, 0), _shift(start_valid, 1, False)
    both = start_valid & prev_start_valid
    restarted_true = ~first & both & (start_ms != prev_start)
    restarted_null = ~first & ~both
    deltas = {}
    for name in s.PARTITION_COUNTERS:
        value, _ = _values(t[name])
        before = _shift(value, 1, 0)
        counts_all = first | restarted_true | (value < before)
        deltas[name] = np.where(counts_all, value, value - before)
    kind = t[s.KIND]
    role = t[s.ROLE]
    fetch, fetch_valid = _values(t[s.FETCH_OFFSET])
    partition_row = _is(kind, s.KIND_PARTITION)
    follower = partition_row & _is(role, s.ROLE_FOLLOWER) & fetch_valid & (fetch >= 0)
    # The replica's role at its newest record with a role other than offline.
    has_role = pc.fill_null(pc.not_equal(role, s.ROLE_OFFLINE), False).to_numpy(zero_copy_only=False)
    candidate = np.where(has_role, np.arange(n), -1)
    last = np.maximum.reduceat(candidate, starts)[rep] if n else np.zeros(0, dtype=np.int64)
    is_leader = _is(role, s.ROLE_LEADER)
    role_last_leader = (last >= 0) & is_leader[np.maximum(last, 0)] if n else np.zeros(0, dtype=bool)
    return _Rows(
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


def _table(columns: dict[str, Any], schema: pa.Schema) -> pa.Table:
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
    """Start of the epoch-aligned window of ``window_ms`` holding each ``ts`` (``lag_job._window_start``)."""
    start: np.ndarray = ts - np.mod(ts, window_ms)
    return start


def round_half_up(x: np.ndarray) -> np.ndarray:
    """Spark's ``round(x)`` of a double: halves away from zero (numpy's ``round`` goes to even)."""
    magnitude = np.abs(x)
    whole = np.floor(magnitude)
    up = (magnitude - whole) >= 0.5  # exact: x − floor(x) is a double without rounding
    rounded: np.ndarray = np.sign(x) * (whole + up)
    return rounded


def _group_first_last(first: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group number per row, first row of each group, last row of each group) of consecutive groups."""
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], len(first))[: len(starts)] - 1
    return np.cumsum(first) - 1, starts, ends


def _percentiles(
    values: np.ndarray, valid: np.ndarray, group: np.ndarray, groups: int
) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], tuple[np.ndarray, np.ndarray]]:
    """Nearest-rank percentiles (``lag_job._nearest_rank``) and the max of the non-null values per group."""
    g = group[valid]
    v = values[valid]
    order = np.lexsort((v, g))
    v = v[order]
    counts = np.bincount(g, minlength=groups)
    offsets = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    has = counts > 0
    out = {}
    for p in lag_job._PERCENTS:
        rank = (counts * p + 99) // 100
        index = np.where(has, offsets + rank - 1, 0)
        out[p] = (v[index] if len(v) else np.zeros(groups, dtype=np.int64), has)
    top = np.where(has, offsets + counts - 1, 0)
    return out, (v[top] if len(v) else np.zeros(groups, dtype=np.int64), has)


class PartWriter:
    """A task's output files, one per table and partial, each broker's rows appended as written (a
    Parquet row group, an Arrow record batch), so a task of many brokers holds one broker's rows at a time."""

    def __init__(self, staging: Path, part: str) -> None:
        self._staging = staging
        self._part = part
        self._tables: dict[str, pq.ParquetWriter] = {}
        self._partials: dict[str, tuple[pa.NativeFile, pa.ipc.RecordBatchFileWriter]] = {}

    def table(self, name: str, table: pa.Table) -> None:
        if name not in self._tables:
            self._tables[name] = pq.ParquetWriter(self._staging / name / f"{self._part}.parquet", table.schema)
        self._tables[name].write_table(table)

    def partial(self, name: str, table: pa.Table) -> None:
        if name not in self._partials:
            sink = pa.OSFile(str(self._staging / PARTIALS_DIR / f"{name}-{self._part}.arrow"), "wb")
            self._partials[name] = (sink, pa.ipc.new_file(sink, table.schema))
        self._partials[name][1].write_table(table)

    def close(self) -> None:
        for writer in self._tables.values():
            writer.close()
        for sink, batches in self._partials.values():
            batches.close()
            sink.close()


def broker_pass(
    files: Sequence[str],
    broker: int,
    in_schema: pa.Schema,
    schemas: dict[str, pa.Schema],
    config: LagJobConfig,
    out: PartWriter,
) -> dict[str, int]:
    """One broker's tables and partials, appended to its task's files; returns its statistics."""
    t, first, files_sorted, foreign, duplicates = ordered_rows(files, broker, in_schema)
    stats = {
        "records": t.num_rows,
        "files_sorted": files_sorted,
        "foreign": foreign,
        "duplicates": duplicates,
    }
    if foreign:
        return stats  # the pass is not used: nothing to write
    r = derive(t, first)
    out.table(s.TABLE_FOLLOWER_LAG, follower_lag(r, schemas[s.TABLE_FOLLOWER_LAG]))
    out.table(s.TABLE_REPLICA_LAG, replica_lag(r, schemas[s.TABLE_REPLICA_LAG]))
    out.table(s.TABLE_BROKER_HEALTH, broker_health(r, schemas[s.TABLE_BROKER_HEALTH]))
    out.table(s.TABLE_LAG_WINDOWS, lag_windows(r, config, schemas[s.TABLE_LAG_WINDOWS]))
    out.table(s.TABLE_BYTE_RATES, byte_rates(r, config, schemas[s.TABLE_BYTE_RATES]))
    out.partial(P_STATUS, follower_status_partial(r, config, schemas[s.TABLE_FOLLOWER_STATUS]))
    out.partial(P_TIMELINE, leader_timeline_partial(r))
    out.partial(P_RUNS, broker_runs_partial(r))
    out.partial(P_SEEN, partitions_seen_partial(r))
    out.partial(P_LEADERS, leader_samples_partial(r))
    return stats


# ---------------------------------------------------------------------------------------------------------
# A broker's tables (the Spark versions are in lag_job: each function here computes the same rows).


def follower_lag(r: _Rows, schema: pa.Schema) -> pa.Table:
    """``lag_job.follower_lag``: the follower samples."""
    rows = r.t.filter(pa.array(r.follower))
    return _table({**{n: rows[n] for n in rows.column_names}, "follower_id": rows[s.BROKER_ID]}, schema)


def replica_lag(r: _Rows, schema: pa.Schema) -> pa.Table:
    """``lag_job.replica_lag``: each leader sample's followers, one row each."""
    keep = (
        r.partition_row & _is(r.t[s.ROLE], s.ROLE_LEADER) & pc.is_valid(r.t[s.FOLLOWERS]).to_numpy(zero_copy_only=False)
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
    return _table(columns, schema)


def broker_health(r: _Rows, schema: pa.Schema) -> pa.Table:
    """``lag_job.broker_health``: the broker records that report the event loop's lag."""
    keep = _is(r.t[s.KIND], s.KIND_BROKER) & pc.is_valid(r.t[s.LOOP_LAG_MAX_MS]).to_numpy(zero_copy_only=False)
    rows = r.t.filter(pa.array(keep))
    columns = {n: rows[n] for n in rows.column_names}
    columns.update({"loop_lag_max_ms": rows[s.LOOP_LAG_MAX_MS], "loop_lag_avg_ms": rows[s.LOOP_LAG_AVG_MS]})
    return _table(columns, schema)


def lag_windows(r: _Rows, config: LagJobConfig, schema: pa.Schema) -> pa.Table:
    """``lag_job.lag_windows``: per follower and window; a follower's rows are consecutive and in time
    order, so each (follower, window) is a run of its rows."""
    idx = np.flatnonzero(r.follower)
    t = r.t.take(pa.array(idx))
    ws = _window_start(r.ts[idx], config.window_ms)
    group, starts, _ = _group_first_last(_starts(r.rep[idx], ws))
    groups = len(starts)
    columns: dict[str, Any] = {
        s.TOPIC: t[s.TOPIC].take(pa.array(starts)),
        s.PARTITION: t[s.PARTITION].take(pa.array(starts)),
        "follower_id": t[s.BROKER_ID].take(pa.array(starts)),
        lag_job.WINDOW_START_MS: ws[starts],
        "window_end_ms": ws[starts] + config.window_ms,
        "samples": np.bincount(group, minlength=groups).astype(np.int64),
    }
    for name in (s.LAG_MESSAGES, s.LAG_MS):
        values, valid = _values(t[name])
        ranks, top = _percentiles(values, valid, group, groups)
        for p, column in ranks.items():
            columns[f"{name}_p{p}"] = column
        columns[f"{name}_max"] = top
    return _table(columns, schema)


_RATES = (
    (s.BYTES_IN, "client_in"),
    (s.BYTES_OUT, "client_out"),
    (s.REPLICATION_BYTES_IN, "replication_in"),
    (s.REPLICATION_BYTES_OUT, "replication_out"),
)


def byte_rates(r: _Rows, config: LagJobConfig, schema: pa.Schema) -> pa.Table:
    """``lag_job.byte_rates``: per replica and window, a run of the replica's rows."""
    idx = np.flatnonzero(r.partition_row)
    t = r.t.select([s.BROKER_ID, s.TOPIC, s.PARTITION, s.BROKER_START_MS]).take(pa.array(idx))
    ts = r.ts[idx]
    ws = _window_start(ts, config.window_ms)
    group, starts, _ = _group_first_last(_starts(r.rep[idx], ws))
    broker_start, broker_start_valid = _values(t[s.BROKER_START_MS])
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
        lag_job.WINDOW_START_MS: ws[starts][keep],
        "window_end_ms": ws[starts][keep] + config.window_ms,
        lag_job.INTERVAL_MS: intervals[keep],
        "messages_in": messages[keep],
        "messages_in_per_s": messages[keep] * per_s,
    }
    for _, out in _RATES:
        columns[f"{out}_bytes"] = sums[out][keep]
        columns[f"{out}_bytes_per_s"] = sums[out][keep] * per_s
    return _table(columns, schema)


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
    """``follower_status_of_samples``' rule but for STOP (which the driver applies)."""
    trending = (samples >= config.status_min_samples) & lag_min_valid & (lag_min > config.allowed_lag_messages)
    return np.select(
        [rewinds > 0, trending & (fetch_min == fetch_max), truncations > 0, trending & (lag_drops == 0)],
        [s.STATUS_REWIND, s.STATUS_STALL, s.STATUS_TRUNCATE, s.STATUS_WARN],
        default=s.STATUS_OK,
    ).astype(object)


def follower_status_partial(r: _Rows, config: LagJobConfig, schema: pa.Schema) -> pa.Table:
    """``follower_status`` of this broker's followers, the status without STOP (``finish`` applies it):
    the rules of ``lag_job.follower_status_of_samples`` over each follower's run of samples."""
    idx = np.flatnonzero(r.follower)
    t = r.t.take(pa.array(idx))
    ts = r.ts[idx]
    frep = r.rep[idx]
    m = len(idx)
    fetch, _ = _values(t[s.FETCH_OFFSET])
    lag, lag_valid = _values(t[s.LAG_MESSAGES])
    epoch, epoch_valid = _values(t[s.LEADER_EPOCH])
    has1 = np.zeros(m, dtype=bool)
    has1[1:] = frep[1:] == frep[:-1]
    has2 = np.zeros(m, dtype=bool)
    has2[2:] = frep[2:] == frep[:-2]
    e1, e1v = _shift(epoch, 1, 0), _shift(epoch_valid, 1, False) & has1
    e2, e2v = _shift(epoch, 2, 0), _shift(epoch_valid, 2, False) & has2
    before = np.where(e2v, e2, e1)
    before_valid = e2v | e1v
    group, starts, ends = _group_first_last(~has1)
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
    kgroup, kstarts, kends = _group_first_last(_starts(group[kidx]))
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
    return _table(columns, schema)


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
    first = _starts(*(k[order] for k in keys))
    return order, np.cumsum(first) - 1, np.flatnonzero(first)


def _bool_max(values: np.ndarray, valid: np.ndarray, group: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Spark's ``max`` of a boolean per group: nulls ignored, null when all are."""
    any_valid = np.bincount(group, weights=valid, minlength=groups) > 0
    any_true = np.bincount(group, weights=values & valid, minlength=groups) > 0
    return any_true, any_valid


def leader_timeline_partial(r: _Rows, lo: int | None = None, hi: int | None = None) -> pa.Table:
    """``lag_job.leader_timeline_partial`` of the partition records (with ``lo <= ts_ms < hi``)."""
    t = r.t
    epoch_valid = pc.is_valid(t[s.LEADER_EPOCH]).to_numpy(zero_copy_only=False)
    leader_valid = pc.is_valid(t[s.LEADER_ID]).to_numpy(zero_copy_only=False)
    idx = np.flatnonzero(r.partition_row & epoch_valid & leader_valid & in_range(r.ts, lo, hi))
    rows = t.select([s.TOPIC, s.PARTITION, s.LEADER_EPOCH, s.LEADER_ID, s.ROLE]).take(pa.array(idx))
    keys = [_codes(rows[n]) for n in reversed(lag_job.LEADER_TIMELINE_KEY)]
    order, group, starts = _grouped(keys)
    groups = len(starts)
    ts = r.ts[idx][order]
    role = rows[s.ROLE].take(pa.array(order))
    leader, leader_valid_role = _is(role, s.ROLE_LEADER), pc.is_valid(role).to_numpy(zero_copy_only=False)
    confirmed, confirmed_valid = _bool_max(leader, leader_valid_role, group, groups)
    firsts = pa.array(order[starts])
    columns: dict[str, Any] = {n: rows[n].take(firsts) for n in lag_job.LEADER_TIMELINE_KEY}
    columns.update(
        {
            "first_seen_ms": np.minimum.reduceat(ts, starts) if groups else ts[:0],
            "last_seen_ms": np.maximum.reduceat(ts, starts) if groups else ts[:0],
            "reports": np.bincount(group, minlength=groups).astype(np.int64),
            "confirmed": (confirmed, confirmed_valid),
        }
    )
    return _table(columns, TIMELINE_PARTIAL)


RUNS_PARTIAL = pa.schema(
    [
        (s.BROKER_ID, pa.int32()),
        (s.BROKER_START_MS, pa.int64()),
        ("records", pa.int64()),
        ("first_ts_ms", pa.int64()),
        ("last_ts_ms", pa.int64()),
    ]
)


def broker_runs_partial(r: _Rows, lo: int | None = None, hi: int | None = None) -> pa.Table:
    """``lag_job.broker_runs_partial`` of the records (any kind; with ``lo <= ts_ms < hi``)."""
    idx = np.flatnonzero(in_range(r.ts, lo, hi))
    t = r.t.select([s.BROKER_ID, s.BROKER_START_MS]).take(pa.array(idx))
    order, group, starts = _grouped([_codes(t[s.BROKER_START_MS]), _codes(t[s.BROKER_ID])])
    groups = len(starts)
    ts = r.ts[idx][order]
    firsts = pa.array(order[starts])
    return _table(
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


def partitions_seen_partial(r: _Rows, lo: int | None = None, hi: int | None = None) -> pa.Table:
    """Per partition, the first and last ts_ms of its records (with ``lo <= ts_ms < hi``; ``lag_job.first_seen``)."""
    idx = np.flatnonzero(r.partition_row & in_range(r.ts, lo, hi))
    rows = r.t.select([s.TOPIC, s.PARTITION]).take(pa.array(idx))
    order, group, starts = _grouped([_codes(rows[s.PARTITION]), _codes(rows[s.TOPIC])])
    groups = len(starts)
    ts = r.ts[idx][order]
    firsts = pa.array(order[starts])
    return _table(
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
        (lag_job.INTERVAL_MS, pa.int64()),
    ]
)


def leader_samples_partial(r: _Rows) -> pa.Table:
    """This broker's leader samples (``lag_job.leader_samples`` before its ordering across brokers)."""
    idx = np.flatnonzero(r.partition_row & _is(r.t[s.ROLE], s.ROLE_LEADER))
    rows = r.t.take(pa.array(idx))
    columns = {n: rows[n] for n in rows.column_names}
    columns[lag_job.INTERVAL_MS] = pa.array(r.interval_ms[idx], pa.int64())
    return _table(columns, LEADERS_PARTIAL)


# ---------------------------------------------------------------------------------------------------------
# The driver: what crosses brokers, from the partials.


def _read_partials(staging: Path, name: str, schema: pa.Schema | None = None) -> pa.Table:
    tables = []
    for path in sorted((staging / PARTIALS_DIR).glob(f"{name}-part-*.arrow")):
        with pa.memory_map(str(path)) as source:
            tables.append(pa.ipc.open_file(source).read_all())
    if not tables:
        assert schema is not None
        return schema.empty_table()
    return pa.concat_tables(tables)


def broker_runs(staging: Path) -> list[tuple[Any, ...]]:
    """(broker_id, broker_start_ms, records, first_ts_ms, last_ts_ms) per broker run, ordered by
    broker and first ts_ms (``dashboard.broker_runs``' rows)."""
    runs = _read_partials(staging, P_RUNS, RUNS_PARTIAL)
    rows = [tuple(row.values()) for row in runs.to_pylist()]
    return sorted(rows, key=lambda row: (row[0] is not None, row[0] or 0, row[3]))


def finish(staging: Path, config: LagJobConfig, schemas: dict[str, pa.Schema]) -> None:
    """The tables that cross brokers, from the tasks' partials, written under ``staging``."""
    runs = _read_partials(staging, P_RUNS, RUNS_PARTIAL)
    now_ms = int(pc.max(runs["last_ts_ms"]).as_py() or 0) if runs.num_rows else 0
    isr = pq.read_table(
        staging / s.TABLE_REPLICA_LAG, columns=[s.TOPIC, s.PARTITION, "follower_id", s.TS_MS, s.IN_SYNC]
    )
    changes = isr_changes(isr, config, schemas[s.TABLE_ISR_CHANGES])
    leaders = _read_partials(staging, P_LEADERS, LEADERS_PARTIAL)
    seen = _read_partials(staging, P_SEEN, SEEN_PARTIAL)
    outputs = {
        s.TABLE_FOLLOWER_STATUS: follower_status(
            _read_partials(staging, P_STATUS, schemas[s.TABLE_FOLLOWER_STATUS]), config, now_ms
        ),
        s.TABLE_LEADER_TIMELINE: leader_timeline(
            _read_partials(staging, P_TIMELINE, TIMELINE_PARTIAL), schemas[s.TABLE_LEADER_TIMELINE]
        ),
        s.TABLE_ISR_CHANGES: changes,
        s.TABLE_UNDER_REPLICATED: under_replicated(leaders, changes, config, schemas[s.TABLE_UNDER_REPLICATED]),
        s.TABLE_CLUSTER_HEALTH: cluster_health(leaders, seen, config, schemas[s.TABLE_CLUSTER_HEALTH]),
    }
    for name, table in outputs.items():
        (staging / name).mkdir(exist_ok=True)
        pq.write_table(table, staging / name / "part-00000.parquet")


def follower_status(partials: pa.Table, config: LagJobConfig, now_ms: int) -> pa.Table:
    """The tasks' follower statuses with STOP applied: the last sample older than the window, against
    the newest record of any broker."""
    stopped = (now_ms - partials["last_ts_ms"].to_numpy()) > config.window_ms
    status = pc.if_else(pa.array(stopped), s.STATUS_STOP, partials["status"].combine_chunks())
    return partials.set_column(partials.schema.get_field_index("status"), "status", status)


def leader_timeline(partials: pa.Table, schema: pa.Schema) -> pa.Table:
    """``lag_job.leader_timeline_of_partials``: the tasks' counts merged, and each entry's previous one
    in its partition (by first seen, then epoch)."""
    keys = [_codes(partials[n]) for n in reversed(lag_job.LEADER_TIMELINE_KEY)]
    order, group, starts = _grouped(keys)
    groups = len(starts)
    t = partials.take(pa.array(order))
    confirmed, valid = _values(t["confirmed"], False, bool)
    conf, conf_valid = _bool_max(confirmed, valid, group, groups)
    firsts = pa.array(starts)
    first_seen = np.minimum.reduceat(t["first_seen_ms"].to_numpy(), starts) if groups else np.zeros(0, np.int64)
    merged = pa.table(
        {
            **{n: t[n].take(firsts) for n in lag_job.LEADER_TIMELINE_KEY},
            "first_seen_ms": first_seen,
            "last_seen_ms": np.maximum.reduceat(t["last_seen_ms"].to_numpy(), starts) if groups else first_seen,
            "reports": np.add.reduceat(t["reports"].to_numpy(), starts) if groups else first_seen,
            "confirmed": pa.array(conf, mask=~conf_valid),
        }
    )
    # The partition's entries by (first_seen_ms, leader_epoch): the previous one's leader and epoch.
    epoch = _codes(merged[s.LEADER_EPOCH])
    by_partition = np.lexsort((epoch, first_seen, _codes(merged[s.PARTITION]), _codes(merged[s.TOPIC])))
    m = merged.take(pa.array(by_partition))
    same = ~_starts(_codes(m[s.TOPIC]), _codes(m[s.PARTITION]))
    leader_id, leader_valid = _values(m[s.LEADER_ID])
    epochs, epochs_valid = _values(m[s.LEADER_EPOCH])
    columns = {n: m[n] for n in m.column_names}
    columns["previous_leader_id"] = (_shift(leader_id, 1, 0), same & _shift(leader_valid, 1, False))
    columns["previous_leader_epoch"] = (_shift(epochs, 1, 0), same & _shift(epochs_valid, 1, False))
    return _table(columns, schema)


def _previous_duration(ts: np.ndarray, has_prev: np.ndarray, gap_max_ms: int) -> np.ndarray:
    """``lag_job._previous_duration`` over rows in order (``has_prev``: the row before is of the same key)."""
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
    """``lag_job.isr_changes_partial`` from ``replica_lag``'s rows (the same leader samples, exploded): each
    follower's samples with ``lo <= ts_ms < hi``, each compared with the one before it, whatever its time."""
    ts_all = isr[s.TS_MS].to_numpy()
    keys = [ts_all, *(_codes(isr[n]) for n in reversed(lag_job.ISR_CHANGES_KEY))]
    order = np.lexsort(tuple(keys))
    ts = ts_all[order]
    first = _starts(*(k[order] for k in keys[1:]))
    flag, valid = _values(isr[s.IN_SYNC].take(pa.array(order)), False, bool)
    prev, prev_valid = _shift(flag, 1, False), _shift(valid, 1, False) & ~first
    shrink = prev_valid & prev & valid & ~flag
    expand = prev_valid & ~prev & valid & flag
    was_out = prev_valid & ~prev
    d = _previous_duration(ts, ~first, config.gap_max_ms)
    kept = np.flatnonzero(in_range(ts, lo, hi))
    group_of = np.cumsum(first) - 1
    group, starts, ends = _group_first_last(_starts(group_of[kept]))
    groups = len(starts)
    t = isr.take(pa.array(order[kept]))

    def total(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values[kept].astype(np.int64), starts) if groups else np.zeros(0, dtype=np.int64)

    firsts = pa.array(starts)
    return _table(
        {
            **{n: t[n].take(firsts) for n in lag_job.ISR_CHANGES_KEY},
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


def isr_changes(isr: pa.Table, config: LagJobConfig, schema: pa.Schema) -> pa.Table:
    """``lag_job.isr_changes`` from ``replica_lag``'s rows."""
    return isr_changes_of(isr_changes_partial(isr, config), schema)


def isr_changes_of(partial: pa.Table, schema: pa.Schema) -> pa.Table:
    """``lag_job.isr_changes_of_partials`` of one partial (a row per follower)."""
    return _table({name: partial[name] for name in schema.names}, schema)


def _leader_order(leaders: pa.Table) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """The leader samples per partition by (ts_ms, broker_id) (``lag_job.leader_samples``' order):
    (rows, ts, first row of a partition)."""
    ts_all = leaders[s.TS_MS].to_numpy()
    topic, partition = _codes(leaders[s.TOPIC]), _codes(leaders[s.PARTITION])
    order = np.lexsort((_codes(leaders[s.BROKER_ID]), ts_all, partition, topic))
    return leaders.take(pa.array(order)), ts_all[order], _starts(topic[order], partition[order])


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
    """``lag_job.under_replicated_partial``: per partition, the sums over its leader samples (every broker's)
    with ``lo <= ts_ms < hi``, each sample's duration counted at the next one."""
    t, ts, first = _leader_order(leaders)
    d = _previous_duration(ts, ~first, config.gap_max_ms)
    ur, ur_valid = _values(t[s.UNDER_REPLICATED], False, bool)
    umi, umi_valid = _values(t[s.UNDER_MIN_ISR], False, bool)
    prev_ur = _shift(ur & ur_valid, 1, False) & ~first
    prev_umi = _shift(umi & umi_valid, 1, False) & ~first
    isr_size, isr_valid = _values(t[s.ISR_SIZE])
    kept = np.flatnonzero(in_range(ts, lo, hi))
    group, starts, _ = _group_first_last(_starts((np.cumsum(first) - 1)[kept]))
    groups = len(starts)
    big = np.iinfo(np.int64).max
    isr_min = np.minimum.reduceat(np.where(isr_valid, isr_size, big)[kept], starts) if groups else np.zeros(0, np.int64)

    def total(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values[kept].astype(np.int64), starts) if groups else np.zeros(0, dtype=np.int64)

    firsts = pa.array(kept[starts])
    return _table(
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


def under_replicated(leaders: pa.Table, changes: pa.Table, config: LagJobConfig, schema: pa.Schema) -> pa.Table:
    """``lag_job.under_replicated`` from every broker's leader samples and ``isr_changes``."""
    return under_replicated_of(under_replicated_partial(leaders, config), changes, schema)


def under_replicated_of(partial: pa.Table, changes: pa.Table, schema: pa.Schema) -> pa.Table:
    """``lag_job.under_replicated_of_partials`` of one partial (a row per partition) and ``isr_changes``:
    isr_shrinks / isr_expands are the partition's sums over its followers (0 when none)."""
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
    return _table(columns, schema)


def cluster_health(
    leaders: pa.Table, seen: pa.Table, config: LagJobConfig, schema: pa.Schema, from_ms: int | None = None
) -> pa.Table:
    """``lag_job.cluster_health`` from every broker's leader samples and partitions seen (``from_ms``, a
    bucket start: only the buckets from there on; ``leaders`` must then hold every sample from
    ``from_ms - gap_max_ms`` on, and ``seen`` every partition)."""
    bucket = config.health_bucket_ms
    if seen.num_rows == 0:
        return schema.empty_table()
    t, ts, first = _leader_order(leaders)
    n = t.num_rows
    last_of_partition = np.append(first[1:], True)
    next_ts = np.append(ts[1:], 0)
    interval, interval_valid = _values(t[lag_job.INTERVAL_MS])
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
    ur, ur_valid = _values(t[s.UNDER_REPLICATED], False, bool)
    umi, umi_valid = _values(t[s.UNDER_MIN_ISR], False, bool)
    broker, _ = _values(t[s.BROKER_ID])
    partition_no = np.cumsum(first) - 1
    # Per (bucket, partition): any sample under-replicated / under min ISR; led by the newest sample's broker
    # (rows of a partition are in (ts, broker) order, so the last of each group).
    order = np.lexsort((rows, partition_no[rows], bucket_start))
    rows, bucket_start = rows[order], bucket_start[order]
    group, starts, ends = _group_first_last(_starts(bucket_start, partition_no[rows]))
    groups = len(starts)
    any_ur = np.bincount(group, weights=(ur & ur_valid)[rows], minlength=groups) > 0
    any_umi = np.bincount(group, weights=(umi & umi_valid)[rows], minlength=groups) > 0
    leader = broker[rows[ends]]
    b = bucket_start[starts]
    # Every bucket of the span: from the first partition's first record to the newest partition record.
    first_ts, last_ts = seen["first_ts_ms"].to_numpy(), seen["last_ts_ms"].to_numpy()
    seen_keys = [_codes(seen[s.PARTITION]), _codes(seen[s.TOPIC])]
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
    pfirst = _starts(ps, pl)
    pstarts = np.flatnonzero(pfirst)
    pcount = np.diff(np.append(pstarts, len(ps)))
    entries = np.bincount(ps[pstarts], minlength=len(buckets))
    offsets = np.concatenate(([0], np.cumsum(entries))).astype(np.int32)
    leaders_map = pa.MapArray.from_arrays(
        pa.array(offsets), pa.array(pl[pstarts], pa.int32()), pa.array(pcount.astype(np.int64))
    )
    return _table(
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
