"""Kafka's QuorumController: the controller's commands, each delegated to the control manager it concerns.

How this works
--------------
A command (`register_broker`, `heartbeat`, `tick`, `create_topics`, `create_partitions`,
`incremental_alter_configs`, `alter_partition`, ...) reads the metadata image, decides which records
express its effect, *commits* them (appends them to the replicated metadata log through the writer, when
there is one, then replays them into the image: metadata_log.py) and answers with a
`ControllerResult(records, response, changed_partitions)`. State changes only through replayed records,
as in Kafka's KRaft `QuorumController`; the controller is single-threaded, so the next step of a command
sees the effect of the previous one. No sockets, no event loop and no clock reads here: the controller
node (controller_node.py) passes `now_ms` in, waits for the quorum to commit a command's records before it
answers, and feeds in what other controllers committed (`replay`, `reset`). Brokers learn every change by
replaying the same committed records.

The decisions live in the control managers, which share the image through one `MetadataLog`:

    cluster_control_manager.py        registration, heartbeats, liveness and fencing, controlled shutdown
    replication_control_manager.py    leaders and ISRs: fencing's effects, ALTER_PARTITION, ELECT_LEADERS
    reassignment_control_manager.py   ALTER/LIST_PARTITION_REASSIGNMENTS (KIP-455)
    topic_control_manager.py          CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, replica placement
    configuration_control_manager.py  topic and dynamic broker configs (INCREMENTAL_ALTER_CONFIGS)
    producer_id_control_manager.py    ALLOCATE_PRODUCER_IDS (blocks of ids for the brokers)

A manager's command takes the command's `committed` list, commits into it and returns the response;
this class wraps that into the `ControllerResult`. A controller that becomes the active one calls
`activate`: every live broker gets a fresh session (cluster_control_manager.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from controller.cluster_control_manager import ClusterControlManager
from controller.configuration_control_manager import ConfigurationControlManager
from controller.controller_config import ControllerConfig
from controller.metadata_log import MetadataLog, MetadataWriter
from controller.producer_id_control_manager import ProducerIdControlManager
from controller.reassignment_control_manager import ReassignmentControlManager
from controller.replication_control_manager import ReplicationControlManager
from controller.topic_control_manager import TopicControlManager
from metadata.image import MetadataImage, PartitionRegistration
from metadata.records import (
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    UnfenceBrokerRecord,
)
from protocol.errors import ErrorCode
from protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    LeaderAndIsrPartition,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
    TopicPartition,
)
from server_common.time import Time

R = TypeVar("R")


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


# -- the controller -------------------------------------------------------------------------------


class Controller:
    """Owns the metadata image (through its `MetadataLog`) and the control managers. Single-threaded: call
    one command at a time."""

    def __init__(self, config: ControllerConfig, time: Time, writer: MetadataWriter | None = None) -> None:
        self.config = config
        self._time = time
        self._log = MetadataLog(writer)
        self._configuration = ConfigurationControlManager(config, self._log)
        self._reassignment = ReassignmentControlManager(self._log)
        self._replication = ReplicationControlManager(config, self._log, self._configuration, self._reassignment)
        self._topics = TopicControlManager(config, self._log)
        self._cluster = ClusterControlManager(config, self._log, self._replication)
        self._producer_ids = ProducerIdControlManager(self._log)

    # -- reading ----------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self._log.image

    @property
    def last_offset(self) -> int:
        """Offset of the last record replayed into the image (-1 when none)."""
        return self._log.last_offset

    # -- what the quorum committed ---------------------------------------------------------------------

    def replay(self, records: Sequence[MetadataRecord], last_offset: int) -> None:
        """Records another controller committed (this one was not active), ending at `last_offset`."""
        self._log.replay(records, last_offset)

    def skip_to(self, offset: int) -> None:
        """The quorum's own records up to `offset` (its control batches) hold nothing for the image."""
        self._log.skip_to(offset)

    def reset(self, image: MetadataImage, last_offset: int) -> None:
        """Start over from `image` as of `last_offset` (a snapshot, or the committed log after a leadership
        was lost with records not yet committed)."""
        self._log.reset(image, last_offset)
        self._cluster.deactivate()

    def activate(self) -> None:
        """This controller is now the active one: every live broker gets a fresh session."""
        self._cluster.activate()

    def deactivate(self) -> None:
        self._cluster.deactivate()

    @property
    def on_replay(self) -> Callable[[MetadataRecord, MetadataImage], None] | None:
        """Called with each record after it is replayed into the image (the simulator's checker listens)."""
        return self._log.on_replay

    @on_replay.setter
    def on_replay(self, listener: Callable[[MetadataRecord, MetadataImage], None] | None) -> None:
        self._log.on_replay = listener

    def topic_config_defaults(self) -> dict[str, str]:
        return self._configuration.topic_config_defaults()

    def topic_configs(self, topic: str) -> dict[str, str]:
        return self._configuration.topic_configs(topic)

    def leader_and_isr_for_broker(self, broker_id: int) -> list[LeaderAndIsrPartition]:
        """Full state for a broker: every partition it holds a replica of."""
        return [self._leader_and_isr(p) for p in self.image.partitions_with_replica(broker_id)]

    def _leader_and_isr(self, p: PartitionRegistration, is_new: bool = False) -> LeaderAndIsrPartition:
        topic = self.image.topics.get(p.topic)
        return p.to_leader_and_isr(is_new=is_new, topic_id=topic.topic_id if topic is not None else "")

    def metadata(self, topics: Sequence[str] | None = None) -> MetadataResponse:
        """Brokers that can serve (unfenced, or leading something) and the requested topics (None: all)."""
        names = sorted(self.image.topics) if topics is None else list(topics)
        leaders = {p.leader for p in self.image.partitions.values()}
        brokers = [
            b.endpoint()
            for b in sorted(self.image.brokers.values(), key=lambda b: b.broker_id)
            if not b.fenced or b.broker_id in leaders
        ]
        return MetadataResponse(
            brokers=brokers,
            topics=[self._topic_metadata(name) for name in names],
            controller_id=self.config.node_id,
        )

    def _topic_metadata(self, name: str) -> TopicMetadata:
        if name not in self.image.topics:
            return TopicMetadata(
                topic=name,
                partitions=[],
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message=f"unknown topic {name}",
            )
        fenced = {b.broker_id for b in self.image.brokers.values() if b.fenced}
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
                    offline_replicas=[r for r in p.replicas if r in fenced or r not in self.image.brokers],
                )
                for p in self.image.partitions_of(name)
            ],
            configs=self._configuration.topic_configs(name),
        )

    # -- broker registration and liveness (cluster_control_manager.py) -----------------------------

    def register_broker(
        self, request: BrokerRegistrationRequest, now_ms: int | None = None
    ) -> ControllerResult[BrokerRegistrationResponse]:
        now = self._now(now_ms)
        return self._run(lambda committed: self._cluster.register_broker(request, now, committed))

    def heartbeat(
        self, request: BrokerHeartbeatRequest, now_ms: int | None = None
    ) -> ControllerResult[BrokerHeartbeatResponse]:
        now = self._now(now_ms)
        return self._run(lambda committed: self._cluster.heartbeat(request, now, committed))

    def tick(self, now_ms: int | None = None) -> ControllerResult[list[int]]:
        """Fence every broker silent for more than broker.session.timeout.ms; answer their ids. With
        auto.leader.rebalance.enable, every leader.imbalance.check.interval.seconds also give each
        partition back to its preferred replica where that one can lead (as ELECT_LEADERS does)."""
        now = self._now(now_ms)
        committed: list[MetadataRecord] = []
        expired = self._cluster.fence_expired(now, committed)
        self._replication.maybe_rebalance(now, committed)
        return self._result(committed, expired)

    # -- topics (topic_control_manager.py) ---------------------------------------------------------

    def create_topics(self, request: CreateTopicsRequest) -> ControllerResult[CreateTopicsResponse]:
        return self._run(lambda committed: self._topics.create_topics(request, committed))

    def delete_topics(self, request: DeleteTopicsRequest) -> ControllerResult[DeleteTopicsResponse]:
        return self._run(lambda committed: self._topics.delete_topics(request, committed))

    def create_partitions(self, request: CreatePartitionsRequest) -> ControllerResult[CreatePartitionsResponse]:
        return self._run(lambda committed: self._topics.create_partitions(request, committed))

    # -- configs (configuration_control_manager.py) ------------------------------------------------

    def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest
    ) -> ControllerResult[IncrementalAlterConfigsResponse]:
        return self._run(lambda committed: self._configuration.incremental_alter_configs(request, committed))

    # -- producer ids (producer_id_control_manager.py) ---------------------------------------------

    def allocate_producer_ids(
        self, request: AllocateProducerIdsRequest
    ) -> ControllerResult[AllocateProducerIdsResponse]:
        return self._run(lambda committed: self._producer_ids.allocate_producer_ids(request, committed))

    # -- leaders, ISRs and reassignment (replication_ and reassignment_control_manager.py) ----------

    def alter_partition(
        self, request: AlterPartitionRequest, now_ms: int | None = None
    ) -> ControllerResult[AlterPartitionResponse]:
        self._now(now_ms)
        return self._run(lambda committed: self._replication.alter_partition(request, committed))

    def elect_leaders(self, request: ElectLeadersRequest) -> ControllerResult[ElectLeadersResponse]:
        return self._run(lambda committed: self._replication.elect_leaders(request, committed))

    def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> ControllerResult[AlterPartitionReassignmentsResponse]:
        return self._run(lambda committed: self._reassignment.alter_partition_reassignments(request, committed))

    def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ControllerResult[ListPartitionReassignmentsResponse]:
        return self._result([], self._reassignment.list_partition_reassignments(request))

    # -- committing -------------------------------------------------------------------------------

    def _commit(self, records: Sequence[MetadataRecord], committed: list[MetadataRecord]) -> None:
        self._log.commit(records, committed)

    def _run(self, command: Callable[[list[MetadataRecord]], R]) -> ControllerResult[R]:
        """Run a manager's command with a fresh `committed` list and wrap what it answers."""
        committed: list[MetadataRecord] = []
        response = command(committed)
        return self._result(committed, response)

    def _result(self, committed: list[MetadataRecord], response: R) -> ControllerResult[R]:
        created: set[TopicPartition] = set()
        touched: dict[TopicPartition, None] = {}  # insertion-ordered set
        for record in committed:
            if isinstance(record, PartitionRecord):
                created.add(TopicPartition(record.topic, record.partition))
            if isinstance(record, PartitionRecord | PartitionChangeRecord):
                touched[TopicPartition(record.topic, record.partition)] = None
        changed = [
            self._leader_and_isr(self.image.partitions[tp], is_new=tp in created)
            for tp in touched
            if tp in self.image.partitions  # not deleted by a later record of the same command
        ]
        deleted = self._log.take_deleted_replicas()
        return ControllerResult(
            records=list(committed), response=response, changed_partitions=changed, deleted_replicas=deleted
        )

    def _now(self, now_ms: int | None) -> int:
        """The caller's clock, or ours; also starts the sessions of brokers loaded from the store."""
        now = self._time.milliseconds() if now_ms is None else now_ms
        self._cluster.start_sessions(now)
        return now
