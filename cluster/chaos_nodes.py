"""What chaos does to a broker, for a local cluster's processes and for a compose project's containers.

How this works
--------------
Chaos (cluster/chaos.py, cluster/chaos_faults.py) chooses its victim from the cluster's metadata and
then acts on that broker through a `Nodes`: kill it (no controlled shutdown), pause and resume it (frozen,
its sockets left open), start it again and wait until it listens, and count the truncations its log
records since a mark. The experiments, their load, their oracle and their report are the same whichever
`Nodes` they are given.

* `LocalNodes`: the processes of a `cluster up` directory, by pid: SIGKILL, SIGSTOP/SIGCONT, a new
  process from the node's config, its log file read from an offset.
* `ComposeNodes`: the broker containers of a running compose project, through the Docker CLI:
  `docker kill` (SIGKILL to the container's init, and the broker dies with its pid namespace),
  `docker pause`/`unpause` (the cgroup freezer: a SIGSTOP the process cannot see), `docker start` (the
  same container, its volume and its log), `docker logs --since`. Docker's restart policy never
  restarts a container killed through its API, so a kill lasts until chaos starts it again. A broker's
  produce.ack.journal, when it keeps one, is inside its container: the verdict then holds the cluster
  to the clients' delivery reports, as for a local cluster started without journals.

A compose project is read from its containers (`compose ps`, then `docker inspect`), not from the
compose file: a service is a broker when its command is `minibroker broker`, a controller when it is
`minibroker controller`, with its id and addresses from its MINIBROKER_* environment. So whatever
services the file has (three controllers of a quorum included) are what chaos sees. The addresses are the
advertised ones, which docker-compose.yml makes the host's too (docs/compose.md, "Addressing").
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.local_cluster import (
    ClusterError,
    LocalClusterState,
    ProcessInfo,
    ack_journal_path,
    node_alive,
    node_paused,
    node_pid,
    restart_broker,
    signal_process,
    wait_exit,
)
from server_common.poll import wait_until
from server_common.time import SYSTEM_TIME

DOCKER_TIMEOUT_S = 60.0
START_TIMEOUT_S = 60.0
# runc gives up freezing a cgroup whose tasks do not all stop in time ("unable to freeze"), which a
# heavily loaded machine sees now and then; it thaws them again, so the pause is simply retried.
PAUSE_ATTEMPTS = 5


class Nodes:
    """The actions chaos takes on brokers; see the module docstring."""

    def alive(self, broker_id: int) -> bool:
        raise NotImplementedError

    def pid(self, broker_id: int) -> int:
        raise NotImplementedError

    def kill(self, broker_id: int) -> str:
        """SIGKILL, no controlled shutdown; returns how, for the report."""
        raise NotImplementedError

    def pause(self, broker_id: int) -> str:
        raise NotImplementedError

    def resume(self, broker_id: int) -> None:
        raise NotImplementedError

    async def restart(self, broker_id: int) -> None:
        """Start a killed broker again and return once it listens."""
        raise NotImplementedError

    def log_mark(self, broker_id: int) -> Any:
        """Where the broker's log is now; `truncations_since` counts from there."""
        raise NotImplementedError

    def truncations_since(self, broker_id: int, mark: Any, topic: str) -> int:
        raise NotImplementedError

    def resume_all(self) -> None:
        """Resume every paused node: no pause of ours outlives the run."""
        raise NotImplementedError

    def ack_journal(self, broker_id: int) -> Path | None:
        """The broker's produce.ack.journal as a file chaos can read, or None (cluster/chaos_verdict.py)."""
        return None

    def network_faults_refused(self) -> str | None:
        """Why network faults (cluster/network_faults.py) cannot run against these nodes, or None."""
        return None


class LocalNodes(Nodes):
    def __init__(self, state: LocalClusterState) -> None:
        self.state = state

    def alive(self, broker_id: int) -> bool:
        return node_alive(self.state.broker(broker_id))

    def pid(self, broker_id: int) -> int:
        return node_pid(self.state.broker(broker_id))

    def kill(self, broker_id: int) -> str:
        pid = self.pid(broker_id)
        os.kill(pid, signal.SIGKILL)
        return f"SIGKILL pid {pid}"

    def pause(self, broker_id: int) -> str:
        pid = self.pid(broker_id)
        os.kill(pid, signal.SIGSTOP)
        return f"SIGSTOP pid {pid}, then SIGCONT"

    def resume(self, broker_id: int) -> None:
        signal_process(self.pid(broker_id), signal.SIGCONT)

    async def restart(self, broker_id: int) -> None:
        wait_exit(self.pid(broker_id), 5.0)
        await restart_broker(self.state, broker_id)

    def ack_journal(self, broker_id: int) -> Path | None:
        return ack_journal_path(self.state.broker(broker_id))

    def log_mark(self, broker_id: int) -> int:
        log = Path(self.state.broker(broker_id).log)
        return log.stat().st_size if log.exists() else 0

    def truncations_since(self, broker_id: int, mark: Any, topic: str) -> int:
        try:
            with open(self.state.broker(broker_id).log, "rb") as f:
                f.seek(int(mark))
                return sum(1 for line in f if b"truncated" in line and topic.encode() in line)
        except OSError:
            return 0

    def resume_all(self) -> None:
        for node in self.state.nodes:
            if node_alive(node) and node_paused(node):
                signal_process(node_pid(node), signal.SIGCONT)


# -- compose --------------------------------------------------------------------------------------------


class ComposeError(ClusterError):
    """The compose project cannot be read or acted on (no Docker, no such project, a broker missing)."""


def compose_command() -> list[str]:
    """`docker compose` (v2) when it works, else `docker-compose` (v1); MINIBROKER_COMPOSE overrides both."""
    chosen = os.environ.get("MINIBROKER_COMPOSE")
    if chosen:
        return shlex.split(chosen)
    if shutil.which("docker") is not None:
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=DOCKER_TIMEOUT_S)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose") is not None:
        return ["docker-compose"]
    raise ComposeError(
        "--compose needs Docker Compose: neither `docker compose` (v2) nor `docker-compose` (v1) is installed"
    )


def _run(argv: Sequence[str], what: str, merge_stderr: bool = False) -> str:
    try:
        result = subprocess.run(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            text=True,
            timeout=DOCKER_TIMEOUT_S,
        )
    except FileNotFoundError:
        raise ComposeError(f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise ComposeError(f"{what}: `{shlex.join(argv)}` did not answer within {DOCKER_TIMEOUT_S:.0f} s") from None
    if result.returncode != 0:
        detail = ((result.stderr or "").strip() or result.stdout.strip()).splitlines()
        raise ComposeError(f"{what}: `{shlex.join(argv)}` failed: {detail[-1] if detail else result.returncode}")
    return result.stdout


@dataclass
class Container:
    """One service's container, as `docker inspect` describes it."""

    id: str
    service: str
    role: str  # "broker" or "controller"
    node_id: int
    env: dict[str, str]
    network_mode: str
    pid: int
    running: bool
    paused: bool

    @classmethod
    def from_inspect(cls, raw: dict[str, Any]) -> Container | None:
        config = raw.get("Config") or {}
        command = [*(config.get("Entrypoint") or []), *(config.get("Cmd") or [])]
        role = next((word for word in command if word in ("broker", "controller")), None)
        if role is None or not any(os.path.basename(word) == "minibroker" for word in command):
            return None
        env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        key = "MINIBROKER_BROKER_ID" if role == "broker" else "MINIBROKER_NODE_ID"
        state = raw.get("State") or {}
        return cls(
            id=raw["Id"],
            service=(config.get("Labels") or {}).get("com.docker.compose.service", raw.get("Name", "").lstrip("/")),
            role=role,
            node_id=int(env.get(key, "-1")),
            env=env,
            network_mode=(raw.get("HostConfig") or {}).get("NetworkMode", ""),
            pid=int(state.get("Pid") or 0),
            running=bool(state.get("Running")),
            paused=bool(state.get("Paused")),
        )


def _listeners(text: str) -> tuple[tuple[str, int], int]:
    """`HOST:PORT,PLAINTEXT://HOST:KPORT` -> ((HOST, PORT) of the msgpack listener, KPORT or 0)."""
    main: tuple[str, int] | None = None
    kafka_port = 0
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, sep, address = entry.rpartition("://")
        host, _, port = address.rpartition(":")
        if sep and name.upper() == "PLAINTEXT":
            kafka_port = int(port)
        elif main is None:
            main = (host, int(port))
    if main is None:
        raise ComposeError(f"no msgpack listener in {text!r}")
    return main, kafka_port


def _voters(text: str) -> list[tuple[int | None, str, int]]:
    """controller.quorum.voters, `host:port` or `id@host:port` entries -> [(id or None, host, port)]."""
    voters: list[tuple[int | None, str, int]] = []
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        node, _, address = entry.rpartition("@")
        host, _, port = address.rpartition(":")
        voters.append((int(node) if node else None, host, int(port)))
    return voters


class ComposeNodes(Nodes):
    """The brokers and controllers of a running compose project, acted on through the Docker CLI."""

    def __init__(self, compose: list[str], containers: list[Container]) -> None:
        self.compose = compose
        self.containers = containers
        self.brokers = {c.node_id: c for c in containers if c.role == "broker"}
        self.controllers = [c for c in containers if c.role == "controller"]

    @classmethod
    def load(cls, compose_file: str, project: str | None = None) -> ComposeNodes:
        path = Path(compose_file)
        if not path.is_file():
            raise ComposeError(f"--compose: no compose file {compose_file}")
        compose = [*compose_command(), "-f", str(path.resolve())]
        if project:
            compose += ["-p", project]
        ids = _run([*compose, "ps", "-a", "-q"], "reading the compose project").split()
        if not ids:
            raise ComposeError(
                f"no containers of {compose_file}{f' (project {project})' if project else ''}: "
                "start it first (scripts/compose.sh up, or docker compose up -d)"
            )
        raw = json.loads(_run(["docker", "inspect", *ids], "inspecting its containers"))
        containers = [c for c in (Container.from_inspect(r) for r in raw) if c is not None]
        nodes = cls(compose, containers)
        if not nodes.brokers:
            raise ComposeError(f"no `minibroker broker` service among the containers of {compose_file}")
        if not nodes.controllers:
            raise ComposeError(f"no `minibroker controller` service among the containers of {compose_file}")
        down = sorted(c.service for c in containers if not c.running)
        if down:
            raise ComposeError(f"not running: {', '.join(down)}; start them first (docker compose start)")
        return nodes

    def state(self) -> LocalClusterState:
        """The project as chaos addresses it: every broker at its advertised address (the host's too), the
        controllers at the brokers' controller.quorum.voters, in the voters' order."""
        brokers = []
        for node_id, c in sorted(self.brokers.items()):
            (host, port), kafka_port = _listeners(
                c.env.get("MINIBROKER_ADVERTISED_LISTENERS") or c.env.get("MINIBROKER_LISTENERS", "")
            )
            brokers.append(ProcessInfo("broker", node_id, host, port, c.pid, "", "", c.id, kafka_port))
        voters = _voters(next(iter(self.brokers.values())).env.get("MINIBROKER_CONTROLLER_QUORUM_VOTERS", ""))
        if not voters:
            raise ComposeError("the brokers name no controller (MINIBROKER_CONTROLLER_QUORUM_VOTERS)")
        by_id = {c.node_id: c for c in self.controllers}
        controllers = []
        for i, (voter_id, host, port) in enumerate(voters):
            # a voter given without an id (`host:port`) is the controller service in the same place
            found = by_id.get(voter_id) if voter_id is not None else None
            c = found or self.controllers[min(i, len(self.controllers) - 1)]
            node_id = voter_id if voter_id is not None else c.node_id
            controllers.append(ProcessInfo("controller", node_id, host, port, c.pid, "", "", c.id))
        secret = next(iter(self.brokers.values())).env.get("MINIBROKER_CLUSTER_SECRET") or None
        return LocalClusterState("", controllers, brokers, "", secret)

    def network_faults_refused(self) -> str:
        modes = {c.network_mode for c in [*self.brokers.values(), *self.controllers]}
        if len(modes) == 1 and next(iter(modes)).startswith("container:"):
            return (
                "the compose project's brokers and controllers share one network namespace and so one address "
                "(docs/compose.md, Addressing)"
            )
        return "they cut loopback addresses of local processes, and a compose project's nodes are containers"

    def _broker(self, broker_id: int) -> Container:
        try:
            return self.brokers[broker_id]
        except KeyError:
            raise ComposeError(f"no broker {broker_id} in the compose project") from None

    def _inspect(self, broker_id: int) -> dict[str, Any]:
        state: dict[str, Any] = json.loads(
            _run(["docker", "inspect", "--format", "{{json .State}}", self._broker(broker_id).id], "docker inspect")
        )
        return state

    def _docker(self, action: str, broker_id: int) -> str:
        c = self._broker(broker_id)
        _run(["docker", action, c.id], f"docker {action} {c.service}")
        return f"docker {action} {c.service}"

    def alive(self, broker_id: int) -> bool:
        return bool(self._inspect(broker_id).get("Running"))

    def pid(self, broker_id: int) -> int:
        return int(self._inspect(broker_id).get("Pid") or 0)

    def kill(self, broker_id: int) -> str:
        return self._docker("kill", broker_id)

    def pause(self, broker_id: int) -> str:
        for attempt in range(1, PAUSE_ATTEMPTS + 1):
            try:
                return self._docker("pause", broker_id) + ", then docker unpause"
            except ComposeError as exc:
                if "unable to freeze" not in str(exc) or attempt == PAUSE_ATTEMPTS:
                    raise
                time.sleep(0.2 * attempt)
        raise AssertionError("unreachable")

    def resume(self, broker_id: int) -> None:
        if self._inspect(broker_id).get("Paused"):
            self._docker("unpause", broker_id)

    async def restart(self, broker_id: int) -> None:
        c = self._broker(broker_id)
        started = self.log_mark(broker_id)
        self._docker("start", broker_id)

        def listening() -> bool:
            return '"event": "listening"' in self._logs(c, started)

        if not await wait_until(listening, START_TIMEOUT_S, clock=SYSTEM_TIME, interval_s=0.2):
            raise ComposeError(f"{c.service} did not listen within {START_TIMEOUT_S:.0f} s of docker start")

    def _logs(self, c: Container, since: str) -> str:
        """The container's output since `since`: the broker's log lines are on both of its streams."""
        return _run(["docker", "logs", "--since", since, c.id], f"docker logs {c.service}", merge_stderr=True)

    def log_mark(self, broker_id: int) -> str:
        # docker logs --since takes a Unix time with fractions; the daemon's clock is this machine's.
        return f"{time.time():.6f}"

    def truncations_since(self, broker_id: int, mark: Any, topic: str) -> int:
        try:
            text = self._logs(self._broker(broker_id), str(mark))
        except ComposeError:
            return 0
        return sum(1 for line in text.splitlines() if "truncated" in line and topic in line)

    def resume_all(self) -> None:
        for c in [*self.brokers.values(), *self.controllers]:
            try:
                state = json.loads(_run(["docker", "inspect", "--format", "{{json .State}}", c.id], "docker inspect"))
                if state.get("Paused"):
                    _run(["docker", "unpause", c.id], f"docker unpause {c.service}")
            except ComposeError:
                continue
