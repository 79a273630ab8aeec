"""Record timestamps through real Kafka clients: offsets by timestamp (ListOffsets with a time, what
`offsetsForTimes` sends) on a log of several segments."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.local_cluster import LocalClusterState
from tests.integration.processes import ROOT, kafka_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

KCAT = shutil.which("kcat")
T0 = 1_700_000_000_000
COUNT = 60
TIMED_TOPIC = "timed"

OVERRIDES = {
    "broker.heartbeat.interval.ms": "250",
    "broker.session.timeout.ms": "1500",
}


def minibroker(cluster: LocalClusterState, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "cluster", *args, "--bootstrap-server", cluster.bootstrap],
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )


def create_topic(cluster: LocalClusterState, name: str, *configs: str) -> None:
    args = ["topic", "create", name, "--partitions", "1", "--replication-factor", "3"]
    for config in configs:
        args += ["--config", config]
    done = minibroker(cluster, *args)
    assert done.returncode == 0, done.stderr.decode()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterState]:
    with kafka_cluster(tmp_path_factory.mktemp("kafka-timestamps") / "cluster", OVERRIDES) as state:
        create_topic(state, TIMED_TOPIC, "segment.bytes=800")
        # Record i has timestamp T0 + 1000 i, except that every fifth one is a second older than the one
        # before it: the answer is the first offset at or after a time, not a binary search's.
        # Batches of four records, so that the records of one batch have different timestamps and the log
        # has several segments.
        producer = confluent_kafka.Producer({"bootstrap.servers": state.kafka_bootstrap, "linger.ms": 1000})
        for i in range(COUNT):
            producer.produce(TIMED_TOPIC, value=f"v{i}".encode() * 10, partition=0, timestamp=timestamp_of(i))
            if i % 4 == 3:
                assert producer.flush(30) == 0
        assert producer.flush(30) == 0
        yield state


def timestamp_of(i: int) -> int:
    return T0 + 1000 * i - (2000 if i % 5 == 4 else 0)


def expected(target: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record at or after `target`, or (-1, -1)."""
    for i in range(COUNT):
        if timestamp_of(i) >= target:
            return i, timestamp_of(i)
    return -1, -1


TARGETS = [0, T0, T0 + 1, T0 + 2500, T0 + 2001, T0 + 30_000, T0 + 1000 * (COUNT - 1), T0 + 1000 * COUNT]


def test_the_log_has_several_segments(cluster: LocalClusterState) -> None:
    for broker in cluster.brokers:
        assert len(list(Path(broker.dir).rglob(f"{TIMED_TOPIC}-0/*.log"))) >= 3


def test_confluent_kafka_offsets_for_times(cluster: LocalClusterState) -> None:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "unused"})
    try:
        for target in TARGETS:
            [answer] = consumer.offsets_for_times([confluent_kafka.TopicPartition(TIMED_TOPIC, 0, target)], 10)
            assert answer.error is None
            assert answer.offset == expected(target)[0], target
    finally:
        consumer.close()


def test_kafka_python_offsets_for_times(cluster: LocalClusterState) -> None:
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap)
    tp = kafka.TopicPartition(TIMED_TOPIC, 0)
    try:
        for target in TARGETS:
            answer = consumer.offsets_for_times({tp: target})[tp]
            offset, timestamp = expected(target)
            if offset < 0:
                assert answer is None, target
            else:
                assert answer is not None and (answer.offset, answer.timestamp) == (offset, timestamp), target
    finally:
        consumer.close()


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_starts_from_a_timestamp(cluster: LocalClusterState) -> None:
    assert KCAT is not None
    target = T0 + 30_500
    done = subprocess.run(
        [
            KCAT,
            "-b",
            cluster.kafka_bootstrap,
            "-C",
            "-t",
            TIMED_TOPIC,
            "-p",
            "0",
            "-o",
            f"s@{target}",
            "-e",
            "-f",
            "%o %T\\n",
        ],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().split()
    offsets = [int(x) for x in lines[::2]]
    first = expected(target)[0]
    assert offsets == list(range(first, COUNT))
    assert int(lines[1]) == timestamp_of(first)


def test_the_msgpack_listener_answers_the_same(cluster: LocalClusterState) -> None:
    import asyncio

    from client.cluster_client import ClusterClient
    from protocol.messages import ListOffsetsPartition, ListOffsetsRequest, TopicPartition

    async def ask() -> list[tuple[int, int]]:
        client = ClusterClient(cluster.bootstrap)
        try:
            await client.refresh_metadata()
            info = client.leader_of(TopicPartition(TIMED_TOPIC, 0))
            answers = []
            for target in TARGETS:
                request = ListOffsetsRequest(-1, [ListOffsetsPartition(TIMED_TOPIC, 0, target)])
                response = await client.send_to(info.leader_id, request)
                [p] = response.partitions
                assert p.error_code == 0
                answers.append((p.offset, p.timestamp))
            return answers
        finally:
            await client.close()

    assert asyncio.run(ask()) == [expected(t) for t in TARGETS]
