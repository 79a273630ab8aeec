"""ISR changes from leaders to the controller (ALTER_PARTITION), one in flight per partition.

How this works
--------------
A leader's `Partition` proposes a new ISR through `propose()` (it is this module's `IsrChangeSink`). The
proposal waits in a queue; one sender task batches everything queued into one ALTER_PARTITION request.
The controller answers per partition with the committed ISR, leader epoch and partition epoch, which the
partition applies (`on_committed`). A rejected proposal (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION,
NOT_LEADER_OR_FOLLOWER, ...) clears the pending state: the controller's next LEADER_AND_ISR tells the
partition what is true. The partition is told the error: after INELIGIBLE_REPLICA it does not propose the
refused follower again until that follower's state changes (Partition.isr_change_rejected), so a broker
whose replica is offline but which keeps fetching costs one refusal, not one per fetch. A network failure
keeps the proposals and retries after a short backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from protocol.errors import ErrorCode
from protocol.messages import (
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    IsrMember,
    TopicPartition,
)
from protocol.transport import NETWORK_ERRORS, Transport
from server_common.time import Time

log = logging.getLogger(__name__)


class AlterPartitionManager:
    def __init__(
        self,
        broker_id: int,
        transport: Transport,
        controller_id: int,
        broker_epoch: Callable[[], int],
        on_committed: Callable[[TopicPartition, int, list[int], int], None],
        on_rejected: Callable[[TopicPartition, int], None],
        time: Time,
    ) -> None:
        self.broker_id = broker_id
        self.transport = transport
        self.controller_id = controller_id
        self.broker_epoch = broker_epoch
        self.on_committed = on_committed
        self.on_rejected = on_rejected
        self.time = time
        self._queued: dict[TopicPartition, AlterPartitionItem] = {}
        self._wakeup = asyncio.Event()
        self.sent_total = 0

    def propose(self, partition: object, new_isr: frozenset[int]) -> None:
        tp: TopicPartition = partition.topic_partition  # type: ignore[attr-defined]
        self._queued[tp] = AlterPartitionItem(
            tp.topic,
            tp.partition,
            partition.leader_epoch,  # type: ignore[attr-defined]
            sorted(new_isr),
            partition.partition_epoch,  # type: ignore[attr-defined]
            [IsrMember(b, e) for b, e in partition.isr_with_epochs(new_isr)],  # type: ignore[attr-defined]
        )
        self._wakeup.set()

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if not self._queued:
                continue
            batch, self._queued = self._queued, {}
            request = AlterPartitionRequest(self.broker_id, self.broker_epoch(), list(batch.values()))
            try:
                response: AlterPartitionResponse = await self.transport.send(self.controller_id, request)
            except NETWORK_ERRORS as exc:
                log.info("ALTER_PARTITION failed (%s); retrying", exc)
                for tp, item in batch.items():
                    self._queued.setdefault(tp, item)
                await self.time.sleep(0.1)
                self._wakeup.set()
                continue
            self.sent_total += 1
            if response.error_code != ErrorCode.NONE:
                log.warning("ALTER_PARTITION refused: %s", response.error_message)
                for tp in batch:
                    self.on_rejected(tp, response.error_code)
                continue
            for answer in response.partitions:
                tp = TopicPartition(answer.topic, answer.partition)
                if answer.error_code == ErrorCode.NONE:
                    self.on_committed(tp, answer.leader_epoch, answer.isr, answer.partition_epoch)
                else:
                    log.info("%s: ISR change rejected: %s", tp, answer.error_message)
                    self.on_rejected(tp, answer.error_code)
