"""The producer's sender: one PRODUCE per broker carries a batch for every partition it leads.

How this works
--------------
Like Kafka's Sender, requests go per broker, not per partition. `ClusterClient.produce(tp, records)`
queues the record set for `tp`'s leader and awaits its own answer. Each broker has a FIFO queue per
partition and at most `max.in.flight.requests.per.connection` PRODUCE requests outstanding. A drain
(scheduled once per event-loop turn after something was queued, and again whenever a request finishes)
builds one request from the head of every partition's queue, up to `max.request.size` bytes (at least
one record set); when every slot is busy the queues grow and the next request takes the next batch of
each. Partitions take turns at the front (a drained partition moves to the back), as Kafka's drain
index does, so a size-capped request does not starve the last partitions. Nothing lingers here: the
record accumulator decides how long records wait for company.

    broker 2: p0 [16K][16K]   p3 [16K]   --drain-->  PRODUCE{p0: 16K, p3: 16K}   (then p0's second)

Kafka's PRODUCE (v3+) carries exactly one batch per partition, and so does this sender by default.
This broker accepts several batches of a partition end to end, so `batches_per_partition` > 1 lets one
request take up to that many queued record sets of a partition: fewer, fuller requests when the
producer is ahead of the broker (docs/benchmarks.md has what it buys).

The answer is split back per caller: each record set gets its partition's error, or, when sets of one
partition were joined, the base offset the leader gave the first one plus the records before it. A
request that fails as a whole (timeout, broken connection) fails every set it carried with the same
exception, exactly as if each had been sent alone; the sender never resends, that is the caller's call.
Record sets of one partition stay in order: one connection per broker and FIFO queues. Only record
sets with the same `acks` and `timeout_ms` share a request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode
from protocol.messages import (
    ProducePartition,
    ProducePartitionResponse,
    ProduceRequest,
    ProduceResponse,
    TopicPartition,
)

if TYPE_CHECKING:
    from client.cluster_client import ClusterClient

DEFAULT_MAX_IN_FLIGHT = 5  # max.in.flight.requests.per.connection
DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024  # max.request.size


@dataclass(slots=True)
class _Queued:
    tp: TopicPartition
    records: bytes
    acks: int
    timeout_ms: int
    future: asyncio.Future[ProduceResponse]


@dataclass(slots=True)
class _Node:
    queues: dict[TopicPartition, deque[_Queued]] = field(default_factory=dict)
    in_flight: int = 0
    scheduled: bool = False


class Sender:
    def __init__(
        self,
        client: ClusterClient,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        batches_per_partition: int = 1,
    ) -> None:
        if max_in_flight < 1 or batches_per_partition < 1:
            raise ValueError("max.in.flight.requests.per.connection and batches per partition must be >= 1")
        self.client = client
        self.max_in_flight = max_in_flight
        self.max_request_bytes = max_request_bytes
        self.batches_per_partition = batches_per_partition
        self._nodes: dict[int, _Node] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests_sent = 0
        self.record_sets_sent = 0

    @property
    def requests_in_flight(self) -> int:
        """PRODUCE requests sent and not answered, over every broker."""
        return sum(node.in_flight for node in self._nodes.values())

    def produce(
        self, broker_id: int, tp: TopicPartition, records: bytes, acks: int, timeout_ms: int
    ) -> asyncio.Future[ProduceResponse]:
        """Queue `records` for `tp` on its leader `broker_id`; the future holds `tp`'s own answer."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ProduceResponse] = loop.create_future()
        node = self._nodes.get(broker_id)
        if node is None:
            node = self._nodes[broker_id] = _Node()
        queue = node.queues.get(tp)
        if queue is None:
            queue = node.queues[tp] = deque()
        queue.append(_Queued(tp, records, acks, timeout_ms, future))
        if not node.scheduled and node.in_flight < self.max_in_flight:
            node.scheduled = True
            loop.call_soon(self._drain, broker_id, node)
        return future

    def _drain(self, broker_id: int, node: _Node) -> None:
        node.scheduled = False
        while node.queues and node.in_flight < self.max_in_flight:
            taken = self._take(node)
            if not taken:
                continue
            node.in_flight += 1
            task = asyncio.get_running_loop().create_task(self._send(broker_id, node, taken))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take(self, node: _Node) -> list[_Queued]:
        """The next request's record sets: up to `batches_per_partition` from the head of each partition's
        queue, partitions in turn, same acks and timeout, up to max.request.size bytes (at least one)."""
        taken: list[_Queued] = []
        size = 0
        for tp in list(node.queues):
            queue = node.queues[tp]
            count = 0
            while queue and count < self.batches_per_partition:
                item = queue[0]
                if item.future.done():  # the caller gave up before it was sent
                    queue.popleft()
                    continue
                if taken and (
                    item.acks != taken[0].acks
                    or item.timeout_ms != taken[0].timeout_ms
                    or size + len(item.records) > self.max_request_bytes
                ):
                    break
                taken.append(queue.popleft())
                size += len(item.records)
                count += 1
            del node.queues[tp]
            if queue:
                node.queues[tp] = queue  # what is left waits at the back: the others go first next time
            if size >= self.max_request_bytes:
                break
        return taken

    async def _send(self, broker_id: int, node: _Node, taken: list[_Queued]) -> None:
        try:
            by_tp: dict[TopicPartition, list[_Queued]] = {}
            for item in taken:
                by_tp.setdefault(item.tp, []).append(item)
            partitions = [ProducePartition(tp.topic, tp.partition, _joined(items)) for tp, items in by_tp.items()]
            acks, timeout_ms = taken[0].acks, taken[0].timeout_ms
            request = ProduceRequest(acks, timeout_ms, partitions)
            self.requests_sent += 1
            self.record_sets_sent += len(taken)
            try:
                if acks == 0:
                    await self.client.send_to_no_response(broker_id, request)
                    response = None
                else:
                    response = await self.client.send_to(broker_id, request, timeout_s=timeout_ms / 1000.0 + 5.0)
            except asyncio.CancelledError:
                _fail(taken, ConnectionError("the producer was closed"))
                raise
            except Exception as exc:
                _fail(taken, exc)
                return
            for tp, items in by_tp.items():
                _answer(tp, items, response)
        finally:
            node.in_flight -= 1
            if node.queues and not node.scheduled:
                node.scheduled = True
                asyncio.get_running_loop().call_soon(self._drain, broker_id, node)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for node in self._nodes.values():
            for queue in node.queues.values():
                _fail(list(queue), ConnectionError("the producer was closed"))
            node.queues.clear()


def _joined(items: list[_Queued]) -> bytes:
    return items[0].records if len(items) == 1 else b"".join(i.records for i in items)


def _fail(items: list[_Queued], exc: BaseException) -> None:
    for item in items:
        if not item.future.done():
            item.future.set_exception(exc)


def _answer(tp: TopicPartition, items: list[_Queued], response: ProduceResponse | None) -> None:
    """Give each record set of `tp` its own single-partition answer."""
    if response is None:  # acks=0: no answer to wait for
        for item in items:
            if not item.future.done():
                item.future.set_result(None)  # type: ignore[arg-type]
        return
    part = next((p for p in response.partitions if p.topic == tp.topic and p.partition == tp.partition), None)
    if part is None:
        code = response.error_code or int(ErrorCode.UNKNOWN_SERVER_ERROR)
        message = response.error_message or f"the response had no answer for {tp}"
    base = part.base_offset if part is not None else -1
    last = len(items) - 1
    for i, item in enumerate(items):
        if not item.future.done():
            if part is None:
                own = ProducePartitionResponse(tp.topic, tp.partition, error_code=code, error_message=message)
            else:
                own = ProducePartitionResponse(
                    tp.topic, tp.partition, part.error_code, part.error_message, base, part.log_start_offset
                )
            item.future.set_result(
                ProduceResponse([own], response.error_code, response.error_message, response.throttle_time_ms)
            )
        if i < last:  # the next set's base: walking this one's batch headers is only needed for a next one
            base = _advance(base, item.records)


def _advance(base: int, records: bytes) -> int:
    """The offset after `records` when they were appended at `base` (-1 stays -1)."""
    # Imported here: a client that only asks (`minibroker topic list`) never loads the record batch
    # codec and its CRC library; a merged answer is one call per record set, not per record.
    from protocol.record_batch import iter_headers

    if base < 0:
        return base
    return base + sum(h.last_offset_delta + 1 for h in iter_headers(records))
