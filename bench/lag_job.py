"""Benchmark: metric records per second through the batch lag job on local[2].

Generates 100 brokers × 1000 partition replicas × 100 samples = 10,000,000 partition records
(1,000,000 with --quick: 10 samples) with Spark itself, written as JSON lines in the metrics-dir
layout, outside the timing (``--data DIR`` keeps them there for the next run). Brokers form groups of
three (one leader, two followers per partition).

Everything runs in one session. Its start is reported apart (``session_start_s``), and one untimed
job and scan over the 1M records warm the JVM (class loading, code generation, JIT) before anything
is timed. Then the baseline, a plain Spark JSON scan-and-aggregate of the same files with the full
record schema, and the job (``spark_app.run_batch``: read, every table, Parquet, dashboard) run
alternately ``--repeat`` times each, timed the same way: wall time and CPU seconds (the JVM's plus
this process's, from /proc; with 2 cores CPU can reach twice the wall time). The best run of each is
the figure, ``job_over_scan`` their ratio; every run and the job's phases are printed too. The
machine's 1-minute load average at the start and the end tells a slow run from a slow job.

A second baseline, the ordering floor (``order``), runs beside them: read the fields the job reads,
shuffle by partition and sort each replica's samples by time, into Spark's ``noop`` sink. Every table
needs that order (counter deltas between consecutive samples, ISR transitions, lag windows), so no
job that computes them can be faster: ``order_over_scan`` is the least ``job_over_scan`` can be,
``job_over_order_floor`` what the tables and the page cost on top of it.

Two more floors bound a job that skips the shuffle and the sort because each file already holds its
replicas' samples in time order, and computes the per-replica facts in one Python pass per file:
``arrow`` (Spark's JSON reader, every row handed to Python through ``mapInArrow``, ``arrow_over_scan``)
and ``file_parse`` (one Spark task per file parsing it with pyarrow's JSON reader, ``file_parse_over_scan``).
Neither computes anything: a job on that path costs at least that much.

The files are 16 slices of the records in sample order, each holding a sample of most brokers' replicas:
no file holds two samples of one replica. ``--by-broker`` writes the same records the way the emitter
does instead, one broker's samples per file in time order (one file per broker at 1M, ten rolled files
per broker at 10M), which is the layout a job that reads each file in order as one unit relies on.

The job runs on its default path, each broker's files read in order by one task (``lagapp.file_pass``;
on the 16 slices, whose files are not one broker's each, Spark reads the records and sorts them by
broker instead, then the same pass), or with ``--sorted`` on that second path, so the two can be
compared on the same data (``path`` in the output).

Run: .venv/bin/python -m bench.lag_job [--quick] [--repeat N] [--data DIR] [--by-broker] [--sorted]
(prints one JSON object as the last line)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from bench.common import process_cpu_s
from lagapp import schema as s
from lagapp import spark_app
from lagapp.tables import REPLICA_KEY, LagJobConfig

T0 = 1_700_000_000_000
BROKERS = 100
REPLICAS_PER_BROKER = 1000


def generated_records(
    spark: SparkSession,
    samples: int,
    brokers: int = BROKERS,
    replicas_per_broker: int = REPLICAS_PER_BROKER,
    first_sample: int = 0,
    files_per_broker: int = 0,
) -> DataFrame:
    """Partition records for every broker, replica and sample (one per second from ``first_sample``), as
    Spark expressions (no Python rows).

    ``files_per_broker`` 0: 16 partitions of the records in sample order, each holding a slice of every
    broker's sample (what the bench has always measured). Otherwise the emitter's layout: partition
    ``b * files_per_broker + k`` holds broker b's k-th run of ``samples / files_per_broker`` samples, in
    time order, as a rolled file of that broker would."""
    if files_per_broker:
        if samples % files_per_broker:
            raise ValueError(f"{samples} samples do not split into {files_per_broker} files per broker")
        per_broker = samples * replicas_per_broker
        ids = spark.range(0, brokers * per_broker, numPartitions=brokers * files_per_broker)
        broker = (F.col("id") / per_broker).cast("int")
        sample = F.lit(first_sample) + ((F.col("id") % per_broker) / replicas_per_broker).cast("long")
    else:
        per_sample = brokers * replicas_per_broker
        ids = spark.range(first_sample * per_sample, (first_sample + samples) * per_sample, numPartitions=16)
        sample = (F.col("id") / per_sample).cast("long")
        broker = ((F.col("id") % per_sample) / replicas_per_broker).cast("int")
    slot = (F.col("id") % replicas_per_broker).cast("int")
    group = (broker / 3).cast("int")
    leader = group * 3
    is_leader = broker == leader
    ts = F.lit(T0) + sample * 1000
    leo = sample * 100 + slot
    lag = (sample * 7 + slot + broker) % 50
    fetch = leo - lag
    counter = sample * 1000 + slot
    followers = F.array(
        *(
            F.struct(
                (leader + k).alias(s.BROKER_ID),
                leo.alias(s.LOG_END_OFFSET),
                ts.alias(s.LAST_CAUGHT_UP_MS),
                ((sample + slot + k) % 10 != 0).alias(s.IN_SYNC),
            )
            for k in (1, 2)
        )
    )

    def lead_only(value: object) -> Column:
        return F.when(is_leader, value)

    def follow_only(value: object) -> Column:
        return F.when(~is_leader, value)

    return ids.select(
        F.lit(s.KIND_PARTITION).alias(s.KIND),
        ts.alias(s.TS_MS),
        broker.alias(s.BROKER_ID),
        F.lit(T0 - 60_000).alias(s.BROKER_START_MS),
        F.concat(F.lit("bench-"), group.cast("string")).alias(s.TOPIC),
        slot.alias(s.PARTITION),
        F.when(is_leader, s.ROLE_LEADER).otherwise(s.ROLE_FOLLOWER).alias(s.ROLE),
        leader.alias(s.LEADER_ID),
        F.lit(0).alias(s.LEADER_EPOCH),
        F.lit(0).alias(s.LOG_START_OFFSET),
        leo.alias(s.LOG_END_OFFSET),
        leo.alias(s.HIGH_WATERMARK),
        follow_only(fetch).alias(s.FETCH_OFFSET),
        follow_only(lag).alias(s.LAG_MESSAGES),
        follow_only(lag * 20).alias(s.LAG_MS),
        lead_only(F.lit(3)).alias(s.ISR_SIZE),
        lead_only(F.lit(3)).alias(s.REPLICA_COUNT),
        lead_only(F.lit(False)).alias(s.UNDER_REPLICATED),
        lead_only(F.lit(False)).alias(s.UNDER_MIN_ISR),
        lead_only(followers).alias(s.FOLLOWERS),
        F.when(is_leader, counter * 10).otherwise(0).alias(s.BYTES_IN),
        F.when(is_leader, counter * 8).otherwise(0).alias(s.BYTES_OUT),
        F.when(is_leader, 0).otherwise(counter * 10).alias(s.REPLICATION_BYTES_IN),
        F.when(is_leader, counter * 20).otherwise(0).alias(s.REPLICATION_BYTES_OUT),
        F.when(is_leader, counter).otherwise(0).alias(s.MESSAGES_IN),
        F.lit(0).alias(s.ISR_SHRINKS),
        F.lit(0).alias(s.ISR_EXPANDS),
    )


def write_metrics_dir(spark: SparkSession, samples: int, root: Path, files_per_broker: int = 0) -> Path:
    """JSON lines under root/metrics, files named like rolled metrics files; kept ones are reused.

    ``files_per_broker``: see ``generated_records``; the files are then named after the broker and the
    first sample they hold, as the file sink names them."""
    metrics = root / "metrics"
    if metrics.is_dir() and any(metrics.glob("broker-*.jsonl")):
        return metrics
    tmp = root / "spark-out"
    generated_records(spark, samples, files_per_broker=files_per_broker).write.mode("overwrite").json(str(tmp))
    metrics.mkdir(parents=True)
    for n, part in enumerate(sorted(tmp.glob("part-*"))):
        if files_per_broker:
            broker, run = divmod(n, files_per_broker)
            part.rename(metrics / f"broker-{broker}-{T0 + run * (samples // files_per_broker) * 1000}.jsonl")
        else:
            part.rename(metrics / f"broker-{n}-{T0}.jsonl")
    shutil.rmtree(tmp)
    return metrics


@dataclass
class Timing:
    wall_s: float
    cpu_s: float
    phases: dict[str, float] = field(default_factory=dict)


class Clock:
    """Wall time, and the CPU time of the session's JVM, its Python workers and this Python process."""

    def __init__(self, spark: SparkSession) -> None:
        jvm: Any = spark.sparkContext._jvm
        self._jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())

    def cpu_s(self) -> float:
        return process_cpu_s(self._jvm_pid) + descendants_cpu_s(self._jvm_pid) + time.process_time()

    def measure(self, run: Callable[[], object]) -> Timing:
        wall, cpu = time.monotonic(), self.cpu_s()
        done = run()
        phases = done if isinstance(done, dict) else {}
        return Timing(round(time.monotonic() - wall, 2), round(self.cpu_s() - cpu, 2), phases)


def descendants_cpu_s(root_pid: int) -> float:
    """CPU seconds of every live descendant of ``root_pid`` (the JVM's Python worker daemon and workers),
    including their reaped children: a worker that exited is counted in its daemon's child times."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(stat.parent.name)
        # stat fields 14-17 are utime, stime, cutime, cstime: 11-14 counted from the state after "(comm)".
        parents[pid] = int(fields[1])
        times[pid] = sum(int(v) for v in fields[11:15]) / ticks
    total = 0.0
    for pid in times:
        ancestor = parents.get(pid)
        while ancestor is not None and ancestor > 1:
            if ancestor == root_pid:
                total += times[pid]
                break
            ancestor = parents.get(ancestor)
    return total


def scan(spark: SparkSession, metrics: Path) -> None:
    """The baseline: a plain scan-and-aggregate of the same files with the full record schema."""
    paths = [str(p) for p in spark_app.list_metric_files(metrics)]
    spark.read.schema(s.RECORD_SCHEMA).json(paths).groupBy(s.BROKER_ID).agg(
        F.count(F.lit(1)), F.max(s.TS_MS), F.max(s.LAG_MESSAGES)
    ).collect()


def order(spark: SparkSession, metrics: Path) -> None:
    """The floor of any job that needs each replica's samples in time order (counter deltas, ISR
    transitions, lag windows): read the fields the job reads, shuffle by partition and sort by replica
    and time, into a sink that discards the rows. No table is computed."""
    records = spark_app.read_records(spark, spark_app.list_metric_files(metrics))
    ordered = records.repartition(s.TOPIC, s.PARTITION).sortWithinPartitions(*REPLICA_KEY, s.TS_MS)
    ordered.write.format("noop").mode("overwrite").save()


def arrow_floor(spark: SparkSession, metrics: Path) -> None:
    """The floor of a job that computes the per-replica facts in Python on the rows Spark's JSON reader
    parses (``mapInArrow`` / ``mapInPandas``): read the fields the job reads and hand every row to a
    Python worker as Arrow batches that only counts them. No shuffle, no sort."""
    records = spark_app.read_records(spark, spark_app.list_metric_files(metrics))
    records.mapInArrow(_count_rows, "rows long").write.format("noop").mode("overwrite").save()


def _count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pydict({"rows": [sum(batch.num_rows for batch in batches)]})


def file_floor(spark: SparkSession, metrics: Path) -> None:
    """The floor of a job whose unit of work is a whole file parsed in Python: one Spark task per file
    parses it with pyarrow's JSON reader into the fields the job reads (``LAG_JOB_SCHEMA``) and returns
    only its row count. Spark's JSON reader and the JVM-to-Python transfer are not on this path."""
    paths = [str(p) for p in spark_app.list_metric_files(metrics)]
    arrow_schema = to_arrow_schema(s.LAG_JOB_SCHEMA)

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyarrow import json as pa_json

        options = pa_json.ParseOptions(explicit_schema=arrow_schema, unexpected_field_behavior="ignore")
        rows = 0
        for batch in batches:
            for index in batch.column(0).to_pylist():
                rows += pa_json.read_json(
                    paths[index], read_options=pa_json.ReadOptions(use_threads=False), parse_options=options
                ).num_rows
        yield pa.RecordBatch.from_pydict({"rows": [rows]})

    files = spark.range(len(paths), numPartitions=len(paths))
    files.mapInArrow(parse, "rows long").write.format("noop").mode("overwrite").save()


def job(spark: SparkSession, metrics: Path, out: Path, per_file: bool = True) -> dict[str, float]:
    """The whole batch job: read, every table, Parquet, dashboard. Returns its phase times.

    ``per_file``: the job's path (``spark_app.run_batch``); on the 16 slices it takes Spark's reader and
    the sort by broker."""
    result = spark_app.run_batch(spark, metrics, out, LagJobConfig(window_ms=10_000), per_file=per_file)
    return result.extra


def compare(
    clock: Clock, spark: SparkSession, metrics: Path, out: Path, records: int, repeat: int, per_file: bool = True
) -> dict[str, Any]:
    """Scan, ordering floor and job in turn, ``repeat`` times each; the fastest run of each is the figure."""
    scans: list[Timing] = []
    orders: list[Timing] = []
    arrows: list[Timing] = []
    file_parses: list[Timing] = []
    jobs: list[Timing] = []
    for _ in range(repeat):
        scans.append(clock.measure(lambda: scan(spark, metrics)))
        orders.append(clock.measure(lambda: order(spark, metrics)))
        arrows.append(clock.measure(lambda: arrow_floor(spark, metrics)))
        file_parses.append(clock.measure(lambda: file_floor(spark, metrics)))
        jobs.append(clock.measure(lambda: job(spark, metrics, out, per_file)))
    best_scan = min(scans, key=lambda t: t.wall_s)
    best_order = min(orders, key=lambda t: t.wall_s)
    best_arrow = min(arrows, key=lambda t: t.wall_s)
    best_file = min(file_parses, key=lambda t: t.wall_s)
    best_job = min(jobs, key=lambda t: t.wall_s)
    return {
        "records": records,
        "records_per_s": round(records / best_job.wall_s),
        "job_s": best_job.wall_s,
        "job_cpu_s": best_job.cpu_s,
        "scan_records_per_s": round(records / best_scan.wall_s),
        "scan_s": best_scan.wall_s,
        "scan_cpu_s": best_scan.cpu_s,
        "job_over_scan": round(best_job.wall_s / best_scan.wall_s, 2),
        "order_s": best_order.wall_s,
        "order_cpu_s": best_order.cpu_s,
        "order_over_scan": round(best_order.wall_s / best_scan.wall_s, 2),
        "job_over_order_floor": round(best_job.wall_s / best_order.wall_s, 2),
        "arrow_s": best_arrow.wall_s,
        "arrow_cpu_s": best_arrow.cpu_s,
        "arrow_over_scan": round(best_arrow.wall_s / best_scan.wall_s, 2),
        "file_parse_s": best_file.wall_s,
        "file_parse_cpu_s": best_file.cpu_s,
        "file_parse_over_scan": round(best_file.wall_s / best_scan.wall_s, 2),
        "job_phases_s": best_job.phases,
        "job_runs_s": [t.wall_s for t in jobs],
        "job_runs_cpu_s": [t.cpu_s for t in jobs],
        "scan_runs_s": [t.wall_s for t in scans],
        "json_bytes": sum(p.stat().st_size for p in metrics.iterdir()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000,000 records only (no 10,000,000 run)")
    parser.add_argument("--repeat", type=int, default=2, metavar="N", help="timed runs of job and scan (default 2)")
    parser.add_argument("--data", type=Path, metavar="DIR", help="keep the generated records here and reuse them")
    parser.add_argument(
        "--sorted", action="store_true", help="the job's path through Spark's reader and a sort by broker"
    )
    parser.add_argument(
        "--by-broker",
        action="store_true",
        help="write the records as the emitter does: files of one broker each, its samples in time order",
    )
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    # The Python floors run Python workers, which need this interpreter's pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.monotonic()
    spark = spark_app.create_session("local[2]", "minibroker-bench-lag-job")
    session_start_s = time.monotonic() - started
    clock = Clock(spark)
    root = args.data or Path(tempfile.mkdtemp(prefix="bench-lag-job-"))
    out = Path(tempfile.mkdtemp(prefix="bench-lag-job-out-"))
    try:
        if args.by_broker:
            # One file per broker at 1M (10 samples), ten rolled files per broker at 10M (100 samples).
            small = write_metrics_dir(spark, 10, root / "1m-by-broker", files_per_broker=1)
            big = None if args.quick else write_metrics_dir(spark, 100, root / "10m-by-broker", files_per_broker=10)
        else:
            small = write_metrics_dir(spark, 10, root / "1m")
            big = None if args.quick else write_metrics_dir(spark, 100, root / "10m")

        def warm() -> None:
            scan(spark, small)
            order(spark, small)
            arrow_floor(spark, small)
            file_floor(spark, small)
            job(spark, small, out / "warm-up", not args.sorted)

        warm_up = clock.measure(warm)
        result: dict[str, Any] = {
            "path": "sorted" if args.sorted else "per_file",
            "session_start_s": round(session_start_s, 2),
            "warm_up_s": warm_up.wall_s,
        }
        one_m = compare(clock, spark, small, out / "1m", 1_000_000, args.repeat, not args.sorted)
        if big is None:
            result.update(one_m)
        else:
            result.update(compare(clock, spark, big, out / "10m", 10_000_000, args.repeat, not args.sorted))
            result["at_1m"] = one_m
            result["growth_1m_to_10m"] = round(result["job_s"] / one_m["job_s"], 2)
        result["load_avg_1m_start"] = round(load_start, 2)
        result["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
        print(json.dumps(result))
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)
        if args.data is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
