"""A real broker fed random and mutated frames for a bounded time: it stays up, its memory stays bounded,
and the data it acknowledged before reads back byte-identical."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from cluster.local_cluster import free_ports
from network.connection import BrokerConnection
from protocol.codec import packb, to_wire
from protocol.messages import (
    ApiVersionsRequest,
    FetchPartition,
    FetchRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetForLeaderEpochPartition,
    OffsetForLeaderEpochRequest,
    ProducePartition,
    ProduceRequest,
    RequestHeader,
    api_key_of,
)
from protocol.record_batch import build_batch
from tests.integration.processes import BrokerProcess, assign, standalone_broker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

FUZZ_SECONDS = 8.0
SEED = 20261122


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def valid_frames() -> list[bytes]:
    """Well-formed requests of every data-plane kind: the raw material mutations start from."""
    bodies = [
        ApiVersionsRequest(),
        MetadataRequest(None),
        MetadataRequest(["t"]),
        ProduceRequest(1, 1000, [ProducePartition("t", 0, build_batch([b"fuzz"]))]),
        ProduceRequest(-1, 10, [ProducePartition("t", 1, build_batch([(b"k", b"v", [("h", b"x")])]))]),
        FetchRequest(-1, 10, 1, 1 << 16, [FetchPartition("t", 0, 0, 1 << 16)]),
        FetchRequest(1, 10, 1, 1 << 16, [FetchPartition("t", 0, 0, 1 << 16)]),
        ListOffsetsRequest(-1, [ListOffsetsPartition("t", 0, -1)]),
        OffsetForLeaderEpochRequest([OffsetForLeaderEpochPartition("t", 0, 0, -1)]),
    ]
    frames = []
    for i, body in enumerate(bodies):
        header = RequestHeader(int(api_key_of(body)), 0, i, "fuzz")
        frames.append(packb([to_wire(header), to_wire(body)]))
    return frames


def random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return rng.randrange(-(2**63), 2**63)
    if kind == 1:
        return rng.choice([None, True, False, 0, -1, 2**31, 1.5])
    if kind == 2:
        return rng.randbytes(rng.randrange(40))
    if kind == 3:
        return "".join(rng.choice("abtz_.-") for _ in range(rng.randrange(12)))
    if kind in (4, 5):
        return rng.choice(["api_key", "partitions", "records", "topic", "fetch_offset", "acks"])
    if kind == 6:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {str(random_value(rng, depth + 1)): random_value(rng, depth + 1) for _ in range(rng.randrange(5))}


def mutate(rng: random.Random, body: bytes) -> bytes:
    data = bytearray(body)
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(4)
        if op == 0 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 1 and data:
            del data[rng.randrange(len(data)) :]
        elif op == 2:
            data[rng.randrange(len(data) + 1) : 0] = rng.randbytes(rng.randrange(1, 8))
        elif data:
            i = rng.randrange(len(data))
            data[i : i + 1] = b"\xff"
    return bytes(data)


def fuzz_payloads(rng: random.Random, frames: list[bytes]) -> Iterator[bytes]:
    while True:
        kind = rng.randrange(6)
        if kind == 0:
            yield rng.randbytes(rng.randrange(1, 200))  # noise, prefix included
        elif kind == 1:
            body = mutate(rng, rng.choice(frames))
            yield struct.pack(">I", len(body)) + body
        elif kind == 2:
            body = msgpack.packb([random_value(rng), random_value(rng)], use_bin_type=True)
            yield struct.pack(">I", len(body)) + body
        elif kind == 3:
            body = rng.choice(frames)
            yield struct.pack(">I", len(body) + rng.randrange(1, 50)) + body  # announces more than it sends
        elif kind == 4:
            yield struct.pack(">I", rng.choice([2**31, 2**32 - 1, 100 * 2**20 + 1])) + rng.randbytes(5)
        else:
            body = rng.choice(frames)
            yield struct.pack(">I", len(body)) + body  # valid, mixed in so state actually changes


def send_fuzz(port: int, rng: random.Random, payloads: Iterator[bytes], seconds: float) -> int:
    """Send payloads for `seconds`, a few per connection, reading whatever comes back; how many were sent."""
    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.settimeout(0.05)
            for _ in range(rng.randrange(1, 8)):
                try:
                    s.sendall(next(payloads))
                    sent += 1
                except OSError:
                    break  # the broker closed this connection: expected for broken frames
            try:
                s.recv(65536)
            except OSError:
                pass
    return sent


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    (port,) = free_ports(1)
    b = standalone_broker(tmp_path, 1, port, "socket.request.read.timeout.ms=500", "socket.request.max.bytes=1048576")
    b.start()
    asyncio.run(assign([b], "t", 2, {0: 1, 1: 1}, replicas=[1]))
    yield b
    assert b.stop() == 0, b.log_text()[-3000:]


async def read_all(port: int, partition: int) -> bytes:
    async with await BrokerConnection.connect("127.0.0.1", port) as conn:
        resp = await conn.send(FetchRequest(-1, 0, 1, 1 << 22, [FetchPartition("t", partition, 0, 1 << 22)]))
        return bytes(resp.partitions[0].records)


def test_random_and_mutated_frames_leave_the_broker_serving_with_its_data_intact(broker: BrokerProcess) -> None:
    assert broker.proc is not None

    async def seed_data() -> None:
        async with await BrokerConnection.connect("127.0.0.1", broker.port) as conn:
            for i in range(20):
                batch = build_batch([f"acked-{i}".encode()] * 5)
                resp = await conn.send(ProduceRequest(-1, 5000, [ProducePartition("t", 1, batch)]))
                assert resp.partitions[0].error_code == 0

    asyncio.run(seed_data())
    before_data = asyncio.run(read_all(broker.port, 1))
    before_rss = rss_mb(broker.proc.pid)

    rng = random.Random(SEED)
    sent = send_fuzz(broker.port, rng, fuzz_payloads(rng, valid_frames()), FUZZ_SECONDS)
    assert sent > 500

    # then the broker is up, answers, its memory stayed bounded, and what it acknowledged is unchanged
    assert broker.alive, broker.log_text()[-3000:]

    async def answers() -> bool:
        async with await BrokerConnection.connect("127.0.0.1", broker.port) as conn:
            return bool((await conn.send(ApiVersionsRequest())).api_keys)

    assert asyncio.run(answers())
    grown = rss_mb(broker.proc.pid) - before_rss
    assert grown < 100, f"RSS grew {grown:.0f} MB over {sent} fuzz frames"
    after = asyncio.run(read_all(broker.port, 1))
    assert after[: len(before_data)] == before_data
