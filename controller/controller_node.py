"""A controller node: a voter of the metadata quorum that, while it leads, is the active controller.

`ControllerNode(config, time, transport, storage, rng)` is built only from its collaborators: it reads no
clock, opens no socket and draws no random number except through them, so the same class runs in the
controller process (controller_server.py puts a socket server around it) and in the simulator.

How this works
--------------
Every controller keeps the replicated metadata log, `__cluster_metadata-0` (raft/), and an image of what
its committed records say (controller/controller.py's `Controller` and its control managers). One of the
voters is the quorum's leader; once its image holds every record committed before its epoch began, it is
the *active controller* (Kafka's QuorumController in its active state):

* brokers' requests (BROKER_REGISTRATION, BROKER_HEARTBEAT, ALTER_PARTITION, ALLOCATE_PRODUCER_IDS) and
  the admin requests brokers forward (CREATE_TOPICS, DELETE_TOPICS, INCREMENTAL_ALTER_CONFIGS, ...) run as
  commands, one at a time, and so does a `tick` every `controller.tick.ms` that fences brokers whose session
  expired and elects new leaders;
* a command's records are appended to the log as it runs and replayed into the image at once, so its next
  step sees them; the command is answered, and the next one runs, only once the quorum has committed them.
  No answer, and no other command, ever sees an uncommitted record;
* if the node stops leading with records not yet committed, its image goes back to the committed log and
  the command's caller gets NOT_CONTROLLER: the records may still be committed by the next leader (they are
  in a majority's log) or dropped, as a Kafka client's request to a failing controller may.

Every other controller answers those requests with NOT_CONTROLLER, naming the leader it knows; it applies
what the leader commits as it learns of it, so it can take over with an up-to-date image. Nobody pushes
anything to brokers: each broker replicates the same log as an observer and applies it
(broker/metadata_publisher.py). The quorum's own requests (VOTE, BEGIN/END_QUORUM_EPOCH, FETCH of the
metadata log, FETCH_SNAPSHOT) go to the raft client; DESCRIBE_QUORUM and METADATA anyone may send.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from controller.controller import Controller, ControllerResult
from controller.controller_config import ControllerConfig
from metadata.image import MetadataImage
from metadata.records import MetadataRecord, decode_record, encode_record
from network.request_context import ConnectionContext, api_versions_response, authenticate, check_secret
from protocol.codec import Message
from protocol.errors import ErrorCode
from protocol.messages import (
    AllocateProducerIdsRequest,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    ApiVersionsRequest,
    BeginQuorumEpochRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeQuorumRequest,
    ElectLeadersRequest,
    EndQuorumEpochRequest,
    ErrorResponse,
    FetchRequest,
    FetchSnapshotRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
    MetadataRequest,
    MetadataResponse,
    RequestHeader,
    SaslAuthenticateRequest,
    VoteRequest,
)
from protocol.transport import Transport
from raft.quorum_config import QuorumConfig
from raft.quorum_state import QuorumStateStore
from raft.raft_client import NotLeaderError, RaftClient
from raft.replicated_log import LogBatch, ReplicatedLog, Snapshot
from server_common.config import parse_host_port
from server_common.replication_observer import NO_OBSERVER, ReplicationObserver
from server_common.time import Time
from storage.storage import OS_STORAGE, Storage

log = logging.getLogger(__name__)

_PURE_KEYS = set(ControllerConfig.KEYS)


def quorum_config(config: dict[str, Any]) -> QuorumConfig:
    """The node's quorum: `controller.quorum.voters`, or, when unset, a quorum of this node alone."""
    properties = dict(config)
    if not properties.get("controller.quorum.voters"):
        host, port = parse_host_port(config["listeners"], "listeners")
        properties["controller.quorum.voters"] = f"{config['node.id']}@{host}:{port}"
    return QuorumConfig.from_properties(properties)


class ControllerNode:
    def __init__(
        self,
        config: dict[str, Any],
        time: Time,
        transport: Transport,
        storage: Storage = OS_STORAGE,
        rng: random.Random | None = None,
        observer: ReplicationObserver = NO_OBSERVER,
    ) -> None:
        self.config = config
        self.time = time
        self.node_id: int = config["node.id"]
        self.secret: str | None = config.get("cluster.secret")
        self.quorum = quorum_config(config)
        if self.node_id not in self.quorum.voters:
            raise ValueError(
                f"node.id {self.node_id} is not among controller.quorum.voters {sorted(self.quorum.voters)}"
            )
        data_dir = Path(config["metadata.log.dir"])
        data_dir.mkdir(parents=True, exist_ok=True)
        pure = {k: v for k, v in config.items() if k in _PURE_KEYS}
        self.controller = Controller(ControllerConfig.from_properties(pure), time, writer=self)
        # `observer` (server_common/replication_observer.py) hears the quorum's elections and commits and
        # the log's truncations: the simulator's checker; nobody in a controller process.
        self.raft_log = ReplicatedLog(data_dir, time, storage, self.quorum.segment_bytes, observer)
        # The quorum's messages and nothing else go over this transport: to voters by id.
        self.transport = transport
        self.raft = RaftClient(
            self.node_id,
            self.quorum,
            self.raft_log,
            QuorumStateStore(data_dir),
            time,
            transport,
            rng if rng is not None else random.Random(),
            listener=self,
            observer=observer,
        )
        self.active = False
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Called when this node becomes or stops being the active controller (the simulator listens).
        self.on_active_change: Callable[[bool], None] = lambda active: None
        #: Called with each committed batch's records, its last offset and the image after it (the simulator's
        #: checker listens): the batches this node appended too, once committed.
        self.on_commit: Callable[[list[MetadataRecord], int, MetadataImage], None] = lambda records, offset, image: None
        # Requests the active controller runs as commands (after the cluster secret check).
        self._commands: dict[type, Callable[[Any, int], ControllerResult[Any]]] = {
            BrokerRegistrationRequest: self.controller.register_broker,
            BrokerHeartbeatRequest: self.controller.heartbeat,
            AllocateProducerIdsRequest: lambda request, _now: self.controller.allocate_producer_ids(request),
            CreateTopicsRequest: lambda request, _now: self.controller.create_topics(request),
            DeleteTopicsRequest: lambda request, _now: self.controller.delete_topics(request),
            CreatePartitionsRequest: lambda request, _now: self.controller.create_partitions(request),
            IncrementalAlterConfigsRequest: lambda request, _now: self.controller.incremental_alter_configs(request),
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
            DescribeQuorumRequest: self._describe_quorum,
        }

    # -- the writer the control managers commit through (controller/metadata_log.py) ----------------

    @property
    def next_offset(self) -> int:
        return self.raft_log.log_end_offset

    def append(self, records: Sequence[MetadataRecord]) -> int:
        return self.raft.append([encode_record(r) for r in records])

    # -- what the quorum commits (raft/raft_client.py's listener) ----------------------------------------

    def handle_commit(self, batches: list[LogBatch]) -> None:
        for batch in batches:
            if batch.is_control:
                self.controller.skip_to(batch.last_offset)
                continue
            records = [decode_record(v) for v in batch.values]
            if batch.last_offset > self.controller.last_offset:
                self.controller.replay(records, batch.last_offset)
            # else: our own, replayed when this node appended it (the next command waited for this commit)
            self.on_commit(records, batch.last_offset, self.controller.image)
        if self.raft.snapshot_due and self.controller.last_offset < self.raft.delivered_offset:
            self.raft.write_snapshot([encode_record(r) for r in self.controller.image.to_records()])
        self._maybe_activate()

    def handle_load_snapshot(self, snapshot: Snapshot) -> None:
        image = MetadataImage()
        for value in snapshot.values:
            image.replay(decode_record(value))
        self.controller.reset(image, snapshot.end_offset - 1)

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        if leader_id != self.node_id:
            self._deactivate()
        else:
            self._maybe_activate()

    def _maybe_activate(self) -> None:
        """Active once this node leads and its image holds everything committed before its epoch began."""
        if self.active or not self.raft.is_leader:
            if self.active and not self.raft.is_leader:
                self._deactivate()
            return
        if self.raft.delivered_offset <= self.raft.epoch_start_offset:
            return
        self.active = True
        self.controller.activate()
        log.info("node %d is the active controller (epoch %d)", self.node_id, self.raft.epoch)
        self.on_active_change(True)

    def _deactivate(self) -> None:
        if not self.active:
            return
        self.active = False
        self.controller.deactivate()
        if self.controller.last_offset >= self.raft.delivered_offset:
            self._rebuild_committed_image()
        log.info("node %d is no longer the active controller", self.node_id)
        self.on_active_change(False)

    def _rebuild_committed_image(self) -> None:
        """Drop what was applied but never committed: the image again from the snapshot and the log up to
        what the quorum committed."""
        image = MetadataImage()
        snapshot = self.raft_log.read_snapshot()
        start = self.raft_log.log_start_offset
        if snapshot is not None:
            for value in snapshot.values:
                image.replay(decode_record(value))
            start = snapshot.end_offset
        last = start - 1
        for batch in self.raft_log.batches(start, self.raft.delivered_offset):
            if not batch.is_control:
                for value in batch.values:
                    image.replay(decode_record(value))
            last = batch.last_offset
        self.controller.reset(image, last)

    # -- requests -----------------------------------------------------------------------------------

    async def _api_versions(self, ctx: ConnectionContext, request: ApiVersionsRequest) -> Message:
        return api_versions_response()

    async def _metadata(self, ctx: ConnectionContext, request: MetadataRequest) -> Message:
        async with self._lock:  # an answer never shows a record not yet committed
            response: MetadataResponse = self.controller.metadata(request.topics)
        response.controller_id = self.raft.leader_id if self.raft.leader_id is not None else -1
        return response

    async def _describe_quorum(self, ctx: ConnectionContext, request: DescribeQuorumRequest) -> Message:
        return self.raft.describe()

    def not_controller(self) -> ErrorResponse:
        leader = self.raft.leader_id
        known = f"node {leader} leads the quorum" if leader is not None and leader != self.node_id else "no leader yet"
        return ErrorResponse(
            int(ErrorCode.NOT_CONTROLLER), f"node {self.node_id} is not the active controller ({known})"
        )

    async def handle(self, ctx: ConnectionContext, header: RequestHeader, body: Message) -> Message | None:
        open_handler = self._open.get(type(body))
        if open_handler is not None:
            return await open_handler(ctx, body)
        refused = check_secret(ctx, self.secret)
        if refused is not None:
            return refused
        if isinstance(body, FetchRequest):
            return await self.raft.handle_fetch(body)
        if isinstance(body, VoteRequest):
            return self.raft.handle_vote(body)
        if isinstance(body, BeginQuorumEpochRequest):
            return self.raft.handle_begin_quorum_epoch(body)
        if isinstance(body, EndQuorumEpochRequest):
            return self.raft.handle_end_quorum_epoch(body)
        if isinstance(body, FetchSnapshotRequest):
            return self.raft.handle_fetch_snapshot(body)
        command = self._commands.get(type(body))
        if command is None:
            return ErrorResponse(int(ErrorCode.INVALID_REQUEST), f"the controller does not serve {type(body).__name__}")
        return await self.run_command(lambda now: command(body, now))

    async def run_command(self, command: Callable[[int], ControllerResult[Any]]) -> Message:
        """Run a command as the active controller and answer once its records are committed."""
        async with self._lock:
            if not self.active:
                return self.not_controller()
            try:
                result = command(self.time.milliseconds())
            except NotLeaderError:
                self._deactivate()
                return self.not_controller()
            if result.records:
                try:
                    await self.raft.wait_committed(self.controller.last_offset)
                except NotLeaderError:
                    self._deactivate()
                    return self.not_controller()
            response: Message = result.response
            return response

    async def _tick_loop(self) -> None:
        period_s = self.config["controller.tick.ms"] / 1000.0
        while True:
            await self.time.sleep(period_s)
            if not self.active:
                continue
            try:
                await self.run_command(self.controller.tick)
            except Exception:
                log.exception("controller tick failed")

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            task.get_loop().call_exception_handler(
                {"message": f"controller task {task.get_name()} failed", "exception": task.exception(), "task": task}
            )

    def start(self) -> None:
        self.raft.start()
        tick = asyncio.get_running_loop().create_task(self._tick_loop(), name="controller-tick")
        self._tasks.add(tick)
        tick.add_done_callback(self._task_done)

    async def stop(self, graceful: bool = True) -> None:
        """Stop the tick and the quorum member (a leader stopping gracefully resigns first); close the links
        and the log. With `graceful` False, what SIGKILL leaves: everything committed is already durable."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.raft.close(graceful=graceful)
        await self.transport.close()
        if graceful:
            self.raft_log.close()
        else:
            self.raft_log.abandon()
