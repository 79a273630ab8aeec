"""docker-compose.yml without a Docker engine: `docker-compose config` validates the file, and the
controller, the three brokers and the metrics sink run as local processes with the compose file's own
commands, environment and healthchecks, against a real Mosquitto.

How a service becomes a local process
-------------------------------------
Only what Docker would provide is translated, through the small explicit tables below:

* programs: `minibroker` (the image's console script) -> this checkout's `python -m cluster.cli`;
* hosts: `0.0.0.0` and `127.0.0.1` (the shared namespace of `cluster-net`) and `mosquitto` (a compose
  service name) -> 127.0.0.1;
* ports: every container port `cluster-net` publishes -> a free local port, and Mosquitto's 1883 ->
  the port of the Mosquitto started here;
* paths: a volume's mount point inside a container -> a directory per volume under tmp, so services
  that share a volume in compose (the brokers' `/metrics`) share a directory here.

Everything else (config keys, values, start order from `depends_on`, healthcheck commands) is taken from
the compose file as it is, so a broken key, a wrong address or a failing healthcheck fails here.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from cluster.local_cluster import free_ports
from metrics.file_sink import read_records
from network.connection import BrokerConnection
from protocol.messages import MetadataRequest
from tests.integration.processes import wait_for
from tests.metrics.mosquitto import Mosquitto

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"

NETWORK_OWNER = "cluster-net"
"""The service that owns the namespace the controller and brokers share; locally that is the host."""
BROKERS = ("broker-1", "broker-2", "broker-3")
CONTROLLERS = ("controller-1", "controller-2", "controller-3")
CLUSTER_SERVICES = (*CONTROLLERS, *BROKERS)
LOCAL_SERVICES = (*CLUSTER_SERVICES, "metrics-sink")
"""Services run as local processes; `mosquitto` is the real Mosquitto started by the fixture."""

LOCAL_PROGRAMS = {"minibroker": [sys.executable, "-m", "cluster.cli"]}
LOCAL_HOSTS = {"0.0.0.0": "127.0.0.1", "127.0.0.1": "127.0.0.1", "mosquitto": "127.0.0.1"}
MQTT_CONTAINER_PORT = 1883

START_TIMEOUT_S = 30.0
HEALTHY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0

ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9_.-]+):(?P<port>\d+)\b")


PORT_VARIABLES = (
    "BROKER_1_PORT",
    "BROKER_2_PORT",
    "BROKER_3_PORT",
    "CONTROLLER_1_PORT",
    "CONTROLLER_2_PORT",
    "CONTROLLER_3_PORT",
    "BROKER_1_KAFKA_PORT",
    "BROKER_2_KAFKA_PORT",
    "BROKER_3_KAFKA_PORT",
    "MQTT_HOST_PORT",
)
"""The compose file's variables; the tests resolve them as `docker compose` does, from `variables`."""

VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def interpolate(value: Any, variables: dict[str, str]) -> Any:
    """Compose's `${NAME}` / `${NAME:-default}` substitution over every string of the file."""
    if isinstance(value, str):

        def substitute(match: re.Match[str]) -> str:
            name, default = match["name"], match["default"]
            assert name in variables or default is not None, f"${{{name}}} has no default"
            return variables.get(name) or default or ""

        return VARIABLE.sub(substitute, value)
    if isinstance(value, list):
        return [interpolate(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, variables) for k, v in value.items()}
    return value


def load_compose(variables: dict[str, str] | None = None) -> dict[str, Any]:
    with open(COMPOSE_FILE) as f:
        compose: dict[str, Any] = yaml.safe_load(f)
    resolved: dict[str, Any] = interpolate(compose, variables or {})
    return resolved


def container_port(spec: str) -> int:
    """`[HOST_IP:]HOST_PORT:CONTAINER_PORT` -> CONTAINER_PORT."""
    return int(spec.rsplit(":", 1)[1])


def clean_environ() -> dict[str, str]:
    """This process's environment without MINIBROKER_* (the config loader rejects keys it does not know)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}


def run_cli(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LOCAL_PROGRAMS["minibroker"], *args],
        cwd=ROOT,
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def start_order(services: dict[str, Any], names: tuple[str, ...]) -> list[str]:
    """`names` in `depends_on` order (dependencies first), as `docker compose up` starts them."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {' -> '.join((*path, name))}"
        if name in order or name not in names:
            return
        for dep in services[name].get("depends_on", {}):
            visit(dep, (*path, name))
        order.append(name)

    for name in names:
        visit(name, ())
    return order


@dataclass
class Localizer:
    """Rewrites one service's addresses and paths from their container form to this machine's."""

    ports: dict[int, int]
    volume_dirs: dict[str, Path]
    mounts: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def for_service(cls, service: dict[str, Any], ports: dict[int, int], volumes_root: Path) -> Localizer:
        volume_dirs: dict[str, Path] = {}
        mounts: dict[str, Path] = {}
        for spec in service.get("volumes", []):
            source, target = spec.split(":")[:2]
            local = volumes_root / source.replace("/", "_").lstrip("._")
            local.mkdir(parents=True, exist_ok=True)
            volume_dirs[source] = mounts[target] = local
        return cls(ports, volume_dirs, mounts)

    def value(self, text: str) -> str:
        for target in sorted(self.mounts, key=len, reverse=True):
            if text == target or text.startswith(target + "/"):
                return str(self.mounts[target]) + text[len(target) :]
        return ADDRESS.sub(self._address, text)

    def _address(self, match: re.Match[str]) -> str:
        host, port = match["host"], int(match["port"])
        assert host in LOCAL_HOSTS, f"no local mapping for host {host!r} (add it to LOCAL_HOSTS)"
        assert port in self.ports, f"no local mapping for port {port} (not published by {NETWORK_OWNER})"
        return f"{LOCAL_HOSTS[host]}:{self.ports[port]}"

    def argv(self, command: list[str]) -> list[str]:
        program, *args = command
        assert program in LOCAL_PROGRAMS, f"no local mapping for program {program!r}"
        return [*LOCAL_PROGRAMS[program], *(self.value(a) for a in args)]


@dataclass
class ServiceProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_listening(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.log_text().splitlines():
                if '"event": "listening"' in line:
                    event: dict[str, Any] = json.loads(line)
                    return event
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"{self.name} not listening after {timeout_s}s:\n{self.log_text()[-3000:]}")


class LocalCompose:
    """The compose services as local processes, started in `depends_on` order, gated on healthchecks."""

    def __init__(self, compose: dict[str, Any], work_dir: Path, mqtt_port: int) -> None:
        self.services: dict[str, Any] = compose["services"]
        self.work_dir = work_dir
        published = [container_port(p) for p in self.services[NETWORK_OWNER]["ports"]]
        self.ports = dict(zip(published, free_ports(len(published)), strict=True))
        self.ports[MQTT_CONTAINER_PORT] = mqtt_port
        self.processes: dict[str, ServiceProcess] = {}
        self._logs: list[IO[bytes]] = []

    def localizer(self, name: str) -> Localizer:
        return Localizer.for_service(self.services[name], self.ports, self.work_dir / "volumes")

    def volume_dir(self, service: str, volume: str) -> Path:
        return self.localizer(service).volume_dirs[volume]

    def local_address(self, address: str) -> str:
        """An address a host client uses against compose (e.g. 127.0.0.1:9092) -> where it is here."""
        return Localizer(self.ports, {}).value(address)

    def environment(self, name: str) -> dict[str, str]:
        localizer = self.localizer(name)
        env = {k: localizer.value(str(v)) for k, v in self.services[name].get("environment", {}).items()}
        return {**clean_environ(), **env, "PYTHONUNBUFFERED": "1"}

    def start(self, name: str) -> ServiceProcess:
        for dep, condition in self.services[name].get("depends_on", {}).items():
            if condition.get("condition") == "service_healthy" and dep in self.processes:
                self.wait_healthy(dep)
        log_path = self.work_dir / "logs" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")  # noqa: SIM115 - closed in stop_all
        self._logs.append(log)
        proc = subprocess.Popen(
            self.localizer(name).argv(self.services[name]["command"]),
            cwd=ROOT,
            env=self.environment(name),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process = ServiceProcess(name, proc, log_path)
        return process

    def healthcheck(self, name: str) -> subprocess.CompletedProcess[str]:
        """Run `name`'s healthcheck command once, in the service's environment (as Docker runs it)."""
        kind, *command = self.services[name]["healthcheck"]["test"]
        assert kind == "CMD", f"{name}: healthcheck must be an exec-form CMD, got {kind!r}"
        return subprocess.run(
            self.localizer(name).argv(command),
            cwd=ROOT,
            env=self.environment(name),
            capture_output=True,
            text=True,
            timeout=30,
        )

    def wait_healthy(self, name: str, timeout_s: float = HEALTHY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.healthcheck(name)
            if result.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} not healthy after {timeout_s}s: {result.stderr[-2000:]}")
            time.sleep(0.2)

    def stop_all(self) -> None:
        """Stop as `docker compose down` does: dependents first, each wave with SIGTERM, SIGKILL after
        STOP_TIMEOUT_S. (Stopping the controller with the brokers would leave their controlled shutdown
        nobody to talk to.)"""
        remaining = dict(self.processes)
        while remaining:
            needed = {dep for name in remaining for dep in self.services[name].get("depends_on", {})}
            wave = [p for name, p in remaining.items() if name not in needed] or list(remaining.values())
            for p in wave:
                del remaining[p.name]
                if p.proc.poll() is None:
                    p.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for p in wave:
                try:
                    p.proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
                except subprocess.TimeoutExpired:
                    p.proc.kill()
                    p.proc.wait(timeout=10)
        for log in self._logs:
            log.close()


def metadata_brokers(address: str) -> dict[int, str]:
    """broker id -> advertised host:port, from one METADATA request to `address` ({} if unreachable)."""
    host, port = address.rsplit(":", 1)

    async def ask() -> dict[int, str]:
        try:
            conn = await BrokerConnection.connect(host, int(port), "compose-test", timeout_s=2.0)
        except (OSError, TimeoutError):
            return {}
        try:
            response = await conn.send(MetadataRequest([]), timeout_s=5.0)
            return {b.broker_id: f"{b.host}:{b.port}" for b in response.brokers}
        finally:
            await conn.close()

    return asyncio.run(ask())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCompose]:
    work_dir = tmp_path_factory.mktemp("compose")
    mosquitto = Mosquitto(work_dir / "mosquitto")
    local = LocalCompose(load_compose(), work_dir, mosquitto.port)
    try:
        mosquitto.start()
        for name in start_order(local.services, LOCAL_SERVICES):
            process = local.start(name)
            if name in CLUSTER_SERVICES:
                process.wait_listening()
        yield local
    finally:
        local.stop_all()
        mosquitto.stop()


# -- the file itself --------------------------------------------------------------------------------


def test_docker_compose_config_accepts_the_file_with_every_service() -> None:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose; scripts/test.sh installs it)")
    env = {k: v for k, v in os.environ.items() if k not in PORT_VARIABLES}
    result = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE_FILE), "--profile", "dashboard", "config"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert set(resolved["services"]) == {NETWORK_OWNER, *LOCAL_SERVICES, "mosquitto", "dashboard"}
    assert resolved["services"]["dashboard"]["profiles"] == ["dashboard"]


def test_the_port_variables_move_every_address_of_a_process_together() -> None:
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose; scripts/test.sh installs it)")
    # Given other host ports for every process (a local Kafka has 9092-9094)
    moved = {
        "BROKER_1_PORT": "19092",
        "BROKER_2_PORT": "19093",
        "BROKER_3_PORT": "19094",
        "CONTROLLER_1_PORT": "19192",
        "CONTROLLER_2_PORT": "19193",
        "CONTROLLER_3_PORT": "19194",
        "BROKER_1_KAFKA_PORT": "19292",
        "BROKER_2_KAFKA_PORT": "19293",
        "BROKER_3_KAFKA_PORT": "19294",
    }
    env = {**{k: v for k, v in os.environ.items() if k not in PORT_VARIABLES}, **moved, "MQTT_HOST_PORT": "11883"}
    # When docker-compose resolves the file
    result = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE_FILE), "config"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    # Then no default port is left anywhere, and this file's own interpolation agrees with docker-compose
    for name in CLUSTER_SERVICES:
        text = yaml.safe_dump(resolved[name])
        assert not re.search(r"\b(9092|9093|9094|9192|9193|9194|9292|9293|9294)\b", text), (name, text)
        ours = load_compose({**moved, "MQTT_HOST_PORT": "11883"})["services"][name]
        assert ours["environment"] == resolved[name]["environment"]
        assert ours["healthcheck"]["test"] == resolved[name]["healthcheck"]["test"]
    published = {str(p).removesuffix("/tcp") for p in resolved[NETWORK_OWNER]["ports"]}
    assert published == {f"127.0.0.1:{v}:{v}" for v in moved.values()}
    assert [str(p).removesuffix("/tcp") for p in resolved["mosquitto"]["ports"]] == ["127.0.0.1:11883:1883"]


def test_every_broker_advertises_the_address_the_host_reaches_it_on() -> None:
    # Given the ports cluster-net publishes on the host
    services = load_compose()["services"]
    published = set(services[NETWORK_OWNER]["ports"])
    for name in CLUSTER_SERVICES:
        env = services[name]["environment"]
        assert services[name]["network_mode"] == f"service:{NETWORK_OWNER}"
        # Then each of its listeners is on a port that is published on 127.0.0.1 under the same number
        ports = [int(entry.rsplit(":", 1)[1]) for entry in env["MINIBROKER_LISTENERS"].split(",")]
        for port in ports:
            assert f"127.0.0.1:{port}:{port}" in published, f"{name} listens on {port}, which is not published"
        if name in BROKERS:
            # And advertises exactly those host addresses (msgpack, then PLAINTEXT for Kafka clients),
            # which also reach it inside the shared namespace
            msgpack_port, kafka_port = ports
            assert (
                env["MINIBROKER_ADVERTISED_LISTENERS"] == f"127.0.0.1:{msgpack_port},PLAINTEXT://127.0.0.1:{kafka_port}"
            )
            # And knows every voter of the metadata quorum at the address that voter listens on
            voters = {
                services[c]["environment"]["MINIBROKER_NODE_ID"]
                + "@"
                + services[c]["environment"]["MINIBROKER_LISTENERS"].replace("0.0.0.0", "127.0.0.1")
                for c in CONTROLLERS
            }
            assert set(env["MINIBROKER_CONTROLLER_QUORUM_VOTERS"].split(",")) == voters
            assert all(
                services[c]["environment"]["MINIBROKER_CONTROLLER_QUORUM_VOTERS"]
                == env["MINIBROKER_CONTROLLER_QUORUM_VOTERS"]
                for c in CONTROLLERS
            )
    ports = [
        int(entry.rsplit(":", 1)[1])
        for n in CLUSTER_SERVICES
        for entry in services[n]["environment"]["MINIBROKER_LISTENERS"].split(",")
    ]
    assert len(set(ports)) == len(ports), f"two services share a port in one namespace: {ports}"


# -- the services as local processes ----------------------------------------------------------------


def test_the_controller_lists_all_three_brokers_at_their_advertised_addresses(cluster: LocalCompose) -> None:
    # Given the controller and three brokers started from their compose command and environment
    controller = cluster.local_address("127.0.0.1:9192")

    # When the controller is asked for METADATA (what its healthcheck does)
    def all_registered() -> dict[int, str] | None:
        brokers = metadata_brokers(controller)
        return brokers if len(brokers) == 3 else None

    brokers = wait_for(all_registered, "3 registered brokers")

    # Then every broker is registered at the address a host client uses for it
    assert brokers == {
        1: cluster.local_address("127.0.0.1:9092"),
        2: cluster.local_address("127.0.0.1:9093"),
        3: cluster.local_address("127.0.0.1:9094"),
    }


def test_a_replicated_topic_gets_a_leader_per_partition_and_takes_acks_all_writes(
    cluster: LocalCompose,
) -> None:
    # Given the cluster, reached through broker-2's host address only
    bootstrap = cluster.local_address("127.0.0.1:9093")
    wait_for(lambda: len(metadata_brokers(bootstrap)) == 3, "broker-2 to learn about all 3 brokers")

    # When a topic with replication factor 3 is created through it
    created = run_cli(
        *"topic create compose-check --partitions 3 --replication-factor 3 --json".split(),
        *("--bootstrap-server", bootstrap),
    )
    assert created.returncode == 0, created.stderr

    # Then every partition has a leader and all three replicas in sync
    described = run_cli("topic", "describe", "compose-check", "--json", "--bootstrap-server", bootstrap)
    assert described.returncode == 0, described.stderr
    partitions = json.loads(described.stdout)[0]["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert p["leader"] in (1, 2, 3)
        assert sorted(p["replicas"]) == [1, 2, 3]
        assert sorted(p["isr"]) == [1, 2, 3]

    # And a produce with acks=all is acknowledged for every record
    produced = run_cli(
        *"produce compose-check --count 300 --size 50 --acks all --json".split(),
        *("--bootstrap-server", bootstrap),
    )
    assert produced.returncode == 0, produced.stderr
    result = json.loads(produced.stdout.strip().splitlines()[-1])
    assert (result["acked"], result["failed"]) == (300, 0)


def test_every_service_healthcheck_passes_once_the_cluster_is_up(cluster: LocalCompose) -> None:
    # Given every service that has a healthcheck and runs here
    with_healthcheck = [name for name in LOCAL_SERVICES if "healthcheck" in cluster.services[name]]
    assert set(with_healthcheck) == set(LOCAL_SERVICES)

    # When each one's healthcheck command runs, then it passes (as Docker sees it, within its retries)
    for name in with_healthcheck:
        cluster.wait_healthy(name)

    # And the sink's turns unhealthy when the sink is gone
    sink = cluster.processes["metrics-sink"].proc
    sink.send_signal(signal.SIGTERM)
    sink.wait(timeout=STOP_TIMEOUT_S)
    result = cluster.healthcheck("metrics-sink")
    assert result.returncode == 1
    assert "unhealthy" in result.stderr
    # and healthy again once it is back (as `restart: unless-stopped` would bring it back)
    cluster.start("metrics-sink")
    cluster.wait_healthy("metrics-sink")


def test_broker_metrics_reach_the_shared_volume_and_the_sink_through_mosquitto(cluster: LocalCompose) -> None:
    # Given brokers writing metric files to their shared volume and publishing to Mosquitto,
    # and the metrics-sink service writing what it receives to its own volume
    broker_files = cluster.volume_dir("broker-1", "broker-metrics")
    sink_files = cluster.volume_dir("metrics-sink", "sink-metrics")
    assert all(cluster.volume_dir(name, "broker-metrics") == broker_files for name in BROKERS)

    def broker_ids(directory: Path) -> set[int]:
        return {int(str(r["broker_id"])) for r in read_records(directory)}

    # Then records of all three brokers arrive in both, in the layout the dashboard reads
    wait_for(lambda: broker_ids(broker_files) == {1, 2, 3}, "every broker's metric files", timeout_s=30)
    wait_for(lambda: broker_ids(sink_files) == {1, 2, 3}, "every broker's metrics via the sink", timeout_s=30)
    assert cluster.processes["metrics-sink"].proc.poll() is None, cluster.processes["metrics-sink"].log_text()


def test_the_image_copies_every_package_the_project_installs() -> None:
    import tomllib

    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    top_level = {name.split(".")[0] for name in packages}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", (ROOT / "Dockerfile").read_text(), re.M))
    assert top_level <= copied, f"the Dockerfile does not copy {sorted(top_level - copied)}: pip install . fails"


def test_compose_brokers_get_the_connection_limits_cluster_up_sets() -> None:
    from cluster.local_cluster import LAPTOP_CONNECTION_LIMITS

    env = yaml.safe_load(COMPOSE_FILE.read_text())["x-broker-env"]
    assert {
        key: int(env["MINIBROKER_" + key.upper().replace(".", "_")]) for key in LAPTOP_CONNECTION_LIMITS
    } == LAPTOP_CONNECTION_LIMITS
