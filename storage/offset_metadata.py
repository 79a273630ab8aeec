"""Where an offset sits physically: (offset, segment base offset, byte position in that segment).

The DelayedFetch compares the fetch offset's metadata with the log end's to decide cheaply whether a
parked fetch can complete (Kafka's LogOffsetMetadata): a fetch offset on an older segment than the end
means at least a segment's worth of data is waiting; on the same segment the byte distance says how much.
"""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN_OFFSET = -1
UNKNOWN_FILE_POSITION = -1


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    message_offset: int
    segment_base_offset: int = UNKNOWN_OFFSET
    relative_position: int = UNKNOWN_FILE_POSITION

    @property
    def message_offset_only(self) -> bool:
        """True when only the offset is known, not where it lives."""
        return self.segment_base_offset == UNKNOWN_OFFSET and self.relative_position == UNKNOWN_FILE_POSITION

    def on_older_segment(self, other: LogOffsetMetadata) -> bool:
        self._require_position(other)
        return self.segment_base_offset < other.segment_base_offset

    def on_same_segment(self, other: LogOffsetMetadata) -> bool:
        self._require_position(other)
        return self.segment_base_offset == other.segment_base_offset

    def offset_diff(self, other: LogOffsetMetadata) -> int:
        return self.message_offset - other.message_offset

    def position_diff(self, other: LogOffsetMetadata) -> int:
        """Bytes from `other` to this offset; both must be on the same segment."""
        if not self.on_same_segment(other):
            raise ValueError(f"{self} and {other} are on different segments")
        return self.relative_position - other.relative_position

    def _require_position(self, other: LogOffsetMetadata) -> None:
        if self.message_offset_only or other.message_offset_only:
            raise ValueError(f"{self} or {other} has no segment information")
