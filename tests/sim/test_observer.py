"""The simulator observes the brokers through the hooks they offer (server_common/replication_observer.py),
never by replacing their methods: one observer per broker incarnation, nothing shared between runs."""

from __future__ import annotations

import ast
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from sim.runner import RunResult, SimRun, run_seed
from sim.scenarios import SCENARIOS, kip279

ROOT = Path(__file__).resolve().parents[2]
# Every top-level package of the project but the tests (whose doubles may replace what they like).
PACKAGES = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists() and p.name != "tests")


def _imported_names(tree: ast.AST) -> set[str]:
    """The names a module binds by importing from the project (`from broker.partition import Partition`,
    `import storage.log`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PACKAGES:
                names |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def _base_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def replaced_attributes(source: str, filename: str = "<source>") -> list[str]:
    """Each place (line: what) a module assigns to, or deletes, an attribute of something it imported from the
    project (a class's method, a module's function), directly or with setattr."""
    tree = ast.parse(source, filename)
    imported = _imported_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if node.args and _base_name(node.args[0]) in imported:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
            continue
        while targets:
            target = targets.pop()
            if isinstance(target, ast.Tuple | ast.List):
                targets.extend(target.elts)
            elif isinstance(target, ast.Starred):
                targets.append(target.value)
            elif isinstance(target, ast.Attribute) and _base_name(target) in imported:
                found.append(f"{target.lineno}: {ast.unparse(target)}")
    return found


def test_no_module_outside_the_tests_replaces_an_attribute_of_an_imported_class() -> None:
    # The simulator once replaced Partition.update_follower_fetch_state, ReplicaManager.read_and_record,
    # Log.truncate_to and Log.truncate_fully_and_start_at for the length of a run: process-wide, silently
    # broken by a change of their signatures, invisible to a reader of the broker.
    replaced = [
        f"{path.relative_to(ROOT)}:{where}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for where in replaced_attributes(path.read_text(), str(path))
    ]
    assert replaced == []


def test_the_source_check_sees_every_way_of_replacing_a_method() -> None:
    source = """
from broker.partition import Partition
from broker.replica_manager import ReplicaManager as RM
import storage.log
from sim.checker import Checker

def patch(wrapper, node):
    Partition.update_follower_fetch_state = wrapper
    RM.read_and_record: object = wrapper
    storage.log.Log.truncate_to, x = wrapper, 1
    storage.log.Log.truncate_to = wrapper
    setattr(Partition, "stale_replica_epoch", wrapper)
    del Checker.on_ack
    node.observer = wrapper  # an instance's attribute: not a class's
    local = Partition
    table[Partition.leader_epoch] = 1  # an item of a local table, keyed by an imported name
"""
    assert sorted(int(line.split(":")[0]) for line in replaced_attributes(source)) == [8, 9, 10, 11, 12, 13]


# -- two clusters in one process ----------------------------------------------------------------------------


def _truncations(result: RunResult) -> list[dict[str, object]]:
    return [e for e in map(json.loads, result.trace_lines) if e["event"] == "truncate"]


@pytest.mark.timeout(120)
def test_two_runs_in_one_process_each_see_only_their_own_brokers_events() -> None:
    # Run A starts; run B starts while A is still running; A ends; only then does B play kip279, whose
    # followers truncate. Method replacement for the length of a run put the classes back when A ended, so B's
    # truncations went unseen; A's filter by directory was all that kept it from B's events. Each run must
    # trace exactly what it traces alone.
    _, options = SCENARIOS["kip279"]
    options = replace(options, consumers=0)
    a_started, b_started, a_ended = threading.Event(), threading.Event(), threading.Event()

    async def a_script(run: SimRun) -> None:
        a_started.set()
        assert b_started.wait(60), "run B never started"

    async def b_script(run: SimRun) -> None:
        b_started.set()
        assert a_ended.wait(60), "run A never ended"
        await kip279(run)

    async def b_alone(run: SimRun) -> None:
        await kip279(run)

    results: dict[str, RunResult] = {}

    def run_a() -> None:
        try:
            results["a"] = run_seed(1, options, schedule=[], keep_trace=True, script=a_script)
        finally:
            a_ended.set()

    def run_b() -> None:
        results["b"] = run_seed(2, options, schedule=[], keep_trace=True, script=b_script)

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    threads[0].start()
    assert a_started.wait(60), "run A never started"
    threads[1].start()
    for thread in threads:
        thread.join(100)
    assert not any(t.is_alive() for t in threads)

    async def a_alone(run: SimRun) -> None:
        return None

    alone = {
        "a": run_seed(1, options, schedule=[], keep_trace=True, script=a_alone),
        "b": run_seed(2, options, schedule=[], keep_trace=True, script=b_alone),
    }
    for run in ("a", "b"):
        assert results[run].ok and alone[run].ok, (results[run].violation, alone[run].violation)
    assert _truncations(alone["b"]), "kip279 truncates Q's log: the comparison below needs truncations"
    assert _truncations(results["b"]) == _truncations(alone["b"])
    assert results["b"].trace_lines == alone["b"].trace_lines
    assert results["a"].trace_lines == alone["a"].trace_lines
