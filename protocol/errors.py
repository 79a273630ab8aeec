"""Kafka's error codes, by their published numbers, and the exceptions that carry them inside a process.

The one place that knows error codes. On the wire an error is a value (`error_code` plus an optional
`error_message`); inside a process it is a `KafkaError` subclass raised and caught at the edge.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Protocol


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_NOT_AVAILABLE = 15
    COORDINATOR_LOAD_IN_PROGRESS = 14
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    MEMBER_ID_REQUIRED = 79
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    UNKNOWN_PRODUCER_ID = 59
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    SASL_AUTHENTICATION_FAILED = 58
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    KAFKA_STORAGE_ERROR = 56
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    INVALID_RECORD = 87
    NO_REASSIGNMENT_IN_PROGRESS = 85
    INVALID_UPDATE_VERSION = 95
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE

    @property
    def description(self) -> str:
        """When a client gets this code and what it should do (docs/protocol.md's error table)."""
        return DESCRIPTIONS[self]


_RETRIABLE = frozenset(
    {
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    }
)

DESCRIPTIONS: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "an unexpected failure on the server; for PRODUCE the write may have happened",
    ErrorCode.NONE: "success",
    ErrorCode.OFFSET_OUT_OF_RANGE: "the fetch offset is outside [log start, log end]: reset with LIST_OFFSETS",
    ErrorCode.CORRUPT_MESSAGE: "a batch failed its CRC or could not be parsed; nothing of the request was appended",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "no such topic or partition here (yet): refresh METADATA and retry",
    ErrorCode.INVALID_FETCH_SIZE: "a FETCH size field is invalid",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "the coordinator is still loading its groups: retry soon",
    ErrorCode.NOT_COORDINATOR: "this broker is not (or no longer) the group's coordinator: find it again and retry",
    ErrorCode.ILLEGAL_GENERATION: "the member's generation is not the group's current one: rejoin the group",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: "the member's protocol type or protocols do not match the group's",
    ErrorCode.INVALID_GROUP_ID: "the group id is empty",
    ErrorCode.UNKNOWN_MEMBER_ID: "the group does not know this member (it left, or its session expired): rejoin",
    ErrorCode.INVALID_SESSION_TIMEOUT: "the session timeout is outside group.min/max.session.timeout.ms",
    ErrorCode.REBALANCE_IN_PROGRESS: "the group is rebalancing: rejoin (JoinGroup) to take part",
    ErrorCode.MEMBER_ID_REQUIRED: "JoinGroup v4+: join again with the member id this answer gives",
    ErrorCode.FENCED_INSTANCE_ID: "another member has joined with this group.instance.id (KIP-345): this one stops",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "FindCoordinator (Kafka listener): no group coordinator can answer now; retry",
    ErrorCode.LEADER_NOT_AVAILABLE: "the partition has no leader right now (METADATA leader_id -1): retry later",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "this broker does not lead (or hold) the partition: refresh METADATA, retry",
    ErrorCode.REQUEST_TIMED_OUT: "acks=all: the followers did not confirm in time; the write may have happened",
    ErrorCode.BROKER_NOT_AVAILABLE: "the broker is not available",
    ErrorCode.REPLICA_NOT_AVAILABLE: "the replica is not available on this broker",
    ErrorCode.MESSAGE_TOO_LARGE: "a batch is larger than message.max.bytes; nothing was appended",
    ErrorCode.STALE_CONTROLLER_EPOCH: "a controller request from an older controller epoch; ignored",
    ErrorCode.GROUP_MAX_SIZE_REACHED: (
        "JoinGroup (Kafka listener): the group already has group.max.size members (joined or waiting for their "
        "member id)"
    ),
    ErrorCode.OFFSET_METADATA_TOO_LARGE: (
        "OffsetCommit (Kafka listener): the partition's metadata is longer than offset.metadata.max.bytes; "
        "that partition's offset was not committed"
    ),
    ErrorCode.NETWORK_EXCEPTION: "the connection failed before an answer came back",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "the topic name is not valid",
    ErrorCode.RECORD_LIST_TOO_LARGE: "the records of one partition exceed the limit",
    ErrorCode.NOT_ENOUGH_REPLICAS: "acks=all and the ISR is smaller than min.insync.replicas; nothing was appended",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (
        "acks=all: appended to the leader's log, but the ISR shrank below min.insync.replicas or leadership "
        "moved before it was confirmed; the write may survive: do not assume it was lost"
    ),
    ErrorCode.INVALID_REQUIRED_ACKS: "acks is not -1, 0 or 1; nothing was appended",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: (
        "Kafka listener, DeleteRecords: deleting records needs a connection authenticated with cluster.secret "
        "(SASL/PLAIN), when the cluster has one"
    ),
    ErrorCode.GROUP_AUTHORIZATION_FAILED: (
        "Kafka listener, DeleteGroups: deleting a group needs a connection authenticated with cluster.secret "
        "(SASL/PLAIN), when the cluster has one"
    ),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "the request is for brokers only and the connection has not authenticated",
    ErrorCode.NON_EMPTY_GROUP: (
        "Kafka listener, DeleteGroups: the group has members (or an offset commit is being written); only an "
        "Empty group is deleted"
    ),
    ErrorCode.GROUP_ID_NOT_FOUND: "Kafka listener, DeleteGroups: its coordinator has no such group (or it was deleted)",
    ErrorCode.UNSUPPORTED_VERSION: "the API version is not supported (every API is at version 0)",
    ErrorCode.TOPIC_ALREADY_EXISTS: "CREATE_TOPICS: a topic of that name exists",
    ErrorCode.INVALID_PARTITIONS: (
        "CREATE_TOPICS: the partition count is not valid; CREATE_PARTITIONS: the count is not above the topic's"
    ),
    ErrorCode.INVALID_REPLICATION_FACTOR: (
        "CREATE_TOPICS, CREATE_PARTITIONS: the replication factor is larger than the live brokers"
    ),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: (
        "ALTER_PARTITION_REASSIGNMENTS: the target replicas are empty, repeated or not registered brokers, or "
        "would drop every in-sync replica"
    ),
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: "ALTER_PARTITION_REASSIGNMENTS: a cancel for a partition that is not moving",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: (
        "ELECT_LEADERS: the partition's preferred (first) replica is fenced or not in the ISR, so it cannot lead"
    ),
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "ELECT_LEADERS (unclean): no replica of the partition is live",
    ErrorCode.ELECTION_NOT_NEEDED: (
        "ELECT_LEADERS: the preferred replica already leads the partition (preferred), or it has a leader (unclean)"
    ),
    ErrorCode.INVALID_CONFIG: (
        "CREATE_TOPICS, INCREMENTAL_ALTER_CONFIGS: a config key is unknown or its value out of range; the message "
        "names it"
    ),
    ErrorCode.NOT_CONTROLLER: "the request needs the controller and this node is not it",
    ErrorCode.INVALID_REQUEST: "the request breaks the protocol's rules; the message names the field",
    ErrorCode.KAFKA_STORAGE_ERROR: "the replica's log directory failed: the partition is offline on this broker",
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND: "the fetch session is gone: open a new one (session_id 0, epoch 0)",
    ErrorCode.INVALID_FETCH_SESSION_EPOCH: "the fetch session epoch is not the next one: open a new session",
    ErrorCode.FENCED_LEADER_EPOCH: "the request's current_leader_epoch is older than the replica's: refresh METADATA",
    ErrorCode.UNKNOWN_LEADER_EPOCH: (
        "the request's current_leader_epoch is newer than the replica knows: it has not heard of the new epoch "
        "yet; retry"
    ),
    ErrorCode.STALE_BROKER_EPOCH: "a broker request with an old broker epoch (the broker re-registered since)",
    ErrorCode.OFFSET_NOT_AVAILABLE: "a new leader's HW has not reached its epoch start yet: retry LIST_OFFSETS",
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: (
        "PRODUCE (idempotent): the batch's base_sequence is not the next one the leader expects for this "
        "producer and partition (a gap); nothing was appended"
    ),
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: (
        "never on the wire here: a resent batch the leader already has is answered NONE with its original "
        "base_offset, as Kafka does"
    ),
    ErrorCode.INVALID_PRODUCER_EPOCH: (
        "PRODUCE (idempotent): the producer epoch is older than the one the leader has seen for this "
        "producer id; nothing was appended"
    ),
    ErrorCode.UNKNOWN_PRODUCER_ID: (
        "PRODUCE (idempotent): the producer id was never handed out by INIT_PRODUCER_ID (the message says so), "
        "or the leader has no state for it (its batches were truncated or deleted) and base_sequence is not 0; "
        "nothing was appended: INIT_PRODUCER_ID again"
    ),
    ErrorCode.UNSUPPORTED_SASL_MECHANISM: "Kafka listener, SaslHandshake: only PLAIN is served",
    ErrorCode.ILLEGAL_SASL_STATE: (
        "Kafka listener: a SASL request on a PLAINTEXT listener, or on one that already authenticated; on a "
        "SASL_PLAINTEXT listener, SaslAuthenticate before SaslHandshake or any other request before the "
        "connection authenticated closes the connection instead"
    ),
    ErrorCode.SASL_AUTHENTICATION_FAILED: (
        "Kafka listener, SaslAuthenticate: the PLAIN password is not cluster.secret (the connection is closed)"
    ),
    ErrorCode.INVALID_RECORD: "a batch passed its CRC but breaks the record format (the message says how)",
    ErrorCode.INVALID_UPDATE_VERSION: "ALTER_PARTITION: the partition epoch is not the current one",
    ErrorCode.INELIGIBLE_REPLICA: "ALTER_PARTITION: a proposed ISR member is fenced, shutting down, not a "
    "replica, or at another broker epoch than its registration",
    ErrorCode.NEW_LEADER_ELECTED: "ALTER_PARTITION: a new leader was elected meanwhile",
    ErrorCode.BROKER_ID_NOT_REGISTERED: "a broker request from a broker id the controller does not know",
    ErrorCode.INCONSISTENT_VOTER_SET: (
        "a quorum request (VOTE, BEGIN/END_QUORUM_EPOCH) from or about a node that is not in this voter's "
        "controller.quorum.voters: the voters' configs disagree"
    ),
    ErrorCode.SNAPSHOT_NOT_FOUND: "FETCH_SNAPSHOT: the leader has no snapshot with that end offset and epoch",
    ErrorCode.POSITION_OUT_OF_RANGE: "FETCH_SNAPSHOT: the position is past the snapshot's end",
}


class KafkaError(Exception):
    """An error that maps to one wire error code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


def _error(name: str, code: ErrorCode) -> type[KafkaError]:
    return type(name, (KafkaError,), {"code": code})


OffsetOutOfRangeError = _error("OffsetOutOfRangeError", ErrorCode.OFFSET_OUT_OF_RANGE)
CorruptRecordError = _error("CorruptRecordError", ErrorCode.CORRUPT_MESSAGE)
UnknownTopicOrPartitionError = _error("UnknownTopicOrPartitionError", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
NotLeaderOrFollowerError = _error("NotLeaderOrFollowerError", ErrorCode.NOT_LEADER_OR_FOLLOWER)
RequestTimedOutError = _error("RequestTimedOutError", ErrorCode.REQUEST_TIMED_OUT)
NotEnoughReplicasError = _error("NotEnoughReplicasError", ErrorCode.NOT_ENOUGH_REPLICAS)
FencedLeaderEpochError = _error("FencedLeaderEpochError", ErrorCode.FENCED_LEADER_EPOCH)
UnknownLeaderEpochError = _error("UnknownLeaderEpochError", ErrorCode.UNKNOWN_LEADER_EPOCH)
KafkaStorageError = _error("KafkaStorageError", ErrorCode.KAFKA_STORAGE_ERROR)
InvalidRequestError = _error("InvalidRequestError", ErrorCode.INVALID_REQUEST)
MessageTooLargeError = _error("MessageTooLargeError", ErrorCode.MESSAGE_TOO_LARGE)
OutOfOrderSequenceError = _error("OutOfOrderSequenceError", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
InvalidProducerEpochError = _error("InvalidProducerEpochError", ErrorCode.INVALID_PRODUCER_EPOCH)
UnknownProducerIdError = _error("UnknownProducerIdError", ErrorCode.UNKNOWN_PRODUCER_ID)


class InvalidRecordError(KafkaError):
    """A batch that passed its CRC but breaks the record format or a rule of the log (Kafka's
    InvalidRecordException). Raised by the leader's validator (storage/log_validator.py) and by the
    Kafka record conversion (protocol/kafka_records.py), so it lives with the wire errors."""

    code = ErrorCode.INVALID_RECORD


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append whose first offset is not the log end offset (Kafka's UnexpectedAppendOffsetException)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class ProtocolError(Exception):
    """A frame or message that does not follow docs/protocol.md. The connection that sent it is closed
    (framing) or answered with INVALID_REQUEST (a well-framed message with bad fields)."""


_BY_CODE: dict[ErrorCode, type[KafkaError]] = {
    cls.code: cls
    for cls in (
        OffsetOutOfRangeError,
        CorruptRecordError,
        UnknownTopicOrPartitionError,
        NotLeaderOrFollowerError,
        RequestTimedOutError,
        NotEnoughReplicasError,
        FencedLeaderEpochError,
        UnknownLeaderEpochError,
        KafkaStorageError,
        InvalidRequestError,
        MessageTooLargeError,
        InvalidRecordError,
    )
}


def error_for_code(code: int, message: str | None = None) -> KafkaError:
    """The exception for a wire error code: the specific subclass where one exists."""
    try:
        error_code = ErrorCode(code)
    except ValueError:
        return KafkaError(message or f"unknown error code {code}", code=ErrorCode.UNKNOWN_SERVER_ERROR)
    cls = _BY_CODE.get(error_code)
    text = message or error_code.name
    return cls(text) if cls is not None else KafkaError(text, code=error_code)


class HasError(Protocol):
    error_code: int
    error_message: str | None


class errors_into:  # noqa: N801 - used as a statement: `with errors_into(resp):`
    """Per-partition answers: a `KafkaError` raised inside the block becomes `response`'s error_code and
    error_message, and the loop over partitions goes on with the next one."""

    __slots__ = ("response",)

    def __init__(self, response: HasError) -> None:
        self.response = response

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if exc is None or not isinstance(exc, KafkaError):
            return False
        self.response.error_code = int(exc.code)
        self.response.error_message = str(exc)
        return True
