"""Idempotent producers in the log (KIP-98): duplicates answered with their original offsets, gaps, stale
epochs and lost state refused, and the state rebuilt from the log after reopening and truncation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import build_batch
from server_common.time import ManualTime
from storage.log import Log, LogConfig
from storage.producer_state import BATCHES_PER_PRODUCER, MAX_PRODUCERS_PER_PARTITION, ProducerEntries
from tests.storage.helpers import START_MS, values_by_offset

OpenLog = Callable[..., Log]
PID = 4000


def pbatch(seq: int, *values: bytes, pid: int = PID, epoch: int = 0) -> bytes:
    return build_batch(
        list(values) or [b"v"], timestamp_ms=START_MS, producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def refused(log: Log, records: bytes) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        log.append_as_leader(records, 0)
    return info.value.code


def test_a_resent_batch_is_answered_with_its_original_offsets_and_not_appended(open_log: OpenLog) -> None:
    log = open_log()
    first = log.append_as_leader(pbatch(0, b"a", b"b"), 0)
    second = log.append_as_leader(pbatch(2, b"c"), 0)
    again = log.append_as_leader(pbatch(0, b"a", b"b"), 0)
    assert (again.first_offset, again.last_offset, again.duplicate) == (first.first_offset, first.last_offset, True)
    assert log.append_as_leader(pbatch(2, b"c"), 0).first_offset == second.first_offset
    assert log.log_end_offset == 3
    assert [v for _, v in values_by_offset(log.read(0, 1 << 20))] == [b"a", b"b", b"c"]


def test_only_the_last_five_batches_are_remembered(open_log: OpenLog) -> None:
    log = open_log()
    for seq in range(BATCHES_PER_PRODUCER + 1):
        log.append_as_leader(pbatch(seq), 0)
    assert log.append_as_leader(pbatch(1), 0).duplicate  # still among the last five
    # the first batch fell out of the window: it is not the next sequence either, so it is refused
    assert refused(log, pbatch(0)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_gaps_stale_epochs_and_unknown_producers_are_refused_and_append_nothing(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(pbatch(0, b"a"), 0)
    assert refused(log, pbatch(2, b"gap")) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append_as_leader(pbatch(0, b"epoch 1", epoch=1), 0)  # a new epoch starts again at 0
    assert refused(log, pbatch(1, b"old", epoch=0)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert refused(log, pbatch(5, b"new epoch not at 0", epoch=2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert refused(log, pbatch(7, b"who?", pid=PID + 1)) == ErrorCode.UNKNOWN_PRODUCER_ID
    assert log.log_end_offset == 2
    # non-idempotent batches are never checked
    log.append_as_leader(build_batch([b"plain"]), 0)
    log.append_as_leader(build_batch([b"plain"]), 0)
    assert log.log_end_offset == 4


def test_one_append_of_several_batches_checks_them_in_order(open_log: OpenLog) -> None:
    log = open_log()
    info = log.append_as_leader(pbatch(0, b"a") + pbatch(1, b"b") + pbatch(0, b"x", pid=PID + 1), 0)
    assert (info.num_batches, log.log_end_offset) == (3, 3)
    assert refused(log, pbatch(2, b"c") + pbatch(4, b"gap")) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.log_end_offset == 3


def test_a_follower_keeps_the_state_so_it_deduplicates_when_it_leads(open_log: OpenLog, tmp_path: object) -> None:
    leader = open_log()
    leader.append_as_leader(pbatch(0, b"a"), 0)
    leader.append_as_leader(pbatch(1, b"b"), 0)
    follower = Log.open(leader.dir.with_name("orders-1"), leader.config, leader._time)  # noqa: SLF001
    follower.append_as_follower(leader.read(0, 1 << 20))
    # the follower is elected; the producer resends the batch whose answer it lost
    assert follower.append_as_leader(pbatch(1, b"b"), 1).duplicate
    assert follower.append_as_leader(pbatch(2, b"c"), 1).first_offset == 2


@pytest.mark.parametrize("clean", [True, False])
def test_the_state_survives_reopening_with_and_without_snapshots(open_log: OpenLog, clean: bool) -> None:
    log = open_log(segment_bytes=300)
    for seq in range(12):  # several segments, so several snapshots
        log.append_as_leader(pbatch(seq, b"x" * 40), 0)
    assert log.num_segments > 2
    assert log.producer_state.snapshot_offsets(), "a snapshot at each roll"
    if clean:
        log.close()
    reopened = open_log(segment_bytes=300)
    assert reopened.append_as_leader(pbatch(11, b"x" * 40), 0).duplicate
    assert refused(reopened, pbatch(13)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert reopened.append_as_leader(pbatch(12), 0).first_offset == 12


def test_truncation_rewinds_the_state_to_the_batches_that_remain(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=300)
    for seq in range(12):
        log.append_as_leader(pbatch(seq, b"x" * 40), 0)
    log.truncate_to(5)
    assert all(offset <= 5 for offset in log.producer_state.snapshot_offsets())
    # offsets 5.. are gone: sequence 5 is the next one again, not a duplicate
    info = log.append_as_leader(pbatch(5, b"again"), 1)
    assert (info.duplicate, info.first_offset) == (False, 5)
    log.truncate_fully_and_start_at(100)
    assert log.producer_state.snapshot_offsets() == []
    assert refused(log, pbatch(7)) == ErrorCode.UNKNOWN_PRODUCER_ID


def test_a_corrupt_snapshot_is_ignored_and_the_state_rebuilt_from_the_log(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=300)
    for seq in range(12):
        log.append_as_leader(pbatch(seq, b"x" * 40), 0)
    log.close()
    for offset in log.producer_state.snapshot_offsets():
        path = log.dir / f"{offset:020d}.snapshot"
        path.write_bytes(b"\0" + path.read_bytes()[1:])
    reopened = open_log(segment_bytes=300)
    assert reopened.append_as_leader(pbatch(10, b"x" * 40), 0).duplicate
    assert reopened.producer_state.snapshot_offsets() == []


def test_a_log_without_idempotent_producers_snapshots_too_so_opening_it_reads_no_old_segment(
    open_log: OpenLog,
) -> None:
    # Without snapshots, every open would read the headers of every segment to rebuild an empty state.
    log = open_log(segment_bytes=300)
    for _ in range(12):
        log.append_as_leader(build_batch([b"x" * 40], timestamp_ms=START_MS), 0)
    rolls = [s.base_offset for s in log.segments[1:]]
    assert set(rolls) <= set(log.producer_state.snapshot_offsets())
    log.close()
    assert log.log_end_offset in log.producer_state.snapshot_offsets()  # the clean shutdown's
    reopened = open_log(segment_bytes=300)
    assert reopened.producer_state.producers == {}
    reopened.truncate_to(5)
    assert max(reopened.producer_state.snapshot_offsets()) <= 5


def test_producer_ids_past_the_limit_evict_the_least_recent_writer_the_same_way_on_every_replica(
    open_log: OpenLog,
) -> None:
    leader = open_log()
    leader.producer_state.max_producers = 3
    for pid in (1, 2, 3):
        leader.append_as_leader(pbatch(0, pid=pid), 0)
    leader.append_as_leader(pbatch(1, pid=1), 0)  # producer 1 wrote last: producer 2 is now the oldest
    leader.append_as_leader(pbatch(0, pid=4), 0)
    assert list(leader.producer_state.producers) == [3, 1, 4]
    assert leader.producer_state.evicted == 1
    # an evicted producer that goes on is refused as Kafka refuses one whose state is gone
    assert refused(leader, pbatch(1, pid=2)) == ErrorCode.UNKNOWN_PRODUCER_ID
    # a follower applying the same batches evicts the same producer, so it deduplicates the same way
    follower = Log.open(leader.dir.with_name("orders-1"), leader.config, leader._time)  # noqa: SLF001
    follower.producer_state.max_producers = 3
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert list(follower.producer_state.producers) == [3, 1, 4]


def test_a_flood_of_invented_producer_ids_stays_within_the_limit(open_log: OpenLog) -> None:
    log = open_log()
    for pid in range(MAX_PRODUCERS_PER_PARTITION + 500):
        log.append_as_leader(pbatch(0, pid=10_000 + pid), 0)
    assert len(log.producer_state.producers) == MAX_PRODUCERS_PER_PARTITION


def test_producers_idle_past_producer_id_expiration_ms_are_forgotten(open_log: OpenLog) -> None:
    log = open_log(producer_id_expiration_ms=60_000)
    log.append_as_leader(pbatch(0, pid=1), 0)
    log._time.advance(50_000)  # noqa: SLF001
    log.append_as_leader(build_batch([b"v"], timestamp_ms=log._time.milliseconds(), producer_id=2,  # noqa: SLF001
                                     producer_epoch=0, base_sequence=0), 0)  # fmt: skip
    log._time.advance(20_000)  # noqa: SLF001
    assert log.remove_expired_producers() == 1
    assert list(log.producer_state.producers) == [2]


def test_the_partitions_of_a_broker_share_one_limit_on_producer_entries(tmp_path: Path, time: ManualTime) -> None:
    # producer.state.max.entries: real producer ids, each writing a few partitions, grew every broker by
    # ~1 KB per producer and partition with only the per-partition cap to stop them.
    shared = ProducerEntries(4)
    a = Log.open(tmp_path / "orders-0", LogConfig(), time, producer_entries=shared)
    b = Log.open(tmp_path / "orders-1", LogConfig(), time, producer_entries=shared)
    for pid in (1, 2, 3):
        a.append_as_leader(pbatch(0, pid=pid), 0)
    b.append_as_leader(pbatch(0, pid=1), 0)
    assert shared.total == 4
    b.append_as_leader(pbatch(0, pid=2), 0)  # full: b makes room by evicting its own least recent producer
    a.append_as_leader(pbatch(0, pid=4), 0)  # and so does a
    assert (list(a.producer_state.producers), list(b.producer_state.producers)) == ([2, 3, 4], [2])
    assert shared.total == 4 and a.producer_state.evicted == b.producer_state.evicted == 1
    a.remove_expired_producers()  # nothing expired: the count stays exact through every change
    a.truncate_to(1)
    assert list(a.producer_state.producers) == [1] and shared.total == 2
    a.close()
    b.delete()
    assert shared.total == 0
