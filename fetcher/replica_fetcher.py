"""A replica fetcher: one loop that keeps a set of follower partitions in step with one leader.

How this works
--------------
`do_work()` is one round: `maybe_truncate()` then `maybe_fetch()` (Kafka's AbstractFetcherThread).

Truncation. A partition added with a new leader epoch starts TRUNCATING at its local HW. If its log
knows its latest epoch and the leader answers OffsetsForLeaderEpoch, the fetcher asks the leader where
that epoch ends and truncates per `offset_truncation_state` (KIP-101/279); when the leader answers
with an epoch the follower does not have, the follower truncates to where its own smaller epoch ends
and asks again (multi-round). Otherwise the partition truncates to its HW. Then it is FETCHING.

Fetching. All ready partitions (FETCHING, not delayed, not throttled) go into one FETCH, built through
the fetch session. Each partition's answer is processed only if the partition still has the state the
request was built from (same fetch offset, still ready): anything that happened while the request
was in flight (removal, re-adding, a new epoch) makes the answer stale. Data is appended with the
leader's offsets and bytes, the follower HW becomes min(leader HW, LEO) and the log start follows the
leader's.

Errors. A failed request delays every partition by `replica.fetch.backoff.ms`; per-partition errors
delay that partition (NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH, corrupt data, ...), reset its
offset (OFFSET_OUT_OF_RANGE) or mark it failed (FENCED_LEADER_EPOCH at the current epoch, or any
exception from its log): a failed partition leaves the fetcher until the broker re-adds it, and the
others carry on. When nothing can be fetched the loop waits for the backoff, or until partitions are
added, so it never spins.

Only `run()` / `maybe_fetch()` / `maybe_truncate()` await; every state change happens between awaits,
so nothing else runs in the middle of one (the asyncio equivalent of Kafka's partition-map lock).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from fetcher.fetch_session_handler import FetchRequestData, FetchSessionHandler
from fetcher.fetcher_lag import FetcherLagStats, FollowerFetchStats
from fetcher.follower_log import AppendInfo, FollowerLog, FollowerReplicas
from fetcher.leader_end_point import NETWORK_ERRORS, LeaderEndPoint
from fetcher.partition_fetch_state import (
    InitialFetchState,
    PartitionFetchState,
    PartitionStates,
    ReplicaState,
)
from fetcher.replica_quota import ReplicaQuota
from protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    KafkaError,
    KafkaStorageError,
    UnexpectedAppendOffsetError,
)
from protocol.messages import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    ForgottenPartition,
    OffsetForLeaderEpochPartition,
    TopicPartition,
)
from server_common.time import Time
from storage.truncation import OffsetTruncationState, offset_truncation_state

log = logging.getLogger(__name__)

# Retrying the leader is the answer to these: it is moving, or behind us.
_RETRIABLE_LIST_OFFSETS_ERRORS = frozenset(
    {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER}
)


class IllegalStateError(RuntimeError):
    """The leader or the local log broke an invariant the fetcher relies on (Kafka's
    IllegalStateException): e.g. an answer for a partition that was not asked about."""


_KAFKA_NAMES = {
    "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
    "replica.fetch.min.bytes": "replica_fetch_min_bytes",
    "replica.fetch.max.bytes": "replica_fetch_max_bytes",
    "replica.fetch.response.max.bytes": "replica_fetch_response_max_bytes",
    "replica.fetch.backoff.ms": "replica_fetch_backoff_ms",
    "num.replica.fetchers": "num_replica_fetchers",
}


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 1000
    num_replica_fetchers: int = 1

    @classmethod
    def from_kafka_props(cls, props: Mapping[str, object]) -> FetcherConfig:
        """Read Kafka's dotted names; other keys are ignored (they belong to other components)."""
        values = {field: int(str(props[key])) for key, field in _KAFKA_NAMES.items() if key in props}
        config = cls(**values)
        if config.num_replica_fetchers < 1:
            raise ValueError("num.replica.fetchers must be >= 1")
        return config


class ReplicaFetcher:
    """Follows the partitions it was given from one leader. See the module docstring."""

    def __init__(
        self,
        name: str,
        fetcher_id: int,
        leader: LeaderEndPoint,
        replicas: FollowerReplicas,
        config: FetcherConfig,
        time: Time,
        broker_id: int,
        quota: ReplicaQuota | None = None,
        on_partitions_failed: Callable[[set[TopicPartition]], None] | None = None,
        broker_epoch: Callable[[], int] = lambda: -1,
    ) -> None:
        self.name = name
        self.fetcher_id = fetcher_id
        self.leader = leader
        self._replicas = replicas
        self._config = config
        self._time = time
        self._broker_id = broker_id
        self._quota = quota
        self._on_partitions_failed = on_partitions_failed
        self._broker_epoch = broker_epoch  # this broker's registration epoch, sent with every FETCH (KIP-903)
        self._states = PartitionStates()
        self._failed: set[TopicPartition] = set()
        self._session = FetchSessionHandler(leader.leader_broker_id)
        self._lag = FetcherLagStats()
        self._wakeup = asyncio.Event()
        self._stopping = False
        self.fetch_requests_sent = 0
        self.fetch_requests_failed = 0

    # -- membership -------------------------------------------------------------------------------

    def add_partitions(self, initial_states: Mapping[TopicPartition, InitialFetchState]) -> set[TopicPartition]:
        """Follow these partitions. A partition already followed at the same leader epoch keeps its
        state (no second truncation); otherwise it starts TRUNCATING at its initial offset."""
        now = self._time.milliseconds()
        for tp, initial in initial_states.items():
            self._failed.discard(tp)
            current = self._states.state_value(tp)
            if current is not None and current.current_leader_epoch == initial.current_leader_epoch:
                state = current
            else:
                state = self._initial_state(tp, initial)
            self._states.update_and_move_to_end(tp, state)
            self._lag.add(tp, now)
        self._wakeup.set()
        return set(initial_states)

    def _initial_state(self, tp: TopicPartition, initial: InitialFetchState) -> PartitionFetchState:
        """TRUNCATING at the initial offset (the HW); with truncation on fetch and a log that knows its
        latest epoch, FETCHING from the log end with that epoch instead: the leader's answer says whether
        the log diverges, and where to cut it (Kafka's Fetching state with lastFetchedEpoch)."""
        if self.leader.supports_truncate_on_fetch:
            try:
                follower_log = self._replicas.follower_log(tp)
                latest_epoch = follower_log.latest_epoch
                log_end = follower_log.log_end_offset
            except Exception:
                latest_epoch = None
            if latest_epoch is not None:
                return PartitionFetchState(
                    log_end, initial.current_leader_epoch, ReplicaState.FETCHING, last_fetched_epoch=latest_epoch
                )
        return PartitionFetchState(initial.init_offset, initial.current_leader_epoch, ReplicaState.TRUNCATING)

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionFetchState]:
        removed = self._states.remove_all(tps)
        self._lag.remove(removed)
        return removed

    def remove_all_partitions(self) -> dict[TopicPartition, PartitionFetchState]:
        removed = self._states.clear()
        self._lag.remove(removed)
        return removed

    @property
    def partition_count(self) -> int:
        return self._states.size()

    def partitions(self) -> set[TopicPartition]:
        return self._states.partition_set()

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self._states.state_value(tp)

    @property
    def failed_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._failed)

    @property
    def session(self) -> FetchSessionHandler:
        return self._session

    def lag_snapshot(self) -> dict[TopicPartition, FollowerFetchStats]:
        return self._lag.snapshot(self._time.milliseconds())

    @property
    def max_lag(self) -> int:
        return self._lag.max_lag

    # -- loop -------------------------------------------------------------------------------------

    async def do_work(self) -> None:
        await self.maybe_truncate()
        await self.maybe_fetch()

    async def run(self) -> None:
        """Loop `do_work` until `stop()` or cancellation. An unexpected error is logged and followed
        by a backoff, so a misbehaving leader cannot stop replication of the other partitions for good."""
        while not self._stopping:
            try:
                await self.do_work()
                # A leader that answers without suspending (in-process, or data always ready) must
                # not starve the rest of the event loop: yield once per round.
                await self._time.sleep(0)
            except Exception:
                log.exception("%s: error in fetcher loop", self.name)
                await self._await_backoff()

    def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()

    async def close(self) -> None:
        """Close the leader end point; its errors are logged, never raised (shutdown must finish)."""
        self.stop()
        try:
            await self.leader.close()
        except Exception:
            log.warning("%s: error closing the leader end point", self.name, exc_info=True)

    # -- truncation -------------------------------------------------------------------------------

    async def maybe_truncate(self) -> None:
        now = self._time.milliseconds()
        needs_reset: list[tuple[TopicPartition, PartitionFetchState]] = []
        with_epochs: dict[TopicPartition, OffsetForLeaderEpochPartition] = {}
        without_epochs: list[TopicPartition] = []
        failed: list[TopicPartition] = []
        for tp, state in self._states.items():
            if not state.is_truncating(now):
                continue
            if state.fetch_offset < 0:
                needs_reset.append((tp, state))
                continue
            try:
                latest_epoch = self._replicas.follower_log(tp).latest_epoch
            except Exception:
                log.exception("%s: cannot read the log of %s", self.name, tp)
                failed.append(tp)
                continue
            if latest_epoch is not None and self.leader.supports_offsets_for_leader_epoch:
                with_epochs[tp] = OffsetForLeaderEpochPartition(
                    tp.topic,
                    tp.partition,
                    leader_epoch=latest_epoch,
                    current_leader_epoch=state.current_leader_epoch,
                )
            else:
                without_epochs.append(tp)
        for tp in failed:
            self._mark_partition_failed(tp)
        for tp, state in needs_reset:
            await self._reset_initial_offset(tp, state)
        if with_epochs:
            await self._truncate_to_epoch_end_offsets(with_epochs)
        if without_epochs:
            self._truncate_to_high_watermark(without_epochs)

    async def _truncate_to_epoch_end_offsets(
        self, requested: dict[TopicPartition, OffsetForLeaderEpochPartition]
    ) -> None:
        try:
            end_offsets = await self.leader.fetch_epoch_end_offsets(list(requested.values()))
        except NETWORK_ERRORS as exc:
            log.info("%s: OffsetsForLeaderEpoch failed: %r", self.name, exc)
            end_offsets = {
                tp: EpochEndOffset(tp.topic, tp.partition, error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
                for tp in requested
            }
        unrequested = set(end_offsets) - set(requested)
        if unrequested:
            raise IllegalStateError(
                "leader replied with partitions not requested in OffsetsForLeaderEpoch: "
                f"{sorted(map(str, unrequested))}"
            )
        truncated: dict[TopicPartition, OffsetTruncationState] = {}
        errors: list[TopicPartition] = []  # in partition order: delaying moves each to the end
        for tp, end_offset in end_offsets.items():
            state = self._states.state_value(tp)
            request_epoch = requested[tp].current_leader_epoch
            if state is None or state.current_leader_epoch != request_epoch:
                # Removed, or re-added at another epoch, while the request was in flight: stale answer.
                continue
            code = _error_code(end_offset.error_code)
            if code is ErrorCode.NONE:
                try:
                    truncation = self.offset_truncation_state(tp, state, end_offset)
                except Exception:
                    log.exception("%s: cannot compute truncation offset of %s", self.name, tp)
                    self._mark_partition_failed(tp)
                    continue
                if self._do_truncate(tp, truncation):
                    truncated[tp] = truncation
            elif code is ErrorCode.FENCED_LEADER_EPOCH:
                if self._on_partition_fenced(tp, request_epoch):
                    errors.append(tp)
            else:
                log.info("%s: retrying OffsetsForLeaderEpoch of %s after error %s", self.name, tp, code.name)
                errors.append(tp)
        self._delay_partitions(errors)
        self._update_fetch_offset_and_maybe_mark_truncation_complete(truncated)

    def offset_truncation_state(
        self, tp: TopicPartition, state: PartitionFetchState, leader: EpochEndOffset
    ) -> OffsetTruncationState:
        """Where to truncate, given the leader's answer for our latest epoch (fetcher/truncation.py); with no
        epoch known to the leader, to the initial offset (our HW)."""
        return offset_truncation_state(
            self._replicas.follower_log(tp), state.fetch_offset, leader.leader_epoch, leader.end_offset
        )

    def _truncate_to_high_watermark(self, tps: list[TopicPartition]) -> None:
        now = self._time.milliseconds()
        truncated: dict[TopicPartition, OffsetTruncationState] = {}
        for tp in tps:
            state = self._states.state_value(tp)
            if state is None or not state.is_truncating(now):
                continue  # removed or changed while OffsetsForLeaderEpoch of other partitions was in flight
            truncation = OffsetTruncationState(state.fetch_offset, True)
            if self._do_truncate(tp, truncation):
                truncated[tp] = truncation
        self._update_fetch_offset_and_maybe_mark_truncation_complete(truncated)

    def _do_truncate(self, tp: TopicPartition, truncation: OffsetTruncationState) -> bool:
        try:
            follower_log = self._replicas.follower_log(tp)
            if truncation.offset < follower_log.high_watermark:
                log.info(
                    "%s: truncating %s to %d, below its HW %d",
                    self.name,
                    tp,
                    truncation.offset,
                    follower_log.high_watermark,
                )
            follower_log.truncate_to(truncation.offset)
        except Exception:
            log.exception("%s: truncation of %s to %d failed", self.name, tp, truncation.offset)
            self._mark_partition_failed(tp)
            return False
        return True

    def _update_fetch_offset_and_maybe_mark_truncation_complete(
        self, truncated: Mapping[TopicPartition, OffsetTruncationState]
    ) -> None:
        for tp, truncation in truncated.items():
            state = self._states.state_value(tp)
            if state is None:
                continue
            new_state = state.replace(
                fetch_offset=truncation.offset,
                state=ReplicaState.FETCHING if truncation.truncation_completed else ReplicaState.TRUNCATING,
                last_fetched_epoch=self._latest_epoch_or_none(tp),
            )
            self._states.update(tp, new_state)

    async def _reset_initial_offset(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        """A negative initial offset: find a valid one the out-of-range way, then truncate as usual."""
        if await self._handle_out_of_range(tp, state, state.current_leader_epoch):
            self._delay_partitions({tp})
            return
        current = self._states.state_value(tp)
        if current is not None and current.current_leader_epoch == state.current_leader_epoch:
            self._states.update(tp, current.replace(state=ReplicaState.TRUNCATING))

    # -- fetching ---------------------------------------------------------------------------------

    async def maybe_fetch(self) -> None:
        built = self._build_fetch()
        if built is None:
            await self._await_backoff()
            return
        data, request = built
        await self._process_fetch_request(data, request)

    def build_fetch(self) -> tuple[FetchRequestData, FetchRequest] | None:
        """The next FETCH and the session data it was built from; None when there is nothing to send."""
        return self._build_fetch()

    def _build_fetch(self) -> tuple[FetchRequestData, FetchRequest] | None:
        now = self._time.milliseconds()
        builder = self._session.new_builder()
        errors: list[TopicPartition] = []  # in partition order: delaying moves each to the end
        for tp, state in self._states.items():
            if not state.is_ready_for_fetch(now) or self._should_follower_throttle(tp, state):
                continue
            try:
                log_start_offset = self._replicas.follower_log(tp).log_start_offset
            except KafkaStorageError:
                errors.append(tp)  # the broker takes the partition away when it handles the storage failure
                continue
            builder.add(
                tp,
                FetchPartition(
                    tp.topic,
                    tp.partition,
                    state.fetch_offset,
                    self._config.replica_fetch_max_bytes,
                    log_start_offset=log_start_offset,
                    current_leader_epoch=state.current_leader_epoch,
                    last_fetched_epoch=(
                        state.last_fetched_epoch
                        if self.leader.supports_truncate_on_fetch and state.last_fetched_epoch is not None
                        else UNDEFINED_EPOCH
                    ),
                ),
            )
        data = builder.build()
        self._delay_partitions(errors)
        if not data.session_partitions and not data.to_forget:
            return None
        request = FetchRequest(
            replica_id=self._broker_id,
            replica_epoch=self._broker_epoch(),
            max_wait_ms=self._config.replica_fetch_wait_max_ms,
            min_bytes=self._config.replica_fetch_min_bytes,
            max_bytes=self._config.replica_fetch_response_max_bytes,
            partitions=list(data.to_send.values()),
            session_id=data.metadata.session_id,
            session_epoch=data.metadata.epoch,
            forgotten=[ForgottenPartition(tp.topic, tp.partition) for tp in data.to_forget],
        )
        return data, request

    def _should_follower_throttle(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        quota = self._quota
        return (
            quota is not None and not state.is_replica_in_sync and quota.is_throttled(tp) and quota.is_quota_exceeded()
        )

    async def _await_backoff(self) -> None:
        """Wait `replica.fetch.backoff.ms`, or less if partitions are added meanwhile."""
        self._wakeup.clear()
        sleeper = asyncio.ensure_future(self._time.sleep(self._config.replica_fetch_backoff_ms / 1000.0))
        waiter = asyncio.ensure_future(self._wakeup.wait())
        try:
            await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waiter):
                task.cancel()
            await asyncio.gather(sleeper, waiter, return_exceptions=True)

    async def _process_fetch_request(self, data: FetchRequestData, request: FetchRequest) -> None:
        try:
            response = await self.leader.fetch(request)
        except NETWORK_ERRORS as exc:
            self.fetch_requests_failed += 1
            self._session.handle_error(exc)
            if not self._stopping:
                log.info("%s: fetch from broker %d failed: %r", self.name, self.leader.leader_broker_id, exc)
                self._delay_partitions(self._states.partitions())
            return
        self.fetch_requests_sent += 1
        if not self._session.handle_response(response):
            self._on_unusable_response(data, response)
            return

        now = self._time.milliseconds()
        errors: list[TopicPartition] = []  # in partition order: delaying moves each to the end
        out_of_range: list[tuple[TopicPartition, PartitionFetchState, int]] = []
        for partition in response.partitions:
            tp = TopicPartition(partition.topic, partition.partition)
            state = self._states.state_value(tp)
            requested = data.session_partitions.get(tp)
            if (
                state is None
                or requested is None
                or requested.fetch_offset != state.fetch_offset
                or not state.is_ready_for_fetch(now)
            ):
                continue  # removed, re-added or truncated while the request was in flight
            code = _error_code(partition.error_code)
            if code is ErrorCode.NONE and partition.diverging_epoch != UNDEFINED_EPOCH:
                self._truncate_on_fetch(tp, state, partition)
            elif code is ErrorCode.NONE:
                if not self._process_partition_data(tp, state, partition, now):
                    errors.append(tp)
            elif code is ErrorCode.OFFSET_OUT_OF_RANGE:
                out_of_range.append((tp, state, requested.current_leader_epoch))
            elif code is ErrorCode.FENCED_LEADER_EPOCH:
                if self._on_partition_fenced(tp, requested.current_leader_epoch):
                    errors.append(tp)
            else:
                # UNKNOWN_LEADER_EPOCH (leader behind us), NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION
                # (leadership moving) and anything else: try again after the backoff.
                log.debug("%s: %s answered %s, retrying after backoff", self.name, tp, code.name)
                errors.append(tp)
        self._delay_partitions(errors)
        for tp, state, request_epoch in out_of_range:
            if await self._handle_out_of_range(tp, state, request_epoch):
                self._delay_partitions({tp})

    def _truncate_on_fetch(
        self, tp: TopicPartition, state: PartitionFetchState, partition: FetchPartitionResponse
    ) -> None:
        """The leader says our log diverges from its (epoch, end offset): truncate as an OffsetsForLeaderEpoch
        answer would make us, and fetch on from the new log end with the new latest epoch. If our epoch was
        not the leader's (KIP-279's multi-round case), the next fetch carries the smaller epoch and the
        leader checks again."""
        leader = EpochEndOffset(
            tp.topic, tp.partition, leader_epoch=partition.diverging_epoch, end_offset=partition.diverging_end_offset
        )
        try:
            if leader.end_offset == UNDEFINED_EPOCH_OFFSET:
                # The leader knows no epoch that old: what we hold below our HW is all we can vouch for.
                follower_log = self._replicas.follower_log(tp)
                truncation = OffsetTruncationState(min(follower_log.high_watermark, follower_log.log_end_offset), True)
            else:
                truncation = self.offset_truncation_state(tp, state, leader)
        except Exception:
            log.exception("%s: cannot compute the truncation offset of %s", self.name, tp)
            self._mark_partition_failed(tp)
            return
        log.info(
            "%s: %s diverges from the leader at epoch %d, end offset %d: truncating to %d",
            self.name,
            tp,
            partition.diverging_epoch,
            partition.diverging_end_offset,
            truncation.offset,
        )
        if not self._do_truncate(tp, truncation):
            return
        follower_log = self._replicas.follower_log(tp)
        self._states.update(
            tp,
            state.replace(
                fetch_offset=follower_log.log_end_offset,
                state=ReplicaState.FETCHING,
                last_fetched_epoch=follower_log.latest_epoch,
            ),
        )

    def _on_unusable_response(self, data: FetchRequestData, response: FetchResponse) -> None:
        code = _error_code(response.error_code)
        if code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            return  # the session handler turned the next request into a full one: send it right away
        # Any other top-level error, or a malformed response: back off rather than hammer the leader.
        log.info(
            "%s: unusable fetch response from broker %d (error %s)",
            self.name,
            self.leader.leader_broker_id,
            code.name,
        )
        self._delay_partitions(data.session_partitions)

    def _process_partition_data(
        self, tp: TopicPartition, state: PartitionFetchState, partition: FetchPartitionResponse, now_ms: int
    ) -> bool:
        """Append one partition's data. False: delay and retry (corrupt data); a partition whose log
        fails in any other way is marked failed."""
        try:
            follower_log = self._replicas.follower_log(tp)
            if state.fetch_offset != follower_log.log_end_offset:
                raise IllegalStateError(
                    f"offset mismatch for {tp}: fetch offset {state.fetch_offset}, "
                    f"log end offset {follower_log.log_end_offset}"
                )
            info = self._append(follower_log, partition.records) if partition.records else None
            follower_log.update_high_watermark(partition.high_watermark)
            if partition.log_start_offset >= 0:
                follower_log.maybe_increment_log_start_offset(partition.log_start_offset)
            latest_epoch = follower_log.latest_epoch
        except CorruptRecordError as exc:
            # Transient (a torn read on the leader, a flipped bit in flight): retry, do not fail.
            log.warning("%s: invalid records for %s at offset %d: %s", self.name, tp, state.fetch_offset, exc)
            return False
        except KafkaStorageError as exc:
            # The local replica went offline (the log said why, once); Kafka's fetcher marks it failed too.
            log.warning("%s: %s is offline here, not fetched any more: %s", self.name, tp, exc)
            self._mark_partition_failed(tp)
            return True
        except Exception:
            log.exception("%s: error processing data of %s at offset %d", self.name, tp, state.fetch_offset)
            self._mark_partition_failed(tp)
            return True
        valid_bytes = info.size_bytes if info is not None else 0
        next_offset = info.last_offset + 1 if info is not None and info.num_records > 0 else state.fetch_offset
        if valid_bytes > 0 and self._quota is not None and self._quota.is_throttled(tp):
            self._quota.record(valid_bytes)
        lag = self._lag.record_response(
            tp,
            next_offset,
            partition.high_watermark,
            valid_bytes,
            now_ms,
            leader_log_end_offset=partition.log_end_offset,
        )
        new_state = state.replace(
            fetch_offset=next_offset,
            lag=lag,
            state=ReplicaState.FETCHING,
            last_fetched_epoch=latest_epoch if valid_bytes > 0 else state.last_fetched_epoch,
        )
        if valid_bytes > 0:
            self._states.update_and_move_to_end(tp, new_state)  # fairness: served partitions go last
        else:
            self._states.update(tp, new_state)
        return True

    @staticmethod
    def _append(follower_log: FollowerLog, records: bytes) -> AppendInfo:
        try:
            return follower_log.append_as_follower(records)
        except UnexpectedAppendOffsetError as exc:
            end = follower_log.log_end_offset
            if end == follower_log.log_start_offset and exc.first_offset < end <= exc.last_offset:
                # The leader's log start falls inside the first batch we fetched into an empty log
                # (DeleteRecords on the leader): restart our log at that batch's base and append it whole.
                follower_log.truncate_fully_and_start_at(exc.first_offset)
                return follower_log.append_as_follower(records)
            raise

    # -- out of range -----------------------------------------------------------------------------

    async def _handle_out_of_range(self, tp: TopicPartition, state: PartitionFetchState, request_epoch: int) -> bool:
        """Reset the fetch offset from the leader's offsets. True: delay and retry."""
        try:
            new_state = await self._fetch_offset_and_truncate(tp, state)
        except KafkaError as exc:
            if exc.code is ErrorCode.FENCED_LEADER_EPOCH:
                return self._on_partition_fenced(tp, request_epoch)
            if exc.code not in _RETRIABLE_LIST_OFFSETS_ERRORS:
                log.exception("%s: error resetting the offset of %s", self.name, tp)
            else:
                log.info("%s: could not reset the offset of %s: %r; retrying", self.name, tp, exc)
            return True
        except Exception:
            log.exception("%s: error resetting the offset of %s", self.name, tp)
            return True
        if new_state is not None:
            self._states.update_and_move_to_end(tp, new_state)
        return False

    async def _fetch_offset_and_truncate(
        self, tp: TopicPartition, state: PartitionFetchState
    ) -> PartitionFetchState | None:
        """Kafka's fetchOffsetAndTruncate. None: the partition changed while we asked the leader."""
        follower_log = self._replicas.follower_log(tp)
        epoch = state.current_leader_epoch
        _, leader_end_offset = await self.leader.fetch_latest_offset(tp, epoch)
        if self._states.state_value(tp) is not state:
            return None
        now = self._time.milliseconds()
        if leader_end_offset < follower_log.log_end_offset:
            # The leader's log is shorter than ours (unclean election): cut our tail to its end.
            follower_log.truncate_to(leader_end_offset)
            self._lag.record_reset(tp, leader_end_offset, 0, now)
            return PartitionFetchState(
                leader_end_offset,
                epoch,
                ReplicaState.FETCHING,
                lag=0,
                last_fetched_epoch=follower_log.latest_epoch,
            )
        _, leader_start_offset = await self.leader.fetch_earliest_offset(tp, epoch)
        if self._states.state_value(tp) is not state:
            return None
        replica_end_offset = follower_log.log_end_offset
        offset_to_fetch = max(leader_start_offset, replica_end_offset)
        if leader_start_offset > replica_end_offset:
            # The leader deleted everything we have and more: start over at its log start.
            follower_log.truncate_fully_and_start_at(leader_start_offset)
        lag = max(0, leader_end_offset - offset_to_fetch)
        self._lag.record_reset(tp, offset_to_fetch, lag, self._time.milliseconds())
        return PartitionFetchState(
            offset_to_fetch,
            epoch,
            ReplicaState.FETCHING,
            lag=lag,
            last_fetched_epoch=follower_log.latest_epoch,
        )

    # -- errors -----------------------------------------------------------------------------------

    def _on_partition_fenced(self, tp: TopicPartition, request_epoch: int) -> bool:
        """FENCED_LEADER_EPOCH: fail the partition if our epoch is still the one that was fenced;
        if the broker already moved us to a newer epoch, just retry. True: delay and retry."""
        state = self._states.state_value(tp)
        if state is None:
            return False
        if request_epoch == state.current_leader_epoch:
            log.info("%s: %s is fenced at epoch %d; waiting for a new leader epoch", self.name, tp, request_epoch)
            self._mark_partition_failed(tp)
            return False
        return True

    def _mark_partition_failed(self, tp: TopicPartition) -> None:
        self._failed.add(tp)
        self.remove_partitions({tp})
        log.warning("%s: partition %s marked as failed", self.name, tp)
        if self._on_partitions_failed is not None:
            self._on_partitions_failed({tp})

    def _delay_partitions(self, tps: Iterable[TopicPartition]) -> None:
        now = self._time.milliseconds()
        until = now + self._config.replica_fetch_backoff_ms
        for tp in tps:
            state = self._states.state_value(tp)
            if state is not None and not state.is_delayed(now):
                self._states.update_and_move_to_end(tp, state.delayed_until(until))

    def _latest_epoch_or_none(self, tp: TopicPartition) -> int | None:
        try:
            return self._replicas.follower_log(tp).latest_epoch
        except KafkaError:
            return None

    def __repr__(self) -> str:
        leader_id = self.leader.leader_broker_id
        return f"ReplicaFetcher({self.name!r}, leader={leader_id}, partitions={self.partition_count})"


def _error_code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
