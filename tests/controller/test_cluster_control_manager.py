"""ClusterControlManager on its own: registration, heartbeats and session expiry."""

from __future__ import annotations

from controller.cluster_control_manager import ClusterControlManager
from metadata.records import MetadataRecord
from protocol.errors import ErrorCode
from protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
from tests.controller.managers import Managers


def register(m: Managers, broker_id: int, now_ms: int, incarnation: str = "a") -> int:
    request = BrokerRegistrationRequest(broker_id=broker_id, host="127.0.0.1", port=9000, incarnation_id=incarnation)
    return m.cluster.register_broker(request, now_ms, []).broker_epoch


def test_a_registration_is_fenced_with_the_offset_of_its_record_as_epoch_until_it_heartbeats() -> None:
    m = Managers()
    committed: list[MetadataRecord] = []
    request = BrokerRegistrationRequest(broker_id=1, host="127.0.0.1", port=9000, incarnation_id="a")
    epoch = m.cluster.register_broker(request, 0, committed).broker_epoch
    assert epoch == m.log.last_offset == 0 and m.log.image.brokers[1].fenced
    response = m.cluster.heartbeat(BrokerHeartbeatRequest(broker_id=1, broker_epoch=epoch), 10, [])
    assert not response.is_fenced and not m.log.image.brokers[1].fenced


def test_a_heartbeat_with_another_epoch_is_stale_and_changes_nothing() -> None:
    m = Managers()
    epoch = register(m, 1, 0)
    committed: list[MetadataRecord] = []
    response = m.cluster.heartbeat(BrokerHeartbeatRequest(broker_id=1, broker_epoch=epoch + 7), 10, committed)
    assert response.error_code == ErrorCode.STALE_BROKER_EPOCH and response.is_fenced and committed == []


def test_a_session_expires_only_past_the_timeout_and_fences_the_broker_once() -> None:
    m = Managers()
    epoch = register(m, 1, 0)
    m.cluster.heartbeat(BrokerHeartbeatRequest(broker_id=1, broker_epoch=epoch), 0, [])
    assert m.cluster.fence_expired(1000, []) == []
    assert m.cluster.fence_expired(1001, []) == [1] and m.log.image.brokers[1].fenced
    assert m.cluster.fence_expired(5000, []) == []


def test_brokers_loaded_from_the_store_start_their_session_when_the_controller_is_first_given_the_time() -> None:
    m = Managers()
    m.live_brokers(1)
    loaded = ClusterControlManager(m.config, m.log, m.replication)  # as after a restart: broker 1 is in the image
    loaded.start_sessions(5000)
    assert loaded.fence_expired(6000, []) == []
    assert loaded.fence_expired(6001, []) == [1]
