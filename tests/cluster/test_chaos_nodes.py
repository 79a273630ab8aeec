"""How chaos reads a compose project from its containers (cluster/chaos_nodes.py), and the CLI's checks
of --compose. The containers here are `docker inspect` output as Docker writes it; the Docker CLI itself
is exercised on a real engine by tests/integration/test_compose_engine.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.chaos_nodes import ComposeNodes, Container
from cluster.cli import main
from cluster.exit_codes import EXIT_USAGE

NAMESPACE = "container:0123456789abcdef"


def inspected(service: str, command: list[str], env: dict[str, str], network_mode: str = NAMESPACE) -> dict[str, Any]:
    """One container as `docker inspect` describes it (the fields chaos reads)."""
    return {
        "Id": f"id-{service}",
        "Name": f"/project-{service}-1",
        "Config": {
            "Cmd": command,
            "Entrypoint": None,
            "Env": [f"{k}={v}" for k, v in env.items()] + ["PATH=/opt/venv/bin:/usr/bin"],
            "Labels": {"com.docker.compose.service": service, "com.docker.compose.project": "project"},
        },
        "HostConfig": {"NetworkMode": network_mode},
        "State": {"Running": True, "Paused": False, "Pid": 4242},
    }


def broker(n: int, voters: str) -> dict[str, Any]:
    return inspected(
        f"broker-{n}",
        ["minibroker", "broker"],
        {
            "MINIBROKER_BROKER_ID": str(n),
            "MINIBROKER_LISTENERS": f"0.0.0.0:{19091 + n},PLAINTEXT://0.0.0.0:{19291 + n}",
            "MINIBROKER_ADVERTISED_LISTENERS": f"127.0.0.1:{19091 + n},PLAINTEXT://127.0.0.1:{19291 + n}",
            "MINIBROKER_CONTROLLER_QUORUM_VOTERS": voters,
        },
    )


def controller(node_id: int, port: int) -> dict[str, Any]:
    return inspected(
        f"controller-{node_id}",
        ["minibroker", "controller"],
        {"MINIBROKER_NODE_ID": str(node_id), "MINIBROKER_LISTENERS": f"0.0.0.0:{port}"},
    )


def project(raw: list[dict[str, Any]]) -> ComposeNodes:
    containers = [c for c in (Container.from_inspect(r) for r in raw) if c is not None]
    return ComposeNodes(["docker", "compose"], containers)


def test_brokers_and_controllers_are_told_apart_by_their_command_and_other_services_are_left_out() -> None:
    # Given the containers of docker-compose.yml: the namespace owner, a controller, brokers, the sink, Mosquitto
    raw = [
        inspected("cluster-net", ["sleep", "infinity"], {}, network_mode="bridge"),
        controller(3000, 19192),
        broker(1, "127.0.0.1:19192"),
        broker(2, "127.0.0.1:19192"),
        inspected("metrics-sink", ["minibroker", "metrics", "sink", "--out", "/metrics"], {}, network_mode="x_default"),
        inspected("mosquitto", ["sh", "-c", "exec mosquitto -c /mosquitto/config/minibroker.conf"], {}),
    ]

    # When chaos reads them
    nodes = project(raw)

    # Then the brokers are keyed by broker.id, the controller by its node.id, and nothing else is taken
    assert sorted(nodes.brokers) == [1, 2]
    assert nodes.brokers[2].service == "broker-2"
    assert [c.node_id for c in nodes.controllers] == [3000]


def test_the_state_addresses_each_broker_at_its_advertised_listener_and_a_single_controller() -> None:
    nodes = project([controller(3000, 19192), *(broker(n, "127.0.0.1:19192") for n in (1, 2, 3))])

    state = nodes.state()

    assert [(b.node_id, b.host, b.port, b.kafka_port) for b in state.brokers] == [
        (1, "127.0.0.1", 19092, 19292),
        (2, "127.0.0.1", 19093, 19293),
        (3, "127.0.0.1", 19094, 19294),
    ]
    assert [(c.node_id, c.host, c.port) for c in state.controllers] == [(3000, "127.0.0.1", 19192)]
    assert state.bootstrap == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"


def test_a_controller_quorum_is_read_from_the_voters_with_ids() -> None:
    # Given three controller services and brokers naming them as `id@host:port` voters
    voters = "3001@127.0.0.1:19193,3000@127.0.0.1:19192,3002@127.0.0.1:19194"
    controllers = [controller(3000, 19192), controller(3001, 19193), controller(3002, 19194)]
    nodes = project([*controllers, broker(1, voters), broker(2, voters)])

    # When chaos builds its view
    state = nodes.state()

    # Then it knows every controller, and addresses them as the voters list them (the order chaos asks them in)
    assert sorted(c.node_id for c in nodes.controllers) == [3000, 3001, 3002]
    assert [(c.node_id, c.port) for c in state.controllers] == [(3001, 19193), (3000, 19192), (3002, 19194)]
    # each with its own container
    assert [c.config for c in state.controllers] == ["id-controller-3001", "id-controller-3000", "id-controller-3002"]


def test_network_faults_are_refused_when_the_nodes_share_a_namespace() -> None:
    nodes = project([controller(3000, 19192), broker(1, "127.0.0.1:19192")])

    assert "share one network namespace" in nodes.network_faults_refused()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compose", "no-such-compose.yml"], "--compose: no compose file no-such-compose.yml"),
        (["--compose", "docker-compose.yml", "--dir", "somewhere"], "--dir and --compose name two clusters"),
        (["--compose-project", "p"], "--compose-project needs --compose"),
    ],
)
def test_compose_flags_that_name_no_or_two_clusters_are_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    for experiment in (["leader-kill", "--restart"], ["run", "--faults", "kill"]):
        assert main(["chaos", *experiment, *args]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
