"""Checkpoint files: atomic replacement, Kafka's text formats, and clear errors for damaged files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.checkpoint import (
    CorruptCheckpointError,
    HighWatermarkCheckpoint,
    LeaderEpochCheckpoint,
    LogStartOffsetCheckpoint,
    write_atomically,
)
from storage.epoch_cache import EpochEntry


def test_an_atomic_write_replaces_the_file_and_leaves_no_temporary_behind(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_atomically(path, b"old")
    write_atomically(path, b"new contents")
    assert path.read_bytes() == b"new contents"
    assert os.listdir(tmp_path) == ["cp"]


def test_an_interrupted_atomic_write_leaves_the_old_contents(tmp_path: Path) -> None:
    # Given a checkpoint, when a writer dies after writing the temporary file but before the rename,
    path = tmp_path / "cp"
    write_atomically(path, b"committed")
    (tmp_path / "cp.tmp").write_bytes(b"half-writ")
    # then readers still see the committed contents.
    assert path.read_bytes() == b"committed"


def test_high_watermarks_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    checkpoint = HighWatermarkCheckpoint(tmp_path / "replication-offset-checkpoint")
    checkpoint.write({("orders", 1): 877, ("orders", 0): 1200, ("audit-log", 3): 0})
    assert checkpoint.read() == {("orders", 1): 877, ("orders", 0): 1200, ("audit-log", 3): 0}
    assert checkpoint.path.read_text() == "0\n3\naudit-log 3 0\norders 0 1200\norders 1 877\n"


def test_a_missing_checkpoint_reads_as_empty(tmp_path: Path) -> None:
    assert HighWatermarkCheckpoint(tmp_path / "hw").read() == {}
    assert LeaderEpochCheckpoint(tmp_path / "epochs").read() == []
    assert LogStartOffsetCheckpoint(tmp_path / "start").read() is None


def test_leader_epochs_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    checkpoint = LeaderEpochCheckpoint(tmp_path / "leader-epoch-checkpoint")
    checkpoint.write([EpochEntry(0, 0), EpochEntry(3, 1200)])
    assert checkpoint.read() == [EpochEntry(0, 0), EpochEntry(3, 1200)]
    assert checkpoint.path.read_text() == "0\n2\n0 0\n3 1200\n"


def test_the_log_start_offset_round_trips(tmp_path: Path) -> None:
    checkpoint = LogStartOffsetCheckpoint(tmp_path / "log-start-offset")
    checkpoint.write(500)
    assert checkpoint.read() == 500


@pytest.mark.parametrize(
    "contents, problem",
    [
        ("", "missing version"),
        ("1\n0\n", "unsupported version"),
        ("0\ntwo\n", "malformed count"),
        ("0\n2\norders 0 5\n", "count says 2"),
        ("0\n1\norders 0\n", "malformed line"),
        ("0\n1\norders zero 5\n", "not an integer"),
    ],
)
def test_a_damaged_high_watermark_checkpoint_raises_a_clear_error(tmp_path: Path, contents: str, problem: str) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(contents)
    with pytest.raises(CorruptCheckpointError, match=problem) as raised:
        HighWatermarkCheckpoint(path).read()
    assert str(path) in str(raised.value)


def test_a_topic_name_with_whitespace_cannot_be_checkpointed(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        HighWatermarkCheckpoint(tmp_path / "hw").write({("bad topic", 0): 1})
