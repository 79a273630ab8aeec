"""Truncation before fetching (KIP-101/279): OffsetsForLeaderEpoch, HW fallback, stale answers."""

from __future__ import annotations

import pytest

from fetcher.partition_fetch_state import ReplicaState
from fetcher.replica_fetcher import IllegalStateError
from protocol.errors import ErrorCode, KafkaStorageError
from protocol.messages import EpochEndOffset, TopicPartition
from tests.fetcher.harness import Harness, single
from tests.fetcher.memory_log import MemoryLog

T0 = TopicPartition("topic", 0)
T1 = TopicPartition("topic", 1)
T2 = TopicPartition("topic", 2)


async def test_divergent_tails_end_byte_identical_to_the_leader() -> None:
    # given a follower with epochs [0, 2, 4] and a leader with epochs [1, 3, 5] at the same offsets
    h = Harness()
    h.follower_log(T0, [(1, 0), (1, 2), (1, 4)], high_watermark=0)
    h.leader_log(T0, [(1, 1), (1, 3), (1, 5)], leader_epoch=5)
    # when the follower follows the leader at epoch 5
    h.add(T0, leader_epoch=5)
    await h.run_until(lambda: h.in_step(T0))
    # then its log is the leader's, byte for byte, after truncating one epoch per round down to 0
    assert h.replicas.logs[T0].truncations == [2, 1, 0]
    assert [r[0].leader_epoch for r in h.leader.epoch_requests] == [4, 2, 0]
    assert h.replicas.logs[T0].epochs.entries == [(1, 0), (3, 1), (5, 2)]


async def test_leader_epoch_unknown_to_follower_triggers_a_second_epoch_request() -> None:
    # given a follower with epochs 1, 3, 5 (epoch 3 ends at 120) and LEO 200
    h = Harness()
    follower = h.follower_log(T0, single(1, 100) + single(3, 20) + single(5, 80), high_watermark=0)
    h.leader_log(T0, single(1, 100) + single(3, 1) + single(4, 54), leader_epoch=6)
    h.leader.epoch_answers[T0].extend([(4, 155), (3, 101)])
    h.add(T0, leader_epoch=6)
    # when the leader answers with epoch 4, which the follower never had
    await h.fetcher.do_work()
    # then the follower cuts to the end of its epoch 3, stays truncating and does not fetch
    assert follower.truncations == [120]
    assert h.state(T0).state is ReplicaState.TRUNCATING
    assert h.leader.fetch_count == 0
    # when it asks again with epoch 3 and the leader says epoch 3 ends at 101
    await h.fetcher.do_work()
    # then it truncates to 101 and fetches from there
    assert h.leader.epoch_requests[1][0].leader_epoch == 3
    assert follower.truncations == [120, 101]
    assert h.state(T0).state is ReplicaState.FETCHING
    assert h.leader.fetch_count == 1
    await h.run_until(lambda: h.in_step(T0), max_rounds=200)
    assert h.leader.epoch_request_count == 2


async def test_truncates_to_the_offset_in_the_leader_epoch_answer() -> None:
    h = Harness()
    for tp, end in ((T0, 156), (T1, 172)):
        h.follower_log(tp, single(5, 200), high_watermark=0)
        h.leader_log(tp, single(5, 200), leader_epoch=5)
        h.leader.epoch_answers[tp].append((5, end))
        h.add(tp, leader_epoch=5)
    await h.fetcher.maybe_truncate()
    assert h.replicas.logs[T0].truncations == [156]
    assert h.replicas.logs[T1].truncations == [172]
    assert h.state(T0).fetch_offset == 156 and h.state(T0).state is ReplicaState.FETCHING


class _NoEpochBelow(MemoryLog):
    """A log whose epoch cache knows no epoch at or below the one asked about."""

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return -1, -1


def test_follower_without_an_epoch_at_or_below_the_leaders_truncates_to_the_leaders_end_offset() -> None:
    h = Harness()
    for tp in (T0, T1):
        mlog = _NoEpochBelow(tp)
        for _ in range(200):
            mlog.append_as_leader(1, 5)
        h.replicas.logs[tp] = mlog
        h.add(tp, leader_epoch=5, init_offset=0)
    low = h.fetcher.offset_truncation_state(T0, h.state(T0), EpochEndOffset("topic", 0, leader_epoch=4, end_offset=156))
    high = h.fetcher.offset_truncation_state(
        T1, h.state(T1), EpochEndOffset("topic", 1, leader_epoch=4, end_offset=202)
    )
    assert (low.offset, low.truncation_completed) == (156, True)
    assert (high.offset, high.truncation_completed) == (200, True)  # capped at the follower's LEO


async def test_undefined_leader_end_offset_truncates_to_the_initial_offset() -> None:
    h = Harness()
    follower = h.follower_log(T0, single(5, 10), high_watermark=4)
    h.leader_log(T0, single(5, 10), leader_epoch=5)
    h.leader.epoch_answers[T0].append((-1, -1))
    h.add(T0, leader_epoch=5)
    await h.fetcher.maybe_truncate()
    assert follower.truncations == [4]
    assert h.state(T0).state is ReplicaState.FETCHING


async def test_answer_without_an_epoch_uses_the_leaders_end_offset_in_one_round() -> None:
    h = Harness()
    follower = h.follower_log(T0, single(5, 200), high_watermark=0)
    h.leader_log(T0, single(5, 200), leader_epoch=5)
    h.leader.epoch_answers[T0].append((-1, 155))
    h.add(T0, leader_epoch=5)
    await h.fetcher.maybe_truncate()
    assert follower.truncations == [155]
    assert h.state(T0).state is ReplicaState.FETCHING


async def test_leader_without_offsets_for_leader_epoch_means_truncation_to_the_high_watermark() -> None:
    h = Harness()
    follower = h.follower_log(T0, single(0, 3), high_watermark=2)
    h.leader_log(T0, single(0, 3), leader_epoch=0)
    h.leader.supports_offsets_for_leader_epoch = False
    h.add(T0, leader_epoch=0)
    await h.fetcher.maybe_truncate()
    assert follower.truncations == [2]
    assert h.state(T0).fetch_offset == 2 and h.state(T0).state is ReplicaState.FETCHING
    assert h.leader.epoch_request_count == 0


async def test_log_without_epoch_information_truncates_to_the_high_watermark() -> None:
    h = Harness()
    follower = h.follower_log(T0, single(-1, 3), high_watermark=2)
    assert follower.latest_epoch is None
    h.leader_log(T0, single(0, 3), leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.fetcher.maybe_truncate()
    assert follower.truncations == [2]
    assert h.state(T0).state is ReplicaState.FETCHING
    assert h.leader.epoch_request_count == 0


async def test_epochs_are_requested_only_for_partitions_whose_log_has_an_epoch() -> None:
    h = Harness()
    h.follower_log(T0, single(5, 10), high_watermark=3)
    h.follower_log(T1, single(5, 10), high_watermark=3)
    h.follower_log(T2, single(-1, 10), high_watermark=3)
    for tp in (T0, T1, T2):
        h.leader_log(tp, single(5, 10), leader_epoch=5)
        h.add(tp, leader_epoch=5)
    await h.fetcher.do_work()
    assert h.leader.epoch_request_count == 1
    assert {(p.topic, p.partition) for p in h.leader.epoch_requests[0]} == {("topic", 0), ("topic", 1)}
    assert h.replicas.logs[T2].truncations == [3]
    assert all(h.is_fetching(tp) for tp in (T0, T1, T2))
    assert all(len(h.replicas.logs[tp].truncations) == 1 for tp in (T0, T1, T2))
    for _ in range(3):
        await h.fetcher.do_work()
    assert h.leader.epoch_request_count == 1


async def test_network_failure_of_the_epoch_request_delays_and_retries() -> None:
    h = Harness()
    follower = h.follower_log(T0, single(5, 5), high_watermark=0)
    h.leader_log(T0, single(5, 5), leader_epoch=5)
    h.add(T0, leader_epoch=5)
    h.leader.epoch_exception = ConnectionError("reset")
    await h.fetcher.maybe_truncate()
    assert follower.truncations == []
    assert h.state(T0).is_delayed(h.time.milliseconds())
    h.leader.epoch_exception = None
    await h.run_until(lambda: h.in_step(T0))
    assert follower.truncations == [5]


async def test_epoch_request_errors_are_retried_until_the_leader_answers() -> None:
    h = Harness()
    follower = h.follower_log(T0, single(5, 200), high_watermark=0)
    h.leader_log(T0, single(5, 200), leader_epoch=5)
    h.leader.epoch_errors[T0].extend(
        [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.NOT_LEADER_OR_FOLLOWER]
    )
    h.leader.epoch_answers[T0].append((5, 156))
    h.add(T0, leader_epoch=5)
    rounds = await h.run_until(lambda: follower.truncations != [])
    assert rounds > 3
    assert follower.truncations == [156]
    assert h.leader.epoch_request_count == 4


async def test_fenced_truncation_fails_the_partition() -> None:
    h = Harness()
    follower = h.follower_log(T0, [(1, 0)], high_watermark=0)
    h.leader_log(T0, [(1, 1)], leader_epoch=1)
    h.add(T0, leader_epoch=0)
    await h.fetcher.do_work()
    assert h.fetcher.fetch_state(T0) is None
    assert T0 in h.fetcher.failed_partitions
    assert h.failed_reports == [{T0}]
    assert (follower.log_end_offset, follower.high_watermark) == (1, 0)
    assert follower.truncations == []


async def test_unknown_leader_epoch_in_truncation_waits_for_the_leader_to_catch_up() -> None:
    h = Harness()
    follower = h.follower_log(T0, [(1, 0)], high_watermark=0)
    h.leader_log(T0, [(1, 0), (1, 1)], leader_epoch=0)
    h.add(T0, leader_epoch=1)
    for _ in range(3):
        await h.fetcher.do_work()
    assert h.state(T0).state is ReplicaState.TRUNCATING
    assert follower.log_end_offset == 1
    h.leader.bump_epoch(T0, 1)
    await h.run_until(lambda: h.in_step(T0))
    assert h.state(T0).state is ReplicaState.FETCHING


async def test_re_adding_at_the_same_epoch_skips_truncation() -> None:
    h = Harness()
    follower = h.follower_log(T0, single(0, 1), high_watermark=1)
    leader = h.leader_log(T0, single(0, 3), leader_epoch=0)
    h.add(T0, leader_epoch=0)
    await h.fetcher.do_work()
    assert follower.truncations == [1]
    h.add(T0, leader_epoch=0, init_offset=0)
    await h.run_until(lambda: h.in_step(T0))
    assert follower.truncations == [1]
    assert follower.log_end_offset == leader.log_end_offset == 3


async def test_answer_for_a_partition_not_requested_is_an_illegal_state() -> None:
    h = Harness()
    h.follower_log(T0, single(0, 1), high_watermark=0)
    h.leader_log(T0, single(0, 1), leader_epoch=0)
    h.leader.extra_epoch_partition = T1
    h.add(T0, leader_epoch=0)
    with pytest.raises(IllegalStateError):
        await h.fetcher.do_work()


async def test_fenced_epoch_answer_is_ignored_when_the_epoch_changed_in_flight() -> None:
    # given an epoch request sent at epoch 0, and the follower re-added at epoch 1 while it is in flight
    h = Harness()
    follower = h.follower_log(T0, single(0, 1), high_watermark=0)
    h.leader_log(T0, single(0, 1) + single(1, 1), leader_epoch=1)

    def re_add(_: object) -> None:
        if h.leader.epoch_request_count == 1:
            h.add(T0, leader_epoch=1, init_offset=0)

    h.leader.before_epoch_answer = re_add
    h.add(T0, leader_epoch=0)
    # when the leader (at epoch 1) answers FENCED for epoch 0
    await h.fetcher.maybe_truncate()
    # then the stale answer is ignored: not failed, still truncating at epoch 1, log untouched
    assert T0 not in h.fetcher.failed_partitions
    assert h.state(T0).state is ReplicaState.TRUNCATING and h.state(T0).current_leader_epoch == 1
    assert follower.truncations == []
    await h.run_until(lambda: h.in_step(T0))


async def test_successful_epoch_answer_is_ignored_when_the_epoch_changed_in_flight() -> None:
    h = Harness()
    follower = h.follower_log(T0, single(0, 2), high_watermark=0)
    h.leader_log(T0, single(0, 1), leader_epoch=0)

    def re_add(_: object) -> None:
        if h.leader.epoch_request_count == 1:
            h.add(T0, leader_epoch=1, init_offset=0)

    h.leader.before_epoch_answer = re_add
    h.add(T0, leader_epoch=0)
    await h.fetcher.maybe_truncate()
    assert follower.truncations == []
    assert h.state(T0).state is ReplicaState.TRUNCATING
    h.leader.bump_epoch(T0, 1)
    await h.run_until(lambda: h.in_step(T0))
    assert follower.truncations == [1]


async def test_partition_removed_during_the_epoch_request_is_not_truncated() -> None:
    h = Harness()
    follower = h.follower_log(T0, single(0, 3), high_watermark=0)
    h.follower_log(T1, single(0, 3), high_watermark=0)
    h.leader_log(T0, single(0, 1), leader_epoch=0)
    h.leader_log(T1, single(0, 1), leader_epoch=0)
    h.leader.before_epoch_answer = lambda _: h.fetcher.remove_partitions({T0}) and None
    h.add(T0, leader_epoch=0)
    h.add(T1, leader_epoch=0)
    await h.fetcher.do_work()
    assert h.fetcher.fetch_state(T0) is None
    assert follower.truncations == [] and follower.log_end_offset == 3
    assert h.replicas.logs[T1].truncations == [1]
    assert h.is_fetching(T1)


async def test_partition_removed_before_its_high_watermark_truncation_is_not_truncated() -> None:
    # T0 has epochs (OffsetsForLeaderEpoch), T2 has none (HW truncation after that request returns)
    h = Harness()
    h.follower_log(T0, single(0, 3), high_watermark=0)
    no_epochs = h.follower_log(T2, single(-1, 3), high_watermark=2)
    h.leader_log(T0, single(0, 3), leader_epoch=0)
    h.leader_log(T2, single(0, 3), leader_epoch=0)
    h.leader.before_epoch_answer = lambda _: h.fetcher.remove_partitions({T2}) and None
    h.add(T0, leader_epoch=0)
    h.add(T2, leader_epoch=0)
    await h.fetcher.maybe_truncate()
    assert h.fetcher.fetch_state(T2) is None
    assert no_epochs.truncations == [] and no_epochs.log_end_offset == 3


async def test_truncation_failure_of_one_partition_does_not_stop_the_others() -> None:
    h = Harness()
    broken = h.follower_log(T0, single(0, 3), high_watermark=1)
    h.follower_log(T1, single(0, 3), high_watermark=1)
    h.leader_log(T0, single(0, 1) + single(1, 2), leader_epoch=1)
    h.leader_log(T1, single(0, 1) + single(1, 2), leader_epoch=1)
    broken.fail_truncate = KafkaStorageError("disk gone")
    h.add(T0, leader_epoch=1)
    h.add(T1, leader_epoch=1)
    await h.run_until(lambda: h.in_step(T1))
    assert T0 in h.fetcher.failed_partitions and h.fetcher.fetch_state(T0) is None
    # when the broker re-adds it at a new epoch, it is truncating again and no longer failed
    broken.fail_truncate = None
    h.leader.bump_epoch(T0, 2)
    h.add(T0, leader_epoch=2)
    assert T0 not in h.fetcher.failed_partitions
    assert h.state(T0).state is ReplicaState.TRUNCATING
    await h.run_until(lambda: h.in_step(T0))
