"""The `minibroker` parser, and `main`: parse, run the command, and map what it raises to an exit code.

Exit codes: see cluster/exit_codes.py (and README.md). Each command family is a module with a `register`
that adds its parsers; `main` is the one place an exception becomes an exit code.

Building the parser imports no command's machinery: each family module imports what its commands use when
they run (the broker server, the clients, kafka-python, ...), so `--help`, `--version` and a short
command pay only for what they use (bench/cli_start.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from client.errors import ClientCommandError, ClusterUnavailableError, ClusterUnreachableError
from cluster.cli import broker, chaos, cluster, configs, group, metadata_quorum, produce_consume, tools, topic
from cluster.cli.broker import LIFECYCLE_ACTIONS, lifecycle_parser
from cluster.cli.common import CliError, resolve_bootstrap, resolve_secret
from cluster.cli.tools import DELEGATED
from cluster.exit_codes import (
    EXIT_CLUSTER_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from cluster.local_cluster import ClusterError

# In the order `minibroker --help` lists their commands.
FAMILIES = (broker, cluster, metadata_quorum, topic, configs, produce_consume, group, chaos, tools)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # only --version reads it

    try:
        return version("minibroker")
    except PackageNotFoundError:  # pragma: no cover - run from a checkout without installing
        return "unknown"


class _VersionAction(argparse._VersionAction):
    """argparse's --version, the version looked up only when it is asked for."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, *args: Any) -> None:
        self.version = f"minibroker {_version()}"
        super().__call__(parser, namespace, *args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minibroker",
        description="A runnable model of Kafka-style replication: brokers, a controller, replica fetchers, "
        "leader-kill chaos and a Spark lag dashboard.",
        epilog="exit codes: 0 ok, 1 check failed, 2 bad usage, 3 cluster unreachable, 4 cluster error, "
        "5 chaos: the cluster valid, the client claimed records no broker acknowledged",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for family in FAMILIES:
        family.register(sub)
    return parser


def _leaf_parsers(parser: argparse.ArgumentParser) -> None:
    """Let every subcommand remember its own parser, so its errors print its usage, not the top one's."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(_parser=sub)
                _leaf_parsers(sub)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly. Point stdout at /dev/null so the interpreter's
        # final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


def _main(argv: Sequence[str] | None) -> int:
    from cluster.allocator import tune_allocator

    argv = list(sys.argv[1:] if argv is None else argv)
    args: argparse.Namespace | None = None
    tune_allocator()  # brokers and clients move megabyte buffers: see cluster/allocator.py
    try:
        for prefix, delegate in DELEGATED.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return int(delegate(argv[len(prefix) :]))
        if argv[:1] in (["broker"], ["controller"]) and len(argv) > 1 and argv[1] in LIFECYCLE_ACTIONS:
            args = lifecycle_parser(argv[0]).parse_args(argv[1:])
            return int(args.func(args))
        parser = build_parser()
        _leaf_parsers(parser)
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
        if getattr(args, "client_command", False):
            args.bootstrap_server = resolve_bootstrap(args)
            args.cluster_secret = resolve_secret(args)
        return int(args.func(args))
    except CliError as exc:
        print(f"minibroker: error: {exc}", file=sys.stderr)
        return exc.code
    except ClientCommandError as exc:
        # The client library's own errors, mapped to exit codes here (it knows nothing of them).
        print(f"minibroker: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE if isinstance(exc, ClusterUnreachableError) else EXIT_CLUSTER_ERROR
    except ClusterUnavailableError as exc:
        # No broker of the cluster the command named answered.
        where = getattr(args, "bootstrap_server", None)
        print(f"minibroker: error: cluster not reachable{f' at {where}' if where else ''}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except ClusterError as exc:
        # The local cluster in --dir is not there or not running (commands map its other cases themselves).
        print(f"minibroker: error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError) as exc:
        # A path the user gave (--dir, log.dirs, --out, ...) that cannot be used: say which, no traceback.
        if exc.filename is None:
            raise
        print(f"minibroker: error: cannot use {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
