"""The chaos report as people read it."""

from __future__ import annotations

from typing import Any

from cluster.chaos import render_report
from cluster.chaos_faults import render_fault_report


def _verdict(**fields: Any) -> dict[str, Any]:
    """The fields both reports share: one round, a valid verdict, nothing lost."""
    return {
        "valid": True,
        "rounds": 1,
        "acked": 10,
        "failed": 0,
        "indeterminate": 0,
        "throughput_records_s": 100,
        "lost_writes": 0,
        "duplicates": 0,
        "inconsistent_offsets": 0,
        "divergent_replicas": 0,
        "nonmonotonic": 0,
        "converged": True,
        **fields,
    }


def test_the_chaos_report_rounds_latencies_for_people() -> None:
    report = _verdict(
        ack_latency_ms={"p50": 2.5910100000601233, "p99": 17.04999},
        failover_ms={"p50": 812.3333, "p99": None},
        kills=[
            {
                "round": 1,
                "broker_id": 2,
                "led_partitions": 3,
                "new_leaders": [1, 3],
                "new_epochs": [1, 1],
                "time_without_leader_ms": 1234.5678,
                "failover_ms": 1500.04,
                "restarted": True,
                "isr_full_after_ms": 2000.25,
                "follower_truncations": 1,
            }
        ],
    )
    text = render_report(report)
    assert "ack latency ms: p50 2.6  p99 17.0  failover ms: p50 812.3  p99 –" in text
    assert "no leader for 1234.6 ms; failover 1500.0 ms; ISR full after 2000.2 ms" in text


def test_the_fault_report_gives_each_rounds_figures_and_no_leader_kill_failover_line() -> None:
    report = _verdict(
        idempotent=True,
        resent_indeterminate_batches=2,
        producer_epoch_bumps=0,
        ack_latency_ms={"p50": 6.91, "p99": 274.66},
        failover_ms={"p50": None, "p99": None},
        acks1={"acked": 0, "lost": 0, "classified": {}},
        faults=[
            {
                "round": 1,
                "kind": "delay",
                "shape": None,
                "target": 1,
                "led_partitions": 4,
                "no_leader_ms": {},
                "healed_after_ms": 4022.3,
                "isr_full_after_heal_ms": 0.0,
                "acks_all_failed_ms": 336.0,
                "truncations": 0,
                "zombie": None,
                "acks1": None,
            }
        ],
    )
    text = render_fault_report(report)
    assert "ack latency ms: p50 6.9  p99 274.7\n" in text
    assert "failover ms" not in text and "None" not in text
    assert "round 1: delay on broker 1 (led 4): healed after 4022.3 ms" in text
