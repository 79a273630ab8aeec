"""The socket server for the msgpack protocol, shared by brokers and the controller.

How this works
--------------
One `_ServerConnection` (an asyncio BufferedProtocol) per client connection reads frames with the shared
`FrameDecoder` straight into its buffers. The first request of a read, with nothing ahead of it, is decoded
(into header and typed body) and started on the spot and, if its handler does not wait (most do not),
answered at once: no task and no loop iteration in between. Every other frame is queued as it came, and one
worker task per connection decodes and starts the queued requests in arrival order, one per turn of the
event loop — up to `max.in.flight.requests.per.connection` at once — and writes their responses in that same
order with their correlation ids. The time spent decoding, starting and answering is charged to the event
loop's budget (network/loop_budget.py, shared by every listener of the process): once a turn has spent it,
requests and answers wait for a later turn, and timers (a delayed FETCH's deadline, a Raft election timeout)
and other I/O run between. A large frame (over 64 KiB) always goes through the worker, so handling it and
encoding its answer are two pieces of work. What one request may cost is bounded before it is decoded
(network/request_limits.py, the wire's `decode_request`). A request's effect on the broker (an append, a
read) happens before the next request starts, so ordering is as if they ran one by one; only the waits
overlap (see `_work`). Most handlers reach their effect before they first wait; for those that may wait
before it (a PRODUCE whose producer id the leader must first check, a large request applied in slices), the
connection holds the order (`ORDERED_API_KEYS`, `ConnectionContext.in_order`): no later request starts until
the handler says its effect is done (`ConnectionContext.release_order`, a PRODUCE right after its last
append) or finishes. So a producer's pipelined batches reach the log in the order they arrived whatever a
handler awaits first, and their acks=all waits still overlap.
While `queued.max.requests.per.connection` requests wait, the socket stops being read (back-pressure
through TCP instead of memory). On close the server stops reading, answers what it received (bounded
by a drain timeout) and then closes the connections.

Limits (Kafka's keys where Kafka has one; docs/protocol.md lists them with their defaults):
* `max.connections` and `max.connections.per.ip`: a connection past either is closed as soon as it is
  accepted; the ones already open keep working;
* `connections.max.idle.ms`: a connection with nothing queued, in flight or half-received for that long
  is closed;
* `socket.request.read.timeout.ms`: a frame that has begun must be complete within that long, so a peer
  cannot hold buffer memory with a frame it never finishes (not counted while the server holds reading
  back because its queue is full);
* `queued.max.request.bytes`: the buffers of frames too large for a connection's scratch buffer, over all
  connections of the listener; a connection whose frame would take them past it is closed;
* `sasl.server.max.receive.size` on a SASL listener: the largest frame before the connection authenticates;
* memory per connection follows what arrived (see protocol/framing.py); a connection quiet for a second
  gives its read buffer back; while a client does not read its responses (the transport's write buffer
  is over its high-water mark) the connection's requests are not read either.
A periodic maintenance pass (`_maintain`) applies the time limits.

Failure handling, per DESIGN principle 8:
* a broken frame, undecodable msgpack, an oversize length prefix or an unreadable header closes that
  connection only, with a log line;
* a request whose header is fine but whose API, version or body is not gets an error response
  (INVALID_REQUEST / UNSUPPORTED_VERSION with a message naming the field) and the connection stays;
* an exception escaping a handler becomes UNKNOWN_SERVER_ERROR for that request; the broker goes on.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import msgpack

from network.frame_protocol import FrameProtocol
from network.loop_budget import LoopBudget, loop_budget
from network.request_context import ConnectionContext, Handler
from network.request_limits import RequestLimit, count_entries, msgpack_limit
from protocol.api_keys import ApiKey
from protocol.codec import MAX_ENTRIES, Message, TooManyEntriesError, from_wire, packb, to_wire, unpackb
from protocol.errors import ErrorCode, ProtocolError
from protocol.fetch_frame import FETCH_RECORDS_APART, encode_fetch_response
from protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, frame_prefix
from protocol.messages import ErrorResponse, RequestDecodeError, RequestHeader, decode_request_value

log = logging.getLogger(__name__)

_CLOSED_DECODER = FrameDecoder(initial_bytes=0)  # what a closed connection keeps: no buffer at all


@dataclass(slots=True)
class ServerStats:
    active_connections: int = 0
    requests_total: int = 0
    bad_frames_total: int = 0
    bad_requests_total: int = 0
    handler_errors_total: int = 0
    refused_connections_total: int = 0  # over max.connections or max.connections.per.ip
    idle_closed_total: int = 0  # connections.max.idle.ms
    incomplete_closed_total: int = 0  # socket.request.read.timeout.ms


INT_MAX = 2**31 - 1

#: The APIs whose effect on the broker must keep a connection's arrival order even when their handler
#: waits before reaching it (see the module's docstring). PRODUCE is 0 on both listeners' protocols: an
#: idempotent producer's batches, pipelined, must reach the log in sequence order, or the leader refuses
#: the ones that overtook (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID) and the producer must give
#: them up. Kafka gets this by handling one request of a connection at a time.
ORDERED_API_KEYS: frozenset[int] = frozenset({int(ApiKey.PRODUCE)})


class _Wakeup:
    """asyncio.Event for one waiter, bound to its loop when made (no running-loop lookup per wait)."""

    __slots__ = ("_loop", "_flag", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._flag = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._flag = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    async def wait(self) -> None:
        if self._flag:
            return
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


@dataclass(slots=True)
class _Answered:
    """A request whose handler finished without waiting: its answer, ready to write."""

    response: Message | None


def _finished(outcome: _Answered | asyncio.Task[Message | None]) -> bool:
    return isinstance(outcome, _Answered) or outcome.done()


def _result(outcome: _Answered | asyncio.Task[Message | None]) -> Message | None:
    return outcome.response if isinstance(outcome, _Answered) else outcome.result()


async def _drive(coro: Coroutine[Any, Any, Message | None], awaited: Any) -> Message | None:
    """Go on with a handler coroutine that `_start` ran up to its first wait, on `awaited` (what it
    yielded: the future it waits for, or None for a bare yield). The outcome of each wait is passed back
    in as a task would: a result by resuming it, an exception (a cancellation included) by throwing it."""
    while True:
        try:
            if awaited is None:
                await asyncio.sleep(0)
            else:
                awaited._asyncio_future_blocking = False  # taken over from the handler's await, as a task does
                await awaited
        except BaseException as exc:  # noqa: BLE001 - handed to the handler, which decides
            try:
                awaited = coro.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                awaited = coro.send(None)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


class Wire(Protocol):
    """What a listener's protocol decides: how a frame becomes a request and a response becomes bytes.
    Framing (a 4-byte big-endian size before each frame), limits, ordering and back-pressure are the
    server's and the same for every wire."""

    def decode_request(self, frame: bytes | bytearray) -> tuple[RequestHeader, Any]:
        """(header, body); ProtocolError closes the connection, RequestDecodeError is answered."""
        ...

    def encode_response(self, header: RequestHeader, response: Any) -> list[Any] | None:
        """The parts of the response frame (bytes, or file regions `write_parts` sends from the log);
        None when the response cannot be put on this wire, which closes the connection."""
        ...


#: Frames up to this size are below every API's byte limit: their API need not be looked up first.
_BELOW_EVERY_BYTE_LIMIT = 64 * 1024


def _peek_header(frame: bytes | bytearray) -> dict[str, Any] | None:
    """The header map of a msgpack request, read without unpacking the body (None if unreadable)."""
    unpacker = msgpack.Unpacker(max_buffer_size=len(frame), max_map_len=16, max_str_len=1024, max_array_len=16)
    unpacker.feed(memoryview(frame)[:4096])
    try:
        if unpacker.read_array_header() != 2:
            return None
        header = unpacker.unpack()
    except (ValueError, msgpack.UnpackException, msgpack.OutOfData, TypeError):
        return None
    return header if type(header) is dict else None


def _too_many_entries(header: Any, limit: RequestLimit) -> RequestDecodeError:
    return RequestDecodeError(
        from_wire(RequestHeader, header),  # an unreadable header is a ProtocolError: the connection closes
        ErrorCode.INVALID_REQUEST,
        f"more than {limit.max_entries} entries (partitions, topics, ...) in one request of API key "
        f"{header.get('api_key')}: split it",
    )


class MsgpackWire:
    """minibroker's own protocol (docs/protocol.md): a msgpack `[header, body]` per frame, within the
    limits of its API (network/request_limits.py): a frame over the API's byte limit is not unpacked (the
    connection is closed); one with more entries than the API allows is answered INVALID_REQUEST, refused
    by the parser at the header of its first array past the limit (a large frame, whose API is read from
    its header first) or by a count of its arrays before its typed message is built."""

    def decode_request(self, frame: bytes | bytearray) -> tuple[RequestHeader, Any]:
        header: dict[str, Any] | None = None
        limit = None
        if len(frame) > _BELOW_EVERY_BYTE_LIMIT:
            header = _peek_header(frame)
            api_key = None if header is None else header.get("api_key")
            limit = msgpack_limit(api_key if type(api_key) is int else -1)
            if limit.max_bytes is not None and len(frame) > limit.max_bytes:
                raise ProtocolError(f"a request of API key {api_key} and {len(frame)} bytes is over {limit.max_bytes}")
        try:
            value = unpackb(frame, MAX_ENTRIES if limit is None else limit.max_entries)
        except TooManyEntriesError:
            if header is None or limit is None:
                raise
            raise _too_many_entries(header, limit) from None
        if type(value) is list and len(value) == 2 and type(value[0]) is dict and type(value[1]) is dict:
            api_key = value[0].get("api_key")
            limit = msgpack_limit(api_key if type(api_key) is int else -1)
            if count_entries(value[1], limit.max_entries) > limit.max_entries:
                raise _too_many_entries(value[0], limit)
        return decode_request_value(value)

    def encode_response(self, header: RequestHeader, response: Any) -> list[Any] | None:
        if header.api_key == ApiKey.FETCH and header.api_version == FETCH_RECORDS_APART:
            return encode_fetch_response(header.correlation_id, response)
        payload = packb([{"correlation_id": header.correlation_id}, to_wire(response)])
        return [frame_prefix(len(payload)), payload]


MSGPACK_WIRE = MsgpackWire()


class _ServerConnection(FrameProtocol):
    def __init__(self, server: SocketServer, connection_id: int) -> None:
        # Until it authenticates, a connection to a SASL listener may send only small frames.
        super().__init__(FrameDecoder(max_frame_bytes=server.pre_auth_max_frame_bytes or server.max_frame_bytes))
        self.server = server
        self.large_frame_bytes = 0  # what this connection adds to the server's held_bytes
        # Frames received and not started yet, undecoded: the worker decodes each when it starts it.
        self.queue: collections.deque[bytes | bytearray] = collections.deque()
        self.started_this_read = False  # a request of the current read was started on the spot
        self.wakeup = _Wakeup(self.loop)
        self.context = ConnectionContext(connection_id, "?")
        self.reading_paused = False
        # Reading stopped because this server has not started what it received: a frame left half-read
        # then is not the peer's delay, so socket.request.read.timeout.ms does not run meanwhile.
        self.waiting_for_queue = False
        self.peer_gone = False  # the connection is closed: nothing more to read or write
        self.draining = False  # the server is closing: answer what was received, read nothing new
        self.worker: asyncio.Task[None] | None = None
        # Started requests in arrival order: a task while its handler waits, else its answer.
        self.pending: collections.deque[tuple[RequestHeader, _Answered | asyncio.Task[Message | None]]] = (
            collections.deque()
        )
        self.in_flight = 0
        self.order_holder: asyncio.Task[Message | None] | None = None  # the started request holding the order
        self.last_active_s = 0.0  # loop time of the last bytes read or response written
        self.partial_since_s: float | None = None  # loop time a frame began that is not complete yet
        self.host = "?"

    # -- asyncio protocol callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport subclasses
        peer = transport.get_extra_info("peername")
        self.context.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.host = peer[0] if peer else "?"
        self.last_active_s = self.loop.time()
        self.server.stats.active_connections += 1
        refusal = self.server._admit(self)
        if refusal is not None:
            self.server.stats.refused_connections_total += 1
            self.server._log_refusal(self.context.peer, refusal)
            self.peer_gone = True
            transport.abort()  # type: ignore[attr-defined]
            return
        super().connection_made(transport)
        self.worker = self.loop.create_task(self._work(), name=f"conn-{self.context.peer}")
        self.server._workers.add(self.worker)
        self.worker.add_done_callback(self.server._workers.discard)

    def on_bad_frame(self, exc: ProtocolError) -> None:
        self.server.stats.bad_frames_total += 1
        log.warning("closing connection from %s: %s", self.context.peer, exc)
        self._abort()

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self.decoder.get_buffer()
        if self.decoder.large_frame_bytes != self.large_frame_bytes and self._account_large_frame():
            # Over queued.max.request.bytes: the frame this connection is receiving would take the listener
            # past it. Closed once this read is done (a transport may not be closed from get_buffer).
            self.loop.call_soon(self.close_for, f"queued.max.request.bytes={self.server.max_held_bytes} reached")
        return view

    def _account_large_frame(self) -> bool:
        """Bring the server's count of large frames being received up to date; True when this
        connection's frame grew the count past the limit."""
        now = self.decoder.large_frame_bytes
        grew = now > self.large_frame_bytes
        self.server.held_bytes += now - self.large_frame_bytes
        self.large_frame_bytes = now
        return grew and self.server.max_held_bytes >= 0 and self.server.held_bytes > self.server.max_held_bytes

    def after_frames(self) -> None:
        if self.decoder.large_frame_bytes != self.large_frame_bytes:
            self._account_large_frame()  # a large frame completed
        if self.decoder.pending:
            if self.partial_since_s is None:
                self.partial_since_s = self.last_active_s
        else:
            self.partial_since_s = None
        if len(self.queue) >= self.server.max_queued_requests:
            self._pause_reading()
            self.waiting_for_queue = True

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active_s = self.loop.time()
        self.started_this_read = False
        super().buffer_updated(nbytes)

    def on_frame(self, frame: bytes | bytearray) -> None:
        """Start the request now if nothing is ahead of it, no other request of this read was started and
        this turn of the loop has budget left; else queue its frame for the worker, which decodes it when
        its turn comes. A read that brought a thousand pipelined requests starts one of them here."""
        budget = self.server.budget
        if (
            self.queue
            or self.pending
            or self.draining
            or self.peer_gone
            or self.worker is None
            or not self.can_write.is_set()
            or self.started_this_read
            or budget.busy()
            or self.context.order_held
            or len(frame) > _BELOW_EVERY_BYTE_LIMIT  # a large one: its answer waits for a turn of its own
        ):
            self.queue.append(frame)
            self.wakeup.set()
            return
        self.started_this_read = True
        started = time.perf_counter()
        try:
            header, outcome = self._decode_and_start(frame)  # a ProtocolError closes the connection
            if isinstance(outcome, _Answered):
                self._write_response(header, outcome.response)
            else:
                self.pending.append((header, outcome))
                self.in_flight = 1
        finally:
            budget.charge(time.perf_counter() - started)

    def _decode_and_start(
        self, frame: bytes | bytearray
    ) -> tuple[RequestHeader, _Answered | asyncio.Task[Message | None]]:
        """Decode a frame and start its request (`_start`). Raises ProtocolError for a frame that cannot be
        answered (the connection is closed); a body that breaks a rule is answered with the error."""
        try:
            header, body = self.server.wire.decode_request(frame)
        except RequestDecodeError as exc:
            self.server.stats.bad_requests_total += 1
            return exc.header, self._start(exc.header, None, exc)
        return header, self._start(header, body, None)

    def _pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None and not self.peer_gone:
            self.transport.pause_reading()
            self.reading_paused = True

    def pause_writing(self) -> None:
        # A client that does not read its responses does not get more requests read either: what the
        # broker holds for it stays bounded by the transport's high-water mark plus what is in flight.
        super().pause_writing()
        self._pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._maybe_resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.peer_gone = True
        self.server.stats.active_connections -= 1
        self.server._forget(self)
        self.decoder = _CLOSED_DECODER  # give the buffers back now, not when the worker is collected
        self._account_large_frame()
        self.queue.clear()
        self.can_write.set()
        self.wakeup.set()

    def _abort(self) -> None:
        self.peer_gone = True
        self.queue.clear()
        if self.transport is not None:
            self.transport.close()
        self.wakeup.set()

    # -- the worker: requests start in order, responses leave in order ---------------------------

    async def _work(self) -> None:
        """Start queued requests in arrival order, up to `max_in_flight` at once, and write responses in
        that same order as they finish.

        Each handler runs its synchronous part (a log append, a log read, a fetch-session check) before
        the next request's starts (`_start` runs it on the spot), so what a request does to the broker's
        state happens in request order; only the waiting overlaps (an acks=all produce waiting for
        followers, a fetch parked in the purgatory). Kafka processes one request per connection at a
        time and gets its throughput from batching instead; overlapping the waits lets a pipelining
        client reach the same without changing what it observes.
        """
        pending = self.pending
        limit = self.server.max_in_flight
        budget = self.server.budget
        try:
            while True:
                self.wakeup.clear()
                started_one = False
                if self.queue and len(pending) < limit and not self.peer_gone and not self.context.order_held:
                    if budget.due():
                        await budget.next_turn()
                        continue
                    frame = self.queue.popleft()
                    began = time.perf_counter()
                    try:
                        pending.append(self._decode_and_start(frame))
                    except ProtocolError as exc:
                        self.on_bad_frame(exc)
                        return
                    finally:
                        budget.charge(time.perf_counter() - began)
                    started_one = True
                self.in_flight = len(pending)
                self._maybe_resume_reading()
                while pending and _finished(pending[0][1]):
                    if budget.due():  # an answer to encode is a piece of work of its own
                        await budget.next_turn()
                        if self.peer_gone:
                            return
                    header, outcome = pending.popleft()
                    self.in_flight = len(pending)
                    began = time.perf_counter()
                    written = self._write_response(header, _result(outcome))
                    budget.charge(time.perf_counter() - began)
                    if not written:
                        return
                    if not self.can_write.is_set():
                        await self.can_write.wait()
                if self.peer_gone or (self.draining and not self.queue and not pending):
                    return
                if started_one and self.queue:
                    # One request per turn of the loop: other connections, timers and I/O go in between,
                    # so a thousand pipelined requests are a slow client, not a stalled broker.
                    await asyncio.sleep(0)
                    continue
                if (pending and _finished(pending[0][1])) or (
                    self.queue and len(pending) < limit and not self.context.order_held
                ):
                    continue
                await self.wakeup.wait()
        finally:
            tasks = [outcome for _, outcome in pending if isinstance(outcome, asyncio.Task)]
            pending.clear()
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    def _start(
        self, header: RequestHeader, body: Message | None, error: RequestDecodeError | None
    ) -> _Answered | asyncio.Task[Message | None]:
        """Run the request's handler up to its first wait, here and now (what an eager task does).

        Most requests never wait (a read, a metadata lookup, a fetch that finds data): they finish in
        this call, with no task, no loop iteration and no wake-up of the worker between the request's
        arrival and its answer. One that waits (an acks=all produce, a parked fetch) goes on in a task
        that drives the same coroutine from where it stopped.
        """
        context = self.context
        if error is None and header.api_key in self.server.ordered_api_keys:
            context.order_held = True
        coro = self._respond(header, body, error)
        try:
            awaited = coro.send(None)
        except StopIteration as done:
            context.order_held = False
            return _Answered(done.value)
        task = self.loop.create_task(_drive(coro, awaited))
        if context.order_held:
            # It waits before its effect: later requests stay queued (`_work` checks) until it says its
            # effect is done, or finishes.
            context.on_order_released = self.wakeup.set
            self.order_holder = task
            task.add_done_callback(self._release_order)
        task.add_done_callback(self._on_request_done)
        return task

    def _release_order(self, task: asyncio.Task[Message | None]) -> None:
        """A holder finished (answered, failed or cancelled): if it never released the order, do it now.
        One that released it earlier is no longer the holder; a later request may be."""
        if self.order_holder is task:
            self.order_holder = None
            self.context.release_order()

    def _write_response(self, header: RequestHeader, response: Message | None) -> bool:
        """Write one answer; False when the connection had to be closed instead."""
        if response is None or self.peer_gone or self.transport is None:
            return True
        try:
            parts = self.server.wire.encode_response(header, response)
        except Exception:
            self.server.stats.handler_errors_total += 1
            log.exception("cannot encode %s for %s; closing the connection", type(response).__name__, self.context.peer)
            parts = None
        if parts is None:
            self.close_for(f"{type(response).__name__} has no answer on this listener's protocol")
            return False
        if not write_parts(self.transport, parts):
            self.close_for("the log changed under an answer being sent from its files")
            return False
        self.last_active_s = self.loop.time()
        if self.context.close_after_response:
            self.close_for("the handler asked to close it after its answer")
            return False
        return True

    def _on_request_done(self, task: asyncio.Task[Message | None]) -> None:
        self.wakeup.set()

    def _maybe_resume_reading(self) -> None:
        if (
            self.reading_paused
            and not self.draining
            and self.can_write.is_set()
            and len(self.queue) < self.server.max_queued_requests // 2
        ):
            self.reading_paused = False
            self.waiting_for_queue = False
            if self.partial_since_s is not None:
                # The frame could not complete while we did not read: its time starts again now.
                self.partial_since_s = self.loop.time()
            if self.transport is not None and not self.peer_gone:
                self.transport.resume_reading()

    def idle(self) -> bool:
        """Nothing queued, in flight or half-received: the connection only holds its socket."""
        return not self.queue and self.in_flight == 0 and not self.decoder.pending and self.can_write.is_set()

    def close_for(self, reason: str) -> None:
        log.info("closing connection from %s: %s", self.context.peer, reason)
        self._abort()

    def drain(self) -> None:
        """Graceful close: read no more requests, finish and answer the ones already received."""
        self.draining = True
        if self.transport is not None and not self.peer_gone:
            self.transport.pause_reading()
        self.wakeup.set()

    async def _respond(
        self, header: RequestHeader, body: Message | None, error: RequestDecodeError | None
    ) -> Message | None:
        self.server.stats.requests_total += 1
        if error is not None:
            log.info("bad request from %s: %s", self.context.peer, error)
            return ErrorResponse(int(error.code), str(error))
        assert body is not None
        try:
            return await self.server.handler(self.context, header, body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.server.stats.handler_errors_total += 1
            log.exception("error handling %s from %s", type(body).__name__, self.context.peer)
            return ErrorResponse(int(ErrorCode.UNKNOWN_SERVER_ERROR), f"{type(exc).__name__}: {exc}")
        finally:
            if self.context.authenticated and self.decoder is not _CLOSED_DECODER:
                self.decoder.max_frame_bytes = self.server.max_frame_bytes  # the pre-authentication cap is over


def write_parts(transport: asyncio.WriteTransport, parts: list[Any]) -> bool:
    """Write one answer's parts in order: bytes through the transport, file regions (the log's FileRecords:
    anything that is not bytes and has `is_current()` and `regions()`) from the segment files
    with `os.sendfile` while the transport has nothing queued (the kernel copies from the page cache into
    the socket; nothing passes through Python), the rest read and queued behind. False when a slice's
    segment was truncated or closed since the read: the frame cannot be completed as announced."""
    head: list[bytes | bytearray | memoryview] = []
    for part in parts:
        if isinstance(part, (bytes, bytearray, memoryview)):
            head.append(part)
            continue
        if head:
            transport.writelines(head)
            head = []
        if not part.is_current():
            return False
        for fd, position, size in part.regions():
            sent = _sendfile(transport, fd, position, size) if transport.get_write_buffer_size() == 0 else 0
            if sent < size:
                rest = os.pread(fd, size - sent, position + sent)
                if len(rest) != size - sent:
                    return False
                transport.write(rest)
    if head:
        transport.writelines(head)
    return True


def _sendfile(transport: asyncio.WriteTransport, fd: int, position: int, size: int) -> int:
    """Bytes of [position, position + size) of `fd` the transport's socket took now (it is non-blocking)."""
    socket_fd = transport.get_extra_info("socket").fileno()
    sent = 0
    try:
        while sent < size:
            n = os.sendfile(socket_fd, fd, position + sent, size - sent)
            if n == 0:
                break  # the file ends early; the caller's read finds out
            sent += n
    except BlockingIOError:
        pass  # the socket buffer is full: the transport sends the rest as the peer reads
    except OSError:
        pass  # a broken connection: the transport's own write reports it
    return sent


async def wait_for_termination() -> None:
    """Return on the first SIGTERM or SIGINT, so a process can shut down in order instead of dying."""
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


class SocketServer:
    """Accepts connections and owns their worker tasks. `await start()`, then `await close()`."""

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        port: int = 0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_queued_requests: int = 64,
        max_in_flight: int = 16,
        *,
        max_connections: int = INT_MAX,
        max_connections_per_ip: int = INT_MAX,
        connections_max_idle_ms: int = 600_000,
        request_read_timeout_ms: int = 30_000,
        wire: Wire = MSGPACK_WIRE,
        ordered_api_keys: frozenset[int] = ORDERED_API_KEYS,
        queued_max_request_bytes: int = -1,
        pre_auth_max_frame_bytes: int | None = None,
    ) -> None:
        self.handler = handler
        self.wire = wire
        self.ordered_api_keys = ordered_api_keys
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self.max_queued_requests = max_queued_requests
        self.max_in_flight = max(1, max_in_flight)
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.connections_max_idle_ms = connections_max_idle_ms
        self.request_read_timeout_ms = request_read_timeout_ms
        #: queued.max.request.bytes: the most memory the frames too large for a connection's scratch buffer may
        #: hold while they are received, over all connections (-1: no limit).
        self.max_held_bytes = queued_max_request_bytes
        self.held_bytes = 0
        #: sasl.server.max.receive.size on a SASL listener: the largest frame before authentication.
        self.pre_auth_max_frame_bytes = pre_auth_max_frame_bytes
        self.stats = ServerStats()
        self._server: asyncio.AbstractServer | None = None
        self._workers: set[asyncio.Task[None]] = set()
        self._connections: set[_ServerConnection] = set()
        self._per_ip: dict[str, int] = {}
        self._next_id = 0
        self._maintenance: asyncio.Task[None] | None = None
        self._refusals_unlogged = 0
        self._last_refusal_log_s = -1e9
        self.budget: LoopBudget  # the event loop's (network/loop_budget.py), shared by every listener: set by start()

    @classmethod
    def from_config(
        cls, handler: Handler, host: str, port: int, config: Mapping[str, Any], **kwargs: Any
    ) -> SocketServer:
        """A server with the socket keys of a broker or controller config (both define them)."""
        return cls(
            handler,
            host,
            port,
            max_frame_bytes=config["socket.request.max.bytes"],
            max_connections=config["max.connections"],
            max_connections_per_ip=config["max.connections.per.ip"],
            connections_max_idle_ms=config["connections.max.idle.ms"],
            request_read_timeout_ms=config["socket.request.read.timeout.ms"],
            queued_max_request_bytes=config.get("queued.max.request.bytes", -1),
            **kwargs,
        )

    def queued_requests(self) -> int:
        """Requests received and not started yet, over every connection."""
        return sum(len(conn.queue) for conn in self._connections)

    # -- admission and bookkeeping --------------------------------------------------------------------

    def _admit(self, conn: _ServerConnection) -> str | None:
        """Count a new connection in; the reason to refuse it, if it is over a limit."""
        count = self._per_ip.get(conn.host, 0) + 1
        self._per_ip[conn.host] = count
        if self.stats.active_connections > self.max_connections:
            return f"max.connections={self.max_connections} reached"
        if count > self.max_connections_per_ip:
            return f"max.connections.per.ip={self.max_connections_per_ip} reached for {conn.host}"
        return None

    def _forget(self, conn: _ServerConnection) -> None:
        self._connections.discard(conn)
        count = self._per_ip.get(conn.host, 0) - 1
        if count > 0:
            self._per_ip[conn.host] = count
        else:
            self._per_ip.pop(conn.host, None)

    def _log_refusal(self, peer: str, reason: str) -> None:
        """One line per refused connection at most every 10 s, with how many were refused meanwhile."""
        now = asyncio.get_running_loop().time()
        if now - self._last_refusal_log_s < 10.0:
            self._refusals_unlogged += 1
            return
        more = f" ({self._refusals_unlogged} more refused since the last report)" if self._refusals_unlogged else ""
        log.warning("refused connection from %s: %s%s", peer, reason, more)
        self._last_refusal_log_s = now
        self._refusals_unlogged = 0

    async def _maintain(self) -> None:
        """Apply the time limits: close idle connections and those whose frame did not complete in time,
        and take read buffers back from connections that went quiet."""
        loop = asyncio.get_running_loop()
        limits_ms = [self.connections_max_idle_ms, self.request_read_timeout_ms, 4000]
        period_s = max(0.01, min(limits_ms) / 4000.0)
        while True:
            await asyncio.sleep(period_s)
            now = loop.time()
            idle_s = self.connections_max_idle_ms / 1000.0
            read_s = self.request_read_timeout_ms / 1000.0
            for conn in list(self._connections):
                if conn.peer_gone:
                    continue
                if (
                    conn.partial_since_s is not None
                    and not conn.waiting_for_queue
                    and now - conn.partial_since_s > read_s
                ):
                    self.stats.incomplete_closed_total += 1
                    conn.close_for(
                        f"request not complete after socket.request.read.timeout.ms={self.request_read_timeout_ms}"
                    )
                elif conn.idle() and now - conn.last_active_s > idle_s:
                    self.stats.idle_closed_total += 1
                    conn.close_for(f"idle for connections.max.idle.ms={self.connections_max_idle_ms}")
                elif conn.idle() and now - conn.last_active_s > 1.0:
                    conn.decoder.release()

    def _make_connection(self) -> _ServerConnection:
        self._next_id += 1
        conn = _ServerConnection(self, self._next_id)
        self._connections.add(conn)
        return conn

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.budget = loop_budget()
        self._server = await loop.create_server(self._make_connection, self.host, self.port, reuse_address=True)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self._maintenance = loop.create_task(self._maintain(), name="socket-server-maintenance")
        log.info("listening on %s:%d", self.host, self.port)

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self, drain_timeout_s: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (bounded), then close every connection."""
        await self.stop_accepting()
        if self._maintenance is not None:
            self._maintenance.cancel()
            await asyncio.gather(self._maintenance, return_exceptions=True)
            self._maintenance = None
        for conn in list(self._connections):
            conn.drain()
        if self._workers:
            await asyncio.wait(set(self._workers), timeout=drain_timeout_s)
        for conn in list(self._connections):
            if conn.transport is not None:
                conn.transport.close()
        for task in list(self._workers):
            task.cancel()
        if self._workers:
            await asyncio.gather(*self._workers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self._connections.clear()
