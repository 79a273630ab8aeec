"""`minibroker chaos leader-kill|run|heal`: fault injection with a verdict (cluster/chaos.py,
cluster/chaos_faults.py), and the removal of whatever a run left behind. The experiments run against a
local cluster (`--dir`), a fresh one, or the containers of a compose project (`--compose`,
cluster/chaos_nodes.py)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster.cli.common import DEFAULT_DIR, CliError, Option, Subcommands, add_options, run_async
from cluster.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from cluster.local_cluster import LocalClusterState

if TYPE_CHECKING:
    from cluster.chaos_nodes import ComposeNodes

# cluster.chaos_clients.CLIENTS, named here so that building the parser does not import the clients'
# module (protocol messages, the KafkaJS side process); tests/cluster/test_cli_imports.py holds them equal.
CLIENT_CHOICES = ("minibroker", "confluent-kafka", "kafka-python", "aiokafka", "kafkajs")

# The options the experiments share, defined once; each subcommand lists the ones it takes, in its order.
OPTIONS: dict[str, Option] = {
    "--rounds": {"type": int},
    "--seed": {"type": int, "default": 0},
    "--dir": {"help": "use the running local cluster in this dir (default: a fresh 3-broker cluster in a temp dir)"},
    "--compose": {
        "nargs": "?",
        "const": "docker-compose.yml",
        "metavar": "FILE",
        "help": "use the running compose project of this file (default docker-compose.yml): its broker containers "
        "are killed, paused and started through the Docker CLI (docs/compose.md)",
    },
    "--compose-project": {
        "metavar": "NAME",
        "help": "with --compose: the project name, as `docker compose -p` (default: Compose's own choice)",
    },
    "--json": {"metavar": "FILE", "help": "write the JSON report here ('-' for stdout)"},
    "--topic": {"default": "chaos"},
    "--partitions": {"type": int, "default": 6},
    "--producers": {"type": int, "default": 2},
    "--client": {
        "choices": list(CLIENT_CHOICES),
        "default": "minibroker",
        "help": "the producers: minibroker's own client (msgpack listener), or a real Kafka client on the "
        "Kafka listeners (kafkajs runs under Node.js, installed by scripts/setup.sh); with a Kafka client a "
        "consumer group of --group-consumers members rides along (default: minibroker)",
    },
    "--group-consumers": {"type": int, "default": 2, "help": "members of the consumer group with --client"},
    "--no-idempotence": {
        "action": "store_true",
        "help": "producers without idempotence: an indeterminate write is never resent (default: idempotent, "
        "indeterminate writes are resent and must land exactly once)",
    },
}


VERDICT_HELP = (
    "Acknowledged means acknowledged by a broker, by the produce.ack.journal every broker of a fresh chaos "
    "cluster keeps (a --dir cluster keeps one when started with `cluster up --ack-journal`; without, the "
    "client's delivery reports are taken at their word). Exit 0 when valid; 1 when not (the cluster lost, "
    "duplicated or diverged on what a broker acknowledged); 5 when valid but the client reported records "
    "delivered that no broker acknowledged: a client bug, listed with its partitions and offsets, kept apart "
    "from 1 so that a script neither blames the cluster for it nor misses it."
)


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _check_client(args: argparse.Namespace) -> None:
    from cluster.chaos_clients import ClientMissing, check_client

    if args.group_consumers < 1:
        raise CliError("--group-consumers must be >= 1", EXIT_USAGE)
    try:
        check_client(args.client)
    except ClientMissing as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _compose_nodes(args: argparse.Namespace) -> ComposeNodes | None:
    """The compose project named by --compose, read from its containers; None without --compose."""
    from cluster.chaos_nodes import ComposeNodes

    if args.compose is None:
        if args.compose_project:
            raise CliError("--compose-project needs --compose", EXIT_USAGE)
        return None
    if args.dir:
        raise CliError("--dir and --compose name two clusters: give one", EXIT_USAGE)
    if not Path(args.compose).is_file():
        raise CliError(f"--compose: no compose file {args.compose}", EXIT_USAGE)
    return ComposeNodes.load(args.compose, args.compose_project)


def cmd_chaos_leader_kill(args: argparse.Namespace) -> int:
    from cluster.chaos import finish_report, render_report, run_leader_kill

    _check_client(args)
    if args.rounds < 1 or args.interval_ms < 0 or args.producers < 1 or args.partitions < 1 or args.down_ms < 0:
        raise CliError(
            "--rounds, --producers and --partitions must be >= 1, --interval-ms and --down-ms >= 0", EXIT_USAGE
        )
    if args.metrics_dir and (args.dir or args.compose is not None):
        raise CliError("--metrics-dir is for a fresh cluster only", EXIT_USAGE)
    nodes = _compose_nodes(args)
    if not args.restart:
        if nodes is not None:
            brokers = len(nodes.brokers)
        else:
            brokers = len(LocalClusterState.load(Path(args.dir)).brokers) if args.dir else 3
        if args.rounds >= brokers:
            # Each round kills a broker for good: the last would leave none to lead or to check.
            raise CliError(
                f"without --restart each round kills a broker for good, and --rounds {args.rounds} would kill "
                f"all {brokers}: add --restart, or use at most {brokers - 1} rounds",
                EXIT_USAGE,
            )
    report = run_async(run_leader_kill(args, _progress, nodes))
    return finish_report(report, args.json, render_report(report))


def _run_checks(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Check the flags before anything starts; the fault kinds that need the network tools, and the
    controller faults asked for (by name, with their shape)."""
    from cluster.chaos_faults import NETWORK_KINDS, parse_faults
    from cluster.chaos_quorum import is_controller_fault
    from cluster.network_faults import FaultToolsMissing, check_tools

    _check_client(args)
    try:
        faults = parse_faults(args.faults)
    except ValueError as exc:
        raise CliError(f"--faults: {exc}", EXIT_USAGE) from None
    if args.rounds < 1 or args.fault_ms < 0 or args.interval_ms < 0:
        raise CliError("--rounds must be >= 1, --fault-ms and --interval-ms >= 0", EXIT_USAGE)
    needs_net = sorted({k for k, _ in faults if k in NETWORK_KINDS})
    if needs_net:
        try:
            check_tools()
        except FaultToolsMissing as exc:
            raise CliError(f"{', '.join(needs_net)}: {exc}", EXIT_USAGE) from None
    on_controllers = sorted({k + (f":{s}" if s else "") for k, s in faults if is_controller_fault(k, s)})
    return needs_net, on_controllers


def cmd_chaos_run(args: argparse.Namespace) -> int:
    from cluster.chaos import finish_report
    from cluster.chaos_faults import render_fault_report, resume_all, run_faults
    from cluster.chaos_quorum import MIN_CONTROLLERS
    from cluster.network_faults import NetworkFaultError, NetworkFaults

    needs_net, on_controllers = _run_checks(args)
    temp: tempfile.TemporaryDirectory[str] | None = None
    state: LocalClusterState | None = None
    nodes = _compose_nodes(args)
    if nodes is not None:
        if needs_net:
            raise CliError(
                f"{', '.join(needs_net)}: network faults need an address per node, and "
                f"{nodes.network_faults_refused()}; against a compose project use kill, kill-restart and pause",
                EXIT_USAGE,
            )
        if on_controllers:
            raise CliError(
                f"{', '.join(on_controllers)}: controller faults act on local processes; against a compose "
                "project use kill, kill-restart and pause on the brokers (or `docker compose kill controller-N`)",
                EXIT_USAGE,
            )
        state = nodes.state()
        if len(state.brokers) != 3:
            raise CliError("chaos run needs a cluster of exactly 3 brokers", EXIT_USAGE)
        cluster_dir = Path(state.dir)
    elif args.dir:
        cluster_dir = Path(args.dir).resolve()
        state = LocalClusterState.load(cluster_dir)
        hosts = [n.host for n in state.nodes]
        if needs_net and len(set(hosts)) < len(hosts):
            raise CliError(
                f"the nodes of {cluster_dir} share an address; network faults need one per node "
                "(start it again with this version's `cluster up`)",
                EXIT_USAGE,
            )
        if len(state.brokers) != 3:
            raise CliError("chaos run needs a cluster of exactly 3 brokers", EXIT_USAGE)
        if on_controllers and len(state.controllers) < MIN_CONTROLLERS:
            raise CliError(
                f"{', '.join(on_controllers)}: controller faults need a quorum of at least {MIN_CONTROLLERS} "
                f"controllers, so that one can fail; {cluster_dir} has {len(state.controllers)} "
                "(`cluster up --controllers 3`)",
                EXIT_USAGE,
            )
    else:
        temp = tempfile.TemporaryDirectory(prefix="minibroker-chaos-")
        cluster_dir = Path(temp.name)
    net = NetworkFaults(cluster_dir) if needs_net else None

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        report = run_async(run_faults(args, state, None if state else cluster_dir, _progress, net, nodes))
    except KeyboardInterrupt:
        print("minibroker: interrupted; faults removed", file=sys.stderr)
        return EXIT_INTERRUPTED
    except NetworkFaultError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None  # (a ClusterError: main, exit 3)
    finally:
        # Whatever happened: no rule of ours stays behind, no node stays paused.
        if net is not None:
            net.remove()
        if nodes is not None:
            nodes.resume_all()
        else:
            resume_all(cluster_dir)
        signal.signal(signal.SIGTERM, previous)
        if temp is not None:
            with contextlib.suppress(OSError):
                temp.cleanup()
    return finish_report(report, args.json, render_fault_report(report))


def cmd_chaos_heal(args: argparse.Namespace) -> int:
    """`minibroker chaos heal --dir D`: remove every rule a run against D left, resume its paused nodes."""
    from cluster.chaos_faults import resume_all
    from cluster.network_faults import FaultToolsMissing, NetworkFaults, check_tools

    cluster_dir = Path(args.dir).resolve()
    try:
        check_tools()
    except FaultToolsMissing as exc:
        raise CliError(f"chaos heal: {exc}", EXIT_USAGE) from None
    net = NetworkFaults(cluster_dir)
    net.remove()
    resume_all(cluster_dir)
    print(f"removed chain {net.chain} and qdisc {net.handle}: (when present); resumed every node of {cluster_dir}")
    return EXIT_OK


def register(sub: Subcommands) -> None:
    ch = sub.add_parser("chaos", help="fault injection with a verdict", description="Chaos experiments.")
    chsub = ch.add_subparsers(dest="chaos_command", required=True, metavar="EXPERIMENT")
    p = chsub.add_parser(
        "leader-kill",
        help="SIGKILL leaders under acks=all load, then check every acked write",
        description="Repeatedly SIGKILL the broker leading the most partitions while producers write with "
        "acks=all, then check for lost writes, duplicates, inconsistent offsets, divergent replicas and "
        "offsets going backwards. " + VERDICT_HELP,
    )
    add_options(p, OPTIONS, "--rounds", "--dir", "--compose", "--compose-project", rounds=3)
    p.add_argument("--interval-ms", type=int, default=3000, help="time between kills")
    add_options(p, OPTIONS, "--seed")
    p.add_argument("--restart", action="store_true", help="restart each killed broker before the next kill")
    p.add_argument(
        "--down-ms",
        type=int,
        default=0,
        help="with --restart: keep each killed broker down at least this long (its followers fall behind)",
    )
    add_options(p, OPTIONS, "--json", "--topic", "--partitions", "--producers")
    p.add_argument("--metrics-dir", help="fresh cluster only: write broker metrics here")
    add_options(p, OPTIONS, "--no-idempotence", "--client", "--group-consumers")
    p.set_defaults(func=cmd_chaos_leader_kill)
    p = chsub.add_parser(
        "run",
        help="kills, pauses, partitions, slow and lossy links under acks=all load, then check every acked write",
        description="Inject one fault per round into the broker leading the most partitions, kinds in turn from "
        "--faults: kill, kill-restart, pause, partition[:SHAPE] (isolate-leader, leader-from-followers, "
        "leader-from-controller, isolate-controller, one-way; drawn by --seed when left out), delay, loss, "
        "clients-see-old-leader; or into the active controller (the quorum's leader): kill-controller, "
        "pause-controller, partition:isolate-active-controller, partition:active-controller-from-voters, "
        "each reported with the time the cluster had no active controller. Network faults need root, "
        "iptables and tc; their rules live in a chain of their own and are always removed. Reports per fault, "
        "and the oracle's verdict on acks=all writes. " + VERDICT_HELP,
    )
    p.add_argument("--faults", default="kill,pause,partition,delay", help="comma-separated fault kinds")
    add_options(p, OPTIONS, "--rounds", "--seed", "--dir", "--compose", "--compose-project", rounds=4)
    p.add_argument("--fault-ms", type=int, default=3000, help="how long each fault lasts (at least until failover)")
    p.add_argument("--interval-ms", type=int, default=500, help="time between a fault's recovery and the next")
    add_options(
        p,
        OPTIONS,
        "--json",
        "--topic",
        "--partitions",
        "--producers",
        "--no-idempotence",
        "--client",
        "--group-consumers",
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
