"""The chaos report as people read it."""

from __future__ import annotations

from cluster.chaos import render_report


def test_the_chaos_report_rounds_latencies_for_people() -> None:
    report = {
        "valid": True,
        "rounds": 1,
        "acked": 10,
        "failed": 0,
        "indeterminate": 0,
        "throughput_records_s": 100,
        "ack_latency_ms": {"p50": 2.5910100000601233, "p99": 17.04999},
        "failover_ms": {"p50": 812.3333, "p99": None},
        "lost_writes": 0,
        "duplicates": 0,
        "inconsistent_offsets": 0,
        "divergent_replicas": 0,
        "nonmonotonic": 0,
        "converged": True,
        "kills": [
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
    }
    text = render_report(report)
    assert "ack latency ms: p50 2.6  p99 17.0  failover ms: p50 812.3  p99 None" in text
    assert "no leader for 1234.6 ms; failover 1500.0 ms; ISR full after 2000.2 ms" in text
