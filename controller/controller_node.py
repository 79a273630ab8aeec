"""The controller node: the pure `Controller`, its durable store, a dispatch table, and the pushes to brokers.

`ControllerNode(config, time, transport)` is built only from its collaborators: it reads no clock and
opens no socket except through them, so the same class runs in the controller process
(controller_server.py puts a socket server around it) and in the simulator.

How this works
--------------
Requests arrive on the same framed protocol as the brokers'. Each controller command runs to completion
on the event loop (single-threaded, like KRaft's controller thread): BROKER_REGISTRATION,
BROKER_HEARTBEAT, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS,
ALTER_PARTITION, ALTER/LIST_PARTITION_REASSIGNMENTS, and a `tick` every `controller.tick.ms` that fences
brokers whose session expired and elects new leaders.
Whatever a command changed is pushed out:

* every active broker gets UPDATE_METADATA (the whole image: brokers, partitions, topic configs and the
  controller's defaults for them), so any broker answers METADATA and DESCRIBE_CONFIGS for any topic,
  applies a changed topic config to its logs and partitions, and followers find their leaders;
* every replica of a changed partition gets LEADER_AND_ISR with its new state; a broker that was just
  unfenced (a start or restart) gets its full state.

Each broker has one `BrokerChannel` that keeps the newest state per partition until the broker
acknowledges it, retrying with backoff while the broker is unreachable, so a lost push is never lost
state. Changes are pushed in commit order per broker, and a newer state for a partition replaces an
older one that was not sent yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from controller.controller import Controller, ControllerResult
from controller.controller_config import ControllerConfig
from controller.metadata_store import MetadataStore
from network.request_context import ConnectionContext, api_versions_response, authenticate, check_secret
from protocol.codec import Message
from protocol.errors import ErrorCode
from protocol.messages import (
    EPOCH_DURING_DELETE,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    ApiVersionsRequest,
    BrokerEndpoint,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    ErrorResponse,
    IncrementalAlterConfigsRequest,
    InitProducerIdRequest,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    ListPartitionReassignmentsRequest,
    MetadataRequest,
    RequestHeader,
    SaslAuthenticateRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    TopicPartition,
    UpdateMetadataRequest,
)
from protocol.transport import NETWORK_ERRORS, Transport
from server_common.time import Time

log = logging.getLogger(__name__)


_PURE_KEYS = set(ControllerConfig.KEYS)


class StaleBrokerEpochError(Exception):
    """The broker answered a push with STALE_BROKER_EPOCH: it restarted and has not registered again yet."""


#: What makes a push wait and try again: the broker unreachable, or not yet registered in its new life.
_PUSH_RETRIED: tuple[type[BaseException], ...] = (*NETWORK_ERRORS, StaleBrokerEpochError)


class BrokerChannel:
    """Delivers LEADER_AND_ISR / UPDATE_METADATA to one broker, retrying until acknowledged."""

    def __init__(self, node: ControllerNode, broker_id: int) -> None:
        self.node = node
        self.broker_id = broker_id
        self.pending: dict[TopicPartition, LeaderAndIsrPartition] = {}
        # Replicas of deleted topics to stop and delete, sent before any LEADER_AND_ISR (so a topic created
        # again under the same name starts from an empty log); kept until the broker acknowledges them, also
        # across a fenced spell, so a broker that was down when the topic went deletes its copy on return.
        self.pending_deletes: dict[TopicPartition, None] = {}
        self.metadata_dirty = True
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def enqueue(self, states: list[LeaderAndIsrPartition]) -> None:
        for s in states:
            tp = TopicPartition(s.topic, s.partition)
            # A replica assigned here again (a new reassignment took it back) must not be deleted by the
            # STOP_REPLICA of its removal if that has not gone yet: it would go first and empty a log the
            # leader may already count as in sync.
            self.pending_deletes.pop(tp, None)
            self.pending[tp] = s
        self.wakeup.set()

    def enqueue_deletes(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.pending.pop(tp, None)  # the state of a partition that no longer exists
            self.pending_deletes[tp] = None
        self.wakeup.set()

    def metadata_changed(self) -> None:
        self.metadata_dirty = True
        self.wakeup.set()

    async def run(self) -> None:
        backoff_s = 0.05
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            registration = self.node.controller.image.brokers.get(self.broker_id)
            if registration is None or registration.fenced:
                # Fenced or unknown: it gets its full state when it is unfenced. A broker in controlled
                # shutdown is still told, so it stops leading what moved away.
                continue
            send = self.node.transport.send
            try:
                if self.metadata_dirty:
                    self.metadata_dirty = False
                    await send(self.broker_id, self.node.update_metadata_request(), 5000)
                if self.pending_deletes:
                    deletes = list(self.pending_deletes)
                    stop = StopReplicaRequest(
                        controller_id=self.node.node_id,
                        controller_epoch=self.node.controller_epoch,
                        partitions=[
                            StopReplicaPartition(tp.topic, tp.partition, EPOCH_DURING_DELETE, delete_partition=True)
                            for tp in deletes
                        ],
                    )
                    stopped = await send(self.broker_id, stop, 5000)
                    if stopped.error_code != ErrorCode.NONE:
                        log.warning("broker %d refused STOP_REPLICA: %s", self.broker_id, stopped.error_message)
                    for tp in deletes:
                        self.pending_deletes.pop(tp, None)
                if self.pending:
                    batch, self.pending = self.pending, {}
                    request = LeaderAndIsrRequest(
                        controller_id=self.node.node_id,
                        controller_epoch=self.node.controller_epoch,
                        partitions=list(batch.values()),
                        live_leaders=self.node.live_endpoints(),
                        broker_epoch=registration.broker_epoch,
                    )
                    try:
                        resp = await send(self.broker_id, request, 5000)
                        if resp.error_code == ErrorCode.STALE_BROKER_EPOCH:
                            # A new incarnation answered before its registration reached us: keep the batch
                            # and retry; the registration fences it and its unfencing sends full state.
                            raise StaleBrokerEpochError(resp.error_message or "stale broker epoch")
                    except BaseException:
                        for tp, s in batch.items():
                            self.pending.setdefault(tp, s)
                        raise
                    if resp.error_code != ErrorCode.NONE:
                        log.warning("broker %d refused LEADER_AND_ISR: %s", self.broker_id, resp.error_message)
                backoff_s = 0.05
            except _PUSH_RETRIED as exc:
                self.metadata_dirty = True
                log.info("push to broker %d failed (%s); retrying in %.2fs", self.broker_id, exc, backoff_s)
                await self.node.time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 1.0)
                self.wakeup.set()


class ControllerNode:
    def __init__(self, config: dict[str, Any], time: Time, transport: Transport) -> None:
        self.config = config
        self.time = time
        self.node_id: int = config["node.id"]
        self.secret: str | None = config.get("cluster.secret")
        data_dir = Path(config["metadata.log.dir"])
        data_dir.mkdir(parents=True, exist_ok=True)
        self.controller_epoch = self._bump_controller_epoch(data_dir)
        pure = {k: v for k, v in config.items() if k in _PURE_KEYS}
        self.store = MetadataStore(data_dir)
        self.controller = Controller(ControllerConfig.from_properties(pure), time, self.store)
        self.channels: dict[int, BrokerChannel] = {}
        # The controller's pushes reach brokers by id (at the address they registered with, over TCP).
        self.transport = transport
        self._tasks: set[asyncio.Task[Any]] = set()
        # Requests the controller commits (after the cluster secret check), each a pure Controller command.
        self._commands: dict[type, Callable[[Any, int], ControllerResult[Any]]] = {
            BrokerRegistrationRequest: self.controller.register_broker,
            BrokerHeartbeatRequest: self.controller.heartbeat,
            CreateTopicsRequest: lambda request, _now: self.controller.create_topics(request),
            DeleteTopicsRequest: lambda request, _now: self.controller.delete_topics(request),
            CreatePartitionsRequest: lambda request, _now: self.controller.create_partitions(request),
            IncrementalAlterConfigsRequest: lambda request, _now: self.controller.incremental_alter_configs(request),
            InitProducerIdRequest: lambda request, _now: self.controller.init_producer_id(request),
            AlterPartitionReassignmentsRequest: lambda request, _now: self.controller.alter_partition_reassignments(
                request
            ),
            ListPartitionReassignmentsRequest: lambda request, _now: self.controller.list_partition_reassignments(
                request
            ),
            ElectLeadersRequest: lambda request, _now: self.controller.elect_leaders(request),
            AlterPartitionRequest: self.controller.alter_partition,
        }
        # Requests anyone may send.
        self._open: dict[type, Callable[[ConnectionContext, Any], Awaitable[Message]]] = {
            ApiVersionsRequest: self._api_versions,
            SaslAuthenticateRequest: lambda ctx, request: authenticate(ctx, self.secret, request),
            MetadataRequest: self._metadata,
        }

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        registration = self.controller.image.brokers.get(broker_id)
        return None if registration is None else (registration.host, registration.port)

    @staticmethod
    def _bump_controller_epoch(data_dir: Path) -> int:
        """A restarted controller gets a higher epoch, so brokers can tell its pushes from stale ones."""
        from server_common.storage import write_atomically

        path = data_dir / "controller-epoch"
        try:
            epoch = int(path.read_text().strip()) + 1
        except (OSError, ValueError):
            epoch = 1
        write_atomically(path, f"{epoch}\n".encode())
        return epoch

    # -- pushes -------------------------------------------------------------------------------------

    def live_endpoints(self) -> list[BrokerEndpoint]:
        return [b.endpoint() for b in self.controller.image.brokers.values() if b.is_active]

    def update_metadata_request(self) -> UpdateMetadataRequest:
        image = self.controller.image
        return UpdateMetadataRequest(
            controller_id=self.node_id,
            controller_epoch=self.controller_epoch,
            brokers=self.live_endpoints(),
            partitions=[p.to_leader_and_isr() for p in image.partitions.values()],
            topic_configs={name: dict(t.configs) for name, t in image.topics.items()},
            topic_config_defaults=self.controller.topic_config_defaults(),
            broker_configs={entity: dict(configs) for entity, configs in image.broker_configs.items()},
        )

    def _channel(self, broker_id: int) -> BrokerChannel:
        ch = self.channels.get(broker_id)
        if ch is None:
            ch = self.channels[broker_id] = BrokerChannel(self, broker_id)
            ch.task = asyncio.get_running_loop().create_task(ch.run(), name=f"push-broker-{broker_id}")
            self._tasks.add(ch.task)
            ch.task.add_done_callback(self._task_done)
        return ch

    def publish(self, result: ControllerResult[Any]) -> None:
        if not result.records:
            return
        for broker_id, tps in result.deleted_replicas.items():
            self._channel(broker_id).enqueue_deletes(tps)
        for broker_id in result.unfenced_brokers:
            self._channel(broker_id).enqueue(self.controller.leader_and_isr_for_broker(broker_id))
        for broker_id, states in result.leader_and_isr_by_broker().items():
            self._channel(broker_id).enqueue(states)
        for broker_id in self.controller.image.brokers:
            self._channel(broker_id).metadata_changed()

    # -- requests -----------------------------------------------------------------------------------

    async def _api_versions(self, ctx: ConnectionContext, request: ApiVersionsRequest) -> Message:
        return api_versions_response()

    async def _metadata(self, ctx: ConnectionContext, request: MetadataRequest) -> Message:
        return self.controller.metadata(request.topics)

    async def handle(self, ctx: ConnectionContext, header: RequestHeader, body: Message) -> Message | None:
        open_handler = self._open.get(type(body))
        if open_handler is not None:
            return await open_handler(ctx, body)
        refused = check_secret(ctx, self.secret)
        if refused is not None:
            return refused
        command = self._commands.get(type(body))
        if command is None:
            return ErrorResponse(int(ErrorCode.INVALID_REQUEST), f"the controller does not serve {type(body).__name__}")
        result = command(body, self.time.milliseconds())
        self.publish(result)
        return result.response  # type: ignore[no-any-return,unused-ignore]

    async def _tick_loop(self) -> None:
        period_s = self.config["controller.tick.ms"] / 1000.0
        while True:
            await self.time.sleep(period_s)
            try:
                self.publish(self.controller.tick(self.time.milliseconds()))
            except Exception:
                log.exception("controller tick failed")

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            task.get_loop().call_exception_handler(
                {"message": f"controller task {task.get_name()} failed", "exception": task.exception(), "task": task}
            )

    def start(self) -> None:
        tick = asyncio.get_running_loop().create_task(self._tick_loop(), name="controller-tick")
        self._tasks.add(tick)
        tick.add_done_callback(self._task_done)

    async def stop(self) -> None:
        """Stop the tick and every push; close the links and the store (also what a crash leaves: every
        committed change is already in the store)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.transport.close()
        self.store.close()
