"""`minibroker metrics sink`, `minibroker dashboard` and `minibroker sim`: tools with parsers of their own.

They are listed here for `minibroker --help`; `main` hands everything after the command to the tool's own
`main`, imported only then: the dashboard's imports pyspark and plotly, heavy enough to keep out of every
other command's start (the others follow suit, as they are looked up the same way).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from cluster.cli.common import Subcommands


def _delegate(module: str) -> Callable[[list[str]], int]:
    def run(rest: list[str]) -> int:
        return int(importlib.import_module(module).main(rest))

    return run


# Commands whose flags belong to another module's own parser: everything after the command goes there.
DELEGATED: dict[tuple[str, ...], Callable[[list[str]], int]] = {
    ("metrics", "sink"): _delegate("metrics.sink"),
    ("dashboard",): _delegate("lagapp.spark_app"),
    ("sim",): _delegate("sim.cli"),
}


def register(sub: Subcommands) -> None:
    mt = sub.add_parser("metrics", help="metrics tools", description="Metrics tools.")
    msub = mt.add_subparsers(dest="metrics_command", required=True, metavar="SUBCOMMAND")
    # Listed for `--help`; main() hands their arguments to their own parsers.
    msub.add_parser("sink", help="MQTT → JSON-lines files (minibroker metrics sink --help)")
    sub.add_parser("dashboard", help="Spark lag tables and HTML dashboard (minibroker dashboard --help)")
    sub.add_parser("sim", help="deterministic simulation: seeds, sweeps, KIP scenarios (minibroker sim --help)")
