"""Faults: a seeded schedule (or one given explicitly) and how each is applied to a `SimCluster`.

A schedule is a list of `Fault`s, each starting at `at_ms` virtual milliseconds and lasting
`duration_ms`, after which it is undone: a killed broker restarts, a paused node resumes, a cut heals, a
link or disk returns to normal. Faults may overlap. The schedule is plain JSON, so a failing run's
schedule can be printed, shrunk and replayed with `--schedule`.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from protocol.messages import AlterPartitionReassignmentsRequest, ElectLeadersRequest, ReassignablePartition
from protocol.transport import NETWORK_ERRORS
from sim.cluster import CONTROLLER_ID, SimCluster
from sim.network import LinkShape

KINDS = (
    "kill",
    "restart",
    "pause",
    "partition",
    "delay",
    "drop",
    "slow-disk",
    "reassign",
    "elect",
    "bounce",
    "controller",
)
REASSIGNER_ID = 4000  # the node an operator's ALTER_PARTITION_REASSIGNMENTS and ELECT_LEADERS come from


@dataclass(frozen=True)
class Fault:
    at_ms: int
    kind: str
    duration_ms: int
    nodes: tuple[int, ...] = ()  # the target(s); for a partition, one side of the split
    one_way: bool = False  # partition: only messages from `nodes` to the rest are lost
    amount: float = 0.0  # delay: ms; drop: probability; slow-disk: ms per request
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v not in ((), False, 0.0, {})}
        out["at_ms"], out["kind"], out["duration_ms"] = self.at_ms, self.kind, self.duration_ms
        if "nodes" in out:
            out["nodes"] = list(out["nodes"])
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Fault:
        if raw.get("kind") not in KINDS:
            raise ValueError(f"unknown fault kind {raw.get('kind')!r}; known: {', '.join(KINDS)}")
        return cls(
            int(raw["at_ms"]),
            raw["kind"],
            int(raw["duration_ms"]),
            tuple(int(n) for n in raw.get("nodes", ())),
            bool(raw.get("one_way", False)),
            float(raw.get("amount", 0.0)),
            dict(raw.get("extra", {})),
        )


def generate(
    rng: random.Random, kinds: tuple[str, ...], rate: float, duration_s: float, brokers: list[int]
) -> list[Fault]:
    """Faults arriving as a Poisson process of `rate` per second, after the load has run a moment and
    early enough to end before the load does (2 s and 3 s, or a fifth of the run for short runs)."""
    faults: list[Fault] = []
    if not kinds or rate <= 0:
        return faults
    kinds = tuple(k for k in KINDS if k in kinds)  # `kill,pause` and `pause,kill` name one schedule
    nodes = [*brokers, CONTROLLER_ID]
    t = min(2.0, duration_s / 5.0)
    end = duration_s - min(3.0, duration_s / 5.0)
    while True:
        t += rng.expovariate(rate)
        if t >= end:
            return faults
        kind = rng.choice(kinds)
        at_ms = int(t * 1000)
        duration_ms = int(rng.uniform(0.5, 6.0) * 1000)
        if kind in ("kill", "restart", "slow-disk", "bounce"):
            target: tuple[int, ...] = (rng.choice(brokers),)
        elif kind == "pause":
            target = (rng.choice(nodes),)
        elif kind == "partition":
            target = tuple(sorted(rng.sample(nodes, rng.randint(1, len(nodes) - 1))))
        elif kind == "reassign":
            # every broker in a random order: the move takes the first replication-factor of them, for the
            # partition `amount` (a fraction) picks among the sorted partitions
            target = tuple(rng.sample(brokers, len(brokers)))
        elif kind in ("elect", "controller"):
            target = ()  # every partition, through the controller; the controller active at the time
        else:
            target = tuple(rng.sample(nodes, 2))
        amount = 0.0
        if kind == "delay":
            amount = round(rng.uniform(5.0, 300.0), 1)
        elif kind == "drop":
            amount = round(rng.uniform(0.05, 0.6), 2)
        elif kind == "slow-disk":
            amount = round(rng.uniform(10.0, 300.0), 1)
        elif kind == "reassign":
            amount = round(rng.random(), 3)
        elif kind == "bounce":
            amount = round(rng.uniform(50.0, 1000.0), 1)
        elif kind == "controller":
            amount = round(rng.random(), 3)  # below 0.5 a kill, else a pause
        one_way = kind == "partition" and rng.random() < 0.3
        faults.append(Fault(at_ms, kind, duration_ms, target, one_way, amount))


class FaultInjector:
    def __init__(self, cluster: SimCluster, on_change: Any) -> None:
        self.cluster = cluster
        self.on_change = on_change  # called after every change: the checker runs
        self.injected: dict[str, int] = {}

    async def run(self, schedule: list[Fault]) -> None:
        tasks = [asyncio.ensure_future(self._one(f)) for f in schedule]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    async def _one(self, fault: Fault) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, fault.at_ms / 1000.0 - loop.time()))
        undo = await self._apply(fault)
        if undo is None:
            return
        self.injected[fault.kind] = self.injected.get(fault.kind, 0) + 1
        self.on_change()
        await asyncio.sleep(fault.duration_ms / 1000.0)
        await undo()
        self.on_change()

    async def _apply(self, fault: Fault) -> Any:
        c, net, trace = self.cluster, self.cluster.network, self.cluster.trace
        details = fault.to_json()
        if fault.kind == "kill":
            (broker,) = fault.nodes
            if broker not in c.brokers:
                return None
            trace.event(broker, "fault", **details)
            await c.kill_broker(broker)

            async def restart() -> None:
                if broker not in c.brokers:
                    await c.restart_broker(broker)

            return restart
        if fault.kind == "bounce":
            return self._bounce(fault, details)
        if fault.kind == "controller":
            return await self._controller(fault, details)
        if fault.kind == "reassign":
            return await self._reassign(fault, details)
        if fault.kind == "elect":
            return await self._elect(details)
        if fault.kind == "restart":
            (broker,) = fault.nodes
            if broker not in c.brokers:
                return None
            trace.event(broker, "fault", **details)
            await c.stop_broker(broker)
            return restart_clean(c, broker)
        if fault.kind == "pause":
            (node,) = fault.nodes
            if net.is_paused(node):
                return None
            trace.event(node, "fault", **details)
            net.pause(node)

            async def resume() -> None:
                net.resume(node)
                trace.event(node, "resume")

            return resume
        if fault.kind == "partition":
            side = set(fault.nodes)
            rest = [n for n in [*c.broker_ids, *c.controller_ids] if n not in side]
            links = [(a, b) for a in sorted(side) for b in rest]
            if not fault.one_way:
                links += [(b, a) for a, b in links]
            trace.event("net", "fault", **details)
            for a, b in links:
                net.cut(a, b)

            async def heal() -> None:
                for a, b in links:
                    net.uncut(a, b)
                trace.event("net", "heal", nodes=list(fault.nodes))

            return heal
        if fault.kind in ("delay", "drop"):
            a, b = fault.nodes
            trace.event("net", "fault", **details)
            previous = net.shapes.get((a, b))
            base = previous or net.base
            if fault.kind == "delay":
                shape = LinkShape(fault.amount, fault.amount / 3.0, base.drop)
            else:
                shape = LinkShape(base.delay_ms, base.jitter_ms, fault.amount)
            net.shapes[(a, b)] = net.shapes[(b, a)] = shape

            async def restore() -> None:
                for link in ((a, b), (b, a)):
                    net.shapes.pop(link, None)
                trace.event("net", "restore", nodes=[a, b])

            return restore
        if fault.kind == "slow-disk":
            (broker,) = fault.nodes
            trace.event(broker, "fault", **details)
            net.node(broker).slow_ms = fault.amount

            async def fast() -> None:
                net.node(broker).slow_ms = 0.0
                trace.event(broker, "disk-normal")

            return fast
        raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _bounce(self, fault: Fault, details: dict[str, Any]) -> Any:
        """What the broker sends the other brokers (its followers' FETCHes) takes `amount` ms for the fault's
        length; then it crashes and its supervisor starts it again at once, with links as before. Its last
        requests are still on the way when the new incarnation registers and fetches: KIP-903's late fetch,
        which random kills (down 0.5-6 s) and delays (at most 400 ms) never brought about."""
        c, net = self.cluster, self.cluster.network
        (broker,) = fault.nodes
        if broker not in c.brokers:
            return None
        c.trace.event(broker, "fault", **details)
        links = [(broker, other) for other in c.broker_ids if other != broker]
        before = {link: net.shapes.get(link) for link in links}
        for link in links:
            net.shapes[link] = LinkShape(fault.amount, fault.amount / 10.0, net.shape(*link).drop)

        async def crash_and_restart() -> None:
            for link, shape in before.items():
                if shape is None:
                    net.shapes.pop(link, None)
                else:
                    net.shapes[link] = shape
            if broker in c.brokers:
                await c.kill_broker(broker)
                await c.restart_broker(broker)

        return crash_and_restart

    async def _controller(self, fault: Fault, details: dict[str, Any]) -> Any:
        """The active controller, whichever it is when the fault starts, is killed (SIGKILL, `amount` below
        0.5; started again at the fault's end) or paused (SIGSTOP; resumed): the quorum elects another, which
        the brokers, the operator's requests and the leaders' ALTER_PARTITIONs then follow."""
        c, net = self.cluster, self.cluster.network
        active = c.active_controller_id()
        if active is None or net.is_paused(active):
            return None
        c.trace.event(active, "fault", **{**details, "nodes": [active]})
        if fault.amount < 0.5:
            await c.kill_controller(active)

            async def restart() -> None:
                if active not in c.controllers:
                    await c.start_controller(active)

            return restart
        net.pause(active)

        async def resume() -> None:
            net.resume(active)
            c.trace.event(active, "resume")

        return resume

    async def _reassign(self, fault: Fault, details: dict[str, Any]) -> Any:
        """An operator moves one partition to other brokers (KIP-455) through the controller, as
        `minibroker topic reassign` does; the move completes (or not) while the other faults go on."""
        c = self.cluster
        if c.controller is None:
            return None
        partitions = sorted(c.controller.controller.image.partitions.values(), key=lambda p: p.topic_partition)
        if not partitions:
            return None
        partition = partitions[min(int(fault.amount * len(partitions)), len(partitions) - 1)]
        target = list(fault.nodes[: len(partition.target_replicas)])
        c.trace.event(REASSIGNER_ID, "fault", **details, tp=str(partition.topic_partition), target=target)
        request = AlterPartitionReassignmentsRequest(
            [ReassignablePartition(partition.topic, partition.partition, target)]
        )
        try:
            await c.send_to_controller(REASSIGNER_ID, request)
        except NETWORK_ERRORS:
            return None  # the controller was unreachable: nothing moved

        async def nothing() -> None:
            return None

        return nothing

    async def _elect(self, details: dict[str, Any]) -> Any:
        """An operator runs a preferred leader election for every partition (ELECT_LEADERS), as
        `minibroker topic elect-leaders --all-topic-partitions` does: leaderships that kills and restarts
        moved go back to preferred replicas that are in the ISR, while the load and the other faults go on."""
        c = self.cluster
        if c.controller is None:
            return None
        c.trace.event(REASSIGNER_ID, "fault", **details)
        try:
            await c.send_to_controller(REASSIGNER_ID, ElectLeadersRequest())
        except NETWORK_ERRORS:
            return None  # the controller was unreachable: nothing moved

        async def nothing() -> None:
            return None

        return nothing


def restart_clean(cluster: SimCluster, broker: int) -> Any:
    async def start() -> None:
        if broker not in cluster.brokers:
            await cluster.restart_broker(broker)

    return start
