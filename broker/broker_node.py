"""A broker node: everything a broker is, built only from its collaborators.

`BrokerNode(config, time, storage, rng, controller, quorum, fetcher_transport, observer)` wires the log
manager, replica manager, purgatories, fetchers, fetch sessions and request handlers, its copy of the
metadata log (an observer of the controllers' quorum, raft/, applied by broker/metadata_publisher.py), the
channel to the active controller (ALTER_PARTITION, forwarded admin requests, producer-id blocks), the
lifecycle manager (registration, heartbeats: on a thread of its own in a broker process) and the periodic
work (timer reapers, ISR expiration, HW checkpoints, retention). It reads no clock, opens no socket and
draws no random number except through what it is given, so the same class runs inside a broker process
(broker_server.py adds the socket server, signals, metrics and logging around it) and inside the
simulator (sim/, on virtual time, a simulated network and a disk that can lose what was never flushed),
where `observer` (server_common/replication_observer.py) tells the checker what the node's replication
does.

Requests come in through `handle(ctx, header, request)`; `start()` begins the periodic work and the
controller channel; `shutdown()` is the clean stop (controlled shutdown, fetchers stopped, HW checkpoint,
logs closed with their clean-shutdown marker); `crash()` is what SIGKILL does: every task stops where it
is and nothing more is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from broker.alter_partition_manager import AlterPartitionManager
from broker.broker_lifecycle_manager import BrokerLifecycleManager, LifecycleRunner, SameLoopRunner
from broker.controller_channel import ControllerChannel
from broker.fetch_session import FetchManager, FetchSessionCache
from broker.kafka_apis import KafkaApis
from broker.log_manager import LogManager
from broker.metadata_cache import MetadataCache
from broker.metadata_publisher import BrokerMetadataPublisher
from broker.producer_id_manager import ProducerIdManager
from broker.purgatory import DelayedOperationPurgatory
from broker.replica_manager import ReplicaManager
from broker.replication_quota import quota_manager_from_kafka_props
from broker.timer import SystemTimer, TimerReaper
from fetcher.partition_fetch_state import InitialFetchState
from fetcher.remote_leader_end_point import RemoteLeaderEndPoint, ibp_tuple
from fetcher.replica_fetcher import FetcherConfig
from fetcher.replica_fetcher_manager import ReplicaFetcherManager
from group_coordinator import OFFSETS_TOPIC, GroupConfig, GroupCoordinator
from network.request_context import ConnectionContext
from protocol.codec import Message
from protocol.errors import ErrorCode
from protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ErrorResponse,
    ListPartitionReassignmentsRequest,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
    TopicPartition,
)
from protocol.record_batch import build_batch, iter_headers, iter_records
from protocol.transport import NETWORK_ERRORS, Transport
from raft.quorum_config import QuorumConfig
from raft.quorum_state import QuorumStateStore
from raft.raft_client import RaftClient
from raft.replicated_log import ReplicatedLog
from server_common.replication_observer import NO_OBSERVER, ReplicationObserver
from server_common.time import Time
from storage.log import Log, LogConfig
from storage.producer_state import ProducerEntries
from storage.storage import OS_STORAGE, Storage

log = logging.getLogger(__name__)

GROUP_TICK_MS = 100  # how often the group coordinator checks sessions and join deadlines
OFFSETS_COMMIT_TIMEOUT_MS = 5000  # Kafka's offsets.commit.timeout.ms
LOAD_READ_BYTES = 1 << 20  # bytes per read while a new coordinator replays its partition
# Appends the group coordinator makes are the broker's own, not a client's.
INTERNAL_CONTEXT = ConnectionContext(-1, "group-coordinator", authenticated=True)

# Gives each fetcher its own link to leaders (Kafka: one connection per ReplicaFetcherThread).
FetcherTransportFactory = Callable[[int], Transport]
PRODUCER_ID_CATCH_UP_MS = 2000  # how long a PRODUCE with an unknown producer id waits for the metadata
ALLOCATE_PRODUCER_IDS_TIMEOUT_MS = 5000
FORWARD_CATCH_UP_MS = 5000  # how long a forwarded change waits for this broker's metadata to hold it
READ_ONLY_FORWARDS = (DescribeQuorumRequest, ListPartitionReassignmentsRequest)  # nothing to catch up with
LOOP_TICK_MS = 100  # the main loop's proof of life for the lifecycle thread
LOOP_STALL_SESSIONS = 5  # heartbeats stop once the main loop has not turned for this many session timeouts


class BrokerNode:
    def __init__(
        self,
        config: dict[str, Any],
        time: Time,
        *,
        controller: Transport | None,
        fetcher_transport: FetcherTransportFactory,
        quorum: Transport | None = None,
        lifecycle_transport: Callable[[], Transport] | None = None,
        lifecycle_runner: LifecycleRunner | None = None,
        storage: Storage = OS_STORAGE,
        rng: random.Random | None = None,
        observer: ReplicationObserver = NO_OBSERVER,
    ) -> None:
        """`controller`: the link to the controllers (by node id) for ALTER_PARTITION, forwarded admin requests
        and producer-id blocks; `quorum`: the one the metadata log is fetched over (default: `controller`);
        `lifecycle_transport`: builds the one registration and heartbeats use, where `lifecycle_runner` runs
        them (default: `controller`, on this loop). None for all of them: a standalone broker."""
        self.config = config
        self.time = time
        self.observer = observer  # told what the node's replication does, its metadata log's included
        self.broker_id: int = config["broker.id"]
        self.log_dir = Path(config["log.dirs"])
        self.started_ms = time.milliseconds()
        self.rng = rng if rng is not None else random.Random()
        self.storage = storage
        self.fetcher_transport = fetcher_transport
        self.quorum_config: QuorumConfig | None = (
            QuorumConfig.from_properties(config)
            if controller is not None and config.get("controller.quorum.voters")
            else None
        )
        self.controller_channel: ControllerChannel | None = None
        self.raft: RaftClient | None = None
        self.metadata: BrokerMetadataPublisher | None = None
        self._quorum_transport = quorum if quorum is not None else controller
        self._lifecycle_transport = (
            lifecycle_transport
            if lifecycle_transport is not None
            else ((lambda: controller) if controller is not None else None)
        )
        self.lifecycle_runner: LifecycleRunner = lifecycle_runner if lifecycle_runner is not None else SameLoopRunner()
        self.loop_tick_ms = time.milliseconds()  # when the main event loop last turned (read by the lifecycle)
        self._offline_replicas: list[TopicPartition] = []
        ibp_tuple(config["inter.broker.protocol.version"])  # a bad value fails at start, not at first fetch
        self._tasks: set[asyncio.Task[Any]] = set()
        self._checkpoint_write: asyncio.Future[None] | None = None

        set_keys = {k: v for k, v in config.items() if v is not None}
        self.log_manager = LogManager(
            self.log_dir,
            LogConfig.from_kafka_props(set_keys),
            time,
            storage,
            ProducerEntries(config["producer.state.max.entries"]),
            observer=observer,
        )
        self.fetch_timer = SystemTimer(time)
        self.produce_timer = SystemTimer(time)
        self.fetch_purgatory: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            "Fetch", self.fetch_timer, purge_interval=config["fetch.purgatory.purge.interval.requests"]
        )
        self.produce_purgatory: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            "Produce", self.produce_timer, purge_interval=config["producer.purgatory.purge.interval.requests"]
        )
        self.metadata_cache = MetadataCache(self.broker_id)
        self.alter_partition: AlterPartitionManager | None = None

        self.replica_manager = ReplicaManager(
            self.broker_id,
            self.log_manager,
            time,
            self.fetch_purgatory,
            self.produce_purgatory,
            replica_lag_time_max_ms=config["replica.lag.time.max.ms"],
            min_insync_replicas=config["min.insync.replicas"],
            observer=observer,
        )
        self.replica_manager.initial_fetch_state_factory = InitialFetchState
        if self.quorum_config is not None:
            # Live (unfenced, not shutting down) brokers are exactly those the metadata lists.
            self.replica_manager.is_broker_eligible = lambda b: b in self.metadata_cache.brokers
            self.replica_manager.broker_state = lambda b: self.metadata_cache.broker_states.get(b)
        self.fetcher_config = FetcherConfig.from_kafka_props(set_keys)
        # KIP-73 replication quotas: throttled out-of-sync replicas only (F18 follower side, L13 leader side).
        self.follower_quota = quota_manager_from_kafka_props(set_keys, "follower", time)
        self.leader_quota = quota_manager_from_kafka_props(set_keys, "leader", time)
        self.replica_manager.leader_quota = self.leader_quota
        self.fetcher_manager = ReplicaFetcherManager(
            self.broker_id,
            self.fetcher_config,
            self.replica_manager,
            self._leader_end_point,
            time,
            quota=self.follower_quota,
            broker_epoch=self._broker_epoch,
        )
        self.replica_manager.fetcher_manager = self.fetcher_manager
        self.fetch_manager = FetchManager(
            FetchSessionCache(config["max.incremental.fetch.session.cache.slots"], time=time, rng=self.rng), time
        )
        self.apis = KafkaApis(
            self.broker_id,
            self.replica_manager,
            self.metadata_cache,
            self.fetch_manager,
            time,
            cluster_secret=config.get("cluster.secret"),
        )
        self.apis.replication_quotas = {"leader": self.leader_quota, "follower": self.follower_quota}
        self.apis.broker_config = config
        # The group coordinator of the __consumer_offsets partitions this broker leads (Kafka's
        # GroupCoordinator): it is elected and resigns with those partitions, and writes through the log.
        self.group_coordinator = GroupCoordinator(
            self.broker_id,
            time,
            self._append_to_offsets_topic,
            GroupConfig(
                group_min_session_timeout_ms=config["group.min.session.timeout.ms"],
                group_max_session_timeout_ms=config["group.max.session.timeout.ms"],
                group_initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
                offsets_topic_num_partitions=config["offsets.topic.num.partitions"],
                offsets_retention_minutes=config["offsets.retention.minutes"],
                offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
                group_max_size=config["group.max.size"],
            ),
        )
        self.replica_manager.on_role_change = self._on_role_change
        if self.quorum_config is not None:
            assert controller is not None and self._quorum_transport is not None
            self._build_quorum_member(config, controller, self._quorum_transport)

    def _build_quorum_member(self, config: dict[str, Any], controller: Transport, quorum: Transport) -> None:
        """This broker's copy of the metadata log, what applies it, and the channel to the active controller."""
        assert self.quorum_config is not None
        metadata_dir = Path(config.get("metadata.log.dir") or self.log_dir)
        publisher = BrokerMetadataPublisher(
            self.broker_id,
            self.apis,
            self.log_manager,
            self.time,
            {
                "min.insync.replicas": str(config["min.insync.replicas"]),
                "unclean.leader.election.enable": str(config["unclean.leader.election.enable"]).lower(),
            },
        )
        self.metadata = publisher
        self.raft = RaftClient(
            self.broker_id,
            self.quorum_config,
            ReplicatedLog(metadata_dir, self.time, self.storage, self.quorum_config.segment_bytes, self.observer),
            QuorumStateStore(metadata_dir / "__cluster_metadata-0"),
            self.time,
            quorum,
            random.Random(self.rng.getrandbits(64)),
            publisher,
            self.observer,
        )
        raft = self.raft
        publisher.raft = raft
        # Kafka's BrokerServer installs its metadata publishers only once the controller has acknowledged the
        # registration (lifecycleManager.initialCatchUpFuture): a restarted broker's replicas fetch with its
        # new broker epoch from their first FETCH, never with none (KIP-903 could not tell that FETCH from
        # a late one of the earlier incarnation's).
        publisher.caught_up = lambda: raft.caught_up() and self._broker_epoch() >= 0
        raft.on_caught_up = publisher.wake
        self.controller_channel = ControllerChannel(
            controller,
            sorted(self.quorum_config.voters),
            self._leader,
            self.time,
            request_timeout_ms=self.config["controller.socket.timeout.ms"],
        )
        self.apis.forward_to_controller = self._forward_to_controller
        self.apis.producer_ids = ProducerIdManager(self._metadata_next_producer_id, self._allocate_producer_ids)
        publisher.on_next_producer_id = self.apis.producer_ids.note

    def _leader(self) -> int | None:
        return self.raft.leader_id if self.raft is not None else None

    def _broker_epoch(self) -> int:
        lifecycle = self.lifecycle_runner.lifecycle
        return lifecycle.broker_epoch if lifecycle is not None else -1

    @property
    def lifecycle(self) -> BrokerLifecycleManager | None:
        return self.lifecycle_runner.lifecycle

    async def _metadata_next_producer_id(self) -> int | None:
        """The next producer id no broker has, once this broker's metadata holds everything the quorum had
        committed when the active controller answered DESCRIBE_QUORUM (asked through the controller channel:
        the raft connection carries this broker's parked metadata FETCH, and a request behind it would wait
        out the FETCH's max wait); None when no controller answers in time."""
        if self.raft is None or self.metadata is None or self.controller_channel is None:
            return None
        if not await self._catch_up_with_quorum(PRODUCER_ID_CATCH_UP_MS):
            return None
        return self.metadata.next_producer_id

    async def _catch_up_with_quorum(self, timeout_ms: int) -> bool:
        """Whether this broker's metadata came to hold everything the quorum had committed when the active
        controller answered DESCRIBE_QUORUM, within `timeout_ms` for each of the two steps."""
        if self.raft is None or self.controller_channel is None:
            return False
        if self.raft.is_leader:
            return True
        try:
            answer: DescribeQuorumResponse = await self.controller_channel.send(-1, DescribeQuorumRequest(), timeout_ms)
        except NETWORK_ERRORS:
            return False
        if answer.error_code != ErrorCode.NONE:
            return False
        return await self.raft.wait_delivered(answer.high_watermark, timeout_ms)

    async def _allocate_producer_ids(self) -> tuple[int, int] | None:
        assert self.controller_channel is not None
        epoch = self._broker_epoch()
        if epoch < 0:
            return None
        try:
            response: AllocateProducerIdsResponse = await self.controller_channel.send(
                -1, AllocateProducerIdsRequest(self.broker_id, epoch), ALLOCATE_PRODUCER_IDS_TIMEOUT_MS
            )
        except NETWORK_ERRORS as exc:
            log.warning("no block of producer ids: no controller reachable (%s)", exc)
            return None
        if response.error_code != ErrorCode.NONE:
            log.warning("no block of producer ids: %s", response.error_message)
            return None
        log.info(
            "reserved producer ids %d..%d",
            response.producer_id_start,
            response.producer_id_start + response.producer_id_len - 1,
        )
        return response.producer_id_start, response.producer_id_len

    async def handle(self, ctx: ConnectionContext, header: RequestHeader, request: Message) -> Message | None:
        return await self.apis.handle(ctx, header, request)

    # -- the group coordinator's partitions ---------------------------------------------------------

    async def _append_to_offsets_topic(self, partition: int, records: list[tuple[bytes | None, bytes | None]]) -> int:
        """Append one batch to __consumer_offsets-`partition` as its leader, acks=all: Kafka's coordinator
        answers a commit only once the ISR has it, so a commit survives the coordinator's failover."""
        batch = build_batch(records, timestamp_ms=self.time.milliseconds())
        request = ProduceRequest(-1, OFFSETS_COMMIT_TIMEOUT_MS, [ProducePartition(OFFSETS_TOPIC, partition, batch)])
        response = await self.apis.handle_produce(INTERNAL_CONTEXT, request)
        if isinstance(response, ProduceResponse) and response.partitions:
            return response.partitions[0].error_code
        return response.error_code if isinstance(response, ErrorResponse) else int(ErrorCode.UNKNOWN_SERVER_ERROR)

    def _on_role_change(self, tp: TopicPartition) -> None:
        if tp.topic != OFFSETS_TOPIC:
            return
        partition = self.replica_manager.partitions.get(tp)
        if partition is not None and partition.is_leader:
            self._spawn(self.group_coordinator.on_elected(tp.partition, _records_of(partition.log)), f"load-{tp}")
        else:
            self.group_coordinator.on_resigned(tp.partition)

    # -- wiring helpers -----------------------------------------------------------------------------

    def _leader_end_point(self, leader_id: int, fetcher_id: int) -> RemoteLeaderEndPoint:
        return RemoteLeaderEndPoint(
            leader_id,
            self.fetcher_transport(fetcher_id),
            self.broker_id,
            socket_timeout_ms=self.config["replica.socket.timeout.ms"],
            inter_broker_protocol_version=self.config["inter.broker.protocol.version"],
        )

    async def _forward_to_controller(self, request: Any) -> Any:
        """An admin request to the active controller. A change it made is answered once this broker's own
        metadata has it, so the client that made it reads it back here (a DescribeConfigs after an
        IncrementalAlterConfigs, a Metadata after a CreateTopics); Kafka answers at once and leaves the
        client to see the change when the broker's image catches up. A broker that cannot catch up within
        FORWARD_CATCH_UP_MS answers anyway: the change is committed either way."""
        assert self.controller_channel is not None
        response = await self.controller_channel.send(-1, request, timeout_ms=30000)
        if not isinstance(request, READ_ONLY_FORWARDS):
            await self._catch_up_with_quorum(FORWARD_CATCH_UP_MS)
        return response

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # The loop's handler logs it (and a simulation fails the run on it).
            task.get_loop().call_exception_handler(
                {"message": f"background task {task.get_name()} failed", "exception": task.exception(), "task": task}
            )

    async def _offsets_retention_loop(self) -> None:
        """Kafka's offsets.retention.check.interval.ms: expired committed offsets get their tombstones."""
        while True:
            await self.time.sleep(max(self.config["offsets.retention.check.interval.ms"], 1) / 1000.0)
            try:
                await self.group_coordinator.expire_offsets()
            except Exception:
                log.exception("offsets retention failed")

    def _every(self, period_ms: int, action: Callable[[], object], name: str) -> None:
        async def loop() -> None:
            while True:
                await self.time.sleep(period_ms / 1000.0)
                try:
                    action()
                except Exception:
                    log.exception("periodic task %s failed", name)

        self._spawn(loop(), name)

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self, advertised_host: str, advertised_port: int, listeners: dict[str, str] | None = None) -> None:
        """Start the periodic work and, with a controller, register with it (with the advertised address of
        each Kafka listener in `listeners`) and begin heartbeating."""
        self.fetch_reaper = TimerReaper(self.fetch_timer, self.time, on_advance=self.fetch_purgatory.maybe_purge)
        self.produce_reaper = TimerReaper(self.produce_timer, self.time, on_advance=self.produce_purgatory.maybe_purge)
        await self.fetch_reaper.start()
        await self.produce_reaper.start()
        self._every(
            max(self.config["replica.lag.time.max.ms"] // 2, 10),
            self.replica_manager.maybe_shrink_isr,
            "isr-expiration",
        )
        self._spawn(self._checkpoint_loop(), "hw-checkpoint")
        self._every(GROUP_TICK_MS, lambda: self.group_coordinator.tick(self.time.milliseconds()), "group-coordinator")
        self._every(self.config["log.retention.check.interval.ms"], self.log_manager.cleanup_logs, "log-retention")
        self._spawn(self._offsets_retention_loop(), "offsets-retention")
        if self.quorum_config is not None:
            self._start_quorum_member(advertised_host, advertised_port, listeners)

    def _start_quorum_member(
        self, advertised_host: str, advertised_port: int, listeners: dict[str, str] | None
    ) -> None:
        assert self.raft is not None and self.metadata is not None and self.controller_channel is not None
        assert self.quorum_config is not None and self._lifecycle_transport is not None
        self.raft.start()
        self._spawn(self.metadata.run(), "metadata-publisher")
        self._every(LOOP_TICK_MS, self._tick, "loop-tick")
        voters = sorted(self.quorum_config.voters)
        make_transport = self._lifecycle_transport
        raft = self.raft
        publisher = self.metadata
        # "Stuck for good": far longer than any request may hold the loop, and than a busy machine's stalls.
        stall_ms = LOOP_STALL_SESSIONS * self.config["broker.session.timeout.ms"]
        incarnation = f"{self.rng.getrandbits(128):032x}"
        request_timeout_ms = self.config["controller.socket.timeout.ms"]

        def build() -> BrokerLifecycleManager:
            # Runs where the manager will run (a thread of its own in a broker process): its channel, and the
            # connections under it, belong to that event loop.
            channel = ControllerChannel(
                make_transport(), voters, lambda: raft.leader_id, self.time, request_timeout_ms=request_timeout_ms
            )
            lifecycle = BrokerLifecycleManager(
                self.broker_id,
                advertised_host,
                advertised_port,
                channel,
                self.time,
                heartbeat_interval_ms=self.config["broker.heartbeat.interval.ms"],
                incarnation_id=incarnation,
                listeners=listeners,
            )
            lifecycle.offline_replicas = lambda: self._offline_replicas
            lifecycle.metadata_offset = lambda: publisher.applied_offset
            lifecycle.loop_alive = lambda: self.time.milliseconds() - self.loop_tick_ms <= stall_ms
            return lifecycle

        self.lifecycle_runner.start(build)
        self.apis.broker_epoch = self._broker_epoch
        self.alter_partition = AlterPartitionManager(
            self.broker_id,
            self.controller_channel,
            -1,
            self._broker_epoch,
            self.replica_manager.on_isr_committed,
            self.replica_manager.on_isr_rejected,
            self.time,
        )
        self.replica_manager.isr_sink = self.alter_partition
        self._spawn(self.alter_partition.run(), "alter-partition")

    def _tick(self) -> None:
        """The main loop's proof of life, and the plain values the lifecycle thread sends in heartbeats."""
        self.loop_tick_ms = self.time.milliseconds()
        self._offline_replicas = self.replica_manager.offline_replicas()
        if self.metadata is not None and not self.metadata.first_publication.is_set() and self._broker_epoch() >= 0:
            self.metadata.wake()  # registered (on the lifecycle's thread): the first publication may go
        if self.apis.producer_ids is not None and self._broker_epoch() >= 0:
            self.apis.producer_ids.reserve_ahead()

    async def _checkpoint_loop(self) -> None:
        """HW checkpoint every replica.high.watermark.checkpoint.interval.ms. The snapshot is taken on the
        loop; the write (temp file, fsync, rename, fsync dir: 5-12 ms on a busy disk) runs through the
        storage's blocking runner so it never delays a request or an acks=all completion."""
        period_s = self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000.0
        failing = False  # a full or read-only disk fails every period: say so once, and again when it heals
        while True:
            await self.time.sleep(period_s)
            snapshot = self.log_manager.high_watermarks()
            self._checkpoint_write = asyncio.ensure_future(
                self.storage.run_blocking(functools.partial(self.log_manager.write_high_watermarks, snapshot))
            )
            try:
                await asyncio.shield(self._checkpoint_write)
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                if not failing:
                    log.error("high watermark checkpoint failed (reported once until it works again): %s", exc)
                failing = True
                continue
            except Exception:
                log.exception("high watermark checkpoint failed")
                continue
            if failing:
                log.info("high watermark checkpoint works again")
                failing = False

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move our leaderships away before stopping (controlled.shutdown.enable)."""
        if self.lifecycle is not None and self.config["controlled.shutdown.enable"]:
            timeout_ms = self.config["controlled.shutdown.timeout.ms"]
            moved = await self.lifecycle_runner.call(lambda lifecycle: lifecycle.controlled_shutdown(timeout_ms))
            log.info("controlled shutdown: leaderships moved away: %s", moved)

    async def stop_tasks(self) -> None:
        """Stop the fetchers, the quorum observer, the lifecycle manager and every periodic task."""
        await self.lifecycle_runner.stop()
        if self.raft is not None:
            await self.raft.close(graceful=False)
        await self.fetcher_manager.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.fetch_reaper.stop()
        await self.produce_reaper.stop()

    async def close(self) -> None:
        """After `stop_tasks`: close the controller link, finish the HW checkpoint, close the logs cleanly."""
        if self.controller_channel is not None:
            await self.controller_channel.close()
        if self.raft is not None:
            if self._quorum_transport is not None:
                await self._quorum_transport.close()
            self.raft.log.close()
        if self._checkpoint_write is not None:
            # A periodic write may still run in its thread: let it finish before the final one.
            with contextlib.suppress(Exception):
                await self._checkpoint_write
        self.log_manager.close()

    async def crash(self) -> None:
        """SIGKILL: every task stops where it is; nothing is flushed, checkpointed or marked clean."""
        await self.stop_tasks()
        if self.raft is not None:
            self.raft.log.abandon()
        self.log_manager.abandon()


def _records_of(log: Log) -> Iterator[tuple[bytes | None, bytes | None]]:
    """Every record of a log, in order, as (key, value): what a new coordinator replays. Read up to the
    log end, as Kafka's GroupMetadataManager loads, since this replica has just become the leader."""
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        chunk = log.read(offset, LOAD_READ_BYTES)
        next_offset = offset
        for header in iter_headers(chunk):
            next_offset = header.next_offset
        for record in iter_records(chunk):
            if record.offset >= offset:  # a read starts at the whole batch holding `offset`
                yield record.key, record.value
        if next_offset <= offset:
            return
        offset = next_offset
