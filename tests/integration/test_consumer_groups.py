"""Consumer groups through the Kafka listener, with real clients and real broker processes: a group of two
confluent-kafka consumers shares a topic's partitions, kcat -G and kafka-python's group consumer read
through the same coordinator, and when the broker coordinating the group is SIGKILLed the coordinator moves
with the leadership of its __consumer_offsets partition and no committed offset is lost."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from cluster.local_cluster import LocalClusterState
from tests.integration.processes import ROOT, kafka_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KCAT = shutil.which("kcat")
GROUP_OVERRIDES = {
    "broker.heartbeat.interval.ms": "250",
    "broker.session.timeout.ms": "1500",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "200",
    "group.min.session.timeout.ms": "1000",
}


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterState]:
    with kafka_cluster(tmp_path_factory.mktemp("groups") / "cluster", GROUP_OVERRIDES) as state:
        yield state


def create_topic(cluster: LocalClusterState, name: str, partitions: int) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cluster",
            "topic",
            "create",
            name,
            "--partitions",
            str(partitions),
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
            "--bootstrap-server",
            cluster.bootstrap,
        ],
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()


def produce(
    cluster: LocalClusterState, topic: str, values: list[bytes], partitions: int | None = None
) -> dict[bytes, tuple[int, int]]:
    """Idempotent acks=all writes; the delivery reports' (partition, offset) of each value. With `partitions`,
    value i goes to partition i % partitions: librdkafka's sticky partitioner may otherwise put a whole
    burst of keyless records in one or two partitions, leaving the others (and a group member) empty."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    )
    delivered: dict[bytes, tuple[int, int]] = {}

    def report(err: object, msg: object) -> None:
        assert err is None, err
        delivered[msg.value()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    for i, value in enumerate(values):
        if partitions is None:
            producer.produce(topic, value=value, on_delivery=report)
        else:
            producer.produce(topic, value=value, partition=i % partitions, on_delivery=report)
    assert producer.flush(60) == 0
    return delivered


def group_consumer(cluster: LocalClusterState, group: str) -> object:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )


def coordinator_of(cluster: LocalClusterState, group: str) -> int:
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    deadline = time.monotonic() + 30
    while True:
        try:
            described = admin.describe_consumer_groups([group])[group].result(timeout=10)
            return int(described.coordinator.id)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_all(consumers: list[object], want: int, seconds: float = 60) -> list[list[object]]:
    """Poll every consumer in turn until `want` records have arrived in all; what each one read."""
    got: list[list[object]] = [[] for _ in consumers]
    deadline = time.monotonic() + seconds
    while sum(map(len, got)) < want and time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            message = consumer.poll(0.1)  # type: ignore[attr-defined]
            if message is not None and message.error() is None:
                got[i].append(message)
    return got


def committed(cluster: LocalClusterState, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = group_consumer(cluster, group)
    try:
        answer = consumer.committed(  # type: ignore[attr-defined]
            [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)], timeout=20
        )
        return {tp.partition: tp.offset for tp in answer}
    finally:
        consumer.close()  # type: ignore[attr-defined]


def test_two_consumers_share_the_partitions_and_a_leader_kill_loses_no_committed_offset(
    cluster: LocalClusterState,
) -> None:
    create_topic(cluster, "orders", 4)
    consumers = [group_consumer(cluster, "billing") for _ in range(2)]
    for consumer in consumers:
        consumer.subscribe(["orders"])  # type: ignore[attr-defined]
    try:
        # Both members in the group before anything is written, so neither reads it all alone first.
        deadline = time.monotonic() + 60
        while not all(c.assignment() for c in consumers):  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, "the group never gave both members partitions"
            for consumer in consumers:
                consumer.poll(0.1)  # type: ignore[attr-defined]
        first = produce(cluster, "orders", [b"first-%d" % i for i in range(400)], partitions=4)
        got = read_all(consumers, len(first))
        # Each record is read once by the group, and the group split the partitions between its members.
        values = [m.value() for part in got for m in part]
        assert sorted(values) == sorted(first)
        assert all(part for part in got), "one member was given no partition"
        assert not {m.partition() for m in got[0]} & {m.partition() for m in got[1]}
        for consumer in consumers:
            consumer.commit(asynchronous=False)  # type: ignore[attr-defined]
        before = committed(cluster, "billing", "orders", 4)
        ends = {p: max(o for q, o in first.values() if q == p) + 1 for p in range(4)}
        assert before == ends

        # When the broker coordinating the group dies
        victim = cluster.broker(coordinator_of(cluster, "billing"))
        os.kill(victim.pid, signal.SIGKILL)

        # Then the committed offsets are still there, read from the new coordinator
        deadline = time.monotonic() + 60
        after: dict[int, int] = {}
        while time.monotonic() < deadline:
            try:
                after = committed(cluster, "billing", "orders", 4)
            except Exception:
                after = {}
            if after == before:
                break
            time.sleep(0.5)
        assert after == before
        assert coordinator_of(cluster, "billing") != victim.node_id

        # And the group goes on from them: new records are read once, old ones not again
        second = produce(cluster, "orders", [b"second-%d" % i for i in range(200)], partitions=4)
        got = read_all(consumers, len(second))
        assert sorted(m.value() for part in got for m in part) == sorted(second)
    finally:
        for consumer in consumers:
            consumer.close()  # type: ignore[attr-defined]


def test_kcat_and_kafka_python_consume_as_groups(cluster: LocalClusterState) -> None:
    create_topic(cluster, "events", 2)
    sent = produce(cluster, "events", [b"event-%d" % i for i in range(50)], partitions=2)

    consumer = kafka.KafkaConsumer(
        "events",
        bootstrap_servers=cluster.kafka_bootstrap,
        group_id="kp-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15000,
    )
    read: list[bytes] = []
    for record in consumer:
        read.append(record.value)
        if len(read) == len(sent):
            break
    consumer.commit()
    consumer.close()
    assert sorted(read) == sorted(sent)
    assert sum(committed(cluster, "kp-group", "events", 2).values()) == len(sent)

    if KCAT is None:
        pytest.skip("kcat is installed by scripts/test.sh")
    done = subprocess.run(
        [
            KCAT,
            "-b",
            cluster.kafka_bootstrap,
            "-G",
            "kcat-group",
            "-o",
            "beginning",
            "-c",
            str(len(sent)),
            "-f",
            "%s\n",
            "events",
        ],
        capture_output=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert sorted(done.stdout.split()) == sorted(sent)


def test_minibroker_consume_group_and_the_group_commands_use_the_same_coordinators(cluster: LocalClusterState) -> None:
    def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "cluster", *args, "--bootstrap-server", cluster.bootstrap],
            input=stdin,
            capture_output=True,
            cwd=ROOT,
            timeout=90,
        )

    create_topic(cluster, "lines", 1)
    assert cli("produce", "lines", stdin=b"".join(b"line %d\n" % i for i in range(30))).returncode == 0
    first = cli(
        "consume", "lines", "--group", "cli", "--from-beginning", "--max-messages", "20", "--timeout-ms", "15000"
    )
    assert first.returncode == 0, first.stderr.decode()
    assert first.stdout.decode().splitlines() == [f"line {i}" for i in range(20)]
    # A second member of the same group goes on from what the first committed.
    rest = cli("consume", "lines", "--group", "cli", "--max-messages", "20", "--timeout-ms", "5000")
    assert rest.stdout.decode().splitlines() == [f"line {i}" for i in range(20, 30)]

    listed = cli("group", "list", "--json")
    assert {"group": "cli", "protocol_type": "consumer"} in json.loads(listed.stdout)
    described = json.loads(cli("group", "describe", "cli", "--json").stdout)
    assert described["state"] == "Empty"
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in described["partitions"]] == [
        (0, 30, 30, 0)
    ]
    missing = cli("group", "describe", "no-such-group")
    assert missing.returncode == 4 and b"does not exist" in missing.stderr

    # Stopping at --max-messages in the middle of what one poll returned commits only what was printed,
    # also for the partitions the stop left untouched.
    create_topic(cluster, "spread", 3)
    for p in range(3):
        lines = b"".join(b"p%d-%d\n" % (p, i) for i in range(10))
        assert cli("produce", "spread", "--partition", str(p), stdin=lines).returncode == 0
    args = ("consume", "spread", "--group", "spread", "--from-beginning", "--max-messages", "20")
    head = cli(*args, "--timeout-ms", "15000").stdout.decode().splitlines()
    tail = cli(*args, "--timeout-ms", "5000").stdout.decode().splitlines()
    assert len(head) == 20 and len(tail) == 10
    assert sorted(head + tail) == sorted(f"p{p}-{i}" for p in range(3) for i in range(10))


def static_consumer(cluster: LocalClusterState, group: str, instance: str) -> object:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "group.instance.id": instance,  # KIP-345
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 30000,
            "heartbeat.interval.ms": 300,
            "partition.assignment.strategy": "range",
        }
    )


def poll_until(consumers: list[object], done: object, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        for consumer in consumers:
            consumer.poll(0.1)  # type: ignore[attr-defined]


def partitions_of(consumer: object) -> list[int]:
    return sorted(tp.partition for tp in consumer.assignment())  # type: ignore[attr-defined]


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance_and_a_duplicate_is_fenced(
    cluster: LocalClusterState,
) -> None:
    create_topic(cluster, "static", 4)
    b_events: list[tuple[str, list[int]]] = []
    a, b = static_consumer(cluster, "sg", "inst-a"), static_consumer(cluster, "sg", "inst-b")
    a.subscribe(["static"])  # type: ignore[attr-defined]
    b.subscribe(  # type: ignore[attr-defined]
        ["static"],
        on_assign=lambda _c, ps: b_events.append(("assign", sorted(p.partition for p in ps))),
        on_revoke=lambda _c, ps: b_events.append(("revoke", sorted(p.partition for p in ps))),
    )
    # Both members in one generation (the first may have been A's alone, before B joined): range gives 2 each.
    poll_until([a, b], lambda: len(partitions_of(a)) == len(partitions_of(b)) == 2)
    a_had, b_had, b_seen = partitions_of(a), partitions_of(b), list(b_events)
    member_a = a.memberid()  # type: ignore[attr-defined]

    a.close()  # type: ignore[attr-defined]  # a static member leaves no LeaveGroup: its place is kept
    restarted = static_consumer(cluster, "sg", "inst-a")
    restarted.subscribe(["static"])  # type: ignore[attr-defined]
    poll_until([restarted, b], lambda: partitions_of(restarted) != [])
    assert partitions_of(restarted) == a_had
    assert restarted.memberid() != member_a  # type: ignore[attr-defined]
    for _ in range(10):
        b.poll(0.1)  # type: ignore[attr-defined]
    assert (partitions_of(b), b_events) == (b_had, b_seen), "the other member saw a rebalance"

    duplicate = static_consumer(cluster, "sg", "inst-a")
    duplicate.subscribe(["static"])  # type: ignore[attr-defined]
    # librdkafka makes a fenced static member's error fatal: poll() returns it, and the consumer stops.
    fenced: list[object] = []
    deadline = time.monotonic() + 60
    while not fenced and time.monotonic() < deadline:
        duplicate.poll(0.1)  # type: ignore[attr-defined]
        try:
            message = restarted.poll(0.1)  # type: ignore[attr-defined]
        except confluent_kafka.KafkaException as exc:
            fenced.append(exc.args[0])
            continue
        if message is not None and message.error() is not None:
            fenced.append(message.error())
    assert fenced, "the older member with the same group.instance.id was not fenced"
    error = fenced[0]
    assert error.code() == confluent_kafka.KafkaError._FATAL and "fenced" in error.str(), error  # type: ignore[attr-defined]
    for consumer in (b, duplicate, restarted):
        consumer.close()  # type: ignore[attr-defined]


@pytest.mark.timeout(180)
def test_committed_offsets_expire_after_offsets_retention_minutes(tmp_path_factory: pytest.TempPathFactory) -> None:
    overrides = {**GROUP_OVERRIDES, "offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "500"}
    with kafka_cluster(tmp_path_factory.mktemp("retention") / "cluster", overrides) as cluster:
        create_topic(cluster, "kept", 1)
        consumer = group_consumer(cluster, "standalone")  # assign() and commits only: Kafka's standalone group
        try:
            tp = confluent_kafka.TopicPartition("kept", 0, 5)
            consumer.commit(offsets=[tp], asynchronous=False)  # type: ignore[attr-defined]
            committed_at = time.monotonic()
            offsets: list[int] = []
            while time.monotonic() - committed_at < 120:
                answer = consumer.committed([confluent_kafka.TopicPartition("kept", 0)], timeout=20)  # type: ignore[attr-defined]
                offsets.append(answer[0].offset)
                if answer[0].offset < 0:
                    break
                time.sleep(1)
            expired_after = time.monotonic() - committed_at
        finally:
            consumer.close()  # type: ignore[attr-defined]
    assert offsets[0] == 5 and offsets[-1] == confluent_kafka.OFFSET_INVALID, offsets
    assert 55 <= expired_after <= 75, expired_after  # a minute after the commit (the check runs twice a second)
