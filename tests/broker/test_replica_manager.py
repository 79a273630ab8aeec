"""ReplicaManager scenarios: FETCH on the leader (L2–L4), PRODUCE, and LEADER_AND_ISR role changes (L9, F20)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fetcher.partition_fetch_state import InitialFetchState
from protocol.errors import ErrorCode
from protocol.messages import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    EPOCH_DURING_DELETE,
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
    TopicPartition,
)
from protocol.record_batch import build_batch
from tests.broker.leader_fixtures import (
    FOLLOWER_ID,
    LOCAL_ID,
    OTHER_FOLLOWER_ID,
    TP0,
    TP1,
    LeaderBroker,
    RecordingIsrSink,
    batch_epochs,
    outcome,
    values_of,
)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LeaderBroker]:
    b = LeaderBroker(tmp_path / "broker-0")
    yield b
    b.close()


# -- L2: consumer vs follower isolation -------------------------------------------------------------------


async def test_follower_reads_past_the_high_watermark_and_a_consumer_does_not(broker: LeaderBroker) -> None:
    # given a leader that appended 2 records its ISR follower has not fetched yet: HW 0
    broker.make_leader()
    await broker.produce(TP0, b"a", b"b")
    assert broker.partition().high_watermark == 0

    # when the follower fetches at 0, then it gets both records (it reads up to the LEO)
    follower = await broker.follower_fetch(0)
    assert follower.error_code == ErrorCode.NONE
    assert values_of(follower.records) == [(0, b"a"), (1, b"b")]

    # when a consumer fetches at 0, or at the LEO above the HW, then NONE with no records
    for offset in (0, 2):
        consumer = await broker.consumer_fetch(offset)
        assert (consumer.error_code, consumer.records, consumer.high_watermark) == (ErrorCode.NONE, b"", 0)

    # when the follower's next fetch moves the HW, the consumer sees exactly the committed records
    await broker.follower_fetch(2)
    consumer = await broker.consumer_fetch(0)
    assert values_of(consumer.records) == [(0, b"a"), (1, b"b")]


async def test_fetch_outside_the_log_is_offset_out_of_range_for_everyone(broker: LeaderBroker) -> None:
    # given a leader alone in the ISR with 4 committed records whose log start moved to 2
    partition = broker.make_leader(isr=[LOCAL_ID])
    await broker.produce(TP0, b"a", b"b")
    await broker.produce(TP0, b"c", b"d")
    partition.log.delete_records(2)  # type: ignore[attr-defined]

    for replica_id in (FOLLOWER_ID, CONSUMER_REPLICA_ID):
        # when anyone fetches beyond the LEO or below the log start, then OFFSET_OUT_OF_RANGE, no records
        for offset in (5, 1):
            response = (await broker.fetch(replica_id, {TP0: offset}))[TP0]
            assert (response.error_code, response.records) == (ErrorCode.OFFSET_OUT_OF_RANGE, b""), (replica_id, offset)
        # and at the log start they read from there
        ok = (await broker.fetch(replica_id, {TP0: 2}))[TP0]
        assert [o for o, _ in values_of(ok.records)] == [2, 3]
        assert ok.log_start_offset == 2


async def test_consumer_fetch_from_a_follower_is_refused_but_a_debugging_read_is_served(broker: LeaderBroker) -> None:
    # given this broker follows broker 1 and holds 2 records, 1 of them committed
    broker.make_follower()
    log = broker.replica_manager.follower_log(TP0)
    log.append_as_follower(build_batch([b"a"], base_offset=0, partition_leader_epoch=2))
    log.append_as_follower(build_batch([b"b"], base_offset=1, partition_leader_epoch=2))
    log.update_high_watermark(1)

    # when a consumer fetches, then NOT_LEADER_OR_FOLLOWER (consumers fetch from the leader)
    consumer = await broker.consumer_fetch(0)
    assert consumer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # when the debugging replica id fetches, then it reads up to the follower's HW
    debug = (await broker.fetch(DEBUGGING_REPLICA_ID, {TP0: 0}))[TP0]
    assert (debug.error_code, values_of(debug.records)) == (ErrorCode.NONE, [(0, b"a")])


# -- L3 / L4: reads and follower state ----------------------------------------------------------------------


async def test_follower_fetch_answers_the_high_watermark_from_before_its_own_progress(broker: LeaderBroker) -> None:
    # given a leader of tp0 (replicas 0, 1) and tp1 (replicas 0, 2), one record in each
    broker.make_leader(TP0, isr=[LOCAL_ID, FOLLOWER_ID])
    broker.make_leader(TP1, isr=[LOCAL_ID, OTHER_FOLLOWER_ID], replicas=[LOCAL_ID, OTHER_FOLLOWER_ID])
    await broker.produce(TP0, b"a")
    await broker.produce(TP1, b"b")

    # when broker 1 fetches tp0 at its LEO and tp1, which it has no replica of (testFetchMessagesWhenNot...)
    responses = await broker.fetch(FOLLOWER_ID, {TP0: 1, TP1: 0})

    # then tp0 answers the HW as it was before this fetch was recorded, and the leader's HW moves after
    assert (responses[TP0].error_code, responses[TP0].high_watermark) == (ErrorCode.NONE, 0)
    assert broker.partition(TP0).high_watermark == 1
    # and tp1 refuses the stranger, hands it no data and keeps its HW
    assert (responses[TP1].error_code, responses[TP1].records) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, b"")
    assert broker.partition(TP1).high_watermark == 0
    assert broker.partition(TP1).counters.replication_bytes_out == 0


async def test_unknown_replica_naming_the_current_epoch_is_told_the_epoch_is_unknown(broker: LeaderBroker) -> None:
    # given a leader of tp1 at epoch 4 whose replicas are 0 and 2
    broker.make_leader(TP1, leader_epoch=4, isr=[LOCAL_ID], replicas=[LOCAL_ID, OTHER_FOLLOWER_ID])
    await broker.produce(TP1, b"b")
    # when broker 1, just assigned by a controller whose update has not reached us, fetches at epoch 4
    response = (await broker.fetch(FOLLOWER_ID, {TP1: 0}, current_leader_epoch=4))[TP1]
    # then UNKNOWN_LEADER_EPOCH: its epoch matches, our replica set is what is behind, so it retries
    assert (response.error_code, response.records) == (ErrorCode.UNKNOWN_LEADER_EPOCH, b"")


async def test_follower_state_is_recorded_only_from_successful_reads(broker: LeaderBroker) -> None:
    # given a leader at epoch 3 with 4 records and a follower that fetched at 2 with log start 1
    broker.make_leader(leader_epoch=3)
    await broker.produce(TP0, b"a", b"b", b"c", b"d")
    await broker.follower_fetch(2, current_leader_epoch=3, log_start_offset=1)
    replica = broker.partition().remote_replicas[FOLLOWER_ID]
    assert (replica.log_end_offset, replica.log_start_offset) == (2, 1)

    # when it fetches at 4 naming the old epoch 2, or beyond the LEO
    fenced = await broker.follower_fetch(4, current_leader_epoch=2, log_start_offset=3)
    out_of_range = await broker.follower_fetch(9, current_leader_epoch=3, log_start_offset=3)

    # then the errors are answered and its recorded position is unchanged, as is the HW
    assert fenced.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert out_of_range.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert (replica.log_end_offset, replica.log_start_offset) == (2, 1)
    assert broker.partition().high_watermark == 2


async def test_a_divergent_follower_is_told_where_to_cut_and_its_fetch_offset_is_not_recorded(
    broker: LeaderBroker,
) -> None:
    # given a leader with epoch 1 at offsets 0..1 and epoch 3 at 2..4, and a follower in the ISR
    broker.make_leader(leader_epoch=1)
    await broker.produce(TP0, b"a", b"b")
    broker.make_leader(leader_epoch=3)
    await broker.produce(TP0, b"c", b"d", b"e")
    replica = broker.partition().remote_replicas[FOLLOWER_ID]
    # when the follower fetches at 4 naming epoch 2, which we never had, or epoch 1 past its end
    unknown = await broker.follower_fetch(4, current_leader_epoch=3, last_fetched_epoch=2)
    too_long = await broker.follower_fetch(3, current_leader_epoch=3, last_fetched_epoch=1)
    # then each answer carries our largest epoch at or below theirs and where it ends, and no records
    assert (unknown.diverging_epoch, unknown.diverging_end_offset, unknown.records) == (1, 2, b"")
    assert (too_long.diverging_epoch, too_long.diverging_end_offset, too_long.records) == (1, 2, b"")
    # and the offsets it claimed move neither its recorded position nor the HW
    assert replica.log_end_offset < 3
    assert broker.partition().high_watermark == 0
    # when it fetches with a last epoch that matches (3 up to 4), then it gets data and no divergence
    agreed = await broker.follower_fetch(4, current_leader_epoch=3, last_fetched_epoch=3)
    assert (agreed.diverging_epoch, agreed.records != b"") == (-1, True)
    assert replica.log_end_offset == 4
    # and a consumer's last_fetched_epoch is not checked (only followers truncate)
    consumer = await broker.consumer_fetch(0, last_fetched_epoch=2)
    assert consumer.diverging_epoch == -1


async def test_first_partition_gets_its_oversized_batch_and_the_response_cap_applies_to_the_rest(
    broker: LeaderBroker,
) -> None:
    # given two led partitions holding one 3-record batch each
    broker.make_leader(TP0)
    broker.make_leader(TP1)
    await broker.produce(TP0, b"a" * 100, b"b" * 100, b"c" * 100)
    await broker.produce(TP1, b"d" * 100, b"e" * 100, b"f" * 100)

    # when a follower fetches both with a 50-byte response cap (smaller than either batch)
    responses = await broker.fetch(FOLLOWER_ID, {TP0: 0, TP1: 0}, max_bytes=50)

    # then the first partition's first batch comes whole (KIP-74) and nothing is left for the second
    assert [o for o, _ in values_of(responses[TP0].records)] == [0, 1, 2]
    assert responses[TP1].records == b""
    assert responses[TP1].error_code == ErrorCode.NONE


# -- PRODUCE ----------------------------------------------------------------------------------------------


async def test_leader_assigns_offsets_and_stamps_its_epoch_on_produced_batches(broker: LeaderBroker) -> None:
    broker.make_leader(leader_epoch=7, isr=[LOCAL_ID])
    first = await broker.produce(TP0, b"a", b"b")
    second = await broker.produce(TP0, b"c")
    assert (first.error_code, first.base_offset, second.base_offset) == (ErrorCode.NONE, 0, 2)
    read = await broker.follower_fetch(0)
    assert batch_epochs(read.records) == [7, 7]
    assert broker.partition().counters.messages_in == 3


async def test_produce_to_a_follower_or_an_unknown_partition_is_refused(broker: LeaderBroker) -> None:
    broker.make_follower()
    refused = await broker.produce(TP0, b"a")
    unknown = await broker.produce(TopicPartition("nope", 0), b"a")
    assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert broker.partition().log_end_offset == 0


@pytest.mark.parametrize("acks", [2, -2, 5])
async def test_produce_with_invalid_acks_is_refused_without_writing(broker: LeaderBroker, acks: int) -> None:
    broker.make_leader(isr=[LOCAL_ID])
    response = await broker.produce(TP0, b"a", acks=acks)
    assert response.error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert broker.partition().log_end_offset == 0


# -- LEADER_AND_ISR -----------------------------------------------------------------------------------------


def test_becoming_follower_starts_a_fetcher_from_the_high_watermark(broker: LeaderBroker) -> None:
    # given a partition this broker leads
    broker.make_leader(leader_epoch=1)
    broker.fetcher_manager.calls.clear()
    # when it becomes follower of broker 1 at epoch 2
    broker.make_follower(leader=FOLLOWER_ID, leader_epoch=2)
    # then the fetcher is (re)started for it, from the leader at the new epoch, at the local HW
    assert broker.fetcher_manager.calls == [
        ("remove", frozenset({TP0})),
        ("add", {TP0: InitialFetchState(FOLLOWER_ID, 2, 0)}),
    ]
    # and becoming leader again stops it
    broker.fetcher_manager.calls.clear()
    broker.make_leader(leader_epoch=3)
    assert broker.fetcher_manager.calls == [("remove", frozenset({TP0}))]


def test_same_leader_with_an_epoch_jump_restarts_the_follower_so_it_truncates_again(broker: LeaderBroker) -> None:
    # given this broker follows broker 1 at epoch 2
    broker.make_follower(leader=FOLLOWER_ID, leader_epoch=2)
    broker.fetcher_manager.calls.clear()
    # when the controller says broker 1 still leads, at epoch 5 (it missed epochs 3 and 4; KAFKA-7164)
    broker.make_follower(leader=FOLLOWER_ID, leader_epoch=5)
    # then the fetcher is removed and re-added at epoch 5: the partition truncates again before fetching
    assert broker.fetcher_manager.calls == [
        ("remove", frozenset({TP0})),
        ("add", {TP0: InitialFetchState(FOLLOWER_ID, 5, 0)}),
    ]
    assert broker.partition().leader_epoch == 5


def test_partition_epoch_bump_alone_leaves_the_fetcher_alone(broker: LeaderBroker) -> None:
    # given this broker follows broker 1 at leader epoch 2, partition epoch 2
    broker.make_follower(leader=FOLLOWER_ID, leader_epoch=2)
    broker.fetcher_manager.calls.clear()
    # when only the ISR changes (partition epoch 3, same leader epoch)
    response = broker.leader_and_isr(TP0, leader=FOLLOWER_ID, leader_epoch=2, isr=[FOLLOWER_ID], partition_epoch=3)
    # then the new ISR is taken and the fetcher is not touched
    assert response.partitions[0].error_code == ErrorCode.NONE
    assert broker.fetcher_manager.calls == []
    assert broker.partition().isr == {FOLLOWER_ID}
    assert broker.partition().partition_epoch == 3


def test_leader_and_isr_with_an_older_leader_epoch_is_fenced(broker: LeaderBroker) -> None:
    # given this broker leads at epoch 4
    broker.make_leader(leader_epoch=4)
    broker.fetcher_manager.calls.clear()
    # when a stale request says broker 1 leads at epoch 3
    response = broker.leader_and_isr(TP0, leader=FOLLOWER_ID, leader_epoch=3, isr=[FOLLOWER_ID])
    # then it is refused and nothing changes
    assert response.partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert broker.partition().is_leader and broker.partition().leader_epoch == 4
    assert broker.fetcher_manager.calls == []


def test_leader_and_isr_for_a_partition_without_a_local_replica_is_unknown(broker: LeaderBroker) -> None:
    response = broker.leader_and_isr(
        TP0, leader=FOLLOWER_ID, leader_epoch=1, isr=[FOLLOWER_ID], replicas=[FOLLOWER_ID, OTHER_FOLLOWER_ID]
    )
    assert response.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert TP0 not in broker.replica_manager.partitions


def test_stale_controller_epoch_is_refused_whole(broker: LeaderBroker) -> None:
    broker.controller_epoch = 5
    broker.make_leader(leader_epoch=1)
    broker.controller_epoch = 4
    response = broker.leader_and_isr(TP0, leader=FOLLOWER_ID, leader_epoch=2, isr=[FOLLOWER_ID])
    assert response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert broker.partition().is_leader


async def test_controller_shrinking_the_isr_at_the_same_leader_epoch_releases_the_high_watermark(
    broker: LeaderBroker,
) -> None:
    # given a leader at epoch 1 whose ISR follower 1 never fetched, so 2 records are not committed,
    # and broker 1 has just been fenced (KIP-841: it no longer counts as caught up)
    broker.make_leader(leader_epoch=1, partition_epoch=1)
    await broker.produce(TP0, b"a", b"b")
    waiting = await broker.start_produce({TP0: [b"c"]}, timeout_ms=10_000)
    broker.replica_manager.is_broker_eligible = lambda broker_id: broker_id != FOLLOWER_ID
    broker.fetcher_manager.calls.clear()

    # when the controller removes it from the ISR (partition epoch 2, same leader epoch)
    response = broker.leader_and_isr(TP0, leader=LOCAL_ID, leader_epoch=1, isr=[LOCAL_ID], partition_epoch=2)

    # then the HW moves to the LEO at once and the waiting acks=all produce is answered
    assert response.partitions[0].error_code == ErrorCode.NONE
    partition = broker.partition()
    assert (partition.isr, partition.partition_epoch, partition.high_watermark) == (frozenset({LOCAL_ID}), 2, 3)
    [produced] = await outcome(waiting)
    assert (produced.error_code, produced.base_offset) == (ErrorCode.NONE, 2)
    assert broker.fetcher_manager.calls == []


# -- leader-side replication quota (L13) --------------------------------------------------------------


async def test_an_out_of_sync_throttled_follower_gets_nothing_while_the_leader_quota_is_exceeded(
    broker: LeaderBroker,
) -> None:
    from broker.replication_quota import ReplicationQuotaManager

    # given a leader with two records, the follower out of the ISR, and a leader quota of 10 bytes/s spent
    broker.make_leader(leader_epoch=0, isr=[0])
    await broker.produce(TP0, b"a" * 100, b"b" * 100)
    quota = ReplicationQuotaManager(10.0, broker.time)
    quota.mark_throttled(TP0.topic)
    quota.record(1000)
    broker.replica_manager.leader_quota = quota

    # when the out-of-sync follower fetches, it gets no data (and no error)
    throttled = await broker.follower_fetch(0)
    assert throttled.error_code == ErrorCode.NONE and throttled.records == b""

    # a consumer is never replication-throttled
    consumer = await broker.consumer_fetch(0, max_wait_ms=0)
    assert consumer.error_code == ErrorCode.NONE

    # and an in-sync follower is never throttled: throttling it would push it out of the ISR
    partition = broker.partition()
    partition.apply_committed_isr(partition.leader_epoch, [0, FOLLOWER_ID], partition.partition_epoch + 1)
    in_sync = await broker.follower_fetch(0)
    assert in_sync.records != b""


async def test_bytes_withheld_from_a_throttled_partition_do_not_starve_the_next_one(broker: LeaderBroker) -> None:
    from broker.replication_quota import ReplicationQuotaManager

    # given two partitions each holding a 200-byte record, the follower out of the ISR of both, and a
    # spent leader quota that throttles partition 0 only
    for tp in (TP0, TP1):
        broker.make_leader(tp, leader_epoch=0, isr=[LOCAL_ID])
        await broker.produce(tp, b"x" * 200)
    quota = ReplicationQuotaManager(10.0, broker.time)
    quota.mark_throttled(TP0.topic, {TP0.partition})
    quota.record(1000)
    broker.replica_manager.leader_quota = quota

    # when the follower fetches both with a response budget that fits one batch
    responses = await broker.fetch(FOLLOWER_ID, {TP0: 0, TP1: 0}, max_bytes=300)

    # then partition 0 is withheld, and partition 1 still gets its batch: the budget was not spent on
    # bytes that were never sent (Kafka subtracts what it returns)
    assert responses[TP0].records == b""
    assert values_of(responses[TP1].records) == [(0, b"x" * 200)]


# -- KIP-903: a fetch from an earlier incarnation of a follower ---------------------------------------------


async def test_a_late_fetch_from_an_earlier_incarnation_of_a_follower_moves_nothing(tmp_path: Path) -> None:
    # Broker 2 fetched at offset 2 with broker epoch 7, restarted (epoch 9) with a shorter log and fetched from
    # 0; a fetch its earlier incarnation sent arrives last. Taken, it would say broker 2 holds offsets 0-1 and
    # propose it for the ISR. It is refused instead, and the follower's state stays what epoch 9 said.
    sink = RecordingIsrSink()
    broker = LeaderBroker(tmp_path / "b", isr_sink=sink)
    try:
        replicas = (LOCAL_ID, FOLLOWER_ID, OTHER_FOLLOWER_ID)
        partition = broker.make_leader(isr=(LOCAL_ID, FOLLOWER_ID), replicas=replicas, partition_epoch=1)
        await broker.produce(TP0, b"a", b"b")
        await broker.follower_fetch(2)
        assert partition.high_watermark == 2

        fresh = await broker.follower_fetch(0, replica_id=OTHER_FOLLOWER_ID, replica_epoch=9)
        stale = await broker.follower_fetch(2, replica_id=OTHER_FOLLOWER_ID, replica_epoch=7)

        assert fresh.error_code == ErrorCode.NONE and fresh.records
        assert (stale.error_code, stale.records, stale.high_watermark) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, b"", -1)
        assert "broker epoch 7" in (stale.error_message or "") and "epoch 9 since" in (stale.error_message or "")
        follower = partition.remote_replicas[OTHER_FOLLOWER_ID]
        assert (follower.log_end_offset, follower.broker_epoch) == (0, 9)
        assert sink.proposals == []
        # caught up at its current epoch, it is proposed, and the proposal names that epoch
        await broker.follower_fetch(2, replica_id=OTHER_FOLLOWER_ID, replica_epoch=9)
        assert sink.proposals == [(TP0, frozenset(replicas))]
        assert partition.isr_with_epochs(replicas) == [(LOCAL_ID, -1), (FOLLOWER_ID, -1), (OTHER_FOLLOWER_ID, 9)]
    finally:
        broker.close()


# -- DelayedProduce: min.insync.replicas against the maximal ISR ------------------------------------------


async def test_acks_all_completes_cleanly_when_a_pending_expansion_restores_min_isr(tmp_path: Path) -> None:
    sink = RecordingIsrSink()
    broker = LeaderBroker(tmp_path / "b", min_insync_replicas=3, isr_sink=sink)
    try:
        replicas = (LOCAL_ID, FOLLOWER_ID, OTHER_FOLLOWER_ID)
        broker.make_leader(isr=replicas, replicas=replicas, partition_epoch=1)
        # given an acks=all produce waiting on all three ISR members
        waiting = await broker.start_produce({TP0: [b"a"]})
        # and the ISR then shrinks to {0, 1} (below min.insync.replicas=3) before anyone fetched
        broker.replica_manager.on_isr_committed(TP0, 1, [LOCAL_ID, FOLLOWER_ID], 2)
        # when broker 2 catches up, its return to the ISR is proposed (in flight, not committed yet)
        await broker.follower_fetch(1, replica_id=OTHER_FOLLOWER_ID)
        assert sink.proposals[-1] == (TP0, frozenset(replicas))
        # and broker 1 catches up too, moving the HW past the record
        await broker.follower_fetch(1)
        # then the produce succeeds: the maximal ISR (3 members, every one holding the record) is what
        # counts, as in Kafka's checkEnoughReplicasReachOffset, not the committed ISR of 2
        [produced] = await outcome(waiting)
        assert broker.partition().high_watermark == 1
        assert produced.error_code == ErrorCode.NONE
    finally:
        broker.close()


# -- LIST_OFFSETS: the epoch of the records at the offset ---------------------------------------------------


async def test_list_offsets_answers_the_epoch_of_the_records_at_the_offset(broker: LeaderBroker) -> None:
    from protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

    # given records written in epoch 1, then leadership again in epoch 4 with more records
    broker.make_leader(leader_epoch=1, isr=[LOCAL_ID])
    await broker.produce(TP0, b"a", b"b")
    broker.make_leader(leader_epoch=4, isr=[LOCAL_ID])
    await broker.produce(TP0, b"c")
    partition = broker.partition()

    # then EARLIEST carries the epoch of the first batch, LATEST the current epoch
    assert partition.fetch_offset_for_timestamp(EARLIEST_TIMESTAMP, 4, False, True) == (1, 0)
    assert partition.fetch_offset_for_timestamp(LATEST_TIMESTAMP, 4, False, True) == (4, 3)
    # and after the log start moves into epoch 4, EARLIEST says so
    partition.log.delete_records(2)  # type: ignore[attr-defined]
    assert partition.fetch_offset_for_timestamp(EARLIEST_TIMESTAMP, 4, False, True) == (4, 2)


# -- STOP_REPLICA, topic ids, assignment changes --------------------------------------------------------------


def stop(broker: LeaderBroker, leader_epoch: int = EPOCH_DURING_DELETE, delete: bool = True) -> StopReplicaResponse:
    request = StopReplicaRequest(
        controller_id=3000,
        controller_epoch=broker.controller_epoch,
        partitions=[StopReplicaPartition(TP0.topic, TP0.partition, leader_epoch, delete_partition=delete)],
    )
    return broker.replica_manager.stop_replicas(request)


async def test_stop_replica_with_delete_answers_what_waits_stops_the_fetcher_and_deletes_the_log(
    broker: LeaderBroker,
) -> None:
    # given a leader with 2 records, an acks=all produce waiting for the follower and a consumer fetch parked
    broker.make_leader(leader_epoch=1)
    await broker.produce(TP0, b"a", b"b")
    waiting_produce = await broker.start_produce({TP0: [b"c"]}, acks=-1)
    parked_fetch = await broker.start_fetch(CONSUMER_REPLICA_ID, {TP0: 0}, max_wait_ms=60_000, min_bytes=1 << 20)
    log_dir = broker.log_dir / f"{TP0.topic}-{TP0.partition}"
    assert log_dir.is_dir()
    broker.fetcher_manager.calls.clear()

    # when the controller stops and deletes the replica
    response = stop(broker)

    # then both waiting requests answer now: the produce with the "maybe appended" code (its records were
    # written here before), the fetch NOT_LEADER_OR_FOLLOWER; the fetcher lets go, the log is gone
    assert [p.error_code for p in response.partitions] == [ErrorCode.NONE]
    [produced] = await outcome(waiting_produce)
    [fetched] = await outcome(parked_fetch)
    assert produced.error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert fetched.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert broker.fetcher_manager.calls == [("remove", frozenset({TP0}))]
    assert not log_dir.exists()
    assert TP0 not in broker.replica_manager.partitions
    assert (await broker.produce(TP0, b"x")).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # and a new LEADER_AND_ISR for the partition starts it again from an empty log
    broker.make_leader(leader_epoch=0)
    assert broker.partition().log_end_offset == 0
    assert (await broker.produce(TP0, b"y")).base_offset == 0


async def test_stop_replica_without_delete_keeps_the_log_and_a_stale_epoch_is_fenced(broker: LeaderBroker) -> None:
    broker.make_leader(leader_epoch=5)
    await broker.produce(TP0, b"a")
    # a request naming an older leader epoch is stale: nothing stops
    assert [p.error_code for p in stop(broker, leader_epoch=4).partitions] == [ErrorCode.FENCED_LEADER_EPOCH]
    assert TP0 in broker.replica_manager.partitions
    # at the current epoch, without delete: stopped, the log stays on disk
    assert [p.error_code for p in stop(broker, leader_epoch=5, delete=False).partitions] == [ErrorCode.NONE]
    assert TP0 not in broker.replica_manager.partitions
    assert (broker.log_dir / f"{TP0.topic}-{TP0.partition}").is_dir()


async def test_a_log_left_by_a_deleted_topic_of_the_same_name_is_discarded(tmp_path: Path) -> None:
    # given a broker that holds 2 records of topic id "a" and was down while the topic was deleted
    first = LeaderBroker(tmp_path / "b")
    first.make_leader(leader_epoch=3, topic_id="a")
    await first.produce(TP0, b"a", b"b")
    first.close()
    # when it restarts and is told about the partition of a new topic of that name (id "b")
    second = LeaderBroker(tmp_path / "b")
    try:
        second.make_leader(leader_epoch=0, topic_id="b")
        # then the old log is not served as the new topic's: it starts empty
        assert second.partition().log_end_offset == 0
        await second.produce(TP0, b"new")
    finally:
        second.close()
    # and a restart told the same id keeps its log
    third = LeaderBroker(tmp_path / "b")
    try:
        third.make_leader(leader_epoch=0, topic_id="b")
        assert third.partition().log_end_offset == 1
    finally:
        third.close()


async def test_replicas_added_at_the_same_leader_epoch_are_known_to_the_leader(broker: LeaderBroker) -> None:
    # given a leader at epoch 1 of replicas {0, 1}
    broker.make_leader(leader_epoch=1, isr=[LOCAL_ID, FOLLOWER_ID], partition_epoch=1)
    await broker.produce(TP0, b"a")
    # when the controller adds broker 2 without a leader change (a reassignment's first step)
    broker.make_leader(
        leader_epoch=1,
        isr=[LOCAL_ID, FOLLOWER_ID],
        replicas=[LOCAL_ID, FOLLOWER_ID, OTHER_FOLLOWER_ID],
        partition_epoch=2,
    )
    # then broker 2's fetch at the current epoch is served, not refused as UNKNOWN_LEADER_EPOCH
    fetched = await broker.follower_fetch(0, replica_id=OTHER_FOLLOWER_ID, current_leader_epoch=1)
    assert (fetched.error_code, values_of(fetched.records)) == (ErrorCode.NONE, [(0, b"a")])
    assert broker.partition().remote_replicas[OTHER_FOLLOWER_ID].log_end_offset == 0
    # when broker 1 is removed, then the leader forgets it
    broker.make_leader(leader_epoch=1, isr=[LOCAL_ID], replicas=[LOCAL_ID, OTHER_FOLLOWER_ID], partition_epoch=10)
    assert set(broker.partition().remote_replicas) == {OTHER_FOLLOWER_ID}


async def test_a_leader_that_learned_the_partition_epoch_from_its_isr_answer_still_takes_the_new_replicas(
    broker: LeaderBroker,
) -> None:
    # given a leader of replicas {0, 1, 2} whose ISR change was answered at partition epoch 5, the commit
    # that also completed a reassignment removing broker 2 (its ALTER_PARTITION answer has no replicas)
    broker.make_leader(leader_epoch=1, replicas=[LOCAL_ID, FOLLOWER_ID, OTHER_FOLLOWER_ID], partition_epoch=1)
    broker.partition().apply_committed_isr(1, [LOCAL_ID, FOLLOWER_ID], 5)
    # when the LEADER_AND_ISR of that same partition epoch arrives with the new replicas
    broker.make_leader(leader_epoch=1, isr=[LOCAL_ID, FOLLOWER_ID], replicas=[LOCAL_ID, FOLLOWER_ID], partition_epoch=5)
    # then the leader stops tracking broker 2
    assert broker.partition().assignment == [LOCAL_ID, FOLLOWER_ID]
    assert set(broker.partition().remote_replicas) == {FOLLOWER_ID}
