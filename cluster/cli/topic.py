"""`minibroker topic create|delete|alter|reassign|elect-leaders|list|describe`, after kafka-topics.sh,
kafka-reassign-partitions.sh and kafka-leader-election.sh."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cluster.cli.common import (
    CliError,
    Subcommands,
    add_client_json,
    check_altered,
    check_result,
    connect,
    controller_answer,
    emit,
    error_name,
    run_async,
)
from cluster.exit_codes import EXIT_CHECK_FAILED, EXIT_CLUSTER_ERROR, EXIT_OK, EXIT_USAGE
from protocol.errors import ErrorCode


async def _metadata(args: argparse.Namespace, topics: list[str] | None) -> Any:
    async with connect(args) as client:
        return await client.refresh_metadata(topics)


async def _reassignments(args: argparse.Namespace, topics: list[str] | None) -> list[Any]:
    async with connect(args) as client:
        return list((await client.list_partition_reassignments(topics)).reassignments)


def cmd_topic_create(args: argparse.Namespace) -> int:
    from server_common.log_config import topic_config_error

    configs = {}
    for item in args.config or []:
        if "=" not in item:
            raise CliError(f"--config expects key=value, got {item!r}", EXIT_USAGE)
        k, v = item.split("=", 1)
        configs[k] = v
    if (problem := topic_config_error(configs)) is not None:
        # The controller refuses it too (INVALID_CONFIG); saying so here needs no cluster.
        raise CliError(problem, EXIT_USAGE)

    async def go() -> Any:
        async with connect(args) as client:
            resp = await client.create_topic(args.topic, args.partitions, args.replication_factor, configs)
            # A broker that answered but could not reach the controller: nothing in the cluster can create.
            controller_answer(resp, "create")
            result = resp.topics[0]
            check_result(result.error_code, result.error_message, "create failed")
            await client.wait_for_leaders(args.topic, timeout_s=30.0)
            return result

    result = run_async(go())
    data = {"topic": result.name, "partitions": result.num_partitions, "replication_factor": result.replication_factor}
    emit(
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
    async def go() -> Any:
        async with connect(args) as client:
            resp = await client.delete_topics(args.topics)
            controller_answer(resp, "delete")
            return resp

    resp = run_async(go())
    results = [{"topic": r.name, "error": error_name(r.error_code), "message": r.error_message} for r in resp.responses]
    if args.json:
        emit(args, results, str)
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
            check_altered(await client.alter_topic_configs(topic, configs, []), "throttle")
    check_altered(await client.alter_broker_configs("", {key: str(rate) for key in THROTTLE_RATES}, []), "throttle")


async def _clear_reassignment_throttle(client: Any, topics: list[str] | None) -> list[str]:
    """Once nothing moves, remove what `--throttle` set (as kafka-reassign-partitions --verify does): the
    topics' throttled replica lists and the cluster-wide rates. Returns what was removed."""
    meta = await client.refresh_metadata(topics)
    removed: list[str] = []
    for t in meta.topics:
        keys = [key for key in THROTTLED_REPLICAS if t.configs.get(key)]
        if keys:
            check_altered(await client.alter_topic_configs(t.topic, {}, keys), "removing the throttle")
            removed.append(f"{', '.join(keys)} of topic {t.topic}")
    if removed:
        check_altered(await client.alter_broker_configs("", {}, list(THROTTLE_RATES)), "removing the throttle")
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
        async with connect(args) as client:
            answers: list[dict[str, Any]] = []
            if targets and args.throttle is not None:
                await _set_reassignment_throttle(client, targets, args.throttle)
            if targets:
                resp = await client.alter_partition_reassignments(targets)
                controller_answer(resp, "reassign")
                answers = [
                    {
                        "topic": r.topic,
                        "partition": r.partition,
                        "error": error_name(r.error_code),
                        "message": r.error_message,
                    }
                    for r in resp.responses
                ]
            progress = await _reassignment_progress(client, wanted)
            if args.verify and not progress:
                throttle_removed.extend(await _clear_reassignment_throttle(client, wanted))
            return answers, progress

    answers, progress = run_async(go())
    if args.json:
        emit(args, {"results": answers, "in_progress": progress, "throttle_removed": throttle_removed}, str)
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
    resp = run_async(_metadata(args, None))
    names = [t.topic for t in resp.topics]
    emit(args, names, lambda: "\n".join(names) if names else "(no topics)")
    return EXIT_OK


def cmd_topic_describe(args: argparse.Namespace) -> int:
    resp = run_async(_metadata(args, [args.topic] if args.topic else None))
    moving = {(r.topic, r.partition): r for r in run_async(_reassignments(args, [args.topic] if args.topic else None))}
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

    emit(args, out, text)
    return EXIT_OK


def cmd_topic_elect_leaders(args: argparse.Namespace) -> int:
    """kafka-leader-election.sh: PREFERRED moves leadership back to each partition's first replica where
    it is in the ISR and does not lead (after kills and restarts left leadership skewed); UNCLEAN gives a
    partition with no leader one, out of the ISR if need be (its acknowledged records may be lost)."""
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
        async with connect(args) as client:
            wanted: list[TopicPartition] | None = None
            if args.topic is not None:
                await client.refresh_metadata([args.topic])
                known = client.partitions_of(args.topic)
                if not known:
                    raise CliError(f"unknown topic {args.topic}", EXIT_CLUSTER_ERROR)
                wanted = [TopicPartition(args.topic, args.partition)] if args.partition is not None else known
            resp = await client.elect_leaders(wanted, types[kind])
            controller_answer(resp, "leader election")
        return [
            {
                "topic": r.topic,
                "partition": r.partition,
                "error": error_name(r.error_code),
                "message": r.error_message,
            }
            for r in resp.results
        ]

    results = run_async(go())
    elected = [r for r in results if r["error"] is None]
    not_needed = [r for r in results if r["error"] == ErrorCode.ELECTION_NOT_NEEDED.name]
    failed = [r for r in results if r["error"] not in (None, ErrorCode.ELECTION_NOT_NEEDED.name)]
    if args.json:
        emit(args, {"results": results}, str)
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


def cmd_topic_alter(args: argparse.Namespace) -> int:
    if args.partitions is None:
        raise CliError("give --partitions N, the topic's new partition count", EXIT_USAGE)

    async def go() -> None:
        async with connect(args) as client:
            resp = await client.create_partitions(args.topic, args.partitions)
            controller_answer(resp, "alter")
            (result,) = resp.results
            check_result(result.error_code, result.error_message, f"cannot alter {args.topic}")
            await client.wait_for_leaders(args.topic, timeout_s=30.0, partitions=args.partitions)

    run_async(go())
    data = {"topic": args.topic, "partitions": args.partitions}
    emit(args, data, lambda: f"topic {args.topic} now has {args.partitions} partitions")
    return EXIT_OK


def register(sub: Subcommands) -> None:
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
    add_client_json(p)
    p.set_defaults(func=cmd_topic_create)
    p = tsub.add_parser(
        "delete",
        help="delete topics",
        description="Delete topics: their metadata goes at once and every broker deletes its logs "
        "(STOP_REPLICA); the name can be created again and starts empty. Exit 4 if a topic does not exist.",
    )
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    add_client_json(p)
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
    add_client_json(p)
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
    add_client_json(p)
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
    add_client_json(p)
    p.set_defaults(func=cmd_topic_elect_leaders)
    p = tsub.add_parser("list", help="list topics", description="List topics.")
    add_client_json(p)
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
    add_client_json(p)
    p.set_defaults(func=cmd_topic_describe)
