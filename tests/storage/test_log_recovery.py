"""Opening a log after a crash: torn tails, corrupt batches, lost checkpoints and leftover files."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from protocol.record_batch import iter_headers
from server_common.time import SystemTime
from storage.epoch_cache import EpochEntry
from storage.log import Log, LogConfig
from tests.storage.helpers import batch, kill_appender_after, values_by_offset

OpenLog = Callable[..., Log]


def fill(log: Log, count: int, epoch: int = 0) -> None:
    for _ in range(count):
        start = log.log_end_offset
        log.append_as_leader(batch(f"{start:06d}".encode()), epoch)


def crash(log: Log) -> None:
    """Stop using `log` without close(): no flush, no clean-shutdown marker (what kill -9 leaves)."""
    for segment in log.segments:
        os.close(segment._fd)
        segment._fd = -1


@pytest.mark.timeout(60)
def test_a_log_killed_mid_append_reopens_with_every_whole_batch_and_appends_again(tmp_path: Path) -> None:
    # Given a real process appending to a log as fast as it can,
    log_dir = tmp_path / "orders-0"
    # when it is killed mid-flight (and the machine then loses half of an in-flight batch),
    acknowledged = kill_appender_after(log_dir, 6000, segment_bytes=64 * 1024)
    assert not (log_dir / "clean-shutdown").exists()
    active = sorted(log_dir.glob("*.log"))[-1]
    with open(active, "ab") as f:
        f.write(batch(b"in flight" * 50, base_offset=10**6)[:200])

    # then reopening keeps every whole batch, in order, with the values the appender wrote,
    log = Log.open(log_dir, LogConfig(segment_bytes=64 * 1024), SystemTime())
    assert log.log_end_offset >= acknowledged
    assert log.log_end_offset % 3 == 0
    records = values_by_offset(log.read(0, 1 << 30))
    assert [offset for offset, _ in records] == list(range(log.log_end_offset))
    assert all(value == f"{offset:08d}".encode() * 20 for offset, value in records)
    assert log.epoch_cache.epoch_entries()[0] == EpochEntry(0, 0)
    assert log.latest_epoch == (log.log_end_offset - 3) // 3000
    # and the log takes appends again.
    end = log.log_end_offset
    log.append_as_leader(batch(b"after the crash"), leader_epoch=9)
    assert values_by_offset(log.read(end, 1000)) == [(end, b"after the crash")]


def test_half_a_batch_at_the_end_is_cut_off_on_reopen(open_log: OpenLog, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(segment_bytes=300)
    fill(log, 12)
    expected = log.read(0, 1 << 20)
    crash(log)
    with open(log.active_segment.log_path, "ab") as f:
        f.write(batch(b"torn write", base_offset=12)[:-5])
    with caplog.at_level(logging.WARNING):
        reopened = open_log(segment_bytes=300)
    assert reopened.log_end_offset == 12
    assert reopened.read(0, 1 << 20) == expected
    assert "truncated" in caplog.text
    fill(reopened, 1)
    assert values_by_offset(reopened.read(12, 100)) == [(12, b"000012")]


def test_a_flipped_byte_cuts_the_log_at_that_batch_and_drops_later_segments(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=300)
    fill(log, 40)
    segments = [s.log_path for s in log.segments]
    assert len(segments) >= 4
    damaged = log.segments[1]
    first_offset_of_damaged = damaged.base_offset
    crash(log)
    raw = bytearray(damaged.log_path.read_bytes())
    raw[-3] ^= 0xFF  # inside the last batch of the second segment
    damaged.log_path.write_bytes(raw)
    reopened = open_log(segment_bytes=300)
    batches = list(iter_headers(reopened.read(0, 1 << 20)))
    assert reopened.num_segments == 2
    assert reopened.log_end_offset == batches[-1].next_offset
    assert first_offset_of_damaged < reopened.log_end_offset < log.log_end_offset
    assert [p.exists() for p in segments] == [True, True] + [False] * (len(segments) - 2)


def test_a_cleanly_closed_log_rebuilds_a_lost_or_damaged_index(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=2_000, index_interval_bytes=50)
    fill(log, 200)
    expected = log.read(0, 1 << 20)
    log.close()
    index_files = sorted(log.dir.glob("*.index"))
    index_files[0].unlink()
    index_files[1].write_bytes(b"\x00\x00\x00")
    reopened = open_log(segment_bytes=2_000, index_interval_bytes=50)
    assert reopened.read(0, 1 << 20) == expected
    assert reopened.segments[0].index.entries > 0
    assert values_by_offset(reopened.read(117, 1))[0] == (117, b"000117")


def test_a_new_log_writes_no_checkpoint_until_it_has_something_to_keep(open_log: OpenLog) -> None:
    # A missing leader-epoch-checkpoint and log-start-offset mean "no epochs" and "the first segment's base
    # offset", so a new replica does not fsync them (a broker creates hundreds of replicas at once).
    log = open_log()
    assert not (log.dir / "leader-epoch-checkpoint").exists() and not (log.dir / "log-start-offset").exists()
    crash(log)
    reopened = open_log()
    assert (reopened.log_start_offset, reopened.log_end_offset, reopened.epoch_cache.epoch_entries()) == (0, 0, [])
    assert not (log.dir / "leader-epoch-checkpoint").exists()
    # the first epoch is written before its batches, and survives a crash
    reopened.maybe_assign_epoch_start_offset(3, 0)
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n3 0\n"
    fill(reopened, 2, epoch=3)
    crash(reopened)
    again = open_log()
    assert (again.log_end_offset, again.epoch_cache.epoch_entries()) == (2, [EpochEntry(3, 0)])


def test_a_missing_epoch_checkpoint_is_rebuilt_from_the_batches(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=300)
    fill(log, 3, epoch=0)
    fill(log, 4, epoch=2)
    fill(log, 5, epoch=5)
    entries = log.epoch_cache.epoch_entries()
    assert entries == [EpochEntry(0, 0), EpochEntry(2, 3), EpochEntry(5, 7)]
    log.close()
    (log.dir / "leader-epoch-checkpoint").unlink()
    reopened = open_log(segment_bytes=300)
    assert reopened.epoch_cache.epoch_entries() == entries
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 3\n5 7\n"


def test_a_damaged_epoch_checkpoint_is_rebuilt_from_the_batches(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 2, epoch=1)
    fill(log, 2, epoch=3)
    crash(log)
    (log.dir / "leader-epoch-checkpoint").write_text("0\n7\ngarbage\n")
    reopened = open_log()
    assert reopened.epoch_cache.epoch_entries() == [EpochEntry(1, 0), EpochEntry(3, 2)]


def test_epoch_entries_past_the_recovered_log_end_are_dropped(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 4, epoch=1)
    log.maybe_assign_epoch_start_offset(2, 4)  # a new leader's epoch, with nothing appended before the crash
    log.epoch_cache.assign(3, 10)
    crash(log)
    reopened = open_log()
    assert reopened.epoch_cache.epoch_entries() == [EpochEntry(1, 0)]


def test_the_log_start_offset_survives_a_crash(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=200)
    fill(log, 20)
    log.maybe_increment_high_watermark(20)
    log.delete_records(7)
    crash(log)
    reopened = open_log(segment_bytes=200)
    assert reopened.log_start_offset == 7
    assert values_by_offset(reopened.read(7, 1 << 20))[0] == (7, b"000007")


def test_a_log_start_past_the_recovered_end_restarts_the_log_there(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 5)
    crash(log)
    (log.dir / "log-start-offset").write_text("0\n1\n50\n")
    reopened = open_log()
    assert (reopened.log_start_offset, reopened.log_end_offset) == (50, 50)
    assert reopened.read(50, 100) == b""


def test_leftover_temporary_and_orphan_index_files_are_removed(open_log: OpenLog) -> None:
    log = open_log()
    fill(log, 3)
    log.close()
    (log.dir / "leader-epoch-checkpoint.tmp").write_text("half")
    (log.dir / "00000000000000000777.index").write_bytes(b"\x00" * 8)
    open_log()
    names = {p.name for p in log.dir.iterdir()}
    assert "leader-epoch-checkpoint.tmp" not in names
    assert "00000000000000000777.index" not in names
