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
from pathlib import Path
from typing import Any

from broker.broker_lifecycle_manager import ThreadRunner
from broker.broker_metrics import partition_records
from broker.broker_node import BrokerNode
from broker.kafka_wire_apis import KafkaWireApis
from broker.produce_ack_journal import ProduceAckJournal
from metrics import fields as f
from metrics.emitter import MetricsEmitter
from metrics.sink import sinks_from_config
from network.kafka_wire import KAFKA_WIRE
from network.listeners import MSGPACK_LISTENER, ListenerError, parse_listeners
from network.socket_server import SocketServer, wait_for_termination
from network.tcp_transport import TcpTransport
from raft.quorum_config import VotersError, parse_voters
from server_common.config import ConfigError
from server_common.loop_lag import LoopLagMonitor
from server_common.time import SYSTEM_TIME, Time

log = logging.getLogger(__name__)


class BrokerServer:
    """The process shell around a `BrokerNode`: TCP links, the socket server, metrics, the printed
    "listening" line. Everything a broker decides lives in the node."""

    def __init__(self, config: dict[str, Any], time: Time = SYSTEM_TIME) -> None:
        self.config = config
        self.time = time
        self.broker_id: int = config["broker.id"]
        try:
            self.listeners = parse_listeners(
                config["listeners"], config["listener.security.protocol.map"], config["inter.broker.listener.name"]
            )
            self.advertised = {
                listener.name: listener
                for listener in parse_listeners(
                    config.get("advertised.listeners") or "",
                    config["listener.security.protocol.map"],
                    config["inter.broker.listener.name"],
                    key="advertised.listeners",
                )
            }
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None
        self.listen_host, self.listen_port = self.listeners[0].host, self.listeners[0].port
        self.log_dir = Path(config["log.dirs"])
        self.stopped = asyncio.Event()
        secret = config.get("cluster.secret")
        for listener in self.listeners:
            if listener.security_protocol == "SASL_PLAINTEXT" and not secret:
                raise ConfigError(
                    f"listener {listener.name} uses SASL_PLAINTEXT, whose PLAIN password is cluster.secret: "
                    "set cluster.secret"
                )

        # The links to the controllers, by node id at the addresses controller.quorum.voters gives: one for
        # the metadata log's FETCHes, one for requests to the active controller (ALTER_PARTITION, forwarded
        # admin requests, producer-id blocks), and the heartbeat thread's own (made on that thread).
        controller: TcpTransport | None = None
        quorum: TcpTransport | None = None
        lifecycle_transport = None
        voters: dict[int, tuple[str, int]] = {}
        if config.get("controller.quorum.voters"):
            try:
                voters = parse_voters(config["controller.quorum.voters"])
            except VotersError as exc:
                raise ConfigError(str(exc)) from None

            def link(purpose: str) -> TcpTransport:
                return TcpTransport(
                    voters.get,
                    f"broker-{self.broker_id}-{purpose}",
                    secret,
                    timeout_ms=5000,
                    describe=lambda node_id: f"controller {node_id} at {voters.get(node_id)}",
                    local_address=config.get("local.address"),
                )

            controller, quorum = link("controller"), link("metadata")

            def lifecycle_transport() -> TcpTransport:
                return link("heartbeat")

        def fetcher_transport(fetcher_id: int) -> TcpTransport:
            def address(broker_id: int) -> tuple[str, int] | None:
                ep = self.node.metadata_cache.endpoint(broker_id)
                return None if ep is None else (ep.host, ep.port)

            return TcpTransport(
                address,
                f"broker-{self.broker_id}-fetcher-{fetcher_id}",
                secret,  # a leader with a cluster secret serves replica fetches to authenticated brokers only
                timeout_ms=config["replica.socket.timeout.ms"],
                describe=lambda broker_id: f"leader broker {broker_id}",
                local_address=config.get("local.address"),
            )

        self.node = BrokerNode(
            config,
            time,
            controller=controller,
            quorum=quorum,
            lifecycle_transport=lifecycle_transport,
            lifecycle_runner=ThreadRunner(f"broker-{self.broker_id}-lifecycle"),
            fetcher_transport=fetcher_transport,
        )
        journal = config.get("produce.ack.journal")
        try:
            self.ack_journal = ProduceAckJournal(journal) if journal else None
        except OSError as exc:
            raise ConfigError(f"produce.ack.journal: cannot open {journal}: {exc.strerror}") from None
        self.node.apis.ack_journal = self.ack_journal
        self.server = SocketServer.from_config(
            self.node.handle,
            self.listen_host,
            self.listen_port,
            config,
            max_queued_requests=config["queued.max.requests.per.connection"],
            max_in_flight=config["max.in.flight.requests.per.connection"],
        )
        # One Kafka-protocol server per Kafka listener, calling the same KafkaApis through KafkaWireApis.
        self.kafka_servers = {
            listener.name: SocketServer.from_config(
                KafkaWireApis(
                    self.node.apis,
                    listener.name,
                    self.node.group_coordinator,
                    offsets_topic_replication_factor=config["offsets.topic.replication.factor"],
                    auto_create_topics=config["auto.create.topics.enable"],
                    sasl_password=secret if listener.security_protocol == "SASL_PLAINTEXT" else None,
                    quorum_voters=voters,
                ).handle,
                listener.host,
                listener.port,
                config,
                max_queued_requests=config["queued.max.requests.per.connection"],
                max_in_flight=config["max.in.flight.requests.per.connection"],
                wire=KAFKA_WIRE,
                pre_auth_max_frame_bytes=(
                    config["sasl.server.max.receive.size"] if listener.security_protocol == "SASL_PLAINTEXT" else None
                ),
            )
            for listener in self.listeners[1:]
        }
        self.loop_lag = LoopLagMonitor()
        metrics_dir = config.get("metrics.dir") or str(self.log_dir.parent / "metrics")
        self.emitter = MetricsEmitter(
            self.broker_id,
            self._metrics_snapshot,
            sinks_from_config(config, self.broker_id, metrics_dir, time),
            time,
            interval_ms=config["metrics.interval.ms"],
        )

    def _metrics_snapshot(self, now_ms: int) -> list[dict[str, Any]]:
        node = self.node
        fetcher_stats = node.fetcher_manager.snapshot()
        records = partition_records(node.replica_manager, self.broker_id, node.started_ms, now_ms, fetcher_stats)
        max_lag = max((r[f.LAG_MESSAGES] or 0 for r in records if r[f.ROLE] == f.ROLE_FOLLOWER), default=0)
        loop_lag = self.loop_lag.take()
        records.append(
            {
                f.KIND: f.KIND_BROKER,
                f.TS_MS: now_ms,
                f.BROKER_ID: self.broker_id,
                f.BROKER_START_MS: node.started_ms,
                f.FETCH_PURGATORY_SIZE: node.fetch_purgatory.num_delayed,
                f.PRODUCE_PURGATORY_SIZE: node.produce_purgatory.num_delayed,
                f.ACTIVE_CONNECTIONS: self.server.stats.active_connections,
                f.REQUESTS: self.server.stats.requests_total,
                f.UNDER_REPLICATED_PARTITIONS: sum(1 for r in records if r.get(f.UNDER_REPLICATED)),
                f.MAX_LAG: max_lag,
                f.METRICS_DROPPED: self.emitter.dropped,
                f.LOOP_LAG_MAX_MS: round(loop_lag.max_ms, 1),
                f.LOOP_LAG_AVG_MS: round(loop_lag.avg_ms, 2),
                **self._metadata_fields(),
            }
        )
        return records

    def _metadata_fields(self) -> dict[str, Any]:
        raft, publisher = self.node.raft, self.node.metadata
        if raft is None or publisher is None:
            return {}
        lag_records, lag_ms = publisher.lag(raft.leader_high_watermark)
        return {
            f.METADATA_LEADER_ID: raft.leader_id if raft.leader_id is not None else -1,
            f.METADATA_LEADER_EPOCH: raft.epoch,
            f.METADATA_OFFSET: publisher.applied_offset,
            f.METADATA_LAG_RECORDS: lag_records,
            f.METADATA_LAG_MS: lag_ms,
        }

    # -- lifecycle ----------------------------------------------------------------------------------

    def _advertised(self, name: str, host: str, port: int) -> tuple[str, int]:
        listener = self.advertised.get(name)
        return (listener.host, listener.port) if listener is not None else (host, port)

    async def start(self) -> None:
        self.loop_lag.start()
        await self.server.start()
        for server in self.kafka_servers.values():
            await server.start()
        adv_host, adv_port = self._advertised(MSGPACK_LISTENER, self.listen_host, self.server.port)
        kafka_listeners = {
            name: "{}:{}".format(*self._advertised(name, server.host, server.port))
            for name, server in self.kafka_servers.items()
        }
        await self.node.start(adv_host, adv_port, kafka_listeners)
        self.emitter.start()
        print(
            json.dumps(
                {
                    "event": "listening",
                    f.BROKER_ID: self.broker_id,
                    "host": adv_host,
                    "port": self.server.port,
                    "listeners": kafka_listeners,
                }
            ),
            flush=True,
        )

    async def shutdown(self, controlled: bool = True) -> None:
        """Controlled shutdown first (leaderships move away), then stop accepting, let in-flight requests
        finish, stop fetchers and tasks, checkpoint high watermarks and close the logs cleanly."""
        log.info("broker %d shutting down (controlled=%s)", self.broker_id, controlled)
        if controlled:
            await self.node.controlled_shutdown()
        for server in [self.server, *self.kafka_servers.values()]:
            await server.stop_accepting()
        for server in [self.server, *self.kafka_servers.values()]:
            await server.close()
        await self.node.stop_tasks()
        with contextlib.suppress(Exception):
            await self.emitter.stop()
        self.loop_lag.stop()
        await self.node.close()
        if self.ack_journal is not None:
            self.ack_journal.close()
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
