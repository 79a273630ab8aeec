"""Request work is shared out by turns of the event loop, on real TCP: requests pipelined on one connection,
and requests on many connections at once, each costing the loop a few milliseconds, never keep a timer
waiting for much longer than one turn's budget (network/loop_budget.py), and every answer still comes
back, in order."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest

from network.loop_budget import DEFAULT_SLICE_S
from network.request_context import ConnectionContext
from network.socket_server import SocketServer
from protocol.codec import Message, packb, to_wire
from protocol.messages import ApiVersionsRequest, ApiVersionsResponse, RequestHeader
from server_common.loop_lag import LoopLagMonitor

pytestmark = pytest.mark.timeout(60)

#: What each request costs the loop: a handler that computes for this long without yielding.
REQUEST_S = 0.005
#: How late a timer may run while they are served: one turn's budget, one request that crossed it, and room
#: for a loaded machine. Served back to back, the requests below held the loop 0.5 s and more.
BOUND_S = DEFAULT_SLICE_S + REQUEST_S + 0.1


async def busy(ctx: ConnectionContext, header: RequestHeader, body: Message) -> Message | None:
    deadline = time.perf_counter() + REQUEST_S
    while time.perf_counter() < deadline:
        pass
    return ApiVersionsResponse()


@pytest.fixture
async def server() -> AsyncIterator[SocketServer]:
    served = SocketServer(busy, "127.0.0.1", 0, max_queued_requests=1000)
    await served.start()
    yield served
    await served.close(drain_timeout_s=1.0)


def requests(count: int, first_id: int = 1) -> bytes:
    frames = []
    for correlation_id in range(first_id, first_id + count):
        payload = packb([to_wire(RequestHeader(18, 0, correlation_id, "test")), to_wire(ApiVersionsRequest())])
        frames.append(struct.pack(">I", len(payload)) + payload)
    return b"".join(frames)


async def answers(reader: asyncio.StreamReader, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        (size,) = struct.unpack(">I", await reader.readexactly(4))
        header, _ = msgpack.unpackb(await reader.readexactly(size), raw=False)
        ids.append(header["correlation_id"])
    return ids


async def latest_timer(work: asyncio.Future[Any]) -> float:
    """The longest a 5 ms timer waited for the loop while `work` ran."""
    monitor = LoopLagMonitor(interval_s=0.005, warn_ms=10_000)
    monitor.start()
    try:
        await work
    finally:
        monitor.stop()
    return monitor.take().max_ms / 1000.0


async def test_requests_pipelined_on_one_connection_take_turns_with_the_rest_of_the_loop(server: SocketServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(requests(100))  # one read brings them all: 0.5 s of work
        got = asyncio.ensure_future(answers(reader, 100))
        lag_s = await latest_timer(got)
        assert got.result() == list(range(1, 101))
    finally:
        writer.close()
    assert lag_s < BOUND_S, f"a timer waited {lag_s * 1000:.0f} ms"


async def test_requests_on_many_connections_at_once_share_one_budget(server: SocketServer) -> None:
    conns = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(8)]
    try:
        for i, (_, writer) in enumerate(conns):
            writer.write(requests(12, first_id=100 * i))
        work = asyncio.gather(*(answers(reader, 12) for reader, _ in conns))
        lag_s = await latest_timer(work)
        assert work.result() == [list(range(100 * i, 100 * i + 12)) for i in range(8)]
    finally:
        for _, writer in conns:
            writer.close()
    assert lag_s < BOUND_S, f"a timer waited {lag_s * 1000:.0f} ms"
