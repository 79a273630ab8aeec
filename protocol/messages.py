"""Typed messages for every API minibroker speaks, and the request/response envelopes.

Field names are the msgpack map keys on the wire (docs/protocol.md). Partitions are listed flat, each
carrying its `topic` and `partition`, rather than nested per topic: simpler for a client in any language.
Every response body starts with a top-level `error_code` / `error_message`, so a request that cannot be
decoded at all still gets a well-formed answer of the API it named.

Sentinels follow Kafka: `current_leader_epoch = -1` means "no epoch check"; `replica_id = -1` is a
consumer; LIST_OFFSETS `timestamp = -1` asks for the latest offset, `-2` for the earliest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple

from protocol.api_keys import ApiKey
from protocol.codec import Message, from_wire, require
from protocol.errors import ErrorCode, ProtocolError


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2  # Kafka's: reads from any replica (leader or follower) up to its high watermark
NO_LEADER_EPOCH = -1
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
UNDEFINED_EPOCH = -1
EPOCH_DURING_DELETE = -2  # STOP_REPLICA of a deleted topic: stop the replica whatever its leader epoch
UNDEFINED_EPOCH_OFFSET = -1
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1


def _non_negative(path: str, value: int) -> None:
    require(value >= 0, f"{path} must be >= 0, got {value}")


# -- envelope -------------------------------------------------------------------------------------


@dataclass(slots=True)
class RequestHeader(Message):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


@dataclass(slots=True)
class ResponseHeader(Message):
    correlation_id: int


@dataclass(slots=True)
class ErrorResponse(Message):
    """The body sent when a request could not be decoded into its API's schema."""

    error_code: int
    error_message: str | None = None


# -- PRODUCE (0) ----------------------------------------------------------------------------------


@dataclass(slots=True)
class ProducePartition(Message):
    topic: str
    partition: int
    records: bytes


@dataclass(slots=True)
class ProduceRequest(Message):
    acks: int
    timeout_ms: int
    partitions: list[ProducePartition]
    transactional_id: str | None = None

    def validate(self) -> None:
        require(self.acks in (-1, 0, 1), f"ProduceRequest.acks must be -1, 0 or 1, got {self.acks}")
        _non_negative("ProduceRequest.timeout_ms", self.timeout_ms)


@dataclass(slots=True)
class ProducePartitionResponse(Message):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str | None = None
    base_offset: int = -1
    log_start_offset: int = -1
    # The time the leader stamped the batches with on a LogAppendTime topic (for a duplicate an idempotent
    # producer resent, the original's); -1 for CreateTime.
    log_append_time_ms: int = -1


@dataclass(slots=True)
class ProduceResponse(Message):
    partitions: list[ProducePartitionResponse] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None
    throttle_time_ms: int = 0


# -- FETCH (1) ------------------------------------------------------------------------------------


@dataclass(slots=True)
class FetchPartition(Message):
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1
    current_leader_epoch: int = NO_LEADER_EPOCH
    # A follower's epoch of the last batch it holds (Kafka's LastFetchedEpoch, FETCH v12): the leader
    # checks it against its own epochs and answers a divergence at once (truncate on fetch). -1: not sent.
    last_fetched_epoch: int = UNDEFINED_EPOCH

    def validate(self) -> None:
        _non_negative("FetchPartition.partition_max_bytes", self.partition_max_bytes)


@dataclass(slots=True)
class ForgottenPartition(Message):
    topic: str
    partition: int


@dataclass(slots=True)
class FetchRequest(Message):
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: list[FetchPartition]
    isolation_level: int = 0
    session_id: int = INVALID_SESSION_ID
    session_epoch: int = FINAL_EPOCH
    forgotten: list[ForgottenPartition] = field(default_factory=list)
    # A follower's broker epoch (KIP-903's ReplicaState.ReplicaEpoch): the leader ignores a fetch from an
    # incarnation older than the last it heard from, and names the epoch when it proposes the follower
    # for the ISR. -1: unknown (a consumer, or a broker that has not registered).
    replica_epoch: int = -1

    def validate(self) -> None:
        _non_negative("FetchRequest.max_wait_ms", self.max_wait_ms)
        _non_negative("FetchRequest.min_bytes", self.min_bytes)
        _non_negative("FetchRequest.max_bytes", self.max_bytes)
        require(self.isolation_level in (0, 1), "FetchRequest.isolation_level must be 0 or 1")


@dataclass(slots=True)
class FetchPartitionResponse(Message):
    topic: str
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    error_message: str | None = None
    last_stable_offset: int = -1
    # The leader's log end offset when it read (not in Kafka's FETCH): lets a follower tell how long it
    # has been behind the leader's log end, which is what lag in ms means here; -1 when unknown.
    log_end_offset: int = -1
    # Kafka's DivergingEpoch {Epoch, EndOffset}: the follower's log diverges from the leader's. The epoch
    # is the leader's largest epoch <= last_fetched_epoch and the end offset where it ends; the follower
    # truncates there (as from an OffsetsForLeaderEpoch answer) and fetches on. -1: no divergence.
    diverging_epoch: int = UNDEFINED_EPOCH
    diverging_end_offset: int = UNDEFINED_EPOCH_OFFSET
    # The metadata quorum's FETCH (KIP-595): the leader as the answering node knows it (Kafka's CurrentLeader),
    # so a follower or observer that asked the wrong node, or an old epoch, goes to the right one; -1: unknown.
    current_leader_id: int = -1
    current_leader_epoch: int = -1
    # Kafka's SnapshotId (KIP-630): the fetch offset is below the leader's log start, so the fetcher must first
    # load this snapshot (FETCH_SNAPSHOT) and fetch on from its end offset. -1: no snapshot needed.
    snapshot_end_offset: int = -1
    snapshot_epoch: int = -1


@dataclass(slots=True)
class FetchResponse(Message):
    partitions: list[FetchPartitionResponse] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None
    session_id: int = INVALID_SESSION_ID
    throttle_time_ms: int = 0


# -- LIST_OFFSETS (2) -----------------------------------------------------------------------------


@dataclass(slots=True)
class ListOffsetsPartition(Message):
    topic: str
    partition: int
    timestamp: int
    current_leader_epoch: int = NO_LEADER_EPOCH

    def validate(self) -> None:
        require(
            self.timestamp in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP) or self.timestamp >= 0,
            "ListOffsetsPartition.timestamp must be -1 (latest), -2 (earliest) or a timestamp in ms (≥ 0), "
            f"got {self.timestamp}",
        )


@dataclass(slots=True)
class ListOffsetsRequest(Message):
    replica_id: int
    partitions: list[ListOffsetsPartition]
    isolation_level: int = 0


@dataclass(slots=True)
class ListOffsetsPartitionResponse(Message):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str | None = None
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = NO_LEADER_EPOCH


@dataclass(slots=True)
class ListOffsetsResponse(Message):
    partitions: list[ListOffsetsPartitionResponse] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- METADATA (3) ---------------------------------------------------------------------------------


@dataclass(slots=True)
class MetadataRequest(Message):
    topics: list[str] | None = None  # None: every topic


@dataclass(slots=True)
class BrokerEndpoint(Message):
    broker_id: int
    host: str
    port: int
    rack: str | None = None
    # The broker's other listeners by name, as it advertises them (Kafka's registration lists them all):
    # {"PLAINTEXT": "host:port"} for a Kafka listener. host and port above are its msgpack listener.
    listeners: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class PartitionMetadata(Message):
    partition: int
    leader_id: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    error_code: int = 0
    offline_replicas: list[int] = field(default_factory=list)


@dataclass(slots=True)
class TopicMetadata(Message):
    topic: str
    partitions: list[PartitionMetadata]
    error_code: int = 0
    error_message: str | None = None
    # The configs set on the topic, plus the min.insync.replicas in effect for it, so `topic describe` and
    # producers can check acks=all against it. DESCRIBE_CONFIGS lists every config with where it comes from.
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class MetadataResponse(Message):
    brokers: list[BrokerEndpoint] = field(default_factory=list)
    topics: list[TopicMetadata] = field(default_factory=list)
    controller_id: int = -1
    error_code: int = 0
    error_message: str | None = None


# -- LEADER_AND_ISR (4) ---------------------------------------------------------------------------


@dataclass(slots=True)
class LeaderAndIsrPartition(Message):
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    replicas: list[int]
    is_new: bool = False
    # The topic's id (KIP-516): a topic deleted and created again under the same name gets a new one, so a
    # broker holding a log of the old topic (it was down during the deletion) knows to discard it. "": unknown.
    topic_id: str = ""


@dataclass(slots=True)
class LeaderAndIsrRequest(Message):
    controller_id: int
    controller_epoch: int
    partitions: list[LeaderAndIsrPartition]
    live_leaders: list[BrokerEndpoint] = field(default_factory=list)
    broker_epoch: int = -1
    # Full state: the controller sends every partition this broker hosts (on registration).
    full_state: bool = False


@dataclass(slots=True)
class LeaderAndIsrPartitionResponse(Message):
    topic: str
    partition: int
    error_code: int = 0


@dataclass(slots=True)
class LeaderAndIsrResponse(Message):
    partitions: list[LeaderAndIsrPartitionResponse] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- UPDATE_METADATA (6): the controller's whole view, so any broker answers METADATA for any topic --


@dataclass(slots=True)
class UpdateMetadataRequest(Message):
    controller_id: int
    controller_epoch: int
    brokers: list[BrokerEndpoint]
    partitions: list[LeaderAndIsrPartition]
    # Configs set on each topic (CREATE_TOPICS, INCREMENTAL_ALTER_CONFIGS), and the values the controller
    # gives a topic that sets none of its own: min.insync.replicas and unclean.leader.election.enable.
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    topic_config_defaults: dict[str, str] = field(default_factory=dict)
    # Dynamic broker configs (INCREMENTAL_ALTER_CONFIGS on a broker resource): by broker id as a string,
    # "" for the cluster-wide default; a broker applies its own entry over the default.
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(slots=True)
class UpdateMetadataResponse(Message):
    error_code: int = 0
    error_message: str | None = None


# -- API_VERSIONS (18) ----------------------------------------------------------------------------


@dataclass(slots=True)
class ApiVersionsRequest(Message):
    client_software_name: str | None = None


@dataclass(slots=True)
class ApiVersionRange(Message):
    api_key: int
    min_version: int
    max_version: int


@dataclass(slots=True)
class ApiVersionsResponse(Message):
    api_keys: list[ApiVersionRange] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- CREATE_TOPICS (19) ---------------------------------------------------------------------------


@dataclass(slots=True)
class CreatableTopic(Message):
    name: str
    num_partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        require(bool(self.name), "CreatableTopic.name must not be empty")


@dataclass(slots=True)
class CreateTopicsRequest(Message):
    topics: list[CreatableTopic]
    timeout_ms: int = 30000


@dataclass(slots=True)
class CreatableTopicResult(Message):
    name: str
    error_code: int = 0
    error_message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(slots=True)
class CreateTopicsResponse(Message):
    topics: list[CreatableTopicResult] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- DELETE_TOPICS (20) ---------------------------------------------------------------------------


@dataclass(slots=True)
class DeleteTopicsRequest(Message):
    topic_names: list[str]
    timeout_ms: int = 30000


@dataclass(slots=True)
class DeletableTopicResult(Message):
    name: str
    error_code: int = 0
    error_message: str | None = None


@dataclass(slots=True)
class DeleteTopicsResponse(Message):
    responses: list[DeletableTopicResult] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- CREATE_PARTITIONS (37) -----------------------------------------------------------------------


@dataclass(slots=True)
class CreatePartitionsTopic(Message):
    name: str
    count: int  # the new total number of partitions (Kafka's Count), not how many to add


@dataclass(slots=True)
class CreatePartitionsRequest(Message):
    topics: list[CreatePartitionsTopic]
    timeout_ms: int = 30000


@dataclass(slots=True)
class CreatePartitionsTopicResult(Message):
    name: str
    error_code: int = 0
    error_message: str | None = None


@dataclass(slots=True)
class CreatePartitionsResponse(Message):
    results: list[CreatePartitionsTopicResult] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- DESCRIBE_CONFIGS (32), INCREMENTAL_ALTER_CONFIGS (44) -----------------------------------------


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type numbers. TOPIC configs can be described and altered; BROKER configs can be
    described, and the dynamic ones (the replication throttle rates) altered."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(IntEnum):
    """Where a config's value comes from (Kafka's DescribeConfigsResponse.ConfigSource, as the admin client
    names them): set on the topic, the node's own setting of the broker-level key, or Kafka's default."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class AlterConfigOp(IntEnum):
    """Kafka's AlterConfigOp.OpType numbers. APPEND and SUBTRACT apply to list configs, and no topic config
    minibroker honours is a list."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(slots=True)
class DescribeConfigsResource(Message):
    resource_type: int
    resource_name: str
    configuration_keys: list[str] | None = None  # None: every config


@dataclass(slots=True)
class DescribeConfigsRequest(Message):
    resources: list[DescribeConfigsResource]


@dataclass(slots=True)
class DescribeConfigsSynonym(Message):
    """One place the config's value could come from, in precedence order; the first one is in effect."""

    name: str
    value: str | None
    source: int


@dataclass(slots=True)
class DescribeConfigsResourceResult(Message):
    """One config of a resource (Kafka's name for it)."""

    name: str
    value: str | None = None
    read_only: bool = False
    config_source: int = 0  # ConfigSource
    is_sensitive: bool = False
    synonyms: list[DescribeConfigsSynonym] = field(default_factory=list)


@dataclass(slots=True)
class DescribeConfigsResult(Message):
    resource_type: int
    resource_name: str
    error_code: int = 0
    error_message: str | None = None
    configs: list[DescribeConfigsResourceResult] = field(default_factory=list)


@dataclass(slots=True)
class DescribeConfigsResponse(Message):
    results: list[DescribeConfigsResult] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


@dataclass(slots=True)
class AlterableConfig(Message):
    name: str
    config_operation: int  # AlterConfigOp
    value: str | None = None  # nil for DELETE


@dataclass(slots=True)
class AlterConfigsResource(Message):
    resource_type: int
    resource_name: str
    configs: list[AlterableConfig]


@dataclass(slots=True)
class IncrementalAlterConfigsRequest(Message):
    resources: list[AlterConfigsResource]
    validate_only: bool = False  # check everything, change nothing


@dataclass(slots=True)
class AlterConfigsResourceResponse(Message):
    resource_type: int
    resource_name: str
    error_code: int = 0
    error_message: str | None = None


@dataclass(slots=True)
class IncrementalAlterConfigsResponse(Message):
    responses: list[AlterConfigsResourceResponse] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- INIT_PRODUCER_ID (22) -------------------------------------------------------------------------


@dataclass(slots=True)
class InitProducerIdRequest(Message):
    """An idempotent producer's id and epoch (KIP-98). Any broker answers; it forwards to the controller,
    which allocates ids from the metadata log. Transactions are not supported: `transactional_id` must be
    nil. A producer that already has an id may pass it to get the same id with the next epoch."""

    transactional_id: str | None = None
    transaction_timeout_ms: int = 60000
    producer_id: int = -1
    producer_epoch: int = -1

    def validate(self) -> None:
        require(self.transactional_id is None, "InitProducerIdRequest.transactional_id: transactions are not supported")
        require(
            (self.producer_id == -1) == (self.producer_epoch == -1),
            "InitProducerIdRequest: producer_id and producer_epoch are both -1 or both set",
        )


@dataclass(slots=True)
class InitProducerIdResponse(Message):
    error_code: int = 0
    error_message: str | None = None
    producer_id: int = -1
    producer_epoch: int = -1


# -- ALTER_PARTITION_REASSIGNMENTS (45), LIST_PARTITION_REASSIGNMENTS (46) ---------------------------


@dataclass(slots=True)
class ReassignablePartition(Message):
    topic: str
    partition: int
    replicas: list[int] | None = None  # the target replica set, preferred leader first; None: cancel


@dataclass(slots=True)
class AlterPartitionReassignmentsRequest(Message):
    partitions: list[ReassignablePartition]
    timeout_ms: int = 30000


@dataclass(slots=True)
class ReassignablePartitionResponse(Message):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str | None = None


@dataclass(slots=True)
class AlterPartitionReassignmentsResponse(Message):
    responses: list[ReassignablePartitionResponse] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


@dataclass(slots=True)
class ListPartitionReassignmentsRequest(Message):
    topics: list[str] | None = None  # None: every topic
    timeout_ms: int = 30000


@dataclass(slots=True)
class OngoingPartitionReassignment(Message):
    topic: str
    partition: int
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


@dataclass(slots=True)
class ListPartitionReassignmentsResponse(Message):
    reassignments: list[OngoingPartitionReassignment] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- ELECT_LEADERS (43) ----------------------------------------------------------------------------

#: ELECT_LEADERS election_type values (Kafka's ElectionType).
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1


@dataclass(slots=True)
class ElectionTopic(Message):
    topic: str
    partitions: list[int]


@dataclass(slots=True)
class ElectLeadersRequest(Message):
    election_type: int = ELECTION_PREFERRED
    topic_partitions: list[ElectionTopic] | None = None  # None: every partition of every topic
    timeout_ms: int = 30000


@dataclass(slots=True)
class PartitionElectionResult(Message):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str | None = None


@dataclass(slots=True)
class ElectLeadersResponse(Message):
    results: list[PartitionElectionResult] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- STOP_REPLICA (5) -----------------------------------------------------------------------------


@dataclass(slots=True)
class StopReplicaPartition(Message):
    topic: str
    partition: int
    leader_epoch: int = -1  # EPOCH_DURING_DELETE when the topic is deleted: stop whatever the epoch
    delete_partition: bool = False


@dataclass(slots=True)
class StopReplicaRequest(Message):
    controller_id: int
    controller_epoch: int
    partitions: list[StopReplicaPartition]


@dataclass(slots=True)
class StopReplicaPartitionError(Message):
    topic: str
    partition: int
    error_code: int = 0


@dataclass(slots=True)
class StopReplicaResponse(Message):
    partitions: list[StopReplicaPartitionError] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- DELETE_RECORDS (21) --------------------------------------------------------------------------


@dataclass(slots=True)
class DeleteRecordsPartition(Message):
    topic: str
    partition: int
    offset: int  # -1: up to the high watermark


@dataclass(slots=True)
class DeleteRecordsRequest(Message):
    partitions: list[DeleteRecordsPartition]
    timeout_ms: int = 30000


@dataclass(slots=True)
class DeleteRecordsPartitionResponse(Message):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str | None = None
    low_watermark: int = -1


@dataclass(slots=True)
class DeleteRecordsResponse(Message):
    partitions: list[DeleteRecordsPartitionResponse] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- OFFSET_FOR_LEADER_EPOCH (23) -----------------------------------------------------------------


@dataclass(slots=True)
class OffsetForLeaderEpochPartition(Message):
    topic: str
    partition: int
    leader_epoch: int
    current_leader_epoch: int = NO_LEADER_EPOCH


@dataclass(slots=True)
class OffsetForLeaderEpochRequest(Message):
    partitions: list[OffsetForLeaderEpochPartition]
    replica_id: int = CONSUMER_REPLICA_ID


@dataclass(slots=True)
class EpochEndOffset(Message):
    topic: str
    partition: int
    error_code: int = 0
    leader_epoch: int = UNDEFINED_EPOCH
    end_offset: int = UNDEFINED_EPOCH_OFFSET
    error_message: str | None = None


@dataclass(slots=True)
class OffsetForLeaderEpochResponse(Message):
    partitions: list[EpochEndOffset] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- DESCRIBE_LOG_DIRS (35): every replica this broker hosts, with its offsets -------------------


@dataclass(slots=True)
class DescribeLogDirsRequest(Message):
    topics: list[str] | None = None  # None: every topic


@dataclass(slots=True)
class ReplicaLogInfo(Message):
    topic: str
    partition: int
    size_bytes: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader_id: int
    leader_epoch: int
    is_leader: bool
    isr: list[int] = field(default_factory=list)
    latest_epoch: int = -1


@dataclass(slots=True)
class DescribeLogDirsResponse(Message):
    log_dir: str = ""
    replicas: list[ReplicaLogInfo] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- SASL_AUTHENTICATE (36): presenting the cluster secret ---------------------------------------


@dataclass(slots=True)
class SaslAuthenticateRequest(Message):
    auth_bytes: bytes


@dataclass(slots=True)
class SaslAuthenticateResponse(Message):
    error_code: int = 0
    error_message: str | None = None


# -- ALTER_PARTITION (56) -------------------------------------------------------------------------


@dataclass(slots=True)
class IsrMember(Message):
    """An ISR member and the broker epoch its leader last heard it fetch with (-1: unknown)."""

    broker_id: int
    broker_epoch: int = -1


@dataclass(slots=True)
class AlterPartitionItem(Message):
    topic: str
    partition: int
    leader_epoch: int
    new_isr: list[int]
    partition_epoch: int
    # KIP-903's NewIsrWithEpochs: the controller refuses to add a member whose epoch is not the one it has
    # registered (a fetch from an earlier incarnation reached the leader late). Empty: no epochs known.
    new_isr_with_epochs: list[IsrMember] = field(default_factory=list)


@dataclass(slots=True)
class AlterPartitionRequest(Message):
    broker_id: int
    broker_epoch: int
    partitions: list[AlterPartitionItem]


@dataclass(slots=True)
class AlterPartitionItemResponse(Message):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    partition_epoch: int = -1


@dataclass(slots=True)
class AlterPartitionResponse(Message):
    partitions: list[AlterPartitionItemResponse] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None


# -- BROKER_REGISTRATION (62) / BROKER_HEARTBEAT (63) ---------------------------------------------


@dataclass(slots=True)
class BrokerRegistrationRequest(Message):
    broker_id: int
    host: str
    port: int
    incarnation_id: str
    rack: str | None = None
    listeners: dict[str, str] = field(default_factory=dict)  # Kafka listeners: name -> advertised host:port

    def validate(self) -> None:
        _non_negative("BrokerRegistrationRequest.broker_id", self.broker_id)
        require(0 < self.port < 65536, f"BrokerRegistrationRequest.port out of range: {self.port}")


@dataclass(slots=True)
class BrokerRegistrationResponse(Message):
    broker_epoch: int = -1
    error_code: int = 0
    error_message: str | None = None


@dataclass(slots=True)
class BrokerHeartbeatRequest(Message):
    broker_id: int
    broker_epoch: int
    want_fence: bool = False
    want_shutdown: bool = False
    current_metadata_offset: int = -1
    # Replicas this broker cannot serve (corruption found, disk errors): the controller takes it out of
    # their ISRs and moves their leaderships (KIP-858 reports offline log dirs the same way).
    offline_replicas: list[OfflineReplica] = field(default_factory=list)


@dataclass(slots=True)
class OfflineReplica(Message):
    topic: str
    partition: int


@dataclass(slots=True)
class BrokerHeartbeatResponse(Message):
    is_caught_up: bool = True
    is_fenced: bool = False
    should_shutdown: bool = False
    error_code: int = 0
    error_message: str | None = None
    # Every producer id below this was handed out by INIT_PRODUCER_ID (broker/producer_id_manager.py).
    next_producer_id: int = -1


# -- the metadata quorum (KIP-595): VOTE (52), BEGIN_QUORUM_EPOCH (53), END_QUORUM_EPOCH (54), -------
# -- DESCRIBE_QUORUM (55), FETCH_SNAPSHOT (59). The quorum replicates one partition, __cluster_metadata-0,
# -- so unlike Kafka's these name no topic or partition. FETCH (1) names the partition as usual.


@dataclass(slots=True)
class VoteRequest(Message):
    """A candidate asks a voter for its vote in `candidate_epoch`. With `pre_vote` (KIP-996) it only asks
    whether it would get it: the voter changes no state, and the candidate bumps its epoch only after a
    majority said yes, so a node cut off from the quorum cannot force an election when it returns."""

    candidate_id: int
    candidate_epoch: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False

    def validate(self) -> None:
        _non_negative("VoteRequest.candidate_id", self.candidate_id)
        _non_negative("VoteRequest.candidate_epoch", self.candidate_epoch)
        _non_negative("VoteRequest.last_offset", self.last_offset)


@dataclass(slots=True)
class VoteResponse(Message):
    error_code: int = 0
    error_message: str | None = None
    leader_id: int = -1  # the leader the voter knows in leader_epoch, -1 if none
    leader_epoch: int = -1
    vote_granted: bool = False


@dataclass(slots=True)
class BeginQuorumEpochRequest(Message):
    """The newly elected leader tells a voter: I lead `leader_epoch`."""

    leader_id: int
    leader_epoch: int

    def validate(self) -> None:
        _non_negative("BeginQuorumEpochRequest.leader_id", self.leader_id)
        _non_negative("BeginQuorumEpochRequest.leader_epoch", self.leader_epoch)


@dataclass(slots=True)
class BeginQuorumEpochResponse(Message):
    error_code: int = 0
    error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1


@dataclass(slots=True)
class EndQuorumEpochRequest(Message):
    """A leader resigns `leader_epoch` (a graceful shutdown, or it lost its quorum). `preferred_successors`:
    the other voters, most caught up first; the first starts an election at once, the others after a
    growing backoff, so the best candidate usually wins the first round."""

    leader_id: int
    leader_epoch: int
    preferred_successors: list[int] = field(default_factory=list)

    def validate(self) -> None:
        _non_negative("EndQuorumEpochRequest.leader_id", self.leader_id)
        _non_negative("EndQuorumEpochRequest.leader_epoch", self.leader_epoch)


@dataclass(slots=True)
class EndQuorumEpochResponse(Message):
    error_code: int = 0
    error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1


@dataclass(slots=True)
class DescribeQuorumRequest(Message):
    """Any controller answers with what it knows; only the leader knows every replica's progress."""


@dataclass(slots=True)
class QuorumReplicaState(Message):
    replica_id: int
    log_end_offset: int = -1
    last_fetch_timestamp: int = -1  # ms since the epoch the leader last heard a FETCH from it; -1: never
    last_caught_up_timestamp: int = -1  # the last time its fetch reached the leader's log end


@dataclass(slots=True)
class DescribeQuorumResponse(Message):
    error_code: int = 0
    error_message: str | None = None
    leader_id: int = -1
    leader_epoch: int = -1
    high_watermark: int = -1
    current_voters: list[QuorumReplicaState] = field(default_factory=list)
    observers: list[QuorumReplicaState] = field(default_factory=list)
    # Beyond Kafka's answer: who answered and in what role (leader, follower, candidate, ...), so a tool
    # asking every voter can tell a voter that lost touch from one that follows.
    node_id: int = -1
    state: str = ""


@dataclass(slots=True)
class FetchSnapshotRequest(Message):
    replica_id: int
    current_leader_epoch: int
    snapshot_end_offset: int
    snapshot_epoch: int
    position: int
    max_bytes: int = 1 << 20

    def validate(self) -> None:
        _non_negative("FetchSnapshotRequest.position", self.position)
        _non_negative("FetchSnapshotRequest.max_bytes", self.max_bytes)


@dataclass(slots=True)
class FetchSnapshotResponse(Message):
    error_code: int = 0
    error_message: str | None = None
    current_leader_id: int = -1
    current_leader_epoch: int = -1
    snapshot_end_offset: int = -1
    snapshot_epoch: int = -1
    size: int = -1  # the snapshot's whole size in bytes
    position: int = -1  # where `unaligned_records` starts in it
    unaligned_records: bytes = b""


# -- ALLOCATE_PRODUCER_IDS (67): a broker reserves a block of producer ids (KIP-730) ---------------


@dataclass(slots=True)
class AllocateProducerIdsRequest(Message):
    broker_id: int
    broker_epoch: int


@dataclass(slots=True)
class AllocateProducerIdsResponse(Message):
    error_code: int = 0
    error_message: str | None = None
    producer_id_start: int = -1
    producer_id_len: int = 0


# -- registry -------------------------------------------------------------------------------------

REQUEST_TYPES: dict[ApiKey, type[Message]] = {
    ApiKey.PRODUCE: ProduceRequest,
    ApiKey.FETCH: FetchRequest,
    ApiKey.LIST_OFFSETS: ListOffsetsRequest,
    ApiKey.METADATA: MetadataRequest,
    ApiKey.LEADER_AND_ISR: LeaderAndIsrRequest,
    ApiKey.UPDATE_METADATA: UpdateMetadataRequest,
    ApiKey.API_VERSIONS: ApiVersionsRequest,
    ApiKey.CREATE_TOPICS: CreateTopicsRequest,
    ApiKey.DELETE_TOPICS: DeleteTopicsRequest,
    ApiKey.CREATE_PARTITIONS: CreatePartitionsRequest,
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsRequest,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsRequest,
    ApiKey.STOP_REPLICA: StopReplicaRequest,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: AlterPartitionReassignmentsRequest,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ListPartitionReassignmentsRequest,
    ApiKey.ELECT_LEADERS: ElectLeadersRequest,
    ApiKey.DELETE_RECORDS: DeleteRecordsRequest,
    ApiKey.INIT_PRODUCER_ID: InitProducerIdRequest,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochRequest,
    ApiKey.DESCRIBE_LOG_DIRS: DescribeLogDirsRequest,
    ApiKey.SASL_AUTHENTICATE: SaslAuthenticateRequest,
    ApiKey.ALTER_PARTITION: AlterPartitionRequest,
    ApiKey.BROKER_REGISTRATION: BrokerRegistrationRequest,
    ApiKey.BROKER_HEARTBEAT: BrokerHeartbeatRequest,
    ApiKey.VOTE: VoteRequest,
    ApiKey.BEGIN_QUORUM_EPOCH: BeginQuorumEpochRequest,
    ApiKey.END_QUORUM_EPOCH: EndQuorumEpochRequest,
    ApiKey.DESCRIBE_QUORUM: DescribeQuorumRequest,
    ApiKey.FETCH_SNAPSHOT: FetchSnapshotRequest,
    ApiKey.ALLOCATE_PRODUCER_IDS: AllocateProducerIdsRequest,
}

RESPONSE_TYPES: dict[ApiKey, type[Message]] = {
    ApiKey.PRODUCE: ProduceResponse,
    ApiKey.FETCH: FetchResponse,
    ApiKey.LIST_OFFSETS: ListOffsetsResponse,
    ApiKey.METADATA: MetadataResponse,
    ApiKey.LEADER_AND_ISR: LeaderAndIsrResponse,
    ApiKey.UPDATE_METADATA: UpdateMetadataResponse,
    ApiKey.API_VERSIONS: ApiVersionsResponse,
    ApiKey.CREATE_TOPICS: CreateTopicsResponse,
    ApiKey.DELETE_TOPICS: DeleteTopicsResponse,
    ApiKey.CREATE_PARTITIONS: CreatePartitionsResponse,
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsResponse,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsResponse,
    ApiKey.STOP_REPLICA: StopReplicaResponse,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: AlterPartitionReassignmentsResponse,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ListPartitionReassignmentsResponse,
    ApiKey.ELECT_LEADERS: ElectLeadersResponse,
    ApiKey.DELETE_RECORDS: DeleteRecordsResponse,
    ApiKey.INIT_PRODUCER_ID: InitProducerIdResponse,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochResponse,
    ApiKey.DESCRIBE_LOG_DIRS: DescribeLogDirsResponse,
    ApiKey.SASL_AUTHENTICATE: SaslAuthenticateResponse,
    ApiKey.ALTER_PARTITION: AlterPartitionResponse,
    ApiKey.BROKER_REGISTRATION: BrokerRegistrationResponse,
    ApiKey.BROKER_HEARTBEAT: BrokerHeartbeatResponse,
    ApiKey.VOTE: VoteResponse,
    ApiKey.BEGIN_QUORUM_EPOCH: BeginQuorumEpochResponse,
    ApiKey.END_QUORUM_EPOCH: EndQuorumEpochResponse,
    ApiKey.DESCRIBE_QUORUM: DescribeQuorumResponse,
    ApiKey.FETCH_SNAPSHOT: FetchSnapshotResponse,
    ApiKey.ALLOCATE_PRODUCER_IDS: AllocateProducerIdsResponse,
}

SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {key: (0, 0) for key in REQUEST_TYPES}
SUPPORTED_VERSIONS[ApiKey.FETCH] = (0, 1)  # version 1: the records follow the msgpack (protocol/fetch_frame.py)


class RequestDecodeError(ProtocolError):
    """A request whose header was readable but whose body was not: answer it, keep the connection."""

    def __init__(self, header: RequestHeader, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.header = header
        self.code = code


def decode_request_value(value: Any) -> tuple[RequestHeader, Message]:
    """Split a decoded frame into header and typed body.

    Raises ProtocolError when even the header is unusable (the connection is closed), and
    RequestDecodeError when the header is fine but the API, version or body is not (answered).
    """
    if type(value) is not list or len(value) != 2:
        raise ProtocolError("a request is a 2-element array [header, body]")
    header = from_wire(RequestHeader, value[0])
    try:
        api_key = ApiKey(header.api_key)
    except ValueError:
        raise RequestDecodeError(header, ErrorCode.INVALID_REQUEST, f"unknown api key {header.api_key}") from None
    low, high = SUPPORTED_VERSIONS[api_key]
    if not low <= header.api_version <= high:
        raise RequestDecodeError(
            header,
            ErrorCode.UNSUPPORTED_VERSION,
            f"{api_key.name} version {header.api_version} is not supported (supported: {low}..{high})",
        )
    try:
        body = from_wire(REQUEST_TYPES[api_key], value[1])
    except ProtocolError as exc:
        raise RequestDecodeError(header, ErrorCode.INVALID_REQUEST, str(exc)) from None
    return header, body


def api_key_of(body: Message) -> ApiKey:
    return _KEY_OF_REQUEST[type(body)]


_KEY_OF_REQUEST = {cls: key for key, cls in REQUEST_TYPES.items()}
