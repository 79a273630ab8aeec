"""KIP-380 on the broker: a LEADER_AND_ISR stamped with another broker epoch was meant for an earlier
incarnation of this broker (it restarted before the controller heard) and is refused, changing nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from protocol.messages import LeaderAndIsrPartition, LeaderAndIsrRequest
from tests.broker.leader_fixtures import FOLLOWER_ID, LOCAL_ID, TOPIC, TP0, LeaderBroker
from tests.broker.test_topic_configs import CTX, broker_apis


def request(broker_epoch: int) -> LeaderAndIsrRequest:
    state = LeaderAndIsrPartition(
        TOPIC,
        TP0.partition,
        leader=LOCAL_ID,
        leader_epoch=3,
        isr=[LOCAL_ID, FOLLOWER_ID],
        partition_epoch=3,
        replicas=[LOCAL_ID, FOLLOWER_ID],
    )
    return LeaderAndIsrRequest(controller_id=3000, controller_epoch=1, partitions=[state], broker_epoch=broker_epoch)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("own_epoch", [-1, 120], ids=["not-registered-yet", "registered-again"])
async def test_leader_and_isr_for_an_earlier_incarnation_is_refused_and_changes_nothing(
    tmp_path: Path, own_epoch: int
) -> None:
    broker = LeaderBroker(tmp_path)
    apis = broker_apis(broker)
    apis.broker_epoch = lambda: own_epoch
    try:
        response = await apis.handle_leader_and_isr(CTX, request(broker_epoch=40))
        assert response.error_code == ErrorCode.STALE_BROKER_EPOCH
        assert "40" in (response.error_message or "")
        assert TP0 not in broker.replica_manager.partitions
    finally:
        broker.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("stamp", [120, -1], ids=["its-own-epoch", "unstamped"])
async def test_leader_and_isr_for_this_incarnation_is_obeyed(tmp_path: Path, stamp: int) -> None:
    broker = LeaderBroker(tmp_path)
    apis = broker_apis(broker)
    apis.broker_epoch = lambda: 120
    try:
        response = await apis.handle_leader_and_isr(CTX, request(broker_epoch=stamp))
        assert response.error_code == ErrorCode.NONE
        assert broker.partition(TP0).is_leader and broker.partition(TP0).leader_epoch == 3
    finally:
        broker.close()
