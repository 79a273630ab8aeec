"""bench.kafka_fuzz: a fuzzer of the Kafka listener with the hostile-client checks, run by hand.

For `--seconds` (60), `--connections` (4) clients send broker 1 of a 3-broker cluster (bench.abuse's:
broker.session.timeout.ms=3000, metrics every 250 ms, a topic of known records) frames drawn from seeds
and mutated: every probe of bench.abuse (`Probe.frames`), and a valid request of every API and version
the listener serves built from Kafka's schemas with random values (`random_requests`). Mutations: bytes
flipped, cut, inserted or set to 0xff; a 32-bit field set to a count no frame can hold, to -1, -2 or
2**31-1; the length prefix announcing more or less than follows; a request pipelined a few hundred times on
one connection; noise. Each connection reads what comes back, and is replaced when the broker closes it.

Checked as in tests/integration/test_hostile_clients.py: no broker fenced and no leadership moved (the
active controller's METADATA every 100 ms, leader epochs before and after), broker 1's LoopLagMaxMs over the
run against the bound of bench.abuse (250 ms times the machine's stretch, `cpu_stretch`), the records
written before read back identical, the broker alive, and its RSS growth. Baseline, same run: LoopLagMaxMs
over a quiet interval of 3 s before the fuzzing.

    .venv/bin/python -m bench.kafka_fuzz [--seconds 60] [--connections 4] [--seed N] [--json FILE]

The last line of stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.abuse import (
    PROBES,
    TARGET,
    FenceWatch,
    Target,
    controller_metadata,
    cpu_stretch,
    digests,
    leaderships,
    loop_held_ms,
    metrics_after,
    prepared_cluster,
    quiet_loop_held_ms,
    restore_leaders,
    rss_mb,
    save,
)
from bench.common import ProcessReaper, main_guard, progress
from cluster.local_cluster import LocalClusterState, pid_alive, stop_cluster
from network.kafka_wire import SERVED

BOUND_MS = 250.0  # as tests/integration/test_hostile_clients.py, times the stretch


# -- seeds: valid requests of every API and version, built from Kafka's schemas -------------------------


def _simple(type_str: str, rng: random.Random, nullable: bool) -> Any:
    if nullable and rng.random() < 0.3:
        return None
    values: dict[str, Callable[[], Any]] = {
        "int8": lambda: rng.randint(-128, 127),
        "int16": lambda: rng.randint(-5, 5),
        "uint16": lambda: rng.randint(0, 5),
        "int32": lambda: rng.randint(-5, 100),
        "int64": lambda: rng.randint(-5, 10**12),
        "float64": lambda: 1.5,
        "bool": lambda: rng.random() < 0.5,
        "string": lambda: "s" * rng.randint(0, 5),
        "bytes": lambda: b"b" * rng.randint(0, 5),
        "records": lambda: b"r" * rng.randint(0, 5),
        "uuid": lambda: None,
    }
    return values[type_str]()


def _value(field_: Any, version: int, rng: random.Random) -> Any:
    nullable = field_.nullable_for_version_q(version)
    if field_.is_array():
        if nullable and rng.random() < 0.2:
            return None
        if field_.is_struct_array():
            return [_struct(field_.array_of, version, rng) for _ in range(rng.randint(0, 3))]
        return [_simple(field_.array_of.type_str, rng, False) for _ in range(rng.randint(0, 3))]
    if field_.is_struct():
        return None if nullable and rng.random() < 0.3 else _struct(field_, version, rng)
    return _simple(field_.type_str, rng, nullable)


def _struct(struct_field: Any, version: int, rng: random.Random) -> Any:
    return struct_field.data_class(**{f.name: _value(f, version, rng) for f in struct_field.untagged_fields(version)})


def random_requests(rng: random.Random, per_version: int) -> list[tuple[Any, int, bytes]]:
    """(request class, version, frame without its length prefix) for every API and version the Kafka
    listener serves, `per_version` of each, fields drawn at random within the schema."""
    out = []
    for request_class, lo, hi in SERVED.values():
        for version in range(lo, hi + 1):
            for _ in range(per_version):
                fields = {f.name: _value(f, version, rng) for f in request_class._struct.untagged_fields(version)}
                request = request_class[version](**fields)
                request.with_header(correlation_id=rng.randint(0, 100), client_id=rng.choice(["c", None, ""]))
                out.append((request_class, version, bytes(request.encode(header=True))))
    return out


def seed_frames(target: Target, rng: random.Random) -> list[bytes]:
    """Frame bodies (no length prefix) the mutations start from."""
    bodies = [frame[4:] for p in PROBES.values() if p.listener == "kafka" and p.frames for frame in p.frames(target)]
    bodies += [frame for _, _, frame in random_requests(rng, per_version=2)]
    return bodies


# -- mutations ------------------------------------------------------------------------------------------

_COUNTS = [-2, -1, 0x7FFFFFFF, 0x7FFFFFFE, 1 << 20, 100_001]


def mutate(rng: random.Random, body: bytes) -> bytes:
    data = bytearray(body)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(6)
        if op == 0 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 1 and len(data) > 8:
            del data[rng.randrange(8, len(data)) :]
        elif op == 2:
            data[rng.randrange(len(data) + 1) : 0] = rng.randbytes(rng.randrange(1, 8))
        elif op == 3 and data:
            i = rng.randrange(len(data))
            data[i : i + rng.randrange(1, 5)] = b"\xff" * 4
        elif len(data) > 14:  # a 32-bit field past the header as a count no frame can hold (or null, or -2)
            i = rng.randrange(10, len(data) - 3)
            data[i : i + 4] = struct.pack(">i", rng.choice(_COUNTS))
    return bytes(data)


def payloads(rng: random.Random, bodies: list[bytes]) -> list[bytes]:
    """What one connection sends: a few frames, or one pipelined a few hundred times."""
    kind = rng.randrange(8)
    if kind == 0:
        return [rng.randbytes(rng.randrange(1, 200))]  # noise, length prefix included
    if kind == 1:  # announces more than it sends, or less
        body = rng.choice(bodies)
        return [struct.pack(">i", len(body) + rng.choice([-3, 1, 50])) + body]
    if kind == 2:  # pipelined, valid or not
        body = rng.choice(bodies) if rng.random() < 0.5 else mutate(rng, rng.choice(bodies))
        return [(struct.pack(">i", len(body)) + body) * rng.randrange(50, 400)]
    out = []
    for _ in range(rng.randrange(1, 6)):
        body = rng.choice(bodies) if kind == 3 else mutate(rng, rng.choice(bodies))
        out.append(struct.pack(">i", len(body)) + body)
    return out


@dataclass
class Tally:
    sent: int = 0
    answered: int = 0
    closed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, sent: int, answered: int, closed: bool, error: str | None) -> None:
        with self.lock:
            self.sent += sent
            self.answered += answered
            self.closed += int(closed)
            if error:
                self.errors[error] += 1


def _answers(sock: socket.socket) -> tuple[int, bool]:
    """Read answers until the broker is quiet for 50 ms (how many), or closes (True)."""
    got = 0
    buf = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            return got, False
        except OSError:  # reset: the broker closed it with bytes of ours unread
            return got, True
        if not chunk:
            return got, True
        buf += chunk
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
            buf = buf[4 + struct.unpack_from(">i", buf)[0] :]
            got += 1


def fuzz_connection(host: str, port: int, rng: random.Random, bodies: list[bytes], until: float, tally: Tally) -> None:
    while time.monotonic() < until:
        try:
            with socket.create_connection((host, port), timeout=5) as sock:
                sock.settimeout(0.05)
                frames = payloads(rng, bodies)
                error = None
                sent = 0
                for frame in frames:
                    try:
                        sock.sendall(frame)
                        sent += 1
                    except TimeoutError:
                        sock.settimeout(2.0)  # the broker reads a long pipeline at its own pace
                        with contextlib.suppress(OSError):
                            sock.sendall(frame)
                            sent += 1
                        sock.settimeout(0.05)
                    except OSError as exc:  # closed by the broker: expected for a broken frame
                        error = type(exc).__name__
                        break
                answered, closed = _answers(sock)
                tally.add(sent, answered, closed, error)
        except OSError as exc:
            tally.add(0, 0, True, f"connect: {type(exc).__name__}")
            time.sleep(0.05)


async def run(reaper: ProcessReaper, seconds: float, connections: int, seed_value: int) -> dict[str, Any]:
    rng = random.Random(seed_value)
    state: LocalClusterState | None = None
    try:
        state, seeded, target = await prepared_cluster(reaper, "bench-kafka-fuzz-")
        bodies = seed_frames(target, rng)
        progress(f"{len(bodies)} seed frames; baseline: 3 s without fuzzing")
        baseline = await quiet_loop_held_ms(state)
        before = leaderships(await controller_metadata(state))
        rss_before = rss_mb(target.pid)
        stretch = [await asyncio.to_thread(cpu_stretch)]
        tally = Tally()
        started_ms = time.time() * 1000
        progress(f"fuzzing broker {TARGET}'s Kafka listener for {seconds:.0f} s on {connections} connections")
        until = time.monotonic() + seconds
        with FenceWatch(state) as watch:
            threads = [
                threading.Thread(
                    target=fuzz_connection,
                    args=(target.host, target.kafka_port, random.Random(rng.random()), bodies, until, tally),
                    daemon=True,
                )
                for _ in range(connections)
            ]
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                stretch.append(await asyncio.to_thread(cpu_stretch))
                await asyncio.sleep(2.0)
            ended_ms = time.time() * 1000
            await metrics_after(state, TARGET, ended_ms + 1000)
            held = loop_held_ms(state, TARGET, started_ms, time.time() * 1000)
        await watch.stop()
        after = leaderships(await controller_metadata(state))
        moved = sum(1 for tp, value in before.items() if after.get(tp) != value)
        rss_after = rss_mb(target.pid)
        alive = pid_alive(target.pid)
        intact = await digests(state) == seeded
        if moved or watch.fenced:
            await restore_leaders(state, before)
    finally:
        if state is not None:
            await asyncio.to_thread(stop_cluster, state, 10.0)
    peak_stretch = max(stretch)
    return {
        "bench": "kafka_fuzz",
        "seed": seed_value,
        "seconds": seconds,
        "connections": connections,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "seed_frames": len(bodies),
        "frames_sent": tally.sent,
        "answers": tally.answered,
        "connections_closed_by_broker": tally.closed,
        "send_errors": dict(tally.errors),
        "baseline_loop_held_ms": baseline,
        "max_loop_held_ms": held,
        "stretch": round(peak_stretch, 2),
        "bound_ms": round(BOUND_MS * peak_stretch),
        "within_bound": held is not None and held < BOUND_MS * peak_stretch,
        "fenced": sorted(watch.fenced),
        "leaderships_moved": moved,
        "broker_alive": alive,
        "data_intact": intact,
        "rss_before_mb": round(rss_before, 1),
        "rss_after_mb": round(rss_after, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (60)")
    parser.add_argument("--connections", type=int, default=4, help="clients fuzzing at once (4)")
    parser.add_argument("--seed", type=int, default=41, help="the random seed: one seed, one run (41)")
    parser.add_argument("--json", type=Path, help="also write the result to this file")
    args = parser.parse_args(argv)

    async def fuzz(reaper: ProcessReaper) -> dict[str, Any]:
        result = await run(reaper, args.seconds, args.connections, args.seed)
        if args.json:
            save(args.json, result)
        return result

    return main_guard(fuzz)


if __name__ == "__main__":
    sys.exit(main())
