"""The metadata image the control managers share, and the one way a command changes it: `commit`.

How this works
--------------
`commit(records, committed)` checks the records against the image, hands them to the writer (the active
controller's replicated log: they become one batch of `__cluster_metadata`, made durable on this node and
committed once a majority of the voters has it), replays them into the image and adds them to the running
command's `committed` list. A command's later steps therefore see its earlier ones, as in KRaft's
QuorumController; the controller node answers the command, and runs the next one, only once the records
are committed, so nobody outside sees an uncommitted record (controller/controller_node.py).

Records committed elsewhere (by another controller, before this one became active) arrive through `replay`,
and a snapshot through `reset`. The image is replaced only by `reset`; every control manager reads it
through this object, so they all see the same one.

Besides records, a command may make replicas obsolete (a deleted topic's, the ones a reassignment
removed): `delete_replicas` notes them and the controller takes them with the command's result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from metadata.image import MetadataImage
from metadata.records import MetadataRecord
from protocol.messages import TopicPartition


class MetadataWriter(Protocol):
    @property
    def next_offset(self) -> int:
        """The offset the next record appended will get."""

    def append(self, records: Sequence[MetadataRecord]) -> int:
        """Append the records as one batch, durably; return the offset of the last one."""


class MetadataLog:
    """The image, the offset of the last record replayed into it, and where new records go."""

    def __init__(self, writer: MetadataWriter | None = None) -> None:
        self._writer = writer
        self.image = MetadataImage()
        self._last_offset = -1
        # Replicas the command being run made obsolete; the controller takes them with its result.
        self._deleted_replicas: dict[int, list[TopicPartition]] = {}
        #: Called with each record after it is replayed into the image (the simulator's checker listens).
        self.on_replay: Callable[[MetadataRecord, MetadataImage], None] | None = None

    @property
    def last_offset(self) -> int:
        """Offset of the last record replayed into the image (-1 when none)."""
        return self._last_offset

    @property
    def next_offset(self) -> int:
        """The offset the next committed record gets: a registration's broker epoch is its record's offset."""
        return self._writer.next_offset if self._writer is not None else self._last_offset + 1

    def commit(self, records: Sequence[MetadataRecord], committed: list[MetadataRecord]) -> None:
        """Append the records (when there is a writer), then replay them: the only way a command changes state."""
        if not records:
            return
        # A record the image would refuse must not reach the log: the command fails here, with nothing
        # changed, instead of at every later replay of the log.
        self.image.check_changes(records)
        if self._writer is not None:
            last_offset = self._writer.append(records)
        else:
            last_offset = self._last_offset + len(records)
        self.replay(records, last_offset)
        committed.extend(records)

    def replay(self, records: Sequence[MetadataRecord], last_offset: int) -> None:
        """Replay records whose last one sits at `last_offset` into the image."""
        for record in records:
            self.image.replay(record)
            if self.on_replay is not None:
                self.on_replay(record, self.image)
        self._last_offset = last_offset

    def skip_to(self, offset: int) -> None:
        """Records up to `offset` hold nothing for the image (the quorum's control batches)."""
        self._last_offset = max(self._last_offset, offset)

    def reset(self, image: MetadataImage, last_offset: int) -> None:
        """Replace the image (a snapshot was loaded, or uncommitted records are dropped)."""
        self.image = image
        self._last_offset = last_offset

    def delete_replicas(self, tp: TopicPartition, broker_ids: Iterable[int]) -> None:
        """Have these brokers stop and delete their replica of `tp` (they also see it in the records)."""
        for broker_id in broker_ids:
            self._deleted_replicas.setdefault(broker_id, []).append(tp)

    def take_deleted_replicas(self) -> dict[int, list[TopicPartition]]:
        deleted, self._deleted_replicas = self._deleted_replicas, {}
        return deleted
