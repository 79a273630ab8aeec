"""The producer against a real broker: one PRODUCE per broker for all its partitions, offsets per record."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from client.cluster_client import ClusterClient
from client.producer import Producer
from cluster.local_cluster import free_ports
from protocol.errors import ErrorCode
from protocol.messages import FetchPartition, TopicPartition
from protocol.record_batch import build_batch, iter_records
from tests.integration.processes import BrokerProcess, assign, standalone_broker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

P0 = TopicPartition("p", 0)
P1 = TopicPartition("p", 1)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    (port,) = free_ports(1)
    b = standalone_broker(tmp_path, 1, port)
    b.start()
    asyncio.run(assign([b], "p", 2, {0: 1, 1: 1}, replicas=[1]))
    yield b
    b.stop()


async def values_of(client: ClusterClient, tp: TopicPartition) -> list[bytes | None]:
    resp = await client.fetch(1, [FetchPartition(tp.topic, tp.partition, 0, 1 << 20)], max_wait_ms=0)
    (part,) = resp.partitions
    assert part.error_code == ErrorCode.NONE
    return [r.value for r in iter_records(part.records)]


async def test_one_produce_carries_a_batch_for_every_partition_the_leader_leads(broker: BrokerProcess) -> None:
    async with ClusterClient(f"127.0.0.1:{broker.port}") as client:
        await client.refresh_metadata(["p"])
        producer = Producer(client, acks=1, linger_ms=60_000)
        acked: list[tuple[TopicPartition, int, str | None]] = []
        in_flight_seen: list[tuple[int, int]] = []  # (batches, requests) unanswered as each record's ack arrives
        for i in range(3):
            for tp in (P0, P1):

                def callback(o: int, e: str | None, tp: TopicPartition = tp) -> None:
                    acked.append((tp, o, e))
                    in_flight_seen.append((producer.batches_in_flight, client.sender.requests_in_flight))

                await producer.send(tp, f"{tp.partition}-{i}".encode(), callback=callback)
        assert acked == []  # lingering: nothing sent before the flush
        assert producer.batches_in_flight == 0 and not producer.blocked_on_buffer
        await producer.flush()
        assert client.sender.requests_sent == 1
        # the request is answered before either batch's records hear of it; the second batch is still
        # unanswered while the first one's records are told
        assert in_flight_seen == [(1, 0)] * 3 + [(0, 0)] * 3
        assert producer.batches_in_flight == 0 and client.sender.requests_in_flight == 0
        assert sorted(acked) == sorted((tp, i, None) for tp in (P0, P1) for i in range(3))
        assert await values_of(client, P0) == [b"0-0", b"0-1", b"0-2"]
        assert await values_of(client, P1) == [b"1-0", b"1-1", b"1-2"]


async def test_a_lingering_batch_is_sent_after_linger_ms_without_a_flush(broker: BrokerProcess) -> None:
    async with ClusterClient(f"127.0.0.1:{broker.port}") as client:
        await client.refresh_metadata(["p"])
        producer = Producer(client, acks=1, linger_ms=20)
        done = asyncio.get_running_loop().create_future()
        await producer.send(P0, b"alone", callback=lambda o, e: done.set_result((o, e)))
        assert await asyncio.wait_for(done, 10) == (0, None)
        await producer.close()


async def test_a_full_batch_goes_as_soon_as_the_next_record_opens_a_new_one(broker: BrokerProcess) -> None:
    # Kafka's producer wakes its sender when an append finds the batch full or opens a new one: a full
    # batch does not wait out linger.ms, however long that is; the new batch does.
    async with ClusterClient(f"127.0.0.1:{broker.port}") as client:
        await client.refresh_metadata(["p"])
        producer = Producer(client, acks=1, batch_size=1000, linger_ms=60_000)
        loop = asyncio.get_running_loop()
        first_batch_acked = loop.create_future()
        acked: list[int] = []

        def on_ack(offset: int, error: str | None) -> None:
            assert error is None
            acked.append(offset)
            if len(acked) == 3:
                first_batch_acked.set_result(None)

        for _ in range(3):  # three 300-byte records fill most of a 1000-byte batch; the fourth does not fit
            await producer.send(P0, b"x" * 300, callback=on_ack)
        await asyncio.sleep(0.2)
        assert acked == [] and client.sender.requests_sent == 0  # the batch is not full yet: it lingers
        await producer.send(P0, b"y" * 300, callback=on_ack)
        await asyncio.wait_for(first_batch_acked, 10)
        assert acked == [0, 1, 2]  # the fourth record's batch still lingers
        assert await values_of(client, P0) == [b"x" * 300] * 3
        await producer.close()
        assert acked == [0, 1, 2, 3]


async def test_a_producer_looks_up_a_partition_its_client_has_no_metadata_for(broker: BrokerProcess) -> None:
    # As Kafka's producer waits on metadata in send(): a client that never asked for the topic still delivers.
    async with ClusterClient(f"127.0.0.1:{broker.port}") as client:
        producer = Producer(client, acks=1)
        answers: dict[bytes, tuple[int, str | None]] = {}
        for tp, value in ((P1, b"first"), (TopicPartition("p", 9), b"nowhere")):
            await producer.send(tp, value, callback=lambda o, e, v=value: answers.setdefault(v, (o, e)))
        await producer.close()
        assert answers[b"first"] == (0, None)
        assert answers[b"nowhere"][0] == -1 and "unknown partition p-9" in str(answers[b"nowhere"][1])
        assert await values_of(client, P1) == [b"first"]


async def test_queued_record_sets_of_one_partition_share_a_request_only_when_allowed(broker: BrokerProcess) -> None:
    async def produce_ten(client: ClusterClient, first: int) -> list[int]:
        sets = [build_batch([b"%d" % (first + 2 * i), b"%d" % (first + 2 * i + 1)]) for i in range(10)]
        answers = await asyncio.gather(*(client.produce(P0, s, acks=1) for s in sets))
        assert all(a is not None and a.partitions[0].error_code == ErrorCode.NONE for a in answers)
        return [a.partitions[0].base_offset for a in answers if a is not None]

    async with ClusterClient(f"127.0.0.1:{broker.port}", max_in_flight=1) as kafka_like:
        await kafka_like.refresh_metadata(["p"])
        assert await produce_ten(kafka_like, 0) == list(range(0, 20, 2))
        assert kafka_like.sender.requests_sent == 10  # one batch per partition per request, as Kafka
    async with ClusterClient(f"127.0.0.1:{broker.port}", max_in_flight=1, batches_per_partition=8) as joined:
        await joined.refresh_metadata(["p"])
        assert await produce_ten(joined, 20) == list(range(20, 40, 2))
        assert joined.sender.requests_sent == 2  # eight sets end to end, then the other two
        assert await values_of(joined, P0) == [b"%d" % i for i in range(40)]


def idempotent(seq: int, *values: bytes, epoch: int = 0) -> bytes:
    return build_batch(list(values), producer_id=7, producer_epoch=epoch, base_sequence=seq)


async def answer(client: ClusterClient, records: bytes) -> tuple[int, int]:
    resp = await client.produce(P0, records, acks=-1)
    assert resp is not None
    (part,) = resp.partitions
    return part.error_code, part.base_offset


async def test_a_resent_idempotent_batch_gets_its_original_offset_on_the_wire_even_after_a_crash(
    broker: BrokerProcess,
) -> None:
    async with ClusterClient(f"127.0.0.1:{broker.port}") as client:
        await client.refresh_metadata(["p"])
        assert await answer(client, idempotent(0, b"a", b"b")) == (ErrorCode.NONE, 0)
        assert await answer(client, idempotent(2, b"c")) == (ErrorCode.NONE, 2)
        assert await answer(client, idempotent(0, b"a", b"b")) == (ErrorCode.NONE, 0)  # a resend: not appended
        assert await answer(client, idempotent(5, b"gap")) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        assert await answer(client, idempotent(3, b"d")) == (ErrorCode.NONE, 3)
        assert await values_of(client, P0) == [b"a", b"b", b"c", b"d"]
    # SIGKILL: the producer state is rebuilt from the log, so the resend is still recognised
    broker.kill()
    broker.start()
    await assign([broker], "p", 2, {0: 1, 1: 1}, leader_epoch=1, replicas=[1])
    async with ClusterClient(f"127.0.0.1:{broker.port}") as client:
        await client.refresh_metadata(["p"])
        assert await answer(client, idempotent(3, b"d")) == (ErrorCode.NONE, 3)
        assert await answer(client, idempotent(4, b"e")) == (ErrorCode.NONE, 4)
        assert await values_of(client, P0) == [b"a", b"b", b"c", b"d", b"e"]
