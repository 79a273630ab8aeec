"""The log against a simple in-memory model under random appends, truncations, reads, rolls, record
deletions and reopenings (clean and after a crash)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from protocol.errors import OffsetOutOfRangeError
from protocol.record_batch import build_batch, iter_headers, iter_records
from server_common.time import ManualTime
from storage.epoch_cache import EpochEntry
from storage.log import Log, LogConfig

CONFIG = LogConfig(segment_bytes=400, index_interval_bytes=64)


# tmpfs when there is one: the same files and system calls, without paying for every fsync.
_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class LogModel(RuleBasedStateMachine):
    """Model: the batches written since the log last restarted at `origin`, as (base offset, epoch,
    values, size), the log start and high watermark, and the epoch history the cache should hold."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="log-model-", dir=_SCRATCH))
        self.dir = self.tmp / "model-0"
        self.time = ManualTime()
        self.log = Log.open(self.dir, CONFIG, self.time)
        self.batches: list[tuple[int, int, list[bytes], int]] = []
        self.origin = 0
        self.log_start = 0
        self.log_end = 0
        self.high_watermark = 0
        self.epoch = 0
        self.epochs: list[EpochEntry] = []

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _epochs_from_end(self, end_offset: int) -> None:
        self.epochs = [e for e in self.epochs if e.start_offset < end_offset]

    def _epochs_from_start(self, start_offset: int) -> None:
        before = [e for e in self.epochs if e.start_offset <= start_offset]
        if before:
            after = [e for e in self.epochs if e.start_offset > start_offset]
            self.epochs = [EpochEntry(before[-1].epoch, start_offset), *after]

    # -- rules -------------------------------------------------------------------------------------

    @rule(
        values=st.lists(st.binary(min_size=0, max_size=60), min_size=1, max_size=4),
        new_epoch=st.booleans(),
    )
    def append_as_leader(self, values: list[bytes], new_epoch: bool) -> None:
        if new_epoch:
            self.epoch += 1
        data = build_batch(values, timestamp_ms=0)
        info = self.log.append_as_leader(data, self.epoch)
        assert info.first_offset == self.log_end
        if not self.epochs or self.epochs[-1].epoch != self.epoch:
            # A new epoch replaces any entry that starts where it does (log start moved up to the end).
            self._epochs_from_end(self.log_end)
            self.epochs.append(EpochEntry(self.epoch, self.log_end))
        self.batches.append((self.log_end, self.epoch, values, len(data)))
        self.log_end += len(values)

    @rule(fraction=st.floats(min_value=0, max_value=1))
    def truncate(self, fraction: float) -> None:
        target = int(self.log_end * fraction)
        first_segment_base = self.log.segments[0].base_offset
        changed = self.log.truncate_to(target)
        assert changed == (target < self.log_end)
        if not changed:
            # Nothing cut, but as truncate_to (and Kafka's truncateTo) an epoch entry that starts at the log end,
            # with no batch in it, goes: e.g. one delete_records moved up to an emptied log's end.
            self._epochs_from_end(self.log_end)
            return
        if target < first_segment_base:  # the log restarts empty at the target
            self.batches, self.epochs = [], []
            self.origin = self.log_start = self.log_end = self.high_watermark = target
            return
        self.batches = [b for b in self.batches if b[0] + len(b[2]) <= target]
        self.log_end = self.batches[-1][0] + len(self.batches[-1][2]) if self.batches else self.origin
        self._epochs_from_end(self.log_end)
        self.log_start = min(self.log_start, self.log_end)
        self.high_watermark = max(min(self.high_watermark, self.log_end), self.log_start)

    @rule(fraction=st.floats(min_value=0, max_value=1))
    def delete_records(self, fraction: float) -> None:
        self.log.maybe_increment_high_watermark(self.log_end)
        self.high_watermark = self.log_end
        target = self.log_start + int((self.log_end - self.log_start) * fraction)
        self.log.delete_records(target)
        if target > self.log_start:
            self.log_start = target
            self._epochs_from_start(target)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(crash=st.booleans())
    def reopen(self, crash: bool) -> None:
        if crash:
            for segment in self.log.segments:  # what kill -9 leaves: no flush, no marker
                os.close(segment._fd)
                segment._fd = -1
        else:
            self.log.close()
        self.log = Log.open(self.dir, CONFIG, self.time)
        self.high_watermark = self.log_start
        self._epochs_from_end(self.log_end)
        self._epochs_from_start(self.log_start)

    @rule(position=st.floats(min_value=0, max_value=1), max_bytes=st.integers(min_value=0, max_value=700))
    def read(self, position: float, max_bytes: int) -> None:
        offset = self.log_start + int((self.log_end - self.log_start) * position)
        data = self.log.read(offset, max_bytes)
        wanted = [b for b in self.batches if b[0] + len(b[2]) > offset]  # offset ≥ log start
        returned = list(iter_headers(data))
        if not wanted:
            assert data == b""
            return
        # Whole batches, starting with the one holding `offset`, in order,
        assert [h.base_offset for h in returned] == [b[0] for b in wanted[: len(returned)]]
        # at least one (KIP-74), and as many as fit in max_bytes,
        assert returned
        assert len(data) <= max_bytes or len(returned) == 1
        if len(returned) < len(wanted):
            assert len(data) + wanted[len(returned)][3] > max_bytes
        # holding the values that were appended.
        expected = {b[0] + i: v for b in wanted[: len(returned)] for i, v in enumerate(b[2])}
        assert {r.offset: r.value for r in iter_records(data)} == expected

    @rule(below=st.booleans())
    def read_out_of_range(self, below: bool) -> None:
        if below and self.log_start == 0:
            return
        offset = self.log_start - 1 if below else self.log_end + 1
        with pytest.raises(OffsetOutOfRangeError):
            self.log.read(offset, 100)

    # -- invariants --------------------------------------------------------------------------------

    @invariant()
    def offsets_match(self) -> None:
        assert self.log.log_end_offset == self.log_end
        assert self.log.log_start_offset == self.log_start
        assert self.log.high_watermark == self.high_watermark
        assert self.log.log_start_offset <= self.log.high_watermark <= self.log.log_end_offset

    @invariant()
    def epochs_match_the_history(self) -> None:
        assert self.log.epoch_cache.epoch_entries() == self.epochs
        if self.log_end > self.log_start:
            # Every readable batch carries the epoch the cache gives for its offset range.
            for base, epoch, values, _ in self.batches:
                if base + len(values) > self.log_start:
                    assert self.log.end_offset_for_epoch(epoch)[1] >= base + len(values)

    @invariant()
    def segments_are_contiguous(self) -> None:
        segments = self.log.segments
        for earlier, later in zip(segments, segments[1:], strict=False):
            assert earlier.next_offset <= later.base_offset
            assert not earlier.is_empty


LogModel.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_the_log_behaves_like_its_model = pytest.mark.timeout(100)(LogModel.TestCase)
