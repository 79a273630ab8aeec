"""`minibroker chaos run`: kills, pauses, partitions, slow and lossy links under acks=all load, with a verdict.

How this works
--------------
The load and the oracle are leader-kill's (cluster/chaos.py): producers write unique values with acks=all
to a topic with RF 3 and min.insync.replicas=2, a consumer watches offsets, and after the run every acked
value must be on every replica, once, at the offset it was acked at, replicas byte-identical.

Each round injects one fault, kinds taken in turn from `--faults`, into the broker that leads the most
partitions (the controller's view; ties by `--seed`). A broker is a process of a local cluster, or a
container of a compose project (`--compose`), acted on through a `Nodes` (cluster/chaos_nodes.py): the
kinds below say what is done to a process; a container gets `docker kill`, `docker pause`/`unpause` and
`docker start`. Network faults need an address per node, which a compose project's brokers do not have
(they share one network namespace), so they are refused there.

* `kill`: SIGKILL, wait until its partitions have new leaders, restart it;
* `kill-restart`: SIGKILL and restart at once (back before the controller may have noticed);
* `pause`: SIGSTOP until the controller has moved its leaderships, then SIGCONT. While it sleeps a probe
  sends it acks=all writes (they wait in its socket); woken, the zombie must refuse them (its epoch is
  fenced), and whatever it did acknowledge is held to the oracle like every acked write;
* `partition[:SHAPE]`: iptables DROP between sets of nodes (cluster/network_faults.py), SHAPE one of
  isolate-leader, leader-from-followers, leader-from-controller, isolate-controller, one-way (the
  leader's packets to its followers only); without SHAPE one is drawn each round;
* `delay` / `loss`: the links between the leader and its followers, both ways, get 50 ms ± 20 ms
  (tc netem) or lose 5% of their packets (iptables statistic);
* `clients-see-old-leader`: the leader is cut from every other node while a producer keeps writing to it
  with acks=1 (clients are not cut: they reach it from 127.0.0.1). It acknowledges what it alone has,
  the controller elects another leader, and on healing the old one truncates those writes away. They
  are reported as lost and classified as expected under acks=1: the classic lesson, not a violation.

The controller faults (`kill-controller`, `pause-controller`, `partition:isolate-active-controller`,
`partition:active-controller-from-voters`) hit the active controller, the quorum's leader, instead of a
broker, under the same load; cluster/chaos_quorum.py says what each does and how the time without an
active controller is measured. Their rounds report it beside each partition's time without a leader
(the brokers keep serving theirs) and the acks=all stall; the report totals it over the run.

A round holds its fault `--fault-ms` (and at least until the controller has elected new leaders, for
the faults that take the leader away), heals it, and waits until every ISR is full again. A monitor asks
the controller for METADATA every 50 ms; from its samples and the acks come, per fault: the window, per
partition the time without a usable leader (none, or the faulted broker), the longest time no acks=all
write was acknowledged on its partitions, the truncations logged, and the new leaders.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from client.cluster_client import ClusterClient
from client.producer import NOT_WRITTEN
from cluster.chaos import CHAOS_OVERRIDES, ChaosRun, Copies, _ms, render_report, start_fresh_cluster
from cluster.chaos_nodes import Nodes
from cluster.chaos_quorum import (
    CONTROLLER_KINDS,
    CONTROLLER_SHAPES,
    QuorumWatch,
    controller_pairs,
    describe_outage,
    is_controller_fault,
    summarize,
)
from cluster.local_cluster import (
    LocalClusterState,
    node_alive,
    node_pid,
    restart_node,
    signal_process,
    stop_cluster,
)
from cluster.network_faults import NetworkFaults
from metrics.fields import FAULTS_FILE
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import MetadataRequest, ProducePartition, ProduceRequest, TopicPartition
from protocol.record_batch import build_batch, iter_records
from server_common.poll import wait_until
from server_common.time import SYSTEM_TIME

FAULT_KINDS = (
    "kill",
    "kill-restart",
    "pause",
    "partition",
    "delay",
    "loss",
    "clients-see-old-leader",
    *CONTROLLER_KINDS,
)
# The shapes a bare `partition` draws from (the broker shapes, as before the controller ones existed, so a
# seed draws what it drew then); the controller shapes are named.
PARTITION_SHAPES = (
    "isolate-leader",
    "leader-from-followers",
    "leader-from-controller",
    "isolate-controller",
    "one-way",
)
NETWORK_KINDS = {"partition", "delay", "loss", "clients-see-old-leader"}
# faults after which the faulted broker is no leader worth the name until the controller moves on
TAKES_LEADER_AWAY = {"kill", "kill-restart", "pause", "clients-see-old-leader"}
SHAPES_TAKING_LEADER_AWAY = {"isolate-leader", "leader-from-controller"}
DELAY_MS, JITTER_MS, LOSS_PERCENT = 50, 20, 5.0
SAMPLE_S = 0.05

Sample = tuple[float, dict[TopicPartition, tuple[int, int, list[int]]]]


def parse_faults(text: str) -> list[tuple[str, str | None]]:
    """`kill,partition:one-way,delay` -> [(kind, shape or None)]; ValueError names what is wrong."""
    out: list[tuple[str, str | None]] = []
    for item in (x.strip() for x in text.split(",")):
        kind, _, shape = item.partition(":")
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}")
        if shape and (kind != "partition" or shape not in (*PARTITION_SHAPES, *CONTROLLER_SHAPES)):
            raise ValueError(
                f"unknown partition shape {shape!r}; known: {', '.join((*PARTITION_SHAPES, *CONTROLLER_SHAPES))}"
            )
        out.append((kind, shape or None))
    if not out:
        raise ValueError("--faults names no fault")
    return out


@dataclass
class FaultReport:
    round: int
    kind: str
    shape: str | None
    target: int
    how: str = ""
    led_partitions: int = 0
    window_start_ms: int = 0
    window_end_ms: int = 0
    healed_after_ms: float = 0.0
    isr_full_after_heal_ms: float | None = None
    no_leader_ms: dict[str, float] = field(default_factory=dict)
    acks_all_failed_ms: float | None = None
    truncations: int = 0
    new_leaders: dict[str, int] = field(default_factory=dict)
    acks1: dict[str, Any] | None = None
    zombie: dict[str, Any] | None = None
    controller: dict[str, Any] | None = None  # a controller fault's ControllerOutage (cluster/chaos_quorum.py)


def mark_fault_window(metrics_dir: str, fault: str, target: int, start_ms: int, end_ms: int) -> None:
    """Append a fault's window to the metrics dir, where the dashboard shades it on the lag charts."""
    if not metrics_dir:
        return
    line = json.dumps({"fault": fault, "target": target, "start_ms": start_ms, "end_ms": end_ms})
    with contextlib.suppress(OSError), open(Path(metrics_dir) / FAULTS_FILE, "a") as out:
        out.write(line + "\n")


class FaultRun(ChaosRun):
    def __init__(
        self,
        state: LocalClusterState,
        args: argparse.Namespace,
        progress: Any,
        net: NetworkFaults | None,
        nodes: Nodes | None = None,
    ) -> None:
        super().__init__(state, args, progress, nodes)
        self.net = net
        self.faults = parse_faults(args.faults)
        self.fault_rng = random.Random(args.seed)
        self.reports: list[FaultReport] = []
        self.samples: list[Sample] = []
        self.acks1_acked: dict[str, tuple[TopicPartition, int]] = {}
        self.acks1_found: set[str] = set()
        self._monitor: asyncio.Task[None] | None = None

    # -- the controller's view ----------------------------------------------------------------------

    async def _controller_view(self, conn: BrokerConnection) -> dict[TopicPartition, tuple[int, int, list[int]]]:
        resp = await conn.send(MetadataRequest([self.args.topic]), timeout_s=2.0)
        return {
            TopicPartition(t.topic, p.partition): (p.leader_id, p.leader_epoch, list(p.isr))
            for t in resp.topics
            for p in t.partitions
        }

    async def monitor(self) -> None:
        """Sample the controllers' committed view of the topic; when one stops answering, ask the next."""
        conn: BrokerConnection | None = None
        turn = 0
        while True:
            try:
                if conn is None or not conn.is_open:
                    c = self.state.controllers[turn % len(self.state.controllers)]
                    turn += 1
                    conn = await BrokerConnection.connect(c.host, c.port, "chaos-monitor", timeout_s=1.0)
                self.samples.append((time.monotonic(), await self._controller_view(conn)))
            except (TimeoutError, ConnectionError, OSError):
                conn = None
            await asyncio.sleep(SAMPLE_S)

    def _view(self) -> dict[TopicPartition, tuple[int, int, list[int]]]:
        return self.samples[-1][1] if self.samples else {}

    async def _until(self, predicate: Any, timeout_s: float) -> bool:
        """Whether the monitor's latest view satisfies `predicate` within `timeout_s` (looked at per sample)."""
        return await wait_until(lambda: predicate(self._view()), timeout_s, clock=SYSTEM_TIME, interval_s=SAMPLE_S)

    def _moved_away(self, led: list[TopicPartition], victim: int) -> Any:
        return lambda view: all(tp in view and view[tp][0] not in (-1, victim) for tp in led)

    def _isr_full(self, view: dict[TopicPartition, tuple[int, int, list[int]]]) -> bool:
        return bool(view) and all(leader >= 0 and len(isr) == 3 for leader, _, isr in view.values())

    # -- one round ----------------------------------------------------------------------------------

    def _pick_victim(self) -> tuple[int, list[TopicPartition]]:
        view = self._view()
        counts: dict[int, int] = defaultdict(int)
        for leader, _, _ in view.values():
            if leader >= 0:
                counts[leader] += 1
        alive = {b.node_id for b in self.state.brokers if self.nodes.alive(b.node_id)}
        candidates = sorted(b for b in counts if b in alive)
        if not candidates:
            raise RuntimeError("no live leader to inject a fault into")
        most = max(counts[b] for b in candidates)
        victim = self.fault_rng.choice([b for b in candidates if counts[b] == most])
        return victim, sorted((tp for tp, (leader, _, _) in view.items() if leader == victim), key=str)

    def _pairs(self, shape: str, victim: int) -> list[tuple[str, str]]:
        """The (source, destination) pairs to drop for a partition shape around the leader `victim`."""
        leader = self.state.broker(victim).host
        followers = [b.host for b in self.state.brokers if b.node_id != victim]
        controllers = [c.host for c in self.state.controllers]
        if shape == "one-way":
            return [(leader, f) for f in followers]
        if shape == "isolate-leader":
            others = [*followers, *controllers]
        elif shape == "leader-from-followers":
            others = followers
        elif shape == "leader-from-controller":
            others = controllers
        elif shape == "isolate-controller":
            pairs = []
            for controller in controllers:  # the whole quorum cut from the brokers: none can be active for them
                pairs += [(controller, b.host) for b in self.state.brokers] + [
                    (b.host, controller) for b in self.state.brokers
                ]
            return pairs
        else:
            raise ValueError(shape)
        return [(leader, o) for o in others] + [(o, leader) for o in others]

    def _log_marks(self) -> dict[int, Any]:
        return {b.node_id: self.nodes.log_mark(b.node_id) for b in self.state.brokers}

    def _truncations_since(self, marks: dict[int, Any]) -> int:
        return sum(self.nodes.truncations_since(b, mark, self.args.topic) for b, mark in marks.items())

    async def fault_round(self, round_no: int, kind: str, shape: str | None) -> FaultReport:
        if is_controller_fault(kind, shape):
            return await self.controller_round(round_no, kind, shape)
        if kind == "partition" and shape is None:
            shape = self.fault_rng.choice(PARTITION_SHAPES)
        victim, led = self._pick_victim()
        report = FaultReport(round_no, kind, shape, victim, led_partitions=len(led))
        offsets = self._log_marks()
        start = time.monotonic()
        report.window_start_ms = int(time.time() * 1000)
        name = kind + (f":{shape}" if shape else "")
        self.progress(f"round {round_no}/{self.args.rounds}: {name} {_where(shape, victim)} (leader of {len(led)})")
        hold_s = self.args.fault_ms / 1000.0
        side_task: asyncio.Task[dict[str, Any]] | None = None
        info = self.state.broker(victim)
        takes_leader_away = kind in TAKES_LEADER_AWAY or shape in SHAPES_TAKING_LEADER_AWAY
        try:
            if kind in ("kill", "kill-restart"):
                report.how = self.nodes.kill(victim)
                if kind == "kill":
                    await self._until(self._moved_away(led, victim), 30.0)
            elif kind == "pause":
                report.how = self.nodes.pause(victim)
                side_task = asyncio.create_task(self._zombie_probe(victim, led))
                await self._until(self._moved_away(led, victim), 30.0)
                await asyncio.sleep(0.3)  # the probe's writes are in the zombie's socket by now
            else:
                assert self.net is not None
                if kind == "partition":
                    assert shape is not None
                    pairs = self.net.cut(self._pairs(shape, victim))
                    report.how = "iptables DROP " + ", ".join(f"{a}->{b}" for a, b in pairs)
                elif kind == "clients-see-old-leader":
                    pairs = self.net.cut(self._pairs("isolate-leader", victim))
                    report.how = "iptables DROP " + ", ".join(f"{a}->{b}" for a, b in pairs) + "; acks=1 writes to it"
                    side_task = asyncio.create_task(self._old_leader_writer(victim, led, round_no))
                else:
                    leader = info.host
                    links = [(leader, b.host) for b in self.state.brokers if b.node_id != victim]
                    links += [(b, a) for a, b in links]
                    if kind == "delay":
                        report.how = self.net.delay(links, DELAY_MS, JITTER_MS)
                    else:
                        report.how = self.net.loss(links, LOSS_PERCENT)
                    report.how += " on " + ", ".join(f"{a}->{b}" for a, b in links)
                await asyncio.sleep(hold_s)
                if takes_leader_away:
                    await self._until(self._moved_away(led, victim), 30.0)
        finally:
            # heal, whatever happened above
            if kind == "pause":
                self.nodes.resume(victim)
            elif kind in ("kill", "kill-restart") and not self.nodes.alive(victim):
                await self.nodes.restart(victim)
            elif self.net is not None and kind in NETWORK_KINDS:
                self.net.heal()
            healed = time.monotonic()
        report.healed_after_ms = round((healed - start) * 1000.0, 1)
        if side_task is not None:
            side = await side_task
            if kind == "pause":
                report.zombie = side
            else:
                report.acks1 = side
        if await self._until(self._isr_full, 60.0):
            report.isr_full_after_heal_ms = round((time.monotonic() - healed) * 1000.0, 1)
        end = time.monotonic()
        report.window_end_ms = int(time.time() * 1000)
        self._mark_window(name, victim, report)
        view = self._view()
        report.new_leaders = {str(tp): view[tp][0] for tp in led if tp in view}
        report.no_leader_ms = self._no_leader_ms(led, victim if takes_leader_away else None, start, healed, end)
        report.acks_all_failed_ms = self._acks_failed_ms(led, start, end)
        report.truncations = self._truncations_since(offsets)
        self.progress(
            f"  healed after {report.healed_after_ms} ms; ISR full {report.isr_full_after_heal_ms} ms later; "
            f"no leader max {max(report.no_leader_ms.values(), default=0.0)} ms; acks=all stalled "
            f"{report.acks_all_failed_ms} ms; truncations {report.truncations}"
        )
        return report

    async def controller_round(self, round_no: int, kind: str, shape: str | None) -> FaultReport:
        """One fault on the active controller (cluster/chaos_quorum.py), the quorum watched all along."""
        watch = QuorumWatch(self.state.controllers)
        watch.start()
        try:
            return await self._controller_round(watch, round_no, kind, shape)
        finally:
            await watch.stop()

    async def _controller_round(self, watch: QuorumWatch, round_no: int, kind: str, shape: str | None) -> FaultReport:
        old = await watch.active(30.0)
        if old is None:
            raise RuntimeError("no active controller to inject a fault into")
        info = self.state.controller(old.voter)
        partitions = sorted(self._view(), key=str)  # the brokers' leaderships: they should all stay
        report = FaultReport(round_no, kind, shape, old.voter)
        offsets = self._log_marks()
        name = kind + (f":{shape}" if shape else "")
        self.progress(
            f"round {round_no}/{self.args.rounds}: {name} on controller {old.voter} (the active controller, "
            f"epoch {old.epoch})"
        )
        pid = node_pid(info)
        start = time.monotonic()
        report.window_start_ms = int(time.time() * 1000)
        healed: float | None = None
        try:
            if kind == "kill-controller":
                signal_process(pid, signal.SIGKILL)
                report.how = f"SIGKILL pid {pid}, restarted once another voter led"
                await watch.until(lambda: watch.back(old, start, None) is not None, 30.0)
            elif kind == "pause-controller":
                signal_process(pid, signal.SIGSTOP)
                report.how = f"SIGSTOP pid {pid} for {self.args.fault_ms} ms, then SIGCONT"
                await asyncio.sleep(self.args.fault_ms / 1000.0)
            else:
                assert self.net is not None and shape is not None
                pairs = self.net.cut(controller_pairs(self.state, old.voter, shape))
                report.how = "iptables DROP " + ", ".join(f"{a}->{b}" for a, b in pairs)
                await asyncio.sleep(self.args.fault_ms / 1000.0)
                # Held until another voter leads and the cut-off one has stopped answering as leader.
                await watch.until(
                    lambda: watch.back(old, start, None) is not None and watch.resigned(old, start) is not None, 30.0
                )
        finally:
            if kind == "pause-controller":
                signal_process(pid, signal.SIGCONT)
            elif kind == "kill-controller" and not node_alive(info):
                await restart_node(self.state, info)
            elif self.net is not None and kind == "partition":
                self.net.heal()
            healed = time.monotonic()
        report.healed_after_ms = round((healed - start) * 1000.0, 1)
        # The aftermath: an active controller, every voter caught up with it, every ISR full.
        await watch.until(lambda: watch.back(old, start, healed) is not None, 30.0)
        await watch.until(lambda: watch.quorum_whole(healed) is not None, 30.0)
        if await self._until(self._isr_full, 60.0):
            report.isr_full_after_heal_ms = round((time.monotonic() - healed) * 1000.0, 1)
        end = time.monotonic()
        report.window_end_ms = int(time.time() * 1000)
        self._mark_window(name, old.voter, report)
        outage = watch.outage(old, start, healed, reachable=kind != "kill-controller")
        report.controller = asdict(outage)
        report.no_leader_ms = self._no_leader_ms(partitions, None, start, healed, end)
        report.acks_all_failed_ms = self._acks_failed_ms(partitions, start, end)
        report.truncations = self._truncations_since(offsets)
        self.progress(f"  healed after {report.healed_after_ms} ms; {describe_outage(report.controller)}")
        return report

    def _no_leader_ms(
        self, led: list[TopicPartition], victim: int | None, start: float, healed: float, end: float
    ) -> dict[str, float]:
        """Per partition it led: sampled time with no leader, or (while the fault lasted) the faulted one."""
        out: dict[str, float] = {}
        window = [(t, v) for t, v in self.samples if start <= t <= end]
        for tp in led:
            total = 0.0
            for (t, v), (t_next, _) in zip(window, window[1:], strict=False):
                leader = v.get(tp, (-1, 0, []))[0]
                if leader == -1 or (victim is not None and leader == victim and t < healed):
                    total += t_next - t
            out[str(tp)] = round(total * 1000.0, 1)
        return out

    def _acks_failed_ms(self, led: list[TopicPartition], start: float, end: float) -> float | None:
        """The longest stretch in the window with no acks=all write acknowledged on one of those partitions."""
        if not led:
            return None
        worst = 0.0
        for tp in led:
            times = sorted(t for t, p, _ in self.outcomes.ack_events if p == tp and start <= t <= end)
            points = [start, *times, end]
            worst = max(worst, max(b - a for a, b in zip(points, points[1:], strict=False)))
        return round(worst * 1000.0, 1)

    # -- writes aimed at one broker -----------------------------------------------------------------

    async def _produce_direct(
        self, conn: BrokerConnection, tp: TopicPartition, values: list[bytes], acks: int
    ) -> tuple[str, int, str]:
        """('acked' | 'failed' | 'indeterminate', base offset, error name) of one batch sent to that broker."""
        request = ProduceRequest(acks, 5000, [ProducePartition(tp.topic, tp.partition, build_batch(values))])
        try:
            resp = await conn.send(request, timeout_s=15.0)
        except (TimeoutError, ConnectionError, OSError) as exc:
            return "indeterminate", -1, type(exc).__name__
        p = resp.partitions[0] if resp.partitions else None
        code = ErrorCode(resp.error_code or (p.error_code if p else -1))
        if code == ErrorCode.NONE and p is not None:
            return "acked", p.base_offset, code.name
        return ("failed" if code in NOT_WRITTEN else "indeterminate"), -1, code.name

    async def _zombie_probe(self, victim: int, led: list[TopicPartition]) -> dict[str, Any]:
        """acks=all writes sent to the paused leader once it has been replaced: none may be acknowledged,
        unless the oracle later finds it (it cannot: its epoch is fenced)."""
        info = self.state.broker(victim)
        result: dict[str, Any] = {"sent": 0, "acked": 0, "refused": 0, "indeterminate": 0, "errors": {}}
        if not led or not await self._until(self._moved_away(led, victim), 30.0):
            return result
        try:
            conn = await BrokerConnection.connect(info.host, info.port, "chaos-zombie-probe", timeout_s=2.0)
        except (TimeoutError, OSError):
            return result
        try:
            n = len(self.reports) + 1
            batches = [(tp, [f"z{n}-{i}".encode()]) for i, tp in enumerate(led[:5])]
            outcomes = await asyncio.gather(*(self._produce_direct(conn, tp, v, -1) for tp, v in batches))
        finally:
            await conn.close()
        for (tp, values), (outcome, base, error) in zip(batches, outcomes, strict=True):
            key = values[0].decode()
            result["sent"] += 1
            result["errors"][error] = result["errors"].get(error, 0) + 1
            if outcome == "acked":
                result["acked"] += 1
                self.outcomes.acked[key] = (tp, base)  # the oracle holds the zombie to it
            elif outcome == "failed":
                result["refused"] += 1
                self.outcomes.failed.add(key)
            else:
                result["indeterminate"] += 1
                self.outcomes.indeterminate.add(key)
        return result

    async def _old_leader_writer(self, victim: int, led: list[TopicPartition], round_no: int) -> dict[str, Any]:
        """acks=1 writes to the isolated leader until the fault heals (cancelled by the caller's heal)."""
        info = self.state.broker(victim)
        acked: dict[str, tuple[TopicPartition, int]] = {}
        seq = 0
        conn: BrokerConnection | None = None
        deadline = time.monotonic() + self.args.fault_ms / 1000.0
        try:
            while led and time.monotonic() < deadline:
                if conn is None or not conn.is_open:
                    conn = await BrokerConnection.connect(info.host, info.port, "chaos-old-leader", timeout_s=2.0)
                tp = led[seq % len(led)]
                values = [f"o{round_no}-{seq}".encode()]
                seq += 1
                outcome, base, _ = await self._produce_direct(conn, tp, values, 1)
                if outcome == "acked":
                    acked[values[0].decode()] = (tp, base)
                await asyncio.sleep(0.01)
        except (TimeoutError, OSError):
            pass
        finally:
            if conn is not None:
                await conn.close()
        self.acks1_acked.update(acked)
        return {"sent": seq, "acked": len(acked), "keys": sorted(acked)}

    # -- the whole run --------------------------------------------------------------------------------

    def _mark_window(self, name: str, victim: int, report: FaultReport) -> None:
        mark_fault_window(self.state.metrics_dir, name, victim, report.window_start_ms, report.window_end_ms)

    WARMUP_S = 0.5
    COOLDOWN_S = 0.0  # each round ends with its ISRs full and --interval-ms of load

    async def start_watching(self) -> None:
        self._monitor = asyncio.create_task(self.monitor(), name="monitor")

    async def stop_watching(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
            await asyncio.gather(self._monitor, return_exceptions=True)

    async def before_load(self) -> None:
        await self._until(self._isr_full, 30.0)

    async def play_round(self, round_no: int, admin: ClusterClient) -> None:
        kind, shape = self.faults[(round_no - 1) % len(self.faults)]
        self.reports.append(await self.fault_round(round_no, kind, shape))
        await asyncio.sleep(self.args.interval_ms / 1000.0)

    def inspect_copies(self, copies: Copies, leaders: dict[TopicPartition, int]) -> None:
        """The acks=1 writes to an old leader (values `o...`) that survived, on the leader's copy."""
        for tp, replicas in copies.items():
            for r in iter_records(replicas[leaders[tp]]):
                if r.value is not None and r.value.startswith(b"o"):
                    self.acks1_found.add(r.value.decode())

    def report(self, converged: bool, problems: dict[str, Any], load_s: float) -> dict[str, Any]:
        """leader-kill's report, with each fault's and the acks=1 writes' instead of the kills'."""
        report = super().report(converged, problems, load_s)
        lost1 = sorted(k for k in self.acks1_acked if k not in self.acks1_found)
        for f in self.reports:
            if f.acks1 is not None:
                keys = f.acks1.pop("keys")
                f.acks1["lost"] = sum(1 for k in keys if k in lost1)
                f.acks1["expected"] = True
        zombie_acked = sum(f.zombie["acked"] for f in self.reports if f.zombie)
        outages = [f.controller for f in self.reports if f.controller is not None]
        if outages:
            report["controller_faults"] = summarize(outages)
        report.update(
            {
                "faults": [asdict(f) for f in self.reports],
                "rounds": len(self.reports),
                "acks1": {
                    "acked": len(self.acks1_acked),
                    "lost": len(lost1),
                    "classified": "expected: acks=1 acknowledges what the leader alone has",
                    "examples": lost1[:5],
                },
                "zombie_acked": zombie_acked,
            }
        )
        return report


def _where(shape: str | None, broker_id: int) -> str:
    return f"on the controller, broker {broker_id}" if shape == "isolate-controller" else f"on broker {broker_id}"


def _round_line(f: dict[str, Any]) -> str:
    name = f["kind"] + (f":{f['shape']}" if f["shape"] else "")
    no_leader = max(f["no_leader_ms"].values(), default=0.0)
    if f.get("controller") is not None:
        return (
            f"  round {f['round']}: {name} on controller {f['target']} (active, epoch {f['controller']['old_epoch']}): "
            f"healed after {f['healed_after_ms']} ms, ISR full {f['isr_full_after_heal_ms']} ms later; "
            f"{describe_outage(f['controller'])}; partitions without a leader max {no_leader} ms; acks=all "
            f"stalled {f['acks_all_failed_ms']} ms; truncations {f['truncations']}"
        )
    return (
        f"  round {f['round']}: {name} {_where(f['shape'], f['target'])} (led {f['led_partitions']}): "
        f"healed after {f['healed_after_ms']} ms, ISR full {f['isr_full_after_heal_ms']} ms later; "
        f"no leader max {no_leader} ms; acks=all stalled {f['acks_all_failed_ms']} ms; "
        f"truncations {f['truncations']}"
    )


def render_fault_report(report: dict[str, Any]) -> str:
    # leader-kill's failover figures go: a fault need not move a leader, so each round says its own below
    lines = [line.split("  failover ms")[0] for line in render_report({**report, "kills": []}).splitlines()]
    for f in report["faults"]:
        line = _round_line(f)
        if f["zombie"]:
            z = f["zombie"]
            line += f"; zombie got {z['sent']} writes, acked {z['acked']} ({z['errors']})"
        if f["acks1"]:
            a = f["acks1"]
            line += f"; acks=1 to the old leader: {a['acked']} acked, {a['lost']} lost (expected)"
        lines.append(line)
    a = report["acks1"]
    if a["acked"]:
        lines.append(f"acks=1 writes acknowledged then lost: {a['lost']} of {a['acked']} ({a['classified']})")
    if "controller_faults" in report:
        c = report["controller_faults"]
        t = c["no_active_controller_ms"]
        unresolved = f"; {c['unresolved']} without an active controller when the round ended" if c["unresolved"] else ""
        lines.append(
            f"time without an active controller over {c['faults']} controller faults: total {t['total']} ms, "
            f"p50 {_ms(t['p50'])}, p99 {_ms(t['p99'])}, max {_ms(t['max'])}; leader changed {c['leader_changes']} "
            f"times{unresolved}"
        )
    return "\n".join(lines)


async def run_faults(
    args: argparse.Namespace,
    state: LocalClusterState | None,
    fresh_dir: Path | None,
    progress: Any,
    net: NetworkFaults | None,
    nodes: Nodes | None = None,
) -> dict[str, Any]:
    """Against `state` (a local cluster, or a compose project's with its `nodes`), or a fresh cluster."""
    if state is None:
        assert fresh_dir is not None
        state = await start_fresh_cluster(fresh_dir, dict(CHAOS_OVERRIDES), progress)
        try:
            return await FaultRun(state, args, progress, net).run()
        finally:
            stop_cluster(state, timeout_s=10.0)
    return await FaultRun(state, args, progress, net, nodes).run()


def resume_all(cluster_dir: Path) -> None:
    """SIGCONT every node of the cluster: no fault of ours outlives the run (a paused node included)."""
    with contextlib.suppress(Exception):
        state = LocalClusterState.load(cluster_dir)
        for node in state.nodes:
            if node_alive(node):
                signal_process(node_pid(node), signal.SIGCONT)
