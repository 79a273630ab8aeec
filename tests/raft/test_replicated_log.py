"""The replicated metadata log on its own: what the leader makes of a fetcher's position, snapshots written,
read, installed and refused when corrupt, and the log start that follows them."""

from __future__ import annotations

from pathlib import Path

import pytest

from raft.replicated_log import (
    Diverging,
    OffsetAndEpoch,
    ReplicatedLog,
    Snapshot,
    SnapshotError,
    SnapshotNeeded,
    ValidOffset,
    encode_snapshot,
)
from server_common.time import ManualTime


def _log(tmp_path: Path, name: str = "n") -> ReplicatedLog:
    return ReplicatedLog(tmp_path / name, ManualTime(), segment_bytes=4096)


def _append(log: ReplicatedLog, epoch: int, *values: bytes) -> None:
    for value in values:
        log.append_as_leader([value], epoch)


def test_a_fetcher_whose_last_epoch_ends_later_here_may_fetch_on(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _append(log, 1, b"a", b"b")
    _append(log, 2, b"c")
    assert log.validate_offset_and_epoch(0, 0) == ValidOffset()
    assert log.validate_offset_and_epoch(2, 1) == ValidOffset()
    assert log.validate_offset_and_epoch(3, 2) == ValidOffset()


def test_a_fetcher_whose_epoch_ended_earlier_here_is_told_where(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _append(log, 1, b"a", b"b")
    _append(log, 3, b"c")
    # it holds epoch 1 past offset 2: epoch 1 ends at 2 here
    assert log.validate_offset_and_epoch(4, 1) == Diverging(1, 2)
    # it holds an epoch 2 the leader never had: the largest epoch below it here is 1, ending at 2
    assert log.validate_offset_and_epoch(3, 2) == Diverging(1, 2)


def test_snapshots_are_read_back_and_move_the_log_start_up(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _append(log, 1, b"a", b"b", b"c")
    log.update_high_watermark(3)
    log.write_snapshot(Snapshot(2, 1, [b"state-at-2"]))
    assert log.latest_snapshot_id() == OffsetAndEpoch(2, 1)
    assert log.log_start_offset == 2 and log.log_end_offset == 3
    read = log.read_snapshot()
    assert read is not None and read.values == [b"state-at-2"]
    # a fetcher below the log start must load the snapshot first
    assert log.validate_offset_and_epoch(1, 1) == SnapshotNeeded(OffsetAndEpoch(2, 1))
    reopened = ReplicatedLog(tmp_path / "n", ManualTime(), segment_bytes=4096)
    assert reopened.latest_snapshot_id() == OffsetAndEpoch(2, 1) and reopened.log_start_offset == 2


def test_a_snapshot_past_the_high_watermark_is_refused(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _append(log, 1, b"a", b"b")
    log.update_high_watermark(1)
    with pytest.raises(ValueError, match="past the high watermark"):
        log.write_snapshot(Snapshot(2, 1, []))


def test_an_installed_snapshot_empties_the_log_and_gives_its_epoch_as_the_last_fetched(tmp_path: Path) -> None:
    follower = _log(tmp_path, "f")
    _append(follower, 1, b"stale")
    follower.install_snapshot(encode_snapshot(Snapshot(10, 4, [b"x"])))
    assert (follower.log_start_offset, follower.log_end_offset, follower.last_fetched_epoch) == (10, 10, 4)
    assert follower.end_offset_for_epoch(4) == (4, 10)


def test_a_corrupt_snapshot_is_refused(tmp_path: Path) -> None:
    follower = _log(tmp_path, "f")
    data = bytearray(encode_snapshot(Snapshot(5, 2, [b"x"])))
    data[-1] ^= 0xFF
    with pytest.raises(SnapshotError, match="checksum"):
        follower.install_snapshot(bytes(data))
    assert follower.latest_snapshot_id() is None


def test_a_snapshot_file_cut_short_by_a_crash_is_not_used(tmp_path: Path) -> None:
    log = _log(tmp_path)
    _append(log, 1, b"a")
    log.update_high_watermark(1)
    log.write_snapshot(Snapshot(1, 1, [b"s"]))
    path = log.snapshot_path(OffsetAndEpoch(1, 1))
    path.write_bytes(path.read_bytes()[:-3])
    reopened = ReplicatedLog(tmp_path / "n", ManualTime(), segment_bytes=4096)
    with pytest.raises(SnapshotError):
        reopened.read_snapshot()
