"""Prototype, not the job: the lag job's per-replica facts from each broker's files read in order,
without a shuffle or a sort (issue 33), and a bench of it against the job's sorted path.

How this works: a broker writes its own samples, in time order, to its files (``broker-<id>-<first
ts_ms>.jsonl``, then ``_active/broker-<id>.jsonl``). So every sample of a replica (topic, partition,
broker_id, kind) is in the files of its broker, and in those files' order. ``replica_samples_of_files``
runs one Spark task per broker (``mapInArrow`` over the list of brokers): it parses the broker's files
with pyarrow's JSON reader (the job's fields only), groups the rows by replica (a stable order of the
row numbers, which keeps each replica's samples in file order), checks that each replica's ``ts_ms``
never goes back, and computes with numpy every column ``lag_job.replica_samples`` derives (counter
deltas, interval, incarnation start, role at the newest record) plus the follower-status lags
(``FOLLOWER_PREV_COLUMNS``). The output has ``replica_samples``' columns and values, row for row
(``tests/metrics/test_file_pass.py`` compares every table), without its shuffle and sort.

Order: a file in which some replica's ``ts_ms`` goes back (a wall-clock step) is sorted alone, by
replica and ``ts_ms``; if a replica's samples go back across two files, the broker's rows are sorted
by replica and ``ts_ms``. Either is counted (``FilePassStats.files_sorted``). A record whose
``broker_id`` is not its file's broker (a file not written by the emitter) makes the result unusable:
``FilePassStats.foreign_records`` counts them, and a job would fall back to ``replica_samples``.

Lines pyarrow cannot parse (a line cut by a crash) are dropped, as the Spark reader's DROPMALFORMED
drops them, and so are rows without kind or ts_ms (``spark_app.read_records``).

Why it is not the job (docs/benchmarks.md, issue 33): the Python pass itself is cheap (parse and
derive ~5 CPU-s for 1M records in one process), but Spark taking its rows back, caching them, and
tables that are no longer clustered by partition (each aggregation shuffles, the leader rows are
shuffled for the sequences that cross brokers) cost more CPU than the shuffle and sort they replace.

Run: .venv/bin/python -m bench.lag_file_pass --data DIR (DIR as ``bench.lag_job --by-broker --data``
left it; prints one JSON object as the last line)
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Accumulator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from metrics import lag_job
from metrics import schema as s

# Columns beyond ``replica_samples``': a follower sample's lags within the follower samples of its
# replica, which ``follower_status_of_samples`` otherwise reads with a window (null on other rows).
# (With a ``lag_job.follower_status_of_samples`` that reads these instead of its window, the follower rows
# need no sort either; the job's function does not, so here they are shuffled and sorted again.)
FS_PREV_TS_MS = "_fs_prev_ts_ms"
FS_PREV_FETCH_OFFSET = "_fs_prev_fetch_offset"
FS_PREV_LAG_MESSAGES = "_fs_prev_lag_messages"
FS_EPOCH_BEFORE = "_fs_epoch_before"
FS_LAST_TS_MS = "_fs_last_ts_ms"
FOLLOWER_PREV_COLUMNS: tuple[StructField, ...] = (
    StructField(FS_PREV_TS_MS, LongType()),
    StructField(FS_PREV_FETCH_OFFSET, LongType()),
    StructField(FS_PREV_LAG_MESSAGES, LongType()),
    StructField(FS_EPOCH_BEFORE, IntegerType()),
    StructField(FS_LAST_TS_MS, LongType()),
)

_BROKER_FILE = re.compile(r"^broker-(-?\d+)(?:-.*)?$")


def file_broker(path: Path) -> int | None:
    """The broker a metrics file belongs to, from its name (``broker-<id>-<ts>`` or ``broker-<id>``)."""
    match = _BROKER_FILE.match(path.stem)
    return int(match.group(1)) if match else None


def samples_schema(spark: SparkSession) -> StructType:
    """``replica_samples``' output schema for records read with ``LAG_JOB_SCHEMA``, plus the follower lags."""
    empty = spark.createDataFrame([], s.LAG_JOB_SCHEMA)
    base = lag_job.replica_samples(empty).schema
    fields = [StructField(f.name, f.dataType, True) for f in base.fields]
    return StructType(fields + list(FOLLOWER_PREV_COLUMNS))


@dataclass
class FilePassStats:
    """What the tasks found, read on the driver once the samples were computed."""

    files_sorted: Accumulator[int]
    foreign_records: Accumulator[int]


def replica_samples_of_files(spark: SparkSession, paths: Sequence[Path]) -> tuple[DataFrame, FilePassStats]:
    """``replica_samples(read_records(spark, paths))``, computed per broker in one task each (see the module
    docstring); its ``FilePassStats`` are filled as the frame is computed."""
    groups: dict[object, list[str]] = {}
    for path in paths:
        broker = file_broker(path)
        groups.setdefault(broker if broker is not None else f"file:{path}", []).append(str(path))
    keys = list(groups)
    work = [(file_broker(Path(groups[k][0])) if not isinstance(k, str) else None, groups[k]) for k in keys]
    out_schema = samples_schema(spark)
    in_schema = to_arrow_schema(s.LAG_JOB_SCHEMA)
    arrow_out = to_arrow_schema(out_schema)
    files_sorted = spark.sparkContext.accumulator(0)
    foreign = spark.sparkContext.accumulator(0)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                broker, files = work[index]
                table, n_sorted, n_foreign = broker_samples(files, broker, in_schema, arrow_out)
                if n_sorted:
                    files_sorted.add(n_sorted)
                if n_foreign:
                    foreign.add(n_foreign)
                yield from table.to_batches(max_chunksize=65_536)

    tasks = spark.range(len(work), numPartitions=max(len(work), 1))
    return tasks.mapInArrow(run, out_schema), FilePassStats(files_sorted, foreign)


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


def _codes(column: pa.ChunkedArray) -> np.ndarray:
    """Integer codes of a column's values, null its own code (-1): equal values, equal codes."""
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        # one array, so one dictionary: the chunks of several files would each get their own
        encoded = pc.dictionary_encode(column.combine_chunks())
        codes: np.ndarray = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        return codes
    values = pc.fill_null(column, 0).to_numpy().astype(np.int64)
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    # nulls apart from every value: shift the values up one and give nulls the code below all of them
    return np.where(valid, values - values.min(initial=0) + 1, 0)


def _values(column: pa.ChunkedArray | pa.Array, fill: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls as ``fill``, validity) of an integer column."""
    valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
    values = pc.fill_null(column, fill).to_numpy(zero_copy_only=False).astype(np.int64)
    return values, valid


def _shift(values: np.ndarray, by: int, fill: Any) -> np.ndarray:
    out = np.empty_like(values)
    out[:by] = fill
    out[by:] = values[:-by] if by < len(values) else values[:0]
    return out


def broker_samples(
    files: Sequence[str], broker: int | None, in_schema: pa.Schema, out_schema: pa.Schema
) -> tuple[pa.Table, int, int]:
    """One broker's files in order → (its ``replica_samples`` rows, files sorted, foreign records)."""
    tables = [parse_file(path, in_schema) for path in files]
    file_no = np.concatenate([np.full(t.num_rows, i, dtype=np.int64) for i, t in enumerate(tables)] or [np.zeros(0)])
    table = pa.concat_tables(tables) if tables else in_schema.empty_table()
    n = table.num_rows
    if n == 0:
        return out_schema.empty_table(), 0, 0
    broker_ids, broker_valid = _values(table[s.BROKER_ID])
    foreign = 0
    if broker is not None:
        foreign = int(np.count_nonzero(~broker_valid | (broker_ids != broker)))
    keys = [_codes(table[name]) for name in lag_job.REPLICA_KEY]  # topic, partition, broker_id, kind
    ts = table[s.TS_MS].to_numpy().astype(np.int64)
    rows = np.arange(n)
    # Stable grouping by replica: each replica's rows stay in file order.
    order = np.lexsort((rows, *reversed(keys)))
    sorted_keys = [k[order] for k in keys]
    first = np.ones(n, dtype=bool)
    first[1:] = np.logical_or.reduce([k[1:] != k[:-1] for k in sorted_keys])
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
    t = table.take(pa.array(order))
    return _derive(t, first, out_schema), files_sorted, foreign


def _derive(t: pa.Table, first: np.ndarray, out_schema: pa.Schema) -> pa.Table:
    """The derived columns over rows grouped by replica in time order (``first``: a replica's first row)."""
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
    columns: dict[str, pa.Array] = {}
    for name in s.PARTITION_COUNTERS:
        value, _ = _values(t[name])
        before = _shift(value, 1, 0)
        counts_all = first | restarted_true | (value < before)
        columns[lag_job.delta_column(name)] = pa.array(np.where(counts_all, value, value - before), pa.int64())
    columns[lag_job.INTERVAL_MS] = pa.array(np.where(first, 0, ts - prev_ts), pa.int64())
    columns[lag_job.INCARNATION_FIRST] = pa.array(first | restarted_true | restarted_null, pa.bool_())
    kind = t[s.KIND]
    role = t[s.ROLE]
    fetch, fetch_valid = _values(t[s.FETCH_OFFSET])
    is_partition = pc.fill_null(pc.equal(kind, s.KIND_PARTITION), False).to_numpy(zero_copy_only=False)
    is_follower_role = pc.fill_null(pc.equal(role, s.ROLE_FOLLOWER), False).to_numpy(zero_copy_only=False)
    follower = is_partition & is_follower_role & fetch_valid & (fetch >= 0)
    columns[lag_job.FOLLOWER_SAMPLE] = pa.array(follower, pa.bool_())
    # The replica's role at its newest record with a role other than offline.
    has_role = pc.fill_null(pc.not_equal(role, s.ROLE_OFFLINE), False).to_numpy(zero_copy_only=False)
    candidate = np.where(has_role, np.arange(n), -1)
    last = np.maximum.reduceat(candidate, starts)[rep]
    role_array = role.combine_chunks() if isinstance(role, pa.ChunkedArray) else role
    columns[lag_job.ROLE_LAST] = role_array.take(pa.array(np.maximum(last, 0), pa.int64(), mask=last < 0))
    columns.update(_follower_lags(t, follower, rep, ts))
    out: dict[str, Any] = {name: t[name] for name in t.column_names if name not in s.PARTITION_COUNTERS}
    out.update(columns)
    return pa.table([out[field.name] for field in out_schema], names=out_schema.names).cast(out_schema)


def _follower_lags(t: pa.Table, follower: np.ndarray, rep: np.ndarray, ts: np.ndarray) -> dict[str, pa.Array]:
    """``follower_status_of_samples``' window columns, over each replica's follower samples."""
    n = t.num_rows
    idx = np.flatnonzero(follower)
    m = len(idx)
    frep = rep[idx]
    fts = ts[idx]
    fetch, _ = _values(t[s.FETCH_OFFSET].take(pa.array(idx)))
    lag, lag_valid = _values(t[s.LAG_MESSAGES].take(pa.array(idx)))
    epoch, epoch_valid = _values(t[s.LEADER_EPOCH].take(pa.array(idx)))
    has1 = np.zeros(m, dtype=bool)
    has1[1:] = frep[1:] == frep[:-1]
    has2 = np.zeros(m, dtype=bool)
    has2[2:] = frep[2:] == frep[:-2]
    e1, e1v = _shift(epoch, 1, 0), _shift(epoch_valid, 1, False) & has1
    e2, e2v = _shift(epoch, 2, 0), _shift(epoch_valid, 2, False) & has2
    before = np.where(e2v, e2, e1)
    before_valid = e2v | e1v
    last_ts = np.zeros(m, dtype=np.int64)
    if m:
        fstarts = np.flatnonzero(~has1)
        group = np.cumsum(~has1) - 1
        last_ts = np.maximum.reduceat(fts, fstarts)[group]

    def spread(values: np.ndarray, valid: np.ndarray, kind: pa.DataType) -> pa.Array:
        full = np.zeros(n, dtype=np.int64)
        mask = np.zeros(n, dtype=bool)
        full[idx] = values
        mask[idx] = valid
        return pa.array(full, kind, mask=~mask)

    return {
        FS_PREV_TS_MS: spread(_shift(fts, 1, 0), has1, pa.int64()),
        FS_PREV_FETCH_OFFSET: spread(_shift(fetch, 1, 0), has1, pa.int64()),
        FS_PREV_LAG_MESSAGES: spread(_shift(lag, 1, 0), has1 & _shift(lag_valid, 1, False), pa.int64()),
        FS_EPOCH_BEFORE: spread(before, before_valid, pa.int32()),
        FS_LAST_TS_MS: spread(last_ts, np.ones(m, dtype=bool), pa.int64()),
    }


def _read_and_tables(
    spark: SparkSession, files: Sequence[Path], out: Path, per_file: bool, clock: Any
) -> dict[str, float]:
    """The job's first two phases on one path: the per-replica facts cached and the broker runs
    collected (``read``), then every table written as Parquet (``tables``); wall and CPU seconds of each."""
    from pyspark.storagelevel import StorageLevel

    from metrics import dashboard, spark_app
    from metrics.lag_job import LagJobConfig

    config = LagJobConfig(window_ms=10_000)
    records = spark_app.read_records(spark, files)
    held: dict[str, Any] = {}
    cached: list[DataFrame] = []

    def read() -> None:
        derived = replica_samples_of_files(spark, files)[0] if per_file else lag_job.replica_samples(records)
        held["samples"] = derived.persist(StorageLevel.MEMORY_AND_DISK)
        held["runs"] = dashboard.broker_runs(held["samples"])

    def keep(df: DataFrame) -> DataFrame:
        cached.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    def tables() -> None:
        now_ms = max(run.last_ts_ms for run in held["runs"])
        spark_app.write_tables(lag_job.tables_of_samples(held["samples"], config, now_ms=now_ms, keep=keep), out)

    first, second = clock.measure(read), clock.measure(tables)
    for df in [*cached, held["samples"]]:
        df.unpersist()
    return {"read_s": first.wall_s, "read_cpu_s": first.cpu_s, "tables_s": second.wall_s, "tables_cpu_s": second.cpu_s}


def main() -> None:
    import argparse
    import json
    import os
    import shutil
    import sys
    import tempfile

    from bench.lag_job import Clock
    from metrics import spark_app

    parser = argparse.ArgumentParser(description="the per-file pass against the sorted path: read and tables")
    parser.add_argument("--data", type=Path, required=True, help="a bench.lag_job --by-broker --data DIR")
    parser.add_argument("--repeat", type=int, default=2, metavar="N")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = spark_app.create_session("local[2]", "minibroker-bench-lag-file-pass")
    clock = Clock(spark)
    files = spark_app.list_metric_files(args.data / "1m-by-broker" / "metrics")
    out = Path(tempfile.mkdtemp(prefix="bench-lag-file-pass-"))
    load_start = os.getloadavg()[0]
    runs: dict[str, list[dict[str, float]]] = {"per_file": [], "sorted": []}
    try:
        for n in range(args.repeat):
            for name in runs:
                runs[name].append(_read_and_tables(spark, files, out / f"{name}-{n}", name == "per_file", clock))
                print(name, runs[name][-1], file=sys.stderr, flush=True)
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)

    def best(name: str) -> dict[str, float]:
        return min(runs[name], key=lambda r: r["read_cpu_s"] + r["tables_cpu_s"])

    result = {
        "files": len(files),
        "per_file": best("per_file"),
        "sorted": best("sorted"),
        "runs": runs,
        "load_avg_1m_start": round(load_start, 2),
        "load_avg_1m_end": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
