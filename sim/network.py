"""The simulated network: nodes addressed by id, with per-link delay, loss and cuts, all seeded.

How this works
--------------
Every node (controller, brokers, clients) sends through a `SimTransport`, the same `Transport` interface
the TCP implementation has. A request is copied through the wire codec (so no object is shared between
nodes), waits its link's delay, and is handled by the destination node in a task of its own; the
response travels back the same way. Links keep FIFO order, as a TCP connection does.

Faults, all decided by the seeded random source or by an explicit schedule:
- a node that is down refuses connections at once (ConnectionRefusedError), and a node that dies while
  handling a request resets it (ConnectionResetError);
- a cut link (`cut(a, b)`, one-way) and a dropped message both leave the sender waiting until its timeout,
  as a silently lost packet does;
- a paused node (SIGSTOP) neither handles nor sends: requests to it queue until it resumes, when they may
  long have timed out on the sender's side;
- `new_connection(a, b)` ends a link's FIFO order with what is already on the wire, as a restarted
  process's new connection does; a node brought up again gets new connections on all its links;
- `delay(a, b, ms, jitter_ms)` and `drop(a, b, p)` shape one link; `slow(node, ms)` adds a stall before
  each request the node handles (a slow disk under a broker that writes on its request path).
"""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from network.request_context import ConnectionContext
from protocol.codec import Message, from_wire, packb, to_wire, unpackb
from protocol.messages import RequestHeader

Handler = Callable[[ConnectionContext, RequestHeader, Message], Coroutine[Any, Any, Message | None]]
DEFAULT_TIMEOUT_MS = 30000


def _copy(message: Message) -> Message:
    """The message as the receiver would decode it from the wire."""
    return from_wire(type(message), unpackb(packb(to_wire(message))))


@dataclass
class SimNode:
    node_id: int
    handler: Handler | None = None
    up: bool = False
    incarnation: int = 0
    resumed: asyncio.Event = field(default_factory=asyncio.Event)  # set while not paused
    slow_ms: float = 0.0
    # In-flight handler tasks, in arrival order: a dict, not a set, so a kill cancels them in the same
    # order every run (a set of tasks iterates by memory address, which differs from run to run).
    inflight: dict[asyncio.Task[Any], None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.resumed.set()


@dataclass
class LinkShape:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    drop: float = 0.0


class SimNetwork:
    def __init__(self, rng: random.Random, base_delay_ms: float = 0.2, base_jitter_ms: float = 0.3) -> None:
        self.rng = rng
        self.nodes: dict[int, SimNode] = {}
        self.cuts: dict[tuple[int, int], int] = {}  # (from, to) -> faults cutting it: messages are lost
        self.shapes: dict[tuple[int, int], LinkShape] = {}
        self.base = LinkShape(base_delay_ms, base_jitter_ms)
        self._link_clock: dict[tuple[int, int], float] = {}
        self._correlation = 0
        self.messages = 0
        self.requests: collections.Counter[str] = collections.Counter()  # by request type, delivered or not
        # sim/timeline.py's Recorder when a page is wanted: hears every message, changes nothing.
        self.recorder: Any = None

    # -- nodes -------------------------------------------------------------------------------------

    def node(self, node_id: int) -> SimNode:
        node = self.nodes.get(node_id)
        if node is None:
            node = self.nodes[node_id] = SimNode(node_id)
        return node

    def bring_up(self, node_id: int, handler: Handler | None) -> None:
        """The process starts (again): every connection it has is a new one, so what its earlier incarnation
        sent and is still on the way does not hold up what this one sends (and may arrive after it)."""
        node = self.node(node_id)
        node.handler = handler
        node.up = True
        node.incarnation += 1
        node.resumed.set()
        for link in [link for link in self._link_clock if node_id in link]:
            del self._link_clock[link]

    def take_down(self, node_id: int) -> None:
        """The process is gone: its in-flight handlers die with it; its peers see resets."""
        node = self.node(node_id)
        node.up = False
        node.handler = None
        node.incarnation += 1
        node.resumed.set()
        for task in list(node.inflight):
            task.cancel()

    def pause(self, node_id: int) -> None:
        self.node(node_id).resumed.clear()

    def resume(self, node_id: int) -> None:
        self.node(node_id).resumed.set()

    def is_paused(self, node_id: int) -> bool:
        return not self.node(node_id).resumed.is_set()

    # -- links -------------------------------------------------------------------------------------

    def cut(self, a: int, b: int) -> None:
        self.cuts[(a, b)] = self.cuts.get((a, b), 0) + 1

    def uncut(self, a: int, b: int) -> None:
        left = self.cuts.get((a, b), 0) - 1
        if left > 0:
            self.cuts[(a, b)] = left
        else:
            self.cuts.pop((a, b), None)

    def heal(self) -> None:
        """Every link whole and unshaped, every node running."""
        self.cuts.clear()
        self.shapes.clear()
        for node in self.nodes.values():
            node.slow_ms = 0.0
            node.resumed.set()

    def new_connection(self, a: int, b: int) -> None:
        """`a` opens a new connection to `b` (a restarted process does): what the old one still carries keeps
        its delay, and what is sent from now on is not ordered after it."""
        self._link_clock.pop((a, b), None)

    def shape(self, a: int, b: int) -> LinkShape:
        return self.shapes.get((a, b), self.base)

    async def _travel(self, src: int, dst: int) -> bool:
        """Wait the link's delay; False when the message is lost (cut or dropped)."""
        if (src, dst) in self.cuts:
            return False
        shape = self.shape(src, dst)
        if shape.drop and self.rng.random() < shape.drop:
            return False
        loop = asyncio.get_running_loop()
        delay_s = (shape.delay_ms + self.rng.random() * shape.jitter_ms) / 1000.0
        at = max(loop.time() + delay_s, self._link_clock.get((src, dst), 0.0))  # FIFO per link
        self._link_clock[(src, dst)] = at
        await asyncio.sleep(at - loop.time())
        return (src, dst) not in self.cuts  # a cut made while in flight loses it too

    # -- delivery ----------------------------------------------------------------------------------

    async def request(self, src: int, dst: int, request: Message) -> Message | None:
        sender = self.node(src)
        await sender.resumed.wait()
        target = self.nodes.get(dst)
        if target is None or not target.up:
            raise ConnectionRefusedError(f"node {dst} is down")
        self.messages += 1
        self.requests[type(request).__name__] += 1
        # Once sent, a request is on the wire: it arrives even if its sender dies or gives up meanwhile, as
        # bytes a TCP connection has sent do, and is handled; only the answer then goes nowhere.
        loop = asyncio.get_running_loop()
        delivery = loop.create_task(self._deliver(src, sender.incarnation, dst, _copy(request)))
        try:
            response: Message | None = await _shielded(delivery)
            return response
        except _Lost:
            await asyncio.Future()  # lost: the sender's timeout ends this
            raise  # unreachable: the timeout cancels the wait above

    def _record(self, sent_s: float, arrived: bool, src: int, dst: int, message: Message) -> None:
        if self.recorder is not None:
            now_ms = asyncio.get_running_loop().time() * 1000.0
            self.recorder.on_message(sent_s * 1000.0, now_ms if arrived else None, src, dst, message)

    async def _deliver(self, src: int, src_incarnation: int, dst: int, request: Message) -> Message | None:
        sender = self.node(src)
        sent_s = asyncio.get_running_loop().time()
        arrived = await self._travel(src, dst)
        self._record(sent_s, arrived, src, dst, request)
        if not arrived:
            raise _Lost
        target = self.node(dst)
        await target.resumed.wait()  # a paused node reads nothing
        if target.slow_ms:
            await asyncio.sleep(target.slow_ms / 1000.0)
        handler = target.handler
        if not target.up or handler is None:
            raise ConnectionResetError(f"node {dst} died")
        incarnation = target.incarnation
        self._correlation += 1
        header = RequestHeader(0, 0, self._correlation, f"node-{src}")
        ctx = ConnectionContext(self._correlation, f"node-{src}", authenticated=True)
        # The handler runs in a task of its own: a sender that gives up (its timeout) does not stop the
        # work, as a closed connection does not stop a request a broker is already handling.
        loop = asyncio.get_running_loop()
        task: asyncio.Task[Message | None] = loop.create_task(handler(ctx, header, request))
        target.inflight[task] = None
        handled = loop.create_future()

        def on_handled(done: asyncio.Task[Any]) -> None:
            # One callback where there were two (the inflight bookkeeping and asyncio.wait's): the same
            # order of events, one loop step less per request.
            target.inflight.pop(done, None)
            if not handled.done():
                handled.set_result(None)

        task.add_done_callback(on_handled)
        await handled
        if task.cancelled() or target.incarnation != incarnation:
            raise ConnectionResetError(f"node {dst} died while handling the request")
        response = task.result()
        await target.resumed.wait()  # a paused node sends nothing either
        if response is None:
            return None
        sent_s = asyncio.get_running_loop().time()
        arrived = await self._travel(dst, src)
        self._record(sent_s, arrived, dst, src, response)
        if not arrived:
            raise _Lost
        await sender.resumed.wait()
        if sender.incarnation != src_incarnation:
            raise ConnectionResetError(f"node {src} died before the answer came")  # nobody is waiting
        return _copy(response)


class _Lost(Exception):
    """A message the network lost: its sender hears nothing until its own timeout."""


def _shielded(delivery: asyncio.Future[Any]) -> asyncio.Future[Any]:
    """What `asyncio.shield(delivery)` gives, in one done callback instead of shield's two and the one
    that marks an unobserved outcome as retrieved: the sender waits on the returned future, and its
    timeout cancels that future, never the delivery (a delivery whose sender is gone or gave up ends
    unobserved; its outcome is of no one's concern). The events keep their order: the callbacks this
    replaces ran back to back, and the ones left out did nothing but bookkeeping."""
    outer: asyncio.Future[Any] = delivery.get_loop().create_future()

    def relay(inner: asyncio.Future[Any]) -> None:
        if inner.cancelled():
            if not outer.done():
                outer.cancel()
            return
        exc = inner.exception()  # retrieved, whoever waits
        if outer.done():
            return
        if exc is not None:
            outer.set_exception(exc)
        else:
            outer.set_result(inner.result())

    delivery.add_done_callback(relay)
    return outer


class SimTransport:
    """The `Transport` of one node on a `SimNetwork`."""

    def __init__(self, network: SimNetwork, node_id: int, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        self.network = network
        self.node_id = node_id
        self.timeout_ms = timeout_ms

    async def send(self, node_id: int, request: Message, timeout_ms: int | None = None) -> Any:
        """The request's answer, or TimeoutError after the timeout. What `async with asyncio.timeout(...)`
        does (no extra task per request, unlike wait_for), its timer set and cancelled at the same
        points, so runs keep their events and order, without its context-manager object and protocol:
        about 3% of a run's CPU, one request being what the simulator repeats most."""
        timeout_s = (self.timeout_ms if timeout_ms is None else timeout_ms) / 1000.0
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        cancelling = task.cancelling()
        expired = False

        def on_timeout() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        when = loop.time() + timeout_s
        timer = loop.call_soon(on_timeout) if when <= loop.time() else loop.call_at(when, on_timeout)
        try:
            response = await self.network.request(self.node_id, node_id, request)
        except BaseException as exc:
            if not expired:
                timer.cancel()
            elif task.uncancel() <= cancelling and type(exc) is asyncio.CancelledError:
                raise TimeoutError from exc  # the timeout's own cancellation, not the caller's
            raise
        if expired:
            task.uncancel()
        else:
            timer.cancel()
        return response

    async def close(self) -> None:
        return None
