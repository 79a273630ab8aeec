"""Truncation on fetch (Kafka 2.7+, F16 / L10 case H): the follower sends the epoch of its last batch in
FETCH, the leader answers a divergence in the same response, and no OffsetsForLeaderEpoch round is made."""

from __future__ import annotations

from fetcher.partition_fetch_state import ReplicaState
from protocol.messages import UNDEFINED_EPOCH, TopicPartition
from tests.fetcher.harness import Harness, single

T0 = TopicPartition("topic", 0)
T1 = TopicPartition("topic", 1)


def truncating_on_fetch(**kwargs: object) -> Harness:
    h = Harness(**kwargs)  # type: ignore[arg-type]
    h.leader.supports_truncate_on_fetch = True
    return h


async def test_a_follower_with_a_common_prefix_fetches_from_its_log_end_without_an_epoch_round() -> None:
    # given a follower holding 30 records of epoch 1 (HW 10) and a leader with those and 20 more in epoch 3
    h = truncating_on_fetch()
    follower = h.follower_log(T0, single(1, 30), high_watermark=10)
    h.leader_log(T0, single(1, 30) + single(3, 20), leader_epoch=3)
    # when it starts following at epoch 3
    h.add(T0, leader_epoch=3)
    await h.fetcher.do_work()
    # then its first fetch is from its log end with its last epoch: nothing truncated, no epoch request
    first = h.leader.fetch_requests[0].partitions[0]
    assert (first.fetch_offset, first.last_fetched_epoch) == (30, 1)
    assert h.leader.epoch_request_count == 0
    assert follower.truncations == []
    await h.run_until(lambda: h.in_step(T0))
    # and later fetches carry the epoch of the last batch it appended
    assert h.leader.fetch_requests[-1].partitions[0].last_fetched_epoch == 3
    assert follower.truncations == []


async def test_divergent_tails_are_cut_from_fetch_answers_one_epoch_at_a_time() -> None:
    # given a follower with epochs [0, 2, 4] and a leader with epochs [1, 3, 5] at the same offsets
    h = truncating_on_fetch()
    h.follower_log(T0, [(1, 0), (1, 2), (1, 4)], high_watermark=0)
    h.leader_log(T0, [(1, 1), (1, 3), (1, 5)], leader_epoch=5)
    # when the follower follows the leader at epoch 5
    h.add(T0, leader_epoch=5)
    await h.run_until(lambda: h.in_step(T0))
    # then the fetch answers alone drove it down to 0, as the OffsetsForLeaderEpoch rounds would have
    assert h.replicas.logs[T0].truncations == [2, 1, 0]
    assert h.leader.epoch_request_count == 0
    sent = [(r.partitions[0].fetch_offset, r.partitions[0].last_fetched_epoch) for r in h.leader.fetch_requests]
    assert sent[:4] == [(3, 4), (2, 2), (1, 0), (0, UNDEFINED_EPOCH)]
    assert h.replicas.logs[T0].epochs.entries == [(1, 0), (3, 1), (5, 2)]


async def test_a_longer_log_in_the_same_epoch_is_cut_to_the_leaders_end_of_that_epoch() -> None:
    # given a follower that appended 5 more records of epoch 2 than the new leader (epoch 3) ever got
    h = truncating_on_fetch()
    follower = h.follower_log(T0, single(2, 25), high_watermark=20)
    h.leader_log(T0, single(2, 20) + single(3, 10), leader_epoch=3)
    h.add(T0, leader_epoch=3)
    # when it fetches at 25 with epoch 2, then the leader says epoch 2 ends at 20 and it cuts there
    await h.fetcher.do_work()
    answer = h.leader.fetch_requests[0].partitions[0]
    assert (answer.fetch_offset, answer.last_fetched_epoch) == (25, 2)
    assert follower.truncations == [20]
    assert h.state(T0).state is ReplicaState.FETCHING
    assert h.state(T0).fetch_offset == 20
    await h.run_until(lambda: h.in_step(T0))
    assert h.leader.epoch_request_count == 0


async def test_a_leader_without_truncation_on_fetch_gets_the_epoch_round_first() -> None:
    # given the same divergent follower, and a leader before 2.7
    h = Harness()
    follower = h.follower_log(T0, single(2, 25), high_watermark=20)
    h.leader_log(T0, single(2, 20) + single(3, 10), leader_epoch=3)
    h.add(T0, leader_epoch=3)
    await h.run_until(lambda: h.in_step(T0))
    # then it asked OffsetsForLeaderEpoch once, and its fetches never carried an epoch
    assert h.leader.epoch_request_count == 1
    assert follower.truncations == [20]
    assert {p.last_fetched_epoch for r in h.leader.fetch_requests for p in r.partitions} == {UNDEFINED_EPOCH}


async def test_only_the_divergent_partition_is_truncated_the_others_take_their_data() -> None:
    h = truncating_on_fetch(batches_per_fetch=5)
    diverged = h.follower_log(T0, single(2, 12), high_watermark=10)
    h.leader_log(T0, single(2, 10) + single(3, 5), leader_epoch=3)
    clean = h.follower_log(T1, single(2, 10), high_watermark=10)
    h.leader_log(T1, single(2, 10) + single(3, 5), leader_epoch=3)
    h.add(T0, leader_epoch=3)
    h.add(T1, leader_epoch=3)
    await h.fetcher.do_work()
    # one fetch: T0 cut to 10, T1 appended the leader's 5 records
    assert h.leader.fetch_count == 1
    assert diverged.truncations == [10]
    assert clean.truncations == [] and clean.log_end_offset == 15
    await h.run_until(lambda: h.in_step(T0) and h.in_step(T1))
