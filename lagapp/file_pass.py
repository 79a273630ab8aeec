"""The lag job on Spark: each broker's records brought to one task, which computes every table one broker
decides (``lagapp.tables``), and the driver finishes what crosses brokers.

How this works: every table needs each replica's samples in time order, and a replica's samples are all
in its broker's records. So the job's unit of work is a broker: a task takes a run of brokers and, for
each, computes with ``tables.broker_tables`` the tables its rows decide and the partials of the rest.
The records reach a task one of two ways:

- **the files** (``run``, the default): a broker writes its own samples, in time order, to its files
  (``broker-<id>-<first ts_ms>.jsonl``, then ``_active/broker-<id>.jsonl``; the MQTT sink writes the same
  layout). The task parses its brokers' files with pyarrow's JSON reader (the job's fields only) and
  groups the rows by replica keeping file order (``ordered_rows``): no shuffle and no sort. A file in
  which some replica's ``ts_ms`` goes back (a wall-clock step) is sorted alone; a replica going back
  across two files sorts the broker's rows (``FilePassStats.files_sorted`` counts either). The pass
  cannot be used, and ``run`` returns None, when a file's name names no broker or a record's
  ``broker_id`` is not its file's broker (``FilePassStats.foreign_records``);
- **Spark's reader and a sort** (``run_records``): any records Spark can read (files in another
  layout, ``--sorted``, ``--follow``'s stored records) are shuffled by broker and sorted by broker and
  time within each task, so a task's rows arrive a broker at a time; each broker's rows are grouped by
  replica in time order (``tables.in_replica_order``) and go through the same pass.

Either way a task writes, for its brokers, ``follower_lag``, ``replica_lag``, ``broker_health``,
``lag_windows`` and ``byte_rates`` as Parquet (``part-<task>.parquet`` of the table's folder, a row group
per broker), and the partials (the follower status but for STOP, the ``leader_timeline`` counts, the
broker runs, each partition's first and last ``ts_ms``, the leader samples) as small Arrow files. Only
task statistics go back through Spark. The driver (``finish``) reads the partials and writes what
crosses brokers with ``tables.finish_tables``: ``follower_status`` (STOP from the newest record),
``leader_timeline``, ``under_replicated`` and ``cluster_health`` (a partition's leader samples move
from broker to broker with the leadership), ``isr_changes`` (from ``replica_lag``, already written).

Everything is built under ``<out>/_file_pass`` and each table folder renamed into place at the end, so
a run that fails or steps aside leaves nothing behind. Lines pyarrow cannot parse (a line cut by a
crash) are dropped, as Spark's reader drops them (DROPMALFORMED), and so are rows without kind or ts_ms
(``spark_app.read_records``). The tasks write to the output dir, which a cluster's executors must share
with the driver (as they must for Spark's writes), and run this package's Python (numpy, pyarrow).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from lagapp import schema as s
from lagapp import tables as tb
from lagapp.tables import LagJobConfig

STAGING_DIR = "_file_pass"
PARTIALS_DIR = "_partials"
# Tasks of the pass per core Spark has (each task takes a run of brokers).
TASKS_PER_CORE = 2
_BROKER_FILE = re.compile(r"^broker-(-?\d+)(?:-.*)?$")
_STATS_SCHEMA = "records long, files_sorted long, foreign long, duplicates long"
# The records as a task reads them (the fields the tables use).
IN_SCHEMA = to_arrow_schema(s.LAG_JOB_SCHEMA)


def file_broker(path: Path) -> int | None:
    """The broker a metrics file belongs to, from its name (``broker-<id>-<ts>`` or ``broker-<id>``)."""
    match = _BROKER_FILE.match(path.stem)
    return int(match.group(1)) if match else None


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


Task = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def run(
    spark: SparkSession, paths: Sequence[Path], out_dir: Path, config: LagJobConfig
) -> tuple[dict[str, str], FilePassStats] | None:
    """Every table of the metrics files ``paths``, each broker's files read in order by one task, under
    ``out_dir/<table>``: (the tables' paths, stats), or None when the files are not in the emitter's layout
    (nothing is then left in ``out_dir``)."""
    work = broker_groups(paths)
    if work is None:
        return None

    def make_task(where: Path) -> Task:
        def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            out = PartWriter(where, _part_name())
            try:
                for batch in batches:
                    for index in batch.column(0).to_pylist():
                        broker, files = work[index]
                        yield _stats_batch(files_pass(files, broker, config, out))
            finally:
                out.close()

        return task

    # A few tasks per core, each taking a run of brokers: a task per broker costs a task's start-up and
    # a file per table for each broker, which the page's queries then open one by one.
    tasks = max(1, min(len(work), spark.sparkContext.defaultParallelism * TASKS_PER_CORE))
    brokers = spark.range(len(work), numPartitions=tasks)
    return _run_tasks(lambda task: brokers.mapInArrow(task, _STATS_SCHEMA), make_task, out_dir, config)


def run_records(records: DataFrame, out_dir: Path, config: LagJobConfig) -> tuple[dict[str, str], FilePassStats]:
    """Every table of ``records`` (``LAG_JOB_SCHEMA``'s columns, any source) under ``out_dir/<table>``:
    Spark shuffles them by broker and sorts each task's rows by broker and time, then each broker's rows
    go through the pass. Returns (the tables' paths, stats)."""
    spark = records.sparkSession
    columns = records.select(*s.LAG_JOB_SCHEMA.fieldNames())

    def make_task(where: Path) -> Task:
        def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            out = PartWriter(where, _part_name())
            try:
                for rows in _by_broker(batches):
                    yield _stats_batch(rows_pass(rows, config, out))
            finally:
                out.close()

        return task

    tasks = max(1, spark.sparkContext.defaultParallelism * TASKS_PER_CORE)
    ordered = columns.repartition(tasks, s.BROKER_ID).sortWithinPartitions(s.BROKER_ID, s.TS_MS)
    done = _run_tasks(lambda task: ordered.mapInArrow(task, _STATS_SCHEMA), make_task, out_dir, config)
    assert done is not None  # only the files' layout makes the pass step aside
    return done


def _run_tasks(
    start: Callable[[Task], DataFrame], make_task: Callable[[Path], Task], out_dir: Path, config: LagJobConfig
) -> tuple[dict[str, str], FilePassStats] | None:
    """Run the broker tasks (``start`` maps them over their input), finish in the driver and move every
    table into place; None (nothing left behind) when a task found a foreign record."""
    staging = out_dir / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    for name in (*tb.ROW_TABLES, PARTIALS_DIR):
        (staging / name).mkdir(parents=True)
    try:
        rows = start(make_task(staging)).collect()
        foreign = sum(r["foreign"] for r in rows)
        if foreign:
            return None
        finish(staging, config)
        stats = FilePassStats(
            records=sum(r["records"] for r in rows),
            files_sorted=sum(r["files_sorted"] for r in rows),
            foreign_records=foreign,
            duplicates=sum(r["duplicates"] for r in rows),
            runs=tuple(broker_runs(staging)),
        )
        paths = {}
        for name in s.TABLES:
            final = out_dir / name
            shutil.rmtree(final, ignore_errors=True)
            (staging / name).rename(final)
            paths[name] = str(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return paths, stats


def _part_name() -> str:
    from pyspark import TaskContext

    context = TaskContext.get()
    return f"part-{context.partitionId() if context else 0:05d}"


def _stats_batch(stats: dict[str, int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({k: [v] for k, v in stats.items()})


def _by_broker(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
    """A task's rows, sorted by broker, one broker's rows at a time (they may span several batches)."""
    held: list[pa.Table] = []
    held_broker = None
    for batch in batches:
        rows = pa.Table.from_batches([batch])
        ids, valid = tb.values_of(rows[s.BROKER_ID])
        brokers = np.where(valid, ids, np.iinfo(np.int64).min)  # null brokers' rows are one group too
        starts = np.flatnonzero(tb.group_starts(brokers))
        for start, end in zip(starts, [*starts[1:], rows.num_rows], strict=True):
            if held and held_broker != brokers[start]:
                yield pa.concat_tables(held)
                held = []
            held.append(rows.slice(start, end - start))
            held_broker = brokers[start]
    if held:
        yield pa.concat_tables(held)


# ---------------------------------------------------------------------------------------------------------
# The broker task.


def parse_file(path: str) -> pa.Table:
    """The file's records with the job's fields; lines that do not parse are dropped, as are records
    without kind or ts_ms."""
    from pyarrow import json as pa_json

    read = pa_json.ReadOptions(use_threads=False)
    parse = pa_json.ParseOptions(explicit_schema=IN_SCHEMA, unexpected_field_behavior="ignore")
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
        table = pa.concat_tables(pieces) if pieces else IN_SCHEMA.empty_table()
    if table.num_rows == 0:
        return table
    keep = pc.and_(pc.is_valid(table[s.KIND]), pc.is_valid(table[s.TS_MS]))
    return table.filter(keep)


def ordered_rows(files: Sequence[str], broker: int) -> tuple[pa.Table, np.ndarray, int, int, int]:
    """One broker's files → (its rows grouped by replica in time order, each replica's first row,
    files sorted, foreign records, repeats dropped (``tables.drop_repeats``))."""
    parsed = [parse_file(path) for path in files]
    table = pa.concat_tables(parsed) if parsed else IN_SCHEMA.empty_table()
    n = table.num_rows
    if n == 0:
        return table, np.zeros(0, dtype=bool), 0, 0, 0
    file_no = np.concatenate([np.full(t.num_rows, i, dtype=np.int64) for i, t in enumerate(parsed)])
    broker_ids, broker_valid = tb.values_of(table[s.BROKER_ID])
    foreign = int(np.count_nonzero(~broker_valid | (broker_ids != broker)))
    if foreign:
        return table, np.zeros(0, dtype=bool), 0, foreign, 0
    keys = [tb.codes_of(table[name]) for name in tb.REPLICA_KEY]  # topic, partition, broker_id, kind
    ts = table[s.TS_MS].to_numpy().astype(np.int64)
    rows = np.arange(n)
    # Stable grouping by replica: each replica's rows stay in file order.
    order = np.lexsort((rows, *reversed(keys)))
    first = tb.group_starts(*(k[order] for k in keys))
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
            files_sorted = len(parsed)
    order, first, duplicates = tb.drop_repeats(order, first, ts)
    return table.take(pa.array(order)), first, files_sorted, 0, duplicates


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


def broker_pass(t: pa.Table, first: np.ndarray, config: LagJobConfig, out: PartWriter) -> None:
    """One broker's rows (grouped by replica in time order) → its tables and partials, appended to its
    task's files."""
    tables, partials = tb.broker_tables(tb.derive(t, first), config)
    for name, table in tables.items():
        out.table(name, table)
    for name, partial in partials.items():
        out.partial(name, partial)


def files_pass(files: Sequence[str], broker: int, config: LagJobConfig, out: PartWriter) -> dict[str, int]:
    """One broker's files through the pass; returns its statistics (nothing is written when a record is
    another broker's: the pass is then not used)."""
    t, first, files_sorted, foreign, duplicates = ordered_rows(files, broker)
    if not foreign:
        broker_pass(t, first, config, out)
    return {"records": t.num_rows, "files_sorted": files_sorted, "foreign": foreign, "duplicates": duplicates}


def rows_pass(rows: pa.Table, config: LagJobConfig, out: PartWriter) -> dict[str, int]:
    """One broker's records (any order) through the pass; returns its statistics."""
    t, first, duplicates = tb.in_replica_order(rows.cast(IN_SCHEMA))
    broker_pass(t, first, config, out)
    return {"records": t.num_rows, "files_sorted": 0, "foreign": 0, "duplicates": duplicates}


# ---------------------------------------------------------------------------------------------------------
# The driver: what crosses brokers, from the partials.


def _read_partials(staging: Path, name: str) -> pa.Table:
    tables = []
    for path in sorted((staging / PARTIALS_DIR).glob(f"{name}-part-*.arrow")):
        with pa.memory_map(str(path)) as source:
            tables.append(pa.ipc.open_file(source).read_all())
    return pa.concat_tables(tables) if tables else tb.PARTIAL_SCHEMAS[name].empty_table()


def broker_runs(staging: Path) -> list[tuple[Any, ...]]:
    """(broker_id, broker_start_ms, records, first_ts_ms, last_ts_ms) per broker run, ordered by
    broker and first ts_ms."""
    runs = _read_partials(staging, tb.P_RUNS)
    rows = [tuple(row.values()) for row in runs.to_pylist()]
    return sorted(rows, key=lambda row: (row[0] is not None, row[0] or 0, row[3]))


def finish(staging: Path, config: LagJobConfig) -> None:
    """The tables that cross brokers, from the tasks' partials, written under ``staging``."""
    isr = ds.dataset(staging / s.TABLE_REPLICA_LAG, schema=s.TABLE_SCHEMAS[s.TABLE_REPLICA_LAG]).to_table(
        columns=[s.TOPIC, s.PARTITION, "follower_id", s.TS_MS, s.IN_SYNC]
    )
    partials = {name: _read_partials(staging, name) for name in tb.PARTIAL_SCHEMAS}
    for name, table in tb.finish_tables(partials, isr, config).items():
        (staging / name).mkdir(exist_ok=True)
        pq.write_table(table, staging / name / "part-00000.parquet")
    for name in tb.ROW_TABLES:  # a table no task wrote (no records): one empty part, so it reads back typed
        if not any((staging / name).iterdir()):
            pq.write_table(s.TABLE_SCHEMAS[name].empty_table(), staging / name / "part-00000.parquet")
