"""Request handlers: one method per API, turning typed requests into typed responses.

Errors are values here: a partition-level problem becomes that partition's `error_code` and
`error_message`; nothing a client sends raises out of this module (the server turns any escaped
exception into UNKNOWN_SERVER_ERROR for that one request, as a last resort).

With a controller quorum, partition states, topics and configs come from the committed metadata log
(broker/metadata_publisher.py calls `apply_partition_states`, `apply_replica_deletions` and `apply_configs`).
A standalone broker (no controller.quorum.voters) takes them from LEADER_AND_ISR, STOP_REPLICA and
UPDATE_METADATA sent by whoever plays the controller (the integration tests do); those requests are refused
with CLUSTER_AUTHORIZATION_FAILED from connections that have not presented `cluster.secret` via
SASL_AUTHENTICATE, when one is configured. CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS,
INCREMENTAL_ALTER_CONFIGS and the partition reassignment requests sent to a broker are forwarded to the
active controller, as Kafka brokers do; INIT_PRODUCER_ID is answered here, from the block of producer ids
this broker reserved (KIP-730). DESCRIBE_CONFIGS is answered here, from the topic configs the metadata log
carries and this broker's own settings (broker/config_helper.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from broker.config_helper import describe_broker_configs, describe_topic_configs, topic_config_defaults
from broker.delayed_operation import DelayedOperation
from broker.fetch_session import FetchManager
from broker.metadata_cache import MetadataCache
from broker.produce_ack_journal import ProduceAckJournal
from broker.producer_id_manager import ProducerIdManager
from broker.replica_manager import FetchParams, ReplicaManager
from broker.replication_quota import ReplicationQuotaManager, dynamic_throttles
from group_coordinator import OFFSETS_TOPIC
from network.request_context import ConnectionContext, api_versions_response, authenticate, check_secret
from network.request_limits import count_entries, msgpack_limit
from protocol.api_keys import ApiKey
from protocol.codec import Message, packb, to_wire
from protocol.errors import ErrorCode, KafkaError, errors_into
from protocol.fetch_frame import FETCH_RECORDS_APART
from protocol.messages import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ApiVersionsRequest,
    ConfigResourceType,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsPartitionResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    EpochEndOffset,
    ErrorResponse,
    FetchPartitionResponse,
    FetchRequest,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    LeaderAndIsrPartitionResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    MetadataRequest,
    OffsetForLeaderEpochPartition,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProducePartition,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    ReplicaLogInfo,
    RequestHeader,
    SaslAuthenticateRequest,
    StopReplicaPartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
    TopicPartition,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
    api_key_of,
)
from protocol.record_batch import iter_headers
from server_common.time import Time

log = logging.getLogger(__name__)

ForwardToController = Callable[[Message], Awaitable[Any]]

#: Partitions of a LEADER_AND_ISR or STOP_REPLICA applied between two yields to the event loop (see
#: `KafkaApis.handle_leader_and_isr`): each is a millisecond or two of file work on a quiet disk.
STATE_CHANGE_SLICE = 8
#: Partitions of a LIST_OFFSETS or OFFSET_FOR_LEADER_EPOCH answered between two yields: a lookup by timestamp
#: reads an index and a segment (tens of microseconds), the others a few microseconds.
LOOKUP_SLICE = 256
#: A PRODUCE's partitions are appended this many at a time, or fewer once their records pass
#: PRODUCE_SLICE_BYTES (a batch is validated and appended at about 1 ms per MiB), between two yields.
PRODUCE_SLICE = 64
PRODUCE_SLICE_BYTES = 1024 * 1024

S = TypeVar("S")


async def _slices(items: list[S], size: int = STATE_CHANGE_SLICE) -> AsyncIterator[list[S]]:
    """`items` by `size`, letting the event loop run between two (one empty slice for none). The slices
    are fixed by the request alone, so a simulated run yields at the same points every time."""
    for start in range(0, max(len(items), 1), size):
        if start:
            await asyncio.sleep(0)
        yield items[start : start + size]


A = TypeVar("A")


async def _answered_in_slices(ctx: ConnectionContext, items: list[S], answer: Callable[[S], A]) -> list[A]:
    """`answer` for each item, LOOKUP_SLICE at a time with the event loop let go in between; the connection's
    later requests wait meanwhile (`in_order`), so the answers are as of the request's turn."""
    out: list[A] = []
    with ctx.in_order() if len(items) > LOOKUP_SLICE else contextlib.nullcontext():
        async for items_slice in _slices(items, LOOKUP_SLICE):
            out.extend(answer(item) for item in items_slice)
    return out


def _produce_slices(entries: list[ProducePartition]) -> list[list[ProducePartition]]:
    slices: list[list[ProducePartition]] = []
    current: list[ProducePartition] = []
    size = 0
    for entry in entries:
        current.append(entry)
        size += len(entry.records)
        if len(current) >= PRODUCE_SLICE or size >= PRODUCE_SLICE_BYTES:
            slices.append(current)
            current, size = [], 0
    if current:
        slices.append(current)
    return slices


T = TypeVar("T")


def over_controller_limits(request: Message) -> str | None:
    """Why the controller would refuse `request` whole (its size or its entries, network/request_limits.py,
    which the controller's listener applies too), or None."""
    api_key = int(api_key_of(request))
    limit = msgpack_limit(api_key)
    value = to_wire(request)
    if count_entries(value, limit.max_entries) > limit.max_entries:
        return f"more than {limit.max_entries} entries in one {ApiKey(api_key).name}: split it"
    if limit.max_bytes is not None and len(packb(value)) > limit.max_bytes:
        return f"a {ApiKey(api_key).name} over {limit.max_bytes} bytes: split it"
    return None


async def answered(start: Callable[[Callable[[T], None]], DelayedOperation | None]) -> T:
    """Turn the replica manager's response callback into an await. If the waiter goes away (its
    connection closed), the parked operation is abandoned: it leaves the timer now, not at its deadline."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def respond(result: T) -> None:
        if not future.done():
            future.set_result(result)

    op = start(respond)
    try:
        return await future
    except asyncio.CancelledError:
        if op is not None:
            op.abandon()
        raise


class KafkaApis:
    def __init__(
        self,
        broker_id: int,
        replica_manager: ReplicaManager,
        metadata_cache: MetadataCache,
        fetch_manager: FetchManager,
        time: Time,
        cluster_secret: str | None = None,
        forward_to_controller: ForwardToController | None = None,
    ) -> None:
        self.broker_id = broker_id
        # "leader" and "follower" replication quota managers, when the broker has them (set by BrokerNode).
        self.replication_quotas: dict[str, ReplicationQuotaManager] = {}
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.fetch_manager = fetch_manager
        self.time = time
        self.cluster_secret = cluster_secret
        self.forward_to_controller = forward_to_controller
        # Kafka's replicaStateChangeLock: LEADER_AND_ISR and STOP_REPLICA are applied a slice at a time with
        # the event loop let go in between, so each takes this lock to stay whole with respect to the other.
        self._state_change_lock = asyncio.Lock()
        #: What this broker knows of the producer ids the controller handed out (set by BrokerNode when the
        #: broker has a controller): an idempotent batch with an id never handed out is refused.
        self.producer_ids: ProducerIdManager | None = None
        #: `produce.ack.journal`: every batch answered NONE is journalled before its answer leaves (set by the
        #: broker process when configured; broker/produce_ack_journal.py). None: off, one test per PRODUCE.
        self.ack_journal: ProduceAckJournal | None = None
        #: This process's broker epoch (its registration with the controller; -1 until registered), when the
        #: broker has a controller: controller requests stamped with another epoch are refused (KIP-380).
        self.broker_epoch: Callable[[], int] | None = None
        #: This broker's resolved static config (BROKER_CONFIG's keys), for DESCRIBE_CONFIGS (set by BrokerNode).
        self.broker_config: Mapping[str, Any] = {}
        self._handlers: dict[type, Callable[[ConnectionContext, Any], Awaitable[Message | None]]] = {
            ProduceRequest: self.handle_produce,
            FetchRequest: self.handle_fetch,
            ListOffsetsRequest: self.handle_list_offsets,
            MetadataRequest: self.handle_metadata,
            LeaderAndIsrRequest: self.handle_leader_and_isr,
            UpdateMetadataRequest: self.handle_update_metadata,
            ApiVersionsRequest: self.handle_api_versions,
            CreateTopicsRequest: self.handle_create_topics,
            DeleteTopicsRequest: self.handle_delete_topics,
            CreatePartitionsRequest: self.handle_create_partitions,
            DescribeConfigsRequest: self.handle_describe_configs,
            IncrementalAlterConfigsRequest: self.handle_incremental_alter_configs,
            InitProducerIdRequest: self.handle_init_producer_id,
            StopReplicaRequest: self.handle_stop_replica,
            AlterPartitionReassignmentsRequest: self.handle_alter_partition_reassignments,
            ElectLeadersRequest: self.handle_elect_leaders,
            ListPartitionReassignmentsRequest: self.handle_list_partition_reassignments,
            DeleteRecordsRequest: self.handle_delete_records,
            OffsetForLeaderEpochRequest: self.handle_offset_for_leader_epoch,
            SaslAuthenticateRequest: self.handle_sasl_authenticate,
            DescribeLogDirsRequest: self.handle_describe_log_dirs,
            DescribeQuorumRequest: self.handle_describe_quorum,
        }

    async def handle(self, ctx: ConnectionContext, header: RequestHeader, body: Message) -> Message | None:
        handler = self._handlers.get(type(body))
        if handler is None:
            return ErrorResponse(
                int(ErrorCode.NOT_CONTROLLER), f"{type(body).__name__} goes to the controller, not a broker"
            )
        if type(body) is FetchRequest:
            return await self.handle_fetch(ctx, body, header.api_version == FETCH_RECORDS_APART)
        return await handler(ctx, body)

    # -- data plane ---------------------------------------------------------------------------------

    async def handle_produce(
        self, ctx: ConnectionContext, request: ProduceRequest, check_batch_size: bool = True
    ) -> ProduceResponse | None:
        """`check_batch_size=False`: the Kafka listener checked each batch against max.message.bytes as the
        client sent it, compressed (replica_manager.append_records)."""
        # The socket server starts no later request of this connection until `release_order` below (or this
        # handler's end), so whatever is awaited before the append, PRODUCEs reach the log in arrival order.
        refused = await self._invented_producer_ids(request.partitions)
        to_append = [p for p in request.partitions if id(p) not in refused] if refused else request.partitions
        appended: list[ProducePartitionResponse] = []
        slices = _produce_slices(to_append)
        if len(slices) == 1:

            def append(respond: Callable[[list[ProducePartitionResponse]], None]) -> DelayedOperation | None:
                op = self.replica_manager.append_records(
                    request.timeout_ms, request.acks, to_append, respond, check_batch_size
                )
                ctx.release_order()  # appended: the wait for the followers overlaps with later requests
                return op

            appended = await answered(append)
        elif slices:
            appended = await self._append_in_slices(ctx, request, slices, check_batch_size)
        if to_append and self.ack_journal is not None and request.acks != 0:
            self.ack_journal.record(request.acks, to_append, appended, self.time.milliseconds(), self._epoch_of)
        if request.acks == 0:
            return None  # Kafka sends no response to acks=0
        if not refused:
            return ProduceResponse(partitions=appended)
        answers = iter(appended)  # append_records answers in request order
        return ProduceResponse(partitions=[refused.get(id(p)) or next(answers) for p in request.partitions])

    def _epoch_of(self, topic: str, partition: int) -> int:
        found = self.replica_manager.partitions.get(TopicPartition(topic, partition))
        return found.leader_epoch if found is not None else -1

    async def _append_in_slices(
        self,
        ctx: ConnectionContext,
        request: ProduceRequest,
        slices: list[list[ProducePartition]],
        check_batch_size: bool,
    ) -> list[ProducePartitionResponse]:
        """A large PRODUCE (thousands of partitions, or many MiB of records) appended a slice at a time with
        the event loop let go in between, all of it before the connection's next request starts (the order
        the server holds for a PRODUCE is released after the last slice); the answers, in request order,
        once every slice's are in (acks=all: each slice waits in the purgatory)."""
        loop = asyncio.get_running_loop()
        waits: list[tuple[asyncio.Future[list[ProducePartitionResponse]], DelayedOperation | None]] = []
        try:
            for i, entries in enumerate(slices):
                if i:
                    await asyncio.sleep(0)
                future: asyncio.Future[list[ProducePartitionResponse]] = loop.create_future()

                def respond(result: list[ProducePartitionResponse], future: asyncio.Future[Any] = future) -> None:
                    if not future.done():
                        future.set_result(result)

                op = self.replica_manager.append_records(
                    request.timeout_ms, request.acks, entries, respond, check_batch_size
                )
                waits.append((future, op))
            ctx.release_order()  # every slice appended
            answers: list[ProducePartitionResponse] = []
            for future, _ in waits:
                answers.extend(await future)
            return answers
        except asyncio.CancelledError:
            for _, op in waits:
                if op is not None:
                    op.abandon()
            raise

    async def _invented_producer_ids(self, partitions: list[ProducePartition]) -> dict[int, ProducePartitionResponse]:
        """The entries (by id()) whose batches carry a producer id the controller never handed out, each with
        its UNKNOWN_PRODUCER_ID answer. A batch whose header cannot be read is left to the log's validator."""
        if self.producer_ids is None:
            return {}
        refused: dict[int, ProducePartitionResponse] = {}
        for p in partitions:
            if not isinstance(p.records, (bytes, bytearray, memoryview)):
                continue
            try:
                # Only well-formed idempotent headers: a negative epoch or sequence is the validator's to
                # refuse (INVALID_RECORD), as Kafka's LogValidator runs before producer state is consulted.
                producer_ids = {
                    h.producer_id
                    for h in iter_headers(p.records)
                    if h.producer_id >= 0 and h.producer_epoch >= 0 and h.base_sequence >= 0
                }
            except (KafkaError, ValueError):
                continue
            for producer_id in sorted(producer_ids):
                if not self.producer_ids.known(producer_id) and not await self.producer_ids.handed_out(producer_id):
                    refused[id(p)] = ProducePartitionResponse(
                        p.topic,
                        p.partition,
                        error_code=int(ErrorCode.UNKNOWN_PRODUCER_ID),
                        error_message=f"producer id {producer_id} was never handed out by INIT_PRODUCER_ID",
                    )
                    break
        return refused

    async def handle_fetch(self, ctx: ConnectionContext, request: FetchRequest, records_apart: bool = False) -> Message:
        """`records_apart`: a FETCH v1, whose answer sends records beside the message; a consumer's are then
        sent from the segment files unread where the log verified them (FileRecords)."""
        is_from_follower = request.replica_id >= 0
        if is_from_follower and (refused := check_secret(ctx, self.cluster_secret, "a FETCH from a replica")):
            return refused  # a forged follower position would move the HW
        context = self.fetch_manager.new_context(request, is_from_follower)
        if context.error != ErrorCode.NONE:
            return context.error_response()
        params = FetchParams(
            request.replica_id,
            request.max_wait_ms,
            request.min_bytes,
            request.max_bytes,
            file_records=records_apart and not is_from_follower,
            replica_epoch=request.replica_epoch,
        )
        parts: list[FetchPartitionResponse] = await answered(
            lambda respond: self.replica_manager.fetch_messages(params, context.partitions_to_read(), respond)
        )
        return context.update_and_generate_response(parts)

    async def handle_list_offsets(self, ctx: ConnectionContext, request: ListOffsetsRequest) -> Message:
        if request.replica_id >= 0 and (
            refused := check_secret(ctx, self.cluster_secret, "LIST_OFFSETS from a replica")
        ):
            return refused
        isolation_high_watermark = request.replica_id in (CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID)
        fetch_only_from_leader = request.replica_id != DEBUGGING_REPLICA_ID

        def answer(p: ListOffsetsPartition) -> ListOffsetsPartitionResponse:
            # timestamp -1 unless a record's is answered: Kafka answers EARLIEST and LATEST so
            resp = ListOffsetsPartitionResponse(p.topic, p.partition)
            with errors_into(resp):
                partition = self.replica_manager.get_partition_or_error(TopicPartition(p.topic, p.partition))
                if p.timestamp >= 0:  # the earliest offset whose record timestamp is at least this
                    resp.timestamp, resp.leader_epoch, resp.offset = partition.fetch_offset_by_timestamp(
                        p.timestamp, p.current_leader_epoch, isolation_high_watermark, fetch_only_from_leader
                    )
                else:
                    resp.leader_epoch, resp.offset = partition.fetch_offset_for_timestamp(
                        p.timestamp, p.current_leader_epoch, isolation_high_watermark, fetch_only_from_leader
                    )
            return resp

        return ListOffsetsResponse(partitions=await _answered_in_slices(ctx, request.partitions, answer))

    async def handle_offset_for_leader_epoch(
        self, ctx: ConnectionContext, request: OffsetForLeaderEpochRequest
    ) -> Message:
        if request.replica_id >= 0 and (
            refused := check_secret(ctx, self.cluster_secret, "OFFSET_FOR_LEADER_EPOCH from a replica")
        ):
            return refused

        def answer(p: OffsetForLeaderEpochPartition) -> EpochEndOffset:
            resp = EpochEndOffset(p.topic, p.partition)
            with errors_into(resp):
                partition = self.replica_manager.get_partition_or_error(TopicPartition(p.topic, p.partition))
                resp.leader_epoch, resp.end_offset = partition.last_offset_for_leader_epoch(
                    p.current_leader_epoch, p.leader_epoch, fetch_only_from_leader=True
                )
            return resp

        return OffsetForLeaderEpochResponse(partitions=await _answered_in_slices(ctx, request.partitions, answer))

    async def handle_delete_records(self, ctx: ConnectionContext, request: DeleteRecordsRequest) -> Message:
        if refused := check_secret(ctx, self.cluster_secret, "DELETE_RECORDS"):
            return refused
        out = []
        for p in request.partitions:
            resp = DeleteRecordsPartitionResponse(p.topic, p.partition)
            with errors_into(resp):
                if p.topic == OFFSETS_TOPIC:
                    # As Kafka's ReplicaManager: the group coordinators' log is theirs to clean, not a client's.
                    raise KafkaError(
                        f"cannot delete records of the internal topic {OFFSETS_TOPIC}",
                        code=ErrorCode.INVALID_TOPIC_EXCEPTION,
                    )
                partition = self.replica_manager.get_partition_or_error(TopicPartition(p.topic, p.partition))
                partition.check_leader(-1)
                offset = partition.high_watermark if p.offset == -1 else p.offset
                if offset > partition.high_watermark or offset < 0:
                    raise KafkaError(
                        f"offset {offset} is outside [0, high watermark {partition.high_watermark}]",
                        code=ErrorCode.OFFSET_OUT_OF_RANGE,
                    )
                partition.log.delete_records(offset)
                resp.low_watermark = partition.log_start_offset
            out.append(resp)
        return DeleteRecordsResponse(partitions=out)

    async def handle_describe_log_dirs(self, ctx: ConnectionContext, request: DescribeLogDirsRequest) -> Message:
        replicas = []
        for tp, p in sorted(self.replica_manager.partitions.items()):
            if request.topics is not None and tp.topic not in request.topics:
                continue
            latest = p.log.latest_epoch
            replicas.append(
                ReplicaLogInfo(
                    tp.topic,
                    tp.partition,
                    size_bytes=p.log.size_in_bytes,
                    log_start_offset=p.log_start_offset,
                    log_end_offset=p.log_end_offset,
                    high_watermark=p.high_watermark,
                    leader_id=p.leader_id,
                    leader_epoch=p.leader_epoch,
                    is_leader=p.is_leader,
                    isr=sorted(p.isr),
                    latest_epoch=-1 if latest is None else latest,
                )
            )
        log_dir = self.replica_manager.log_manager.log_dir
        # The absolute path says where data lives on the host: only for authenticated connections when a
        # secret is set; others see the directory's name.
        shown = str(log_dir) if self.cluster_secret is None or ctx.authenticated else log_dir.name
        return DescribeLogDirsResponse(shown, replicas)

    # -- metadata and control -----------------------------------------------------------------------

    async def handle_metadata(self, ctx: ConnectionContext, request: MetadataRequest) -> Message:
        return self.metadata_cache.metadata_response(request.topics)

    async def handle_api_versions(self, ctx: ConnectionContext, request: ApiVersionsRequest) -> Message:
        return api_versions_response()

    async def handle_sasl_authenticate(self, ctx: ConnectionContext, request: SaslAuthenticateRequest) -> Message:
        return await authenticate(ctx, self.cluster_secret, request)

    async def handle_leader_and_isr(self, ctx: ConnectionContext, request: LeaderAndIsrRequest) -> Message:
        refused = check_secret(ctx, self.cluster_secret)
        if refused is not None:
            return refused
        if self.broker_epoch is not None and request.broker_epoch != -1:
            current = self.broker_epoch()
            if request.broker_epoch != current:
                # Meant for an earlier incarnation of this broker (it restarted before the controller heard):
                # obeying could make a log that lost its unflushed tail lead at the old epoch.
                return LeaderAndIsrResponse(
                    error_code=ErrorCode.STALE_BROKER_EPOCH,
                    error_message=f"request for broker epoch {request.broker_epoch}, this broker's is {current}",
                )
        # A new replica costs a directory, files and fsyncs (milliseconds; tens of them on a busy disk), and a
        # broker asked to create hundreds at once (a topic of many partitions, the group coordinator's 50 of
        # __consumer_offsets) would otherwise hold its loop for all of them: no heartbeat goes out meanwhile,
        # and past broker.session.timeout.ms the controller fences it and moves its leaderships. Kafka
        # applies the request on a handler thread while heartbeats go from another. Here it goes a slice at a
        # time; each partition changes role whole, and the metadata cache learns a slice's states with it.
        return await self.apply_partition_states(request, merge_into_cache=True)

    async def apply_partition_states(
        self, request: LeaderAndIsrRequest, merge_into_cache: bool = False
    ) -> LeaderAndIsrResponse:
        """Make this broker leader or follower of each partition in `request`, a slice at a time (see above)."""
        answers: list[LeaderAndIsrPartitionResponse] = []
        known = self.metadata_cache.endpoint
        async with self._state_change_lock:
            async for states in _slices(request.partitions):
                if merge_into_cache:
                    self.metadata_cache.merge_partition_states(states, request.live_leaders)
                response = self.replica_manager.become_leader_or_follower(
                    dataclasses.replace(request, partitions=states), lambda b: known(b) is not None
                )
                if response.error_code != ErrorCode.NONE:
                    return response  # a stale controller epoch, found on the first slice before any change
                answers.extend(response.partitions)
        return LeaderAndIsrResponse(partitions=answers)

    async def handle_update_metadata(self, ctx: ConnectionContext, request: UpdateMetadataRequest) -> Message:
        refused = check_secret(ctx, self.cluster_secret)
        if refused is not None:
            return refused
        self.metadata_cache.update(request)
        self.apply_configs()
        return UpdateMetadataResponse()

    def apply_configs(self) -> None:
        """The metadata cache's topic and dynamic broker configs, applied to the logs, partitions and quotas."""
        in_effect = self.metadata_cache.topic_configs_in_effect()
        self.replica_manager.update_topic_configs(in_effect)
        self._apply_replication_throttles(in_effect)

    def _apply_replication_throttles(self, topic_configs: Mapping[str, Mapping[str, str]]) -> None:
        """KIP-73 at runtime: which replicas the topics throttle on this broker, and the cluster's dynamic
        rates (this broker's own entry over the default), as kafka-reassign-partitions --throttle sets them."""
        dynamic = {**self.metadata_cache.broker_configs.get("", {})}
        dynamic.update(self.metadata_cache.broker_configs.get(str(self.broker_id), {}))
        for side, quota in self.replication_quotas.items():
            quota.set_dynamic_throttles(dynamic_throttles(topic_configs, side, self.broker_id))
            rate = dynamic.get(f"{side}.replication.throttled.rate")
            quota.set_dynamic_rate(None if rate is None else float(rate))

    async def handle_stop_replica(self, ctx: ConnectionContext, request: StopReplicaRequest) -> Message:
        refused = check_secret(ctx, self.cluster_secret)
        if refused is not None:
            return refused
        return await self.apply_replica_deletions(request)

    async def apply_replica_deletions(self, request: StopReplicaRequest) -> StopReplicaResponse:
        # Sliced as LEADER_AND_ISR is: deleting a topic deletes each of its replicas here.
        answers: list[StopReplicaPartitionError] = []
        async with self._state_change_lock:
            async for items in _slices(request.partitions):
                response = self.replica_manager.stop_replicas(dataclasses.replace(request, partitions=items))
                if response.error_code != ErrorCode.NONE:
                    return response  # a stale controller epoch, found on the first slice before any change
                answers.extend(response.partitions)
        return StopReplicaResponse(partitions=answers)

    async def handle_create_topics(self, ctx: ConnectionContext, request: CreateTopicsRequest) -> Message:
        return await self._forward(ctx, request, "CREATE_TOPICS", CreateTopicsResponse)

    async def handle_delete_topics(self, ctx: ConnectionContext, request: DeleteTopicsRequest) -> Message:
        return await self._forward(ctx, request, "DELETE_TOPICS", DeleteTopicsResponse)

    async def handle_create_partitions(self, ctx: ConnectionContext, request: CreatePartitionsRequest) -> Message:
        return await self._forward(ctx, request, "CREATE_PARTITIONS", CreatePartitionsResponse)

    async def handle_incremental_alter_configs(
        self, ctx: ConnectionContext, request: IncrementalAlterConfigsRequest
    ) -> Message:
        return await self._forward(ctx, request, "INCREMENTAL_ALTER_CONFIGS", IncrementalAlterConfigsResponse)

    async def handle_describe_configs(self, ctx: ConnectionContext, request: DescribeConfigsRequest) -> Message:
        # Open like METADATA, which carries topic configs too. Answered from this broker's view, so right
        # after an INCREMENTAL_ALTER_CONFIGS it shows the change once the controller's push has arrived.
        defaults = topic_config_defaults(
            self.replica_manager.log_manager.config,
            self.replica_manager.min_insync_replicas,
            self.metadata_cache.topic_config_defaults,
        )
        results = []
        seen: set[tuple[int, str]] = set()
        hide_paths = self.cluster_secret is not None and not ctx.authenticated
        for resource in request.resources:
            result = DescribeConfigsResult(resource.resource_type, resource.resource_name)
            name = resource.resource_name
            if (resource.resource_type, name) in seen:
                # Each answer may hold a hundred configs: a resource named ten thousand times was an answer
                # of tens of megabytes for a request of 78 KB. Named again, it is answered once.
                result.error_code = int(ErrorCode.INVALID_REQUEST)
                result.error_message = f"resource {name!r} of type {resource.resource_type} is named more than once"
                results.append(result)
                continue
            seen.add((resource.resource_type, name))
            if resource.resource_type == ConfigResourceType.BROKER:
                if name not in ("", str(self.broker_id)):
                    # As Kafka: a broker describes its own configs (the admin client sends there) or the default.
                    result.error_code = int(ErrorCode.INVALID_REQUEST)
                    result.error_message = (
                        f"Unexpected broker id, expected {self.broker_id} or empty string, but received {name}"
                    )
                else:
                    result.configs = describe_broker_configs(
                        name,
                        self.broker_config,
                        self.metadata_cache.broker_configs,
                        resource.configuration_keys,
                        hide_paths=hide_paths,
                    )
            elif resource.resource_type != ConfigResourceType.TOPIC:
                result.error_code = int(ErrorCode.INVALID_REQUEST)
                result.error_message = (
                    f"only topic and broker configs (resource types {int(ConfigResourceType.TOPIC)} and "
                    f"{int(ConfigResourceType.BROKER)}) can be described, not resource type {resource.resource_type}"
                )
            elif not self.metadata_cache.has_topic(resource.resource_name):
                result.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                result.error_message = f"topic {resource.resource_name} does not exist"
            else:
                own = self.metadata_cache.topic_configs.get(resource.resource_name, {})
                result.configs = describe_topic_configs(own, defaults, resource.configuration_keys)
            results.append(result)
        return DescribeConfigsResponse(results=results)

    async def handle_init_producer_id(self, ctx: ConnectionContext, request: InitProducerIdRequest) -> Message:
        # Any producer may ask (PRODUCE needs no secret either). The id comes from this broker's block.
        if self.producer_ids is None:
            return InitProducerIdResponse(
                error_code=int(ErrorCode.NOT_CONTROLLER),
                error_message="this broker runs without a controller, which hands out producer ids",
            )
        return await self.producer_ids.init_producer_id(request)

    async def handle_alter_partition_reassignments(
        self, ctx: ConnectionContext, request: AlterPartitionReassignmentsRequest
    ) -> Message:
        return await self._forward(ctx, request, "ALTER_PARTITION_REASSIGNMENTS", AlterPartitionReassignmentsResponse)

    async def handle_list_partition_reassignments(
        self, ctx: ConnectionContext, request: ListPartitionReassignmentsRequest
    ) -> Message:
        return await self._forward(ctx, request, "LIST_PARTITION_REASSIGNMENTS", ListPartitionReassignmentsResponse)

    async def handle_describe_quorum(self, ctx: ConnectionContext, request: DescribeQuorumRequest) -> Message:
        # Anyone may ask (as METADATA): forwarded to the active controller, the quorum's leader, which knows
        # every voter's and observer's progress (KIP-919 lets Kafka's brokers take it too).
        return await self._forward(ctx, request, "DESCRIBE_QUORUM", DescribeQuorumResponse, admin=False)

    async def handle_elect_leaders(self, ctx: ConnectionContext, request: ElectLeadersRequest) -> Message:
        return await self._forward(ctx, request, "ELECT_LEADERS", ElectLeadersResponse)

    async def _forward(
        self,
        ctx: ConnectionContext,
        request: Message,
        name: str,
        response_type: type[
            CreateTopicsResponse
            | DeleteTopicsResponse
            | CreatePartitionsResponse
            | IncrementalAlterConfigsResponse
            | AlterPartitionReassignmentsResponse
            | ListPartitionReassignmentsResponse
            | ElectLeadersResponse
            | DescribeQuorumResponse
        ],
        admin: bool = True,
    ) -> Message:
        # The broker forwards with its own authenticated link: without this check any client could use it
        # to reach the controller with a secret it does not hold.
        if admin and (refused := check_secret(ctx, self.cluster_secret, name)):
            return refused
        if self.forward_to_controller is None:
            return response_type(
                error_code=int(ErrorCode.NOT_CONTROLLER),
                error_message="this broker runs without a controller; topics come from LEADER_AND_ISR",
            )
        if (too_big := over_controller_limits(request)) is not None:
            # Refused here: the controller would close the link it arrived on, failing with it every other
            # forwarded request, ALTER_PARTITION and producer-id block this broker has in flight there.
            return response_type(error_code=int(ErrorCode.INVALID_REQUEST), error_message=too_big)
        try:
            response: Message = await self.forward_to_controller(request)
        except (OSError, ConnectionError, TimeoutError) as exc:
            return response_type(
                error_code=int(ErrorCode.NOT_CONTROLLER), error_message=f"controller unreachable: {exc}"
            )
        return response


LeaderAndIsrHandler = Callable[[LeaderAndIsrRequest], LeaderAndIsrResponse]
