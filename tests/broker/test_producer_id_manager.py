"""ProducerIdManager on a scripted controller: ids handed out from blocks, none twice, also to producers that
start together and with no controller while a block lasts; known ids cost nothing, unknown ones one
question asked after they arrived, shared by every caller waiting meanwhile; an unanswered question lets
the batch through."""

from __future__ import annotations

import asyncio

import pytest

from broker.producer_id_manager import ProducerIdManager
from protocol.errors import ErrorCode
from protocol.messages import InitProducerIdRequest
from server_common.poll import wait_until
from server_common.time import SystemTime

pytestmark = pytest.mark.timeout(10)


class ScriptedController:
    def __init__(self) -> None:
        self.next_producer_id = 0
        self.questions = 0
        self.reachable = True
        self.gate = asyncio.Event()
        self.gate.set()

    async def ask(self) -> int | None:
        self.questions += 1
        asked_when = self.next_producer_id  # the answer is what the controller had handed out when asked
        await self.gate.wait()
        return asked_when if self.reachable else None


async def test_known_ids_need_no_question_and_unknown_ones_are_asked_about() -> None:
    controller = ScriptedController()
    ids = ProducerIdManager(controller.ask)
    ids.note(5)
    assert await ids.handed_out(4) and controller.questions == 0
    controller.next_producer_id = 7  # handed out through another broker
    assert await ids.handed_out(6) and controller.questions == 1
    assert not await ids.handed_out(7) and controller.questions == 2
    assert ids.next_producer_id == 7


async def test_a_flood_of_invented_ids_shares_questions() -> None:
    controller = ScriptedController()
    ids = ProducerIdManager(controller.ask)
    controller.gate.clear()
    waiting = [asyncio.ensure_future(ids.handed_out(1000 + i)) for i in range(500)]
    await asyncio.sleep(0)
    controller.gate.set()
    assert not any(await asyncio.gather(*waiting))
    # the first caller's question; the rest arrived while it was out, so they share the one after it
    assert controller.questions == 2


async def test_an_id_handed_out_while_an_older_question_is_out_waits_for_a_newer_one() -> None:
    controller = ScriptedController()
    ids = ProducerIdManager(controller.ask)
    controller.gate.clear()
    early = asyncio.ensure_future(ids.handed_out(50))  # asks while the controller has handed out nothing
    await asyncio.sleep(0)
    controller.next_producer_id = 1  # id 0 handed out now, after that question was asked
    late = asyncio.ensure_future(ids.handed_out(0))
    await asyncio.sleep(0)
    controller.gate.set()
    assert await late  # answered by a question asked after it arrived, not by the older one
    assert not await early


async def test_an_unreachable_controller_lets_the_batch_through() -> None:
    controller = ScriptedController()
    controller.reachable = False
    ids = ProducerIdManager(controller.ask)
    assert await ids.handed_out(3)
    controller.reachable = True
    assert not await ids.handed_out(3)


class ScriptedBlocks:
    """A controller that hands out blocks of 10 ids, slowly, and counts the reservations."""

    def __init__(self) -> None:
        self.next = 0
        self.reservations = 0
        self.reachable = True

    async def allocate(self) -> tuple[int, int] | None:
        self.reservations += 1
        await asyncio.sleep(0.01)
        if not self.reachable:
            return None
        start, self.next = self.next, self.next + 10
        return start, 10


async def test_producers_starting_together_get_distinct_ids_from_one_block() -> None:
    blocks = ScriptedBlocks()
    ids = ProducerIdManager(ScriptedController().ask, blocks.allocate)
    answers = await asyncio.gather(*(ids.init_producer_id(InitProducerIdRequest()) for _ in range(25)))
    got = [a.producer_id for a in answers]
    assert sorted(got) == list(range(25)), got  # no id twice, none skipped
    assert all(a.producer_epoch == 0 and a.error_code == 0 for a in answers)
    assert ids.known(24) and not ids.known(30)


async def test_a_producer_naming_its_id_gets_the_next_epoch_and_an_unknown_id_a_new_one() -> None:
    blocks = ScriptedBlocks()
    ids = ProducerIdManager(ScriptedController().ask, blocks.allocate)
    first = await ids.init_producer_id(InitProducerIdRequest())
    bumped = await ids.init_producer_id(InitProducerIdRequest(None, 60000, first.producer_id, 3))
    assert (bumped.producer_id, bumped.producer_epoch) == (first.producer_id, 4)
    stranger = await ids.init_producer_id(InitProducerIdRequest(None, 60000, 999, 3))
    assert (stranger.producer_id, stranger.producer_epoch) == (first.producer_id + 1, 0)


async def test_with_no_controller_the_block_lasts_and_then_init_producer_id_is_retriable() -> None:
    blocks = ScriptedBlocks()
    ids = ProducerIdManager(ScriptedController().ask, blocks.allocate)
    await ids.init_producer_id(InitProducerIdRequest())
    blocks.reachable = False
    got = [(await ids.init_producer_id(InitProducerIdRequest())).producer_id for _ in range(9)]
    assert got == list(range(1, 10))  # the rest of the block, with no controller
    exhausted = await ids.init_producer_id(InitProducerIdRequest())
    assert exhausted.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and exhausted.producer_id == -1


async def test_a_block_reserved_ahead_serves_producers_after_every_controller_is_gone() -> None:
    blocks = ScriptedBlocks()
    ids = ProducerIdManager(ScriptedController().ask, blocks.allocate)
    ids.reserve_ahead()
    ids.reserve_ahead()  # one reservation in flight: not a second
    assert await wait_until(lambda: ids.ids_ready > 0, 5.0, clock=SystemTime(), interval_s=0.001)
    ids.reserve_ahead()  # a block is kept: nothing more
    assert blocks.reservations == 1
    blocks.reachable = False
    first = await ids.init_producer_id(InitProducerIdRequest())
    assert (first.error_code, first.producer_id) == (0, 0)
    assert ids.known(9) and not ids.known(10)


async def test_without_reserving_ahead_the_first_producer_needs_a_controller() -> None:
    blocks = ScriptedBlocks()
    blocks.reachable = False
    ids = ProducerIdManager(ScriptedController().ask, blocks.allocate)
    first = await ids.init_producer_id(InitProducerIdRequest())
    assert first.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
