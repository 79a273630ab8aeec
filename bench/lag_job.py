"""Benchmark: metric records per second through the batch lag job on local[2].

Generates 100 brokers × 1000 partition replicas × 100 samples = 10,000,000 partition records
(1,000,000 with --quick: 10 samples) with Spark itself, written as JSON lines in the metrics-dir
layout, outside the timing. Brokers form groups of three (one leader, two followers per partition).
Times ``spark_app.run_batch`` (read, all seven tables, Parquet, dashboard) after the session has
started, then the same job on 1,000,000 records, and as a baseline a plain JSON scan-and-aggregate
of the same files with the same schema, to show how much of the job is JSON parsing. The machine's
1-minute load average at the start and the end is printed too: on a shared machine it tells a slow
run from a slow job.

Run: .venv/bin/python -m bench.lag_job [--quick]   (prints one JSON object as the last line)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from metrics import schema as s
from metrics import spark_app
from metrics.lag_job import LagJobConfig

T0 = 1_700_000_000_000
BROKERS = 100
REPLICAS_PER_BROKER = 1000


def generated_records(spark: SparkSession, samples: int) -> DataFrame:
    """Partition records for every broker, replica and sample, as Spark expressions (no Python rows)."""
    per_sample = BROKERS * REPLICAS_PER_BROKER
    ids = spark.range(0, samples * per_sample, numPartitions=16)
    sample = (F.col("id") / per_sample).cast("long")
    broker = ((F.col("id") % per_sample) / REPLICAS_PER_BROKER).cast("int")
    slot = (F.col("id") % REPLICAS_PER_BROKER).cast("int")
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


def write_metrics_dir(spark: SparkSession, samples: int, root: Path) -> Path:
    """JSON lines under root/metrics, files named like rolled metrics files."""
    tmp = root / "spark-out"
    generated_records(spark, samples).write.mode("overwrite").json(str(tmp))
    metrics = root / "metrics"
    metrics.mkdir()
    for n, part in enumerate(sorted(tmp.glob("part-*"))):
        part.rename(metrics / f"broker-{n}-{T0}.jsonl")
    shutil.rmtree(tmp)
    return metrics


def scan_baseline_s(spark: SparkSession, metrics: Path) -> float:
    """A plain scan-and-aggregate of the same files with the same schema: the JSON-parsing floor."""
    started = time.monotonic()
    paths = [str(p) for p in spark_app.list_metric_files(metrics)]
    spark.read.schema(s.RECORD_SCHEMA).json(paths).groupBy(s.BROKER_ID).agg(
        F.count(F.lit(1)), F.max(s.TS_MS), F.max(s.LAG_MESSAGES)
    ).collect()
    return time.monotonic() - started


def timed_job(spark: SparkSession, metrics: Path, out: Path) -> tuple[float, int]:
    started = time.monotonic()
    result = spark_app.run_batch(spark, metrics, out, LagJobConfig(window_ms=10_000))
    return time.monotonic() - started, result.records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000,000 records instead of 10,000,000")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    spark = spark_app.create_session("local[2]", "minibroker-bench-lag-job")
    root = Path(tempfile.mkdtemp(prefix="bench-lag-job-"))
    try:
        small = write_metrics_dir(spark, 10, root / "1m")
        wall_1m, _ = timed_job(spark, small, root / "1m" / "out")
        baseline_1m = scan_baseline_s(spark, small)
        if args.quick:
            records, wall, baseline = 1_000_000, wall_1m, baseline_1m
        else:
            big = write_metrics_dir(spark, 100, root / "10m")
            wall, records = timed_job(spark, big, root / "10m" / "out")
            baseline = scan_baseline_s(spark, big)
        print(
            json.dumps(
                {
                    "records": records,
                    "records_per_s": round(records / wall),
                    "wall_s": round(wall, 2),
                    "wall_s_1m": round(wall_1m, 2),
                    "baseline_json_scan_records_per_s": round(records / baseline),
                    "baseline_json_scan_s": round(baseline, 2),
                    "job_over_scan": round(wall / baseline, 2),
                    "load_avg_1m_start": round(load_start, 2),
                    "load_avg_1m_end": round(os.getloadavg()[0], 2),
                    "json_bytes": sum(
                        p.stat().st_size for p in (root / ("1m" if args.quick else "10m") / "metrics").iterdir()
                    ),
                }
            )
        )
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
