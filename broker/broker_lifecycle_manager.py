"""Broker lifecycle towards the controller: register, heartbeat, and controlled shutdown.

How this works
--------------
`run()` registers (BROKER_REGISTRATION, retried with backoff until the controller answers) and then
heartbeats every `broker.heartbeat.interval.ms`. The controller fences a broker whose heartbeats stop
for `broker.session.timeout.ms` and moves its leaderships; a heartbeat answered with STALE_BROKER_EPOCH
or BROKER_ID_NOT_REGISTERED (for instance after the controller restarted with a lost registration)
makes the broker register again with a new epoch. `controlled_shutdown()` heartbeats with
`want_shutdown` until the controller says every leadership moved away (`should_shutdown`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from protocol.errors import ErrorCode
from protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    OfflineReplica,
    TopicPartition,
)
from protocol.transport import NETWORK_ERRORS, Transport
from server_common.time import Time

log = logging.getLogger(__name__)


class BrokerLifecycleManager:
    def __init__(
        self,
        broker_id: int,
        advertised_host: str,
        advertised_port: int,
        transport: Transport,
        controller_id: int,
        time: Time,
        heartbeat_interval_ms: int = 2000,
        incarnation_id: str | None = None,
        listeners: dict[str, str] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.listeners = dict(listeners or {})
        self.host = advertised_host
        self.port = advertised_port
        self.transport = transport
        self.controller_id = controller_id
        self.time = time
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.incarnation_id = incarnation_id if incarnation_id is not None else uuid.uuid4().hex
        self.broker_epoch = -1
        self.is_fenced = True
        self.registered = asyncio.Event()
        self.heartbeats_sent = 0
        self.offline_replicas: Callable[[], list[TopicPartition]] = list  # what each heartbeat reports
        self.on_next_producer_id: Callable[[int], None] = lambda _next: None  # what each answer says of them

    async def register(self) -> int:
        backoff_s = 0.05
        while True:
            try:
                resp: BrokerRegistrationResponse = await self.transport.send(
                    self.controller_id,
                    BrokerRegistrationRequest(
                        self.broker_id, self.host, self.port, self.incarnation_id, listeners=self.listeners
                    ),
                )
                if resp.error_code == ErrorCode.NONE:
                    self.broker_epoch = resp.broker_epoch
                    self.registered.set()
                    log.info("registered with the controller, broker epoch %d", self.broker_epoch)
                    return self.broker_epoch
                log.warning("registration refused: %s %s", ErrorCode(resp.error_code).name, resp.error_message)
            except NETWORK_ERRORS as exc:
                log.info("controller not reachable yet (%s); retrying", exc)
            await self.time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 1.0)

    async def heartbeat(self, want_shutdown: bool = False) -> BrokerHeartbeatResponse | None:
        try:
            resp: BrokerHeartbeatResponse = await self.transport.send(
                self.controller_id,
                BrokerHeartbeatRequest(
                    self.broker_id,
                    self.broker_epoch,
                    want_shutdown=want_shutdown,
                    offline_replicas=[OfflineReplica(tp.topic, tp.partition) for tp in self.offline_replicas()],
                ),
            )
        except NETWORK_ERRORS as exc:
            log.info("heartbeat failed: %s", exc)
            return None
        self.heartbeats_sent += 1
        if resp.error_code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            log.warning("controller does not know broker epoch %d any more; registering again", self.broker_epoch)
            self.registered.clear()
            return resp
        if resp.error_code == ErrorCode.NONE:
            self.is_fenced = resp.is_fenced
            if resp.next_producer_id >= 0:
                self.on_next_producer_id(resp.next_producer_id)
        return resp

    async def next_producer_id(self) -> int | None:
        """A heartbeat sent now: the next producer id the controller will hand out (None if unanswered)."""
        resp = await self.heartbeat()
        if resp is None or resp.error_code != ErrorCode.NONE or resp.next_producer_id < 0:
            return None
        return resp.next_producer_id

    async def run(self) -> None:
        while True:
            if not self.registered.is_set():
                await self.register()
            await self.heartbeat()
            await self.time.sleep(self.heartbeat_interval_ms / 1000.0)

    async def controlled_shutdown(self, timeout_ms: int) -> bool:
        """Ask the controller to move our leaderships away; True once it says we may stop."""
        if not self.registered.is_set():
            return False
        deadline = self.time.hi_res_milliseconds() + timeout_ms
        while self.time.hi_res_milliseconds() < deadline:
            resp = await self.heartbeat(want_shutdown=True)
            if resp is not None and resp.should_shutdown:
                return True
            await self.time.sleep(min(self.heartbeat_interval_ms, 100) / 1000.0)
        return False
