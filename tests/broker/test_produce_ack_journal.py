"""The produce acknowledgement journal: what a broker writes for the batches it answers NONE for, and only
those, before the answer leaves; and how the chaos verdict reads it back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.fetch_session import FetchManager, FetchSessionCache
from broker.kafka_apis import KafkaApis
from broker.metadata_cache import MetadataCache
from broker.produce_ack_journal import AckedBatch, ProduceAckJournal, journal_size, parse_line, read_journal
from network.request_context import ConnectionContext
from protocol.errors import ErrorCode
from protocol.messages import ProducePartition, ProduceRequest, ProduceResponse, TopicPartition
from protocol.record_batch import build_batch
from tests.broker.leader_fixtures import LOCAL_ID, START_MS, TOPIC, TP0, LeaderBroker, outcome, started

pytestmark = pytest.mark.timeout(30)

CTX = ConnectionContext(1, "test")
TP_ELSEWHERE = TopicPartition(TOPIC, 7)  # this broker leads no such partition: NOT_LEADER / UNKNOWN


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LeaderBroker]:
    b = LeaderBroker(tmp_path / "logs")
    yield b
    b.close()


def apis_with_journal(broker: LeaderBroker, path: Path) -> KafkaApis:
    apis = KafkaApis(
        LOCAL_ID,
        broker.replica_manager,
        MetadataCache(LOCAL_ID),
        FetchManager(FetchSessionCache(), broker.time),
        broker.time,
    )
    apis.ack_journal = ProduceAckJournal(path)
    return apis


def journalled(path: Path) -> list[AckedBatch]:
    return list(read_journal(path, broker_id=LOCAL_ID))


async def produce(apis: KafkaApis, acks: int, *entries: tuple[TopicPartition, bytes]) -> ProduceResponse | None:
    request = ProduceRequest(
        acks, 30_000, [ProducePartition(tp.topic, tp.partition, records) for tp, records in entries]
    )
    response = await apis.handle_produce(CTX, request)
    assert response is None or isinstance(response, ProduceResponse)
    return response


async def test_each_batch_answered_none_is_journalled_with_its_offsets_and_producer_fields(
    broker: LeaderBroker, tmp_path: Path
) -> None:
    broker.make_leader(isr=(LOCAL_ID,), replicas=(LOCAL_ID,), leader_epoch=4)
    journal = tmp_path / "ack.journal"
    apis = apis_with_journal(broker, journal)
    plain = build_batch([b"a", b"b"], timestamp_ms=START_MS)
    idempotent = build_batch([b"c"], timestamp_ms=START_MS + 1, producer_id=7, producer_epoch=2, base_sequence=0)

    response = await produce(apis, 1, (TP0, plain + idempotent), (TP_ELSEWHERE, build_batch([b"x"])))

    assert response is not None
    assert [p.error_code for p in response.partitions][0] == ErrorCode.NONE
    assert response.partitions[1].error_code != ErrorCode.NONE
    assert journalled(journal) == [
        AckedBatch(LOCAL_ID, START_MS, TOPIC, 0, 0, 2, -1, -1, -1, START_MS, 1, 4),
        AckedBatch(LOCAL_ID, START_MS, TOPIC, 0, 2, 1, 7, 2, 0, START_MS + 1, 1, 4),
    ]


async def test_an_acks_all_batch_is_journalled_when_it_is_answered_not_when_it_is_appended(
    broker: LeaderBroker, tmp_path: Path
) -> None:
    broker.make_leader()  # ISR: this broker and its follower
    journal = tmp_path / "ack.journal"
    apis = apis_with_journal(broker, journal)

    task = await started(produce(apis, -1, (TP0, build_batch([b"a"]))))

    assert not task.done() and journalled(journal) == []  # in the log, not acknowledged
    await broker.follower_fetch(1)  # the follower has it: the HW passes it, the answer goes out
    response = await outcome(task)
    assert response is not None and response.partitions[0].error_code == ErrorCode.NONE
    assert [(b.base_offset, b.acks) for b in journalled(journal)] == [(0, -1)]


async def test_refused_and_unanswered_produces_are_not_journalled(broker: LeaderBroker, tmp_path: Path) -> None:
    broker.make_leader(isr=(LOCAL_ID,), replicas=(LOCAL_ID,))
    broker.partition().min_insync_replicas = 2
    journal = tmp_path / "ack.journal"
    apis = apis_with_journal(broker, journal)

    refused = await produce(apis, -1, (TP0, build_batch([b"a"])))
    assert refused is not None and refused.partitions[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert await produce(apis, 0, (TP0, build_batch([b"b"]))) is None  # acks=0: written, never answered

    assert journalled(journal) == []


async def test_an_idempotent_resend_is_journalled_at_the_originals_offsets(
    broker: LeaderBroker, tmp_path: Path
) -> None:
    broker.make_leader(isr=(LOCAL_ID,), replicas=(LOCAL_ID,))
    journal = tmp_path / "ack.journal"
    apis = apis_with_journal(broker, journal)
    first = build_batch([b"a", b"b"], producer_id=3, producer_epoch=0, base_sequence=0)
    await produce(apis, 1, (TP0, build_batch([b"other"])))

    await produce(apis, 1, (TP0, first))
    await produce(apis, 1, (TP0, first))  # the answer was lost: the producer sends it again

    assert [(b.base_offset, b.record_count, b.base_sequence) for b in journalled(journal)] == [
        (0, 1, -1),
        (1, 2, 0),
        (1, 2, 0),
    ]


def test_a_reader_takes_what_follows_an_offset_of_one_topic_and_leaves_a_line_being_written(tmp_path: Path) -> None:
    journal = tmp_path / "ack.journal"
    line = "1700000000000\t{}\t0\t{}\t1\t-1\t-1\t-1\t1700000000000\t-1\t1\n"
    journal.write_text(line.format("old", 0))
    start = journal_size(journal)
    with open(journal, "a") as f:
        f.write(line.format("chaos", 5) + line.format("__consumer_offsets", 9) + line.format("chaos", 6)[:20])

    assert [(b.topic, b.base_offset) for b in read_journal(journal, 2, start)] == [
        ("chaos", 5),
        ("__consumer_offsets", 9),
    ]
    assert [b.broker_id for b in read_journal(journal, 2, topic="chaos")] == [2]
    assert list(read_journal(tmp_path / "none", 1)) == [] and journal_size(tmp_path / "none") == 0
    with pytest.raises(ValueError, match="11 tab-separated fields"):
        parse_line("chaos\t0", 1)
