"""Real broker and controller processes for integration tests: spawn, wait for "listening", stop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.local_cluster import LocalClusterState, ProcessInfo, free_ports, start_cluster, stop_cluster
from network.connection import BrokerConnection
from protocol.messages import (
    BrokerEndpoint,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class BrokerProcess:
    broker_id: int
    port: int
    log_dir: Path
    log_file: Path
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> BrokerEndpoint:
        return BrokerEndpoint(self.broker_id, "127.0.0.1", self.port)

    def start(self, timeout_s: float = 20.0) -> None:
        offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cluster", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log_file, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
            if '"event": "listening"' in text:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"process exited {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.02)
        raise RuntimeError(f"not listening after {timeout_s}s; log:\n{self.log_text()[-3000:]}")

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def standalone_broker(tmp: Path, broker_id: int, port: int, *overrides: str) -> BrokerProcess:
    """A broker without a controller: roles come from LEADER_AND_ISR sent by the test."""
    log_dir = tmp / f"broker-{broker_id}"
    log_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "broker",
        "--broker-id",
        str(broker_id),
        "--listeners",
        f"127.0.0.1:{port}",
        "--log-dirs",
        str(log_dir / "data"),
        "--override",
        f"metrics.dir={tmp / 'metrics'}",
        "--override",
        "replica.fetch.backoff.ms=100",
        "--override",
        "replica.fetch.wait.max.ms=100",
        "--override",
        "replica.high.watermark.checkpoint.interval.ms=200",
    ]
    for o in overrides:
        args += ["--override", o]
    return BrokerProcess(broker_id, port, log_dir, log_dir / "storage", args)


async def assign(
    brokers: list[BrokerProcess],
    topic: str,
    partitions: int,
    leader_of: dict[int, int],
    leader_epoch: int = 0,
    replicas: list[int] | None = None,
    controller_epoch: int = 1,
) -> list[LeaderAndIsrResponse]:
    """Act as the controller: tell every broker its role for each partition, with full ISR."""
    replica_ids = replicas or [b.broker_id for b in brokers]
    states = [
        LeaderAndIsrPartition(topic, p, leader_of[p], leader_epoch, list(replica_ids), leader_epoch, list(replica_ids))
        for p in range(partitions)
    ]
    out = []
    for b in brokers:
        if not b.alive:
            continue
        async with await BrokerConnection.connect("127.0.0.1", b.port, "test-controller") as conn:
            resp = await conn.send(
                LeaderAndIsrRequest(0, controller_epoch, states, live_leaders=[x.endpoint for x in brokers])
            )
            out.append(resp)
    return out


async def wait_until(predicate, timeout_s: float = 20.0, interval_s: float = 0.05, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = await predicate()
        if last:
            return last
        await asyncio.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = 30.0, interval_s: float = 0.2) -> Any:
    """wait_until for code outside an event loop (tests driving processes and the Docker CLI)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {result!r})")
        time.sleep(interval_s)


@contextlib.contextmanager
def running(*procs: BrokerProcess):  # type: ignore[no-untyped-def]
    try:
        for p in procs:
            p.start()
        yield procs
    finally:
        for p in procs:
            p.stop()


@contextlib.contextmanager
def kafka_cluster(
    cluster_dir: Path, overrides: dict[str, str], secret: str | None = None, ack_journal: bool = False
) -> Iterator[LocalClusterState]:
    """A controller and three brokers, each with a Kafka listener, on free ports; stopped afterwards."""
    ports = free_ports(7)
    state = asyncio.run(
        start_cluster(
            cluster_dir,
            3,
            controller_port=ports[3],
            broker_ports=ports[:3],
            kafka_ports=ports[4:],
            overrides=overrides,
            secret=secret,
            ack_journal=ack_journal,
        )
    )
    try:
        yield state
    finally:
        stop_cluster(state, timeout_s=10.0)


@contextlib.asynccontextmanager
async def three_brokers(
    cluster_dir: Path, overrides: dict[str, str], base_address: str | None = None
) -> AsyncIterator[LocalClusterState]:
    """The controllers and three brokers (msgpack listeners only) on free ports, in a running event loop; with
    `base_address`, each node on an address of its own from it (for faults between nodes)."""
    ports = free_ports(4)
    where = {} if base_address is None else {"base_address": base_address}
    state = await start_cluster(
        cluster_dir, 3, controller_port=ports[3], broker_ports=ports[:3], overrides=overrides, **where
    )
    try:
        yield state
    finally:
        stop_cluster(state, timeout_s=10.0)


def default_sigint() -> None:
    """`preexec_fn` for a child a test stops with SIGINT, as Ctrl-C would: SIGINT back to its default. A shell
    without job control starts background commands with SIGINT ignored (`nohup`, `cmd &` in a script), every
    process below inherits that, and a Python started so keeps ignoring it: asyncio's Ctrl-C handling is then
    never installed, and the test's SIGINT does nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kill_processes_mentioning(text: str) -> list[tuple[int, str]]:
    """SIGKILL every process (other than this one) whose command line contains `text`; what was killed.

    The suite's safety net: every broker, controller and CLI a test starts names a directory under the
    session's base temp dir in its arguments, so at the end of a session (or of an xdist worker's share of
    it) whatever still mentions that dir outlived the test that started it (a test stopped by its timeout
    during its fixture's teardown leaves its cluster running), and would hold ports and CPU afterwards."""
    killed: list[tuple[int, str]] = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        command = " ".join(a.decode(errors="replace") for a in argv if a)
        if text not in command:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(entry), signal.SIGKILL)
            killed.append((int(entry), command))
    return killed


async def active_controller(state: LocalClusterState, timeout_s: float = 30.0) -> ProcessInfo:
    """The controller the quorum elected (its DESCRIBE_QUORUM answers as leader), waiting for one."""
    from protocol.messages import DescribeQuorumRequest

    async def leader() -> ProcessInfo | None:
        for c in state.controllers:
            try:
                async with await BrokerConnection.connect(c.host, c.port, "test", timeout_s=1.0) as conn:
                    answer = await conn.send(DescribeQuorumRequest(), timeout_s=2.0)
            except (TimeoutError, OSError):
                continue
            if answer.error_code == 0:
                return state.controller(answer.leader_id)
        return None

    found: ProcessInfo = await wait_until(leader, timeout_s, what="an active controller")
    return found
