"""Metadata records: every change to cluster metadata, as Kafka's KRaft records are.

How this works
--------------
Every change to cluster metadata is a *record* (a frozen dataclass below). The active controller decides
which records a command produces and appends them to the replicated metadata log (raft/); every
controller and every broker replays the committed ones into its `MetadataImage` (metadata/image.py), the
only code that changes an image. Replaying the same records in the same order always yields the same
image, as in Kafka's KRaft metadata log.

Epochs are derived on replay, never carried by change records, exactly as in KRaft:

* `PartitionRecord` creates a partition with the epochs it names (0 for a new topic);
* `PartitionChangeRecord` with a `leader` bumps `leader_epoch` by one; every `PartitionChangeRecord`
  bumps `partition_epoch` by one. An ISR-only change therefore moves `partition_epoch` but not
  `leader_epoch`, so followers keep fetching while the leader learns the new ISR.

Broker liveness (last heartbeat) is not metadata: it belongs to the controller that observes it.

Records serialize to plain dicts of str / int / bool / list / dict (`record_to_dict`,
`record_from_dict`), ready for msgpack.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

NO_LEADER = -1
TOPIC_RESOURCE = 2  # Kafka's ConfigResource.Type.TOPIC
BROKER_RESOURCE = 4  # Kafka's ConfigResource.Type.BROKER: name "" is the cluster-wide default, else a broker id


class MetadataReplayError(Exception):
    """A record that cannot be applied to the image: a corrupt log or a controller bug."""


# -- records --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    """A broker (re-)registered. Replaces any earlier registration of the same id.

    `broker_epoch` is the metadata offset of this record, so epochs only grow, even across
    controller restarts.
    """

    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None = None
    # Kafka listeners, name -> advertised host:port (Kafka's registration lists every listener).
    listeners: Mapping[str, str] = field(default_factory=dict)
    fenced: bool = True
    in_controlled_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerShutdownRecord:
    """The broker asked for a controlled shutdown: it may no longer lead or join an ISR."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    configs: Mapping[str, str] = field(default_factory=dict)
    topic_id: str = ""  # KIP-516: a new id each time a topic of this name is created


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """A config of a resource set (`value`) or removed (`value` None), as Kafka's ConfigRecord. A topic's
    (resource type 2) changes the topic's configs, which `TopicRecord` carries in a snapshot; a broker's
    (type 4: the dynamic replication throttle rates, for one broker or, with name "", the cluster default)
    lives in the image's `broker_configs`."""

    resource_type: int
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    """The topic and its partitions are deleted (DELETE_TOPICS); the name is free again."""

    name: str


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """Every producer id below `next_producer_id` has been given to a broker, in blocks (Kafka's
    ProducerIdsRecord, KIP-730): an id is never given twice, across controller failovers too. The block
    ending here went to `broker_id` at `broker_epoch` (-1 in records written before blocks existed)."""

    next_producer_id: int
    broker_id: int = -1
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """A leader, ISR and/or replica-set change. `None` means unchanged. See the module docstring for epochs.

    A reassignment (KIP-455) is two changes: the first sets `replicas` to target + removing with the
    `adding_replicas` and `removing_replicas`; once every target replica is in the ISR the second sets
    `replicas` to the target and empties both."""

    topic: str
    partition: int
    leader: int | None = None
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None


MetadataRecord = (
    RegisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | BrokerShutdownRecord
    | TopicRecord
    | ConfigRecord
    | RemoveTopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | ProducerIdsRecord
)

_RECORD_TYPES: dict[str, type[MetadataRecord]] = {
    cls.__name__: cls
    for cls in (
        RegisterBrokerRecord,
        FenceBrokerRecord,
        UnfenceBrokerRecord,
        BrokerShutdownRecord,
        TopicRecord,
        ConfigRecord,
        RemoveTopicRecord,
        PartitionRecord,
        PartitionChangeRecord,
        ProducerIdsRecord,
    )
}
_TUPLE_FIELDS = frozenset({"replicas", "isr", "adding_replicas", "removing_replicas"})


def record_to_dict(record: MetadataRecord) -> dict[str, Any]:
    """A msgpack-friendly dict: `{"type": <class name>, <field>: <value>, ...}`."""
    out: dict[str, Any] = {"type": type(record).__name__}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


def record_from_dict(data: Mapping[str, Any]) -> MetadataRecord:
    """Inverse of `record_to_dict`. Raises MetadataReplayError for an unknown type or bad fields."""
    try:
        cls = _RECORD_TYPES[data["type"]]
    except (KeyError, TypeError):
        raise MetadataReplayError(f"unknown metadata record type in {data!r}") from None
    kwargs = {key: value for key, value in data.items() if key != "type"}
    for name in _TUPLE_FIELDS & kwargs.keys():
        if kwargs[name] is not None:
            kwargs[name] = tuple(kwargs[name])
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise MetadataReplayError(f"bad {cls.__name__}: {exc}") from None


def encode_record(record: MetadataRecord) -> bytes:
    """A record as the metadata log and snapshots store it: msgpack of `record_to_dict`."""
    data: bytes = msgpack.packb(record_to_dict(record), use_bin_type=True)
    return data


def decode_record(value: bytes) -> MetadataRecord:
    """Inverse of `encode_record`; MetadataReplayError for a value that is not a record."""
    try:
        data = msgpack.unpackb(value, raw=False)
    except (ValueError, TypeError) as exc:
        raise MetadataReplayError(f"unreadable metadata record: {exc}") from None
    return record_from_dict(data)
