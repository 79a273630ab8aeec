"""The leader's view of one follower replica: its LEO and when it was last caught up (Kafka's Replica).

Invariant: `last_caught_up_time_ms` only moves forward, and only when a fetch showed the follower at the
leader's log end, now (`fetch_offset >= leader LEO`) or at the previous fetch (`fetch_offset >= the
LEO the leader had when the follower last fetched`) — rule L5. That second case is what keeps a follower
that keeps up with a steady stream of appends in the ISR although it is never exactly at the end.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Replica:
    broker_id: int
    log_end_offset: int = -1  # unknown until the first fetch
    log_start_offset: int = -1
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = -1
    broker_epoch: int = -1  # the follower's broker epoch at its last fetch (KIP-903), -1 when unknown

    def update_fetch_state(
        self,
        fetch_offset: int,
        follower_log_start_offset: int,
        fetch_time_ms: int,
        leader_end_offset: int,
        broker_epoch: int = -1,
    ) -> None:
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_start_offset = follower_log_start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms
        if broker_epoch != -1:
            self.broker_epoch = broker_epoch

    def reset_replica_state(self, now_ms: int, leader_end_offset: int, in_isr: bool) -> None:
        """On becoming leader (L9): LEO unknown; ISR members count as caught up now, others never."""
        self.log_end_offset = -1
        self.log_start_offset = -1
        self.last_caught_up_time_ms = now_ms if in_isr else 0
        self.last_fetch_time_ms = now_ms if in_isr else 0
        self.last_fetch_leader_log_end_offset = leader_end_offset if in_isr else -1
        self.broker_epoch = -1

    def is_caught_up(self, leader_end_offset: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        return leader_end_offset == self.log_end_offset or (
            now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms
        )
