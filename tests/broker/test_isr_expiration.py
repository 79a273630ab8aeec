"""ISR expiration (L5, L8) as Kafka's IsrExpirationTest and PartitionTest check it, with
replica.lag.time.max.ms = 100 and real follower fetches against a leader on a real log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.leader_fixtures import (
    FOLLOWER_ID,
    LOCAL_ID,
    TP0,
    LeaderBroker,
    RecordingIsrSink,
    outcome,
    still_parked,
    values_of,
)

LAG_MS = 100


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LeaderBroker]:
    b = LeaderBroker(tmp_path / "broker-0", replica_lag_time_max_ms=LAG_MS)
    yield b
    b.close()


async def leader_with_records(broker: LeaderBroker, count: int) -> None:
    """A leader at epoch 1 with ISR {0, 1} and `count` single-record batches (HW 0: follower never fetched)."""
    broker.make_leader()
    for i in range(count):
        await broker.produce(TP0, b"r%d" % i)


# -- L5: when a follower counts as caught up ------------------------------------------------------------


async def test_last_caught_up_time_moves_only_when_a_fetch_reaches_the_log_end(broker: LeaderBroker) -> None:
    # given a leader with 6 records; on election the ISR follower counts as caught up now
    await leader_with_records(broker, 6)
    elected_ms = broker.now_ms
    replica = broker.partition().remote_replicas[FOLLOWER_ID]
    assert (replica.last_caught_up_time_ms, replica.log_end_offset) == (elected_ms, -1)

    # when it fetches at 3 (LEO - 3) 500 ms later, its LEO is 3 but it was not caught up
    broker.advance(500)
    await broker.follower_fetch(3, log_start_offset=0)
    assert (replica.last_caught_up_time_ms, replica.log_end_offset, replica.log_start_offset) == (elected_ms, 3, 0)

    # when it fetches at the LEO 500 ms later, it is caught up as of that fetch
    broker.advance(500)
    await broker.follower_fetch(6, log_start_offset=2)
    assert (replica.last_caught_up_time_ms, replica.log_end_offset, replica.log_start_offset) == (
        broker.now_ms,
        6,
        2,
    )


async def test_follower_that_reaches_the_previous_log_end_each_time_stays_in_sync(broker: LeaderBroker) -> None:
    # given a leader with 10 records and a follower that fetched at the LEO
    await leader_with_records(broker, 10)
    await broker.follower_fetch(10)
    # when new data keeps arriving between its fetches, so each fetch reaches only the LEO of the one before
    for _ in range(5):
        previous_log_end = broker.partition().log_end_offset
        await broker.produce(TP0, b"more")
        broker.advance(60)
        await broker.follower_fetch(previous_log_end)
        # then it was caught up as of its previous fetch, 60 ms ago, and survives every expiration round
        replica = broker.partition().remote_replicas[FOLLOWER_ID]
        assert replica.last_caught_up_time_ms == broker.now_ms - 60
        assert broker.replica_manager.maybe_shrink_isr() == 0
    assert broker.partition().isr == {LOCAL_ID, FOLLOWER_ID}


# -- L8: IsrExpirationTest ---------------------------------------------------------------------------------


async def test_stuck_follower_leaves_the_isr_after_the_lag_time(broker: LeaderBroker) -> None:
    # given a leader with 15 records and a follower that fetched at LEO - 1
    await leader_with_records(broker, 15)
    await broker.follower_fetch(14)
    assert broker.replica_manager.maybe_shrink_isr() == 0

    # when it stays silent for 150 ms (lag time 100 ms)
    broker.advance(150)

    # then it is out of sync, the ISR shrinks to the leader, and the HW jumps to the leader's LEO
    assert broker.partition().out_of_sync_replicas(broker.now_ms) == {FOLLOWER_ID}
    assert broker.replica_manager.maybe_shrink_isr() == 1
    partition = broker.partition()
    assert partition.isr == {LOCAL_ID}
    assert partition.high_watermark == partition.log_end_offset == 15
    assert partition.counters.isr_shrinks == 1


async def test_follower_that_never_fetches_leaves_the_isr(broker: LeaderBroker) -> None:
    # given a leader with 15 records whose ISR follower never fetched (HW held at 0)
    await leader_with_records(broker, 15)
    assert broker.partition().high_watermark == 0
    # when 100 ms pass it is still within the lag time
    broker.advance(LAG_MS)
    assert broker.replica_manager.maybe_shrink_isr() == 0
    # when 150 ms pass, then it is out, and the HW is the leader's LEO
    broker.advance(50)
    assert broker.replica_manager.maybe_shrink_isr() == 1
    assert broker.partition().isr == {LOCAL_ID}
    assert broker.partition().high_watermark == 15


async def test_slow_follower_leaves_the_isr_and_returns_once_it_reaches_the_log_end(broker: LeaderBroker) -> None:
    # given a leader with 15 records (elected at t0, so the follower counts as caught up at t0)
    await leader_with_records(broker, 15)
    # when the follower fetches 75 ms apart but never reaches the LEO nor the LEO of its previous fetch
    await broker.follower_fetch(13)
    broker.advance(75)
    await broker.produce(TP0, b"r15")
    await broker.follower_fetch(14)
    # then at 75 ms it is still within the lag time
    assert broker.replica_manager.maybe_shrink_isr() == 0
    broker.advance(75)
    await broker.follower_fetch(15)  # the LEO is 16 now, and was 16 at its previous fetch
    # then at 150 ms it is out of sync
    assert broker.replica_manager.maybe_shrink_isr() == 1
    partition = broker.partition()
    assert partition.isr == {LOCAL_ID}
    assert partition.high_watermark == 16

    # when it finally fetches at the LEO, it is back in the ISR
    await broker.follower_fetch(16)
    assert partition.isr == {LOCAL_ID, FOLLOWER_ID}
    assert partition.counters.isr_expands == 1


async def test_caught_up_follower_stays_in_the_isr_however_long_it_is_idle(broker: LeaderBroker) -> None:
    # given a follower that fetched at the LEO of 15 records
    await leader_with_records(broker, 15)
    await broker.follower_fetch(15)
    # when nothing happens for 150 ms, and then for a whole minute
    broker.advance(150)
    assert broker.replica_manager.maybe_shrink_isr() == 0
    broker.advance(60_000)
    # then it is still in sync: its LEO equals the leader's
    assert broker.replica_manager.maybe_shrink_isr() == 0
    assert broker.partition().isr == {LOCAL_ID, FOLLOWER_ID}
    assert broker.partition().high_watermark == 15


async def test_shrink_waits_for_the_controller_before_the_high_watermark_moves(tmp_path: Path) -> None:
    # given a leader whose ISR changes go to the controller, and a stuck follower
    sink = RecordingIsrSink()
    broker = LeaderBroker(tmp_path / "broker-0", replica_lag_time_max_ms=LAG_MS, isr_sink=sink)
    try:
        await leader_with_records(broker, 5)
        await broker.follower_fetch(2)
        broker.advance(150)

        # when the expiration task runs twice before the controller answers
        assert broker.replica_manager.maybe_shrink_isr() == 1
        assert broker.replica_manager.maybe_shrink_isr() == 0
        # then one shrink was proposed, and the HW still counts the follower (KIP-497: maximal ISR)
        assert sink.proposals == [(TP0, frozenset({LOCAL_ID}))]
        partition = broker.partition()
        assert partition.isr == {LOCAL_ID, FOLLOWER_ID}
        assert partition.high_watermark == 2

        # when the controller commits the shrink, then the HW jumps to the leader's LEO
        broker.replica_manager.on_isr_committed(TP0, 1, [LOCAL_ID], partition.partition_epoch + 1)
        assert partition.isr == {LOCAL_ID}
        assert partition.high_watermark == 5
    finally:
        broker.close()


async def test_commit_for_an_older_leadership_is_ignored(tmp_path: Path) -> None:
    # given a shrink proposed at epoch 1, after which this broker was re-elected at epoch 2
    sink = RecordingIsrSink()
    broker = LeaderBroker(tmp_path / "broker-0", replica_lag_time_max_ms=LAG_MS, isr_sink=sink)
    try:
        await leader_with_records(broker, 5)
        broker.advance(150)
        assert broker.replica_manager.maybe_shrink_isr() == 1
        partition = broker.make_leader(leader_epoch=2)
        # when the controller's answer for epoch 1 arrives, then the ISR of epoch 2 stands
        broker.replica_manager.on_isr_committed(TP0, 1, [LOCAL_ID], 9)
        assert partition.isr == {LOCAL_ID, FOLLOWER_ID}
        assert partition.partition_epoch != 9
    finally:
        broker.close()


async def test_shrink_that_moves_the_high_watermark_answers_a_waiting_consumer(broker: LeaderBroker) -> None:
    # given 3 records held back by a stuck follower, and a consumer waiting at the HW
    await leader_with_records(broker, 3)
    await broker.follower_fetch(1)
    task = await broker.start_fetch(-1, {TP0: 1}, max_wait_ms=10_000)
    broker.advance(150)
    assert await still_parked(task)

    # when the expiration task drops the follower, then the consumer gets what is now committed
    assert broker.replica_manager.maybe_shrink_isr() == 1
    [response] = await outcome(task)
    assert [offset for offset, _ in values_of(response.records)] == [1, 2]
    assert response.high_watermark == 3
