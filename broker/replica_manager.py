"""The replica manager: every partition on this broker, and the leader side of PRODUCE and FETCH.

How this works
--------------
It owns the `Partition` objects (created when LEADER_AND_ISR first names one), the fetch and produce
purgatories, and the follower fetchers (through `fetcher_manager`). The request handlers call it:

* `append_records` (PRODUCE): leader append per partition, then for acks=all a DelayedProduce that
  completes when the HW passes each partition's last offset (or the timeout, REQUEST_TIMED_OUT);
* `fetch_messages` (FETCH): read every partition (L3), record follower progress (L4–L7), then answer at
  once or park a DelayedFetch (L10, L11);
  Both answer through a response callback, as Kafka's do, and return the parked operation if any; the
  request handlers (`kafka_apis.answered`) turn that into an await, so nothing here needs an event loop;
* `become_leader_or_follower` (LEADER_AND_ISR): role changes (L9, F20), completing parked requests so
  they answer NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH, and (re)starting follower fetchers;
* `maybe_shrink_isr` (periodic, `replica.lag.time.max.ms / 2`, L8) and HW checkpoints.

Whenever something can change what a parked request would see — an append, a HW move, a role change —
it calls `check_and_complete` on the purgatories for that partition (L12).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from broker.delayed_fetch import DelayedFetch, FetchPartitionStatus
from broker.delayed_operation import DelayedOperation
from broker.delayed_produce import DelayedProduce, ProducePartitionStatus
from broker.log_manager import LogManager
from broker.partition import IsrChangeSink, Partition
from broker.purgatory import DelayedOperationPurgatory
from broker.replication_quota import ReplicationQuotaManager
from protocol.errors import (
    ErrorCode,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    errors_into,
)
from protocol.messages import (
    CONSUMER_REPLICA_ID,
    DEBUGGING_REPLICA_ID,
    EPOCH_DURING_DELETE,
    NO_LEADER_EPOCH,
    UNDEFINED_EPOCH,
    FetchPartition,
    FetchPartitionResponse,
    LeaderAndIsrPartition,
    LeaderAndIsrPartitionResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    ProducePartition,
    ProducePartitionResponse,
    StopReplicaPartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
    TopicPartition,
)
from server_common.log_config import with_topic_configs
from server_common.replication_observer import NO_OBSERVER, ReplicationObserver
from server_common.time import Time

log = logging.getLogger(__name__)


class FollowerFetchers(Protocol):
    """What the replica manager asks of the follower fetchers (fetcher/replica_fetcher_manager.py)."""

    def add_fetcher_for_partitions(self, initial_states: Mapping[TopicPartition, Any]) -> None: ...

    def remove_fetcher_for_partitions(self, tps: set[TopicPartition]) -> Any: ...


@dataclass(slots=True)
class FetchParams:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    # Records may come back as FileRecords (sent from the segment files unread): a FETCH v1 from a consumer.
    file_records: bool = False
    replica_epoch: int = -1  # a follower's broker epoch (KIP-903), -1 when not given

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def fetch_only_from_leader(self) -> bool:
        """Everyone but the debugging replica id (-2) must fetch from the leader."""
        return self.replica_id != DEBUGGING_REPLICA_ID


@dataclass(slots=True)
class ReplicaManagerStats:
    delayed_fetch_expirations: int = 0
    delayed_produce_expirations: int = 0


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        time: Time,
        fetch_purgatory: DelayedOperationPurgatory[DelayedFetch],
        produce_purgatory: DelayedOperationPurgatory[DelayedProduce],
        replica_lag_time_max_ms: int = 30000,
        min_insync_replicas: int = 1,
        isr_sink: IsrChangeSink | None = None,
        observer: ReplicationObserver = NO_OBSERVER,
    ) -> None:
        self.broker_id = broker_id
        # Told of every follower fetch recorded and every answer to a follower's FETCH (the simulator's
        # checker judges each as it is made); a no-op in a broker process.
        self.observer = observer
        self.log_manager = log_manager
        self.time = time
        self.fetch_purgatory = fetch_purgatory
        self.produce_purgatory = produce_purgatory
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.isr_sink = isr_sink
        self.partitions: dict[TopicPartition, Partition] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.failed_replicas: dict[TopicPartition, str] = {}  # could not be created or opened on this disk
        # Replicas a STOP_REPLICA removed: requests for them are NOT_LEADER_OR_FOLLOWER (the client's metadata
        # is stale), not UNKNOWN_TOPIC_OR_PARTITION, until a LEADER_AND_ISR brings the replica back.
        self.stopped_replicas: set[TopicPartition] = set()
        self.controller_epoch = -1
        # The follower fetchers and how to describe where a follower starts (set by the broker node:
        # fetcher.replica_fetcher_manager.ReplicaFetcherManager and fetcher.partition_fetch_state's
        # InitialFetchState); without them this replica manager only leads.
        self.fetcher_manager: FollowerFetchers | None = None
        self.initial_fetch_state_factory: Callable[[int, int, int], Any] | None = None
        self.stats = ReplicaManagerStats()
        self.on_role_change: Callable[[TopicPartition], None] | None = None
        self.is_broker_eligible: Callable[[int], bool] = lambda broker_id: True
        # A broker's registration as this broker's metadata has it (any value that changes when it does).
        self.broker_state: Callable[[int], object] = lambda broker_id: None
        self.leader_quota: ReplicationQuotaManager | None = None

    # -- lookups ------------------------------------------------------------------------------------

    def get_partition_or_error(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None:
            if tp in self.stopped_replicas:
                raise NotLeaderOrFollowerError(f"the replica of {tp} on this broker was stopped")
            raise UnknownTopicOrPartitionError(f"this broker hosts no replica of {tp}")
        return partition

    def follower_log(self, tp: TopicPartition) -> Any:
        """FollowerReplicas for the fetchers: the log of a partition this broker follows."""
        partition = self.get_partition_or_error(tp)
        if partition.is_leader:
            raise NotLeaderOrFollowerError(f"{tp} is led by this broker now")
        return partition.log

    def _now(self) -> int:
        return self.time.milliseconds()

    # -- PRODUCE ------------------------------------------------------------------------------------

    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: list[ProducePartition],
        response_callback: Callable[[list[ProducePartitionResponse]], None],
        check_batch_size: bool = True,
    ) -> DelayedOperation | None:
        """Append to the leaders here and answer through `response_callback`, at once or, for acks=all,
        when the ISR has the records or `timeout_ms` passes (Kafka's appendRecords). Returns the parked
        operation, if any, so the caller can abandon it when nobody waits for the answer any more.
        `check_batch_size=False`: the batches' sizes were checked against max.message.bytes as the producer
        sent them (the Kafka listener's, compressed), not as they are stored."""
        if required_acks not in (-1, 0, 1):
            # Kafka's isValidRequiredAcks: any other value is refused for every partition, nothing written.
            response_callback(
                [
                    ProducePartitionResponse(
                        e.topic,
                        e.partition,
                        error_code=int(ErrorCode.INVALID_REQUIRED_ACKS),
                        error_message=f"acks must be -1, 0 or 1, not {required_acks}",
                    )
                    for e in entries
                ]
            )
            return None
        now = self._now()
        responses: list[ProducePartitionResponse] = []
        statuses: dict[TopicPartition, ProducePartitionStatus] = {}
        for entry in entries:
            tp = TopicPartition(entry.topic, entry.partition)
            resp = ProducePartitionResponse(entry.topic, entry.partition)
            responses.append(resp)
            with errors_into(resp):
                partition = self.get_partition_or_error(tp)
                hw_before = partition.high_watermark
                info = partition.append_records_to_leader(entry.records, required_acks, now, check_batch_size)
                resp.base_offset = info.first_offset
                resp.log_start_offset = partition.log_start_offset
                if partition.log.config.log_append_time:
                    # every batch was stamped with it; a duplicate's is the original's (Kafka's
                    # BatchMetadata.timestamp), -1 when the original was appended before it was kept
                    resp.log_append_time_ms = info.max_timestamp
                statuses[tp] = ProducePartitionStatus(info.last_offset + 1, resp)
                self._after_leader_change_of_data(tp, partition.high_watermark != hw_before)
        if required_acks != -1 or not statuses:
            response_callback(responses)
            return None
        op = DelayedProduce(timeout_ms, statuses, self, lambda _: response_callback(responses))
        self.produce_purgatory.try_complete_else_watch(op, list(statuses))
        return op

    def _after_leader_change_of_data(self, tp: TopicPartition, hw_changed: bool) -> None:
        self.fetch_purgatory.check_and_complete(tp)
        if hw_changed:
            self.produce_purgatory.check_and_complete(tp)

    # -- FETCH --------------------------------------------------------------------------------------

    def fetch_messages(
        self,
        params: FetchParams,
        infos: list[FetchPartition],
        response_callback: Callable[[list[FetchPartitionResponse]], None],
    ) -> DelayedOperation | None:
        """Read, and answer through `response_callback` at once or, when fewer than min_bytes are there,
        when enough arrive or max_wait_ms passes (Kafka's fetchMessages). Returns the parked operation,
        if any."""
        responses = self.read_and_record(params, infos)
        bytes_readable = sum(len(r.records) for r in responses)
        # A divergence is answered at once, like an error (Kafka's DelayedFetch case H).
        any_error = any(r.error_code != ErrorCode.NONE or r.diverging_epoch != UNDEFINED_EPOCH for r in responses)
        if params.max_wait_ms <= 0 or not infos or bytes_readable >= params.min_bytes or any_error:
            response_callback(responses)
            return None
        statuses: dict[TopicPartition, FetchPartitionStatus] = {}
        for info in infos:
            tp = TopicPartition(info.topic, info.partition)
            partition = self.partitions[tp]
            statuses[tp] = FetchPartitionStatus(info, partition.log.offset_metadata(info.fetch_offset))
        op = DelayedFetch(params.max_wait_ms, params, statuses, self, response_callback)
        self.fetch_purgatory.try_complete_else_watch(op, list(statuses))
        return op

    def read_and_record(self, params: FetchParams, infos: list[FetchPartition]) -> list[FetchPartitionResponse]:
        """Read every partition (L3) and, for a follower, record its fetch position (L4) afterwards."""
        now = self._now()
        responses = self.read_from_local_log(params, infos)
        self.record_throttled_bytes(params, responses)
        if params.is_from_follower:
            for info, resp in zip(infos, responses, strict=True):
                if resp.error_code != ErrorCode.NONE or resp.diverging_epoch != UNDEFINED_EPOCH:
                    # Follower state is only updated from successful reads; a follower whose log diverges
                    # does not hold what its fetch offset claims, so it must not move the HW.
                    continue
                tp = TopicPartition(info.topic, info.partition)
                partition = self.partitions[tp]
                replica = partition.remote_replicas.get(params.replica_id)
                if replica is None:
                    _refuse_unknown_replica(resp, params.replica_id, tp, info.current_leader_epoch)
                    continue
                stale = partition.stale_replica_epoch(params.replica_id, params.replica_epoch)
                if stale is not None:
                    _refuse_stale_fetch(resp, params.replica_id, params.replica_epoch, stale, tp)
                    continue
                hw_before = partition.high_watermark
                heard_epoch = replica.broker_epoch
                partition.counters.replication_bytes_out += len(resp.records)
                partition.update_follower_fetch_state(
                    params.replica_id,
                    info.fetch_offset,
                    info.log_start_offset,
                    now,
                    partition.log_end_offset,
                    params.replica_epoch,
                )
                self.observer.follower_fetch_recorded(
                    tp,
                    params.replica_id,
                    info.fetch_offset,
                    params.replica_epoch,
                    heard_epoch,
                    info.current_leader_epoch,
                )
                if partition.high_watermark != hw_before:
                    self._on_high_watermark_change(tp)
            self.observer.follower_fetch_answered(params.replica_id, infos, responses)
        else:
            for info, resp in zip(infos, responses, strict=True):
                if resp.error_code == ErrorCode.NONE and resp.records:
                    self.partitions[TopicPartition(info.topic, info.partition)].counters.bytes_out += len(resp.records)
        return responses

    def read_from_local_log(self, params: FetchParams, infos: list[FetchPartition]) -> list[FetchPartitionResponse]:
        remaining = params.max_bytes
        min_one_message = True
        responses = []
        for info in infos:
            tp = TopicPartition(info.topic, info.partition)
            resp = FetchPartitionResponse(info.topic, info.partition)
            with errors_into(resp):
                partition = self.get_partition_or_error(tp)
                read = partition.read_records(
                    fetch_offset=info.fetch_offset,
                    current_leader_epoch=info.current_leader_epoch,
                    max_bytes=min(info.partition_max_bytes, remaining),
                    fetch_only_from_leader=params.fetch_only_from_leader,
                    read_up_to_log_end=params.is_from_follower,
                    min_one_message=min_one_message,
                    last_fetched_epoch=info.last_fetched_epoch if params.is_from_follower else UNDEFINED_EPOCH,
                    file_records=params.file_records,
                )
                if read.diverging is not None:
                    resp.diverging_epoch, resp.diverging_end_offset = read.diverging
                # FileRecords in a bytes field: only a FETCH v1 answer carries them, and its encoder
                # (protocol/fetch_frame.py) sends them without packing them.
                resp.records = cast(bytes, read.records)
                resp.high_watermark = read.high_watermark
                resp.log_start_offset = read.log_start_offset
                resp.log_end_offset = read.log_end_offset
                if read.records and params.is_from_follower and self.leader_throttles(partition, params.replica_id):
                    resp.records = b""  # L13: an out-of-sync follower over the leader's quota gets nothing now
                # The budget and min_one_message follow what is returned, not what was read: bytes withheld
                # from a throttled partition must not starve the partitions after it (as Kafka's
                # readFromLocalLog subtracts the size of the records it actually returns).
                if resp.records:
                    remaining = max(0, remaining - len(resp.records))
                    min_one_message = False
            responses.append(resp)
        return responses

    def leader_throttles(self, partition: Partition, replica_id: int) -> bool:
        """Leader-side replication quota (L13, KIP-73): only throttled partitions, only followers that are
        not in the ISR (throttling an in-sync replica would push it out), only while over the rate. Bytes
        sent to throttled replicas count against the quota."""
        quota = self.leader_quota
        if quota is None or replica_id in partition.isr or not quota.is_throttled(partition.topic_partition):
            return False
        if quota.is_quota_exceeded():
            return True
        return False

    def record_throttled_bytes(self, params: FetchParams, responses: list[FetchPartitionResponse]) -> None:
        quota = self.leader_quota
        if quota is None or not params.is_from_follower:
            return
        for resp in responses:
            tp = TopicPartition(resp.topic, resp.partition)
            partition = self.partitions.get(tp)
            if (
                resp.records
                and partition is not None
                and params.replica_id not in partition.isr
                and quota.is_throttled(tp)
            ):
                quota.record(len(resp.records))

    def _on_high_watermark_change(self, tp: TopicPartition) -> None:
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)

    # -- LEADER_AND_ISR -----------------------------------------------------------------------------

    def become_leader_or_follower(
        self, request: LeaderAndIsrRequest, leader_endpoints_known: Callable[[int], bool] | None = None
    ) -> LeaderAndIsrResponse:
        if request.controller_epoch < self.controller_epoch:
            return LeaderAndIsrResponse(
                error_code=int(ErrorCode.STALE_CONTROLLER_EPOCH),
                error_message=f"controller epoch {request.controller_epoch} < {self.controller_epoch}",
            )
        self.controller_epoch = request.controller_epoch
        now = self._now()
        results = []
        to_leaders: list[TopicPartition] = []
        to_followers: dict[TopicPartition, LeaderAndIsrPartition] = {}
        for state in request.partitions:
            tp = TopicPartition(state.topic, state.partition)
            result = LeaderAndIsrPartitionResponse(state.topic, state.partition)
            results.append(result)
            if self.broker_id not in state.replicas:
                result.error_code = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            partition = self.partitions.get(tp)
            if partition is not None and state.leader_epoch < partition.leader_epoch:
                result.error_code = int(ErrorCode.FENCED_LEADER_EPOCH)
                continue
            if partition is not None and state.leader_epoch == partition.leader_epoch:
                if state.partition_epoch > partition.partition_epoch:
                    # A same-epoch change (ISR, or replicas being added or removed): a leader must also know
                    # its new remote replicas, or it would refuse their fetches as UNKNOWN_LEADER_EPOCH.
                    partition.update_assignment(state.replicas, now)
                    partition.apply_committed_isr(state.leader_epoch, state.isr, state.partition_epoch)
                    if partition.is_leader and partition.maybe_increment_leader_hw(now):
                        self._on_high_watermark_change(tp)
                elif state.partition_epoch == partition.partition_epoch and state.replicas != partition.assignment:
                    # The leader already holds this partition epoch from its ALTER_PARTITION answer, which
                    # carries the ISR but not the replicas: the change that completed a reassignment with that
                    # ISR change is only here.
                    partition.update_assignment(state.replicas, now)
                continue
            try:
                if partition is None:
                    self._discard_log_of_another_topic(tp, state.topic_id)
                    partition = self._create_partition(tp)
                    if state.topic_id:
                        self.log_manager.set_topic_id(tp, state.topic_id)
                if partition.log.offline_reason is not None:
                    raise KafkaStorageError(partition.log.offline_reason)
                if state.leader == self.broker_id:
                    partition.make_leader(state, now)
                    to_leaders.append(tp)
                elif partition.make_follower(state):
                    to_followers[tp] = state
            except (OSError, KafkaStorageError) as exc:
                # The replica cannot be created or used on this disk: answer KAFKA_STORAGE_ERROR and report it
                # offline to the controller (next heartbeat), which moves the leadership elsewhere.
                if tp not in self.failed_replicas:
                    log.error("%s cannot be served from this broker's disk: %s", tp, exc)
                self.failed_replicas[tp] = str(exc)
                result.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
        if to_leaders and self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions(set(to_leaders))
        if to_followers and self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions(set(to_followers))
        for tp in [*to_leaders, *to_followers]:
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
            if self.on_role_change is not None:
                self.on_role_change(tp)
        if to_followers and self.fetcher_manager is not None and self.initial_fetch_state_factory is not None:
            initial = {
                tp: self.initial_fetch_state_factory(
                    state.leader, state.leader_epoch, self.partitions[tp].high_watermark
                )
                for tp, state in to_followers.items()
                if state.leader >= 0 and (leader_endpoints_known is None or leader_endpoints_known(state.leader))
            }
            if initial:
                self.fetcher_manager.add_fetcher_for_partitions(initial)
        return LeaderAndIsrResponse(partitions=results)

    def _discard_log_of_another_topic(self, tp: TopicPartition, topic_id: str) -> None:
        """KIP-516: a log left here by a deleted topic of the same name (this broker was down when it was
        deleted, so it never got the STOP_REPLICA) is not the new topic's: delete it before use."""
        if not topic_id:
            return
        held = self.log_manager.topic_id(tp)
        if held is not None and held != topic_id:
            log.warning("%s: the log here belongs to topic id %s, not %s: deleting it", tp, held, topic_id)
            self.log_manager.delete_log(tp)

    def stop_replicas(self, request: StopReplicaRequest) -> StopReplicaResponse:
        """STOP_REPLICA: stop fetching and serving each replica (its parked FETCHes answer NOT_LEADER_OR_FOLLOWER
        now, its acks=all PRODUCEs NOT_ENOUGH_REPLICAS_AFTER_APPEND) and, with `delete_partition`, delete its
        log. A replica at a newer leader epoch than the request names is FENCED_LEADER_EPOCH (a stale request);
        EPOCH_DURING_DELETE and -1 stop whatever the epoch, as in Kafka."""
        if request.controller_epoch < self.controller_epoch:
            return StopReplicaResponse(
                error_code=int(ErrorCode.STALE_CONTROLLER_EPOCH),
                error_message=f"controller epoch {request.controller_epoch} < {self.controller_epoch}",
            )
        self.controller_epoch = request.controller_epoch
        results: list[StopReplicaPartitionError] = []
        stopping: dict[TopicPartition, tuple[bool, StopReplicaPartitionError]] = {}
        for item in request.partitions:
            tp = TopicPartition(item.topic, item.partition)
            result = StopReplicaPartitionError(item.topic, item.partition)
            results.append(result)
            partition = self.partitions.get(tp)
            if (
                partition is not None
                and item.leader_epoch not in (EPOCH_DURING_DELETE, NO_LEADER_EPOCH)
                and item.leader_epoch < partition.leader_epoch
            ):
                result.error_code = int(ErrorCode.FENCED_LEADER_EPOCH)
                continue
            stopping[tp] = (item.delete_partition, result)
        if stopping and self.fetcher_manager is not None:
            self.fetcher_manager.remove_fetcher_for_partitions(set(stopping))
        for tp, (delete, result) in stopping.items():
            self.partitions.pop(tp, None)
            self.stopped_replicas.add(tp)
            self.fetch_purgatory.check_and_complete(tp)
            self.produce_purgatory.check_and_complete(tp)
            if self.on_role_change is not None:
                self.on_role_change(tp)
            if delete:
                self.failed_replicas.pop(tp, None)
                try:
                    self.log_manager.delete_log(tp)
                except OSError as exc:
                    log.error("deleting the log of %s failed: %s", tp, exc)
                    result.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
        return StopReplicaResponse(partitions=results)

    def offline_replicas(self) -> list[TopicPartition]:
        """Replicas here that must not be served or led (corruption found, disk errors), in a fixed order:
        the broker's heartbeat reports them so the controller moves their leaderships away."""
        offline = set(self.failed_replicas)
        offline.update(tp for tp, p in self.partitions.items() if p.log.offline_reason is not None)
        return sorted(offline)

    def update_topic_configs(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """New topic configs from the controller (UPDATE_METADATA): partitions already here take them at
        once, as Kafka applies a dynamic topic config change; new ones are created with them."""
        self.topic_configs = {topic: dict(values) for topic, values in configs.items()}
        for tp, partition in self.partitions.items():
            topic_config = self.topic_configs.get(tp.topic, {})
            partition.min_insync_replicas = int(topic_config.get("min.insync.replicas", self.min_insync_replicas))
            partition.log.config = with_topic_configs(self.log_manager.config, topic_config)

    def _create_partition(self, tp: TopicPartition) -> Partition:
        topic_config = self.topic_configs.get(tp.topic, {})
        min_isr = int(topic_config.get("min.insync.replicas", self.min_insync_replicas))
        partition = Partition(
            tp,
            self.broker_id,
            self.log_manager.get_or_create_log(tp, with_topic_configs(self.log_manager.config, topic_config)),
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            min_insync_replicas=min_isr,
            isr_sink=self.isr_sink,
            is_broker_eligible=lambda broker_id: self.is_broker_eligible(broker_id),
            broker_state=lambda broker_id: self.broker_state(broker_id),
            observer=self.observer,
        )
        self.partitions[tp] = partition
        self.stopped_replicas.discard(tp)
        return partition

    # -- periodic work ------------------------------------------------------------------------------

    def maybe_shrink_isr(self) -> int:
        now = self._now()
        shrunk = 0
        for tp, partition in self.partitions.items():
            if partition.is_leader and partition.maybe_shrink_isr(now):
                shrunk += 1
                if partition.maybe_increment_leader_hw(now):
                    self._on_high_watermark_change(tp)
        return shrunk

    def on_isr_committed(self, tp: TopicPartition, leader_epoch: int, isr: list[int], partition_epoch: int) -> None:
        partition = self.partitions.get(tp)
        if partition is None:
            return
        partition.apply_committed_isr(leader_epoch, isr, partition_epoch)
        if partition.maybe_increment_leader_hw(self._now()):
            self._on_high_watermark_change(tp)

    def on_isr_rejected(self, tp: TopicPartition, error_code: int) -> None:
        partition = self.partitions.get(tp)
        if partition is not None:
            partition.isr_change_rejected(error_code)

    def checkpoint_high_watermarks(self) -> None:
        self.log_manager.checkpoint_high_watermarks()


def _refuse_unknown_replica(
    resp: FetchPartitionResponse, replica_id: int, tp: TopicPartition, current_leader_epoch: int
) -> None:
    """A fetch from a broker that is not in our replica set gets no data and no HW (and is not counted).

    With the current epoch in the request its controller knows an assignment we have not been told yet
    (new replicas are added before we hear of them), so UNKNOWN_LEADER_EPOCH tells it to retry; without
    an epoch it is plainly not talking to the leader of its replica: NOT_LEADER_OR_FOLLOWER (Kafka's
    Partition.followerReplicaOrThrow).
    """
    resp.records = b""
    resp.high_watermark = -1
    resp.log_start_offset = -1
    if current_leader_epoch == NO_LEADER_EPOCH:
        resp.error_code = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    else:
        resp.error_code = int(ErrorCode.UNKNOWN_LEADER_EPOCH)
    resp.error_message = f"broker {replica_id} is not a replica of {tp}"


def _refuse_stale_fetch(
    resp: FetchPartitionResponse, replica_id: int, replica_epoch: int, known_epoch: int, tp: TopicPartition
) -> None:
    """A fetch from an earlier incarnation of a follower, arriving after a later one's: it says what a log
    that no longer exists held, so it gets no data and moves nothing (Kafka's "stale fetch state update",
    KIP-903). The incarnation that sent it is gone; nobody reads the error."""
    resp.records = b""
    resp.high_watermark = -1
    resp.log_start_offset = -1
    resp.error_code = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    resp.error_message = (
        f"stale fetch of {tp} from broker {replica_id} at broker epoch {replica_epoch}: "
        f"it has fetched at epoch {known_epoch} since"
    )


__all__ = ["CONSUMER_REPLICA_ID", "FetchParams", "ReplicaManager"]
