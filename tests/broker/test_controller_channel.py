"""The broker's channel to the active controller: whom it asks, in which order, through a failover.

The transport is a stand-in (pure routing logic; the real failovers run in
tests/integration/test_chaos_controller_faults.py): each voter answers, says NOT_CONTROLLER, or lets the
request time out after its whole deadline, as a paused controller does."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from broker.controller_channel import ControllerChannel
from protocol.codec import Message
from protocol.errors import ErrorCode
from protocol.messages import BrokerHeartbeatRequest, BrokerHeartbeatResponse, ErrorResponse
from server_common.time import ManualTime

pytestmark = pytest.mark.timeout(10)

HEARTBEAT = BrokerHeartbeatRequest(1, 2)


class Voters:
    """Voter id -> "leader" | "follower" | "paused"; records who was asked, when, for how long."""

    def __init__(self, time: ManualTime, roles: dict[int, str]) -> None:
        self.time = time
        self.roles = roles
        self.asked: list[tuple[float, int]] = []

    async def send(self, node_id: int, request: Message, timeout_ms: int | None = None) -> Any:
        self.asked.append((self.time.hi_res_milliseconds(), node_id))
        role = self.roles[node_id]
        if role == "paused":
            assert timeout_ms is not None
            self.time.advance(timeout_ms)  # nothing comes back before the deadline
            raise TimeoutError(f"no answer from {node_id}")
        self.time.advance(1)
        if role == "follower":
            return ErrorResponse(int(ErrorCode.NOT_CONTROLLER), f"node {node_id} is not the active controller")
        return BrokerHeartbeatResponse(error_code=int(ErrorCode.NONE))

    async def close(self) -> None:
        pass


def test_a_voter_that_let_a_heartbeat_time_out_is_asked_last_while_the_log_still_names_it_leader() -> None:
    """3001 led and was paused; 3002 was elected, but this broker's metadata still names 3001. Its first
    heartbeat waits out its deadline on 3001; the next goes to the other voters first and reaches 3002 at
    once, instead of spending each heartbeat's whole deadline on 3001 until the metadata log catches up."""

    async def scenario() -> None:
        time = ManualTime()
        voters = Voters(time, {3000: "follower", 3001: "paused", 3002: "leader"})
        channel = ControllerChannel(voters, [3000, 3001, 3002], lambda: 3001, time)
        with pytest.raises(TimeoutError):
            await channel.send(-1, HEARTBEAT, 1000)
        assert [n for _, n in voters.asked] == [3001]
        voters.asked.clear()
        started = time.hi_res_milliseconds()
        answer = await channel.send(-1, HEARTBEAT, 1000)
        assert answer.error_code == ErrorCode.NONE
        assert voters.asked[-1][1] == 3002 and 3001 not in [n for _, n in voters.asked]
        assert time.hi_res_milliseconds() - started < 200

    asyncio.run(scenario())


def test_a_silent_leader_that_answers_again_is_asked_first_again() -> None:
    """A pause too short for an election: the others say NOT_CONTROLLER, so the silent leader is asked
    after them in the same request, answers, and is no longer put last."""

    async def scenario() -> None:
        time = ManualTime()
        voters = Voters(time, {3000: "follower", 3001: "paused", 3002: "follower"})
        channel = ControllerChannel(voters, [3000, 3001, 3002], lambda: 3001, time)
        with pytest.raises(TimeoutError):
            await channel.send(-1, HEARTBEAT, 1000)
        voters.roles[3001] = "leader"
        voters.asked.clear()
        assert (await channel.send(-1, HEARTBEAT, 1000)).error_code == ErrorCode.NONE
        assert sorted(n for _, n in voters.asked) == [3000, 3001, 3002] and voters.asked[-1][1] == 3001
        voters.asked.clear()
        assert (await channel.send(-1, HEARTBEAT, 1000)).error_code == ErrorCode.NONE
        assert [n for _, n in voters.asked] == [3001]

    asyncio.run(scenario())


class DyingSender:
    """A transport whose request fails (its sender died) at the moment its caller is cancelled: a broker
    killed while a request of its own is on the way to the controller."""

    def __init__(self) -> None:
        self.sent = asyncio.Event()
        self.answer: asyncio.Future[Any] | None = None

    async def send(self, node_id: int, request: Message, timeout_ms: int | None = None) -> Any:
        self.answer = asyncio.get_running_loop().create_future()
        self.sent.set()
        try:
            return await asyncio.shield(self.answer)
        except asyncio.CancelledError:
            raise ConnectionResetError("the sender died before the answer came") from None

    async def close(self) -> None:
        pass


def test_a_request_cancelled_as_it_fails_leaves_no_unretrieved_exception() -> None:
    """The caller is cancelled (its broker stops) while the attempt under it fails instead of ending
    cancelled. Nobody waits for that failure any more; left unretrieved, the event loop reported it (the
    simulator counts that as an unhandled exception and fails the run: seen in a fresh-clone suite run)."""

    async def scenario() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        transport = DyingSender()
        channel = ControllerChannel(transport, [3000], lambda: 3000, ManualTime())  # type: ignore[arg-type]
        caller = asyncio.ensure_future(channel.send(-1, HEARTBEAT, 1000))
        await transport.sent.wait()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()  # an unretrieved task exception is reported when the task is collected
        await asyncio.sleep(0)
        return reported

    reported = asyncio.run(scenario())
    assert [c.get("message") for c in reported] == []
