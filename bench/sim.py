"""Simulator speed: virtual seconds per wall second, seeds per second, and memory over many seeds.

Run: `.venv/bin/python -m bench.sim [--quick]`. The last line of output is one JSON object.

Workload (the issue's): 3 brokers, 6 partitions, RF 3, min ISR 2, acks=all, 2 producers at 50 PRODUCE/s
each (100 batches/s), one consumer, kills and partitions at 0.1 per virtual second, 30 virtual seconds of
load per seed (plus start and settle). One process, one core.

Reported:
- `speedup`: virtual seconds / wall seconds over the timed seeds (target >= 30);
- `seeds_per_s`: seeds per wall second (target >= 3);
- `rss_growth_pct`: process RSS after the last of `--rss-seeds` seeds against after the 10th (target < 10);
- `us_per_request`: wall microseconds per simulated request (all of it CPU: the run never waits);
- `cpu_s`, and beside the wall-clock figures the same per CPU second of this process (`cpu_seeds_per_s`,
  `cpu_speedup`, `cpu_us_per_request`): on a shared machine the wall clock mostly measures the other work
  on it, so a change is judged by these;
- baseline, measured in the same run: `bare_requests_per_s`, requests per wall second through the same
  `SimNetwork` and virtual-time loop to a handler that answers at once, so `sim_over_bare` says how much
  of the cost is the broker, fetcher and controller code rather than the simulator around it.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from typing import Any

from bench.common import emit, progress
from protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from sim.cluster import SimOptions
from sim.loop import VirtualTimeLoop
from sim.network import SimNetwork, SimTransport
from sim.runner import run_seed

WORKLOAD = SimOptions(
    brokers=3,
    partitions=6,
    replication_factor=3,
    min_insync_replicas=2,
    acks=-1,
    producers=2,
    rate=50.0,
    consumers=1,
    duration_s=30.0,
    faults=("kill", "partition"),
    fault_rate=0.1,
)


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def bare_requests_per_s(count: int) -> float:
    """Requests per wall second through SimNetwork on the virtual loop, to a handler that answers at once."""
    import random

    loop = VirtualTimeLoop()

    async def main() -> float:
        net = SimNetwork(random.Random(1))

        async def handler(ctx: Any, header: Any, request: Any) -> ApiVersionsResponse:
            return ApiVersionsResponse()

        net.bring_up(1, handler)
        net.bring_up(2, None)
        transport = SimTransport(net, 2)
        started = time.perf_counter()
        for _ in range(count):
            await transport.send(1, ApiVersionsRequest())
        return count / (time.perf_counter() - started)

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sim", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds (a minute, not ten)")
    parser.add_argument("--seeds", type=int, help="timed seeds (default 20, quick 5)")
    parser.add_argument("--rss-seeds", type=int, help="seeds for the memory check (default 1000, quick 60)")
    args = parser.parse_args(argv)
    timed = args.seeds or (5 if args.quick else 20)
    rss_seeds = args.rss_seeds or (60 if args.quick else 1000)

    progress("baseline: bare requests through the simulated network")
    cpu_before = time.process_time()
    bare = bare_requests_per_s(20000)
    bare_cpu_us = (time.process_time() - cpu_before) / 20000 * 1e6

    progress(f"timing {timed} seeds of {WORKLOAD.duration_s:.0f} virtual s")
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    virtual = 0.0
    requests = 0
    violations = 0
    for seed in range(1, timed + 1):
        result = run_seed(seed, WORKLOAD)
        virtual += result.virtual_s
        requests += result.messages
        violations += 0 if result.ok else 1
    wall = time.perf_counter() - started
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)

    progress(f"memory over {rss_seeds} seeds")
    short = SimOptions(**{**WORKLOAD.__dict__, "duration_s": 5.0})
    baseline_rss = 0.0
    for seed in range(1, rss_seeds + 1):
        result = run_seed(seed, short)
        violations += 0 if result.ok else 1
        if seed == 10:
            gc.collect()
            baseline_rss = rss_mb()
        if seed % 100 == 0:
            progress(f"  {seed} seeds, rss {rss_mb():.1f} MB")
    gc.collect()
    final_rss = rss_mb()

    emit(
        {
            "bench": "sim",
            "workload": "3 brokers, 6 partitions, RF 3, acks=all, 100 batches/s, kills+partitions, 30 virtual s",
            "seeds": timed,
            "virtual_s": round(virtual, 1),
            "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "speedup": round(virtual / wall, 2),
            "seeds_per_s": round(timed / wall, 3),
            "requests": requests,
            "us_per_request": round(wall / max(requests, 1) * 1e6, 1),
            "cpu_seeds_per_s": round(timed / cpu, 3),
            "cpu_speedup": round(virtual / cpu, 2),
            "cpu_us_per_request": round(cpu / max(requests, 1) * 1e6, 1),
            "bare_cpu_us_per_request": round(bare_cpu_us, 1),
            "bare_requests_per_s": round(bare),
            "sim_over_bare": round((requests / wall) / bare, 3),
            "rss_seeds": rss_seeds,
            "rss_after_10_mb": round(baseline_rss, 1),
            "rss_after_all_mb": round(final_rss, 1),
            "rss_growth_pct": round((final_rss - baseline_rss) / baseline_rss * 100.0, 2) if baseline_rss else None,
            "violations": violations,
            "targets": {"speedup": 30, "seeds_per_s": 3, "rss_growth_pct": 10},
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
