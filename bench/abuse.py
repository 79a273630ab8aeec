"""bench.abuse: what idle and half-sent connections cost a broker that serves a steady consumer.

One broker (a real process) leads a partition holding a few MiB. A consumer fetches from it in a loop,
and its round-trip latency is measured first alone (the baseline, same run), then while 1,000
connections each hold an incomplete frame (a length prefix announcing 100 MB, one byte sent) and 1,000
more are open and silent. Reported: the broker's RSS growth over the abuse (`rss_growth_mb`, target
< 100), the consumer's p99 before and during (`p99_ratio`, target < 2). `--quick` uses 200 + 200.

    .venv/bin/python -m bench.abuse [--quick]

The last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import socket
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ProcessReaper, main_guard, percentile, progress, rounded
from bench.fetch_rpc import MIB, TOPIC, fill_log, make_leader, start_broker
from network.connection import BrokerConnection
from protocol.messages import FetchPartition, FetchRequest

HALF_SENT = bytes.fromhex("0640000092")  # a 100 MB length prefix and one byte of body


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def consumer_latencies_ms(conn: BrokerConnection, duration_s: float) -> list[float]:
    """Round trips of 64 KiB consumer fetches walking the log from the start (wrapping around)."""
    out: list[float] = []
    offset = 0
    deadline = time.perf_counter() + duration_s
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        resp = await conn.send(FetchRequest(-1, 0, 1, 65536, [FetchPartition(TOPIC, 0, offset, 65536)]))
        out.append((time.perf_counter() - started) * 1000)
        p = resp.partitions[0]
        offset = p.high_watermark and (offset + 1) % max(p.high_watermark, 1)
        await asyncio.sleep(0.002)
    return out


def open_connections(port: int, count: int, payload: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        if payload:
            s.sendall(payload)
        socks.append(s)
    return socks


async def run(reaper: ProcessReaper, quick: bool) -> dict[str, Any]:
    half_sent, idle = (200, 200) if quick else (1000, 1000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = half_sent + idle + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    work = reaper.temp_dir("bench-abuse-")
    port, proc = await start_broker(reaper, work)
    async with await BrokerConnection.connect("127.0.0.1", port) as conn:
        await make_leader(conn, port)
        await fill_log(conn, 4 * MIB)
        progress("baseline: consumer alone")
        before = await consumer_latencies_ms(conn, 3.0)
        rss_before = rss_mb(proc.pid)
        progress(f"opening {half_sent} half-sent and {idle} idle connections")
        socks = await asyncio.to_thread(open_connections, port, half_sent, HALF_SENT)
        socks += await asyncio.to_thread(open_connections, port, idle, b"")
        try:
            during = await consumer_latencies_ms(conn, 3.0)
            rss_during = rss_mb(proc.pid)
        finally:
            for s in socks:
                s.close()
        await asyncio.sleep(1.0)
        rss_after_close = rss_mb(proc.pid)
    p99_before = percentile(before, 0.99)
    p99_during = percentile(during, 0.99)
    ratio = (p99_during / p99_before) if p99_before and p99_during else None
    return {
        "bench": "abuse",
        "quick": quick,
        "half_sent_connections": half_sent,
        "idle_connections": idle,
        "rss_before_mb": rounded(rss_before, 1),
        "rss_during_mb": rounded(rss_during, 1),
        "rss_after_close_mb": rounded(rss_after_close, 1),
        "rss_growth_mb": rounded(rss_during - rss_before, 1),
        "target_rss_growth_mb": 100,
        "consumer_p50_ms_before": rounded(percentile(before, 0.5), 3),
        "consumer_p99_ms_before": rounded(p99_before, 3),
        "consumer_p50_ms_during": rounded(percentile(during, 0.5), 3),
        "consumer_p99_ms_during": rounded(p99_during, 3),
        "p99_ratio": rounded(ratio, 2),
        "target_p99_ratio": 2,
        "fetches_before": len(before),
        "fetches_during": len(during),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.abuse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 + 200 connections instead of 1000 + 1000")
    args = parser.parse_args(argv)
    return main_guard(lambda reaper: run(reaper, args.quick))


if __name__ == "__main__":
    sys.exit(main())
