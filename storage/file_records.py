"""FileRecords: batches of a log sent from the segment files without being read (Kafka's FileRecords).

A consumer's FETCH in version 1 (protocol/fetch_frame.py) carries each partition's records after the
msgpack part of the answer, so the broker need not hold them in memory at all: the read
(`Log.read_file_records`) returns the byte ranges of the segment files, and the server hands them to the
socket with `os.sendfile` (the kernel copies from the page cache straight into the socket, Kafka's
`transferTo`). Only ranges inside a segment's verified prefix qualify (CRCs and offsets checked by this
process), so nothing is sent that a read would have refused.

A slice records its segment's `generation`; a truncation or close bumps it, and a slice whose segment
moved on is not sent (`is_current`): the bytes there are no longer the ones that were read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.segment import LogSegment


class FileRecords:
    """Byte ranges of segment files, in order: `len()` is their total size."""

    __slots__ = ("slices", "_size")

    def __init__(self, slices: list[tuple[LogSegment, int, int]]) -> None:
        # (segment, position, size) and the generation of the segment when the slice was taken
        self.slices = [(segment, position, size, segment.generation) for segment, position, size in slices]
        self._size = sum(size for _, _, size in slices)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def is_current(self) -> bool:
        """Whether every slice still holds the bytes it was taken over (no truncation or close since)."""
        return all(segment.generation == generation for segment, _, _, generation in self.slices)

    def regions(self) -> Iterator[tuple[int, int, int]]:
        """(file descriptor, position, size) of each slice, for `os.sendfile`; only while `is_current()`."""
        for segment, position, size, _ in self.slices:
            yield segment.fileno(), position, size

    def read(self) -> bytes:
        """The bytes themselves (what `Log.read` would have returned)."""
        return b"".join(segment.read_bytes(position, position + size) for segment, position, size, _ in self.slices)

    def __repr__(self) -> str:
        return f"FileRecords({len(self.slices)} slices, {self._size} bytes)"
