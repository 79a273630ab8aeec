"""Log.fetch_offset_by_timestamp: the earliest record whose timestamp is at least the one asked (ListOffsets)."""

from __future__ import annotations

from collections.abc import Callable

import msgpack

from protocol.record_batch import assemble_batch
from storage.log import Log
from tests.storage.helpers import batch

OpenLog = Callable[..., Log]
SEGMENT_BYTES = 3 * len(batch(b"v", timestamp_ms=0))  # three one-record batches a segment


def timed_batch(first_ts: int, deltas: list[int], attributes: int = 0, max_ts: int | None = None) -> bytes:
    """A batch whose records have timestamps first_ts + delta, in the order given."""
    items = [[i, delta, None, f"v{i}".encode()] for i, delta in enumerate(deltas)]
    largest = first_ts + max(deltas) if max_ts is None else max_ts
    payload = msgpack.packb(items, use_bin_type=True)
    return assemble_batch(0, -1, len(deltas) - 1, first_ts, largest, len(deltas), payload, attributes=attributes)


def append_at(log: Log, *timestamps: int, epoch: int = 0) -> None:
    """One one-record batch per timestamp."""
    for ts in timestamps:
        log.append_as_leader(batch(b"v", timestamp_ms=ts), epoch)


def test_the_lookup_finds_the_first_record_at_or_after_the_timestamp_across_segments(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=SEGMENT_BYTES)
    append_at(log, *range(1000, 10_000, 1000), epoch=0)  # offsets 0..8 at 1000..9000
    append_at(log, 10_000, epoch=4)
    assert len(log.segments) == 4
    assert log.fetch_offset_by_timestamp(0) == (1000, 0, 0)
    assert log.fetch_offset_by_timestamp(1000) == (1000, 0, 0)
    assert log.fetch_offset_by_timestamp(1001) == (2000, 1, 0)
    assert log.fetch_offset_by_timestamp(3500) == (4000, 3, 0)  # the first record of the second segment
    assert log.fetch_offset_by_timestamp(9000) == (9000, 8, 0)
    assert log.fetch_offset_by_timestamp(10_000) == (10_000, 9, 4), "the epoch is the batch's"
    assert log.fetch_offset_by_timestamp(10_001) is None


def test_timestamps_need_not_increase(open_log: OpenLog) -> None:
    """Kafka's rule is the earliest offset whose timestamp is at least the target, not a binary search."""
    log = open_log(segment_bytes=SEGMENT_BYTES)
    append_at(log, 5000, 3000, 1000, 2000, 6000)  # segments [5000 3000 1000] [2000 6000]
    assert log.fetch_offset_by_timestamp(4000) == (5000, 0, 0)
    assert log.fetch_offset_by_timestamp(5500) == (6000, 4, 0)
    assert log.fetch_offset_by_timestamp(1500) == (5000, 0, 0)


def test_inside_a_batch_the_records_are_decoded(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_leader(timed_batch(1000, [5, 0, 10, 7]), 0)  # record timestamps 1005 1000 1010 1007
    assert log.fetch_offset_by_timestamp(1000) == (1005, 0, 0)
    assert log.fetch_offset_by_timestamp(1006) == (1010, 2, 0)
    assert log.fetch_offset_by_timestamp(1010) == (1010, 2, 0)
    assert log.fetch_offset_by_timestamp(1011) is None


def test_a_log_append_time_batch_gives_every_record_its_max_timestamp(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_follower(timed_batch(1000, [0, 1, 2], attributes=0x08, max_ts=9000))
    assert log.fetch_offset_by_timestamp(8000) == (9000, 0, -1)
    log.update_high_watermark(3)
    log.maybe_increment_log_start_offset(1)
    assert log.fetch_offset_by_timestamp(8000) == (9000, 1, -1)
    assert log.fetch_offset_by_timestamp(9001) is None


def test_truncation_forgets_what_it_removed(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=SEGMENT_BYTES)
    append_at(log, 1000, 2000, 3000, 4000, 5000)
    assert log.fetch_offset_by_timestamp(4500) == (5000, 4, 0)
    log.truncate_to(2)  # the second segment goes, and the first loses its last batch
    assert log.fetch_offset_by_timestamp(2500) is None
    assert log.fetch_offset_by_timestamp(1500) == (2000, 1, 0)
    append_at(log, 2600, epoch=1)
    assert log.fetch_offset_by_timestamp(2500) == (2600, 2, 1)
    assert log.fetch_offset_by_timestamp(2601) is None


def test_records_below_the_log_start_are_not_answered(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=SEGMENT_BYTES)
    append_at(log, 1000, 2000, 3000, 4000, 5000, 6000, 7000)
    log.update_high_watermark(7)
    log.maybe_increment_log_start_offset(4)  # deletes the first segment, and starts inside the second
    assert log.segments[0].base_offset == 3
    assert log.fetch_offset_by_timestamp(0) == (5000, 4, 0)
    assert log.fetch_offset_by_timestamp(4000) == (5000, 4, 0)
    assert log.fetch_offset_by_timestamp(6500) == (7000, 6, 0)


def test_a_reopened_log_answers_the_same(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=SEGMENT_BYTES)
    append_at(log, 1000, 2000, 3000, 4000, 5000)
    log.close()
    log = open_log(segment_bytes=SEGMENT_BYTES)
    assert log.fetch_offset_by_timestamp(2500) == (3000, 2, 0)
    assert log.fetch_offset_by_timestamp(5001) is None
    append_at(log, 6000)
    assert log.fetch_offset_by_timestamp(5001) == (6000, 5, 0)


def test_a_resent_batch_is_answered_with_the_original_append_time(open_log: OpenLog) -> None:
    from protocol.record_batch import build_batch
    from storage.log_validator import validate_records

    log = open_log()
    produced = build_batch([b"a", b"b"], timestamp_ms=1_000, producer_id=7, producer_epoch=0, base_sequence=0)
    first = log.append_as_leader(validate_records(produced, log_append_time_ms=5_000), 0)
    assert (first.duplicate, first.max_timestamp) == (False, 5_000)
    again = log.append_as_leader(validate_records(produced, log_append_time_ms=9_000), 0)
    assert (again.duplicate, again.first_offset, again.max_timestamp) == (True, 0, 5_000)
    log.close()
    log = open_log()  # the producer state comes back from the snapshot written at close, timestamps kept
    again = log.append_as_leader(validate_records(produced, log_append_time_ms=9_000), 0)
    assert (again.duplicate, again.max_timestamp) == (True, 5_000)
