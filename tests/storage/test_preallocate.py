"""log.preallocate: a segment reserves segment.bytes of disk when it is created and gives back what it did
not use when it rolls or closes; a crash leaves zeros after the data, which recovery cuts."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from server_common.log_config import topic_config_error, with_topic_configs
from server_common.time import SystemTime
from storage.log import Log, LogConfig
from tests.storage.helpers import batch, kill_appender_after, values_by_offset

OpenLog = Callable[..., Log]
SEGMENT = 64 * 1024


def fill(log: Log, count: int) -> None:
    for _ in range(count):
        start = log.log_end_offset
        log.append_as_leader(batch(f"{start:06d}".encode() * 10), 0)


def file_size(path: Path) -> int:
    return path.stat().st_size


def expected_values(count: int) -> list[tuple[int, bytes]]:
    return [(offset, f"{offset:06d}".encode() * 10) for offset in range(count)]


def test_a_new_segment_reserves_segment_bytes_and_serves_only_its_data(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=SEGMENT, preallocate=True)
    fill(log, 5)

    active = log.active_segment
    assert file_size(active.log_path) == SEGMENT
    assert os.stat(active.log_path).st_blocks * 512 >= SEGMENT  # reserved on disk, not a sparse hole
    assert active.size_in_bytes == log.size_in_bytes < SEGMENT
    assert values_by_offset(log.read(0, 1 << 20)) == expected_values(5)
    assert log.read(5, 1 << 20) == b""  # nothing past the data, though the file goes on


def test_a_new_log_reserves_its_first_segment_once(open_log: OpenLog, monkeypatch: pytest.MonkeyPatch) -> None:
    # Opening a log that does not exist yet creates its segment (reserved) and then reserves the active
    # segment of what it opened: the same segment, already reserved, is left alone.
    calls: list[tuple[int, int]] = []
    real = os.posix_fallocate

    def counting(fd: int, offset: int, length: int) -> None:
        calls.append((offset, length))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", counting)
    log = open_log(segment_bytes=SEGMENT, preallocate=True)
    assert calls == [(0, SEGMENT)]
    assert file_size(log.active_segment.log_path) == SEGMENT


def test_without_preallocate_the_file_is_its_data(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=SEGMENT)
    fill(log, 5)
    assert file_size(log.active_segment.log_path) == log.size_in_bytes


def test_a_roll_cuts_the_old_segment_back_to_its_data_and_reserves_the_new_one(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=SEGMENT, preallocate=True)
    fill(log, 1200)  # ~157 KiB of batches: two rolls

    *inactive, active = log.segments
    assert len(inactive) == 2
    for segment in inactive:
        assert file_size(segment.log_path) == segment.size_in_bytes > 0
    assert file_size(active.log_path) == SEGMENT
    assert values_by_offset(log.read(0, 1 << 30)) == expected_values(1200)


def test_a_clean_close_trims_and_the_reopened_log_reserves_its_active_segment_again(
    open_log: OpenLog, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_log(segment_bytes=SEGMENT, preallocate=True)
    fill(log, 20)
    log.close()
    assert file_size(log.segments[-1].log_path) == log.segments[-1].size_in_bytes

    with caplog.at_level(logging.INFO, logger="storage"):
        reopened = open_log(segment_bytes=SEGMENT, preallocate=True)
    assert "zero bytes" not in caplog.text  # nothing to cut after a clean close
    assert file_size(reopened.active_segment.log_path) == SEGMENT
    fill(reopened, 5)
    assert values_by_offset(reopened.read(0, 1 << 20)) == expected_values(25)


def test_truncation_keeps_the_data_before_it_and_the_active_segment_reserved(open_log: OpenLog) -> None:
    log = open_log(segment_bytes=SEGMENT, preallocate=True)
    fill(log, 10)
    log.truncate_to(6)  # inside the active segment (a follower's truncation on divergence)
    assert file_size(log.active_segment.log_path) == SEGMENT
    fill(log, 1200)
    assert log.num_segments == 3
    log.truncate_to(100)  # back into the first segment: the later two go, the first is active again
    assert log.num_segments == 1
    assert file_size(log.active_segment.log_path) == SEGMENT
    fill(log, 2)
    assert values_by_offset(log.read(0, 1 << 20)) == expected_values(102)


@pytest.mark.timeout(60)
def test_a_killed_appender_leaves_zeros_that_recovery_cuts_without_losing_a_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a real process appending to a preallocated log, killed with SIGKILL mid-segment,
    log_dir = tmp_path / "orders-0"
    acknowledged = kill_appender_after(log_dir, 3000, segment_bytes=256 * 1024, preallocate=True)
    *rolled, active = sorted(log_dir.glob("*.log"))
    assert rolled  # ~565 KiB appended: at least two rolls
    assert file_size(active) == 256 * 1024  # the reserved space, zeros after the data
    for segment in rolled:
        assert file_size(segment) < 256 * 1024  # cut back when it rolled

    # when the log is opened again,
    with caplog.at_level(logging.INFO, logger="storage"):
        log = Log.open(log_dir, LogConfig(segment_bytes=256 * 1024, preallocate=True), SystemTime())

    # then every acknowledged batch is there, in order, the zeros were cut as unused space (not reported
    # as damage), and appends continue after the data.
    assert log.log_end_offset >= acknowledged
    records = values_by_offset(log.read(0, 1 << 30))
    assert [offset for offset, _ in records] == list(range(log.log_end_offset))
    assert all(value == f"{offset:08d}".encode() * 20 for offset, value in records)
    assert "zero bytes after its data" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    end = log.log_end_offset
    fill(log, 1)
    assert log.read(end, 1000) != b""


def test_no_reservation_that_would_leave_under_a_tenth_of_the_disk_free(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A file system of 1,000 blocks of 4 KiB with 150 free: a 1 MiB segment (256 blocks) does not fit in
    # what is above the last tenth (50 free would remain of 100 kept), so it is not reserved.
    def small_disk(fd: int) -> os.statvfs_result:
        real = os.statvfs("/")
        fields = list(real)
        fields[0] = fields[1] = 4096  # f_bsize, f_frsize
        fields[2], fields[4] = 1000, 150  # f_blocks, f_bavail
        return type(real)(fields)

    monkeypatch.setattr(os, "fstatvfs", small_disk)
    with caplog.at_level(logging.INFO, logger="storage"):
        log = open_log(segment_bytes=1024 * 1024, preallocate=True)
    fill(log, 5)

    assert file_size(log.active_segment.log_path) == log.size_in_bytes  # appended as it goes
    assert "under a tenth of the disk free" in caplog.text
    assert values_by_offset(log.read(0, 1 << 20)) == expected_values(5)


def test_the_config_takes_kafka_names_and_refuses_what_is_not_a_boolean() -> None:
    assert LogConfig.from_kafka_props({"log.preallocate": "true"}).preallocate is True
    assert LogConfig.from_kafka_props({"log.preallocate": True, "preallocate": "false"}).preallocate is False
    assert LogConfig.from_kafka_props({}).preallocate is False  # Kafka's default
    assert with_topic_configs(LogConfig(), {"preallocate": "true"}).preallocate is True
    assert with_topic_configs(LogConfig(preallocate=True), {}).preallocate is True
    assert topic_config_error({"preallocate": "yes"}) == "topic config preallocate: expected true or false, got 'yes'"
    with pytest.raises(ValueError, match="log.preallocate: expected true or false"):
        LogConfig.from_kafka_props({"log.preallocate": "sometimes"})
