"""The follower side's view of a replication quota (KIP-73): what the fetchers ask of it.

The broker's `ReplicationQuotaManager` (broker/replication_quota.py) is one; the fetcher package names only
this protocol, so it does not depend on the broker package.
"""

from __future__ import annotations

from typing import Protocol

from protocol.messages import TopicPartition


class ReplicaQuota(Protocol):
    def is_throttled(self, tp: TopicPartition) -> bool: ...

    def is_quota_exceeded(self) -> bool: ...

    def record(self, num_bytes: int) -> None: ...
