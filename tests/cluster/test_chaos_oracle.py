"""The chaos oracle must catch every kind of anomaly it reports on, and nothing on a clean run."""

from __future__ import annotations

from cluster.chaos import find_problems
from protocol.messages import TopicPartition
from protocol.record_batch import build_batch

TP = TopicPartition("chaos", 0)


def log_of(*batches: list[bytes], epoch: int = 0) -> bytes:
    out = b""
    offset = 0
    for values in batches:
        out += build_batch(values, base_offset=offset, partition_leader_epoch=epoch, timestamp_ms=1)  # type: ignore[arg-type]
        offset += len(values)
    return out


def test_a_clean_run_has_no_problems() -> None:
    data = log_of([b"a", b"b"], [b"c"])
    problems = find_problems({"a": (TP, 0), "b": (TP, 1), "c": (TP, 2)}, {TP: {1: data, 2: data, 3: data}}, {TP: 1})
    assert problems == {"lost": [], "duplicates": [], "inconsistent": [], "divergent": []}


def test_an_acked_value_missing_everywhere_is_a_lost_write() -> None:
    data = log_of([b"a"])
    problems = find_problems({"a": (TP, 0), "b": (TP, 1)}, {TP: {1: data}}, {TP: 1})
    assert [p["value"] for p in problems["lost"]] == ["b"]


def test_a_value_at_two_offsets_is_a_duplicate() -> None:
    data = log_of([b"a"], [b"a"])
    problems = find_problems({"a": (TP, 0)}, {TP: {1: data}}, {TP: 1})
    assert problems["duplicates"] == [{"value": "a", "found_at": [["chaos-0", 0], ["chaos-0", 1]]}]


def test_an_acked_value_at_another_offset_is_inconsistent() -> None:
    data = log_of([b"x", b"a"])
    problems = find_problems({"a": (TP, 0)}, {TP: {1: data}}, {TP: 1})
    assert problems["inconsistent"][0]["acked_at"] == ["chaos-0", 0]
    assert problems["lost"] == []


def test_replicas_that_differ_are_divergent_and_name_the_offset() -> None:
    leader = log_of([b"a", b"b"])
    follower = log_of([b"a", b"z"])
    problems = find_problems({"a": (TP, 0)}, {TP: {1: leader, 2: follower}}, {TP: 1})
    assert problems["divergent"] == [
        {"partition": "chaos-0", "broker": 2, "bytes": len(follower), "leader_bytes": len(leader)}
    ]
    assert problems["inconsistent"] == [
        {"partition": "chaos-0", "offset": 1, "broker": 2, "kind": "two values at one offset"}
    ]


def test_same_records_with_a_different_epoch_stamp_still_diverge() -> None:
    problems = find_problems({}, {TP: {1: log_of([b"a"], epoch=1), 2: log_of([b"a"], epoch=2)}}, {TP: 1})
    assert len(problems["divergent"]) == 1
