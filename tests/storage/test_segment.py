"""A single segment and its offset index: appends, reads, translation, truncation, reload and recovery."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.record_batch import iter_headers
from server_common.time import ManualTime
from storage.offset_index import OffsetIndex
from storage.segment import NO_TIMESTAMP, LogSegment
from tests.storage.helpers import START_MS, batch, batch_bases, values_by_offset


def new_segment(tmp_path: Path, base_offset: int = 40, index_interval_bytes: int = 0) -> LogSegment:
    return LogSegment.create(
        tmp_path,
        base_offset,
        time=ManualTime(START_MS),
        index_interval_bytes=index_interval_bytes,
        segment_index_bytes=1024,
    )


def append(segment: LogSegment, base_offset: int, *values: bytes, timestamp_ms: int = START_MS) -> bytes:
    data = batch(*values, base_offset=base_offset, timestamp_ms=timestamp_ms)
    segment.append(data, base_offset + len(values) - 1, timestamp_ms, [(base_offset, len(data))])
    return data


# -- offset index ----------------------------------------------------------------------------------


def test_index_lookup_finds_the_largest_entry_at_or_below_the_offset(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", base_offset=100, max_index_size=80)
    for offset, position in [(110, 500), (120, 1000), (130, 1500)]:
        index.append(offset, position)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(110) == (110, 500)
    assert index.lookup(125) == (120, 1000)
    assert index.lookup(10_000) == (130, 1500)


def test_index_truncation_removes_entries_at_and_after_the_offset(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", base_offset=100, max_index_size=80)
    for offset, position in [(110, 500), (120, 1000), (130, 1500)]:
        index.append(offset, position)
    index.flush()
    index.truncate_to(120)
    assert index.entries == 1 and index.lookup(125) == (110, 500)
    reloaded = OffsetIndex(index.path, base_offset=100, max_index_size=80)
    assert reloaded.load(segment_size=2000) and reloaded.lookup(125) == (110, 500)


def test_an_index_is_full_at_segment_index_bytes_over_eight(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", base_offset=0, max_index_size=16)
    index.append(1, 10)
    assert not index.is_full
    index.append(2, 20)
    assert index.is_full
    with pytest.raises(ValueError):
        index.append(3, 30)


def test_an_index_round_trips_through_its_file_as_relative_offsets(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", base_offset=100, max_index_size=80)
    index.append(110, 500)
    index.flush()
    index.append(120, 1000)
    index.flush()
    assert index.path.read_bytes() == bytes.fromhex("0000000a000001f400000014000003e8")
    reloaded = OffsetIndex(index.path, base_offset=100, max_index_size=80)
    assert reloaded.load(segment_size=2000)
    assert reloaded.lookup(1000) == (120, 1000)


@pytest.mark.parametrize(
    "contents",
    [
        bytes.fromhex("0000000a000001f40000"),  # not a whole number of entries
        bytes.fromhex("00000014000003e80000000a000001f4"),  # offsets go backwards
        bytes.fromhex("0000000a00100000"),  # position beyond the segment
    ],
)
def test_an_inconsistent_index_file_fails_its_sanity_check(tmp_path: Path, contents: bytes) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(contents)
    index = OffsetIndex(path, base_offset=100, max_index_size=80)
    assert not index.load(segment_size=2000)
    assert index.entries == 0


# -- segment ---------------------------------------------------------------------------------------


def test_next_offset_is_the_base_when_empty_and_one_past_the_last_offset_after_appends(
    tmp_path: Path,
) -> None:
    segment = new_segment(tmp_path, base_offset=40)
    assert segment.next_offset == 40 and segment.is_empty
    append(segment, 50, b"a", b"b", b"c")
    assert segment.next_offset == 53
    assert segment.log_path.name == "00000000000000000040.log"


def test_reading_before_the_first_offset_returns_the_first_batch(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=40)
    first = append(segment, 50, b"hello", b"there")
    data = segment.read(41, 1000)
    assert data is not None and data.startswith(first)


def test_reading_after_the_last_offset_finds_nothing(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    append(segment, 50, b"hello", b"there")
    assert segment.read(52, 1000) is None


def test_reading_from_a_gap_returns_the_batch_after_the_gap(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    append(segment, 50, b"hello", b"there")
    second = append(segment, 60, b"alpha", b"beta")
    assert segment.read(55, 1000) == second


def test_reads_return_whole_batches_only(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=0)
    sizes = [len(append(segment, i * 2, b"x" * (10 + i), b"y")) for i in range(10)]
    data = segment.read(0, sizes[0] + sizes[1] + sizes[2] - 1)
    assert data is not None and batch_bases(data) == [0, 2]
    assert segment.read(0, sizes[0] - 1) == b""
    one = segment.read(0, sizes[0] - 1, min_one_message=True)
    assert one is not None and batch_bases(one) == [0]


def test_a_read_stops_at_max_position(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=0)
    for i in range(5):
        append(segment, i, b"v%d" % i)
    position = segment.position_of_first_batch_from(3)
    assert position is not None
    data = segment.read(0, 10_000, max_position=position)
    assert data is not None and batch_bases(data) == [0, 1, 2]


def test_a_read_from_an_indexed_batch_to_the_end_reads_no_header_and_returns_what_a_walk_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "dense").mkdir()
    (tmp_path / "sparse").mkdir()
    dense = new_segment(tmp_path / "dense", base_offset=10, index_interval_bytes=0)  # every batch indexed
    sparse = new_segment(tmp_path / "sparse", base_offset=10, index_interval_bytes=1 << 30)  # none
    offset = 10
    for i in range(12):
        values = [b"v" * (5 + 7 * i) for _ in range(1 + i % 3)]
        for segment in (dense, sparse):
            append(segment, offset, *values)
        offset += len(values) + (3 if i == 6 else 0)  # and a gap after the seventh batch
    bases = batch_bases(dense.read_bytes(0, dense.size_in_bytes))
    limits = [None, *(dense.position_of_first_batch_from(b) for b in bases[3::4])]
    for start in range(8, offset + 2):
        for max_bytes in (0, 40, 200, 1 << 20):
            for max_position in limits:
                for min_one in (False, True):
                    args = (start, max_bytes, max_position, min_one)
                    assert dense.read_at(*args) == sparse.read_at(*args), args

    walks = 0
    real_walk = LogSegment._walk_headers

    def counting_walk(self: LogSegment, position: int):  # type: ignore[no-untyped-def]
        nonlocal walks
        walks += 1
        yield from real_walk(self, position)

    monkeypatch.setattr(LogSegment, "_walk_headers", counting_walk)
    tail = dense.read_at(bases[-2], 1 << 20)  # what a follower's next fetch looks like
    assert tail is not None and batch_bases(tail[1]) == bases[-2:] and walks == 0
    assert dense.read_at(bases[-2] + 1, 1 << 20) == sparse.read_at(bases[-2] + 1, 1 << 20) and walks > 0


def test_translate_offset_finds_the_batch_holding_the_offset(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=0, index_interval_bytes=100)
    positions = []
    for i in range(50):
        positions.append(segment.size_in_bytes)
        append(segment, i * 3, b"a", b"b", b"c")
    assert segment.index.entries > 3  # the index is sparse but used
    for i in range(50):
        for offset in (i * 3, i * 3 + 2):
            assert segment.translate_offset(offset) == positions[i]
    assert segment.translate_offset(150) is None


def test_truncating_removes_the_batch_holding_the_offset_and_everything_after(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=0)
    sizes = [len(append(segment, i * 2, b"a", b"b")) for i in range(6)]
    removed = segment.truncate_to(5)  # inside the batch 4..5
    assert removed == sum(sizes[2:])
    assert segment.next_offset == 4
    assert segment.size_in_bytes == sizes[0] + sizes[1]
    assert segment.read(4, 1000) is None
    appended = append(segment, 4, b"again")
    assert segment.read(4, 1000) == appended


def test_truncating_an_empty_segment_or_past_its_end_removes_nothing(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    assert segment.truncate_to(40) == 0
    append(segment, 40, b"a")
    assert segment.truncate_to(41) == 0 and segment.next_offset == 41


def test_truncating_to_the_base_offset_empties_the_segment_and_restarts_its_clock(tmp_path: Path) -> None:
    time = ManualTime(START_MS)
    segment = LogSegment.create(tmp_path, 40, time=time, index_interval_bytes=0, segment_index_bytes=1024)
    append(segment, 40, b"a")
    append(segment, 41, b"b")
    time.advance(5_000)
    segment.truncate_to(40)
    assert segment.is_empty and segment.next_offset == 40 and segment.index.entries == 0
    assert segment.created_ms == START_MS + 5_000
    assert segment.largest_timestamp == NO_TIMESTAMP


def test_largest_timestamp_and_next_offset_are_reloaded_after_truncation(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=0)
    append(segment, 0, b"a", timestamp_ms=100)
    append(segment, 1, b"b", timestamp_ms=300)
    append(segment, 2, b"c", timestamp_ms=200)
    assert segment.largest_timestamp == 300
    segment.truncate_to(1)
    assert segment.largest_timestamp == 100
    assert segment.next_offset == 1


def test_a_cleanly_closed_segment_reopens_with_its_index_and_offsets(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=0, index_interval_bytes=64)
    for i in range(30):
        append(segment, i, b"value-%d" % i)
    entries = segment.index.entries
    segment.flush()
    segment.close()
    reopened = LogSegment.open_existing(
        tmp_path, 0, time=ManualTime(), index_interval_bytes=64, segment_index_bytes=1024
    )
    assert reopened.index.entries == entries
    assert reopened.next_offset == 30
    data = reopened.read(17, 10_000)
    assert data is not None and values_by_offset(data)[0] == (17, b"value-17")


def test_a_missing_index_is_rebuilt_from_the_batches(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=0, index_interval_bytes=64)
    for i in range(30):
        append(segment, i, b"value-%d" % i)
    entries = segment.index.entries
    segment.close()
    segment.index.path.unlink()
    reopened = LogSegment.open_existing(
        tmp_path, 0, time=ManualTime(), index_interval_bytes=64, segment_index_bytes=1024
    )
    assert reopened.index.entries == entries
    assert reopened.translate_offset(29) == segment.size_in_bytes - len(batch(b"value-29"))


def test_recovery_keeps_valid_batches_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=0)
    good = b"".join(append(segment, i, b"v%d" % i) for i in range(5))
    segment.close()
    with open(segment.log_path, "ab") as f:
        f.write(batch(b"torn", base_offset=5)[:30])
    recovered = LogSegment(tmp_path, 0, time=ManualTime(), index_interval_bytes=0, segment_index_bytes=1024)
    assert recovered.recover() == 30
    assert recovered.next_offset == 5
    assert recovered.read(0, 10_000) == good
    assert segment.log_path.read_bytes() == good


def test_recovery_cuts_at_the_first_batch_with_a_bad_crc(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=0)
    batches = [append(segment, i, b"value-%d" % i) for i in range(5)]
    segment.close()
    raw = bytearray(segment.log_path.read_bytes())
    raw[len(batches[0]) + len(batches[1]) + 60] ^= 0xFF  # a payload byte of the third batch
    segment.log_path.write_bytes(raw)
    recovered = LogSegment(tmp_path, 0, time=ManualTime(), index_interval_bytes=0, segment_index_bytes=1024)
    epochs: list[tuple[int, int]] = []
    assert recovered.recover(lambda e, o: epochs.append((e, o))) == sum(len(b) for b in batches[2:])
    assert recovered.next_offset == 2
    assert [h.base_offset for h in iter_headers(recovered.read(0, 10_000) or b"")] == [0, 1]
    assert epochs == [(-1, 0)]


def test_recovery_reads_batches_larger_than_its_read_chunk(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=0)
    big = append(segment, 0, b"x" * (9 * 1024 * 1024))
    small = append(segment, 1, b"y")
    segment.close()
    recovered = LogSegment(tmp_path, 0, time=ManualTime(), index_interval_bytes=0, segment_index_bytes=1024)
    assert recovered.recover() == 0
    assert recovered.next_offset == 2
    assert recovered.read(0, 100, min_one_message=True) == big
    assert recovered.read(1, 100) == small


# -- the one-batch append (append_batch) against should_roll + append -------------------------------


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(1, 3), st.integers(1, 80), st.integers(0, 15), st.integers(-5, 5)),
        min_size=1,
        max_size=25,
    ),
    index_interval_bytes=st.sampled_from([0, 150, 100_000]),
    idle_ms=st.integers(0, 200),  # before the first batch: an empty segment never rolls, however old
)
def test_append_batch_does_what_should_roll_and_append_do(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[int, int, int, int]],
    index_interval_bytes: int,
    idle_ms: int,
) -> None:
    # The leader's hot path writes one batch with `append_batch`, a twin of `should_roll` followed by
    # `append` kept in one call for speed. Fed the same batches, the two must roll at the same batch and
    # leave the same segment: bytes, offsets, timestamps, index entries and the CRC-verified prefix.
    time = ManualTime(START_MS)
    segments = [
        LogSegment.create(
            tmp_path_factory.mktemp("seg"),
            40,
            time=time,
            index_interval_bytes=index_interval_bytes,
            segment_index_bytes=32,  # 4 entries: the index fills within a run
        )
        for _ in range(2)
    ]
    twin, reference = segments
    segment_bytes, segment_ms = 1500, 100
    now_ms, next_offset = START_MS + idle_ms, 40
    for count, value_bytes, advance_ms, timestamp_skew in steps:
        now_ms += advance_ms
        timestamp = START_MS + timestamp_skew * 10
        data = batch(*(b"v" * value_bytes for _ in range(count)), base_offset=next_offset, timestamp_ms=timestamp)
        last = next_offset + count - 1
        rolls = reference.should_roll(len(data), last, now_ms, segment_bytes, segment_ms)
        written = twin.append_batch(data, next_offset, last, timestamp, now_ms, segment_bytes, segment_ms)
        assert written is not rolls
        if rolls:
            break
        reference.append(data, last, timestamp, [(next_offset, len(data))])
        next_offset = last + 1
    for segment in segments:
        segment.flush()
    assert twin.log_path.read_bytes() == reference.log_path.read_bytes()
    assert (twin.size_in_bytes, twin.next_offset, twin.largest_timestamp) == (
        reference.size_in_bytes,
        reference.next_offset,
        reference.largest_timestamp,
    )
    assert twin.index.entries == reference.index.entries
    assert [twin.index.lookup(o) for o in range(40, next_offset)] == [
        reference.index.lookup(o) for o in range(40, next_offset)
    ]
    assert (twin._crc_verified_end, twin._verified_next) == (reference._crc_verified_end, reference._verified_next)
    for segment in segments:
        segment.close()
