"""Pipelined requests on one connection: effects and answers keep request order, waits overlap."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from cluster.local_cluster import free_ports
from protocol.codec import packb, to_wire
from protocol.errors import ErrorCode
from protocol.messages import (
    FetchPartition,
    FetchRequest,
    MetadataRequest,
    ProducePartition,
    ProduceRequest,
    RequestHeader,
)
from protocol.record_batch import build_batch, iter_records
from tests.integration.processes import BrokerProcess, assign, standalone_broker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    (port,) = free_ports(1)
    b = standalone_broker(tmp_path, 1, port)
    b.start()
    asyncio.run(assign([b], "p", 1, {0: 1}, replicas=[1]))
    yield b
    b.stop()


def frame(api_key: int, correlation_id: int, body: object) -> bytes:
    payload = packb([to_wire(RequestHeader(api_key, 0, correlation_id, "pipeline")), to_wire(body)])
    return struct.pack(">I", len(payload)) + payload


def read_frames(sock: socket.socket, n: int) -> list[tuple[float, dict, dict]]:
    out: list[tuple[float, dict, dict]] = []
    buf = b""
    while len(out) < n:
        buf += sock.recv(1 << 20)
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
            size = struct.unpack(">I", buf[:4])[0]
            header, body = msgpack.unpackb(buf[4 : 4 + size], raw=False)
            out.append((time.monotonic(), header, body))
            buf = buf[4 + size :]
    return out


def test_a_produce_pipelined_behind_a_parked_fetch_wakes_it_and_answers_stay_in_order(broker: BrokerProcess) -> None:
    parked_fetch = FetchRequest(-1, 3000, 1, 1 << 20, [FetchPartition("p", 0, 0, 1 << 20)])
    produce = ProduceRequest(1, 5000, [ProducePartition("p", 0, build_batch([b"wake-up"]))])
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        started = time.monotonic()
        s.sendall(frame(1, 1, parked_fetch) + frame(0, 2, produce) + frame(3, 3, MetadataRequest(["p"])))
        (t1, h1, fetched), (_, h2, produced), (_, h3, meta) = read_frames(s, 3)
    assert [h1["correlation_id"], h2["correlation_id"], h3["correlation_id"]] == [1, 2, 3]
    # the produce did not wait behind the parked fetch: it woke it long before max_wait_ms (3000)
    assert t1 - started < 2.0
    assert produced["partitions"][0]["error_code"] == ErrorCode.NONE
    (part,) = fetched["partitions"]
    assert [r.value for r in iter_records(part["records"])] == [b"wake-up"]
    assert meta["topics"][0]["topic"] == "p"


def test_pipelined_appends_land_in_request_order(broker: BrokerProcess) -> None:
    requests = b"".join(
        frame(0, i, ProduceRequest(1, 5000, [ProducePartition("p", 0, build_batch([f"v{i}".encode()]))]))
        for i in range(1, 51)
    )
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(requests)
        answers = read_frames(s, 50)
        assert [h["correlation_id"] for _, h, _ in answers] == list(range(1, 51))
        offsets = [b["partitions"][0]["base_offset"] for _, _, b in answers]
        assert offsets == sorted(offsets) and len(set(offsets)) == 50
        s.sendall(frame(1, 99, FetchRequest(-1, 0, 1, 1 << 22, [FetchPartition("p", 0, offsets[0], 1 << 22)])))
        [(_, _, fetched)] = read_frames(s, 1)
    values = [r.value for r in iter_records(fetched["partitions"][0]["records"])]
    assert values == [f"v{i}".encode() for i in range(1, 51)]


def test_a_produce_appended_in_slices_takes_effect_before_the_next_request_on_its_connection(
    broker: BrokerProcess,
) -> None:
    # 70 partitions are appended in two slices with the event loop let go in between; the request behind it
    # (to the last partition, in the second slice) must still land after it, as if they ran one by one.
    asyncio.run(assign([broker], "wide", 70, dict.fromkeys(range(70), 1), replicas=[1]))
    first = ProduceRequest(1, 5000, [ProducePartition("wide", p, build_batch([b"first"])) for p in range(70)])
    second = ProduceRequest(1, 5000, [ProducePartition("wide", 69, build_batch([b"second"]))])
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(frame(0, 1, first) + frame(0, 2, second))
        (_, h1, a1), (_, h2, a2) = read_frames(s, 2)
        assert (h1["correlation_id"], h2["correlation_id"]) == (1, 2)
        assert {p["error_code"] for p in a1["partitions"]} == {0} and a2["partitions"][0]["error_code"] == 0
        s.sendall(frame(1, 3, FetchRequest(-1, 0, 1, 1 << 20, [FetchPartition("wide", 69, 0, 1 << 20)])))
        [(_, _, fetched)] = read_frames(s, 1)
    assert [r.value for r in iter_records(fetched["partitions"][0]["records"])] == [b"first", b"second"]
