"""One broker process: wires the log manager, replica manager, purgatories, fetchers, request handlers,
the socket server, the controller channel and the metrics emitter, and owns every task they run.

Lifecycle: `start()` opens the logs and the listener, then starts the background tasks (timer reapers,
ISR expiration, HW checkpoints, retention, controller heartbeats, ALTER_PARTITION sender, metrics) in one
TaskGroup-like owner; `shutdown()` (SIGTERM/SIGINT) first asks the controller to move our leaderships
away (controlled shutdown), then stops accepting, lets in-flight requests finish, stops fetchers,
checkpoints high watermarks and closes the logs cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from broker.alter_partition_manager import AlterPartitionManager
from broker.broker_lifecycle_manager import BrokerLifecycleManager
from broker.broker_metrics import partition_records
from broker.config import parse_host_port
from broker.fetch_session import FetchManager, FetchSessionCache
from broker.kafka_apis import KafkaApis
from broker.log.log import LogConfig
from broker.log_manager import LogManager
from broker.metadata_cache import MetadataCache
from broker.purgatory import DelayedOperationPurgatory
from broker.replica_manager import ReplicaManager
from broker.replication_quota import quota_manager_from_kafka_props
from broker.server import SocketServer, wait_for_termination
from broker.timer import SystemTimer, TimerReaper
from client.tcp_transport import TcpTransport, fixed_address
from fetcher.partition_fetch_state import InitialFetchState
from fetcher.remote_leader_end_point import RemoteLeaderEndPoint
from fetcher.replica_fetcher import FetcherConfig
from fetcher.replica_fetcher_manager import ReplicaFetcherManager
from metrics.emitter import MetricsEmitter
from metrics.sink import sinks_from_config
from protocol.messages import TopicPartition
from protocol.time import SYSTEM_TIME, Time

log = logging.getLogger(__name__)

CONTROLLER_DEFAULT_ID = 3000  # the controller's node.id unless controller.quorum.voters names one


class BrokerServer:
    def __init__(self, config: dict[str, Any], time: Time = SYSTEM_TIME) -> None:
        self.config = config
        self.time = time
        self.broker_id: int = config["broker.id"]
        self.listen_host, self.listen_port = parse_host_port(config["listeners"], "listeners")
        self.log_dir = Path(config["log.dirs"])
        self.started_ms = time.milliseconds()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._checkpoint_write: asyncio.Future[None] | None = None
        self.stopped = asyncio.Event()

        set_keys = {k: v for k, v in config.items() if v is not None}
        self.log_manager = LogManager(self.log_dir, LogConfig.from_kafka_props(set_keys), time)
        self.fetch_timer = SystemTimer(time)
        self.produce_timer = SystemTimer(time)
        self.fetch_purgatory: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            "Fetch", self.fetch_timer, purge_interval=config["fetch.purgatory.purge.interval.requests"]
        )
        self.produce_purgatory: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            "Produce", self.produce_timer, purge_interval=config["producer.purgatory.purge.interval.requests"]
        )
        self.metadata_cache = MetadataCache(self.broker_id)

        # The link to the controller: a transport that knows one node, the controller, at the address in
        # controller.quorum.voters (Kafka's "id@host:port"; the id may be left out).
        self.controller: TcpTransport | None = None
        self.controller_id = CONTROLLER_DEFAULT_ID
        self.lifecycle: BrokerLifecycleManager | None = None
        self.alter_partition: AlterPartitionManager | None = None
        voters = config.get("controller.quorum.voters")
        if voters:
            node, _, address = voters.rpartition("@")
            if node:
                self.controller_id = int(node)
            host, port = parse_host_port(address, "controller.quorum.voters")
            self.controller = TcpTransport(
                fixed_address(self.controller_id, host, port),
                f"broker-{self.broker_id}",
                config.get("cluster.secret"),
                describe=lambda _: f"the controller at {host}:{port}",
            )

        self.replica_manager = ReplicaManager(
            self.broker_id,
            self.log_manager,
            time,
            self.fetch_purgatory,
            self.produce_purgatory,
            replica_lag_time_max_ms=config["replica.lag.time.max.ms"],
            min_insync_replicas=config["min.insync.replicas"],
        )
        self.replica_manager.initial_fetch_state_factory = InitialFetchState
        if self.controller is not None:
            # Live (unfenced, not shutting down) brokers are exactly those the controller lists.
            self.replica_manager.is_broker_eligible = lambda b: b in self.metadata_cache.brokers
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
        )
        self.replica_manager.fetcher_manager = self.fetcher_manager
        self.fetch_manager = FetchManager(
            FetchSessionCache(config["max.incremental.fetch.session.cache.slots"], time=time), time
        )
        self.apis = KafkaApis(
            self.broker_id,
            self.replica_manager,
            self.metadata_cache,
            self.fetch_manager,
            time,
            cluster_secret=config.get("cluster.secret"),
            forward_to_controller=self._forward_to_controller if self.controller else None,
        )
        self.server = SocketServer.from_config(
            self.apis.handle,
            self.listen_host,
            self.listen_port,
            config,
            max_queued_requests=config["queued.max.requests.per.connection"],
            max_in_flight=config["max.in.flight.requests.per.connection"],
        )
        metrics_dir = config.get("metrics.dir") or str(self.log_dir.parent / "metrics")
        self.emitter = MetricsEmitter(
            self.broker_id,
            self._metrics_snapshot,
            sinks_from_config(config, self.broker_id, metrics_dir, time),
            time,
            interval_ms=config["metrics.interval.ms"],
        )

    # -- wiring helpers -----------------------------------------------------------------------------

    def _leader_end_point(self, leader_id: int, fetcher_id: int) -> RemoteLeaderEndPoint:
        def address(broker_id: int) -> tuple[str, int] | None:
            ep = self.metadata_cache.endpoint(broker_id)
            return None if ep is None else (ep.host, ep.port)

        socket_timeout_ms = self.config["replica.socket.timeout.ms"]
        transport = TcpTransport(
            address,
            f"broker-{self.broker_id}-fetcher-{fetcher_id}",
            # a leader with a cluster secret serves replica fetches to authenticated brokers only
            self.config.get("cluster.secret"),
            timeout_ms=socket_timeout_ms,
            describe=lambda broker_id: f"leader broker {broker_id}",
        )
        return RemoteLeaderEndPoint(leader_id, transport, self.broker_id, socket_timeout_ms=socket_timeout_ms)

    async def _forward_to_controller(self, request: Any) -> Any:
        assert self.controller is not None
        return await self.controller.send(self.controller_id, request, timeout_ms=30000)

    def _metrics_snapshot(self, now_ms: int) -> list[dict[str, Any]]:
        fetcher_stats = self.fetcher_manager.snapshot()
        records = partition_records(self.replica_manager, self.broker_id, self.started_ms, now_ms, fetcher_stats)
        max_lag = max((r["lag_messages"] or 0 for r in records if r["role"] == "follower"), default=0)
        records.append(
            {
                "kind": "broker",
                "ts_ms": now_ms,
                "broker_id": self.broker_id,
                "broker_start_ms": self.started_ms,
                "FetchPurgatorySize": self.fetch_purgatory.num_delayed,
                "ProducePurgatorySize": self.produce_purgatory.num_delayed,
                "ActiveConnections": self.server.stats.active_connections,
                "RequestsPerSec": self.server.stats.requests_total,
                "UnderReplicatedPartitions": sum(1 for r in records if r.get("under_replicated")),
                "MaxLag": max_lag,
                "MetricsDropped": self.emitter.dropped,
            }
        )
        return records

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

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

    async def start(self) -> None:
        self.fetch_reaper = TimerReaper(self.fetch_timer, self.time, on_advance=self.fetch_purgatory.maybe_purge)
        self.produce_reaper = TimerReaper(self.produce_timer, self.time, on_advance=self.produce_purgatory.maybe_purge)
        await self.fetch_reaper.start()
        await self.produce_reaper.start()
        await self.server.start()
        advertised = self.config.get("advertised.listeners")
        adv_host, adv_port = parse_host_port(advertised) if advertised else (self.listen_host, self.server.port)
        self._every(
            max(self.config["replica.lag.time.max.ms"] // 2, 10),
            self.replica_manager.maybe_shrink_isr,
            "isr-expiration",
        )
        self._spawn(self._checkpoint_loop(), "hw-checkpoint")
        self._every(self.config["log.retention.check.interval.ms"], self.log_manager.cleanup_logs, "log-retention")
        if self.controller is not None:
            self.lifecycle = BrokerLifecycleManager(
                self.broker_id,
                adv_host,
                adv_port,
                self.controller,
                self.controller_id,
                self.time,
                heartbeat_interval_ms=self.config["broker.heartbeat.interval.ms"],
            )
            self.lifecycle.offline_replicas = self.replica_manager.offline_replicas
            self.alter_partition = AlterPartitionManager(
                self.broker_id,
                self.controller,
                self.controller_id,
                lambda: self.lifecycle.broker_epoch if self.lifecycle else -1,
                self.replica_manager.on_isr_committed,
                self._on_isr_rejected,
                self.time,
            )
            self.replica_manager.isr_sink = self.alter_partition
            self._spawn(self.lifecycle.run(), "broker-lifecycle")
            self._spawn(self.alter_partition.run(), "alter-partition")
        self.emitter.start()
        print(
            json.dumps({"event": "listening", "broker_id": self.broker_id, "host": adv_host, "port": self.server.port}),
            flush=True,
        )

    async def _checkpoint_loop(self) -> None:
        """HW checkpoint every replica.high.watermark.checkpoint.interval.ms. The snapshot is taken on the
        loop; the write (temp file, fsync, rename, fsync dir: 5-12 ms on a busy disk) runs in a worker
        thread so it never delays a request or an acks=all completion."""
        period_s = self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000.0
        loop = asyncio.get_running_loop()
        failing = False  # a full or read-only disk fails every period: say so once, and again when it heals
        while True:
            await self.time.sleep(period_s)
            snapshot = self.log_manager.high_watermarks()
            self._checkpoint_write = loop.run_in_executor(None, self.log_manager.write_high_watermarks, snapshot)
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

    def _on_isr_rejected(self, tp: TopicPartition) -> None:
        partition = self.replica_manager.partitions.get(tp)
        if partition is not None:
            partition.clear_pending_isr()

    async def shutdown(self, controlled: bool = True) -> None:
        log.info("broker %d shutting down (controlled=%s)", self.broker_id, controlled)
        if controlled and self.lifecycle is not None and self.config["controlled.shutdown.enable"]:
            moved = await self.lifecycle.controlled_shutdown(self.config["controlled.shutdown.timeout.ms"])
            log.info("controlled shutdown: leaderships moved away: %s", moved)
        await self.server.stop_accepting()
        await self.server.close()
        await self.fetcher_manager.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.emitter.stop()
        await self.fetch_reaper.stop()
        await self.produce_reaper.stop()
        if self.controller is not None:
            await self.controller.close()
        if self._checkpoint_write is not None:
            # A periodic write may still run in its thread: let it finish before the final one.
            with contextlib.suppress(Exception):
                await self._checkpoint_write
        self.log_manager.close()
        self.stopped.set()
        log.info("broker %d stopped", self.broker_id)


async def run_broker(config: dict[str, Any]) -> None:
    """Run until SIGTERM/SIGINT, then shut down gracefully (controlled shutdown first)."""
    server = BrokerServer(config)
    await server.start()
    await wait_for_termination()
    await server.shutdown(controlled=True)


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
