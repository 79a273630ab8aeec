"""Broker lifecycle towards the active controller: register, heartbeat, and controlled shutdown.

How this works
--------------
`run()` registers (BROKER_REGISTRATION, retried with backoff until a controller answers) and then
heartbeats every `broker.heartbeat.interval.ms`. Each heartbeat carries the offset of the last metadata
record the broker applied: the controller unfences the broker once that offset has reached its own
registration record, and fences a broker whose heartbeats stop for `broker.session.timeout.ms`, moving its
leaderships. A heartbeat answered with STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED makes the broker
register again with a new epoch. `controlled_shutdown()` heartbeats with `want_shutdown` until the
controller says every leadership moved away (`should_shutdown`). Requests go through a
`ControllerChannel`, which finds the active controller and follows it through failovers.

Liveness apart from request work. A broker process runs this manager on a thread of its own, with its own
event loop and its own connections (`ThreadRunner`), so a heartbeat never waits behind the request
handlers on the broker's main event loop: a request that takes long makes a slow answer, not a fenced
broker, as in Kafka, whose BrokerLifecycleManager has its own event queue. What "alive" then means: the
process runs, its heartbeats reach the active controller, and its main event loop has turned within the
last few session timeouts (`loop_alive`; broker_node.py's LOOP_STALL_SESSIONS): a broker whose request
loop is stuck for good stops heartbeating and is fenced, rather than holding leaderships it cannot serve.
The simulator runs it on the one event loop (`SameLoopRunner`), where this distinction does not exist.

The manager reads the broker's state only through plain values the main loop publishes (`metadata_offset`,
`offline_replicas`, `loop_alive`), and the main loop reads only its plain attributes (`broker_epoch`,
`is_fenced`): no object is shared across the two threads' event loops.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from broker.controller_channel import ControllerChannel
from protocol.errors import ErrorCode
from protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    OfflineReplica,
    TopicPartition,
)
from protocol.transport import NETWORK_ERRORS
from server_common.time import Time

log = logging.getLogger(__name__)

T = TypeVar("T")


class BrokerLifecycleManager:
    def __init__(
        self,
        broker_id: int,
        advertised_host: str,
        advertised_port: int,
        channel: ControllerChannel,
        time: Time,
        heartbeat_interval_ms: int = 2000,
        incarnation_id: str | None = None,
        listeners: dict[str, str] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.listeners = dict(listeners or {})
        self.host = advertised_host
        self.port = advertised_port
        self.channel = channel
        self.time = time
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.incarnation_id = incarnation_id if incarnation_id is not None else uuid.uuid4().hex
        self.broker_epoch = -1
        self.is_fenced = True
        self.is_caught_up = False
        self.registered = asyncio.Event()
        self.heartbeats_sent = 0
        self.heartbeats_skipped = 0
        # What the main loop publishes for each heartbeat (plain values, read from this manager's thread).
        self.offline_replicas: Callable[[], list[TopicPartition]] = list
        self.metadata_offset: Callable[[], int] = lambda: -1
        self.loop_alive: Callable[[], bool] = lambda: True

    def _timeout_ms(self) -> int:
        return max(self.heartbeat_interval_ms, 1000)

    async def register(self) -> int:
        backoff_s = 0.05
        while True:
            try:
                resp: BrokerRegistrationResponse = await self.channel.send(
                    -1,
                    BrokerRegistrationRequest(
                        self.broker_id, self.host, self.port, self.incarnation_id, listeners=self.listeners
                    ),
                    self._timeout_ms(),
                )
                if resp.error_code == ErrorCode.NONE:
                    self.broker_epoch = resp.broker_epoch
                    self.registered.set()
                    log.info("registered with the controller, broker epoch %d", self.broker_epoch)
                    return self.broker_epoch
                log.warning("registration refused: %s %s", ErrorCode(resp.error_code).name, resp.error_message)
            except NETWORK_ERRORS as exc:
                log.info("no controller reachable yet (%s); retrying", exc)
            await self.time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 1.0)

    async def heartbeat(self, want_shutdown: bool = False) -> BrokerHeartbeatResponse | None:
        try:
            resp: BrokerHeartbeatResponse = await self.channel.send(
                -1,
                BrokerHeartbeatRequest(
                    self.broker_id,
                    self.broker_epoch,
                    want_shutdown=want_shutdown,
                    current_metadata_offset=self.metadata_offset(),
                    offline_replicas=[OfflineReplica(tp.topic, tp.partition) for tp in self.offline_replicas()],
                ),
                self._timeout_ms(),
            )
        except NETWORK_ERRORS as exc:
            log.info("heartbeat failed: %s", exc)
            return None
        if not isinstance(resp, BrokerHeartbeatResponse):
            # NOT_CONTROLLER at the deadline (no voter led while it lasted): no heartbeat was taken.
            log.info("heartbeat not taken: %s", getattr(resp, "error_message", resp))
            return None
        self.heartbeats_sent += 1
        if resp.error_code in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
            log.warning("controller does not know broker epoch %d any more; registering again", self.broker_epoch)
            self.registered.clear()
            return resp
        if resp.error_code == ErrorCode.NONE:
            self.is_fenced = resp.is_fenced
            self.is_caught_up = resp.is_caught_up
        return resp

    async def run(self) -> None:
        stalled = False
        while True:
            if not self.registered.is_set():
                await self.register()
            if self.loop_alive():
                if stalled:
                    log.warning("the broker's event loop turns again: heartbeats resume")
                stalled = False
                await self.heartbeat()
            else:
                if not stalled:
                    log.error("the broker's event loop has not turned for a session timeout: heartbeats stop")
                stalled = True
                self.heartbeats_skipped += 1
            await self.time.sleep(self.heartbeat_interval_ms / 1000.0)

    async def controlled_shutdown(self, timeout_ms: int) -> bool:
        """Ask the controller to move our leaderships away; True once it says we may stop."""
        if not self.registered.is_set():
            return False
        deadline = self.time.hi_res_milliseconds() + timeout_ms
        while self.time.hi_res_milliseconds() < deadline:
            resp = await self.heartbeat(want_shutdown=True)
            if resp is not None and resp.should_shutdown:
                return True
            await self.time.sleep(min(self.heartbeat_interval_ms, 100) / 1000.0)
        return False


class LifecycleRunner(Protocol):
    """Where the lifecycle manager runs: this event loop, or a thread of its own."""

    lifecycle: BrokerLifecycleManager | None

    def start(self, build: Callable[[], BrokerLifecycleManager]) -> None:
        """Build the manager (where it will run) and start `run()`."""

    async def call(self, fn: Callable[[BrokerLifecycleManager], Awaitable[T]]) -> T:
        """Await `fn(manager)` where the manager runs."""

    async def stop(self) -> None:
        """Stop `run()` and close the manager's connections."""


class SameLoopRunner:
    """On the caller's event loop: the simulator's way (one loop, virtual time)."""

    def __init__(self) -> None:
        self.lifecycle: BrokerLifecycleManager | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, build: Callable[[], BrokerLifecycleManager]) -> None:
        self.lifecycle = build()
        self._task = asyncio.ensure_future(self.lifecycle.run())
        self._task.set_name("broker-lifecycle")
        self._task.add_done_callback(_report_failure)

    async def call(self, fn: Callable[[BrokerLifecycleManager], Awaitable[T]]) -> T:
        assert self.lifecycle is not None
        return await fn(self.lifecycle)

    async def stop(self) -> None:
        if self._task is not None:
            await _cancel_until_done(self._task)
        if self.lifecycle is not None:
            await self.lifecycle.channel.close()


class ThreadRunner:
    """On a thread of its own with its own event loop and connections: a broker process's way, so heartbeats
    never wait behind request work on the main loop."""

    def __init__(self, name: str = "broker-lifecycle") -> None:
        self.lifecycle: BrokerLifecycleManager | None = None
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    def start(self, build: Callable[[], BrokerLifecycleManager]) -> None:
        def main() -> None:
            loop = _new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self.lifecycle = build()
                self._task = loop.create_task(self.lifecycle.run(), name=self.name)
                self._task.add_done_callback(_report_failure)
            except BaseException as exc:  # noqa: BLE001 - handed to start()'s caller
                self._failure = exc
                self._ready.set()
                loop.close()
                return
            self._ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    async def call(self, fn: Callable[[BrokerLifecycleManager], Awaitable[T]]) -> T:
        assert self._loop is not None and self.lifecycle is not None
        lifecycle = self.lifecycle

        async def run() -> T:
            return await fn(lifecycle)

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(run(), self._loop)
        return await asyncio.wrap_future(future)

    async def stop(self) -> None:
        loop, task = self._loop, self._task
        if loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            if task is not None:
                await _cancel_until_done(task)
            if self.lifecycle is not None:
                await self.lifecycle.channel.close()

        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(shutdown(), loop))
        finally:
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 5.0)


async def _cancel_until_done(task: asyncio.Task[None]) -> None:
    """Cancel the manager's task, again until it ends: 3.11's wait_for (the controller channel's deadline)
    can swallow a cancellation that comes as its inner call ends, and the manager would heartbeat on."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=0.1)
    await asyncio.gather(task, return_exceptions=True)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; the fallback keeps a bare install running
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def _report_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        task.get_loop().call_exception_handler(
            {"message": f"{task.get_name()} failed", "exception": task.exception(), "task": task}
        )
