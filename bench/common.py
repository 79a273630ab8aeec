"""Shared pieces of the process-level benchmarks: output, percentiles, ports, child processes, baselines.

How this works
--------------
* Output: progress lines go to stderr (`progress`), the result is ONE JSON object printed as the last
  line of stdout (`emit`).
* Processes: every child a benchmark starts is registered with a `ProcessReaper`; `main_guard` runs the
  benchmark's coroutine on uvloop and, whatever happens (normal end, exception, Ctrl-C, SIGTERM), stops
  every registered child that is still alive (SIGTERM first, SIGKILL after a grace period) and then
  removes the temporary directories made with `ProcessReaper.temp_dir`. Children run in their own
  session so a Ctrl-C in the terminal reaches only the benchmark.
* Baselines: this module is also a small program (`python -m bench.common ROLE ...`) run as the peer
  process of the raw socket baselines, so baseline and broker are measured between two processes in the
  same way:
    - `echo`: answers every length-prefixed request frame with a frame of `--reply-bytes` bytes (the
      raw ping-pong beside FETCH round trips);
    - `source`: accepts connections and streams length-prefixed messages of `--message-bytes` to each
      (the raw stream beside 1 MiB FETCHes and beside replication);
    - `sink`: connects to a `source`, reads `--bytes` and prints {"bytes", "seconds"} (the reader
      processes of the replication baseline);
  The reading side is `stream_reader` / `ping_pong` in the benchmark process itself, both built on
  asyncio's BufferedProtocol (the same receive path the client and broker use), so no bytes object is
  allocated per read.
* Profiling: `profiled_broker_argv` wraps a broker command line so the broker runs under cProfile and
  writes its stats when it exits (used only when `BENCH_PROFILE_DIR` is set); `profiled` runs any
  `minibroker` command that way (local_cluster starts its processes so when the variable is set). The
  profiles count CPU time, not wall time (see `profiled_cli`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

from cluster.local_cluster import pid_alive

PROFILE_ENV = "BENCH_PROFILE_DIR"
_PREFIX = struct.Struct(">I")


# -- output -----------------------------------------------------------------------------------------


def progress(message: str) -> None:
    """A progress line on stderr; never raises (a closed stderr must not abort the cleanup)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def emit(result: dict[str, Any]) -> None:
    """The benchmark's result: one JSON object, the last line of stdout."""
    print(json.dumps(result, sort_keys=False), flush=True)


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100), at least the first value
    return ordered[int(min(rank, len(ordered))) - 1]


def rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


# -- ports ------------------------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free now (bind port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_port_block(count: int, host: str = "127.0.0.1", attempts: int = 50) -> int:
    """The first of `count` consecutive free ports (start_cluster numbers brokers base, base+1, ...)."""
    for _ in range(attempts):
        base = free_port(host)
        if base + count > 65535:
            continue
        held = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(s)
                s.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports found")


# -- child processes --------------------------------------------------------------------------------


class ProcessReaper:
    """Every child process a benchmark started, so all of them can be stopped however the run ends."""

    def __init__(self) -> None:
        self._popens: list[subprocess.Popen[bytes]] = []
        self._pid_sources: list[Callable[[], Iterable[int]]] = []
        self._dirs: list[Path] = []

    def temp_dir(self, prefix: str) -> Path:
        """A fresh temporary directory, removed by `cleanup` after every child has stopped."""
        path = Path(tempfile.mkdtemp(prefix=prefix))
        self._dirs.append(path)
        return path

    def cleanup(self) -> None:
        """Stop every child, then remove the temporary directories they wrote to."""
        try:
            self.stop_all()
        finally:
            for path in self._dirs:
                shutil.rmtree(path, ignore_errors=True)

    def spawn(
        self, argv: list[str], log_file: Path | None = None, env: dict[str, str] | None = None, stdout: Any = None
    ) -> subprocess.Popen[bytes]:
        out: Any = stdout
        log = None
        if out is None:
            if log_file is not None:
                log = open(log_file, "ab")  # noqa: SIM115 - handed to the child
                out = log
            else:
                out = subprocess.DEVNULL
        try:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT if log is not None else None,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )
        finally:
            if log is not None:
                log.close()
        self._popens.append(proc)
        return proc

    def watch(self, pids: Callable[[], Iterable[int]]) -> None:
        """Also stop the pids this returns at the end (e.g. a local cluster whose brokers restart)."""
        self._pid_sources.append(pids)

    def stop_all(self, grace_s: float = 10.0) -> None:
        pids: set[int] = set()
        for source in self._pid_sources:
            with contextlib.suppress(Exception):
                pids.update(source())
        for proc in self._popens:
            if proc.poll() is None:
                pids.add(proc.pid)
        alive = [p for p in pids if pid_alive(p)]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while alive and time.monotonic() < deadline:
            for proc in self._popens:
                proc.poll()  # reap our own children so they stop counting as alive
            alive = [p for p in alive if pid_alive(p)]
            time.sleep(0.02)
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in self._popens:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5.0)


def main_guard(run: Callable[[ProcessReaper], Coroutine[Any, Any, dict[str, Any]]]) -> int:
    """Run a benchmark on uvloop, print its JSON, and stop every child process however it ends."""
    import uvloop

    def on_sigterm(signum: int, frame: Any) -> None:
        # Treat SIGTERM as Ctrl-C: the runner's SIGINT handler cancels the main task, so the
        # benchmark's own finally blocks (stop children, remove temp dirs) run as on any other exit.
        os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGTERM, on_sigterm)
    # A shell without job control starts background commands with SIGINT ignored; restore Python's
    # handler so the runner installs its own and Ctrl-C / SIGTERM end the run in an orderly way.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from cluster.allocator import tune_allocator

    tune_allocator()  # the bench process is the client: same allocator settings as `minibroker` clients
    reaper = ProcessReaper()
    try:
        result: dict[str, Any] = uvloop.run(run(reaper))
    except KeyboardInterrupt:
        progress("interrupted; stopping child processes")
        return 130
    finally:
        reaper.cleanup()
    emit(result)
    return 0


def wait_for_line(log_file: Path, needle: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> str:
    """Block until `needle` appears in the child's log; returns the line holding it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            for line in log_file.read_text(errors="replace").splitlines():
                if needle in line:
                    return line
        if proc.poll() is not None:
            text = log_file.read_text(errors="replace") if log_file.exists() else ""
            raise RuntimeError(f"child exited with {proc.returncode} before {needle!r}:\n{text[-2000:]}")
        time.sleep(0.02)
    raise RuntimeError(f"{needle!r} did not appear in {log_file} within {timeout_s}s")


def profiled_broker_argv(broker_args: list[str], out_file: Path) -> list[str]:
    """A broker command line that runs under cProfile and dumps stats to `out_file` on exit."""
    return [sys.executable, "-m", "bench.common", "profiled-broker", "--out", str(out_file), "--", *broker_args]


def broker_argv(broker_args: list[str], profile_name: str) -> list[str]:
    """`python -m cluster.cli broker ARGS`, under cProfile when BENCH_PROFILE_DIR is set."""
    profile_dir = os.environ.get(PROFILE_ENV)
    if profile_dir:
        Path(profile_dir).mkdir(parents=True, exist_ok=True)
        return profiled_broker_argv(broker_args, Path(profile_dir) / f"{profile_name}.prof")
    return [sys.executable, "-m", "cluster.cli", "broker", *broker_args]


# -- the reading side of the raw baselines (BufferedProtocol, in the benchmark process) --------------


class _CountingReader(asyncio.BufferedProtocol):
    """Receives into one reusable buffer and counts bytes until `target` arrived."""

    def __init__(self, target: int, done: asyncio.Future[float]) -> None:
        self.buf = bytearray(1024 * 1024)
        self.view = memoryview(self.buf)
        self.received = 0
        self.target = target
        self.done = done
        self.first_at: float | None = None
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view

    def buffer_updated(self, nbytes: int) -> None:
        if self.first_at is None:
            self.first_at = time.perf_counter()
        self.received += nbytes
        if self.received >= self.target and not self.done.done():
            self.done.set_result(time.perf_counter())
            assert self.transport is not None
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"stream ended after {self.received} bytes"))


async def stream_reader(host: str, port: int, total_bytes: int) -> tuple[int, float]:
    """Connect to a `source` peer and read `total_bytes`; (bytes, seconds from first byte to last)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[float] = loop.create_future()
    started = time.perf_counter()
    _, proto = await loop.create_connection(lambda: _CountingReader(total_bytes, done), host, port)
    finished = await done
    first = proto.first_at if proto.first_at is not None else started
    return proto.received, finished - first


class _PingPongClient(asyncio.BufferedProtocol):
    def __init__(self, reply_frame_bytes: int) -> None:
        self.buf = bytearray(256 * 1024)
        self.have = 0
        self.reply_frame_bytes = reply_frame_bytes
        self.waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buf)[self.have :]

    def buffer_updated(self, nbytes: int) -> None:
        self.have += nbytes
        if self.have >= self.reply_frame_bytes:
            self.have -= self.reply_frame_bytes  # one request in flight: at most one reply buffered
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)


def process_usage(pid: int) -> tuple[float, float, int]:
    """(user s, system s, minor page faults) of a process so far, from /proc (zeros elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0, 0
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks, int(fields[7])


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (0 when it is gone)."""
    user_s, system_s, _ = process_usage(pid)
    return user_s + system_s


def filesystem_of(path: Path) -> str:
    """Type of the filesystem `path` lives on ("ext4", "tmpfs", ...), from /proc/mounts ("?" elsewhere)."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "?"
    target = str(path.resolve())
    best, fs_type = "", "?"
    for mount_point, kind in mounts:
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > len(best):
            best, fs_type = mount_point, kind
    return fs_type


async def rpc_floor_cpu_us(
    reaper: ProcessReaper, log_file: Path, request_bytes: int, reply_bytes: int, duration_s: float
) -> float:
    """CPU µs (this process and an `echo` peer process, user + system) per bare round trip: a framed
    request of `request_bytes` and a reply of `reply_bytes` over loopback between two uvloop processes,
    with no codec and no logic. The least one request between two processes of this stack costs."""
    echo, port = start_peer(reaper, "echo", log_file, reply_bytes=reply_bytes)
    try:
        body = os.urandom(request_bytes)
        await ping_pong("127.0.0.1", port, body, reply_bytes, min(duration_s, 1.0))  # warm both sides
        peer_before, own_before = process_cpu_s(echo.pid), os.times()
        started = time.perf_counter()
        rate = await ping_pong("127.0.0.1", port, body, reply_bytes, duration_s)
        trips = rate * (time.perf_counter() - started)
        peer_after, own_after = process_cpu_s(echo.pid), os.times()
    finally:
        stop_peer(echo)
    cpu_s = peer_after - peer_before
    cpu_s += own_after.user - own_before.user + own_after.system - own_before.system
    return cpu_s / trips * 1e6 if trips else 0.0


async def cpu_us_per_trip(pid: int, phase: Awaitable[float]) -> tuple[float, float]:
    """Run `phase`, a round-trip phase that answers trips per second, and return those trips per second
    and the CPU µs (user + system) process `pid` spent per trip meanwhile."""
    cpu_before, started = process_cpu_s(pid), time.perf_counter()
    rate = await phase
    trips = rate * (time.perf_counter() - started)
    return rate, (process_cpu_s(pid) - cpu_before) * 1e6 / trips if trips else 0.0


async def ping_pong(host: str, port: int, request_body: bytes, reply_body_bytes: int, duration_s: float) -> float:
    """Sequential request/reply round trips against an `echo` peer for `duration_s`; returns trips/s."""
    loop = asyncio.get_running_loop()
    reply_frame_bytes = _PREFIX.size + reply_body_bytes
    transport, proto = await loop.create_connection(lambda: _PingPongClient(reply_frame_bytes), host, port)
    frame = _PREFIX.pack(len(request_body)) + request_body
    trips = 0
    try:
        started = time.perf_counter()
        deadline = started + duration_s
        while True:
            proto.waiter = loop.create_future()
            transport.write(frame)
            await proto.waiter
            trips += 1
            if trips % 64 == 0 and time.perf_counter() >= deadline:
                break
        return trips / (time.perf_counter() - started)
    finally:
        transport.close()


# -- the peer side of the raw baselines (`python -m bench.common ROLE`) -------------------------------


class _EchoServer(asyncio.BufferedProtocol):
    def __init__(self, reply: bytes) -> None:
        self.buf = bytearray(256 * 1024)
        self.start = 0
        self.end = 0
        self.reply = reply
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.end == len(self.buf):
            n = self.end - self.start
            self.buf[:n] = self.buf[self.start : self.end]
            self.start, self.end = 0, n
        return memoryview(self.buf)[self.end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        while self.end - self.start >= _PREFIX.size:
            (size,) = _PREFIX.unpack_from(self.buf, self.start)
            if self.end - self.start < _PREFIX.size + size:
                break
            self.start += _PREFIX.size + size
            assert self.transport is not None
            self.transport.write(self.reply)
        if self.start == self.end:
            self.start = self.end = 0


class _SourceServer(asyncio.Protocol):
    """Writes length-prefixed messages as fast as the reader takes them (flow control via drain)."""

    def __init__(self, message: bytes, tasks: set[asyncio.Task[None]]) -> None:
        self.message = message
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.closed = False
        self.tasks = tasks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        task = asyncio.get_running_loop().create_task(self._pump())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _pump(self) -> None:
        prefix = _PREFIX.pack(len(self.message))
        # At least 1 MiB per write call; the loop yields after every call even when the kernel took
        # everything, so other connections (and connection_lost) get their turn.
        per_call = max(1, (1024 * 1024) // (len(self.message) + _PREFIX.size))
        chunk = [prefix, self.message] * per_call
        while not self.closed:
            self.transport.writelines(chunk)
            if not self.can_write.is_set():
                await self.can_write.wait()
            else:
                await asyncio.sleep(0)

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.can_write.set()


async def _serve(role: str, args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()
    if role == "echo":
        reply = _PREFIX.pack(args.reply_bytes) + os.urandom(args.reply_bytes)
        server = await loop.create_server(lambda: _EchoServer(reply), "127.0.0.1", 0)
    else:
        message = os.urandom(args.message_bytes)
        server = await loop.create_server(lambda: _SourceServer(message, tasks), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"event": "listening", "port": port}), flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def start_peer(reaper: ProcessReaper, role: str, log_file: Path, **options: int) -> tuple[subprocess.Popen[bytes], int]:
    """Start a baseline peer process; returns it and the port it listens on."""
    argv = [sys.executable, "-m", "bench.common", role]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    proc = reaper.spawn(argv, log_file=log_file)
    line = wait_for_line(log_file, '"event": "listening"', proc)
    return proc, int(json.loads(line)["port"])


def stop_peer(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _profiled_broker(out_file: str, broker_args: list[str]) -> int:
    return profiled_cli(out_file, ["broker", *broker_args])


def profiled_cli(out_file: str, cli_args: list[str]) -> int:
    """`minibroker CLI_ARGS` under cProfile, stats dumped to `out_file` on exit. The profiler's clock is
    the process's CPU time, not the wall clock: on a busy machine a process that wakes another with a
    socket write is often descheduled inside that write, and wall time would charge the wait to it."""
    import cProfile

    from cluster.cli import main as cli_main

    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    try:
        return cli_main(cli_args)
    finally:
        profiler.disable()
        profiler.dump_stats(out_file)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.common", description="peer processes of the raw baselines")
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("echo")
    p.add_argument("--reply-bytes", type=int, required=True)
    p = sub.add_parser("source")
    p.add_argument("--message-bytes", type=int, required=True)
    p = sub.add_parser("sink")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bytes", type=int, required=True)
    p = sub.add_parser("profiled-broker")
    p.add_argument("--out", required=True)
    p.add_argument("broker_args", nargs=argparse.REMAINDER)
    p = sub.add_parser("profiled")
    p.add_argument("--out", required=True)
    p.add_argument("cli_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.role == "profiled":
        rest = args.cli_args[1:] if args.cli_args[:1] == ["--"] else args.cli_args
        return profiled_cli(args.out, rest)
    if args.role == "profiled-broker":
        rest = args.broker_args[1:] if args.broker_args[:1] == ["--"] else args.broker_args
        return _profiled_broker(args.out, rest)
    import uvloop

    if args.role == "sink":
        received, seconds = uvloop.run(stream_reader("127.0.0.1", args.port, args.bytes))
        print(json.dumps({"bytes": received, "seconds": seconds}), flush=True)
        return 0
    uvloop.run(_serve(args.role, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())


async def stop_cluster_then_cleanup(state: Any, reaper: ProcessReaper) -> None:
    """A bench's last step: stop its local cluster (brokers first, with controlled shutdown, then the
    controller), then whatever child processes and temp dirs are left."""
    from cluster.local_cluster import stop_cluster

    try:
        if state is not None:
            progress("stopping the cluster")
            await asyncio.to_thread(stop_cluster, state, 10.0)
    finally:
        reaper.cleanup()
