"""DESCRIBE_CONFIGS, as Kafka's ConfigHelper answers it: every config of a topic or a broker with the value
in effect on this broker and where that value comes from.

A topic config's value is, in order of precedence:

1. the topic's own (DYNAMIC_TOPIC_CONFIG): set at creation or by INCREMENTAL_ALTER_CONFIGS;
2. the cluster's setting of the broker-level key it stands for, when that differs from Kafka's default
   (STATIC_BROKER_CONFIG): this broker's `log.*` keys and `message.max.bytes`, and the controller's
   `min.insync.replicas` and `unclean.leader.election.enable` (pushed in UPDATE_METADATA);
3. Kafka's default (DEFAULT_CONFIG).

Each entry lists that chain as its synonyms, first the one in effect, so a user sees what deleting the
topic's own value falls back to. A setting equal to Kafka's default is reported as the default: the two
cannot be told apart and mean the same.

A broker config's value is, in order: this broker's dynamic setting (DYNAMIC_BROKER_CONFIG) and the
cluster-wide dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG), both set by INCREMENTAL_ALTER_CONFIGS and
pushed in UPDATE_METADATA (only the replication throttle rates can be); the broker's own setting from its
file, environment or command line (STATIC_BROKER_CONFIG); the default (DEFAULT_CONFIG). The cluster
default itself (resource name "") lists only its dynamic configs, as Kafka's does. Sensitive configs (the
cluster secret) are listed without their value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

from broker.config import BROKER_CONFIG, REQUIRED
from protocol.messages import ConfigSource, DescribeConfigsResourceResult, DescribeConfigsSynonym
from server_common.log_config import KAFKA_TOPIC_CONFIG_DEFAULTS, TOPIC_CONFIG_SYNONYMS, LogConfig, log_config_values

# Kafka's topic-level name for the key, and the broker-level name topics may also be created with.
_ALIASES = {"max.message.bytes": "message.max.bytes"}


def topic_config_defaults(
    log_config: LogConfig, min_insync_replicas: int, controller_defaults: Mapping[str, str]
) -> dict[str, str]:
    """What a topic that sets no key of its own gets on this broker: the broker's log settings and its
    min.insync.replicas, overridden by the defaults the controller gives topics (when it runs with one)."""
    return {
        **log_config_values(log_config),
        "min.insync.replicas": str(min_insync_replicas),
        **controller_defaults,
    }


def describe_topic_configs(
    topic_configs: Mapping[str, str], defaults: Mapping[str, str], keys: Iterable[str] | None = None
) -> list[DescribeConfigsResourceResult]:
    """Every topic config (or those named in `keys`), sorted by name. `topic_configs` are the ones set on
    the topic, `defaults` what it has otherwise (`topic_config_defaults`)."""
    names = set(TOPIC_CONFIG_SYNONYMS) | set(KAFKA_TOPIC_CONFIG_DEFAULTS) | set(topic_configs)
    if keys is not None:
        names &= set(keys)
    return [_entry(name, topic_configs, defaults) for name in sorted(names)]


def _entry(name: str, topic_configs: Mapping[str, str], defaults: Mapping[str, str]) -> DescribeConfigsResourceResult:
    synonyms: list[DescribeConfigsSynonym] = []
    own = topic_configs.get(name)
    if own is None and name in _ALIASES:
        own = topic_configs.get(_ALIASES[name])
    if own is not None:
        synonyms.append(DescribeConfigsSynonym(name, own, int(ConfigSource.DYNAMIC_TOPIC_CONFIG)))
    broker_key = TOPIC_CONFIG_SYNONYMS.get(name)
    if broker_key is not None:
        kafka_default = KAFKA_TOPIC_CONFIG_DEFAULTS[name]
        default = defaults.get(name, kafka_default)
        if default != kafka_default:
            synonyms.append(DescribeConfigsSynonym(broker_key, default, int(ConfigSource.STATIC_BROKER_CONFIG)))
        synonyms.append(DescribeConfigsSynonym(broker_key, kafka_default, int(ConfigSource.DEFAULT_CONFIG)))
    elif name in KAFKA_TOPIC_CONFIG_DEFAULTS:  # a topic-only key (the throttled replica lists)
        synonyms.append(
            DescribeConfigsSynonym(name, KAFKA_TOPIC_CONFIG_DEFAULTS[name], int(ConfigSource.DEFAULT_CONFIG))
        )
    in_effect = synonyms[0]
    return DescribeConfigsResourceResult(
        name=name, value=in_effect.value, config_source=in_effect.source, synonyms=synonyms
    )


SENSITIVE_BROKER_CONFIGS = frozenset({"cluster.secret"})
#: Configs whose value is a path on the broker's host: shown as the directory's name only to a connection
#: that did not authenticate when a cluster secret is set, as DESCRIBE_LOG_DIRS shows `log_dir`.
PATH_BROKER_CONFIGS = frozenset({"log.dirs", "metrics.dir"})


def _last_component(path: str | None) -> str | None:
    return None if path is None else ",".join(PurePath(p).name for p in path.split(","))


def _config_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def describe_broker_configs(
    entity: str,
    static: Mapping[str, Any],
    dynamic: Mapping[str, Mapping[str, str]],
    keys: Iterable[str] | None = None,
    hide_paths: bool = False,
) -> list[DescribeConfigsResourceResult]:
    """Broker `entity`'s configs (every key of BROKER_CONFIG), or with "" the cluster's dynamic defaults,
    sorted by name. `static` is this broker's resolved config, `dynamic` the dynamic broker configs by
    entity ("" for the default) as UPDATE_METADATA brought them. `hide_paths`: PATH_BROKER_CONFIGS show
    the last component of their path only."""
    defaults = dynamic.get("", {})
    if entity == "":
        names = sorted(defaults if keys is None else set(defaults) & set(keys))
        source = int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        return [
            DescribeConfigsResourceResult(
                name=n,
                value=defaults[n],
                config_source=source,
                synonyms=[DescribeConfigsSynonym(n, defaults[n], source)],
            )
            for n in names
        ]
    own = dynamic.get(entity, {})
    layers = ((own, ConfigSource.DYNAMIC_BROKER_CONFIG), (defaults, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
    names = sorted(BROKER_CONFIG.keys if keys is None else set(BROKER_CONFIG.keys) & set(keys))
    results = []
    for name in names:
        synonyms: list[DescribeConfigsSynonym] = []
        for layer, source in layers:
            if name in layer:
                synonyms.append(DescribeConfigsSynonym(name, layer[name], int(source)))
        default = BROKER_CONFIG.keys[name].default
        value = static.get(name)
        if value is not None and (default is REQUIRED or value != default):
            synonyms.append(DescribeConfigsSynonym(name, _config_text(value), int(ConfigSource.STATIC_BROKER_CONFIG)))
        if default is not None and default is not REQUIRED:
            synonyms.append(DescribeConfigsSynonym(name, _config_text(default), int(ConfigSource.DEFAULT_CONFIG)))
        sensitive = name in SENSITIVE_BROKER_CONFIGS
        if sensitive:
            synonyms = [DescribeConfigsSynonym(x.name, None, x.source) for x in synonyms]
        elif hide_paths and name in PATH_BROKER_CONFIGS:
            synonyms = [DescribeConfigsSynonym(x.name, _last_component(x.value), x.source) for x in synonyms]
        in_effect = synonyms[0] if synonyms else DescribeConfigsSynonym(name, None, int(ConfigSource.DEFAULT_CONFIG))
        results.append(
            DescribeConfigsResourceResult(
                name=name,
                value=in_effect.value,
                config_source=in_effect.source,
                is_sensitive=sensitive,
                synonyms=synonyms,
            )
        )
    return results
