"""How the suite is shared out among pytest-xdist workers (`scripts/test.sh` runs it with `-n 4`).

Most tests wait on real processes, sockets and timers, so running several at once fills the two cores
that one at a time leaves idle. A module's tests stay together on one worker (its module-scoped
fixtures, such as a running cluster, start once), and every module that uses the session's SparkSession
(a test or fixture taking `spark`) shares one worker: one JVM for them all, and the Spark tests, which do
keep a core busy, run one after another instead of fighting each other for the cores.

Each test already has its own ports (`free_ports`), addresses (`random_base_address`) and directories
(`tmp_path`), so no two workers touch the same thing.

The grouping is a scheduler of our own (`pytest_xdist_make_scheduler`), not `--dist loadgroup`: with
pytest 9 a node id can no longer be rewritten, which is how `xdist_group` marks reach the scheduler, so
those marks group nothing."""

from __future__ import annotations

import ast
import functools
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def _no_process_outlives_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the session's end, kill what a test started under the session's temp dir and never stopped, and
    say so (tests/integration/processes.py, `kill_processes_mentioning`)."""
    yield
    from tests.integration.processes import kill_processes_mentioning

    base = str(tmp_path_factory.getbasetemp())
    for pid, command in kill_processes_mentioning(base + os.sep):
        warnings.warn(f"process {pid} outlived the test that started it; killed: {command[:300]}", stacklevel=1)


SPARK_GROUP = "spark-session"


@functools.cache
def uses_spark_session(module: str) -> bool:
    """Whether a test module has a test or fixture that takes the session's `spark` fixture."""
    path = ROOT / module
    if path.suffix != ".py" or not path.is_file():
        return False
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(a.arg == "spark" for a in node.args.args)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
    )


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown, and skipped, under `-p no:xdist`
def pytest_xdist_make_scheduler(config: Any, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ModuleOrSpark(LoadScopeScheduling):  # type: ignore[misc]
        """LoadScopeScheduling with a module as the unit, the SparkSession modules as one unit."""

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SPARK_GROUP if uses_spark_session(module) else module

    return ModuleOrSpark(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules marked `starts_first` go first (the scheduler hands out modules in collection order): they
    run long mostly waiting (on a Docker image build that scripts/test.sh starts beside the suite), so
    started first they overlap the rest of the suite instead of running alone at its end."""
    items.sort(key=lambda item: item.get_closest_marker("starts_first") is None)
