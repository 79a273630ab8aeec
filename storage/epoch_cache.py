"""The leader-epoch cache: which offset each leader epoch started at (Kafka's LeaderEpochFileCache, KIP-101).

How this works
--------------
The cache is a list of `EpochEntry(epoch, start_offset)` sorted by both fields at once:

    epoch:         0     2      5
    start_offset:  0    120    400      (log end offset 530)

meaning offsets 0..119 were written in epoch 0, 120..399 in epoch 2 and 400..529 in epoch 5.
A leader adds an entry the first time it appends in a new epoch; a follower adds one whenever a fetched
batch carries an epoch it has not seen. Answering "where did epoch E end?" (`end_offset_for`) is what
lets a follower truncate to the point where its log and the leader's diverge.

Invariants: epochs strictly increase and start offsets strictly increase along the list. An `assign`
that would break them first removes the entries it conflicts with (the later, now invalid history),
exactly as Kafka does. Every mutation is written through the checkpoint, when there is one, before the
method returns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.checkpoint import LeaderEpochCheckpoint

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    """(epoch, start offset) pairs for one partition replica, persisted through `checkpoint` if given."""

    def __init__(self, checkpoint: LeaderEpochCheckpoint | None) -> None:
        self._checkpoint = checkpoint
        self._epochs: list[EpochEntry] = []
        if checkpoint is not None:
            for entry in checkpoint.read():
                self._assign(entry)
        # What the checkpoint file holds as far as this cache knows: None while there is no file.
        self._written: list[EpochEntry] | None = (
            list(self._epochs) if checkpoint is not None and checkpoint.path.exists() else None
        )

    # -- queries -----------------------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1].epoch if self._epochs else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._epochs[0] if self._epochs else None

    def epoch_entries(self) -> list[EpochEntry]:
        return list(self._epochs)

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the record at `offset`: that of the last entry starting at or before it, or
        UNDEFINED_EPOCH when the cache knows no epoch that old (Kafka's epochForOffset)."""
        found = UNDEFINED_EPOCH
        for entry in self._epochs:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch: the end offset is the start offset of the first
        epoch after `requested_epoch`, and the epoch is the largest known epoch ≤ the requested one.

        - requested epoch undefined, or above every known epoch: (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        - requested epoch is the latest epoch: (requested epoch, log end offset)
        - requested epoch is below every known epoch: (requested epoch, start offset of the first epoch),
          since the log no longer holds anything older
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        previous: EpochEntry | None = None
        for entry in self._epochs:
            if entry.epoch > requested_epoch:
                if previous is None:
                    return requested_epoch, entry.start_offset
                return previous.epoch, entry.start_offset
            previous = entry
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

    # -- mutations ---------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset`. A no-op (False) when that is already known: the
        latest epoch is `epoch` and it starts at or before `start_offset`. Entries whose epoch or start
        offset is not below the new entry's are removed first."""
        latest = self._epochs[-1] if self._epochs else None
        # The common case on every append: the epoch is already the latest one.
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return False
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry: epoch {epoch}, start offset {start_offset}")
        self._assign(EpochEntry(epoch, start_offset))
        if flush:
            self.flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop every entry starting at or after `end_offset` (the log was truncated to `end_offset`)."""
        if end_offset < 0 or not self._epochs or self._epochs[-1].start_offset < end_offset:
            return
        self._epochs = [e for e in self._epochs if e.start_offset < end_offset]
        self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop entries wholly before it, and move the start of the
        epoch that contains `start_offset` up to it."""
        before = [e for e in self._epochs if e.start_offset <= start_offset]
        if not before:
            return
        after = [e for e in self._epochs if e.start_offset > start_offset]
        first = EpochEntry(before[-1].epoch, start_offset)
        if len(before) == 1 and before[0] == first:
            return
        self._epochs = [first, *after]
        self.flush()

    def clear(self) -> None:
        self._epochs = []
        self.flush()

    def flush(self) -> None:
        if self._checkpoint is not None:
            self._checkpoint.write(self._epochs)
            self._written = list(self._epochs)

    def flush_if_changed(self) -> None:
        """Write the checkpoint unless it already holds these entries. A missing file and no entries are
        the same thing (an open rebuilds an empty cache from a log with no batches), so a new log's empty
        cache is not written: one fsynced write fewer for every replica a broker creates."""
        if self._epochs != (self._written or []):
            self.flush()

    def _assign(self, entry: EpochEntry) -> None:
        latest = self._epochs[-1] if self._epochs else None
        if latest is not None and latest.epoch == entry.epoch and entry.start_offset >= latest.start_offset:
            return
        kept = [e for e in self._epochs if e.epoch < entry.epoch and e.start_offset < entry.start_offset]
        if len(kept) != len(self._epochs):
            removed = self._epochs[len(kept) :]
            logger.warning("new epoch entry %s replaces conflicting entries %s", entry, removed)
        self._epochs = [*kept, entry]
