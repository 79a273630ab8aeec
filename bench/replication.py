"""Replication throughput, acks=all latency and follower lag on a real 3-broker cluster, beside a raw stream.

    .venv/bin/python -m bench.replication [--quick]

Setup: `start_cluster` (controller + 3 broker processes on free loopback ports, metrics every 200 ms),
one topic with 6 partitions (`--partitions N` for another count), RF 3, min.insync.replicas=2.

Load, from a separate client process (`--producer-child`): one `client.producer.Producer` with Kafka's
defaults (`PRODUCER_CONFIG`: batch.size 16384, linger.ms 5, max.in.flight.requests.per.connection 5,
buffer.memory 32 MiB, acks=all), so each PRODUCE carries one batch for every partition its broker leads
(two here); `--batches-per-partition N` lets a request carry up to N queued batches of a partition
(client/sender.py). Records of 1012 bytes, a batch's worth (16, one full 16 KiB batch) to each
partition in turn. The values are built before the run (`ValuePool`), each starting with its pool
index, and every acked record's offset comes back through the producer's callback, so every acked
record can be checked afterwards.

* phase 1 (30 s, 10 s with --quick): as fast as the producer takes records (it blocks while
  buffer.memory is full), then a flush. `produced_mb_s` = batch bytes acked / phase time.
* phase 2 (10 s, 5 s with --quick): open loop, a batch's worth of records at half the phase-1 batch
  rate; `ack_p50_ms` / `ack_p99_ms` run from the send of a group's first record to its acks=all
  acknowledgement (so they include linger.ms).
* verification: every partition is read back from its leader (consumer fetches up to the HW) and each
  acked record must sit at its acked offset with its value: `acked_lost` counts those that do not.

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

The brokers' log dirs are under `$TMPDIR` (`log_dir_fs` says on which filesystem). On a disk, the
kernel's writeback of the ~2.4 GB a quick run writes lands in phase 2 and stalls appends for a few
hundred ms at a time, which is what `ack_p99_ms` then measures; `TMPDIR=/dev/shm` takes the disk out.

Baseline, same run: one `source` process streams the same 16 KiB messages to two `sink` reader
processes over loopback (BufferedProtocol readers); `raw_mb_s` is the mean per-reader rate, the
ceiling for one follower copy moving bytes between processes. `ratio` = replicated_mb_s / raw_mb_s.
Targets: ratio >= 0.10, ack_p99_ms <= 20.

`cpu_us_per_batch`: the user + system CPU of every process of the run (controller, brokers, producer;
/proc/PID/stat, read with each sample) over the same window as `replicated_mb_s`, divided by the
batches one follower copy appended in it (`batch_bytes_mean` each): what a replicated batch costs the
machine, which a shared, noisy machine changes far less than the throughput. `cpu_cores_busy` is the
same CPU over the window's length.

`requests_per_batch`: the requests the brokers served in phase 1 (PRODUCE, followers' FETCH; from the
running `RequestsPerSec` total in their metrics) per replicated batch. `rpc_floor_cpu_us`, measured
before the cluster starts: the CPU of one bare round trip between two uvloop processes carrying a
batch-sized request and a 64-byte reply, with no codec and no logic (`bench.common.rpc_floor_cpu_us`).
Their product, `transport_floor_cpu_us_per_batch`, is what moving the requests alone would cost per
batch, before any broker or client work: the least `cpu_us_per_batch` could be with requests this size.

The producer's window, sampled every 5 ms in phase 1: `in_flight_batches_mean` (batches handed to the
sender and not answered; an idempotent producer allows 5 per partition, so 30 with 6 partitions),
`in_flight_requests_mean` (PRODUCE requests unanswered; 5 per broker), `producer_blocked_frac` (how
often `send` waited for buffer.memory) and `in_flight_ms`, the mean time a batch spends between the
sender and its answer at full rate (batches in flight / batch rate, Little's law). Run with more
`--partitions` to tell what bounds the rate: if the window fills again and `in_flight_ms` grows with it
while the rate stays, the extra batches only queue for CPU (docs/benchmarks.md has the runs).
With BENCH_PROFILE_DIR=D every process runs under cProfile and
leaves its stats in D (`broker-broker-N.prof`, `controller-controller.prof`, `producer.prof`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import (
    PROFILE_ENV,
    ProcessReaper,
    filesystem_of,
    free_port,
    free_port_block,
    main_guard,
    percentile,
    process_cpu_s,
    progress,
    rounded,
    rpc_floor_cpu_us,
    start_peer,
    stop_cluster_then_cleanup,
    stop_peer,
)
from client.cluster_client import ClusterClient
from client.producer import Producer
from cluster.local_cluster import LocalClusterState, start_cluster
from metrics.fields import REQUESTS
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import DescribeLogDirsRequest, FetchPartition, FetchRequest, TopicPartition
from protocol.record_batch import build_batch

TOPIC = "bench-repl"
PARTITIONS = 6  # the workload the targets were set on; --partitions changes it
REPLICATION_FACTOR = 3
RECORDS_PER_BATCH = 16
RECORD_BYTES = 1012  # 16 records of this size fill a 16384-byte batch (batch.size): 16368 bytes with the header
POOL_RECORDS = 32768  # distinct values built before the run (32 MiB)
# Kafka's producer defaults, as the bench uses them (reported in the result).
PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",
    "batch.size": 16384,
    "linger.ms": 5,
    "max.in.flight.requests.per.connection": 5,
    "buffer.memory": 32 * 1024 * 1024,
    "max.request.size": 1024 * 1024,
    "enable.idempotence": True,  # Kafka's default since 3.0; --no-idempotence measures without it
}
SAMPLE_INTERVAL_S = 0.05
MIB = 1024 * 1024
OVERRIDES = {
    "metrics.interval.ms": "200",
    "min.insync.replicas": "2",
}


# -- the producer child process -----------------------------------------------------------------------


class ValuePool:
    """RECORD_BYTES-byte values built before the run, each starting with its own index, so producing
    costs the bench no byte building and every acked record can be checked against what was sent."""

    def __init__(self, size: int = POOL_RECORDS) -> None:
        padding = os.urandom(RECORD_BYTES)
        self.values = [b"%012d|" % i + padding[13:] for i in range(size)]


@dataclass
class PartitionAcks:
    """Acked records of one partition: offsets and the pool index of the value sent, side by side."""

    offsets: array[int] = field(default_factory=lambda: array("q"))
    indices: array[int] = field(default_factory=lambda: array("l"))


@dataclass
class ProducerStats:
    acked: dict[TopicPartition, PartitionAcks] = field(default_factory=lambda: defaultdict(PartitionAcks))
    acked_records: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    latencies_ms: list[float] = field(default_factory=list)
    # One callback per (partition, pool index), built before the run (`build_callbacks`) and reused each
    # time the pool comes round. A callback per record sent was the bench's own cost, not the producer's:
    # ~40 of ~105 µs of producer CPU per batch, a third of it the garbage collector going over the tens
    # of thousands of callbacks waiting for their answers.
    _callbacks: dict[TopicPartition, list[Callable[[int, str | None], None]]] = field(default_factory=dict)

    def build_callbacks(self, tps: Sequence[TopicPartition]) -> None:
        for tp in tps:
            acks = self.acked[tp]
            self._callbacks[tp] = [partial(self._on_done, acks, index) for index in range(POOL_RECORDS)]

    def callback(self, tp: TopicPartition, index: int) -> Callable[[int, str | None], None]:
        return self._callbacks[tp][index]

    def _on_done(self, acks: PartitionAcks, index: int, offset: int, error: str | None) -> None:
        if error is None:
            acks.offsets.append(offset)
            acks.indices.append(index)
            self.acked_records += 1
        else:
            self.failed += 1
            self.errors[error.split(":", 1)[0]] += 1

    def timed_callback(self, tp: TopicPartition, index: int) -> Callable[[int, str | None], None]:
        inner = self.callback(tp, index)
        started = time.perf_counter()

        def on_done(offset: int, error: str | None) -> None:
            inner(offset, error)
            if error is None:
                self.latencies_ms.append((time.perf_counter() - started) * 1000.0)

        return on_done


async def max_rate_phase(
    producer: Producer, tps: list[TopicPartition], pool: ValuePool, stats: ProducerStats, deadline: float
) -> None:
    """Send as fast as the producer takes records (it blocks on buffer.memory), a batch's worth to each
    partition in turn, until the deadline; then wait for every answer."""
    values = pool.values
    n = len(values)
    i = 0
    while time.monotonic() < deadline:
        for tp in tps:
            for _ in range(RECORDS_PER_BATCH):
                index = i % n
                await producer.send(tp, values[index], callback=stats.callback(tp, index))
                i += 1
    await producer.flush()


async def paced_phase(
    producer: Producer,
    tps: list[TopicPartition],
    pool: ValuePool,
    stats: ProducerStats,
    batches_per_s: float,
    duration_s: float,
    first: int,
) -> None:
    """Open loop: a batch's worth of records every 1/batches_per_s seconds, partitions in turn; the ack
    latency is measured from the send of a group's first record to its acknowledgement."""
    values = pool.values
    interval = 1.0 / batches_per_s
    started = time.monotonic()
    n = 0
    i = first
    while True:
        due = started + n * interval
        if due - started >= duration_s:
            break
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tp = tps[n % len(tps)]
        for k in range(RECORDS_PER_BATCH):
            index = i % len(values)
            callback = stats.timed_callback(tp, index) if k == 0 else stats.callback(tp, index)
            await producer.send(tp, values[index], callback=callback)
            i += 1
        n += 1
    await producer.flush()


async def read_partition(conn: BrokerConnection, tp: TopicPartition) -> dict[int, bytes]:
    """offset -> value prefix (the pool index) of every record below the HW."""
    from protocol.record_batch import iter_records

    out: dict[int, bytes] = {}
    offset = 0
    while True:
        req = FetchRequest(-1, 0, 1, 8 * MIB, [FetchPartition(tp.topic, tp.partition, offset, 8 * MIB)])
        resp = await conn.send(req, timeout_s=30.0)
        p = resp.partitions[0]
        if p.error_code != ErrorCode.NONE:
            raise RuntimeError(f"read-back of {tp} at {offset}: {ErrorCode(p.error_code).name} {p.error_message}")
        if not p.records:
            return out
        for record in iter_records(p.records):
            out[record.offset] = (record.value or b"")[:13]
            offset = record.offset + 1


async def verify(bootstrap: str, pool: ValuePool, stats: list[ProducerStats]) -> tuple[int, int]:
    """(acked records checked, acked records missing or different at their offset)."""
    checked = lost = 0
    async with ClusterClient(bootstrap, client_id="bench-verify") as client:
        await client.refresh_metadata([TOPIC])
        for tp in client.partitions_of(TOPIC):
            ep = client.brokers[client.leader_of(tp).leader_id]
            conn = await client.connection(ep.host, ep.port)
            found = await read_partition(conn, tp)
            for s in stats:
                acks = s.acked.get(tp)
                if acks is None:
                    continue
                for offset, index in zip(acks.offsets, acks.indices, strict=True):
                    checked += 1
                    if found.get(offset) != pool.values[index][:13]:
                        lost += 1
    return checked, lost


async def sample_window(producer: Producer, client: ClusterClient, out: list[tuple[int, int, bool]]) -> None:
    """Every 5 ms until cancelled: (batches unanswered, PRODUCE requests unanswered, whether `send` waits
    for buffer.memory). With the window full, batches in flight / batch rate is how long a batch takes
    from the sender to its answer at full rate (Little's law)."""
    while True:
        await asyncio.sleep(0.005)
        out.append((producer.batches_in_flight, client.sender.requests_in_flight, producer.blocked_on_buffer))


def bench_producer(
    bootstrap: str, batches_per_partition: int = 1, enable_idempotence: bool = True
) -> tuple[ClusterClient, Producer]:
    """A client and an acks=all producer with Kafka's defaults (`PRODUCER_CONFIG`)."""
    client = ClusterClient(
        bootstrap,
        client_id="bench-producer",
        max_in_flight=PRODUCER_CONFIG["max.in.flight.requests.per.connection"],
        max_request_bytes=PRODUCER_CONFIG["max.request.size"],
        batches_per_partition=batches_per_partition,
    )
    producer = Producer(
        client,
        acks=-1,
        batch_size=PRODUCER_CONFIG["batch.size"],
        linger_ms=PRODUCER_CONFIG["linger.ms"],
        buffer_memory=PRODUCER_CONFIG["buffer.memory"],
        enable_idempotence=enable_idempotence,
    )
    return client, producer


async def producer_child(args: argparse.Namespace) -> dict[str, Any]:
    pool = ValuePool()
    client, producer = bench_producer(args.bootstrap, args.batches_per_partition, not args.no_idempotence)
    try:
        await client.refresh_metadata([TOPIC])
        tps = client.partitions_of(TOPIC)
        max_stats, paced_stats = ProducerStats(), ProducerStats()
        max_stats.build_callbacks(tps)
        paced_stats.build_callbacks(tps)
        # The bench's own long-lived objects (the values, ~400k callbacks) out of the collector's way, so
        # its full collections (up to 220 ms each with the callbacks in them, stalling the producer) go
        # over what the producer allocates as it runs, as they would in an application.
        gc.collect()
        gc.freeze()
        # phase 1: as fast as the producer takes records
        t_start = time.time()
        window: list[tuple[int, int, bool]] = []
        sampler = asyncio.get_running_loop().create_task(sample_window(producer, client, window))
        try:
            await max_rate_phase(producer, tps, pool, max_stats, time.monotonic() + args.max_seconds)
        finally:
            sampler.cancel()
        t_end = time.time()
        phase1_s = t_end - t_start
        requests_1, batches_1 = client.sender.requests_sent, producer.batches_sent
        produced_bytes = producer.bytes_sent if not max_stats.failed else max_stats.acked_records * RECORD_BYTES
        rate_mb_s = produced_bytes / MIB / phase1_s
        progress(
            f"phase 1: {max_stats.acked_records} records acked in {batches_1} batches and {requests_1} "
            f"requests, {rate_mb_s:.1f} MiB/s of values"
        )
        # phase 2: open loop at half the phase-1 batch rate
        rate = max(batches_1 / phase1_s / 2.0, 1.0)
        t2_start = time.time()
        await paced_phase(producer, tps, pool, paced_stats, rate, args.paced_seconds, max_stats.acked_records)
        t2_end = time.time()
        latencies = paced_stats.latencies_ms
        progress(f"phase 2: {len(latencies)} batches' worth acked, paced at {rate:.0f} per second")
    finally:
        await producer.close()
        await client.close()
    checked, lost = await verify(args.bootstrap, pool, [max_stats, paced_stats])
    errors: dict[str, int] = defaultdict(int)
    for s in (max_stats, paced_stats):
        for k, v in s.errors.items():
            errors[k] += v
    return {
        "phase1_start": t_start,
        "phase1_end": t_end,
        "phase2_start": t2_start,
        "phase2_end": t2_end,
        "produced_bytes": produced_bytes,
        "produced_batches": batches_1,
        "produce_requests": requests_1,
        "paced_rate_batches_s": rate,
        "in_flight_batches_mean": statistics.fmean(w[0] for w in window) if window else None,
        "in_flight_requests_mean": statistics.fmean(w[1] for w in window) if window else None,
        "producer_blocked_frac": statistics.fmean(w[2] for w in window) if window else None,
        "paced_acked": len(latencies),
        "ack_p50_ms": percentile(latencies, 50),
        "ack_p99_ms": percentile(latencies, 99),
        "ack_max_ms": max(latencies) if latencies else None,
        "failed": max_stats.failed + paced_stats.failed,
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
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU so far: controller, brokers, producer


def cpu_seconds(pids: dict[str, list[int]]) -> dict[str, float]:
    """User + system CPU time each group of processes has used so far (a gone process counts 0)."""
    return {group: sum(process_cpu_s(pid) for pid in members) for group, members in pids.items()}


async def sample_log_dirs(
    state: LocalClusterState, samples: list[Sample], stop: asyncio.Event, cpu_pids: dict[str, list[int]]
) -> None:
    conns: dict[int, BrokerConnection] = {}
    try:
        while not stop.is_set():
            with contextlib.suppress(ConnectionError, OSError, asyncio.TimeoutError):
                sample = Sample(time.time(), 0, {}, [], cpu_seconds(cpu_pids))
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


def cpu_between(samples: list[Sample], start: float, end: float) -> dict[str, float]:
    """CPU seconds each group of processes used between the samples closest inside [start, end]."""
    inside = [s for s in samples if start <= s.at <= end]
    if len(inside) < 2:
        return {}
    return {group: inside[-1].cpu_s[group] - inside[0].cpu_s[group] for group in inside[0].cpu_s}


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


def metric_records(metrics_dir: Path, marker: str, start: float, end: float) -> Iterator[dict[str, Any]]:
    """The brokers' metric records from `start` to `end` (seconds) whose line holds `marker` (a cheap
    filter before parsing); lines cut by a crash are skipped."""
    for path in metrics_dir.rglob("*.jsonl"):
        with open(path, errors="replace") as f:
            for line in f:
                if marker not in line:
                    continue
                with contextlib.suppress(json.JSONDecodeError):
                    r = json.loads(line)
                    if start * 1000 <= r.get("ts_ms", -1) <= end * 1000:
                        yield r


def lag_values(metrics_dir: Path, start: float, end: float) -> list[float]:
    return [
        float(r["lag_ms"])
        for r in metric_records(metrics_dir, '"follower"', start, end)
        if r.get("kind") == "partition"
        and r.get("role") == "follower"
        and r.get("topic") == TOPIC
        and r.get("lag_ms") is not None
    ]


def requests_served(metrics_dir: Path, start: float, end: float) -> float:
    """Requests per second the brokers served in [start, end]: the growth of each broker's running
    `RequestsPerSec` total between its first and last sample in the window (one incarnation), summed."""
    first: dict[tuple[int, int], tuple[int, int]] = {}
    last: dict[tuple[int, int], tuple[int, int]] = {}
    for r in metric_records(metrics_dir, '"broker"', start, end):
        if r.get("kind") != "broker" or r.get(REQUESTS) is None:
            continue
        ts, key = r["ts_ms"], (r["broker_id"], r["broker_start_ms"])
        if key not in first or ts < first[key][0]:
            first[key] = (ts, r[REQUESTS])
        if key not in last or ts > last[key][0]:
            last[key] = (ts, r[REQUESTS])
    rate = 0.0
    for key, (ts0, n0) in first.items():
        ts1, n1 = last[key]
        if ts1 > ts0:
            rate += (n1 - n0) / ((ts1 - ts0) / 1000)
    return rate


async def raw_baseline(reaper: ProcessReaper, work: Path, bytes_per_reader: int) -> float:
    """One source process streaming 16 KiB messages to two sink processes; mean MiB/s per reader."""
    message = len(build_batch(ValuePool(RECORDS_PER_BATCH).values))
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


async def create_topic(state: LocalClusterState, partitions: int, topic: str = TOPIC) -> None:
    """Create `topic` (RF 3, min.insync.replicas=2) and wait until every partition's ISR is full."""
    async with ClusterClient(state.bootstrap, client_id="bench-admin") as admin:
        resp = await admin.create_topic(topic, partitions, REPLICATION_FACTOR, {"min.insync.replicas": "2"})
        code = resp.topics[0].error_code if resp.topics else resp.error_code
        if code != ErrorCode.NONE:
            raise RuntimeError(f"cannot create {topic}: {ErrorCode(code).name}")
        await admin.wait_for_leaders(topic)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            await admin.refresh_metadata([topic])
            if all(len(admin.partitions[tp].isr) == REPLICATION_FACTOR for tp in admin.partitions_of(topic)):
                return
            await asyncio.sleep(0.1)
        raise RuntimeError("ISRs did not fill within 30 s")


async def run(
    reaper: ProcessReaper,
    quick: bool,
    batches_per_partition: int,
    idempotence: bool = True,
    partitions: int = PARTITIONS,
) -> dict[str, Any]:
    max_seconds = 10.0 if quick else 30.0
    paced_seconds = 5.0 if quick else 10.0
    work = reaper.temp_dir("minibroker-bench-repl-")
    state: LocalClusterState | None = None
    try:
        raw_mb_s = await raw_baseline(reaper, work, (512 if quick else 2048) * MIB)
        progress(f"raw loopback stream, one writer to two reader processes: {raw_mb_s:,.0f} MiB/s per reader")
        batch_bytes = len(build_batch(ValuePool(RECORDS_PER_BATCH).values))
        rpc_floor_us = await rpc_floor_cpu_us(reaper, work / "echo.log", batch_bytes, 64, 2.0 if quick else 5.0)
        progress(f"bare round trip with a {batch_bytes}-byte request: {rpc_floor_us:.1f} µs of CPU")
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
        reaper.watch(lambda: [p.pid for p in cluster_state.nodes])
        await create_topic(state, partitions)
        progress(
            f"topic {TOPIC}: {partitions} partitions, RF {REPLICATION_FACTOR}, ISRs full; producing for "
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
                "--batches-per-partition",
                str(batches_per_partition),
                *([] if idempotence else ["--no-idempotence"]),
            ],
            stdout=None,
        )
        samples: list[Sample] = []
        stop = asyncio.Event()
        cpu_pids = {
            "controller": [c.pid for c in state.controllers],
            "brokers": [b.pid for b in state.brokers],
            "producer": [child.pid],
        }
        sampler = asyncio.create_task(sample_log_dirs(state, samples, stop, cpu_pids))
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
        # CPU per replicated batch: every process's CPU (controller, brokers, producer) over the same
        # sampled window as replicated_mb_s, divided by the batches one follower copy appended in it.
        batch_bytes_mean = result["produced_bytes"] / max(result["produced_batches"], 1)
        inside = [s for s in samples if result["phase1_start"] <= s.at <= result["phase1_end"]]
        window_s = inside[-1].at - inside[0].at if len(inside) >= 2 else 0.0
        cpu_by_group = cpu_between(samples, result["phase1_start"], result["phase1_end"])
        cpu_s = sum(cpu_by_group.values())
        replicated_batches = replicated_mb_s * MIB * window_s / batch_bytes_mean
        cpu_us_per_batch = cpu_s * 1e6 / replicated_batches if replicated_batches else None
        request_rate = requests_served(Path(state.metrics_dir), result["phase1_start"], result["phase1_end"])
        batch_rate = replicated_mb_s * MIB / batch_bytes_mean
        requests_per_batch = request_rate / batch_rate if batch_rate else None
        metrics_dir = Path(state.metrics_dir)
        metrics_lag = lag_values(metrics_dir, result["phase1_start"], result["phase1_end"])
        lag1, behind1 = time_behind_ms(samples, result["phase1_start"], result["phase1_end"])
        lag2, _ = time_behind_ms(samples, result["phase2_start"], result["phase2_end"])
        progress(
            f"produced {produced_mb_s:.1f} MiB/s; followers appended {follower_mb_s:.1f} MiB/s in all "
            f"({replicated_mb_s:.1f} MiB/s per follower copy); ack p99 at half rate {result['ack_p99_ms']} ms; "
            f"{cpu_s / window_s if window_s else 0:.2f} cores busy, {cpu_us_per_batch or 0:.0f} µs CPU per batch"
        )
        return {
            "bench": "replication",
            "quick": quick,
            "produced_mb_s": round(produced_mb_s, 2),
            "replicated_mb_s": round(replicated_mb_s, 2),
            "raw_mb_s": round(raw_mb_s, 1),
            "ratio": rounded(replicated_mb_s / raw_mb_s if raw_mb_s else None, 4),
            "cpu_us_per_batch": rounded(cpu_us_per_batch, 1),
            "cpu_us_per_batch_by_process": {
                group: rounded(used * 1e6 / replicated_batches if replicated_batches else None, 1)
                for group, used in cpu_by_group.items()
            },
            "cpu_cores_busy": rounded(cpu_s / window_s if window_s else None),
            "requests_per_batch": rounded(requests_per_batch),
            "rpc_floor_cpu_us": rounded(rpc_floor_us, 1),
            "transport_floor_cpu_us_per_batch": rounded(
                requests_per_batch * rpc_floor_us if requests_per_batch is not None else None, 1
            ),
            "batch_bytes_mean": round(batch_bytes_mean),
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
            "paced_rate_mb_s": round(result["paced_rate_batches_s"] * batch_bytes_mean / MIB, 2),
            "batches_per_request": round(result["produced_batches"] / max(result["produce_requests"], 1), 2),
            "partitions": partitions,
            "in_flight_batches_mean": rounded(result["in_flight_batches_mean"]),
            "in_flight_requests_mean": rounded(result["in_flight_requests_mean"]),
            "in_flight_ms": rounded(
                result["in_flight_batches_mean"] * 1000.0 * phase1_s / result["produced_batches"]
                if result["in_flight_batches_mean"] is not None and result["produced_batches"]
                else None
            ),
            "producer_blocked_frac": rounded(result["producer_blocked_frac"]),
            "producer_config": {
                **PRODUCER_CONFIG,
                "enable.idempotence": idempotence,
                "batches_per_partition": batches_per_partition,
            },
            "lag_samples": len(lag1),
            "metrics_lag_samples": len(metrics_lag),
            "log_dir_fs": filesystem_of(work),
            "targets": {"ratio": 0.10, "ack_p99_ms": 20},
            "unit": "MB = MiB",
        }
    finally:
        await stop_cluster_then_cleanup(state, reaper)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replication", description="replication benchmark")
    parser.add_argument("--quick", action="store_true", help="10 s at full rate, 5 s at half rate")
    parser.add_argument(
        "--batches-per-partition",
        type=int,
        default=1,
        help="queued batches of one partition a PRODUCE may carry (default 1, as Kafka's PRODUCE v3+)",
    )
    parser.add_argument(
        "--no-idempotence",
        action="store_true",
        help="enable.idempotence=false: batches that may have been written are not resent (default: idempotent, "
        "as Kafka's producer since 3.0)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=PARTITIONS,
        help=f"partitions of the topic (default {PARTITIONS}, the workload the targets were set on)",
    )
    parser.add_argument("--producer-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--max-seconds", type=float, default=30.0, help=argparse.SUPPRESS)
    parser.add_argument("--paced-seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.producer_child:
        import uvloop

        profile_dir = os.environ.get(PROFILE_ENV)
        if profile_dir:  # the producer's CPU profile beside the brokers' (see docs/benchmarks.md)
            import cProfile

            with cProfile.Profile(time.process_time) as profiler:
                result = uvloop.run(producer_child(args))
            Path(profile_dir).mkdir(parents=True, exist_ok=True)  # the brokers may not have written theirs yet
            profiler.dump_stats(Path(profile_dir) / "producer.prof")
        else:
            result = uvloop.run(producer_child(args))
        Path(args.out).write_text(json.dumps(result))
        return 0
    if args.batches_per_partition < 1:
        parser.error("--batches-per-partition must be >= 1")
    if args.partitions < 1:
        parser.error("--partitions must be >= 1")
    return main_guard(
        lambda reaper: run(reaper, args.quick, args.batches_per_partition, not args.no_idempotence, args.partitions)
    )


if __name__ == "__main__":
    sys.exit(main())
