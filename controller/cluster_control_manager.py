"""Kafka's ClusterControlManager (with its BrokerHeartbeatManager): broker registration, heartbeats,
liveness and fencing.

How this works
--------------
Broker lifecycle (KRaft's, simplified):

    register ──▶ fenced ──first heartbeat──▶ unfenced ──want_shutdown──▶ controlled shutdown ──▶ fenced
                   ▲                            │                        (leads nothing: should_shutdown)
                   └──── no heartbeat for more than broker.session.timeout.ms ┘

* Every registration gets a new broker epoch (the offset of its record) and starts fenced. A
  registration from a new incarnation (the process restarted) also removes the broker from ISRs and
  leaderships, because a restarted process may have lost unflushed data (KIP-966). A retried
  registration of the same incarnation and endpoint is answered with the epoch it already has.
* Liveness is controller state, not metadata: a broker is fenced when `now_ms - last_contact_ms` is
  *greater than* `broker.session.timeout.ms` (at exactly the timeout it is still alive, as in Kafka's
  BrokerHeartbeatManager).
* Fencing a broker (timeout, new incarnation, `want_fence`) or putting it in controlled shutdown removes
  it from every ISR (never emptying one) and moves its leaderships (how: replication_control_manager.py).
* A fenced broker is unfenced by a heartbeat that shows it has caught up with the metadata log: its
  `current_metadata_offset` has reached its own registration record (KRaft's rule: a broker that has not
  seen its own registration does not know what it leads). Offline partitions whose ISR holds it then get
  it as leader (or any returning replica, with unclean election enabled).
* Liveness is the *active* controller's: a controller that becomes active (elected by the quorum, and
  caught up with the log) gives every unfenced broker a fresh session from its first command, so a
  failover fences nobody; a broker that stays silent for the session timeout after that is fenced.
"""

from __future__ import annotations

from controller.controller_config import ControllerConfig
from controller.metadata_log import MetadataLog
from controller.replication_control_manager import ReplicationControlManager
from metadata.image import BrokerRegistration
from metadata.records import (
    BrokerShutdownRecord,
    FenceBrokerRecord,
    MetadataRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from protocol.errors import ErrorCode
from protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    TopicPartition,
)


class ClusterControlManager:
    def __init__(self, config: ControllerConfig, log: MetadataLog, replication: ReplicationControlManager) -> None:
        self.config = config
        self._log = log
        self._replication = replication
        # broker id -> last time it showed it is alive (registration or heartbeat). Only brokers whose
        # session can still expire are here; a broker fenced by expiry leaves until it heartbeats.
        self._last_contact_ms: dict[int, int] = {}
        # Brokers whose session starts with the next now_ms we are given (activate()).
        self._sessions_to_start: set[int] = set()

    def register_broker(
        self, request: BrokerRegistrationRequest, now_ms: int, committed: list[MetadataRecord]
    ) -> BrokerRegistrationResponse:
        existing = self._log.image.brokers.get(request.broker_id)
        if existing is not None and _same_process(existing, request):
            self._last_contact_ms[request.broker_id] = now_ms
            return BrokerRegistrationResponse(broker_epoch=existing.broker_epoch)
        registration = RegisterBrokerRecord(
            broker_id=request.broker_id,
            broker_epoch=self._log.next_offset,  # the offset this record is about to get
            incarnation_id=request.incarnation_id,
            host=request.host,
            port=request.port,
            rack=request.rack,
            fenced=True,
            in_controlled_shutdown=False,
            listeners=dict(request.listeners),
        )
        changes = self._replication.removal_changes(request.broker_id) if existing is not None else []
        self._log.commit([registration, *changes], committed)
        self._last_contact_ms[request.broker_id] = now_ms
        return BrokerRegistrationResponse(broker_epoch=registration.broker_epoch)

    def heartbeat(
        self, request: BrokerHeartbeatRequest, now_ms: int, committed: list[MetadataRecord]
    ) -> BrokerHeartbeatResponse:
        broker = self._log.image.brokers.get(request.broker_id)
        if broker is None:
            return _heartbeat_error(ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {request.broker_id} is not registered")
        if request.broker_epoch != broker.broker_epoch:
            return _heartbeat_error(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {request.broker_id} has epoch {broker.broker_epoch}, not {request.broker_epoch}",
            )
        self._last_contact_ms[broker.broker_id] = now_ms
        caught_up = request.current_metadata_offset >= broker.broker_epoch
        offline = frozenset(TopicPartition(r.topic, r.partition) for r in request.offline_replicas)
        self._replication.take_offline_replicas(broker.broker_id, offline, committed)
        should_shutdown = False
        if request.want_shutdown or broker.in_controlled_shutdown:
            should_shutdown = self._controlled_shutdown(broker, committed)
        elif request.want_fence:
            self._fence(broker.broker_id, committed)
        elif broker.fenced and caught_up:
            self._unfence(broker.broker_id, committed)
        after = self._log.image.brokers[broker.broker_id]
        return BrokerHeartbeatResponse(
            is_caught_up=caught_up,
            is_fenced=after.fenced,
            should_shutdown=should_shutdown,
            next_producer_id=self._log.image.next_producer_id,
        )

    def fence_expired(self, now_ms: int, committed: list[MetadataRecord]) -> list[int]:
        """Fence every broker silent for more than broker.session.timeout.ms; answer their ids."""
        expired = sorted(
            broker_id
            for broker_id, last_contact_ms in self._last_contact_ms.items()
            if now_ms - last_contact_ms > self.config.broker_session_timeout_ms
        )
        for broker_id in expired:
            del self._last_contact_ms[broker_id]
            self._fence(broker_id, committed)
        return expired

    def activate(self) -> None:
        """This controller became the active one: every unfenced broker gets a fresh session, starting at
        the next command's time (its heartbeats went to the previous controller until now)."""
        self._last_contact_ms.clear()
        self._sessions_to_start = {b.broker_id for b in self._log.image.brokers.values() if not b.fenced}

    def deactivate(self) -> None:
        """Another controller is active: liveness is its business."""
        self._last_contact_ms.clear()
        self._sessions_to_start.clear()

    def start_sessions(self, now_ms: int) -> None:
        """Start the sessions `activate` left pending: they may expire from `now_ms` on."""
        for broker_id in self._sessions_to_start:
            self._last_contact_ms.setdefault(broker_id, now_ms)
        self._sessions_to_start.clear()

    def _controlled_shutdown(self, broker: BrokerRegistration, committed: list[MetadataRecord]) -> bool:
        """Move leaderships and ISR memberships away; True once the broker leads nothing.

        The heartbeat that moves leaderships answers False, like KRaft's CONTROLLED_SHUTDOWN state:
        the network layer gets until the next heartbeat to tell the new leaders before the old one stops.
        """
        led_before = bool(self._log.image.partitions_led_by(broker.broker_id))
        if not broker.in_controlled_shutdown:
            shutdown = BrokerShutdownRecord(broker.broker_id, broker.broker_epoch)
            self._log.commit([shutdown, *self._replication.removal_changes(broker.broker_id)], committed)
            if led_before:
                return False
        if self._log.image.partitions_led_by(broker.broker_id):
            return False
        self._fence(broker.broker_id, committed)
        return True

    def _fence(self, broker_id: int, committed: list[MetadataRecord]) -> None:
        broker = self._log.image.brokers[broker_id]
        fence: list[MetadataRecord] = [] if broker.fenced else [FenceBrokerRecord(broker_id, broker.broker_epoch)]
        self._log.commit([*fence, *self._replication.removal_changes(broker_id)], committed)

    def _unfence(self, broker_id: int, committed: list[MetadataRecord]) -> None:
        broker = self._log.image.brokers[broker_id]
        elections = self._replication.offline_partition_elections(broker_id)
        self._log.commit([UnfenceBrokerRecord(broker_id, broker.broker_epoch), *elections], committed)


def _same_process(existing: BrokerRegistration, request: BrokerRegistrationRequest) -> bool:
    return (
        existing.incarnation_id == request.incarnation_id
        and existing.host == request.host
        and existing.port == request.port
        and existing.rack == request.rack
    )


def _heartbeat_error(code: ErrorCode, message: str) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(
        is_caught_up=False, is_fenced=True, should_shutdown=False, error_code=code, error_message=message
    )
