"""What every command shares: errors that carry an exit code, output, the cluster a client command talks
to, and the options several commands take."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from cluster.exit_codes import EXIT_CLUSTER_ERROR, EXIT_UNREACHABLE, EXIT_USAGE
from cluster.local_cluster import ClusterError, LocalClusterState
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from client.cluster_client import ClusterClient

T = TypeVar("T")

# The compose cluster's first broker, then the first broker of a default `cluster up` (127.0.0.11).
DEFAULT_BOOTSTRAP = "127.0.0.1:9092,127.0.0.11:9092"
BOOTSTRAP_ENV = "MINIBROKER_BOOTSTRAP_SERVER"
SECRET_ENV = "MINIBROKER_CLUSTER_SECRET"  # what client commands authenticate with, when the cluster has a secret
DEFAULT_DIR = "./minibroker-cluster"

# What each command family's `register` adds its parsers to (a string: argparse's class is generic to mypy only).
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class CliError(Exception):
    """A command cannot go on: `main` prints the message and exits with `code`."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine on uvloop (``cluster.event_loop``, imported by the commands that use it)."""
    from cluster.event_loop import run_on_uvloop

    return run_on_uvloop(coro)


def emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    """With --json, exactly one JSON document on stdout; otherwise the human text."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=None, default=str))
    else:
        print(text())


def resolve_bootstrap(args: argparse.Namespace) -> str:
    """--bootstrap-server, else the cluster in --dir, else $MINIBROKER_BOOTSTRAP_SERVER, else the default."""
    if args.bootstrap_server and args.dir:
        raise CliError("give --bootstrap-server or --dir, not both", EXIT_USAGE)
    if args.bootstrap_server:
        return str(args.bootstrap_server)
    if args.dir:
        return LocalClusterState.load(Path(args.dir)).bootstrap
    return os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP


NO_KAFKA_LISTENER = "the cluster's brokers have no Kafka listener (listeners=...,PLAINTEXT://host:port)"


async def kafka_listeners_of(bootstrap: str) -> str:
    """The Kafka bootstrap list of the cluster behind `bootstrap` (msgpack listeners), from METADATA: each
    broker's listeners other than the msgpack one, comma-separated ("" when there are none)."""
    from client.cluster_client import ClusterClient
    from network.listeners import MSGPACK_LISTENER

    client = ClusterClient(bootstrap, request_timeout_s=10.0)
    try:
        await client.refresh_metadata([])
        return ",".join(
            address
            for _, b in sorted(client.brokers.items())
            for name, address in sorted(b.listeners.items())
            if name != MSGPACK_LISTENER
        )
    finally:
        await client.close()


def resolve_kafka_bootstrap(args: argparse.Namespace) -> str:
    """The brokers' Kafka listeners: from cluster.json with --dir, else from METADATA on the msgpack ones."""
    if getattr(args, "dir", None):
        state = LocalClusterState.load(Path(args.dir))
        if state.kafka_bootstrap:
            return state.kafka_bootstrap
    found = run_async(kafka_listeners_of(args.bootstrap_server or resolve_bootstrap(args)))
    if not found:
        raise CliError(NO_KAFKA_LISTENER, EXIT_UNREACHABLE)
    return found


def resolve_secret(args: argparse.Namespace) -> str | None:
    """The cluster secret a client command authenticates with: $MINIBROKER_CLUSTER_SECRET, else that of the
    cluster in --dir (written there by `cluster up --secret`), else none."""
    if secret := os.environ.get(SECRET_ENV):
        return secret
    if getattr(args, "dir", None):
        try:
            return LocalClusterState.load(Path(args.dir)).secret
        except ClusterError:
            return None
    return None


def connect(args: argparse.Namespace) -> ClusterClient:
    """A client of the cluster the command names (use as `async with`). What it raises when no broker
    answers (ClusterUnavailableError) `main` maps to exit 3."""
    from client.cluster_client import ClusterClient

    try:
        return ClusterClient(args.bootstrap_server, secret=getattr(args, "cluster_secret", None))
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def error_name(code: int) -> str | None:
    """An answer's error code by name; None for NONE."""
    return ErrorCode(code).name if code else None


def controller_answer(resp: Any, what: str) -> None:
    """Raise for a top-level error: the brokers cannot reach the controller (exit 3), or it refused (exit 4)."""
    if resp.error_code == ErrorCode.NOT_CONTROLLER:
        raise CliError(
            f"{what} failed: the brokers cannot reach the controller ({resp.error_message}); "
            "is it running? (`minibroker cluster status`)",
            EXIT_UNREACHABLE,
        )
    if resp.error_code != ErrorCode.NONE:
        raise CliError(f"{what} failed: {ErrorCode(resp.error_code).name}: {resp.error_message}", EXIT_CLUSTER_ERROR)


def check_result(error_code: int, error_message: str | None, what: str) -> None:
    """Raise (exit 4) for one result's error: `WHAT: NAME: MESSAGE`."""
    if error_code != ErrorCode.NONE:
        raise CliError(f"{what}: {ErrorCode(error_code).name}: {error_message}", EXIT_CLUSTER_ERROR)


def check_altered(resp: Any, what: str) -> None:
    controller_answer(resp, what)
    for r in resp.responses:
        check_result(r.error_code, r.error_message, f"{what} failed")


# -- options several commands take -----------------------------------------------------------------


def add_client_options(p: argparse.ArgumentParser) -> None:
    """--bootstrap-server and --dir: which cluster a client command talks to (resolved before it runs)."""
    p.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help=f"any broker of the cluster (default: ${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})",
    )
    p.add_argument("--dir", help="the local cluster in this directory (`cluster up --dir`): its brokers")
    p.set_defaults(client_command=True)


def add_json(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """--json: print one JSON document instead of the text (see `emit`)."""
    p.add_argument("--json", action="store_true", help=help)


def add_client_json(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """--json, then the client options: what every topic and configs command ends with."""
    add_json(p, help)
    add_client_options(p)


Option = dict[str, Any]  # add_argument's keywords


def add_options(p: argparse.ArgumentParser, table: dict[str, Option], *flags: str, **defaults: Any) -> None:
    """Add each of `flags` as `table` defines it (one definition for every subcommand that takes it), in
    the order given; `defaults` (by dest: rounds=4) set a subcommand's own default."""
    for flag in flags:
        spec = dict(table[flag])
        dest = flag.lstrip("-").replace("-", "_")
        if dest in defaults:
            spec["default"] = defaults[dest]
        p.add_argument(flag, **spec)
