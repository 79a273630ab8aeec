"""`minibroker`: one entry point for running processes, local clusters, topics, data, chaos and metrics.

Exit codes (documented in README.md):
  0  success
  1  the command ran but its check failed (chaos verdict invalid, consume found fewer records than asked)
  2  bad usage: unknown flag, bad value, bad config key
  3  the cluster is not reachable / not running
  4  the cluster answered with an error (unknown topic, topic exists, not enough brokers, ...)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_CLUSTER_ERROR = 0, 1, 2, 3, 4
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_DIR = "./minibroker-cluster"


class CliError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _run(coro: Any) -> Any:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(coro)


def _emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=None, default=str))
    else:
        print(text())


# -- process commands -----------------------------------------------------------------------------


def _load(definition: Any, args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    from broker.config import ConfigError, load_config, parse_overrides

    try:
        overrides = parse_overrides(args.override or [])
        overrides.update({k: v for k, v in extra.items() if v is not None})
        return load_config(definition, Path(args.config) if args.config else None, overrides)
    except ConfigError as exc:
        raise CliError(f"config error: {exc}", EXIT_USAGE) from None


def cmd_broker(args: argparse.Namespace) -> int:
    from broker.broker_server import configure_logging, run_broker
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
    configure_logging(args.log_level)
    _run(run_broker(config))
    return EXIT_OK


def cmd_controller(args: argparse.Namespace) -> int:
    from broker.broker_server import configure_logging
    from broker.config import CONTROLLER_CONFIG
    from cluster.controller_server import run_controller

    config = _load(CONTROLLER_CONFIG, args, {"listeners": args.listeners, "metadata.log.dir": args.metadata_dir})
    configure_logging(args.log_level)
    _run(run_controller(config))
    return EXIT_OK


# -- cluster --------------------------------------------------------------------------------------


def cmd_cluster_up(args: argparse.Namespace) -> int:
    from broker.config import ConfigError, parse_overrides
    from cluster.local_cluster import ClusterError, LocalClusterState, start_cluster, stop_cluster

    try:
        overrides = parse_overrides(args.override or [])
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if args.brokers < 1:
        raise CliError("--brokers must be at least 1", EXIT_USAGE)
    cluster_dir = Path(args.dir)
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if not args.json else None
    try:
        state: LocalClusterState = _run(
            start_cluster(
                cluster_dir, args.brokers, args.base_port, secret=args.secret, overrides=overrides, progress=say
            )
        )
    except ClusterError as exc:
        raise CliError(str(exc), EXIT_CLUSTER_ERROR) from None
    info = {
        "dir": state.dir,
        "bootstrap_server": state.bootstrap,
        "controller": f"{state.controller.host}:{state.controller.port}",
        "metrics_dir": state.metrics_dir,
        "brokers": [
            {"id": b.node_id, "address": f"{b.host}:{b.port}", "pid": b.pid, "log": b.log} for b in state.brokers
        ],
    }
    _emit(args, info, lambda: _describe_up(info, args.detach))
    sys.stdout.flush()
    if args.detach:
        return EXIT_OK
    import signal

    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop["now"]:
        time.sleep(0.2)
    print("stopping the cluster ...", file=sys.stderr, flush=True)
    result = stop_cluster(state)
    print(", ".join(f"{k}: {v}" for k, v in result.items()), file=sys.stderr)
    return EXIT_OK


def _describe_up(info: dict[str, Any], detached: bool) -> str:
    lines = [
        f"cluster running in {info['dir']}",
        f"  controller        {info['controller']}",
        *[f"  broker {b['id']:<10} {b['address']}  pid {b['pid']}  log {b['log']}" for b in info["brokers"]],
        f"  metrics           {info['metrics_dir']}",
        f"  bootstrap server  {info['bootstrap_server']}",
        "",
        "try:  minibroker topic create demo --partitions 3 --replication-factor 3",
        f"      minibroker cluster status --dir {info['dir']}",
    ]
    lines.append(
        "stop with: minibroker cluster down --dir " + info["dir"] if detached else "Ctrl-C stops every process cleanly."
    )
    return "\n".join(lines)


def cmd_cluster_down(args: argparse.Namespace) -> int:
    from cluster.local_cluster import ClusterError, LocalClusterState, stop_cluster

    try:
        state = LocalClusterState.load(Path(args.dir))
    except ClusterError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    result = stop_cluster(state)
    _emit(args, result, lambda: "\n".join(f"{k}: {v}" for k, v in result.items()))
    return EXIT_OK


def cmd_cluster_status(args: argparse.Namespace) -> int:
    from cluster.local_cluster import ClusterError, LocalClusterState
    from cluster.status import collect_status, render_status

    try:
        state = LocalClusterState.load(Path(args.dir))
    except ClusterError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    status = _run(collect_status(state))
    _emit(args, status, lambda: render_status(status))
    return EXIT_OK if status["controller"]["alive"] else EXIT_UNREACHABLE


# -- topics, produce, consume ---------------------------------------------------------------------


def _client(args: argparse.Namespace) -> Any:
    from client.cluster_client import ClusterClient

    try:
        return ClusterClient(args.bootstrap_server)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


async def _metadata(args: argparse.Namespace, topics: list[str] | None) -> Any:
    from client.cluster_client import ClusterUnavailableError

    async with _client(args) as client:
        try:
            return await client.refresh_metadata(topics)
        except ClusterUnavailableError as exc:
            raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None


def cmd_topic_create(args: argparse.Namespace) -> int:
    from client.cluster_client import ClusterUnavailableError
    from protocol.errors import ErrorCode

    configs = {}
    for item in args.config or []:
        if "=" not in item:
            raise CliError(f"--config expects key=value, got {item!r}", EXIT_USAGE)
        k, v = item.split("=", 1)
        configs[k] = v

    async def go() -> Any:
        async with _client(args) as client:
            try:
                resp = await client.create_topic(args.topic, args.partitions, args.replication_factor, configs)
            except ClusterUnavailableError as exc:
                raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None
            if resp.error_code != ErrorCode.NONE:
                raise CliError(f"create failed: {resp.error_message}", EXIT_CLUSTER_ERROR)
            result = resp.topics[0]
            if result.error_code != ErrorCode.NONE:
                raise CliError(
                    f"create failed: {ErrorCode(result.error_code).name}: {result.error_message}", EXIT_CLUSTER_ERROR
                )
            await client.wait_for_leaders(args.topic, timeout_s=30.0)
            return result

    result = _run(go())
    data = {"topic": result.name, "partitions": result.num_partitions, "replication_factor": result.replication_factor}
    _emit(
        args,
        data,
        lambda: (
            f"created topic {result.name} ({result.num_partitions} partitions, "
            f"replication factor {result.replication_factor})"
        ),
    )
    return EXIT_OK


def cmd_topic_list(args: argparse.Namespace) -> int:
    resp = _run(_metadata(args, None))
    names = [t.topic for t in resp.topics]
    _emit(args, names, lambda: "\n".join(names) if names else "(no topics)")
    return EXIT_OK


def cmd_topic_describe(args: argparse.Namespace) -> int:
    from protocol.errors import ErrorCode

    resp = _run(_metadata(args, [args.topic] if args.topic else None))
    out = []
    for t in resp.topics:
        if t.error_code != ErrorCode.NONE:
            raise CliError(f"{t.error_message or ErrorCode(t.error_code).name}", EXIT_CLUSTER_ERROR)
        out.append(
            {
                "topic": t.topic,
                "partitions": [
                    {
                        "partition": p.partition,
                        "leader": p.leader_id,
                        "leader_epoch": p.leader_epoch,
                        "replicas": p.replicas,
                        "isr": p.isr,
                    }
                    for p in t.partitions
                ],
            }
        )

    def text() -> str:
        lines = []
        for t in out:
            lines.append(f"Topic: {t['topic']}\tPartitionCount: {len(t['partitions'])}")
            for p in t["partitions"]:
                lines.append(
                    f"\tPartition: {p['partition']}\tLeader: {p['leader']}\tEpoch: {p['leader_epoch']}"
                    f"\tReplicas: {','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}"
                )
        return "\n".join(lines)

    _emit(args, out, text)
    return EXIT_OK


def cmd_produce(args: argparse.Namespace) -> int:
    from client.producer import produce_command

    values: Any
    if args.count is not None:
        if args.count < 0 or args.size < 0:
            raise CliError("--count and --size must be >= 0", EXIT_USAGE)
        values = None
    else:
        values = (line.rstrip("\n").encode() for line in sys.stdin)
    result = _run(produce_command(args, values))
    _emit(args, result, lambda: f"produced {result['acked']} records to {args.topic} ({result['failed']} failed)")
    return EXIT_OK if result["failed"] == 0 else EXIT_CLUSTER_ERROR


def cmd_consume(args: argparse.Namespace) -> int:
    from client.consumer import consume_command

    result = _run(consume_command(args))
    if args.json:
        print(json.dumps({"records": result["count"], "partitions": result["partitions"]}))
    print(f"Processed a total of {result['count']} messages", file=sys.stderr)
    if args.max_messages is not None and result["count"] < args.max_messages:
        return EXIT_CHECK_FAILED
    return EXIT_OK


# -- chaos, metrics -------------------------------------------------------------------------------


def cmd_chaos_leader_kill(args: argparse.Namespace) -> int:
    from cluster.chaos import run_leader_kill_command

    return int(run_leader_kill_command(args))


# -- parser ---------------------------------------------------------------------------------------


def _add_client(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-server",
        default=os.environ.get("MINIBROKER_BOOTSTRAP_SERVER", DEFAULT_BOOTSTRAP),
        help=f"HOST:PORT of any broker (default {DEFAULT_BOOTSTRAP}, the first broker of a default `cluster up`)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minibroker",
        description="A runnable model of Kafka-style replication: brokers, a controller, replica fetchers, "
        "leader-kill chaos and a Spark lag dashboard.",
        epilog="exit codes: 0 ok, 1 check failed, 2 bad usage, 3 cluster unreachable, 4 cluster error",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "broker",
        help="run one broker process",
        description="Run one broker: config file, then MINIBROKER_* env vars, then flags.",
    )
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
        help="run the controller process",
        description="Run the controller: config file, then MINIBROKER_* env vars, then flags.",
    )
    p.add_argument("--config", help="properties file (node.id, listeners, metadata.log.dir, ...)")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="set any config key (repeatable)")
    p.add_argument("--listeners", help="listeners, HOST:PORT")
    p.add_argument("--metadata-dir", help="metadata.log.dir")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=cmd_controller)

    cl = sub.add_parser(
        "cluster", help="start, stop and inspect a local cluster", description="A local cluster of processes."
    )
    csub = cl.add_subparsers(dest="cluster_command", required=True, metavar="SUBCOMMAND")
    p = csub.add_parser(
        "up",
        help="start a controller and N brokers",
        description="Start a controller and N brokers as local processes; stays in the foreground unless --detach.",
    )
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--dir", default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})")
    p.add_argument("--base-port", type=int, default=9092, help="first broker's port; the controller uses base+100")
    p.add_argument("--secret", help="cluster.secret for controller-only requests")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="broker or controller config (repeatable)")
    p.add_argument("--detach", action="store_true", help="return once the cluster is up")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cluster_up)
    p = csub.add_parser(
        "down", help="stop a local cluster", description="Stop every process of the local cluster in --dir."
    )
    p.add_argument("--dir", default=DEFAULT_DIR)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cluster_down)
    p = csub.add_parser(
        "status",
        help="brokers, partitions, leaders, epochs, ISR, HW/LEO and lag",
        description="Show the local cluster in --dir.",
    )
    p.add_argument("--dir", default=DEFAULT_DIR)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cluster_status)

    tp = sub.add_parser("topic", help="create, list and describe topics", description="Topic administration.")
    tsub = tp.add_subparsers(dest="topic_command", required=True, metavar="SUBCOMMAND")
    p = tsub.add_parser(
        "create", help="create a topic", description="Create a topic and wait until every partition has a leader."
    )
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, default=-1, help="default: the controller's num.partitions")
    p.add_argument(
        "--replication-factor", type=int, default=-1, help="default: the controller's default.replication.factor"
    )
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config, e.g. min.insync.replicas=2")
    p.add_argument("--json", action="store_true")
    _add_client(p)
    p.set_defaults(func=cmd_topic_create)
    p = tsub.add_parser("list", help="list topics", description="List topics.")
    p.add_argument("--json", action="store_true")
    _add_client(p)
    p.set_defaults(func=cmd_topic_list)
    p = tsub.add_parser("describe", help="leaders, epochs, replicas, ISR", description="Describe one topic or all.")
    p.add_argument("topic", nargs="?")
    p.add_argument("--json", action="store_true")
    _add_client(p)
    p.set_defaults(func=cmd_topic_describe)

    p = sub.add_parser(
        "produce", help="write records", description="Write lines from stdin, or --count generated records, to a topic."
    )
    p.add_argument("topic")
    p.add_argument("--count", type=int, help="generate this many records instead of reading stdin")
    p.add_argument("--size", type=int, default=100, help="bytes per generated record")
    p.add_argument("--acks", choices=["0", "1", "all", "-1"], default="all")
    p.add_argument("--partition", type=int, help="write to this partition only (default: round robin)")
    p.add_argument("--batch-size", type=int, default=100, help="records per batch")
    p.add_argument("--json", action="store_true")
    _add_client(p)
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser(
        "consume", help="read records", description="Read records and print their values, like kafka-console-consumer."
    )
    p.add_argument("topic")
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--partition", type=int)
    p.add_argument("--max-messages", type=int)
    p.add_argument("--timeout-ms", type=int, default=10000, help="exit after this long without a new record")
    p.add_argument("--print-offsets", action="store_true", help="print partition and offset before each value")
    p.add_argument("--json", action="store_true", help="print a JSON summary line at the end")
    _add_client(p)
    p.set_defaults(func=cmd_consume)

    ch = sub.add_parser("chaos", help="fault injection with a verdict", description="Chaos experiments.")
    chsub = ch.add_subparsers(dest="chaos_command", required=True, metavar="EXPERIMENT")
    p = chsub.add_parser(
        "leader-kill",
        help="SIGKILL leaders under acks=all load, then check every acked write",
        description="Repeatedly SIGKILL the broker leading the most partitions while producers write with "
        "acks=all, then check for lost writes, duplicates, inconsistent offsets, divergent replicas and "
        "offsets going backwards. Exit 0 only when valid.",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--dir", help="use the running local cluster in this dir (default: a fresh 3-broker cluster in a temp dir)"
    )
    p.add_argument("--interval-ms", type=int, default=3000, help="time between kills")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--restart", action="store_true", help="restart each killed broker before the next kill")
    p.add_argument("--json", metavar="FILE", help="write the JSON report here ('-' for stdout)")
    p.add_argument("--topic", default="chaos")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--metrics-dir", help="fresh cluster only: write broker metrics here")
    p.set_defaults(func=cmd_chaos_leader_kill)

    mt = sub.add_parser("metrics", help="metrics tools", description="Metrics tools.")
    msub = mt.add_subparsers(dest="metrics_command", required=True, metavar="SUBCOMMAND")
    # Listed for `--help`; main() hands their arguments to their own parsers.
    msub.add_parser("sink", help="MQTT → JSON-lines files (minibroker metrics sink --help)")
    sub.add_parser("dashboard", help="Spark lag tables and HTML dashboard (minibroker dashboard --help)")
    return parser


# Commands whose flags belong to another module's own parser: everything after the command goes there.
DELEGATED: dict[tuple[str, ...], Callable[[list[str]], int]] = {
    ("metrics", "sink"): lambda rest: __import__("metrics.sink", fromlist=["main"]).main(rest),
    ("dashboard",): lambda rest: __import__("metrics.spark_app", fromlist=["main"]).main(rest),
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from cluster.allocator import tune_allocator

    tune_allocator()  # brokers and clients move megabyte buffers: see cluster/allocator.py
    for prefix, run in DELEGATED.items():
        if tuple(argv[: len(prefix)]) == prefix:
            return int(run(argv[len(prefix) :]))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"minibroker: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # Run through the imported module, not this __main__ copy, so exception classes are shared.
    from cluster.cli import main as _main

    sys.exit(_main())
