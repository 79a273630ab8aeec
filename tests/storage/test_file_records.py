"""Reads as FileRecords (slices of the segment files, sent unread): the same bytes `read` returns, and only
ever over what this process verified (CRCs and gapless offsets), so nothing unchecked leaves unread."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from protocol.record_batch import build_batch
from storage.log import Log
from tests.storage.helpers import batch, batch_bases

OpenLog = Callable[..., Log]

pytestmark = pytest.mark.timeout(30)


def fill(log: Log, count: int) -> None:
    for i in range(count):
        log.append_as_leader(batch(*(b"v%d-%d" % (i, j) for j in range(1 + i % 3))), 0)


def test_file_records_hold_exactly_what_a_read_returns_across_segments(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=400)
    fill(log, 30)
    assert len(log.segments) > 3
    end = log.log_end_offset
    for start in range(end):
        for max_bytes in (1, 100, 500, 1 << 20):
            for upper in (None, end // 2, end - 1):
                if upper is not None and start >= upper:
                    continue
                records = log.read_file_records(start, max_bytes, upper)
                assert records is not None
                assert records.read() == log.read(start, max_bytes, upper), (start, max_bytes, upper)
                assert len(records) == len(log.read(start, max_bytes, upper))


def test_after_a_clean_restart_only_what_a_read_verified_is_sent_unread(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=400)
    fill(log, 30)
    log.close()
    log = open_log(segment_bytes=400)  # a clean shutdown: no recovery scan, nothing verified yet
    second = log.segments[1].base_offset
    assert log.read_file_records(0, 1 << 20) is None
    assert log.read_file_records(second, 1 << 20, upper_bound=log.segments[2].base_offset) is None
    log.read(0, 1 << 20, upper_bound=log.segments[2].base_offset)  # checks the first two segments
    records = log.read_file_records(second, 1 << 20, upper_bound=log.segments[2].base_offset)
    assert records is not None and batch_bases(records.read())[0] == second
    assert log.read_file_records(log.segments[2].base_offset, 1 << 20) is None  # still unchecked


def test_a_follower_batch_after_an_offset_gap_is_never_sent_unread(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_follower(build_batch([b"a", b"b"], base_offset=0, partition_leader_epoch=0))
    # one append holding a gap: offsets 2-4 are missing
    log.append_as_follower(
        build_batch([b"c"], base_offset=2, partition_leader_epoch=0)
        + build_batch([b"f"], base_offset=5, partition_leader_epoch=0)
    )
    assert log.read_file_records(0, 1 << 20, upper_bound=2) is not None  # before the gap: verified
    assert log.read_file_records(0, 1 << 20) is None
    assert log.read_file_records(5, 1 << 20) is None


def test_recovery_verifies_up_to_the_first_offset_gap_only(open_log: OpenLog) -> None:
    log = open_log()
    log.append_as_follower(
        build_batch([b"a", b"b"], base_offset=0, partition_leader_epoch=0)
        + build_batch([b"f"], base_offset=5, partition_leader_epoch=0)  # a gap: 2-4
    )
    log.close()
    log = open_log()  # the active segment is recovered on every open: each batch checked
    assert log.read_file_records(0, 1 << 20, upper_bound=2) is not None
    assert log.read_file_records(5, 1 << 20) is None


def test_a_truncation_or_a_close_makes_earlier_slices_stale(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 10)
    records = log.read_file_records(0, 1 << 20)
    assert records is not None and records.is_current()
    log.truncate_to(5)
    assert not records.is_current()
    fresh = log.read_file_records(0, 1 << 20)
    assert fresh is not None and fresh.is_current() and fresh.read() == log.read(0, 1 << 20)
    fill(log, 3)  # appends after a truncation are verified again
    again = log.read_file_records(0, 1 << 20)
    assert again is not None and again.read() == log.read(0, 1 << 20)
    log.close()
    assert not again.is_current()
