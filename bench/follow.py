"""Benchmark: a ``--follow`` round's cost as the history grows, beside recomputing everything each round.

A generated cluster (``--brokers`` × ``--replicas`` partition replicas, a sample a second each, groups
of three as in ``bench.lag_job``) arrives as micro-batches of ``--batch-s`` seconds of samples. Each
round is ``spark_app.merge_and_publish`` merging from the first batch on (``incremental_from=0``), what
``--follow`` runs per micro-batch past its threshold: store the batch's records, merge them into the
state, write the tables, build the page. At a few checkpoints the full
recompute of everything so far (``spark_app.publish_records`` over every stored record: what each refresh of
``--follow`` cost before it merged) is timed beside it, in the same session, the same way.

Per checkpoint: the records so far, the round's wall and CPU seconds (the JVM's plus this process's),
the full recompute's, and their ratio. ``round_growth`` / ``full_growth``: the last checkpoint's time
over the first's, while the history grew ``history_growth`` times. One untimed round warms the JVM
first (class loading, code generation).

Run: .venv/bin/python -m bench.follow [--quick] (prints one JSON object as the last line)
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.common import emit, progress
from bench.lag_job import Clock, generated_records
from lagapp import follow, spark_app
from lagapp import schema as s
from lagapp.tables import LagJobConfig

CONFIG = LagJobConfig(window_ms=10_000)
WATERMARK_MS = 3 * CONFIG.window_ms  # what --follow uses: three windows


def run(brokers: int, replicas: int, batch_s: int, rounds: int, checkpoints: list[int]) -> dict[str, Any]:
    spark = spark_app.create_session("local[2]", "minibroker-bench-follow")
    clock = Clock(spark)
    out = Path(tempfile.mkdtemp(prefix="bench-follow-"))
    load_start = os.getloadavg()[0]
    try:
        # Warm-up: one round in a throwaway dir, untimed.
        warm = follow.FollowJob(out / "warm", CONFIG, WATERMARK_MS)
        warm_batch = generated_records(spark, batch_s, brokers, replicas)
        spark_app.merge_and_publish(warm, warm_batch, 0, title="warm", incremental_from=0)
        job = follow.FollowJob(out / "follow", CONFIG, WATERMARK_MS)
        points: list[dict[str, Any]] = []
        rounds_s: list[float] = []
        for k in range(rounds):
            batch = generated_records(spark, batch_s, brokers, replicas, first_sample=k * batch_s)
            timing = clock.measure(
                lambda: spark_app.merge_and_publish(job, batch, k, title="bench", incremental_from=0)  # noqa: B023
            )
            rounds_s.append(timing.wall_s)
            if k + 1 in checkpoints:
                stored = spark_app.accumulated_parts(out / "follow" / s.STREAM_DIR / "records")
                records = spark.read.schema(s.LAG_JOB_SCHEMA).parquet(*(str(p) for p in stored))
                full = clock.measure(
                    lambda: spark_app.publish_records(records, out / "full", CONFIG, "bench")  # noqa: B023
                )
                n = (k + 1) * batch_s * brokers * replicas
                points.append(
                    {
                        "round": k + 1,
                        "records": n,
                        "round_s": timing.wall_s,
                        "round_cpu_s": timing.cpu_s,
                        "full_s": full.wall_s,
                        "full_cpu_s": full.cpu_s,
                        "full_over_round": round(full.wall_s / timing.wall_s, 2),
                    }
                )
                progress(f"round {k + 1}: {n} records, round {timing.wall_s} s, full recompute {full.wall_s} s")
        first, last = points[0], points[-1]
        return {
            "brokers": brokers,
            "replicas_per_broker": replicas,
            "records_per_batch": batch_s * brokers * replicas,
            "rounds": rounds,
            "checkpoints": points,
            "history_growth": round(last["records"] / first["records"], 2),
            "round_growth": round(last["round_s"] / first["round_s"], 2),
            "full_growth": round(last["full_s"] / first["full_s"], 2),
            "round_s_median": sorted(rounds_s)[len(rounds_s) // 2],
            "load_1m_start": round(load_start, 2),
            "load_1m_end": round(os.getloadavg()[0], 2),
        }
    finally:
        spark.stop()
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 brokers × 100 replicas, 36 rounds")
    args = parser.parse_args()
    os.environ.setdefault("MINIBROKER_QUIET", "1")
    if args.quick:
        result = run(brokers=12, replicas=100, batch_s=10, rounds=36, checkpoints=[6, 18, 36])
    else:
        result = run(brokers=30, replicas=100, batch_s=10, rounds=90, checkpoints=[10, 30, 60, 90])
    emit(result)


if __name__ == "__main__":
    main()
