"""A quorum on the simulator's virtual time and network: real `RaftClient`s, real logs on a temp dir, a
listener per node that records what it was given as committed."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from network.request_context import ConnectionContext
from protocol.codec import Message
from protocol.messages import (
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    ErrorResponse,
    FetchRequest,
    FetchSnapshotRequest,
    RequestHeader,
    VoteRequest,
)
from raft.quorum_config import QuorumConfig
from raft.quorum_state import QuorumStateStore
from raft.raft_client import RaftClient, Role
from raft.replicated_log import LogBatch, ReplicatedLog, Snapshot
from sim.loop import LoopTime
from sim.network import SimNetwork, SimTransport

VOTERS = (1, 2, 3)


@dataclass
class Recorder:
    """The state machine: the committed values, in order, by offset."""

    committed: list[tuple[int, bytes]] = field(default_factory=list)
    leaders: list[tuple[int | None, int]] = field(default_factory=list)
    snapshots_loaded: int = 0

    def handle_commit(self, batches: list[LogBatch]) -> None:
        for batch in batches:
            if batch.is_control:
                continue
            for i, value in enumerate(batch.values):
                self.committed.append((batch.base_offset + i, value))

    def handle_load_snapshot(self, snapshot: Snapshot) -> None:
        self.committed = [(int(v.split(b"@")[0]), v.split(b"@", 1)[1]) for v in snapshot.values]
        self.snapshots_loaded += 1

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.leaders.append((leader_id, epoch))

    def snapshot_values(self) -> list[bytes]:
        return [b"%d@%s" % (offset, value) for offset, value in self.committed]

    def values(self) -> list[bytes]:
        return [v for _, v in self.committed]


class Quorum:
    def __init__(
        self,
        root: Path,
        voters: tuple[int, ...] = VOTERS,
        observers: tuple[int, ...] = (),
        seed: int = 1,
        **config: Any,
    ) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.network = SimNetwork(random.Random(self.rng.getrandbits(64)))
        self.config = QuorumConfig(voters={v: ("sim", v) for v in voters}, **config)
        self.node_ids = (*voters, *observers)
        self.nodes: dict[int, RaftClient] = {}
        self.recorders: dict[int, Recorder] = {}
        self.patch: Callable[[RaftClient], None] = lambda client: None

    def start(self, node_id: int) -> RaftClient:
        loop = asyncio.get_running_loop()
        directory = self.root / f"node-{node_id}"
        recorder = Recorder()
        client = RaftClient(
            node_id,
            self.config,
            ReplicatedLog(directory, LoopTime(loop)),
            QuorumStateStore(directory),
            LoopTime(loop),
            SimTransport(self.network, node_id, timeout_ms=self.config.request_timeout_ms),
            random.Random(self.rng.getrandbits(64)),
            recorder,
        )
        self.patch(client)
        self.nodes[node_id] = client
        self.recorders[node_id] = recorder
        self.network.bring_up(node_id, self._handler(client))
        client.start()
        return client

    def start_all(self) -> None:
        for node_id in self.node_ids:
            self.start(node_id)

    @staticmethod
    def _handler(client: RaftClient) -> Any:
        async def handle(ctx: ConnectionContext, header: RequestHeader, body: Message) -> Message | None:
            if isinstance(body, VoteRequest):
                return client.handle_vote(body)
            if isinstance(body, BeginQuorumEpochRequest):
                return client.handle_begin_quorum_epoch(body)
            if isinstance(body, EndQuorumEpochRequest):
                return client.handle_end_quorum_epoch(body)
            if isinstance(body, FetchRequest):
                return await client.handle_fetch(body)
            if isinstance(body, FetchSnapshotRequest):
                return client.handle_fetch_snapshot(body)
            if isinstance(body, DescribeQuorumRequest):
                return client.describe()
            return ErrorResponse(42, f"unexpected {type(body).__name__}")

        return handle

    async def kill(self, node_id: int) -> None:
        """SIGKILL: the process is gone; what its log never fsynced is kept (the OS still has it)."""
        client = self.nodes.pop(node_id)
        self.network.take_down(node_id)
        await client.close(graceful=False)
        client.log.abandon()

    async def stop(self, node_id: int) -> None:
        client = self.nodes.pop(node_id)
        await client.close(graceful=True)
        self.network.take_down(node_id)
        client.log.close()

    async def close(self) -> None:
        for node_id in list(self.nodes):
            await self.kill(node_id)

    def leaders(self) -> list[RaftClient]:
        return [c for c in self.nodes.values() if c.role is Role.LEADER]

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate():
            if loop.time() > deadline:
                raise AssertionError(f"not within {timeout_s} virtual s: {what}")
            await asyncio.sleep(0.01)

    async def leader(self, timeout_s: float = 30.0) -> RaftClient:
        await self.wait_for(
            lambda: len(self.leaders()) == 1 and self.leaders()[0].high_watermark > 0,
            timeout_s,
            "one leader with a committed epoch start",
        )
        return self.leaders()[0]

    async def append(self, values: list[bytes], timeout_s: float = 30.0) -> int:
        """Append through whoever leads (waiting for one) until committed; the last offset."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            leader = await self.leader(max(deadline - loop.time(), 0.1))
            try:
                offset = leader.append(values)
                await asyncio.wait_for(leader.wait_committed(offset), max(deadline - loop.time(), 0.1))
                return offset
            except Exception:  # noqa: BLE001 - lost the leadership meanwhile: try the next leader
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.05)
