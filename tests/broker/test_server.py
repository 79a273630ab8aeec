"""The socket server's request path, on real TCP with a scripted handler.

A handler that does not wait is run and answered as its request arrives; one that waits goes on in a
task. These tests pin what that must not change: answers in request order, a wait's outcome (result,
exception, cancellation) reaching the handler where it waits, and a closed connection cancelling the
handlers still waiting for it.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import pytest

from network.request_context import ConnectionContext
from network.socket_server import SocketServer
from protocol.codec import Message, packb, to_wire
from protocol.errors import ErrorCode
from protocol.messages import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse, RequestHeader

pytestmark = pytest.mark.timeout(20)


@dataclass
class Script:
    """What the handler does per topic name of a METADATA request; API_VERSIONS is answered at once."""

    gates: dict[str, asyncio.Future[str]] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)  # what each handler observed, in order
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def gate(self, name: str) -> asyncio.Future[str]:
        if name not in self.gates:
            self.gates[name] = asyncio.get_running_loop().create_future()
            self.note(f"waiting {name}")
        return self.gates[name]

    def note(self, what: str) -> None:
        self.seen.append(what)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def until(self, *expected: str) -> None:
        async with self.changed:
            await self.changed.wait_for(lambda: all(e in self.seen for e in expected))

    async def handle(self, ctx: ConnectionContext, header: RequestHeader, body: Message) -> Message | None:
        if isinstance(body, ApiVersionsRequest):
            self.note(f"now {header.correlation_id}")
            return ApiVersionsResponse()
        assert isinstance(body, MetadataRequest) and body.topics
        (name,) = body.topics
        if name == "yield-then-fail":
            await asyncio.sleep(0)  # a bare yield: nothing awaited
            raise ValueError("failed after a yield")
        try:
            outcome = await self.gate(name)
        except asyncio.CancelledError:
            self.note(f"cancelled {name}")
            raise
        except LookupError as exc:
            self.note(f"caught {exc}")
            return MetadataResponse(error_message=f"recovered from {exc}")
        self.note(f"resumed {name} with {outcome}")
        return MetadataResponse(error_message=outcome)


@pytest.fixture
async def served() -> AsyncIterator[tuple[Script, SocketServer]]:
    script = Script()
    server = SocketServer(script.handle, "127.0.0.1", 0)
    await server.start()
    yield script, server
    await server.close(drain_timeout_s=1.0)


def frame(api_key: int, correlation_id: int, body: Message) -> bytes:
    payload = packb([to_wire(RequestHeader(api_key, 0, correlation_id, "test")), to_wire(body)])
    return struct.pack(">I", len(payload)) + payload


def metadata(correlation_id: int, name: str) -> bytes:
    return frame(3, correlation_id, MetadataRequest([name]))


def api_versions(correlation_id: int) -> bytes:
    return frame(18, correlation_id, ApiVersionsRequest())


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    header, body = msgpack.unpackb(await reader.readexactly(size), raw=False)
    return header["correlation_id"], body


async def no_answer_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        await asyncio.wait_for(reader.readexactly(1), seconds)
    except TimeoutError:
        return True
    return False


async def test_answers_leave_in_request_order_when_a_waiting_request_is_ahead(
    served: tuple[Script, SocketServer],
) -> None:
    script, server = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(api_versions(1) + metadata(2, "slow") + api_versions(3) + api_versions(4))
    first = await read_answer(reader)
    assert first[0] == 1
    # 3 and 4 ran (in order, behind 2's start) but their answers wait behind 2's
    await script.until("now 3", "now 4")
    assert await no_answer_within(reader, 0.2)
    script.gate("slow").set_result("done")
    answers = [await read_answer(reader) for _ in range(3)]
    assert [cid for cid, _ in answers] == [2, 3, 4]
    assert answers[0][1]["error_message"] == "done"
    assert script.seen == ["now 1", "waiting slow", "now 3", "now 4", "resumed slow with done"]
    writer.close()


async def test_a_wait_that_fails_reaches_the_handler_and_one_that_raises_becomes_an_error_answer(
    served: tuple[Script, SocketServer],
) -> None:
    script, server = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(metadata(1, "fails") + metadata(2, "yield-then-fail") + api_versions(3))
    await script.until("waiting fails")
    script.gate("fails").set_exception(LookupError("no such thing"))
    answers = [await read_answer(reader) for _ in range(3)]
    assert [cid for cid, _ in answers] == [1, 2, 3]
    assert answers[0][1]["error_message"] == "recovered from no such thing"
    assert answers[1][1]["error_code"] == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "failed after a yield" in answers[1][1]["error_message"]
    assert server.stats.handler_errors_total == 1
    writer.close()


async def test_closing_the_connection_cancels_the_handlers_still_waiting(served: tuple[Script, SocketServer]) -> None:
    script, server = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(metadata(1, "never-a") + metadata(2, "never-b") + api_versions(3))
    await script.until("waiting never-a", "waiting never-b", "now 3")
    writer.close()
    await writer.wait_closed()
    await script.until("cancelled never-a", "cancelled never-b")
    assert not any(s.startswith("resumed") for s in script.seen)
    # the server keeps serving other connections
    reader2, writer2 = await asyncio.open_connection("127.0.0.1", server.port)
    writer2.write(api_versions(7))
    assert (await read_answer(reader2))[0] == 7
    writer2.close()
