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


def test_a_registration_is_fenced_with_the_offset_of_its_record_as_epoch_until_it_heartbeats_caught_up() -> None:
    m = Managers()
    committed: list[MetadataRecord] = []
    request = BrokerRegistrationRequest(broker_id=1, host="127.0.0.1", port=9000, incarnation_id="a")
    epoch = m.cluster.register_broker(request, 0, committed).broker_epoch
    assert epoch == m.log.last_offset == 0 and m.log.image.brokers[1].fenced
    behind = m.cluster.heartbeat(BrokerHeartbeatRequest(1, epoch, current_metadata_offset=epoch - 1), 10, [])
    assert behind.is_fenced and not behind.is_caught_up and m.log.image.brokers[1].fenced
    response = m.cluster.heartbeat(BrokerHeartbeatRequest(1, epoch, current_metadata_offset=epoch), 10, [])
    assert not response.is_fenced and response.is_caught_up and not m.log.image.brokers[1].fenced


def test_a_broker_that_has_not_seen_its_own_registration_stays_fenced() -> None:
    """KRaft's rule: a broker whose metadata has not reached its registration record does not know what it
    leads (its partitions' states come after): it is unfenced only once it has."""
    m = Managers()
    m.live_brokers(2, 3)
    epoch = register(m, 1, 0)
    for offset in (-1, 0, epoch - 1):
        response = m.cluster.heartbeat(BrokerHeartbeatRequest(1, epoch, current_metadata_offset=offset), 10, [])
        assert response.is_fenced
    caught_up = BrokerHeartbeatRequest(1, epoch, current_metadata_offset=epoch + 5)
    assert not m.cluster.heartbeat(caught_up, 10, []).is_fenced


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


def test_a_controller_that_becomes_active_gives_every_live_broker_a_fresh_session() -> None:
    m = Managers()
    m.live_brokers(1)
    active = ClusterControlManager(m.config, m.log, m.replication)  # another controller, broker 1 in its image
    assert active.fence_expired(100_000, []) == []  # not active: liveness is not its business
    active.activate()
    active.start_sessions(5000)
    assert active.fence_expired(6000, []) == []
    assert active.fence_expired(6001, []) == [1]
