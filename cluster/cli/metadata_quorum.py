"""`minibroker metadata-quorum describe --status|--replication`: the controller quorum, as Kafka's
kafka-metadata-quorum.sh shows it (DESCRIBE_QUORUM, answered by the quorum's leader: through any broker,
which forwards it, or straight from the controllers with --bootstrap-controller)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster.cli.common import CliError, add_client_json, connect, emit, run_async
from cluster.exit_codes import EXIT_CLUSTER_ERROR, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from cluster.local_cluster import ClusterError, LocalClusterState
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from protocol.messages import DescribeQuorumResponse


async def _from_controllers(addresses: list[tuple[str, int]]) -> DescribeQuorumResponse | None:
    """The leader's answer, asking the controllers in turn (a follower answers NOT_LEADER_OR_FOLLOWER)."""
    from network.connection import BrokerConnection
    from protocol.messages import DescribeQuorumRequest

    answer = None
    for host, port in addresses:
        try:
            conn = await BrokerConnection.connect(host, port, "metadata-quorum", timeout_s=2.0)
        except (TimeoutError, OSError):
            continue
        try:
            answer = await conn.send(DescribeQuorumRequest(), timeout_s=5.0)
        except (TimeoutError, ConnectionError, OSError):
            continue
        finally:
            await conn.close()
        if answer.error_code == ErrorCode.NONE:
            return answer  # type: ignore[no-any-return]
    return answer


async def _describe(args: argparse.Namespace) -> DescribeQuorumResponse | None:
    from protocol.messages import DescribeQuorumRequest

    if args.bootstrap_controller:
        addresses = []
        for item in args.bootstrap_controller.split(","):
            host, _, port = item.strip().rpartition(":")
            if not host or not port.isdigit():
                raise CliError(f"--bootstrap-controller: {item!r} is not HOST:PORT", EXIT_USAGE)
            addresses.append((host, int(port)))
        return await _from_controllers(addresses)
    async with connect(args) as client:
        answer: DescribeQuorumResponse = await client.send_any(DescribeQuorumRequest(), timeout_s=10.0)
        return answer


def describe_document(answer: DescribeQuorumResponse, now_ms: int) -> dict[str, Any]:
    """--status and --replication in one JSON document (Kafka's field names)."""
    leader_end = max((v.log_end_offset for v in answer.current_voters), default=-1)

    def replica(r: Any, status: str) -> dict[str, Any]:
        return {
            "NodeId": r.replica_id,
            "LogEndOffset": r.log_end_offset,
            "Lag": max(leader_end - r.log_end_offset, 0),
            "LastFetchTimestamp": r.last_fetch_timestamp,
            "LastCaughtUpTimestamp": r.last_caught_up_timestamp,
            "LastCaughtUpTimeMsAgo": now_ms - r.last_caught_up_timestamp if r.last_caught_up_timestamp >= 0 else None,
            "Status": status,
        }

    replication = [
        replica(v, "Leader" if v.replica_id == answer.leader_id else "Follower") for v in answer.current_voters
    ] + [replica(o, "Observer") for o in answer.observers]
    followers = [r for r in replication if r["Status"] == "Follower"]
    return {
        "LeaderId": answer.leader_id,
        "LeaderEpoch": answer.leader_epoch,
        "HighWatermark": answer.high_watermark,
        "MaxFollowerLag": max((r["Lag"] for r in followers), default=0),
        "MaxFollowerLagTimeMs": max((r["LastCaughtUpTimeMsAgo"] or 0 for r in followers), default=0),
        "CurrentVoters": sorted(v.replica_id for v in answer.current_voters),
        "CurrentObservers": sorted(o.replica_id for o in answer.observers),
        "Replication": replication,
    }


def _render(doc: dict[str, Any], status: bool) -> str:
    if status:
        keys = ["LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag", "MaxFollowerLagTimeMs"]
        lines = [f"{k + ':':<23} {doc[k]}" for k in keys]
        lines.append(f"{'CurrentVoters:':<23} [{','.join(map(str, doc['CurrentVoters']))}]")
        lines.append(f"{'CurrentObservers:':<23} [{','.join(map(str, doc['CurrentObservers']))}]")
        return "\n".join(lines)
    header = f"{'NodeId':<8}{'LogEndOffset':<14}{'Lag':<6}{'LastFetchTimestamp':<20}{'LastCaughtUpTimestamp':<23}Status"
    rows = [
        f"{r['NodeId']:<8}{r['LogEndOffset']:<14}{r['Lag']:<6}{r['LastFetchTimestamp']:<20}"
        f"{r['LastCaughtUpTimestamp']:<23}{r['Status']}"
        for r in doc["Replication"]
    ]
    return "\n".join([header, *rows])


def cmd_describe(args: argparse.Namespace) -> int:
    if not args.status and not args.replication:
        raise CliError("describe needs --status or --replication", EXIT_USAGE)
    if not args.bootstrap_controller and args.dir:
        # A local cluster: ask its controllers themselves, which answer when every broker is down too.
        try:
            state = LocalClusterState.load(Path(args.dir))
        except ClusterError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        args.bootstrap_controller = ",".join(f"{c.host}:{c.port}" for c in state.controllers)
    answer = run_async(_describe(args))
    if answer is None:
        raise CliError("no controller answered DESCRIBE_QUORUM", EXIT_UNREACHABLE)
    if answer.error_code != ErrorCode.NONE:
        raise CliError(
            f"DESCRIBE_QUORUM failed: {ErrorCode(answer.error_code).name}: {answer.error_message} (no active "
            "controller: the quorum has no leader the asked node knows of)",
            EXIT_UNREACHABLE
            if answer.error_code in (ErrorCode.NOT_CONTROLLER, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            else EXIT_CLUSTER_ERROR,
        )
    doc = describe_document(answer, int(time.time() * 1000))
    emit(args, doc, lambda: _render(doc, args.status))
    return EXIT_OK


def register(sub: Any) -> None:
    mq = sub.add_parser(
        "metadata-quorum",
        help="describe the controller quorum (kafka-metadata-quorum.sh)",
        description="The controller quorum that replicates the metadata log: its leader (the active controller), "
        "epoch and high watermark, and each voter's and observer's (broker's) progress.",
    )
    msub = mq.add_subparsers(dest="quorum_command", required=True, metavar="SUBCOMMAND")
    p = msub.add_parser(
        "describe",
        help="--status or --replication",
        description="Describe the quorum: --status (leader, epoch, high watermark, the largest follower lag) or "
        "--replication (each voter's and observer's log end offset, lag and last fetch). Asks through a broker "
        "(--bootstrap-server, --dir) or the controllers themselves (--bootstrap-controller). Exit 3 when no "
        "active controller answers.",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--status", action="store_true", help="the quorum's leader, epoch, high watermark and lag")
    which.add_argument("--replication", action="store_true", help="each replica's log end offset, lag and fetches")
    p.add_argument(
        "--bootstrap-controller",
        metavar="HOST:PORT[,...]",
        help="ask these controllers directly (a follower refers to the leader; the first leader's answer wins)",
    )
    add_client_json(p)
    p.set_defaults(func=cmd_describe)
