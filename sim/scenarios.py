"""The KIP-101 and KIP-279 sequences, scripted step by step on the real classes.

Each scenario sets up its own small cluster and drives it with kills, restarts and one-way cuts timed
against the replicas' own state (a follower's LEO and HW, who leads at which epoch), then lets the
cluster settle with the checker running. Under the legacy switch it names (`--truncation=hw`,
`--epoch-reply=kip101`) the checker reports the anomaly the KIP describes; under today's code it
reports none. Steps are written to the trace as `scenario` events, so the timeline reads like the KIP's
table.

- kip101-1: HW truncation followed by an immediate leader election loses an acknowledged write.
  Brokers B (leader), C and A (followers), acks=all. A has m2 but has not learned the HW that covers it
  when B dies; C is elected; A, told to follow C, truncates to its HW (legacy) and so drops m2; C dies
  before A fetches m2 again; A is elected without m2.
- kip101-2: replicas diverge after every replica crashed. Leader A never flushed m2; B did. Both crash,
  A loses m2, comes back first and is elected, writes m3 at m2's offset. B restarts: truncating to its
  HW keeps m2 (legacy), so offset 1 holds m2 on B and m3 on A forever; OffsetsForLeaderEpoch cuts it.
- kip279: fast unclean leader changes between two brokers P and Q leave Q with records of an epoch the
  leader never had; an OffsetsForLeaderEpoch answer without the epoch (KIP-101 as first shipped) makes
  Q keep them (divergence); with the epoch, Q truncates in rounds down to the common prefix.
- kip279-failover: KIP-279's clean back-to-back failover. B leads at epoch 1 with records A never
  fetched; A, the preferred replica, is elected (epoch 2) and writes over them; A dies before B
  truncated, and B is elected again (epoch 3). A asks B for the end of epoch 2, which B never had: the
  answer without the epoch (KIP-101) leaves A's epoch-2 record in place (divergence); with it, A
  truncates to the end of epoch 1.
- kafka-7164: r3 follows r1 at epoch 0 and holds x; r2 leads at epoch 1 without x (r3 is not told), r1
  follows it and drops x, then leads again at epoch 2 and writes y at x's offset. r3 hears only of epoch
  2, from the leader it already followed. Two rules keep it from holding x beside y: a follower
  truncates again after every epoch change, not only a leader change (KAFKA-7164), and a leader refuses
  a fetch naming an older leader epoch (KIP-320). No legacy switch turns either off; the tests plant
  their absence.
- kip320-stale-leader: KIP-320's own case (3.3d). F is told L leads at epoch 2 while L, whom the
  controller's word reaches late, still leads at epoch 0 with x, which the epoch-1 leader N never had;
  L hears of epoch 1 (truncating x) before it leads at 2. A leader answers a request naming a newer epoch
  than its own with UNKNOWN_LEADER_EPOCH, so F waits for L instead of truncating by, or fetching, L's
  stale log. The tests plant the absence of that fencing.
- kip903-late-fetch: F's FETCH from offset 2 (its old broker epoch) is 5 s on the way to L while F
  crashes, losing m2, which it never flushed, restarts with a new broker epoch and fetches from offset 1
  (L's answers then lost, so F's log stays short of offset 2). The leader, which has heard the new
  epoch, refuses the late fetch (KIP-903) instead of counting F at 2. The tests plant its absence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from protocol.messages import (
    AlterPartitionReassignmentsRequest,
    ElectLeadersRequest,
    ReassignablePartition,
    TopicPartition,
)
from server_common.poll import RetryPolicy, retry, wait_until
from sim.cluster import SimOptions
from sim.faults import REASSIGNER_ID
from sim.loop import LoopTime
from sim.network import LinkShape
from sim.runner import RunResult, Script, SimRun, run_seed
from sim.timeline import Recorder
from sim.workload import Producer


class ScenarioStuck(RuntimeError):
    """A step's condition never came true: the scenario could not be played as written."""


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0, step_s: float = 0.0005) -> None:
    clock = LoopTime(asyncio.get_running_loop())  # the scenario's virtual time
    if not await wait_until(condition, timeout_s, clock=clock, interval_s=step_s):
        raise ScenarioStuck(f"timed out waiting for: {what}")


def _replica(run: SimRun, broker: int, tp: TopicPartition):  # type: ignore[no-untyped-def]
    node = run.cluster.brokers.get(broker)
    return None if node is None else node.replica_manager.partitions.get(tp)


def _active(run: SimRun) -> Any:
    node = run.cluster.controller
    assert node is not None and node.active, "no active controller"
    return node


def _metadata_sent_past(run: SimRun, broker: int, offset: int) -> bool:
    """Whether the quorum's leader has answered a metadata FETCH of `broker` with a high watermark past
    `offset`: the record at `offset` is on its way to it (however slow the link)."""
    node = run.cluster.controller
    if node is None or not node.raft.is_leader:
        return False
    progress = node.raft._observers.get(broker)
    return progress is not None and progress.sent_high_watermark > offset


def _controller_leader(run: SimRun, tp: TopicPartition) -> tuple[int, tuple[int, ...]]:
    controller = run.cluster.controller
    assert controller is not None
    state = controller.controller.image.partitions[tp]
    return state.leader, tuple(state.isr)


def _leads(run: SimRun, broker: int, tp: TopicPartition) -> bool:
    p = _replica(run, broker, tp)
    return p is not None and p.is_leader and _controller_leader(run, tp)[0] == broker


async def _write(producer: Producer, tp: TopicPartition, tries: int = 50) -> None:
    """One acknowledged write; a try that fails (stale metadata right after a leader change) is not
    resent: the next try is a new record."""

    async def attempt() -> bool | None:
        return True if await producer.produce_one(tp) else None

    if await retry(attempt, RetryPolicy(tries, 0.05), clock=LoopTime(asyncio.get_running_loop())) is None:
        raise ScenarioStuck(f"no write to {tp} was acknowledged in {tries} tries")


def _step(run: SimRun, what: str) -> None:
    run.trace.event("scenario", "step", what=what)


def _image(run: SimRun) -> Any:
    """The metadata image of the controller that is active now (or would be next)."""
    node = run.cluster.controller
    assert node is not None, "no controller"
    return node.controller.image


async def _reassign(run: SimRun, tp: TopicPartition, replicas: list[int]) -> None:
    """An operator's ALTER_PARTITION_REASSIGNMENTS of `tp` to `replicas` (in that order of preference), done
    once the controller's image lists them."""
    request = AlterPartitionReassignmentsRequest([ReassignablePartition(tp.topic, tp.partition, replicas)])
    await run.cluster.send_to_controller(REASSIGNER_ID, request)
    await until(lambda: list(_image(run).partitions[tp].replicas) == replicas, f"replicas {replicas}")


async def _elect_preferred(run: SimRun) -> None:
    """An operator's preferred leader election for every partition (ELECT_LEADERS)."""
    await run.cluster.send_to_controller(REASSIGNER_ID, ElectLeadersRequest())


async def kip101_1(run: SimRun) -> None:
    net = run.cluster.network
    net.base = LinkShape(2.0, 0.0)  # fixed 2 ms links, so the steps below can act between messages
    tp = run.partitions[0]
    controller = run.cluster.controller
    assert controller is not None
    b, c, a = controller.controller.image.partitions[tp].replicas
    producer = run.producer(1001, acks=-1)
    _step(run, f"B={b} leads {tp}, C={c} and A={a} follow, ISR all three, acks=all")
    await _write(producer, tp)
    await until(lambda: all(_replica(run, x, tp).log.high_watermark == 1 for x in (a, b, c)), "m1 committed everywhere")
    write = asyncio.ensure_future(producer.produce_one(tp))
    await until(lambda: _replica(run, a, tp).log.log_end_offset == 2, "A fetched m2", step_s=0.0001)
    net.cut(b, a)  # A's next fetch reaches B (B's HW moves to 2) but its answer never reaches A
    _step(run, "A has m2 (LEO 2, HW 1); answers from B to A are lost from now on")
    assert await write, "m2 was not acknowledged"
    _step(run, f"m2 acknowledged; A's HW is still {_replica(run, a, tp).log.high_watermark}")
    net.cut(a, c)
    net.cut(c, a)  # A will not fetch from C before C dies
    await run.cluster.kill_broker(b)
    _step(run, "B dies")
    await until(lambda: (p := _replica(run, a, tp)) is not None and p.leader_id == c, "A follows C", timeout_s=30)
    _step(run, f"C leads at epoch {_replica(run, a, tp).leader_epoch}; A follows it")
    await asyncio.sleep(0.2)  # A's fetcher acts on becoming a follower (truncates, or asks C and waits)
    _step(run, f"A's log end offset is {_replica(run, a, tp).log.log_end_offset}")
    await run.cluster.kill_broker(c)
    _step(run, "C dies before A could fetch from it")
    net.heal()
    await until(lambda: _leads(run, a, tp), "A elected", timeout_s=30)
    _step(run, f"A leads at epoch {_replica(run, a, tp).leader_epoch}, LEO {_replica(run, a, tp).log.log_end_offset}")
    await asyncio.sleep(1.0)


async def kip101_2(run: SimRun) -> None:
    tp = run.partitions[0]
    controller = run.cluster.controller
    assert controller is not None
    a, b = controller.controller.image.partitions[tp].replicas
    producer = run.producer(1001, acks=-1)
    _step(run, f"A={a} leads {tp}, B={b} follows, acks=all")
    await _write(producer, tp)
    await until(lambda: _replica(run, b, tp).log.high_watermark == 1, "m1 committed on both")
    for broker in (a, b):
        run.cluster.brokers[broker].log_manager.flush_all()
    await _write(producer, tp)
    await until(lambda: _replica(run, b, tp).log.high_watermark == 2, "B learned HW 2")
    run.cluster.brokers[b].log_manager.flush_all()
    run.cluster.brokers[b].log_manager.checkpoint_high_watermarks()
    _step(run, "m2 committed (HW 2 on both); B flushed it, A did not")
    await run.cluster.kill_broker(b, loses_unflushed=False)
    await until(lambda: _controller_leader(run, tp) == (a, (a,)), "B out of the ISR", timeout_s=30)
    await run.cluster.kill_broker(a, loses_unflushed=True)
    _step(run, "both crashed; A lost what it never flushed (m2)")
    await until(lambda: _controller_leader(run, tp)[0] == -1, "A fenced", timeout_s=30)
    await run.cluster.restart_broker(a)
    await until(lambda: _leads(run, a, tp), "A elected", timeout_s=30)
    _step(run, f"A restarted first and leads at epoch {_replica(run, a, tp).leader_epoch}, LEO 1")
    await _write(producer, tp)
    _step(run, "m3 written at offset 1")
    await run.cluster.restart_broker(b)
    _step(run, "B restarts as a follower")
    await asyncio.sleep(3.0)


async def kip279(run: SimRun) -> None:
    tp = run.partitions[0]
    controller = run.cluster.controller
    assert controller is not None
    p, q = controller.controller.image.partitions[tp].replicas
    producer = run.producer(1001, acks=1)

    async def lead(broker: int, writes: int, what: str) -> None:
        await until(lambda: _leads(run, broker, tp), f"{broker} elected", timeout_s=30)
        for _ in range(writes):
            await _write(producer, tp)
        part = _replica(run, broker, tp)
        _step(run, f"{what}: leader {broker} epoch {part.leader_epoch}, LEO {part.log.log_end_offset}")

    async def down(broker: int) -> None:
        await run.cluster.kill_broker(broker)
        await until(lambda: _controller_leader(run, tp)[0] != broker, f"{broker} fenced", timeout_s=30)

    _step(run, f"P={p} and Q={q}, unclean election on, acks=1")
    await lead(p, 1, "1: P writes a")
    await until(lambda: _replica(run, q, tp).log.log_end_offset == 1, "Q has a")
    await down(p)
    await lead(q, 1, "2: P stopped, Q writes b")
    await down(q)
    await run.cluster.restart_broker(p)
    await lead(p, 3, "3: Q stopped, P back (unclean), writes C D E")
    await down(p)
    await run.cluster.restart_broker(q)
    await lead(q, 1, "4: P stopped, Q back (unclean), writes f")
    await down(q)
    await run.cluster.restart_broker(p)
    await lead(p, 2, "5: Q stopped, P back (unclean), writes G H")
    await run.cluster.restart_broker(q)
    _step(run, "6: Q starts as a follower of P")
    await asyncio.sleep(3.0)


async def kip279_failover(run: SimRun) -> None:
    """KIP-279's clean back-to-back failover (3.3a): B leads at epoch 1 with records A never fetched; A is
    elected (epoch 2) and writes over them; A dies before B truncated and B is elected again (epoch 3)
    without ever having seen epoch 2. A, back as B's follower, asks for the end of epoch 2, an epoch B
    never had."""
    net = run.cluster.network
    tp = run.partitions[0]
    controller = run.cluster.controller
    assert controller is not None
    a, b = controller.controller.image.partitions[tp].replicas  # A is the preferred replica
    producer = run.producer(1001, acks=1)
    _step(run, f"A={a} (preferred) and B={b}, acks=1, clean elections only")
    await run.cluster.kill_broker(a)
    await until(lambda: _leads(run, b, tp), "B elected")
    await run.cluster.restart_broker(a)
    await until(lambda: _controller_leader(run, tp)[1] == (a, b), "A back in the ISR")
    await _write(producer, tp)
    await until(lambda: _replica(run, a, tp).log.high_watermark == 1, "m1 committed on both")
    _step(run, f"B leads at epoch {_replica(run, b, tp).leader_epoch}; m1 on both, ISR both")
    net.cut(b, a)  # A's fetches reach B; B's answers do not reach A
    await _write(producer, tp)
    await _write(producer, tp)
    _step(run, f"B writes m2 m3 (LEO {_replica(run, b, tp).log.log_end_offset}); A never gets them, still in the ISR")
    net.cut(a, b)  # from now on B learns nothing from A: it cannot truncate
    await run.cluster.send_to_controller(REASSIGNER_ID, ElectLeadersRequest())
    await until(lambda: _leads(run, a, tp), "A elected, the preferred replica")
    await _write(producer, tp)
    part = _replica(run, a, tp)
    _step(run, f"A elected cleanly at epoch {part.leader_epoch}, writes m4 at offset 1 (LEO {part.log.log_end_offset})")
    await run.cluster.kill_broker(a)
    await until(lambda: _leads(run, b, tp), "B elected again", timeout_s=30)
    await _write(producer, tp)
    await _write(producer, tp)
    part = _replica(run, b, tp)
    _step(
        run,
        f"A dies before B truncated; B elected at epoch {part.leader_epoch}, writes m5 m6 "
        f"(LEO {part.log.log_end_offset})",
    )
    net.heal()
    await run.cluster.restart_broker(a)
    _step(run, "A restarts as B's follower; its latest epoch is one B never had")
    await until(lambda: (r := _replica(run, a, tp)) is not None and r.log.log_end_offset == 5, "A caught up")
    _step(run, f"A's log end offset is {_replica(run, a, tp).log.log_end_offset}")
    await asyncio.sleep(1.0)


async def kafka_7164(run: SimRun) -> None:
    """KAFKA-7164 (3.3c): a follower that missed an epoch in which another broker led is next told the
    leader it already followed, at a newer epoch. Only truncating after every epoch change, not only a
    leader change, makes it drop the record that leader lost in between."""
    net = run.cluster.network
    tp = run.partitions[0]
    controller = run.cluster.controller
    assert controller is not None
    r1, r2, r3 = controller.controller.image.partitions[tp].replicas
    producer = run.producer(1001, acks=1)
    _step(run, f"r1={r1} leads {tp} at epoch 0, r2={r2} and r3={r3} follow, acks=1")
    net.cut(r1, r2)  # r2's fetches reach r1; its answers do not reach r2
    await _write(producer, tp)
    await until(lambda: _replica(run, r3, tp).log.log_end_offset == 1, "r3 fetched x")
    _step(run, "r1 writes x at offset 0; r3 fetches it, r2 does not")
    for c in run.cluster.controller_ids:
        net.cut(c, r3)  # r3 misses what the metadata says from now on (its heartbeats still arrive)
    await run.cluster.kill_broker(r1)
    await until(lambda: _leads(run, r2, tp), "r2 elected", timeout_s=30)
    _step(run, f"r1 dies; r2 leads at epoch {_replica(run, r2, tp).leader_epoch} without x; r3 is not told")
    net.uncut(r1, r2)
    await run.cluster.restart_broker(r1)
    await until(lambda: r1 in _controller_leader(run, tp)[1], "r1 back in the ISR", timeout_s=30)
    _step(run, f"r1 restarts as r2's follower and truncates x (LEO {_replica(run, r1, tp).log.log_end_offset})")
    await run.cluster.kill_broker(r2)
    await until(lambda: _leads(run, r1, tp), "r1 elected again", timeout_s=30)
    await _write(producer, tp)
    part = _replica(run, r1, tp)
    _step(run, f"r2 dies; r1 leads again at epoch {part.leader_epoch} and writes y at offset 0")
    net.heal()
    _step(run, f"r3 hears only of epoch {part.leader_epoch}: the leader it followed at epoch 0, unchanged")
    await run.cluster.restart_broker(r2)
    await _write(producer, tp)
    await asyncio.sleep(3.0)


async def kip320_stale_leader(run: SimRun) -> None:
    """KIP-320 (3.3d): a follower told of a new epoch asks a leader still at an older one. L led at epoch
    0 with x, which F fetched and N did not; N leads at epoch 1 and writes z (F follows it: x gone, z
    fetched); L leads again at epoch 2. The controller's word reaches L slowly, so F hears of epoch 2 while
    L is still at epoch 0, with x; L will hear of epoch 1 (truncate x, follow N) before it leads at 2."""
    net = run.cluster.network
    tp = run.partitions[0]
    controller = run.cluster.controller
    assert controller is not None
    l_, n, f = controller.controller.image.partitions[tp].replicas
    producer = run.producer(1001, acks=1)

    _step(run, f"L={l_} leads {tp} at epoch 0, N={n} and F={f} follow, acks=1")
    await _write(producer, tp)
    await until(lambda: all(_replica(run, b, tp).log.high_watermark == 1 for b in (l_, n, f)), "m1 on all three")
    net.cut(l_, n)  # N's fetches reach L; L's answers do not reach N
    await _write(producer, tp)
    await until(lambda: _replica(run, f, tp).log.log_end_offset == 2, "F fetched x")
    _step(run, "L writes x at offset 1; F fetches it, N does not")
    await _reassign(run, tp, [n, l_, f])
    await until(lambda: _replica(run, l_, tp).assignment == [n, l_, f], "L told of the new order")
    await asyncio.sleep(0.1)  # and of the metadata that follows it: nothing from the controller in flight
    # From now on the metadata reaches L 3 s late, one FETCH answer at a time, in order.
    for c in run.cluster.controller_ids:
        net.shapes[(c, l_)] = LinkShape(3000.0, 0.0)
    await _elect_preferred(run)
    await until(lambda: _leads(run, n, tp), "N elected")
    epoch_1_offset = _active(run).controller.last_offset
    net.uncut(l_, n)
    producer.metadata.leaders[tp] = n  # L, still at epoch 0, would take the write: send it to N
    await _write(producer, tp)
    await until(
        lambda: (r := _replica(run, f, tp)).leader_epoch == 1 and r.log.latest_epoch == 1, "F follows N, holds z"
    )
    _step(
        run,
        f"N leads at epoch 1 and writes z at offset 1; F truncates x and fetches z; L, not yet told, still "
        f"leads at epoch {_replica(run, l_, tp).leader_epoch} with x",
    )
    # N must still lead at epoch 1 when L, told of it, asks N where epoch 0 ends: the controller's word
    # now reaches N 4 s late too. The controller tells L of epoch 1 after the metadata it sends first; once
    # that is on its way, L will follow N, truncating x, before it hears of epoch 2. Only then is L elected
    # again.
    for c in run.cluster.controller_ids:
        net.shapes[(c, n)] = LinkShape(4000.0, 0.0)
    await until(lambda: _metadata_sent_past(run, l_, epoch_1_offset), "epoch 1 on its way to L", timeout_s=10)
    await _reassign(run, tp, [l_, n, f])
    await _elect_preferred(run)
    await until(lambda: _image(run).partitions[tp].leader == l_, "L elected at epoch 2")
    await until(lambda: _replica(run, f, tp).leader_epoch == 2, "F told of epoch 2")
    _step(run, f"F hears of epoch 2 (leader L) while L is at epoch {_replica(run, l_, tp).leader_epoch}, holding x")
    await until(lambda: _replica(run, l_, tp).leader_epoch == 2 and _replica(run, l_, tp).is_leader, "L leads", 30)
    part = _replica(run, l_, tp)
    _step(run, f"L, told of epoch 1 (truncating x) and then of 2, leads at epoch 2 with LEO {part.log.log_end_offset}")
    await _write(producer, tp)
    _step(run, f"L writes y at offset {_replica(run, l_, tp).log.log_end_offset - 1}")
    await asyncio.sleep(3.0)


async def kip320_removed_replica(run: SimRun) -> None:
    """KIP-320's fencing of an older epoch (FENCED_LEADER_EPOCH), where it is the only guard. R's FETCH
    from offset 3 at epoch 0 is 3 s on the way to L when an operator takes R out of the partition (the
    controller bumps the leader epoch, R deletes its replica) and puts it back: R starts again with an empty
    log, at the new epoch. The late FETCH names R's own broker epoch (R never restarted: KIP-903 cannot tell
    it from a current one) and epoch 0 as its last fetched epoch, which L's log still ends at offset 3
    (truncation in FETCH sees no divergence). Only its leader epoch, older than L's, says it is from
    before: L refuses it and counts R where R's new fetches put it."""
    net = run.cluster.network
    tp = run.partitions[0]
    l_, r, s_ = _image(run).partitions[tp].replicas
    producer = run.producer(1001, acks=-1)

    _step(run, f"L={l_} leads {tp} at epoch 0, R={r} and S={s_} follow, acks=all")
    for _ in range(3):
        await _write(producer, tp)
    await until(lambda: all(_replica(run, b, tp).log.high_watermark == 3 for b in (l_, r, s_)), "m1-m3 on all three")
    net.shapes[(r, l_)] = LinkShape(3000.0, 0.0)
    # R's fetch waiting at L expires (replica.fetch.wait.max.ms, 500 ms) and R sends the next one, now 3 s on
    # the way.
    await asyncio.sleep(1.0)
    _step(run, "m1-m3 committed on all three; R's FETCH from offset 3 at epoch 0 is 3 s on the way to L")
    await _reassign(run, tp, [l_, s_])
    await until(lambda: _replica(run, r, tp) is None, "R's replica deleted")
    epoch = _replica(run, l_, tp).leader_epoch
    _step(run, f"R taken out: L leads at epoch {epoch} (the controller bumps it), R's replica is deleted")
    await _reassign(run, tp, [l_, r, s_])
    await until(lambda: r in _replica(run, l_, tp).assignment, "L told R is back")
    await until(lambda: (p := _replica(run, r, tp)) is not None and p.leader_epoch == epoch, "R follows again")
    _step(run, f"R put back (replicas [L, R, S]): an empty log, following L at epoch {epoch}")
    del net.shapes[(r, l_)]  # R's new fetches are on the same connection, behind the late one
    await until(lambda: r in _image(run).partitions[tp].isr, "R back in the ISR", timeout_s=30)
    part = _replica(run, l_, tp)
    _step(
        run,
        f"the late FETCH has reached L; R in the ISR, counted at {part.remote_replicas[r].log_end_offset} "
        f"with LEO {_replica(run, r, tp).log.log_end_offset}",
    )
    await run.cluster.kill_broker(l_)
    await until(lambda: _leads(run, r, tp) or _leads(run, s_, tp), "a new leader", timeout_s=30)
    leader = r if _leads(run, r, tp) else s_
    _step(run, f"L dies; {'R' if leader == r else 'S'} leads with LEO {_replica(run, leader, tp).log.log_end_offset}")
    await _write(producer, tp)
    await run.cluster.restart_broker(l_)
    _step(run, "L restarts as a follower; m4 written")
    await asyncio.sleep(1.0)


async def kip903_late_fetch(run: SimRun) -> None:
    """KIP-903: a FETCH of a follower's earlier incarnation reaches the leader late, after the follower
    crashed (losing what it never flushed), came back with a new broker epoch and fetched again. Its
    offset says what the lost log held; the leader, which has heard the new epoch, refuses it."""
    net = run.cluster.network
    loop = asyncio.get_running_loop()
    tp = run.partitions[0]
    controller = run.cluster.controller
    assert controller is not None
    l_, f = controller.controller.image.partitions[tp].replicas
    producer = run.producer(1001, acks=1)
    leader = run.cluster.brokers[l_]

    def heard_epoch() -> int:
        part = _replica(run, l_, tp)
        remote = part.remote_replicas.get(f) if part is not None else None
        return remote.broker_epoch if remote is not None else -1

    def broker_epoch(broker: int) -> int:
        lifecycle = run.cluster.brokers[broker].lifecycle
        assert lifecycle is not None
        return lifecycle.broker_epoch

    _step(run, f"L={l_} leads {tp}, F={f} follows, acks=1")
    await _write(producer, tp)
    await until(lambda: _replica(run, f, tp).log.high_watermark == 1, "m1 committed on both")
    run.cluster.brokers[f].log_manager.flush_all()
    old_epoch = broker_epoch(f)
    await until(lambda: leader.replica_manager.fetch_purgatory.num_delayed > 0, "F's fetch waits at L")
    net.shapes[(f, l_)] = LinkShape(5000.0, 0.0)  # what F sends L from now on takes 5 s
    _step(run, f"m1 on both, flushed on F (broker epoch {old_epoch}); F's fetch waits at L for more")
    await _write(producer, tp)
    await until(lambda: _replica(run, f, tp).log.log_end_offset == 2, "F fetched m2")
    await asyncio.sleep(0.01)  # F's next fetch, from offset 2, is on the wire
    sent = loop.time()
    del net.shapes[(f, l_)]
    _step(
        run, f"L writes m2; F fetches it (unflushed) and its fetch from offset 2, broker epoch {old_epoch}, is 5 s late"
    )
    await run.cluster.kill_broker(f, loses_unflushed=True)
    await run.cluster.restart_broker(f)
    net.new_connection(f, l_)  # the new process's fetches are not queued behind the old one's
    _step(run, "F crashes, losing m2, and restarts")
    # polled more often than a message crosses a link: L's answer to that fetch is still on the wire
    await until(
        lambda: broker_epoch(f) > old_epoch and heard_epoch() == broker_epoch(f), "L heard F's new epoch", step_s=0.0001
    )
    net.cut(l_, f)  # L's answers to F are lost: F's new log stays short of offset 2
    new_epoch = broker_epoch(f)
    part = _replica(run, l_, tp)
    _step(
        run,
        f"F (LEO {_replica(run, f, tp).log.log_end_offset}) fetches at broker epoch {new_epoch} from offset "
        f"{part.remote_replicas[f].log_end_offset}; L's answers to F are lost from now on",
    )
    if loop.time() - sent >= 5.0:
        raise ScenarioStuck("F's new incarnation fetched only after the late fetch arrived")
    await asyncio.sleep(sent + 5.5 - loop.time())
    remote = _replica(run, l_, tp).remote_replicas[f]
    _step(
        run,
        f"the late fetch (offset 2, broker epoch {old_epoch}) has reached L; L counts F at {remote.log_end_offset}, "
        f"broker epoch {remote.broker_epoch}; F's LEO is {_replica(run, f, tp).log.log_end_offset}",
    )
    net.heal()
    await until(lambda: _replica(run, f, tp).log.log_end_offset == 2, "F fetched m2 again", timeout_s=30)
    await _write(producer, tp)
    _step(run, "L's answers reach F again; F fetches m2 again; m3 written")
    await asyncio.sleep(1.0)


async def _restart_slow_to_fetch(run: SimRun, follower: int, leader: int, tp: TopicPartition) -> None:
    """`follower` restarts, its FETCHes (to `leader`, or to a broker it still takes for the leader) 3 s on
    the way until the leader's metadata lists it as live again (registered, unfenced) and its earlier
    incarnation is out of the ISR: so the leader judges it from the position it came back at, not from one
    it reached while still ineligible."""
    net = run.cluster.network
    links = [(follower, other) for other in run.cluster.broker_ids if other != follower]
    for link in links:
        net.shapes[link] = LinkShape(3000.0, 0.0)
    await run.cluster.restart_broker(follower)
    lifecycle = run.cluster.brokers[follower].lifecycle
    assert lifecycle is not None
    await until(lambda: lifecycle.broker_epoch > 0, "the follower registered")

    def told() -> bool:
        node = run.cluster.brokers.get(leader)
        registration = None if node is None or node.metadata is None else node.metadata.image.brokers.get(follower)
        return (
            registration is not None
            and registration.broker_epoch == lifecycle.broker_epoch
            and registration.is_active
            and follower not in _image(run).partitions[tp].isr
        )

    await until(told, "the leader told the follower is back", timeout_s=30)
    for link in links:
        del net.shapes[link]


async def isr_expansion(run: SimRun) -> None:
    """The cases of Kafka's `Partition.maybeExpandIsr` (and PartitionTest's), on one partition whose
    followers fetch one batch at a time, so a follower's position passes every offset. A leader adds a
    follower to the ISR only once its position reaches the HW (1: testIsrExpansion) and the start offset of
    the leader's epoch (2: KAFKA-7128, testFollowerDoesNotJoinISRUntilCaughtUpToOffsetWithinCurrentLeader
    Epoch), only while its metadata lists it unfenced (3: testIsrNotExpandedIfReplicaIsFencedOrShutdown),
    and only while no other ISR change of its is pending (4: testIsrNotExpandedIfUpdateFails, one
    AlterPartition in flight). The checker judges every proposal by that rule (`isr_expansion_against_rule`)."""
    net = run.cluster.network
    tp = run.partitions[0]
    a, b, f = _image(run).partitions[tp].replicas
    producer = run.producer(1001, acks=1)

    def isr() -> list[int]:
        return sorted(_image(run).partitions[tp].isr)

    async def write(count: int) -> None:
        for _ in range(count):
            await _write(producer, tp)

    _step(run, f"A={a} leads {tp}, B={b} and F={f} follow one batch per FETCH (replica.fetch.max.bytes 1), acks=1")
    await write(2)
    await until(lambda: all(_replica(run, x, tp).log.high_watermark == 2 for x in (a, b, f)), "m1 m2 on all three")
    await run.cluster.kill_broker(f, loses_unflushed=False)
    await until(lambda: f not in isr(), "F out of the ISR", timeout_s=30)
    await write(2)
    await until(lambda: _replica(run, a, tp).log.high_watermark == 4, "A's HW at 4")
    _step(run, "1: F dies at LEO 2 and leaves the ISR; m3 m4 committed on A and B (HW 4)")
    await _restart_slow_to_fetch(run, f, a, tp)
    await until(lambda: f in isr(), "F back in the ISR", timeout_s=30)
    _step(run, "1: F restarts at LEO 2: not proposed at 2 or 3, below the HW; proposed at 4 and committed")

    await run.cluster.kill_broker(f, loses_unflushed=False)  # still in the ISR, at 4: it holds A's HW there
    await write(4)
    await until(lambda: _replica(run, b, tp).log.log_end_offset == 8, "B fetched m5-m8")
    await _reassign(run, tp, [b, a, f])
    net.cut(a, b)  # A's fetches from B are lost: its unknown position holds B's HW
    await _elect_preferred(run)
    await until(lambda: _leads(run, b, tp), "B elected")
    part = _replica(run, b, tp)
    _step(
        run,
        f"2: F dies again, in the ISR at 4; m5-m8 reach B, not the HW; B elected at epoch {part.leader_epoch} from "
        f"offset {part.leader_epoch_start_offset} with HW {part.log.high_watermark}, A's fetches to B lost",
    )
    await _restart_slow_to_fetch(run, f, b, tp)
    await until(lambda: f in isr(), "F back in the ISR", timeout_s=30)
    _step(
        run,
        "2: F restarts at LEO 4, the HW: not proposed at 4 to 7, below the start of B's epoch; proposed at 8 and "
        f"committed (B's HW {_replica(run, b, tp).log.high_watermark})",
    )
    net.uncut(a, b)
    await until(lambda: a in isr() and _replica(run, b, tp).log.high_watermark == 8, "A back, HW 8", timeout_s=30)

    for c in run.cluster.controller_ids:  # F's heartbeats (and its metadata fetches) are lost
        net.cut(f, c)
        net.cut(c, f)
    await until(lambda: _image(run).brokers[f].fenced and f not in _replica(run, b, tp).isr, "F fenced", timeout_s=30)
    await until(lambda: f not in run.cluster.brokers[b].metadata_cache.brokers, "B told F is fenced", timeout_s=30)
    await write(1)
    await until(lambda: _replica(run, f, tp).log.log_end_offset == 9, "F fetched m9")
    await asyncio.sleep(1.0)
    _step(run, f"3: F fenced (its heartbeats lost) but fetching: at B's log end, not proposed; ISR {isr()}")
    net.heal()
    await until(lambda: f in isr(), "F back in the ISR", timeout_s=30)
    _step(run, "3: F's heartbeats reach the controller again: unfenced, then proposed and committed")

    net.cut(a, b)
    net.cut(f, b)
    await write(1)  # m10, which A and F do not fetch: they leave the ISR
    await until(lambda: isr() == [b], "A and F out of the ISR", timeout_s=30)
    for c in run.cluster.controller_ids:  # B's ALTER_PARTITION takes 2 s to arrive
        net.shapes[(b, c)] = LinkShape(2000.0, 0.0)
    net.uncut(a, b)
    await until(lambda: _replica(run, b, tp).pending_isr is not None, "B proposes A", timeout_s=10)
    net.uncut(f, b)
    await until(lambda: _replica(run, b, tp).remote_replicas[f].log_end_offset == 10, "F caught up", timeout_s=10)
    _step(run, f"4: A proposed, its AlterPartition 2 s on the way; F caught up meanwhile, not proposed: ISR {isr()}")
    await until(lambda: isr() == sorted((a, b, f)), "A and F back in the ISR", timeout_s=30)
    for c in run.cluster.controller_ids:
        del net.shapes[(b, c)]
    _step(run, "4: A committed, then F proposed and committed")
    await write(1)
    await asyncio.sleep(1.0)


async def idempotent_resend(run: SimRun) -> None:
    """KIP-98: the answer to an acks=all write is lost and its leader dies; the producer resends the same
    batch to the new leader, which already fetched it and answers with the original offset."""
    net = run.cluster.network
    net.base = LinkShape(2.0, 0.0)
    tp = run.partitions[0]
    controller = run.cluster.controller
    assert controller is not None
    leader, *followers = controller.controller.image.partitions[tp].replicas
    producer = run.producer(1001, acks=-1)
    assert producer.idempotent
    _step(run, f"{leader} leads {tp}, {followers} follow, acks=all, an idempotent producer")
    await _write(producer, tp)
    write = asyncio.ensure_future(producer.produce_one(tp))
    await until(lambda: all(_replica(run, f, tp).log.log_end_offset == 2 for f in followers), "m2 on the followers")
    net.cut(leader, producer.id)
    _step(run, "both followers have m2; the leader's answers to the producer are lost from now on")
    await run.cluster.kill_broker(leader)
    _step(run, "the leader dies: the producer's write is in doubt, and it resends it")
    assert await write, "m2 was not acknowledged"
    _step(run, f"m2 acknowledged at offset {run.history.acked[b'1001-2'][1]}")
    net.heal()
    await run.cluster.restart_broker(leader)
    await _write(producer, tp)
    _step(run, "the old leader is back as a follower; m3 written")
    everyone = (leader, *followers)
    await until(lambda: all((r := _replica(run, b, tp)) and r.log.log_end_offset == 3 for b in everyone), "caught up")
    ends = [_replica(run, b, tp).log.log_end_offset for b in everyone]
    _step(run, f"log end offsets {ends}")
    await asyncio.sleep(1.0)


SCENARIOS: dict[str, tuple[Script, SimOptions]] = {
    "kip101-1": (
        kip101_1,
        SimOptions(brokers=3, partitions=1, replication_factor=3, min_insync_replicas=1, acks=-1, producers=0),
    ),
    "kip101-2": (
        kip101_2,
        SimOptions(brokers=2, partitions=1, replication_factor=2, min_insync_replicas=1, acks=-1, producers=0),
    ),
    "kip279": (
        kip279,
        SimOptions(
            brokers=2,
            partitions=1,
            replication_factor=2,
            min_insync_replicas=1,
            acks=1,
            producers=0,
            unclean_leader_election=True,
        ),
    ),
    "kip279-failover": (
        kip279_failover,
        SimOptions(brokers=2, partitions=1, replication_factor=2, min_insync_replicas=1, acks=1, producers=0),
    ),
    "kafka-7164": (
        kafka_7164,
        SimOptions(brokers=3, partitions=1, replication_factor=3, min_insync_replicas=1, acks=1, producers=0),
    ),
    "kip320-stale-leader": (
        kip320_stale_leader,
        SimOptions(
            brokers=3,
            partitions=1,
            replication_factor=3,
            min_insync_replicas=1,
            acks=1,
            producers=0,
            # L's and N's metadata answers come 3-4 s late: their metadata FETCHes wait for them rather than
            # time out and ask again (each retry would start the 3 s over, and L would never catch up).
            broker_overrides={
                "controller.quorum.request.timeout.ms": 10000,
                "controller.quorum.fetch.timeout.ms": 20000,
            },
        ),
    ),
    "kip320-removed-replica": (
        kip320_removed_replica,
        SimOptions(brokers=3, partitions=1, replication_factor=3, min_insync_replicas=2, acks=-1, producers=0),
    ),
    "kip903-late-fetch": (
        kip903_late_fetch,
        SimOptions(brokers=2, partitions=1, replication_factor=2, min_insync_replicas=1, acks=1, producers=0),
    ),
    "isr-expansion": (
        isr_expansion,
        SimOptions(
            brokers=3,
            partitions=1,
            replication_factor=3,
            min_insync_replicas=1,
            acks=1,
            producers=0,
            broker_overrides={"replica.fetch.max.bytes": 1},
        ),
    ),
    "idempotent-resend": (
        idempotent_resend,
        SimOptions(
            brokers=3, partitions=1, replication_factor=3, min_insync_replicas=2, acks=-1, producers=0, idempotence=True
        ),
    ),
}

# The legacy switch under which each scenario shows its anomaly.
LEGACY = {
    "kip101-1": {"truncation": "hw"},
    "kip101-2": {"truncation": "hw"},
    "kip279": {"epoch_reply": "kip101"},
    "kip279-failover": {"epoch_reply": "kip101"},
}


def run_scenario(
    name: str,
    seed: int = 0,
    truncation: str = "fetch",
    epoch_reply: str = "kip279",
    keep_trace: bool = False,
    recorder: Recorder | None = None,
) -> RunResult:
    script, options = SCENARIOS[name]
    options = replace(options, truncation=truncation, epoch_reply=epoch_reply, consumers=0)
    return run_seed(seed, options, schedule=[], keep_trace=keep_trace, script=script, recorder=recorder)
