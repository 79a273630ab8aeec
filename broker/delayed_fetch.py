"""DelayedFetch: a FETCH that waits in the purgatory until enough bytes arrive or `max_wait_ms` passes.

How this works
--------------
The FETCH handler first reads the log; if that already satisfies the request (L10: no wait allowed,
min bytes reached, an error, nothing asked for) it answers at once. Otherwise it parks a DelayedFetch
watched on every partition it names. `try_complete` is re-run by `check_and_complete(tp)` after a leader
append, a HW change or a role change, and completes the fetch when any partition (L11):

  A/B/C  is no longer led here or is unknown;           E  fails the epoch check (fenced / unknown);
  F      has its end offset *below* the fetch offset (the log was truncated) or on a newer segment;
  G      together with the others has at least `min_bytes` readable (each capped by its max bytes);
  H      diverges from the follower's last fetched epoch (truncate on fetch: the answer tells it where).

The "end" is the LEO for followers and the HW for consumers. On completion (early or by expiration) the
log is read again, so the response carries the data and HW as they are now, never a stale snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.delayed_operation import DelayedOperation
from protocol.errors import KafkaError
from protocol.messages import FetchPartition, FetchPartitionResponse, TopicPartition

if TYPE_CHECKING:
    from broker.replica_manager import FetchParams, ReplicaManager


@dataclass(slots=True)
class FetchPartitionStatus:
    fetch_info: FetchPartition
    start_offset_metadata: Any  # LogOffsetMetadata of the fetch offset when the fetch was parked


class DelayedFetch(DelayedOperation):
    def __init__(
        self,
        delay_ms: int,
        params: FetchParams,
        statuses: dict[TopicPartition, FetchPartitionStatus],
        replica_manager: ReplicaManager,
        response_callback: Callable[[list[FetchPartitionResponse]], None],
    ) -> None:
        super().__init__(delay_ms)
        self.params = params
        self.statuses = statuses
        self.replica_manager = replica_manager
        self.response_callback = response_callback
        self.expired = False

    def try_complete(self) -> bool:
        accumulated = 0
        follower = self.params.is_from_follower
        for tp, status in self.statuses.items():
            info = status.fetch_info
            try:
                partition = self.replica_manager.get_partition_or_error(tp)
                partition.check_leader(info.current_leader_epoch, self.params.fetch_only_from_leader)
                log = partition.log
                end_offset = log.log_end_offset if follower else log.high_watermark
                if follower and partition.diverging_epoch(info.fetch_offset, info.last_fetched_epoch) is not None:
                    return self.force_complete()
                if end_offset == info.fetch_offset:
                    continue
                if end_offset < info.fetch_offset:
                    return self.force_complete()  # truncated below what the client asked for
                end_md = log.offset_metadata(end_offset)
                start_md = status.start_offset_metadata
                if end_md.segment_base_offset > start_md.segment_base_offset:
                    return self.force_complete()  # data on a newer segment: enough to answer
                if follower and self.replica_manager.leader_throttles(partition, self.params.replica_id):
                    continue  # L11-G: throttled bytes would be answered empty; do not complete for them
                available = end_md.relative_position - start_md.relative_position
                accumulated += min(max(available, 0), info.partition_max_bytes)
            except KafkaError:
                return self.force_complete()
        if accumulated >= self.params.min_bytes:
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        self.expired = True
        self.replica_manager.stats.delayed_fetch_expirations += 1

    def on_complete(self) -> None:
        infos = [s.fetch_info for s in self.statuses.values()]
        self.response_callback(self.replica_manager.read_and_record(self.params, infos))
