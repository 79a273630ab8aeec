"""`minibroker broker` and `minibroker controller`: run one node; and `minibroker broker|controller
start|stop|kill|pause|resume`: act on one node of a local cluster."""

from __future__ import annotations

import argparse
import contextlib
import errno
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from cluster.cli.common import DEFAULT_DIR, CliError, Subcommands, emit, run_async
from cluster.exit_codes import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from cluster.local_cluster import (
    ClusterError,
    LocalClusterState,
    ProcessInfo,
    default_pid_file,
    node_action,
    remove_pid_file,
    write_pid_file,
)
from server_common.config import ConfigError


def _listen_error(exc: OSError, listeners: str) -> CliError:
    """A listener that cannot bind is a usage problem (a port in use, an address not on this host)."""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        reason = "address already in use (another process has this port; pick another)"
    return CliError(f"cannot listen on {listeners}: {reason}", EXIT_USAGE)


def _check_mqtt_url(config: dict[str, Any]) -> None:
    from metrics.mqtt import parse_mqtt_url

    url = config.get("metrics.mqtt.url")
    if url:
        try:
            parse_mqtt_url(url)
        except ValueError as exc:
            raise CliError(f"config error: metrics.mqtt.url: {exc}", EXIT_USAGE) from None


def _load(definition: Any, args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    from broker.config import load_config, parse_overrides

    try:
        overrides = parse_overrides(args.override or [])
        overrides.update({k: v for k, v in extra.items() if v is not None})
        return load_config(definition, Path(args.config) if args.config else None, overrides)
    except ConfigError as exc:
        raise CliError(f"config error: {exc}", EXIT_USAGE) from None


def cmd_broker(args: argparse.Namespace) -> int:
    from broker.broker_server import run_broker
    from broker.config import BROKER_CONFIG

    config = _load(
        BROKER_CONFIG,
        args,
        {
            "broker.id": args.broker_id,
            "listeners": args.listeners,
            "log.dirs": args.log_dirs,
            "controller.quorum.voters": args.controller,
        },
    )
    _check_mqtt_url(config)
    return _serve(args, "broker", config, run_broker)


@contextlib.contextmanager
def _pid_file(args: argparse.Namespace, role: str) -> Iterator[None]:
    """The node's pid file for as long as it runs: --pid-file, or the default of a cluster directory."""
    path = Path(args.pid_file) if args.pid_file else default_pid_file(role, Path(args.config) if args.config else None)
    if path is not None:
        write_pid_file(path)
    try:
        yield
    finally:
        if path is not None:
            remove_pid_file(path)


def cmd_controller(args: argparse.Namespace) -> int:
    from broker.config import CONTROLLER_CONFIG
    from controller.controller_server import run_controller

    config = _load(CONTROLLER_CONFIG, args, {"listeners": args.listeners, "metadata.log.dir": args.metadata_dir})
    return _serve(args, "controller", config, run_controller)


def _serve(
    args: argparse.Namespace,
    role: str,
    config: dict[str, Any],
    server: Callable[[dict[str, Any]], Coroutine[Any, Any, Any]],
) -> int:
    """Run one node until it stops, its pid file written meanwhile; a listener it cannot bind exits 2."""
    from broker.broker_server import configure_logging

    configure_logging(args.log_level)
    try:
        with _pid_file(args, role):
            run_async(server(config))
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise
        raise _listen_error(exc, config["listeners"]) from None
    return EXIT_OK


LIFECYCLE_ACTIONS = ("start", "stop", "kill", "pause", "resume")


# What `stop` does to each role: SIGTERM, and what the node makes of it.
STOP_MEANS = {
    "broker": "stop (SIGTERM: controlled shutdown)",
    "controller": "stop (SIGTERM: the active controller resigns with END_QUORUM_EPOCH first)",
}


def _node(state: LocalClusterState, role: str, node_id: int) -> ProcessInfo:
    return state.broker(node_id) if role == "broker" else state.controller(node_id)


def cmd_node_lifecycle(args: argparse.Namespace) -> int:
    """`minibroker broker|controller start|stop|kill|pause|resume --id N --dir D` on one node of a local
    cluster."""
    try:
        state = LocalClusterState.load(Path(args.dir))
        info = _node(state, args.role, args.id)
    except ClusterError as exc:
        raise CliError(str(exc), EXIT_USAGE if f"no {args.role}" in str(exc) else EXIT_UNREACHABLE) from None
    result = run_async(node_action(state, info, args.action))  # its ClusterError: main, exit 3
    emit(args, result, lambda: f"{args.role} {args.id}: {result['result']} (pid {result['pid']})")
    return EXIT_OK


def lifecycle_parser(role: str = "broker") -> argparse.ArgumentParser:
    what = "broker" if role == "broker" else "controller (a voter of the metadata quorum)"
    p = argparse.ArgumentParser(
        prog=f"minibroker {role}",
        description=f"Start, {STOP_MEANS[role]}, kill (SIGKILL), pause (SIGSTOP) or resume (SIGCONT) one "
        f"{what} of the local cluster in --dir. Its pid file stays current, so `cluster status` and "
        "`cluster down` see it.",
    )
    p.add_argument("action", choices=LIFECYCLE_ACTIONS)
    p.add_argument("--id", type=int, required=True, help=f"{role} id" if role == "broker" else "node id (3000, ...)")
    p.add_argument("--dir", default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_node_lifecycle, role=role)
    return p


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "broker",
        help="run one broker process",
        description="Run one broker: config file, then MINIBROKER_* env vars, then flags. "
        "`minibroker broker start|stop|kill|pause|resume --id N --dir D` acts on a broker of a local cluster.",
    )
    p.add_argument("--pid-file", help="write this process's pid here while it runs")
    p.add_argument("--config", help="properties file with Kafka-style keys (broker.id, listeners, log.dirs, ...)")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="set any config key (repeatable)")
    p.add_argument("--broker-id", type=int, help="broker.id")
    p.add_argument("--listeners", help="listeners, HOST:PORT")
    p.add_argument("--log-dirs", help="log.dirs")
    p.add_argument("--controller", help="controller.quorum.voters, HOST:PORT")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser(
        "controller",
        help="run one controller process",
        description="Run one controller (a voter of the metadata quorum): config file, then MINIBROKER_* env "
        "vars, then flags. `minibroker controller start|stop|kill|pause|resume --id N --dir D` acts on a "
        "controller of a local cluster.",
    )
    p.add_argument("--config", help="properties file (node.id, listeners, metadata.log.dir, ...)")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="set any config key (repeatable)")
    p.add_argument("--listeners", help="listeners, HOST:PORT")
    p.add_argument("--metadata-dir", help="metadata.log.dir")
    p.add_argument("--pid-file", help="write this process's pid here while it runs")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=cmd_controller)
