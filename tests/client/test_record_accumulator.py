"""The record accumulator: batches close at batch.size bytes, open ones wait linger.ms, flush sends all."""

from __future__ import annotations

from client.record_accumulator import BATCH_OVERHEAD, RecordAccumulator
from protocol.messages import TopicPartition
from protocol.record_batch import build_batch

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def test_sixteen_records_of_1012_bytes_fill_a_16384_byte_batch_and_the_next_record_opens_another() -> None:
    acc = RecordAccumulator(batch_size=16384, linger_ms=5)
    batches = {id(acc.append(TP0, None, bytes(1012), (), now_ms=0)) for _ in range(16)}
    assert len(batches) == 1 and acc.drain(now_ms=0) == []  # not full yet: it may linger
    batch = acc.append(TP0, None, bytes(1012), (), now_ms=0)
    assert len(batch.records) == 1
    (full,) = acc.drain(now_ms=0)  # closed by the record that did not fit: ready before linger.ms passed
    assert len(full.records) == 16 and len(full.build()) <= 16384
    assert acc.drain(now_ms=4) == [] and acc.drain(now_ms=5) == [batch]


def test_the_size_estimate_never_undercounts_what_build_batch_writes() -> None:
    for value_size in (0, 1, 200, 255, 256, 1000, 70_000):
        for key in (None, b"k", b"k" * 300):
            acc = RecordAccumulator(batch_size=1 << 30, linger_ms=0)
            for _ in range(200):
                batch = acc.append(TP0, key, bytes(value_size), [("h", b"v")] if value_size == 1 else (), 0)
            assert len(batch.build()) <= batch.size_bytes


def test_a_record_larger_than_batch_size_travels_alone() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=100)
    acc.append(TP0, None, b"small", (), now_ms=0)
    big = acc.append(TP0, None, bytes(5000), (), now_ms=0)
    assert len(big.records) == 1 and big.closed
    drained = acc.drain(now_ms=1)
    assert [len(b.records) for b in drained] == [1, 1]  # the small one closed when the big one arrived


def test_open_batches_wait_linger_ms_from_their_first_record() -> None:
    acc = RecordAccumulator(batch_size=16384, linger_ms=5)
    acc.append(TP0, None, b"a", (), now_ms=10)
    acc.append(TP1, None, b"b", (), now_ms=12)
    acc.append(TP0, None, b"c", (), now_ms=14)
    assert acc.next_ready_in_ms(now_ms=11) == 4
    assert acc.drain(now_ms=14) == []
    (p0,) = acc.drain(now_ms=15)
    assert p0.tp == TP0 and [r[1] for r in p0.records] == [b"a", b"c"]
    assert acc.next_ready_in_ms(now_ms=15) == 2
    (p1,) = acc.drain(now_ms=17)
    assert p1.tp == TP1 and acc.next_ready_in_ms(now_ms=17) is None


def test_flush_makes_every_batch_ready_until_the_accumulator_is_empty() -> None:
    acc = RecordAccumulator(batch_size=16384, linger_ms=1000)
    acc.append(TP0, None, b"a", (), now_ms=0)
    acc.append(TP1, None, b"b", (), now_ms=0)
    acc.begin_flush()
    assert {b.tp for b in acc.drain(now_ms=0)} == {TP0, TP1}
    acc.append(TP0, None, b"later", (), now_ms=0)
    assert acc.drain(now_ms=0) == []  # the flush ended once everything was drained


def test_batches_hold_their_records_in_append_order_as_build_batch_would() -> None:
    acc = RecordAccumulator(batch_size=16384, linger_ms=0)
    for i in range(5):
        acc.append(TP0, b"k%d" % i, b"v%d" % i, (), now_ms=0)
    (batch,) = acc.drain(now_ms=0)
    assert batch.build()[47:] == build_batch([(b"k%d" % i, b"v%d" % i) for i in range(5)], timestamp_ms=0)[47:]


def test_bytes_held_counts_the_records_appended_and_not_yet_drained() -> None:
    acc = RecordAccumulator(batch_size=16384, linger_ms=5)
    for _ in range(20):  # 16 fill the first batch, 4 open a second
        acc.append(TP0, None, bytes(1012), (), now_ms=0)
    acc.append(TP1, b"key", b"v", [("h", b"x")], now_ms=0)
    assert acc.bytes_held == sum(b.size_bytes - BATCH_OVERHEAD for q in acc._batches.values() for b in q)
    (full,) = acc.drain(now_ms=0)
    assert len(full.records) == 16
    assert acc.bytes_held == sum(b.size_bytes - BATCH_OVERHEAD for q in acc._batches.values() for b in q) > 0
    acc.drain(now_ms=5)
    assert acc.bytes_held == 0 and acc.pending_batches == 0
