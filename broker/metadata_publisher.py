"""A broker applies the committed metadata log (Kafka's BrokerMetadataListener and BrokerMetadataPublisher).

How this works
--------------
The broker is an observer of the metadata quorum (raft/): it replicates `__cluster_metadata-0` from the
quorum's leader and hands every committed batch to this listener, which replays the records into the
broker's own `MetadataImage` (the same code the controllers replay with) and publishes what changed:

* brokers, topics, partition states and configs to the metadata cache (what METADATA answers, and where a
  follower finds its leader);
* to the replica manager, for every changed partition this broker holds a replica of, its new state: lead
  it, follow its new leader, learn its new ISR (what LEADER_AND_ISR carried when the controller pushed);
* replicas this broker no longer holds (a deleted topic, a reassignment that moved it away) are stopped
  and deleted (what STOP_REPLICA carried);
* topic configs and the dynamic replication throttles to the logs, partitions and quotas;
* the next producer id no broker has, to the producer-id check (broker/producer_id_manager.py), as soon
  as the record arrives.

Records are replayed as they come, but nothing reaches the replica manager until the broker has caught up
with the log once (it has fetched up to the leader's high watermark as of its first fetch): a broker that
restarts must not lead, even for a moment, a partition it led many records ago. The first publication is
the whole image (every replica this broker holds, and the deletion of any local log the image does not
give it: a topic deleted while the broker was down); later ones only what changed. Publishing applies
states a slice at a time under the broker's state-change lock (broker/kafka_apis.py), so a large change
never holds the event loop.

`applied_offset` (the last record replayed) goes into every heartbeat: the controller unfences a broker
only once it has seen its own registration.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.kafka_apis import KafkaApis
from broker.log_manager import LogManager
from metadata.image import MetadataImage
from metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_record,
    encode_record,
)
from protocol.messages import LeaderAndIsrRequest, StopReplicaPartition, StopReplicaRequest, TopicPartition
from raft.replicated_log import LogBatch, Snapshot
from server_common.time import Time

log = logging.getLogger(__name__)

EPOCH_DURING_DELETE = -2


@dataclass
class _Delta:
    """What the records replayed since the last publication changed."""

    partitions: set[TopicPartition] = field(default_factory=set)
    removed_topics: dict[str, int] = field(default_factory=dict)  # name -> partitions it had
    configs: bool = False
    full: bool = False  # a snapshot replaced the image: publish everything


class BrokerMetadataPublisher:
    def __init__(
        self,
        broker_id: int,
        apis: KafkaApis,
        log_manager: LogManager,
        time: Time,
        topic_config_defaults: Mapping[str, str],
    ) -> None:
        self.broker_id = broker_id
        self.apis = apis
        self.log_manager = log_manager
        self.time = time
        self.topic_config_defaults = dict(topic_config_defaults)
        self.raft: Any = None  # the broker's quorum member (set by BrokerNode), for snapshots
        self.image = MetadataImage()
        self.applied_offset = -1  # the last record replayed into the image
        self.published_offset = -1  # the last record whose effects the broker has applied
        self._pending: list[tuple[int, list[MetadataRecord] | None, MetadataImage | None]] = []
        self._delta = _Delta(full=True)
        self._wake = asyncio.Event()
        self.first_publication = asyncio.Event()
        #: Whether the broker has fetched up to what the quorum had committed when it started (set by BrokerNode
        #: from its raft observer); nothing is published before.
        self.caught_up: Callable[[], bool] = lambda: True
        self.on_published: Callable[[int], None] = lambda offset: None
        self.controller_id = -1
        self._records_applied = 0
        # The next producer id no broker has, as the replicated records say (known before publication: the
        # producer-id check needs it at once); and who hears of it.
        self.next_producer_id = 0
        self.on_next_producer_id: Callable[[int], None] = lambda next_id: None
        # Metadata lag: since when this broker has been behind the quorum's committed offset (None: not behind).
        self.behind_since_ms: int | None = None

    # -- the raft listener ---------------------------------------------------------------------------

    def handle_commit(self, batches: list[LogBatch]) -> None:
        for batch in batches:
            records = None if batch.is_control else [decode_record(v) for v in batch.values]
            for record in records or ():
                if isinstance(record, ProducerIdsRecord):
                    self._note_producer_ids(record.next_producer_id)
            self._pending.append((batch.last_offset, records, None))
        self._wake.set()

    def _note_producer_ids(self, next_producer_id: int) -> None:
        if next_producer_id > self.next_producer_id:
            self.next_producer_id = next_producer_id
            self.on_next_producer_id(next_producer_id)

    def handle_load_snapshot(self, snapshot: Snapshot) -> None:
        image = MetadataImage()
        for value in snapshot.values:
            image.replay(decode_record(value))
        self._pending = [(snapshot.end_offset - 1, None, image)]
        self._note_producer_ids(image.next_producer_id)
        self._wake.set()

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.controller_id = -1 if leader_id is None else leader_id
        self.apis.metadata_cache.controller_id = self.controller_id
        self.apis.metadata_cache.controller_epoch = epoch

    # -- replay and publication ---------------------------------------------------------------------------

    def _replay(self) -> None:
        pending, self._pending = self._pending, []
        for last_offset, records, image in pending:
            if image is not None:
                self.image = image
                self._delta = _Delta(full=True)
            for record in records or ():
                self._note(record)
                self.image.replay(record)
                self._records_applied += 1
            self.applied_offset = last_offset

    def _note(self, record: MetadataRecord) -> None:
        delta = self._delta
        if isinstance(record, PartitionRecord | PartitionChangeRecord):
            delta.partitions.add(TopicPartition(record.topic, record.partition))
        elif isinstance(record, RemoveTopicRecord):
            topic = self.image.topics.get(record.name)
            count = topic.num_partitions if topic is not None else 0
            delta.removed_topics[record.name] = count
            # Touched too: gone from the metadata cache, and this broker's replicas of them deleted.
            delta.partitions |= {TopicPartition(record.name, p) for p in range(count)}
            delta.configs = True
        elif isinstance(record, TopicRecord | ConfigRecord):
            delta.configs = True

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            self._replay()
            if not self.caught_up():
                continue  # replayed, not yet published: see the module docstring
            if self.published_offset >= self.applied_offset and not self._delta.full:
                continue
            delta, self._delta = self._delta, _Delta()
            target = self.applied_offset
            full = delta.full or not self.first_publication.is_set()
            await self._publish(delta, full)
            self.published_offset = target
            self.first_publication.set()
            self.on_published(target)
            self.maybe_snapshot(target)
            if self._pending:
                self._wake.set()

    def wake(self) -> None:
        """The observer caught up: publish what was replayed."""
        self._wake.set()

    async def _publish(self, delta: _Delta, full: bool) -> None:
        image = self.image
        cache = self.apis.metadata_cache
        touched = None if full else delta.partitions
        cache.update_from_image(image, self.topic_config_defaults, touched)
        cache.controller_id = self.controller_id
        if full or delta.configs:
            self.apis.apply_configs()
        mine = self._my_states(image, None if full else delta.partitions)
        if mine:
            # The metadata offset is this "controller epoch": it only grows, so a state never goes back.
            request = LeaderAndIsrRequest(
                controller_id=self.controller_id,
                controller_epoch=max(self.applied_offset, 0),
                partitions=mine,
                live_leaders=list(cache.endpoints.values()),
            )
            await self.apis.apply_partition_states(request)
        gone = self._gone(image, delta, full)
        if gone:
            log.info("deleting %d replicas the metadata no longer gives this broker", len(gone))
            await self.apis.apply_replica_deletions(
                StopReplicaRequest(
                    controller_id=self.controller_id,
                    controller_epoch=max(self.applied_offset, 0),
                    partitions=[
                        StopReplicaPartition(tp.topic, tp.partition, EPOCH_DURING_DELETE, delete_partition=True)
                        for tp in sorted(gone)
                    ],
                )
            )

    def _my_states(self, image: MetadataImage, touched: set[TopicPartition] | None) -> list[Any]:
        partitions = (
            image.partitions.values()
            if touched is None
            else [image.partitions[tp] for tp in touched if tp in image.partitions]
        )
        states = []
        for p in sorted(partitions, key=lambda p: (p.topic, p.partition)):
            if self.broker_id in p.replicas:
                topic = image.topics.get(p.topic)
                states.append(p.to_leader_and_isr(topic_id=topic.topic_id if topic is not None else ""))
        return states

    def _gone(self, image: MetadataImage, delta: _Delta, full: bool) -> set[TopicPartition]:
        """Replicas this broker holds that the image no longer gives it."""
        held = set(self.apis.replica_manager.partitions)
        if full:
            held |= set(self.log_manager.existing_partitions())
        else:
            held &= delta.partitions | {tp for tp in held if tp.topic in delta.removed_topics}
        return {
            tp
            for tp in held
            if tp.topic != "__cluster_metadata"
            and ((p := image.partitions.get(tp)) is None or self.broker_id not in p.replicas)
        }

    def maybe_snapshot(self, offset: int) -> None:
        """A broker snapshots its image too (KIP-630), so its copy of the log does not grow for ever; only an
        image that holds exactly what was delivered (nothing replayed past it) is written."""
        raft = self.raft
        if raft is not None and raft.snapshot_due and offset == raft.delivered_offset - 1 and not self._pending:
            raft.write_snapshot([encode_record(r) for r in self.image.to_records()])

    # -- lag ---------------------------------------------------------------------------------------

    def lag(self, committed_offset: int) -> tuple[int, int]:
        """(records, ms) this broker's applied metadata is behind the quorum's committed offset."""
        records = max(committed_offset - 1 - self.applied_offset, 0)
        now = self.time.milliseconds()
        if records == 0:
            self.behind_since_ms = None
            return 0, 0
        if self.behind_since_ms is None:
            self.behind_since_ms = now
        return records, now - self.behind_since_ms
