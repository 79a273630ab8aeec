"""The `minibroker` command line, run as a real program: every command's happy path against a real
local cluster, its error messages and exit codes, and `--help` everywhere."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cluster.local_cluster import free_ports
from tests.integration.processes import ROOT, default_sigint

pytestmark = [pytest.mark.slow]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def cli(
    *args: str, stdin: str | None = None, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cluster", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env or clean_env(),
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line a user error prints; never a traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    return result.stderr.strip().splitlines()[-1]


def cluster_up(cluster_dir: Path, brokers: int, *extra: str) -> tuple[str, str]:
    """`cluster up --detach` on free ports and a loopback base address of its own; the `--dir` flags."""
    from cluster.local_cluster import random_base_address

    up = cli(
        *("cluster", "up", "--dir", str(cluster_dir), "--brokers", str(brokers), "--base-port", str(free_ports(1)[0])),
        *("--base-address", random_base_address(), "--detach", "--json", *extra),
        timeout=90,
    )
    assert up.returncode == 0, up.stderr
    return ("--dir", str(cluster_dir))


def eventually(predicate: Callable[[], object], timeout_s: float = 60.0, what: str = "condition") -> None:
    """Poll a condition that no event announces (files on disk, another process's state)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


COMMANDS = [
    [],
    ["broker"],
    ["controller"],
    ["cluster"],
    ["cluster", "up"],
    ["cluster", "down"],
    ["cluster", "status"],
    ["topic"],
    ["topic", "create"],
    ["topic", "delete"],
    ["topic", "alter"],
    ["topic", "reassign"],
    ["topic", "elect-leaders"],
    ["topic", "list"],
    ["topic", "describe"],
    ["configs"],
    ["configs", "describe"],
    ["configs", "alter"],
    ["produce"],
    ["consume"],
    ["chaos"],
    ["chaos", "leader-kill"],
    ["chaos", "run"],
    ["chaos", "heal"],
    ["broker", "start"],
    ["metrics"],
    ["metrics", "sink"],
    ["dashboard"],
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "minibroker")
def test_every_command_has_help(command: list[str]) -> None:
    result = cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout.lower()


@pytest.mark.timeout(30)
def test_a_bad_flag_is_a_usage_error_with_the_subcommands_usage() -> None:
    result = cli("topic", "list", "--no-such-flag")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: minibroker topic list "), result.stderr
    assert error_line(result) == "minibroker topic list: error: unrecognized arguments: --no-such-flag"


@pytest.mark.timeout(30)
def test_version() -> None:
    from importlib.metadata import version

    result = cli("--version")
    assert (result.returncode, result.stdout) == (0, f"minibroker {version('minibroker')}\n")


@pytest.mark.timeout(30)
def test_a_bad_minibroker_environment_variable_stops_cluster_up_before_anything_starts(tmp_path: Path) -> None:
    unknown = cli("cluster", "up", "--dir", str(tmp_path / "c"), env={**clean_env(), "MINIBROKER_NO_SUCH_KEY": "1"})
    assert unknown.returncode == 2
    assert error_line(unknown) == (
        "minibroker: error: config error: unknown config environment variable MINIBROKER_NO_SUCH_KEY "
        "(no config key matches it)"
    )
    assert not (tmp_path / "c").exists()
    typed = cli("cluster", "up", "--dir", str(tmp_path / "c"), env={**clean_env(), "MINIBROKER_LOG_RETENTION_MS": "x"})
    assert typed.returncode == 2
    assert "log.retention.ms: expected an integer, got 'x' (environment)" in error_line(typed)


@pytest.mark.timeout(30)
def test_a_typo_in_a_cluster_up_override_stops_before_anything_starts(tmp_path: Path) -> None:
    result = cli("cluster", "up", "--dir", str(tmp_path / "c"), "--override", "metrics.mqtt.ur=mqtt://127.0.0.1:1")
    assert result.returncode == 2
    assert error_line(result) == (
        "minibroker: error: config error: unknown config key 'metrics.mqtt.ur' (--override); "
        "did you mean 'metrics.mqtt.url'?"
    )
    assert not (tmp_path / "c" / "cluster.json").exists()
    far = cli("cluster", "up", "--dir", str(tmp_path / "c"), "--override", "no.such.thing=1")
    assert error_line(far) == "minibroker: error: config error: unknown config key 'no.such.thing' (--override)"
    typed = cli("cluster", "up", "--dir", str(tmp_path / "c"), "--override", "replica.lag.time.max.ms=soon")
    assert typed.returncode == 2
    assert error_line(typed) == (
        "minibroker: error: config error: replica.lag.time.max.ms: expected an integer, got 'soon' (--override)"
    )


@pytest.mark.timeout(30)
def test_a_bad_mqtt_url_is_a_usage_error_without_a_traceback(tmp_path: Path) -> None:
    expected = (
        "minibroker: error: config error: metrics.mqtt.url: invalid MQTT URL 'nonsense': expected "
        "mqtt://host:port (for example mqtt://127.0.0.1:1883)"
    )
    up = cli("cluster", "up", "--dir", str(tmp_path / "c"), "--override", "metrics.mqtt.url=nonsense")
    assert (up.returncode, error_line(up)) == (2, expected)
    (port,) = free_ports(1)
    broker = cli(
        *("broker", "--broker-id", "1", "--log-dirs", str(tmp_path / "b"), "--listeners", f"127.0.0.1:{port}"),
        *("--override", "metrics.mqtt.url=nonsense"),
    )
    assert (broker.returncode, error_line(broker)) == (2, expected)


@pytest.mark.timeout(60)
def test_a_busy_port_is_a_usage_error_that_names_the_port(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # broker 1 of `--base-address 127.0.0.3` listens on 127.0.0.4 (its controllers on 127.0.0.3, .2, .1)
        with socket.socket() as taken_too:
            taken_too.bind(("127.0.0.4", port))
            taken_too.listen()
            up = cli(
                *("cluster", "up", "--dir", str(tmp_path / "c"), "--brokers", "1", "--base-port", str(port)),
                *("--base-address", "127.0.0.3"),
            )
        assert up.returncode == 2
        assert error_line(up) == (
            f"minibroker: error: port {port} on 127.0.0.4 (broker 1) is already in use; pick another --base-port "
            "(brokers use BASE, BASE+1, ..., the controllers BASE+100)"
        )
        broker = cli(
            *("broker", "--broker-id", "1", "--log-dirs", str(tmp_path / "b"), "--listeners", f"127.0.0.1:{port}")
        )
        assert broker.returncode == 2
        assert error_line(broker) == (
            f"minibroker: error: cannot listen on 127.0.0.1:{port}: address already in use "
            "(another process has this port; pick another)"
        )


@pytest.mark.timeout(90)
def test_client_flag_errors_are_usage_errors(tmp_path: Path) -> None:
    cases = {
        ("produce", "t", "--property", "parse.kye=true"): (
            "minibroker: error: unknown property 'parse.kye'; did you mean 'parse.key'?"
        ),
        ("consume", "t", "--offset", "soon"): (
            "minibroker: error: --offset expects earliest, latest, an offset N or -N (N before the end), got 'soon'"
        ),
        ("consume", "t", "--from-beginning", "--offset", "3"): (
            "minibroker: error: give --from-beginning or --offset, not both"
        ),
        ("consume", "t", "--format", "%x"): (
            "minibroker: error: --format: unknown token %x (known: %t %p %o %T %k %K %s %S %h %%)"
        ),
        ("produce", "t", "--header", "novalue"): "minibroker: error: --header expects NAME=VALUE, got 'novalue'",
        ("topic", "list", "--dir", "d", "--bootstrap-server", "127.0.0.1:1"): (
            "minibroker: error: give --bootstrap-server or --dir, not both"
        ),
    }
    for args, expected in cases.items():
        result = cli(*args, "--bootstrap-server", "127.0.0.1:1") if "--dir" not in args else cli(*args)
        assert (result.returncode, error_line(result)) == (2, expected), args
    missing = cli("topic", "list", "--dir", str(tmp_path / "none"))
    assert missing.returncode == 3
    assert error_line(missing).startswith(f"minibroker: error: no cluster in {tmp_path / 'none'}")


@pytest.mark.timeout(30)
def test_leader_kill_without_restart_refuses_rounds_that_would_kill_every_broker() -> None:
    # before, the last round found no broker left and the run ended in a traceback
    result = cli("chaos", "leader-kill", "--rounds", "3")
    assert (result.returncode, error_line(result)) == (
        2,
        "minibroker: error: without --restart each round kills a broker for good, and --rounds 3 would kill "
        "all 3: add --restart, or use at most 2 rounds",
    )
    assert "Traceback" not in result.stderr


@pytest.mark.timeout(30)
def test_a_bad_bootstrap_server_is_a_usage_error() -> None:
    result = cli("topic", "list", "--bootstrap-server", "nonsense")
    assert result.returncode == 2
    assert "HOST:PORT" in result.stderr


@pytest.mark.timeout(30)
def test_commands_against_a_cluster_that_is_not_running_exit_3(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    result = cli("topic", "list", "--bootstrap-server", f"127.0.0.1:{port}")
    assert result.returncode == 3
    assert "cluster not reachable" in result.stderr
    result = cli("cluster", "status", "--dir", str(tmp_path / "none"))
    assert result.returncode == 3
    assert "no cluster in" in result.stderr


@pytest.mark.timeout(30)
def test_an_unknown_config_key_names_the_key(tmp_path: Path) -> None:
    result = cli("broker", "--broker-id", "1", "--log-dirs", str(tmp_path), "--override", "replica.fetch.max.byte=5")
    assert result.returncode == 2
    assert "replica.fetch.max.byte" in result.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("entity", "change", "message"),
    [
        (
            ["--entity-type", "brokers", "--entity-default"],
            ["--add-config", "follower.replication.throttled.rat=5"],
            "did you mean follower.replication.throttled.rate?",
        ),
        (
            ["--entity-type", "brokers", "--entity-name", "1"],
            ["--add-config", "leader.replication.throttled.rate=0"],
            "expected bytes/s >= 1, got '0'",
        ),
        (
            ["--entity-type", "brokers", "--entity-name", "1"],
            ["--delete-config", "log.retention.ms"],
            "cannot be changed at runtime",
        ),
        (["--topic", "t"], ["--add-config", "min.insync.replica=2"], "did you mean min.insync.replicas?"),
        (["--topic", "t"], ["--delete-config", "retention.msx"], "unknown topic config 'retention.msx'"),
        (
            ["--topic", "t"],
            ["--add-config", "retention.ms=1", "--delete-config", "retention.ms"],
            "retention.ms: both added and deleted",
        ),
    ],
)
def test_a_bad_config_change_is_a_usage_error_before_any_cluster_is_asked(
    entity: list[str], change: list[str], message: str
) -> None:
    (port,) = free_ports(1)  # nothing listens: a usage error must come before the cluster is asked
    result = cli("configs", "alter", "--bootstrap-server", f"127.0.0.1:{port}", *entity, *change)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("prop", "message"),
    [
        ("max.partition.fetch.byte=8388608", "did you mean max.partition.fetch.bytes?"),
        ("fetch.max.bytes=0", "expected an integer >= 1, got '0'"),
        ("fetch.max.wait.ms=soon", "expected an integer >= 0, got 'soon'"),
        ("fetch.min.bytes", "--consumer-property expects KEY=VALUE"),
    ],
)
def test_a_bad_consumer_property_is_a_usage_error(prop: str, message: str) -> None:
    (port,) = free_ports(1)  # nothing listens: a usage error must come before the cluster is asked
    result = cli("consume", "t", "--bootstrap-server", f"127.0.0.1:{port}", "--consumer-property", prop)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def free_base_port() -> int:
    """A base port for `cluster up`: brokers take base, base+1, base+2, their Kafka listeners base+200..202
    and the controller base+100."""
    import socket

    for _ in range(50):
        (base,) = free_ports(1)
        socks: list[socket.socket] = []
        try:
            for port in (base, base + 1, base + 2, base + 100, base + 200, base + 201, base + 202):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free run of ports")


@pytest.fixture(scope="module")
def running_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    cluster_dir = tmp_path_factory.mktemp("cli") / "c"
    base = free_base_port()
    up = cli("cluster", "up", "--dir", str(cluster_dir), "--base-port", str(base), "--detach", "--json", timeout=90)
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)  # with --json stdout is the one document; progress went to stderr
    assert len(info["brokers"]) == 3
    assert "all 3 brokers registered and unfenced; 3 controllers in the quorum" in up.stderr
    try:
        yield cluster_dir, info["bootstrap_server"].split(",")[0]
    finally:
        down = cli("cluster", "down", "--dir", str(cluster_dir), "--json", timeout=60)
        assert down.returncode == 0, down.stderr
        assert set(json.loads(down.stdout).values()) <= {"stopped", "not running"}


@pytest.mark.timeout(120)
def test_topic_produce_consume_and_status_round_trip(running_cluster: tuple[Path, str]) -> None:
    cluster_dir, bootstrap = running_cluster
    b = ["--bootstrap-server", bootstrap]
    created = cli("topic", "create", "orders", "--partitions", "3", "--replication-factor", "3", *b)
    assert created.returncode == 0, created.stderr
    assert "created topic orders" in created.stdout
    again = cli("topic", "create", "orders", "--partitions", "3", "--replication-factor", "3", *b)
    assert again.returncode == 4 and "TOPIC_ALREADY_EXISTS" in again.stderr
    too_many = cli("topic", "create", "big", "--replication-factor", "5", *b)
    assert too_many.returncode == 4 and "replication factor" in too_many.stderr

    listed = cli("topic", "list", "--json", *b)
    assert "orders" in json.loads(listed.stdout)
    described = json.loads(cli("topic", "describe", "orders", "--json", *b).stdout)
    assert [len(p["replicas"]) for p in described[0]["partitions"]] == [3, 3, 3]
    assert (described[0]["replication_factor"], described[0]["configs"]) == (3, {"min.insync.replicas": "1"})
    text = cli("topic", "describe", "orders", *b).stdout.splitlines()
    assert text[0] == "Topic: orders\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: min.insync.replicas=1"
    assert text[1].startswith("\tTopic: orders\tPartition: 0\tLeader: ")

    lines = "".join(f"line-{i}\n" for i in range(50))
    produced = cli("produce", "orders", "--json", *b, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    assert json.loads(produced.stdout)["acked"] == 50
    generated = cli("produce", "orders", "--count", "30", "--size", "64", "--acks", "1", *b)
    assert generated.returncode == 0 and "produced 30 records" in generated.stdout

    consumed = cli("consume", "orders", "--from-beginning", "--max-messages", "80", "--timeout-ms", "5000", *b)
    assert consumed.returncode == 0, consumed.stderr
    values = consumed.stdout.splitlines()
    assert len(values) == 80
    assert {f"line-{i}" for i in range(50)} <= set(values)
    assert "Processed a total of 80 messages" in consumed.stderr

    one = cli(
        "consume", "orders", "--partition", "0", "--from-beginning", "--timeout-ms", "1500", "--print-offsets", *b
    )
    offsets = [int(line.split("\t")[1]) for line in one.stdout.splitlines()]
    assert offsets == sorted(offsets) == list(range(len(offsets)))

    short = cli("consume", "orders", "--from-beginning", "--max-messages", "1000", "--timeout-ms", "1000", *b)
    assert short.returncode == 0, "a timeout ends the consumer with 0, as Kafka's console consumer does"
    assert short.stdout.count("\n") == 80
    strict = cli(
        *("consume", "orders", "--from-beginning", "--max-messages", "1000", "--timeout-ms", "1000"),
        *("--fail-on-timeout", *b),
    )
    assert strict.returncode == 1
    assert error_line(strict) == (
        "minibroker: check failed: 80 of --max-messages 1000 records arrived within --timeout-ms 1000"
    )

    status = cli("cluster", "status", "--dir", str(cluster_dir), "--json")
    assert status.returncode == 0, status.stderr
    st = json.loads(status.stdout)
    assert [b["alive"] and b["registered"] for b in st["brokers"]] == [True, True, True]
    orders = [p for p in st["partitions"] if p["topic"] == "orders"]
    assert len(orders) == 3
    for p in orders:
        assert sorted(p["isr"]) == [1, 2, 3]
        assert all(r["log_end_offset"] is not None for r in p["replicas"])
    text = cli("cluster", "status", "--dir", str(cluster_dir))
    assert "orders-0" in text.stdout and "leader" in text.stdout


@pytest.mark.timeout(60)
def test_unknown_topic_errors_name_the_topic(running_cluster: tuple[Path, str]) -> None:
    _, bootstrap = running_cluster
    b = ["--bootstrap-server", bootstrap]
    for command in (
        ["produce", "ghost", "--count", "1"],
        ["consume", "ghost", "--timeout-ms", "500"],
        ["topic", "describe", "ghost"],
    ):
        result = cli(*command, *b)
        assert result.returncode == 4, (command, result.stderr)
        assert "ghost" in result.stderr
    # The hint works as printed: it names the cluster the command used
    result = cli("produce", "ghost", "--count", "1", *b)
    assert error_line(result) == (
        f"minibroker: error: unknown topic 'ghost' (create it with "
        f"`minibroker topic create ghost --bootstrap-server {bootstrap}`)"
    )


@pytest.mark.timeout(60)
def test_a_second_cluster_up_in_the_same_dir_is_refused(running_cluster: tuple[Path, str]) -> None:
    cluster_dir, _ = running_cluster
    result = cli("cluster", "up", "--dir", str(cluster_dir), "--detach")
    assert result.returncode == 4
    assert "already running" in result.stderr


@pytest.fixture(scope="module")
def up_info(running_cluster: tuple[Path, str]) -> dict[str, object]:
    cluster_dir, _ = running_cluster
    from cluster.local_cluster import LocalClusterState

    state = LocalClusterState.load(cluster_dir)
    return {
        "dir": state.dir,
        "bootstrap_server": state.bootstrap,
        "kafka_bootstrap_servers": state.kafka_bootstrap,
        "auto_created_topics": {"num.partitions": 3, "default.replication.factor": 3},
        "controller_quorum_voters": state.quorum_voters,
        "metrics_dir": state.metrics_dir,
        "brokers": [
            {"id": b.node_id, "address": f"{b.host}:{b.port}", "pid": b.pid, "log": b.log} for b in state.brokers
        ],
    }


@pytest.mark.timeout(120)
def test_the_hints_cluster_up_prints_work_as_printed(running_cluster: tuple[Path, str], up_info: dict) -> None:
    import shlex

    from cluster.cli import _describe_up

    cluster_dir, _ = running_cluster
    assert (cluster_dir / "bootstrap.servers").read_text() == f"{up_info['bootstrap_server']}\n"
    lines = _describe_up(up_info, detached=True).splitlines()
    commands = [
        line[line.index("minibroker ") :] for line in lines if "  minibroker " in line or ": minibroker " in line
    ]
    create, status, stop = commands
    assert create == f"minibroker topic create demo --partitions 3 --replication-factor 3 --dir {cluster_dir}"
    assert stop == f"minibroker cluster down --dir {cluster_dir}"
    # The printed commands run as printed (the cluster is not on the default port); `cluster down` is
    # left to the fixture.
    for command in (create, status):
        argv = shlex.split(command)
        assert argv[0] == "minibroker"
        result = cli(*argv[1:])
        assert result.returncode == 0, (command, result.stderr)
    # And the exported variable works for every client command without flags.
    export = next(line for line in lines if "export" in line).split("export ", 1)[1].split()[0]
    name, value = export.split("=", 1)
    listed = cli("topic", "list", "--json", env=clean_env(**{name: value}))
    assert listed.returncode == 0, listed.stderr
    assert "demo" in json.loads(listed.stdout)
    # Kafka users: the listeners' list in a file of its own, and what an auto-created topic gets
    kafka_servers = str(up_info["kafka_bootstrap_servers"])
    assert kafka_servers and (cluster_dir / "kafka.bootstrap.servers").read_text() == f"{kafka_servers}\n"
    assert any("created with 3 partitions, replication factor 3" in line for line in lines)
    kcat_line = next(line.strip() for line in lines if line.strip().startswith("kcat "))
    if shutil.which("kcat"):
        listing = subprocess.run(["bash", "-c", kcat_line], capture_output=True, text=True, timeout=60)
        assert listing.returncode == 0 and "3 brokers" in listing.stdout, listing.stderr


@pytest.mark.timeout(60)
def test_cluster_status_prints_the_kafka_bootstrap_list_from_the_dir_or_any_broker(
    running_cluster: tuple[Path, str],
) -> None:
    cluster_dir, bootstrap = running_cluster
    from cluster.local_cluster import LocalClusterState

    expected = LocalClusterState.load(cluster_dir).kafka_bootstrap
    assert len(expected.split(",")) == 3
    local = cli("cluster", "status", "--kafka-bootstrap", "--dir", str(cluster_dir))
    assert (local.returncode, local.stdout) == (0, f"{expected}\n"), local.stderr
    remote = cli("cluster", "status", "--kafka-bootstrap", "--bootstrap-server", bootstrap, "--json")
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout) == {"kafka_bootstrap_servers": expected}


@pytest.mark.timeout(30)
def test_cluster_status_says_when_a_cluster_has_no_kafka_listener(tmp_path: Path) -> None:
    from cluster.local_cluster import LocalClusterState, ProcessInfo

    controller = ProcessInfo("controller", 3000, "127.0.0.10", 9192, 0, "", "", "")
    broker = ProcessInfo("broker", 1, "127.0.0.11", 9092, 0, "", "", "")  # kafka_port 0: none
    LocalClusterState(str(tmp_path), [controller], [broker]).save()
    result = cli("cluster", "status", "--kafka-bootstrap", "--dir", str(tmp_path))
    assert result.returncode == 3
    assert error_line(result) == (
        "minibroker: error: the cluster's brokers have no Kafka listener (listeners=...,PLAINTEXT://host:port)"
    )


@pytest.mark.timeout(120)
def test_keys_and_headers_round_trip_through_produce_and_consume(running_cluster: tuple[Path, str]) -> None:
    from client.partitioner import partition_for_key

    cluster_dir, _ = running_cluster
    d = ["--dir", str(cluster_dir)]
    assert cli("topic", "create", "keyed", "--partitions", "3", *d).returncode == 0
    # Given lines with headers, a key and a value, in Kafka's console producer layout
    lines = "".join(f"trace:{i},origin:cli\tuser-{i % 4}:value {i}: with colon\n" for i in range(40))
    produced = cli(
        *("produce", "keyed", "--property", "parse.key=true", "--property", "key.separator=:"),
        *("--property", "parse.headers=true", "--header", "app=test", "--json", *d),
        stdin=lines,
    )
    assert produced.returncode == 0, produced.stderr
    assert json.loads(produced.stdout) == {
        "topic": "keyed",
        "acked": 40,
        "failed": 0,
        "errors": [],
        "idempotent": True,
        "resent_indeterminate_batches": 0,
    }

    # When they are consumed as JSON lines
    consumed = cli("consume", "keyed", "--from-beginning", "--max-messages", "40", "--json", *d)
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]

    # Then every record comes back with its key, value and headers, on the partition Kafka would pick
    assert len(records) == 40
    by_value = {r["value"]: r for r in records}
    for i in range(40):
        r = by_value[f"value {i}: with colon"]
        assert r["key"] == f"user-{i % 4}"
        assert r["headers"] == [["app", "test"], ["trace", str(i)], ["origin", "cli"]]
        assert r["partition"] == partition_for_key(f"user-{i % 4}".encode(), 3)
        assert r["topic"] == "keyed"

    # And Kafka's print.key / print.headers and kcat's --format show them as text
    text = cli(
        *("consume", "keyed", "--partition", str(partition_for_key(b"user-1", 3)), "--from-beginning"),
        *("--max-messages", "1", "--property", "print.key=true", "--property", "print.headers=true"),
        *("--property", "key.separator=|", *d),
    )
    first_of_partition = min(
        (r for r in records if r["partition"] == partition_for_key(b"user-1", 3)), key=lambda r: r["offset"]
    )
    headers = ",".join(f"{k}:{v}" for k, v in first_of_partition["headers"])
    assert text.stdout == f"{headers}|{first_of_partition['key']}|{first_of_partition['value']}\n"
    formatted = cli(
        *("consume", "keyed", "--partition", "0", "--offset", "0", "--max-messages", "2"),
        *("--format", "%p:%o:%k=%s\\n", *d),
    )
    expected = [
        f"0:{r['offset']}:{r['key']}={r['value']}"
        for r in sorted(records, key=lambda r: r["offset"])
        if r["partition"] == 0
    ][:2]
    assert formatted.stdout.splitlines() == expected


@pytest.mark.timeout(120)
def test_consume_starts_at_the_offset_asked_for(running_cluster: tuple[Path, str]) -> None:
    cluster_dir, _ = running_cluster
    d = ["--dir", str(cluster_dir)]
    created = cli("topic", "create", "offsets", "--partitions", "1", *d)
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("created topic offsets (1 partition, replication factor ")
    assert cli("produce", "offsets", *d, stdin="".join(f"m{i}\n" for i in range(10))).returncode == 0

    def values(*args: str) -> list[str]:
        result = cli("consume", "offsets", "--timeout-ms", "1000", *args, *d)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    assert values("--offset", "7") == ["m7", "m8", "m9"]
    assert values("--offset", "-2") == ["m8", "m9"]
    assert values("--offset", "earliest", "--max-messages", "2") == ["m0", "m1"]
    assert values("--offset", "-100", "--max-messages", "1") == ["m0"]  # clamped to the log start
    assert values("--offset", "latest") == []
    assert values("--offset", "500") == []  # clamped to the end: waits for new records


@pytest.mark.timeout(120)
def test_consume_takes_kafkas_minus_one_for_no_limit_and_no_timeout(running_cluster: tuple[Path, str]) -> None:
    cluster_dir, _ = running_cluster
    d = ["--dir", str(cluster_dir)]
    assert cli("topic", "create", "unbounded", "--partitions", "1", *d).returncode == 0
    assert cli("produce", "unbounded", *d, stdin="a\nb\nc\n").returncode == 0
    # --max-messages -1 is no limit: everything there is, then the timeout ends it with exit 0
    everything = cli("consume", "unbounded", "--from-beginning", "--max-messages", "-1", "--timeout-ms", "500", *d)
    assert (everything.returncode, everything.stdout.splitlines()) == (0, ["a", "b", "c"]), everything.stderr
    # --timeout-ms -1 never times out: only --max-messages ends it (the test's own timeout guards a hang)
    waiting = cli("consume", "unbounded", "--from-beginning", "--max-messages", "2", "--timeout-ms", "-1", *d)
    assert (waiting.returncode, waiting.stdout.splitlines()) == (0, ["a", "b"]), waiting.stderr
    # and with nothing left to read it keeps waiting past any --timeout-ms default
    with pytest.raises(subprocess.TimeoutExpired):
        cli("consume", "unbounded", "--offset", "latest", "--timeout-ms", "-1", *d, timeout=12)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_consumer_stopped_by_a_signal_says_how_many_records_it_printed(
    running_cluster: tuple[Path, str], signum: int
) -> None:
    cluster_dir, _ = running_cluster
    d = ["--dir", str(cluster_dir)]
    topic = f"stopped-{signum}"
    assert cli("topic", "create", topic, "--partitions", "1", *d).returncode == 0
    assert cli("produce", topic, *d, stdin="a\nb\nc\n").returncode == 0
    # given a consumer without a timeout that has printed every record there is
    proc = subprocess.Popen(
        [sys.executable, "-m", "cluster", "consume", topic, "--from-beginning", "--timeout-ms", "-1", *d],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=clean_env(),
        preexec_fn=default_sigint,  # stopped by SIGINT below, as Ctrl-C stops it
    )
    try:
        assert proc.stdout is not None
        assert [proc.stdout.readline() for _ in range(3)] == ["a\n", "b\n", "c\n"]
        # when it is stopped the way a user stops it
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    # then it ends without a traceback, with Kafka's summary line and the exit code of an interrupt
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "Processed a total of 3 messages"
    assert proc.returncode == 130


@pytest.mark.timeout(60)
def test_acks_all_that_can_never_succeed_fails_at_once_with_the_reason(running_cluster: tuple[Path, str]) -> None:
    cluster_dir, _ = running_cluster
    d = ["--dir", str(cluster_dir)]
    created = cli(
        *("topic", "create", "bad2", "--partitions", "1", "--replication-factor", "1"),
        *("--config", "min.insync.replicas=2", *d),
    )
    assert created.returncode == 0, created.stderr
    result = cli("produce", "bad2", "--count", "10", *d)
    assert result.returncode == 4
    assert error_line(result) == (
        "minibroker: error: acks=all to 'bad2' can never succeed: min.insync.replicas=2 is larger than its "
        "replication factor 1 (use --acks 1, or a topic with a lower min.insync.replicas)"
    )
    assert cli("produce", "bad2", "--count", "10", "--acks", "1", *d).returncode == 0
    # kafka-topics.sh's filter lists exactly the partitions whose ISR is below min.insync.replicas
    under = cli("topic", "describe", "--under-min-isr-partitions", *d)
    assert under.returncode == 0, under.stderr
    assert [line.split("\t")[1:3] for line in under.stdout.splitlines()] == [["Topic: bad2", "Partition: 0"]]


@pytest.mark.timeout(120)
def test_every_json_output_is_one_document(running_cluster: tuple[Path, str]) -> None:
    cluster_dir, bootstrap = running_cluster
    d = ["--dir", str(cluster_dir)]
    assert cli("produce", "orders", "--count", "5", *d).returncode in (0, 4)
    for args in (
        ("topic", "create", "jsonic", "--partitions", "2", "--json", *d),
        ("topic", "list", "--json", *d),
        ("topic", "describe", "--json", *d),
        ("topic", "describe", "--under-replicated-partitions", "--json", *d),
        ("produce", "jsonic", "--count", "30", "--json", *d),
        ("cluster", "status", "--json", *d),
        ("cluster", "status", "--json", "--bootstrap-server", bootstrap),
    ):
        result = cli(*args)
        assert result.returncode == 0, (args, result.stderr)
        json.loads(result.stdout)  # raises unless stdout is exactly one JSON document
    consumed = cli("consume", "jsonic", "--from-beginning", "--max-messages", "30", "--json", *d)
    assert consumed.returncode == 0
    assert [json.loads(line)["topic"] for line in consumed.stdout.splitlines()] == ["jsonic"] * 30


@pytest.mark.timeout(60)
def test_cluster_status_describes_a_cluster_through_any_broker(running_cluster: tuple[Path, str]) -> None:
    cluster_dir, bootstrap = running_cluster
    status = cli("cluster", "status", "--bootstrap-server", bootstrap.split(",")[-1], "--json")
    assert status.returncode == 0, status.stderr
    st = json.loads(status.stdout)
    assert st["controller"]["id"] in (3000, 3001, 3002) and st["controller"]["alive"]
    assert st["quorum"]["leader_id"] == st["controller"]["id"]
    assert [(b["id"], b["alive"]) for b in st["brokers"]] == [(1, True), (2, True), (3, True)]
    assert {p["topic"] for p in st["partitions"]} >= {"orders"}
    local = json.loads(cli("cluster", "status", "--dir", str(cluster_dir), "--json").stdout)
    assert sorted((p["topic"], p["partition"], p["leader"]) for p in st["partitions"]) == sorted(
        (p["topic"], p["partition"], p["leader"]) for p in local["partitions"]
    )
    text = cli("cluster", "status", "--bootstrap-server", bootstrap)
    assert text.stdout.startswith(f"controller quorum: leader {st['controller']['id']} (the active controller)")


@pytest.mark.timeout(60)
def test_a_reader_that_goes_away_ends_the_consumer_quietly(running_cluster: tuple[Path, str]) -> None:
    _, bootstrap = running_cluster
    d = ["--bootstrap-server", bootstrap]
    assert cli("topic", "create", "pipe", "--partitions", "1", *d).returncode == 0
    assert cli("produce", "pipe", "--count", "20000", "--size", "64", *d).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "cluster", "consume", "pipe", "--from-beginning", "--timeout-ms", "3000", *d],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=clean_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()  # like `| head -1`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 0
    assert err == ""


@pytest.mark.timeout(120)
def test_a_dead_broker_shows_in_the_filters_and_produce_says_why_it_waits(running_cluster: tuple[Path, str]) -> None:
    import asyncio
    import signal
    import time

    from cluster.local_cluster import LocalClusterState, restart_broker, wait_exit

    cluster_dir, _ = running_cluster
    d = ["--dir", str(cluster_dir)]
    created = cli("topic", "create", "strict", "--partitions", "1", "--config", "min.insync.replicas=3", *d)
    assert created.returncode == 0, created.stderr
    state = LocalClusterState.load(cluster_dir)
    victim = state.broker(3)
    os.kill(victim.pid, signal.SIGKILL)
    assert wait_exit(victim.pid, 10)
    try:
        # Given broker 3 dead and fenced: every partition lost a replica from its ISR
        deadline = time.monotonic() + 30
        while True:
            under = json.loads(cli("topic", "describe", "--under-replicated-partitions", "--json", *d).stdout)
            if "strict" in {t["topic"] for t in under}:
                break
            assert time.monotonic() < deadline, under
            time.sleep(0.2)
        strict = next(t for t in under if t["topic"] == "strict")
        assert [3 not in p["isr"] and 3 in p["offline_replicas"] for p in strict["partitions"]] == [True]
        text = cli("topic", "describe", "strict", "--under-min-isr-partitions", *d).stdout
        assert text.startswith("\tTopic: strict\tPartition: 0\t") and text.rstrip().endswith("\tOffline: 3")

        # When acks=all needs the dead broker, then produce says why it retries, not only that it failed
        result = cli("produce", "strict", "--count", "1", *d)
        assert result.returncode == 4
        assert "Traceback" not in result.stderr
        lines = result.stderr.splitlines()
        assert lines[0].startswith("minibroker: produce: NOT_ENOUGH_REPLICAS: strict-0: ISR ")
        assert lines[0].endswith(" is smaller than min.insync.replicas=3 (retrying)")
        assert lines[1].startswith("minibroker: produce: strict-0: NOT_ENOUGH_REPLICAS: ISR ")
        assert lines[1].count("strict-0") == 1  # the broker's message names the partition too
        assert lines[1].endswith("(gave up after 20 retries)")
        assert result.stdout == "produced 0 records to strict (1 failed: 1 NOT_ENOUGH_REPLICAS)\n"
    finally:
        asyncio.run(restart_broker(state, 3))
    deadline = time.monotonic() + 60
    while json.loads(cli("topic", "describe", "--under-replicated-partitions", "--json", *d).stdout):
        assert time.monotonic() < deadline, "broker 3 did not rejoin every ISR"
        time.sleep(0.2)


@pytest.mark.timeout(30)
def test_a_path_that_cannot_be_used_is_named_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    bad = tmp_path / "file" / "c"
    up = cli("cluster", "up", "--dir", str(bad))
    assert (up.returncode, error_line(up)) == (2, f"minibroker: error: cannot use {bad}: Not a directory")
    (port,) = free_ports(1)
    broker = cli("broker", "--broker-id", "1", "--log-dirs", str(bad), "--listeners", f"127.0.0.1:{port}")
    assert (broker.returncode, error_line(broker)) == (2, f"minibroker: error: cannot use {bad}: Not a directory")


@pytest.mark.timeout(120)
def test_topic_create_without_a_controller_says_so_and_exits_3(tmp_path: Path) -> None:
    # given a one-broker cluster whose one controller has died
    cluster_dir = tmp_path / "c"
    base = free_base_port()
    up = cli(
        "cluster",
        "up",
        "--dir",
        str(cluster_dir),
        "--brokers",
        "1",
        "--controllers",
        "1",
        "--base-port",
        str(base),
        "--detach",
    )
    assert up.returncode == 0, up.stderr
    try:
        for controller in json.loads((cluster_dir / "cluster.json").read_text())["controllers"]:
            os.kill(controller["pid"], signal.SIGKILL)
        # when a topic is created through its broker
        created = cli("topic", "create", "nowhere", "--partitions", "1", "--dir", str(cluster_dir))
        # then the error names the controller, not a bare wire message, and the exit code is "not reachable"
        assert created.returncode == 3, created.stderr
        assert error_line(created).startswith(
            "minibroker: error: create failed: the brokers cannot reach the controller ("
        )
        assert error_line(created).endswith("); is it running? (`minibroker cluster status`)")
    finally:
        down = cli("cluster", "down", "--dir", str(cluster_dir), timeout=60)
        assert down.returncode == 0, down.stderr
