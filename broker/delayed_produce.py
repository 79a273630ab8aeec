"""DelayedProduce: an acks=all PRODUCE that waits until the high watermark passes what it wrote.

How this works
--------------
After the leader appends, each partition needs `HW >= last offset + 1` (every ISR member has the data).
The operation is watched on those partitions; `check_and_complete(tp)` re-runs `try_complete` whenever
a HW moves or leadership changes. A partition is done when its HW got there (NONE, or
NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below `min.insync.replicas` meanwhile: written, but
less durable than asked) or leadership moved (NOT_ENOUGH_REPLICAS_AFTER_APPEND as well, where Kafka
answers NOT_LEADER_OR_FOLLOWER: see `Partition.check_enough_replicas_reached_offset` and docs/protocol.md,
"PRODUCE errors": the records are in this broker's log and may survive, so the answer must not read as
"not appended"). A replica stopped while a produce waits (STOP_REPLICA) answers the same.
When `timeout_ms` passes first, the partitions still waiting answer REQUEST_TIMED_OUT: the records are in
the leader's log but not known to be replicated, so the producer must treat them as indeterminate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.delayed_operation import DelayedOperation
from protocol.errors import ErrorCode, KafkaError, NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from protocol.messages import ProducePartitionResponse, TopicPartition

NOT_AFTER_APPEND = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

if TYPE_CHECKING:
    from broker.replica_manager import ReplicaManager


@dataclass(slots=True)
class ProducePartitionStatus:
    required_offset: int
    response: ProducePartitionResponse
    acks_pending: bool = True


class DelayedProduce(DelayedOperation):
    def __init__(
        self,
        delay_ms: int,
        statuses: dict[TopicPartition, ProducePartitionStatus],
        replica_manager: ReplicaManager,
        response_callback: Callable[[list[ProducePartitionResponse]], None],
    ) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self.replica_manager = replica_manager
        self.response_callback = response_callback

    def try_complete(self) -> bool:
        for tp, status in self.statuses.items():
            if not status.acks_pending:
                continue
            try:
                partition = self.replica_manager.get_partition_or_error(tp)
                done, error = partition.check_enough_replicas_reached_offset(status.required_offset)
            except (NotLeaderOrFollowerError, UnknownTopicOrPartitionError) as exc:
                # The replica stopped here (STOP_REPLICA: a reassignment moved it away, or its topic was
                # deleted) after the append: written, maybe replicated, so the "maybe" answer, as when
                # leadership moves (NOT_LEADER_OR_FOLLOWER would read as "not appended" and invite a resend).
                done, error = True, KafkaError(f"{exc}; the records were appended before", code=NOT_AFTER_APPEND)
            except KafkaError as exc:
                done, error = True, exc
            if done:
                status.acks_pending = False
                if error is not None:
                    status.response.error_code = int(error.code)
                    status.response.error_message = str(error)
        if not any(s.acks_pending for s in self.statuses.values()):
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        self.replica_manager.stats.delayed_produce_expirations += 1

    def on_complete(self) -> None:
        for status in self.statuses.values():
            if status.acks_pending:
                status.response.error_code = int(ErrorCode.REQUEST_TIMED_OUT)
                status.response.error_message = "timed out waiting for the in-sync replicas to acknowledge"
        self.response_callback([s.response for s in self.statuses.values()])
