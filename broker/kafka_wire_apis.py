"""The request handlers of the Kafka listener: Kafka's messages in, the broker's own handlers, Kafka's out.

How this works
--------------
Every request that arrives on a Kafka listener (network/kafka_wire.py decodes it with Kafka's schemas)
is translated into the broker's own message (protocol/messages.py) and handed to the same `KafkaApis`
method the msgpack listener calls: one PRODUCE path, one FETCH path with its purgatory and fetch
sessions, one METADATA view. The answer is translated back into the response of the version asked for.
Nothing about replication, offsets, epochs or idempotence is decided here.

The one real translation is of records. Kafka clients send v2 batches whose records are Kafka's varint
records, often compressed; the log stores the same 61-byte batch header with a msgpack records payload
(protocol/record_batch.py). A PRODUCE's batches are converted before the append (header fields kept,
records decompressed and re-encoded, CRC recomputed) and a FETCH's batches after the read
(protocol/kafka_records.py); producer ids, epochs, sequences, offsets, timestamps, keys, values and
headers go through unchanged, so a record written by a Kafka client reads the same through
`minibroker consume` and the other way round.

Each broker registers every listener it advertises; METADATA on a Kafka listener names each broker by
its endpoint on the listener of the same name, as Kafka does, and leaves out brokers that have none.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka.protocol.admin import DescribeQuorumRequest as KDescribeQuorumRequest
from kafka.protocol.admin import DescribeQuorumResponse as KDescribeQuorumResponse
from kafka.protocol.admin.configs import AlterConfigsRequest as KAlterConfigsRequest
from kafka.protocol.admin.configs import AlterConfigsResponse as KAlterConfigsResponse
from kafka.protocol.admin.configs import (
    DescribeConfigsRequest as KDescribeConfigsRequest,
)
from kafka.protocol.admin.configs import (
    DescribeConfigsResponse as KDescribeConfigsResponse,
)
from kafka.protocol.admin.configs import IncrementalAlterConfigsRequest as KIncrementalAlterConfigsRequest
from kafka.protocol.admin.configs import IncrementalAlterConfigsResponse as KIncrementalAlterConfigsResponse
from kafka.protocol.admin.groups import DeleteGroupsRequest as KDeleteGroupsRequest
from kafka.protocol.admin.groups import DeleteGroupsResponse as KDeleteGroupsResponse
from kafka.protocol.admin.groups import DescribeGroupsRequest as KDescribeGroupsRequest
from kafka.protocol.admin.groups import DescribeGroupsResponse as KDescribeGroupsResponse
from kafka.protocol.admin.groups import ListGroupsRequest as KListGroupsRequest
from kafka.protocol.admin.groups import ListGroupsResponse as KListGroupsResponse
from kafka.protocol.admin.topics import (
    CreatePartitionsRequest as KCreatePartitionsRequest,
)
from kafka.protocol.admin.topics import (
    CreatePartitionsResponse as KCreatePartitionsResponse,
)
from kafka.protocol.admin.topics import (
    CreateTopicsRequest as KCreateTopicsRequest,
)
from kafka.protocol.admin.topics import (
    CreateTopicsResponse as KCreateTopicsResponse,
)
from kafka.protocol.admin.topics import DeleteRecordsRequest as KDeleteRecordsRequest
from kafka.protocol.admin.topics import DeleteRecordsResponse as KDeleteRecordsResponse
from kafka.protocol.admin.topics import (
    DeleteTopicsRequest as KDeleteTopicsRequest,
)
from kafka.protocol.admin.topics import (
    DeleteTopicsResponse as KDeleteTopicsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchRequest as KFetchRequest
from kafka.protocol.consumer.fetch import FetchResponse as KFetchResponse
from kafka.protocol.consumer.group import HeartbeatRequest as KHeartbeatRequest
from kafka.protocol.consumer.group import HeartbeatResponse as KHeartbeatResponse
from kafka.protocol.consumer.group import JoinGroupRequest as KJoinGroupRequest
from kafka.protocol.consumer.group import JoinGroupResponse as KJoinGroupResponse
from kafka.protocol.consumer.group import LeaveGroupRequest as KLeaveGroupRequest
from kafka.protocol.consumer.group import LeaveGroupResponse as KLeaveGroupResponse
from kafka.protocol.consumer.group import OffsetCommitRequest as KOffsetCommitRequest
from kafka.protocol.consumer.group import OffsetCommitResponse as KOffsetCommitResponse
from kafka.protocol.consumer.group import OffsetFetchRequest as KOffsetFetchRequest
from kafka.protocol.consumer.group import OffsetFetchResponse as KOffsetFetchResponse
from kafka.protocol.consumer.group import SyncGroupRequest as KSyncGroupRequest
from kafka.protocol.consumer.group import SyncGroupResponse as KSyncGroupResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest as KListOffsetsRequest
from kafka.protocol.consumer.offsets import ListOffsetsResponse as KListOffsetsResponse
from kafka.protocol.consumer.offsets import OffsetForLeaderEpochRequest as KOffsetForLeaderEpochRequest
from kafka.protocol.consumer.offsets import OffsetForLeaderEpochResponse as KOffsetForLeaderEpochResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as KApiVersionsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsResponse as KApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest as KFindCoordinatorRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorResponse as KFindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataRequest as KMetadataRequest
from kafka.protocol.metadata.metadata import MetadataResponse as KMetadataResponse
from kafka.protocol.producer.produce import ProduceRequest as KProduceRequest
from kafka.protocol.producer.produce import ProduceResponse as KProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest as KInitProducerIdRequest
from kafka.protocol.producer.transaction import InitProducerIdResponse as KInitProducerIdResponse
from kafka.protocol.sasl import SaslAuthenticateRequest as KSaslAuthenticateRequest
from kafka.protocol.sasl import SaslAuthenticateResponse as KSaslAuthenticateResponse
from kafka.protocol.sasl import SaslHandshakeRequest as KSaslHandshakeRequest
from kafka.protocol.sasl import SaslHandshakeResponse as KSaslHandshakeResponse

from broker.kafka_apis import KafkaApis
from group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from network.kafka_wire import UnsupportedApiVersions, served_versions
from network.listeners import split_host_port
from network.loop_budget import loop_budget
from network.request_context import FAILED_AUTHENTICATION_DELAY_S, ConnectionContext, check_secret
from protocol.errors import ErrorCode, KafkaError
from protocol.kafka_records import iter_kafka_to_native, iter_native_to_kafka
from protocol.messages import (
    CONSUMER_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    ConfigResourceType,
    ConfigSource,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsPartition,
    DeleteRecordsPartitionResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EpochEndOffset,
    ErrorResponse,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    ForgottenPartition,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetForLeaderEpochPartition,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProducePartition,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    QuorumReplicaState,
    RequestHeader,
    TopicPartition,
)

log = logging.getLogger(__name__)

# Requests the listener makes on its own behalf (creating __consumer_offsets) are the broker's, not a client's.
INTERNAL_CONTEXT = ConnectionContext(-1, "kafka-listener", authenticated=True)

NO_DIRECTORY_ID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: the replica's log directory is not told
CONTROLLER_LISTENER = "CONTROLLER"  # the controllers' listener name in DescribeQuorum v2's Nodes, as Kafka's
_NO_VALIDATE_ONLY = "validate_only is not supported by minibroker: the controller validates as it creates"
_LOWEST_PRODUCE_VERSION = 3  # record batch v2; Kafka 4 refuses v0-2 too (KIP-896)


def _request_error(ours: object) -> tuple[int, str | None]:
    """The error every entry of an answer gets when the broker's handler refused the request whole
    (an ErrorResponse), or answered something this translation did not expect."""
    if isinstance(ours, ErrorResponse):
        return ours.error_code, ours.error_message
    return int(ErrorCode.UNKNOWN_SERVER_ERROR), None


#: What a SASL_PLAINTEXT connection may send before it authenticated.
SASL_OPEN: frozenset[type] = frozenset({KApiVersionsRequest, KSaslHandshakeRequest, KSaslAuthenticateRequest})


def _alter_configs_answer(K: Any, version: int, resources: list[AlterConfigsResource], ours: object) -> ApiMessage:
    """The Kafka answer (AlterConfigs or IncrementalAlterConfigs: the same layout) to the broker's
    IncrementalAlterConfigs answer `ours`, one entry per resource in the request's order."""
    answers = {}
    if isinstance(ours, IncrementalAlterConfigsResponse):
        answers = {(a.resource_type, a.resource_name): a for a in ours.responses}
    error, message = _request_error(ours)
    return K[version](
        throttle_time_ms=0,
        responses=[
            K.AlterConfigsResourceResponse(
                error_code=a.error_code if (a := answers.get((r.resource_type, r.resource_name))) else error,
                error_message=a.error_message if a else message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r in resources
        ],
    )


def _by_topic(items: Iterable[Any], topic: Callable[[Any], str]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = defaultdict(list)
    for item in items:
        grouped[topic(item)].append(item)
    return grouped


class KafkaWireApis:
    """Handler of a Kafka listener named `listener_name`; `apis` is the broker's `KafkaApis`."""

    def __init__(
        self,
        apis: KafkaApis,
        listener_name: str,
        coordinator: GroupCoordinator | None = None,
        offsets_topic_replication_factor: int = 3,
        cluster_id: str = "minibroker",
        auto_create_topics: bool = False,
        sasl_password: str | None = None,
        quorum_voters: Mapping[int, tuple[str, int]] | None = None,
    ) -> None:
        self.auto_create_topics = auto_create_topics
        #: controller.quorum.voters (id -> host, port): DescribeQuorum v2's Nodes.
        self.quorum_voters = dict(quorum_voters or {})
        #: A SASL_PLAINTEXT listener's PLAIN password (cluster.secret); None on a PLAINTEXT listener.
        self.sasl_password = sasl_password
        self.apis = apis
        self.listener_name = listener_name
        self.coordinator = coordinator
        self.offsets_topic_replication_factor = offsets_topic_replication_factor
        self.cluster_id = cluster_id
        self._handlers: dict[type[ApiMessage], Callable[[ConnectionContext, Any], Any]] = {
            KApiVersionsRequest: self.api_versions,
            KMetadataRequest: self.metadata,
            KProduceRequest: self.produce,
            KFetchRequest: self.fetch,
            KListOffsetsRequest: self.list_offsets,
            KOffsetForLeaderEpochRequest: self.offset_for_leader_epoch,
            KInitProducerIdRequest: self.init_producer_id,
            KFindCoordinatorRequest: self.find_coordinator,
            KCreateTopicsRequest: self.create_topics,
            KDeleteTopicsRequest: self.delete_topics,
            KCreatePartitionsRequest: self.create_partitions,
            KDescribeConfigsRequest: self.describe_configs,
            KIncrementalAlterConfigsRequest: self.incremental_alter_configs,
            KSaslHandshakeRequest: self.sasl_handshake,
            KSaslAuthenticateRequest: self.sasl_authenticate,
            KAlterConfigsRequest: self.alter_configs,
            KJoinGroupRequest: self.join_group,
            KSyncGroupRequest: self.sync_group,
            KHeartbeatRequest: self.heartbeat,
            KLeaveGroupRequest: self.leave_group,
            KOffsetCommitRequest: self.offset_commit,
            KOffsetFetchRequest: self.offset_fetch,
            KListGroupsRequest: self.list_groups,
            KDescribeGroupsRequest: self.describe_groups,
            KDeleteGroupsRequest: self.delete_groups,
            KDescribeQuorumRequest: self.describe_quorum,
            KDeleteRecordsRequest: self.delete_records,
        }

    async def handle(
        self, ctx: ConnectionContext, header: RequestHeader, request: Any
    ) -> ApiMessage | ErrorResponse | None:
        if isinstance(request, UnsupportedApiVersions):
            return self._api_versions_answer(0, int(ErrorCode.UNSUPPORTED_VERSION))
        ctx.attributes["client_id"] = header.client_id
        if self.sasl_password is not None and not ctx.authenticated and type(request)[None] not in SASL_OPEN:
            log.info("closing %s: %s before SASL authentication", ctx.peer, type(request).__name__)
            return ErrorResponse(int(ErrorCode.ILLEGAL_SASL_STATE), f"{type(request).__name__} before SASL")
        handler = self._handlers.get(type(request)[None])
        if handler is None:  # served in network/kafka_wire.py but not here: a bug, closes the connection
            raise KafkaError(f"no handler for {type(request).__name__}")
        try:
            response: ApiMessage | None = await handler(ctx, request)
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            # kafka-python decodes a null where the schema allows none (a string of length -1) as None; the
            # request is malformed, and Kafka closes the connection on a malformed request.
            log.warning("closing %s: malformed %s: %s: %s", ctx.peer, type(request).__name__, type(exc).__name__, exc)
            return ErrorResponse(int(ErrorCode.INVALID_REQUEST), f"malformed {type(request).__name__}")
        return response

    # -- ApiVersions (18), Metadata (3) ---------------------------------------------------------------

    def _api_versions_answer(self, version: int, error_code: int = 0) -> ApiMessage:
        K = KApiVersionsResponse
        return K[version](
            error_code=error_code,
            api_keys=[K.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in served_versions()],
            throttle_time_ms=0,
        )

    # -- SaslHandshake (17), SaslAuthenticate (36): SASL/PLAIN on a SASL_PLAINTEXT listener -----------------

    async def sasl_handshake(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        K = KSaslHandshakeResponse
        if self.sasl_password is None or ctx.attributes.get("sasl") is not None or ctx.authenticated:
            return K[request.API_VERSION](error_code=int(ErrorCode.ILLEGAL_SASL_STATE), mechanisms=[])
        if request.API_VERSION == 0:  # raw SASL tokens would follow: clients with v1 use SaslAuthenticate
            return K[0](error_code=int(ErrorCode.UNSUPPORTED_VERSION), mechanisms=["PLAIN"])
        if request.mechanism != "PLAIN":
            return K[request.API_VERSION](error_code=int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), mechanisms=["PLAIN"])
        ctx.attributes["sasl"] = "PLAIN"
        return K[request.API_VERSION](error_code=0, mechanisms=["PLAIN"])

    async def sasl_authenticate(self, ctx: ConnectionContext, request: Any) -> ApiMessage | ErrorResponse:
        """PLAIN (RFC 4616): `authzid NUL user NUL password`; the password must be cluster.secret, and the
        connection is then authenticated as a CLI's msgpack connection with the secret is (admin requests
        included). A failure is answered, then the connection is closed, as Kafka does."""
        K = KSaslAuthenticateResponse

        def answer(code: ErrorCode, message: str | None) -> ApiMessage:
            fields: dict[str, Any] = {"error_code": int(code), "error_message": message, "auth_bytes": b""}
            if request.API_VERSION >= 1:
                fields["session_lifetime_ms"] = 0
            return K[request.API_VERSION](**fields)

        if self.sasl_password is not None and ctx.attributes.get("sasl") != "PLAIN" and not ctx.authenticated:
            # Kafka's authenticator closes a connection whose SaslAuthenticate comes before its handshake.
            log.info("closing %s: SaslAuthenticate before a SaslHandshake", ctx.peer)
            return ErrorResponse(int(ErrorCode.ILLEGAL_SASL_STATE), "SaslAuthenticate before SaslHandshake")
        if self.sasl_password is None or ctx.authenticated:
            return answer(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate without a PLAIN SaslHandshake first")
        parts = bytes(request.auth_bytes or b"").split(b"\0")
        password = parts[2] if len(parts) == 3 else None
        if password is None or not hmac.compare_digest(password, self.sasl_password.encode()):
            log.info("SASL/PLAIN authentication failed from %s", ctx.peer)
            ctx.close_after_response = True
            # As on the msgpack listener (and Kafka's connection.failed.authentication.delay.ms): a wrong
            # password is answered late, so guessing costs a connection and 100 ms a try.
            await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
            return answer(ErrorCode.SASL_AUTHENTICATION_FAILED, "Authentication failed: invalid username or password")
        ctx.authenticated = True
        ctx.attributes["principal"] = parts[1].decode("utf-8", "replace")
        return answer(ErrorCode.NONE, None)

    async def api_versions(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        return self._api_versions_answer(request.API_VERSION)

    async def metadata(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        if request.topics is None or (version == 0 and not request.topics):
            topics = None  # v1+: null asks for every topic; v0 had no null, its empty list meant every topic
        else:
            topics = [t.name for t in request.topics]
        ours = await self.apis.handle_metadata(ctx, MetadataRequest(topics))
        assert isinstance(ours, MetadataResponse)
        allowed = version < 4 or request.allow_auto_topic_creation
        if topics and self.auto_create_topics and allowed:
            await self._auto_create(ctx, ours)
        K = KMetadataResponse
        T = K.MetadataResponseTopic
        P = T.MetadataResponsePartition
        brokers = []
        for b in ours.brokers:
            address = self._listener_address(b.listeners)
            if address is not None:
                brokers.append(
                    K.MetadataResponseBroker(node_id=b.broker_id, host=address[0], port=address[1], rack=b.rack)
                )
        return K[version](
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=self.cluster_id,
            # Kafka clients send CreateTopics and DeleteTopics to the controller this names, and must reach it
            # on this listener: as a KRaft broker does, name a broker (this one), which forwards them.
            controller_id=self.apis.broker_id if brokers else -1,
            topics=[
                T(
                    error_code=t.error_code,
                    name=t.topic,
                    is_internal=t.topic.startswith("__"),
                    partitions=[
                        P(
                            error_code=p.error_code,
                            partition_index=p.partition,
                            leader_id=p.leader_id,
                            leader_epoch=p.leader_epoch,
                            replica_nodes=p.replicas,
                            isr_nodes=p.isr,
                            offline_replicas=p.offline_replicas,
                        )
                        for p in t.partitions
                    ],
                    authorized_operations=None,
                )
                for t in ours.topics
            ],
            authorized_operations=None,
        )

    async def _auto_create(self, ctx: ConnectionContext, ours: MetadataResponse) -> None:
        """Kafka's auto.create.topics.enable: topics a METADATA names that do not exist are created with the
        controller's num.partitions and default.replication.factor, and answered LEADER_NOT_AVAILABLE until
        they have leaders (clients retry). The creation is the client's own CreateTopics: with a cluster
        secret only an authenticated connection may create, as Kafka requires CREATE on the cluster or the
        topic; the others get UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers them."""
        missing = [t for t in ours.topics if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        if not missing:
            return
        created = await self.apis.handle_create_topics(
            ctx, CreateTopicsRequest([CreatableTopic(t.topic, -1, -1) for t in missing])
        )
        results = {r.name: r for r in created.topics} if isinstance(created, CreateTopicsResponse) else {}
        for t in missing:
            result = results.get(t.topic)
            if result is not None and result.error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                t.error_code = int(ErrorCode.LEADER_NOT_AVAILABLE)
            elif result is not None and result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION:
                t.error_code = int(ErrorCode.INVALID_TOPIC_EXCEPTION)

    def _listener_address(self, listeners: dict[str, str]) -> tuple[str, int] | None:
        address = listeners.get(self.listener_name)
        return None if address is None else split_host_port(address, f"listener {self.listener_name}")

    # -- Produce (0) -----------------------------------------------------------------------------------

    async def produce(self, ctx: ConnectionContext, request: Any) -> ApiMessage | None:
        """Each partition's Kafka batches converted one at a time (a batch's size as sent, compressed, is
        checked against the topic's max.message.bytes and its record count capped first, as Kafka checks
        them before anything is decompressed), letting the event loop go between two once a turn's share
        of work is spent; the connection's next request waits meanwhile (the socket server holds a PRODUCE's
        order until its append), and the appends follow at once."""
        version = request.API_VERSION
        answers: dict[TopicPartition, ProducePartitionResponse] = {}
        partitions: list[ProducePartition] = []
        order: list[TopicPartition] = []
        budget = loop_budget()
        started = time.perf_counter()
        for topic in request.topic_data:
            for p in topic.partition_data:
                tp = TopicPartition(topic.name, p.index)
                order.append(tp)
                if version < _LOWEST_PRODUCE_VERSION:
                    answers[tp] = self._produce_error(tp, ErrorCode.UNSUPPORTED_VERSION, "PRODUCE v0-2 are not served")
                    continue
                if request.transactional_id is not None:
                    answers[tp] = self._produce_error(
                        tp, ErrorCode.INVALID_REQUEST, "transactions are not supported by minibroker"
                    )
                    continue
                converted: list[bytes] = []
                try:
                    for batch in iter_kafka_to_native(
                        bytes(p.records or b""), max_batch_bytes=self._max_message_bytes(tp)
                    ):
                        converted.append(batch)
                        if budget.due() or time.perf_counter() - started >= budget.slice_s:
                            started = await budget.pause_if_due(started)
                except KafkaError as exc:
                    answers[tp] = self._produce_error(tp, exc.code, str(exc))
                    continue
                partitions.append(ProducePartition(tp.topic, tp.partition, b"".join(converted)))
        if partitions:
            # Sizes were checked as sent: stored uncompressed, a batch may be larger than max.message.bytes.
            ours = await self.apis.handle_produce(
                ctx, ProduceRequest(request.acks, request.timeout_ms, partitions), check_batch_size=False
            )
            if isinstance(ours, ProduceResponse):
                for r in ours.partitions:
                    answers[TopicPartition(r.topic, r.partition)] = r
            elif isinstance(ours, ErrorResponse):
                for part in partitions:
                    tp = TopicPartition(part.topic, part.partition)
                    answers[tp] = self._produce_error(tp, ErrorCode(ours.error_code), ours.error_message)
        if request.acks == 0:
            return None  # Kafka sends no answer to acks=0
        K = KProduceResponse
        T = K.TopicProduceResponse
        P = T.PartitionProduceResponse
        grouped = _by_topic(order, lambda tp: tp.topic)
        return K[version](
            responses=[
                T(
                    name=topic,
                    partition_responses=[
                        P(
                            index=tp.partition,
                            error_code=answers[tp].error_code,
                            base_offset=answers[tp].base_offset,
                            log_append_time_ms=answers[tp].log_append_time_ms,
                            log_start_offset=answers[tp].log_start_offset,
                            record_errors=[],
                            error_message=answers[tp].error_message if answers[tp].error_code else None,
                        )
                        for tp in tps
                    ],
                )
                for topic, tps in grouped.items()
            ],
            throttle_time_ms=0,
        )

    def _max_message_bytes(self, tp: TopicPartition) -> int | None:
        """The topic's max.message.bytes, when this broker hosts the partition (else the append refuses it)."""
        partition = self.apis.replica_manager.partitions.get(tp)
        return None if partition is None else partition.log.config.max_message_bytes

    @staticmethod
    def _produce_error(tp: TopicPartition, code: ErrorCode | int, message: str | None) -> ProducePartitionResponse:
        return ProducePartitionResponse(tp.topic, tp.partition, error_code=int(code), error_message=message)

    # -- Fetch (1) -------------------------------------------------------------------------------------

    async def fetch(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        partitions = [
            FetchPartition(
                topic.topic,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                log_start_offset=p.log_start_offset if version >= 5 else -1,
                current_leader_epoch=p.current_leader_epoch if version >= 9 else -1,
            )
            for topic in request.topics
            for p in topic.partitions
        ]
        forgotten = [
            ForgottenPartition(topic.topic, partition)
            for topic in (request.forgotten_topics_data if version >= 7 else [])
            for partition in topic.partitions
        ]
        ours = await self.apis.handle_fetch(
            ctx,
            FetchRequest(
                replica_id=CONSUMER_REPLICA_ID,  # a follower's fetch comes over the msgpack listener only
                max_wait_ms=max(0, request.max_wait_ms),
                min_bytes=max(0, request.min_bytes),
                max_bytes=max(0, request.max_bytes),
                partitions=partitions,
                isolation_level=request.isolation_level,
                session_id=request.session_id if version >= 7 else 0,
                session_epoch=request.session_epoch if version >= 7 else -1,
                forgotten=forgotten,
            ),
        )
        K = KFetchResponse
        T = K.FetchableTopicResponse
        P = T.PartitionData
        if isinstance(ours, ErrorResponse):
            return K[version](throttle_time_ms=0, error_code=ours.error_code, session_id=0, responses=[])
        assert isinstance(ours, FetchResponse)
        # The records are converted a batch at a time, the event loop let go between two once a turn's share
        # of work is spent: an answer of 50 MiB is hundreds of milliseconds of conversion.
        budget = loop_budget()
        started = time.perf_counter()
        converted: dict[int, bytes] = {}
        for r in ours.partitions:
            if r.records:
                batches = []
                for batch in iter_native_to_kafka(r.records):
                    batches.append(batch)
                    if budget.due() or time.perf_counter() - started >= budget.slice_s:
                        started = await budget.pause_if_due(started)
                converted[id(r)] = b"".join(batches)
        grouped = _by_topic(ours.partitions, lambda r: r.topic)
        return K[version](
            throttle_time_ms=0,
            error_code=ours.error_code,
            session_id=ours.session_id,
            responses=[
                T(topic=topic, partitions=[self._fetched_partition(P, r, converted.get(id(r), b"")) for r in parts])
                for topic, parts in grouped.items()
            ],
        )

    @staticmethod
    def _fetched_partition(P: Any, r: FetchPartitionResponse, records: bytes) -> Any:
        return P(
            partition_index=r.partition,
            error_code=r.error_code,
            high_watermark=r.high_watermark,
            # No transactions: every record up to the HW is stable.
            last_stable_offset=r.last_stable_offset if r.last_stable_offset >= 0 else r.high_watermark,
            log_start_offset=r.log_start_offset,
            aborted_transactions=None,
            preferred_read_replica=-1,
            records=records,
        )

    # -- ListOffsets (2), OffsetForLeaderEpoch (23) ----------------------------------------------------

    async def list_offsets(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        asked: list[ListOffsetsPartition] = []
        refused: dict[TopicPartition, ListOffsetsPartitionResponse] = {}
        order: list[TopicPartition] = []
        for topic in request.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                order.append(tp)
                if p.timestamp < 0 and p.timestamp not in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP):
                    # -3 (max timestamp, KIP-734) and later special values come with ListOffsets v7+.
                    refused[tp] = ListOffsetsPartitionResponse(
                        tp.topic, tp.partition, error_code=int(ErrorCode.INVALID_REQUEST)
                    )
                    continue
                epoch = p.current_leader_epoch if version >= 4 else -1
                asked.append(ListOffsetsPartition(tp.topic, tp.partition, p.timestamp, epoch))
        answers = dict(refused)
        if asked:
            ours = await self.apis.handle_list_offsets(
                ctx, ListOffsetsRequest(request.replica_id, asked, request.isolation_level if version >= 2 else 0)
            )
            if isinstance(ours, ListOffsetsResponse):
                for r in ours.partitions:
                    answers[TopicPartition(r.topic, r.partition)] = r
            else:
                assert isinstance(ours, ErrorResponse)
                for a in asked:
                    answers[TopicPartition(a.topic, a.partition)] = ListOffsetsPartitionResponse(
                        a.topic, a.partition, error_code=ours.error_code
                    )
        K = KListOffsetsResponse
        T = K.ListOffsetsTopicResponse
        P = T.ListOffsetsPartitionResponse
        return K[version](
            throttle_time_ms=0,
            topics=[
                T(
                    name=topic,
                    partitions=[
                        P(
                            partition_index=tp.partition,
                            error_code=answers[tp].error_code,
                            timestamp=answers[tp].timestamp,
                            offset=answers[tp].offset,
                            leader_epoch=answers[tp].leader_epoch,
                        )
                        for tp in tps
                    ],
                )
                for topic, tps in _by_topic(order, lambda tp: tp.topic).items()
            ],
        )

    async def offset_for_leader_epoch(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        asked = [
            (TopicPartition(topic.topic, p.partition), p.current_leader_epoch, p.leader_epoch)
            for topic in request.topics
            for p in topic.partitions
        ]
        ours = await self.apis.handle_offset_for_leader_epoch(
            ctx,
            OffsetForLeaderEpochRequest(
                replica_id=request.replica_id if version >= 3 else CONSUMER_REPLICA_ID,
                partitions=[_epoch_query(tp, current, epoch) for tp, current, epoch in asked],
            ),
        )
        answers: dict[TopicPartition, EpochEndOffset] = {}
        if isinstance(ours, OffsetForLeaderEpochResponse):
            answers = {TopicPartition(r.topic, r.partition): r for r in ours.partitions}
        error, _ = _request_error(ours)
        K = KOffsetForLeaderEpochResponse
        T = K.OffsetForLeaderTopicResult
        P = T.EpochEndOffset
        topics = []
        for topic, entries in _by_topic(asked, lambda a: a[0].topic).items():
            parts = []
            for tp, _, _ in entries:
                r = answers.get(tp)
                parts.append(
                    P(
                        error_code=r.error_code if r else error,
                        partition=tp.partition,
                        leader_epoch=r.leader_epoch if r else -1,
                        end_offset=r.end_offset if r else -1,
                    )
                )
            topics.append(T(topic=topic, partitions=parts))
        return K[version](throttle_time_ms=0, topics=topics)

    # -- InitProducerId (22), FindCoordinator (10) -----------------------------------------------------

    async def init_producer_id(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        K = KInitProducerIdResponse
        if request.transactional_id is not None:
            return K[request.API_VERSION](
                throttle_time_ms=0,
                error_code=int(ErrorCode.INVALID_REQUEST),
                producer_id=-1,
                producer_epoch=-1,
            )
        ours = await self.apis.handle_init_producer_id(
            ctx, InitProducerIdRequest(transaction_timeout_ms=request.transaction_timeout_ms)
        )
        if isinstance(ours, InitProducerIdResponse):
            return K[request.API_VERSION](
                throttle_time_ms=0,
                error_code=ours.error_code,
                producer_id=ours.producer_id,
                producer_epoch=ours.producer_epoch,
            )
        assert isinstance(ours, ErrorResponse)
        return K[request.API_VERSION](throttle_time_ms=0, error_code=ours.error_code, producer_id=-1, producer_epoch=-1)

    async def find_coordinator(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        """The coordinator of a group is the leader of its partition of __consumer_offsets, created with
        Kafka's offsets.topic.* settings the first time a client asks (answered COORDINATOR_NOT_AVAILABLE
        meanwhile, which clients retry)."""
        version = request.API_VERSION
        K = KFindCoordinatorResponse[version]
        if self.coordinator is None or (version >= 1 and request.key_type != 0):
            return K(
                throttle_time_ms=0,
                error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                error_message="only consumer groups have coordinators here (no transactions)",
                node_id=-1,
                host="",
                port=-1,
            )
        partition = self.coordinator.partition_for(request.key)
        leader, error = await self._offsets_partition_leader(partition)
        address = None
        if leader is not None:
            endpoint = self.apis.metadata_cache.endpoint(leader)
            address = self._listener_address(endpoint.listeners) if endpoint is not None else None
        if address is None:
            return K(
                throttle_time_ms=0,
                error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                error_message=error,
                node_id=-1,
                host="",
                port=-1,
            )
        return K(throttle_time_ms=0, error_code=0, error_message=None, node_id=leader, host=address[0], port=address[1])

    async def _offsets_partition_leader(self, partition: int) -> tuple[int | None, str]:
        assert self.coordinator is not None
        ours = self.apis.metadata_cache.metadata_response([OFFSETS_TOPIC])
        topic = ours.topics[0] if ours.topics else None
        if topic is None or topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            live = len(ours.brokers)
            replication_factor = max(1, min(self.offsets_topic_replication_factor, live))
            created = await self.apis.handle_create_topics(
                INTERNAL_CONTEXT,
                CreateTopicsRequest(
                    [
                        CreatableTopic(
                            OFFSETS_TOPIC, self.coordinator.config.offsets_topic_num_partitions, replication_factor
                        )
                    ]
                ),
            )
            log.info("creating %s for the group coordinators: %s", OFFSETS_TOPIC, created)
            return None, f"{OFFSETS_TOPIC} is being created"
        for p in topic.partitions:
            if p.partition == partition and p.leader_id >= 0:
                return p.leader_id, ""
        return None, f"{OFFSETS_TOPIC}-{partition} has no leader right now"

    # -- consumer groups: JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13) -------------

    def _group_coordinator(self) -> GroupCoordinator:
        if self.coordinator is None:
            raise KafkaError("this broker has no group coordinator")
        return self.coordinator

    async def join_group(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        result = await self._group_coordinator().join_group(
            request.group_id,
            request.member_id,
            request.group_instance_id if version >= 5 else None,
            ctx.attributes.get("client_id") or "",
            "/" + ctx.peer.rpartition(":")[0],
            request.session_timeout_ms,
            request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
            request.protocol_type,
            [(p.name, bytes(p.metadata)) for p in request.protocols],
            require_known_member_id=version >= 4,
        )
        K = KJoinGroupResponse
        return K[version](
            throttle_time_ms=0,
            error_code=result.error_code,
            generation_id=result.generation_id,
            protocol_name=result.protocol_name or "",
            leader=result.leader or "",
            member_id=result.member_id or "",
            members=[
                K.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md) for m, i, md in result.members
            ],
        )

    async def sync_group(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        result = await self._group_coordinator().sync_group(
            request.group_id,
            request.generation_id,
            request.member_id,
            request.group_instance_id if version >= 3 else None,
            None,
            None,
            {a.member_id: bytes(a.assignment) for a in request.assignments},
        )
        return KSyncGroupResponse[version](
            throttle_time_ms=0, error_code=result.error_code, assignment=result.assignment or b""
        )

    async def heartbeat(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        error = self._group_coordinator().heartbeat(
            request.group_id,
            request.generation_id,
            request.member_id,
            request.group_instance_id if version >= 3 else None,
        )
        return KHeartbeatResponse[version](throttle_time_ms=0, error_code=error)

    async def leave_group(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        if version >= 3:
            members = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            members = [(request.member_id, None)]
        error, results = await self._group_coordinator().leave_group(request.group_id, members)
        K = KLeaveGroupResponse
        if version < 3:
            # One member: its own error is the answer's.
            error = error or (results[0][2] if results else 0)
        return K[version](
            throttle_time_ms=0,
            error_code=error,
            members=[K.MemberResponse(member_id=m, group_instance_id=i, error_code=e) for m, i, e in results],
        )

    # -- OffsetCommit (8), OffsetFetch (9), ListGroups (16), DescribeGroups (15) ----------------------

    async def offset_commit(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        offsets = {
            (topic.name, p.partition_index): (
                p.committed_offset,
                p.committed_leader_epoch if version >= 6 else -1,
                p.committed_metadata,
            )
            for topic in request.topics
            for p in topic.partitions
        }
        # Kafka answers UNKNOWN_TOPIC_OR_PARTITION for a partition its metadata does not have, and commits
        # the others.
        known = self._known_partitions({topic for topic, _ in offsets})
        unknown = {tp: int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for tp in offsets if tp not in known}
        errors = dict(unknown)
        if len(unknown) < len(offsets):
            errors |= await self._group_coordinator().commit_offsets(
                request.group_id,
                request.generation_id_or_member_epoch,
                request.member_id,
                request.group_instance_id if version >= 7 else None,
                {tp: value for tp, value in offsets.items() if tp not in unknown},
            )
        K = KOffsetCommitResponse
        T = K.OffsetCommitResponseTopic
        return K[version](
            throttle_time_ms=0,
            topics=[
                T(
                    name=topic,
                    partitions=[
                        T.OffsetCommitResponsePartition(partition_index=p, error_code=errors.get((topic, p), 0))
                        for _, p in keys
                    ],
                )
                for topic, keys in _by_topic(offsets, lambda key: key[0]).items()
            ],
        )

    def _known_partitions(self, topics: set[str]) -> set[tuple[str, int]]:
        ours = self.apis.metadata_cache.metadata_response(sorted(topics))
        return {(t.topic, p.partition) for t in ours.topics for p in t.partitions}

    async def offset_fetch(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        asked = None if request.topics is None else [(t.name, p) for t in request.topics for p in t.partition_indexes]
        error, offsets = self._group_coordinator().fetch_offsets(request.group_id, asked)
        K = KOffsetFetchResponse
        T = K.OffsetFetchResponseTopic
        keys = list(offsets) if asked is None else asked
        # Before v2 the answer has no group-level error: each partition carries it.
        missing = (-1, -1, None, error if version < 2 else 0)
        topics = [
            T(
                name=topic,
                partitions=[
                    T.OffsetFetchResponsePartition(
                        partition_index=p,
                        committed_offset=offsets.get((topic, p), missing)[0],
                        committed_leader_epoch=offsets.get((topic, p), missing)[1],
                        metadata=offsets.get((topic, p), missing)[2] or "",
                        error_code=offsets.get((topic, p), missing)[3],
                    )
                    for _, p in tps
                ],
            )
            for topic, tps in _by_topic(keys, lambda key: key[0]).items()
        ]
        return K[version](throttle_time_ms=0, topics=topics, error_code=error)

    async def list_groups(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        K = KListGroupsResponse
        return K[request.API_VERSION](
            throttle_time_ms=0,
            error_code=0,
            groups=[K.ListedGroup(group_id=g, protocol_type=t) for g, t, _ in self._group_coordinator().list_groups()],
        )

    async def describe_groups(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        K = KDescribeGroupsResponse
        G = K.DescribedGroup
        M = G.DescribedGroupMember
        described = []
        for group_id in request.groups:
            d = self._group_coordinator().describe_group(group_id)
            described.append(
                G(
                    error_code=d.error_code,
                    group_id=group_id,
                    group_state=d.state,
                    protocol_type=d.protocol_type or "",
                    protocol_data=d.protocol or "",
                    members=[
                        M(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in d.members
                    ],
                    authorized_operations=None,
                )
            )
        return K[request.API_VERSION](throttle_time_ms=0, groups=described)

    async def delete_groups(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        """DeleteGroups (42), sent to each group's coordinator: an Empty group goes with its committed
        offsets, tombstones written through the coordinator's partition of __consumer_offsets (Kafka's
        handleDeleteGroups). An admin request: with a cluster secret, only on an authenticated connection."""
        K = KDeleteGroupsResponse
        names = list(dict.fromkeys(request.groups_names))
        if refused := check_secret(ctx, self.apis.cluster_secret, "DeleteGroups"):
            log.info("DeleteGroups from %s refused: %s", ctx.peer, refused.error_message)
            errors = dict.fromkeys(names, int(ErrorCode.GROUP_AUTHORIZATION_FAILED))
        elif self.coordinator is None:
            errors = dict.fromkeys(names, int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        else:
            errors = await self.coordinator.delete_groups(names)
        return K[request.API_VERSION](
            throttle_time_ms=0,
            results=[K.DeletableGroupResult(group_id=name, error_code=errors[name]) for name in names],
        )

    async def describe_quorum(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        """DescribeQuorum (55): the metadata quorum of `__cluster_metadata`, from its leader (the broker
        forwards it there, as with KIP-919), so kafka-metadata-quorum.sh --bootstrap-server describes it.
        Open, as on the msgpack listener: it shows offsets and node ids, nothing else."""
        K = KDescribeQuorumResponse
        version = request.API_VERSION
        ours = await self.apis.handle_describe_quorum(ctx, DescribeQuorumRequest())
        if not isinstance(ours, DescribeQuorumResponse):
            return K[version](error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR), topics=[])
        if ours.error_code == ErrorCode.NOT_CONTROLLER:
            # The broker reached no active controller: as Kafka's, the partition says the leader is unknown.
            ours = DescribeQuorumResponse(error_code=int(ErrorCode.NOT_LEADER_OR_FOLLOWER))

        def replica(r: QuorumReplicaState) -> Any:
            fields: dict[str, Any] = {"replica_id": r.replica_id, "log_end_offset": r.log_end_offset}
            if version >= 1:
                fields.update(
                    last_fetch_timestamp=r.last_fetch_timestamp, last_caught_up_timestamp=r.last_caught_up_timestamp
                )
            if version >= 2:
                fields["replica_directory_id"] = NO_DIRECTORY_ID  # one log directory per node: no JBOD (KIP-858)
            return K.TopicData.PartitionData.ReplicaState(**fields)  # kafka-python nests it in the partition

        partition_fields: dict[str, Any] = {}
        top_fields: dict[str, Any] = {}
        if version >= 2:
            partition_fields["error_message"] = ours.error_message if ours.error_code else None
            top_fields["error_message"] = None
            top_fields["nodes"] = [
                K.Node(node_id=node_id, listeners=[K.Node.Listener(name=CONTROLLER_LISTENER, host=host, port=port)])
                for node_id, (host, port) in sorted(self.quorum_voters.items())
            ]
        partition = K.TopicData.PartitionData(
            partition_index=0,
            error_code=ours.error_code,
            leader_id=ours.leader_id,
            leader_epoch=ours.leader_epoch,
            high_watermark=ours.high_watermark,
            current_voters=[replica(v) for v in ours.current_voters],
            observers=[replica(o) for o in ours.observers],
            **partition_fields,
        )
        return K[version](
            error_code=0, topics=[K.TopicData(topic_name="__cluster_metadata", partitions=[partition])], **top_fields
        )

    # -- admin: CreateTopics (19), DeleteTopics (20), CreatePartitions (37), DescribeConfigs (32) -------

    async def create_topics(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        version = request.API_VERSION
        topics = [
            CreatableTopic(
                t.name,
                t.num_partitions,
                t.replication_factor,
                {c.name: c.value for c in t.configs if c.value is not None},
            )
            for t in request.topics
        ]
        K = KCreateTopicsResponse
        R = K.CreatableTopicResult
        if request.validate_only:
            return K[version](
                throttle_time_ms=0,
                topics=[
                    R(name=t.name, error_code=int(ErrorCode.INVALID_REQUEST), error_message=_NO_VALIDATE_ONLY)
                    for t in topics
                ],
            )
        ours = await self.apis.handle_create_topics(ctx, CreateTopicsRequest(topics, request.timeout_ms))
        results = {}
        if isinstance(ours, CreateTopicsResponse):
            results = {r.name: r for r in ours.topics}
        error, message = _request_error(ours)
        return K[version](
            throttle_time_ms=0,
            topics=[
                R(
                    name=t.name,
                    error_code=results[t.name].error_code if t.name in results else error,
                    error_message=results[t.name].error_message if t.name in results else message,
                )
                for t in topics
            ],
        )

    async def delete_topics(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        names = list(request.topic_names)
        ours = await self.apis.handle_delete_topics(ctx, DeleteTopicsRequest(names, request.timeout_ms))
        K = KDeleteTopicsResponse
        results = {}
        if isinstance(ours, DeleteTopicsResponse):
            results = {r.name: r.error_code for r in ours.responses}
        error, _ = _request_error(ours)
        return K[request.API_VERSION](
            throttle_time_ms=0,
            responses=[K.DeletableTopicResult(name=n, error_code=results.get(n, error)) for n in names],
        )

    async def create_partitions(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        asked = [CreatePartitionsTopic(t.name, t.count) for t in request.topics]
        K = KCreatePartitionsResponse
        if request.validate_only:
            return K[request.API_VERSION](
                throttle_time_ms=0,
                results=[
                    K.CreatePartitionsTopicResult(
                        name=t.name, error_code=int(ErrorCode.INVALID_REQUEST), error_message=_NO_VALIDATE_ONLY
                    )
                    for t in asked
                ],
            )
        ours = await self.apis.handle_create_partitions(ctx, CreatePartitionsRequest(asked, request.timeout_ms))
        results = {}
        if isinstance(ours, CreatePartitionsResponse):
            results = {r.name: r for r in ours.results}
        error, _ = _request_error(ours)
        return K[request.API_VERSION](
            throttle_time_ms=0,
            results=[
                K.CreatePartitionsTopicResult(
                    name=t.name,
                    error_code=results[t.name].error_code if t.name in results else error,
                    error_message=results[t.name].error_message if t.name in results else None,
                )
                for t in asked
            ],
        )

    async def delete_records(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        """DeleteRecords (21), sent to each partition's leader: its log start moves up to the offset asked
        (-1: the high watermark), by the msgpack listener's DELETE_RECORDS handler, rules and authorization
        included. A connection without the cluster secret, when there is one, gets TOPIC_AUTHORIZATION_FAILED
        for each partition, as Kafka answers a principal without DELETE on the topic."""
        asked = [
            DeleteRecordsPartition(topic.name, p.partition_index, p.offset)
            for topic in request.topics
            for p in topic.partitions
        ]
        ours = await self.apis.handle_delete_records(ctx, DeleteRecordsRequest(asked, request.timeout_ms))
        answers: dict[tuple[str, int], DeleteRecordsPartitionResponse] = {}
        if isinstance(ours, DeleteRecordsResponse):
            answers = {(r.topic, r.partition): r for r in ours.partitions}
        error, _ = _request_error(ours)
        if error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
            error = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        K = KDeleteRecordsResponse
        T = K.DeleteRecordsTopicResult
        P = T.DeleteRecordsPartitionResult
        topics = []
        for topic, parts in _by_topic(asked, lambda p: p.topic).items():
            results = []
            for p in dict.fromkeys((p.topic, p.partition) for p in parts):
                r = answers.get(p)
                results.append(
                    P(
                        partition_index=p[1],
                        low_watermark=r.low_watermark if r else -1,
                        error_code=r.error_code if r else error,
                    )
                )
            topics.append(T(name=topic, partitions=results))
        return K[request.API_VERSION](throttle_time_ms=0, topics=topics)

    async def incremental_alter_configs(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        resources = [
            AlterConfigsResource(
                r.resource_type,
                r.resource_name,
                [AlterableConfig(c.name, c.config_operation, c.value) for c in r.configs],
            )
            for r in request.resources
        ]
        ours = await self.apis.handle_incremental_alter_configs(
            ctx, IncrementalAlterConfigsRequest(resources, validate_only=request.validate_only)
        )
        return _alter_configs_answer(KIncrementalAlterConfigsResponse, request.API_VERSION, resources, ours)

    async def alter_configs(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        """AlterConfigs (33), the admin API before KIP-339: each resource's dynamic configs become exactly the
        ones listed. Served as IncrementalAlterConfigs: SET for each one listed, DELETE for every other. For
        a topic that is every topic config DescribeConfigs names (deleting one the topic does not set
        changes nothing, so this broker's metadata being a moment behind the controller's does not matter);
        for a broker, the dynamic ones this broker knows of (the static ones cannot be deleted)."""
        dynamic = {int(ConfigSource.DYNAMIC_TOPIC_CONFIG), int(ConfigSource.DYNAMIC_BROKER_CONFIG)}
        described = await self.apis.handle_describe_configs(
            ctx,
            DescribeConfigsRequest(
                [DescribeConfigsResource(r.resource_type, r.resource_name, None) for r in request.resources]
            ),
        )
        current: dict[tuple[int, str], set[str]] = {}
        if isinstance(described, DescribeConfigsResponse):
            for result in described.results:
                topic = result.resource_type == ConfigResourceType.TOPIC
                names = {c.name for c in result.configs if topic or c.config_source in dynamic}
                current[(result.resource_type, result.resource_name)] = names
        resources = []
        for r in request.resources:
            listed = {c.name: c.value for c in r.configs}
            gone = sorted(current.get((r.resource_type, r.resource_name), set()) - set(listed))
            ops = [AlterableConfig(name, int(AlterConfigOp.SET), value) for name, value in listed.items()]
            ops += [AlterableConfig(name, int(AlterConfigOp.DELETE), None) for name in gone]
            resources.append(AlterConfigsResource(r.resource_type, r.resource_name, ops))
        ours = await self.apis.handle_incremental_alter_configs(
            ctx, IncrementalAlterConfigsRequest(resources, validate_only=request.validate_only)
        )
        return _alter_configs_answer(KAlterConfigsResponse, request.API_VERSION, resources, ours)

    async def describe_configs(self, ctx: ConnectionContext, request: Any) -> ApiMessage:
        resources = [
            DescribeConfigsResource(
                r.resource_type, r.resource_name, list(r.configuration_keys) if r.configuration_keys else None
            )
            for r in request.resources
        ]
        ours = await self.apis.handle_describe_configs(ctx, DescribeConfigsRequest(resources))
        K = KDescribeConfigsResponse
        R = K.DescribeConfigsResult
        C = R.DescribeConfigsResourceResult
        results = []
        if isinstance(ours, DescribeConfigsResponse):
            for r in ours.results:
                results.append(
                    R(
                        error_code=r.error_code,
                        error_message=r.error_message,
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                        configs=[
                            C(
                                name=c.name,
                                value=c.value,
                                read_only=c.read_only,
                                config_source=c.config_source,
                                is_sensitive=c.is_sensitive,
                                # Kafka's order: the one in effect first (topic, broker, default)
                                synonyms=[
                                    C.DescribeConfigsSynonym(name=y.name, value=y.value, source=y.source)
                                    for y in c.synonyms
                                ]
                                if request.include_synonyms
                                else [],
                            )
                            for c in r.configs
                        ],
                    )
                )
        return K[request.API_VERSION](throttle_time_ms=0, results=results)


def _epoch_query(tp: TopicPartition, current_leader_epoch: int, leader_epoch: int) -> OffsetForLeaderEpochPartition:
    return OffsetForLeaderEpochPartition(tp.topic, tp.partition, leader_epoch, current_leader_epoch)
