"""Per-log configuration with Kafka's names and defaults (topic-level keys and their log.* broker forms)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

LONG_MAX = 2**63 - 1
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)
_DAY_MS = 24 * 60 * 60 * 1000
_MAX_SEGMENT_BYTES = 2**31 - 1  # positions in the offset index are 32-bit, as in Kafka


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024  # log.segment.bytes
    segment_ms: int = 7 * _DAY_MS  # log.roll.ms (log.roll.hours = 168)
    index_interval_bytes: int = 4096  # log.index.interval.bytes
    segment_index_bytes: int = 10 * 1024 * 1024  # log.index.size.max.bytes
    retention_ms: int = 7 * _DAY_MS  # log.retention.ms (log.retention.hours = 168); -1 = unlimited
    retention_bytes: int = -1  # log.retention.bytes; -1 = unlimited
    flush_interval_messages: int = LONG_MAX  # log.flush.interval.messages; LONG_MAX = never forced
    flush_interval_ms: int | None = None  # log.flush.interval.ms; None = never forced
    max_message_bytes: int = 1048588  # message.max.bytes (max.message.bytes per topic): largest batch accepted
    # log.preallocate: reserve segment.bytes of disk when a segment is created (fallocate), so appends fill
    # reserved blocks instead of allocating them; the file is cut back to its data when the segment rolls
    # or closes.
    preallocate: bool = False
    # producer.id.expiration.ms (KIP-854): an idempotent producer's state is dropped once its newest batch
    # is older than this; checked with the retention check.
    producer_id_expiration_ms: int = _DAY_MS
    # message.timestamp.type: CreateTime keeps the producer's timestamps; LogAppendTime has the leader stamp
    # each batch with the time it appends it (storage/log_validator.py).
    message_timestamp_type: str = "CreateTime"

    def __post_init__(self) -> None:
        if not 0 < self.segment_bytes <= _MAX_SEGMENT_BYTES:
            raise ValueError(f"segment.bytes must be in 1..{_MAX_SEGMENT_BYTES}, got {self.segment_bytes}")
        if self.segment_ms <= 0:
            raise ValueError(f"segment.ms must be positive, got {self.segment_ms}")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index.interval.bytes must not be negative, got {self.index_interval_bytes}")
        if self.segment_index_bytes < 8:
            raise ValueError(f"segment.index.bytes must hold at least one entry, got {self.segment_index_bytes}")
        if self.flush_interval_messages <= 0:
            raise ValueError(f"flush.messages must be positive, got {self.flush_interval_messages}")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            problem = _timestamp_type(self.message_timestamp_type)
            raise ValueError(f"message.timestamp.type: {problem}")

    @property
    def log_append_time(self) -> bool:
        """Whether the leader stamps batches with its append time (message.timestamp.type=LogAppendTime)."""
        return self.message_timestamp_type == LOG_APPEND_TIME

    @classmethod
    def from_kafka_props(cls, props: Mapping[str, str | int]) -> LogConfig:
        """Build from Kafka property names. Broker-level `log.*` keys and topic-level keys are both
        accepted (the topic-level key wins), finer time units win over coarser ones as in Kafka, and
        unrelated keys are ignored so a whole server.properties can be passed in."""

        def first(*names: str) -> int | None:
            for name in names:
                if name in props:
                    return int(props[name])
            return None

        def flag(*names: str) -> bool | None:
            for name in names:
                if name in props:
                    return parse_bool(name, props[name])
            return None

        def millis(ms_names: tuple[str, ...], minutes: str | None, hours: str) -> int | None:
            value = first(*ms_names)
            if value is None and minutes is not None and (m := first(minutes)) is not None:
                value = m * 60_000
            if value is None and (h := first(hours)) is not None:
                value = h * 3_600_000
            return value

        defaults = cls()
        segment_bytes = first("segment.bytes", "log.segment.bytes")
        segment_ms = millis(("segment.ms", "log.roll.ms"), None, "log.roll.hours")
        index_interval = first("index.interval.bytes", "log.index.interval.bytes")
        index_bytes = first("segment.index.bytes", "log.index.size.max.bytes")
        retention_ms = millis(("retention.ms", "log.retention.ms"), "log.retention.minutes", "log.retention.hours")
        retention_bytes = first("retention.bytes", "log.retention.bytes")
        flush_messages = first("flush.messages", "log.flush.interval.messages")
        max_message = first("max.message.bytes", "message.max.bytes")
        preallocate = flag("preallocate", "log.preallocate")
        producer_expiration = first("producer.id.expiration.ms")
        timestamp_type = next(
            (str(props[name]) for name in ("message.timestamp.type", "log.message.timestamp.type") if name in props),
            defaults.message_timestamp_type,
        )
        return cls(
            segment_bytes=defaults.segment_bytes if segment_bytes is None else segment_bytes,
            segment_ms=defaults.segment_ms if segment_ms is None else segment_ms,
            index_interval_bytes=defaults.index_interval_bytes if index_interval is None else index_interval,
            segment_index_bytes=defaults.segment_index_bytes if index_bytes is None else index_bytes,
            retention_ms=defaults.retention_ms if retention_ms is None else retention_ms,
            retention_bytes=defaults.retention_bytes if retention_bytes is None else retention_bytes,
            flush_interval_messages=defaults.flush_interval_messages if flush_messages is None else flush_messages,
            flush_interval_ms=first("flush.ms", "log.flush.interval.ms"),
            max_message_bytes=defaults.max_message_bytes if max_message is None else max_message,
            preallocate=defaults.preallocate if preallocate is None else preallocate,
            producer_id_expiration_ms=(
                defaults.producer_id_expiration_ms if producer_expiration is None else producer_expiration
            ),
            message_timestamp_type=timestamp_type,
        )


# -- topic configs --------------------------------------------------------------------------------------
#
# The per-topic keys minibroker honours (Kafka's topic-level names), with the range each accepts. A topic
# created with any other key, or a value out of range, is refused with INVALID_CONFIG: a config that would
# be accepted and then ignored is worse than an error. `message.max.bytes` is accepted as an alias of
# Kafka's topic-level `max.message.bytes`, since users know the broker-level name.


def _int_in(low: int, high: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            number = int(value)
        except ValueError:
            return f"expected an integer, got {value!r}"
        if not low <= number <= high:
            return f"must be in [{low}, {high}], got {number}"
        return None

    return check


def parse_bool(key: str, value: object) -> bool:
    """A boolean config value: a bool, or "true" / "false" in any case (ValueError naming `key` otherwise)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{key}: expected true or false, got {value!r}")
    return text == "true"


def _boolean(value: str) -> str | None:
    return None if value.strip().lower() in ("true", "false") else f"expected true or false, got {value!r}"


def _timestamp_type(value: str) -> str | None:
    return None if value in TIMESTAMP_TYPES else f"expected one of {', '.join(TIMESTAMP_TYPES)}, got {value!r}"


def _throttled_replicas(value: str) -> str | None:
    """Kafka's list of `partition:broker` replicas, `*` for all, or empty for none."""
    text = value.strip()
    if text in ("", "*"):
        return None
    for item in text.split(","):
        partition, sep, broker = item.strip().partition(":")
        if not (sep and partition.isdigit() and broker.isdigit()):
            return f"expected '*' or a comma-separated list of partition:broker, got {item.strip()!r}"
    return None


TOPIC_CONFIG_KEYS: dict[str, Callable[[str], str | None]] = {
    "segment.bytes": _int_in(14, _MAX_SEGMENT_BYTES),
    "segment.ms": _int_in(1, LONG_MAX),
    "retention.ms": _int_in(-1, LONG_MAX),
    "retention.bytes": _int_in(-1, LONG_MAX),
    "flush.messages": _int_in(1, LONG_MAX),
    "flush.ms": _int_in(0, LONG_MAX),
    "max.message.bytes": _int_in(0, 2**31 - 1),
    "message.max.bytes": _int_in(0, 2**31 - 1),
    "min.insync.replicas": _int_in(1, 2**31 - 1),
    "preallocate": _boolean,
    "message.timestamp.type": _timestamp_type,
    "unclean.leader.election.enable": _boolean,
    # KIP-73: the replicas whose replication the leader.* / follower.* throttled rates apply to (the brokers
    # listed are the ones that send, for the leader key, and that fetch, for the follower key).
    "leader.replication.throttled.replicas": _throttled_replicas,
    "follower.replication.throttled.replicas": _throttled_replicas,
}


def topic_config_error(configs: Mapping[str, str]) -> str | None:
    """Why `configs` cannot be a topic's configuration (naming the key, with a close match for a typo), or
    None when every key is one minibroker honours and every value is in range."""
    for key in sorted(configs):
        if (unknown := topic_config_key_error(key)) is not None:
            return unknown
        if (problem := TOPIC_CONFIG_KEYS[key](str(configs[key]))) is not None:
            return f"topic config {key}: {problem}"
    return None


def topic_config_key_error(key: str) -> str | None:
    """Why `key` is not a topic config minibroker honours (with a close match for a typo), or None."""
    if key in TOPIC_CONFIG_KEYS:
        return None
    close = difflib.get_close_matches(key, TOPIC_CONFIG_KEYS, n=1)
    hint = f"; did you mean {close[0]}?" if close else f"; known keys: {', '.join(sorted(TOPIC_CONFIG_KEYS))}"
    return f"unknown topic config {key!r}{hint}"


def with_topic_configs(base: LogConfig, configs: Mapping[str, str]) -> LogConfig:
    """`base` (the broker's log.* settings) overridden by a topic's configs."""
    merged: dict[str, str | int] = {}
    for name, field_name in _LOG_FIELDS.items():
        merged[name] = getattr(base, field_name)
    if base.flush_interval_ms is not None:
        merged["flush.ms"] = base.flush_interval_ms
    for key, value in configs.items():
        merged["max.message.bytes" if key == "message.max.bytes" else key] = value
    return LogConfig.from_kafka_props(merged)


_LOG_FIELDS = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "segment_index_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.messages": "flush_interval_messages",
    "max.message.bytes": "max_message_bytes",
    "preallocate": "preallocate",
    "message.timestamp.type": "message_timestamp_type",
}


# -- where a topic config's value comes from (DESCRIBE_CONFIGS) ------------------------------------------
#
# A topic that does not set a key gets the cluster's setting of the broker-level key it stands for (Kafka's
# "synonyms"): the broker's log.* settings, and the controller's min.insync.replicas and
# unclean.leader.election.enable.

TOPIC_CONFIG_SYNONYMS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "min.insync.replicas": "min.insync.replicas",
    "preallocate": "log.preallocate",
    "message.timestamp.type": "log.message.timestamp.type",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


def log_config_values(config: LogConfig) -> dict[str, str]:
    """The topic-level keys a LogConfig holds, with its values as DESCRIBE_CONFIGS shows them."""
    return {
        "segment.bytes": str(config.segment_bytes),
        "segment.ms": str(config.segment_ms),
        "retention.ms": str(config.retention_ms),
        "retention.bytes": str(config.retention_bytes),
        "flush.messages": str(config.flush_interval_messages),
        "flush.ms": str(LONG_MAX if config.flush_interval_ms is None else config.flush_interval_ms),
        "max.message.bytes": str(config.max_message_bytes),
        "preallocate": "true" if config.preallocate else "false",
        "message.timestamp.type": config.message_timestamp_type,
    }


KAFKA_TOPIC_CONFIG_DEFAULTS: dict[str, str] = {
    **log_config_values(LogConfig()),
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
}
