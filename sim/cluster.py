"""A cluster in one process: the real `ControllerNode`s (the metadata quorum's voters) and `BrokerNode`s on a
`SimNetwork` and `SimDisk`s.

Node ids: the controllers are 3000, 3001, ... (`SimOptions.controllers` of them), brokers are 1..N,
producers 1001.., consumers 2001... Each node's directory lives under the run's root; a kill discards the
node object (its in-memory state is gone), optionally drops what its disk never flushed, and a restart
builds a new node from the same directory, which recovers it as after a SIGKILL.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.broker_node import BrokerNode
from broker.config import BROKER_CONFIG, CONTROLLER_CONFIG
from broker.controller_channel import ControllerChannel
from controller.controller_node import ControllerNode
from server_common.time import Time
from sim.disk import SimDisk
from sim.loop import LoopTime
from sim.network import SimNetwork, SimTransport
from sim.observe import RunObserver
from sim.trace import Trace

log = logging.getLogger(__name__)

CONTROLLER_ID = 3000  # the first controller's id; controller i is CONTROLLER_ID + i

# inter.broker.protocol.version for each legacy switch (Kafka's IBP gates for the same behaviour).
TRUNCATION_IBP = {"fetch": "3.0", "epoch": "2.6", "hw": "0.10.2"}
EPOCH_REPLY_IBP = {"kip279": "2.6", "kip101": "1.1"}


@dataclass
class SimOptions:
    brokers: int = 3
    topics: int = 1
    partitions: int = 6
    replication_factor: int = 3
    min_insync_replicas: int = 2
    acks: int = -1
    producers: int = 2
    rate: float = 50.0  # PRODUCE requests per virtual second, per producer
    record_bytes: int = 64
    consumers: int = 1
    duration_s: float = 30.0
    faults: tuple[str, ...] = ()
    fault_rate: float = 0.3  # faults per virtual second
    crash_loses_unflushed: bool = False
    # "fetch": the leader answers a divergence in FETCH (Kafka 2.7+); "epoch": a separate OffsetsForLeaderEpoch
    # round when a follower starts following (KIP-101/279); "hw": truncate to the HW (before KIP-101)
    truncation: str = "fetch"
    epoch_reply: str = "kip279"  # "kip101": OffsetsForLeaderEpoch answers without an epoch (before KIP-279)
    unclean_leader_election: bool = False
    idempotence: bool = False  # producers resend writes left in doubt (KIP-98)
    controllers: int = 3  # voters of the metadata quorum
    broker_overrides: dict[str, Any] = field(default_factory=dict)

    def inter_broker_protocol_version(self) -> str:
        if self.truncation == "hw":
            return TRUNCATION_IBP["hw"]
        if self.epoch_reply == "kip101":
            return EPOCH_REPLY_IBP["kip101"]  # KIP-101 as first shipped predates truncation on fetch
        return TRUNCATION_IBP[self.truncation]


class PausableTime(LoopTime):
    """A node's clock: a paused node's sleepers wake only once it resumes (SIGSTOP freezes its timers)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, resumed: asyncio.Event) -> None:
        super().__init__(loop)
        self._resumed = resumed

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if not self._resumed.is_set():
            await self._resumed.wait()


class SimCluster:
    def __init__(self, root: Path, options: SimOptions, rng: random.Random, trace: Trace) -> None:
        self.root = root
        self.options = options
        self.rng = rng
        self.trace = trace
        loop = asyncio.get_running_loop()
        self.time: Time = LoopTime(loop)
        self.network = SimNetwork(random.Random(rng.getrandbits(64)))
        self.controllers: dict[int, ControllerNode] = {}
        self.controller_disks = {c: SimDisk() for c in self.controller_ids}
        self._committed_offset = -1  # the last metadata offset the checker has heard of
        self.brokers: dict[int, BrokerNode] = {}
        self.disks = {b: SimDisk() for b in self.broker_ids}
        self.restarts = {b: 0 for b in self.broker_ids}
        self.power_lost: dict[int, int] = {}  # broker -> bytes lost at its last crash
        #: Every node's replication events, for this run's trace and checker (sim/observe.py).
        self.observer = RunObserver(trace)
        self.on_crash: Callable[[int, bool], None] = lambda broker_id, lost_unflushed: None
        #: Each metadata record the quorum commits, once, with the image after its batch (the checker listens).
        self.on_metadata: Callable[[Any, Any], None] = lambda record, image: None

    @property
    def broker_ids(self) -> list[int]:
        return list(range(1, self.options.brokers + 1))

    def broker_dir(self, broker_id: int) -> Path:
        return self.root / f"broker-{broker_id}"

    def live_brokers(self) -> dict[int, BrokerNode]:
        return dict(self.brokers)

    # -- controllers -------------------------------------------------------------------------------

    @property
    def controller_ids(self) -> list[int]:
        return [CONTROLLER_ID + i for i in range(self.options.controllers)]

    @property
    def quorum_voters(self) -> str:
        return ",".join(f"{c}@sim:{c}" for c in self.controller_ids)

    @property
    def controller(self) -> ControllerNode | None:
        """The active controller, else the live controller whose image is the most up to date (what an
        election would see next), else None. Of two that think themselves active, the one of the later
        epoch: the other is a paused leader that has not yet heard of its successor, its image stale (the
        checker judged ISRs by such an image: simulator seed 116 of the controller sweep)."""
        live = [self.controllers[c] for c in sorted(self.controllers)]
        active = [node for node in live if node.active]
        if active:
            return max(active, key=lambda n: n.raft.epoch)
        return max(live, key=lambda n: n.raft.delivered_offset, default=None)

    def active_controller_id(self) -> int | None:
        node = self.controller
        return node.node_id if node is not None and node.active else None

    def _controller_config(self, node_id: int) -> dict[str, Any]:
        o = self.options
        return CONTROLLER_CONFIG.resolve(
            {
                "node.id": node_id,
                "listeners": f"sim:{node_id}",
                "metadata.log.dir": str(self.root / f"controller-{node_id}"),
                "controller.quorum.voters": self.quorum_voters,
                "min.insync.replicas": o.min_insync_replicas,
                "unclean.leader.election.enable": o.unclean_leader_election,
                "broker.session.timeout.ms": 6000,
                "broker.heartbeat.interval.ms": 1000,
            }
        )

    def _committed(self, records: list[Any], last_offset: int, image: Any) -> None:
        """A voter delivered a committed batch: the checker hears each batch once, from whichever voter first."""
        if last_offset <= self._committed_offset:
            return
        self._committed_offset = last_offset
        for record in records:
            self.on_metadata(record, image)

    async def start_controller(self, node_id: int = CONTROLLER_ID) -> None:
        observer = self.observer.controller(node_id)
        node = ControllerNode(
            self._controller_config(node_id),
            PausableTime(asyncio.get_running_loop(), self.network.node(node_id).resumed),
            SimTransport(self.network, node_id, timeout_ms=5000),
            storage=self.controller_disks[node_id],
            rng=random.Random(self.rng.getrandbits(64)),
            observer=observer,
        )
        observer.node = node
        self.controllers[node_id] = node
        node.on_commit = self._committed
        self.network.bring_up(node_id, node.handle)
        node.start()
        self.trace.event(node_id, "start", epoch=node.raft.epoch)

    async def send_to_controller(self, src: int, request: Any, timeout_ms: int = 5000) -> Any:
        """`request` from node `src` to the active controller, following it as a broker's channel does."""
        channel = ControllerChannel(
            SimTransport(self.network, src, timeout_ms=timeout_ms),
            self.controller_ids,
            self.active_controller_id,
            self.time,
            timeout_ms=timeout_ms,
        )
        return await channel.send(-1, request, timeout_ms)

    async def start_controllers(self) -> None:
        for node_id in self.controller_ids:
            await self.start_controller(node_id)

    async def kill_controller(self, node_id: int | None = None) -> None:
        """SIGKILL a controller (the active one when `node_id` is None)."""
        if node_id is None:
            node_id = self.active_controller_id()
        node = self.controllers.pop(node_id, None) if node_id is not None else None
        if node is None or node_id is None:
            return
        self.network.take_down(node_id)
        await node.stop(graceful=False)
        self.controller_disks[node_id].crash(self.root / f"controller-{node_id}", self.options.crash_loses_unflushed)
        self.trace.event(node_id, "kill")

    # -- brokers -----------------------------------------------------------------------------------

    def _broker_config(self, broker_id: int) -> dict[str, Any]:
        o = self.options
        values: dict[str, Any] = {
            "broker.id": broker_id,
            "log.dirs": str(self.broker_dir(broker_id)),
            "min.insync.replicas": o.min_insync_replicas,
            "replica.lag.time.max.ms": 5000,
            "replica.socket.timeout.ms": 5000,
            "controller.socket.timeout.ms": 5000,
            "replica.fetch.backoff.ms": 200,
            "broker.heartbeat.interval.ms": 1000,
            "controlled.shutdown.timeout.ms": 5000,
            "controller.quorum.voters": self.quorum_voters,
            "inter.broker.protocol.version": o.inter_broker_protocol_version(),
            "metrics.interval.ms": 0,
            # Small batches: an index entry every few batches keeps offset lookups short.
            "log.index.interval.bytes": 512,
        }
        values.update(o.broker_overrides)
        known = {k: v for k, v in values.items() if k in BROKER_CONFIG.keys}
        return BROKER_CONFIG.resolve(known)

    async def start_broker(self, broker_id: int) -> BrokerNode:
        loop = asyncio.get_running_loop()
        net_node = self.network.node(broker_id)
        time = PausableTime(loop, net_node.resumed)
        config = self._broker_config(broker_id)
        timeout = config["replica.socket.timeout.ms"]
        observer = self.observer.broker(broker_id)
        node = BrokerNode(
            config,
            time,
            controller=SimTransport(self.network, broker_id, timeout_ms=5000),
            quorum=SimTransport(self.network, broker_id, timeout_ms=5000),
            lifecycle_transport=lambda: SimTransport(self.network, broker_id, timeout_ms=5000),
            fetcher_transport=lambda _fetcher_id: SimTransport(self.network, broker_id, timeout_ms=timeout),
            storage=self.disks[broker_id],
            rng=random.Random(self.rng.getrandbits(64)),
            observer=observer,
        )
        observer.node = node
        self.brokers[broker_id] = node
        self.network.bring_up(broker_id, node.handle)
        await node.start("sim", broker_id)
        self.trace.event(broker_id, "start")
        return node

    async def kill_broker(self, broker_id: int, loses_unflushed: bool | None = None) -> None:
        node = self.brokers.pop(broker_id, None)
        if node is None:
            return
        self.network.take_down(broker_id)
        await node.crash()
        lose = self.options.crash_loses_unflushed if loses_unflushed is None else loses_unflushed
        lost = self.disks[broker_id].crash(self.broker_dir(broker_id), lose)
        if lose:
            self.power_lost[broker_id] = lost
        self.on_crash(broker_id, lose and lost > 0)
        self.trace.event(broker_id, "kill", unflushed_bytes_lost=lost)

    async def stop_broker(self, broker_id: int) -> None:
        """A clean stop (SIGTERM): controlled shutdown, then everything flushed and closed."""
        node = self.brokers.get(broker_id)
        if node is None:
            return
        await node.controlled_shutdown()
        if self.brokers.get(broker_id) is not node:
            # Killed while it shut down (a controlled shutdown waits for the controller), and perhaps started
            # again since: the kill has stopped this process, and the one running now is not ours to stop.
            return
        self.brokers.pop(broker_id, None)
        self.network.take_down(broker_id)
        await node.stop_tasks()
        await node.close()
        self.trace.event(broker_id, "stop")

    async def restart_broker(self, broker_id: int) -> None:
        self.restarts[broker_id] += 1
        await self.start_broker(broker_id)

    async def close(self) -> None:
        for broker_id in list(self.brokers):
            node = self.brokers.pop(broker_id)
            self.network.take_down(broker_id)
            await node.crash()
        for node_id in list(self.controllers):
            controller = self.controllers.pop(node_id)
            self.network.take_down(node_id)
            await controller.stop(graceful=False)
