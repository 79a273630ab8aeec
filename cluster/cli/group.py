"""`minibroker group list|describe` and `minibroker consume --group`: consumer groups, through the same
group coordinators Kafka clients use (the brokers' Kafka listeners, spoken with kafka-python), like
kafka-consumer-groups.sh and kafka-console-consumer --group."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cluster.cli.common import (
    CliError,
    Subcommands,
    add_client_options,
    add_json,
    emit,
    resolve_bootstrap,
    resolve_kafka_bootstrap,
    run_async,
)
from cluster.exit_codes import EXIT_CLUSTER_ERROR, EXIT_OK, EXIT_UNREACHABLE

if TYPE_CHECKING:
    from protocol.record_batch import Record


def _admin(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient

    try:
        return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="minibroker-group", request_timeout_ms=15000)
    except Exception as exc:  # noqa: BLE001 - kafka-python's NoBrokersAvailable and friends
        raise CliError(f"cannot reach the Kafka listeners at {bootstrap}: {exc}", EXIT_UNREACHABLE) from None


def cmd_group_list(args: argparse.Namespace) -> int:
    admin = _admin(resolve_kafka_bootstrap(args))
    try:
        groups = sorted((g["group_id"], g["protocol_type"]) for g in admin.list_groups())
    finally:
        admin.close()
    data = [{"group": g, "protocol_type": t} for g, t in groups]
    emit(args, data, lambda: "\n".join(g for g, _ in groups))
    return EXIT_OK


def cmd_group_describe(args: argparse.Namespace) -> int:
    """kafka-consumer-groups.sh --describe: per partition the committed offset, the log end and the lag,
    and the member that holds it."""
    bootstrap = resolve_kafka_bootstrap(args)
    admin = _admin(bootstrap)
    try:
        info = admin.describe_groups([args.group])[args.group]
        offsets = admin.list_group_offsets({args.group: None}).get(args.group, {})
    finally:
        admin.close()
    state, protocol = info["group_state"], info["protocol_data"]
    if state == "Dead" and not offsets:
        raise CliError(f"consumer group {args.group!r} does not exist", EXIT_CLUSTER_ERROR)
    owners: dict[tuple[str, int], tuple[str, str, str]] = {}
    for member in info["members"]:
        assignment = member.get("member_assignment") or {}
        for entry in assignment.get("assigned_partitions", []) if isinstance(assignment, dict) else []:
            for p in entry["partitions"]:
                owners[(entry["topic"], p)] = (member["member_id"], member["client_host"], member["client_id"])
    keys = sorted({(tp.topic, tp.partition) for tp in offsets} | set(owners))
    ends = run_async(_log_ends(args, keys))
    rows = []
    for topic, partition in keys:
        committed = offsets.get(_kafka_tp(topic, partition))
        current = committed.offset if committed is not None and committed.offset >= 0 else None
        end = ends.get((topic, partition))
        member, host, client = owners.get((topic, partition), ("-", "-", "-"))
        rows.append(
            {
                "group": args.group,
                "topic": topic,
                "partition": partition,
                "current_offset": current,
                "log_end_offset": end,
                "lag": end - current if end is not None and current is not None else None,
                "consumer_id": member,
                "host": host,
                "client_id": client,
            }
        )
    data = {"group": args.group, "state": state, "protocol": protocol, "partitions": rows}

    def text() -> str:
        header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]  # fmt: skip
        table = [header] + [
            [
                str("-" if r[k] is None else r[k])
                for k in (
                    "group",
                    "topic",
                    "partition",
                    "current_offset",
                    "log_end_offset",
                    "lag",
                    "consumer_id",
                    "host",
                    "client_id",
                )
            ]  # fmt: skip
            for r in rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines = [f"Consumer group '{args.group}' is {state}" + (f" ({protocol})" if protocol else "")]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
        return "\n".join(lines)

    emit(args, data, text)
    return EXIT_OK


def _kafka_tp(topic: str, partition: int) -> Any:
    from kafka import TopicPartition as KafkaTopicPartition

    return KafkaTopicPartition(topic, partition)


async def _log_ends(args: argparse.Namespace, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    from client.cluster_client import ClusterClient
    from protocol.messages import TopicPartition

    client = ClusterClient(args.bootstrap_server or resolve_bootstrap(args), request_timeout_s=10.0)
    try:
        out = {}
        for topic, partition in keys:
            try:
                await client.refresh_metadata([topic])
                error, offset = await client.list_offset(TopicPartition(topic, partition), earliest=False)
                if error == 0:
                    out[(topic, partition)] = offset
            except Exception:  # noqa: BLE001 - a partition without a leader now: no log end to show
                continue
        return out
    finally:
        await client.close()


def consume_group(
    args: argparse.Namespace, formatter: Callable[[str, int, Record], bytes], start: str | int
) -> dict[str, Any]:
    """`consume --group G`: join the group through the Kafka listeners, print what the group assigns this
    member, commit what was printed. Stops as the ungrouped consume does (--max-messages, --timeout-ms)."""
    import sys

    from kafka import KafkaConsumer

    from protocol.record_batch import Record

    if not isinstance(start, str):
        raise CliError("with --group the start is the group's committed offsets; --offset N is not for groups",
                       EXIT_CLUSTER_ERROR)  # fmt: skip
    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=resolve_kafka_bootstrap(args),
        group_id=args.group,
        client_id="minibroker-console-consumer",
        auto_offset_reset=start,
        enable_auto_commit=False,
    )
    count = 0
    last = time.monotonic()
    try:
        while args.max_messages is None or count < args.max_messages:
            if (
                args.timeout_ms is not None
                and args.timeout_ms >= 0
                and time.monotonic() - last > args.timeout_ms / 1000
            ):
                break
            batches = consumer.poll(timeout_ms=200, max_records=500)
            for tp, records in batches.items():
                room = len(records) if args.max_messages is None else max(0, args.max_messages - count)
                for r in records[:room]:
                    record = Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers or ()))
                    sys.stdout.buffer.write(formatter(tp.topic, tp.partition, record))
                    count += 1
                if room < len(records):
                    # poll moved past records this run will not print: back to the first of them, so the
                    # commit below covers exactly what was printed.
                    consumer.seek(tp, records[room].offset)
                last = time.monotonic()
            sys.stdout.flush()
            if batches:
                consumer.commit()
    finally:
        consumer.close(autocommit=False)
    return {"count": count, "corrupt": []}


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "group",
        help="list and describe consumer groups",
        description="Consumer groups, as kafka-consumer-groups.sh shows them, from the brokers' group "
        "coordinators (through their Kafka listeners).",
    )
    actions = p.add_subparsers(dest="group_action", metavar="{list,describe}", required=True)
    q = actions.add_parser("list", help="every consumer group", description="Every consumer group.")
    add_json(q)
    add_client_options(q)
    q.set_defaults(func=cmd_group_list)
    q = actions.add_parser(
        "describe",
        help="a group's members, committed offsets and lag",
        description="A group's state and, per partition, its committed offset, the log end offset, the lag "
        "and the member that holds it (kafka-consumer-groups.sh --describe).",
    )
    q.add_argument("group")
    add_json(q)
    add_client_options(q)
    q.set_defaults(func=cmd_group_describe)
