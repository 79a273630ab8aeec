"""PRODUCE of one request shape through either listener: what the Kafka wire costs the brokers beside msgpack.

`bench.kafka_clients` runs this as two child processes (`--child wire-kafka`, `--child wire-native`) against
the same cluster, twice each, alternating. Both children send exactly the same work, so the difference in
the brokers' CPU per batch is the listener's and nothing else:

* one batch of 16 records of 1012-byte values (the bench's `ValuePool`) per PRODUCE, one partition per
  request (librdkafka's shape: it builds one ProduceRequest per partition), acks=all, no idempotence;
* `DEPTH` requests in flight per partition (two leaders' partitions share a connection, so up to
  2 x DEPTH per connection, within librdkafka's max.in.flight of 5), for `seconds`;
* the same 64 batches in both forms: the msgpack form as `client.producer` builds it, and the Kafka v2 form
  of exactly those records (`protocol.kafka_records.native_to_kafka`), sent as Produce v8 framed by hand:
  the request bytes are built once and only the correlation id changes, so the Kafka driver's own CPU
  is as small as it can be; the msgpack driver uses the project's `BrokerConnection`.

Every answer is read and its partition's error code checked (an error is counted, never a success).
The child's result has the fields `bench.kafka_clients.phase_figures` reads.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from typing import Any, cast

from kafka.protocol.producer.produce import ProduceRequest as KProduce

from bench.replication import RECORD_BYTES, RECORDS_PER_BATCH, ValuePool
from network.connection import BrokerConnection
from protocol.framing import frame_prefix
from protocol.kafka_records import native_to_kafka
from protocol.messages import ProducePartition, ProduceRequest
from protocol.record_batch import build_batch

DEPTH = 2
DISTINCT_BATCHES = 64
PRODUCE_VERSION = 8
TIMEOUT_MS = 30_000
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def native_batches(count: int = DISTINCT_BATCHES) -> list[bytes]:
    """`count` stored-form batches of RECORDS_PER_BATCH pool values each, as the native producer builds them."""
    values = ValuePool(count * RECORDS_PER_BATCH).values
    return [
        build_batch(values[i * RECORDS_PER_BATCH : (i + 1) * RECORDS_PER_BATCH], timestamp_ms=1_700_000_000_000 + i)
        for i in range(count)
    ]


def kafka_produce_frame(topic: str, partition: int, batch: bytes) -> bytearray:
    """A whole Produce v8 frame (size prefix included) with correlation id 0, to be patched per send."""
    P = KProduce
    topic_data = P.TopicProduceData(
        name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=partition, records=batch)]
    )
    request = P[PRODUCE_VERSION](transactional_id=None, acks=-1, timeout_ms=TIMEOUT_MS, topic_data=[topic_data])
    request.with_header(correlation_id=0, client_id="bench-wire")
    body = bytes(request.encode(header=True))
    return bytearray(frame_prefix(len(body)) + body)


def produce_v8_error(body: bytes | bytearray, topic: str) -> int:
    """The error code of a Produce v8 answer for one topic and one partition (body after the size)."""
    position = 4  # correlation id
    (topics,) = _INT32.unpack_from(body, position)
    position += 4
    (name_length,) = _INT16.unpack_from(body, position)
    position += 2
    name = bytes(body[position : position + name_length]).decode()
    position += name_length
    (partitions,) = _INT32.unpack_from(body, position)
    position += 4 + 4  # the count, then the partition index
    if topics != 1 or partitions != 1 or name != topic:
        raise ValueError(f"unexpected Produce answer: {topics} topics ({name!r}), {partitions} partitions")
    (error,) = _INT16.unpack_from(body, position)
    return int(error)


class _KafkaConnection(asyncio.Protocol):
    """Size-prefixed Kafka frames; answers matched to requests by correlation id."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.buffer = bytearray()
        self.pending: dict[int, asyncio.Future[bytes]] = {}
        self.next_id = 1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)  # uvloop's do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            (size,) = _INT32.unpack_from(self.buffer, 0)
            if len(self.buffer) < 4 + size:
                return
            body = bytes(self.buffer[4 : 4 + size])
            del self.buffer[: 4 + size]
            (correlation_id,) = _INT32.unpack_from(body, 0)
            future = self.pending.pop(correlation_id, None)
            if future is not None and not future.done():
                future.set_result(body)

    def connection_lost(self, exc: Exception | None) -> None:
        for future in self.pending.values():
            if not future.done():
                future.set_exception(ConnectionError(f"connection lost: {exc}"))
        self.pending.clear()

    async def send(self, frame: bytearray) -> bytes:
        assert self.transport is not None
        correlation_id = self.next_id
        self.next_id += 1
        _INT32.pack_into(frame, 8, correlation_id)  # size, api key, api version, then the correlation id
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.pending[correlation_id] = future
        self.transport.write(bytes(frame))
        return await future


class _Tally:
    def __init__(self) -> None:
        self.batches = 0
        self.errors: dict[str, int] = {}

    def answer(self, error: int) -> None:
        if error == 0:
            self.batches += 1
        else:
            self.errors[str(error)] = self.errors.get(str(error), 0) + 1


async def wire_produce(
    listener: str, topic: str, leaders: dict[int, tuple[str, int]], seconds: float
) -> dict[str, Any]:
    """Run the shape against `leaders` (partition -> leader's address on `listener`); the phase's figures."""
    loop = asyncio.get_running_loop()
    batches = native_batches()
    tally = _Tally()
    closers: list[Any] = []
    workers: list[Any] = []
    deadline = time.monotonic() + seconds
    if listener == "kafka":
        kafka_batches = [native_to_kafka(b) for b in batches]
        kafka_conns: dict[tuple[str, int], _KafkaConnection] = {}
        for address in sorted(set(leaders.values())):
            transport, protocol = await loop.create_connection(_KafkaConnection, *address)
            kafka_conns[address] = protocol
            closers.append(transport.close)

        async def kafka_worker(partition: int, start: int) -> None:
            conn = kafka_conns[leaders[partition]]
            frames = [kafka_produce_frame(topic, partition, b) for b in kafka_batches]
            i = start
            while time.monotonic() < deadline:
                tally.answer(produce_v8_error(await conn.send(frames[i % len(frames)]), topic))
                i += 1

        workers = [kafka_worker(p, d) for p in leaders for d in range(DEPTH)]
    elif listener == "native":
        native_conns: dict[tuple[str, int], BrokerConnection] = {}
        for address in sorted(set(leaders.values())):
            native_conns[address] = await BrokerConnection.connect(*address, "bench-wire", timeout_s=5.0)
            closers.append(native_conns[address].close)

        async def native_worker(partition: int, start: int) -> None:
            conn = native_conns[leaders[partition]]
            i = start
            while time.monotonic() < deadline:
                part = ProducePartition(topic, partition, batches[i % len(batches)])
                response = await conn.send(ProduceRequest(-1, TIMEOUT_MS, [part]), timeout_s=TIMEOUT_MS / 1000)
                tally.answer(response.partitions[0].error_code)
                i += 1

        workers = [native_worker(p, d) for p in leaders for d in range(DEPTH)]
    else:
        raise ValueError(f"unknown listener {listener!r}")
    t = os.times()
    cpu_before = t.user + t.system
    started = time.time()
    await asyncio.gather(*workers)
    ended = time.time()
    t = os.times()
    for close in closers:
        result = close()
        if asyncio.iscoroutine(result):
            await result
    records = tally.batches * RECORDS_PER_BATCH
    return {
        "start": started,
        "end": ended,
        "records": records,
        "value_bytes": records * RECORD_BYTES,
        "failed": sum(tally.errors.values()),
        "errors": tally.errors,
        "cpu_s": t.user + t.system - cpu_before,
    }
