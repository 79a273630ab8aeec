"""A real broker process under resource abuse: what a connection may cost, how long it may stall, how many
there may be, and what a parked request leaves behind when its client goes away."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.local_cluster import free_ports
from network.connection import BrokerConnection
from protocol.messages import ApiVersionsRequest, FetchPartition, FetchRequest
from tests.integration.processes import BrokerProcess, assign, standalone_broker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def closed_by_peer(sock: socket.socket, within_s: float) -> bool:
    """True when the server closes `sock` within `within_s` (recv returns b"" or the connection resets)."""
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def serves(port: int) -> bool:
    async with await BrokerConnection.connect("127.0.0.1", port) as conn:
        resp = await conn.send(ApiVersionsRequest())
        return bool(resp.api_keys)


@pytest.fixture
def broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    (port,) = free_ports(1)
    overrides = getattr(request, "param", ())
    b = standalone_broker(tmp_path, 1, port, "metrics.interval.ms=100", *overrides)
    b.start()
    yield b
    assert b.stop() == 0, b.log_text()[-3000:]


def test_silent_connections_announcing_huge_frames_cost_only_what_they_sent(broker: BrokerProcess) -> None:
    assert broker.proc is not None
    before = rss_mb(broker.proc.pid)
    # given ten connections that each announce a 100 MB frame, send one byte of it and go silent
    bombs = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(10)]
    for s in bombs:
        s.sendall(bytes.fromhex("0640000092"))
    # and five hundred connections that send nothing at all
    idle = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(500)]
    try:
        assert asyncio.run(serves(broker.port))  # every connection has been accepted and read by now
        # then the broker grew by a few MB at most, not by the 1 GB announced (nor 256 KiB per connection)
        grown = rss_mb(broker.proc.pid) - before
        assert grown < 40, f"RSS grew {grown:.0f} MB"
    finally:
        for s in bombs + idle:
            s.close()
    assert asyncio.run(serves(broker.port))


@pytest.mark.parametrize("broker", [("socket.request.read.timeout.ms=300",)], indirect=True)
def test_a_frame_that_never_completes_gets_its_connection_closed(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port)) as stalled:
        stalled.sendall(bytes.fromhex("0000100092"))  # 4 KiB announced, 1 byte sent
        assert closed_by_peer(stalled, within_s=5.0)
    assert asyncio.run(serves(broker.port))


@pytest.mark.parametrize("broker", [("connections.max.idle.ms=300",)], indirect=True)
def test_an_idle_connection_is_closed_after_connections_max_idle_ms(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port)) as idle:
        assert closed_by_peer(idle, within_s=5.0)

    # while a connection that keeps talking stays open past the idle time
    async def busy() -> None:
        async with await BrokerConnection.connect("127.0.0.1", broker.port) as conn:
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                assert (await conn.send(ApiVersionsRequest())).api_keys
                await asyncio.sleep(0.1)

    asyncio.run(busy())


@pytest.mark.parametrize("broker", [("max.connections.per.ip=3",)], indirect=True)
def test_connections_past_max_connections_per_ip_are_refused_and_the_others_keep_working(
    broker: BrokerProcess,
) -> None:
    async def scenario() -> None:
        conns = [await BrokerConnection.connect("127.0.0.1", broker.port) for _ in range(3)]
        try:
            for c in conns:
                assert (await c.send(ApiVersionsRequest())).api_keys
            with socket.create_connection(("127.0.0.1", broker.port)) as fourth:
                assert closed_by_peer(fourth, within_s=5.0)
            for c in conns:
                assert (await c.send(ApiVersionsRequest())).api_keys
        finally:
            for c in conns:
                await c.close()
        # once they are closed, new connections are accepted again
        assert await serves(broker.port)

    asyncio.run(scenario())
    assert "max.connections.per.ip=3 reached" in broker.log_text()


def latest_broker_record(metrics_dir: Path, after_ms: int) -> dict[str, object] | None:
    rows = []
    for path in metrics_dir.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line being written
            if row.get("kind") == "broker" and row["ts_ms"] > after_ms:
                rows.append(row)
    return max(rows, key=lambda r: r["ts_ms"]) if rows else None


def test_fetches_parked_by_a_client_that_went_away_leave_the_purgatory(broker: BrokerProcess, tmp_path: Path) -> None:
    asyncio.run(assign([broker], "t", 1, {0: 1}, replicas=[1]))

    async def park_and_leave() -> None:
        conn = await BrokerConnection.connect("127.0.0.1", broker.port)
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=2**31 - 1,  # a deadline 24.8 days away
            min_bytes=1,
            max_bytes=1 << 20,
            partitions=[FetchPartition("t", 0, 0, 1024)],
        )
        waits = [asyncio.ensure_future(conn.send(request, timeout_s=3600)) for _ in range(5)]
        await asyncio.sleep(0.5)
        assert not any(w.done() for w in waits)
        for w in waits:
            w.cancel()
        await conn.close()

    asyncio.run(park_and_leave())
    closed_ms = int(time.time() * 1000)

    # then the broker's next metrics records show nothing parked
    deadline = time.monotonic() + 10
    record = None
    while time.monotonic() < deadline:
        record = latest_broker_record(tmp_path / "metrics", closed_ms + 200)
        if record is not None:
            break
        time.sleep(0.1)
    assert record is not None, "no broker metrics record after the connection closed"
    assert record["FetchPurgatorySize"] == 0


@pytest.mark.parametrize("broker", [("queued.max.request.bytes=67108864",)], indirect=True)
def test_half_sent_large_frames_hold_no_more_than_queued_max_request_bytes(broker: BrokerProcess) -> None:
    # Ten connections each sent 30 MiB of a 100 MiB frame and went quiet: the broker grew from 52 to 403 MB
    # for the 30 s of socket.request.read.timeout.ms. Over queued.max.request.bytes (64 MiB here) the
    # connection whose frame would pass it is closed, the others keep theirs and the broker keeps serving.
    assert broker.proc is not None
    before = rss_mb(broker.proc.pid)
    chunk = bytes.fromhex("06400000") + b"\x00" * (30 * 1024 * 1024)
    senders = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(4)]
    closed = []
    try:
        for s in senders:
            s.settimeout(10)
            try:
                s.sendall(chunk)
            except OSError:
                pass  # closed while it sent: the broker refused to hold its frame
        closed = [closed_by_peer(s, 2.0) for s in senders]
        assert asyncio.run(serves(broker.port))
        grown = rss_mb(broker.proc.pid) - before
    finally:
        for s in senders:
            s.close()
    assert closed.count(True) >= 2, closed  # 2 x 30 MiB fit in 64 MiB; the third and fourth did not
    assert grown < 64 + 40, f"RSS grew {grown:.0f} MB"
    assert "queued.max.request.bytes=67108864 reached" in broker.log_text()
