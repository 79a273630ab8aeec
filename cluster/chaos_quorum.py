"""Controller faults in `minibroker chaos run`, and the time a cluster spends without an active controller.

How this works
--------------
The active controller is the metadata quorum's leader: the one voter whose DESCRIBE_QUORUM (API key 55)
answers NONE, naming itself and its epoch; the others answer NOT_LEADER_OR_FOLLOWER. The faults
(cluster/chaos_faults.py plays them, under the same acks=all load and verdict as the broker faults):

* `kill-controller`: SIGKILL the active controller; once another voter answers as leader, start it again
  (it rejoins as a follower and catches up);
* `pause-controller`: SIGSTOP it for `--fault-ms`, then SIGCONT. Longer than the followers' fetch
  timeout (controller.quorum.fetch.timeout.ms, 2 s) and they elect another; woken, it still answers as
  the leader of its old epoch until it learns of the new one (`stale_leader_ms`);
* `partition:isolate-active-controller`: iptables DROP between it and every other node, voters and
  brokers, both ways;
* `partition:active-controller-from-voters`: DROP between it and the other voters only. It still talks
  to the brokers, but no majority fetches from it, so it must resign (check quorum, after 1.5 x
  controller.quorum.fetch.timeout.ms) while the other two elect a leader of a newer epoch.
  Both partitions last `--fault-ms`, and at least until another voter leads and the cut-off one has
  stopped answering as leader (or 30 s).

A `QuorumWatch` asks every voter DESCRIBE_QUORUM every 20 ms, over a connection of its own per voter (a
paused or cut-off voter costs only its own samples a timeout), from before the fault until the round
ends. The tool talks from 127.0.0.1, which no partition names, so it still hears a cut-off voter. From
its answers, per fault (`ControllerOutage`):

* `no_active_controller_ms`: from the fault until a voter answers as the leader of another (leader,
  epoch) than the faulted one, or the faulted one answers as leader again once the fault is healed (a
  pause too short for an election); an isolated leader answering from its old epoch does not count: it
  can commit nothing;
* the new leader and epoch, `leader_changed` and `epoch_bumped`;
* `old_leader_resigned_after_ms`: when the faulted voter, while it could answer, first said it no longer
  led its epoch (none for a kill: it never answers again as that process);
* `stale_leader_ms`: how long it still answered as the leader of its old epoch while another voter led a
  newer one (two voters calling themselves leader, in different epochs: Raft allows it, the old one can
  commit nothing);
* `quorum_whole_after_heal_ms`: from the heal until the leader saw every voter at its high watermark.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cluster.chaos import _percentile
from cluster.local_cluster import LocalClusterState, ProcessInfo
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse

CONTROLLER_KINDS = ("kill-controller", "pause-controller")
CONTROLLER_SHAPES = ("isolate-active-controller", "active-controller-from-voters")
POLL_S = 0.02  # each voter is asked this often
ANSWER_S = 1.0  # a voter slower than this (paused, cut off) misses that sample; a busy machine may take 0.2 s
MIN_CONTROLLERS = 3  # a quorum that can lose its leader and still elect one


def is_controller_fault(kind: str, shape: str | None) -> bool:
    return kind in CONTROLLER_KINDS or shape in CONTROLLER_SHAPES


def controller_pairs(state: LocalClusterState, active: int, shape: str) -> list[tuple[str, str]]:
    """The (source, destination) address pairs to drop for a controller partition shape, both ways."""
    host = state.controller(active).host
    others = [c.host for c in state.controllers if c.node_id != active]
    if shape == "isolate-active-controller":
        others += [b.host for b in state.brokers]
    elif shape != "active-controller-from-voters":
        raise ValueError(shape)
    return [(host, o) for o in others] + [(o, host) for o in others]


@dataclass(frozen=True, slots=True)
class QuorumAnswer:
    """One voter's DESCRIBE_QUORUM answer: whether it leads, and in which epoch."""

    at: float  # time.monotonic()
    voter: int
    leading: bool
    leader_id: int  # whom it names (-1: nobody)
    epoch: int
    voters_caught_up: bool = False  # a leader's answer: every voter's log end at its high watermark

    @classmethod
    def of(cls, at: float, voter: int, answer: DescribeQuorumResponse) -> QuorumAnswer:
        leading = answer.error_code == ErrorCode.NONE
        caught_up = leading and all(v.log_end_offset >= answer.high_watermark for v in answer.current_voters)
        return cls(at, voter, leading, answer.leader_id, answer.leader_epoch, caught_up)


@dataclass
class ControllerOutage:
    """What one controller fault did to the quorum (the fault report's `controller`)."""

    old_leader: int
    old_epoch: int
    new_leader: int | None = None
    new_epoch: int | None = None
    leader_changed: bool | None = None
    epoch_bumped: bool | None = None
    no_active_controller_ms: float | None = None  # None: no voter led again while the round lasted
    old_leader_resigned_after_ms: float | None = None
    stale_leader_ms: float = 0.0
    quorum_whole_after_heal_ms: float | None = None
    samples: int = 0


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


class QuorumWatch:
    """DESCRIBE_QUORUM to every voter every `POLL_S`, each on its own connection, until `stop`."""

    def __init__(self, controllers: list[ProcessInfo]) -> None:
        self.controllers = controllers
        self.answers: list[QuorumAnswer] = []
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._poll(c), name=f"quorum-watch-{c.node_id}") for c in self.controllers]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _poll(self, c: ProcessInfo) -> None:
        conn: BrokerConnection | None = None
        try:
            while True:
                asked = time.monotonic()
                try:
                    if conn is None or not conn.is_open:
                        conn = await BrokerConnection.connect(c.host, c.port, "chaos-quorum-watch", timeout_s=ANSWER_S)
                    answer = await conn.send(DescribeQuorumRequest(), timeout_s=ANSWER_S)
                    self.answers.append(QuorumAnswer.of(time.monotonic(), c.node_id, answer))
                except (TimeoutError, ConnectionError, OSError):
                    # A request left unanswered on the connection would hold up the next: start afresh.
                    if conn is not None:
                        with contextlib.suppress(Exception):
                            await asyncio.wait_for(conn.close(), ANSWER_S)
                    conn = None
                await asyncio.sleep(max(POLL_S - (time.monotonic() - asked), 0.001))
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), ANSWER_S)

    # -- what the answers say ---------------------------------------------------------------------------

    def latest_leader(self) -> QuorumAnswer | None:
        """The newest answer of a voter leading the highest epoch heard in the last half second."""
        recent = [a for a in self.answers[-64:] if a.leading and a.at >= time.monotonic() - 0.5]
        return max(recent, key=lambda a: (a.epoch, a.at)) if recent else None

    async def until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True

    async def active(self, timeout_s: float) -> QuorumAnswer | None:
        """The active controller as a voter last answered it, waiting up to `timeout_s` for one."""
        await self.until(lambda: self.latest_leader() is not None, timeout_s)
        return self.latest_leader()

    def back(self, old: QuorumAnswer, fault_at: float, healed_at: float | None) -> QuorumAnswer | None:
        """The first answer after the fault from an active controller: another (leader, epoch) than the
        faulted one, or the faulted one again once the fault is healed."""
        for a in sorted(self.answers, key=lambda a: a.at):
            if a.at < fault_at or not a.leading:
                continue
            if (a.voter, a.epoch) != (old.voter, old.epoch):
                return a
            if healed_at is not None and a.at >= healed_at:
                return a
        return None

    def resigned(self, old: QuorumAnswer, fault_at: float) -> QuorumAnswer | None:
        """The faulted voter's first answer after the fault saying it no longer leads its epoch."""
        for a in sorted(self.answers, key=lambda a: a.at):
            if a.at >= fault_at and a.voter == old.voter and not (a.leading and a.epoch == old.epoch):
                return a
        return None

    def quorum_whole(self, since: float) -> QuorumAnswer | None:
        """The first leader's answer since `since` showing every voter at its high watermark."""
        return next((a for a in self.answers if a.at >= since and a.voters_caught_up), None)

    def stale_leader_s(self, old: QuorumAnswer, fault_at: float) -> float:
        """How long the faulted voter still answered as leader of its old epoch after a newer one led."""
        ordered = sorted((a for a in self.answers if a.at >= fault_at), key=lambda a: a.at)
        newer = next((a.at for a in ordered if a.leading and a.epoch > old.epoch), None)
        if newer is None:
            return 0.0
        stale = [a.at for a in ordered if a.voter == old.voter and a.leading and a.epoch == old.epoch]
        return max((t for t in stale if t >= newer), default=newer) - newer

    def outage(self, old: QuorumAnswer, fault_at: float, healed_at: float, reachable: bool) -> ControllerOutage:
        """The fault's effect on the quorum; `reachable`: the faulted voter could answer (not a kill)."""
        out = ControllerOutage(old.voter, old.epoch, samples=sum(1 for a in self.answers if a.at >= fault_at))
        back = self.back(old, fault_at, healed_at)
        if back is not None:
            out.new_leader, out.new_epoch = back.voter, back.epoch
            out.leader_changed = back.voter != old.voter
            out.epoch_bumped = back.epoch > old.epoch
            out.no_active_controller_ms = _ms(back.at - fault_at)
        resigned = self.resigned(old, fault_at) if reachable else None
        if resigned is not None:
            out.old_leader_resigned_after_ms = _ms(resigned.at - fault_at)
        out.stale_leader_ms = _ms(self.stale_leader_s(old, fault_at))
        whole = self.quorum_whole(healed_at)
        if whole is not None:
            out.quorum_whole_after_heal_ms = _ms(whole.at - healed_at)
        return out


def summarize(outages: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's `controller_faults`: the time without an active controller over every controller fault
    (a fault after which no voter led again while the round lasted counts as unresolved, not as a time)."""
    times = [o["no_active_controller_ms"] for o in outages if o["no_active_controller_ms"] is not None]
    return {
        "faults": len(outages),
        "no_active_controller_ms": {
            "total": round(sum(times), 1),
            "max": max(times, default=None),
            "p50": _percentile(times, 50),
            "p99": _percentile(times, 99),
        },
        "unresolved": len(outages) - len(times),
        "leader_changes": sum(1 for o in outages if o["leader_changed"]),
    }


def describe_outage(o: dict[str, Any]) -> str:
    """One round's quorum figures as the text report shows them."""
    if o["no_active_controller_ms"] is None:
        text = "no active controller again while the round lasted"
    else:
        change = "leader changed" if o["leader_changed"] else "the same leader"
        text = (
            f"no active controller for {o['no_active_controller_ms']} ms, then {o['new_leader']} at epoch "
            f"{o['new_epoch']} ({change})"
        )
    if o["old_leader_resigned_after_ms"] is not None:
        text += f"; {o['old_leader']} stopped leading after {o['old_leader_resigned_after_ms']} ms"
    if o["stale_leader_ms"]:
        text += f", answering as leader of epoch {o['old_epoch']} {o['stale_leader_ms']} ms after a newer one led"
    return text
