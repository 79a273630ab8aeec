"""Leader-kill chaos with a verdict: SIGKILL leaders under acks=all load, then check every acked write.

How this works
--------------
1. A cluster: the local one in `--dir`, the containers of a compose project (`--compose`; the brokers
   are killed and started through the Docker CLI, cluster/chaos_nodes.py), or a fresh 3-broker cluster
   in a temporary dir (heartbeats every 250 ms, session timeout 1000 ms) that is stopped afterwards. A
   topic with RF 3 and `min.insync.replicas=2`.
2. Load: `--producers` tasks write unique values (`p<producer>-<seq>`) with acks=all through
   `client.producer.Producer` (batch.size, linger.ms, one PRODUCE per broker), round robin over
   partitions; a batch is resent only when the broker answered that it was not written. Each value ends as
   * acked: the leader answered NONE, so it must be in the final log at `base_offset + i`;
   * failed: the broker said it was *not* written (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, ...);
   * indeterminate: a timeout, REQUEST_TIMED_OUT or a broken connection — it may or may not be there.
   A consumer reads every partition the whole time and counts offsets going backwards (nonmonotonic).
3. Rounds: every `--interval-ms` the broker leading the most partitions (ties broken by `--seed`) is
   killed with SIGKILL; we record the new leaders and epochs, the time without a leader, the time to the
   first acked write on a new leader (failover), and with `--restart` the broker is restarted and we
   wait for its ISRs to fill again, noting how many of its partitions it truncated.
4. Verdict: load stops, every broker is brought back, replicas converge (all in ISR, equal LEO = HW),
   and the oracle checks:
   lost-write (acked, missing), duplicate (one value at two offsets), inconsistent-offsets (acked at X,
   found at Y; or two values at one offset across replicas), divergence (replicas not byte-identical
   below the HW), nonmonotonic (a consumer saw an offset go backwards). Valid iff all are zero.

"Acked" is what a broker acknowledged, by its own journal, whenever the brokers keep one (every fresh
chaos cluster, and `cluster up --ack-journal`): cluster/chaos_verdict.py holds the cluster to the batches
journalled and reports apart, as the client's, what the client claimed delivered that no broker
acknowledged. Such claims do not make the run invalid; they exit 5 (EXIT_CLIENT_CLAIMS) instead of 0, so
a script sees a client bug without mistaking it for the cluster's. Without journals (a `--dir` cluster
started without them) the client's reports are the only evidence, and are held to as acknowledgements.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from broker.produce_ack_journal import AckedBatch, journal_size, read_journal
from client.cluster_client import ClusterClient, ClusterUnavailableError
from client.consumer import Consumer, read_replica
from client.producer import NOT_WRITTEN, DeliveryCallback, Producer
from cluster.chaos_clients import KafkaClientLoad
from cluster.chaos_nodes import ComposeNodes, LocalNodes, Nodes
from cluster.chaos_verdict import Claims, Verdict, classify
from cluster.exit_codes import EXIT_CHECK_FAILED, EXIT_CLIENT_CLAIMS, EXIT_OK
from cluster.local_cluster import (
    LocalClusterState,
    free_ports,
    random_base_address,
    start_cluster,
    stop_cluster,
)
from protocol.errors import ErrorCode
from protocol.messages import DescribeLogDirsRequest, TopicPartition
from protocol.record_batch import iter_records
from server_common.poll import wait_until
from server_common.time import SYSTEM_TIME

Copies = dict[TopicPartition, dict[int, bytes]]  # per partition, each replica's bytes below its HW
NOT_WRITTEN_NAMES = {code.name for code in NOT_WRITTEN}
# What a check of the cluster may meet while a broker is down or a link is cut: the check says "not yet".
NETWORK_ERRORS = (ClusterUnavailableError, ConnectionError, OSError, asyncio.TimeoutError)
# Each chaos producer keeps this many records unanswered at most, and retries a batch the broker did not
# write this many times (Producer's backoff: about 0.75 s in all) before reporting it failed.
MAX_OUTSTANDING_RECORDS = 16
PRODUCER_RETRIES = 5
# An idempotent producer may resend whatever it has not seen acknowledged, so it keeps trying through a
# failover and a restart (about 27 s of backoff, as Kafka's delivery.timeout.ms bounds its retries): an
# indeterminate write is then one still unresolved when the run ends.
IDEMPOTENT_PRODUCER_RETRIES = 60

CHAOS_OVERRIDES = {
    "broker.session.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "250",
    "replica.fetch.backoff.ms": "100",
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.wait.max.ms": "200",
    # The consumer group of --client runs: a small __consumer_offsets, and a group that forms at once.
    "offsets.topic.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "200",
}


@dataclass
class KillReport:
    round: int
    broker_id: int
    pid: int
    led_partitions: int
    killed_at_ms: int
    new_leaders: dict[str, int] = field(default_factory=dict)
    new_epochs: dict[str, int] = field(default_factory=dict)
    time_without_leader_ms: float | None = None
    failover_ms: float | None = None
    restarted: bool = False
    isr_full_after_ms: float | None = None
    follower_truncations: int = 0


@dataclass
class Outcomes:
    acked: dict[str, tuple[TopicPartition, int]] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    indeterminate: set[str] = field(default_factory=set)
    ack_latencies_ms: list[float] = field(default_factory=list)
    # (time, partition, broker that acked) for failover measurement
    ack_events: list[tuple[float, TopicPartition, int]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    resent_indeterminate: int = 0  # idempotent producers: batches resent after an indeterminate answer
    epoch_bumps: int = 0


def _through_network_errors(check: Callable[[], Awaitable[bool]]) -> Callable[[], Awaitable[bool]]:
    """`check`, answering False instead of raising one of NETWORK_ERRORS (polled again later)."""

    async def checked() -> bool:
        try:
            return await check()
        except NETWORK_ERRORS:
            return False

    return checked


def _left_s(since: float, timeout_s: float) -> float:
    """What is left of `timeout_s` counted from the monotonic time `since`."""
    return timeout_s - (time.monotonic() - since)


def _isr_full(leaders: dict[TopicPartition, tuple[int, int, list[int]]]) -> bool:
    return all(len(isr) == 3 for _, _, isr in leaders.values())


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100.0 * (len(ordered) - 1))))]


class ChaosRun:
    def __init__(
        self, state: LocalClusterState, args: argparse.Namespace, progress: Any, nodes: Nodes | None = None
    ) -> None:
        self.state = state
        # How a broker is killed, paused and started: its process, or its container (cluster/chaos_nodes.py).
        self.nodes = nodes if nodes is not None else LocalNodes(state)
        self.args = args
        self.progress = progress
        self.rng = random.Random(args.seed)
        self.outcomes = Outcomes()
        self.kills: list[KillReport] = []
        self.stop_load = asyncio.Event()
        self.consumer_nonmonotonic = 0
        self.started = time.monotonic()
        # Tasks a load starts beside its producers (a client's poller), cancelled when the run ends.
        self.background: list[asyncio.Task[None]] = []
        # With --client confluent-kafka, kafka-python, aiokafka or kafkajs, the load goes through that client
        # on the Kafka listeners.
        self.kafka_load = KafkaClientLoad(self) if getattr(args, "client", "minibroker") != "minibroker" else None
        # Each broker's produce.ack.journal and its size when the run began: the run's evidence is what follows.
        # None when a broker keeps none (then the clients' reports are all there is).
        self.journals: dict[int, tuple[Path, int]] | None = None
        self.verdict: Verdict | None = None

    # -- helpers ------------------------------------------------------------------------------------

    def _client(self, name: str) -> ClusterClient:
        return ClusterClient(self.state.bootstrap, client_id=name, request_timeout_s=10.0, secret=self.state.secret)

    async def _leaders(self, client: ClusterClient) -> dict[TopicPartition, tuple[int, int, list[int]]]:
        await client.refresh_metadata([self.args.topic])
        return {
            tp: (i.leader_id, i.leader_epoch, i.isr)
            for tp, i in client.partitions.items()
            if tp.topic == self.args.topic
        }

    # -- load -----------------------------------------------------------------------------------------

    async def producer(self, index: int, partitions: list[TopicPartition]) -> None:
        """One `client.producer.Producer` (acks=all, Kafka's batch.size and linger.ms) writing unique values
        round robin over the partitions, with at most `MAX_OUTSTANDING_RECORDS` unanswered at a time so the
        load stays a steady trickle instead of filling buffer.memory. With `--client`, that Kafka client
        writes them instead (cluster/chaos_clients.py)."""
        if self.kafka_load is not None:
            await self.kafka_load.producer(index, partitions)
            return
        client = self._client(f"chaos-producer-{index}")
        idempotence = False if getattr(self.args, "no_idempotence", False) else None
        producer = Producer(
            client,
            acks=-1,
            request_timeout_ms=5000,
            retries=PRODUCER_RETRIES if idempotence is False else IDEMPOTENT_PRODUCER_RETRIES,
            enable_idempotence=idempotence,
        )
        outstanding = 0
        room = asyncio.Event()
        room.set()
        seq = 0
        order = partitions[index % len(partitions) :] + partitions[: index % len(partitions)]

        def delivered(tp: TopicPartition, key: str, t0: float) -> DeliveryCallback:
            def callback(offset: int, error: str | None) -> None:
                nonlocal outstanding
                outstanding -= 1
                if outstanding < MAX_OUTSTANDING_RECORDS:
                    room.set()
                self._record_outcome(client, tp, key, t0, offset, error)

            return callback

        try:
            await client.refresh_metadata([self.args.topic])
            while not self.stop_load.is_set():
                for tp in order:
                    if self.stop_load.is_set():
                        break
                    for _ in range(self.rng.randint(1, 5)):
                        key = f"p{index}-{seq}"
                        seq += 1
                        outstanding += 1
                        await producer.send(tp, key.encode(), callback=delivered(tp, key, time.monotonic()))
                    if outstanding >= MAX_OUTSTANDING_RECORDS:
                        room.clear()
                        await room.wait()
        finally:
            try:
                await producer.close()
            finally:
                self.outcomes.resent_indeterminate += producer.resent_indeterminate
                self.outcomes.epoch_bumps += producer.epoch_bumps
                await client.close()

    def _record_outcome(
        self, client: ClusterClient, tp: TopicPartition, key: str, t0: float, offset: int, error: str | None
    ) -> None:
        """Sort one record's answer into acked, failed (the broker said not written, every attempt) or
        indeterminate (a timeout or broken connection: it may be there)."""
        if error is None:
            now = time.monotonic()
            info = client.partitions.get(tp)
            self.outcomes.acked[key] = (tp, offset)
            self.outcomes.ack_latencies_ms.append((now - t0) * 1000.0)
            # The leader the producer's metadata names now: the one a retried batch was last sent to.
            self.outcomes.ack_events.append((now, tp, info.leader_id if info else -1))
            return
        kind = error.split(":", 1)[0].split(" ", 1)[0]
        self.outcomes.errors[kind] += 1
        not_written = kind in NOT_WRITTEN_NAMES or "(gave up after" in error
        if not_written and not error.startswith("indeterminate"):
            self.outcomes.failed.add(key)
        else:
            self.outcomes.indeterminate.add(key)

    async def consumer(self, partitions: list[TopicPartition]) -> None:
        client = self._client("chaos-consumer")
        try:
            await client.refresh_metadata([self.args.topic])
            consumer = Consumer(client, partitions)
            await consumer.seek_all(earliest=True)
            while not self.stop_load.is_set():
                try:
                    await consumer.poll()
                except (TimeoutError, ClusterUnavailableError, ConnectionError, OSError):
                    await asyncio.sleep(0.05)
                    with contextlib.suppress(Exception):
                        await client.refresh_metadata([self.args.topic])
                self.consumer_nonmonotonic = consumer.nonmonotonic
        finally:
            await client.close()

    # -- kills ----------------------------------------------------------------------------------------

    async def kill_round(self, round_no: int, client: ClusterClient) -> KillReport:
        leaders = await self._leaders(client)
        counts: dict[int, int] = defaultdict(int)
        for leader, _, _ in leaders.values():
            if leader >= 0:
                counts[leader] += 1
        alive = {b.node_id for b in self.state.brokers if self.nodes.alive(b.node_id)}
        candidates = [b for b in counts if b in alive]
        if not candidates:
            raise RuntimeError("no live leader to kill")
        most = max(counts[b] for b in candidates)
        victim = self.rng.choice(sorted(b for b in candidates if counts[b] == most))
        pid = self.nodes.pid(victim)
        led = [tp for tp, (leader, _, _) in leaders.items() if leader == victim]
        killed_at = time.monotonic()
        how = self.nodes.kill(victim)
        report = KillReport(round_no, victim, pid, len(led), int(time.time() * 1000))
        self.progress(f"round {round_no}/{self.args.rounds}: {how} (broker {victim}), leader of {len(led)} partitions")

        # Wait for every partition it led to get a new leader.
        async def led_elsewhere() -> bool:
            now_leaders = await self._leaders(client)
            if not all(now_leaders[tp][0] not in (-1, victim) for tp in led):
                return False
            report.time_without_leader_ms = round((time.monotonic() - killed_at) * 1000.0, 1)
            report.new_leaders = {str(tp): now_leaders[tp][0] for tp in led}
            report.new_epochs = {str(tp): now_leaders[tp][1] for tp in led}
            return True

        await wait_until(
            _through_network_errors(led_elsewhere), _left_s(killed_at, 30.0), clock=SYSTEM_TIME, interval_s=0.02
        )

        # Failover: first acked write on a new leader for one of its partitions.
        def acked_elsewhere() -> bool:
            for t, tp, broker in self.outcomes.ack_events:
                if t > killed_at and tp in led and broker != victim:
                    report.failover_ms = round((t - killed_at) * 1000.0, 1)
                    return True
            return False

        await wait_until(acked_elsewhere, _left_s(killed_at, 30.0), clock=SYSTEM_TIME, interval_s=0.01)
        self.progress(
            f"  new leaders after {report.time_without_leader_ms} ms: "
            + ", ".join(f"{k}->{v}@{report.new_epochs[k]}" for k, v in report.new_leaders.items())
            + (f"; first acked write on a new leader after {report.failover_ms} ms" if report.failover_ms else "")
        )
        if self.args.restart:
            # --down-ms: leave it down that long after the kill (while the load goes on) before restarting
            down_s = getattr(self.args, "down_ms", 0) / 1000.0 - (time.monotonic() - killed_at)
            if down_s > 0:
                self.progress(f"  leaving broker {victim} down {down_s:.1f} s more")
                await asyncio.sleep(down_s)
            await self._restart(report)
        return report

    async def _restart(self, report: KillReport) -> None:
        log_mark = self.nodes.log_mark(report.broker_id)
        restarted_at = time.monotonic()
        await self.nodes.restart(report.broker_id)
        report.restarted = True
        client = self._client("chaos-isr")

        async def isr_full() -> bool:
            return _isr_full(await self._leaders(client))

        try:
            if await wait_until(_through_network_errors(isr_full), _left_s(restarted_at, 60.0), clock=SYSTEM_TIME):
                report.isr_full_after_ms = round((time.monotonic() - restarted_at) * 1000.0, 1)
        finally:
            await client.close()
        report.follower_truncations = self.nodes.truncations_since(report.broker_id, log_mark, self.args.topic)
        self.progress(
            f"  broker {report.broker_id} restarted; ISRs full again after {report.isr_full_after_ms} ms; "
            f"{report.follower_truncations} truncation{'' if report.follower_truncations == 1 else 's'}"
        )

    # -- convergence and the oracle ----------------------------------------------------------------

    async def converge(self, timeout_s: float = 60.0) -> bool:
        for b in self.state.brokers:
            if not self.nodes.alive(b.node_id):
                self.progress(f"restarting broker {b.node_id} for the final check")
                await self.nodes.restart(b.node_id)
        client = self._client("chaos-verify")

        async def converged() -> bool:
            if not _isr_full(await self._leaders(client)):
                return False
            ends = await self._replica_ends(client)
            return bool(ends) and all(len(set(v)) == 1 for v in ends.values())

        try:
            return await wait_until(_through_network_errors(converged), timeout_s, clock=SYSTEM_TIME, interval_s=0.1)
        finally:
            await client.close()

    async def _high_watermarks(self) -> dict[TopicPartition, int]:
        client = self._client("chaos-ends")
        try:
            return {tp: max(hw for _, hw in ends) for tp, ends in (await self._replica_ends(client)).items()}
        finally:
            await client.close()

    async def _replica_ends(self, client: ClusterClient) -> dict[TopicPartition, list[tuple[int, int]]]:
        ends: dict[TopicPartition, list[tuple[int, int]]] = defaultdict(list)
        for b in self.state.brokers:
            conn = await client.connection(b.host, b.port)
            resp = await conn.send(DescribeLogDirsRequest([self.args.topic]), timeout_s=5.0)
            for r in resp.replicas:
                ends[TopicPartition(r.topic, r.partition)].append((r.log_end_offset, r.high_watermark))
        return ends

    async def read_replica(self, client: ClusterClient, broker_id: int, tp: TopicPartition) -> bytes:
        info = self.state.broker(broker_id)
        return await read_replica(await client.connection(info.host, info.port), tp)

    def mark_journals(self) -> None:
        """Note where each broker's journal ends now: what this run's brokers acknowledge follows."""
        paths = {b.node_id: self.nodes.ack_journal(b.node_id) for b in self.state.brokers}
        if all(paths.values()):
            self.journals = {node: (path, journal_size(path)) for node, path in paths.items() if path is not None}

    def journalled(self) -> list[AckedBatch]:
        """Every batch of the run's topic a broker journalled as acknowledged since `mark_journals`."""
        assert self.journals is not None
        return [
            batch
            for node, (path, start) in sorted(self.journals.items())
            for batch in read_journal(path, node, start, topic=self.args.topic)
        ]

    @property
    def acknowledged(self) -> Claims:
        """The records the cluster must keep: those a broker journalled, or without journals the client's word."""
        return self.verdict.acknowledged if self.verdict is not None else self.outcomes.acked

    async def verify(self) -> dict[str, Any]:
        client = self._client("chaos-verify")
        try:
            await client.refresh_metadata([self.args.topic])
            copies: Copies = {}
            leaders: dict[TopicPartition, int] = {}
            for tp in client.partitions_of(self.args.topic):
                info = client.partitions[tp]
                leaders[tp] = info.leader_id
                copies[tp] = {b: await self.read_replica(client, b, tp) for b in info.replicas}
        finally:
            await client.close()
        self.inspect_copies(copies, leaders)
        if self.journals is None:
            return find_problems(self.outcomes.acked, copies, leaders)
        # minibroker's own producer never sends one value as two records: any duplicate is then the cluster's.
        self.verdict = classify(
            self.outcomes.acked, self.journalled(), copies, leaders, client_resends=self.kafka_load is not None
        )
        problems = find_problems(self.verdict.acknowledged, copies, leaders)
        problems["lost"] = self.verdict.lost
        problems["duplicates"] = self.verdict.duplicated
        return problems

    def inspect_copies(self, copies: Copies, leaders: dict[TopicPartition, int]) -> None:
        """Hook: a look at every replica's bytes before the oracle's (a fault run finds its acks=1 writes)."""

    # -- the whole run --------------------------------------------------------------------------------
    # run() is the same for every experiment; the hooks below are what one experiment does differently.

    WARMUP_S = 1.0  # load before the first round
    COOLDOWN_S = 1.0  # load after the last round

    async def run(self) -> dict[str, Any]:
        args = self.args
        admin = self._client("chaos-admin")
        await self.start_watching()
        try:
            resp = await admin.create_topic(args.topic, args.partitions, 3, {"min.insync.replicas": "2"})
            code = resp.topics[0].error_code if resp.topics else resp.error_code
            if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise RuntimeError(
                    f"cannot create topic {args.topic}: "
                    f"{resp.topics[0].error_message if resp.topics else resp.error_message}"
                )
            await admin.wait_for_leaders(args.topic)
            partitions = admin.partitions_of(args.topic)
            await self.before_load()
            self.mark_journals()
            load_start = time.monotonic()
            tasks = [
                asyncio.create_task(self.producer(i, partitions), name=f"producer-{i}") for i in range(args.producers)
            ]
            tasks.append(asyncio.create_task(self.consumer(partitions), name="consumer"))
            group = (
                asyncio.create_task(self.kafka_load.group(partitions), name="group")
                if self.kafka_load is not None
                else None
            )
            try:
                await asyncio.sleep(self.WARMUP_S)
                for round_no in range(1, args.rounds + 1):
                    await self.play_round(round_no, admin)
                await asyncio.sleep(self.COOLDOWN_S)
            finally:
                self.stop_load.set()
                await asyncio.gather(*tasks, return_exceptions=True)
            load_s = time.monotonic() - load_start
        finally:
            await self.stop_watching()
            await admin.close()
            for task in self.background:
                task.cancel()
        self.progress("load stopped; waiting for replicas to converge")
        converged = await self.converge()
        if self.kafka_load is not None and group is not None:
            self.progress("letting the consumer group read to the end of the topic")
            await self.kafka_load.drain(await self._high_watermarks())
            await asyncio.gather(group, return_exceptions=True)
        self.progress("checking every acked write on every replica")
        problems = await self.verify()
        return self.report(converged, problems, load_s)

    async def start_watching(self) -> None:
        """Hook: start what watches the cluster for the whole run (stopped by `stop_watching`)."""

    async def stop_watching(self) -> None:
        """Hook: stop what `start_watching` started, whatever happened."""

    async def before_load(self) -> None:
        """Hook: once the topic has leaders, before the load starts."""

    async def play_round(self, round_no: int, admin: ClusterClient) -> None:
        """One round under load: leader-kill waits `--interval-ms`, then kills the busiest leader."""
        await asyncio.sleep(self.args.interval_ms / 1000.0)
        self.kills.append(await self.kill_round(round_no, admin))
        self.progress(
            f"  load so far: {len(self.outcomes.acked)} acked, {len(self.outcomes.failed)} failed, "
            f"{len(self.outcomes.indeterminate)} indeterminate"
        )

    def report(self, converged: bool, problems: dict[str, Any], load_s: float) -> dict[str, Any]:
        o = self.outcomes
        client_problems = self.kafka_load.problems(self.acknowledged) if self.kafka_load is not None else []
        valid = converged and not any(problems.values()) and self.consumer_nonmonotonic == 0 and not client_problems
        failovers = [k.failover_ms for k in self.kills if k.failover_ms is not None]
        extra: dict[str, Any] = {}
        if self.kafka_load is not None:
            extra["client"] = self.kafka_load.report(self.acknowledged)
            extra["client"]["first_report_after_kill_ms"] = [
                self.kafka_load.after(k.killed_at_ms / 1000.0) for k in self.kills
            ]
            extra["client_problems"] = client_problems
        return extra | {
            "valid": valid,
            "rounds": len(self.kills),
            "acked": len(o.acked),
            "failed": len(o.failed),
            "indeterminate": len(o.indeterminate),
            "idempotent": not getattr(self.args, "no_idempotence", False),
            "resent_indeterminate_batches": o.resent_indeterminate,
            "producer_epoch_bumps": o.epoch_bumps,
            "lost_writes": self.verdict.lost_records if self.verdict is not None else len(problems["lost"]),
            "duplicates": len(problems["duplicates"]),
            "client_false_claims": (
                len(self.verdict.unacknowledged) + len(self.verdict.misplaced) if self.verdict is not None else None
            ),
            "acknowledgements": self.verdict.report() if self.verdict is not None else NO_JOURNAL,
            "inconsistent_offsets": len(problems["inconsistent"]),
            "divergent_replicas": len(problems["divergent"]),
            "nonmonotonic": self.consumer_nonmonotonic,
            "converged": converged,
            "kills": [asdict(k) for k in self.kills],
            "throughput_records_s": round(len(o.acked) / load_s, 1) if load_s > 0 else 0.0,
            "ack_latency_ms": {
                "p50": _percentile(o.ack_latencies_ms, 50),
                "p99": _percentile(o.ack_latencies_ms, 99),
                "max": max(o.ack_latencies_ms) if o.ack_latencies_ms else None,
            },
            "failover_ms": {"p50": _percentile(failovers, 50), "p99": _percentile(failovers, 99)},
            "errors": dict(o.errors),
            "examples": {k: v[:5] for k, v in problems.items()},
        }


NO_JOURNAL = {
    "evidence": "the client's delivery reports: the brokers keep no produce.ack.journal (start the cluster with "
    "`cluster up --ack-journal` to tell what the cluster lost from what a client only claimed)"
}


def find_problems(
    acked: dict[str, tuple[TopicPartition, int]],
    copies: dict[TopicPartition, dict[int, bytes]],
    leaders: dict[TopicPartition, int],
) -> dict[str, list[dict[str, Any]]]:
    """The oracle. `copies` holds every replica's bytes below its HW after convergence.

    * divergent: a replica whose bytes differ from the leader's;
    * inconsistent: two different values at one offset on two replicas, or an acked value found at
      another offset than the one it was acked at;
    * duplicates: one value at two offsets (a producer never resends a value that may have been written);
    * lost: an acked value found nowhere.
    """
    lost: list[dict[str, Any]] = []
    duplicates: list[dict[str, Any]] = []
    inconsistent: list[dict[str, Any]] = []
    divergent: list[dict[str, Any]] = []
    found: dict[str, list[tuple[TopicPartition, int]]] = defaultdict(list)
    for tp, replicas in copies.items():
        reference = replicas[leaders[tp]]
        by_offset_ref = {r.offset: r.value for r in iter_records(reference)}
        for broker, blob in replicas.items():
            if blob == reference:
                continue
            divergent.append(
                {"partition": str(tp), "broker": broker, "bytes": len(blob), "leader_bytes": len(reference)}
            )
            for r in iter_records(blob):
                if r.offset in by_offset_ref and by_offset_ref[r.offset] != r.value:
                    inconsistent.append(
                        {"partition": str(tp), "offset": r.offset, "broker": broker, "kind": "two values at one offset"}
                    )
        for offset, value in by_offset_ref.items():
            if value is not None:
                found[value.decode()].append((tp, offset))
    for key, (tp, offset) in acked.items():
        where = found.get(key)
        if not where:
            lost.append({"value": key, "partition": str(tp), "offset": offset})
        elif (tp, offset) not in where:
            inconsistent.append(
                {"value": key, "acked_at": [str(tp), offset], "found_at": [[str(t), o] for t, o in where]}
            )
    for key, where in found.items():
        if len(where) > 1:
            duplicates.append({"value": key, "found_at": [[str(t), o] for t, o in where]})
    return {"lost": lost, "duplicates": duplicates, "inconsistent": inconsistent, "divergent": divergent}


def _ms(value: Any) -> str:
    """Latencies for people: one decimal, "–" when there is none (the JSON report keeps full precision
    and null)."""
    if value is None:
        return "–"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def render_report(report: dict[str, Any]) -> str:
    lines = [
        f"verdict: {'VALID' if report['valid'] else 'INVALID'}",
        f"rounds {report['rounds']}  acked {report['acked']}  failed {report['failed']}  "
        f"indeterminate {report['indeterminate']}"
        f"  throughput {report['throughput_records_s']} records/s",
        (
            f"idempotent producers: {report['resent_indeterminate_batches']} indeterminate batches resent, "
            f"{report['producer_epoch_bumps']} epoch bumps"
            if report.get("idempotent")
            else "producers without idempotence: indeterminate writes are never resent"
        ),
        f"ack latency ms: p50 {_ms(report['ack_latency_ms']['p50'])}  p99 {_ms(report['ack_latency_ms']['p99'])}"
        f"  failover ms: p50 {_ms(report['failover_ms']['p50'])}  p99 {_ms(report['failover_ms']['p99'])}",
        f"lost writes {report['lost_writes']}  duplicates {report['duplicates']}  inconsistent offsets "
        f"{report['inconsistent_offsets']}  divergent replicas {report['divergent_replicas']}  "
        f"nonmonotonic {report['nonmonotonic']}",
    ]
    for k in report["kills"]:
        lines.append(
            f"  kill {k['round']}: broker {k['broker_id']} (led {k['led_partitions']}) -> leaders {k['new_leaders']} "
            f"epochs {k['new_epochs']}; no leader for {_ms(k['time_without_leader_ms'])} ms; "
            f"failover {_ms(k['failover_ms'])} ms"
            + (
                f"; ISR full after {_ms(k['isr_full_after_ms'])} ms; truncations {k['follower_truncations']}"
                if k["restarted"]
                else ""
            )
        )
    if not report["converged"]:
        lines.append("replicas did not converge within the time limit")
    lines += render_acknowledgements(report.get("acknowledgements"))
    if "client" in report:
        lines += render_client(report["client"], report["client_problems"])
    return "\n".join(lines)


def render_acknowledgements(ack: dict[str, Any] | None) -> list[str]:
    """What brokers acknowledged, what the cluster lost of it, and what the client claimed beyond it
    (cluster/chaos_verdict.py), each with its partitions and offsets."""
    if not ack:
        return []
    if "cluster" not in ack:
        return [f"evidence: {ack['evidence']}"]
    cluster, client = ack["cluster"], ack["client"]
    lines = [
        f"acknowledged by brokers (produce.ack.journal): {ack['broker_acknowledged_records']} records in "
        f"{ack['broker_acknowledged_batches']} batches; the cluster lost {cluster['lost_records']} of them "
        f"({cluster['lost_batches']} batches) and duplicated {cluster['duplicated_records']}"
    ]
    for b in cluster["lost"][:20]:
        lines.append(
            f"  lost: {b['partition']} offsets {b['offsets'][0]}-{b['offsets'][1]} (producer {b['producer_id']} "
            f"epoch {b['producer_epoch']} base sequence {b['base_sequence']}), acknowledged by broker "
            f"{', '.join(map(str, b['acknowledged_by']))} at leader epoch {b['leader_epoch']}; "
            f"{b['in_the_log_there']} there now"
        )
    for d in cluster["duplicated"]:
        lines.append(f"  duplicated: {d['value']} at {d['found_at']}")
    if client["unacknowledged_claims"] or client["misplaced_claims"]:
        lines.append(
            f"the client's, not the cluster's (exit 5 when the cluster's verdict is valid): "
            f"{client['unacknowledged_claims']} records reported delivered that no broker acknowledged, "
            f"{client['misplaced_claims']} reported at another offset than a broker acknowledged"
        )
        for partition, claims in client["unacknowledged_by_partition"].items():
            low, high = claims["offsets"]
            if high < 0:
                where = "the client gave no offset"
            elif low < 0:
                where = f"offsets up to {high}, some given none"
            else:
                where = f"offsets {low}..{high}"
            lines.append(f"  not acknowledged: {partition}: {claims['claims']} records, {where}")
        for m in client["misplaced"]:
            lines.append(
                f"  misplaced: {m['value']} claimed at {m['claimed_at']}, acknowledged at {m['acknowledged_at']}"
            )
    if client.get("acknowledged_not_claimed"):
        lines.append(
            f"records a broker acknowledged that the client reported failed or never reported: "
            f"{client['acknowledged_not_claimed']}"
        )
    if client["resent_records"]:
        lines.append(
            f"records the client sent again as new records (in the log twice under different producer "
            f"identities; the client's at-least-once, not the cluster's): {client['resent_records']}"
        )
    return lines


def render_client(client: dict[str, Any], problems: list[str]) -> list[str]:
    """What the real client saw, and its consumer group's checks (cluster/chaos_clients.py)."""
    group = client["group"]
    after = ", ".join(_ms(ms) for ms in client["first_report_after_kill_ms"]) or "-"
    return [
        f"client {client['client']}: longest stall {_ms(client['longest_stall_ms'])} ms; first delivery after "
        f"each kill (ms): {after}; stats {client['client_stats']}; errors surfaced {client['errors_surfaced']}",
        f"consumer group of {group['members']}: read {group['records_read']} records (re-read "
        f"{group['group_reread']}), acked and never read {group['acked_not_read']}, committed offsets that "
        f"went backwards {len(group['commit_regressions'])}, read to the end {group['read_to_the_end']}",
        *[f"client check failed: {problem}" for problem in problems],
    ]


def finish_report(report: dict[str, Any], json_target: str | None, rendered: str) -> int:
    """The end of every chaos command: the JSON report to --json (a file, or '-' for stdout, the summary then
    going to stderr), the summary, and the exit code: 1 when the cluster's verdict is invalid, else 5 when the
    client claimed records no broker acknowledged (the client's bug, not the cluster's), else 0."""
    text = json.dumps(report, indent=2, default=str)
    if json_target == "-":
        print(text)
    elif json_target:
        Path(json_target).write_text(text + "\n")
    print(rendered, file=sys.stderr if json_target == "-" else sys.stdout)
    if not report["valid"]:
        return EXIT_CHECK_FAILED
    return EXIT_CLIENT_CLAIMS if report.get("client_false_claims") else EXIT_OK


async def start_fresh_cluster(directory: Path, overrides: dict[str, str], progress: Any) -> LocalClusterState:
    """The 3-broker cluster a chaos command starts when it is given no --dir: free ports, a random
    127.x address block, the chaos overrides, each broker journalling what it acknowledges."""
    ports = free_ports(7)
    progress(f"starting a fresh 3-broker cluster in {directory}")
    return await start_cluster(
        directory,
        3,
        controller_port=ports[3],
        overrides=overrides,
        progress=progress,
        broker_ports=ports[:3],
        kafka_ports=ports[4:],
        base_address=random_base_address(),
        ack_journal=True,
    )


async def run_leader_kill(args: argparse.Namespace, progress: Any, nodes: ComposeNodes | None = None) -> dict[str, Any]:
    """Against `nodes` (a compose project), the local cluster in `args.dir`, or a fresh one."""
    fresh_dir: tempfile.TemporaryDirectory[str] | None = None
    if nodes is not None:
        return await ChaosRun(nodes.state(), args, progress, nodes).run()
    if args.dir:
        state = LocalClusterState.load(Path(args.dir))
    else:
        fresh_dir = tempfile.TemporaryDirectory(prefix="minibroker-chaos-")
        overrides = dict(CHAOS_OVERRIDES)
        if args.metrics_dir:
            overrides["metrics.dir"] = str(Path(args.metrics_dir).resolve())
        state = await start_fresh_cluster(Path(fresh_dir.name), overrides, progress)
    try:
        return await ChaosRun(state, args, progress).run()
    finally:
        if fresh_dir is not None:
            stop_cluster(state, timeout_s=10.0)
            fresh_dir.cleanup()
