"""An asyncio connection to one broker or controller: pipelined requests matched by correlation id.

How this works
--------------
`BrokerConnection.connect` opens a TCP connection (TCP_NODELAY) whose protocol object reads with the
shared `FrameDecoder` through asyncio's BufferedProtocol interface, so large responses land in one
frame-sized buffer. `send` encodes `[header, body]`, writes it, and awaits the future registered under
its correlation id; any number of requests may be in flight and responses may be awaited in any order.
A broken connection fails every pending future with `ConnectionError`; a request that outlives its
timeout raises `asyncio.TimeoutError` and its late response is dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, TypeVar

from network.frame_protocol import FrameProtocol
from protocol.api_keys import ApiKey
from protocol.codec import Message, from_wire, packb, to_wire, unpackb
from protocol.errors import ProtocolError
from protocol.fetch_frame import FETCH_RECORDS_APART, fetch_response_of, is_records_apart, split_frame
from protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, frame_prefix
from protocol.messages import RESPONSE_TYPES, ApiVersionsRequest, api_key_of

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)


class _ClientProtocol(FrameProtocol):
    def __init__(self, max_frame_bytes: int) -> None:
        # The server's answers are trusted to be as large as they say (responses to what we asked for), so
        # a 1 MiB fetch response is read straight into a buffer of its size.
        super().__init__(FrameDecoder(max_frame_bytes=max_frame_bytes, trust_prefix=True))
        # correlation id -> (future, API, whether the answer comes in FETCH v1's layout)
        self.pending: dict[int, tuple[asyncio.Future[Message], ApiKey, bool]] = {}
        self.closed: asyncio.Future[None] = self.loop.create_future()

    def on_bad_frame(self, exc: ProtocolError) -> None:
        log.warning("closing connection: bad response frame: %s", exc)
        self._fail_all(ConnectionError(f"bad response from server: {exc}"))
        if self.transport is not None:
            self.transport.close()

    def on_frame(self, frame: bytes | bytearray) -> None:
        parts: list[memoryview] | None = None
        if is_records_apart(frame):  # an answer to a FETCH v1: records follow the msgpack part
            header, body, parts = split_frame(frame)
        else:
            value = unpackb(frame)
            if type(value) is not list or len(value) != 2 or type(value[0]) is not dict:
                raise ProtocolError("a response is a 2-element array [header, body]")
            header, body = value
        correlation_id = header.get("correlation_id")
        entry = self.pending.pop(correlation_id, None) if type(correlation_id) is int else None
        if entry is None:
            return  # a response to a request that timed out
        future, api_key, records_apart = entry
        if future.done():
            return
        try:
            if parts is None:  # also a broker's refusal of a version it does not support
                future.set_result(from_wire(RESPONSE_TYPES[api_key], body))
            elif records_apart:
                future.set_result(fetch_response_of(body, parts))
            else:
                raise ProtocolError(f"answer to correlation id {correlation_id} in FETCH v1's layout, not asked for")
        except ProtocolError as exc:
            future.set_exception(exc)

    async def drain(self) -> None:
        await self.can_write.wait()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(ConnectionError(f"connection closed{': ' + str(exc) if exc else ''}"))
        self.can_write.set()
        if not self.closed.done():
            self.closed.set_result(None)

    def _fail_all(self, exc: Exception) -> None:
        pending, self.pending = self.pending, {}
        for future, _, _ in pending.values():
            if not future.done():
                future.set_exception(exc)


def _time_out(future: asyncio.Future[Message]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class BrokerConnection:
    """One TCP connection; safe to share between tasks on the same event loop."""

    def __init__(self, protocol: _ClientProtocol, host: str, port: int, client_id: str) -> None:
        self._protocol = protocol
        self.host = host
        self.port = port
        self.client_id = client_id
        self._correlation = itertools.count(1)

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        client_id: str = "minibroker-client",
        timeout_s: float = 5.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        local_address: str | None = None,
    ) -> BrokerConnection:
        """`local_address` binds our end to that address (any port): a node's links then carry its own
        address as source, so a firewall rule can name one link between two nodes."""
        loop = asyncio.get_running_loop()
        local_addr = (local_address, 0) if local_address else None
        _, protocol = await asyncio.wait_for(
            loop.create_connection(lambda: _ClientProtocol(max_frame_bytes), host, port, local_addr=local_addr),
            timeout_s,
        )
        return cls(protocol, host, port, client_id)

    @property
    def is_open(self) -> bool:
        t = self._protocol.transport
        return t is not None and not t.is_closing()

    @property
    def in_flight(self) -> int:
        return len(self._protocol.pending)

    async def send(
        self, body: M | Message, timeout_s: float | None = 30.0, expect_response: bool = True, api_version: int = 0
    ) -> Any:
        """Send a request and return its typed response (None when `expect_response` is False).

        A FETCH sent with `api_version=1` gets its records as views of the answer's frame, not copies
        (protocol/fetch_frame.py): bytes-like objects to read, valid as long as they are referenced."""
        api_key = api_key_of(body)
        records_apart = api_key == ApiKey.FETCH and api_version == FETCH_RECORDS_APART
        transport = self._protocol.transport
        if transport is None or transport.is_closing():
            raise ConnectionError(f"connection to {self.host}:{self.port} is closed")
        correlation_id = next(self._correlation)
        header = {
            "api_key": int(api_key),
            "api_version": api_version,
            "correlation_id": correlation_id,
            "client_id": self.client_id,
        }
        payload = packb([header, to_wire(body)])
        protocol = self._protocol
        future: asyncio.Future[Message] | None = None
        if expect_response:
            future = protocol.loop.create_future()
            protocol.pending[correlation_id] = (future, api_key, records_apart)
        transport.writelines([frame_prefix(len(payload)), payload])
        if not protocol.can_write.is_set():
            await protocol.can_write.wait()
        if future is None:
            return None
        # A timer on the loop instead of asyncio.wait_for: the same TimeoutError for the caller, without
        # a task-wrapping waiter per request (a few µs on every request, and requests are the hot path).
        timer = protocol.loop.call_later(timeout_s, _time_out, future) if timeout_s else None
        try:
            return await future
        finally:
            if timer is not None:
                timer.cancel()
            protocol.pending.pop(correlation_id, None)

    async def send_raw(self, frame_body: bytes) -> None:
        """Write an arbitrary frame body (tests of malformed input use this)."""
        transport = self._protocol.transport
        if transport is None:
            raise ConnectionError("not connected")
        transport.writelines([frame_prefix(len(frame_body)), frame_body])
        await self._protocol.drain()

    async def api_versions(self) -> Any:
        return await self.send(ApiVersionsRequest())

    async def close(self) -> None:
        transport = self._protocol.transport
        if transport is not None and not transport.is_closing():
            transport.close()
        await self._protocol.closed

    async def wait_closed(self) -> None:
        await self._protocol.closed

    async def __aenter__(self) -> BrokerConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
