"""A broker's heartbeats run on a thread of their own: they reach the controller while the broker's main event
loop is held by request work, and stop when the main loop has not turned for the stall bound.

Real TCP: a controller stand-in (a socket server answering BROKER_REGISTRATION and BROKER_HEARTBEAT) on a
thread with its own event loop, the lifecycle manager on `ThreadRunner`, and the test's own loop held by a
blocking sleep, as a long request would hold a broker's."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from broker.broker_lifecycle_manager import BrokerLifecycleManager, SameLoopRunner, ThreadRunner
from broker.controller_channel import ControllerChannel
from network.request_context import ConnectionContext
from network.socket_server import SocketServer
from network.tcp_transport import TcpTransport
from protocol.codec import Message
from protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    RequestHeader,
)
from server_common.time import SYSTEM_TIME

pytestmark = pytest.mark.timeout(30)

HEARTBEAT_MS = 50


class StandInController:
    """Answers registrations and heartbeats on its own thread; remembers when each heartbeat arrived."""

    def __init__(self) -> None:
        self.heartbeats: list[float] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    async def _handle(self, ctx: ConnectionContext, header: RequestHeader, body: Message) -> Message:
        if isinstance(body, BrokerRegistrationRequest):
            return BrokerRegistrationResponse(broker_epoch=7)
        assert isinstance(body, BrokerHeartbeatRequest)
        self.heartbeats.append(time.monotonic())
        return BrokerHeartbeatResponse(is_fenced=False)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = SocketServer(self._handle, "127.0.0.1", 0)
        self._loop.run_until_complete(server.start())
        self.port = server.port
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(5)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def heartbeats_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.heartbeats if start <= t <= end)


@pytest.fixture
def controller() -> Iterator[StandInController]:
    c = StandInController()
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _build(port: int, loop_alive: Any = lambda: True) -> Any:
    def build() -> BrokerLifecycleManager:
        transport = TcpTransport(lambda node_id: ("127.0.0.1", port), "test-broker")
        channel = ControllerChannel(transport, [3000], lambda: 3000, SYSTEM_TIME, timeout_ms=2000)
        lifecycle = BrokerLifecycleManager(
            1, "127.0.0.1", 9000, channel, SYSTEM_TIME, heartbeat_interval_ms=HEARTBEAT_MS
        )
        lifecycle.loop_alive = loop_alive
        return lifecycle

    return build


async def _hold_the_loop(controller: StandInController, runner: Any, hold_s: float) -> int:
    """Block this event loop for `hold_s` (as a long request would); heartbeats that arrived meanwhile."""
    await asyncio.sleep(0.3)  # registered, heartbeating
    held_from = time.monotonic()
    time.sleep(hold_s)  # noqa: ASYNC251 - the point: the main loop is held, nothing on it runs
    held_until = time.monotonic()
    await runner.stop()
    return controller.heartbeats_between(held_from + 0.1, held_until)


async def test_heartbeats_go_on_while_the_main_loop_is_held(controller: StandInController) -> None:
    runner = ThreadRunner()
    runner.start(_build(controller.port))
    sent = await _hold_the_loop(controller, runner, 1.0)
    assert sent >= 5, f"only {sent} heartbeats in a second with the main loop held"


async def test_on_the_main_loop_the_heartbeats_wait_behind_the_held_loop(controller: StandInController) -> None:
    """What the thread avoids: the same manager on the main loop sends nothing while the loop is held."""
    runner = SameLoopRunner()
    runner.start(_build(controller.port))
    sent = await _hold_the_loop(controller, runner, 1.0)
    assert sent == 0


async def test_heartbeats_stop_while_the_main_loop_is_stuck_for_good(controller: StandInController) -> None:
    alive = threading.Event()
    alive.set()
    runner = ThreadRunner()
    runner.start(_build(controller.port, loop_alive=alive.is_set))
    await asyncio.sleep(0.3)
    alive.clear()  # the main loop has not turned for the stall bound
    await asyncio.sleep(0.1)
    stopped_at = time.monotonic()
    await asyncio.sleep(0.5)
    assert controller.heartbeats_between(stopped_at, time.monotonic()) == 0
    alive.set()
    resumed_at = time.monotonic()
    await asyncio.sleep(0.5)
    assert controller.heartbeats_between(resumed_at, time.monotonic()) >= 3
    await runner.stop()
