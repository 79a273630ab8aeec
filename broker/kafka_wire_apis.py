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

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from kafka.protocol.admin.configs import (
    DescribeConfigsRequest as KDescribeConfigsRequest,
)
from kafka.protocol.admin.configs import (
    DescribeConfigsResponse as KDescribeConfigsResponse,
)
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
from kafka.protocol.admin.topics import (
    DeleteTopicsRequest as KDeleteTopicsRequest,
)
from kafka.protocol.admin.topics import (
    DeleteTopicsResponse as KDeleteTopicsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchRequest as KFetchRequest
from kafka.protocol.consumer.fetch import FetchResponse as KFetchResponse
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

from broker.kafka_apis import KafkaApis
from network.kafka_wire import UnsupportedApiVersions, served_versions
from network.request_context import ConnectionContext
from protocol.errors import ErrorCode, KafkaError
from protocol.kafka_records import kafka_to_native, native_to_kafka
from protocol.messages import (
    CONSUMER_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    EpochEndOffset,
    ErrorResponse,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    ForgottenPartition,
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
    RequestHeader,
    TopicPartition,
)

log = logging.getLogger(__name__)

_NO_VALIDATE_ONLY = "validate_only is not supported by minibroker: the controller validates as it creates"
_LOWEST_PRODUCE_VERSION = 3  # record batch v2; Kafka 4 refuses v0-2 too (KIP-896)


def _by_topic(items: Iterable[Any], topic: Callable[[Any], str]) -> dict[str, list[Any]]:
    grouped: dict[str, list[Any]] = defaultdict(list)
    for item in items:
        grouped[topic(item)].append(item)
    return grouped


class KafkaWireApis:
    """Handler of a Kafka listener named `listener_name`; `apis` is the broker's `KafkaApis`."""

    def __init__(self, apis: KafkaApis, listener_name: str, cluster_id: str = "minibroker") -> None:
        self.apis = apis
        self.listener_name = listener_name
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
        }

    async def handle(self, ctx: ConnectionContext, header: RequestHeader, request: Any) -> ApiMessage | None:
        if isinstance(request, UnsupportedApiVersions):
            return self._api_versions_answer(0, int(ErrorCode.UNSUPPORTED_VERSION))
        handler = self._handlers.get(type(request)[None])
        if handler is None:  # served in network/kafka_wire.py but not here: a bug, closes the connection
            raise KafkaError(f"no handler for {type(request).__name__}")
        response: ApiMessage | None = await handler(ctx, request)
        return response

    # -- ApiVersions (18), Metadata (3) ---------------------------------------------------------------

    def _api_versions_answer(self, version: int, error_code: int = 0) -> ApiMessage:
        K = KApiVersionsResponse
        return K[version](
            error_code=error_code,
            api_keys=[K.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in served_versions()],
            throttle_time_ms=0,
        )

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
        K = KMetadataResponse
        T = K.MetadataResponseTopic
        P = T.MetadataResponsePartition
        brokers = []
        for b in ours.brokers:
            address = self._listener_address(b.broker_id, b.listeners)
            if address is not None:
                brokers.append(
                    K.MetadataResponseBroker(node_id=b.broker_id, host=address[0], port=address[1], rack=b.rack)
                )
        return K[version](
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=self.cluster_id,
            controller_id=ours.controller_id,
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

    def _listener_address(self, broker_id: int, listeners: dict[str, str]) -> tuple[str, int] | None:
        address = listeners.get(self.listener_name)
        if address is None:
            return None
        host, _, port = address.rpartition(":")
        return host, int(port)

    # -- Produce (0) -----------------------------------------------------------------------------------

    async def produce(self, ctx: ConnectionContext, request: Any) -> ApiMessage | None:
        version = request.API_VERSION
        answers: dict[TopicPartition, ProducePartitionResponse] = {}
        partitions: list[ProducePartition] = []
        order: list[TopicPartition] = []
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
                try:
                    records = kafka_to_native(bytes(p.records or b""))
                except KafkaError as exc:
                    answers[tp] = self._produce_error(tp, exc.code, str(exc))
                    continue
                partitions.append(ProducePartition(tp.topic, tp.partition, records))
        if partitions:
            ours = await self.apis.handle_produce(ctx, ProduceRequest(request.acks, request.timeout_ms, partitions))
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
                            log_append_time_ms=-1,
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
        grouped = _by_topic(ours.partitions, lambda r: r.topic)
        return K[version](
            throttle_time_ms=0,
            error_code=ours.error_code,
            session_id=ours.session_id,
            responses=[
                T(topic=topic, partitions=[self._fetched_partition(P, r) for r in parts])
                for topic, parts in grouped.items()
            ],
        )

    @staticmethod
    def _fetched_partition(P: Any, r: FetchPartitionResponse) -> Any:
        records = native_to_kafka(r.records) if r.records else b""
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
                if p.timestamp not in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP):
                    # Offsets by timestamp need a time index, which the log does not keep.
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
        error = ours.error_code if isinstance(ours, ErrorResponse) else int(ErrorCode.UNKNOWN_SERVER_ERROR)
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
        return KFindCoordinatorResponse[request.API_VERSION](
            throttle_time_ms=0,
            error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
            error_message="consumer groups are not served yet",
            node_id=-1,
            host="",
            port=-1,
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
        error = ours.error_code if isinstance(ours, ErrorResponse) else int(ErrorCode.UNKNOWN_SERVER_ERROR)
        message = ours.error_message if isinstance(ours, ErrorResponse) else None
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
        error = ours.error_code if isinstance(ours, ErrorResponse) else int(ErrorCode.UNKNOWN_SERVER_ERROR)
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
        error = ours.error_code if isinstance(ours, ErrorResponse) else int(ErrorCode.UNKNOWN_SERVER_ERROR)
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
                                synonyms=[],
                            )
                            for c in r.configs
                        ],
                    )
                )
        return K[request.API_VERSION](throttle_time_ms=0, results=results)


def _epoch_query(tp: TopicPartition, current_leader_epoch: int, leader_epoch: int) -> OffsetForLeaderEpochPartition:
    return OffsetForLeaderEpochPartition(tp.topic, tp.partition, leader_epoch, current_leader_epoch)
