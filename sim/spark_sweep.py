"""A sweep of simulator seeds as a Spark job: seed ranges as tasks, the simulator in each Python worker.

    minibroker sim --seeds 1..100000 --spark [MASTER] --out DIR [workload and fault options]

How this works
--------------
Every seed is one deterministic run (`run_seed`), independent of every other, so a sweep is a map over
seeds. The seeds not yet in DIR's table are cut into rounds of `ROUND_SEEDS`; each round is one Spark job
that spreads its seeds over tasks of `SEEDS_PER_TASK` (small tasks keep the cores busy to the end, since
a seed's wall time varies several times over with its faults) and appends its rows to the Parquet table
`DIR/seeds`, one row per seed. A sweep stopped and started again with the same options reads the seeds
already in the table and runs only the others: at most one round is lost. A table holds one set of
options; starting a sweep with other options on it is refused (use another DIR).

The master is `local[*]` by default and any Spark master when given. The workers run the simulator from
the installed minibroker package, so a remote cluster's workers need it installed too (`pip install`
of this project, as for any PySpark job that imports its own modules); nothing else is shipped.

A run that raises (a stuck scenario, a bug in the simulator) is recorded as that seed's failure with the
check `simulator_error` and the exception (as `run_seed` reports it), and the sweep goes on.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from sim.cluster import SimOptions
from sim.runner import SIMULATOR_ERROR

TABLE = "seeds"
SEEDS_PER_TASK = 4
ROUND_SEEDS = 512

# One row per seed.
COLUMNS = (
    "seed long, options string, ok boolean, check string, message string, trace_hash string, events long, "
    "virtual_s double, wall_s double, faults map<string,int>, acked long, failed long, indeterminate long, "
    "acks1_lost long, excused_losses long, consumed long, converged boolean"
)


def options_json(options: SimOptions) -> str:
    return json.dumps(dataclasses.asdict(options), sort_keys=True)


def seed_row(seed: int, options: SimOptions, options_text: str) -> tuple[Any, ...]:
    """The table row of one seed's run (in COLUMNS' order)."""
    from sim.runner import run_seed

    try:
        s = run_seed(seed, options).summary()
    except Exception as exc:  # a simulator bug is this seed's result, not the end of the sweep
        message = f"{type(exc).__name__}: {exc}"
        return (seed, options_text, False, SIMULATOR_ERROR, message, "", 0, 0.0, 0.0, {}, 0, 0, 0, 0, 0, 0, False)
    return (
        seed,
        options_text,
        s["ok"],
        s["check"],
        s["message"],
        s["trace_hash"],
        s["events"],
        s["virtual_s"],
        s["wall_s"],
        {str(k): int(v) for k, v in s["faults"].items()},
        s["acked"],
        s["failed"],
        s["indeterminate"],
        s["acks1_lost"],
        s["excused_losses"],
        s["consumed"],
        s["converged"],
    )


def _run_seeds(options: SimOptions, options_text: str, seeds: Iterator[int]) -> Iterator[tuple[Any, ...]]:
    for seed in seeds:
        yield seed_row(seed, options, options_text)


@dataclass
class SweepSummary:
    runs: int = 0
    ran_now: int = 0  # seeds run by this invocation (the others were in the table already)
    violations: int = 0
    violations_by_check: dict[str, int] = field(default_factory=dict)
    failing: list[tuple[int, str, str]] = field(default_factory=list)  # (seed, check, message), by seed
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    events: int = 0
    virtual_s: float = 0.0
    seed_wall_s: float = 0.0  # the runs' own wall time, summed over the workers
    wall_s: float = 0.0
    acked: int = 0
    failed: int = 0
    indeterminate: int = 0
    table: str = ""

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["failing_seeds"] = [seed for seed, _, _ in self.failing]
        out["failing"] = [{"seed": s, "check": c, "message": m} for s, c, m in self.failing]
        return out


def run_sweep(
    first: int,
    last: int,
    options: SimOptions,
    out_dir: Path,
    master: str | None = None,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    round_seeds: int = ROUND_SEEDS,
) -> SweepSummary:
    """Run seeds `first`..`last` (inclusive) that `out_dir`'s table does not hold yet; summarize them all."""
    from pyspark.sql import functions as F

    from lagapp.spark_app import create_session

    started = time.perf_counter()
    text = options_json(options)
    table = out_dir / TABLE
    # The workers run this interpreter (create_session), so they import the same minibroker.
    spark = create_session(master, "minibroker-sim-sweep", {"spark.driver.memory": "1g"})
    done: set[int] = set()
    if any(table.glob("*.parquet")):  # a table with rows (a first round stopped early leaves none)
        stored = spark.read.parquet(str(table))
        others = stored.where(F.col("options") != text).select("options").limit(1).collect()
        if others:
            raise ValueError(f"{table} holds a sweep with other options ({others[0][0]}); use another --out directory")
        wanted = stored.where(F.col("seed").between(first, last)).select("seed")
        done = {row[0] for row in wanted.collect()}
    todo = [seed for seed in range(first, last + 1) if seed not in done]
    if done:
        progress(f"{len(done)} of {last - first + 1} seeds already in {table}; running the other {len(todo)}")
    ran = 0
    for start in range(0, len(todo), round_seeds):
        chunk = todo[start : start + round_seeds]
        rdd = spark.sparkContext.parallelize(chunk, max(1, math.ceil(len(chunk) / SEEDS_PER_TASK)))
        rows = rdd.mapPartitions(partial(_run_seeds, options, text))
        spark.createDataFrame(rows, COLUMNS).write.mode("append").parquet(str(table))
        ran += len(chunk)
        progress(f"{ran}/{len(todo)} seeds run, appended to {table}")
    summary = summarize(spark, table, first, last)
    summary.ran_now = ran
    summary.wall_s = round(time.perf_counter() - started, 3)
    return summary


def summarize(spark: Any, table: Path, first: int, last: int) -> SweepSummary:
    """The sweep's totals and failing seeds, from the table (small: one row per seed, few columns kept)."""
    from pyspark.sql import functions as F

    totals = spark.read.parquet(str(table)).where(F.col("seed").between(first, last))
    agg = totals.agg(
        F.count(F.lit(1)).alias("runs"),
        F.sum(F.when(~F.col("ok"), 1).otherwise(0)).alias("violations"),
        F.sum("events").alias("events"),
        F.sum("virtual_s").alias("virtual_s"),
        F.sum("wall_s").alias("wall_s"),
        F.sum("acked").alias("acked"),
        F.sum("failed").alias("failed"),
        F.sum("indeterminate").alias("indeterminate"),
    ).first()
    faults: Counter[str] = Counter()
    for row in totals.select(F.explode("faults")).groupBy("key").agg(F.sum("value").alias("n")).collect():
        faults[row["key"]] = int(row["n"])
    failing = sorted(
        (int(r["seed"]), r["check"], r["message"] or "")
        for r in totals.where(~F.col("ok")).select("seed", "check", "message").collect()
    )
    return SweepSummary(
        runs=int(agg["runs"] or 0),
        violations=int(agg["violations"] or 0),
        violations_by_check=dict(Counter(check for _, check, _ in failing)),
        failing=failing,
        faults_by_kind=dict(sorted(faults.items())),
        events=int(agg["events"] or 0),
        virtual_s=round(float(agg["virtual_s"] or 0.0), 3),
        seed_wall_s=round(float(agg["wall_s"] or 0.0), 3),
        acked=int(agg["acked"] or 0),
        failed=int(agg["failed"] or 0),
        indeterminate=int(agg["indeterminate"] or 0),
        table=str(table),
    )
