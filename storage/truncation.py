"""Where a follower cuts its log once the leader said where an epoch ends (Kafka's getOffsetTruncationState).

One rule serves every replica that follows a leader by epochs: a data-plane follower answered by
OffsetsForLeaderEpoch or by a FETCH's diverging epoch (fetcher/replica_fetcher.py), and a voter or observer
of the metadata quorum answered a diverging epoch (raft/raft_client.py).

Given the leader's (epoch, end offset) for the largest epoch it has at or below the one asked:

* the follower has that very epoch: cut to min(where it ends here, where it ends on the leader, log end); done;
* the follower never saw that epoch: cut to where its own largest smaller epoch ends and ask again with that
  epoch (KIP-279's multi-round case), since the two logs may diverge earlier still;
* the follower has no epoch at or below it: the leader's end offset is safe; done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from protocol.messages import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


class EpochLog(Protocol):
    @property
    def log_end_offset(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, end offset of that epoch); (-1, -1) when unknown."""
        ...


@dataclass(frozen=True, slots=True)
class OffsetTruncationState:
    offset: int
    truncation_completed: bool


def offset_truncation_state(
    follower: EpochLog, fallback_offset: int, leader_epoch: int, leader_end_offset: int
) -> OffsetTruncationState:
    """Where to truncate, given the leader's answer for our latest epoch. `fallback_offset`: where to cut
    when the leader knows nothing of the epoch (a data-plane follower's initial offset, its HW)."""
    log_end_offset = follower.log_end_offset
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        # The leader knows nothing of the epoch: fall back to what we can vouch for.
        return OffsetTruncationState(fallback_offset, True)
    if leader_epoch == UNDEFINED_EPOCH:
        # An answer without an epoch (old protocol): trust the leader's end offset.
        return OffsetTruncationState(min(leader_end_offset, log_end_offset), True)
    follower_epoch, follower_end_offset = follower.end_offset_for_epoch(leader_epoch)
    if follower_end_offset == UNDEFINED_EPOCH_OFFSET:
        # We have no epoch at or below the leader's: the leader's end offset is safe.
        return OffsetTruncationState(min(leader_end_offset, log_end_offset), True)
    if follower_epoch != leader_epoch:
        # We never saw the leader's epoch: cut back to where our largest smaller epoch ends and
        # ask again with that epoch (KIP-279 multi-round truncation).
        return OffsetTruncationState(min(follower_end_offset, log_end_offset), False)
    return OffsetTruncationState(min(follower_end_offset, leader_end_offset, log_end_offset), True)
