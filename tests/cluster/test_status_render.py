"""`cluster status`'s text: the partition rows line up whatever the topic names' lengths."""

from __future__ import annotations

from typing import Any

import pytest

from cluster.status import render_status


def _partition(topic: str, partition: int, leader: int) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "leader": leader,
        "leader_epoch": 0,
        "isr": [leader],
        "replicas": [{"broker_id": leader, "log_end_offset": 5, "high_watermark": 5, "lag": 0}],
    }


@pytest.mark.timeout(5)
def test_partition_rows_line_up_across_topic_names_of_different_lengths() -> None:
    # given a remote cluster's status with a short and a long topic name
    status: dict[str, Any] = {
        "bootstrap_server": "127.0.0.1:9092",
        "controller": {"id": 3000, "pid": None, "address": None, "alive": True},
        "brokers": [],
        "partitions": [_partition("t1", 0, 1), _partition("a-long-topic", 12, 2)],
    }
    # when rendered
    rows = [line for line in render_status(status).splitlines() if " leader " in line]
    # then both rows name their partition and the leader column starts at the same place
    assert [r.split()[0] for r in rows] == ["t1-0", "a-long-topic-12"]
    assert len({r.index(" leader ") for r in rows}) == 1
    assert rows[0].startswith("t1-0" + " " * (len("a-long-topic-12") - len("t1-0")) + "  leader")
