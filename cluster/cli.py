"""`minibroker`: one entry point for running processes, local clusters, topics, data, chaos and metrics.

Exit codes (documented in README.md):
  0  success
  1  the command ran but its check failed (chaos verdict invalid; consume --fail-on-timeout found fewer
     records than --max-messages)
  2  bad usage: unknown flag, bad value, bad config key, a port already in use, a malformed input line
  3  the cluster is not reachable / not running
  4  the cluster answered with an error (unknown topic, topic exists, not enough brokers, ...)
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from client.errors import ClientCommandError, ClusterUnreachableError
from cluster.event_loop import run_on_uvloop

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_CLUSTER_ERROR = 0, 1, 2, 3, 4
# The compose cluster's first broker, then the first broker of a default `cluster up` (127.0.0.11).
DEFAULT_BOOTSTRAP = "127.0.0.1:9092,127.0.0.11:9092"
BOOTSTRAP_ENV = "MINIBROKER_BOOTSTRAP_SERVER"
SECRET_ENV = "MINIBROKER_CLUSTER_SECRET"  # what client commands authenticate with, when the cluster has a secret
DEFAULT_DIR = "./minibroker-cluster"


class CliError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


_run = run_on_uvloop


def _emit(args: argparse.Namespace, data: Any, text: Callable[[], str]) -> None:
    """With --json, exactly one JSON document on stdout; otherwise the human text."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=None, default=str))
    else:
        print(text())


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


# -- process commands -----------------------------------------------------------------------------


def _load(definition: Any, args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    from broker.config import load_config, parse_overrides
    from server_common.config import ConfigError

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
    _check_mqtt_url(config)
    configure_logging(args.log_level)
    try:
        with _pid_file(args, "broker"):
            _run(run_broker(config))
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise
        raise _listen_error(exc, config["listeners"]) from None
    return EXIT_OK


@contextlib.contextmanager
def _pid_file(args: argparse.Namespace, role: str) -> Iterator[None]:
    """The node's pid file for as long as it runs: --pid-file, or the default of a cluster directory."""
    from cluster.local_cluster import default_pid_file, remove_pid_file, write_pid_file

    path = Path(args.pid_file) if args.pid_file else default_pid_file(role, Path(args.config) if args.config else None)
    if path is not None:
        write_pid_file(path)
    try:
        yield
    finally:
        if path is not None:
            remove_pid_file(path)


def cmd_controller(args: argparse.Namespace) -> int:
    from broker.broker_server import configure_logging
    from broker.config import CONTROLLER_CONFIG
    from controller.controller_server import run_controller

    config = _load(CONTROLLER_CONFIG, args, {"listeners": args.listeners, "metadata.log.dir": args.metadata_dir})
    configure_logging(args.log_level)
    try:
        with _pid_file(args, "controller"):
            _run(run_controller(config))
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            raise
        raise _listen_error(exc, config["listeners"]) from None
    return EXIT_OK


LIFECYCLE_ACTIONS = ("start", "stop", "kill", "pause", "resume")


def cmd_broker_lifecycle(args: argparse.Namespace) -> int:
    """`minibroker broker start|stop|kill|pause|resume --id N --dir D` on one broker of a local cluster."""
    from cluster.local_cluster import ClusterError, LocalClusterState, broker_action

    try:
        state = LocalClusterState.load(Path(args.dir))
        state.broker(args.id)
    except ClusterError as exc:
        raise CliError(str(exc), EXIT_USAGE if "no broker" in str(exc) else EXIT_UNREACHABLE) from None
    try:
        result = _run(broker_action(state, args.id, args.action))
    except ClusterError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    _emit(args, result, lambda: f"broker {args.id}: {result['result']} (pid {result['pid']})")
    return EXIT_OK


def _lifecycle_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="minibroker broker",
        description="Start, stop (SIGTERM: controlled shutdown), kill (SIGKILL), pause (SIGSTOP) or resume "
        "(SIGCONT) one broker of the local cluster in --dir. Its pid file stays current, so `cluster status` "
        "and `cluster down` see it.",
    )
    p.add_argument("action", choices=LIFECYCLE_ACTIONS)
    p.add_argument("--id", type=int, required=True, help="broker id")
    p.add_argument("--dir", default=DEFAULT_DIR, help=f"cluster directory (default {DEFAULT_DIR})")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_broker_lifecycle)
    return p


# -- cluster --------------------------------------------------------------------------------------


def cmd_cluster_up(args: argparse.Namespace) -> int:
    from broker.config import parse_overrides
    from cluster.local_cluster import (
        BadAddressError,
        ClusterError,
        LocalClusterState,
        PortInUseError,
        check_overrides,
        start_cluster,
        stop_cluster,
    )
    from server_common.config import ConfigError

    try:
        overrides = parse_overrides(args.override or [])
        check_overrides(overrides)
    except ConfigError as exc:
        raise CliError(f"config error: {exc}", EXIT_USAGE) from None
    if args.brokers < 1:
        raise CliError("--brokers must be at least 1", EXIT_USAGE)
    cluster_dir = Path(args.dir)

    # Progress goes to stderr in both modes: with --json, stdout carries only the one document.
    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        state: LocalClusterState = _run(
            start_cluster(
                cluster_dir,
                args.brokers,
                args.base_port,
                secret=args.secret,
                overrides=overrides,
                progress=say,
                base_address=args.base_address,
            )
        )
    except (PortInUseError, BadAddressError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
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
    # Every hint names this cluster explicitly, so it works as printed whatever the ports and the dir.
    d = shlex.quote(info["dir"])
    lines = [
        f"cluster running in {info['dir']}",
        f"  controller        {info['controller']}",
        *[f"  broker {b['id']:<10} {b['address']}  pid {b['pid']}  log {b['log']}" for b in info["brokers"]],
        f"  metrics           {info['metrics_dir']}",
        f"  bootstrap server  {info['bootstrap_server']}  (also in {os.path.join(info['dir'], 'bootstrap.servers')})",
        "",
        f"try:  minibroker topic create demo --partitions 3 --replication-factor 3 --dir {d}",
        f"      minibroker cluster status --dir {d}",
        f"  or: export MINIBROKER_BOOTSTRAP_SERVER={info['bootstrap_server']}  (then no --dir is needed)",
    ]
    lines.append(f"stop with: minibroker cluster down --dir {d}" if detached else "Ctrl-C stops every process cleanly.")
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
    from client.cluster_client import ClusterUnavailableError, parse_bootstrap
    from cluster.local_cluster import ClusterError, LocalClusterState
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
        try:
            status = _run(collect_remote_status(remote))
        except ClusterUnavailableError as exc:
            raise CliError(f"cluster not reachable at {remote}: {exc}", EXIT_UNREACHABLE) from None
        _emit(args, status, lambda: render_status(status))
        return EXIT_OK
    try:
        state = LocalClusterState.load(Path(args.dir or DEFAULT_DIR))
    except ClusterError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    status = _run(collect_status(state))
    _emit(args, status, lambda: render_status(status))
    return EXIT_OK if status["controller"]["alive"] else EXIT_UNREACHABLE


# -- topics, produce, consume ---------------------------------------------------------------------


def resolve_bootstrap(args: argparse.Namespace) -> str:
    """--bootstrap-server, else the cluster in --dir, else $MINIBROKER_BOOTSTRAP_SERVER, else the default."""
    from cluster.local_cluster import ClusterError, LocalClusterState

    if args.bootstrap_server and args.dir:
        raise CliError("give --bootstrap-server or --dir, not both", EXIT_USAGE)
    if args.bootstrap_server:
        return str(args.bootstrap_server)
    if args.dir:
        try:
            return LocalClusterState.load(Path(args.dir)).bootstrap
        except ClusterError as exc:
            raise CliError(str(exc), EXIT_UNREACHABLE) from None
    return os.environ.get(BOOTSTRAP_ENV) or DEFAULT_BOOTSTRAP


def resolve_secret(args: argparse.Namespace) -> str | None:
    """The cluster secret a client command authenticates with: $MINIBROKER_CLUSTER_SECRET, else that of the
    cluster in --dir (written there by `cluster up --secret`), else none."""
    from cluster.local_cluster import ClusterError, LocalClusterState

    if secret := os.environ.get(SECRET_ENV):
        return secret
    if getattr(args, "dir", None):
        try:
            return LocalClusterState.load(Path(args.dir)).secret
        except ClusterError:
            return None
    return None


def _client(args: argparse.Namespace) -> Any:
    from client.cluster_client import ClusterClient

    try:
        return ClusterClient(args.bootstrap_server, secret=getattr(args, "cluster_secret", None))
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


async def _metadata(args: argparse.Namespace, topics: list[str] | None) -> Any:
    from client.cluster_client import ClusterUnavailableError

    async with _client(args) as client:
        try:
            return await client.refresh_metadata(topics)
        except ClusterUnavailableError as exc:
            raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None


async def _reassignments(args: argparse.Namespace, topics: list[str] | None) -> list[Any]:
    from client.cluster_client import ClusterUnavailableError

    async with _client(args) as client:
        try:
            return list((await client.list_partition_reassignments(topics)).reassignments)
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
    from server_common.log_config import topic_config_error

    if (problem := topic_config_error(configs)) is not None:
        # The controller refuses it too (INVALID_CONFIG); saying so here needs no cluster.
        raise CliError(problem, EXIT_USAGE)

    async def go() -> Any:
        async with _client(args) as client:
            try:
                resp = await client.create_topic(args.topic, args.partitions, args.replication_factor, configs)
            except ClusterUnavailableError as exc:
                raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None
            # A broker that answered but could not reach the controller: nothing in the cluster can create.
            _controller_answer(resp, "create")
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
            f"created topic {result.name} ({result.num_partitions} "
            f"partition{'' if result.num_partitions == 1 else 's'}, "
            f"replication factor {result.replication_factor})"
        ),
    )
    return EXIT_OK


def cmd_topic_delete(args: argparse.Namespace) -> int:
    from client.cluster_client import ClusterUnavailableError
    from protocol.errors import ErrorCode

    async def go() -> Any:
        async with _client(args) as client:
            try:
                resp = await client.delete_topics(args.topics)
            except ClusterUnavailableError as exc:
                raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None
            _controller_answer(resp, "delete")
            return resp

    resp = _run(go())
    results = [
        {"topic": r.name, "error": ErrorCode(r.error_code).name if r.error_code else None, "message": r.error_message}
        for r in resp.responses
    ]
    if args.json:
        _emit(args, results, str)
    else:
        for r in results:
            if r["error"] is None:
                print(f"deleted topic {r['topic']}")
            else:
                print(f"minibroker: error: cannot delete {r['topic']}: {r['error']}: {r['message']}", file=sys.stderr)
    return EXIT_OK if all(r["error"] is None for r in results) else EXIT_CLUSTER_ERROR


def _reassignment_plan(args: argparse.Namespace) -> list[tuple[Any, list[int] | None]]:
    """(partition, target replicas or None to cancel) from the flags or a kafka-reassign-partitions plan."""
    from protocol.messages import TopicPartition

    if args.plan is not None:
        if args.topic or args.partition is not None or args.replicas:
            raise CliError("--plan takes no TOPIC, --partition or --replicas", EXIT_USAGE)
        try:
            plan = json.loads(Path(args.plan).read_text())
            entries = plan["partitions"]
            return [
                (
                    TopicPartition(str(e["topic"]), int(e["partition"])),
                    None if args.cancel else [int(r) for r in e["replicas"]],
                )
                for e in entries
            ]
        except OSError as exc:
            raise CliError(f"cannot read {args.plan}: {exc.strerror or exc}", EXIT_USAGE) from None
        except (ValueError, KeyError, TypeError) as exc:
            raise CliError(
                f"{args.plan} is not a reassignment plan ({exc!r}); expected "
                '{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]}',
                EXIT_USAGE,
            ) from None
    if not args.topic or args.partition is None:
        raise CliError("give TOPIC --partition P --replicas B1,B2,... (or --plan FILE)", EXIT_USAGE)
    if args.cancel:
        return [(TopicPartition(args.topic, args.partition), None)]
    if not args.replicas:
        raise CliError("--replicas B1,B2,... is required (or --cancel)", EXIT_USAGE)
    try:
        replicas = [int(r) for r in args.replicas.split(",")]
    except ValueError:
        raise CliError(f"--replicas expects broker ids like 4,2,1, got {args.replicas!r}", EXIT_USAGE) from None
    return [(TopicPartition(args.topic, args.partition), replicas)]


THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


async def _set_reassignment_throttle(client: Any, targets: list[tuple[Any, list[int] | None]], rate: int) -> None:
    """What kafka-reassign-partitions --throttle sets: the cluster-wide leader and follower throttled rates,
    and per topic the replicas they apply to: on the leader side the partition's current replicas (any of
    them may be the one the new replicas fetch from), on the follower side the replicas being added."""

    topics = sorted({tp.topic for tp, _ in targets})
    meta = await client.refresh_metadata(topics)
    current = {t.topic: dict(t.configs) for t in meta.topics}
    leader_side: dict[str, list[str]] = {}
    follower_side: dict[str, list[str]] = {}
    for tp, replicas in targets:
        info = client.partitions.get(tp)
        if info is None or replicas is None:
            continue
        leader_side.setdefault(tp.topic, []).extend(f"{tp.partition}:{b}" for b in info.replicas)
        follower_side.setdefault(tp.topic, []).extend(f"{tp.partition}:{b}" for b in replicas if b not in info.replicas)
    for topic in topics:
        configs: dict[str, str] = {}
        for key, entries in zip(THROTTLED_REPLICAS, (leader_side, follower_side), strict=True):
            existing = [e for e in current.get(topic, {}).get(key, "").split(",") if e]
            if "*" in existing:
                continue
            merged = list(dict.fromkeys([*existing, *entries.get(topic, [])]))
            if merged:
                configs[key] = ",".join(merged)
        if configs:
            _check_altered(await client.alter_topic_configs(topic, configs, []), "throttle")
    _check_altered(await client.alter_broker_configs("", {key: str(rate) for key in THROTTLE_RATES}, []), "throttle")


def _check_altered(resp: Any, what: str) -> None:
    from protocol.errors import ErrorCode

    _controller_answer(resp, what)
    for r in resp.responses:
        if r.error_code != ErrorCode.NONE:
            raise CliError(f"{what} failed: {ErrorCode(r.error_code).name}: {r.error_message}", EXIT_CLUSTER_ERROR)


async def _clear_reassignment_throttle(client: Any, topics: list[str] | None) -> list[str]:
    """Once nothing moves, remove what `--throttle` set (as kafka-reassign-partitions --verify does): the
    topics' throttled replica lists and the cluster-wide rates. Returns what was removed."""
    meta = await client.refresh_metadata(topics)
    removed: list[str] = []
    for t in meta.topics:
        keys = [key for key in THROTTLED_REPLICAS if t.configs.get(key)]
        if keys:
            _check_altered(await client.alter_topic_configs(t.topic, {}, keys), "removing the throttle")
            removed.append(f"{', '.join(keys)} of topic {t.topic}")
    if removed:
        _check_altered(await client.alter_broker_configs("", {}, list(THROTTLE_RATES)), "removing the throttle")
        removed.append(f"{', '.join(THROTTLE_RATES)} of every broker")
    return removed


async def _reassignment_progress(client: Any, topics: list[str] | None) -> list[dict[str, Any]]:
    """Reassignments in progress, with each adding replica's log end offset beside the leader's."""
    from protocol.messages import DescribeLogDirsRequest, TopicPartition

    ongoing = (await client.list_partition_reassignments(topics)).reassignments
    if not ongoing:
        return []
    await client.refresh_metadata(sorted({r.topic for r in ongoing}))
    ends: dict[tuple[int, str, int], int] = {}
    for broker_id in sorted(client.brokers):
        try:
            dirs = await client.send_to(broker_id, DescribeLogDirsRequest())
        except Exception:  # noqa: BLE001 - a broker that does not answer shows no progress
            continue
        for r in dirs.replicas:
            ends[(broker_id, r.topic, r.partition)] = r.log_end_offset
    out = []
    for r in ongoing:
        info = client.partitions.get(TopicPartition(r.topic, r.partition))
        leader = info.leader_id if info is not None else -1
        leader_end = ends.get((leader, r.topic, r.partition), -1)
        out.append(
            {
                "topic": r.topic,
                "partition": r.partition,
                "replicas": r.replicas,
                "adding": r.adding_replicas,
                "removing": r.removing_replicas,
                "leader": leader,
                "leader_log_end_offset": leader_end,
                "adding_log_end_offsets": {str(b): ends.get((b, r.topic, r.partition), -1) for b in r.adding_replicas},
            }
        )
    return out


def cmd_topic_reassign(args: argparse.Namespace) -> int:
    from client.cluster_client import ClusterUnavailableError
    from protocol.errors import ErrorCode

    targets = [] if args.verify else _reassignment_plan(args)
    wanted: list[str] | None = None
    if args.verify and (args.topic or args.plan):
        wanted = [args.topic] if args.topic else sorted({tp.topic for tp, _ in _reassignment_plan(args)})

    if args.throttle is not None and (args.throttle < 1 or args.verify or args.cancel):
        raise CliError(
            "--throttle takes bytes/s >= 1, with a reassignment to start (not --verify or --cancel)", EXIT_USAGE
        )
    throttle_removed: list[str] = []

    async def go() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with _client(args) as client:
            try:
                answers: list[dict[str, Any]] = []
                if targets and args.throttle is not None:
                    await _set_reassignment_throttle(client, targets, args.throttle)
                if targets:
                    resp = await client.alter_partition_reassignments(targets)
                    _controller_answer(resp, "reassign")
                    answers = [
                        {
                            "topic": r.topic,
                            "partition": r.partition,
                            "error": ErrorCode(r.error_code).name if r.error_code else None,
                            "message": r.error_message,
                        }
                        for r in resp.responses
                    ]
                progress = await _reassignment_progress(client, wanted)
                if args.verify and not progress:
                    throttle_removed.extend(await _clear_reassignment_throttle(client, wanted))
            except ClusterUnavailableError as exc:
                raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None
            return answers, progress

    answers, progress = _run(go())
    if args.json:
        _emit(args, {"results": answers, "in_progress": progress, "throttle_removed": throttle_removed}, str)
    else:
        for a in answers:
            tp = f"{a['topic']}-{a['partition']}"
            if a["error"] is None:
                print(f"{'cancelled' if args.cancel else 'reassigning'} {tp}")
            else:
                print(f"minibroker: error: cannot reassign {tp}: {a['error']}: {a['message']}", file=sys.stderr)
        for p in progress:
            caught = ", ".join(f"{b} at {end}" for b, end in p["adding_log_end_offsets"].items())
            print(
                f"in progress: {p['topic']}-{p['partition']} replicas {p['replicas']} adding {p['adding']} "
                f"removing {p['removing']}; leader {p['leader']} at {p['leader_log_end_offset']}"
                + (f", adding replicas {caught}" if caught else "")
            )
        if args.verify and not progress:
            print("no reassignment in progress" + (f" for {', '.join(wanted)}" if wanted else ""))
        for what in throttle_removed:
            print(f"throttle removed: {what}")
        if args.throttle is not None and any(a["error"] is None for a in answers):
            print(f"throttle: {args.throttle} bytes/s on the moving replicas until --verify reports the move done")
    if any(a["error"] is not None for a in answers):
        return EXIT_CLUSTER_ERROR
    if args.verify and progress:
        return EXIT_CHECK_FAILED
    return EXIT_OK


def cmd_topic_list(args: argparse.Namespace) -> int:
    resp = _run(_metadata(args, None))
    names = [t.topic for t in resp.topics]
    _emit(args, names, lambda: "\n".join(names) if names else "(no topics)")
    return EXIT_OK


def cmd_topic_describe(args: argparse.Namespace) -> int:
    from protocol.errors import ErrorCode

    resp = _run(_metadata(args, [args.topic] if args.topic else None))
    moving = {(r.topic, r.partition): r for r in _run(_reassignments(args, [args.topic] if args.topic else None))}
    filtered = args.under_replicated_partitions or args.under_min_isr_partitions or args.unavailable_partitions
    out = []
    for t in resp.topics:
        if t.error_code != ErrorCode.NONE:
            raise CliError(f"{t.error_message or ErrorCode(t.error_code).name}", EXIT_CLUSTER_ERROR)
        min_isr = int(t.configs.get("min.insync.replicas", 1))
        partitions = [
            {
                "partition": p.partition,
                "leader": p.leader_id,
                "leader_epoch": p.leader_epoch,
                "replicas": p.replicas,
                "isr": p.isr,
                "offline_replicas": p.offline_replicas,
                "adding_replicas": getattr(moving.get((t.topic, p.partition)), "adding_replicas", []),
                "removing_replicas": getattr(moving.get((t.topic, p.partition)), "removing_replicas", []),
            }
            for p in t.partitions
            # kafka-topics.sh's filters: ISR smaller than the replica set, or than min.insync.replicas;
            # no leader at all. With a filter only the partitions that match are listed.
            if not filtered
            or (args.under_replicated_partitions and len(p.isr) < len(p.replicas))
            or (args.under_min_isr_partitions and len(p.isr) < min_isr)
            or (args.unavailable_partitions and p.leader_id < 0)
        ]
        if filtered and not partitions:
            continue
        out.append(
            {
                "topic": t.topic,
                "partition_count": len(t.partitions),
                "replication_factor": len(t.partitions[0].replicas) if t.partitions else 0,
                "configs": dict(sorted(t.configs.items())),
                "partitions": partitions,
            }
        )

    def text() -> str:
        lines = []
        for t in out:
            if not filtered:
                configs = ",".join(f"{k}={v}" for k, v in t["configs"].items())
                lines.append(
                    f"Topic: {t['topic']}\tPartitionCount: {t['partition_count']}"
                    f"\tReplicationFactor: {t['replication_factor']}\tConfigs: {configs}"
                )
            for p in t["partitions"]:
                offline = f"\tOffline: {','.join(map(str, p['offline_replicas']))}" if p["offline_replicas"] else ""
                if p["adding_replicas"] or p["removing_replicas"]:
                    offline += f"\tAdding Replicas: {','.join(map(str, p['adding_replicas']))}"
                    offline += f"\tRemoving Replicas: {','.join(map(str, p['removing_replicas']))}"
                lines.append(
                    f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: {p['leader']}"
                    f"\tEpoch: {p['leader_epoch']}\tReplicas: {','.join(map(str, p['replicas']))}"
                    f"\tIsr: {','.join(map(str, p['isr']))}{offline}"
                )
        return "\n".join(lines)

    _emit(args, out, text)
    return EXIT_OK


def cmd_topic_elect_leaders(args: argparse.Namespace) -> int:
    """kafka-leader-election.sh: PREFERRED moves leadership back to each partition's first replica where
    it is in the ISR and does not lead (after kills and restarts left leadership skewed); UNCLEAN gives a
    partition with no leader one, out of the ISR if need be (its acknowledged records may be lost)."""
    from client.cluster_client import ClusterUnavailableError
    from protocol.errors import ErrorCode
    from protocol.messages import ELECTION_PREFERRED, ELECTION_UNCLEAN, TopicPartition

    types = {"preferred": ELECTION_PREFERRED, "unclean": ELECTION_UNCLEAN}
    kind = args.election_type.lower()
    if kind not in types:
        raise CliError(f"--election-type {args.election_type}: preferred or unclean", EXIT_USAGE)
    if args.all_topic_partitions == (args.topic is not None):
        raise CliError("give --all-topic-partitions, or --topic T (with --partition P for one partition)", EXIT_USAGE)
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic", EXIT_USAGE)

    async def go() -> list[dict[str, Any]]:
        async with _client(args) as client:
            try:
                wanted: list[TopicPartition] | None = None
                if args.topic is not None:
                    await client.refresh_metadata([args.topic])
                    known = client.partitions_of(args.topic)
                    if not known:
                        raise CliError(f"unknown topic {args.topic}", EXIT_CLUSTER_ERROR)
                    wanted = [TopicPartition(args.topic, args.partition)] if args.partition is not None else known
                resp = await client.elect_leaders(wanted, types[kind])
                _controller_answer(resp, "leader election")
            except ClusterUnavailableError as exc:
                raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None
        return [
            {
                "topic": r.topic,
                "partition": r.partition,
                "error": ErrorCode(r.error_code).name if r.error_code else None,
                "message": r.error_message,
            }
            for r in resp.results
        ]

    results = _run(go())
    elected = [r for r in results if r["error"] is None]
    not_needed = [r for r in results if r["error"] == ErrorCode.ELECTION_NOT_NEEDED.name]
    failed = [r for r in results if r["error"] not in (None, ErrorCode.ELECTION_NOT_NEEDED.name)]
    if args.json:
        _emit(args, {"results": results}, str)
    else:

        def names(rows: list[dict[str, Any]]) -> str:
            return ", ".join(f"{r['topic']}-{r['partition']}" for r in rows)

        if elected:
            print(f"Successfully completed leader election ({kind.upper()}) for partitions {names(elected)}")
        if not_needed:
            print(f"Valid replica already elected for partitions {names(not_needed)}")
        if not results:
            print(
                "Every partition is led by its preferred replica"
                if kind == "preferred"
                else "Every partition has a leader"
            )
        for r in failed:
            print(
                f"minibroker: error: election for {r['topic']}-{r['partition']} failed: {r['error']}: {r['message']}",
                file=sys.stderr,
            )
    return EXIT_CLUSTER_ERROR if failed else EXIT_OK


def _controller_answer(resp: Any, what: str) -> None:
    """Raise for a top-level error: the brokers cannot reach the controller (exit 3), or it refused (exit 4)."""
    from protocol.errors import ErrorCode

    if resp.error_code == ErrorCode.NOT_CONTROLLER:
        raise CliError(
            f"{what} failed: the brokers cannot reach the controller ({resp.error_message}); "
            "is it running? (`minibroker cluster status`)",
            EXIT_UNREACHABLE,
        )
    if resp.error_code != ErrorCode.NONE:
        raise CliError(f"{what} failed: {ErrorCode(resp.error_code).name}: {resp.error_message}", EXIT_CLUSTER_ERROR)


def cmd_topic_alter(args: argparse.Namespace) -> int:
    from client.cluster_client import ClusterUnavailableError
    from protocol.errors import ErrorCode

    if args.partitions is None:
        raise CliError("give --partitions N, the topic's new partition count", EXIT_USAGE)

    async def go() -> None:
        async with _client(args) as client:
            try:
                resp = await client.create_partitions(args.topic, args.partitions)
                _controller_answer(resp, "alter")
                (result,) = resp.results
                if result.error_code != ErrorCode.NONE:
                    raise CliError(
                        f"cannot alter {args.topic}: {ErrorCode(result.error_code).name}: {result.error_message}",
                        EXIT_CLUSTER_ERROR,
                    )
                await client.wait_for_leaders(args.topic, timeout_s=30.0, partitions=args.partitions)
            except ClusterUnavailableError as exc:
                raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None

    _run(go())
    data = {"topic": args.topic, "partitions": args.partitions}
    _emit(args, data, lambda: f"topic {args.topic} now has {args.partitions} partitions")
    return EXIT_OK


# -- topic configs (kafka-configs.sh) -------------------------------------------------------------


def _configs_topic(args: argparse.Namespace) -> str | None:
    """--topic T, or kafka-configs.sh's --entity-type topics --entity-name T; None: every topic."""
    if args.topic and args.entity_name and args.topic != args.entity_name:
        raise CliError(f"--topic {args.topic} and --entity-name {args.entity_name} name different topics", EXIT_USAGE)
    return args.topic or args.entity_name or None


def _config_source_name(source: int) -> str:
    from protocol.messages import ConfigSource

    try:
        return ConfigSource(source).name
    except ValueError:
        return f"UNKNOWN({source})"


def _config_entries(configs: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": c.name,
            "value": c.value,
            "source": _config_source_name(c.config_source),
            "sensitive": c.is_sensitive,
            "synonyms": [
                {"name": s.name, "value": s.value, "source": _config_source_name(s.source)} for s in c.synonyms
            ],
        }
        for c in configs
    ]


def _config_lines(heading: str, configs: list[dict[str, Any]]) -> list[str]:
    """kafka-configs.sh --describe's layout: the heading, then one line per config with its synonyms."""
    lines = [heading]
    for c in configs:
        synonyms = ", ".join(f"{s['source']}:{s['name']}={s['value']}" for s in c["synonyms"])
        value = "null" if c["value"] is None else c["value"]
        lines.append(f"  {c['name']}={value} sensitive={str(c['sensitive']).lower()} synonyms={{{synonyms}}}")
    return lines


def _broker_entity(args: argparse.Namespace) -> str:
    """--entity-type brokers: the broker id of --entity-name, or "" for --entity-default (exactly one)."""
    if args.entity_default == (args.entity_name is not None):
        raise CliError("brokers: give --entity-default or --entity-name BROKER_ID", EXIT_USAGE)
    entity = "" if args.entity_default else str(args.entity_name)
    if entity and not entity.isdigit():
        raise CliError(f"--entity-name {entity!r}: a broker id", EXIT_USAGE)
    return entity


def _describe_broker_configs(args: argparse.Namespace) -> int:
    """kafka-configs.sh --describe --entity-type brokers (--entity-name ID | --entity-default) [--all]: asks
    the named broker itself (a broker describes its own configs), or any broker for the cluster default."""
    from client.cluster_client import ClusterUnavailableError
    from protocol.errors import ErrorCode
    from protocol.messages import ConfigResourceType, DescribeConfigsRequest, DescribeConfigsResource

    entity = _broker_entity(args)

    async def go() -> Any:
        async with _client(args) as client:
            request = DescribeConfigsRequest([DescribeConfigsResource(int(ConfigResourceType.BROKER), entity)])
            try:
                if not entity:
                    return await client.send_any(request)
                await client.refresh_metadata([])
                if int(entity) not in client.brokers:
                    raise CliError(f"broker {entity} is not in the cluster", EXIT_CLUSTER_ERROR)
                return await client.send_to(int(entity), request)
            except ClusterUnavailableError as exc:
                raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None

    resp = _run(go())
    (result,) = resp.results
    if result.error_code != ErrorCode.NONE:
        raise CliError(
            f"cannot describe broker configs: {ErrorCode(result.error_code).name}: {result.error_message}",
            EXIT_CLUSTER_ERROR,
        )
    configs = _config_entries(result.configs)
    if not args.all:
        # Without --all, as kafka-configs.sh: only what was set at runtime for this entity.
        own = "DYNAMIC_DEFAULT_BROKER_CONFIG" if not entity else "DYNAMIC_BROKER_CONFIG"
        configs = [c for c in configs if c["source"] == own]
    if not entity:
        heading = "Default configs for brokers in the cluster are:"
    else:
        heading = f"{'All' if args.all else 'Dynamic'} configs for broker {entity} are:"
    _emit(args, {"broker": entity or None, "configs": configs}, lambda: "\n".join(_config_lines(heading, configs)))
    return EXIT_OK


def cmd_configs_describe(args: argparse.Namespace) -> int:
    from client.cluster_client import ClusterUnavailableError
    from protocol.errors import ErrorCode

    if args.entity_type == "brokers":
        return _describe_broker_configs(args)
    if args.entity_default:
        raise CliError("--entity-default goes with --entity-type brokers", EXIT_USAGE)
    topic = _configs_topic(args)

    async def go() -> list[Any]:
        async with _client(args) as client:
            try:
                names = [topic] if topic else [t.topic for t in (await client.refresh_metadata(None)).topics]
                results = []
                for name in names:
                    resp = await client.describe_topic_configs(name)
                    _controller_answer(resp, "describe")
                    results.extend(resp.results)
                return results
            except ClusterUnavailableError as exc:
                raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None

    out = []
    for result in _run(go()):
        if result.error_code != ErrorCode.NONE:
            raise CliError(
                f"cannot describe configs of {result.resource_name}: {ErrorCode(result.error_code).name}: "
                f"{result.error_message}",
                EXIT_CLUSTER_ERROR,
            )
        out.append({"topic": result.resource_name, "configs": _config_entries(result.configs)})

    def text() -> str:
        # kafka-configs.sh --describe --all's layout
        lines = [line for t in out for line in _config_lines(f"All configs for topic {t['topic']} are:", t["configs"])]
        return "\n".join(lines) if lines else "(no topics)"

    _emit(args, out, text)
    return EXIT_OK


def _split_config_items(text: str) -> list[str]:
    """`a=1,b=[0:1,0:2]` -> ["a=1", "b=0:1,0:2"]: as kafka-configs.sh, a list value goes in square brackets."""
    items: list[str] = []
    current, depth = "", 0
    for ch in text:
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        current += ch
    items.append(current)
    return [item.replace("[", "").replace("]", "") for item in items]


def _config_changes(
    args: argparse.Namespace, problem_of: Callable[[str, str | None], str | None]
) -> tuple[dict[str, str], list[str]]:
    """--add-config k=v[,k2=v2] and --delete-config k[,k2] (each repeatable), each key checked by `problem_of(key,
    value)` (value None: deleted) before any cluster is asked, so a typo is a usage error."""
    adds: dict[str, str] = {}
    for group in args.add_config or []:
        for item in _split_config_items(group):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise CliError(f"--add-config expects key=value[,key=value...], got {item!r}", EXIT_USAGE)
            adds[key.strip()] = value.strip()
    deleted = (k.strip() for group in args.delete_config or [] for k in group.split(","))
    deletes = list(dict.fromkeys(k for k in deleted if k))
    if not adds and not deletes:
        raise CliError("give --add-config key=value[,...] and/or --delete-config key[,...]", EXIT_USAGE)
    if both := sorted(set(adds) & set(deletes)):
        raise CliError(f"{', '.join(both)}: both added and deleted", EXIT_USAGE)
    changes: list[tuple[str, str | None]] = [*adds.items(), *((k, None) for k in deletes)]
    for name, new_value in changes:
        if (problem := problem_of(name, new_value)) is not None:
            raise CliError(problem, EXIT_USAGE)
    return adds, deletes


def _topic_config_problem(key: str, value: str | None) -> str | None:
    """Checked as `topic create` checks --config."""
    from server_common.log_config import topic_config_error, topic_config_key_error

    return topic_config_key_error(key) if value is None else topic_config_error({key: value})


async def _until_shown(client: Any, topic: str, adds: dict[str, str], deletes: list[str], timeout_s: float) -> bool:
    """Whether the broker the client asks shows the change within `timeout_s`: the controller has committed it,
    and brokers learn it from its next push. A broker that cannot be asked does not show it (the change stands)."""
    import asyncio

    from client.cluster_client import ClusterUnavailableError
    from protocol.messages import ConfigSource

    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            results = (await client.describe_topic_configs(topic)).results
        except ClusterUnavailableError:
            return False
        configs = results[0].configs if len(results) == 1 else []
        own = {c.name: c.value for c in configs if c.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG}
        if all(own.get(k) == v for k, v in adds.items()) and not any(k in own for k in deletes):
            return True
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)


def cmd_configs_alter(args: argparse.Namespace) -> int:
    from client.cluster_client import ClusterUnavailableError
    from protocol.errors import ErrorCode

    if args.entity_type == "brokers":
        return _alter_broker_configs(args)
    topic = _configs_topic(args)
    if topic is None:
        raise CliError("give --topic TOPIC (or --entity-type topics --entity-name TOPIC)", EXIT_USAGE)
    adds, deletes = _config_changes(args, _topic_config_problem)

    async def go() -> bool:
        async with _client(args) as client:
            try:
                resp = await client.alter_topic_configs(topic, adds, deletes)
                _controller_answer(resp, "alter")
                (result,) = resp.responses
                if result.error_code != ErrorCode.NONE:
                    raise CliError(
                        f"cannot alter configs of {topic}: {ErrorCode(result.error_code).name}: {result.error_message}",
                        EXIT_CLUSTER_ERROR,
                    )
                return await _until_shown(client, topic, adds, deletes, timeout_s=10.0)
            except ClusterUnavailableError as exc:
                raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None

    if not _run(go()):
        print(
            f"minibroker: note: the change is committed; {args.bootstrap_server} does not show it yet", file=sys.stderr
        )
    data = {"topic": topic, "set": adds, "deleted": deletes}
    _emit(args, data, lambda: f"Completed updating config for topic {topic}.")
    return EXIT_OK


def _alter_broker_configs(args: argparse.Namespace) -> int:
    """kafka-configs.sh --entity-type brokers (--entity-default | --entity-name ID): the dynamic replication
    throttle rates."""
    from client.cluster_client import ClusterUnavailableError
    from protocol.errors import ErrorCode
    from server_common.dynamic_config import dynamic_broker_config_error

    entity = _broker_entity(args)
    adds, deletes = _config_changes(args, dynamic_broker_config_error)

    async def go() -> None:
        async with _client(args) as client:
            try:
                resp = await client.alter_broker_configs(entity, adds, deletes)
            except ClusterUnavailableError as exc:
                raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None
            _controller_answer(resp, "alter")
            (result,) = resp.responses
            if result.error_code != ErrorCode.NONE:
                raise CliError(
                    f"cannot alter broker configs: {ErrorCode(result.error_code).name}: {result.error_message}",
                    EXIT_CLUSTER_ERROR,
                )

    _run(go())
    what = "default config for brokers in the cluster" if not entity else f"config for broker {entity}"
    _emit(args, {"broker": entity or None, "set": adds, "deleted": deletes}, lambda: f"Completed updating {what}.")
    return EXIT_OK


def _properties(items: list[str] | None, known: dict[str, str]) -> dict[str, str]:
    from client.console import parse_properties

    try:
        return parse_properties(items or [], known)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def cmd_produce(args: argparse.Namespace) -> int:
    from client.console import PRODUCER_PROPERTIES, LineReader, parse_header
    from client.producer import produce_command

    props = _properties(args.property, PRODUCER_PROPERTIES)
    try:
        headers = [parse_header(h) for h in args.header or []]
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    key = args.key.encode() if args.key is not None else None
    records: Any
    if args.count is not None:
        if args.count < 0 or args.size < 0:
            raise CliError("--count and --size must be >= 0", EXIT_USAGE)
        records = None
    else:
        reader = LineReader(props, key, headers)
        records = reader.records(sys.stdin.buffer)
    result = _run(produce_command(args, records, key=key, headers=headers))
    reasons = "".join(f"{', ' if i else ': '}{e['records']} {e['error']}" for i, e in enumerate(result["errors"]))
    text = f"produced {result['acked']} records to {args.topic} ({result['failed']} failed{reasons})"
    _emit(args, result, lambda: text)
    if result.get("input_error"):
        raise CliError(f"{result['input_error']} (records before it were sent)", EXIT_USAGE)
    return EXIT_OK if result["failed"] == 0 else EXIT_CLUSTER_ERROR


def _consumer_fetch_config(items: list[str] | None) -> dict[str, int]:
    from client.consumer import fetch_config

    props: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--consumer-property expects KEY=VALUE, got {item!r}", EXIT_USAGE)
        props[key.strip()] = value.strip()
    try:
        return fetch_config(props)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def cmd_consume(args: argparse.Namespace) -> int:
    from client.console import CONSUMER_PROPERTIES, make_formatter
    from client.consumer import consume_command

    props = _properties(args.property, CONSUMER_PROPERTIES)
    args.fetch_config = _consumer_fetch_config(args.consumer_property)
    start = _start_offset(args)
    if args.max_messages is not None and args.max_messages < 0:
        args.max_messages = None  # Kafka's -1: no limit
    try:
        formatter = make_formatter(props, args.format, args.json, args.print_offsets)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    seen = {"count": 0}

    def counted(topic: str, partition: int, rec: Any) -> bytes:
        seen["count"] += 1
        return formatter(topic, partition, rec)

    async def until_signalled() -> dict[str, Any] | None:
        # SIGTERM cancels the consumer the way the event loop's runner does on Ctrl-C, so its connections
        # close before it returns; None says it was stopped.
        import asyncio
        import signal

        task = asyncio.current_task()
        assert task is not None
        stopped: list[int] = []

        def on_term() -> None:
            stopped.append(signal.SIGTERM)
            task.cancel()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_term)
        try:
            return dict(await consume_command(args, counted, start))
        except asyncio.CancelledError:
            if stopped:
                return None
            raise

    # Ctrl-C or SIGTERM (the usual end with --timeout-ms -1) still says how many records were printed,
    # as Kafka's console consumer does on shutdown.
    try:
        result = _run(until_signalled())
    except KeyboardInterrupt:
        result = None
    if result is None:
        sys.stdout.flush()
        print(f"Processed a total of {seen['count']} messages", file=sys.stderr)
        return 130
    print(f"Processed a total of {result['count']} messages", file=sys.stderr)
    if result["corrupt"]:
        # What was readable was printed; the partitions that stopped at a corrupt batch make it an error.
        print(f"minibroker: error: {len(result['corrupt'])} partition(s) stopped at a corrupt batch", file=sys.stderr)
        return EXIT_CLUSTER_ERROR
    if args.max_messages is not None and result["count"] < args.max_messages:
        # Kafka's console consumer exits 0 when --timeout-ms passes; --fail-on-timeout makes it a check.
        if args.fail_on_timeout:
            print(
                f"minibroker: check failed: {result['count']} of --max-messages {args.max_messages} records "
                f"arrived within --timeout-ms {args.timeout_ms}",
                file=sys.stderr,
            )
            return EXIT_CHECK_FAILED
    return EXIT_OK


def _start_offset(args: argparse.Namespace) -> str | int:
    """--offset earliest|latest|N|-N (kcat's -o), or --from-beginning; default latest, like Kafka's tool."""
    spec = args.offset
    if spec is None:
        return "earliest" if args.from_beginning else "latest"
    if args.from_beginning:
        raise CliError("give --from-beginning or --offset, not both", EXIT_USAGE)
    aliases = {"earliest": "earliest", "beginning": "earliest", "latest": "latest", "end": "latest"}
    if spec in aliases:
        return aliases[spec]
    try:
        return int(spec)
    except ValueError:
        raise CliError(
            f"--offset expects earliest, latest, an offset N or -N (N before the end), got {spec!r}", EXIT_USAGE
        ) from None


# -- chaos, metrics -------------------------------------------------------------------------------


def cmd_chaos_leader_kill(args: argparse.Namespace) -> int:
    from cluster.chaos import render_report, run_leader_kill
    from cluster.local_cluster import ClusterError

    if args.rounds < 1 or args.interval_ms < 0 or args.producers < 1 or args.partitions < 1 or args.down_ms < 0:
        raise CliError(
            "--rounds, --producers and --partitions must be >= 1, --interval-ms and --down-ms >= 0", EXIT_USAGE
        )

    if not args.restart:
        from cluster.local_cluster import LocalClusterState

        try:
            brokers = len(LocalClusterState.load(Path(args.dir)).brokers) if args.dir else 3
        except ClusterError as exc:
            raise CliError(str(exc), EXIT_UNREACHABLE) from None
        if args.rounds >= brokers:
            # Each round kills a broker for good: the last would leave none to lead or to check.
            raise CliError(
                f"without --restart each round kills a broker for good, and --rounds {args.rounds} would kill "
                f"all {brokers}: add --restart, or use at most {brokers - 1} rounds",
                EXIT_USAGE,
            )

    def progress(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    try:
        report = _run(run_leader_kill(args, progress))
    except ClusterError as exc:
        raise CliError(str(exc), EXIT_UNREACHABLE) from None
    text = json.dumps(report, indent=2, default=str)
    if args.json == "-":
        print(text)
    elif args.json:
        Path(args.json).write_text(text + "\n")
    print(render_report(report), file=sys.stderr if args.json == "-" else sys.stdout)
    return EXIT_OK if report["valid"] else EXIT_CHECK_FAILED


def cmd_chaos_run(args: argparse.Namespace) -> int:
    from cluster.chaos_faults import run_faults_command

    return int(run_faults_command(args))


def cmd_chaos_heal(args: argparse.Namespace) -> int:
    from cluster.chaos_faults import heal_command

    return int(heal_command(args))


# -- parser ---------------------------------------------------------------------------------------


def _add_client(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help=f"any broker of the cluster (default: ${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})",
    )
    p.add_argument("--dir", help="the local cluster in this directory (`cluster up --dir`): its brokers")
    p.set_defaults(client_command=True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("minibroker")
    except PackageNotFoundError:  # pragma: no cover - run from a checkout without installing
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minibroker",
        description="A runnable model of Kafka-style replication: brokers, a controller, replica fetchers, "
        "leader-kill chaos and a Spark lag dashboard.",
        epilog="exit codes: 0 ok, 1 check failed, 2 bad usage, 3 cluster unreachable, 4 cluster error",
    )
    parser.add_argument("--version", action="version", version=f"minibroker {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
        help="run the controller process",
        description="Run the controller: config file, then MINIBROKER_* env vars, then flags.",
    )
    p.add_argument("--config", help="properties file (node.id, listeners, metadata.log.dir, ...)")
    p.add_argument("--override", action="append", metavar="KEY=VALUE", help="set any config key (repeatable)")
    p.add_argument("--listeners", help="listeners, HOST:PORT")
    p.add_argument("--metadata-dir", help="metadata.log.dir")
    p.add_argument("--pid-file", help="write this process's pid here while it runs")
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
    p.add_argument(
        "--base-address",
        default="127.0.0.10",
        help="the controller's loopback address; broker N gets base+N (default 127.0.0.10, all in 127.0.0.0/8)",
    )
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
        description="Show the local cluster in --dir (with pids), or any cluster through --bootstrap-server "
        f"(or ${BOOTSTRAP_ENV}): brokers, controller, topics, partitions, leaders, ISR, HW/LEO and lag.",
    )
    p.add_argument("--dir", help=f"local cluster directory (default {DEFAULT_DIR})")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="describe the cluster behind this broker")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cluster_status)

    tp = sub.add_parser(
        "topic",
        help="create, delete, alter, reassign, elect leaders for, list and describe topics",
        description="Topic administration.",
    )
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
    p = tsub.add_parser(
        "delete",
        help="delete topics",
        description="Delete topics: their metadata goes at once and every broker deletes its logs "
        "(STOP_REPLICA); the name can be created again and starts empty. Exit 4 if a topic does not exist.",
    )
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("--json", action="store_true")
    _add_client(p)
    p.set_defaults(func=cmd_topic_delete)
    p = tsub.add_parser(
        "alter",
        help="add partitions to a topic",
        description="Grow a topic to --partitions partitions, like kafka-topics.sh --alter: the new ones are "
        "placed on the live brokers as Kafka places them, with the replication factor of partition 0, and get "
        "leaders at once; existing partitions and their data stay where they are (keys may map to other "
        "partitions from now on). Fewer or as many partitions as now is an error (exit 4), as is an unknown "
        "topic. Configs are changed with `minibroker configs alter`.",
    )
    p.add_argument("topic")
    p.add_argument("--partitions", type=int, help="the new total number of partitions")
    p.add_argument("--json", action="store_true")
    _add_client(p)
    p.set_defaults(func=cmd_topic_alter)
    p = tsub.add_parser(
        "reassign",
        help="move a partition's replicas (KIP-455)",
        description="Move partitions to new replica sets, like kafka-reassign-partitions.sh: the added replicas "
        "copy the log and join the ISR, then the removed ones are stopped and deleted (the leader moves if it "
        "was removed). --verify lists what is still moving, with each added replica's log end offset beside "
        "the leader's, and exits 1 until it is done.",
    )
    p.add_argument("topic", nargs="?")
    p.add_argument("--partition", type=int)
    p.add_argument("--replicas", metavar="B1,B2,...", help="the target replica set, preferred leader first")
    p.add_argument("--plan", metavar="FILE", help='kafka-reassign-partitions JSON: {"version":1,"partitions":[...]}')
    p.add_argument("--cancel", action="store_true", help="cancel the reassignment of these partitions")
    p.add_argument("--verify", action="store_true", help="show what is still moving; exit 1 until done")
    p.add_argument(
        "--throttle",
        type=int,
        metavar="BYTES_PER_S",
        help="limit the moving replicas' replication to this rate (KIP-73), as kafka-reassign-partitions does: "
        "sets the brokers' leader/follower.replication.throttled.rate and the topics' throttled replica lists; "
        "--verify removes them once nothing moves",
    )
    p.add_argument("--json", action="store_true")
    _add_client(p)
    p.set_defaults(func=cmd_topic_reassign)
    p = tsub.add_parser(
        "elect-leaders",
        help="move leadership back to preferred replicas (kafka-leader-election.sh)",
        description="Leader election, like kafka-leader-election.sh. preferred (the default): each partition whose "
        "first (preferred) replica is in the ISR and does not lead gets it as leader, with a leader epoch bump; "
        "kills and restarts leave leadership on the survivors, this spreads it back. unclean: each partition with "
        "no leader gets one, a live out-of-sync replica if no ISR member lives, losing what only the old ISR "
        "held. Exit 4 when a partition cannot get the leader asked for.",
    )
    p.add_argument(
        "--election-type", default="preferred", metavar="TYPE", help="preferred (default) or unclean (may lose data)"
    )
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    p.add_argument("--topic", help="the partitions of this topic")
    p.add_argument("--partition", type=int, help="with --topic: this partition only")
    p.add_argument("--json", action="store_true")
    _add_client(p)
    p.set_defaults(func=cmd_topic_elect_leaders)
    p = tsub.add_parser("list", help="list topics", description="List topics.")
    p.add_argument("--json", action="store_true")
    _add_client(p)
    p.set_defaults(func=cmd_topic_list)
    p = tsub.add_parser(
        "describe",
        help="replication factor, configs, leaders, epochs, replicas, ISR",
        description="Describe one topic or all, like kafka-topics.sh --describe.",
    )
    p.add_argument("topic", nargs="?")
    p.add_argument("--under-replicated-partitions", action="store_true", help="only partitions whose ISR < replicas")
    p.add_argument(
        "--under-min-isr-partitions", action="store_true", help="only partitions whose ISR < min.insync.replicas"
    )
    p.add_argument("--unavailable-partitions", action="store_true", help="only partitions without a leader")
    p.add_argument("--json", action="store_true")
    _add_client(p)
    p.set_defaults(func=cmd_topic_describe)

    cf = sub.add_parser(
        "configs",
        help="describe and change topic configs (and the brokers' replication throttle rates) at runtime",
        description="Topic configs, like kafka-configs.sh --entity-type topics; `--entity-type brokers` describes "
        "a broker's configs and sets the brokers' dynamic leader/follower.replication.throttled.rate.",
    )
    cfsub = cf.add_subparsers(dest="configs_command", required=True, metavar="SUBCOMMAND")
    describe_p = cfsub.add_parser(
        "describe",
        help="every config of a topic, its value and where it comes from",
        description="Every config of a topic (or of all topics) with the value in effect and its source: "
        "DYNAMIC_TOPIC_CONFIG (set on the topic), STATIC_BROKER_CONFIG (the cluster's setting of the "
        "broker-level key) or DEFAULT_CONFIG (Kafka's default); the synonyms list what the value falls back "
        "to. Unknown topic: exit 4. With --entity-type brokers --entity-name ID, the configs set at runtime "
        "on that broker (DYNAMIC_BROKER_CONFIG; --all: every broker config, with DYNAMIC_DEFAULT_BROKER_CONFIG "
        "and STATIC_BROKER_CONFIG sources too), asked of that broker; --entity-default: the cluster-wide "
        "dynamic defaults.",
    )
    describe_p.add_argument(
        "--all",
        action="store_true",
        help="brokers: every config, not only those set at runtime (topics always list every config)",
    )
    describe_p.set_defaults(func=cmd_configs_describe)
    alter_p = cfsub.add_parser(
        "alter",
        help="set or delete topic configs",
        description="Set (--add-config) or delete (--delete-config) configs of a topic, all or none. Brokers "
        "apply them at once to the topic's partitions: min.insync.replicas decides the next acks=all produce. "
        "A deleted config falls back to the cluster's setting. An unknown key is a usage error (exit 2) with "
        "the closest known one; an unknown topic exits 4.",
    )
    alter_p.add_argument(
        "--add-config",
        action="append",
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="configs to set, e.g. min.insync.replicas=2,retention.ms=3600000 (repeatable)",
    )
    alter_p.add_argument(
        "--delete-config", action="append", metavar="KEY[,KEY]", help="configs to delete from the topic (repeatable)"
    )
    alter_p.set_defaults(func=cmd_configs_alter)
    for p in (describe_p, alter_p):
        p.add_argument("--topic", help="the topic")
        p.add_argument(
            "--entity-type",
            choices=["topics", "brokers"],
            help="kafka-configs.sh spelling: topics, or brokers (their configs; alter: the replication throttle rates)",
        )
        p.add_argument(
            "--entity-name", metavar="NAME", help="the topic (kafka-configs.sh spelling of --topic), or a broker id"
        )
        p.add_argument(
            "--entity-default",
            action="store_true",
            help="with --entity-type brokers: the cluster-wide default of every broker",
        )
        p.add_argument("--json", action="store_true")
        _add_client(p)

    p = sub.add_parser(
        "produce",
        help="write records",
        description="Write lines from stdin, or --count generated records, to a topic, like "
        "kafka-console-producer. Records with a key go to the partition Kafka's partitioner picks for it.",
        epilog="properties (Kafka's names): parse.key, key.separator (tab), parse.headers, headers.delimiter "
        "(tab), headers.separator (,), headers.key.separator (:), null.marker. A line is "
        "[HEADERS<headers.delimiter>][KEY<key.separator>]VALUE.",
    )
    p.add_argument("topic")
    p.add_argument("--count", type=int, help="generate this many records instead of reading stdin")
    p.add_argument("--size", type=int, default=100, help="bytes per generated record")
    p.add_argument("--acks", choices=["0", "1", "all", "-1"], default="all")
    p.add_argument("--partition", type=int, help="write to this partition only (default: by key, else in turn)")
    p.add_argument("--key", help="this key on every record (kcat -k)")
    p.add_argument("--header", action="append", metavar="NAME=VALUE", help="a header on every record (repeatable)")
    p.add_argument(
        "--property", action="append", metavar="NAME=VALUE", help="line reader property, e.g. parse.key=true"
    )
    p.add_argument(
        "--batch-size", type=int, default=16384, help="batch.size: bytes of records per partition batch (16384)"
    )
    p.add_argument("--linger-ms", type=int, default=5, help="linger.ms: how long a batch waits to fill (5)")
    p.add_argument(
        "--no-idempotence",
        action="store_true",
        help="enable.idempotence=false: never resend a batch that may have been written (idempotence is on by "
        "default with --acks all: a resent batch is written once)",
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    _add_client(p)
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser(
        "consume",
        help="read records",
        description="Read records and print them, like kafka-console-consumer (or kcat -C with --format).",
        epilog="properties (Kafka's names): print.key, print.value, print.partition, print.offset, "
        "print.timestamp, print.headers, key.separator (tab), line.separator, headers.separator (,), "
        "headers.key.separator (:), null.literal (null). --format tokens (kcat -f): %t topic, %p partition, "
        "%o offset, %T timestamp, %k key, %K key length, %s value, %S value length, %h headers, "
        "%% percent; \\n \\t escapes. Exit 0 when --timeout-ms passes, as Kafka's tool does, unless "
        "--fail-on-timeout.",
    )
    p.add_argument("topic")
    p.add_argument("--from-beginning", action="store_true", help="same as --offset earliest")
    p.add_argument(
        "--offset", help="where to start in each partition: earliest, latest (default), N, or -N (N before the end)"
    )
    p.add_argument("--partition", type=int)
    p.add_argument("--max-messages", type=int, help="exit after this many records (default, or -1: no limit)")
    p.add_argument(
        "--timeout-ms",
        type=int,
        default=10000,
        help="exit after this long without a new record (default 10000; -1: never, Kafka's default)",
    )
    p.add_argument(
        "--fail-on-timeout",
        action="store_true",
        help="exit 1 when --timeout-ms passes before --max-messages records arrived",
    )
    p.add_argument("--print-offsets", action="store_true", help="print partition and offset before each value")
    p.add_argument("--property", action="append", metavar="NAME=VALUE", help="formatter property, e.g. print.key=true")
    p.add_argument(
        "--consumer-property",
        action="append",
        metavar="KEY=VALUE",
        help="a consumer config: max.partition.fetch.bytes (default 1048576; e.g. 8388608 for 8 MiB fetches), "
        "fetch.max.bytes (52428800), fetch.min.bytes (1), fetch.max.wait.ms (200)",
    )
    p.add_argument("--format", metavar="FMT", help="kcat-style format string, e.g. '%%k:%%s\\n'")
    p.add_argument("--json", action="store_true", help="one JSON object per record, one per line")
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
    p.add_argument(
        "--down-ms",
        type=int,
        default=0,
        help="with --restart: keep each killed broker down at least this long (its followers fall behind)",
    )
    p.add_argument("--json", metavar="FILE", help="write the JSON report here ('-' for stdout)")
    p.add_argument("--topic", default="chaos")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--metrics-dir", help="fresh cluster only: write broker metrics here")
    p.add_argument(
        "--no-idempotence",
        action="store_true",
        help="producers without idempotence: an indeterminate write is never resent (default: idempotent, "
        "indeterminate writes are resent and must land exactly once)",
    )
    p.set_defaults(func=cmd_chaos_leader_kill)
    p = chsub.add_parser(
        "run",
        help="kills, pauses, partitions, slow and lossy links under acks=all load, then check every acked write",
        description="Inject one fault per round into the broker leading the most partitions, kinds in turn from "
        "--faults: kill, kill-restart, pause, partition[:SHAPE] (isolate-leader, leader-from-followers, "
        "leader-from-controller, isolate-controller, one-way), delay, loss, clients-see-old-leader. Network "
        "faults need root, iptables and tc; their rules live in a chain of their own and are always removed. "
        "Reports per fault, and the oracle's verdict on acks=all writes. Exit 0 only when valid.",
    )
    p.add_argument("--faults", default="kill,pause,partition,delay", help="comma-separated fault kinds")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dir", help="use the running local cluster in this dir (default: a fresh 3-broker cluster in a temp dir)"
    )
    p.add_argument("--fault-ms", type=int, default=3000, help="how long each fault lasts (at least until failover)")
    p.add_argument("--interval-ms", type=int, default=500, help="time between a fault's recovery and the next")
    p.add_argument("--json", metavar="FILE", help="write the JSON report here ('-' for stdout)")
    p.add_argument("--topic", default="chaos")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument(
        "--no-idempotence",
        action="store_true",
        help="producers without idempotence: an indeterminate write is never resent (default: idempotent, "
        "indeterminate writes are resent and must land exactly once)",
    )
    p.set_defaults(func=cmd_chaos_run)
    p = chsub.add_parser(
        "heal",
        help="remove every network fault a chaos run against --dir left, resume paused nodes",
        description="Remove the iptables chain and tc qdisc of chaos runs against the cluster in --dir, and "
        "SIGCONT its nodes. Safe to run at any time.",
    )
    p.add_argument("--dir", default=DEFAULT_DIR)
    p.set_defaults(func=cmd_chaos_heal)

    mt = sub.add_parser("metrics", help="metrics tools", description="Metrics tools.")
    msub = mt.add_subparsers(dest="metrics_command", required=True, metavar="SUBCOMMAND")
    # Listed for `--help`; main() hands their arguments to their own parsers.
    msub.add_parser("sink", help="MQTT → JSON-lines files (minibroker metrics sink --help)")
    sub.add_parser("dashboard", help="Spark lag tables and HTML dashboard (minibroker dashboard --help)")
    sub.add_parser("sim", help="deterministic simulation: seeds, sweeps, KIP scenarios (minibroker sim --help)")
    return parser


# Commands whose flags belong to another module's own parser: everything after the command goes there.
DELEGATED: dict[tuple[str, ...], Callable[[list[str]], int]] = {
    ("metrics", "sink"): lambda rest: __import__("metrics.sink", fromlist=["main"]).main(rest),
    ("dashboard",): lambda rest: __import__("metrics.spark_app", fromlist=["main"]).main(rest),
    ("sim",): lambda rest: __import__("sim.cli", fromlist=["main"]).main(rest),
}


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
    argv = list(sys.argv[1:] if argv is None else argv)
    from cluster.allocator import tune_allocator

    tune_allocator()  # brokers and clients move megabyte buffers: see cluster/allocator.py
    try:
        for prefix, run in DELEGATED.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return int(run(argv[len(prefix) :]))
        if argv[:1] == ["broker"] and len(argv) > 1 and argv[1] in LIFECYCLE_ACTIONS:
            lifecycle = _lifecycle_parser()
            largs = lifecycle.parse_args(argv[1:])
            return int(largs.func(largs))
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
    except (FileNotFoundError, NotADirectoryError, PermissionError, IsADirectoryError) as exc:
        # A path the user gave (--dir, log.dirs, --out, ...) that cannot be used: say which, no traceback.
        if exc.filename is None:
            raise
        print(f"minibroker: error: cannot use {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    # Run through the imported module, not this __main__ copy, so exception classes are shared.
    from cluster.cli import main as _entry

    sys.exit(_entry())
