"""Leader failover time under acks=all load, on a real 3-broker cluster, with every acked write checked.

    .venv/bin/python -m bench.failover [--quick]

This is the leader-kill chaos experiment (`cluster.chaos.ChaosRun`, the code behind
`minibroker chaos leader-kill --restart`) run as a benchmark: a fresh cluster (controller + 3 brokers on
free loopback ports, broker.session.timeout.ms=1000, broker.heartbeat.interval.ms=250), a topic with 6
partitions, RF 3, min.insync.replicas=2, two producers writing unique values with acks=all and a
consumer reading throughout. 20 rounds (5 with --quick): SIGKILL the broker leading the most
partitions, wait for new leaders, restart it and wait for full ISRs, so each kill finds 3 brokers.

Reported:
* `failover_p50_ms` / `failover_p99_ms`: per kill, SIGKILL to the first acked write on the new leader
  of a partition the killed broker led (target p99 <= 1500);
* `no_leader_p50_ms` / `no_leader_p99_ms`: SIGKILL until metadata names a new leader for all of them;
* `lost_writes`: acked values missing after the run, read back from every replica (must be 0), with the
  rest of the chaos verdict (duplicates, inconsistent offsets, divergent replicas, nonmonotonic reads);
* baseline, same run: `steady_ack_p50_ms` / `steady_ack_p99_ms`, acks=all latency before the first
  kill, and `detection_floor_ms`: the controller fences a broker broker.session.timeout.ms after its
  last heartbeat, which came at most broker.heartbeat.interval.ms before the kill, so no failover can
  take less than session timeout - heartbeat interval (750 ms here); most take up to the full 1000 ms.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.common import (
    ProcessReaper,
    free_port,
    free_port_block,
    main_guard,
    percentile,
    progress,
    rounded,
    stop_cluster_then_cleanup,
)
from cluster.chaos import CHAOS_OVERRIDES, ChaosRun
from cluster.local_cluster import LocalClusterState, start_cluster

SESSION_TIMEOUT_MS = 1000
HEARTBEAT_INTERVAL_MS = 250


def chaos_args(rounds: int) -> argparse.Namespace:
    """The same options `minibroker chaos leader-kill --restart` takes."""
    return argparse.Namespace(
        rounds=rounds,
        dir=None,
        interval_ms=500,
        seed=0,
        restart=True,
        json=None,
        topic="bench-failover",
        partitions=6,
        producers=2,
        metrics_dir=None,
    )


async def run(reaper: ProcessReaper, quick: bool) -> dict[str, Any]:
    rounds = 5 if quick else 20
    work = reaper.temp_dir("minibroker-bench-failover-")
    state: LocalClusterState | None = None
    try:
        overrides = dict(CHAOS_OVERRIDES)
        overrides["broker.session.timeout.ms"] = str(SESSION_TIMEOUT_MS)
        overrides["broker.heartbeat.interval.ms"] = str(HEARTBEAT_INTERVAL_MS)
        state = await start_cluster(
            work / "cluster",
            3,
            base_port=free_port_block(3),
            controller_port=free_port(),
            overrides=overrides,
            progress=progress,
        )
        cluster_state = state
        reaper.watch(lambda: [p.pid for p in cluster_state.nodes])
        chaos = ChaosRun(state, chaos_args(rounds), progress)
        wall0, mono0 = time.time(), time.monotonic()
        report = await chaos.run()
        failovers = [k["failover_ms"] for k in report["kills"] if k["failover_ms"] is not None]
        no_leader = [k["time_without_leader_ms"] for k in report["kills"] if k["time_without_leader_ms"] is not None]
        first_kill = min((k["killed_at_ms"] for k in report["kills"]), default=None)
        steady: list[float] = []
        if first_kill is not None:
            cutoff = mono0 + (first_kill / 1000.0 - wall0)
            # ack_events and ack_latencies_ms are appended together, one entry per acked batch
            pairs = zip(chaos.outcomes.ack_events, chaos.outcomes.ack_latencies_ms, strict=False)
            steady = [lat for (t, _, _), lat in pairs if t < cutoff]
        return {
            "bench": "failover",
            "quick": quick,
            "kills": report["rounds"],
            "failover_p50_ms": percentile(failovers, 50),
            "failover_p99_ms": percentile(failovers, 99),
            "failover_max_ms": max(failovers) if failovers else None,
            "kills_without_failover": report["rounds"] - len(failovers),
            "no_leader_p50_ms": percentile(no_leader, 50),
            "no_leader_p99_ms": percentile(no_leader, 99),
            "lost_writes": report["lost_writes"],
            "valid": report["valid"],
            "duplicates": report["duplicates"],
            "inconsistent_offsets": report["inconsistent_offsets"],
            "divergent_replicas": report["divergent_replicas"],
            "nonmonotonic": report["nonmonotonic"],
            "acked": report["acked"],
            "failed": report["failed"],
            "indeterminate": report["indeterminate"],
            "steady_ack_p50_ms": rounded(percentile(steady, 50)),
            "steady_ack_p99_ms": rounded(percentile(steady, 99)),
            "detection_floor_ms": SESSION_TIMEOUT_MS - HEARTBEAT_INTERVAL_MS,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "target_failover_p99_ms": 1500,
        }
    finally:
        await stop_cluster_then_cleanup(state, reaper)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description="leader failover benchmark")
    parser.add_argument("--quick", action="store_true", help="5 kills instead of 20")
    args = parser.parse_args(argv)
    return main_guard(lambda reaper: run(reaper, args.quick))


if __name__ == "__main__":
    sys.exit(main())
