"""The controller's decisions: broker registration and liveness, topics and their configs, leader election, ISR
changes.

How this works
--------------
A command (`register_broker`, `heartbeat`, `tick`, `create_topics`, `create_partitions`,
`incremental_alter_configs`, `alter_partition`, ...) reads the metadata image, decides which records
express its effect, *commits* them (appends them to the metadata store, when there is one, then replays
them into the image) and answers with a
`ControllerResult(records, response, changed_partitions)`. State changes only through replayed records,
as in Kafka's KRaft `QuorumController`; the controller is single-threaded, so a command commits
immediately and the next command sees its effect. No sockets, no event loop and no clock reads here:
the network layer passes `now_ms` in and carries the results out. It pushes LEADER_AND_ISR for
`changed_partitions` to every replica's broker (`ControllerResult.leader_and_isr_by_broker`) and sends a
returning broker its full state (`leader_and_isr_for_broker`) once it is unfenced.

Broker lifecycle (KRaft's, simplified):

    register ──▶ fenced ──first heartbeat──▶ unfenced ──want_shutdown──▶ controlled shutdown ──▶ fenced
                   ▲                            │                        (leads nothing: should_shutdown)
                   └──── no heartbeat for more than broker.session.timeout.ms ┘

* Every registration gets a new broker epoch (the offset of its record) and starts fenced. A
  registration from a new incarnation (the process restarted) also removes the broker from ISRs and
  leaderships, because a restarted process may have lost unflushed data (KIP-966). A retried
  registration of the same incarnation and endpoint is answered with the epoch it already has.
* Liveness is controller state, not metadata: a broker is fenced when `now_ms - last_contact_ms` is
  *greater than* `broker.session.timeout.ms` (at exactly the timeout it is still alive, as in Kafka's
  BrokerHeartbeatManager).
* Fencing a broker (timeout, new incarnation, `want_fence`) or putting it in controlled shutdown removes
  it from every ISR (never emptying one) and moves its leaderships (see "leader election" below).
* A fenced broker that heartbeats again is unfenced; offline partitions whose ISR holds it get it as
  leader (or any returning replica, with unclean election enabled).
* After a restart the controller replays its store and fences every broker it loaded, without moving
  leaderships: leaders and epochs stay as they were, and each broker is unfenced by its first heartbeat.
  A loaded broker that stays silent for the session timeout (counted from the first command after the
  restart) is fenced for real: its leaderships move. So "a leader is an unfenced broker" holds except
  in that window after a restart.

Partition epochs follow KRaft (metadata.py): a leader change bumps `leader_epoch` and
`partition_epoch`, an ISR-only change bumps `partition_epoch`. ISRs are kept in replica order.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar

from controller.metadata import (
    BROKER_RESOURCE,
    NO_LEADER,
    TOPIC_RESOURCE,
    BrokerRegistration,
    BrokerShutdownRecord,
    ConfigRecord,
    FenceBrokerRecord,
    MetadataImage,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    PartitionRegistration,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    in_replica_order,
)
from controller.metadata_store import MetadataStore
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import (
    ELECTION_PREFERRED,
    ELECTION_UNCLEAN,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    AlterPartitionItem,
    AlterPartitionItemResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    LeaderAndIsrPartition,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    MetadataResponse,
    OngoingPartitionReassignment,
    PartitionElectionResult,
    PartitionMetadata,
    ReassignablePartitionResponse,
    TopicMetadata,
    TopicPartition,
)
from server_common.dynamic_config import dynamic_broker_config_error
from server_common.log_config import parse_bool, topic_config_error, topic_config_key_error
from server_common.time import Time

MAX_PRODUCER_EPOCH = 2**15 - 1  # an int16 in the batch header

R = TypeVar("R")


# -- configuration --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Controller settings; `from_properties` reads Kafka's dotted keys (see `KEYS`)."""

    node_id: int = 3000
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    unclean_leader_election_enable: bool = False
    default_replication_factor: int = 1
    num_partitions: int = 1
    min_insync_replicas: int = 1
    create_topics_request_max_topics: int = 1000
    create_topics_request_max_partitions: int = 10000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300

    KEYS = {
        "node.id": "node_id",
        "broker.session.timeout.ms": "broker_session_timeout_ms",
        "broker.heartbeat.interval.ms": "broker_heartbeat_interval_ms",
        "unclean.leader.election.enable": "unclean_leader_election_enable",
        "default.replication.factor": "default_replication_factor",
        "num.partitions": "num_partitions",
        "min.insync.replicas": "min_insync_replicas",
        "create.topics.request.max.topics": "create_topics_request_max_topics",
        "create.topics.request.max.partitions": "create_topics_request_max_partitions",
        "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
        "leader.imbalance.check.interval.seconds": "leader_imbalance_check_interval_seconds",
    }

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> ControllerConfig:
        """Build from `{"broker.session.timeout.ms": "1000", ...}`; unknown keys raise ValueError."""
        unknown = set(properties) - set(cls.KEYS)
        if unknown:
            raise ValueError(f"unknown controller config keys: {sorted(unknown)}")
        types = {f.name: f.type for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in properties.items():
            name = cls.KEYS[key]
            kwargs[name] = parse_bool(key, value) if types[name] in (bool, "bool") else int(value)
        return cls(**kwargs)


# -- results --------------------------------------------------------------------------------------


@dataclass(slots=True)
class ControllerResult(Generic[R]):
    """What a command committed and what to answer.

    `changed_partitions` holds the committed state of every partition the records touched (once each,
    latest state); `is_new` marks partitions the command created.
    """

    records: list[MetadataRecord]
    response: R
    changed_partitions: list[LeaderAndIsrPartition] = field(default_factory=list)
    # Replicas to stop and delete (STOP_REPLICA with delete_partition), by broker: a deleted topic's.
    deleted_replicas: dict[int, list[TopicPartition]] = field(default_factory=dict)

    def leader_and_isr_by_broker(self) -> dict[int, list[LeaderAndIsrPartition]]:
        """The changed partitions grouped by every broker that holds a replica of them."""
        by_broker: dict[int, list[LeaderAndIsrPartition]] = {}
        for p in self.changed_partitions:
            for broker_id in p.replicas:
                by_broker.setdefault(broker_id, []).append(p)
        return by_broker

    @property
    def unfenced_brokers(self) -> list[int]:
        """Brokers this command unfenced: send each its full state (`leader_and_isr_for_broker`)."""
        return [r.broker_id for r in self.records if isinstance(r, UnfenceBrokerRecord)]

    @property
    def fenced_brokers(self) -> list[int]:
        return [r.broker_id for r in self.records if isinstance(r, FenceBrokerRecord)]


# -- leader election ------------------------------------------------------------------------------


def elect_leader(replicas: Sequence[int], isr: Iterable[int], live: Iterable[int], unclean: bool) -> int:
    """The new leader, or -1 (NO_LEADER) when no acceptable replica exists.

    Clean: the first replica, in replica order, that is both live and in the ISR, so the preferred
    (first) replica wins whenever it can. Unclean (only when enabled, and only when no ISR member is
    live): the first live replica; the caller then resets the ISR to that leader alone, accepting that
    records acknowledged by the old ISR may be lost.
    """
    isr_set, live_set = set(isr), set(live)
    for replica in replicas:
        if replica in isr_set and replica in live_set:
            return replica
    if unclean:
        for replica in replicas:
            if replica in live_set:
                return replica
    return NO_LEADER


def partition_change(
    partition: PartitionRegistration, remove: int | None, active: frozenset[int], unclean: bool
) -> PartitionChangeRecord | None:
    """The change that takes `remove` out of the partition's ISR and leadership, re-electing as needed.

    With `remove=None` this only elects a leader for a partition that has none (an offline partition
    whose ISR member came back). New leaders are chosen from `active` only. The ISR never becomes empty: when
    `remove` is its last member it stays, and the partition goes offline (leader -1) unless an unclean
    election finds a live replica, whose ISR then becomes just that replica. Returns None when nothing
    changes.
    """
    target_isr = tuple(r for r in partition.isr if r != remove) or partition.isr
    leader = partition.leader
    # Only a missing or removed leader is replaced. A leader that is merely not active stays: that is
    # a broker loaded fenced after a controller restart, which keeps its leaderships until its own
    # session expires (then it is the one removed).
    if leader == NO_LEADER or leader == remove or leader not in target_isr:
        leader = elect_leader(partition.replicas, target_isr, active, unclean)
        if leader != NO_LEADER and leader not in target_isr:
            target_isr = (leader,)
    new_leader = leader if leader != partition.leader else None
    new_isr = target_isr if target_isr != partition.isr else None
    if new_leader is None and new_isr is None:
        return None
    return PartitionChangeRecord(topic=partition.topic, partition=partition.partition, leader=new_leader, isr=new_isr)


# -- replica assignment ---------------------------------------------------------------------------


def assign_replicas_to_brokers(
    num_partitions: int,
    replication_factor: int,
    broker_ids: Sequence[int],
    start_index: int,
    replica_shift: int,
    start_partition_id: int = 0,
) -> list[tuple[int, ...]]:
    """Kafka's rack-unaware `assignReplicasToBrokers`: replicas of partitions `start_partition_id` onwards,
    first replica preferred.

    The first replica walks the sorted brokers round-robin from `start_index`, so leaders spread evenly;
    the followers sit at a shift from the first replica, and the shift grows by one every time the
    first replica wraps around, so follower sets differ between rounds. Partitions added to a topic
    (CREATE_PARTITIONS) are numbered on from the existing ones, so the round-robin goes on where it was.
    """
    brokers = sorted(broker_ids)
    n = len(brokers)
    if not 0 < replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} with {n} brokers")
    assignment: list[tuple[int, ...]] = []
    shift = replica_shift
    for p in range(start_partition_id, start_partition_id + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        assignment.append(tuple(replicas))
    return assignment


_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _topic_name_error(name: str) -> str | None:
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-]"
    return None


# -- the controller -------------------------------------------------------------------------------


class Controller:
    """Owns the metadata image and broker liveness. Single-threaded: call one command at a time."""

    def __init__(self, config: ControllerConfig, time: Time, store: MetadataStore | None = None) -> None:
        self.config = config
        self._time = time
        self._store = store
        if store is not None:
            self._image, self._last_offset = store.load()
        else:
            self._image, self._last_offset = MetadataImage(), -1
        # broker id -> last time it showed it is alive (registration or heartbeat). Only brokers whose
        # session can still expire are here; a broker fenced by expiry leaves until it heartbeats.
        self._last_contact_ms: dict[int, int] = {}
        # Replicas each broker reported it cannot serve (its latest heartbeat): they leave the ISR, lose
        # leadership and may not rejoin the ISR until the broker stops reporting them.
        self._offline_replicas: dict[int, frozenset[TopicPartition]] = {}
        # Brokers loaded from the store: their session starts with the first now_ms we are given.
        self._sessions_to_start: set[int] = set(self._image.brokers)
        # Replicas the command being run made obsolete (a deleted topic's, a reassignment's removed ones):
        # `_result` hands them to the caller to stop and delete on their brokers (STOP_REPLICA).
        self._deleted_replicas: dict[int, list[TopicPartition]] = {}
        # When the next automatic preferred leader election runs (auto.leader.rebalance.enable): set by the
        # first tick, then every leader.imbalance.check.interval.seconds.
        self._next_rebalance_ms: int | None = None
        #: Called with each record after it is replayed into the image (the simulator's checker listens).
        self.on_replay: Callable[[MetadataRecord, MetadataImage], None] | None = None
        self._commit(
            [FenceBrokerRecord(b.broker_id, b.broker_epoch) for b in self._image.brokers.values() if not b.fenced],
            [],
        )

    # -- reading ----------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self._image

    @property
    def last_offset(self) -> int:
        """Offset of the last committed record (-1 when none)."""
        return self._last_offset

    def topic_config_defaults(self) -> dict[str, str]:
        """What a topic that does not set these keys gets from the controller (brokers learn them through
        UPDATE_METADATA): its min.insync.replicas and unclean.leader.election.enable."""
        return {
            "min.insync.replicas": str(self.config.min_insync_replicas),
            "unclean.leader.election.enable": str(self.config.unclean_leader_election_enable).lower(),
        }

    def topic_configs(self, topic: str) -> dict[str, str]:
        """The configs METADATA carries for `topic`: those set on it, plus the min.insync.replicas in effect
        (clients check acks=all against it)."""
        info = self._image.topics.get(topic)
        if info is None:
            return {}
        return {"min.insync.replicas": str(self.config.min_insync_replicas), **info.configs}

    def leader_and_isr_for_broker(self, broker_id: int) -> list[LeaderAndIsrPartition]:
        """Full state for a broker: every partition it holds a replica of."""
        return [self._leader_and_isr(p) for p in self._image.partitions_with_replica(broker_id)]

    def _leader_and_isr(self, p: PartitionRegistration, is_new: bool = False) -> LeaderAndIsrPartition:
        topic = self._image.topics.get(p.topic)
        return p.to_leader_and_isr(is_new=is_new, topic_id=topic.topic_id if topic is not None else "")

    def metadata(self, topics: Sequence[str] | None = None) -> MetadataResponse:
        """Brokers that can serve (unfenced, or leading something) and the requested topics (None: all)."""
        names = sorted(self._image.topics) if topics is None else list(topics)
        leaders = {p.leader for p in self._image.partitions.values()}
        brokers = [
            b.endpoint()
            for b in sorted(self._image.brokers.values(), key=lambda b: b.broker_id)
            if not b.fenced or b.broker_id in leaders
        ]
        return MetadataResponse(
            brokers=brokers,
            topics=[self._topic_metadata(name) for name in names],
            controller_id=self.config.node_id,
        )

    def _topic_metadata(self, name: str) -> TopicMetadata:
        if name not in self._image.topics:
            return TopicMetadata(
                topic=name,
                partitions=[],
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message=f"unknown topic {name}",
            )
        fenced = {b.broker_id for b in self._image.brokers.values() if b.fenced}
        return TopicMetadata(
            topic=name,
            partitions=[
                PartitionMetadata(
                    partition=p.partition,
                    leader_id=p.leader,
                    leader_epoch=p.leader_epoch,
                    replicas=list(p.replicas),
                    isr=list(p.isr),
                    error_code=ErrorCode.LEADER_NOT_AVAILABLE if p.is_offline else ErrorCode.NONE,
                    offline_replicas=[r for r in p.replicas if r in fenced or r not in self._image.brokers],
                )
                for p in self._image.partitions_of(name)
            ],
            configs=self.topic_configs(name),
        )

    # -- broker registration and liveness ---------------------------------------------------------

    def register_broker(
        self, request: BrokerRegistrationRequest, now_ms: int | None = None
    ) -> ControllerResult[BrokerRegistrationResponse]:
        now_ms = self._now(now_ms)
        committed: list[MetadataRecord] = []
        existing = self._image.brokers.get(request.broker_id)
        if existing is not None and _same_process(existing, request):
            self._last_contact_ms[request.broker_id] = now_ms
            return self._result(committed, BrokerRegistrationResponse(broker_epoch=existing.broker_epoch))
        registration = RegisterBrokerRecord(
            broker_id=request.broker_id,
            broker_epoch=self._last_offset + 1,  # the offset this record is about to get
            incarnation_id=request.incarnation_id,
            host=request.host,
            port=request.port,
            rack=request.rack,
            fenced=True,
            in_controlled_shutdown=False,
            listeners=dict(request.listeners),
        )
        changes = self._removal_changes(request.broker_id) if existing is not None else []
        self._commit([registration, *changes], committed)
        self._last_contact_ms[request.broker_id] = now_ms
        return self._result(committed, BrokerRegistrationResponse(broker_epoch=registration.broker_epoch))

    def heartbeat(
        self, request: BrokerHeartbeatRequest, now_ms: int | None = None
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        now_ms = self._now(now_ms)
        committed: list[MetadataRecord] = []
        broker = self._image.brokers.get(request.broker_id)
        if broker is None:
            return self._result(
                committed,
                _heartbeat_error(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {request.broker_id} is not registered"),
            )
        if request.broker_epoch != broker.broker_epoch:
            return self._result(
                committed,
                _heartbeat_error(
                    ErrorCode.STALE_BROKER_EPOCH,
                    f"broker {request.broker_id} has epoch {broker.broker_epoch}, not {request.broker_epoch}",
                ),
            )
        self._last_contact_ms[broker.broker_id] = now_ms
        self._take_offline_replicas(broker.broker_id, request, committed)
        should_shutdown = False
        if request.want_shutdown or broker.in_controlled_shutdown:
            should_shutdown = self._controlled_shutdown(broker, committed)
        elif request.want_fence:
            self._fence(broker.broker_id, committed)
        elif broker.fenced:
            self._unfence(broker.broker_id, committed)
        after = self._image.brokers[broker.broker_id]
        response = BrokerHeartbeatResponse(is_caught_up=True, is_fenced=after.fenced, should_shutdown=should_shutdown)
        return self._result(committed, response)

    def _take_offline_replicas(
        self, broker_id: int, request: BrokerHeartbeatRequest, committed: list[MetadataRecord]
    ) -> None:
        """A broker whose disk failed or that found corruption reports those replicas: take it out of
        their ISRs and move their leaderships to a healthy ISR member, with an epoch bump."""
        offline = frozenset(TopicPartition(r.topic, r.partition) for r in request.offline_replicas)
        self._offline_replicas[broker_id] = offline
        if not offline:
            return
        active = self._image.active_broker_ids() - {broker_id}
        changes: list[MetadataRecord] = []
        for tp in sorted(offline):
            p = self._image.partitions.get(tp)
            if p is None or (broker_id not in p.isr and p.leader != broker_id):
                continue
            if (change := partition_change(p, broker_id, active, self._unclean(tp.topic))) is not None:
                changes.append(change)
        if changes:
            self._commit(changes, committed)

    def tick(self, now_ms: int | None = None) -> ControllerResult[list[int]]:
        """Fence every broker silent for more than broker.session.timeout.ms; answer their ids. With
        auto.leader.rebalance.enable, every leader.imbalance.check.interval.seconds also give each
        partition back to its preferred replica where that one can lead (as ELECT_LEADERS does)."""
        now_ms = self._now(now_ms)
        committed: list[MetadataRecord] = []
        expired = sorted(
            broker_id
            for broker_id, last_contact_ms in self._last_contact_ms.items()
            if now_ms - last_contact_ms > self.config.broker_session_timeout_ms
        )
        for broker_id in expired:
            del self._last_contact_ms[broker_id]
            self._fence(broker_id, committed)
        if self.config.auto_leader_rebalance_enable:
            interval_ms = self.config.leader_imbalance_check_interval_seconds * 1000
            if self._next_rebalance_ms is None:
                self._next_rebalance_ms = now_ms + interval_ms
            elif now_ms >= self._next_rebalance_ms:
                self._next_rebalance_ms = now_ms + interval_ms
                active = self._image.active_broker_ids()
                ordered = sorted(self._image.partitions.values(), key=lambda p: p.topic_partition)
                moves = [move for p in ordered if (move := self._election(p, False, active)[2]) is not None]
                self._commit(moves, committed)  # one metadata write for the whole rebalance
        return self._result(committed, expired)

    def _controlled_shutdown(self, broker: BrokerRegistration, committed: list[MetadataRecord]) -> bool:
        """Move leaderships and ISR memberships away; True once the broker leads nothing.

        The heartbeat that moves leaderships answers False, like KRaft's CONTROLLED_SHUTDOWN state:
        the network layer gets until the next heartbeat to tell the new leaders before the old one stops.
        """
        led_before = bool(self._image.partitions_led_by(broker.broker_id))
        if not broker.in_controlled_shutdown:
            shutdown = BrokerShutdownRecord(broker.broker_id, broker.broker_epoch)
            self._commit([shutdown, *self._removal_changes(broker.broker_id)], committed)
            if led_before:
                return False
        if self._image.partitions_led_by(broker.broker_id):
            return False
        self._fence(broker.broker_id, committed)
        return True

    def _fence(self, broker_id: int, committed: list[MetadataRecord]) -> None:
        broker = self._image.brokers[broker_id]
        fence: list[MetadataRecord] = [] if broker.fenced else [FenceBrokerRecord(broker_id, broker.broker_epoch)]
        self._commit([*fence, *self._removal_changes(broker_id)], committed)

    def _unfence(self, broker_id: int, committed: list[MetadataRecord]) -> None:
        broker = self._image.brokers[broker_id]
        active = self._image.active_broker_ids() | {broker_id}
        elections = [
            change
            for p in self._image.offline_partitions()
            if (change := partition_change(p, None, active, self._unclean(p.topic))) is not None
        ]
        self._commit([UnfenceBrokerRecord(broker_id, broker.broker_epoch), *elections], committed)

    def _removal_changes(self, broker_id: int) -> list[MetadataRecord]:
        """Changes that take `broker_id` out of every ISR and leadership (it is about to be inactive)."""
        active = self._image.active_broker_ids() - {broker_id}
        touched = {p.topic_partition: p for p in self._image.partitions_with_isr_member(broker_id)}
        touched.update((p.topic_partition, p) for p in self._image.partitions_led_by(broker_id))
        return [
            change
            for p in touched.values()
            if (change := partition_change(p, broker_id, active, self._unclean(p.topic))) is not None
        ]

    def _unclean(self, topic: str) -> bool:
        """unclean.leader.election.enable for `topic`: its own config, else the controller's."""
        info = self._image.topics.get(topic)
        value = info.configs.get("unclean.leader.election.enable") if info is not None else None
        return self.config.unclean_leader_election_enable if value is None else value.strip().lower() == "true"

    # -- topics -----------------------------------------------------------------------------------

    def create_topics(self, request: CreateTopicsRequest) -> ControllerResult[CreateTopicsResponse]:
        """Validation is linear in the request and its work is bounded by
        `create.topics.request.max.topics` and `create.topics.request.max.partitions`, so no request can
        hold the controller's loop (and with it every broker's heartbeat) for long. A name listed more than
        once is refused with INVALID_REQUEST, once in the answer, as Kafka does."""
        config = self.config
        if len(request.topics) > config.create_topics_request_max_topics:
            return self._result(
                [],
                CreateTopicsResponse(
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"{len(request.topics)} topics in one request; at most "
                    f"{config.create_topics_request_max_topics} (create.topics.request.max.topics)",
                ),
            )
        counts = Counter(t.name for t in request.topics)
        committed: list[MetadataRecord] = []
        results: list[CreatableTopicResult] = []
        partitions_left = config.create_topics_request_max_partitions
        for topic in request.topics:
            count = counts[topic.name]
            if count == 0:
                continue  # a duplicate already answered
            if count > 1:
                results.append(
                    CreatableTopicResult(
                        name=topic.name,
                        error_code=ErrorCode.INVALID_REQUEST,
                        error_message=f"topic {topic.name} is listed {count} times in one request",
                    )
                )
                counts[topic.name] = 0
                continue
            wanted = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            if wanted > partitions_left:
                results.append(
                    CreatableTopicResult(
                        name=topic.name,
                        error_code=ErrorCode.INVALID_PARTITIONS,
                        error_message=f"{wanted} partitions would pass the "
                        f"{config.create_topics_request_max_partitions} one request may create "
                        "(create.topics.request.max.partitions)",
                    )
                )
                continue
            result = self._create_topic(topic, committed)
            if result.error_code == ErrorCode.NONE:
                partitions_left -= wanted
            results.append(result)
        return self._result(committed, CreateTopicsResponse(topics=results))

    def _create_topic(self, topic: CreatableTopic, committed: list[MetadataRecord]) -> CreatableTopicResult:
        num_partitions = self.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        replication_factor = (
            self.config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
        )
        active = sorted(self._image.active_broker_ids())

        def error(code: ErrorCode, message: str) -> CreatableTopicResult:
            return CreatableTopicResult(name=topic.name, error_code=code, error_message=message)

        if (name_error := _topic_name_error(topic.name)) is not None:
            return error(ErrorCode.INVALID_TOPIC_EXCEPTION, name_error)
        if topic.name in self._image.topics:
            return error(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name} already exists")
        if (config_error := topic_config_error(topic.configs)) is not None:
            return error(ErrorCode.INVALID_CONFIG, config_error)
        if num_partitions <= 0:
            return error(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be positive, got {num_partitions}")
        if replication_factor <= 0:
            return error(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor must be positive, got {replication_factor}",
            )
        if replication_factor > len(active):
            return error(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication_factor} is larger than the {len(active)} available brokers",
            )
        seed = zlib.crc32(topic.name.encode())
        assignment = assign_replicas_to_brokers(
            num_partitions,
            replication_factor,
            active,
            start_index=seed % len(active),
            replica_shift=seed // len(active),
        )
        # Only what the request sets is stored: a key it leaves out follows the controller's default
        # (`topic_config_defaults`), so DESCRIBE_CONFIGS can tell one from the other.
        configs = dict(topic.configs)
        # The id is the metadata offset of the TopicRecord: unique for the life of the cluster, like broker
        # epochs, and the same in every replay (the simulator needs runs to repeat exactly).
        topic_id = f"{self._last_offset + 1:016x}"
        records: list[MetadataRecord] = [TopicRecord(name=topic.name, configs=configs, topic_id=topic_id)]
        records += [
            PartitionRecord(topic=topic.name, partition=i, replicas=replicas, isr=replicas, leader=replicas[0])
            for i, replicas in enumerate(assignment)
        ]
        self._commit(records, committed)
        return CreatableTopicResult(
            name=topic.name, num_partitions=num_partitions, replication_factor=replication_factor
        )

    # -- deleting topics ----------------------------------------------------------------------------

    def delete_topics(self, request: DeleteTopicsRequest) -> ControllerResult[DeleteTopicsResponse]:
        """DELETE_TOPICS: one RemoveTopicRecord per existing topic; every replica of its partitions is then
        told to stop and delete its log (STOP_REPLICA, `deleted_replicas`). The name can be created again
        at once: the new topic has a new id, so a broker still holding an old log discards it."""
        committed: list[MetadataRecord] = []
        results: list[DeletableTopicResult] = []
        for name in dict.fromkeys(request.topic_names):  # a name listed twice is deleted once
            topic = self._image.topics.get(name)
            if topic is None:
                results.append(
                    DeletableTopicResult(
                        name=name,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"topic {name} does not exist",
                    )
                )
                continue
            for p in self._image.partitions_of(name):
                self._delete_replicas(p.topic_partition, p.replicas)
            self._commit([RemoveTopicRecord(name=name)], committed)
            results.append(DeletableTopicResult(name=name))
        return self._result(committed, DeleteTopicsResponse(responses=results))

    # -- adding partitions (CREATE_PARTITIONS) -----------------------------------------------------

    def create_partitions(self, request: CreatePartitionsRequest) -> ControllerResult[CreatePartitionsResponse]:
        """Grow topics to `count` partitions (kafka-topics.sh --alter --partitions). The new partitions get
        the replication factor of partition 0 and Kafka's placement for added partitions: round-robin over
        the active brokers from the one holding partition 0's preferred replica, numbered on from the
        existing partitions (`assign_replicas_to_brokers`). They are committed as PartitionRecords, so
        brokers hear of them as of a new topic's (LEADER_AND_ISR with is_new, UPDATE_METADATA). Existing
        partitions and their data stay where they are; as in Kafka, a key may map to another partition
        from now on. The partitions one request adds are bounded by create.topics.request.max.partitions."""
        counts = Counter(t.name for t in request.topics)
        committed: list[MetadataRecord] = []
        results: list[CreatePartitionsTopicResult] = []
        partitions_left = self.config.create_topics_request_max_partitions
        for topic in request.topics:
            count = counts[topic.name]
            if count == 0:
                continue  # a duplicate already answered
            if count > 1:
                counts[topic.name] = 0
                results.append(
                    CreatePartitionsTopicResult(
                        topic.name,
                        ErrorCode.INVALID_REQUEST,
                        f"topic {topic.name} is listed {count} times in one request",
                    )
                )
                continue
            try:
                partitions_left -= self._add_partitions(topic, partitions_left, committed)
                results.append(CreatePartitionsTopicResult(topic.name))
            except KafkaError as exc:
                results.append(CreatePartitionsTopicResult(topic.name, exc.code, exc.message))
        return self._result(committed, CreatePartitionsResponse(results=results))

    def _add_partitions(self, topic: CreatePartitionsTopic, limit: int, committed: list[MetadataRecord]) -> int:
        """Commit the partitions `topic` asks for and answer how many; KafkaError when it cannot have them."""
        info = self._image.topics.get(topic.name)
        if info is None:
            raise KafkaError(f"topic {topic.name} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        existing = info.num_partitions
        if topic.count < existing:
            raise KafkaError(
                f"Topic currently has {existing} partitions, which is higher than the requested {topic.count}.",
                ErrorCode.INVALID_PARTITIONS,
            )
        if topic.count == existing:
            raise KafkaError(f"Topic already has {existing} partitions.", ErrorCode.INVALID_PARTITIONS)
        added = topic.count - existing
        if added > limit:
            raise KafkaError(
                f"{added} new partitions would pass the {self.config.create_topics_request_max_partitions} one "
                "request may create (create.topics.request.max.partitions)",
                ErrorCode.INVALID_PARTITIONS,
            )
        first = self._image.partitions[TopicPartition(topic.name, 0)].target_replicas
        replication_factor = len(first)
        active = sorted(self._image.active_broker_ids())
        if replication_factor > len(active):
            raise KafkaError(
                f"replication factor {replication_factor} of topic {topic.name} is larger than the {len(active)} "
                "available brokers",
                ErrorCode.INVALID_REPLICATION_FACTOR,
            )
        # Kafka's createPartitions: start at the first broker from partition 0's preferred replica on, and
        # use that index as the initial follower shift too.
        start = next((i for i, broker_id in enumerate(active) if broker_id >= first[0]), 0)
        assignment = assign_replicas_to_brokers(
            added, replication_factor, active, start_index=start, replica_shift=start, start_partition_id=existing
        )
        records: list[MetadataRecord] = [
            PartitionRecord(
                topic=topic.name, partition=existing + i, replicas=replicas, isr=replicas, leader=replicas[0]
            )
            for i, replicas in enumerate(assignment)
        ]
        self._commit(records, committed)
        return added

    # -- topic configs (INCREMENTAL_ALTER_CONFIGS) ---------------------------------------------------

    def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest
    ) -> ControllerResult[IncrementalAlterConfigsResponse]:
        """SET or DELETE topic configs, each key checked as CREATE_TOPICS checks it (`topic_config_error`);
        a resource gets all of its changes or none. Every change is a ConfigRecord; the topic's new configs
        reach every broker in UPDATE_METADATA, and brokers apply them to the topic's logs and partitions at
        once. Deleting a key the topic does not set changes nothing; setting or deleting a key minibroker
        does not know is INVALID_CONFIG (Kafka lets a DELETE of an unknown key pass, so a typo there would go
        unnoticed). With `validate_only` nothing is committed."""
        counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
        committed: list[MetadataRecord] = []
        answers: list[AlterConfigsResourceResponse] = []
        for resource in request.resources:
            count = counts[(resource.resource_type, resource.resource_name)]
            if count == 0:
                continue  # a duplicate already answered
            answer = AlterConfigsResourceResponse(resource.resource_type, resource.resource_name)
            answers.append(answer)
            try:
                if count > 1:
                    counts[(resource.resource_type, resource.resource_name)] = 0
                    raise KafkaError(
                        f"resource {resource.resource_name} is listed {count} times in one request",
                        ErrorCode.INVALID_REQUEST,
                    )
                records = self._topic_config_changes(resource)
            except KafkaError as exc:
                answer.error_code, answer.error_message = exc.code, exc.message
                continue
            if not request.validate_only:
                self._commit(records, committed)
        return self._result(committed, IncrementalAlterConfigsResponse(responses=answers))

    def _broker_config_changes(self, resource: AlterConfigsResource) -> list[MetadataRecord]:
        """Dynamic broker configs: only the replication throttle rates (what kafka-reassign-partitions
        --throttle sets), for the cluster default (name "") or one broker (its id)."""
        entity = resource.resource_name
        if entity != "" and not entity.isdigit():
            raise KafkaError(
                f"broker resource name {entity!r}: a broker id, or empty for the cluster-wide default",
                ErrorCode.INVALID_REQUEST,
            )
        current = self._image.broker_configs.get(entity, {})
        records: list[MetadataRecord] = []
        for c in resource.configs:
            if c.config_operation == AlterConfigOp.SET:
                value: str | None = c.value if c.value is not None else ""  # SET without a value: refused as not a rate
            elif c.config_operation == AlterConfigOp.DELETE:
                value = None
            else:
                raise KafkaError(
                    f"config operation {c.config_operation} does not apply to {c.name}", ErrorCode.INVALID_CONFIG
                )
            if (problem := dynamic_broker_config_error(c.name, value)) is not None:
                raise KafkaError(problem, ErrorCode.INVALID_CONFIG)
            if value is not None:
                value = str(int(value))
            if current.get(c.name) != value:
                records.append(ConfigRecord(BROKER_RESOURCE, entity, c.name, value))
        return records

    def _topic_config_changes(self, resource: AlterConfigsResource) -> list[MetadataRecord]:
        """The ConfigRecords that apply `resource`'s operations; KafkaError when any of them is refused."""
        if resource.resource_type == BROKER_RESOURCE:
            return self._broker_config_changes(resource)
        if resource.resource_type != TOPIC_RESOURCE:
            raise KafkaError(
                f"only topic ({TOPIC_RESOURCE}) and broker ({BROKER_RESOURCE}) configs can be altered, not resource "
                f"type {resource.resource_type}",
                ErrorCode.INVALID_REQUEST,
            )
        topic = self._image.topics.get(resource.resource_name)
        if topic is None:
            raise KafkaError(f"topic {resource.resource_name} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        names = Counter(c.name for c in resource.configs)
        if duplicates := sorted(name for name, n in names.items() if n > 1):
            raise KafkaError(f"duplicate config keys: {', '.join(duplicates)}", ErrorCode.INVALID_REQUEST)
        sets: dict[str, str] = {}
        for c in resource.configs:
            if c.config_operation == AlterConfigOp.SET:
                if c.value is None:
                    raise KafkaError(f"SET {c.name} without a value", ErrorCode.INVALID_REQUEST)
                sets[c.name] = c.value
            elif c.config_operation == AlterConfigOp.DELETE:
                if (unknown := topic_config_key_error(c.name)) is not None:
                    raise KafkaError(unknown, ErrorCode.INVALID_CONFIG)
            elif c.config_operation in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                raise KafkaError(
                    f"{AlterConfigOp(c.config_operation).name} applies to list configs and {c.name} is not one",
                    ErrorCode.INVALID_CONFIG,
                )
            else:
                raise KafkaError(
                    f"unknown config operation {c.config_operation} for {c.name}", ErrorCode.INVALID_REQUEST
                )
        if (problem := topic_config_error(sets)) is not None:
            raise KafkaError(problem, ErrorCode.INVALID_CONFIG)
        records: list[MetadataRecord] = []
        for c in resource.configs:
            value = sets.get(c.name)  # None for a DELETE
            if topic.configs.get(c.name) != value:
                records.append(ConfigRecord(TOPIC_RESOURCE, topic.name, c.name, value))
        return records

    # -- producer ids (KIP-98) ---------------------------------------------------------------------

    def init_producer_id(self, request: InitProducerIdRequest) -> ControllerResult[InitProducerIdResponse]:
        """INIT_PRODUCER_ID: a new producer id at epoch 0, made durable by a ProducerIdsRecord before the
        answer. A producer that names its id gets the same id at the next epoch (Kafka's epoch bump after
        UNKNOWN_PRODUCER_ID or a timeout); at the epoch's limit it gets a new id instead."""
        committed: list[MetadataRecord] = []
        if 0 <= request.producer_id < self._image.next_producer_id and request.producer_epoch < MAX_PRODUCER_EPOCH:
            response = InitProducerIdResponse(
                producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1
            )
            return self._result(committed, response)
        producer_id = self._image.next_producer_id
        self._commit([ProducerIdsRecord(next_producer_id=producer_id + 1)], committed)
        return self._result(committed, InitProducerIdResponse(producer_id=producer_id, producer_epoch=0))

    # -- partition reassignment (KIP-455) ----------------------------------------------------------

    def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> ControllerResult[AlterPartitionReassignmentsResponse]:
        """Start (or replace, or with `replicas` None cancel) a reassignment per partition. The partition's
        replicas become target + removing, with adding = target - original and removing = original - target,
        at the same leader epoch: the added replicas start following from an empty log. Once every target
        replica is in the ISR (`_maybe_complete_reassignment`, also run after each ISR change) the replica
        set becomes the target, the leader moves if it was removed, and the removed replicas are stopped
        and deleted."""
        committed: list[MetadataRecord] = []
        answers: list[ReassignablePartitionResponse] = []
        registered = set(self._image.brokers)
        for item in request.partitions:
            answer = ReassignablePartitionResponse(item.topic, item.partition)
            answers.append(answer)
            partition = self._image.partition(item.topic, item.partition)
            if partition is None:
                answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                answer.error_message = f"unknown partition {item.topic}-{item.partition}"
                continue
            original = partition.original_replicas
            if item.replicas is None:
                if not partition.is_reassigning:
                    answer.error_code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
                    answer.error_message = f"no reassignment of {item.topic}-{item.partition} is in progress"
                    continue
                target = original  # cancel: back to where it started
            else:
                target = tuple(item.replicas)
                problem = None
                if not target or len(set(target)) != len(target) or any(r < 0 for r in target):
                    problem = f"replicas {list(target)} must be distinct broker ids, at least one"
                elif unknown := [r for r in target if r not in registered]:
                    problem = f"brokers {unknown} are not registered"
                if problem is not None:
                    answer.error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
                    answer.error_message = problem
                    continue
            adding = tuple(r for r in target if r not in original)
            removing = tuple(r for r in original if r not in target)
            full = target + removing
            if (full, adding, removing) != (partition.replicas, partition.adding_replicas, partition.removing_replicas):
                isr = in_replica_order(full, [r for r in partition.isr if r in full])
                if not isr:
                    # Every in-sync replica is one this change drops (replicas a replaced reassignment was
                    # adding, the original ones having died): as Kafka refuses a revert that would need an
                    # unclean leader election.
                    answer.error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
                    answer.error_message = (
                        f"replicas {list(full)} would leave {item.topic}-{item.partition} with no in-sync replica "
                        f"(its ISR is {list(partition.isr)}): that would need an unclean leader election"
                    )
                    continue
                dropped = not set(partition.replicas) <= set(full)
                leader: int | None = None
                if partition.leader != NO_LEADER and partition.leader not in full:
                    # The leader is a replica a replaced reassignment was adding (elected after the original
                    # leader died): as Kafka's PartitionChangeBuilder, another in-sync replica leads.
                    leader = elect_leader(full, isr, self._image.active_broker_ids(), unclean=False)
                elif dropped and partition.leader != NO_LEADER:
                    leader = partition.leader  # replicas leave the list: a leader epoch bump, as at the end (below)
                change = PartitionChangeRecord(
                    topic=item.topic,
                    partition=item.partition,
                    leader=leader,
                    replicas=full,
                    isr=isr,
                    adding_replicas=adding,
                    removing_replicas=removing,
                )
                self._commit([change], committed)
                # Replicas a replaced reassignment was adding and this one drops: stop and delete them.
                self._delete_replicas(partition.topic_partition, [b for b in partition.replicas if b not in full])
            self._maybe_complete_reassignment(partition.topic_partition, committed)
        return self._result(committed, AlterPartitionReassignmentsResponse(responses=answers))

    def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ControllerResult[ListPartitionReassignmentsResponse]:
        wanted = None if request.topics is None else set(request.topics)
        ongoing = [
            OngoingPartitionReassignment(
                p.topic, p.partition, list(p.replicas), list(p.adding_replicas), list(p.removing_replicas)
            )
            for p in self._image.partitions.values()
            if p.is_reassigning and (wanted is None or p.topic in wanted)
        ]
        ongoing.sort(key=lambda r: (r.topic, r.partition))
        return self._result([], ListPartitionReassignmentsResponse(reassignments=ongoing))

    def elect_leaders(self, request: ElectLeadersRequest) -> ControllerResult[ElectLeadersResponse]:
        """Kafka's ElectLeaders (KIP-460). PREFERRED: each partition whose first replica is active and in the
        ISR, and does not lead, gets it as leader, with a leader epoch bump; it is clean (the new leader
        holds every acknowledged record) and moves leadership back where the assignment spread it, after
        kills and restarts left it skewed. UNCLEAN: each partition with no leader gets one, from the ISR if
        a member is live, else the first live replica, whose ISR becomes itself: records only the old ISR
        held are lost, which is what the operator accepts by asking (unclean.leader.election.enable for
        one request). `topic_partitions` None means every partition; then the answer lists only the
        partitions that changed or could not, not those that needed nothing."""
        unclean = request.election_type == ELECTION_UNCLEAN
        if request.election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
            return self._result(
                [],
                ElectLeadersResponse(
                    error_code=int(ErrorCode.INVALID_REQUEST),
                    error_message=f"election_type {request.election_type}: PREFERRED (0) or UNCLEAN (1)",
                ),
            )
        every = request.topic_partitions is None
        if request.topic_partitions is None:
            wanted = sorted(self._image.partitions)
        else:
            wanted = [TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        active = self._image.active_broker_ids()
        changes: dict[TopicPartition, PartitionChangeRecord] = {}  # one per partition, however often named
        results: list[PartitionElectionResult] = []
        for tp in wanted:
            result = PartitionElectionResult(tp.topic, tp.partition)
            partition = self._image.partitions.get(tp)
            if partition is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"unknown partition {tp}"
            else:
                code, message, change = self._election(partition, unclean, active)
                if change is not None:
                    changes.setdefault(tp, change)
                if code == ErrorCode.ELECTION_NOT_NEEDED and every:
                    continue
                result.error_code, result.error_message = code, message
            results.append(result)
        committed: list[MetadataRecord] = []
        self._commit(list(changes.values()), committed)  # one metadata write for the whole request
        return self._result(committed, ElectLeadersResponse(results=results))

    def _election(
        self, partition: PartitionRegistration, unclean: bool, active: frozenset[int]
    ) -> tuple[ErrorCode, str | None, PartitionChangeRecord | None]:
        """What an ELECT_LEADERS of this type answers for `partition`, and the change to commit if any."""
        tp = partition.topic_partition
        if unclean:
            if partition.leader != NO_LEADER:
                return ErrorCode.ELECTION_NOT_NEEDED, f"broker {partition.leader} leads {tp}", None
            change = partition_change(partition, None, active, unclean=True)
            if change is None:
                return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"no replica of {tp} is live", None
            return ErrorCode.NONE, None, change
        if partition.leader == partition.replicas[0]:
            return ErrorCode.ELECTION_NOT_NEEDED, f"broker {partition.leader} already leads {tp}", None
        if (problem := self._preferred_problem(partition, active)) is not None:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, problem, None
        return (
            ErrorCode.NONE,
            None,
            PartitionChangeRecord(partition.topic, partition.partition, leader=partition.replicas[0]),
        )

    @staticmethod
    def _preferred_problem(partition: PartitionRegistration, active: frozenset[int]) -> str | None:
        """Why the partition's preferred (first) replica cannot lead it now; None when it can."""
        preferred = partition.replicas[0]
        if preferred not in active:
            return f"preferred replica {preferred} of {partition.topic_partition} is fenced or shutting down"
        if preferred not in partition.isr:
            return f"preferred replica {preferred} of {partition.topic_partition} is not in the ISR"
        return None

    def _maybe_complete_reassignment(self, tp: TopicPartition, committed: list[MetadataRecord]) -> None:
        partition = self._image.partitions.get(tp)
        if partition is None or not partition.is_reassigning:
            return
        target = partition.target_replicas
        if not set(target) <= set(partition.isr):
            return  # an added replica is still catching up
        isr = in_replica_order(target, [r for r in partition.isr if r in target])
        leader: int | None = None
        if partition.leader not in target:
            # The first live in-sync target replica; none (-1, offline until one returns) rather than a
            # fenced one, which would be named leader while it is down.
            leader = elect_leader(target, isr, self._image.active_broker_ids(), unclean=False)
        elif partition.removing_replicas:
            # As KRaft's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded: replicas leave the list, so the
            # leader epoch goes up (same leader). A removed replica's late fetches then carry an old epoch
            # and are refused, even if a later reassignment brings it back before they arrive.
            leader = partition.leader
        change = PartitionChangeRecord(
            topic=tp.topic,
            partition=tp.partition,
            leader=leader,
            isr=isr,
            replicas=target,
            adding_replicas=(),
            removing_replicas=(),
        )
        self._commit([change], committed)
        self._delete_replicas(tp, partition.removing_replicas)

    def _delete_replicas(self, tp: TopicPartition, broker_ids: Iterable[int]) -> None:
        """Have these brokers stop and delete their replica of `tp` (STOP_REPLICA with delete, sent with this
        command's result)."""
        for broker_id in broker_ids:
            self._deleted_replicas.setdefault(broker_id, []).append(tp)

    # -- ISR changes from leaders -----------------------------------------------------------------

    def alter_partition(
        self, request: AlterPartitionRequest, now_ms: int | None = None
    ) -> ControllerResult[AlterPartitionResponse]:
        """Apply ISR changes a leader asks for, after KRaft's checks (see `_alter_partition_error`)."""
        self._now(now_ms)
        committed: list[MetadataRecord] = []
        broker = self._image.brokers.get(request.broker_id)
        if broker is None:
            return self._result(
                committed,
                AlterPartitionResponse(
                    error_code=ErrorCode.BROKER_ID_NOT_REGISTERED,
                    error_message=f"broker {request.broker_id} is not registered",
                ),
            )
        if request.broker_epoch != broker.broker_epoch:
            return self._result(
                committed,
                AlterPartitionResponse(
                    error_code=ErrorCode.STALE_BROKER_EPOCH,
                    error_message=f"broker {request.broker_id} has epoch {broker.broker_epoch}, "
                    f"not {request.broker_epoch}",
                ),
            )
        items = [self._alter_one(request.broker_id, item, committed) for item in request.partitions]
        return self._result(committed, AlterPartitionResponse(partitions=items))

    def _alter_one(
        self, broker_id: int, item: AlterPartitionItem, committed: list[MetadataRecord]
    ) -> AlterPartitionItemResponse:
        partition = self._image.partition(item.topic, item.partition)
        failure = self._alter_partition_error(broker_id, item, partition)
        if failure is not None:
            code, message = failure
            return AlterPartitionItemResponse(
                topic=item.topic, partition=item.partition, error_code=code, error_message=message
            )
        assert partition is not None  # checked by _alter_partition_error
        new_isr = in_replica_order(partition.replicas, item.new_isr)
        if new_isr != partition.isr:
            change = PartitionChangeRecord(topic=item.topic, partition=item.partition, isr=new_isr)
            self._commit([change], committed)
            self._maybe_complete_reassignment(partition.topic_partition, committed)
        current = self._image.partitions[partition.topic_partition]
        return AlterPartitionItemResponse(
            topic=item.topic,
            partition=item.partition,
            leader_id=current.leader,
            leader_epoch=current.leader_epoch,
            isr=list(current.isr),
            partition_epoch=current.partition_epoch,
        )

    def _alter_partition_error(
        self, broker_id: int, item: AlterPartitionItem, partition: PartitionRegistration | None
    ) -> tuple[ErrorCode, str] | None:
        """Why an ISR change is refused, or None. Order follows KRaft's validateAlterPartitionData."""
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {item.topic}-{item.partition}"
        if item.leader_epoch != partition.leader_epoch:
            return (
                ErrorCode.FENCED_LEADER_EPOCH,
                f"leader epoch is {partition.leader_epoch}, request has {item.leader_epoch}",
            )
        if broker_id != partition.leader:
            return (
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {broker_id} is not the leader ({partition.leader})",
            )
        if item.partition_epoch != partition.partition_epoch:
            return (
                ErrorCode.INVALID_UPDATE_VERSION,
                f"partition epoch is {partition.partition_epoch}, request has {item.partition_epoch}",
            )
        if len(set(item.new_isr)) != len(item.new_isr) or partition.leader not in item.new_isr:
            return ErrorCode.INVALID_REQUEST, f"ISR {item.new_isr} must hold the leader and no duplicates"
        outsiders = [r for r in item.new_isr if r not in partition.replicas]
        if outsiders:
            return ErrorCode.INELIGIBLE_REPLICA, f"brokers {outsiders} are not replicas of this partition"
        # Only members being added must be active: one already in the ISR stays until the controller
        # itself removes it (fencing does that and bumps the partition epoch).
        active = self._image.active_broker_ids()
        ineligible = [r for r in item.new_isr if r not in partition.isr and r not in active]
        if ineligible:
            return ErrorCode.INELIGIBLE_REPLICA, f"brokers {ineligible} are fenced or shutting down"
        # KIP-903: the leader names the broker epoch each new member last fetched with. Another epoch than the
        # registered one means the fetch that made it look caught up came from an earlier incarnation (it
        # reached the leader late), whose log the broker may not have kept.
        brokers = self._image.brokers
        stale = [
            f"{m.broker_id} (epoch {m.broker_epoch}, registered {brokers[m.broker_id].broker_epoch})"
            for m in item.new_isr_with_epochs
            if m.broker_id not in partition.isr
            and m.broker_epoch != -1
            and m.broker_id in brokers
            and brokers[m.broker_id].broker_epoch != m.broker_epoch
        ]
        if stale:
            return ErrorCode.INELIGIBLE_REPLICA, f"brokers {', '.join(stale)} fetched from an earlier incarnation"
        tp = TopicPartition(partition.topic, partition.partition)
        offline = [r for r in item.new_isr if r not in partition.isr and tp in self._offline_replicas.get(r, ())]
        if offline:
            return ErrorCode.INELIGIBLE_REPLICA, f"brokers {offline} reported this replica offline"
        return None

    # -- committing -------------------------------------------------------------------------------

    def _commit(self, records: Sequence[MetadataRecord], committed: list[MetadataRecord]) -> None:
        """Make records durable (when there is a store), then replay them: the only way state changes."""
        if not records:
            return
        first_offset = self._last_offset + 1
        # A record the image would refuse must not reach the log: the command fails here, with nothing
        # changed, instead of at every later load of the log.
        self._image.check_changes(records)
        if self._store is not None:
            self._store.append(first_offset, records)
        for record in records:
            self._image.replay(record)
            if self.on_replay is not None:
                self.on_replay(record, self._image)
        self._last_offset = first_offset + len(records) - 1
        committed.extend(records)
        if self._store is not None and self._store.snapshot_due:
            self._store.write_snapshot(self._image, self._last_offset)

    def _result(self, committed: list[MetadataRecord], response: R) -> ControllerResult[R]:
        created: set[TopicPartition] = set()
        touched: dict[TopicPartition, None] = {}  # insertion-ordered set
        for record in committed:
            if isinstance(record, PartitionRecord):
                created.add(TopicPartition(record.topic, record.partition))
            if isinstance(record, PartitionRecord | PartitionChangeRecord):
                touched[TopicPartition(record.topic, record.partition)] = None
        changed = [
            self._leader_and_isr(self._image.partitions[tp], is_new=tp in created)
            for tp in touched
            if tp in self._image.partitions  # not deleted by a later record of the same command
        ]
        deleted, self._deleted_replicas = self._deleted_replicas, {}
        return ControllerResult(
            records=list(committed), response=response, changed_partitions=changed, deleted_replicas=deleted
        )

    def _now(self, now_ms: int | None) -> int:
        """The caller's clock, or ours; also starts the sessions of brokers loaded from the store."""
        now = self._time.milliseconds() if now_ms is None else now_ms
        for broker_id in self._sessions_to_start:
            self._last_contact_ms.setdefault(broker_id, now)
        self._sessions_to_start.clear()
        return now


def _same_process(existing: BrokerRegistration, request: BrokerRegistrationRequest) -> bool:
    return (
        existing.incarnation_id == request.incarnation_id
        and existing.host == request.host
        and existing.port == request.port
        and existing.rack == request.rack
    )


def _heartbeat_error(code: ErrorCode, message: str) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(
        is_caught_up=False, is_fenced=True, should_shutdown=False, error_code=code, error_message=message
    )
