"""Per-partition fetch state of a replica fetcher, and the insertion-ordered map that holds it.

How this works
--------------
Every partition a fetcher follows has one immutable `PartitionFetchState`. A partition starts in
TRUNCATING (it must first reconcile its log tail with the leader), moves to FETCHING once truncation
is complete, and may be *delayed* (after an error) until `delay_until_ms`, during which it is neither
truncated nor fetched. Changing a partition means replacing its state object, so a coroutine that
awaited the network can tell whether the partition changed meanwhile by comparing identities.

`PartitionStates` keeps partitions in insertion order. A fetch request lists partitions in that order
and the leader fills its response-size cap front to back, so moving a partition to the end after it
received data (or was delayed, or re-added) gives round-robin fairness between partitions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum

from protocol.messages import TopicPartition


class ReplicaState(Enum):
    TRUNCATING = "Truncating"
    FETCHING = "Fetching"


@dataclass(frozen=True, slots=True)
class InitialFetchState:
    """What the broker tells a fetcher when it becomes a follower: whom to follow, at which epoch, and
    where to start (the local high watermark; a negative offset asks for an out-of-range style reset)."""

    leader_id: int
    current_leader_epoch: int
    init_offset: int


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    """Invariant: a FETCHING partition's `fetch_offset` equals its local log end offset."""

    fetch_offset: int
    current_leader_epoch: int
    state: ReplicaState = ReplicaState.TRUNCATING
    delay_until_ms: int | None = None
    lag: int | None = None  # messages behind the leader's HW after the last response; None until known
    last_fetched_epoch: int | None = None

    def is_delayed(self, now_ms: int) -> bool:
        return self.delay_until_ms is not None and now_ms < self.delay_until_ms

    def is_ready_for_fetch(self, now_ms: int) -> bool:
        return self.state is ReplicaState.FETCHING and not self.is_delayed(now_ms)

    def is_truncating(self, now_ms: int) -> bool:
        return self.state is ReplicaState.TRUNCATING and not self.is_delayed(now_ms)

    @property
    def is_replica_in_sync(self) -> bool:
        """Follower-side notion of "in sync" used by throttling: caught up to the leader's HW."""
        return self.lag is not None and self.lag <= 0

    def delayed_until(self, until_ms: int) -> PartitionFetchState:
        return dataclasses.replace(self, delay_until_ms=until_ms)

    def replace(self, **changes: object) -> PartitionFetchState:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


class PartitionStates:
    """Partitions in fetch order (Kafka's PartitionStates): a dict keeps insertion order."""

    def __init__(self) -> None:
        self._map: dict[TopicPartition, PartitionFetchState] = {}

    def update_and_move_to_end(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        self._map.pop(tp, None)
        self._map[tp] = state

    def update(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        """Replace a state in place, keeping the partition's position."""
        self._map[tp] = state

    def remove(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self._map.pop(tp, None)

    def state_value(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self._map.get(tp)

    def contains(self, tp: TopicPartition) -> bool:
        return tp in self._map

    def partition_set(self) -> set[TopicPartition]:
        return set(self._map)

    def partitions(self) -> list[TopicPartition]:
        """In fetch order."""
        return list(self._map)

    def items(self) -> list[tuple[TopicPartition, PartitionFetchState]]:
        """A copy, in fetch order, so callers may change states while iterating."""
        return list(self._map.items())

    def clear(self) -> dict[TopicPartition, PartitionFetchState]:
        removed, self._map = self._map, {}
        return removed

    def remove_all(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionFetchState]:
        removed = {}
        for tp in tps:
            state = self._map.pop(tp, None)
            if state is not None:
                removed[tp] = state
        return removed

    def size(self) -> int:
        return len(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(list(self._map))
