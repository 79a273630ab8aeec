"""The `minibroker` command line, run as a real program: every command's happy path against a real
local cluster, its error messages and exit codes, and `--help` everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.local_cluster import free_ports
from tests.integration.processes import ROOT

pytestmark = [pytest.mark.slow]


def cli(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cluster", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


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
    ["topic", "list"],
    ["topic", "describe"],
    ["produce"],
    ["consume"],
    ["chaos"],
    ["chaos", "leader-kill"],
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
def test_a_bad_flag_is_a_usage_error() -> None:
    result = cli("topic", "list", "--no-such-flag")
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in result.stderr


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


def free_base_port() -> int:
    """A base port for `cluster up`: brokers take base, base+1, base+2 and the controller base+100."""
    import socket

    for _ in range(50):
        (base,) = free_ports(1)
        socks: list[socket.socket] = []
        try:
            for port in (base, base + 1, base + 2, base + 100):
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
    info = json.loads(up.stdout)
    assert len(info["brokers"]) == 3
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
    assert short.returncode == 1, "fewer records than --max-messages within the timeout is a failed check"

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


@pytest.mark.timeout(60)
def test_a_second_cluster_up_in_the_same_dir_is_refused(running_cluster: tuple[Path, str]) -> None:
    cluster_dir, _ = running_cluster
    result = cli("cluster", "up", "--dir", str(cluster_dir), "--detach")
    assert result.returncode == 4
    assert "already running" in result.stderr
