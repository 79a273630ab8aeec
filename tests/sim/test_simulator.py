"""The simulator: virtual time, determinism, a 100-seed sweep, the KIP scenarios, a checker that can fail."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.partition import Partition
from protocol.messages import FetchRequest, TopicPartition
from protocol.record_batch import build_batch
from sim.checker import Checker, Violation
from sim.cli import main as sim_main
from sim.cluster import CONTROLLER_ID, SimOptions
from sim.disk import SimDisk
from sim.faults import KINDS, Fault
from sim.loop import SimulationDeadlock, VirtualTimeLoop
from sim.network import SimNetwork
from sim.runner import RunResult, run_seed
from sim.scenarios import LEGACY, run_scenario
from sim.shrink import shrink
from sim.trace import Trace
from sim.workload import WriteHistory

# Timeouts: a run of seeds takes 3-5 times as long beside the suite's four workers on two busy cores as it
# does alone (a 12 s test took 62 s, a 28 s one 132 s); the timeouts below guard against a hang with room for
# that, and measure nothing.

# The fault kinds the seeds pinned below were found with (a kind added since changes every schedule drawn
# from the same list: `bounce` and `controller`).
FOUND_WITH_KINDS = tuple(k for k in KINDS if k not in ("bounce", "controller"))
# The kinds the sweeps below hold to find nothing: every kind. `controller` joined them once the quorum's
# failover stalls were fixed (a resigned leader that followed itself, a refusal held against the wrong
# registration, a lost ALTER_PARTITION that waited out its whole deadline): 300 seeds of the first sweep's
# options with it found nothing, where 4 of 60 had failed.
SWEPT_KINDS = KINDS

# The brokers of a test's metadata image: registered, unfenced and not shutting down.
ACTIVE_BROKERS = {b: SimpleNamespace(is_active=True) for b in range(1, 5)}
ALL_FAULTS = SimOptions(
    duration_s=8.0, partitions=3, producers=1, rate=20.0, faults=SWEPT_KINDS, fault_rate=1.5, consumers=1
)


# -- virtual time -------------------------------------------------------------------------------------


def test_virtual_loop_jumps_to_the_next_timer_and_shares_one_clock() -> None:
    loop = VirtualTimeLoop()

    async def main() -> tuple[float, float, float]:
        start = loop.time()
        await asyncio.gather(asyncio.sleep(1.0), asyncio.sleep(1.0))
        both = loop.time()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(5.0):
                await asyncio.Event().wait()
        return start, both, loop.time()

    try:
        assert loop.run_until_complete(main()) == (0.0, 1.0, 6.0)
    finally:
        loop.close()


def test_virtual_loop_reports_a_deadlock() -> None:
    loop = VirtualTimeLoop()
    try:
        with pytest.raises(SimulationDeadlock):
            loop.run_until_complete(asyncio.Event().wait())
    finally:
        loop.close()


def test_a_killed_node_cancels_its_in_flight_requests_in_arrival_order() -> None:
    # Determinism: the order a kill cancels handlers in must not depend on where the tasks sit in memory.
    loop = VirtualTimeLoop()
    network = SimNetwork(random.Random(1))
    cancelled: list[int] = []
    arrived: list[int] = []
    all_in = asyncio.Event()

    async def handler(ctx: Any, header: Any, request: Any) -> None:
        arrived.append(request.max_wait_ms)
        if len(arrived) == 40:
            all_in.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(request.max_wait_ms)
            raise

    async def main() -> None:
        network.bring_up(1, None)
        network.bring_up(2, handler)
        # many tasks, created with garbage in between, so a set would iterate them out of order
        senders = []
        for i in range(40):
            request = FetchRequest(replica_id=1, max_wait_ms=i, min_bytes=1, max_bytes=1, partitions=[])
            senders.append(asyncio.ensure_future(network.request(1, 2, request)))
            _ = [object() for _ in range(i % 7)]
        await all_in.wait()
        network.take_down(2)
        await asyncio.gather(*senders, return_exceptions=True)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert sorted(arrived) == list(range(40))
    assert cancelled == arrived


# -- the disk -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("preallocated", [False, True])
def test_sim_disk_crash_keeps_only_what_was_fsynced(tmp_path: Path, preallocated: bool) -> None:
    disk = SimDisk()
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    flushed, unflushed = build_batch([b"a" * 100]), build_batch([b"b" * 50], base_offset=1)
    fd = os.open(segment, os.O_RDWR | os.O_CREAT)
    try:
        if preallocated:
            os.posix_fallocate(fd, 0, 4096)  # the file runs on past its data, in zeros
        os.pwrite(fd, flushed, 0)
        disk.fsync(fd, len(flushed) if preallocated else None)
        os.pwrite(fd, unflushed, len(flushed))
    finally:
        os.close(fd)
    assert disk.crash(tmp_path, loses_unflushed=False) == 0
    assert segment.stat().st_size == (4096 if preallocated else len(flushed) + len(unflushed))
    assert disk.crash(tmp_path, loses_unflushed=True) == len(unflushed)  # the batch lost, not the zeros
    assert segment.read_bytes() == flushed


@pytest.mark.timeout(180)
def test_preallocated_segments_change_nothing_a_run_does_power_loss_included() -> None:
    # Preallocation changes where the file ends, never what the log holds: the same seed, with its crashes
    # that lose unflushed data, runs the same trace event for event (segments of 2 KiB: a few dozen rolls).
    small = {"log.segment.bytes": 2048, "log.flush.interval.messages": 5}
    plain = run_seed(5, SimOptions(**{**POWER_LOSS.__dict__, "broker_overrides": small}), keep_trace=True)
    # Flushes every 5 records reach into preallocated segments, and crashes still lose what followed them.
    assert any(kill["unflushed_bytes_lost"] > 0 for kill in _events(plain, "kill"))
    preallocated = SimOptions(**{**POWER_LOSS.__dict__, "broker_overrides": {**small, "log.preallocate": True}})
    assert run_seed(5, preallocated).trace_hash == plain.trace_hash


# -- determinism --------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_same_seed_same_trace_other_seed_other_trace() -> None:
    first = run_seed(3, ALL_FAULTS)
    again = run_seed(3, ALL_FAULTS)
    other = run_seed(12, ALL_FAULTS)
    assert first.ok and again.ok and other.ok
    assert first.events > 100
    assert first.trace_hash == again.trace_hash
    assert first.events == again.events and first.acked == again.acked
    assert other.trace_hash != first.trace_hash


def _in_a_fresh_process(script: str, timeout_s: float, **env: str) -> str:
    """What `script` prints, run by a new interpreter from the repository root (its own hash salt, its own
    garbage collector history)."""
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **env},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=True,
    ).stdout


_RUN_SEED_18 = (
    "from sim.cluster import SimOptions; from sim.faults import KINDS; from sim.runner import run_seed; "
    "options = SimOptions(faults=tuple(k for k in KINDS if k != 'controller'), fault_rate=0.5, "
    "idempotence=True, crash_loses_unflushed=True, "
    "duration_s=15.0); "
    "print(run_seed(18, options).trace_hash)"
)


@pytest.mark.timeout(300)
def test_a_seed_gives_the_same_history_in_any_process() -> None:
    # Python salts str hashes per process (PYTHONHASHSEED), so code that iterates a set of partitions where
    # the order matters makes a replay in another process (the printed replay command, a sweep's worker)
    # take another history. Seed 18 did: a failed fetch delayed its partitions in set order, and delaying
    # moves each to the end of the fetch order.
    hashes = {_in_a_fresh_process(_RUN_SEED_18, 100, PYTHONHASHSEED=salt).strip() for salt in ("0", "7", "11")}
    assert len(hashes) == 1 and "" not in hashes, hashes


_RUN_SEED_3_GC = (
    "import gc; from sim.cluster import SimOptions; from sim.runner import run_seed; "
    "options = SimOptions(duration_s=8.0, partitions=3, producers=1, rate=20.0, faults=('kill', 'pause', "
    "'partition'), fault_rate=1.0, unclean_leader_election=True); "
    "gc.disable(); never = run_seed(3, options); gc.enable(); gc.set_threshold(10); "
    "often = run_seed(3, options); "
    "print(never.trace_hash, often.trace_hash, never.violation is None, often.violation is None)"
)


@pytest.mark.timeout(180)
def test_a_seeds_history_does_not_depend_on_when_the_garbage_collector_runs() -> None:
    # A quorum member stopped in the turn its FETCH failed left the FETCH's error unretrieved; the event loop
    # reported it when the garbage collector freed the task, and the simulator counts a report as an
    # unhandled exception. So a run's course hung on when collection ran: a fresh-clone suite run failed
    # this seed (trace ad099c99...) that passes alone. With collection off and with it very frequent, the
    # run must be the same.
    out = _in_a_fresh_process(_RUN_SEED_3_GC, 150)
    never, often, never_ok, often_ok = out.split()
    assert (never, never_ok, often_ok) == (often, "True", "True"), out


@pytest.mark.timeout(180)
def test_a_broker_killed_during_its_controlled_shutdown_is_restarted_once_and_not_stopped_again() -> None:
    # A clean restart waits for the controller (cut off here) to accept the controlled shutdown; the broker is
    # killed meanwhile and started again. When the old shutdown finally returned, the restart went on to stop
    # "broker 3", by then the new process: it took that one off the network and out of the cluster with its
    # tasks still running, and started a third later, so two brokers 3 fetched side by side.
    schedule = [
        Fault(2000, "partition", 6000, (CONTROLLER_ID,)),
        Fault(2500, "restart", 8000, (3,)),
        Fault(3500, "kill", 1000, (3,)),
    ]
    result = run_seed(1, SimOptions(duration_s=15.0), schedule, keep_trace=True)
    assert result.violation is None, result.violation
    lifecycle = [
        (e["event"], e.get("kind"))
        for e in map(json.loads, result.trace_lines)
        if e.get("node") == 3 and e["event"] in ("start", "stop", "kill", "fault")
    ]
    assert lifecycle == [("start", None), ("fault", "restart"), ("fault", "kill"), ("kill", None), ("start", None)]
    assert result.converged


# -- the sweep ----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sweep_of_100_seeds_with_every_fault_kind_finds_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    # The suite's share of the sweep; the longer one is by hand (docs/simulation.md, "Sweeps by hand").
    code = sim_main(
        [
            "--seeds", "1..100", "--jobs", "2", "--json",
            "--duration", "8", "--partitions", "3", "--producers", "1", "--rate", "20",
            "--faults", ",".join(SWEPT_KINDS), "--fault-rate", "1.5",
        ]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["runs"] == 100
    assert report["violations_by_check"] == {}, report["failing_seeds"]
    assert code == 0
    assert set(report["faults_by_kind"]) == set(SWEPT_KINDS), "every kind of fault was injected"
    assert report["acked"] > 100 * 50  # the load ran
    assert report["faults_by_kind"]["kill"] >= 35  # one kind of 11


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_reassignments_among_four_brokers_through_crashes_keep_every_rule_and_converge(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Partitions move (KIP-455) while brokers are killed, restarted, paused and cut off: every check holds
    # and every run settles with each partition on its target replicas, in sync.
    code = sim_main(
        [
            "--seeds", "1..40", "--jobs", "2", "--json", "--brokers", "4",
            "--duration", "8", "--partitions", "4", "--producers", "1", "--rate", "20",
            "--faults", "reassign,kill,restart,partition,pause", "--fault-rate", "1.5",
        ]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["violations_by_check"] == {}, report["failing_seeds"]
    assert code == 0
    assert report["faults_by_kind"]["reassign"] >= 40
    assert [r["seed"] for r in report["runs_detail"] if not r["converged"]] == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_idempotent_producers_resolve_every_write_in_doubt_without_a_duplicate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # KIP-98 under every fault kind: producers resend each write left in doubt (the same batch) until a
    # leader answers; record_at_two_offsets holds (no duplicate), and no write ends failed or indeterminate.
    # (Without --idempotence the same sweep ends with hundreds of each.)
    code = sim_main(
        [
            "--seeds", "1..60", "--jobs", "2", "--json", "--brokers", "4", "--idempotence",
            "--duration", "8", "--partitions", "3", "--producers", "2", "--rate", "20",
            "--faults", ",".join(SWEPT_KINDS), "--fault-rate", "1.5",
        ]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert report["violations_by_check"] == {}, report["failing_seeds"]
    assert code == 0
    assert report["acked"] > 60 * 80
    assert (report["failed"], report["indeterminate"]) == (0, 0)
    assert report["faults_by_kind"]["kill"] >= 30


# -- preferred leader election --------------------------------------------------------------------------

ELECTIONS = SimOptions(duration_s=15.0, partitions=3, producers=1, rate=20.0, faults=("kill", "elect"), fault_rate=0.6)


@pytest.mark.timeout(300)
def test_preferred_elections_during_kills_move_leadership_back_and_keep_every_rule() -> None:
    # An operator's ELECT_LEADERS lands between kills and restarts: some find the preferred replica back
    # in the ISR and move leadership to it (a new epoch), others find it down; no rule breaks either way.
    moved_back = 0
    for seed in range(1, 9):
        result = run_seed(seed, ELECTIONS, keep_trace=True)
        assert result.ok, (seed, result.violation)
        events = [json.loads(line) for line in result.trace_lines]
        preferred = {e["tp"]: e["node"] for e in events if e["event"] == "leader" and e["epoch"] == 0}
        elections = [e["t_ms"] for e in events if e["event"] == "fault" and e.get("kind") == "elect"]
        moved_back += sum(
            1
            for e in events
            if e["event"] == "leader"
            and e["epoch"] > 0
            and e["node"] == preferred.get(e["tp"])
            and any(0 <= e["t_ms"] - t <= 200 for t in elections)
        )
    assert moved_back > 0, "no election found a preferred replica to move leadership back to"


# -- the KIP scenarios ----------------------------------------------------------------------------------


@pytest.mark.parametrize("truncation", ["fetch", "epoch"])
@pytest.mark.parametrize("name", sorted(LEGACY))
@pytest.mark.timeout(180)
def test_scenario_shows_its_anomaly_under_the_legacy_switch_only(name: str, truncation: str) -> None:
    # today's behaviour on both paths: the divergence answered in FETCH (2.7+), or OffsetsForLeaderEpoch
    # before fetching (0.11 to 2.6); the same divergent logs end the same way
    legacy = run_scenario(name, **LEGACY[name])
    today = run_scenario(name, truncation=truncation)
    epoch_rounds = today.requests.get("OffsetForLeaderEpochRequest", 0)
    assert (epoch_rounds == 0) is (truncation == "fetch"), today.requests
    assert legacy.violation is not None, f"{name}: the legacy switch should show the KIP's anomaly"
    # kip101-2 and the kip279s: the leader counts the follower at a position whose last offset it holds in
    # another epoch (before follower_position_not_held, the same runs failed later, once the follower was
    # back in the ISR, as isr_member_missing_committed)
    expected = {"kip101-1": "acked_write_lost", "kip101-2": "follower_position_not_held"}
    expected["kip279"] = expected["kip279-failover"] = "follower_position_not_held"
    assert legacy.violation.check == expected[name]
    assert today.violation is None, f"{name}: {today.violation}"
    assert today.converged
    steps = [e for e in today.timeline if e["event"] == "step"]
    assert len(steps) >= 5


def test_scenario_cli_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["--scenario", "kip101-1", "--truncation", "hw"]) == 1
    out = capsys.readouterr().out
    assert "check acked_write_lost failed" in out and "timeline" in out
    assert sim_main(["--scenario", "kip101-1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["violations"] == 0 and report["scenario"] == "kip101-1"


def test_cli_refuses_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["--faults", "kill,meteor"]) == 2
    assert "unknown fault kind" in capsys.readouterr().err
    assert sim_main(["--seeds", "5..1"]) == 2
    assert sim_main(["--replication-factor", "4"]) == 2


# -- the checker can fail -----------------------------------------------------------------------------


def _broken_hw(self: Partition, now_ms: int) -> bool:
    """A leader that moves its HW to its own log end, without waiting for the ISR."""
    if not self.is_leader or self.high_watermark >= self.log_end_offset:
        return False
    return bool(self.log.maybe_increment_high_watermark(self.log_end_offset))


@pytest.mark.timeout(240)
def test_a_broken_rule_is_found_and_its_schedule_shrunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Partition, "maybe_increment_leader_hw", _broken_hw)
    options = SimOptions(duration_s=10.0, partitions=2, producers=1, rate=30.0, faults=("kill", "pause", "delay"))
    failing: RunResult | None = None
    for seed in range(1, 31):
        result = run_seed(seed, options)
        if result.violation is not None:
            failing = result
            break
    assert failing is not None, "30 seeds with kills never caught a leader that commits before its ISR has the data"
    assert failing.violation is not None
    assert failing.violation.check in ("acked_write_lost", "committed_record_changed", "isr_member_missing_committed")
    assert len(failing.schedule) >= 2
    shrunk = shrink(failing.seed, options, failing, max_runs=40, budget_s=600.0)
    best = shrunk.run
    assert best.violation is not None and best.violation.check == failing.violation.check
    assert len(shrunk.schedule) < len(failing.schedule)
    assert shrunk.runs <= 40
    # the shrunk schedule replays to the same violation
    replay = run_seed(failing.seed, options, shrunk.schedule)
    assert replay.violation is not None and replay.trace_hash == best.trace_hash


@pytest.mark.timeout(180)
def test_an_idempotent_resend_after_a_lost_answer_and_a_dead_leader_lands_once() -> None:
    # KIP-98: the write's answer is lost and its leader killed; the resend reaches the new leader, which
    # already has the batch from fetching it, and answers with the original offset instead of appending
    result = run_scenario("idempotent-resend")
    assert result.violation is None, result.violation
    assert result.converged
    resends = [e for e in result.timeline if e["event"] == "produce-resend"]
    assert resends, "the write was resent"
    steps = [e["what"] for e in result.timeline if e["event"] == "step"]
    assert "m2 acknowledged at offset 1" in steps
    # every replica holds m1, m2, m3 once: offsets 0, 1, 2 (a second m2 would also be a duplicate violation)
    assert "log end offsets [3, 3, 3]" in steps
    assert result.acked == 3


# -- power loss: what Kafka promises once unflushed data is gone ----------------------------------------

POWER_LOSS = SimOptions(
    brokers=4,
    duration_s=10.0,
    partitions=3,
    producers=2,
    rate=25.0,
    faults=("kill", "restart", "pause", "partition", "delay", "drop", "slow-disk", "reassign"),
    fault_rate=1.5,
    crash_loses_unflushed=True,
    idempotence=True,
)


def _events(result: RunResult, name: str) -> list[dict[str, Any]]:
    return [e for e in map(json.loads, result.trace_lines) if e["event"] == name]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("crash_loses_unflushed", [True, False])
def test_a_last_isr_member_elected_without_its_unflushed_data_is_excused_only_after_power_loss(
    crash_loses_unflushed: bool,
) -> None:
    # Seed 7 (seed 5 before the controller quorum): the last ISR members crash and lose their unflushed
    # tail; they stay in the ISR (the last member always does), come back short and one is elected. Kafka
    # promises nothing here (KIP-966's gap), so the loss is excused, and said why. Without power loss the
    # same schedule loses nothing.
    options = SimOptions(**{**POWER_LOSS.__dict__, "crash_loses_unflushed": crash_loses_unflushed})
    result = run_seed(7, options, keep_trace=True)
    assert result.violation is None, result.violation
    excused = _events(result, "excused-loss")
    if crash_loses_unflushed:
        elected = _events(result, "elected-without-data")
        assert elected and excused
        for e in excused:  # each loss excused by an election without the data, on its partition, before it
            assert e["why"] == "leader elected from an ISR that had all lost unflushed data", e
            assert any(el["tp"] == e["tp"] and el["t_ms"] <= e["t_ms"] for el in elected), (e, elected)
    else:
        assert (excused, result.excused_losses) == ([], 0)


@pytest.mark.timeout(180)
def test_a_reassignment_replaced_while_a_replica_it_added_leads_runs_to_the_end() -> None:
    # Seed 212 of a 5-broker run: a replica a reassignment added caught up and was elected when the original
    # leader died; the next reassignment dropped it. The controller wrote a change leaving it leader outside
    # the ISR, which its own log could not replay, and the run died. Another in-sync replica now leads.
    options = replace(POWER_LOSS, brokers=5, duration_s=30.0, rate=50.0, faults=FOUND_WITH_KINDS, fault_rate=1.0)
    result = run_seed(212, options)
    assert result.violation is None, result.violation
    assert result.faults_injected.get("reassign", 0) > 0


@pytest.mark.timeout(10)
async def test_the_checker_takes_a_broker_put_back_in_the_isr_while_it_is_down_for_one_still_without_its_data() -> None:
    # The rule on its own: a join while the broker is down (an expansion its leader proposed before the crash,
    # committed after it) says nothing of what its disk kept; a join once it is up again does.
    tp = TopicPartition("t0", 0)
    cluster = SimpleNamespace(brokers={2: object(), 3: object()})  # broker 1 is down
    trace = Trace(keep=True)
    checker = Checker(cluster, [tp], WriteHistory(), trace)

    def metadata(leader: int, epoch: int, isr: tuple[int, ...]) -> None:
        image = SimpleNamespace(
            partitions={tp: SimpleNamespace(leader=leader, leader_epoch=epoch, isr=isr)}, brokers=ACTIVE_BROKERS
        )
        checker.on_metadata(SimpleNamespace(topic=tp.topic, partition=tp.partition), image)

    metadata(2, 0, (1, 2, 3))
    checker.on_crash(1, True)
    metadata(2, 0, (2, 3))
    metadata(2, 0, (1, 2, 3))  # while it is down
    assert checker.lost_data[tp] == {1}
    metadata(1, 1, (1,))
    assert checker.elected_without_data[tp]
    assert [json.loads(line)["event"] for line in trace.lines] == ["isr-join-while-down", "elected-without-data"]

    cluster.brokers[1] = object()  # back up
    metadata(1, 1, (1, 2))
    metadata(1, 1, (1,))
    metadata(1, 1, (1, 2))  # broker 2 never lost anything; broker 1 is still the one that did
    assert checker.lost_data[tp] == {1}
    metadata(2, 2, (2,))
    metadata(2, 2, (1, 2))  # broker 1 joins while up: it has fetched the leader's log again
    assert checker.lost_data[tp] == set()


@pytest.mark.timeout(180)
def test_a_consumer_reading_from_a_leader_elected_uncleanly_since_the_last_check_is_judged_with_that_election() -> None:
    # Found with seed 96067 (before the controller quorum) with unclean.leader.election.enable: broker 3,
    # out of the ISR with a record of its own at t0-5@113, was elected when the ISR's members were gone, and
    # a consumer read that record before the checks' next pass had seen the new leader. Kafka allows the
    # change (an unclean election); the consumer check judges the leader first, as the leader check would,
    # instead of failing at once. On the quorum, seed 7 elects uncleanly on t0-1 and t0-4 while consumers
    # read, and its losses are excused as that election's.
    options = SimOptions(producers=3, faults=FOUND_WITH_KINDS, fault_rate=1.0, unclean_leader_election=True)
    result = run_seed(7, options, keep_trace=True)
    assert result.violation is None, result.violation
    assert result.consumed > 0
    excused = [(e["tp"], e["why"]) for e in _events(result, "excused-loss")]
    unclean = {tp for tp, why in excused if why.startswith("unclean leader election: offset ")}
    assert unclean >= {"t0-1", "t0-4"}, excused


@pytest.mark.timeout(180)
def test_a_replica_a_new_reassignment_takes_back_is_not_deleted_by_the_stop_replica_of_its_removal() -> None:
    # Seed 99003: one reassignment of t2-0 completes and removes broker 2 (a STOP_REPLICA with delete is queued
    # for it); 12 ms later another puts broker 2 back. The queued delete still went first, after broker 2 had
    # rejoined the ISR on its old log: it emptied an ISR member below the HW (isr_member_missing_committed).
    options = SimOptions(
        brokers=4,
        topics=3,
        partitions=2,
        faults=FOUND_WITH_KINDS,
        fault_rate=1.2,
        idempotence=True,
        crash_loses_unflushed=True,
        truncation="epoch",
    )
    result = run_seed(99003, options, keep_trace=True)
    assert result.violation is None, result.violation
    reassigned = [e for e in _events(result, "fault") if e.get("kind") == "reassign" and e.get("tp") == "t2-0"]
    assert len(reassigned) >= 2


@pytest.mark.timeout(10)
async def test_the_checker_excuses_a_zombie_leaders_late_acknowledgement_as_the_election_without_data() -> None:
    # Found with seed 91054 before the controller quorum (no seed of 1..53 reaches it on the quorum, so the
    # rule is held here, on the checker alone): broker 3, the only ISR member left, crashes and loses a
    # write; the controller elects it without the data. Leader 1 of the earlier epoch, cut off, never hears
    # of it and acknowledges that write later. The same loss as the election's: excused, and said why. The
    # current leader's own writes stay unexcused.
    tp = TopicPartition("t0", 4)

    class Log:
        log_start_offset, truncations = 0, 0

        def __init__(self, values: list[bytes]) -> None:
            self.values = values
            self.log_end_offset = self.high_watermark = len(values)

        def read(self, start: int, _max: int) -> bytes:
            return build_batch([v + b"|padding" for v in self.values[start:]], base_offset=start)

    leader_log = Log([b"1003-119"])  # what broker 3 came back with: 1003-120 was lost in its crash
    leader = SimpleNamespace(log=leader_log, is_leader=True, leader_epoch=1, isr=frozenset({3}))
    cluster = SimpleNamespace(
        brokers={3: SimpleNamespace(replica_manager=SimpleNamespace(partitions={tp: leader}))},
        controller=None,
        options=SimpleNamespace(unclean_leader_election=False),
        broker_ids=[1, 2, 3],
    )
    trace = Trace(keep=True)
    checker = Checker(cluster, [tp], WriteHistory(), trace)

    def metadata(leader_id: int, epoch: int, isr: tuple[int, ...]) -> None:
        image = SimpleNamespace(
            partitions={tp: SimpleNamespace(leader=leader_id, leader_epoch=epoch, isr=isr)}, brokers=ACTIVE_BROKERS
        )
        checker.on_metadata(SimpleNamespace(topic=tp.topic, partition=tp.partition), image)

    metadata(1, 0, (1, 3))
    checker.on_crash(3, lost_unflushed=True)
    metadata(1, 0, (3,))  # 1 cut off, out of the ISR; 3 still in it
    metadata(3, 1, (3,))  # 3 elected from an ISR that had all lost unflushed data
    checker.on_ack(b"1003-120", tp, 1, -1, leader=3)  # acknowledged by 3 before its crash: the election's loss
    checker.on_ack(b"1003-121", tp, 1, -1, leader=1)  # the zombie's: acknowledged later, at epoch 0
    excused = [json.loads(line) for line in trace.lines if '"excused-loss"' in line]
    assert [e["why"] for e in excused] == [
        "leader elected from an ISR that had all lost unflushed data",
        "acknowledged by broker 1, a leader of an earlier epoch, after leader 3 was elected from an ISR that had "
        "all lost unflushed data",
    ]
    with pytest.raises(Violation) as lost:  # the current leader's own acknowledged write is never excused
        checker.on_ack(b"1003-122", tp, 1, -1, leader=3)
    assert lost.value.check == "acked_write_lost"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("seed", [25, 97])
def test_a_leader_restarted_before_the_controller_noticed_does_not_lead_at_its_old_epoch(seed: int) -> None:
    # KIP-380: the leader is killed and restarted within its session timeout, with its unflushed tail gone.
    # The controller's LEADER_AND_ISR for the old incarnation reaches the new one; obeyed, it would lead at
    # the old epoch with a short log and lose acknowledged writes. Stamped with the broker epoch, it is
    # refused until the new registration fences the broker and the leadership moves.
    result = run_seed(seed, POWER_LOSS, keep_trace=True)
    assert result.violation is None, result.violation
    assert result.excused_losses == 0
    kills = _events(result, "kill")
    assert any(e["unflushed_bytes_lost"] > 0 for e in kills)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("seed", [80, 10])  # 10 in place of 175, which no longer loses data on the quorum
def test_a_loss_is_judged_before_a_partition_back_in_sync_forgets_the_crashes_that_excuse_it(seed: int) -> None:
    # The check that finds the new leader short and the check that sees every replica back in the ISR come
    # in the same pass: the loss must be judged against the crashes first, and "back in sync" needs every
    # member to hold the HW, not just to be listed.
    result = run_seed(seed, POWER_LOSS, keep_trace=True)
    assert result.violation is None, result.violation
    assert result.excused_losses >= 1


# -- what the unclean-election and crash excuses cover ------------------------------------------------

UNCLEAN = SimOptions(
    duration_s=8.0, partitions=3, producers=1, rate=20.0, faults=("kill", "pause", "partition"), fault_rate=1.0
)


def _acks_all_on_leo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a bug: a leader completes acks=all once the write is in its own log, not below the HW."""
    honest = Partition.check_enough_replicas_reached_offset

    def on_leo(self: Partition, required_offset: int) -> tuple[bool, Any]:
        if self.is_leader and self.log.log_end_offset >= required_offset:
            return True, None
        return honest(self, required_offset)

    monkeypatch.setattr(Partition, "check_enough_replicas_reached_offset", on_leo)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("unclean", [False, True])
def test_acks_all_completing_on_the_leaders_log_end_is_found_with_or_without_unclean_election(
    monkeypatch: pytest.MonkeyPatch, unclean: bool
) -> None:
    # The flag used to excuse every loss (0 of 20 seeds failed with it, 12 without); now a loss is excused
    # only after an election outside the ISR, and only for a record the replica it elected did not hold.
    _acks_all_on_leo(monkeypatch)
    options = SimOptions(**{**UNCLEAN.__dict__, "unclean_leader_election": unclean})
    failing = []
    for seed in range(1, 7):
        result = run_seed(seed, options, keep_trace=True)
        if result.violation is not None:
            assert result.violation.check == "acked_write_lost", result.violation
            failing.append(seed)
        events = [json.loads(line) for line in result.trace_lines]
        for i, e in enumerate(events):
            if e["event"] == "excused-loss":
                assert unclean and e["why"].startswith("unclean leader election: offset "), e
                assert any(x["event"] == "elected-unclean" and x["tp"] == e["tp"] for x in events[:i]), e
    assert len(failing) >= 3, failing


@pytest.mark.timeout(180)
def test_the_unmodified_brokers_lose_nothing_with_unclean_election_on() -> None:
    options = SimOptions(**{**UNCLEAN.__dict__, "unclean_leader_election": True})
    for seed in range(1, 6):
        result = run_seed(seed, options)
        assert result.violation is None, (seed, result.violation)
        assert result.excused_losses == 0


@pytest.mark.timeout(10)
async def test_the_checker_excuses_a_loss_only_above_what_a_replica_elected_outside_the_isr_held() -> None:
    tp = TopicPartition("t0", 0)

    class Log:
        log_end_offset, log_start_offset, truncations = 1, 0, 0

        def read(self, start: int, _max: int) -> bytes:
            return build_batch([b"1001-1|padding"], base_offset=0)

    follower = SimpleNamespace(log=Log())
    node = SimpleNamespace(replica_manager=SimpleNamespace(partitions={tp: follower}))
    cluster = SimpleNamespace(brokers={2: node}, options=SimpleNamespace(unclean_leader_election=True), controller=None)
    checker = Checker(cluster, [tp], WriteHistory(), Trace(keep=True))
    cluster.broker_ids = [1, 2]
    assert not checker._excused(tp, "before any election", 1, b"1001-2")

    def metadata(leader: int, epoch: int, isr: tuple[int, ...]) -> None:
        image = SimpleNamespace(
            partitions={tp: SimpleNamespace(leader=leader, leader_epoch=epoch, isr=isr)}, brokers=ACTIVE_BROKERS
        )
        checker.on_metadata(SimpleNamespace(topic=tp.topic, partition=tp.partition), image)

    metadata(1, 0, (1,))
    metadata(2, 1, (2,))  # broker 2 was not in the ISR: unclean, holding offset 0 only
    assert not checker._excused(tp, "held by the new leader", 0, b"1001-1")
    assert checker._excused(tp, "above what it held", 1, b"1001-2")
    cluster.options.unclean_leader_election = False
    metadata(1, 2, (1,))
    assert not checker._excused(tp, "flag off: an election outside the ISR is the controller's bug", 5, b"x")
    # broker 1 has not opened the partition (it just restarted): what it held is read when it is seen leading
    assert checker._unclean_unread[tp] == (1, 2) and checker.unclean_held[tp] == []


@pytest.mark.timeout(180)
def test_kip101_2_excuses_its_loss_by_the_rule_it_states() -> None:
    # Every replica crashed since the partition was last in sync and one lost unflushed data: B (broker 1)
    # stopped with m2 flushed, only A (broker 2) lost it. The excuse names who lost what, not "every replica".
    result = run_scenario("kip101-2")
    assert result.violation is None, result.violation
    excused = [e for e in result.timeline if e["event"] == "excused-loss"]
    assert [e["why"] for e in excused] == [
        "every replica [1, 2] crashed since the partition was last in sync, and [2] lost unflushed data"
    ]
    kills = {e["node"]: e["unflushed_bytes_lost"] for e in result.timeline if e["event"] == "kill"}
    assert kills[1] == 0 and kills[2] > 0


# -- what a new user trips over -------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_a_scenario_writes_its_trace_and_refuses_options_it_would_ignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "kip101-2.jsonl"
    assert sim_main(["--scenario", "kip101-2", "--trace", str(trace)]) == 0
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(events) > 20 and any(e["event"] == "step" for e in events)
    capsys.readouterr()
    for ignored in (["--brokers", "5"], ["--shrink"], ["--faults", "kill"], ["--duration", "10"]):
        assert sim_main(["--scenario", "kip101-2", *ignored]) == 2, ignored
        assert f"not {ignored[0]}" in capsys.readouterr().err


def test_the_order_of_fault_kinds_does_not_change_the_schedule() -> None:
    from sim.cli import build_parser, options_from_args
    from sim.faults import generate

    def schedule(kinds: str) -> list[Fault]:
        options = options_from_args(build_parser().parse_args(["--faults", kinds]))
        return generate(random.Random("faults-3"), options.faults, 1.0, 30.0, [1, 2, 3])

    assert schedule("pause,kill") == schedule("kill,pause") == schedule("kill,pause,kill")
    assert len(schedule("kill,pause")) > 5
    # run_seed's callers too: the kinds name a set
    assert generate(random.Random(1), ("pause", "kill"), 1.0, 30.0, [1, 2]) == generate(
        random.Random(1), ("kill", "pause"), 1.0, 30.0, [1, 2]
    )


@pytest.mark.timeout(180)
def test_a_simulator_error_in_one_seed_is_that_seeds_failure_and_the_sweep_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sim.cluster import SimCluster

    real = SimCluster.start_controllers
    starts = []

    async def flaky(self: SimCluster) -> None:  # once per run: the quorum's voters start in it
        starts.append(1)
        if len(starts) == 2:
            raise ZeroDivisionError("a bug in the simulator")
        await real(self)

    monkeypatch.setattr(SimCluster, "start_controllers", flaky)
    argv = ["--seeds", "1..3", "--duration", "5", "--partitions", "1", "--producers", "1", "--rate", "5"]
    assert sim_main(argv) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("seed ")]
    assert len(lines) == 3
    assert "VIOLATION simulator_error" in lines[1] and "ok" in lines[0] and "ok" in lines[2]
    assert "3 seeds, 1 with a violation {'simulator_error': 1}" in out
    starts.clear()
    result = run_seed(1, SimOptions(duration_s=5.0, partitions=1, producers=1, rate=5.0))
    assert result.ok
    result = run_seed(1, SimOptions(duration_s=5.0, partitions=1, producers=1, rate=5.0))
    assert result.violation is not None and result.violation.check == "simulator_error"
    assert "ZeroDivisionError: a bug in the simulator at test_simulator.py:" in result.violation.message


@pytest.mark.timeout(300)
def test_after_a_shrink_the_replay_line_replays_the_shrunk_schedule(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(Partition, "maybe_increment_leader_hw", _broken_hw)
    argv = ["--duration", "6", "--partitions", "2", "--producers", "1", "--rate", "30", "--faults", "kill,pause"]
    argv += ["--fault-rate", "1.0"]
    seed = next(s for s in range(1, 20) if sim_main(["--seed", str(s), *argv]) == 1)
    capsys.readouterr()
    assert sim_main(["--seed", str(seed), *argv, "--shrink"]) == 1
    out = capsys.readouterr().out
    replay = next(line for line in out.splitlines() if line.startswith("replay: "))
    assert "--schedule" in replay
    assert "(the whole schedule, injected before the violation or not)" in out
    assert replay.removeprefix("replay: ") in out.split("replay the smallest found:")[1]


@pytest.mark.timeout(180)
def test_the_trace_records_truncations() -> None:
    result = run_scenario("kip101-2", keep_trace=True)
    truncations = [e for e in map(json.loads, result.trace_lines) if e["event"] == "truncate"]
    # B (broker 1) cuts m2 off at offset 1, where A wrote m3 (the legacy switch keeps it: no truncation)
    assert [(e["node"], e["tp"], e["leo"]) for e in truncations][:1] == [(1, "t0-0", 1)]
    legacy = run_scenario("kip101-2", truncation="hw", keep_trace=True)
    assert not [e for e in map(json.loads, legacy.trace_lines) if e["event"] == "truncate" and e["node"] == 1]


# -- liveness -------------------------------------------------------------------------------------------


@pytest.mark.timeout(180)  # 12 s on a quiet machine, past 60 s beside the suite on a busy one
def test_a_follower_looping_on_a_diverging_answer_fails_the_run_as_no_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    # Planted: a follower told its log diverges neither truncates nor backs off; it asks again at once, is
    # told the same, forever. The run used to print "ok" after 43,000 FETCHes (a healthy one sends ~400).
    from fetcher.replica_fetcher import ReplicaFetcher

    options = SimOptions(
        duration_s=10.0, partitions=2, producers=1, rate=30.0, faults=("kill", "pause", "partition"), fault_rate=1.0
    )
    healthy = run_seed(2, options)
    assert healthy.ok and healthy.converged and healthy.longest_stall_s < 10.0
    monkeypatch.setattr(ReplicaFetcher, "_truncate_on_fetch", lambda self, tp, state, partition: None)
    looping = run_seed(2, options)
    assert looping.violation is not None and looping.violation.check == "no_progress", looping.violation
    assert "settling" in looping.violation.message
    assert looping.requests["FetchRequest"] > 20 * healthy.requests["FetchRequest"]


# -- a leader counts a follower only where the follower's log holds its position ------------------------

# acks=1, so that leaders write records their followers never fetch, and epochs end in different places on
# different replicas; truncation in FETCH (the default), where the diverging answer comes
FOLLOWER_POSITION = SimOptions(
    duration_s=10.0,
    partitions=4,
    producers=2,
    rate=30.0,
    acks=1,
    faults=("kill", "pause", "partition"),
    fault_rate=1.0,
)


def _position_from_the_diverging_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant issue 14's bug: a follower told its log diverges takes the leader's (epoch, end offset) as its
    fetch position and last fetched epoch, and truncates nothing. The leader then finds no divergence at
    that position and counts the follower there, though the follower holds another epoch below it."""
    from fetcher.partition_fetch_state import ReplicaState
    from fetcher.replica_fetcher import ReplicaFetcher

    def take_the_answer(self: ReplicaFetcher, tp: TopicPartition, state: Any, partition: Any) -> None:
        self._states.update(
            tp,
            state.replace(
                fetch_offset=partition.diverging_end_offset,
                state=ReplicaState.FETCHING,
                last_fetched_epoch=partition.diverging_epoch,
            ),
        )

    monkeypatch.setattr(ReplicaFetcher, "_truncate_on_fetch", take_the_answer)


@pytest.mark.timeout(300)
def test_a_follower_that_takes_the_diverging_answer_for_its_position_is_found_within_20_seeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Measured before the controller quorum: of seeds 1..30, 1, 2 and 27 failed follower_position_not_held
    # and 15 others no_progress (the follower's next append finds its log end elsewhere and the partition
    # stops). On the quorum, where a restarted follower fetches only once registered, of seeds 1..60 33 fail
    # no_progress (13 of 1..20, the first seed 1) and none follower_position_not_held: the partition stops
    # before its leader counts the follower anywhere it does not hold. The check's own cases are the unit
    # tests below (_EpochLog).
    _position_from_the_diverging_answer(monkeypatch)
    found: RunResult | None = None
    for seed in range(1, 21):
        result = run_seed(seed, FOLLOWER_POSITION)
        if result.violation is not None:
            found = result
            break
    assert found is not None, "20 seeds never caught a follower that takes the diverging answer for its position"
    assert found.violation is not None
    assert found.violation.check in ("follower_position_not_held", "no_progress"), found.violation
    if found.violation.check == "follower_position_not_held":
        assert "counts follower" in found.violation.message


@pytest.mark.timeout(300)  # 20 runs: 28 s on a quiet machine, 132 s beside the suite on a busy one
def test_the_unmodified_followers_are_counted_only_where_their_logs_hold_the_position() -> None:
    for seed in range(1, 21):
        result = run_seed(seed, FOLLOWER_POSITION)
        assert result.violation is None, (seed, result.violation)
        assert result.converged, seed


class _EpochLog:
    """A log of one-record batches, one leader epoch each: what the position check reads."""

    log_start_offset = 0

    def __init__(self, *epochs: int) -> None:
        self.truncations = 0
        self.batches = [
            build_batch([b"1001-%d" % i], base_offset=i, partition_leader_epoch=e) for i, e in enumerate(epochs)
        ]

    @property
    def log_end_offset(self) -> int:
        return len(self.batches)

    def read(self, offset: int, _max_bytes: int) -> bytes:
        return b"".join(self.batches[offset:])

    def replace_last(self, epoch: int) -> None:
        """The last batch cut off and one of `epoch` appended in its place: the log end does not move."""
        offset = len(self.batches) - 1
        self.truncations += 1
        self.batches[offset] = build_batch([b"1001-%d" % offset], base_offset=offset, partition_leader_epoch=epoch)


@pytest.mark.timeout(10)
async def test_the_position_check_judges_only_a_fetch_from_the_log_that_is_there_now() -> None:
    tp = TopicPartition("t0", 0)
    leader = SimpleNamespace(topic_partition=tp, local_broker_id=1, leader_epoch=2, log=_EpochLog(0, 1, 2, 2))
    follower = SimpleNamespace(leader_id=1, leader_epoch=2, log=_EpochLog(0, 0, 2))
    node = SimpleNamespace(
        lifecycle=SimpleNamespace(broker_epoch=7), replica_manager=SimpleNamespace(partitions={tp: follower})
    )
    cluster = SimpleNamespace(brokers={2: node}, controller=None)
    checker = Checker(cluster, [tp], WriteHistory(), Trace(keep=True))
    checker.on_follower_position(leader, 2, 1, 7, 2)  # offset 0: epoch 0 on both
    checker.on_follower_position(leader, 2, 0, 7, 2)  # nothing to hold
    with pytest.raises(Violation, match="holds offset 1 in epoch 0, the leader's in epoch 1"):
        checker.on_follower_position(leader, 2, 2, 7, 2)
    with pytest.raises(Violation, match="the follower's log ends at 3"):
        checker.on_follower_position(leader, 2, 4, 7, 2)
    checker.on_follower_position(leader, 2, 2, 6, 2)  # an earlier incarnation's late fetch: its log is gone
    checker.on_follower_position(leader, 2, 2, 7, 1)  # sent at epoch 1: the follower moved on since
    follower.leader_id = 3
    checker.on_follower_position(leader, 2, 2, 7, 2)  # follows another leader now
    follower.leader_id = 1
    del cluster.brokers[2]
    checker.on_follower_position(leader, 2, 2, 7, 2)  # down


@pytest.mark.timeout(10)
async def test_a_position_found_held_is_read_again_only_after_a_log_is_cut() -> None:
    tp = TopicPartition("t0", 0)
    leader = SimpleNamespace(topic_partition=tp, local_broker_id=1, leader_epoch=2, log=_EpochLog(0, 1, 2))
    follower = SimpleNamespace(leader_id=1, leader_epoch=2, log=_EpochLog(0, 1, 2))
    node = SimpleNamespace(
        lifecycle=SimpleNamespace(broker_epoch=7), replica_manager=SimpleNamespace(partitions={tp: follower})
    )
    checker = Checker(SimpleNamespace(brokers={2: node}, controller=None), [tp], WriteHistory(), Trace(keep=True))
    reads = []
    read = follower.log.read
    follower.log.read = lambda offset, max_bytes: reads.append(offset) or read(offset, max_bytes)
    checker.on_follower_position(leader, 2, 3, 7, 2)
    checker.on_follower_position(leader, 2, 3, 7, 2)  # the same position on the same logs: not read again
    assert reads == [0]
    # The follower's last batch replaced by one of another epoch, at the same log end: after the cut the
    # log is read again, and the position judged again and found not held.
    follower.log.replace_last(1)
    checker.on_log_cut()
    with pytest.raises(Violation, match="holds offset 2 in epoch 1, the leader's in epoch 2"):
        checker.on_follower_position(leader, 2, 3, 7, 2)
    assert reads == [0, 0]


@pytest.mark.timeout(10)
async def test_a_fetch_recorded_from_an_older_broker_epoch_than_the_leader_last_heard_fails_the_run() -> None:
    tp = TopicPartition("t0", 0)
    leader = SimpleNamespace(topic_partition=tp, local_broker_id=1, leader_epoch=2)
    checker = Checker(SimpleNamespace(brokers={}, controller=None), [tp], WriteHistory(), Trace(keep=True))
    checker.on_follower_fetch_recorded(leader, 2, 5, 7, 7)  # the incarnation it heard
    checker.on_follower_fetch_recorded(leader, 2, 5, 8, 7)  # a newer one: what KIP-903 records
    checker.on_follower_fetch_recorded(leader, 2, 5, 6, -1)  # not heard in this leadership
    checker.on_follower_fetch_recorded(leader, 2, 5, -1, 7)  # a fetch naming no broker epoch
    other = SimpleNamespace(topic_partition=TopicPartition("t1", 0), local_broker_id=1, leader_epoch=2)
    checker.on_follower_fetch_recorded(other, 2, 5, 6, 7)  # not a partition of this run
    with pytest.raises(Violation, match="recorded follower 2 at position 5 from a fetch at broker epoch 6, after"):
        checker.on_follower_fetch_recorded(leader, 2, 5, 6, 7)


# -- KAFKA-7164 and KIP-320 -------------------------------------------------------------------------------


def _truncate_only_on_a_leader_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant the rule before KAFKA-7164: a new epoch with the same leader does not restart the fetcher."""
    honest = Partition.make_follower

    def make_follower(self: Partition, state: Any) -> bool:
        same_leader = state.leader == self.leader_id
        return honest(self, state) and not same_leader

    monkeypatch.setattr(Partition, "make_follower", make_follower)


@pytest.mark.parametrize("truncation", ["fetch", "epoch"])
@pytest.mark.timeout(180)
def test_kafka_7164_a_follower_that_missed_an_epoch_truncates_when_told_of_the_next(truncation: str) -> None:
    result = run_scenario("kafka-7164", truncation=truncation)
    assert result.violation is None, result.violation
    assert result.converged
    steps = [e["what"] for e in result.timeline if e["event"] == "step"]
    assert any("hears only of epoch 2" in s for s in steps), steps


@pytest.mark.timeout(180)
def test_kafka_7164_truncating_only_on_a_leader_change_leaves_the_follower_fenced_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _truncate_only_on_a_leader_change(monkeypatch)
    result = run_scenario("kafka-7164")
    assert result.violation is not None and result.violation.check == "no_progress", result.violation


def _no_epoch_fencing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant the leader before KIP-320: a request naming an older leader epoch is served, not fenced."""
    monkeypatch.setattr(Partition, "check_current_leader_epoch", lambda self, requested_epoch: None)


@pytest.mark.timeout(180)
def test_kip320_a_leader_that_ignores_the_fetchers_leader_epoch_counts_a_diverged_follower_in_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _no_epoch_fencing(monkeypatch)
    result = run_scenario("kafka-7164", truncation="epoch")
    # r3, still at epoch 0, fetches from offset 1 with x at offset 0; the leader, at epoch 2 with y there,
    # counts it: named as it is counted
    assert result.violation is not None and result.violation.check == "follower_position_not_held"
    assert "counts follower 1 at position 1" in result.violation.message
    # the same run without the checks made at the leader's answer: the difference it leaves in the ISR
    monkeypatch.setattr(Checker, "on_follower_position", lambda *args: None)
    monkeypatch.setattr(Checker, "on_fetch_answered", lambda *args: None)
    result = run_scenario("kafka-7164", truncation="epoch")
    assert result.violation is not None and result.violation.check == "isr_member_missing_committed"
    assert "at offset 0" in result.violation.message


@pytest.mark.timeout(180)
def test_kip320_without_fencing_truncation_in_fetch_masks_the_harm_but_the_stale_answer_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With truncation in FETCH, r3's last fetched epoch (0) alone makes the leader answer a divergence, and
    # r3 truncates x: no log differs. The answer was still given to a fetch naming epoch 0 at epoch 2.
    _no_epoch_fencing(monkeypatch)
    result = run_scenario("kafka-7164", truncation="fetch")
    assert result.violation is not None and result.violation.check == "stale_epoch_served", result.violation
    assert "naming epoch 0 with a diverging epoch" in result.violation.message
    monkeypatch.setattr(Checker, "on_fetch_answered", lambda *args: None)
    masked = run_scenario("kafka-7164", truncation="fetch")
    assert masked.violation is None and masked.converged, masked.violation


def _no_fencing_of_newer_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a leader that answers a request naming a newer leader epoch than its own (it has not heard of
    that epoch yet) instead of UNKNOWN_LEADER_EPOCH; older epochs are still fenced."""
    from protocol.errors import FencedLeaderEpochError

    def only_older(self: Partition, requested_epoch: int) -> None:
        if 0 <= requested_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"{self.topic_partition}: epoch {requested_epoch} < {self.leader_epoch}")

    monkeypatch.setattr(Partition, "check_current_leader_epoch", only_older)


@pytest.mark.parametrize("truncation", ["fetch", "epoch"])
@pytest.mark.timeout(180)
def test_kip320_a_follower_told_of_a_new_epoch_waits_for_a_stale_leader_to_catch_up(truncation: str) -> None:
    result = run_scenario("kip320-stale-leader", truncation=truncation)
    assert result.violation is None, result.violation
    assert result.converged
    steps = [e["what"] for e in result.timeline if e["event"] == "step"]
    assert any("F hears of epoch 2 (leader L) while L is at epoch 0, holding x" in s for s in steps), steps
    assert any("leads at epoch 2 with LEO 2" in s for s in steps), steps  # m1 z: x truncated, z kept


@pytest.mark.parametrize("truncation", ["fetch", "epoch"])
@pytest.mark.timeout(180)
def test_kip320_a_stale_leader_that_answers_a_newer_epoch_gets_a_follower_counted_where_it_differs(
    monkeypatch: pytest.MonkeyPatch, truncation: str
) -> None:
    _no_fencing_of_newer_epochs(monkeypatch)
    result = run_scenario("kip320-stale-leader", truncation=truncation)
    assert result.violation is not None and result.violation.check == "follower_position_not_held", result.violation
    if truncation == "epoch":
        # F asked L, still at epoch 0, where its epoch 1 ends; L knew no such epoch, F truncated z to its HW
        # and fetched x from L; L then truncated x itself, following N, and leads at epoch 2 with z there
        assert "leader 3 (epoch 2) counts follower 1 at position 2" in result.violation.message
        assert "offset 1 in epoch 0, the leader's in epoch 1" in result.violation.message
    else:
        # F's fetch names its last epoch (1), which L does not know, and no divergence is answered: L, at
        # epoch 0, counts F at 2 though F holds z where L has x
        assert "leader 3 (epoch 0) counts follower 1 at position 2" in result.violation.message
        assert "offset 1 in epoch 1, the leader's in epoch 0" in result.violation.message


# The stale fetches of a sweep: a follower whose news of a new epoch (of the same leader) is still on the
# way fetches with the old one. Fenced, it waits for the news; served, it is counted a step behind, and
# nothing else differs.
STALE_EPOCH = SimOptions(
    duration_s=10.0, partitions=4, producers=2, rate=30.0, faults=("kill", "pause", "partition"), fault_rate=1.0
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("truncation", ["fetch", "epoch"])
def test_a_leader_without_epoch_fencing_is_found_within_10_seeds(
    monkeypatch: pytest.MonkeyPatch, truncation: str
) -> None:
    # Measured on both paths: of seeds 1..20, 1, 8 and 9 fail stale_epoch_served, the others pass; without
    # the check, 0 of 40 seeds (on each path, and 40 more with kill,restart,pause,partition,delay,drop and acks=1) fail:
    # no log, HW or ISR differs, so the consequence checks never fire in a sweep (kafka-7164 scripts it)
    _no_epoch_fencing(monkeypatch)
    options = replace(STALE_EPOCH, truncation=truncation)
    found = next(
        (r for seed in range(1, 11) if (r := run_seed(seed, options)).violation is not None),
        None,
    )
    assert found is not None, "10 seeds never caught a leader serving a fetch that names an older epoch"
    assert found.violation is not None and found.violation.check == "stale_epoch_served", found.violation
    assert "not FENCED_LEADER_EPOCH" in found.violation.message
    # Without the check, nothing else finds it as early. On the controller quorum seed 9 is the one found of
    # 1..10, on both paths; masked, it ends clean on the fetch path and stalls on the epoch path (no_progress,
    # 20 virtual s into its settle, 34.4 s against 12.7 s).
    monkeypatch.setattr(Checker, "on_fetch_answered", lambda *args: None)
    masked = run_seed(found.seed, options)
    assert masked.violation is None or masked.virtual_s > found.virtual_s + 10, (masked.violation, found.virtual_s)


@pytest.mark.timeout(300)
def test_the_unmodified_leaders_fence_every_stale_fetch_of_those_seeds() -> None:
    for seed in range(1, 11):
        result = run_seed(seed, replace(STALE_EPOCH, truncation="epoch"))
        assert result.violation is None, (seed, result.violation)


# -- KIP-903 ------------------------------------------------------------------------------------------------


def _no_broker_epoch_fencing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant the leader before KIP-903: a fetch from an earlier incarnation of the follower is recorded."""
    monkeypatch.setattr(Partition, "stale_replica_epoch", lambda self, replica_id, broker_epoch: None)


@pytest.mark.parametrize("truncation", ["fetch", "epoch"])
@pytest.mark.timeout(180)
def test_kip903_a_late_fetch_of_a_crashed_followers_earlier_incarnation_is_refused(truncation: str) -> None:
    result = run_scenario("kip903-late-fetch", truncation=truncation)
    assert result.violation is None, result.violation
    assert result.converged
    steps = [e["what"] for e in result.timeline if e["event"] == "step"]
    # F's new log ends at 1; the late fetch names 2 and L keeps counting F where its new fetch put it
    assert any(s.startswith("F (LEO 1) fetches at broker epoch") for s in steps), steps
    assert any("has reached L; L counts F at 1" in s for s in steps), steps


@pytest.mark.parametrize("truncation", ["fetch", "epoch"])
@pytest.mark.timeout(180)
def test_kip903_a_leader_that_records_the_late_fetch_is_named_as_it_records_it(
    monkeypatch: pytest.MonkeyPatch, truncation: str
) -> None:
    _no_broker_epoch_fencing(monkeypatch)
    result = run_scenario("kip903-late-fetch", truncation=truncation)
    assert result.violation is not None and result.violation.check == "stale_incarnation_recorded", result.violation
    assert "recorded follower 1 at position 2 from a fetch at broker epoch 1" in result.violation.message
    # Without the check no other fires: F is out of the ISR since it registered again, and the leader's
    # proposal to put it back on the late fetch names broker epoch 1, which the controller refuses
    # (INELIGIBLE_REPLICA); F's next fetches put its position back to 1, and it catches up.
    monkeypatch.setattr(Checker, "on_follower_fetch_recorded", lambda *args: None)
    masked = run_scenario("kip903-late-fetch", truncation=truncation)
    assert masked.violation is None and masked.converged, masked.violation


@pytest.mark.timeout(180)
def test_a_broker_stopped_while_its_heartbeat_is_answered_stops() -> None:
    # Seed 41 with every fault kind: broker 2's clean stop cancels its lifecycle manager while a heartbeat's
    # answer arrives. The controller channel's deadline (asyncio.wait_for, 3.11) swallowed the cancellation,
    # the manager heartbeated on, the stop never ended and the run stalled (no_progress, no settle); the
    # runner now cancels it again until it ends, and the run converges.
    options = replace(ALL_FAULTS, faults=KINDS)
    result = run_seed(41, options, keep_trace=True)
    assert result.violation is None, result.violation
    assert result.converged
    assert [e["node"] for e in _events(result, "stop")].count(2) >= 1
