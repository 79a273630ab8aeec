"""FETCH version 1 against a real broker process: the same records as version 0, as views of the frame."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.local_cluster import free_ports
from network.connection import BrokerConnection
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.fetch_frame import FETCH_RECORDS_APART
from protocol.messages import FetchPartition, FetchRequest, ProducePartition, ProduceRequest
from protocol.record_batch import build_batch, iter_records
from tests.integration.processes import BrokerProcess, assign, standalone_broker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp = tmp_path_factory.mktemp("fetch-v1")
    (port,) = free_ports(1)
    b = standalone_broker(tmp, 1, port)
    b.start()
    asyncio.run(assign([b], "t", 3, {0: 1, 1: 1, 2: 1}, replicas=[1]))
    yield b
    assert b.stop() == 0, b.log_text()[-3000:]


def fetch_all(offsets: dict[int, int]) -> FetchRequest:
    return FetchRequest(-1, 0, 1, 8 << 20, [FetchPartition("t", p, o, 1 << 20) for p, o in offsets.items()])


def test_version_1_returns_what_version_0_does_as_views_of_the_answer(broker: BrokerProcess) -> None:
    async def go() -> None:
        async with await BrokerConnection.connect("127.0.0.1", broker.port) as conn:
            for partition, count in ((0, 3), (2, 40)):  # partition 1 stays empty
                for i in range(count):
                    batch = build_batch([f"p{partition}-{i}-{j}".encode() * 50 for j in range(20)])
                    resp = await conn.send(ProduceRequest(1, 5000, [ProducePartition("t", partition, batch)]))
                    assert resp.partitions[0].error_code == ErrorCode.NONE
            offsets = {0: 0, 1: 0, 2: 5 * 20}  # partition 2 from the middle
            v0 = await conn.send(fetch_all(offsets))
            v1 = await conn.send(fetch_all(offsets), api_version=FETCH_RECORDS_APART)
            assert [(p.partition, p.error_code, p.high_watermark) for p in v1.partitions] == [
                (p.partition, p.error_code, p.high_watermark) for p in v0.partitions
            ]
            assert [bytes(p.records) for p in v1.partitions] == [bytes(p.records) for p in v0.partitions]
            assert isinstance(v1.partitions[2].records, memoryview) and v1.partitions[1].records == b""
            values = [r.value for r in iter_records(v1.partitions[2].records)]
            assert values[0] == b"p2-5-0" * 50 and len(values) == 35 * 20

            # an offset out of range is an error on its partition, in the same layout
            bad = await conn.send(fetch_all({0: 10_000}), api_version=FETCH_RECORDS_APART)
            assert (bad.partitions[0].error_code, bad.partitions[0].records) == (ErrorCode.OFFSET_OUT_OF_RANGE, b"")

            versions = {k.api_key: (k.min_version, k.max_version) for k in (await conn.api_versions()).api_keys}
            assert versions[int(ApiKey.FETCH)] == (0, 1)
            refused = await conn.send(fetch_all({0: 0}), api_version=2)
            assert refused.error_code == ErrorCode.UNSUPPORTED_VERSION
            assert "FETCH version 2 is not supported (supported: 0..1)" in refused.error_message

    asyncio.run(go())


def test_a_consumer_takes_as_much_per_fetch_as_max_partition_fetch_bytes_allows(broker: BrokerProcess) -> None:
    from client.cluster_client import ClusterClient
    from client.consumer import Consumer, fetch_config
    from protocol.messages import TopicPartition

    async def go() -> None:
        await assign([broker], "big", 1, {0: 1}, replicas=[1])
        async with await BrokerConnection.connect("127.0.0.1", broker.port) as conn:
            for i in range(24):  # 24 batches of ~40 KB
                batch = build_batch([bytes([i]) * 4000 for _ in range(10)])
                resp = await conn.send(ProduceRequest(1, 5000, [ProducePartition("big", 0, batch)]))
                assert resp.partitions[0].error_code == ErrorCode.NONE
        tp = TopicPartition("big", 0)

        async def polls_to_read_all(props: dict[str, str]) -> list[int]:
            config = fetch_config(props)
            async with ClusterClient(f"127.0.0.1:{broker.port}") as client:
                await client.refresh_metadata(["big"])
                consumer = Consumer(
                    client,
                    [tp],
                    positions={tp: 0},
                    max_partition_fetch_bytes=config["max.partition.fetch.bytes"],
                    fetch_max_bytes=config["fetch.max.bytes"],
                )
                sizes = []
                while consumer.positions[tp] < 240:
                    sizes.append(len(await consumer.poll()))
                return sizes

        assert await polls_to_read_all({"max.partition.fetch.bytes": str(8 << 20)}) == [240]
        # 64 KiB holds one ~40 KB batch: a fetch per batch
        assert await polls_to_read_all({"max.partition.fetch.bytes": str(64 << 10)}) == [10] * 24
        # a batch larger than the limit still comes, whole (KIP-74), so the consumer moves on
        assert await polls_to_read_all({"max.partition.fetch.bytes": "1000"}) == [10] * 24
        # fetch.max.bytes caps the whole response the same way
        sizes = await polls_to_read_all({"max.partition.fetch.bytes": str(8 << 20), "fetch.max.bytes": str(128 << 10)})
        assert sizes == [30] * 8

    asyncio.run(go())


def test_records_sent_from_the_files_match_version_0_before_and_after_a_restart(tmp_path: Path) -> None:
    """Several MiB in one answer (more than the socket takes at once) and, after a clean restart, closed
    segments not yet verified by this process (read and checked, not sent unread): the same bytes."""
    (port,) = free_ports(1)
    b = standalone_broker(tmp_path, 1, port, "log.segment.bytes=1048576")
    b.start()
    try:
        asyncio.run(assign([b], "big", 1, {0: 1}, replicas=[1]))

        async def produce() -> None:
            async with await BrokerConnection.connect("127.0.0.1", port) as conn:
                for i in range(96):  # 96 batches of ~64 KB: 6 MiB over 6-7 segments
                    batch = build_batch([bytes([i % 251]) * 16000 for _ in range(4)])
                    resp = await conn.send(ProduceRequest(1, 5000, [ProducePartition("big", 0, batch)]))
                    assert resp.partitions[0].error_code == ErrorCode.NONE

        async def both_versions() -> tuple[bytes, bytes]:
            async with await BrokerConnection.connect("127.0.0.1", port) as conn:
                req = FetchRequest(-1, 0, 1, 8 << 20, [FetchPartition("big", 0, 0, 8 << 20)])
                v0 = await conn.send(req)
                v1 = await conn.send(req, api_version=FETCH_RECORDS_APART)
                return bytes(v0.partitions[0].records), bytes(v1.partitions[0].records)

        asyncio.run(produce())
        v0, v1 = asyncio.run(both_versions())
        assert len(v0) > 6_000_000 and v1 == v0
        assert b.stop() == 0, b.log_text()[-3000:]
        b.start()
        asyncio.run(assign([b], "big", 1, {0: 1}, replicas=[1], leader_epoch=1))
        v0_again, v1_again = asyncio.run(both_versions())
        assert v0_again == v0 and v1_again == v0
    finally:
        b.stop()
