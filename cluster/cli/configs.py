"""`minibroker configs describe|alter`, after kafka-configs.sh: topic configs, and the brokers' dynamic
configs (the replication throttle rates)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from client.errors import ClusterUnavailableError
from cluster.cli.common import (
    CliError,
    Subcommands,
    add_client_json,
    check_result,
    connect,
    controller_answer,
    emit,
    run_async,
)
from cluster.exit_codes import EXIT_CLUSTER_ERROR, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from client.cluster_client import ClusterClient


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
    from protocol.messages import ConfigResourceType, DescribeConfigsRequest, DescribeConfigsResource

    entity = _broker_entity(args)

    async def go() -> Any:
        async with connect(args) as client:
            request = DescribeConfigsRequest([DescribeConfigsResource(int(ConfigResourceType.BROKER), entity)])
            if not entity:
                return await client.send_any(request)
            await client.refresh_metadata([])
            if int(entity) not in client.brokers:
                raise CliError(f"broker {entity} is not in the cluster", EXIT_CLUSTER_ERROR)
            return await client.send_to(int(entity), request)

    resp = run_async(go())
    (result,) = resp.results
    check_result(result.error_code, result.error_message, "cannot describe broker configs")
    configs = _config_entries(result.configs)
    if not args.all:
        # Without --all, as kafka-configs.sh: only what was set at runtime for this entity.
        own = "DYNAMIC_DEFAULT_BROKER_CONFIG" if not entity else "DYNAMIC_BROKER_CONFIG"
        configs = [c for c in configs if c["source"] == own]
    if not entity:
        heading = "Default configs for brokers in the cluster are:"
    else:
        heading = f"{'All' if args.all else 'Dynamic'} configs for broker {entity} are:"
    emit(args, {"broker": entity or None, "configs": configs}, lambda: "\n".join(_config_lines(heading, configs)))
    return EXIT_OK


def cmd_configs_describe(args: argparse.Namespace) -> int:
    if args.entity_type == "brokers":
        return _describe_broker_configs(args)
    if args.entity_default:
        raise CliError("--entity-default goes with --entity-type brokers", EXIT_USAGE)
    topic = _configs_topic(args)

    async def go() -> list[Any]:
        async with connect(args) as client:
            names = [topic] if topic else [t.topic for t in (await client.refresh_metadata(None)).topics]
            results = []
            for name in names:
                resp = await client.describe_topic_configs(name)
                controller_answer(resp, "describe")
                results.extend(resp.results)
            return results

    out = []
    for result in run_async(go()):
        check_result(result.error_code, result.error_message, f"cannot describe configs of {result.resource_name}")
        out.append({"topic": result.resource_name, "configs": _config_entries(result.configs)})

    def text() -> str:
        # kafka-configs.sh --describe --all's layout
        lines = [line for t in out for line in _config_lines(f"All configs for topic {t['topic']} are:", t["configs"])]
        return "\n".join(lines) if lines else "(no topics)"

    emit(args, out, text)
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


async def _until_shown(
    client: ClusterClient, topic: str, adds: dict[str, str], deletes: list[str], timeout_s: float
) -> bool:
    """Whether the broker the client asks shows the change within `timeout_s`: the controller has committed it,
    and brokers learn it from its next push. A broker that cannot be asked does not show it (the change stands)."""
    from protocol.messages import ConfigSource
    from server_common.poll import wait_until

    async def shown() -> bool:
        results = (await client.describe_topic_configs(topic)).results
        configs = results[0].configs if len(results) == 1 else []
        own = {c.name: c.value for c in configs if c.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG}
        return all(own.get(k) == v for k, v in adds.items()) and not any(k in own for k in deletes)

    try:
        return await wait_until(shown, timeout_s, clock=client.time)
    except ClusterUnavailableError:
        return False


def cmd_configs_alter(args: argparse.Namespace) -> int:
    if args.entity_type == "brokers":
        return _alter_broker_configs(args)
    topic = _configs_topic(args)
    if topic is None:
        raise CliError("give --topic TOPIC (or --entity-type topics --entity-name TOPIC)", EXIT_USAGE)
    adds, deletes = _config_changes(args, _topic_config_problem)

    async def go() -> bool:
        async with connect(args) as client:
            resp = await client.alter_topic_configs(topic, adds, deletes)
            controller_answer(resp, "alter")
            (result,) = resp.responses
            check_result(result.error_code, result.error_message, f"cannot alter configs of {topic}")
            return await _until_shown(client, topic, adds, deletes, timeout_s=10.0)

    if not run_async(go()):
        print(
            f"minibroker: note: the change is committed; {args.bootstrap_server} does not show it yet", file=sys.stderr
        )
    data = {"topic": topic, "set": adds, "deleted": deletes}
    emit(args, data, lambda: f"Completed updating config for topic {topic}.")
    return EXIT_OK


def _alter_broker_configs(args: argparse.Namespace) -> int:
    """kafka-configs.sh --entity-type brokers (--entity-default | --entity-name ID): the dynamic replication
    throttle rates."""
    from server_common.dynamic_config import dynamic_broker_config_error

    entity = _broker_entity(args)
    adds, deletes = _config_changes(args, dynamic_broker_config_error)

    async def go() -> None:
        async with connect(args) as client:
            resp = await client.alter_broker_configs(entity, adds, deletes)
            controller_answer(resp, "alter")
            (result,) = resp.responses
            check_result(result.error_code, result.error_message, "cannot alter broker configs")

    run_async(go())
    what = "default config for brokers in the cluster" if not entity else f"config for broker {entity}"
    emit(args, {"broker": entity or None, "set": adds, "deleted": deletes}, lambda: f"Completed updating {what}.")
    return EXIT_OK


def register(sub: Subcommands) -> None:
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
        add_client_json(p)
