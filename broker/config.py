"""The one config loader: Kafka's dotted keys from a properties file, then env vars, then CLI overrides.

How this works
--------------
A `ConfigDef` lists every key a process accepts with its type, default and documentation. `load_config`
reads a Java-style properties file (`key=value`, `#` comments), then environment variables named
`MINIBROKER_` + the key upper-cased with dots and dashes as underscores (`replica.fetch.max.bytes` ←
`MINIBROKER_REPLICA_FETCH_MAX_BYTES`), then `--override key=value` pairs from the command line; later
sources win. A key no definition knows is an error that names it (a typo must not silently fall back to
a default), and so is a value that does not parse as the key's type.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server_common.config import ConfigError

ENV_PREFIX = "MINIBROKER_"
REQUIRED = object()

# Every process kind's config keys, by env name: one environment is often shared by a controller and
# its brokers (a compose anchor, a shell), so a variable for another kind of process is not a typo.
# Variables the tools read themselves are not config keys either.
_ENV_NAMES_OF_ALL_KINDS: set[str] = set()
TOOL_ENV_VARS = frozenset({"MINIBROKER_BOOTSTRAP_SERVER", "MINIBROKER_DEMO_DIR", "MINIBROKER_DEMO_BASE_PORT"})


def unknown_key_error(name: str, known: Iterable[str], source: str) -> ConfigError:
    """The error for a key nobody knows, with the closest known key when one is close (a typo)."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"unknown config key {name!r} ({source}){hint}")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: type
    default: Any
    doc: str


def _parse(key: ConfigKey, raw: Any, source: str) -> Any:
    if raw is None:
        return None
    if key.type is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ConfigError(f"{key.name}: expected true or false, got {raw!r} ({source})")
    if key.type is int:
        if isinstance(raw, bool):
            raise ConfigError(f"{key.name}: expected an integer, got {raw!r} ({source})")
        try:
            return int(str(raw).strip().replace("_", ""))
        except ValueError:
            raise ConfigError(f"{key.name}: expected an integer, got {raw!r} ({source})") from None
    return str(raw).strip()


class ConfigDef:
    def __init__(self, keys: Iterable[ConfigKey]) -> None:
        self.keys = {k.name: k for k in keys}
        _ENV_NAMES_OF_ALL_KINDS.update(self.env_name(k) for k in self.keys)

    def env_name(self, key: str) -> str:
        return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")

    def parse(self, values: Mapping[str, Any], source: str) -> dict[str, Any]:
        out = {}
        for name, raw in values.items():
            key = self.keys.get(name)
            if key is None:
                raise unknown_key_error(name, self.keys, source)
            out[name] = _parse(key, raw, source)
        return out

    def from_env(self, environ: Mapping[str, str]) -> dict[str, Any]:
        by_env = {self.env_name(k): k for k in self.keys}
        values = {}
        for var, raw in environ.items():
            if not var.startswith(ENV_PREFIX):
                continue
            name = by_env.get(var)
            if name is None:
                if var in _ENV_NAMES_OF_ALL_KINDS or var in TOOL_ENV_VARS:
                    continue  # meant for another kind of process, or for a tool
                raise ConfigError(f"unknown config environment variable {var} (no config key matches it)")
            values[name] = raw
        return self.parse(values, "environment")

    def resolve(self, *layers: Mapping[str, Any]) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for layer in layers:
            merged.update(layer)
        out = {}
        for name, key in self.keys.items():
            if name in merged:
                out[name] = merged[name]
            elif key.default is REQUIRED:
                raise ConfigError(f"missing required config {name!r}: {key.doc}")
            else:
                out[name] = key.default
        return out


def read_properties(path: Path) -> dict[str, str]:
    """Java properties subset: `key=value` or `key: value` lines, `#`/`!` comments, blank lines."""
    values: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {stripped!r}")
        values[stripped[:sep].strip()] = stripped[sep + 1 :].strip()
    return values


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    out = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--override expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = value
    return out


def load_config(
    definition: ConfigDef,
    config_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    file_values = definition.parse(read_properties(config_file), str(config_file)) if config_file else {}
    env_values = definition.from_env(os.environ if environ is None else environ)
    cli_values = definition.parse(overrides or {}, "command line")
    return definition.resolve(file_values, env_values, cli_values)


MIB = 1024 * 1024
LONG_MAX = 2**63 - 1

_QUORUM_KEYS = [
    ConfigKey("controller.quorum.election.timeout.ms", int, 1000, "a voter hearing no leader runs after 1-2x this"),
    ConfigKey("controller.quorum.fetch.timeout.ms", int, 2000, "a follower not reaching its leader this long runs"),
    ConfigKey("controller.quorum.election.backoff.max.ms", int, 1000, "longest random wait after a lost election"),
    ConfigKey("controller.quorum.request.timeout.ms", int, 2000, "how long a quorum request may take"),
    ConfigKey("controller.quorum.retry.backoff.ms", int, 20, "wait before a failed quorum request is tried again"),
    ConfigKey(
        "metadata.log.max.record.bytes.between.snapshots",
        int,
        20 * MIB,
        "snapshot the metadata image after this many bytes of committed records",
    ),
    ConfigKey("metadata.log.segment.bytes", int, 8 * MIB, "segment size of the __cluster_metadata log"),
]


BROKER_CONFIG = ConfigDef(
    [
        ConfigKey("broker.id", int, REQUIRED, "this broker's id (>= 0)"),
        ConfigKey(
            "listeners",
            str,
            "127.0.0.1:9092",
            "NAME://host:port,...: the inter-broker listener (msgpack; a bare host:port) and Kafka-protocol ones",
        ),
        ConfigKey("advertised.listeners", str, None, "NAME://host:port,...: how others reach each listener"),
        ConfigKey(
            "listener.security.protocol.map",
            str,
            "MINIBROKER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "NAME:PROTOCOL pairs: the security protocol of each listener (PLAINTEXT is served)",
        ),
        ConfigKey(
            "inter.broker.listener.name",
            str,
            "MINIBROKER",
            "the listener that speaks minibroker's msgpack protocol (replication, the controller, the CLI)",
        ),
        ConfigKey("log.dirs", str, REQUIRED, "directory holding this broker's partition replicas"),
        ConfigKey(
            "controller.quorum.voters",
            str,
            None,
            "the controllers, id@host:port,... (none: standalone, roles come from LEADER_AND_ISR)",
        ),
        ConfigKey(
            "metadata.log.dir",
            str,
            None,
            "where this broker keeps its copy of __cluster_metadata (unset: log.dirs)",
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            bool,
            False,
            "the default a topic that does not set it shows (the controllers decide elections)",
        ),
        *_QUORUM_KEYS,
        ConfigKey("cluster.secret", str, None, "shared secret that controller-only requests must present"),
        ConfigKey(
            "local.address", str, None, "source address of every connection to another node (unset: the OS picks)"
        ),
        ConfigKey("socket.request.max.bytes", int, 100 * MIB, "largest request frame accepted"),
        ConfigKey("max.connections", int, 2**31 - 1, "connections accepted at once; more are closed at once"),
        ConfigKey("max.connections.per.ip", int, 2**31 - 1, "connections accepted at once from one address"),
        ConfigKey("connections.max.idle.ms", int, 600000, "close a connection with nothing to do for this long"),
        ConfigKey(
            "socket.request.read.timeout.ms", int, 30000, "close a connection whose started frame is not complete"
        ),
        ConfigKey("queued.max.requests.per.connection", int, 64, "requests read ahead per connection"),
        ConfigKey(
            "queued.max.request.bytes",
            int,
            200 * MIB,
            "memory a listener's frames too large for a connection's read buffer may hold while they arrive, "
            "over all its connections; a connection whose frame would pass it is closed (-1: no limit)",
        ),
        ConfigKey(
            "sasl.server.max.receive.size",
            int,
            512 * 1024,
            "largest frame a SASL listener reads from a connection that has not authenticated yet",
        ),
        ConfigKey(
            "max.in.flight.requests.per.connection",
            int,
            5,
            "requests of one connection processed at once (their waits overlap; answers stay in order)",
        ),
        ConfigKey(
            "auto.create.topics.enable",
            bool,
            True,
            "a METADATA on a Kafka listener for a topic that does not exist creates it (num.partitions, "
            "default.replication.factor), as Kafka does",
        ),
        ConfigKey(
            "producer.state.max.entries",
            int,
            50_000,
            "idempotent-producer entries all of a broker's partitions hold together (about 1 KB each); past "
            "it a partition taking a new producer evicts its least recently used one",
        ),
        ConfigKey(
            "producer.id.expiration.ms",
            int,
            86400000,
            "an idempotent producer's state is dropped once it has written nothing for this long (KIP-854)",
        ),
        ConfigKey("offsets.topic.num.partitions", int, 50, "partitions of __consumer_offsets (group coordinators)"),
        ConfigKey("offsets.topic.replication.factor", int, 3, "replication factor of __consumer_offsets"),
        ConfigKey("offsets.retention.minutes", int, 10080, "how long an Empty group's committed offsets are kept"),
        ConfigKey(
            "offsets.retention.check.interval.ms", int, 600000, "how often expired committed offsets are removed"
        ),
        ConfigKey(
            "group.initial.rebalance.delay.ms", int, 3000, "how long an empty group waits for more members to join"
        ),
        ConfigKey("group.min.session.timeout.ms", int, 6000, "smallest session timeout a group member may ask for"),
        ConfigKey("group.max.session.timeout.ms", int, 1800000, "largest session timeout a group member may ask for"),
        ConfigKey(
            "group.max.size",
            int,
            1000,
            "members one consumer group may have, counting those given a member id to join with "
            "(GROUP_MAX_SIZE_REACHED past it; Kafka's default is no limit)",
        ),
        ConfigKey(
            "offset.metadata.max.bytes",
            int,
            4096,
            "largest metadata string an offset commit may carry (OFFSET_METADATA_TOO_LARGE past it)",
        ),
        ConfigKey("replica.fetch.wait.max.ms", int, 500, "max wait of a follower fetch"),
        ConfigKey("replica.fetch.min.bytes", int, 1, "min bytes of a follower fetch response"),
        ConfigKey("replica.fetch.max.bytes", int, MIB, "bytes per partition in a follower fetch"),
        ConfigKey("replica.fetch.response.max.bytes", int, 10 * MIB, "bytes per follower fetch response"),
        ConfigKey("replica.fetch.backoff.ms", int, 1000, "follower backoff after a partition error"),
        ConfigKey("num.replica.fetchers", int, 1, "fetchers per source broker"),
        ConfigKey("replica.lag.time.max.ms", int, 30000, "a follower not caught up for this long leaves the ISR"),
        ConfigKey("replica.socket.timeout.ms", int, 30000, "follower request timeout"),
        ConfigKey(
            "controller.socket.timeout.ms",
            int,
            30000,
            "how long one request to the active controller waits for its answer before it is sent again",
        ),
        ConfigKey(
            "inter.broker.protocol.version",
            str,
            "3.0",
            "replication protocol followers speak: from 2.7 FETCH carries their last fetched epoch and the "
            "leader answers a divergence in it; below 2.7 they ask OffsetsForLeaderEpoch first; below 2.0 its "
            "answers carry no epoch (before KIP-279); below 0.11 they truncate to their HW (before KIP-101)",
        ),
        ConfigKey("replica.high.watermark.checkpoint.interval.ms", int, 5000, "HW checkpoint period"),
        ConfigKey("min.insync.replicas", int, 1, "ISR size acks=all produce requires"),
        ConfigKey("broker.heartbeat.interval.ms", int, 2000, "heartbeat period to the controller"),
        ConfigKey("broker.session.timeout.ms", int, 9000, "controller fences a broker silent this long"),
        ConfigKey("controlled.shutdown.enable", bool, True, "move leaderships away before exiting on SIGTERM"),
        ConfigKey("controlled.shutdown.timeout.ms", int, 10000, "how long to wait for leaderships to move"),
        ConfigKey("fetch.purgatory.purge.interval.requests", int, 1000, "purge completed delayed fetches after"),
        ConfigKey("producer.purgatory.purge.interval.requests", int, 1000, "purge completed delayed produces after"),
        ConfigKey("max.incremental.fetch.session.cache.slots", int, 1000, "fetch session cache size"),
        ConfigKey("log.segment.bytes", int, 1024 * MIB, "segment size before a roll"),
        ConfigKey("log.roll.ms", int, 7 * 24 * 3600 * 1000, "segment age before a roll"),
        ConfigKey("log.index.interval.bytes", int, 4096, "bytes between offset index entries"),
        ConfigKey("log.index.size.max.bytes", int, 10 * MIB, "max offset index size per segment"),
        ConfigKey("log.retention.ms", int, 7 * 24 * 3600 * 1000, "delete segments older than this (-1: never)"),
        ConfigKey("log.retention.bytes", int, -1, "delete old segments beyond this size (-1: never)"),
        ConfigKey("log.retention.check.interval.ms", int, 300000, "how often retention runs"),
        ConfigKey("log.flush.interval.messages", int, LONG_MAX, "fsync after this many messages"),
        ConfigKey("log.flush.interval.ms", int, None, "fsync after this many ms (unset: leave it to the OS)"),
        ConfigKey("log.preallocate", bool, False, "reserve log.segment.bytes of disk for each new segment"),
        ConfigKey(
            "log.message.timestamp.type", str, "CreateTime", "CreateTime, or LogAppendTime: the leader stamps batches"
        ),
        ConfigKey("message.max.bytes", int, 1048588, "largest record batch accepted (topic: max.message.bytes)"),
        ConfigKey("leader.replication.throttled.rate", int, LONG_MAX, "bytes/s a leader sends to throttled replicas"),
        ConfigKey(
            "follower.replication.throttled.rate", int, LONG_MAX, "bytes/s a follower fetches for throttled replicas"
        ),
        ConfigKey("leader.replication.throttled.replicas", str, "", "topic:partition list or * (leader side)"),
        ConfigKey("follower.replication.throttled.replicas", str, "", "topic:partition list or * (follower side)"),
        ConfigKey(
            "produce.ack.journal",
            str,
            None,
            "file to append one line per batch this broker acknowledges (answers NONE to a PRODUCE), written "
            "before the answer: the chaos verdict's evidence of what brokers acknowledged (unset or empty: off)",
        ),
        ConfigKey("metrics.interval.ms", int, 1000, "metrics emission period"),
        ConfigKey("metrics.dir", str, None, "JSON-lines metrics directory (unset: <log.dirs>/../metrics)"),
        ConfigKey("metrics.file.enable", bool, True, "write JSON-lines metrics files"),
        ConfigKey("metrics.file.roll.ms", int, 10000, "roll the active metrics file this often"),
        ConfigKey("metrics.file.max.bytes", int, 64 * MIB, "roll the active metrics file at this size"),
        ConfigKey("metrics.mqtt.url", str, None, "mqtt://host:port to publish metrics to (unset: off)"),
    ]
)


# The controller process (controller/controller_server.py); here so every process knows every key.
CONTROLLER_CONFIG = ConfigDef(
    [
        ConfigKey("node.id", int, 3000, "the controller's id (reported as controller_id in METADATA)"),
        ConfigKey("listeners", str, "127.0.0.1:9093", "host:port to listen on"),
        ConfigKey("metadata.log.dir", str, REQUIRED, "directory for the replicated metadata log and quorum state"),
        ConfigKey(
            "controller.quorum.voters",
            str,
            None,
            "every controller of the quorum, id@host:port,... (unset: this controller alone)",
        ),
        *_QUORUM_KEYS,
        ConfigKey("cluster.secret", str, None, "shared secret brokers and admin clients must present"),
        ConfigKey(
            "local.address", str, None, "source address of every connection to another node (unset: the OS picks)"
        ),
        ConfigKey("broker.session.timeout.ms", int, 9000, "fence a broker silent this long"),
        ConfigKey("broker.heartbeat.interval.ms", int, 2000, "heartbeat period brokers are told to use"),
        ConfigKey(
            "unclean.leader.election.enable", bool, False, "elect an out-of-sync replica when no ISR member lives"
        ),
        ConfigKey("default.replication.factor", int, 1, "replication factor when a request gives -1"),
        ConfigKey("num.partitions", int, 1, "partitions when a request gives -1"),
        ConfigKey("min.insync.replicas", int, 1, "default min.insync.replicas for new topics"),
        ConfigKey("controller.tick.ms", int, 50, "how often broker sessions are checked"),
        ConfigKey("create.topics.request.max.topics", int, 1000, "topics one CREATE_TOPICS may name"),
        ConfigKey("create.topics.request.max.partitions", int, 10000, "partitions one CREATE_TOPICS may create"),
        ConfigKey(
            "auto.leader.rebalance.enable", bool, True, "give partitions back to their preferred replicas periodically"
        ),
        ConfigKey("leader.imbalance.check.interval.seconds", int, 300, "how often the automatic rebalance runs"),
        ConfigKey("socket.request.max.bytes", int, 100 * MIB, "largest request frame accepted"),
        ConfigKey("max.connections", int, 2**31 - 1, "connections accepted at once; more are closed at once"),
        ConfigKey("max.connections.per.ip", int, 2**31 - 1, "connections accepted at once from one address"),
        ConfigKey("connections.max.idle.ms", int, 600000, "close a connection with nothing to do for this long"),
        ConfigKey(
            "socket.request.read.timeout.ms", int, 30000, "close a connection whose started frame is not complete"
        ),
        ConfigKey(
            "queued.max.request.bytes",
            int,
            200 * MIB,
            "memory the frames too large for a connection's read buffer may hold while they arrive, over all "
            "connections; a connection whose frame would pass it is closed (-1: no limit)",
        ),
    ]
)
