"""DelayedProduce (acks=all) in the real produce purgatory: waits for the HW to pass what it wrote, or for
its timeout, or for leadership to move; min.insync.replicas is checked before and after the append."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.messages import TopicPartition
from tests.broker.leader_fixtures import (
    FOLLOWER_ID,
    LOCAL_ID,
    OTHER_FOLLOWER_ID,
    TP0,
    TP1,
    LeaderBroker,
    outcome,
    still_parked,
)

TIMEOUT_MS = 1000
THREE = [LOCAL_ID, FOLLOWER_ID, OTHER_FOLLOWER_ID]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LeaderBroker]:
    b = LeaderBroker(tmp_path / "broker-0", min_insync_replicas=2, replica_lag_time_max_ms=100)
    yield b
    b.close()


async def test_acks_all_is_answered_when_the_followers_move_the_high_watermark_past_the_batch(
    broker: LeaderBroker,
) -> None:
    # given a leader with ISR {0, 1, 2} and 1 committed record
    broker.make_leader(isr=THREE, replicas=THREE)
    await broker.produce(TP0, b"old")
    await broker.follower_fetch(1, replica_id=FOLLOWER_ID)
    await broker.follower_fetch(1, replica_id=OTHER_FOLLOWER_ID)

    # when a producer writes 2 records with acks=all
    task = await broker.start_produce({TP0: [b"a", b"b"]}, timeout_ms=TIMEOUT_MS)
    assert broker.partition().log_end_offset == 3
    assert broker.produce_purgatory.num_delayed == 1

    # then one follower catching up is not enough, nor is the other reaching only part of it
    await broker.follower_fetch(3, replica_id=FOLLOWER_ID)
    await broker.follower_fetch(2, replica_id=OTHER_FOLLOWER_ID)
    assert broker.partition().high_watermark == 2
    assert await still_parked(task)

    # when the second follower's fetch shows it has both records, then the produce is acknowledged
    await broker.follower_fetch(3, replica_id=OTHER_FOLLOWER_ID)
    [response] = await outcome(task)
    assert (response.error_code, response.base_offset) == (ErrorCode.NONE, 1)
    assert broker.produce_purgatory.num_delayed == 0


async def test_acks_all_times_out_with_the_records_still_in_the_leader_log(broker: LeaderBroker) -> None:
    # given a produce waiting on a follower that does not fetch
    broker.make_leader()
    task = await broker.start_produce({TP0: [b"a"]}, timeout_ms=TIMEOUT_MS)
    broker.advance(TIMEOUT_MS - 1)
    assert await still_parked(task)

    # when its timeout passes, then REQUEST_TIMED_OUT: indeterminate, the record is written but not committed
    broker.advance(1)
    [response] = await outcome(task)
    assert response.error_code == ErrorCode.REQUEST_TIMED_OUT
    assert (broker.partition().log_end_offset, broker.partition().high_watermark) == (1, 0)
    assert broker.replica_manager.stats.delayed_produce_expirations == 1


async def test_acks_all_below_min_insync_replicas_is_refused_before_anything_is_written(
    broker: LeaderBroker,
) -> None:
    # given a leader alone in its ISR with min.insync.replicas = 2
    broker.make_leader(isr=[LOCAL_ID])
    # when a producer sends acks=all, then NOT_ENOUGH_REPLICAS and the log is untouched
    task = await broker.start_produce({TP0: [b"a"]})
    [response] = await outcome(task)
    assert response.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert broker.partition().log_end_offset == 0
    # while acks=1 is still accepted
    assert (await broker.produce(TP0, b"a", acks=1)).error_code == ErrorCode.NONE


async def test_isr_shrinking_below_min_insync_while_waiting_answers_not_enough_replicas_after_append(
    broker: LeaderBroker,
) -> None:
    # given an acks=all produce waiting on follower 1, which then stops fetching
    broker.make_leader()
    task = await broker.start_produce({TP0: [b"a"]}, timeout_ms=TIMEOUT_MS)
    broker.advance(150)

    # when the ISR shrinks to the leader, the HW jumps past the record
    assert broker.replica_manager.maybe_shrink_isr() == 1
    assert broker.partition().high_watermark == 1

    # then the produce answers NOT_ENOUGH_REPLICAS_AFTER_APPEND: written (and committed by the smaller
    # ISR) but not as durable as asked. It must not read as "not written", or a retry would duplicate it.
    [response] = await outcome(task)
    assert response.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert broker.partition().log_end_offset == 1


async def test_becoming_follower_answers_waiting_produce_as_indeterminate_and_fetch_with_not_leader(
    broker: LeaderBroker,
) -> None:
    # given an acks=all produce and a consumer fetch both waiting on the leader
    broker.make_leader(leader_epoch=1)
    produce = await broker.start_produce({TP0: [b"a"]}, timeout_ms=TIMEOUT_MS)
    fetch = await broker.start_fetch(-1, {TP0: 0}, max_wait_ms=TIMEOUT_MS)
    assert await still_parked(produce) and await still_parked(fetch)

    # when broker 1 becomes leader at epoch 2 (testClearPurgatoryOnBecomingFollower)
    broker.make_follower(leader=FOLLOWER_ID, leader_epoch=2)

    # then both answer at once: the produce with NOT_ENOUGH_REPLICAS_AFTER_APPEND (it is in our log and
    # may survive on the new leader, so a retry could duplicate it), the fetch with NOT_LEADER_OR_FOLLOWER
    [produced] = await outcome(produce)
    [fetched] = await outcome(fetch)
    assert produced.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert "leadership moved" in (produced.error_message or "")
    assert fetched.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert broker.produce_purgatory.num_delayed == 0 and broker.fetch_purgatory.num_delayed == 0


async def test_multi_partition_produce_waits_only_for_the_partitions_that_were_written(
    broker: LeaderBroker,
) -> None:
    # given tp0 with a healthy ISR, tp1 led here but alone in its ISR, and a partition nobody hosts
    broker.make_leader(TP0)
    broker.make_leader(TP1, isr=[LOCAL_ID])
    nowhere = TopicPartition("nope", 0)

    # when one acks=all request writes to all three
    task = await broker.start_produce({TP0: [b"a"], TP1: [b"b"], nowhere: [b"c"]}, timeout_ms=TIMEOUT_MS)
    assert await still_parked(task)

    # then after tp0's follower catches up, the answers are per partition
    await broker.follower_fetch(1, tp=TP0)
    responses = {TopicPartition(r.topic, r.partition): r.error_code for r in await outcome(task)}
    assert responses == {
        TP0: ErrorCode.NONE,
        TP1: ErrorCode.NOT_ENOUGH_REPLICAS,
        nowhere: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert broker.partition(TP1).log_end_offset == 0


async def test_acks_all_completes_at_once_when_the_isr_already_has_the_data(tmp_path: Path) -> None:
    # given a leader alone in its ISR with min.insync.replicas = 1
    broker = LeaderBroker(tmp_path / "broker-0")
    try:
        broker.make_leader(isr=[LOCAL_ID])
        # when it is sent acks=all, then it is answered without parking
        task = await broker.start_produce({TP0: [b"a"]})
        [response] = await outcome(task)
        assert (response.error_code, response.base_offset) == (ErrorCode.NONE, 0)
        assert broker.produce_purgatory.watched == 0
    finally:
        broker.close()
