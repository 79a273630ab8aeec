"""docker-compose.yml on a real Docker engine: the images built by scripts/compose.sh (offline where no
registry is reachable), `compose up`, clients on the host, chaos against the containers (a leader's
container killed under load), the dashboard profile (by hand), and `down -v` leaving nothing behind.

How this module runs
--------------------
* The engine: one that answers, or one that `scripts/compose.sh engine` starts (root, Debian's docker.io),
  stopped again at the end if this module started it. Only where no engine can be started is the module
  skipped, with the reason.
* The images: `scripts/compose.sh images`. On a fresh machine that is the slow part (the base image,
  the wheelhouse); the script keeps them, and scripts/test.sh starts it beside the rest of the suite so
  this module mostly finds them ready (the script's lock makes it wait for a build in progress instead
  of starting another).
* One project for the module, `minibroker-test-<pid>-<random>`, every published port a free one (the
  compose file's port variables), the dashboard writing to a temp dir. `down -v` removes it whatever
  happens; a project left by a run that was killed outright (its pid gone) is removed at the start.
* The dashboard profile's one-off run is by hand: MINIBROKER_TEST_COMPOSE_DASHBOARD=1 (docs/compose.md).
  Its image (OpenJDK 17, pyspark) and its run (a JVM and a Spark session) cost minutes, more than the
  rest of the module together: 2 to over 15 on a 2-core machine at load 10 to 35, and a cold build of
  its image 6 minutes more. Run beside the chaos tests on a machine at load 30, a chaos test failed, so
  when asked for it runs after them.
* The services are read from the compose file: brokers and controllers are the services whose command is
  `minibroker broker` / `minibroker controller`, so more controllers (a quorum) need no change here.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.local_cluster import free_ports, pid_alive
from network.connection import BrokerConnection
from protocol.messages import MetadataRequest
from tests.integration.processes import wait_for

# The first test pays for a cold image build (see docs/compose.md for the measured times).
BUILD_TIMEOUT_S = 1500
# The dashboard's image and run, by hand only (the module docstring says why).
DASHBOARD = os.environ.get("MINIBROKER_TEST_COMPOSE_DASHBOARD") == "1"
pytestmark = [pytest.mark.slow, pytest.mark.starts_first, pytest.mark.timeout(BUILD_TIMEOUT_S + 600)]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
SCRIPT = ROOT / "scripts" / "compose.sh"
PROJECT_PREFIX = "minibroker-test-"
# Three controllers electing, three brokers registering, each healthcheck a CLI start-up in a container:
# 164 s on a 2-core machine at load 20 (seen), so more than that.
HEALTHY_TIMEOUT_S = 300.0
# A JVM and a Spark session in a container: a minute on an idle machine, ten on a 2-core one that
# is busy with other Spark jobs (seen here).
DASHBOARD_TIMEOUT_S = 900.0


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return services


def _services_running(command: str) -> list[str]:
    return sorted(name for name, s in _services().items() if s.get("command") == ["minibroker", command])


BROKERS = _services_running("broker")
CONTROLLERS = _services_running("controller")
PORT_VARIABLES = sorted(set(re.findall(r"\$\{([A-Z0-9_]+_PORT):-\d+\}", COMPOSE_FILE.read_text())))


def clean_environ() -> dict[str, str]:
    """This process's environment without MINIBROKER_* (the CLI would read them) or Compose's variables."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MINIBROKER_", "COMPOSE_")) and k not in PORT_VARIABLES and k != "DASHBOARD_OUT"
    }


def docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False


@dataclass
class Project:
    name: str
    env: dict[str, str]
    ports: dict[str, int]
    dashboard_out: Path
    dashboard: subprocess.Popen[str] | None = None

    @property
    def dashboard_log(self) -> Path:
        return self.dashboard_out.with_name(self.dashboard_out.name + ".log")

    def start_script(self, *args: str, output: Path | None = None) -> subprocess.Popen[str]:
        """scripts/compose.sh in a session of its own (`finish` kills the whole group: a Compose client
        left running would keep its container). A script that runs beside the tests writes its output to
        `output` (a pipe nobody reads would stop it, and the container whose output it relays)."""
        out: Any = subprocess.PIPE
        if output is not None:
            out = open(output, "w")  # noqa: SIM115 - the child has its own copy; closed below
        try:
            return subprocess.Popen(
                [str(SCRIPT), *args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT if output is not None else subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        finally:
            if output is not None:
                out.close()

    @staticmethod
    def finish(proc: subprocess.Popen[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def script(self, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
        """scripts/compose.sh with this project's variables: `images`, `up`, or a Compose command."""
        return self.finish(self.start_script(*args), timeout_s)

    def cli(self, *args: str, timeout_s: float = 120.0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """The minibroker CLI on the host, against the published ports."""
        return subprocess.run(
            [sys.executable, "-m", "cluster.cli", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            input=stdin,
        )

    def address(self, variable: str) -> str:
        return f"127.0.0.1:{self.ports[variable]}"

    @property
    def bootstrap(self) -> str:
        """Every broker's published port: a client still bootstraps while one broker is down."""
        return ",".join(self.address(v) for v in PORT_VARIABLES if re.fullmatch(r"BROKER_\d+_PORT", v))

    def containers(self, *, all_states: bool = True) -> list[dict[str, Any]]:
        """`docker inspect` of the project's containers (found by Compose's project label)."""
        ids = subprocess.run(
            ["docker", "ps", *(["-a"] if all_states else []), "-q", "--filter", self.label],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split()
        if not ids:
            return []
        out = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, timeout=60, check=True)
        containers: list[dict[str, Any]] = json.loads(out.stdout)
        return containers

    def service_states(self) -> dict[str, tuple[str, str | None]]:
        """service -> (status, health or None), for the services `up` started (not one-off `run`s)."""
        return {
            c["Config"]["Labels"]["com.docker.compose.service"]: (
                c["State"]["Status"],
                (c["State"].get("Health") or {}).get("Status"),
            )
            for c in self.containers()
            if c["Config"]["Labels"].get("com.docker.compose.oneoff", "False") != "True"
        }

    @property
    def label(self) -> str:
        return f"label=com.docker.compose.project={self.name}"

    def leftovers(self) -> dict[str, list[str]]:
        """What Docker still has of this project: containers, networks, volumes."""

        def listed(*argv: str, field: str = "Name") -> list[str]:
            result = subprocess.run(
                [*argv, "--filter", self.label, "--format", f"{{{{.{field}}}}}"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            return result.stdout.split()

        return {
            "containers": listed("docker", "ps", "-a", field="Names"),
            "networks": listed("docker", "network", "ls"),
            "volumes": listed("docker", "volume", "ls"),
        }

    def down(self) -> subprocess.CompletedProcess[str]:
        # 10 s for the brokers' controlled shutdown: the whole project stops at once, so there is nobody
        # left to move leaderships to, and only the volumes' removal is checked
        return self.script("down", "-v", "--remove-orphans", "--timeout", "10", timeout_s=180)

    def stop_dashboard(self) -> None:
        """End the dashboard's one-off run if it still runs: its Compose client, then its container (which
        outlives a killed client, one killed by a timeout included, and keeps its volumes and the network
        in use)."""
        if self.dashboard is None:
            return
        if self.dashboard.poll() is None:
            os.killpg(self.dashboard.pid, signal.SIGKILL)
            self.dashboard.communicate()
        oneoff = [
            c["Id"] for c in self.containers() if c["Config"]["Labels"].get("com.docker.compose.oneoff") == "True"
        ]
        if oneoff:
            subprocess.run(["docker", "rm", "-f", *oneoff], capture_output=True, timeout=120)

    def remove(self) -> None:
        """`down -v`, then whatever it could not remove: a one-off `run` container whose Compose client
        was killed (a timeout) keeps running, and with it its volumes and the network."""
        self.stop_dashboard()
        try:
            self.down()
        finally:
            left = self.leftovers()
            for kind, argv in (
                ("containers", ["docker", "rm", "-f", "-v"]),
                ("networks", ["docker", "network", "rm"]),
                ("volumes", ["docker", "volume", "rm", "-f"]),
            ):
                if left[kind]:
                    subprocess.run([*argv, *left[kind]], capture_output=True, timeout=120)


def remove_stale_projects() -> None:
    """Projects of earlier runs whose process is gone (killed before its teardown ran): their containers,
    networks or volumes."""
    names: set[str] = set()
    for argv in (["docker", "ps", "-a"], ["docker", "network", "ls"], ["docker", "volume", "ls"]):
        listed = subprocess.run(
            [*argv, "--format", '{{.Label "com.docker.compose.project"}}'], capture_output=True, text=True, timeout=60
        )
        names.update(listed.stdout.split())
    for name in sorted(names):
        match = re.fullmatch(re.escape(PROJECT_PREFIX) + r"(\d+)-[0-9a-f]+", name)
        if match and not pid_alive(int(match[1])):
            Project(name, {**clean_environ(), "COMPOSE_PROJECT_NAME": name}, {}, Path()).remove()


@pytest.fixture(scope="module")
def engine() -> Iterator[None]:
    already = docker_answers()
    if not already:
        started = subprocess.run([str(SCRIPT), "engine"], cwd=ROOT, capture_output=True, text=True, timeout=900)
        if started.returncode != 0 or not docker_answers():
            why = (started.stderr.strip().splitlines() or ["scripts/compose.sh engine failed"])[-1]
            pytest.skip(f"no Docker engine answers and none can be started here: {why}")
    try:
        yield
    finally:
        if not already:
            subprocess.run([str(SCRIPT), "stop-engine"], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def project(engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    remove_stale_projects()
    name = f"{PROJECT_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
    ports = dict(zip(PORT_VARIABLES, free_ports(len(PORT_VARIABLES)), strict=True))
    out = tmp_path_factory.mktemp("dashboard-out")
    env = {
        **clean_environ(),
        **{k: str(v) for k, v in ports.items()},
        "COMPOSE_PROJECT_NAME": name,
        "DASHBOARD_OUT": str(out),
        "PYTHONUNBUFFERED": "1",
    }
    p = Project(name, env, ports, out)
    try:
        built = p.script("images", *(["--dashboard"] if DASHBOARD else []), timeout_s=BUILD_TIMEOUT_S)
        assert built.returncode == 0, built.stderr[-4000:]
        up = p.script("up", timeout_s=600)
        assert up.returncode == 0, up.stderr[-4000:]
        yield p
    finally:
        p.remove()


def sink_has_every_broker(p: Project) -> bool:
    listed = p.script("exec", "-T", "metrics-sink", "sh", "-c", "ls /metrics /metrics/_active")
    return bool(broker_ids(p)) and all(f"broker-{i}" in listed.stdout for i in broker_ids(p))


def broker_ids(p: Project) -> dict[int, str]:
    """broker.id -> service, from the running containers' environment."""
    ids: dict[int, str] = {}
    for c in p.containers():
        env = dict(item.split("=", 1) for item in c["Config"]["Env"] if "=" in item)
        if "MINIBROKER_BROKER_ID" in env:
            ids[int(env["MINIBROKER_BROKER_ID"])] = c["Config"]["Labels"]["com.docker.compose.service"]
    return ids


def describe(p: Project, topic: str) -> list[dict[str, Any]]:
    """The topic's partitions (`topic describe --json`'s keys), from the first broker that answers METADATA
    on its published port. Asked in-process, not through the CLI: the tests poll it, and each CLI start-up
    took seconds on a busy machine (the CLI's own commands are the first tests')."""

    async def ask() -> list[dict[str, Any]] | None:
        for address in p.bootstrap.split(","):
            host, port = address.rsplit(":", 1)
            try:
                conn = await BrokerConnection.connect(host, int(port), "compose-test", timeout_s=5.0)
            except (OSError, TimeoutError):
                continue
            try:
                response = await conn.send(MetadataRequest([topic]), timeout_s=10.0)
            except (OSError, TimeoutError):
                continue
            finally:
                await conn.close()
            for t in response.topics:
                if t.topic == topic and t.error_code == 0 and t.partitions:
                    return [
                        {
                            "partition": q.partition,
                            "leader": q.leader_id,
                            "leader_epoch": q.leader_epoch,
                            "replicas": list(q.replicas),
                            "isr": list(q.isr),
                        }
                        for q in sorted(t.partitions, key=lambda q: q.partition)
                    ]
        return None

    partitions = asyncio.run(ask())
    assert partitions is not None, f"no broker described {topic} (bootstrap {p.bootstrap})"
    return partitions


# -- the tests, in the order they run against the one project --------------------------------------------


def test_every_service_turns_healthy_running_the_images_the_script_built(project: Project) -> None:
    # Given the project started by scripts/compose.sh up
    expected = {name for name, s in _services().items() if "profiles" not in s}
    with_health = {name for name in expected if "healthcheck" in _services()[name]}
    assert BROKERS and CONTROLLERS and set(BROKERS) | set(CONTROLLERS) <= with_health

    # When Docker has run the healthchecks, then every service with one is healthy and the rest run
    last: dict[str, tuple[str, str | None]] = {}

    def all_healthy() -> dict[str, tuple[str, str | None]] | None:
        last.update(project.service_states())
        ok = set(last) == expected and all(
            status == "running" and (health == "healthy" or name not in with_health)
            for name, (status, health) in last.items()
        )
        return last if ok else None

    try:
        wait_for(all_healthy, "every service healthy", timeout_s=HEALTHY_TIMEOUT_S, interval_s=1.0)
    except AssertionError as exc:
        logs = project.script("logs", "--no-color", "--tail", "15", *sorted(expected), timeout_s=120).stdout
        raise AssertionError(f"{exc}\nstates: {last}\nlast log lines:\n{logs[-6000:]}") from None

    # And the minibroker services run the image's unprivileged user, which owns the data in the volumes
    # (asked of every service at once: one `compose exec` is seconds on a busy machine)
    services = [*BROKERS, *CONTROLLERS]
    execs = [project.start_script("exec", "-T", s, "stat", "-c", "%U %u", "/var/lib/minibroker") for s in services]
    for service, proc in zip(services, execs, strict=True):
        owner = project.finish(proc, 120)
        assert owner.returncode == 0, owner.stderr
        assert owner.stdout.split() == ["minibroker", "10001"], (service, owner.stdout)


def test_the_cli_on_the_host_creates_produces_and_consumes_through_the_published_ports(project: Project) -> None:
    # Given the cluster, reached from the host through broker-2's published port only
    bootstrap = project.address("BROKER_2_PORT")

    # When a replicated topic is created, written with acks=all and read back
    created = project.cli("topic", "create", "compose-cli", "--partitions", "3", "--bootstrap-server", bootstrap)
    assert created.returncode == 0, created.stderr
    produced = project.cli(
        "produce", "compose-cli", "--count", "2000", "--size", "64", "--acks", "all", "--json",
        "--bootstrap-server", bootstrap,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert json.loads(produced.stdout.strip().splitlines()[-1])["acked"] == 2000
    consumed = project.cli(
        "consume", "compose-cli", "--from-beginning", "--max-messages", "2000", "--timeout-ms", "20000",
        "--fail-on-timeout", "--bootstrap-server", bootstrap,
    )  # fmt: skip

    # Then every record comes back, and every partition has all three replicas in sync
    assert consumed.returncode == 0, consumed.stderr
    assert len(consumed.stdout.splitlines()) == 2000
    for partition in describe(project, "compose-cli"):
        assert sorted(partition["isr"]) == sorted(broker_ids(project)), partition


def test_a_kafka_client_produces_and_consumes_on_the_published_kafka_listeners(project: Project) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    bootstrap = ",".join(project.address(v) for v in PORT_VARIABLES if re.fullmatch(r"BROKER_\d+_KAFKA_PORT", v))
    # Given librdkafka on the host, bootstrapping from the Kafka listeners' published ports
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    # When it writes 300 records with acks=all to a topic it creates by producing
    values = [f"kafka-{i}".encode() for i in range(300)]
    for value in values:
        producer.produce("compose-kafka", value, on_delivery=delivered)
    assert producer.flush(60) == 0
    assert errors == []

    # Then a consumer group member reads every one back
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "compose-test", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["compose-kafka"])
    read: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(read) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                read.append(msg.value())
    finally:
        consumer.close()
    assert sorted(read) == sorted(values)


def _chaos(project: Project, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    result = project.cli("chaos", *args, "--compose", str(COMPOSE_FILE), "--json", "-", timeout_s=300)
    report = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result, report


def test_chaos_leader_kill_against_the_compose_project_kills_containers_and_is_valid(project: Project) -> None:
    # When leader-kill runs against the compose project: a leader's container killed, then started again
    result, report = _chaos(project, "leader-kill", "--rounds", "1", "--restart", "--topic", "compose-leader-kill")

    # Then the verdict and report are those of a local cluster's run, and the kill went through Docker
    assert result.returncode == 0, result.stderr[-3000:]
    assert report["valid"] and report["lost_writes"] == 0 and report["acked"] > 0
    (kill,) = report["kills"]
    assert kill["restarted"]
    assert "docker kill broker-" in result.stderr
    # And the restarted broker is back in every ISR. (The report records its new leaders and the ISR's
    # return only when it sees them within 30 and 60 s, windows a machine at load 30 missed: times, not
    # behaviour, so the behaviour is checked here. This run is the compose project's failover test: a
    # leader's container killed under acks=all load, no acknowledged write lost, the broker back.)
    wait_for(
        lambda: all(len(p["isr"]) == len(p["replicas"]) for p in describe(project, "compose-leader-kill")),
        "the killed broker back in every ISR",
        timeout_s=120,
    )


def test_chaos_run_pauses_a_broker_container_with_a_valid_verdict(project: Project) -> None:
    # `--faults pause,kill` with one round: the pause only. A kill through chaos is leader-kill's test above
    # (the same docker kill and docker start); a second round here cost one to two minutes more.
    result, report = _chaos(project, "run", "--faults", "pause,kill", "--rounds", "1", "--topic", "compose-faults")

    assert result.returncode == 0, result.stderr[-3000:]
    assert report["valid"] and report["lost_writes"] == 0 and report["zombie_acked"] == 0
    (pause,) = report["faults"]
    assert pause["how"].startswith("docker pause broker-")
    assert pause["zombie"]["sent"] > 0 and pause["zombie"]["acked"] == 0, pause
    # and nothing is left paused or stopped
    assert all(status == "running" for status, _ in project.service_states().values())


def test_network_faults_are_refused_against_the_compose_project(project: Project) -> None:
    result, _ = _chaos(project, "run", "--faults", "kill,partition", "--rounds", "2")

    assert result.returncode == 2
    assert "share one network namespace" in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


@pytest.mark.skipif(
    not DASHBOARD,
    reason="the dashboard profile's image and Spark run take minutes: by hand, MINIBROKER_TEST_COMPOSE_DASHBOARD=1 "
    "(docs/compose.md, Tests)",
)
def test_the_dashboard_profile_writes_its_page_from_the_sinks_metrics(project: Project) -> None:
    # Given the sink's volume holding records of every broker (they arrived over MQTT)
    wait_for(lambda: sink_has_every_broker(project), "every broker's metrics in the sink's volume", timeout_s=180)

    # When the dashboard runs as its profile says (its output to a file: nothing blocks on a pipe)
    project.dashboard = project.start_script(
        "--profile", "dashboard", "run", "--rm", "dashboard", output=project.dashboard_log
    )
    ran = project.finish(project.dashboard, DASHBOARD_TIMEOUT_S)
    output = project.dashboard_log.read_text(errors="replace")

    # Then its page and tables are in the directory the host gave it
    assert ran.returncode == 0, output[-3000:]
    page = project.dashboard_out / "dashboard.html"
    assert page.is_file() and page.stat().st_size > 10_000
    assert "Follower lag" in page.read_text(errors="replace")


def test_down_v_leaves_no_container_network_or_volume(project: Project) -> None:
    # Given the project with its containers, network and named volumes (and no one-off run left)
    project.stop_dashboard()
    assert all(project.leftovers().values())

    # When it is taken down with its volumes
    down = project.down()

    # Then Docker has nothing of it left
    assert down.returncode == 0, down.stderr
    assert project.leftovers() == {"containers": [], "networks": [], "volumes": []}
