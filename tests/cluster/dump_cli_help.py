"""Dump the `--help` of `minibroker` and of every command and subcommand, walking the argparse tree.

    python -m tests.cluster.dump_cli_help > tests/cluster/fixtures/cli_help.txt

The fixture pins the command line's surface: tests/cluster/test_cli_help.py compares it with the live
output, so a refactor of cluster/cli cannot change a flag, a default or a help text unnoticed. Each
command is asked through `cluster.cli.main`, as a user would ask it, so the commands delegated to
their own parsers (broker|controller start|stop|..., metrics sink, dashboard, sim) are covered too.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Iterator

# argparse wraps help to the terminal's width: pin it, so the dump does not depend on who runs it.
WIDTH = "100"

# Commands parsed by a parser of their own (main() hands them their arguments): not in the tree below.
EXTRA_PATHS: tuple[tuple[str, ...], ...] = (("broker", "start"), ("controller", "start"))


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every path of subcommands below `parser`, the parser's own (empty) path first."""
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_paths(sub, (*prefix, name))


def all_paths() -> list[tuple[str, ...]]:
    from cluster.cli import build_parser

    return sorted({*command_paths(build_parser()), *EXTRA_PATHS})


def help_of(path: tuple[str, ...]) -> tuple[int, str]:
    """(exit code, stdout) of `minibroker PATH... --help`."""
    from cluster.cli import main

    out = io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out):
        try:
            code = main([*path, "--help"])
        except SystemExit as exc:
            code = exc.code
    return int(code or 0), out.getvalue()


def dump() -> str:
    os.environ["COLUMNS"] = WIDTH
    parts = []
    for path in all_paths():
        code, text = help_of(path)
        parts.append(f"==== minibroker {' '.join(path)} --help (exit {code})\n{text}")
    return "".join(parts)


if __name__ == "__main__":
    print(dump(), end="")
