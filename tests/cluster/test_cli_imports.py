"""What `minibroker` loads before a command runs: building the whole parser (what `--help` and
`--version` do, and every command before it starts) imports none of the commands' machinery. The CPU this
saves is measured by bench/cli_start.py; this holds the imports that cost it out."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.processes import ROOT

# A command imports these when it runs (a broker, a chaos run, a producer, ...), never before.
HEAVY = (
    "broker.broker_server",
    "controller.controller_server",
    "kafka",
    "aiomqtt",
    "pyspark",
    "lagapp",
    "cluster.chaos",
    "cluster.chaos_faults",
    "client.producer",
    "client.cluster_client",
    "protocol.messages",
    "protocol.record_batch",
    "asyncio",
)


def modules_loaded(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.timeout(120)
def test_building_the_parser_imports_no_command_machinery() -> None:
    loaded = modules_loaded("from cluster.cli.app import build_parser\nbuild_parser()")
    assert "cluster.cli.app" in loaded
    assert sorted(name for name in HEAVY if name in loaded) == []


@pytest.mark.timeout(120)
def test_a_client_command_loads_the_client_but_not_the_brokers_machinery() -> None:
    # what `topic list` imports before it connects: the client, not a broker or the record codec
    loaded = modules_loaded("import cluster.cli.topic\nfrom cluster.cli.common import connect, run_async")
    loaded |= modules_loaded("from client.cluster_client import ClusterClient")
    assert "client.cluster_client" in loaded
    assert sorted(name for name in HEAVY[:5] if name in loaded) == []
    assert "protocol.record_batch" not in loaded


@pytest.mark.timeout(60)
def test_the_chaos_client_choices_are_the_clients_the_runner_knows() -> None:
    # the parser names them itself so as not to import the runner's clients (protocol messages, KafkaJS)
    from cluster import chaos_clients
    from cluster.cli.chaos import CLIENT_CHOICES, OPTIONS

    assert CLIENT_CHOICES == chaos_clients.CLIENTS
    assert OPTIONS["--client"]["choices"] == list(chaos_clients.CLIENTS)
