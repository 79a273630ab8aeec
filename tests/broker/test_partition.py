"""Partition scenarios on real logs: epoch validation (L1), isolation (L2), ISR expansion (L7), makeLeader (L9),
OffsetsForLeaderEpoch / ListOffsets (L14) and the high watermark rules (L6, HW checkpoint)."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.partition import Partition
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, NO_LEADER_EPOCH
from protocol.record_batch import build_batch
from tests.broker.leader_fixtures import (
    FOLLOWER_ID,
    LOCAL_ID,
    OTHER_FOLLOWER_ID,
    TP0,
    LeaderBroker,
    RecordingIsrSink,
    values_of,
)

EPOCH = 5


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LeaderBroker]:
    b = LeaderBroker(tmp_path / "broker-0")
    yield b
    b.close()


def error_of(call: Callable[[], object]) -> ErrorCode:
    try:
        call()
    except KafkaError as exc:
        return exc.code
    return ErrorCode.NONE


# -- L1: the epoch matrix ------------------------------------------------------------------------------


def _expected(is_leader: bool, request_epoch: str, require_leader: bool) -> ErrorCode:
    if request_epoch == "older":
        return ErrorCode.FENCED_LEADER_EPOCH
    if request_epoch == "newer":
        return ErrorCode.UNKNOWN_LEADER_EPOCH
    if require_leader and not is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.NONE


_EPOCHS = {"absent": NO_LEADER_EPOCH, "equal": EPOCH, "older": EPOCH - 1, "newer": EPOCH + 1}
_OPERATIONS: dict[str, Callable[[Partition, int, bool], object]] = {
    "read": lambda p, epoch, leader_only: p.read_records(0, epoch, 1024, leader_only, True, True),
    "offsets_for_leader_epoch": lambda p, epoch, leader_only: p.last_offset_for_leader_epoch(epoch, EPOCH, leader_only),
    "list_offsets": lambda p, epoch, leader_only: p.fetch_offset_for_timestamp(
        LATEST_TIMESTAMP, epoch, True, leader_only
    ),
}


@pytest.mark.parametrize("operation", sorted(_OPERATIONS))
@pytest.mark.parametrize("role", ["leader", "follower"])
@pytest.mark.parametrize("request_epoch", sorted(_EPOCHS))
@pytest.mark.parametrize("require_leader", [True, False])
def test_requests_naming_a_leader_epoch_are_checked_against_ours_before_leadership(
    broker: LeaderBroker, operation: str, role: str, request_epoch: str, require_leader: bool
) -> None:
    # given this broker is the leader (alone in the ISR) or a follower of broker 1, at epoch 5
    if role == "leader":
        partition = broker.make_leader(leader_epoch=EPOCH, isr=[LOCAL_ID])
    else:
        partition = broker.make_follower(leader=FOLLOWER_ID, leader_epoch=EPOCH)

    # when a read / OffsetsForLeaderEpoch / ListOffsets names an epoch absent, equal, older or newer
    code = error_of(lambda: _OPERATIONS[operation](partition, _EPOCHS[request_epoch], require_leader))

    # then older is fenced, newer is unknown, and only then does leadership matter
    assert code == _expected(role == "leader", request_epoch, require_leader)


# -- L9 / L14: makeLeader and the epoch cache ----------------------------------------------------------


async def test_new_leader_answers_offsets_for_leader_epoch_with_its_log_end_at_election(
    broker: LeaderBroker,
) -> None:
    # given a follower that replicated 4 records written at epoch 1
    follower = broker.make_follower(leader=FOLLOWER_ID, leader_epoch=1)
    follower.log.append_as_follower(  # type: ignore[attr-defined]
        build_batch([b"a", b"b", b"c", b"d"], base_offset=0, partition_leader_epoch=1)
    )

    # when it becomes leader at epoch 3 without having written anything in it
    leader = broker.make_leader(leader_epoch=3)

    # then the current epoch starts (and so far ends) at the LEO at election; epoch 2 (never used) ends there
    assert leader.last_offset_for_leader_epoch(3, 3, True) == (3, 4)
    assert leader.last_offset_for_leader_epoch(3, 2, True) == (1, 4)
    assert leader.leader_epoch_start_offset == 4
    # and its first append is stamped with the new epoch
    await broker.produce(TP0, b"e")
    assert leader.log.read(4, 1024) and leader.log.end_offset_for_epoch(3) == (3, 5)  # type: ignore[attr-defined]


async def test_list_offsets_for_consumers_is_unavailable_until_the_high_watermark_reaches_the_epoch_start(
    broker: LeaderBroker,
) -> None:
    # given a leader at epoch 1 whose follower never fetched: 3 records, HW 0
    broker.make_leader(leader_epoch=1)
    await broker.produce(TP0, b"a", b"b", b"c")
    # when it is re-elected at epoch 2 with the HW still behind the LEO (testMonotonicOffsetsAfterLeaderChange)
    partition = broker.make_leader(leader_epoch=2)
    assert (partition.high_watermark, partition.leader_epoch_start_offset) == (0, 3)

    # then a consumer's LATEST is OFFSET_NOT_AVAILABLE (it could otherwise see offsets go backwards)
    assert error_of(lambda: partition.fetch_offset_for_timestamp(LATEST_TIMESTAMP, 2, True, True)) == (
        ErrorCode.OFFSET_NOT_AVAILABLE
    )
    # while a follower's view (the LEO) and EARLIEST are available, EARLIEST with the epoch of the records
    # there (written in epoch 1)
    assert partition.fetch_offset_for_timestamp(LATEST_TIMESTAMP, 2, False, True) == (2, 3)
    assert partition.fetch_offset_for_timestamp(EARLIEST_TIMESTAMP, 2, True, True) == (1, 0)

    # when the follower catches up to the epoch start, the consumer sees the HW
    await broker.follower_fetch(3)
    assert partition.fetch_offset_for_timestamp(LATEST_TIMESTAMP, 2, True, True) == (2, 3)


async def test_a_consumer_finds_offsets_by_timestamp_only_below_the_high_watermark(broker: LeaderBroker) -> None:
    # given a leader at epoch 1 with 3 records its follower has not fetched: HW 0
    partition = broker.make_leader(leader_epoch=1)
    await broker.produce(TP0, b"a", b"b", b"c")
    assert partition.high_watermark == 0
    # then a consumer finds nothing (Kafka's -1, -1), while the log end bounds a debugging view
    assert partition.fetch_offset_by_timestamp(0, 1, True, True) == (-1, NO_LEADER_EPOCH, -1)
    timestamp, epoch, offset = partition.fetch_offset_by_timestamp(0, 1, False, True)
    assert (epoch, offset) == (1, 0) and timestamp > 0
    # and once the records are committed the consumer gets the same answer
    await broker.follower_fetch(3)
    assert partition.fetch_offset_by_timestamp(0, 1, True, True) == (timestamp, 1, 0)
    assert partition.fetch_offset_by_timestamp(timestamp + 3_600_000, 1, True, True) == (-1, NO_LEADER_EPOCH, -1)


# -- L7: ISR expansion -----------------------------------------------------------------------------------


async def test_follower_does_not_join_the_isr_until_caught_up_into_the_current_leader_epoch(
    broker: LeaderBroker,
) -> None:
    replicas = [LOCAL_ID, FOLLOWER_ID, OTHER_FOLLOWER_ID]
    # given a leader at epoch 8 with ISR {0, 2}; 5 records, follower 2 fetched up to 2: HW 2
    broker.make_leader(leader_epoch=8, isr=[LOCAL_ID, OTHER_FOLLOWER_ID], replicas=replicas)
    await broker.produce(TP0, b"k1", b"k2")
    await broker.produce(TP0, b"k3", b"k4", b"k5")
    await broker.follower_fetch(0, replica_id=OTHER_FOLLOWER_ID)
    await broker.follower_fetch(2, replica_id=OTHER_FOLLOWER_ID)
    assert broker.partition().high_watermark == 2

    # and it became follower and then leader again (epoch 10), appending 2 more records in the new epoch
    broker.make_follower(leader=OTHER_FOLLOWER_ID, leader_epoch=9, isr=[LOCAL_ID, OTHER_FOLLOWER_ID], replicas=replicas)
    partition = broker.make_leader(leader_epoch=10, isr=[LOCAL_ID, OTHER_FOLLOWER_ID], replicas=replicas)
    epoch_start = partition.log_end_offset
    assert epoch_start == 5
    await broker.produce(TP0, b"k6", b"k7")

    # when follower 1 (not in the ISR) fetches from 0 and then from 2 (≥ HW, but before the epoch start)
    await broker.follower_fetch(0)
    await broker.follower_fetch(2)
    # then it stays out: it has nothing of the current epoch yet (KAFKA-7128)
    assert partition.isr == {LOCAL_ID, OTHER_FOLLOWER_ID}

    # when it fetches from the current epoch's start offset, then it joins
    await broker.follower_fetch(epoch_start)
    assert partition.isr == {LOCAL_ID, FOLLOWER_ID, OTHER_FOLLOWER_ID}
    assert partition.counters.isr_expands == 1


async def test_follower_joins_the_isr_only_once_its_log_end_reaches_the_high_watermark(broker: LeaderBroker) -> None:
    # given a leader alone in the ISR with 10 records (HW 10) and follower 1 outside it (testIsrExpansion)
    partition = broker.make_leader(isr=[LOCAL_ID])
    await broker.produce(TP0, *[b"r%d" % i for i in range(10)])
    assert partition.high_watermark == 10

    # when the follower fetches at 3, it is still behind the HW: not added, and it does not hold the HW
    await broker.follower_fetch(3)
    assert partition.isr == {LOCAL_ID}
    await broker.produce(TP0, b"r10")
    assert partition.high_watermark == 11

    # when it fetches at 11 it has everything committed: added
    await broker.follower_fetch(11)
    assert partition.isr == {LOCAL_ID, FOLLOWER_ID}


async def test_isr_expansion_waits_for_the_controller_and_is_not_proposed_twice(tmp_path: Path) -> None:
    sink = RecordingIsrSink()
    broker = LeaderBroker(tmp_path / "b", isr_sink=sink)
    try:
        # given a leader alone in the ISR and a follower that caught up
        partition = broker.make_leader(isr=[LOCAL_ID], partition_epoch=1)
        await broker.produce(TP0, b"a")
        await broker.follower_fetch(1)
        # then one expansion is proposed and the committed ISR is unchanged until the controller answers
        assert sink.proposals == [(TP0, frozenset({LOCAL_ID, FOLLOWER_ID}))]
        assert partition.isr == {LOCAL_ID}
        await broker.follower_fetch(1)
        assert len(sink.proposals) == 1

        # but the HW already counts on the pending member (maximal ISR): it waits for it
        await broker.produce(TP0, b"b")
        assert partition.high_watermark == 1

        # when the controller commits, the ISR is the proposed one
        broker.replica_manager.on_isr_committed(TP0, 1, [LOCAL_ID, FOLLOWER_ID], 2)
        assert partition.isr == {LOCAL_ID, FOLLOWER_ID} and partition.partition_epoch == 2
    finally:
        broker.close()


# -- L6: the high watermark -------------------------------------------------------------------------------


async def test_follower_high_watermark_never_passes_its_own_log_end(broker: LeaderBroker) -> None:
    # given a follower holding 2 records
    follower = broker.make_follower()
    log = broker.replica_manager.follower_log(TP0)
    log.append_as_follower(build_batch([b"a", b"b"], base_offset=0, partition_leader_epoch=2))
    # when the leader's response says its HW is 7, then the follower's HW is its own LEO, 2
    assert log.update_high_watermark(7) == 2
    assert follower.high_watermark == 2


async def test_new_partition_starts_from_the_checkpointed_high_watermark(tmp_path: Path) -> None:
    # given a leader alone in the ISR that committed 4 records, then shut down cleanly
    first = LeaderBroker(tmp_path / "broker-0")
    first.make_leader(isr=[LOCAL_ID])
    await first.produce(TP0, b"a", b"b", b"c", b"d")
    assert first.partition().high_watermark == 4
    first.close()

    # when the broker restarts and is told it leads again
    second = LeaderBroker(tmp_path / "broker-0")
    try:
        # then the log opens with the checkpointed HW 4 (testUseCheckpointToInitializeHighWatermark)
        assert second.log_manager.get_or_create_log(TP0).high_watermark == 4
        partition = second.make_leader(leader_epoch=2)
        assert partition.high_watermark == 4
        consumer = await second.consumer_fetch(0)
        assert [v for _, v in values_of(consumer.records)] == [b"a", b"b", b"c", b"d"]
    finally:
        second.close()


async def test_after_a_crash_the_high_watermark_is_the_last_checkpointed_one(tmp_path: Path) -> None:
    # given a leader that checkpointed HW 2, then committed 2 more records without checkpointing
    first = LeaderBroker(tmp_path / "broker-0")
    first.make_leader(isr=[LOCAL_ID])
    await first.produce(TP0, b"a", b"b")
    first.replica_manager.checkpoint_high_watermarks()
    await first.produce(TP0, b"c", b"d")
    assert first.partition().high_watermark == 4

    # when the broker dies without closing anything and restarts on the same directory
    second = LeaderBroker(tmp_path / "broker-0")
    try:
        # then the HW is the checkpointed 2 (never more than what was made durable), with all 4 records kept
        log = second.log_manager.get_or_create_log(TP0)
        assert (log.high_watermark, log.log_end_offset) == (2, 4)
    finally:
        second.close()


@st.composite
def _leader_histories(draw: st.DrawFn) -> list[tuple[str, int]]:
    steps = draw(
        st.lists(
            st.tuples(st.sampled_from(["append", "fetch1", "fetch2", "tick", "shrink"]), st.integers(0, 100)),
            min_size=1,
            max_size=40,
        )
    )
    return steps


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=_leader_histories(), initial_isr=st.sampled_from([(0,), (0, 1), (0, 1, 2)]))
def test_leader_high_watermark_only_grows_and_never_passes_an_in_sync_log_end(
    history: list[tuple[str, int]], initial_isr: tuple[int, ...]
) -> None:
    """Any mix of appends, follower fetches (each follower moving forward), time and ISR shrinks keeps:
    HW never decreases; HW ≤ leader LEO; HW ≤ the LEO of every ISR member that has fetched; a consumer
    reads exactly the offsets below the HW."""

    async def scenario(log_dir: Path) -> None:
        broker = LeaderBroker(log_dir, replica_lag_time_max_ms=100)
        try:
            partition = broker.make_leader(isr=initial_isr, replicas=[LOCAL_ID, FOLLOWER_ID, OTHER_FOLLOWER_ID])
            # A follower's LEO is always a batch boundary of the leader's log (it holds the same batches).
            boundaries = [0]
            positions = {FOLLOWER_ID: 0, OTHER_FOLLOWER_ID: 0}  # index into boundaries
            previous_hw = partition.high_watermark
            for action, n in history:
                if action == "append":
                    await broker.produce(TP0, *[b"x"] * (n % 3 + 1))
                    boundaries.append(partition.log_end_offset)
                elif action.startswith("fetch"):
                    follower = int(action[-1])
                    positions[follower] = min(len(boundaries) - 1, positions[follower] + n % 3)
                    await broker.follower_fetch(boundaries[positions[follower]], replica_id=follower)
                elif action == "tick":
                    broker.advance(n)
                else:
                    broker.replica_manager.maybe_shrink_isr()
                hw = partition.high_watermark
                assert hw >= previous_hw
                assert hw <= partition.log_end_offset
                for replica in partition.remote_replicas.values():
                    if replica.broker_id in partition.isr and replica.log_end_offset >= 0:
                        assert hw <= replica.log_end_offset
                consumer = await broker.consumer_fetch(0)
                assert [offset for offset, _ in values_of(consumer.records)] == list(range(hw))
                previous_hw = hw
        finally:
            broker.close()

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp) / "broker-0"))
