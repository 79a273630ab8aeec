"""Producer ids cannot be invented: a leader appends an idempotent batch only with an id INIT_PRODUCER_ID handed
out, including one handed out a moment ago through another broker, and refuses a flood of invented ids with
UNKNOWN_PRODUCER_ID while appending none of them. A new producer's pipelined first batches, behind a leader's
question about its id, are all appended in order, on both listeners (real broker processes, real TCP)."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Iterator

import pytest
from kafka.protocol.producer.produce import ProduceRequest as KProduceRequest
from kafka.protocol.producer.produce import ProduceResponse as KProduceResponse
from kafka.protocol.producer.transaction import InitProducerIdRequest as KInitProducerIdRequest
from kafka.protocol.producer.transaction import InitProducerIdResponse as KInitProducerIdResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from cluster.local_cluster import LocalClusterState, ProcessInfo
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import (
    InitProducerIdRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    MetadataRequest,
    ProducePartition,
    ProduceRequest,
)
from protocol.record_batch import build_batch
from tests.integration.processes import kafka_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "ids"


async def create_topic(state: LocalClusterState, topic: str) -> None:
    from client.cluster_client import ClusterClient

    client = ClusterClient(state.bootstrap)
    try:
        assert (await client.create_topic(topic, 1, 3)).topics[0].error_code == 0
        await client.wait_for_leaders(topic)
    finally:
        await client.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterState]:
    # A heartbeat every 5 s: a leader that learned of a new id only from heartbeats would refuse it, and
    # one that must ask about every new id makes its first PRODUCE wait for that answer.
    overrides = {"broker.heartbeat.interval.ms": "5000", "broker.session.timeout.ms": "15000"}
    with kafka_cluster(tmp_path_factory.mktemp("producer-ids") / "cluster", overrides) as state:
        asyncio.run(create_topic(state, TOPIC))
        yield state


async def leader_and_other(state: LocalClusterState, topic: str) -> tuple[ProcessInfo, ProcessInfo]:
    first = state.brokers[0]
    async with await BrokerConnection.connect(first.host, first.port) as conn:
        partition = (await conn.send(MetadataRequest([topic]))).topics[0].partitions[0]
    leader = next(b for b in state.brokers if b.node_id == partition.leader_id)
    return leader, next(b for b in state.brokers if b.node_id != leader.node_id)


def produce(producer_id: int, sequence: int = 0, value: bytes = b"v", topic: str = TOPIC) -> ProduceRequest:
    batch = build_batch([value], producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    return ProduceRequest(-1, 10_000, [ProducePartition(topic, 0, batch)])


async def test_a_leader_appends_only_producer_ids_that_were_handed_out(cluster: LocalClusterState) -> None:
    leader, other = await leader_and_other(cluster, TOPIC)

    async with (
        await BrokerConnection.connect(leader.host, leader.port) as to_leader,
        await BrokerConnection.connect(other.host, other.port) as to_other,
    ):
        # An id handed out through another broker a moment ago, long before the leader's next heartbeat
        given = await to_other.send(InitProducerIdRequest())
        assert given.error_code == 0 and given.producer_id >= 0
        answer = (await to_leader.send(produce(given.producer_id))).partitions[0]
        assert (answer.error_code, answer.base_offset) == (0, 0)

        # An invented id is refused, and said why
        invented = given.producer_id + 1_000_000
        refused = (await to_leader.send(produce(invented))).partitions[0]
        assert refused.error_code == ErrorCode.UNKNOWN_PRODUCER_ID
        assert f"producer id {invented} was never handed out" in (refused.error_message or "")

        # A flood of invented ids, pipelined on one connection: each refused, none appended
        flood = [to_leader.send(produce(invented + i)) for i in range(1, 2001)]
        answers = await asyncio.wait_for(asyncio.gather(*flood), 60)
        assert {a.partitions[0].error_code for a in answers} == {int(ErrorCode.UNKNOWN_PRODUCER_ID)}

        # Batches without a producer id are not affected, and the log holds exactly the two accepted ones
        plain = (await to_leader.send(produce(-1))).partitions[0]
        assert (plain.error_code, plain.base_offset) == (0, 1)
        offsets = await to_leader.send(ListOffsetsRequest(-1, [ListOffsetsPartition(TOPIC, 0, -1)]))
        assert offsets.partitions[0].offset == 2


# -- a new producer's pipelined first batches (issue 40) ----------------------------------------------------

TRIALS = 100
BATCHES = 5  # the unanswered batches a producer may have per partition (docs/protocol.md, 5a)
SPACING_S = 0.002


async def pipelined_msgpack(leader: ProcessInfo, other: ProcessInfo, topic: str) -> list[list[tuple[int, int]]]:
    """Per trial: a new producer id from `other`, then BATCHES one-record batches, sequences 0.., sent
    SPACING_S apart on one connection to the leader before any answer; each batch's (error, base offset)."""
    trials = []
    async with (
        await BrokerConnection.connect(other.host, other.port) as to_other,
        await BrokerConnection.connect(leader.host, leader.port) as to_leader,
    ):
        for _ in range(TRIALS):
            producer_id = (await to_other.send(InitProducerIdRequest())).producer_id
            sent = []
            for sequence in range(BATCHES):
                sent.append(asyncio.ensure_future(to_leader.send(produce(producer_id, sequence, topic=topic))))
                await asyncio.sleep(SPACING_S)  # the pacing under test, not a wait for a condition
            answers = [(await f).partitions[0] for f in sent]
            trials.append([(a.error_code, a.base_offset) for a in answers])
    return trials


class KafkaWireClient:
    """Kafka's protocol on one connection, requests pipelined, answers read in order (kafka-python's schemas)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.correlation_id = reader, writer, 0

    @classmethod
    async def connect(cls, broker: ProcessInfo) -> KafkaWireClient:
        return cls(*await asyncio.open_connection(broker.host, broker.kafka_port))

    def send(self, request: object) -> None:
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id="pipelined")  # type: ignore[attr-defined]
        data = bytes(request.encode(header=True))  # type: ignore[attr-defined]
        self.writer.write(struct.pack(">i", len(data)) + data)

    async def receive(self, response_class: object) -> object:
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        return response_class.decode(await self.reader.readexactly(size), header=True)  # type: ignore[attr-defined]

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def kafka_batch(producer_id: int, sequence: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, producer_id, 0, sequence, batch_size=1 << 20)
    builder.append(0, timestamp=int(time.time() * 1000), key=None, value=b"v%d" % sequence, headers=[])
    return bytes(builder.build())


async def pipelined_kafka(leader: ProcessInfo, other: ProcessInfo, topic: str) -> list[list[tuple[int, int]]]:
    """The same trials through the brokers' Kafka listeners: InitProducerId v1, idempotent Produce v7."""
    P = KProduceRequest.TopicProduceData
    trials = []
    to_other, to_leader = await KafkaWireClient.connect(other), await KafkaWireClient.connect(leader)
    try:
        for _ in range(TRIALS):
            to_other.send(KInitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60_000))
            producer_id = (await to_other.receive(KInitProducerIdResponse[1])).producer_id  # type: ignore[attr-defined]
            for sequence in range(BATCHES):
                records = kafka_batch(producer_id, sequence)
                data = [P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=records)])]
                to_leader.send(KProduceRequest[7](transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=data))
                await asyncio.sleep(SPACING_S)  # the pacing under test, not a wait for a condition
            answers = []
            for _ in range(BATCHES):
                response = await to_leader.receive(KProduceResponse[7])
                answer = response.responses[0].partition_responses[0]  # type: ignore[attr-defined]
                answers.append((answer.error_code, answer.base_offset))
            trials.append(answers)
    finally:
        await to_other.close()
        await to_leader.close()
    return trials


@pytest.mark.parametrize("listener", ["msgpack", "kafka"])
async def test_a_new_producers_pipelined_first_batches_are_all_appended_in_order(
    cluster: LocalClusterState, listener: str
) -> None:
    """Each trial a new producer id, from a broker other than the leader, so the leader must ask the controller
    about it before its first batch: the batches sent behind that one (5a allows five unanswered) used to
    overtake it once the id was known, and came back 59 / 45 (1-13% of trials)."""
    topic = f"pipelined-{listener}"
    await create_topic(cluster, topic)
    leader, other = await leader_and_other(cluster, topic)
    run = pipelined_msgpack if listener == "msgpack" else pipelined_kafka
    trials = await run(leader, other, topic)
    refused = [answers for answers in trials if any(error for error, _ in answers)]
    assert not refused, f"{len(refused)} of {TRIALS} trials had refusals, e.g. {refused[:3]}"
    # appended in order: each trial's batches at consecutive offsets, trials one after another
    offsets = [offset for answers in trials for _, offset in answers]
    assert offsets == list(range(TRIALS * BATCHES))
