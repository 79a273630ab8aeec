"""The sparse offset index of one segment: batch base offset -> byte position in the segment file.

How this works
--------------
Not every batch is indexed: the segment adds an entry only once more than `index.interval.bytes` have
been written since the previous entry, so finding an offset is a binary search here followed by a short
forward walk over batch headers in the segment file (at most about one interval of bytes).

    entries (in memory):   offset  1000   1090   1213   ...
                           pos        0   4120   8303   ...

The entries live in two in-memory arrays; the file `<base offset>.index` holds them as 8-byte big-endian
pairs (offset relative to the segment's base offset, position), like Kafka's .index file. The file is
only written by `flush` (appending the entries added since the last flush) and rewritten after a
truncation, so appends cost no system calls. The index is derived data: a segment that is recovered
after a crash rebuilds it from the log, and a file that fails the sanity check is rebuilt too.

Invariants: offsets and positions strictly increase; the entry count never exceeds `max_entries`
(`segment.index.bytes` / 8), and a full index makes the log roll to a new segment.
"""

from __future__ import annotations

import os
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

ENTRY_SIZE = 8
INDEX_SUFFIX = ".index"


class OffsetIndex:
    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // ENTRY_SIZE)
        self._offsets = array("q")
        self._positions = array("q")
        self._persisted_entries = 0  # how many leading entries the file holds

    # -- queries -----------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry whose offset is ≤ `offset`; (base offset, 0) if none."""
        i = bisect_right(self._offsets, offset)
        if i == 0:
            return self.base_offset, 0
        return self._offsets[i - 1], self._positions[i - 1]

    def floor_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before byte `position`; (base offset, 0) if none."""
        i = bisect_right(self._positions, position)
        if i == 0:
            return self.base_offset, 0
        return self._offsets[i - 1], self._positions[i - 1]

    def last_entry(self) -> tuple[int, int]:
        if not self._offsets:
            return self.base_offset, 0
        return self._offsets[-1], self._positions[-1]

    # -- mutations ---------------------------------------------------------------------------------

    def append(self, offset: int, position: int) -> None:
        """Add an entry; callers add entries in increasing order and only while the index is not full."""
        if not self.append_if_room(offset, position):
            raise ValueError(f"index {self.path} is full")

    def append_if_room(self, offset: int, position: int) -> bool:
        """`append`, or False when the index is full: one call on the path every appended batch takes."""
        offsets = self._offsets
        if len(offsets) >= self.max_entries:
            return False
        if offsets and (offset <= offsets[-1] or position <= self._positions[-1]):
            raise ValueError(f"index entry ({offset}, {position}) is not after the last entry")
        offsets.append(offset)
        self._positions.append(position)
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is ≥ `offset`."""
        keep = bisect_right(self._offsets, offset - 1)
        self._drop_from(keep)

    def reset(self) -> None:
        self._drop_from(0)

    def _drop_from(self, keep: int) -> None:
        if keep >= len(self._offsets):
            return
        del self._offsets[keep:]
        del self._positions[keep:]
        if self._persisted_entries > keep:
            self._persisted_entries = keep
            if self.path.exists():
                os.truncate(self.path, keep * ENTRY_SIZE)

    # -- persistence -------------------------------------------------------------------------------

    def flush(self, fsync: bool = True) -> None:
        """Write the entries added since the last flush to the index file."""
        new = len(self._offsets) - self._persisted_entries
        if new <= 0 and self.path.exists():
            return
        start = self._persisted_entries
        pairs = array("i", bytes(8 * new))
        pairs[0::2] = array("i", (o - self.base_offset for o in self._offsets[start:]))
        pairs[1::2] = array("i", self._positions[start:])
        if sys.byteorder == "little":
            pairs.byteswap()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, start * ENTRY_SIZE)
            os.pwrite(fd, pairs.tobytes(), start * ENTRY_SIZE)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._persisted_entries = len(self._offsets)

    def load(self, segment_size: int) -> bool:
        """Read the index file; False (and an empty index) when it is missing or fails the sanity check:
        a whole number of entries, strictly increasing, every position inside the segment."""
        self.reset()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) % ENTRY_SIZE or len(data) // ENTRY_SIZE > self.max_entries:
            return False
        pairs = array("i", data)
        if sys.byteorder == "little":
            pairs.byteswap()
        offsets = array("q", (self.base_offset + r for r in pairs[0::2]))
        positions = array("q", pairs[1::2])
        for i in range(1, len(offsets)):
            if offsets[i] <= offsets[i - 1] or positions[i] <= positions[i - 1]:
                return False
        if offsets and (offsets[0] <= self.base_offset - 1 or positions[0] < 0 or positions[-1] >= segment_size):
            return False
        self._offsets = offsets
        self._positions = positions
        self._persisted_entries = len(offsets)
        return True

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
