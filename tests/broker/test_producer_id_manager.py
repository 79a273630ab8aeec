"""ProducerIdManager on a scripted controller: known ids cost nothing, unknown ones one question asked after
they arrived, shared by every caller waiting meanwhile; an unanswered question lets the batch through."""

from __future__ import annotations

import asyncio

import pytest

from broker.producer_id_manager import ProducerIdManager

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
