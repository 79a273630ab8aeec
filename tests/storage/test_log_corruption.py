"""Corruption in closed segments after a clean restart: a base offset changed on disk (outside the CRC) is
found at open by a walk over the batch headers; a payload byte changed is found the first time it would
be served. Either way the replica goes offline instead of serving a hole or garbage."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from protocol.errors import KafkaStorageError
from protocol.record_batch import iter_headers
from storage.log import Log
from storage.segment import LogSegment
from tests.storage.helpers import batch

OpenLog = Callable[..., Log]


def fill(log: Log, count: int) -> None:
    for _ in range(count):
        log.append_as_leader(batch(f"{log.log_end_offset:06d}".encode()), 0)


def closed_log_with_a_damaged_middle_segment(open_log: OpenLog, damage: Callable[[bytearray], None]) -> Log:
    log = open_log(segment_bytes=300)
    fill(log, 40)
    damaged = log.segments[1].log_path
    log.close()  # a clean shutdown: no recovery scan on the next open
    raw = bytearray(damaged.read_bytes())
    damage(raw)
    damaged.write_bytes(raw)
    return open_log(segment_bytes=300)


def flip_base_offset_of_second_batch(raw: bytearray) -> None:
    [_, second, *_] = iter_headers(bytes(raw))
    raw[second.position + 7] ^= 0x40  # the base offset, outside the CRC: now 64 offsets ahead


def flip_payload_byte(raw: bytearray) -> None:
    raw[-3] ^= 0xFF


def test_a_changed_base_offset_in_a_closed_segment_takes_the_log_offline_at_open(
    open_log: OpenLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given no read of the log can happen (a read would find the jump too, later)
    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the log was read before its offsets were checked")

    monkeypatch.setattr(LogSegment, "read_span", no_read)
    monkeypatch.setattr(LogSegment, "span", no_read)
    # when a clean restart finds a batch of a closed segment 64 offsets ahead of where its predecessor ends
    log = closed_log_with_a_damaged_middle_segment(open_log, flip_base_offset_of_second_batch)
    # then the replica is offline before anything was served from it: no reads, no appends
    assert log.offline_reason is not None and "expected" in log.offline_reason, log.offline_reason
    assert f"{log.segments[1].base_offset:020d}.log" in log.offline_reason
    monkeypatch.undo()
    with pytest.raises(KafkaStorageError):
        log.read(0, 100)
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(batch(b"x"), 0)


def test_a_base_offset_that_goes_back_in_a_closed_segment_takes_the_log_offline_at_open(open_log: OpenLog) -> None:
    def second_batch_repeats_the_first(raw: bytearray) -> None:
        [first, second, *_] = iter_headers(bytes(raw))
        raw[second.position : second.position + 8] = raw[first.position : first.position + 8]

    log = closed_log_with_a_damaged_middle_segment(open_log, second_batch_repeats_the_first)
    assert log.offline_reason is not None and "expected" in log.offline_reason, log.offline_reason


def test_a_first_batch_before_its_segment_base_offset_takes_the_log_offline_at_open(open_log: OpenLog) -> None:
    def first_batch_one_back(raw: bytearray) -> None:
        [first, *_] = iter_headers(bytes(raw))
        raw[first.position : first.position + 8] = (first.base_offset - 1).to_bytes(8, "big")

    log = closed_log_with_a_damaged_middle_segment(open_log, first_batch_one_back)
    assert log.offline_reason is not None and "expected" in log.offline_reason, log.offline_reason


def test_a_flipped_payload_byte_in_a_closed_segment_is_never_served(open_log: OpenLog) -> None:
    log = closed_log_with_a_damaged_middle_segment(open_log, flip_payload_byte)
    with pytest.raises(KafkaStorageError, match="CRC mismatch"):
        log.read(log.segments[1].base_offset, 1 << 20)
    assert log.offline_reason is not None


def test_a_segment_whose_offsets_do_not_reach_the_next_one_takes_the_log_offline_at_open(open_log: OpenLog) -> None:
    def flip_last_batch_base_offset(raw: bytearray) -> None:
        *_, last = iter_headers(bytes(raw))
        raw[last.position + 7] ^= 0x40

    log = closed_log_with_a_damaged_middle_segment(open_log, flip_last_batch_base_offset)
    assert log.offline_reason is not None and "the next segment starts at" in log.offline_reason


def test_an_undamaged_log_reads_whole_after_a_clean_restart_and_each_crc_is_checked_once(open_log: OpenLog) -> None:
    log = closed_log_with_a_damaged_middle_segment(open_log, lambda raw: None)
    data = log.read(0, 1 << 20)
    assert [h.base_offset for h in iter_headers(data)][:3] == [0, 1, 2]
    assert log.offline_reason is None
    assert all(s._crc_verified_end == s.size_in_bytes for s in log.segments[:-1])
