"""Benchmark: the CPU seconds a short `minibroker` command costs, against the interpreter's own start.

    .venv/bin/python -m bench.cli_start [--quick] [--runs N]

A short command (`--version`, `--help`, `topic list`) is mostly start-up: the interpreter, then the
modules the CLI imports before it does anything. Each command runs as its own process, the way a user
runs it (the `minibroker` script next to this interpreter), `--runs` times (5 with --quick), the
commands taking turns so a burst of load elsewhere touches all of them alike. A process's CPU is its
user + system time from `wait4`.

Bytecode: an installed package carries its compiled modules (pip compiles them; the Docker image too),
so the commands run with Python's bytecode cache as an installed CLI does: the children run without
PYTHONDONTWRITEBYTECODE, and one untimed run of each command fills the cache first. (A checkout run with
PYTHONDONTWRITEBYTECODE=1 and no cache compiles every module it imports from source at every run.)

Baseline, same run, same turns: `python -c pass` with this interpreter (its start-up, `site` and the
venv's .pth files). Reported per command: the median and least CPU seconds, the median wall seconds,
`over_baseline_cpu_s` (median minus the baseline's median: what the command's own imports and work cost)
and, from one more run under `-X importtime`, which of a list of heavy packages it imported
(`heavy_imports`: the broker server, the controller, kafka-python, uvloop, pyspark, ...). `topic list`
talks to a real one-broker cluster (controller and broker on free loopback ports) started for the run.
The target (issue 44) is `--help` and `topic list` under 0.2 CPU-s each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ProcessReaper, free_port, free_port_block, main_guard, progress, stop_cluster_then_cleanup
from cluster.local_cluster import LocalClusterState, start_cluster

TARGET_CPU_S = 0.2
# Top-level modules whose import a short command should not pay for (module name → what it is).
HEAVY = {
    "broker.broker_server": "the broker process",
    "controller.controller_server": "the controller process",
    "kafka": "kafka-python",
    "uvloop": "uvloop",
    "aiomqtt": "the MQTT client",
    "pyspark": "pyspark",
    "cluster.chaos_faults": "chaos faults",
    "client.producer": "the producer",
}


def cli_argv(args: list[str]) -> list[str]:
    """A `minibroker` command line: the installed script next to this interpreter, else its one line."""
    script = Path(sys.executable).with_name("minibroker")
    if script.exists():
        return [sys.executable, str(script), *args]
    return [sys.executable, "-c", "import sys; from cluster.cli import main; sys.exit(main())", *args]


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stderr) of one process; raises when it fails."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[2:]} exited {proc.returncode}: {err[-1000:]}")
    return usage.ru_utime + usage.ru_stime, wall, err


def heavy_imports(argv: list[str], env: dict[str, str]) -> list[str]:
    """Which of ``HEAVY`` the command imports (one run under ``-X importtime``)."""
    _, _, err = run_once([argv[0], "-X", "importtime", *argv[1:]], env)
    imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    return [name for name in HEAVY if name in imported]


async def run(reaper: ProcessReaper, runs: int) -> dict[str, Any]:
    load_start = os.getloadavg()[0]
    work = reaper.temp_dir("minibroker-bench-cli-")
    state: LocalClusterState | None = None
    try:
        state = await start_cluster(
            work / "cluster",
            1,
            base_port=free_port_block(1),
            controller_port=free_port(),
            progress=progress,
            num_controllers=1,  # `topic list` asks the broker; one voter is quorum enough
        )
        cluster_state = state
        reaper.watch(lambda: [p.pid for p in cluster_state.nodes])
        # No cluster, secret or bootstrap from the caller's environment reaches the commands.
        env = {k: v for k, v in os.environ.items() if not k.startswith("MINIBROKER_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        commands: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "--version": cli_argv(["--version"]),
            "--help": cli_argv(["--help"]),
            "topic list": cli_argv(["topic", "list", "--bootstrap-server", state.bootstrap]),
        }
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        wall: dict[str, list[float]] = {name: [] for name in commands}
        for argv in commands.values():
            run_once(argv, env)  # untimed: fills the bytecode cache (and the page cache)
        for k in range(runs):
            progress(f"round {k + 1} of {runs}")
            for name, argv in commands.items():
                c, w, _ = run_once(argv, env)
                cpu[name].append(c)
                wall[name].append(w)
        base = statistics.median(cpu["python -c pass"])
        result: dict[str, Any] = {
            "bench": "cli_start",
            "runs": runs,
            "baseline_cpu_s": round(base, 3),
            "baseline_cpu_min_s": round(min(cpu["python -c pass"]), 3),
            "target_cpu_s": TARGET_CPU_S,
            "commands": {},
        }
        for name, argv in commands.items():
            if name == "python -c pass":
                continue
            median = statistics.median(cpu[name])
            result["commands"][name] = {
                "cpu_s": round(median, 3),
                "cpu_min_s": round(min(cpu[name]), 3),
                "wall_s": round(statistics.median(wall[name]), 3),
                "over_baseline_cpu_s": round(median - base, 3),
                "heavy_imports": heavy_imports(argv, env),
            }
        result["load_avg_1m_start"] = round(load_start, 2)
        result["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
        return result
    finally:
        await stop_cluster_then_cleanup(state, reaper)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_start", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 runs of each command (default 15)")
    parser.add_argument("--runs", type=int, default=None, metavar="N", help="runs of each command")
    args = parser.parse_args(argv)
    runs = args.runs or (5 if args.quick else 15)
    return main_guard(lambda reaper: run(reaper, runs))


if __name__ == "__main__":
    sys.exit(main())
