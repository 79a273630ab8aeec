"""KafkaJS as a chaos load (`--client kafkajs`): the Node.js side process and the per-record sends over it.

How this works
--------------
KafkaJS runs under Node.js, so the chaos runner starts one `node cluster/js/chaos_producer.js` for the run,
holding `--producers` KafkaJS producers, and talks JSON lines over its stdin and stdout (the protocol is
at the top of that script). Each chaos producer task calls `send(tp, value, on_report)` per record, as
with the Python clients; the records one task sends to one partition before the event loop next runs go
out as one line (`{"op": "send", ...}`), the script lingers 5 ms and sends what arrived as one KafkaJS
`send()`, and each line's result comes back as `{"event": "result", ...}`, which calls the records'
`on_report(offset, error)` in order. The process's stderr (KafkaJS's own warnings) goes to a file beside
the run, named in the error when the process dies.

KafkaJS lives in cluster/js/ (package.json and package-lock.json, installed by scripts/setup.sh with
`npm ci --prefix cluster/js`): the CLI needs it at run time, not only the tests, so it sits beside the
code that starts it rather than under tests/. `check_kafkajs` says what is missing (Node.js, npm, the
installed package) before anything starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from protocol.messages import TopicPartition

JS_DIR = Path(__file__).resolve().parent / "js"
SCRIPT = JS_DIR / "chaos_producer.js"
NODE_MAJOR_MIN = 18
READY_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 120.0  # every send settled: an idempotent KafkaJS producer retries a send for up to ~30 s

Report = Callable[[int, "str | None"], None]


class KafkaJsMissing(RuntimeError):
    """Node.js, npm or the KafkaJS package is not there: the message says how to get it."""


def check_kafkajs() -> None:
    """Raise KafkaJsMissing with what to do when `--client kafkajs` cannot run here."""
    node = shutil.which("node")
    if node is None:
        raise KafkaJsMissing(
            f"--client kafkajs needs Node.js {NODE_MAJOR_MIN} or later (no `node` on PATH) and npm; then install "
            f"KafkaJS with `npm ci --prefix {JS_DIR}` (./scripts/setup.sh does)"
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    major = int(version.lstrip("v").split(".")[0]) if version.lstrip("v")[:1].isdigit() else 0
    if major < NODE_MAJOR_MIN:
        raise KafkaJsMissing(f"--client kafkajs needs Node.js {NODE_MAJOR_MIN} or later, found {version or 'none'}")
    if not (JS_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        if shutil.which("npm") is None:
            raise KafkaJsMissing(
                f"--client kafkajs needs npm to install KafkaJS into {JS_DIR} (no `npm` on PATH); install npm, "
                f"then `npm ci --prefix {JS_DIR}`"
            )
        raise KafkaJsMissing(f"KafkaJS is not installed: `npm ci --prefix {JS_DIR}` (./scripts/setup.sh does)")


class KafkaJsProducers:
    """The node process of one chaos run and its producers; `open(index)` once per chaos producer task, each
    closing what it opened, the last close ending the process."""

    def __init__(self, bootstrap: str, topic: str, producers: int, idempotent: bool, stderr_path: Path) -> None:
        # The log's path ends the command line: a sweep for processes naming the run's directory finds this one.
        idempotence = "true" if idempotent else "false"
        self.argv = ["node", str(SCRIPT), bootstrap, topic, str(producers), idempotence, str(stderr_path)]
        self.stderr_path = stderr_path
        self.proc: asyncio.subprocess.Process | None = None
        self.started = asyncio.Lock()
        self.open_producers = 0
        self.waiting: dict[int, tuple[int, list[Report]]] = {}  # request id -> (producer, each record's report)
        self.answered = asyncio.Event()  # set at each result: a closing producer looks again at what it waits for
        self.next_id = 0
        self.closed = asyncio.Event()
        self.stats: dict[str, int] = {}
        self.failure: str | None = None
        self._reader: asyncio.Task[None] | None = None
        self._stderr: IO[bytes] | None = None

    def _open_stderr(self) -> IO[bytes]:
        self._stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - the child's stderr, closed in _end
        return self._stderr

    async def _start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=self._open_stderr()
        )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), READY_TIMEOUT_S)
        event = json.loads(line) if line.strip() else {"event": "exited"}
        if event.get("event") != "ready":
            await self._end()
            raise RuntimeError(
                f"the KafkaJS process did not start: {event.get('error', event)}; see {self.stderr_path}"
            )
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        """Each result line to its records' reports; the closing stats; a process that ends fails what waits."""
        assert self.proc is not None and self.proc.stdout is not None
        try:
            async for line in self.proc.stdout:
                event = json.loads(line)
                if event["event"] == "result":
                    _, reports = self.waiting.pop(event["id"])
                    for i, report in enumerate(reports):
                        offset = event["offset"] + i if event["offset"] >= 0 else -1
                        report(offset, None if event["error"] is None else event["error"].split(":", 1)[0])
                    self.answered.set()
                elif event["event"] == "closed":
                    self.stats = event["stats"]
                elif event["event"] == "fatal":
                    self.failure = event["error"]
        finally:
            for _, reports in self.waiting.values():
                for report in reports:
                    report(-1, "KafkaJSProcessExited")
            self.waiting.clear()
            self.closed.set()
            self.answered.set()

    async def open(self, index: int) -> tuple[Callable[[TopicPartition, str, Report], None], Callable[[], Any]]:
        """(send(tp, value, on_report), async close()) of KafkaJS producer `index`."""
        async with self.started:
            if self.proc is None:
                await self._start()
            self.open_producers += 1
        loop = asyncio.get_running_loop()
        pending: list[tuple[TopicPartition, str, Report]] = []

        def flush() -> None:
            """One line per run of records to one partition, in the order they were sent."""
            groups: list[tuple[TopicPartition, list[str], list[Report]]] = []
            for tp, value, report in pending:
                if groups and groups[-1][0] == tp:
                    groups[-1][1].append(value)
                    groups[-1][2].append(report)
                else:
                    groups.append((tp, [value], [report]))
            pending.clear()
            lines = []
            for tp, values, reports in groups:
                self.next_id += 1
                self.waiting[self.next_id] = (index, reports)
                command = {"op": "send", "producer": index, "id": self.next_id, "partition": tp.partition}
                lines.append(json.dumps(command | {"values": values}) + "\n")
            if self.proc is not None and self.proc.stdin is not None and not self.closed.is_set():
                self.proc.stdin.write("".join(lines).encode())

        def send(tp: TopicPartition, value: str, on_report: Report) -> None:
            if not pending:
                loop.call_soon(flush)
            pending.append((tp, value, on_report))

        async def close() -> None:
            if pending:
                flush()
            while any(owner == index for owner, _ in self.waiting.values()):
                self.answered.clear()
                await self.answered.wait()
            self.open_producers -= 1
            if self.open_producers == 0:
                await self._end()

        return send, close

    async def _end(self) -> None:
        """Ask the process to close its producers and wait for it; kill it if it does not end in time."""
        proc = self.proc
        try:
            if proc is not None and proc.returncode is None:
                assert proc.stdin is not None
                with contextlib.suppress(ConnectionError):
                    proc.stdin.write(b'{"op": "close"}\n')
                    await proc.stdin.drain()
                try:
                    await asyncio.wait_for(proc.wait(), CLOSE_TIMEOUT_S)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            if self._reader is not None:
                await asyncio.wait_for(self.closed.wait(), 10.0)
        finally:
            if proc is not None and proc.returncode is None:
                proc.kill()
            if self._stderr is not None:
                self._stderr.close()
