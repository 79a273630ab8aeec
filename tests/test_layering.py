"""The package layering, kept: every import of every module (function bodies included) points down.

    protocol            the wire: messages, codecs, record batches, error codes
    server_common       the clock, atomic files, config helpers, log config keys
    storage  metadata   the log: segments, indexes, epoch cache, checkpoints | metadata records and image
    network  metrics    socket servers, listeners, TCP links | metric records and their sinks
    lagapp              the lag application: metric records in, lag tables and a dashboard out
    fetcher  client     the follower's fetch loop | minibroker's own producer, consumer and admin client
    raft                the metadata quorum (KRaft): elections, the replicated metadata log, snapshots
    group_coordinator   consumer groups and their offsets (run by the broker)
    broker   controller the broker node and its handlers | the controller and its metadata
    sim  cluster        the simulator | operator tools (CLI, local cluster, chaos)
    bench  scripts      anything

docs/architecture.md draws the same graph."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ALLOWED: dict[str, set[str]] = {
    "protocol": set(),
    "server_common": {"protocol"},
    "network": {"protocol", "server_common"},
    "metrics": {"protocol", "server_common"},
    # Above the brokers' side of metrics, beside everything a broker runs: no broker imports it.
    "lagapp": {"protocol", "server_common", "metrics"},
    "storage": {"protocol", "server_common"},
    "metadata": {"protocol", "server_common"},
    "raft": {"protocol", "server_common", "storage"},
    "fetcher": {"protocol", "server_common", "storage"},
    "client": {"protocol", "server_common", "network"},
    "group_coordinator": {"protocol", "server_common"},
    "broker": {
        "protocol",
        "server_common",
        "storage",
        "metadata",
        "raft",
        "network",
        "metrics",
        "fetcher",
        "group_coordinator",
    },
    "controller": {"protocol", "server_common", "storage", "metadata", "raft", "network"},
    "sim": {
        "protocol",
        "server_common",
        "storage",
        "metadata",
        "raft",
        "network",
        "metrics",
        "fetcher",
        "group_coordinator",
        "broker",
        "controller",
        "client",
        "lagapp",
    },
    "cluster": {
        "protocol",
        "server_common",
        "storage",
        "metadata",
        "raft",
        "network",
        "metrics",
        "fetcher",
        "group_coordinator",
        "broker",
        "controller",
        "client",
        "lagapp",
        "sim",
    },
}
PACKAGES = set(ALLOWED) | {"bench", "scripts", "tests"}


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """(top-level project package, line) of every absolute import in the module."""
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {(name.split(".")[0], node.lineno) for name in names if name.split(".")[0] in PACKAGES}
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_packages_below_it(package: str) -> None:
    upward = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for target, line in imported_packages(path)
        if target != package and target not in ALLOWED[package]
    ]
    assert upward == [], f"{package} may import only {sorted(ALLOWED[package])}"


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from cluster.cli import main\n    import broker.partition\n")
    assert imported_packages(module) == {("cluster", 2), ("broker", 3)}
