"""The idempotent producer's bookkeeping against a scripted leader: sequences per partition, one batch in
flight per partition, the same bytes resent after an indeterminate answer, an epoch bump after a batch
fails for good. (The broker's side, and the whole path under leader kills, run on real processes in
tests/client/test_producer.py, tests/integration/test_reassignment.py and tests/integration/test_chaos.py.)"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import pytest

from client.producer import Producer
from protocol.errors import ErrorCode
from protocol.messages import ProducePartitionResponse, ProduceResponse, TopicPartition
from protocol.record_batch import read_header

pytestmark = pytest.mark.timeout(30)

P0 = TopicPartition("t", 0)
P1 = TopicPartition("t", 1)


class EveryPartition:
    """ClusterClient.partitions of a client that knows every partition (no metadata lookup before a send)."""

    def __contains__(self, tp: object) -> bool:
        return True


class ScriptedLeader:
    """Stands in for ClusterClient: hands out producer ids, and answers each PRODUCE from a script keyed
    by (partition, attempt number), appending like a leader that deduplicates by sequence."""

    partitions = EveryPartition()

    def __init__(self, script: dict[tuple[TopicPartition, int], Any] | None = None) -> None:
        self.script = script or {}
        self.sent: list[tuple[TopicPartition, bytes]] = []
        self.log: dict[TopicPartition, list[tuple[int, int, int]]] = defaultdict(list)  # (epoch, seq, offset)
        self.in_flight: dict[TopicPartition, int] = defaultdict(int)
        self.max_in_flight = 0
        self.inits: list[tuple[int, int]] = []
        self.next_offset: dict[TopicPartition, int] = defaultdict(int)
        self.ends: dict[TopicPartition, list[tuple[int, int, int]]] = defaultdict(list)  # (epoch, seq, next seq)

    def expected_next(self, tp: TopicPartition) -> list[tuple[int, int, int]]:
        return self.ends[tp]

    async def init_producer_id(self, producer_id: int = -1, producer_epoch: int = -1) -> tuple[int, int]:
        self.inits.append((producer_id, producer_epoch))
        return (42, 0) if producer_id < 0 else (producer_id, producer_epoch + 1)

    async def refresh_metadata(self, topics: list[str] | None = None) -> None:
        return None

    def min_isr_unreachable(self, tp: TopicPartition) -> bool:
        return False

    async def produce(self, tp: TopicPartition, records: bytes, acks: int, timeout_ms: int) -> ProduceResponse:
        attempt = sum(1 for t, _ in self.sent if t == tp)
        self.sent.append((tp, records))
        self.in_flight[tp] += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight[tp])
        try:
            await asyncio.sleep(0.001)
            header = read_header(records)
            action = self.script.get((tp, attempt))
            if isinstance(action, ErrorCode):
                return ProduceResponse([ProducePartitionResponse(tp.topic, tp.partition, int(action))])
            # append unless this (epoch, sequence) is already there, and only in sequence, as the leader does
            key = (header.producer_epoch, header.base_sequence)
            # like a leader, it remembers the last five batches of the producer
            known = [o for e, s, o in self.log[tp][-5:] if (e, s) == key and header.producer_id >= 0]
            if known:
                offset = known[0]
            else:
                same_epoch = [(s, n) for e, s, n in self.expected_next(tp) if e == header.producer_epoch]
                expected = same_epoch[-1][1] if same_epoch else 0
                if header.producer_id >= 0 and header.base_sequence != expected:
                    code = int(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
                    return ProduceResponse([ProducePartitionResponse(tp.topic, tp.partition, code)])
                offset = self.next_offset[tp]
                self.next_offset[tp] += header.record_count
                self.log[tp].append((*key, offset))
                self.ends[tp].append(
                    (header.producer_epoch, header.base_sequence, header.base_sequence + header.record_count)
                )
            if action == "lose-answer":  # appended, but the answer never comes back
                raise TimeoutError("no answer")
            return ProduceResponse([ProducePartitionResponse(tp.topic, tp.partition, 0, None, offset)])
        finally:
            self.in_flight[tp] -= 1


def sequences(leader: ScriptedLeader, tp: TopicPartition) -> list[tuple[int, int, int]]:
    """(producer id, epoch, base sequence) of every attempt sent to `tp`."""
    out = []
    for t, records in leader.sent:
        if t == tp:
            h = read_header(records)
            out.append((h.producer_id, h.producer_epoch, h.base_sequence))
    return out


async def produce(producer: Producer, items: list[tuple[TopicPartition, bytes]]) -> list[tuple[int, str | None]]:
    results: list[tuple[int, str | None]] = []
    for tp, value in items:
        await producer.send(tp, value, callback=lambda o, e: results.append((o, e)))
        await producer.flush()  # one record per batch: each its own sequence
    await producer.close()
    return results


async def test_each_partition_numbers_its_records_and_has_at_most_five_batches_in_flight() -> None:
    leader = ScriptedLeader()
    producer = Producer(leader, acks=-1, linger_ms=0, batch_size=80)  # type: ignore[arg-type]
    assert producer.idempotent, "idempotence is the default with acks=all"
    for i in range(30):
        await producer.send(P0, b"a%d" % i)
        await producer.send(P0, b"b%d" % i)
        await producer.send(P1, b"c%d" % i)
    await producer.close()
    assert leader.inits == [(-1, -1)]
    assert 1 < leader.max_in_flight <= 5
    p0 = sequences(leader, P0)
    assert {pid for pid, _, _ in p0} == {42}
    # each batch starts where the previous one of its partition ended
    starts = [seq for _, _, seq in p0]
    counts = [read_header(r).record_count for t, r in leader.sent if t == P0]
    assert starts == [sum(counts[:i]) for i in range(len(counts))]
    assert sum(counts) == 60


async def test_batches_behind_a_refused_one_are_resent_after_it_in_sequence() -> None:
    # the first batch is refused (not written); those sent behind it are answered
    # OUT_OF_ORDER_SEQUENCE_NUMBER by the leader, and resent once it is in
    leader = ScriptedLeader({(P0, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    producer = Producer(leader, acks=-1, linger_ms=0, batch_size=70)  # type: ignore[arg-type]
    results: list[tuple[int, str | None]] = []
    for i in range(10):
        await producer.send(P0, b"v%d" % i, callback=lambda o, e: results.append((o, e)))
    await producer.close()
    assert sorted(results) == [(i, None) for i in range(10)], results
    assert [s for _, s, _ in leader.log[P0]] == sorted(s for _, s, _ in leader.log[P0])
    assert producer.epoch_bumps == 0
    first_sends = [read_header(r).base_sequence for t, r in leader.sent[:4] if t == P0]
    assert max(first_sends) > 0, "later batches were in flight while the first was refused"


async def test_an_indeterminate_batch_is_resent_as_is_and_lands_once() -> None:
    leader = ScriptedLeader({(P0, 1): "lose-answer"})
    producer = Producer(leader, acks=-1, linger_ms=0)  # type: ignore[arg-type]
    results = await produce(producer, [(P0, b"x"), (P0, b"y"), (P0, b"z")])
    assert results == [(0, None), (1, None), (2, None)]
    attempts = [r for t, r in leader.sent if t == P0]
    assert attempts[1] == attempts[2], "the resend is the same bytes: same id, epoch and sequence"
    assert [seq for _, _, seq in sequences(leader, P0)] == [0, 1, 1, 2]
    assert len(leader.log[P0]) == 3
    assert producer.resent_indeterminate == 1


async def test_without_idempotence_an_indeterminate_batch_is_reported_not_resent() -> None:
    leader = ScriptedLeader({(P0, 0): "lose-answer"})
    producer = Producer(leader, acks=-1, linger_ms=0, enable_idempotence=False)  # type: ignore[arg-type]
    results = await produce(producer, [(P0, b"x")])
    assert len(results) == 1 and results[0][0] == -1 and (results[0][1] or "").startswith("indeterminate")
    assert len(leader.sent) == 1 and read_header(leader.sent[0][1]).producer_id == -1
    assert leader.inits == []


async def test_a_batch_that_fails_for_good_bumps_the_epoch_and_restarts_the_sequences() -> None:
    leader = ScriptedLeader({(P0, 1): ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER})
    producer = Producer(leader, acks=-1, linger_ms=0)  # type: ignore[arg-type]
    results = await produce(producer, [(P0, b"x"), (P0, b"lost"), (P0, b"after")])
    assert results[0] == (0, None)
    assert results[1][0] == -1 and (results[1][1] or "").startswith("OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert results[2][1] is None
    assert leader.inits == [(-1, -1), (42, 0)]
    assert sequences(leader, P0) == [(42, 0, 0), (42, 0, 1), (42, 1, 0)]
    assert producer.epoch_bumps == 1


def test_idempotence_with_acks_1_is_refused_as_kafka_refuses_it() -> None:
    with pytest.raises(ValueError, match="acks=all"):
        Producer(ScriptedLeader(), acks=1, enable_idempotence=True)  # type: ignore[arg-type]
    assert not Producer(ScriptedLeader(), acks=1).idempotent  # type: ignore[arg-type]


async def test_no_batch_passes_one_being_resent_by_more_than_the_leaders_window() -> None:
    # the first batch's answer is lost; the four behind it are acked meanwhile. A sixth batch must wait:
    # appended, it would push the first out of the five the leader remembers, and the resend of the
    # first would be refused as out of order instead of answered with its offset
    leader = ScriptedLeader({(P0, 0): "lose-answer"})
    producer = Producer(leader, acks=-1, linger_ms=0, batch_size=70)  # type: ignore[arg-type]
    results: list[tuple[int, str | None]] = []
    for i in range(12):
        await producer.send(P0, b"v%d" % i, callback=lambda o, e: results.append((o, e)))
    await producer.close()
    assert sorted(results) == [(i, None) for i in range(12)], results
    assert len(leader.log[P0]) == 12 and producer.epoch_bumps == 0
    assert producer.resent_indeterminate == 1


async def test_a_batch_that_reaches_a_new_leader_before_the_first_one_is_resent_after_it() -> None:
    # Right after a topic is created the first batch can be refused (the broker does not lead yet) while
    # the second, sent behind it, reaches the leader first: no state for the producer, sequence not 0,
    # UNKNOWN_PRODUCER_ID. Not written: it is resent once the first is in.
    leader = ScriptedLeader({(P0, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER, (P0, 1): ErrorCode.UNKNOWN_PRODUCER_ID})
    producer = Producer(leader, acks=-1, linger_ms=0, batch_size=70)  # type: ignore[arg-type]
    results: list[tuple[int, str | None]] = []
    for i in range(6):
        await producer.send(P0, b"v%d" % i, callback=lambda o, e: results.append((o, e)))
    await producer.close()
    assert sorted(results) == [(i, None) for i in range(6)], results
    assert producer.epoch_bumps == 0
