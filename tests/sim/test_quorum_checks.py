"""The metadata quorum's invariants, as the checker holds them in every run: at most one leader per epoch,
and a committed batch of `__cluster_metadata` never changes or disappears on any voter; and the
`controller` fault, which kills or pauses the active controller."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from raft.replicated_log import ReplicatedLog
from server_common.time import ManualTime
from sim.checker import Checker, Violation
from sim.cluster import SimOptions
from sim.faults import KINDS, generate
from sim.runner import SimRun, run_seed
from sim.scenarios import until
from sim.trace import Trace
from sim.workload import WriteHistory


def _checker(controllers: dict[int, Any] | None = None) -> Checker:
    return Checker(SimpleNamespace(controllers=controllers or {}), [], WriteHistory(), Trace(keep=False))


def _log(root: Path, name: str, batches: list[tuple[int, list[bytes]]]) -> ReplicatedLog:
    log = ReplicatedLog(root / name, ManualTime())
    for epoch, values in batches:
        log.append_as_leader(values, epoch)
    return log


@pytest.mark.timeout(10)
async def test_two_voters_winning_one_epoch_is_a_violation() -> None:
    checker = _checker()
    checker.on_metadata_leader_elected(3000, 1)
    checker.on_metadata_leader_elected(3000, 1)  # told again (a second listener, a replay): the same winner
    checker.on_metadata_leader_elected(3001, 2)
    with pytest.raises(Violation) as raised:
        checker.on_metadata_leader_elected(3002, 2)
    assert raised.value.check == "two_metadata_leaders"
    assert "controllers 3001 and 3002 both won" in raised.value.message


@pytest.mark.timeout(10)
async def test_a_committed_metadata_batch_that_differs_on_a_voter_is_a_violation(tmp_path: Path) -> None:
    checker = _checker()
    leader = _log(tmp_path, "a", [(1, [b"leader-change"]), (1, [b"r1", b"r2"]), (1, [b"r3"])])
    same = _log(tmp_path, "b", [(1, [b"leader-change"]), (1, [b"r1", b"r2"])])
    other = _log(tmp_path, "c", [(1, [b"leader-change"]), (2, [b"x1", b"x2"])])
    checker.on_metadata_committed(3000, leader, 4)
    assert checker.metadata_committed_end == 4
    checker.on_metadata_committed(3001, same, 3)  # a follower holding part of it, identically
    with pytest.raises(Violation) as raised:
        checker.on_metadata_committed(3002, other, 3)
    assert raised.value.check == "committed_metadata_changed"
    assert "offset 1 a batch of epoch 2" in raised.value.message


@pytest.mark.timeout(10)
async def test_a_voter_cutting_its_log_below_what_it_held_committed_is_a_violation(tmp_path: Path) -> None:
    checker = _checker()
    log = _log(tmp_path, "a", [(1, [b"leader-change"]), (1, [b"r1"]), (2, [b"r2"])])
    checker.on_metadata_committed(3000, log, 2)
    checker.on_metadata_truncated(3000, log, 2)  # the uncommitted tail: Raft cuts that
    checker.on_metadata_truncated(3000, _log(tmp_path, "b", []), 0)  # another incarnation: it held nothing yet
    with pytest.raises(Violation) as raised:
        checker.on_metadata_truncated(3000, log, 1)
    assert raised.value.check == "committed_metadata_lost"


@pytest.mark.timeout(10)
async def test_the_end_of_a_run_compares_every_live_voters_log(tmp_path: Path) -> None:
    leader = _log(tmp_path, "a", [(1, [b"leader-change"]), (1, [b"r1"])])
    diverged = _log(tmp_path, "b", [(1, [b"leader-change"]), (1, [b"r9"])])
    stale_tail = _log(tmp_path, "c", [(1, [b"leader-change"]), (0, [b"r0"])])

    def voter(log: ReplicatedLog, high_watermark: int) -> SimpleNamespace:
        return SimpleNamespace(raft_log=log, raft=SimpleNamespace(high_watermark=high_watermark))

    # 3002 holds an uncommitted batch of an older epoch at offset 1, above its own HW: its next FETCH cuts it.
    controllers = {3000: voter(leader, 2), 3001: voter(diverged, 2), 3002: voter(stale_tail, 1)}
    checker = _checker(controllers)
    checker.on_metadata_committed(3000, leader, 2)
    with pytest.raises(Violation) as raised:
        checker.check_metadata_logs()  # 3001 never said its HW moved: only the end of the run reads it
    assert raised.value.check == "committed_metadata_changed" and "controller 3001" in raised.value.message
    del controllers[3001]
    checker.check_metadata_logs()


@pytest.mark.timeout(300)
def test_every_election_and_commit_of_the_quorum_reaches_the_checker_through_the_controllers_observers() -> None:
    seen: dict[str, Any] = {}

    async def script(run: SimRun) -> None:
        cluster = run.cluster
        first = cluster.active_controller_id()
        assert first is not None
        await cluster.kill_controller(first)
        await until(lambda: cluster.active_controller_id() not in (None, first), "another controller active")
        second = cluster.active_controller_id()
        assert second is not None
        await cluster.start_controller(first)
        await until(lambda: cluster.controllers[first].raft.leader_id == second, "the first one follows")
        await cluster.kill_controller(second)
        await until(lambda: cluster.active_controller_id() not in (None, second), "a third election")
        await cluster.start_controller(second)
        await asyncio.sleep(3.0)
        seen["leaders"] = dict(run.checker.metadata_leaders)
        seen["active"] = cluster.active_controller_id()
        seen["end"] = run.checker.metadata_committed_end
        seen["held"] = {n: end for n, (_, end) in run.checker._metadata_held.items()}
        seen["log_ends"] = {n: c.raft_log.log_end_offset for n, c in cluster.controllers.items()}

    result = run_seed(1, SimOptions(partitions=1, producers=0, consumers=0), script=script)
    assert result.ok and result.converged, result.violation
    leaders = seen["leaders"]
    assert len(set(leaders.values())) >= 2 and len(leaders) >= 3, leaders  # three elections, two winners at least
    assert seen["active"] == leaders[max(leaders)]
    # Every voter's batches were compared up to where it knew they were committed, as its HW moved.
    assert seen["end"] > 0 and all(end > 0 for end in seen["held"].values()), seen
    assert set(seen["held"]) == {3000, 3001, 3002}, seen


def test_controller_faults_are_drawn_with_the_other_kinds_and_name_no_node() -> None:
    import random

    assert "controller" in KINDS
    faults = generate(random.Random(7), ("controller", "kill"), 2.0, 30.0, [1, 2, 3])
    drawn = [f for f in faults if f.kind == "controller"]
    assert drawn and all(f.nodes == () and 0.0 <= f.amount <= 1.0 for f in drawn)
    assert {f.amount < 0.5 for f in drawn} == {True, False}  # kills and pauses both


@pytest.mark.timeout(300)
def test_a_run_with_controller_faults_kills_and_pauses_the_active_controller_and_converges() -> None:
    result = run_seed(3, SimOptions(duration_s=10.0, faults=("controller",), fault_rate=1.0), keep_trace=True)
    assert result.ok and result.converged, result.violation
    assert result.faults_injected.get("controller", 0) >= 2
    faults = [line for line in result.trace_lines if '"event":"fault"' in line and '"kind":"controller"' in line]
    assert faults and all('"nodes":[300' in line for line in faults), faults


@pytest.mark.timeout(30)
def test_a_quorum_of_one_controller_runs_with_faults_and_converges() -> None:
    # One voter commits what it appends at once: committed inside its own append, its records reached the
    # controller's image twice and the first broker registration failed (MetadataReplayError, at 0.3 s).
    result = run_seed(1, SimOptions(controllers=1, duration_s=8.0, faults=("kill", "restart", "pause"), fault_rate=1.0))
    assert result.ok and result.converged, result.violation
    assert result.acked > 0
