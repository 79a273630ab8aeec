"""DelayedFetch in the real fetch purgatory (L10–L12): parked FETCHes on a leader with real logs, completed by
appends, HW moves, role changes, truncation, accumulated bytes, or their max wait on a manual clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.messages import CONSUMER_REPLICA_ID, TopicPartition
from tests.broker.leader_fixtures import (
    FOLLOWER_ID,
    LOCAL_ID,
    TP0,
    TP1,
    LeaderBroker,
    batch,
    by_partition,
    outcome,
    still_parked,
    values_of,
)

MAX_WAIT_MS = 500


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LeaderBroker]:
    b = LeaderBroker(tmp_path / "broker-0", purge_interval=10)
    yield b
    b.close()


async def test_fetch_with_nothing_to_read_answers_empty_exactly_at_its_max_wait(broker: LeaderBroker) -> None:
    # given a leader with 2 records and a follower fetching at the LEO, willing to wait 500 ms
    broker.make_leader()
    await broker.produce(TP0, b"a", b"b")
    task = await broker.start_fetch(FOLLOWER_ID, {TP0: 2}, max_wait_ms=MAX_WAIT_MS)
    assert broker.fetch_purgatory.num_delayed == 1

    # when 499 ms pass, then it is still waiting
    broker.advance(MAX_WAIT_MS - 1)
    assert await still_parked(task)

    # when the 500th ms passes, then it answers NONE with no records and the current HW
    broker.advance(1)
    [response] = await outcome(task)
    assert (response.error_code, response.records, response.high_watermark) == (ErrorCode.NONE, b"", 2)
    assert broker.fetch_purgatory.num_delayed == 0
    assert broker.replica_manager.stats.delayed_fetch_expirations == 1


async def test_produce_during_the_wait_answers_the_fetch_at_once_with_the_new_data(broker: LeaderBroker) -> None:
    # given a follower fetch parked at the LEO
    broker.make_leader()
    task = await broker.start_fetch(FOLLOWER_ID, {TP0: 0}, max_wait_ms=MAX_WAIT_MS)
    broker.advance(100)
    assert await still_parked(task)

    # when a producer appends, then the fetch completes now, carrying the record, without expiring
    await broker.produce(TP0, b"hello")
    [response] = await outcome(task)
    assert values_of(response.records) == [(0, b"hello")]
    assert broker.replica_manager.stats.delayed_fetch_expirations == 0


async def test_consumer_fetch_waits_for_the_high_watermark_not_the_log_end(broker: LeaderBroker) -> None:
    # given a consumer fetch parked at the HW (0) of a leader whose ISR follower has not fetched
    broker.make_leader()
    task = await broker.start_fetch(CONSUMER_REPLICA_ID, {TP0: 0}, max_wait_ms=MAX_WAIT_MS)

    # when a producer appends, the data is not committed yet: the consumer keeps waiting
    await broker.produce(TP0, b"a")
    assert await still_parked(task)

    # when the follower's fetch moves the HW past it, then the consumer gets the committed record
    await broker.follower_fetch(1)
    [response] = await outcome(task)
    assert (values_of(response.records), response.high_watermark) == ([(0, b"a")], 1)


async def test_follower_fetch_is_not_completed_just_to_carry_a_new_high_watermark(broker: LeaderBroker) -> None:
    # given follower 1 parked at the LEO after replicating everything, and the HW then moving (acks from 2)
    broker.make_leader(isr=[LOCAL_ID, FOLLOWER_ID, 2], replicas=[LOCAL_ID, FOLLOWER_ID, 2])
    await broker.produce(TP0, b"a")
    await broker.follower_fetch(1, replica_id=FOLLOWER_ID)
    task = await broker.start_fetch(FOLLOWER_ID, {TP0: 1}, max_wait_ms=MAX_WAIT_MS)
    await broker.follower_fetch(1, replica_id=2)
    assert broker.partition().high_watermark == 1

    # then the parked fetch still waits: no forced HW propagation (KAFKA-9952); it learns the HW at expiry
    assert await still_parked(task)
    broker.advance(MAX_WAIT_MS)
    [response] = await outcome(task)
    assert (response.records, response.high_watermark) == (b"", 1)


@pytest.mark.parametrize(
    ("fetch_epoch", "expected"),
    [(-1, ErrorCode.NOT_LEADER_OR_FOLLOWER), (1, ErrorCode.FENCED_LEADER_EPOCH)],
    ids=["old-client-without-epoch", "client-with-the-old-epoch"],
)
async def test_becoming_follower_completes_a_waiting_consumer_fetch_with_an_error(
    broker: LeaderBroker, fetch_epoch: int, expected: ErrorCode
) -> None:
    # given a consumer fetch waiting on the leader at epoch 1
    broker.make_leader(leader_epoch=1)
    task = await broker.start_fetch(
        CONSUMER_REPLICA_ID, {TP0: 0}, max_wait_ms=MAX_WAIT_MS, current_leader_epoch=fetch_epoch
    )
    assert await still_parked(task)

    # when the controller makes broker 1 the leader at epoch 2
    broker.make_follower(leader=FOLLOWER_ID, leader_epoch=2)

    # then the fetch answers at once: NOT_LEADER_OR_FOLLOWER, or FENCED_LEADER_EPOCH if it named epoch 1
    [response] = await outcome(task)
    assert (response.error_code, response.records) == (expected, b"")
    assert broker.fetch_purgatory.num_delayed == 0


async def test_re_election_with_a_new_epoch_fences_a_follower_fetch_of_the_old_one(broker: LeaderBroker) -> None:
    # given a follower fetch at epoch 1 parked on this leader
    broker.make_leader(leader_epoch=1)
    task = await broker.start_fetch(FOLLOWER_ID, {TP0: 0}, max_wait_ms=MAX_WAIT_MS, current_leader_epoch=1)
    # when this broker is re-elected at epoch 2
    broker.make_leader(leader_epoch=2)
    # then the old-epoch fetch is fenced at once
    [response] = await outcome(task)
    assert response.error_code == ErrorCode.FENCED_LEADER_EPOCH


async def test_truncation_below_the_fetch_offset_completes_the_fetch(broker: LeaderBroker) -> None:
    # given a follower fetch parked at the LEO 3 of a leader
    partition = broker.make_leader(isr=[LOCAL_ID])
    await broker.produce(TP0, b"a")
    await broker.produce(TP0, b"b", b"c")
    task = await broker.start_fetch(FOLLOWER_ID, {TP0: 3}, max_wait_ms=MAX_WAIT_MS, min_bytes=1 << 20)

    # when the log is cut back to 1 (a leader that lost its tail) and the purgatory is checked
    partition.log.truncate_to(1)  # type: ignore[attr-defined]
    broker.fetch_purgatory.check_and_complete(TP0)

    # then the fetch answers now, and what it answers tells the follower its offset is gone
    [response] = await outcome(task)
    assert response.error_code == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_bytes_readable_across_partitions_add_up_to_min_bytes(broker: LeaderBroker) -> None:
    # given a follower fetch on two partitions that needs as many bytes as two one-record batches
    broker.make_leader(TP0)
    broker.make_leader(TP1)
    one_batch = len(batch(b"x"))
    task = await broker.start_fetch(FOLLOWER_ID, {TP0: 0, TP1: 0}, max_wait_ms=MAX_WAIT_MS, min_bytes=2 * one_batch)

    # when one batch arrives on tp0, then it is not enough
    await broker.produce(TP0, b"x")
    assert await still_parked(task)

    # when one arrives on tp1, then the two together are: it answers with both
    await broker.produce(TP1, b"y")
    responses = by_partition(await outcome(task))
    assert values_of(responses[TP0].records) == [(0, b"x")]
    assert values_of(responses[TP1].records) == [(0, b"y")]


async def test_bytes_count_toward_min_bytes_only_up_to_each_partitions_max_bytes(broker: LeaderBroker) -> None:
    # given a fetch on tp0 capped at 10 bytes per partition that needs 11 bytes
    broker.make_leader(TP0)
    task = await broker.start_fetch(
        FOLLOWER_ID, {TP0: 0}, max_wait_ms=MAX_WAIT_MS, min_bytes=11, partition_max_bytes=10
    )
    # when a much larger batch arrives, then only 10 of its bytes count: still waiting
    await broker.produce(TP0, b"x" * 100)
    assert await still_parked(task)
    # and at expiry it gets that first batch anyway (KIP-74)
    broker.advance(MAX_WAIT_MS)
    [response] = await outcome(task)
    assert values_of(response.records) == [(0, b"x" * 100)]


async def test_completion_reads_the_log_as_it_is_then_not_as_it_was_when_parked(broker: LeaderBroker) -> None:
    # given a follower fetch parked at 0 needing more than the batches to come
    broker.make_leader()
    task = await broker.start_fetch(FOLLOWER_ID, {TP0: 0}, max_wait_ms=MAX_WAIT_MS, min_bytes=1 << 20)

    # when two batches arrive (each re-checks the fetch, neither is enough) and then the wait runs out
    await broker.produce(TP0, b"a")
    await broker.produce(TP0, b"b")
    assert await still_parked(task)
    broker.advance(MAX_WAIT_MS)

    # then the response holds everything in the log at completion time
    [response] = await outcome(task)
    assert values_of(response.records) == [(0, b"a"), (1, b"b")]


async def test_data_on_a_newer_segment_completes_the_fetch_whatever_min_bytes_says(broker: LeaderBroker) -> None:
    # given a follower fetch parked at the LEO 1 needing 1 MiB
    partition = broker.make_leader()
    await broker.produce(TP0, b"a")
    task = await broker.start_fetch(FOLLOWER_ID, {TP0: 1}, max_wait_ms=MAX_WAIT_MS, min_bytes=1 << 20)

    # when the log rolls a new (empty) segment at the same offset, the LEO did not move: still waiting
    partition.log.roll()  # type: ignore[attr-defined]
    broker.fetch_purgatory.check_and_complete(TP0)
    assert await still_parked(task)

    # when a small batch lands on the new segment, then it completes (the end is on a newer segment)
    await broker.produce(TP0, b"b")
    [response] = await outcome(task)
    assert values_of(response.records) == [(1, b"b")]


async def test_follower_progress_is_recorded_again_when_its_parked_fetch_completes(broker: LeaderBroker) -> None:
    # given a follower that fetched at the LEO (caught up now) and parked there
    broker.make_leader()
    await broker.produce(TP0, b"a")
    task = await broker.start_fetch(FOLLOWER_ID, {TP0: 1}, max_wait_ms=MAX_WAIT_MS)
    parked_at_ms = broker.now_ms

    # when new data arrives 300 ms later and completes the fetch
    broker.advance(300)
    await broker.produce(TP0, b"b")
    await outcome(task)

    # then the follower counts as caught up as of its parked fetch (it had the LEO of that moment)
    replica = broker.partition().remote_replicas[FOLLOWER_ID]
    assert replica.last_caught_up_time_ms == parked_at_ms
    assert replica.last_fetch_time_ms == broker.now_ms


async def test_watch_lists_are_purged_of_completed_fetches(broker: LeaderBroker) -> None:
    # given fetches parked on tp0 and tp1 (purge interval 10), each completed through tp0 only
    broker.make_leader(TP0)
    broker.make_leader(TP1)
    for i in range(30):
        offset = broker.partition(TP0).log_end_offset
        task = await broker.start_fetch(FOLLOWER_ID, {TP0: offset, TP1: 0}, max_wait_ms=MAX_WAIT_MS)
        await broker.produce(TP0, b"%d" % i)
        await outcome(task)
    # then tp0's list is empty, but tp1's still holds the 30 completed fetches
    assert broker.fetch_purgatory.num_delayed == 0
    assert broker.fetch_purgatory.watched == 30

    # when the reaper's periodic purge runs, then the completed ones are gone
    assert broker.fetch_purgatory.maybe_purge() == 30
    assert broker.fetch_purgatory.watched == 0
    assert broker.fetch_purgatory.watch_keys() == []


async def test_expired_fetches_do_not_pile_up_in_the_watch_lists(broker: LeaderBroker) -> None:
    # given 25 fetches that each wait out their max wait (purge interval 10)
    broker.make_leader(TP0)
    for _ in range(25):
        task = await broker.start_fetch(FOLLOWER_ID, {TP0: 0}, max_wait_ms=MAX_WAIT_MS)
        broker.advance(MAX_WAIT_MS)
        await outcome(task)
        broker.fetch_purgatory.maybe_purge()  # what the reaper does after each timer advance
    # then the watch list never holds more than one purge interval's worth of finished fetches
    assert broker.fetch_purgatory.watched <= 11
    assert broker.replica_manager.stats.delayed_fetch_expirations == 25


async def test_fetch_that_can_answer_now_never_enters_the_purgatory(broker: LeaderBroker) -> None:
    broker.make_leader()
    await broker.produce(TP0, b"a")
    # enough bytes, an error, or no wait allowed: each answers at once (L10)
    ready = await broker.fetch(FOLLOWER_ID, {TP0: 0}, max_wait_ms=MAX_WAIT_MS)
    error = await broker.fetch(FOLLOWER_ID, {TP0: 0, TopicPartition("nope", 0): 0}, max_wait_ms=MAX_WAIT_MS)
    no_wait = await broker.fetch(FOLLOWER_ID, {TP0: 1}, max_wait_ms=0)
    assert values_of(ready[TP0].records) == [(0, b"a")]
    assert error[TopicPartition("nope", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert no_wait[TP0].records == b""
    assert broker.fetch_purgatory.watched == 0 and broker.fetch_purgatory.num_delayed == 0


async def test_a_parked_fetch_whose_client_went_away_leaves_the_purgatory_at_once(broker: LeaderBroker) -> None:
    import asyncio

    # given fetches parked for a very long time (a deadline days away), and an acks=all produce waiting
    broker.make_leader()
    tasks = [await broker.start_fetch(CONSUMER_REPLICA_ID, {TP0: 0}, max_wait_ms=2**31 - 1) for _ in range(50)]
    produce = await broker.start_produce({TP0: [b"a"]})
    assert broker.fetch_purgatory.num_delayed == 50
    assert broker.produce_purgatory.num_delayed == 1

    # when their connections close (the server cancels what the connection had in flight)
    for task in [*tasks, produce]:
        task.cancel()
    await asyncio.gather(*tasks, produce, return_exceptions=True)

    # then nothing waits in the timers any more, and the watch lists drop them at the next purge
    assert broker.fetch_purgatory.num_delayed == 0
    assert broker.produce_purgatory.num_delayed == 0
    broker.fetch_purgatory.purge_completed()
    assert broker.fetch_purgatory.watched == 0


async def test_a_follower_whose_log_diverges_is_answered_at_once_not_parked(broker: LeaderBroker) -> None:
    # given a leader whose epoch 1 ends at 2, then epoch 3 (offsets 2, 3)
    broker.make_leader(leader_epoch=1)
    await broker.produce(TP0, b"a", b"b")
    broker.make_leader(leader_epoch=3)
    await broker.produce(TP0, b"c", b"d")
    # when a follower that holds epoch 2 up to offset 4 fetches at its log end, willing to wait
    task = await broker.start_fetch(
        FOLLOWER_ID, {TP0: 4}, max_wait_ms=MAX_WAIT_MS, current_leader_epoch=3, last_fetched_epoch=2
    )
    # then the answer comes now, with no records, and says our epoch 1 ends at 2: it must cut there
    assert broker.fetch_purgatory.num_delayed == 0
    [response] = await outcome(task)
    assert (response.error_code, response.records) == (ErrorCode.NONE, b"")
    assert (response.diverging_epoch, response.diverging_end_offset) == (1, 2)


async def test_a_parked_follower_fetch_completes_when_its_last_epoch_stops_matching(broker: LeaderBroker) -> None:
    # given a follower fetch parked at the LEO 4 of a leader at epoch 1, naming epoch 1 as its last
    partition = broker.make_leader(isr=[LOCAL_ID], leader_epoch=1)
    await broker.produce(TP0, b"a", b"b")
    await broker.produce(TP0, b"c", b"d")
    task = await broker.start_fetch(FOLLOWER_ID, {TP0: 4}, max_wait_ms=MAX_WAIT_MS, last_fetched_epoch=1)
    assert broker.fetch_purgatory.num_delayed == 1
    # when the leader's log loses offsets 2..3 and gets two records of epoch 3 in their place (the log end
    # is 4 again, so no other completion rule applies) and the purgatory is checked
    partition.log.truncate_to(2)  # type: ignore[attr-defined]
    partition.log.append_as_leader(batch(b"x", b"y"), leader_epoch=3)  # type: ignore[attr-defined]
    broker.fetch_purgatory.check_and_complete(TP0)
    # then the fetch completes (L11 case H) and tells the follower its epoch 1 ends at 2 here
    [response] = await outcome(task)
    assert (response.diverging_epoch, response.diverging_end_offset) == (1, 2)
    assert response.records == b""
