"""Kafka's classic consumer-group coordinator (the group-coordinator module of Kafka): groups, their
members and committed offsets, kept in the replicated __consumer_offsets topic. The broker that leads a
group's partition of that topic runs its coordinator (broker/broker_node.py wires it)."""

from group_coordinator.group_coordinator import (
    OFFSETS_TOPIC,
    AppendRecords,
    GroupConfig,
    GroupCoordinator,
    java_string_hash,
)
from group_coordinator.group_metadata import GroupDescription, GroupState, JoinGroupResult, SyncGroupResult

__all__ = [
    "OFFSETS_TOPIC",
    "AppendRecords",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupState",
    "JoinGroupResult",
    "SyncGroupResult",
    "java_string_hash",
]
