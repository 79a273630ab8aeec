"""Fetching after truncation: data, HW and log start, errors, stale answers, fairness, backoff, sessions."""

from __future__ import annotations

import asyncio

import pytest

from broker.replication_quota import ReplicationQuotaManager
from fetcher.partition_fetch_state import ReplicaState
from fetcher.replica_fetcher import FetcherConfig
from protocol.errors import ErrorCode, KafkaStorageError
from protocol.messages import INITIAL_EPOCH, INVALID_SESSION_ID, TopicPartition
from server_common.time import ManualTime
from tests.fetcher.harness import Harness, single
from tests.fetcher.memory_log import MemoryLog

T0 = TopicPartition("topic", 0)
T1 = TopicPartition("topic", 1)


async def test_one_round_replicates_a_batch_and_the_high_watermark() -> None:
    h = Harness()
    follower = h.follower_log(T0)
    h.leader_log(T0, [(2, 0)], leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.fetcher.do_work()
    assert (follower.log_end_offset, follower.high_watermark) == (2, 2)
    assert h.in_step(T0)


async def test_every_fetch_carries_the_followers_current_broker_epoch() -> None:
    # KIP-903: the leader tells a late fetch of an earlier incarnation from the current ones by this epoch,
    # read when each request is built (a broker re-registers with a new one after it was fenced)
    h = Harness(broker_epoch=7)
    h.follower_log(T0)
    h.leader_log(T0, single(0, 3), leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.fetcher.do_work()
    h.broker_epoch = 9
    await h.fetcher.do_work()
    assert [r.replica_epoch for r in h.leader.fetch_requests] == [7, 9]


async def test_follower_high_watermark_is_the_leaders_capped_at_its_own_end() -> None:
    h = Harness()
    follower = h.follower_log(T0)
    h.leader_log(T0, single(0, 3), leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.fetcher.do_work()  # one batch per fetch
    assert (follower.log_end_offset, follower.high_watermark) == (1, 1)
    await h.run_until(lambda: h.in_step(T0))
    assert follower.high_watermark == 3


async def test_log_start_follows_the_leader() -> None:
    h = Harness()
    follower = h.follower_log(T0)
    leader = h.leader_log(T0, single(0, 4), leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.run_until(lambda: h.in_step(T0))
    leader.delete_records_before(2)
    await h.fetcher.do_work()
    assert follower.log_start_offset == 2
    assert h.in_step(T0)


async def test_first_batch_straddling_the_leaders_log_start_restarts_an_empty_log_at_its_base() -> None:
    # given a leader whose log start (1) falls inside its first batch [0..2]
    h = Harness()
    follower = h.follower_log(T0)
    leader = h.leader_log(T0, [(3, 0), (3, 0)], leader_epoch=0)
    leader.delete_records_before(1)
    h.add(T0, leader_epoch=0)
    await h.run_until(lambda: h.in_step(T0))
    # then the follower reset to 1, restarted at the batch base 0, and appended the leader's batch whole
    assert follower.full_truncations == [1, 0]
    assert follower.log_start_offset == 1


async def test_offset_out_of_range_high_truncates_to_the_leaders_end() -> None:
    h = Harness()
    follower = h.follower_log(T0)
    h.leader_log(T0, single(0, 3), leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.run_until(lambda: h.in_step(T0))
    # when the leader's log is wiped without an epoch change (unclean election)
    h.leader.set_partition(T0, MemoryLog(T0), leader_epoch=0)
    await h.run_until(lambda: follower.log_end_offset == 0)
    assert (follower.log_start_offset, follower.high_watermark) == (0, 0)
    assert h.state(T0).fetch_offset == 0 and h.state(T0).state is ReplicaState.FETCHING


async def test_offset_out_of_range_low_restarts_the_log_at_the_leaders_start() -> None:
    h = Harness()
    follower = h.follower_log(T0, [(1, 0)], high_watermark=1)
    leader = h.leader_log(T0, single(0, 5), leader_epoch=0)
    leader.delete_records_before(2)
    h.add(T0, leader_epoch=0)
    await h.run_until(lambda: h.in_step(T0))
    assert follower.full_truncations == [2]
    assert h.leader.earliest_offset_count == 1


async def test_fenced_list_offsets_during_an_offset_reset_fails_the_partition() -> None:
    h = Harness()
    follower = h.follower_log(T0)
    leader = h.leader_log(T0, single(0, 2), leader_epoch=0)
    leader.delete_records_before(1)
    h.leader.earliest_offset_errors[T0].append(ErrorCode.FENCED_LEADER_EPOCH)
    h.add(T0, leader_epoch=0)
    await h.run_until(lambda: T0 in h.fetcher.failed_partitions)
    assert h.leader.earliest_offset_count == 1
    assert h.fetcher.fetch_state(T0) is None
    assert follower.log_end_offset == 0


async def test_fenced_list_offsets_after_the_epoch_moved_on_is_retried_not_failed() -> None:
    h = Harness()
    h.follower_log(T0)
    leader = h.leader_log(T0, single(0, 2), leader_epoch=0)
    leader.delete_records_before(1)

    async def bump(_: object) -> None:
        if h.leader.latest_offset_count == 1:
            h.leader.bump_epoch(T0, 1)
            h.add(T0, leader_epoch=1, init_offset=0)  # the broker moved us on while we asked

    h.leader.before_list_offsets = bump
    h.add(T0, leader_epoch=0)
    await h.run_until(lambda: h.in_step(T0))
    assert h.fetcher.failed_partitions == frozenset()


async def test_unknown_leader_epoch_on_list_offsets_is_retried() -> None:
    h = Harness()
    h.follower_log(T0)
    leader = h.leader_log(T0, single(0, 3), leader_epoch=0)
    leader.delete_records_before(1)
    h.leader.latest_offset_errors[T0].append(ErrorCode.UNKNOWN_LEADER_EPOCH)
    h.add(T0, leader_epoch=0)
    await h.run_until(lambda: h.in_step(T0))
    assert h.leader.latest_offset_count == 2
    assert h.fetcher.failed_partitions == frozenset()


async def test_corrupt_batch_is_discarded_and_fetched_again() -> None:
    h = Harness()
    follower = h.follower_log(T0)
    h.leader_log(T0, [(2, 0)], leader_epoch=0)
    h.leader.corrupt_next_fetch.add(T0)
    h.add(T0, leader_epoch=0)
    await h.fetcher.do_work()
    assert follower.log_end_offset == 0
    assert h.state(T0).is_delayed(h.time.milliseconds())
    await h.run_until(lambda: follower.log_end_offset == 2)
    assert h.in_step(T0) and h.fetcher.failed_partitions == frozenset()


async def test_fenced_fetch_fails_the_partition() -> None:
    h = Harness()
    h.follower_log(T0)
    h.leader_log(T0, [(2, 0)], leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.run_until(lambda: h.in_step(T0))
    h.leader.bump_epoch(T0, 1)
    await h.fetcher.do_work()
    assert h.fetcher.fetch_state(T0) is None and h.fetcher.failed_partitions == {T0}


async def test_unknown_leader_epoch_while_fetching_holds_the_offset_until_the_leader_catches_up() -> None:
    h = Harness()
    follower = h.follower_log(T0)
    h.leader_log(T0, [(1, 0), (1, 1)], leader_epoch=1)
    h.add(T0, leader_epoch=1)
    await h.fetcher.do_work()
    assert follower.log_end_offset == 1
    h.leader.bump_epoch(T0, 0)  # the leader rewinds to an older epoch
    for _ in range(3):
        await h.fetcher.do_work()
    assert follower.log_end_offset == 1
    assert h.state(T0).fetch_offset == 1 and h.state(T0).state is ReplicaState.FETCHING
    h.leader.bump_epoch(T0, 1)
    await h.run_until(lambda: follower.log_end_offset == 2)


async def test_not_leader_delays_the_partition_by_the_backoff() -> None:
    h = Harness(backoff_ms=250)
    follower = h.follower_log(T0)
    h.leader_log(T0, [(2, 0)], leader_epoch=0)
    h.leader.fetch_errors[T0].append(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    h.add(T0, leader_epoch=0)
    start_ms = h.time.milliseconds()
    await h.fetcher.do_work()
    assert h.state(T0).delay_until_ms == start_ms + 250
    await h.run_until(lambda: follower.log_end_offset == 2)
    assert h.time.milliseconds() - start_ms >= 250
    assert h.leader.fetch_count == 2


async def test_idle_fetcher_waits_for_the_backoff_instead_of_spinning() -> None:
    # given a leader whose every fetch fails
    h = Harness(backoff_ms=250)
    h.follower_log(T0)
    h.leader_log(T0, [(2, 0)], leader_epoch=0)
    h.leader.fetch_exception = ConnectionError("refused")
    h.add(T0, leader_epoch=0)
    # when the first round fails, every partition is delayed
    await h.fetcher.do_work()
    assert h.state(T0).is_delayed(h.time.milliseconds())
    # then the next round sends nothing and waits out the backoff
    before_ms = h.time.milliseconds()
    await h.fetcher.do_work()
    assert h.leader.fetch_count == 1
    assert h.time.milliseconds() - before_ms == 250


async def test_run_loop_wakes_up_when_partitions_are_added() -> None:
    class StuckClock(ManualTime):
        async def sleep(self, seconds: float) -> None:
            if seconds > 0:
                await asyncio.Event().wait()  # only an added partition can end a backoff
            await asyncio.sleep(0)

    h = Harness(time=StuckClock())
    h.follower_log(T0)
    h.leader_log(T0, [(2, 0)], leader_epoch=0)
    task = asyncio.create_task(h.fetcher.run())
    try:
        await asyncio.sleep(0)
        assert h.leader.fetch_count == 0
        h.add(T0, leader_epoch=0)
        await asyncio.wait_for(h.leader.fetched.wait(), timeout=5)
        assert h.leader.fetch_count >= 1
    finally:
        h.fetcher.stop()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_fetch_answer_is_ignored_when_the_partition_was_removed_in_flight() -> None:
    h = Harness()
    follower = h.follower_log(T0)
    h.leader_log(T0, [(2, 0)], leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.fetcher.maybe_truncate()
    h.leader.before_fetch_answer = lambda _: h.fetcher.remove_partitions({T0}) and None
    await h.fetcher.maybe_fetch()
    assert follower.log_end_offset == 0 and h.fetcher.fetch_state(T0) is None


async def test_fetch_answer_is_ignored_when_the_epoch_changed_in_flight() -> None:
    h = Harness()
    follower = h.follower_log(T0)
    h.leader_log(T0, [(2, 0)], leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.fetcher.maybe_truncate()
    h.leader.before_fetch_answer = lambda _: h.add(T0, leader_epoch=1, init_offset=0)
    await h.fetcher.maybe_fetch()
    assert follower.log_end_offset == 0
    assert h.state(T0).state is ReplicaState.TRUNCATING and h.state(T0).current_leader_epoch == 1


async def test_append_failure_of_one_partition_does_not_stop_the_others() -> None:
    h = Harness()
    broken = h.follower_log(T0)
    h.follower_log(T1)
    h.leader_log(T0, single(0, 3), leader_epoch=0)
    h.leader_log(T1, single(0, 3), leader_epoch=0)
    broken.fail_append = KafkaStorageError("disk gone")
    h.add(T0, leader_epoch=0)
    h.add(T1, leader_epoch=0)
    await h.run_until(lambda: h.in_step(T1))
    assert h.fetcher.failed_partitions == {T0} and h.fetcher.fetch_state(T0) is None
    broken.fail_append = None
    h.leader.bump_epoch(T0, 1)
    h.add(T0, leader_epoch=1)
    assert h.fetcher.failed_partitions == frozenset()
    assert h.state(T0).state is ReplicaState.TRUNCATING
    await h.run_until(lambda: h.in_step(T0))


async def test_small_response_cap_still_lets_every_partition_progress() -> None:
    # given 8 partitions with 20 batches each, and a response cap that fits about two batches
    partitions = [TopicPartition("fair", p) for p in range(8)]
    h = Harness(config=FetcherConfig(replica_fetch_response_max_bytes=180))
    for tp in partitions:
        h.follower_log(tp)
        h.leader_log(tp, single(0, 20), leader_epoch=0)
        h.add(tp, leader_epoch=0)
    # when the fetcher runs a few rounds
    for _ in range(12):
        await h.fetcher.do_work()
    # then every partition made progress, and none ran far ahead of the others
    ends = [h.replicas.logs[tp].log_end_offset for tp in partitions]
    assert min(ends) >= 2
    assert max(ends) - min(ends) <= 1
    await h.run_until(lambda: all(h.in_step(tp) for tp in partitions), max_rounds=200)


async def test_throttled_out_of_sync_partition_is_left_out_while_the_quota_is_exceeded() -> None:
    h = Harness()
    quota = ReplicationQuotaManager(100, h.time)
    h.fetcher._quota = quota
    quota.mark_throttled("topic", {0})
    for tp in (T0, T1):
        h.follower_log(tp)
        h.leader_log(tp, single(0, 3), leader_epoch=0)
        h.add(tp, leader_epoch=0)
    quota.record(10_000)
    await h.fetcher.do_work()
    sent = {(p.topic, p.partition) for p in h.leader.fetch_requests[0].partitions}
    assert sent == {("topic", 1)}
    # an in-sync throttled partition is never left out
    h.replicas.logs[T0].fail_append = None
    h.fetcher._states.update(T0, h.state(T0).replace(lag=0))
    await h.fetcher.do_work()
    assert ("topic", 0) in {(p.topic, p.partition) for p in h.leader.fetch_requests[1].partitions}


async def test_throttled_partition_bytes_are_recorded_in_the_quota() -> None:
    h = Harness()
    quota = ReplicationQuotaManager(None, h.time)
    h.fetcher._quota = quota
    quota.mark_throttled("topic")
    h.follower_log(T0)
    h.leader_log(T0, [(2, 0)], leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.fetcher.do_work()
    assert quota.rate() == pytest.approx(len(h.leader.partitions[T0].log.batches[0]))


async def test_lag_and_bytes_are_tracked_per_partition_and_dropped_on_removal() -> None:
    h = Harness()
    h.follower_log(T0)
    leader = h.leader_log(T0, single(0, 3), leader_epoch=0)
    h.add(T0, leader_epoch=0)
    added_ms = h.time.milliseconds()
    await h.fetcher.do_work()
    h.time.advance(700)
    stats = h.fetcher.lag_snapshot()[T0]
    assert (stats.lag_messages, stats.fetch_offset, stats.leader_high_watermark) == (2, 1, 3)
    assert stats.bytes_fetched == len(leader.batches[0])
    assert stats.lag_ms == 700 and stats.last_caught_up_ms == added_ms
    await h.run_until(lambda: h.in_step(T0))
    await h.fetcher.do_work()  # an empty answer still refreshes the lag
    stats = h.fetcher.lag_snapshot()[T0]
    assert (stats.lag_messages, stats.lag_ms) == (0, 0)
    assert stats.bytes_fetched == sum(len(b) for b in leader.batches)
    assert h.fetcher.max_lag == 0 and h.state(T0).lag == 0
    h.fetcher.remove_partitions({T0})
    assert T0 not in h.fetcher.lag_snapshot()


async def test_fetch_session_sends_only_changed_partitions_and_maps_partial_answers() -> None:
    h = Harness(sessions=True)
    for tp in (T0, T1):
        h.follower_log(tp)
    h.leader_log(T0, single(0, 3), leader_epoch=0)
    h.leader_log(T1, [(1, 0)], leader_epoch=0)
    h.add(T0, leader_epoch=0)
    h.add(T1, leader_epoch=0)
    await h.fetcher.do_work()
    first = h.leader.fetch_requests[0]
    assert (first.session_id, first.session_epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)
    assert len(first.partitions) == 2
    await h.fetcher.do_work()
    second = h.leader.fetch_requests[1]
    assert second.session_id != INVALID_SESSION_ID and second.session_epoch == 1
    assert {(p.topic, p.partition) for p in second.partitions} == {("topic", 0), ("topic", 1)}
    await h.run_until(lambda: h.in_step(T0) and h.in_step(T1))
    # T1 is caught up; new data for it arrives through the session without T1 being re-sent
    h.leader.partitions[T1].log.append_as_leader(1, 0)
    h.leader.partitions[T1].log.set_high_watermark(2)
    count = h.leader.fetch_count
    await h.run_until(lambda: h.in_step(T1))
    since = h.leader.fetch_requests[count:]
    assert all(("topic", 1) not in {(p.topic, p.partition) for p in r.partitions} for r in since)
    assert h.fetcher.lag_snapshot()[T1].lag_messages == 0


async def test_session_errors_make_the_next_request_full() -> None:
    h = Harness(sessions=True)
    h.follower_log(T0)
    h.leader_log(T0, single(0, 5), leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.fetcher.do_work()
    session_id = h.leader.fetch_requests[0].session_id
    await h.fetcher.do_work()
    session_id = h.leader.fetch_requests[1].session_id
    h.leader.top_level_errors.append(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    await h.fetcher.do_work()
    await h.fetcher.do_work()
    closing = h.leader.fetch_requests[3]
    assert (closing.session_id, closing.session_epoch) == (session_id, INITIAL_EPOCH)
    h.leader.top_level_errors.append(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    await h.fetcher.do_work()
    await h.fetcher.do_work()
    fresh = h.leader.fetch_requests[5]
    assert (fresh.session_id, fresh.session_epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)
    await h.run_until(lambda: h.in_step(T0))


async def test_other_top_level_errors_back_off() -> None:
    h = Harness()
    h.follower_log(T0)
    h.leader_log(T0, single(0, 2), leader_epoch=0)
    h.add(T0, leader_epoch=0)
    h.leader.top_level_errors.append(ErrorCode.UNKNOWN_SERVER_ERROR)
    await h.fetcher.do_work()
    assert h.state(T0).is_delayed(h.time.milliseconds())
    await h.run_until(lambda: h.in_step(T0))


async def test_negative_initial_offset_is_reset_from_the_leader() -> None:
    h = Harness()
    follower = h.follower_log(T0)
    leader = h.leader_log(T0, single(0, 4), leader_epoch=0)
    leader.delete_records_before(2)
    h.add(T0, leader_epoch=0, init_offset=-1)
    await h.run_until(lambda: h.in_step(T0))
    assert follower.full_truncations == [2]


async def test_closing_swallows_leader_end_point_errors() -> None:
    h = Harness()
    h.leader.close_exception = OSError("already closed")
    await h.fetcher.close()
    assert h.leader.closed


async def test_lag_ms_counts_time_behind_the_leaders_log_end_even_at_its_high_watermark() -> None:
    # given a leader whose HW (1) trails its log end (3), and which reports its log end in FETCH
    h = Harness()
    h.leader.report_log_end_offset = True
    h.follower_log(T0)
    leader = h.leader_log(T0, single(0, 3), leader_epoch=0)
    leader.update_high_watermark(1)
    h.add(T0, leader_epoch=0)
    # when the follower fetched up to the HW but not the log end, and 500 ms pass
    await h.fetcher.do_work()
    h.time.advance(500)
    stats = h.fetcher.lag_snapshot()[T0]
    # then Kafka's HW-based lag sees nothing, while lag in ms shows it has been behind all along
    assert (stats.fetch_offset, stats.lag_messages) == (1, 0)
    assert stats.lag_ms == 500
    # and once it reaches the log end, lag in ms is 0 again
    await h.run_until(lambda: h.in_step(T0))
    await h.fetcher.do_work()
    assert h.fetcher.lag_snapshot()[T0].lag_ms == 0
