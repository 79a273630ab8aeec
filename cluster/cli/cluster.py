"""`minibroker cluster up|down|status`: a local cluster of processes."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

from cluster.cli.common import (
    BOOTSTRAP_ENV,
    DEFAULT_DIR,
    NO_KAFKA_LISTENER,
    CliError,
    Subcommands,
    add_json,
    emit,
    kafka_listeners_of,
    run_async,
)
from cluster.exit_codes import EXIT_CLUSTER_ERROR, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from cluster.local_cluster import (
    ACK_JOURNAL_FILE,
    KAFKA_BOOTSTRAP_FILE,
    BadAddressError,
    ClusterError,
    LocalClusterState,
    PortInUseError,
    auto_topic_defaults,
    check_overrides,
    start_cluster,
    stop_cluster,
)
from server_common.config import ConfigError


def cmd_cluster_up(args: argparse.Namespace) -> int:
    from broker.config import parse_overrides

    try:
        overrides = parse_overrides(args.override or [])
        check_overrides(overrides)
    except ConfigError as exc:
        raise CliError(f"config error: {exc}", EXIT_USAGE) from None
    if args.brokers < 1:
        raise CliError("--brokers must be at least 1", EXIT_USAGE)
    if args.controllers < 1:
        raise CliError("--controllers must be at least 1", EXIT_USAGE)
    cluster_dir = Path(args.dir)

    # Progress goes to stderr in both modes: with --json, stdout carries only the one document.
    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    stop = {"now": False}
    if not args.detach:
        # Ctrl-C (or SIGTERM) from now on stops the cluster once it is up: a signal in the moment between
        # its processes starting and the wait below would otherwise leave them running (or, where SIGINT
        # is ignored, as in a shell's background job, be lost and the wait never end).
        def on_signal(signum: int, frame: Any) -> None:
            stop["now"] = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
    try:
        state: LocalClusterState = run_async(
            start_cluster(
                cluster_dir,
                args.brokers,
                args.base_port,
                secret=args.secret,
                overrides=overrides,
                progress=say,
                base_address=args.base_address,
                num_controllers=args.controllers,
                ack_journal=args.ack_journal,
            )
        )
    except (PortInUseError, BadAddressError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except ClusterError as exc:
        raise CliError(str(exc), EXIT_CLUSTER_ERROR) from None
    info = {
        "dir": state.dir,
        "bootstrap_server": state.bootstrap,
        "kafka_bootstrap_servers": state.kafka_bootstrap,
        "controller_quorum_voters": state.quorum_voters,
        # what a topic a Kafka producer names gets when it is created for it (auto.create.topics.enable)
        "auto_created_topics": auto_topic_defaults(len(state.brokers), overrides),
        "metrics_dir": state.metrics_dir,
        "brokers": [
            {"id": b.node_id, "address": f"{b.host}:{b.port}", "pid": b.pid, "log": b.log} for b in state.brokers
        ],
    }
    emit(args, info, lambda: _describe_up(info, args.detach))
    sys.stdout.flush()
    if args.detach:
        return EXIT_OK
    while not stop["now"]:
        time.sleep(0.2)
    print("stopping the cluster ...", file=sys.stderr, flush=True)
    result = stop_cluster(state)
    print(", ".join(f"{k}: {v}" for k, v in result.items()), file=sys.stderr)
    return EXIT_OK


def _describe_up(info: dict[str, Any], detached: bool) -> str:
    # Every hint names this cluster explicitly, so it works as printed whatever the ports and the dir.
    d = shlex.quote(info["dir"])
    lines = [
        f"cluster running in {info['dir']}",
        f"  controllers       {info['controller_quorum_voters']}  (controller.quorum.voters)",
        *[f"  broker {b['id']:<10} {b['address']}  pid {b['pid']}  log {b['log']}" for b in info["brokers"]],
        f"  metrics           {info['metrics_dir']}",
        f"  bootstrap server  {info['bootstrap_server']}  (also in {os.path.join(info['dir'], 'bootstrap.servers')})",
        *(_describe_kafka(info) if info.get("kafka_bootstrap_servers") else []),
        "",
        f"try:  minibroker topic create demo --partitions 3 --replication-factor 3 --dir {d}",
        f"      minibroker cluster status --dir {d}",
        *(
            [f"      kcat -b $(cat {shlex.quote(os.path.join(info['dir'], KAFKA_BOOTSTRAP_FILE))}) -L"]
            if info.get("kafka_bootstrap_servers")
            else []
        ),
        f"  or: export MINIBROKER_BOOTSTRAP_SERVER={info['bootstrap_server']}  (then no --dir is needed)",
    ]
    lines.append(f"stop with: minibroker cluster down --dir {d}" if detached else "Ctrl-C stops every process cleanly.")
    return "\n".join(lines)


def _describe_kafka(info: dict[str, Any]) -> list[str]:
    kafka_file = os.path.join(info["dir"], KAFKA_BOOTSTRAP_FILE)
    lines = [
        f"  Kafka clients     {info['kafka_bootstrap_servers']}  (bootstrap.servers, also in {kafka_file};",
        "                    docs/kafka-protocol.md)",
    ]
    auto = info.get("auto_created_topics")
    if auto:
        lines.append(
            f"                    a topic a Kafka producer names is created with {auto['num.partitions']} partitions, "
            f"replication factor {auto['default.replication.factor']}"
        )
    return lines


def cmd_cluster_down(args: argparse.Namespace) -> int:
    result = stop_cluster(LocalClusterState.load(Path(args.dir)))
    emit(args, result, lambda: "\n".join(f"{k}: {v}" for k, v in result.items()))
    return EXIT_OK


def cmd_cluster_status(args: argparse.Namespace) -> int:
    from client.cluster_client import parse_bootstrap
    from cluster.status import collect_remote_status, collect_status, render_status

    env = os.environ.get(BOOTSTRAP_ENV)
    if args.bootstrap_server and args.dir:
        raise CliError("give --bootstrap-server or --dir, not both", EXIT_USAGE)
    remote = args.bootstrap_server or (env if args.dir is None else None)
    if remote:
        try:
            parse_bootstrap(remote)
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        args.bootstrap_server = remote  # what main names when it cannot be reached
    if args.kafka_bootstrap:
        return _print_kafka_bootstrap(args, remote)
    if remote:
        status = run_async(collect_remote_status(remote))
        emit(args, status, lambda: render_status(status))
        return EXIT_OK
    status = run_async(collect_status(LocalClusterState.load(Path(args.dir or DEFAULT_DIR))))
    emit(args, status, lambda: render_status(status))
    reachable = status["controller"]["alive"] or any(b["alive"] and b.get("registered") for b in status["brokers"])
    return EXIT_OK if reachable or status["partitions"] else EXIT_UNREACHABLE


def _print_kafka_bootstrap(args: argparse.Namespace, remote: str | None) -> int:
    """`cluster status --kafka-bootstrap`: the Kafka listeners, one line, as D/kafka.bootstrap.servers holds
    them (from cluster.json for a local cluster, from METADATA's listeners through --bootstrap-server)."""
    if remote:
        servers = run_async(kafka_listeners_of(remote))
    else:
        servers = LocalClusterState.load(Path(args.dir or DEFAULT_DIR)).kafka_bootstrap
    if not servers:
        raise CliError(NO_KAFKA_LISTENER, EXIT_UNREACHABLE)
    emit(args, {"kafka_bootstrap_servers": servers}, lambda: servers)
    return EXIT_OK


def register(sub: Subcommands) -> None:
    cl = sub.add_parser(
        "cluster", help="start, stop and inspect a local cluster", description="A local cluster of processes."
    )
    csub = cl.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")
    p = csub.add_parser(
        "up",
        help="start a quorum of controllers and N brokers",
        description="Start a quorum of controllers (the voters of the metadata log, node ids 3000, 3001, ...) and N "
        "brokers as local processes; stays in the foreground unless --detach. Each broker gets max.connections=1000 "
        "and connections.max.idle.ms=300000 (a laptop's limits, not Kafka's unlimited and 600000); --override "
        "changes them.",
    )
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument(
        "--controllers",
        type=int,
        default=3,
        help="controllers in the quorum (default 3: one may fail; 1 is a quorum of one, with no failover)",
    )
    p.add_argument("--dir", default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})")
    p.add_argument("--base-port", type=int, default=9092, help="first broker's port; every controller uses base+100")
    p.add_argument(
        "--base-address",
        default="127.0.0.10",
        help="controller 3000's loopback address; controller 3000+i gets base-i, broker N base+N (default "
        "127.0.0.10, all in 127.0.0.0/8)",
    )
    p.add_argument("--secret", help="cluster.secret for controller-only requests")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="broker or controller config (repeatable)")
    p.add_argument("--detach", action="store_true", help="return once the cluster is up")
    p.add_argument(
        "--ack-journal",
        action="store_true",
        help="each broker journals every batch it acknowledges (produce.ack.journal, broker-N/"
        f"{ACK_JOURNAL_FILE}): a `chaos ... --dir` run then tells what the cluster lost from what a client "
        "only claimed (a few µs of CPU per acknowledged batch; off by default)",
    )
    add_json(p)
    p.set_defaults(func=cmd_cluster_up)
    p = csub.add_parser(
        "down", help="stop a local cluster", description="Stop every process of the local cluster in --dir."
    )
    p.add_argument("--dir", default=DEFAULT_DIR)
    add_json(p)
    p.set_defaults(func=cmd_cluster_down)
    p = csub.add_parser(
        "status",
        help="controller quorum, brokers, partitions, leaders, epochs, ISR, HW/LEO and lag",
        description="Show the local cluster in --dir (with pids), or any cluster through --bootstrap-server "
        f"(or ${BOOTSTRAP_ENV}): the controller quorum (active controller, epoch, each voter's lag), brokers, "
        "topics, partitions, leaders, ISR, HW/LEO and lag. The partitions come from a broker's metadata, so "
        "they show when no controller is reachable, and the status says so. Exit 3 when nothing answers.",
    )
    p.add_argument("--dir", help=f"local cluster directory (default {DEFAULT_DIR})")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="describe the cluster behind this broker")
    p.add_argument(
        "--kafka-bootstrap",
        action="store_true",
        help="print only the brokers' Kafka listeners, comma-separated: bootstrap.servers for Kafka clients and "
        "kcat -b (what D/kafka.bootstrap.servers holds)",
    )
    add_json(p)
    p.set_defaults(func=cmd_cluster_status)
