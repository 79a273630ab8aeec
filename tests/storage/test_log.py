"""The partition log: appends as leader and follower, reads, rolls, truncation, HW, retention, reopening."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from crc32c import crc32c

from protocol.errors import CorruptRecordError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from protocol.record_batch import build_batch, iter_headers
from server_common.time import ManualTime
from storage.epoch_cache import EpochEntry
from storage.log import Log, LogConfig, parse_topic_partition
from tests.storage.helpers import START_MS, batch, batch_bases, batch_epochs, values_by_offset

OpenLog = Callable[..., Log]


def fill(log: Log, count: int, epoch: int = 0, records_per_batch: int = 1, size: int = 10) -> None:
    """Append `count` leader batches whose values name their offsets (b'000017....')."""
    for _ in range(count):
        start = log.log_end_offset
        values = [f"{start + i:06d}".encode().ljust(size, b".") for i in range(records_per_batch)]
        log.append_as_leader(batch(*values), epoch)


def all_values(log: Log) -> list[tuple[int, bytes | None]]:
    return values_by_offset(log.read(log.log_start_offset, 1 << 30))


# -- appends ---------------------------------------------------------------------------------------


def test_a_leader_append_assigns_offsets_from_the_log_end_and_stamps_its_epoch(open_log: OpenLog) -> None:
    log = open_log()
    first = log.append_as_leader(batch(b"a", b"b", b"c", base_offset=999), leader_epoch=3)
    second = log.append_as_leader(batch(b"d") + batch(b"e", b"f"), leader_epoch=3)
    assert (first.first_offset, first.last_offset, first.num_records) == (0, 2, 3)
    assert (second.first_offset, second.last_offset, second.num_batches, second.num_records) == (3, 5, 2, 3)
    data = log.read(0, 10_000)
    assert values_by_offset(data) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f")]
    assert batch_bases(data) == [0, 3, 4]
    assert batch_epochs(data) == [3, 3, 3]
    assert log.log_end_offset == 6
    assert log.epoch_cache.epoch_entries() == [EpochEntry(3, 0)]


def test_a_new_leader_epoch_starts_a_new_epoch_cache_entry(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 2, epoch=0)
    fill(log, 3, epoch=4)
    assert log.epoch_cache.epoch_entries() == [EpochEntry(0, 0), EpochEntry(4, 2)]
    assert log.latest_epoch == 4
    assert log.end_offset_for_epoch(0) == (0, 2)
    assert log.end_offset_for_epoch(4) == (4, 5)


def test_a_leader_append_with_one_corrupt_batch_appends_nothing(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 1)
    records = bytearray(batch(b"good") + batch(b"bad"))
    records[-1] ^= 0x01
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(records), leader_epoch=0)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch(b"torn")[:-3], leader_epoch=0)
    assert log.log_end_offset == 1
    assert log.size_in_bytes == len(log.read(0, 10_000))


def test_a_leader_rejects_a_batch_whose_record_count_disagrees_with_its_offsets(open_log: OpenLog) -> None:
    log = open_log()
    bad = bytearray(batch(b"a", b"b"))
    bad[57:61] = (5).to_bytes(4, "big")  # record_count, which the CRC covers: fix the CRC too
    bad[17:21] = crc32c(bytes(bad[21:])).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="records"):
        log.append_as_leader(bytes(bad), leader_epoch=0)
    assert log.log_end_offset == 0


def test_an_empty_append_appends_nothing(open_log: OpenLog) -> None:
    log = open_log()
    info = log.append_as_leader(b"", leader_epoch=0)
    assert (info.num_batches, info.first_offset, info.last_offset) == (0, 0, -1)
    assert log.log_end_offset == 0


def test_a_follower_append_keeps_the_leaders_offsets_and_epochs(open_log: OpenLog) -> None:
    log = open_log()
    leader_bytes = batch(b"a", base_offset=0, epoch=1) + batch(b"b", b"c", base_offset=1, epoch=1)
    leader_bytes += batch(b"d", base_offset=3, epoch=4)
    info = log.append_as_follower(leader_bytes)
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 3, 3)
    assert log.read(0, 10_000) == leader_bytes
    assert log.epoch_cache.epoch_entries() == [EpochEntry(1, 0), EpochEntry(4, 3)]


def test_a_follower_rejects_a_batch_that_does_not_start_at_its_log_end(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_follower(batch(b"a", b"b", base_offset=0, epoch=0))
    for base in (1, 3):  # overlapping, and leaving a gap
        with pytest.raises(UnexpectedAppendOffsetError) as raised:
            log.append_as_follower(batch(b"x", b"y", base_offset=base, epoch=0))
        assert (raised.value.first_offset, raised.value.last_offset) == (base, base + 1)
    assert log.log_end_offset == 2


def test_a_follower_rejects_offsets_that_go_backwards_within_a_fetch(open_log: OpenLog) -> None:
    log = open_log()
    records = batch(b"a", b"b", base_offset=0, epoch=0) + batch(b"c", base_offset=1, epoch=0)
    with pytest.raises(CorruptRecordError, match="before"):
        log.append_as_follower(records)
    assert log.log_end_offset == 0


def test_a_follower_rejects_a_corrupt_fetch(open_log: OpenLog) -> None:
    log = open_log()
    records = bytearray(batch(b"a", base_offset=0, epoch=0))
    records[30] ^= 0x10
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_follower(bytes(records))
    assert log.log_end_offset == 0


# -- rolling ---------------------------------------------------------------------------------------


def test_the_log_rolls_before_an_append_that_would_pass_segment_bytes(open_log: OpenLog) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 3)
    fill(log, 10)
    assert log.num_segments == 4
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert all(s.size_in_bytes <= size * 3 for s in log.segments)
    assert [o for o, _ in all_values(log)] == list(range(10))


def test_the_log_rolls_when_the_active_segment_is_older_than_segment_ms(open_log: OpenLog, time: ManualTime) -> None:
    log = open_log(segment_ms=1_000)
    fill(log, 3)
    time.advance(1_000)
    fill(log, 1)
    assert log.num_segments == 1  # not yet older than segment.ms
    time.advance(1)
    fill(log, 2)
    assert [s.base_offset for s in log.segments] == [0, 4]
    time.advance(5_000)
    assert log.num_segments == 2  # time alone never rolls; only an append does


def test_an_empty_segment_never_rolls_on_time(open_log: OpenLog, time: ManualTime) -> None:
    log = open_log(segment_ms=1_000)
    time.advance(10_000)
    fill(log, 1)
    assert log.num_segments == 1


def test_the_log_rolls_when_the_offset_index_is_full(open_log: OpenLog) -> None:
    log = open_log(index_interval_bytes=0, segment_index_bytes=16)  # two index entries per segment
    fill(log, 3)
    assert log.num_segments == 1 and log.active_segment.index.is_full
    fill(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 3]


# -- reads -----------------------------------------------------------------------------------------


def test_reading_outside_log_start_and_log_end_is_out_of_range(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 5)
    log.maybe_increment_high_watermark(5)
    log.delete_records(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6, 1000)
    assert log.read(5, 1000) == b""
    assert batch_bases(log.read(2, 1000)) == [2, 3, 4]


def test_reading_from_the_middle_of_a_batch_returns_the_whole_batch(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 3, records_per_batch=4)
    data = log.read(6, 10_000)
    assert batch_bases(data) == [4, 8]
    assert values_by_offset(data)[0][0] == 4


def test_a_read_smaller_than_the_first_batch_returns_it_only_with_min_one_message(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 3, size=200)
    assert batch_bases(log.read(0, 10)) == [0]
    assert log.read(0, 10, min_one_message=False) == b""
    one_and_a_bit = len(batch(b"x" * 200)) + 10
    assert batch_bases(log.read(0, one_and_a_bit)) == [0]


def test_a_read_spans_segments(open_log: OpenLog) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 3)
    fill(log, 10)
    assert batch_bases(log.read(2, 10_000)) == list(range(2, 10))
    assert batch_bases(log.read(2, size * 4)) == [2, 3, 4, 5]
    assert batch_bases(log.read(2, size * 4 + size // 2)) == [2, 3, 4, 5]


def test_a_read_stops_before_the_upper_bound(open_log: OpenLog) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 3)
    fill(log, 10)
    assert batch_bases(log.read(0, 10_000, upper_bound=5)) == [0, 1, 2, 3, 4]
    assert batch_bases(log.read(4, 10_000, upper_bound=6)) == [4, 5]
    assert log.read(6, 10_000, upper_bound=6) == b""
    assert batch_bases(log.read(0, 10_000, upper_bound=3)) == [0, 1, 2]


def test_reads_from_a_recently_appended_batch_agree_with_a_walk_from_the_index_through_truncations(
    open_log: OpenLog,
) -> None:
    # Batches far smaller than index.interval.bytes: reads at their base offsets start from the positions the
    # segment remembers of its last appends, reads elsewhere walk headers from an index entry; both must give
    # the same bytes, also after a truncation moved the batches that follow.
    log = open_log()
    fill(log, 100, records_per_batch=2)
    expected = all_values(log)
    for offset in (0, 2, 3, 150, 196, 198, 199):
        assert values_by_offset(log.read(offset, 1 << 20)) == [v for v in expected if v[0] >= offset - offset % 2]
        assert batch_bases(log.read(offset, 10, min_one_message=True)) == [offset - offset % 2]
        assert (
            log.offset_metadata(offset).relative_position == log.offset_metadata(offset - offset % 2).relative_position
        )
    log.truncate_to(150)
    fill(log, 10, records_per_batch=3, size=40)
    assert batch_bases(log.read(150, 1 << 20)) == list(range(150, 180, 3))
    assert values_by_offset(log.read(153, 1 << 20))[0] == (153, b"000153".ljust(40, b"."))
    assert batch_bases(log.read(100, 1 << 20, upper_bound=156)) == [*range(100, 150, 2), 150, 153]


def test_offset_metadata_says_where_an_offset_lives(open_log: OpenLog) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 3)
    fill(log, 8)
    assert log.offset_metadata(1) == log.offset_metadata(1)
    one, four, end = log.offset_metadata(1), log.offset_metadata(4), log.log_end_offset_metadata
    assert (one.segment_base_offset, one.relative_position) == (0, size)
    assert (four.segment_base_offset, four.relative_position) == (3, size)
    assert (end.message_offset, end.segment_base_offset, end.relative_position) == (8, 6, 2 * size)
    assert one.on_older_segment(four) and not four.on_older_segment(one)
    assert end.position_diff(log.offset_metadata(6)) == 2 * size
    assert log.bytes_available(1, 8) == 7 * size
    assert log.bytes_available(6, 7) == size
    assert log.bytes_available(7, 7) == 0


# -- high watermark --------------------------------------------------------------------------------


def test_high_watermark_maintenance(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 3, records_per_batch=3)
    assert log.high_watermark == 0
    # The leader moves it forward, never back and never past the log end.
    assert log.maybe_increment_high_watermark(6)
    assert not log.maybe_increment_high_watermark(3)
    assert log.high_watermark == 6
    with pytest.raises(ValueError):
        log.maybe_increment_high_watermark(10)
    # A follower takes the leader's value, clamped into [log start, log end].
    assert log.update_high_watermark(4) == 4
    assert log.update_high_watermark(100) == 9
    assert log.update_high_watermark(-5) == 0
    # Truncation lowers it.
    log.update_high_watermark(9)
    log.truncate_to(3)
    assert log.high_watermark == 3


# -- truncation ------------------------------------------------------------------------------------


def test_truncation_at_or_past_the_log_end_changes_nothing(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 5)
    assert not log.truncate_to(5)
    assert not log.truncate_to(50)
    assert log.log_end_offset == 5


def test_truncation_across_segments_deletes_later_segments(open_log: OpenLog) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 3)
    fill(log, 10, epoch=0)
    fill(log, 2, epoch=2)
    files_before = {p.name for p in log.dir.iterdir()}
    assert log.truncate_to(4)
    assert log.log_end_offset == 4
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert log.epoch_cache.epoch_entries() == [EpochEntry(0, 0)]
    assert "00000000000000000009.log" in files_before
    assert "00000000000000000009.log" not in {p.name for p in log.dir.iterdir()}
    fill(log, 2, epoch=3)
    assert [o for o, _ in all_values(log)] == list(range(6))
    assert log.epoch_cache.epoch_entries() == [EpochEntry(0, 0), EpochEntry(3, 4)]


def test_truncation_to_a_segment_base_leaves_that_segment_empty_and_active(open_log: OpenLog) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 3)
    fill(log, 8)
    log.truncate_to(3)
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert log.active_segment.is_empty and log.log_end_offset == 3
    fill(log, 1)
    assert [o for o, _ in all_values(log)] == [0, 1, 2, 3]


def test_truncation_to_zero_empties_the_log(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=100)
    fill(log, 6)
    log.update_high_watermark(6)
    log.truncate_to(0)
    assert (log.log_end_offset, log.high_watermark, log.size_in_bytes, log.num_segments) == (0, 0, 0, 1)
    assert log.epoch_cache.epoch_entries() == []
    assert log.read(0, 100) == b""


def test_truncation_inside_a_batch_removes_the_whole_batch(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 3, records_per_batch=4)
    log.truncate_to(6)
    assert log.log_end_offset == 4


def test_truncation_below_the_first_segment_restarts_the_log_there(open_log: OpenLog) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 3)
    fill(log, 9)
    log.maybe_increment_high_watermark(9)
    log.delete_records(6)
    assert log.segments[0].base_offset == 6
    assert log.truncate_to(4)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.num_segments) == (4, 4, 4, 1)
    assert log.epoch_cache.epoch_entries() == []
    fill(log, 1)
    assert all_values(log) == [(4, b"000004....")]


def test_truncating_fully_restarts_an_empty_log_at_any_offset(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 5)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert [p.name for p in log.dir.glob("*.log")] == ["00000000000000000100.log"]
    log.append_as_follower(batch(b"x", base_offset=100, epoch=7))
    assert log.epoch_cache.epoch_entries() == [EpochEntry(7, 100)]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(99, 100)


# -- log start, delete_records and retention -------------------------------------------------------


def test_delete_records_advances_the_log_start_and_drops_segments_wholly_below_it(open_log: OpenLog) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 3)
    fill(log, 5, epoch=0)
    fill(log, 5, epoch=1)
    log.maybe_increment_high_watermark(8)
    assert log.delete_records(4) == 4
    assert [s.base_offset for s in log.segments] == [3, 6, 9]
    assert log.epoch_cache.epoch_entries() == [EpochEntry(0, 4), EpochEntry(1, 5)]
    assert batch_bases(log.read(4, 10_000))[:2] == [4, 5]
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(9)  # past the high watermark
    assert not log.maybe_increment_log_start_offset(2)
    assert log.log_start_offset == 4


def test_retention_by_bytes_deletes_the_oldest_segments_below_the_high_watermark(open_log: OpenLog) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 2, retention_bytes=size * 5)
    fill(log, 10)
    assert log.num_segments == 5
    assert log.delete_old_segments() == 0  # nothing is below the high watermark yet
    log.maybe_increment_high_watermark(10)
    assert log.delete_old_segments() == 2
    assert (log.log_start_offset, log.size_in_bytes) == (4, size * 6)
    assert [o for o, _ in all_values(log)] == list(range(4, 10))


def test_retention_by_time_uses_each_segments_largest_timestamp(open_log: OpenLog, time: ManualTime) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 2, retention_ms=60_000)
    fill(log, 4)  # two segments with timestamp START_MS
    later = START_MS + 50_000
    log.append_as_leader(batch(b"late", timestamp_ms=later), leader_epoch=0)
    log.append_as_leader(batch(b"late", timestamp_ms=later), leader_epoch=0)
    log.append_as_leader(batch(b"active", timestamp_ms=later), leader_epoch=0)
    log.maybe_increment_high_watermark(log.log_end_offset)
    time.advance(60_001)
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == 4
    time.advance(1_000_000)
    assert log.delete_old_segments() == 1  # the active segment stays however old it is
    assert [s.base_offset for s in log.segments] == [6]


def test_unlimited_retention_keeps_everything(open_log: OpenLog, time: ManualTime) -> None:
    log = open_log(segment_bytes=100, retention_ms=-1)
    fill(log, 10)
    log.maybe_increment_high_watermark(10)
    time.advance(10**12)
    assert log.delete_old_segments() == 0


# -- flushing, closing, reopening ------------------------------------------------------------------


def test_appends_force_a_flush_every_flush_interval_messages(open_log: OpenLog) -> None:
    log = open_log(flush_interval_messages=5)
    fill(log, 2, records_per_batch=2)
    assert log.unflushed_messages == 4
    fill(log, 1, records_per_batch=2)
    assert log.unflushed_messages == 0


def test_appends_force_a_flush_after_flush_interval_ms(open_log: OpenLog, time: ManualTime) -> None:
    log = open_log(flush_interval_ms=1_000)
    fill(log, 2)
    assert log.unflushed_messages == 2
    time.advance(1_000)
    fill(log, 1)
    assert log.unflushed_messages == 0


def test_a_closed_log_reopens_with_its_data_offsets_and_epochs(open_log: OpenLog) -> None:
    size = len(batch(b"0" * 10))
    log = open_log(segment_bytes=size * 3)
    fill(log, 4, epoch=0)
    fill(log, 4, epoch=2)
    log.maybe_increment_high_watermark(8)
    log.delete_records(1)
    before = all_values(log)
    log.close()
    assert (log.dir / "clean-shutdown").exists()
    reopened = open_log(segment_bytes=size * 3)
    assert not (log.dir / "clean-shutdown").exists()
    assert all_values(reopened) == before
    assert (reopened.log_start_offset, reopened.log_end_offset, reopened.num_segments) == (1, 8, 3)
    assert reopened.high_watermark == 1  # the broker restores it from its own checkpoint
    assert reopened.epoch_cache.epoch_entries() == [EpochEntry(0, 1), EpochEntry(2, 4)]
    fill(reopened, 1, epoch=2)
    assert reopened.log_end_offset == 9


def test_deleting_a_log_removes_its_directory(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 2)
    log.delete()
    assert not log.dir.exists()


def test_the_topic_and_partition_come_from_the_directory_name(tmp_path: Path, time: ManualTime) -> None:
    log = Log.open(tmp_path / "payments-eu-12", LogConfig(), time)
    assert (log.topic, log.partition) == ("payments-eu", 12)
    assert parse_topic_partition("a-0") == ("a", 0)
    for bad in ("nopartition", "-3", "topic-x"):
        with pytest.raises(ValueError):
            parse_topic_partition(bad)


def test_kafka_property_names_map_onto_the_config() -> None:
    config = LogConfig.from_kafka_props(
        {
            "log.segment.bytes": "1048576",
            "log.roll.hours": 1,
            "log.index.interval.bytes": "100",
            "log.index.size.max.bytes": "4096",
            "log.retention.hours": "2",
            "log.retention.minutes": "30",
            "log.retention.bytes": "5000",
            "log.flush.interval.messages": "10",
            "log.flush.interval.ms": "250",
            "broker.id": "3",
        }
    )
    assert config == LogConfig(
        segment_bytes=1048576,
        segment_ms=3_600_000,
        index_interval_bytes=100,
        segment_index_bytes=4096,
        retention_ms=30 * 60_000,
        retention_bytes=5000,
        flush_interval_messages=10,
        flush_interval_ms=250,
    )
    assert LogConfig.from_kafka_props({"segment.ms": 5, "log.roll.ms": 9}).segment_ms == 5
    assert LogConfig.from_kafka_props({}) == LogConfig()


def test_kafkas_defaults_are_the_config_defaults() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.segment_ms == 168 * 3_600_000
    assert (config.index_interval_bytes, config.segment_index_bytes) == (4096, 10 << 20)
    assert (config.retention_ms, config.retention_bytes) == (168 * 3_600_000, -1)
    assert (config.flush_interval_messages, config.flush_interval_ms) == (2**63 - 1, None)


def test_record_batches_written_by_the_log_are_byte_identical_on_a_follower(tmp_path: Path, time: ManualTime) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0", LogConfig(segment_bytes=300), time)
    follower = Log.open(tmp_path / "follower" / "t-0", LogConfig(segment_bytes=300), time)
    for epoch in (0, 0, 1, 1, 1, 3):
        leader.append_as_leader(build_batch([b"x" * 40, b"y"], timestamp_ms=START_MS), epoch)
    offset = 0
    while offset < leader.log_end_offset:
        fetched = leader.read(offset, 150)
        follower.append_as_follower(fetched)
        offset = list(iter_headers(fetched))[-1].next_offset
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    assert follower.epoch_cache.epoch_entries() == leader.epoch_cache.epoch_entries()
