"""The metadata image the control managers share, and the one way it changes: `commit`.

How this works
--------------
`commit(records, committed)` checks the records against the image, appends them to the metadata store
(when there is one), replays them into the image and adds them to the running command's `committed`
list; a snapshot is written when the store says one is due. The image is never replaced, so every
control manager holds the same `image` and sees a commit at once (the controller is single-threaded:
the next step of a command sees the effect of the previous one, as the next command does).

Besides records, a command may make replicas obsolete (a deleted topic's, the ones a reassignment
removed): `delete_replicas` notes them and the controller takes them with the command's result, to
stop and delete them on their brokers (STOP_REPLICA).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from controller.metadata_store import MetadataStore
from metadata.image import MetadataImage
from metadata.records import MetadataRecord
from protocol.messages import TopicPartition


class MetadataLog:
    """The image, the offset of its last record, and the store that makes records durable."""

    def __init__(self, store: MetadataStore | None = None) -> None:
        self._store = store
        if store is not None:
            self.image, self._last_offset = store.load()
        else:
            self.image, self._last_offset = MetadataImage(), -1
        # Replicas the command being run made obsolete; the controller takes them with its result.
        self._deleted_replicas: dict[int, list[TopicPartition]] = {}
        #: Called with each record after it is replayed into the image (the simulator's checker listens).
        self.on_replay: Callable[[MetadataRecord, MetadataImage], None] | None = None

    @property
    def last_offset(self) -> int:
        """Offset of the last committed record (-1 when none)."""
        return self._last_offset

    def commit(self, records: Sequence[MetadataRecord], committed: list[MetadataRecord]) -> None:
        """Make records durable (when there is a store), then replay them: the only way state changes."""
        if not records:
            return
        first_offset = self._last_offset + 1
        # A record the image would refuse must not reach the log: the command fails here, with nothing
        # changed, instead of at every later load of the log.
        self.image.check_changes(records)
        if self._store is not None:
            self._store.append(first_offset, records)
        for record in records:
            self.image.replay(record)
            if self.on_replay is not None:
                self.on_replay(record, self.image)
        self._last_offset = first_offset + len(records) - 1
        committed.extend(records)
        if self._store is not None and self._store.snapshot_due:
            self._store.write_snapshot(self.image, self._last_offset)

    def delete_replicas(self, tp: TopicPartition, broker_ids: Iterable[int]) -> None:
        """Have these brokers stop and delete their replica of `tp` (STOP_REPLICA with delete, sent with this
        command's result)."""
        for broker_id in broker_ids:
            self._deleted_replicas.setdefault(broker_id, []).append(tp)

    def take_deleted_replicas(self) -> dict[int, list[TopicPartition]]:
        deleted, self._deleted_replicas = self._deleted_replicas, {}
        return deleted
