"""What a broker knows of the producer ids the controller handed out, so a PRODUCE cannot invent them.

How this works
--------------
The controller hands out producer ids in order (INIT_PRODUCER_ID, `controller/producer_id_control_manager.py`)
and commits the next one before answering, so "every id below N was handed out" is the whole state. Each
heartbeat answer carries that N (`next_producer_id`), and so does each INIT_PRODUCER_ID answer the broker
forwards. A leader appends an idempotent batch only if its producer id is below the N it knows. An id at or
above it may be one handed out a moment ago through another broker: the leader then asks once more (a
heartbeat sent after the PRODUCE arrived, shared by every PRODUCE waiting meanwhile, so a flood of
invented ids costs one controller round trip per round trip, not one per id) and refuses the batch with
UNKNOWN_PRODUCER_ID only if the id is still not below the answer. Without this, 100,000 invented ids
each created producer state on the leader (about 1.2 KB per id). Kafka itself creates state for any id
whose first sequence is 0 and bounds it by `producer.id.expiration.ms` (KIP-854, modelled in
`storage/producer_state.py` beside a per-partition cap); this check stops the ids at the door.

When the controller cannot be asked (the heartbeat fails), the batch is let through: a broker that cannot
reach its controller still leads its partitions, and refusing a legitimate producer there would trade
availability for what the per-partition cap already bounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

NextProducerId = Callable[[], Awaitable[int | None]]
"""Asks the controller (a heartbeat): the next producer id it will hand out, None when it cannot be asked."""


class ProducerIdManager:
    def __init__(self, ask_controller: NextProducerId) -> None:
        self._ask = ask_controller
        self.next_producer_id = 0  # every id below this was handed out
        self._asks_started = 0
        self._asking: asyncio.Future[int | None] | None = None

    def note(self, next_producer_id: int) -> None:
        """The controller said (heartbeat) or showed (an INIT_PRODUCER_ID answer) how far it has handed out."""
        if next_producer_id > self.next_producer_id:
            self.next_producer_id = next_producer_id

    def known(self, producer_id: int) -> bool:
        return producer_id < self.next_producer_id

    async def handed_out(self, producer_id: int) -> bool:
        """Whether `producer_id` was handed out, asking the controller when it is not known yet. Waits for
        an answer to a question asked after this call, shared with every other caller waiting on it."""
        if self.known(producer_id):
            return True
        asked_after = self._asks_started
        reachable = False
        while True:
            task = self._asking
            if task is None or task.done():
                if self._asks_started > asked_after:
                    break  # a question asked after this call has its answer
                self._asks_started += 1
                task = self._asking = asyncio.ensure_future(self._ask())
            answer = await asyncio.shield(task)
            reachable = answer is not None  # the last answer awaited is the one asked after this call
            if answer is not None:
                self.note(answer)
        return self.known(producer_id) or not reachable
