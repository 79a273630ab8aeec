"""What a controller fault's DESCRIBE_QUORUM samples say: when an active controller was back, whether the
leader changed, how long a cut-off leader kept calling itself one; and how the report shows it."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from cluster.chaos_faults import parse_faults, render_fault_report
from cluster.chaos_quorum import QuorumAnswer, QuorumWatch, controller_pairs, summarize
from cluster.local_cluster import LocalClusterState, ProcessInfo
from tests.cluster.test_chaos_report import _verdict

OLD = QuorumAnswer(0.0, 3000, True, 3000, 4)  # the active controller before the fault, at t=0
FAULT_AT, HEALED_AT = 1.0, 4.0


def watch(*answers: tuple[float, int, bool, int, int]) -> QuorumWatch:
    """A watch holding these (time, voter, leading, leader named, epoch) answers, in any order."""
    w = QuorumWatch([])
    w.answers = [OLD, *(QuorumAnswer(*a) for a in answers)]
    return w


def test_after_a_kill_the_controller_is_back_when_another_voter_answers_as_leader() -> None:
    w = watch(
        (1.02, 3001, False, 3000, 4),  # still names the dead leader
        (1.30, 3002, False, -1, 5),  # a candidate
        (1.41, 3002, True, 3002, 5),
        (1.42, 3001, False, 3002, 5),
    )
    out = w.outage(OLD, FAULT_AT, HEALED_AT, reachable=False)
    assert out.no_active_controller_ms == 410.0
    assert (out.new_leader, out.new_epoch, out.leader_changed, out.epoch_bumped) == (3002, 5, True, True)
    assert out.old_leader_resigned_after_ms is None and out.stale_leader_ms == 0.0


def test_a_pause_too_short_for_an_election_ends_when_the_same_leader_answers_after_the_heal() -> None:
    # Its answers queued while it was stopped come after the heal; one sent before the fault does not count.
    w = watch((0.99, 3000, True, 3000, 4), (4.05, 3000, True, 3000, 4))
    out = w.outage(OLD, FAULT_AT, HEALED_AT, reachable=True)
    assert out.no_active_controller_ms == 3050.0
    assert (out.new_leader, out.leader_changed, out.epoch_bumped) == (3000, False, False)
    assert out.old_leader_resigned_after_ms is None


def test_a_leader_cut_from_the_voters_leads_nothing_though_it_answers_as_leader_until_it_resigns() -> None:
    w = watch(
        (1.5, 3000, True, 3000, 4),  # cut off, it still answers as leader: no active controller for that
        (3.3, 3001, True, 3001, 5),  # the other two elect a leader of a newer epoch
        (3.9, 3000, True, 3000, 4),  # two voters calling themselves leader, in different epochs
        (4.5, 3000, False, 3000, 4),  # check quorum: it resigned
    )
    out = w.outage(OLD, FAULT_AT, HEALED_AT, reachable=True)
    assert out.no_active_controller_ms == 2300.0
    assert (out.new_leader, out.new_epoch, out.leader_changed) == (3001, 5, True)
    assert out.old_leader_resigned_after_ms == 3500.0
    assert out.stale_leader_ms == 600.0


def test_no_leader_again_is_unresolved_not_a_time() -> None:
    out = watch((2.0, 3001, False, -1, 5)).outage(OLD, FAULT_AT, HEALED_AT, reachable=False)
    assert out.no_active_controller_ms is None and out.new_leader is None
    summary = summarize([asdict(out), asdict(watch((1.2, 3001, True, 3001, 5)).outage(OLD, 1.0, 1.5, False))])
    assert summary == {
        "faults": 2,
        "no_active_controller_ms": {"total": 200.0, "max": 200.0, "p50": 200.0, "p99": 200.0},
        "unresolved": 1,
        "leader_changes": 1,
    }


def test_the_quorum_is_whole_once_the_leader_sees_every_voter_at_its_high_watermark() -> None:
    w = QuorumWatch([])
    w.answers = [QuorumAnswer(4.2, 3001, True, 3001, 5, voters_caught_up=False)]
    assert w.quorum_whole(HEALED_AT) is None
    w.answers.append(QuorumAnswer(4.7, 3001, True, 3001, 5, voters_caught_up=True))
    assert w.outage(OLD, FAULT_AT, HEALED_AT, reachable=False).quorum_whole_after_heal_ms == 700.0


def _node(role: str, node_id: int, host: str) -> ProcessInfo:
    return ProcessInfo(role, node_id, host, 9092, 0, "", "", "")


def test_the_controller_partitions_cut_the_active_controller_from_the_voters_and_maybe_the_brokers() -> None:
    state = LocalClusterState(
        "",
        [_node("controller", 3000 + i, f"127.1.0.{10 - i}") for i in range(3)],
        [_node("broker", i, f"127.1.0.{10 + i}") for i in (1, 2, 3)],
    )
    from_voters = controller_pairs(state, 3001, "active-controller-from-voters")
    assert sorted(from_voters) == sorted(
        [(a, b) for o in ("127.1.0.10", "127.1.0.8") for a, b in (("127.1.0.9", o), (o, "127.1.0.9"))]
    )
    isolated = controller_pairs(state, 3001, "isolate-active-controller")
    assert set(from_voters) < set(isolated) and len(isolated) == 2 * 5
    assert ("127.1.0.9", "127.1.0.11") in isolated and ("127.1.0.13", "127.1.0.9") in isolated


def test_controller_faults_mix_with_broker_faults_and_take_only_their_own_shapes() -> None:
    assert parse_faults("kill,kill-controller,pause-controller,partition,partition:isolate-active-controller") == [
        ("kill", None),
        ("kill-controller", None),
        ("pause-controller", None),
        ("partition", None),
        ("partition", "isolate-active-controller"),
    ]
    with pytest.raises(ValueError, match="unknown partition shape 'active-controller'"):
        parse_faults("partition:active-controller")
    with pytest.raises(ValueError, match="unknown partition shape 'isolate-leader'"):
        parse_faults("kill-controller:isolate-leader")


def _report(faults: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return _verdict(
        rounds=len(faults),
        ack_latency_ms={"p50": 6.91, "p99": 274.66},
        failover_ms={"p50": None, "p99": None},
        acks1={"acked": 0, "lost": 0, "classified": ""},
        faults=faults,
        **extra,
    )


def test_the_report_gives_each_controller_round_its_outage_and_the_total() -> None:
    out = watch((1.41, 3002, True, 3002, 5)).outage(OLD, FAULT_AT, HEALED_AT, reachable=False)
    fault = {
        "round": 2,
        "kind": "kill-controller",
        "shape": None,
        "target": 3000,
        "led_partitions": 0,
        "no_leader_ms": {"chaos-0": 0.0, "chaos-1": 0.0},
        "healed_after_ms": 520.2,
        "isr_full_after_heal_ms": 0.0,
        "acks_all_failed_ms": 35.5,
        "truncations": 0,
        "zombie": None,
        "acks1": None,
        "controller": asdict(out),
    }
    text = render_fault_report(_report([fault], controller_faults=summarize([asdict(out)])))
    assert (
        "round 2: kill-controller on controller 3000 (active, epoch 4): healed after 520.2 ms, ISR full 0.0 ms "
        "later; no active controller for 410.0 ms, then 3002 at epoch 5 (leader changed); partitions without a "
        "leader max 0.0 ms; acks=all stalled 35.5 ms" in text
    )
    assert (
        "time without an active controller over 1 controller faults: total 410.0 ms, p50 410.0, p99 410.0, "
        "max 410.0; leader changed 1 times" in text
    )
