"""The quorum's settings, under Kafka's names (`controller.quorum.*`), and the voter list's format."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from server_common.config import parse_host_port


class VotersError(ValueError):
    """`controller.quorum.voters` is not `id@host:port,...`."""


def parse_voters(value: str) -> dict[int, tuple[str, int]]:
    """`1@host:port,2@host:port` (Kafka's controller.quorum.voters) -> {1: ("host", port), ...}."""
    voters: dict[int, tuple[str, int]] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        node, at, address = item.rpartition("@")
        if not at or not node:
            raise VotersError(f"controller.quorum.voters: {item!r} is not id@host:port")
        try:
            node_id = int(node)
        except ValueError:
            raise VotersError(f"controller.quorum.voters: {node!r} in {item!r} is not a node id") from None
        if node_id < 0:
            raise VotersError(f"controller.quorum.voters: node id {node_id} is negative")
        if node_id in voters:
            raise VotersError(f"controller.quorum.voters names node {node_id} twice")
        try:
            voters[node_id] = parse_host_port(address, "controller.quorum.voters")
        except ValueError as exc:
            raise VotersError(str(exc)) from None
    if not voters:
        raise VotersError("controller.quorum.voters names no voter")
    return voters


def format_voters(voters: Mapping[int, tuple[str, int]]) -> str:
    return ",".join(f"{node_id}@{host}:{port}" for node_id, (host, port) in sorted(voters.items()))


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """The voters and the quorum's timers, with Kafka's defaults.

    * election timeout: an unattached voter that hears from no leader starts an election after a random
      time in [timeout, 2 * timeout), so that voters rarely start together;
    * fetch timeout: a follower that has not fetched from its leader for this long starts an election; a
      leader that has not been fetched from by a majority for 1.5 times this long resigns (check quorum);
    * election backoff: after a lost election, a random wait up to this before the next try;
    * fetch max wait: how long a leader may hold a FETCH that finds nothing new.
    """

    voters: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500  # Kafka's (fixed) FETCH max wait for the metadata log
    # metadata.log.max.record.bytes.between.snapshots: a node snapshots its image after this many bytes of
    # committed records since its last snapshot (Kafka's default 20 MiB).
    snapshot_bytes: int = 20 * 1024 * 1024
    segment_bytes: int = 8 * 1024 * 1024  # metadata.log.segment.bytes

    KEYS = {
        "controller.quorum.election.timeout.ms": "election_timeout_ms",
        "controller.quorum.fetch.timeout.ms": "fetch_timeout_ms",
        "controller.quorum.election.backoff.max.ms": "election_backoff_max_ms",
        "controller.quorum.request.timeout.ms": "request_timeout_ms",
        "controller.quorum.retry.backoff.ms": "retry_backoff_ms",
        "metadata.log.max.record.bytes.between.snapshots": "snapshot_bytes",
        "metadata.log.segment.bytes": "segment_bytes",
    }

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def check_quorum_timeout_ms(self) -> int:
        return self.fetch_timeout_ms * 3 // 2

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> QuorumConfig:
        """From a node's config: `controller.quorum.voters` and whichever timer keys it sets."""
        voters = parse_voters(str(properties["controller.quorum.voters"]))
        kwargs = {name: int(properties[key]) for key, name in cls.KEYS.items() if properties.get(key) is not None}
        return cls(voters=voters, **kwargs)
