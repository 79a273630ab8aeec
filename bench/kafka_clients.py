"""A Kafka client (confluent-kafka) on the Kafka listener beside minibroker's own client on the msgpack one.

    .venv/bin/python -m bench.kafka_clients [--quick] [--profile-kafka FILE]

Cluster and workload as `bench.replication`'s: `start_cluster` with 3 brokers, each with a PLAINTEXT
Kafka listener beside its msgpack one, two topics (`bench-kafka`, `bench-native`) of 6 partitions, RF 3,
min.insync.replicas=2, brokers' log dirs under $TMPDIR. Records of 1012-byte values from the same
`ValuePool` (16 of them fill a 16 KiB batch), a batch's worth to each partition in turn.

Five phases, one after the other, each in its own child process (so the client's CPU is not counted on
the brokers, nor the bench process's on the client):

1. `kafka-produce`: confluent-kafka's Producer with acks=all, enable.idempotence=true, linger.ms 5,
   batch.size 16384, compression none and a 32 MiB queue (queue.buffering.max.kbytes, as
   buffer.memory), producing as fast as it takes records (BufferError -> poll) for 10 s (4 s with
   --quick), then flush. Every delivery report's partition, offset and value index is kept.
2. `kafka-consume`: confluent-kafka's Consumer, assign() on the 6 partitions at offset 0, reading until
   every delivered offset was passed (or 15 s without a record). `kafka_acked_lost`: delivered records
   that did not come back exactly once with their value at their offset (`kafka_duplicates` counts the
   ones that came back more than once).
3. `native-produce`: `client.producer.Producer` with the same settings (`bench.replication`'s
   `PRODUCER_CONFIG`, its `max_rate_phase`), same duration.
4. `native-consume`: `client.consumer.consume_all` from the earliest offsets with Kafka's fetch defaults,
   same check (`native_acked_lost`).

`*_mb_s` are MiB of record values per second over the phase (the produce phases include the final
flush; the consume phases run from the consumer's creation to the last record), the same unit for both
clients, so `ratio_vs_native` = kafka_produce_mb_s / native_produce_mb_s (target >= 0.8, reported,
not asserted) and `consume_ratio_vs_native` compare like with like.

5. (run between 2 and 3) `kafka-produce` again with enable.idempotence=false (librdkafka then keeps up to 5 requests in
   flight per connection): `kafka_plain_*` and `plain_ratio_vs_native`. librdkafka's idempotent producer
   keeps one PRODUCE in flight per partition (its max.in.flight.requests.per.connection=5 is not used
   for that; an open upstream pull request, confluentinc/librdkafka#4989, changes it) and, while the
   answer is awaited, its broker threads poll with a zero timeout: `perf record -g` on the producer
   shows the three rdk:broker threads in clock_gettime, poll and rd_kafka_toppar_producer_serve, 1.2
   cores at 11 MiB/s where the same producer without idempotence uses 0.3 cores at 41 MiB/s. On two
   shared cores that client CPU is taken from the brokers, so the idempotent figure measures the client
   library and the machine as much as the Kafka listener; this phase shows the listener with a request
   shape like the native client's (one partition per PRODUCE, several in flight).

6. (last) one request shape through both listeners, twice each, alternating (`bench/listener_shape.py`): a
   batch of 16 records per PRODUCE, one partition per request, two in flight per partition, acks=all, the same
   batches, through the Kafka listener (Produce v8) and the msgpack one: `wire_kafka`, `wire_native`,
   `wire_ratio_vs_native` (MB/s) and `wire_cpu_ratio_vs_native` (native broker CPU per batch / Kafka's),
   what the Kafka wire costs the brokers with the clients' differences taken out.

`*_broker_cpu_us_per_batch`: user + system CPU of the three broker processes (/proc/PID/stat, sampled
every 50 ms and interpolated at the phase's start and end) divided by the 16 KiB-batch equivalents
(16 records) the phase moved. The throughput of a shared 2-core machine follows its other work; this
number moves far less. `*_client_cpu_us_per_batch` is the client child's own CPU over the phase.

`--profile-kafka FILE`: run `py-spy record --nonblocking -f raw` on broker 1 for most of the Kafka
produce phase (flush included) and add its top frames by self time to the result
(`kafka_profile_top`, in % of the samples; uvloop's C code, socket reads and writes included, shows as
`Runner.run`); the raw (collapsed) stacks stay in FILE. From librdkafka's statistics:
`kafka_produce_requests_per_batch` (PRODUCE requests per 16 records), `kafka_batch_bytes_mean` and
`kafka_records_per_batch_mean` (the message sets it built).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from array import array
from bisect import bisect_left
from collections import Counter
from pathlib import Path
from typing import Any

from bench import listener_shape
from bench.common import (
    ProcessReaper,
    filesystem_of,
    free_port,
    free_port_block,
    main_guard,
    progress,
    rounded,
    stop_cluster_then_cleanup,
)
from bench.replication import (
    OVERRIDES,
    PARTITIONS,
    PRODUCER_CONFIG,
    RECORD_BYTES,
    RECORDS_PER_BATCH,
    ProducerStats,
    ValuePool,
    bench_producer,
    cpu_seconds,
    create_topic,
    max_rate_phase,
)
from client.cluster_client import ClusterClient
from cluster.local_cluster import LocalClusterState, start_cluster

KAFKA_TOPIC = "bench-kafka"
NATIVE_TOPIC = "bench-native"
WIRE_TOPIC = "bench-wire"  # phase 6: one request shape through either listener
WIRE_ROUNDS = 2
INF = float("inf")
MIB = 1024 * 1024
SAMPLE_INTERVAL_S = 0.05
IDLE_TIMEOUT_S = 15.0  # a consumer gives up after this long without a record
INDEX_BYTES = 12  # each pool value starts with its index, b"%012d|"
KAFKA_PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 16384,
    "compression.type": "none",
    "queue.buffering.max.kbytes": PRODUCER_CONFIG["buffer.memory"] // 1024,
}


# -- the client child processes ---------------------------------------------------------------------


def child_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def acked_to_json(acked: dict[int, tuple[array[int], array[int]]]) -> dict[str, list[list[int]]]:
    return {str(p): [offsets.tolist(), indices.tolist()] for p, (offsets, indices) in acked.items()}


class Readback:
    """What a consumer must read back: every acked record once, at its offset, with its value."""

    def __init__(self, produced: dict[str, Any]) -> None:
        self.expected: dict[int, dict[int, int]] = {
            int(p): dict(zip(offsets, indices, strict=True)) for p, (offsets, indices) in produced["acked"].items()
        }
        self.ends = {p: max(e) + 1 for p, e in self.expected.items() if e}
        self.total = sum(len(e) for e in self.expected.values())
        self.seen: dict[int, set[int]] = {p: set() for p in self.expected}
        self.records = 0
        self.value_bytes = 0
        self.duplicates = 0
        self.mismatched = 0

    def record(self, partition: int, offset: int, value: bytes | None) -> None:
        self.records += 1
        self.value_bytes += len(value or b"")
        want = self.expected.get(partition, {}).get(offset)
        if want is None or value is None or int(value[:INDEX_BYTES]) != want:
            self.mismatched += want is not None
            return
        seen = self.seen[partition]
        if offset in seen:
            self.duplicates += 1
        seen.add(offset)

    def result(self, started: float, last_at: float, cpu_s: float) -> dict[str, Any]:
        back_once = sum(len(s) for s in self.seen.values())
        return {
            "start": started,
            "end": last_at,
            "records": self.records,
            "value_bytes": self.value_bytes,
            "checked": self.total,
            "acked_lost": self.total - back_once,
            "duplicates": self.duplicates,
            "mismatched": self.mismatched,
            "cpu_s": cpu_s,
        }


def kafka_produce(bootstrap: str, seconds: float, partitions: int, extra: dict[str, str]) -> dict[str, Any]:
    import confluent_kafka

    pool = ValuePool()
    values = pool.values
    acked: dict[int, tuple[array[int], array[int]]] = {p: (array("q"), array("l")) for p in range(partitions)}
    errors: Counter[str] = Counter()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors[str(err.name())] += 1
            return
        offsets, indices = acked[msg.partition()]
        offsets.append(msg.offset())
        indices.append(int(msg.value()[:INDEX_BYTES]))

    stats: list[str] = []  # librdkafka's statistics, the latest last
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            **KAFKA_PRODUCER_CONFIG,
            **extra,
            "statistics.interval.ms": 500,
            "stats_cb": lambda text: stats.append(text),
        }
    )
    if producer.list_topics(KAFKA_TOPIC, timeout=30.0).topics[KAFKA_TOPIC].error is not None:
        raise RuntimeError(f"no metadata for {KAFKA_TOPIC}")
    gc.collect()
    gc.freeze()
    produce, poll = producer.produce, producer.poll
    n = len(values)
    i = 0
    cpu_before = child_cpu_s()
    started = time.time()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for partition in range(partitions):
            for _ in range(RECORDS_PER_BATCH):
                value = values[i % n]
                while True:
                    try:
                        produce(KAFKA_TOPIC, value, partition=partition, on_delivery=on_delivery)
                        break
                    except BufferError:  # the 32 MiB queue is full: serve delivery reports, wait for room
                        poll(0.001)
                i += 1
        poll(0)
    left = producer.flush(120.0)
    ended = time.time()
    cpu_s = child_cpu_s() - cpu_before
    time.sleep(0.6)
    producer.poll(0)  # one more statistics report, after the flush
    records = sum(len(o) for o, _ in acked.values())
    return {
        "start": started,
        "end": ended,
        "sent": i,
        "records": records,
        "value_bytes": records * RECORD_BYTES,
        "unflushed": left,
        "failed": sum(errors.values()),
        "errors": dict(errors),
        "cpu_s": cpu_s,
        **librdkafka_figures(stats),
        "acked": acked_to_json(acked),
    }


def librdkafka_figures(reports: list[str]) -> dict[str, Any]:
    """PRODUCE requests and batches from librdkafka's statistics (STATISTICS.md): the running request
    total of the last report, and the message-set ("batch") sizes of each report's window, weighted by
    the batches in it."""
    parsed = [json.loads(text) for text in reports]
    requests = sum(b.get("req", {}).get("Produce", 0) for b in parsed[-1].get("brokers", {}).values()) if parsed else 0
    batches = size_sum = count_sum = 0.0
    for report in parsed:
        topic = report.get("topics", {}).get(KAFKA_TOPIC, {})
        n = topic.get("batchsize", {}).get("cnt", 0)
        batches += n
        size_sum += n * topic.get("batchsize", {}).get("avg", 0)
        count_sum += n * topic.get("batchcnt", {}).get("avg", 0)
    return {
        "produce_requests": requests,
        "batch_bytes_mean": round(size_sum / batches) if batches else None,
        "records_per_batch_mean": round(count_sum / batches, 1) if batches else None,
    }


def kafka_consume(bootstrap: str, produced: dict[str, Any]) -> dict[str, Any]:
    import confluent_kafka

    check = Readback(produced)
    positions = {p: 0 for p in check.ends}
    cpu_before = child_cpu_s()
    started = time.time()
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-kafka-clients", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(KAFKA_TOPIC, p, 0) for p in sorted(check.ends)])
    last_at = started
    idle_since = time.monotonic()
    try:
        while any(positions[p] < end for p, end in check.ends.items()):
            messages = consumer.consume(num_messages=10000, timeout=0.5)
            if not messages:
                if time.monotonic() - idle_since > IDLE_TIMEOUT_S:
                    break
                continue
            idle_since = time.monotonic()
            last_at = time.time()
            for msg in messages:
                if msg.error() is not None:
                    continue
                partition, offset = msg.partition(), msg.offset()
                if partition is None or offset is None:
                    continue
                check.record(partition, offset, msg.value())
                positions[partition] = offset + 1
    finally:
        consumer.close()
    return check.result(started, last_at, child_cpu_s() - cpu_before)


async def native_produce(bootstrap: str, seconds: float) -> dict[str, Any]:
    pool = ValuePool()
    client, producer = bench_producer(bootstrap)
    stats = ProducerStats()
    try:
        await client.refresh_metadata([NATIVE_TOPIC])
        tps = client.partitions_of(NATIVE_TOPIC)
        stats.build_callbacks(tps)
        gc.collect()
        gc.freeze()  # the pool and the callbacks out of the collector's way, as in bench.replication
        cpu_before = child_cpu_s()
        started = time.time()
        await max_rate_phase(producer, tps, pool, stats, time.monotonic() + seconds)
        ended = time.time()
        cpu_s = child_cpu_s() - cpu_before
    finally:
        await producer.close()
        await client.close()
    acked = {tp.partition: (a.offsets, a.indices) for tp, a in stats.acked.items()}
    return {
        "start": started,
        "end": ended,
        "records": stats.acked_records,
        "value_bytes": stats.acked_records * RECORD_BYTES,
        "failed": stats.failed,
        "errors": dict(stats.errors),
        "cpu_s": cpu_s,
        "acked": acked_to_json(acked),
    }


async def native_consume(bootstrap: str, produced: dict[str, Any]) -> dict[str, Any]:
    from client.cluster_client import ClusterClient
    from client.consumer import consume_all
    from protocol.messages import TopicPartition
    from protocol.record_batch import Record

    check = Readback(produced)
    last = [time.time()]

    def on_record(tp: TopicPartition, rec: Record) -> None:
        check.record(tp.partition, rec.offset, rec.value)
        last[0] = time.time()

    cpu_before = child_cpu_s()
    started = time.time()
    async with ClusterClient(bootstrap, client_id="bench-consumer") as client:
        await client.refresh_metadata([NATIVE_TOPIC])
        tps = [TopicPartition(NATIVE_TOPIC, p) for p in sorted(check.ends)]
        await consume_all(client, tps, True, check.total, int(IDLE_TIMEOUT_S * 1000), on_record)
    return check.result(started, last[0], child_cpu_s() - cpu_before)


def kafka_settings(pairs: list[str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in pairs)


def child_main(args: argparse.Namespace) -> int:
    import uvloop

    produced = json.loads(Path(args.produced).read_text()) if args.produced else None
    result: dict[str, Any]
    if args.child == "kafka-produce":
        result = kafka_produce(args.bootstrap, args.seconds, args.partitions, kafka_settings(args.kafka_config))
    elif args.child == "kafka-consume":
        assert produced is not None
        result = kafka_consume(args.bootstrap, produced)
    elif args.child == "native-produce":
        result = uvloop.run(native_produce(args.bootstrap, args.seconds))
    elif args.child in ("wire-kafka", "wire-native"):
        leaders = {int(p): (host, int(port)) for p, (host, port) in json.loads(args.targets).items()}
        listener = args.child.removeprefix("wire-")
        result = uvloop.run(listener_shape.wire_produce(listener, WIRE_TOPIC, leaders, args.seconds))
    else:
        assert produced is not None
        result = uvloop.run(native_consume(args.bootstrap, produced))
    Path(args.out).write_text(json.dumps(result))
    return 0


# -- the benchmark process --------------------------------------------------------------------------


class BrokerCpu:
    """The brokers' CPU seconds so far, sampled every 50 ms; `between` interpolates at any two times."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = {"brokers": pids}
        self.at: list[float] = []
        self.cpu: list[float] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while not self._stop.is_set():
            self.at.append(time.time())
            self.cpu.append(cpu_seconds(self.pids)["brokers"])
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    def _value(self, t: float) -> float:
        i = bisect_left(self.at, t)
        if i <= 0:
            return self.cpu[0]
        if i >= len(self.at):
            return self.cpu[-1]
        t0, t1, c0, c1 = self.at[i - 1], self.at[i], self.cpu[i - 1], self.cpu[i]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1

    def between(self, start: float, end: float) -> float:
        return self._value(end) - self._value(start) if self.at else 0.0


async def run_child(reaper: ProcessReaper, work: Path, role: str, bootstrap: str, *extra: str) -> dict[str, Any]:
    out = work / f"{role}.json"
    argv = [sys.executable, "-m", "bench.kafka_clients", "--child", role, "--bootstrap", bootstrap, "--out", str(out)]
    child = reaper.spawn([*argv, *extra], stdout=None)
    code = await asyncio.to_thread(child.wait)
    if code != 0 or not out.exists():
        raise RuntimeError(f"{role} process exited with status {code}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def phase_figures(result: dict[str, Any], cpu: BrokerCpu) -> dict[str, float | None]:
    seconds = result["end"] - result["start"]
    batches = result["records"] / RECORDS_PER_BATCH
    broker_cpu_s = cpu.between(result["start"], result["end"])
    return {
        "mb_s": result["value_bytes"] / MIB / seconds if seconds > 0 else None,
        "records_s": result["records"] / seconds if seconds > 0 else None,
        "seconds": seconds,
        "broker_cpu_us_per_batch": broker_cpu_s * 1e6 / batches if batches else None,
        "client_cpu_us_per_batch": result["cpu_s"] * 1e6 / batches if batches else None,
        "broker_cores_busy": broker_cpu_s / seconds if seconds > 0 else None,
    }


async def wire_leaders(state: LocalClusterState) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """Each WIRE_TOPIC partition's leader, as its msgpack and its Kafka address (JSON-ready)."""
    by_id = {b.node_id: b for b in state.brokers}
    async with ClusterClient(state.bootstrap, client_id="bench-wire") as client:
        await client.refresh_metadata([WIRE_TOPIC])
        leaders = {tp.partition: by_id[client.leader_of(tp).leader_id] for tp in client.partitions_of(WIRE_TOPIC)}
    native = {str(p): [b.host, b.port] for p, b in leaders.items()}
    kafka = {str(p): [b.host, b.kafka_port] for p, b in leaders.items()}
    return native, kafka


async def wire_phase(
    reaper: ProcessReaper, work: Path, state: LocalClusterState, cpu: BrokerCpu, seconds: float
) -> dict[str, Any]:
    """Phase 6: the same PRODUCE shape through the Kafka listener and the msgpack one (bench.listener_shape),
    WIRE_ROUNDS rounds each, alternating; of each listener the round with the lower broker CPU per batch."""
    native, kafka = await wire_leaders(state)
    best: dict[str, tuple[dict[str, Any], dict[str, float | None]]] = {}
    for round_ in range(WIRE_ROUNDS):
        for listener, targets in (("kafka", kafka), ("native", native)):
            result = await run_child(
                reaper,
                work,
                f"wire-{listener}",
                state.bootstrap,
                "--seconds",
                str(seconds),
                "--targets",
                json.dumps(targets),
            )
            figures = phase_figures(result, cpu)
            progress(
                f"one request shape, {listener} listener (round {round_ + 1}): {figures['mb_s']:.1f} MiB/s, "
                f"{figures['broker_cpu_us_per_batch']:.0f} µs broker CPU a batch, {result['failed']} failed"
            )
            kept = best.get(listener)
            cpu_per_batch = figures["broker_cpu_us_per_batch"] or INF
            if kept is None or cpu_per_batch < (kept[1]["broker_cpu_us_per_batch"] or INF):
                best[listener] = (result, figures)
    return {
        listener: {
            "mb_s": rounded(figures["mb_s"]),
            "broker_cpu_us_per_batch": rounded(figures["broker_cpu_us_per_batch"], 1),
            "client_cpu_us_per_batch": rounded(figures["client_cpu_us_per_batch"], 1),
            "failed": result["failed"],
            "errors": result["errors"],
        }
        for listener, (result, figures) in best.items()
    }


def py_spy_path() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profile_top(raw_file: Path, log_file: Path, top: int = 15) -> list[dict[str, Any]] | None:
    """Self time from py-spy's raw (collapsed) output: the samples whose innermost frame is each function."""
    if not raw_file.exists():
        progress(f"py-spy left no profile: {log_file.read_text(errors='replace')[-500:]}")
        return None
    own: Counter[str] = Counter()
    total = 0
    for line in raw_file.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        own[stack.rsplit(";", 1)[-1]] += int(count)
    return [{"frame": frame, "self_pct": round(100.0 * n / total, 1)} for frame, n in own.most_common(top)]


async def run(
    reaper: ProcessReaper, quick: bool, profile_file: Path | None, kafka_config: list[str] | None = None
) -> dict[str, Any]:
    kafka_config = kafka_config or []
    seconds = 4.0 if quick else 10.0
    work = reaper.temp_dir("minibroker-bench-kafka-clients-")
    state: LocalClusterState | None = None
    try:
        kafka_base = free_port_block(3)
        state = await start_cluster(
            work / "cluster",
            3,
            base_port=free_port_block(3),
            controller_port=free_port(),
            overrides=dict(OVERRIDES),
            progress=progress,
            kafka_ports=[kafka_base + i for i in range(3)],
        )
        cluster_state = state
        reaper.watch(lambda: [p.pid for p in cluster_state.nodes])
        for topic in (KAFKA_TOPIC, NATIVE_TOPIC, WIRE_TOPIC):
            await create_topic(state, PARTITIONS, topic)
        progress(f"topics {KAFKA_TOPIC}, {NATIVE_TOPIC}: {PARTITIONS} partitions, RF 3, ISRs full")
        cpu = BrokerCpu([b.pid for b in state.brokers])
        cpu.start()
        spy: subprocess.Popen[bytes] | None = None
        try:
            progress(f"confluent-kafka producer on the Kafka listeners ({state.kafka_bootstrap}) for {seconds:.0f} s")
            spy_argv = None
            if profile_file is not None:
                tool = py_spy_path()
                if tool is None:
                    progress("no py-spy found (pip install py-spy); not profiling")
                else:
                    pid = str(state.brokers[0].pid)  # stopped with SIGINT when the producer is done
                    spy_argv = [tool, "record", "--nonblocking", "-d", "600", "-f", "raw"]
                    spy_argv += ["-p", pid, "-o", str(profile_file)]
            args = ["--seconds", str(seconds), "--partitions", str(PARTITIONS)]
            args += [f"--kafka-config={pair}" for pair in kafka_config]
            produce_task = asyncio.create_task(run_child(reaper, work, "kafka-produce", state.kafka_bootstrap, *args))
            if spy_argv is not None:
                await asyncio.sleep(0.5)  # past the producer's start-up
                spy = reaper.spawn(spy_argv, log_file=work / "py-spy.log")
            kafka_p = await produce_task
            if spy is not None and spy.poll() is None:
                spy.send_signal(signal.SIGINT)  # py-spy writes what it has on Ctrl-C
            produced = work / "kafka-produce.json"
            kafka_pf = phase_figures(kafka_p, cpu)
            progress(f"kafka produce: {kafka_pf['mb_s']:.1f} MiB/s, {kafka_p['records']} records delivered")
            kafka_c = await run_child(reaper, work, "kafka-consume", state.kafka_bootstrap, "--produced", str(produced))
            kafka_cf = phase_figures(kafka_c, cpu)
            progress(f"kafka consume: {kafka_cf['mb_s']:.1f} MiB/s, {kafka_c['acked_lost']} lost")
            progress(
                "confluent-kafka producer again, enable.idempotence=false (the request shape without the one-in-flight)"
            )
            plain_args = [*args, "--kafka-config=enable.idempotence=false"]
            plain_p = await run_child(reaper, work, "kafka-produce", state.kafka_bootstrap, *plain_args)
            plain_pf = phase_figures(plain_p, cpu)
            progress(f"kafka produce, not idempotent: {plain_pf['mb_s']:.1f} MiB/s")
            native_p = await run_child(reaper, work, "native-produce", state.bootstrap, "--seconds", str(seconds))
            native_pf = phase_figures(native_p, cpu)
            progress(f"native produce: {native_pf['mb_s']:.1f} MiB/s, {native_p['records']} records acked")
            native_c = await run_child(
                reaper, work, "native-consume", state.bootstrap, "--produced", str(work / "native-produce.json")
            )
            native_cf = phase_figures(native_c, cpu)
            progress(f"native consume: {native_cf['mb_s']:.1f} MiB/s, {native_c['acked_lost']} lost")
            wire = await wire_phase(reaper, work, state, cpu, seconds)
        finally:
            await cpu.stop()
        profile: list[dict[str, Any]] | None = None
        if spy is not None and profile_file is not None:
            await asyncio.to_thread(spy.wait)
            profile = await asyncio.to_thread(profile_top, profile_file, work / "py-spy.log")

        def ratio(a: float | None, b: float | None) -> float | None:
            return a / b if a is not None and b else None

        return {
            "bench": "kafka_clients",
            "quick": quick,
            "kafka_produce_records_s": rounded(kafka_pf["records_s"], 0),
            "kafka_produce_mb_s": rounded(kafka_pf["mb_s"]),
            "kafka_consume_records_s": rounded(kafka_cf["records_s"], 0),
            "kafka_consume_mb_s": rounded(kafka_cf["mb_s"]),
            "native_produce_records_s": rounded(native_pf["records_s"], 0),
            "native_produce_mb_s": rounded(native_pf["mb_s"]),
            "native_consume_records_s": rounded(native_cf["records_s"], 0),
            "native_consume_mb_s": rounded(native_cf["mb_s"]),
            "ratio_vs_native": rounded(ratio(kafka_pf["mb_s"], native_pf["mb_s"]), 3),
            "consume_ratio_vs_native": rounded(ratio(kafka_cf["mb_s"], native_cf["mb_s"]), 3),
            "kafka_plain_produce_mb_s": rounded(plain_pf["mb_s"]),
            "plain_ratio_vs_native": rounded(ratio(plain_pf["mb_s"], native_pf["mb_s"]), 3),
            "kafka_plain_broker_cpu_us_per_batch": rounded(plain_pf["broker_cpu_us_per_batch"], 1),
            "kafka_plain_client_cpu_us_per_batch": rounded(plain_pf["client_cpu_us_per_batch"], 1),
            "kafka_plain_failed_produces": plain_p["failed"] + plain_p["unflushed"],
            "wire_kafka": wire["kafka"],
            "wire_native": wire["native"],
            "wire_ratio_vs_native": rounded(ratio(wire["kafka"]["mb_s"], wire["native"]["mb_s"]), 3),
            "wire_cpu_ratio_vs_native": rounded(
                ratio(wire["native"]["broker_cpu_us_per_batch"], wire["kafka"]["broker_cpu_us_per_batch"]), 3
            ),
            "kafka_broker_cpu_us_per_batch": rounded(kafka_pf["broker_cpu_us_per_batch"], 1),
            "native_broker_cpu_us_per_batch": rounded(native_pf["broker_cpu_us_per_batch"], 1),
            "kafka_consume_broker_cpu_us_per_batch": rounded(kafka_cf["broker_cpu_us_per_batch"], 1),
            "native_consume_broker_cpu_us_per_batch": rounded(native_cf["broker_cpu_us_per_batch"], 1),
            "kafka_client_cpu_us_per_batch": rounded(kafka_pf["client_cpu_us_per_batch"], 1),
            "native_client_cpu_us_per_batch": rounded(native_pf["client_cpu_us_per_batch"], 1),
            "kafka_consume_client_cpu_us_per_batch": rounded(kafka_cf["client_cpu_us_per_batch"], 1),
            "native_consume_client_cpu_us_per_batch": rounded(native_cf["client_cpu_us_per_batch"], 1),
            "broker_cores_busy": {
                "kafka_produce": rounded(kafka_pf["broker_cores_busy"]),
                "kafka_consume": rounded(kafka_cf["broker_cores_busy"]),
                "kafka_plain_produce": rounded(plain_pf["broker_cores_busy"]),
                "native_produce": rounded(native_pf["broker_cores_busy"]),
                "native_consume": rounded(native_cf["broker_cores_busy"]),
            },
            "kafka_acked_lost": kafka_c["acked_lost"],
            "kafka_duplicates": kafka_c["duplicates"],
            "kafka_acked_checked": kafka_c["checked"],
            "kafka_failed_produces": kafka_p["failed"] + kafka_p["unflushed"],
            "kafka_errors": kafka_p["errors"],
            "native_acked_lost": native_c["acked_lost"],
            "native_duplicates": native_c["duplicates"],
            "native_acked_checked": native_c["checked"],
            "native_failed_produces": native_p["failed"],
            "native_errors": native_p["errors"],
            "kafka_produce_requests_per_batch": rounded(
                kafka_p["produce_requests"] / (kafka_p["records"] / RECORDS_PER_BATCH) if kafka_p["records"] else None
            ),
            "kafka_batch_bytes_mean": kafka_p["batch_bytes_mean"],
            "kafka_records_per_batch_mean": kafka_p["records_per_batch_mean"],
            "kafka_profile_top": profile,
            "kafka_producer_config": {**KAFKA_PRODUCER_CONFIG, **kafka_settings(kafka_config)},
            "native_producer_config": PRODUCER_CONFIG,
            "phase_seconds": seconds,
            "partitions": PARTITIONS,
            "record_bytes": RECORD_BYTES,
            "log_dir_fs": filesystem_of(work),
            "targets": {"ratio_vs_native": 0.8, "wire_cpu_ratio_vs_native": 0.8},
            "unit": "MB = MiB of record values; a batch = 16 records",
        }
    finally:
        await stop_cluster_then_cleanup(state, reaper)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.kafka_clients",
        description="confluent-kafka on the Kafka listener beside the native client",
    )
    parser.add_argument("--quick", action="store_true", help="4 s produce phases instead of 10 s")
    parser.add_argument(
        "--profile-kafka",
        metavar="FILE",
        help="py-spy broker 1 during the Kafka produce phase; raw stacks to FILE, top self time in the result",
    )
    parser.add_argument(
        "--kafka-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a further librdkafka setting of the Kafka producer (repeatable), e.g. socket.nagle.disable=true",
    )
    parser.add_argument(
        "--child",
        choices=["kafka-produce", "kafka-consume", "native-produce", "native-consume", "wire-kafka", "wire-native"],
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--partitions", type=int, default=PARTITIONS, help=argparse.SUPPRESS)
    parser.add_argument("--produced", help=argparse.SUPPRESS)
    parser.add_argument("--targets", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args)
    profile = Path(args.profile_kafka).resolve() if args.profile_kafka else None
    if any("=" not in pair for pair in args.kafka_config):
        parser.error("--kafka-config takes KEY=VALUE")
    return main_guard(lambda reaper: run(reaper, args.quick, profile, args.kafka_config))


if __name__ == "__main__":
    sys.exit(main())
