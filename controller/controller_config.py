"""The controller's settings, read from Kafka's dotted keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from server_common.log_config import parse_bool


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Controller settings; `from_properties` reads Kafka's dotted keys (see `KEYS`)."""

    node_id: int = 3000
    broker_session_timeout_ms: int = 9000
    broker_heartbeat_interval_ms: int = 2000
    unclean_leader_election_enable: bool = False
    default_replication_factor: int = 1
    num_partitions: int = 1
    min_insync_replicas: int = 1
    create_topics_request_max_topics: int = 1000
    create_topics_request_max_partitions: int = 10000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300

    KEYS = {
        "node.id": "node_id",
        "broker.session.timeout.ms": "broker_session_timeout_ms",
        "broker.heartbeat.interval.ms": "broker_heartbeat_interval_ms",
        "unclean.leader.election.enable": "unclean_leader_election_enable",
        "default.replication.factor": "default_replication_factor",
        "num.partitions": "num_partitions",
        "min.insync.replicas": "min_insync_replicas",
        "create.topics.request.max.topics": "create_topics_request_max_topics",
        "create.topics.request.max.partitions": "create_topics_request_max_partitions",
        "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
        "leader.imbalance.check.interval.seconds": "leader_imbalance_check_interval_seconds",
    }

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> ControllerConfig:
        """Build from `{"broker.session.timeout.ms": "1000", ...}`; unknown keys raise ValueError."""
        unknown = set(properties) - set(cls.KEYS)
        if unknown:
            raise ValueError(f"unknown controller config keys: {sorted(unknown)}")
        types = {f.name: f.type for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in properties.items():
            name = cls.KEYS[key]
            kwargs[name] = parse_bool(key, value) if types[name] in (bool, "bool") else int(value)
        return cls(**kwargs)
