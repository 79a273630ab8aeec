"""The leader of a set of partitions, as a follower's fetcher sees it (Kafka's LeaderEndPoint).

The fetcher never touches sockets: it asks its `LeaderEndPoint` to fetch, to answer
OffsetsForLeaderEpoch and to list offsets. The broker plugs in a TCP implementation; tests plug in a
scripted in-memory leader. A network failure raises `ConnectionError`, `OSError` or
`asyncio.TimeoutError` (see `NETWORK_ERRORS`): the whole request failed and the fetcher backs off.
"""

from __future__ import annotations

import abc

from protocol.messages import (
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    OffsetForLeaderEpochPartition,
    TopicPartition,
)
from protocol.transport import NETWORK_ERRORS as TRANSPORT_NETWORK_ERRORS

# Exceptions that mean "the request as a whole failed on the way", not "the leader said no".
NETWORK_ERRORS = TRANSPORT_NETWORK_ERRORS


class LeaderEndPoint(abc.ABC):
    leader_broker_id: int
    # False: the leader cannot answer OffsetsForLeaderEpoch, so every partition truncates to its HW.
    supports_offsets_for_leader_epoch: bool = True
    # True: FETCH carries each partition's last fetched epoch and the leader answers a divergence in the
    # response (KIP-595's truncate on fetch, Kafka 2.7+); a follower then skips the separate
    # OffsetsForLeaderEpoch round when it starts following.
    supports_truncate_on_fetch: bool = False

    @abc.abstractmethod
    async def fetch(self, request: FetchRequest) -> FetchResponse:
        """Send one FETCH and return the leader's response (partition errors are values in it)."""

    @abc.abstractmethod
    async def fetch_epoch_end_offsets(
        self, partitions: list[OffsetForLeaderEpochPartition]
    ) -> dict[TopicPartition, EpochEndOffset]:
        """OFFSET_FOR_LEADER_EPOCH for `partitions`; per-partition errors are in each EpochEndOffset."""

    @abc.abstractmethod
    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> tuple[int, int]:
        """(leader_epoch, log end offset) of the leader; raises the KafkaError of the partition's error."""

    @abc.abstractmethod
    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> tuple[int, int]:
        """(leader_epoch, log start offset) of the leader; raises the KafkaError of the partition's error."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the connection. Must not be called concurrently with a request."""
