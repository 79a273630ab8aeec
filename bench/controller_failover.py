"""The controller quorum on a real cluster: time without an active controller after SIGKILL of the active
one, and how long a committed metadata change takes to reach every broker.

    .venv/bin/python -m bench.controller_failover [--quick]

A fresh cluster (3 controllers, 3 brokers on free loopback ports), a topic with 6 partitions, RF 3,
min.insync.replicas=2, and an acks=all producer writing throughout. Then:

* 20 rounds (5 with --quick): find the active controller (DESCRIBE_QUORUM), SIGKILL it, poll the other two
  every 2 ms until one answers DESCRIBE_QUORUM as leader, then restart the killed one and wait until the
  leader shows it at the log end (so each kill finds three voters caught up). Reported:
  `no_active_controller_p50_ms` / `_p99_ms` / `_max_ms` (SIGKILL to the first DESCRIBE_QUORUM answered by
  the new leader), beside the configured
  `election_timeout_ms` and the issue's target (`target_ms`: election timeout + 1 s).
* 50 metadata changes (10 with --quick): INCREMENTAL_ALTER_CONFIGS of the topic (`retention.ms`), through
  a broker to the active controller, which answers once the change is committed; then poll every broker's
  DESCRIBE_CONFIGS at once, over connections opened before the change, until each shows it. Reported:
  `propagation_p50_ms` / `_p99_ms` (the answer to the change, to the last broker showing it) and per broker.
* baseline, same run: `rtt_p50_ms` / `_p99_ms`, a METADATA round trip to a broker (the polling's own cost);
  the producer's acks=all writes acknowledged during the kills (`acked_during_kills`): the data plane does
  not wait for the controllers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
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
from client.cluster_client import ClusterClient
from client.producer import Producer
from cluster.chaos import CHAOS_OVERRIDES
from cluster.local_cluster import LocalClusterState, ProcessInfo, restart_controller, start_cluster
from network.connection import BrokerConnection
from protocol.messages import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeQuorumRequest,
    IncrementalAlterConfigsRequest,
    MetadataRequest,
    TopicPartition,
)

TOPIC = "bench-quorum"
ELECTION_TIMEOUT_MS = 1000  # controller.quorum.election.timeout.ms, Kafka's default


async def _describe(c: ProcessInfo, timeout_s: float = 0.5) -> Any:
    try:
        async with await BrokerConnection.connect(c.host, c.port, "bench", timeout_s=timeout_s) as conn:
            return await conn.send(DescribeQuorumRequest(), timeout_s=timeout_s)
    except (TimeoutError, OSError):
        return None


async def active(state: LocalClusterState, exclude: int | None = None) -> ProcessInfo | None:
    for c in state.controllers:
        if c.node_id == exclude:
            continue
        answer = await _describe(c)
        if answer is not None and answer.error_code == 0 and answer.leader_id != exclude:
            return state.controller(answer.leader_id)
    return None


async def _until_active(state: LocalClusterState, exclude: int | None = None, timeout_s: float = 60.0) -> ProcessInfo:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leader = await active(state, exclude)
        if leader is not None:
            return leader
        await asyncio.sleep(0.002)
    raise RuntimeError(f"no active controller within {timeout_s} s")


async def kill_round(state: LocalClusterState) -> float:
    """SIGKILL the active controller; ms until another answers as leader. Then restart it, caught up."""
    leader = await _until_active(state)
    killed_at = time.monotonic()
    os.kill(leader.pid, signal.SIGKILL)
    await _until_active(state, exclude=leader.node_id)
    elapsed_ms = (time.monotonic() - killed_at) * 1000.0
    await restart_controller(state, leader.node_id)
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:  # caught up: whoever leads now shows it at its log end
        current = await _until_active(state)
        answer = await _describe(current)
        if answer is not None and answer.error_code == 0:
            ends = {v.replica_id: v.log_end_offset for v in answer.current_voters}
            if ends.get(leader.node_id, -1) >= max(ends.values()):
                return elapsed_ms
        await asyncio.sleep(0.05)
    raise RuntimeError(f"controller {leader.node_id} did not catch up within 60 s of its restart")


async def propagation_round(state: LocalClusterState, client: ClusterClient, value: int) -> list[float]:
    """Change retention.ms; ms from the committed answer until each broker's DESCRIBE_CONFIGS shows it."""
    change = IncrementalAlterConfigsRequest(
        [
            AlterConfigsResource(
                int(ConfigResourceType.TOPIC),
                TOPIC,
                [AlterableConfig("retention.ms", int(AlterConfigOp.SET), str(value))],
            )
        ]
    )
    describe = DescribeConfigsRequest([DescribeConfigsResource(int(ConfigResourceType.TOPIC), TOPIC, ["retention.ms"])])
    # Connected before the change, and every broker polled at once: neither a connect nor another broker's
    # polling is counted in a broker's delay.
    conns = [await BrokerConnection.connect(b.host, b.port, "bench") for b in state.brokers]
    try:
        answer = await client.send_any(change, timeout_s=10.0)
        assert answer.error_code == 0 and answer.responses[0].error_code == 0, answer
        committed_at = time.monotonic()

        async def applied(conn: BrokerConnection) -> float:
            while True:
                got = await conn.send(describe, timeout_s=5.0)
                if any(c.value == str(value) for c in got.results[0].configs):
                    return (time.monotonic() - committed_at) * 1000.0
                await asyncio.sleep(0.001)

        return list(await asyncio.gather(*(applied(conn) for conn in conns)))
    finally:
        for conn in conns:
            await conn.close()


async def rtt(state: LocalClusterState, count: int) -> list[float]:
    b = state.brokers[0]
    samples = []
    async with await BrokerConnection.connect(b.host, b.port, "bench") as conn:
        for _ in range(count):
            started = time.monotonic()
            await conn.send(MetadataRequest([TOPIC]))
            samples.append((time.monotonic() - started) * 1000.0)
    return samples


async def run(reaper: ProcessReaper, quick: bool) -> dict[str, Any]:
    kills = 5 if quick else 20
    changes = 10 if quick else 50
    work = reaper.temp_dir("minibroker-bench-quorum-")
    state: LocalClusterState | None = None
    try:
        state = await start_cluster(
            work / "cluster",
            3,
            base_port=free_port_block(3),
            controller_port=free_port(),
            overrides=dict(CHAOS_OVERRIDES),
            progress=progress,
        )
        cluster_state = state
        reaper.watch(lambda: [p.pid for p in cluster_state.nodes])
        async with ClusterClient(state.bootstrap) as client:
            await client.create_topic(TOPIC, 6, 3, {"min.insync.replicas": "2"})
            await client.wait_for_leaders(TOPIC, partitions=6)
            baseline = await rtt(state, 200)
            producer = Producer(client, acks=-1)
            acked = [0]
            stop = asyncio.Event()

            async def load() -> None:
                i = 0
                while not stop.is_set():

                    def on_ack(offset: int, error: str | None) -> None:
                        if error is None:
                            acked[0] += 1

                    await producer.send(TopicPartition(TOPIC, i % 6), f"v{i}".encode(), callback=on_ack)
                    i += 1
                    await asyncio.sleep(0.002)
                await producer.flush()

            writer = asyncio.create_task(load())
            outages = []
            before = acked[0]
            for i in range(kills):
                outages.append(await kill_round(state))
                progress(f"kill {i + 1}/{kills}: {outages[-1]:.0f} ms without an active controller")
            acked_during_kills = acked[0] - before
            delays: list[list[float]] = []
            for i in range(changes):
                delays.append(await propagation_round(state, client, 3_600_000 + i))
            stop.set()
            await writer
        last = [max(d) for d in delays]
        per_broker = {b.node_id: rounded(percentile([d[i] for d in delays], 50)) for i, b in enumerate(state.brokers)}
        return {
            "bench": "controller_failover",
            "quick": quick,
            "kills": kills,
            "no_active_controller_p50_ms": rounded(percentile(outages, 50)),
            "no_active_controller_p99_ms": rounded(percentile(outages, 99)),
            "no_active_controller_max_ms": rounded(max(outages)),
            "election_timeout_ms": ELECTION_TIMEOUT_MS,
            "target_ms": ELECTION_TIMEOUT_MS + 1000,
            "acked_during_kills": acked_during_kills,
            "changes": changes,
            "propagation_p50_ms": rounded(percentile(last, 50)),
            "propagation_p99_ms": rounded(percentile(last, 99)),
            "propagation_p50_ms_by_broker": per_broker,
            "rtt_p50_ms": rounded(percentile(baseline, 50)),
            "rtt_p99_ms": rounded(percentile(baseline, 99)),
        }
    finally:
        await stop_cluster_then_cleanup(state, reaper)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.controller_failover", description="controller quorum failover and metadata propagation"
    )
    parser.add_argument("--quick", action="store_true", help="5 kills and 10 changes instead of 20 and 50")
    args = parser.parse_args(argv)
    return main_guard(lambda reaper: run(reaper, args.quick))


if __name__ == "__main__":
    sys.exit(main())
