"""A leader whose proposal to add a follower to the ISR the controller refuses as INELIGIBLE_REPLICA does not
propose it again on every fetch, only once the follower's state changed (Kafka's AlterPartitionManager and
Partition.maybeExpandIsr): a broker whose replica is offline keeps fetching for as long as it runs, and
each of its fetches used to cost an ALTER_PARTITION round trip and a log line, 2.5 a second."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from broker.alter_partition_manager import AlterPartitionManager
from broker.partition import Partition
from protocol.errors import ErrorCode
from protocol.messages import (
    AlterPartitionItem,
    AlterPartitionItemResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
)
from tests.broker.leader_fixtures import FOLLOWER_ID, LOCAL_ID, TP0, LeaderBroker

FETCH_INTERVAL_MS = 400  # a follower with nothing new to fetch, as a live cluster showed: 2.5 fetches a second


class RefusingController:
    """ALTER_PARTITION's other end: refuses every new ISR member, as the controller does for a broker that
    reported the replica offline."""

    def __init__(self) -> None:
        self.items: list[AlterPartitionItem] = []

    async def send(self, broker_id: int, request: AlterPartitionRequest) -> AlterPartitionResponse:
        self.items.extend(request.partitions)
        return AlterPartitionResponse(
            [
                AlterPartitionItemResponse(
                    item.topic,
                    item.partition,
                    ErrorCode.INELIGIBLE_REPLICA,
                    f"brokers [{FOLLOWER_ID}] reported this replica offline",
                )
                for item in request.partitions
            ]
        )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LeaderBroker]:
    b = LeaderBroker(tmp_path / "broker-0")
    yield b
    b.close()


@contextlib.asynccontextmanager
async def leading(broker: LeaderBroker, controller: RefusingController) -> AsyncIterator[Partition]:
    """The broker leads TP0 alone with one record, its ISR proposals going to `controller` through a
    running AlterPartitionManager."""
    manager = AlterPartitionManager(
        LOCAL_ID,
        controller,  # type: ignore[arg-type]
        3000,
        lambda: 1,
        broker.replica_manager.on_isr_committed,
        broker.replica_manager.on_isr_rejected,
        broker.time,
    )
    broker.replica_manager.isr_sink = manager
    partition = broker.make_leader(isr=[LOCAL_ID])
    partition.isr_sink = manager
    await broker.produce(TP0, b"a")
    sender = asyncio.ensure_future(manager.run())
    try:
        yield partition
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)


async def test_an_ineligible_follower_is_proposed_once_until_its_broker_epoch_changes(broker: LeaderBroker) -> None:
    controller = RefusingController()
    async with leading(broker, controller) as partition:

        async def fetch_for(ms: int, broker_epoch: int) -> None:
            for _ in range(ms // FETCH_INTERVAL_MS):
                await broker.fetch(FOLLOWER_ID, {TP0: partition.log_end_offset}, replica_epoch=broker_epoch)
                for _ in range(5):  # let the sender ask the controller and apply its answer
                    await asyncio.sleep(0)
                broker.advance(FETCH_INTERVAL_MS)

        # when the caught-up follower (broker epoch 7) fetches for 30 s of virtual time, refused each time
        await fetch_for(30_000, broker_epoch=7)
        # then the leader proposed it once, not once per fetch
        assert len(controller.items) == 1, f"{len(controller.items)} proposals in 30 s"
        assert partition.isr == {LOCAL_ID} and partition.pending_isr is None

        # when the follower restarts (a new broker epoch: its replica is no longer the offline one)
        await fetch_for(2_000, broker_epoch=8)
        # then it is proposed again, once
        assert len(controller.items) == 2
        assert [m.broker_epoch for m in controller.items[-1].new_isr_with_epochs if m.broker_id == FOLLOWER_ID] == [8]

        # when a new leadership starts (LEADER_AND_ISR: the controller's view changed), the slate is clean too
        broker.make_leader(isr=[LOCAL_ID], leader_epoch=2)
        await fetch_for(2_000, broker_epoch=8)
        assert len(controller.items) == 3


class HeldRefusingController(RefusingController):
    """Refuses as RefusingController does, but answers only once `answer` is set: the proposal is in flight
    while the follower goes on fetching."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()
        self.asked = asyncio.Event()
        self.answered = asyncio.Event()

    async def send(self, broker_id: int, request: AlterPartitionRequest) -> AlterPartitionResponse:
        self.asked.set()
        await self.answer.wait()
        try:
            return await super().send(broker_id, request)
        finally:
            self.answered.set()


@pytest.mark.timeout(10)
async def test_a_refusal_holds_back_only_the_incarnation_it_named(broker: LeaderBroker) -> None:
    controller = HeldRefusingController()
    async with leading(broker, controller) as partition:
        # given a proposal naming the follower's broker epoch 3 (a late fetch of an earlier incarnation)
        await broker.fetch(FOLLOWER_ID, {TP0: partition.log_end_offset}, replica_epoch=3)
        await asyncio.wait_for(controller.asked.wait(), 5)
        controller.asked.clear()
        # when the follower's current incarnation (epoch 4) fetches before the controller refuses epoch 3
        await broker.fetch(FOLLOWER_ID, {TP0: partition.log_end_offset}, replica_epoch=4)
        controller.answer.set()
        await asyncio.wait_for(controller.answered.wait(), 5)
        for _ in range(5):  # the sender applies the answer
            await asyncio.sleep(0)
        assert partition.pending_isr is None
        # then the refusal is held against epoch 3, and epoch 4's next fetch is proposed: a refusal recorded
        # against the epoch fetched meanwhile kept a whole follower out of the ISR for good
        await broker.fetch(FOLLOWER_ID, {TP0: partition.log_end_offset}, replica_epoch=4)
        await asyncio.wait_for(controller.asked.wait(), 5)
        assert [m.broker_epoch for m in controller.items[0].new_isr_with_epochs if m.broker_id == FOLLOWER_ID] == [3]
        assert [m.broker_epoch for m in controller.items[1].new_isr_with_epochs if m.broker_id == FOLLOWER_ID] == [4]


@pytest.mark.timeout(10)
async def test_a_refused_follower_is_proposed_again_once_its_registration_changed(broker: LeaderBroker) -> None:
    # The follower's broker registered again (broker epoch 16) and fetched at once; our metadata still had
    # its earlier registration (epoch 3, unfenced) when the leader proposed it. The controller refused it as
    # fenced (the new registration, not yet caught up); our metadata then got the new registration, already
    # unfenced. Held against the fetch's broker epoch alone (16 throughout), the refusal kept a caught-up
    # follower out of the ISR for good (simulator seed 280 of the controller sweep).
    controller = RefusingController()
    registration = {FOLLOWER_ID: (3, False, False)}  # as our metadata had it when the leader proposed
    broker.replica_manager.broker_state = registration.get
    async with leading(broker, controller) as partition:

        async def fetch_and_settle() -> None:
            await broker.fetch(FOLLOWER_ID, {TP0: partition.log_end_offset}, replica_epoch=16)
            for _ in range(5):  # let the sender ask the controller and apply its answer
                await asyncio.sleep(0)

        await fetch_and_settle()
        await fetch_and_settle()
        assert len(controller.items) == 1  # refused once, not proposed again while nothing changed
        registration[FOLLOWER_ID] = (16, False, False)  # the new registration reaches our metadata, unfenced
        await fetch_and_settle()
        assert len(controller.items) == 2
