"""The broker's producer ids (KIP-730): a block reserved from the controller for INIT_PRODUCER_ID, and what
the metadata log says was handed out, so a PRODUCE cannot invent ids.

How this works
--------------
Handing out. INIT_PRODUCER_ID takes the next id of this broker's block; it needs no controller. A broker
reserves its first block as soon as it is registered (`reserve_ahead`), not at its first INIT_PRODUCER_ID,
so one that has lost every controller since still starts producers. When a
tenth of the block is left, the next block is reserved in the background (ALLOCATE_PRODUCER_IDS to the
active controller, which commits the block before it answers: controller/producer_id_control_manager.py),
so a producer seldom waits, and a broker that cannot reach any controller goes on starting producers until
its block runs out (then INIT_PRODUCER_ID answers COORDINATOR_LOAD_IN_PROGRESS, retriable, as Kafka's
does). A producer that names its id gets the same id at the next epoch (Kafka's epoch bump after
UNKNOWN_PRODUCER_ID or a timeout), if the id was handed out; at the epoch's limit it gets a new id.

Checking. Every block moves the metadata image's next producer id, so "every id below N was handed out" is
the whole state, and each broker learns N from the log it replicates (`note`). A leader appends an
idempotent batch only if its producer id is below the N it knows. An id at or above it may have been
handed out a moment ago by another broker from a block this broker's metadata has not reached yet: the
leader then asks once more (`ask`: its metadata caught up with the quorum, shared by every PRODUCE
waiting meanwhile, so a flood of invented ids costs one round per round, not one per id) and refuses the
batch with UNKNOWN_PRODUCER_ID only if the id is still not below the answer. Without this, 100,000
invented ids each created producer state on the leader (about 1.2 KB per id). Kafka itself creates state
for any id whose first sequence is 0 and bounds it by `producer.id.expiration.ms` (KIP-854, modelled in
`storage/producer_state.py` beside a per-partition cap); this check stops the ids at the door.

When the quorum cannot be asked (no controller reachable), the batch is let through: a broker that cannot
reach its controllers still leads its partitions, and refusing a legitimate producer there would trade
availability for what the per-partition cap already bounds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from protocol.errors import ErrorCode
from protocol.messages import InitProducerIdRequest, InitProducerIdResponse

log = logging.getLogger(__name__)

NextProducerId = Callable[[], Awaitable[int | None]]
"""Brings the metadata up to the quorum's: the next producer id no broker has, None when no one can be asked."""

AllocateBlock = Callable[[], Awaitable[tuple[int, int] | None]]
"""Reserves a block from the active controller: (first id, how many), None when no controller answered."""

MAX_PRODUCER_EPOCH = 2**15 - 1  # an int16 in the batch header
PREFETCH_FRACTION = 0.1  # reserve the next block when this much of the current one is left


class ProducerIdManager:
    def __init__(self, ask_controller: NextProducerId, allocate_block: AllocateBlock | None = None) -> None:
        self._ask = ask_controller
        self._allocate = allocate_block
        self.next_producer_id = 0  # every id below this was handed out
        self._asks_started = 0
        self._asking: asyncio.Future[int | None] | None = None
        self._block_next = 0  # this broker's block: [block_next, block_end)
        self._block_end = 0
        self._block_len = 0
        self._prefetched: tuple[int, int] | None = None
        self._reserving: asyncio.Future[tuple[int, int] | None] | None = None
        self.blocks_reserved = 0

    # -- handing out ---------------------------------------------------------------------------------

    async def init_producer_id(self, request: InitProducerIdRequest) -> InitProducerIdResponse:
        if request.producer_id >= 0 and self.known(request.producer_id) and request.producer_epoch < MAX_PRODUCER_EPOCH:
            return InitProducerIdResponse(producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1)
        producer_id = await self._next_id()
        if producer_id is None:
            return InitProducerIdResponse(
                error_code=int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                error_message="this broker's block of producer ids is used up and no controller gave another: retry",
            )
        return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)

    @property
    def ids_left(self) -> int:
        return self._block_end - self._block_next

    @property
    def ids_ready(self) -> int:
        """Ids this broker can hand out with no controller: the rest of its block and the block kept next."""
        kept = self._prefetched[1] if self._prefetched is not None else 0
        return self.ids_left + kept

    async def _next_id(self) -> int | None:
        while self.ids_left <= 0:
            if self._prefetched is not None:
                prefetched, self._prefetched = self._prefetched, None
                self._use(prefetched)
                break
            block = await self._reserve()
            if block is None:
                return None
            # Several callers wait for one reservation: the first to wake installs the block, the others take
            # ids from it (installing it again would hand its first ids out twice).
            if self.ids_left <= 0 and block[0] >= self._block_end:
                self._use(block)
        producer_id = self._block_next
        self._block_next += 1
        if self.ids_left <= self._block_len * PREFETCH_FRACTION and self._prefetched is None:
            self._prefetch()
        return producer_id

    def reserve_ahead(self) -> None:
        """Reserve this broker's first block before any INIT_PRODUCER_ID asks for it (called on the broker's
        loop tick once it is registered), so a broker that loses every controller later still starts
        producers from its block. Nothing when a block is held, kept or being reserved."""
        if self.ids_left > 0 or self._prefetched is not None:
            return
        if self._reserving is not None and not self._reserving.done():
            return
        self._prefetch()

    def _use(self, block: tuple[int, int]) -> None:
        start, length = block
        self._block_next, self._block_end, self._block_len = start, start + length, length
        if self._prefetched is not None and self._prefetched[0] < self._block_end:
            self._prefetched = None  # the same reservation, kept by the prefetch's callback too
        self.note(start + length)  # committed before the controller answered: handed out

    def _reserve(self) -> asyncio.Future[tuple[int, int] | None]:
        """One reservation at a time, shared by every caller waiting for it."""
        if self._reserving is None or self._reserving.done():
            self._reserving = asyncio.ensure_future(self._reserve_block())
        return asyncio.shield(self._reserving)

    async def _reserve_block(self) -> tuple[int, int] | None:
        if self._allocate is None:
            return None
        block = await self._allocate()
        if block is not None:
            self.blocks_reserved += 1
        return block

    def _prefetch(self) -> None:
        future = self._reserve()

        def keep(done: asyncio.Future[tuple[int, int] | None]) -> None:
            if done.cancelled():
                return
            if done.exception() is not None:
                log.warning("reserving the next block of producer ids failed: %s", done.exception())
                return
            block = done.result()
            if block is not None and self._prefetched is None and block[0] >= self._block_end:
                self._prefetched = block

        future.add_done_callback(keep)

    # -- checking --------------------------------------------------------------------------------------

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
