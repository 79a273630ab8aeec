"""The metadata image: brokers, topics, partitions, configs and producer ids, as the committed records
built them (Kafka's MetadataImage).

How this works
--------------
`MetadataImage.replay(record)` is the only code that changes an image. The controllers and the brokers each
keep one, replayed from the committed metadata log, so the same records give every node the same image.

Invariants of the image (checked on replay; a record that breaks one raises MetadataReplayError,
because it means the log is corrupt or the controller has a bug):

* a partition's ISR is a non-empty subset of its replicas, listed in replica order, without duplicates;
* its leader is an ISR member or -1 (offline);
* `leader_epoch` and `partition_epoch` only grow;
* a broker's fence / unfence / shutdown record names the broker's current epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from metadata.records import (
    BROKER_RESOURCE,
    NO_LEADER,
    TOPIC_RESOURCE,
    BrokerShutdownRecord,
    ConfigRecord,
    FenceBrokerRecord,
    MetadataRecord,
    MetadataReplayError,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from protocol.messages import BrokerEndpoint, LeaderAndIsrPartition, TopicPartition


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    listeners: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_active(self) -> bool:
        """May lead and join ISRs: unfenced and not shutting down."""
        return not self.fenced and not self.in_controlled_shutdown

    def endpoint(self) -> BrokerEndpoint:
        return BrokerEndpoint(
            broker_id=self.broker_id, host=self.host, port=self.port, rack=self.rack, listeners=dict(self.listeners)
        )


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    adding_replicas: tuple[int, ...] = ()  # a reassignment in progress (KIP-455): replicas still catching up
    removing_replicas: tuple[int, ...] = ()  # and those to drop once they have

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replica set the partition is moving to (its replicas when no reassignment is in progress)."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def is_offline(self) -> bool:
        return self.leader == NO_LEADER

    def to_leader_and_isr(self, is_new: bool = False, topic_id: str = "") -> LeaderAndIsrPartition:
        return LeaderAndIsrPartition(
            topic=self.topic,
            partition=self.partition,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            isr=list(self.isr),
            partition_epoch=self.partition_epoch,
            replicas=list(self.replicas),
            is_new=is_new,
            topic_id=topic_id,
        )


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    configs: Mapping[str, str]
    num_partitions: int
    topic_id: str = ""


class MetadataImage:
    """Brokers, topics and partitions, changed only by `replay`. Read through the mappings below."""

    def __init__(self) -> None:
        self._brokers: dict[int, BrokerRegistration] = {}
        self._topics: dict[str, TopicImage] = {}
        self._partitions: dict[TopicPartition, PartitionRegistration] = {}
        self.next_producer_id = 0
        self.broker_configs: dict[str, dict[str, str]] = {}  # dynamic broker configs by entity ("" = default)

    # -- reading ----------------------------------------------------------------------------------

    @property
    def brokers(self) -> Mapping[int, BrokerRegistration]:
        return self._brokers

    @property
    def topics(self) -> Mapping[str, TopicImage]:
        return self._topics

    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionRegistration]:
        return self._partitions

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        return self._partitions.get(TopicPartition(topic, partition))

    def partitions_of(self, topic: str) -> list[PartitionRegistration]:
        info = self._topics.get(topic)
        if info is None:
            return []
        return [self._partitions[TopicPartition(topic, i)] for i in range(info.num_partitions)]

    def active_broker_ids(self) -> frozenset[int]:
        """Brokers that may lead and join ISRs."""
        return frozenset(b.broker_id for b in self._brokers.values() if b.is_active)

    def partitions_led_by(self, broker_id: int) -> list[PartitionRegistration]:
        return [p for p in self._partitions.values() if p.leader == broker_id]

    def partitions_with_isr_member(self, broker_id: int) -> list[PartitionRegistration]:
        return [p for p in self._partitions.values() if broker_id in p.isr]

    def partitions_with_replica(self, broker_id: int) -> list[PartitionRegistration]:
        return [p for p in self._partitions.values() if broker_id in p.replicas]

    def offline_partitions(self) -> list[PartitionRegistration]:
        return [p for p in self._partitions.values() if p.is_offline]

    def to_records(self) -> Iterator[MetadataRecord]:
        """Records that rebuild this image from empty: the content of a snapshot."""
        for b in self._brokers.values():
            yield RegisterBrokerRecord(
                broker_id=b.broker_id,
                broker_epoch=b.broker_epoch,
                incarnation_id=b.incarnation_id,
                host=b.host,
                port=b.port,
                rack=b.rack,
                fenced=b.fenced,
                in_controlled_shutdown=b.in_controlled_shutdown,
                listeners=b.listeners,
            )
        for t in self._topics.values():
            yield TopicRecord(name=t.name, configs=dict(t.configs), topic_id=t.topic_id)
            for p in self.partitions_of(t.name):
                yield PartitionRecord(
                    topic=p.topic,
                    partition=p.partition,
                    replicas=p.replicas,
                    isr=p.isr,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                    adding_replicas=p.adding_replicas,
                    removing_replicas=p.removing_replicas,
                )
        if self.next_producer_id:
            yield ProducerIdsRecord(next_producer_id=self.next_producer_id)
        for entity, configs in sorted(self.broker_configs.items()):
            for name, value in sorted(configs.items()):
                yield ConfigRecord(BROKER_RESOURCE, entity, name, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataImage):
            return NotImplemented
        return (
            self._brokers == other._brokers
            and self._topics == other._topics
            and self._partitions == other._partitions
            and self.next_producer_id == other.next_producer_id
            and self.broker_configs == other.broker_configs
        )

    __hash__ = None  # type: ignore[assignment]  # mutable through replay

    def __repr__(self) -> str:
        return (
            f"MetadataImage(brokers={list(self._brokers.values())}, topics={list(self._topics)}, "
            f"partitions={list(self._partitions.values())})"
        )

    # -- replay -----------------------------------------------------------------------------------

    def replay(self, record: MetadataRecord) -> None:
        match record:
            case RegisterBrokerRecord():
                self._replay_register(record)
            case FenceBrokerRecord():
                broker = self._broker_at_epoch(record.broker_id, record.broker_epoch)
                self._brokers[broker.broker_id] = replace(broker, fenced=True)
            case UnfenceBrokerRecord():
                broker = self._broker_at_epoch(record.broker_id, record.broker_epoch)
                self._brokers[broker.broker_id] = replace(broker, fenced=False)
            case BrokerShutdownRecord():
                broker = self._broker_at_epoch(record.broker_id, record.broker_epoch)
                self._brokers[broker.broker_id] = replace(broker, in_controlled_shutdown=True)
            case TopicRecord():
                self._replay_topic(record)
            case ConfigRecord():
                self._replay_config(record)
            case RemoveTopicRecord():
                self._replay_remove_topic(record)
            case PartitionRecord():
                self._replay_partition(record)
            case PartitionChangeRecord():
                self._replay_partition_change(record)
            case ProducerIdsRecord():
                if record.next_producer_id <= self.next_producer_id:
                    raise MetadataReplayError(
                        f"next producer id {record.next_producer_id} does not pass {self.next_producer_id}"
                    )
                self.next_producer_id = record.next_producer_id
            case _:
                raise MetadataReplayError(f"not a metadata record: {record!r}")

    def _replay_register(self, record: RegisterBrokerRecord) -> None:
        existing = self._brokers.get(record.broker_id)
        if existing is not None and record.broker_epoch <= existing.broker_epoch:
            raise MetadataReplayError(
                f"broker {record.broker_id} registered with epoch {record.broker_epoch}, "
                f"not above its current epoch {existing.broker_epoch}"
            )
        self._brokers[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            broker_epoch=record.broker_epoch,
            incarnation_id=record.incarnation_id,
            host=record.host,
            port=record.port,
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            listeners=record.listeners,
        )

    def _broker_at_epoch(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        existing = self._brokers.get(broker_id)
        if existing is None:
            raise MetadataReplayError(f"broker {broker_id} is not registered")
        if existing.broker_epoch != broker_epoch:
            raise MetadataReplayError(
                f"broker {broker_id} has epoch {existing.broker_epoch}, record names {broker_epoch}"
            )
        return existing

    def _replay_topic(self, record: TopicRecord) -> None:
        if record.name in self._topics:
            raise MetadataReplayError(f"topic {record.name} already exists")
        self._topics[record.name] = TopicImage(
            name=record.name, configs=dict(record.configs), num_partitions=0, topic_id=record.topic_id
        )

    def _replay_config(self, record: ConfigRecord) -> None:
        if record.resource_type == BROKER_RESOURCE:
            entity = dict(self.broker_configs.get(record.resource_name, {}))
            if record.value is None:
                entity.pop(record.name, None)
            else:
                entity[record.name] = record.value
            if entity:
                self.broker_configs[record.resource_name] = entity
            else:
                self.broker_configs.pop(record.resource_name, None)
            return
        if record.resource_type != TOPIC_RESOURCE:
            raise MetadataReplayError(f"config of resource type {record.resource_type}: only topics and brokers")
        topic = self._topics.get(record.resource_name)
        if topic is None:
            raise MetadataReplayError(f"config {record.name} of unknown topic {record.resource_name}")
        configs = dict(topic.configs)
        if record.value is None:
            configs.pop(record.name, None)
        else:
            configs[record.name] = record.value
        self._topics[record.resource_name] = replace(topic, configs=configs)

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        topic = self._topics.pop(record.name, None)
        if topic is None:
            raise MetadataReplayError(f"removal of unknown topic {record.name}")
        for partition in range(topic.num_partitions):
            del self._partitions[TopicPartition(record.name, partition)]

    def _replay_partition(self, record: PartitionRecord) -> None:
        topic = self._topics.get(record.topic)
        if topic is None:
            raise MetadataReplayError(f"partition {record.topic}-{record.partition} of an unknown topic")
        if record.partition != topic.num_partitions:
            raise MetadataReplayError(
                f"partition {record.topic}-{record.partition} out of order (expected {topic.num_partitions})"
            )
        registration = _new_partition(record)
        _check_partition(registration)
        self._partitions[registration.topic_partition] = registration
        self._topics[record.topic] = replace(topic, num_partitions=topic.num_partitions + 1)

    def check_changes(self, records: Sequence[MetadataRecord]) -> None:
        """Raise MetadataReplayError if a new partition or a partition change among `records` would break a
        partition's invariants (leader in the ISR, a non-empty ISR, ...), changing nothing. The controller
        runs it before records become durable: one that replay refuses would also stop every later load."""
        changed: dict[TopicPartition, PartitionRegistration] = {}
        for record in records:
            if isinstance(record, PartitionRecord):
                registration = _new_partition(record)
                _check_partition(registration)
                changed[registration.topic_partition] = registration
            elif isinstance(record, PartitionChangeRecord):
                tp = TopicPartition(record.topic, record.partition)
                current = changed.get(tp) or self._partitions.get(tp)
                if current is None:
                    raise MetadataReplayError(f"change of unknown partition {tp}")
                changed[tp] = _changed_partition(current, record)

    def _replay_partition_change(self, record: PartitionChangeRecord) -> None:
        tp = TopicPartition(record.topic, record.partition)
        current = self._partitions.get(tp)
        if current is None:
            raise MetadataReplayError(f"change of unknown partition {tp}")
        self._partitions[tp] = _changed_partition(current, record)


def _new_partition(record: PartitionRecord) -> PartitionRegistration:
    return PartitionRegistration(
        topic=record.topic,
        partition=record.partition,
        replicas=tuple(record.replicas),
        isr=tuple(record.isr),
        leader=record.leader,
        leader_epoch=record.leader_epoch,
        partition_epoch=record.partition_epoch,
        adding_replicas=tuple(record.adding_replicas),
        removing_replicas=tuple(record.removing_replicas),
    )


def _changed_partition(current: PartitionRegistration, record: PartitionChangeRecord) -> PartitionRegistration:
    """`current` with `record` applied, checked: a new partition epoch, and a new leader epoch with a leader."""
    changed = replace(current, partition_epoch=current.partition_epoch + 1)
    if record.leader is not None:
        changed = replace(changed, leader=record.leader, leader_epoch=current.leader_epoch + 1)
    if record.isr is not None:
        changed = replace(changed, isr=tuple(record.isr))
    if record.replicas is not None:
        changed = replace(changed, replicas=tuple(record.replicas))
    if record.adding_replicas is not None:
        changed = replace(changed, adding_replicas=tuple(record.adding_replicas))
    if record.removing_replicas is not None:
        changed = replace(changed, removing_replicas=tuple(record.removing_replicas))
    _check_partition(changed)
    return changed


def _check_partition(p: PartitionRegistration) -> None:
    where = f"{p.topic}-{p.partition}"
    if not p.replicas or len(set(p.replicas)) != len(p.replicas):
        raise MetadataReplayError(f"{where}: replicas {p.replicas} empty or with duplicates")
    if not p.isr or len(set(p.isr)) != len(p.isr) or not set(p.isr) <= set(p.replicas):
        raise MetadataReplayError(f"{where}: ISR {p.isr} is not a non-empty subset of {p.replicas}")
    if p.isr != in_replica_order(p.replicas, p.isr):
        raise MetadataReplayError(f"{where}: ISR {p.isr} is not in replica order {p.replicas}")
    if p.leader != NO_LEADER and p.leader not in p.isr:
        raise MetadataReplayError(f"{where}: leader {p.leader} is not in ISR {p.isr}")
    if p.leader_epoch < 0 or p.partition_epoch < 0:
        raise MetadataReplayError(f"{where}: negative epoch")
    if not set(p.adding_replicas) | set(p.removing_replicas) <= set(p.replicas) or set(p.adding_replicas) & set(
        p.removing_replicas
    ):
        raise MetadataReplayError(
            f"{where}: adding {p.adding_replicas} and removing {p.removing_replicas} must be disjoint replicas"
        )


def in_replica_order(replicas: Sequence[int], members: Sequence[int] | frozenset[int]) -> tuple[int, ...]:
    """`members` (a subset of `replicas`) listed in replica order: the canonical ISR order."""
    wanted = set(members)
    return tuple(r for r in replicas if r in wanted)


def replay_all(records: Sequence[MetadataRecord], image: MetadataImage | None = None) -> MetadataImage:
    """Replay `records` onto `image` (a new empty image by default) and return it."""
    target = image if image is not None else MetadataImage()
    for record in records:
        target.replay(record)
    return target
