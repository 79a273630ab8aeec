"""Replication throughput, acks=all latency and follower lag on a real 3-broker cluster, beside a raw stream.

    .venv/bin/python -m bench.replication [--quick]

Setup: `start_cluster` (controller + 3 broker processes on free loopback ports, metrics every 200 ms),
one topic with 6 partitions, RF 3, min.insync.replicas=2.

Load, from a separate client process (`--producer-child`): 2 producer tasks, each with its own
ClusterClient (its own connections), each owning 3 of the partitions; records of ~1 KiB, 16 per batch
(~16 KiB batches), one batch per PRODUCE (`--batches-per-request N` puts N batches of one partition in
each), acks=all, up to `IN_FLIGHT` requests in flight per task.
Every record value starts with a unique id, so every acked batch can be checked afterwards.

* phase 1 (30 s, 10 s with --quick): as fast as acks come back. `produced_mb_s` = acked batch bytes /
  phase time.
* phase 2 (10 s, 5 s with --quick): open-loop at half the phase-1 request rate; `ack_p50_ms` /
  `ack_p99_ms` are PRODUCE send to acks=all response.
* verification: every partition is read back from its leader (consumer fetches up to the HW) and each
  acked batch must sit at its acked base offset with its records: `acked_lost` counts those that do not.

Measured by this process meanwhile:

* `replicated_mb_s`: every 50 ms DESCRIBE_LOG_DIRS goes to each broker; the bytes the follower
  replicas appended during phase 1 (size deltas of replicas that are not leaders), divided by the
  number of followers per partition (RF-1) and the time between the samples. It is the mean rate of
  one follower copy, equal to `produced_mb_s` when followers keep up.
* `lag_p99_ms` (phase 1) and `lag_p99_ms_half_rate` (phase 2): from the same samples, how long each
  follower replica has been behind its leader's log end (`time_behind_ms`; resolution 50 ms), and
  `lag_p99_messages`, the leader's log end minus the follower's. Beside them `metrics_lag_p99_ms`, the
  p99 of the `lag_ms` the followers report in the brokers' JSON-lines metrics. That one is measured
  against the leader's high watermark, as Kafka's fetcher lag is, and an ISR member is never behind the
  HW (the HW is the minimum ISR log end), so under acks=all it stays 0; hence the sampled measure.

Baseline, same run: one `source` process streams the same 16 KiB messages to two `sink` reader
processes over loopback (BufferedProtocol readers); `raw_mb_s` is the mean per-reader rate, the
ceiling for one follower copy moving bytes between processes. `ratio` = replicated_mb_s / raw_mb_s.
Targets: ratio >= 0.10, ack_p99_ms <= 20.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    ProcessReaper,
    free_port,
    free_port_block,
    main_guard,
    percentile,
    progress,
    rounded,
    start_peer,
    stop_cluster_then_cleanup,
    stop_peer,
)
from client.cluster_client import ClusterClient
from client.connection import BrokerConnection
from cluster.local_cluster import LocalClusterState, start_cluster
from protocol.errors import ErrorCode
from protocol.messages import DescribeLogDirsRequest, FetchPartition, FetchRequest, TopicPartition
from protocol.record_batch import build_batch, iter_headers

TOPIC = "bench-repl"
PARTITIONS = 6
REPLICATION_FACTOR = 3
PRODUCERS = 2
RECORDS_PER_BATCH = 16
RECORD_BYTES = 1014  # 16 records of this size make a 16 KiB batch (16386 bytes with the header)
IN_FLIGHT = 12  # per producer task
SAMPLE_INTERVAL_S = 0.05
MIB = 1024 * 1024
OVERRIDES = {
    "metrics.interval.ms": "200",
    "min.insync.replicas": "2",
}


# -- the producer child process -----------------------------------------------------------------------


@dataclass
class Acked:
    tp: TopicPartition
    base_offset: int
    first_value: bytes
    count: int


@dataclass
class ProducerStats:
    acked: list[Acked] = field(default_factory=list)
    acked_bytes: int = 0
    requests: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    latencies_ms: list[float] = field(default_factory=list)


class BatchMaker:
    """Batches of RECORDS_PER_BATCH ~1 KiB values, each value starting with a unique id."""

    def __init__(self, producer: int, batches_per_request: int = 1) -> None:
        self.producer = producer
        self.batches_per_request = batches_per_request
        self.seq = 0
        self.padding = os.urandom(RECORD_BYTES)

    def next(self) -> tuple[bytes, bytes]:
        values = []
        for _ in range(RECORDS_PER_BATCH):
            key = f"p{self.producer}-{self.seq:012d}|".encode()
            self.seq += 1
            values.append(key + self.padding[len(key) :])
        return build_batch(values), values[0]

    def record_set(self, batches: int) -> tuple[bytes, list[tuple[bytes, int]]]:
        """`batches` batches end to end, with each batch's (first value, byte position)."""
        parts = []
        firsts = []
        position = 0
        for _ in range(batches):
            batch, first = self.next()
            parts.append(batch)
            firsts.append((first, position))
            position += len(batch)
        return b"".join(parts), firsts


async def produce_one(
    client: ClusterClient, tp: TopicPartition, maker: BatchMaker, stats: ProducerStats, record_latency: bool
) -> None:
    batch, firsts = maker.record_set(maker.batches_per_request)
    started = time.perf_counter()
    try:
        resp = await client.produce(tp, batch, acks=-1, timeout_ms=30000)
    except (TimeoutError, ConnectionError, OSError) as exc:
        stats.failed += 1
        stats.errors[type(exc).__name__] += 1
        return
    assert resp is not None
    p = resp.partitions[0] if resp.partitions else None
    code = resp.error_code or (p.error_code if p else ErrorCode.UNKNOWN_SERVER_ERROR)
    if code != ErrorCode.NONE or p is None:
        stats.failed += 1
        stats.errors[ErrorCode(code).name] += 1
        return
    if record_latency:
        stats.latencies_ms.append((time.perf_counter() - started) * 1000.0)
    for i, (first, _) in enumerate(firsts):
        # Offsets are assigned batch after batch: batch i starts RECORDS_PER_BATCH * i after the base.
        stats.acked.append(Acked(tp, p.base_offset + i * RECORDS_PER_BATCH, first, RECORDS_PER_BATCH))
    stats.acked_bytes += len(batch)
    stats.requests += 1


async def max_rate_phase(
    client: ClusterClient, tps: list[TopicPartition], maker: BatchMaker, stats: ProducerStats, deadline: float
) -> None:
    """Keep IN_FLIGHT produces outstanding, round robin over `tps`, until the deadline."""
    i = 0
    async with asyncio.TaskGroup() as tg:
        pending: set[asyncio.Task[None]] = set()
        while time.monotonic() < deadline:
            while len(pending) < IN_FLIGHT:
                task = tg.create_task(produce_one(client, tps[i % len(tps)], maker, stats, False))
                pending.add(task)
                task.add_done_callback(pending.discard)
                i += 1
            await asyncio.wait(set(pending), return_when=asyncio.FIRST_COMPLETED)


async def paced_phase(
    client: ClusterClient,
    tps: list[TopicPartition],
    maker: BatchMaker,
    stats: ProducerStats,
    batches_per_s: float,
    duration_s: float,
) -> None:
    """Open loop: one produce every 1/batches_per_s seconds regardless of outstanding ones."""
    interval = 1.0 / batches_per_s
    started = time.monotonic()
    n = 0
    async with asyncio.TaskGroup() as tg:
        while True:
            due = started + n * interval
            if due - started >= duration_s:
                break
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tg.create_task(produce_one(client, tps[n % len(tps)], maker, stats, True))
            n += 1


async def read_partition(conn: BrokerConnection, tp: TopicPartition) -> dict[int, tuple[bytes, int]]:
    """base offset -> (first record value, record count) of every batch below the HW."""
    from protocol.record_batch import iter_records

    out: dict[int, tuple[bytes, int]] = {}
    offset = 0
    while True:
        req = FetchRequest(-1, 0, 1, 8 * MIB, [FetchPartition(tp.topic, tp.partition, offset, 8 * MIB)])
        resp = await conn.send(req, timeout_s=30.0)
        p = resp.partitions[0]
        if p.error_code != ErrorCode.NONE:
            raise RuntimeError(f"read-back of {tp} at {offset}: {ErrorCode(p.error_code).name} {p.error_message}")
        if not p.records:
            return out
        view = memoryview(p.records)
        for header in iter_headers(p.records):
            one = view[header.position : header.position + header.size_in_bytes]
            first = next(iter_records(one))
            out[header.base_offset] = (first.value or b"", header.record_count)
            offset = header.next_offset


async def verify(bootstrap: str, acked: list[Acked]) -> tuple[int, int]:
    """(acked batches checked, acked batches missing or different at their base offset)."""
    async with ClusterClient(bootstrap, client_id="bench-verify") as client:
        await client.refresh_metadata([TOPIC])
        found: dict[TopicPartition, dict[int, tuple[bytes, int]]] = {}
        for tp in client.partitions_of(TOPIC):
            ep = client.brokers[client.leader_of(tp).leader_id]
            conn = await client.connection(ep.host, ep.port)
            found[tp] = await read_partition(conn, tp)
    lost = sum(1 for a in acked if found.get(a.tp, {}).get(a.base_offset) != (a.first_value, a.count))
    return len(acked), lost


async def producer_child(args: argparse.Namespace) -> dict[str, Any]:
    clients = [ClusterClient(args.bootstrap, client_id=f"bench-producer-{i}") for i in range(PRODUCERS)]
    makers = [BatchMaker(i, args.batches_per_request) for i in range(PRODUCERS)]
    try:
        for c in clients:
            await c.refresh_metadata([TOPIC])
        tps = clients[0].partitions_of(TOPIC)
        owned = [tps[i::PRODUCERS] for i in range(PRODUCERS)]
        # phase 1: as fast as acks come back
        max_stats = [ProducerStats() for _ in range(PRODUCERS)]
        t_start = time.time()
        deadline = time.monotonic() + args.max_seconds
        async with asyncio.TaskGroup() as tg:
            for i in range(PRODUCERS):
                tg.create_task(max_rate_phase(clients[i], owned[i], makers[i], max_stats[i], deadline))
        t_end = time.time()
        phase1_s = t_end - t_start
        acked_batches = sum(len(s.acked) for s in max_stats)
        acked_requests = sum(s.requests for s in max_stats)
        produced_bytes = sum(s.acked_bytes for s in max_stats)
        rate_mb_s = produced_bytes / MIB / phase1_s
        progress(f"phase 1: {acked_batches} batches acked, {rate_mb_s:.1f} MiB/s")
        # phase 2: open loop at half the phase-1 request rate
        rate = max(acked_requests / phase1_s / 2.0, 1.0)
        paced_stats = [ProducerStats() for _ in range(PRODUCERS)]
        t2_start = time.time()
        async with asyncio.TaskGroup() as tg:
            for i in range(PRODUCERS):
                tg.create_task(
                    paced_phase(clients[i], owned[i], makers[i], paced_stats[i], rate / PRODUCERS, args.paced_seconds)
                )
        t2_end = time.time()
        latencies = [x for s in paced_stats for x in s.latencies_ms]
        progress(f"phase 2: {len(latencies)} requests acked, paced at {rate:.0f} requests/s")
    finally:
        for c in clients:
            await c.close()
    acked = [a for s in max_stats + paced_stats for a in s.acked]
    checked, lost = await verify(args.bootstrap, acked)
    errors: dict[str, int] = defaultdict(int)
    for s in max_stats + paced_stats:
        for k, v in s.errors.items():
            errors[k] += v
    return {
        "phase1_start": t_start,
        "phase1_end": t_end,
        "phase2_start": t2_start,
        "phase2_end": t2_end,
        "produced_bytes": produced_bytes,
        "produced_batches": acked_batches,
        "paced_rate_requests_s": rate,
        "paced_acked": len(latencies),
        "ack_p50_ms": percentile(latencies, 50),
        "ack_p99_ms": percentile(latencies, 99),
        "ack_max_ms": max(latencies) if latencies else None,
        "failed": sum(s.failed for s in max_stats + paced_stats),
        "errors": dict(errors),
        "checked": checked,
        "acked_lost": lost,
    }


# -- the benchmark process ------------------------------------------------------------------------------


@dataclass
class Sample:
    """One DESCRIBE_LOG_DIRS round over every broker (queried one after the other, ~1 ms apart)."""

    at: float  # time.time() when the round started
    follower_bytes: int  # sum of size_bytes over follower replicas
    leader_leo: dict[int, int]  # partition -> the leader's log end offset
    follower_leo: list[tuple[int, int]]  # (partition, log end offset) of every follower replica


async def sample_log_dirs(state: LocalClusterState, samples: list[Sample], stop: asyncio.Event) -> None:
    conns: dict[int, BrokerConnection] = {}
    try:
        while not stop.is_set():
            with contextlib.suppress(ConnectionError, OSError, asyncio.TimeoutError):
                sample = Sample(time.time(), 0, {}, [])
                for b in state.brokers:
                    if b.node_id not in conns or not conns[b.node_id].is_open:
                        conns[b.node_id] = await BrokerConnection.connect(b.host, b.port, "bench-sampler")
                    resp = await conns[b.node_id].send(DescribeLogDirsRequest([TOPIC]), timeout_s=5.0)
                    for r in resp.replicas:
                        if r.is_leader:
                            sample.leader_leo[r.partition] = r.log_end_offset
                        else:
                            sample.follower_bytes += r.size_bytes
                            sample.follower_leo.append((r.partition, r.log_end_offset))
                samples.append(sample)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), SAMPLE_INTERVAL_S)
    finally:
        for c in conns.values():
            await c.close()


def follower_rate(samples: list[Sample], start: float, end: float) -> float:
    """Follower bytes appended per second between the samples closest inside [start, end]."""
    inside = [s for s in samples if start <= s.at <= end]
    if len(inside) < 2:
        return 0.0
    first, last = inside[0], inside[-1]
    return (last.follower_bytes - first.follower_bytes) / (last.at - first.at)


def time_behind_ms(samples: list[Sample], start: float, end: float) -> tuple[list[float], list[int]]:
    """Follower lag from the samples inside [start, end]: (ms behind, messages behind) per follower
    replica per round. A follower whose log ends at L is behind since the first sample in which its
    leader's log end passed L; resolution is one sampling interval, and a follower less than one
    interval behind counts as 0 ms (but its messages behind count)."""
    ms: list[float] = []
    messages: list[int] = []
    history: dict[int, list[tuple[float, int]]] = defaultdict(list)  # partition -> (time, leader LEO)
    for s in samples:
        for partition, leo in s.leader_leo.items():
            history[partition].append((s.at, leo))
        if not start <= s.at <= end:
            continue
        for partition, leo in s.follower_leo:
            leader_leo = s.leader_leo.get(partition)
            if leader_leo is None:
                continue
            behind = max(0, leader_leo - leo)
            messages.append(behind)
            if behind == 0:
                ms.append(0.0)
                continue
            since = next(t for t, leader in history[partition] if leader > leo)
            ms.append((s.at - since) * 1000.0)
    return ms, messages


def lag_values(metrics_dir: Path, start: float, end: float) -> list[float]:
    values: list[float] = []
    for path in metrics_dir.rglob("*.jsonl"):
        with open(path, errors="replace") as f:
            for line in f:
                if '"follower"' not in line:
                    continue
                with contextlib.suppress(json.JSONDecodeError):
                    r = json.loads(line)
                    if (
                        r.get("kind") == "partition"
                        and r.get("role") == "follower"
                        and r.get("topic") == TOPIC
                        and r.get("lag_ms") is not None
                        and start * 1000 <= r["ts_ms"] <= end * 1000
                    ):
                        values.append(float(r["lag_ms"]))
    return values


async def raw_baseline(reaper: ProcessReaper, work: Path, bytes_per_reader: int) -> float:
    """One source process streaming 16 KiB messages to two sink processes; mean MiB/s per reader."""
    message = len(BatchMaker(0).next()[0])
    source, port = start_peer(reaper, "source", work / "source.log", message_bytes=message)
    try:
        sinks = [
            reaper.spawn(
                [sys.executable, "-m", "bench.common", "sink", "--port", str(port), "--bytes", str(bytes_per_reader)],
                stdout=subprocess.PIPE,
            )
            for _ in range(2)
        ]
        rates = []
        for s in sinks:
            out, _ = await asyncio.to_thread(s.communicate, None, 120.0)
            line = out.decode().strip().splitlines()[-1]
            r = json.loads(line)
            rates.append(float(r["bytes"]) / MIB / float(r["seconds"]))
        return sum(rates) / len(rates)
    finally:
        stop_peer(source)


async def create_topic(state: LocalClusterState) -> None:
    async with ClusterClient(state.bootstrap, client_id="bench-admin") as admin:
        resp = await admin.create_topic(TOPIC, PARTITIONS, REPLICATION_FACTOR, {"min.insync.replicas": "2"})
        code = resp.topics[0].error_code if resp.topics else resp.error_code
        if code != ErrorCode.NONE:
            raise RuntimeError(f"cannot create {TOPIC}: {ErrorCode(code).name}")
        await admin.wait_for_leaders(TOPIC)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            await admin.refresh_metadata([TOPIC])
            if all(len(admin.partitions[tp].isr) == REPLICATION_FACTOR for tp in admin.partitions_of(TOPIC)):
                return
            await asyncio.sleep(0.1)
        raise RuntimeError("ISRs did not fill within 30 s")


async def run(reaper: ProcessReaper, quick: bool, batches_per_request: int) -> dict[str, Any]:
    max_seconds = 10.0 if quick else 30.0
    paced_seconds = 5.0 if quick else 10.0
    work = reaper.temp_dir("minibroker-bench-repl-")
    state: LocalClusterState | None = None
    try:
        raw_mb_s = await raw_baseline(reaper, work, (512 if quick else 2048) * MIB)
        progress(f"raw loopback stream, one writer to two reader processes: {raw_mb_s:,.0f} MiB/s per reader")
        base = free_port_block(3)
        state = await start_cluster(
            work / "cluster",
            3,
            base_port=base,
            controller_port=free_port(),
            overrides=dict(OVERRIDES),
            progress=progress,
        )
        cluster_state = state
        reaper.watch(lambda: [p.pid for p in [cluster_state.controller, *cluster_state.brokers]])
        await create_topic(state)
        progress(
            f"topic {TOPIC}: {PARTITIONS} partitions, RF {REPLICATION_FACTOR}, ISRs full; producing for "
            f"{max_seconds:.0f} s at full rate, then {paced_seconds:.0f} s at half rate"
        )
        out_file = work / "producer.json"
        child = reaper.spawn(
            [
                sys.executable,
                "-m",
                "bench.replication",
                "--producer-child",
                "--bootstrap",
                state.bootstrap,
                "--max-seconds",
                str(max_seconds),
                "--paced-seconds",
                str(paced_seconds),
                "--out",
                str(out_file),
                "--batches-per-request",
                str(batches_per_request),
            ],
            stdout=None,
        )
        samples: list[Sample] = []
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_log_dirs(state, samples, stop))
        try:
            code = await asyncio.to_thread(child.wait)
        finally:
            stop.set()
            await sampler
        if code != 0 or not out_file.exists():
            raise RuntimeError(f"producer process exited with status {code}")
        result = json.loads(out_file.read_text())
        phase1_s = result["phase1_end"] - result["phase1_start"]
        produced_mb_s = result["produced_bytes"] / MIB / phase1_s
        follower_mb_s = follower_rate(samples, result["phase1_start"], result["phase1_end"]) / MIB
        replicated_mb_s = follower_mb_s / (REPLICATION_FACTOR - 1)
        metrics_dir = Path(state.metrics_dir)
        batch_bytes = len(BatchMaker(0).next()[0])
        metrics_lag = lag_values(metrics_dir, result["phase1_start"], result["phase1_end"])
        lag1, behind1 = time_behind_ms(samples, result["phase1_start"], result["phase1_end"])
        lag2, _ = time_behind_ms(samples, result["phase2_start"], result["phase2_end"])
        progress(
            f"produced {produced_mb_s:.1f} MiB/s; followers appended {follower_mb_s:.1f} MiB/s in all "
            f"({replicated_mb_s:.1f} MiB/s per follower copy); ack p99 at half rate {result['ack_p99_ms']} ms"
        )
        return {
            "bench": "replication",
            "quick": quick,
            "produced_mb_s": round(produced_mb_s, 2),
            "replicated_mb_s": round(replicated_mb_s, 2),
            "raw_mb_s": round(raw_mb_s, 1),
            "ratio": rounded(replicated_mb_s / raw_mb_s if raw_mb_s else None, 4),
            "ack_p50_ms": rounded(result["ack_p50_ms"]),
            "ack_p99_ms": rounded(result["ack_p99_ms"]),
            "lag_p99_ms": rounded(percentile(lag1, 99), 1),
            "lag_p50_ms": rounded(percentile(lag1, 50), 1),
            "lag_p99_messages": percentile(behind1, 99),
            "lag_p99_ms_half_rate": rounded(percentile(lag2, 99), 1),
            "metrics_lag_p99_ms": percentile(metrics_lag, 99),
            "acked_lost": result["acked_lost"],
            "acked_batches_checked": result["checked"],
            "failed_produces": result["failed"],
            "errors": result["errors"],
            "paced_rate_mb_s": round(result["paced_rate_requests_s"] * batches_per_request * batch_bytes / MIB, 2),
            "batches_per_request": batches_per_request,
            "lag_samples": len(lag1),
            "metrics_lag_samples": len(metrics_lag),
            "targets": {"ratio": 0.10, "ack_p99_ms": 20},
            "unit": "MB = MiB",
        }
    finally:
        await stop_cluster_then_cleanup(state, reaper)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replication", description="replication benchmark")
    parser.add_argument("--quick", action="store_true", help="10 s at full rate, 5 s at half rate")
    parser.add_argument(
        "--batches-per-request",
        type=int,
        default=1,
        help="16 KiB batches per PRODUCE (default 1: one batch per partition per request)",
    )
    parser.add_argument("--producer-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--max-seconds", type=float, default=30.0, help=argparse.SUPPRESS)
    parser.add_argument("--paced-seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.producer_child:
        import uvloop

        result = uvloop.run(producer_child(args))
        Path(args.out).write_text(json.dumps(result))
        return 0
    if args.batches_per_request < 1:
        parser.error("--batches-per-request must be >= 1")
    return main_guard(lambda reaper: run(reaper, args.quick, args.batches_per_request))


if __name__ == "__main__":
    sys.exit(main())
