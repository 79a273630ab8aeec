"""The seeded workload: producers that remember every write's fate, and consumers that read from offset 0.

A producer sends one record per PRODUCE to the partition's leader as it last learned it (METADATA from
any live broker), each record unique (`<producer>-<seq>`, padded to the record size). Each write ends:
- acked: the leader answered with its offset;
- failed: refused before it was appended (not the leader, fenced, not enough replicas before append);
- indeterminate: timed out, the connection failed, or NOT_ENOUGH_REPLICAS_AFTER_APPEND: it may or may not
  be in the log. It is never resent under the same value, so a value seen at two offsets is a bug.
With `--idempotence` a producer is idempotent (KIP-98): its batches carry its id, epoch and a sequence per
partition, and it resends a write left in doubt, the same bytes, until the leader answers: the leader
answers a batch it already has with the original offset, so a value at two offsets is still a bug, and a
write stays indeterminate only when the producer gave up on it.
A consumer fetches each partition from its leader with replica id -1, so it sees only records below the
high watermark; the checker holds what it sees against what was committed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from protocol.errors import ErrorCode
from protocol.messages import (
    CONSUMER_REPLICA_ID,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    InitProducerIdRequest,
    MetadataRequest,
    MetadataResponse,
    ProducePartition,
    ProduceRequest,
    TopicPartition,
)
from protocol.record_batch import build_batch, iter_records
from protocol.transport import NETWORK_ERRORS
from server_common.time import Time
from sim.network import SimNetwork, SimTransport
from sim.trace import Trace

FAILED_BEFORE_APPEND = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.KAFKA_STORAGE_ERROR,
}


# Answers after which a record may be in the log: only an idempotent producer resends after them.
MAYBE_APPENDED = {ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT}
DELIVERY_TIMEOUT_S = 30.0  # an idempotent producer resends for this long (Kafka's delivery.timeout.ms)


@dataclass
class WriteHistory:
    acked: dict[bytes, tuple[TopicPartition, int, int]] = field(default_factory=dict)  # value -> (tp, offset, acks)
    failed: int = 0
    indeterminate: int = 0
    attempted: int = 0


def record_id(value: bytes | None) -> bytes:
    return b"" if value is None else value.split(b"|", 1)[0]


class Metadata:
    """Where each partition's leader is, as some live broker last said."""

    def __init__(self, transport: SimTransport, brokers: list[int], topics: list[str], rng: random.Random) -> None:
        self.transport = transport
        self.brokers = brokers
        self.topics = topics
        self.rng = rng
        self.leaders: dict[TopicPartition, int] = {}

    async def refresh(self) -> None:
        for broker in self.rng.sample(self.brokers, len(self.brokers)):
            try:
                resp = await self.transport.send(broker, MetadataRequest(self.topics), 1000)
            except NETWORK_ERRORS:
                continue
            assert isinstance(resp, MetadataResponse)
            for t in resp.topics:
                for p in t.partitions:
                    if p.leader_id >= 0:
                        self.leaders[TopicPartition(t.topic, p.partition)] = p.leader_id
            return


class Producer:
    def __init__(
        self,
        producer_id: int,
        network: SimNetwork,
        time: Time,
        rng: random.Random,
        partitions: list[TopicPartition],
        brokers: list[int],
        history: WriteHistory,
        trace: Trace,
        *,
        acks: int,
        rate: float,
        record_bytes: int,
        on_ack: Callable[[bytes, TopicPartition, int, int, int], None] | None = None,
        idempotent: bool = False,
    ) -> None:
        self.id = producer_id
        self.transport = SimTransport(network, producer_id)
        self.time = time
        self.rng = rng
        self.partitions = partitions
        self.metadata = Metadata(self.transport, brokers, sorted({tp.topic for tp in partitions}), rng)
        self.history = history
        self.trace = trace
        self.acks = acks
        self.interval_s = 1.0 / rate
        self.record_bytes = record_bytes
        self.seq = 0
        self.on_ack = on_ack
        # An idempotent producer (KIP-98): it asks for a producer id (INIT_PRODUCER_ID, before its first
        # write: leaders refuse ids never handed out) and numbers each partition's records; a write left in
        # doubt is resent as is.
        self.idempotent = idempotent and acks == -1
        self.producer_id = -1
        self.producer_epoch = 0
        self.sequences: dict[TopicPartition, int] = {}

    async def run(self, until_s: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until_s:
            await asyncio.sleep(self.interval_s * (0.5 + self.rng.random()))
            await self.produce_one(self.rng.choice(self.partitions))

    async def produce_one(self, tp: TopicPartition) -> bool:
        leader = self.metadata.leaders.get(tp)
        if leader is None:
            await self.metadata.refresh()
            leader = self.metadata.leaders.get(tp)
            if leader is None:
                return False
        self.seq += 1
        rid = f"{self.id}-{self.seq}".encode()
        value = (rid + b"|").ljust(self.record_bytes, b".")
        if self.idempotent:
            return await self._produce_idempotent(tp, leader, rid, value)
        batch = build_batch([value], timestamp_ms=self.time.milliseconds())
        request = ProduceRequest(self.acks, 5000, [ProducePartition(tp.topic, tp.partition, batch)])
        self.history.attempted += 1
        try:
            resp = await self.transport.send(leader, request, 6000)
        except NETWORK_ERRORS as exc:
            self.history.indeterminate += 1
            self.trace.event(self.id, "produce-indeterminate", tp=str(tp), id=rid.decode(), why=type(exc).__name__)
            await self.metadata.refresh()
            return False
        part = resp.partitions[0]
        code = ErrorCode(part.error_code)
        if code is ErrorCode.NONE:
            self.history.acked[rid] = (tp, part.base_offset, self.acks)
            self.trace.event(self.id, "ack", tp=str(tp), id=rid.decode(), offset=part.base_offset, leader=leader)
            if self.on_ack is not None:
                self.on_ack(rid, tp, part.base_offset, self.acks, leader)
            return True
        if code in FAILED_BEFORE_APPEND:
            self.history.failed += 1
        else:
            self.history.indeterminate += 1
        self.trace.event(self.id, "produce-error", tp=str(tp), id=rid.decode(), error=code.name)
        await self.metadata.refresh()
        return False

    async def _produce_idempotent(self, tp: TopicPartition, leader: int, rid: bytes, value: bytes) -> bool:
        """Send until the leader answers NONE (a resend of a batch it has is answered with the original
        offset), or DELIVERY_TIMEOUT_S passes; a batch given up on bumps the epoch, sequences restart at 0."""
        if self.producer_id < 0 and not await self.init_producer_id(leader):
            self.history.attempted += 1
            self.history.failed += 1  # never sent: no producer id to send it with
            self.trace.event(self.id, "produce-error", tp=str(tp), id=rid.decode(), error="NO_PRODUCER_ID")
            return False
        sequence = self.sequences.get(tp, 0)
        batch = build_batch(
            [value],
            timestamp_ms=self.time.milliseconds(),
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=sequence,
        )
        request = ProduceRequest(self.acks, 5000, [ProducePartition(tp.topic, tp.partition, batch)])
        self.history.attempted += 1
        in_doubt = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DELIVERY_TIMEOUT_S
        attempt = 0
        while loop.time() < deadline:
            attempt += 1
            if attempt > 1:
                await asyncio.sleep(0.1 + 0.1 * self.rng.random())
                await self.metadata.refresh()
                leader = self.metadata.leaders.get(tp, leader)
            try:
                resp = await self.transport.send(leader, request, 6000)
            except NETWORK_ERRORS as exc:
                in_doubt = True
                self.trace.event(self.id, "produce-resend", tp=str(tp), id=rid.decode(), why=type(exc).__name__)
                continue
            code = ErrorCode(resp.partitions[0].error_code)
            if code is ErrorCode.NONE:
                offset = resp.partitions[0].base_offset
                self.sequences[tp] = sequence + 1
                self.history.acked[rid] = (tp, offset, self.acks)
                self.trace.event(self.id, "ack", tp=str(tp), id=rid.decode(), offset=offset, leader=leader)
                if self.on_ack is not None:
                    self.on_ack(rid, tp, offset, self.acks, leader)
                return True
            if code not in FAILED_BEFORE_APPEND and code not in MAYBE_APPENDED:
                break  # OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID, ...: not appended, will not be
            in_doubt = in_doubt or code in MAYBE_APPENDED
            self.trace.event(self.id, "produce-resend", tp=str(tp), id=rid.decode(), why=code.name)
        if in_doubt:
            self.history.indeterminate += 1
        else:
            self.history.failed += 1
        self.trace.event(self.id, "produce-gave-up", tp=str(tp), id=rid.decode(), epoch=self.producer_epoch)
        self.producer_epoch += 1
        self.sequences.clear()
        return False

    async def init_producer_id(self, broker: int) -> bool:
        """INIT_PRODUCER_ID through `broker` (it forwards to the controller); False when it went unanswered."""
        try:
            resp = await self.transport.send(broker, InitProducerIdRequest(None, 60000, -1, -1), 6000)
        except NETWORK_ERRORS:
            return False
        if resp.error_code != ErrorCode.NONE:
            return False
        self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
        self.trace.event(self.id, "producer-id", producer_id=self.producer_id)
        return True


class Consumer:
    def __init__(
        self,
        consumer_id: int,
        network: SimNetwork,
        rng: random.Random,
        partitions: list[TopicPartition],
        brokers: list[int],
        on_record: Callable[[int, TopicPartition, int, bytes, int], None],
    ) -> None:
        self.id = consumer_id
        self.transport = SimTransport(network, consumer_id)
        self.rng = rng
        self.partitions = partitions
        self.metadata = Metadata(self.transport, brokers, sorted({tp.topic for tp in partitions}), rng)
        self.positions = {tp: 0 for tp in partitions}
        self.on_record = on_record
        self.consumed = 0

    async def run(self, until_s: float) -> None:
        """One long-polling fetch loop per partition, as a consumer's fetcher keeps one in flight."""
        await asyncio.gather(*(self._follow(tp, until_s) for tp in self.partitions))

    async def _follow(self, tp: TopicPartition, until_s: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until_s:
            if not await self.poll(tp):
                await asyncio.sleep(0.05 + 0.05 * self.rng.random())

    async def poll(self, tp: TopicPartition) -> bool:
        leader = self.metadata.leaders.get(tp)
        if leader is None:
            await self.metadata.refresh()
            return False
        position = self.positions[tp]
        request = FetchRequest(
            CONSUMER_REPLICA_ID, 500, 1, 1 << 20, [FetchPartition(tp.topic, tp.partition, position, 1 << 20)]
        )
        try:
            resp = await self.transport.send(leader, request, 2000)
        except NETWORK_ERRORS:
            await self.metadata.refresh()
            return False
        assert isinstance(resp, FetchResponse)
        if resp.error_code or not resp.partitions:
            await self.metadata.refresh()
            return False
        part = resp.partitions[0]
        if part.error_code != ErrorCode.NONE:
            await self.metadata.refresh()
            return False
        got = False
        for record in iter_records(part.records):
            if record.offset < position:
                continue  # a batch starts before our position: skip what we already have
            self.on_record(self.id, tp, record.offset, record_id(record.value), part.high_watermark)
            self.positions[tp] = record.offset + 1
            self.consumed += 1
            got = True
        return got
