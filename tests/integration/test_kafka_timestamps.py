"""Record timestamps through real Kafka clients: offsets by timestamp (ListOffsets with a time, what
`offsetsForTimes` sends) on a log of several segments, and topics whose message.timestamp.type is
LogAppendTime."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    # The leader's: it appended the batches one produce request at a time, rolling between them; a follower
    # that fetched several at once appended them to one segment.
    segments = [len(list(Path(broker.dir).rglob(f"{TIMED_TOPIC}-0/*.log"))) for broker in cluster.brokers]
    assert max(segments) >= 3, segments


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


# -- LogAppendTime -----------------------------------------------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


def produce_confluent(cluster: LocalClusterState, topic: str, values: list[bytes], timestamp: int) -> list[Any]:
    """Produce `values` as one batch with an old CreateTime; answer the delivery reports' messages."""
    reports: list[Any] = []
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "linger.ms": 100, "acks": "all", "enable.idempotence": True}
    )
    for value in values:
        producer.produce(
            topic, value=value, partition=0, timestamp=timestamp, on_delivery=lambda e, m: reports.append(m)
        )
    assert producer.flush(30) == 0
    assert all(m.error() is None for m in reports), [m.error() for m in reports]
    return reports


def consume_confluent(cluster: LocalClusterState, topic: str, count: int) -> list[Any]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                got.append(message)
    finally:
        consumer.close()
    assert len(got) == count
    return got


def consume_minibroker(cluster: LocalClusterState, topic: str, count: int) -> list[dict[str, Any]]:
    done = minibroker(cluster, "consume", topic, "--from-beginning", "--max-messages", str(count), "--json")
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


def test_a_log_append_time_topic_gives_kafka_clients_and_consume_the_append_time(cluster: LocalClusterState) -> None:
    create_topic(cluster, "appended", "message.timestamp.type=LogAppendTime")
    before = now_ms()
    reports = produce_confluent(cluster, "appended", [b"a", b"b", b"c"], T0)
    after = now_ms()
    # the delivery reports carry the broker's append time (Produce's log_append_time_ms)
    kinds = {m.timestamp()[0] for m in reports}
    assert kinds == {confluent_kafka.TIMESTAMP_LOG_APPEND_TIME}
    appended = reports[0].timestamp()[1]
    assert before <= appended <= after and {m.timestamp()[1] for m in reports} == {appended}

    # a consumer sees every record with that time, as LogAppendTime, not the producer's T0
    consumed = consume_confluent(cluster, "appended", 3)
    assert [(m.value(), m.timestamp()) for m in consumed] == [
        (v, (confluent_kafka.TIMESTAMP_LOG_APPEND_TIME, appended)) for v in (b"a", b"b", b"c")
    ]
    # and so does minibroker consume
    lines = consume_minibroker(cluster, "appended", 3)
    assert [(d["value"], d["timestamp"], d["timestamp_type"]) for d in lines] == [
        (v, appended, "LogAppendTime") for v in ("a", "b", "c")
    ]
    done = minibroker(
        cluster, "consume", "appended", "--from-beginning", "--max-messages", "1", "--property", "print.timestamp=true"
    )
    assert done.stdout.decode().startswith(f"LogAppendTime:{appended}\t"), done.stdout

    # offsets by timestamp go by the append time: the producer's T0 is nowhere
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap)
    tp = kafka.TopicPartition("appended", 0)
    try:
        found = consumer.offsets_for_times({tp: T0 + 1})[tp]
        assert found is not None and (found.offset, found.timestamp) == (0, appended)
        assert consumer.offsets_for_times({tp: appended + 1})[tp] is None
    finally:
        consumer.close()


def test_message_timestamp_type_is_altered_by_the_kafka_admin_api_and_the_cli(cluster: LocalClusterState) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    create_topic(cluster, "altered")
    produce_confluent(cluster, "altered", [b"created"], T0)
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "altered",
        incremental_configs=[
            ConfigEntry("message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    # The broker answering DescribeConfigs, like the leader, learns the change from the controller's next
    # UPDATE_METADATA, a moment after the change was answered (eventually consistent, as Kafka's admin API).
    deadline = time.monotonic() + 30
    while True:
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "altered")])
        [configs] = [f.result(timeout=30) for f in described.values()]
        if configs["message.timestamp.type"].value == "LogAppendTime" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert configs["message.timestamp.type"].value == "LogAppendTime"

    deadline = time.monotonic() + 30  # the leader applies it on the controller's UPDATE_METADATA
    while True:
        [report] = produce_confluent(cluster, "altered", [b"appended"], T0)
        if report.timestamp()[0] == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert report.timestamp()[0] == confluent_kafka.TIMESTAMP_LOG_APPEND_TIME

    done = minibroker(
        cluster, "configs", "alter", "--topic", "altered", "--add-config", "message.timestamp.type=CreateTime"
    )
    assert done.returncode == 0, done.stderr.decode()
    done = minibroker(cluster, "configs", "alter", "--topic", "altered", "--add-config", "message.timestamp.type=Now")
    assert done.returncode != 0 and b"message.timestamp.type" in done.stderr
    deadline = time.monotonic() + 30
    while True:
        [report] = produce_confluent(cluster, "altered", [b"created again"], T0)
        if report.timestamp()[0] == confluent_kafka.TIMESTAMP_CREATE_TIME or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert report.timestamp() == (confluent_kafka.TIMESTAMP_CREATE_TIME, T0)
    consumed = consume_confluent(cluster, "altered", report.offset() + 1)
    kinds = [m.timestamp()[0] for m in consumed]
    assert kinds[0] == confluent_kafka.TIMESTAMP_CREATE_TIME and consumed[0].timestamp()[1] == T0
    assert confluent_kafka.TIMESTAMP_LOG_APPEND_TIME in kinds and kinds[-1] == confluent_kafka.TIMESTAMP_CREATE_TIME
