"""FETCH against one real broker process, beside raw uvloop sockets between two processes.

    .venv/bin/python -m bench.fetch_rpc [--quick]

Setup: one standalone broker process (no controller) on a free loopback port; this process sends it a
LEADER_AND_ISR making it the leader of `bench-0` with ISR [itself], then fills the log with 16 KiB
batches, 1 MiB of them per PRODUCE (acks=1, a few requests in flight). This process is the client.

Measured, each variant twice, alternating, the better of the two kept (the machine is shared, so a
neighbour's burst should not decide the ratio):

* `fetch_rps`: sequential FETCH round trips (one in flight) at the log end with max_wait_ms=0, i.e.
  a small request and a small empty response;
* `raw_rps`: sequential round trips against an echo process whose request and reply frames have exactly
  the sizes of that FETCH request and response;
* `fetch_mb_s`: sequential FETCHes from offset 0 to the log end with partition_max_bytes = max_bytes =
  1 MiB, replica_id=-1 (a consumer), counting record bytes received;
  whole passes over the log until at least 1 s (3 s full) went by; FETCH version 1, whose records
  travel beside the msgpack (protocol/fetch_frame.py), as consumers send it; `fetch_v0_mb_s` is the
  same with version 0, records inside the msgpack;
* `raw_mb_s`: a stream of 1 MiB length-prefixed messages from a source process, read here through an
  asyncio BufferedProtocol: as many bytes, and at least 4 times the log;
* `ratio_mb` = fetch_mb_s / raw_mb_s (target >= 0.5), `ratio_rps` = fetch_rps / raw_rps;
* `broker_cpu_us_per_round_trip`: the broker's CPU time (user and system) per small FETCH of the
  `fetch_rps` phase, and `echo_cpu_us_per_round_trip` the echo process's per round trip of the `raw_rps`
  phase, its floor: what any server pays to read a request and write an answer (lower of the two rounds).

Beside the rates, for the better 1 MiB round: CPU per MiB of the broker and of this client process
(user and system, from /proc and os.times) and the broker's minor page faults per MiB, which show
where a sequential FETCH's time goes (one request in flight, so broker and client time add up).

With BENCH_PROFILE_DIR=D in the environment the broker runs under cProfile and leaves D/broker.prof.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import (
    ProcessReaper,
    broker_argv,
    cpu_us_per_trip,
    free_port,
    main_guard,
    ping_pong,
    process_usage,
    progress,
    rounded,
    start_peer,
    stop_peer,
    stream_reader,
    wait_for_line,
)
from network.connection import BrokerConnection
from protocol.codec import packb, to_wire
from protocol.errors import ErrorCode
from protocol.fetch_frame import FETCH_RECORDS_APART
from protocol.messages import (
    BrokerEndpoint,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    ProducePartition,
    ProduceRequest,
)
from protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, build_batch, read_header

TOPIC = "bench"
BROKER_ID = 1
BATCH_BYTES = 16 * 1024
RECORDS_PER_BATCH = 16
MIB = 1024 * 1024
BATCHES_PER_PRODUCE = MIB // BATCH_BYTES
PRODUCES_IN_FLIGHT = 4
_OFFSET_AND_LENGTH = struct.Struct(">qi")


def build_record_set() -> bytes:
    """1 MiB of distinct 16 KiB batches (offsets are assigned by the broker, so one set is reused)."""
    batches = []
    for _ in range(BATCHES_PER_PRODUCE):
        value_bytes = (BATCH_BYTES - HEADER_SIZE) // RECORDS_PER_BATCH - 16
        values = [os.urandom(value_bytes) for _ in range(RECORDS_PER_BATCH)]
        shortfall = BATCH_BYTES - len(build_batch(values, timestamp_ms=0))
        values[-1] = os.urandom(value_bytes + shortfall)
        batch = build_batch(values, timestamp_ms=0)
        assert len(batch) == BATCH_BYTES, len(batch)
        batches.append(batch)
    return b"".join(batches)


async def start_broker(reaper: ProcessReaper, work: Path) -> tuple[int, Any]:
    port = free_port()
    log_file = work / "storage"
    args = [
        "--broker-id",
        str(BROKER_ID),
        "--listeners",
        f"127.0.0.1:{port}",
        "--log-dirs",
        str(work / "data"),
        "--override",
        f"metrics.dir={work / 'metrics'}",
        "--log-level",
        "WARNING",
    ]
    proc = reaper.spawn(broker_argv(args, "broker"), log_file=log_file)
    await asyncio.to_thread(wait_for_line, log_file, '"event": "listening"', proc)
    return port, proc


async def make_leader(conn: BrokerConnection, port: int) -> None:
    req = LeaderAndIsrRequest(
        controller_id=0,
        controller_epoch=1,
        partitions=[
            LeaderAndIsrPartition(
                TOPIC,
                0,
                leader=BROKER_ID,
                leader_epoch=0,
                isr=[BROKER_ID],
                partition_epoch=0,
                replicas=[BROKER_ID],
                is_new=True,
            )
        ],
        live_leaders=[BrokerEndpoint(BROKER_ID, "127.0.0.1", port)],
    )
    resp = await conn.send(req, timeout_s=10.0)
    codes = [p.error_code for p in resp.partitions]
    if resp.error_code != ErrorCode.NONE or any(codes):
        raise RuntimeError(f"LEADER_AND_ISR failed: {resp}")


async def fill_log(conn: BrokerConnection, total_bytes: int) -> float:
    """Produce `total_bytes` in 1 MiB record sets; returns MB/s of the fill (for the log only)."""
    record_set = build_record_set()
    requests = total_bytes // MIB
    sem = asyncio.Semaphore(PRODUCES_IN_FLIGHT)
    started = time.perf_counter()

    async def one() -> None:
        async with sem:
            resp = await conn.send(ProduceRequest(1, 30000, [ProducePartition(TOPIC, 0, record_set)]), timeout_s=60.0)
            code = resp.error_code or resp.partitions[0].error_code
            if code != ErrorCode.NONE:
                raise RuntimeError(f"produce failed: {ErrorCode(code).name} {resp.partitions[0].error_message}")

    async with asyncio.TaskGroup() as tg:
        for _ in range(requests):
            tg.create_task(one())
    return requests / (time.perf_counter() - started)


def small_fetch(offset: int) -> FetchRequest:
    return FetchRequest(-1, 0, 1, MIB, [FetchPartition(TOPIC, 0, offset, MIB)])


async def fetch_round_trips(conn: BrokerConnection, offset: int, duration_s: float) -> float:
    req = small_fetch(offset)
    send = conn.send
    trips = 0
    started = time.perf_counter()
    deadline = started + duration_s
    while True:
        resp: FetchResponse = await send(req, timeout_s=10.0)
        if resp.partitions[0].records:
            raise RuntimeError("a fetch at the log end returned records")
        trips += 1
        if trips % 64 == 0 and time.perf_counter() >= deadline:
            break
    return trips / (time.perf_counter() - started)


async def fetch_sequential(conn: BrokerConnection, log_end: int, api_version: int) -> tuple[int, float]:
    """Read the whole log, 1 MiB per FETCH; (record bytes, seconds)."""
    offset = 0
    received = 0
    started = time.perf_counter()
    while offset < log_end:
        req = FetchRequest(-1, 0, 1, MIB, [FetchPartition(TOPIC, 0, offset, MIB)])
        resp: FetchResponse = await conn.send(req, timeout_s=30.0, api_version=api_version)
        p = resp.partitions[0]
        if p.error_code != ErrorCode.NONE or not p.records:
            raise RuntimeError(f"fetch at {offset} failed: {ErrorCode(p.error_code).name} {p.error_message}")
        received += len(p.records)
        offset = next_offset_of(p.records)
    return received, time.perf_counter() - started


async def fetch_passes(conn: BrokerConnection, log_end: int, seconds: float, api_version: int) -> tuple[int, float]:
    """Whole passes over the log until `seconds` went by; (record bytes, seconds)."""
    got = 0
    secs = 0.0
    while secs < seconds:
        pass_bytes, pass_secs = await fetch_sequential(conn, log_end, api_version)
        got += pass_bytes
        secs += pass_secs
    return got, secs


def next_offset_of(records: bytes | memoryview) -> int:
    """The offset after the last batch, reading only base offsets and lengths (a consumer would decode
    the records; here the client's own work is kept small so the broker path is what is measured)."""
    position = 0
    end = len(records)
    unpack = _OFFSET_AND_LENGTH.unpack_from
    last = 0
    while position < end:
        last = position
        position += LOG_OVERHEAD + unpack(records, position)[1]
    return read_header(records, last).next_offset


def frame_sizes(req: FetchRequest, resp: FetchResponse) -> tuple[int, int]:
    """Body sizes of the request and response frames as they go over the wire."""
    header = {"api_key": 1, "api_version": 0, "correlation_id": 123456, "client_id": "minibroker-client"}
    request_body = len(packb([header, to_wire(req)]))
    response_body = len(packb([{"correlation_id": 123456}, to_wire(resp)]))
    return request_body, response_body


async def run(reaper: ProcessReaper, quick: bool) -> dict[str, Any]:
    total_bytes = (128 if quick else 512) * MIB
    rps_seconds = 2.0 if quick else 5.0
    mb_seconds = 1.0 if quick else 3.0
    work = reaper.temp_dir("minibroker-bench-fetch-")
    try:
        progress(f"starting a standalone broker in {work}")
        port, broker = await start_broker(reaper, work)
        conn = await BrokerConnection.connect("127.0.0.1", port, "bench-fetch")
        try:
            await make_leader(conn, port)
            progress(f"filling {TOPIC}-0 with {total_bytes // MIB} MiB of 16 KiB batches")
            fill_mb_s = await fill_log(conn, total_bytes)
            progress(f"filled at {fill_mb_s:.0f} MiB/s")
            probe: FetchResponse = await conn.send(small_fetch(0), timeout_s=10.0)
            log_end = probe.partitions[0].high_watermark
            end_resp: FetchResponse = await conn.send(small_fetch(log_end), timeout_s=10.0)
            req_bytes, resp_bytes = frame_sizes(small_fetch(log_end), end_resp)
            progress(f"log end {log_end}; small FETCH frames: request {req_bytes} B, response {resp_bytes} B")

            echo, echo_port = start_peer(reaper, "echo", work / "echo.log", reply_bytes=resp_bytes)
            source, source_port = start_peer(reaper, "source", work / "source.log", message_bytes=MIB)
            request_body = os.urandom(req_bytes)
            fetch_rps = raw_rps = fetch_mb_s = raw_mb_s = v0_mb_s = 0.0
            costs: dict[str, float] = {}
            broker_us = echo_us = float("inf")
            for attempt in (1, 2):
                rps, us = await cpu_us_per_trip(broker.pid, fetch_round_trips(conn, log_end, rps_seconds))
                broker_us = min(broker_us, us)
                raw, us = await cpu_us_per_trip(
                    echo.pid, ping_pong("127.0.0.1", echo_port, request_body, resp_bytes, rps_seconds)
                )
                echo_us = min(echo_us, us)
                progress(
                    f"round {attempt}: fetch {rps:,.0f} round trips/s ({broker_us:.1f} µs of broker CPU each),"
                    f" raw {raw:,.0f} round trips/s ({echo_us:.1f} µs of echo CPU each)"
                )
                fetch_rps, raw_rps = max(fetch_rps, rps), max(raw_rps, raw)
                v0_got, v0_secs = await fetch_passes(conn, log_end, mb_seconds, api_version=0)
                v0_mb_s = max(v0_mb_s, v0_got / MIB / v0_secs)
                broker_before, client_before = process_usage(broker.pid), os.times()
                got, secs = await fetch_passes(conn, log_end, mb_seconds, api_version=FETCH_RECORDS_APART)
                mb = got / MIB / secs
                broker_after, client_after = process_usage(broker.pid), os.times()
                raw_got, raw_secs = await stream_reader("127.0.0.1", source_port, max(got, 4 * total_bytes))
                raw_mb = raw_got / MIB / raw_secs
                progress(
                    f"round {attempt}: fetch {mb:,.0f} MiB/s ({got // MIB} MiB;"
                    f" version 0: {v0_got / MIB / v0_secs:,.0f}),"
                    f" raw stream {raw_mb:,.0f} MiB/s"
                )
                if mb > fetch_mb_s:
                    mib = got / MIB
                    costs = {
                        "broker_user_ms_per_mib": (broker_after[0] - broker_before[0]) * 1000 / mib,
                        "broker_sys_ms_per_mib": (broker_after[1] - broker_before[1]) * 1000 / mib,
                        "broker_minor_faults_per_mib": (broker_after[2] - broker_before[2]) / mib,
                        "client_user_ms_per_mib": (client_after.user - client_before.user) * 1000 / mib,
                        "client_sys_ms_per_mib": (client_after.system - client_before.system) * 1000 / mib,
                    }
                fetch_mb_s, raw_mb_s = max(fetch_mb_s, mb), max(raw_mb_s, raw_mb)
            stop_peer(echo)
            stop_peer(source)
        finally:
            await conn.close()
        progress("stopping the broker")
        reaper.stop_all()
        if broker.returncode not in (0, None):
            progress(f"broker exited with status {broker.returncode}")
        return {
            "bench": "fetch_rpc",
            "quick": quick,
            "fetch_rps": round(fetch_rps, 1),
            "raw_rps": round(raw_rps, 1),
            "ratio_rps": rounded(fetch_rps / raw_rps if raw_rps else None, 3),
            "broker_cpu_us_per_round_trip": round(broker_us, 1),
            "echo_cpu_us_per_round_trip": round(echo_us, 1),
            "fetch_mb_s": round(fetch_mb_s, 1),
            "raw_mb_s": round(raw_mb_s, 1),
            "ratio_mb": rounded(fetch_mb_s / raw_mb_s if raw_mb_s else None, 3),
            "fetch_v0_mb_s": round(v0_mb_s, 1),
            "ratio_mb_v0": rounded(v0_mb_s / raw_mb_s if raw_mb_s else None, 3),
            "target_ratio_mb": 0.5,
            "log_mib": total_bytes // MIB,
            **{k: round(v, 3) for k, v in costs.items()},
            "fetch_request_bytes": req_bytes,
            "fetch_response_bytes": resp_bytes,
            "unit": "MB = MiB",
        }
    finally:
        reaper.cleanup()  # children first, then the dirs they write to


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fetch_rpc", description="FETCH benchmark")
    parser.add_argument("--quick", action="store_true", help="128 MiB and 2 s round-trip phases")
    args = parser.parse_args(argv)
    return main_guard(lambda reaper: run(reaper, args.quick))


if __name__ == "__main__":
    sys.exit(main())
