"""A LEADER_AND_ISR or STOP_REPLICA naming many partitions is applied a slice at a time, with the event loop
let go in between (a broker creating or deleting hundreds of replicas at once must still send its
heartbeats), and one waits for the other in progress, so the two still take effect in arrival order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.kafka_apis import STATE_CHANGE_SLICE
from protocol.errors import ErrorCode
from protocol.messages import (
    EPOCH_DURING_DELETE,
    BrokerEndpoint,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    StopReplicaPartition,
    StopReplicaRequest,
    TopicPartition,
)
from tests.broker.leader_fixtures import FOLLOWER_ID, LOCAL_ID, LeaderBroker
from tests.broker.test_topic_configs import CTX, broker_apis

pytestmark = pytest.mark.timeout(30)

TOPIC = "many"
COUNT = 5 * STATE_CHANGE_SLICE + 3


def leader_and_isr(count: int = COUNT, controller_epoch: int = 1) -> LeaderAndIsrRequest:
    states = [
        LeaderAndIsrPartition(
            TOPIC,
            p,
            # every other partition led here, the rest followed (from a leader this test never starts)
            leader=LOCAL_ID if p % 2 == 0 else FOLLOWER_ID,
            leader_epoch=0,
            isr=[LOCAL_ID, FOLLOWER_ID],
            partition_epoch=0,
            replicas=[LOCAL_ID, FOLLOWER_ID],
        )
        for p in range(count)
    ]
    leaders = [BrokerEndpoint(FOLLOWER_ID, "127.0.0.1", 9)]
    return LeaderAndIsrRequest(
        controller_id=3000, controller_epoch=controller_epoch, partitions=states, live_leaders=leaders
    )


def delete(*partitions: int) -> StopReplicaRequest:
    """STOP_REPLICA deleting `partitions` (a topic deletion)."""
    items = [StopReplicaPartition(TOPIC, p, EPOCH_DURING_DELETE, delete_partition=True) for p in partitions]
    return StopReplicaRequest(controller_id=3000, controller_epoch=1, partitions=items)


async def watch_replicas(broker: LeaderBroker, seen: list[int]) -> None:
    """Note how many replicas the broker has each time this task gets the loop."""
    while True:
        seen.append(len(broker.replica_manager.partitions))
        await asyncio.sleep(0)


async def test_a_large_leader_and_isr_lets_the_loop_run_between_slices(tmp_path: Path) -> None:
    broker = LeaderBroker(tmp_path)
    apis = broker_apis(broker)
    seen: list[int] = []
    watcher = asyncio.create_task(watch_replicas(broker, seen))
    try:
        await asyncio.sleep(0)
        response = await apis.handle_leader_and_isr(CTX, leader_and_isr())
    finally:
        watcher.cancel()
        broker.close()
    assert response.error_code == ErrorCode.NONE
    assert [(r.partition, r.error_code) for r in response.partitions] == [(p, 0) for p in range(COUNT)]
    leaders = {tp.partition for tp, p in broker.replica_manager.partitions.items() if p.is_leader}
    assert leaders == set(range(0, COUNT, 2))
    added = [tp.partition for kind, arg in broker.fetcher_manager.calls if kind == "add" for tp in arg]
    assert sorted(added) == list(range(1, COUNT, 2))
    # the loop ran after each slice but the last, and saw each slice whole
    assert sorted(set(seen) - {0, COUNT}) == list(range(STATE_CHANGE_SLICE, COUNT, STATE_CHANGE_SLICE))
    # the metadata cache learnt every partition's state
    assert all(apis.metadata_cache.partitions.get(TopicPartition(TOPIC, p)) is not None for p in range(COUNT))


async def test_a_stop_replica_deleting_many_replicas_lets_the_loop_run_between_slices(tmp_path: Path) -> None:
    broker = LeaderBroker(tmp_path)
    apis = broker_apis(broker)
    seen: list[int] = []
    try:
        assert (await apis.handle_leader_and_isr(CTX, leader_and_isr())).error_code == ErrorCode.NONE
        watcher = asyncio.create_task(watch_replicas(broker, seen))
        await asyncio.sleep(0)
        response = await apis.handle_stop_replica(CTX, delete(*range(COUNT)))
        watcher.cancel()
    finally:
        broker.close()
    assert response.error_code == ErrorCode.NONE
    assert [(r.partition, r.error_code) for r in response.partitions] == [(p, 0) for p in range(COUNT)]
    assert not broker.replica_manager.partitions and not list(tmp_path.glob(f"{TOPIC}-*"))
    assert sorted(set(seen) - {0, COUNT}) == list(range(COUNT % STATE_CHANGE_SLICE, COUNT, STATE_CHANGE_SLICE))


async def test_stop_replica_waits_for_a_leader_and_isr_in_progress(tmp_path: Path) -> None:
    broker = LeaderBroker(tmp_path)
    apis = broker_apis(broker)
    last = TopicPartition(TOPIC, COUNT - 1)
    try:
        creating = asyncio.create_task(apis.handle_leader_and_isr(CTX, leader_and_isr()))
        await asyncio.sleep(0)  # the request's first slice runs, then lets the loop go
        assert len(broker.replica_manager.partitions) == STATE_CHANGE_SLICE
        # The controller deletes the last partition, after the LEADER_AND_ISR that creates it: the delete
        # must win, as it would had the first request been applied in one go.
        stopped = await apis.handle_stop_replica(CTX, delete(last.partition))
        assert creating.done() and creating.result().error_code == ErrorCode.NONE
        assert stopped.error_code == ErrorCode.NONE
        assert last not in broker.replica_manager.partitions
        assert last in broker.replica_manager.stopped_replicas
        assert len(broker.replica_manager.partitions) == COUNT - 1
        assert not (tmp_path / f"{TOPIC}-{last.partition}").exists()
    finally:
        broker.close()


async def test_a_stale_controller_epoch_changes_nothing_however_many_partitions(tmp_path: Path) -> None:
    broker = LeaderBroker(tmp_path)
    apis = broker_apis(broker)
    try:
        assert (await apis.handle_leader_and_isr(CTX, leader_and_isr(1, controller_epoch=5))).error_code == 0
        response = await apis.handle_leader_and_isr(CTX, leader_and_isr(controller_epoch=4))
        assert response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
        assert list(broker.replica_manager.partitions) == [TopicPartition(TOPIC, 0)]
    finally:
        broker.close()
