"""What random sweeps used to miss (issue 40, item 3): each planted bug here is caught, and the real code passes.

The bugs are planted in the tests only (a monkeypatched method of the real class, undone after the test):
a leader that records a fetch of an earlier incarnation (KIP-903), one that serves an older epoch
(KIP-320), a truncation that keeps the producer state of the batches it cut, ISR expansions against
Kafka's rule, and a follower that never rejoins the ISR.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from broker.partition import Partition
from broker.replica import Replica
from controller.replication_control_manager import ReplicationControlManager
from protocol.errors import ErrorCode
from protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from sim import runner
from sim.checker import Checker
from sim.cli import main as sim_main
from sim.cluster import SimOptions
from sim.loop import VirtualTimeLoop
from sim.network import LinkShape, SimNetwork, SimTransport
from sim.runner import run_seed
from sim.scenarios import run_scenario
from storage.log import Log
from storage.producer_state import ProducerStateEntry

# -- KIP-903: a restart while the old incarnation's FETCH is on a slow link ----------------------------------

BOUNCES = SimOptions(duration_s=6.0, partitions=2, producers=1, rate=20.0, faults=("bounce",), fault_rate=1.0)


def test_a_restarted_nodes_requests_do_not_wait_behind_its_earlier_incarnations() -> None:
    # A restarted process opens new connections: what the old one sent on a slow link still arrives, late,
    # but does not hold up the new one's requests (which a TCP connection's order would).
    loop = VirtualTimeLoop()
    arrived: list[float] = []

    async def main() -> None:
        net = SimNetwork(random.Random(1), base_delay_ms=1.0, base_jitter_ms=0.0)

        async def handler(ctx: Any, header: Any, request: Any) -> ApiVersionsResponse:
            arrived.append(asyncio.get_running_loop().time())
            return ApiVersionsResponse()

        net.bring_up(1, handler)
        net.bring_up(2, None)
        net.shapes[(2, 1)] = LinkShape(1000.0, 0.0)
        old = asyncio.ensure_future(SimTransport(net, 2).send(1, ApiVersionsRequest()))
        await asyncio.sleep(0.01)
        net.take_down(2)
        net.bring_up(2, None)
        del net.shapes[(2, 1)]
        await SimTransport(net, 2).send(1, ApiVersionsRequest())
        with pytest.raises(ConnectionResetError):
            await old  # its answer goes nowhere: the incarnation that asked is gone

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert [round(t, 3) for t in arrived] == [0.011, 1.0]  # the new incarnation's first


@pytest.mark.timeout(120)
def test_kip903_bounces_bring_a_late_fetch_of_an_earlier_incarnation(monkeypatch: pytest.MonkeyPatch) -> None:
    for seed in range(1, 4):
        result = run_seed(seed, BOUNCES)
        assert result.ok and result.converged, (seed, result.violation)
        assert result.faults_injected.get("bounce", 0) > 0
    # Planted: the leader records a fetch of an earlier incarnation (Partition.stale_replica_epoch off).
    monkeypatch.setattr(Partition, "stale_replica_epoch", lambda self, replica_id, broker_epoch: None)
    caught = [run_seed(seed, BOUNCES).violation for seed in range(1, 4)]
    assert [v.check if v else None for v in caught] == ["stale_incarnation_recorded"] * 3, caught


# -- KIP-320: the fenced branch (an older epoch) ---------------------------------------------------------------


def _no_fencing_of_older_epochs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a leader that serves a request naming an older leader epoch than its own instead of answering
    FENCED_LEADER_EPOCH; newer epochs are still UNKNOWN_LEADER_EPOCH."""
    real = Partition.check_current_leader_epoch

    def only_newer(self: Partition, requested_epoch: int) -> None:
        if 0 <= requested_epoch < self.leader_epoch:
            return
        real(self, requested_epoch)

    monkeypatch.setattr(Partition, "check_current_leader_epoch", only_newer)


@pytest.mark.parametrize("truncation", ["fetch", "epoch"])
@pytest.mark.timeout(120)
def test_kip320_a_late_fetch_from_before_a_replica_was_removed_is_fenced(
    monkeypatch: pytest.MonkeyPatch, truncation: str
) -> None:
    result = run_scenario("kip320-removed-replica", truncation=truncation)
    assert result.ok and result.converged, result.violation
    steps = [e["what"] for e in result.timeline if e["event"] == "step"]
    assert any(s.startswith("R taken out: L leads at epoch 1") for s in steps), steps
    assert any(s.startswith("L dies; R leads with LEO 3") for s in steps), steps
    # Without the fence the late FETCH is served: the check at the answer names it...
    _no_fencing_of_older_epochs(monkeypatch)
    served = run_scenario("kip320-removed-replica", truncation=truncation)
    assert served.violation is not None and served.violation.check == "stale_epoch_served", served.violation
    assert "naming epoch 0" in served.violation.message
    # ...and the harm it prevents: L counts R, empty, at 3 and puts it in the ISR; L dies and R, elected,
    # has none of the three acknowledged writes. On both paths: the FETCH's last fetched epoch (0) ends at 3
    # in L's log too, so truncation in FETCH sees no divergence.
    monkeypatch.setattr(Checker, "on_fetch_answered", lambda *args: None)
    harmed = run_scenario("kip320-removed-replica", truncation=truncation)
    assert harmed.violation is not None and harmed.violation.check == "acked_write_lost", harmed.violation
    steps = [e["what"] for e in harmed.timeline if e["event"] == "step"]
    assert any(s.endswith("R in the ISR, counted at 3 with LEO 0") for s in steps), steps


# -- producer state across truncation ------------------------------------------------------------------------

IDEMPOTENT = SimOptions(
    duration_s=10.0, partitions=3, idempotence=True, faults=("kill", "pause", "partition"), fault_rate=1.0
)


def _stale_producer_state_after_truncation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a truncation that keeps the producer state of the batches it cut (no rebuild after a cut; the
    rebuild when a log is opened, with an empty state, still runs)."""
    real = Log._rebuild_producer_state

    def stale(self: Log) -> None:
        if not self.producer_state.producers:
            real(self)

    monkeypatch.setattr(Log, "_rebuild_producer_state", stale)


@pytest.mark.timeout(120)
def test_producer_state_is_judged_against_the_log_after_every_truncation(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_seed(2, IDEMPOTENT).ok
    _stale_producer_state_after_truncation(monkeypatch)
    result = run_seed(2, IDEMPOTENT)
    assert result.violation is not None and result.violation.check == "producer_state_differs", result.violation
    # judged at the truncation itself, with what differs
    assert "in its producer state but" in result.violation.message
    cut = [e for e in result.timeline if e["event"] == "truncate"][-1]
    assert result.violation.message.startswith(f"{cut['tp']} on broker {cut['node']} (log end {cut['leo']})")


@pytest.mark.timeout(60)
def test_producer_state_is_judged_on_every_replica_at_the_end_of_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # A state no truncation touches: a follower that once takes in a producer no batch of its log names.
    options = SimOptions(duration_s=5.0, partitions=1, producers=1, rate=10.0, idempotence=True)
    assert run_seed(1, options).ok
    real = Log.append_as_follower

    def phantom(self: Log, *args: Any, **kwargs: Any) -> Any:
        info = real(self, *args, **kwargs)
        if self.log_end_offset >= 10 and 999 not in self.producer_state.producers:
            self.producer_state.producers[999] = ProducerStateEntry(999, 0)
        return info

    monkeypatch.setattr(Log, "append_as_follower", phantom)
    result = run_seed(1, options)
    assert result.violation is not None and result.violation.check == "producer_state_differs", result.violation
    assert "producer 999 is epoch 0, last batches [] in its producer state but absent" in result.violation.message


# -- ISR expansion: Kafka's Partition.maybeExpandIsr ------------------------------------------------------------


def _expand_isr_without(rule: str) -> Any:
    """Partition.maybe_expand_isr with one of its conditions left out."""

    def maybe_expand_isr(self: Partition, replica: Replica, now_ms: int) -> None:
        if (rule != "pending" and self.pending_isr is not None) or replica.broker_id in self.isr:
            return
        if rule != "eligible" and not self.is_broker_eligible(replica.broker_id):
            return
        position = replica.log_end_offset
        if (rule == "hw" or position >= self.high_watermark) and (
            rule == "epoch-start" or position >= self.leader_epoch_start_offset
        ):
            self._propose_isr(self.isr | {replica.broker_id}, "expand", replica.broker_id)

    return maybe_expand_isr


@pytest.mark.parametrize("truncation", ["fetch", "epoch"])
@pytest.mark.timeout(120)
def test_isr_expansion_follows_kafkas_rule_case_by_case(truncation: str) -> None:
    result = run_scenario("isr-expansion", truncation=truncation)
    assert result.ok and result.converged, result.violation
    steps = [e["what"] for e in result.timeline if e["event"] == "step"]
    assert sum(1 for s in steps if s[:2] in ("1:", "2:", "3:", "4:")) == 8, steps
    assert any("B elected at epoch 1 from offset 8 with HW 4" in s for s in steps), steps
    assert any(s.startswith("3: F fenced") and s.endswith("ISR [2, 3]") for s in steps), steps
    assert any(s.startswith("4: A proposed") and s.endswith("ISR [2]") for s in steps), steps


@pytest.mark.parametrize(
    ("rule", "broken"),
    [
        ("hw", "1 is at 2, below the HW 4"),
        ("epoch-start", "1 is at 4, below the start offset 8 of epoch 1"),
        ("eligible", "its metadata lists 1 as fenced or shutting down"),
        ("pending", "was still pending"),
    ],
)
@pytest.mark.timeout(120)
def test_an_isr_expansion_against_the_rule_is_named_as_it_is_proposed(
    monkeypatch: pytest.MonkeyPatch, rule: str, broken: str
) -> None:
    monkeypatch.setattr(Partition, "maybe_expand_isr", _expand_isr_without(rule))
    result = run_scenario("isr-expansion")
    assert result.violation is not None and result.violation.check == "isr_expansion_against_rule", result.violation
    assert result.violation.message.endswith(broken), result.violation.message


@pytest.mark.timeout(120)
def test_an_isr_the_controller_grows_with_a_fenced_broker_is_named_as_it_is_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Planted on both sides: a leader that proposes a fenced follower, and a controller that accepts it.
    monkeypatch.setattr(Partition, "maybe_expand_isr", _expand_isr_without("eligible"))
    real = ReplicationControlManager._alter_partition_error

    def accepts_fenced(self: ReplicationControlManager, *args: Any, **kwargs: Any) -> Any:
        error = real(self, *args, **kwargs)
        if error is not None and error[0] == ErrorCode.INELIGIBLE_REPLICA and "fenced or shutting down" in error[1]:
            return None
        return error

    monkeypatch.setattr(ReplicationControlManager, "_alter_partition_error", accepts_fenced)
    monkeypatch.setattr(Checker, "on_isr_change_proposed", lambda *args: None)
    result = run_scenario("isr-expansion")
    assert result.violation is not None and result.violation.check == "isr_expansion_against_rule", result.violation
    assert "the controller put [1] in the ISR" in result.violation.message
    assert result.violation.message.endswith("fenced or shutting down")


# -- liveness under the limit -------------------------------------------------------------------------------

NEVER_REJOINS = SimOptions(duration_s=6.0, partitions=2, producers=1, rate=20.0, faults=("kill",), fault_rate=1.0)


@pytest.mark.timeout(120)
def test_a_run_that_ends_unconverged_fails_whatever_its_longest_stall(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    healthy = run_seed(1, NEVER_REJOINS)
    assert healthy.ok and healthy.converged
    # Planted: a follower never rejoins the ISR; the stall limit out of the way, as when a run keeps moving.
    monkeypatch.setattr(Partition, "maybe_expand_isr", lambda self, replica, now_ms: None)
    monkeypatch.setattr(runner, "NO_PROGRESS_S", 1000.0)
    result = run_seed(1, NEVER_REJOINS)
    assert result.violation is not None and result.violation.check == "not_converged", result.violation
    assert not result.converged
    assert "is not its assignment" in result.violation.message
    argv = ["--duration", "6", "--partitions", "2", "--producers", "1", "--rate", "20", "--faults", "kill"]
    assert sim_main(["--seed", "1", *argv, "--fault-rate", "1.0"]) == 1
    line = capsys.readouterr().out.splitlines()[0]
    assert "VIOLATION not_converged" in line and " unconverged " in line, line


def test_the_summary_line_says_whether_the_run_converged(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["--seed", "1", "--duration", "5", "--partitions", "1", "--producers", "1", "--rate", "5"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.split()[2:4] == ["ok", "converged"], line


# -- shrink on a budget --------------------------------------------------------------------------------------


def _broken_hw(self: Partition, now_ms: int) -> bool:
    """Planted: the leader's HW follows its own log end, whatever its ISR holds."""
    if not self.is_leader:
        return False
    return bool(self.log.maybe_increment_high_watermark(self.log_end_offset))


@pytest.mark.timeout(240)
def test_a_shrink_out_of_budget_prints_the_best_schedule_so_far(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(Partition, "maybe_increment_leader_hw", _broken_hw)
    argv = ["--duration", "6", "--partitions", "2", "--producers", "1", "--rate", "30", "--faults", "kill,pause"]
    argv += ["--fault-rate", "1.0"]
    seed = next(s for s in range(1, 20) if sim_main(["--seed", str(s), *argv]) == 1)
    capsys.readouterr()
    assert sim_main(["--seed", str(seed), *argv, "--shrink", "--shrink-budget", "0"]) == 1
    out = capsys.readouterr().out
    assert "before the shrink budget of 0 s ran out (--shrink-budget): the best so far" in out
    replay = out.split("replay the smallest found:\n")[1].strip()
    assert "--schedule" in replay
    assert sim_main(["--seed", str(seed), *argv, "--shrink", "--shrink-budget", "600", "--json"]) == 1
    assert '"finished": true' in capsys.readouterr().out
