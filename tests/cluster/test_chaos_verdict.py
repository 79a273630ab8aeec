"""The chaos verdict's split, on constructed journals, logs and claims: what the cluster lost (a batch a broker
acknowledged, missing or duplicated afterwards) apart from what the client claimed and no broker acknowledged."""

from __future__ import annotations

import pytest

from broker.produce_ack_journal import AckedBatch
from cluster.chaos_verdict import classify
from protocol.messages import TopicPartition
from protocol.record_batch import build_batch

pytestmark = pytest.mark.timeout(10)

TP = TopicPartition("chaos", 0)
TP1 = TopicPartition("chaos", 1)
TS = 1_700_000_000_000


def batch(base: int, *values: str, pid: int = -1, epoch: int = -1, seq: int = -1, ts: int = TS) -> bytes:
    return build_batch(
        [v.encode() for v in values],
        base_offset=base,
        timestamp_ms=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def acked(
    base: int, count: int, pid: int = -1, epoch: int = -1, seq: int = -1, *, tp: TopicPartition = TP, broker: int = 1,
    acks: int = -1, ts: int = TS,
) -> AckedBatch:  # fmt: skip
    return AckedBatch(broker, TS, tp.topic, tp.partition, base, count, pid, epoch, seq, ts, acks, 3)


def one_replica(
    log: bytes, tp: TopicPartition = TP
) -> tuple[dict[TopicPartition, dict[int, bytes]], dict[TopicPartition, int]]:
    return {tp: {1: log}}, {tp: 1}


def test_a_run_where_every_claim_was_acknowledged_and_kept_has_nothing_to_say() -> None:
    log = batch(0, "a", "b", pid=5, epoch=0, seq=0) + batch(2, "c", pid=5, epoch=0, seq=2)
    verdict = classify(
        {"a": (TP, 0), "b": (TP, 1), "c": (TP, 2)}, [acked(0, 2, 5, 0, 0), acked(2, 1, 5, 0, 2)], *one_replica(log)
    )
    assert verdict.acknowledged == {"a": (TP, 0), "b": (TP, 1), "c": (TP, 2)}
    assert verdict.acknowledged_batches == 2 and verdict.unclaimed == 0
    assert (verdict.lost, verdict.duplicated, verdict.unacknowledged, verdict.misplaced, verdict.resent) == (
        [],
        [],
        [],
        [],
        [],
    )


def test_an_acknowledged_batch_gone_from_the_log_is_the_clusters_loss_with_its_offsets_and_claimed_values() -> None:
    log = batch(0, "a", pid=5, epoch=0, seq=0)
    journal = [acked(0, 1, 5, 0, 0), acked(1, 2, 5, 0, 1, broker=2), acked(1, 2, 5, 0, 1, broker=3)]
    verdict = classify({"a": (TP, 0), "b": (TP, 1), "c": (TP, 2)}, journal, *one_replica(log))

    assert verdict.lost == [
        {
            "partition": "chaos-0",
            "offsets": [1, 2],
            "records": 2,
            "producer_id": 5,
            "producer_epoch": 0,
            "base_sequence": 1,
            "acknowledged_by": [2, 3],
            "leader_epoch": 3,
            "in_the_log_there": "nothing",
            "claimed_values": ["b", "c"],
        }
    ]
    assert verdict.lost_records == 2
    assert verdict.acknowledged_batches == 2  # the batch answered by two brokers is one promise


def test_an_acknowledged_batch_replaced_by_another_at_its_offsets_is_lost() -> None:
    # After a truncation the offsets hold a later batch: same place, another producer sequence.
    log = batch(0, "x", pid=5, epoch=1, seq=0)
    verdict = classify({"a": (TP, 0)}, [acked(0, 1, 5, 0, 0)], *one_replica(log))
    assert [(b["offsets"], b["in_the_log_there"]) for b in verdict.lost] == [([0, 0], "another batch")]
    # without a producer id the first timestamp tells two batches apart
    log = batch(0, "x", ts=TS + 7)
    assert len(classify({}, [acked(0, 1)], *one_replica(log)).lost) == 1
    assert classify({}, [acked(0, 1, ts=TS + 7)], *one_replica(log)).lost == []


def test_a_claim_no_broker_acknowledged_is_the_clients_not_the_clusters() -> None:
    # KafkaJS 2.2.4: send() resolved, the partition's records were never sent, no offset in the answer.
    log = batch(0, "a")
    claims = {"a": (TP, 0), "k1": (TP1, -1), "k2": (TP1, -1), "k3": (TP, 4)}
    verdict = classify(claims, [acked(0, 1)], *one_replica(log))

    assert verdict.lost == [] and verdict.duplicated == []
    assert [(c["value"], c["partition"], c["offset"], c["in_the_log_at"]) for c in verdict.unacknowledged] == [
        ("k1", "chaos-1", -1, []),
        ("k2", "chaos-1", -1, []),
        ("k3", "chaos-0", 4, []),
    ]
    assert verdict.report()["client"]["unacknowledged_by_partition"] == {
        "chaos-0": {"claims": 1, "offsets": [4, 4]},
        "chaos-1": {"claims": 2, "offsets": [-1, -1]},
    }


def test_a_claimed_value_that_is_in_the_log_but_was_never_acknowledged_is_an_unbacked_claim() -> None:
    log = batch(0, "a") + batch(1, "b")  # b was appended; its answer was an error (or never came)
    verdict = classify({"b": (TP, 1)}, [acked(0, 1)], *one_replica(log))
    assert [(c["value"], c["in_the_log_at"]) for c in verdict.unacknowledged] == [("b", [["chaos-0", 1]])]
    assert verdict.lost == []


def test_a_value_acknowledged_at_one_offset_and_claimed_at_another_is_misplaced_by_the_client() -> None:
    log = batch(0, "a", "b")
    verdict = classify({"b": (TP, 0)}, [acked(0, 2)], *one_replica(log))
    assert verdict.misplaced == [{"value": "b", "claimed_at": ["chaos-0", 0], "acknowledged_at": ["chaos-0", 1]}]
    assert verdict.unacknowledged == []


def test_an_acks_1_acknowledgement_is_no_promise_of_the_cluster() -> None:
    verdict = classify({}, [acked(0, 1, acks=1)], *one_replica(batch(0, "z")))
    assert verdict.lost == [] and verdict.acknowledged_batches == 0


def test_a_duplicate_under_one_producer_sequence_is_the_clusters_under_a_new_epoch_the_clients() -> None:
    same = batch(0, "a", pid=5, epoch=0, seq=0) + batch(1, "a", pid=5, epoch=0, seq=0)
    verdict = classify({"a": (TP, 0)}, [acked(0, 1, 5, 0, 0)], *one_replica(same))
    assert verdict.duplicated == [
        {"value": "a", "found_at": [["chaos-0", 0], ["chaos-0", 1]], "producer": [(5, 0, 0), (5, 0, 0)]}
    ]
    assert verdict.resent == []

    new_epoch = batch(0, "a", pid=5, epoch=0, seq=0) + batch(1, "a", pid=5, epoch=1, seq=0)
    verdict = classify({"a": (TP, 0)}, [acked(0, 1, 5, 0, 0), acked(1, 1, 5, 1, 0)], *one_replica(new_epoch))
    assert verdict.duplicated == [] and [r["producer"] for r in verdict.resent] == [[(5, 0, 0), (5, 1, 0)]]

    # a load that never sends a value twice (minibroker's own producer): any duplicate is the cluster's
    verdict = classify(
        {"a": (TP, 0)}, [acked(0, 1, 5, 0, 0), acked(1, 1, 5, 1, 0)], *one_replica(new_epoch), client_resends=False
    )
    assert len(verdict.duplicated) == 1 and verdict.resent == []


def test_a_claim_answered_as_the_duplicate_of_another_record_says_what_its_offset_holds() -> None:
    # The client sent "b" under the producer sequence "a" was written with; the broker answers such a batch as
    # the duplicate it is by its sequence, at a's offset, and the client took that answer for b.
    log = batch(0, "a", pid=5, epoch=0, seq=0)
    journal = [acked(0, 1, 5, 0, 0), acked(0, 1, 5, 0, 0)]
    verdict = classify({"a": (TP, 0), "b": (TP, 0)}, journal, *one_replica(log))
    assert [(c["value"], c["offset"], c["offset_holds"]) for c in verdict.unacknowledged] == [("b", 0, "a")]
    assert verdict.lost == [] and verdict.misplaced == []


def test_an_acknowledged_record_the_client_reported_failed_is_counted_as_unclaimed_not_as_a_claim() -> None:
    # KafkaJS rejects a whole send() when one broker's part fails, though another broker acknowledged its part.
    verdict = classify({"a": (TP, 0)}, [acked(0, 2)], *one_replica(batch(0, "a", "b")))
    assert verdict.unclaimed == 1 and verdict.unacknowledged == [] and verdict.lost == []
