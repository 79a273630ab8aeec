"""Real Kafka clients against a real 3-broker cluster's Kafka listeners: kcat (librdkafka from Debian),
confluent-kafka, kafka-python and aiokafka produce and consume; what they write reads the same through
`minibroker consume`, and what `minibroker produce` writes reads the same through them."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import struct
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.local_cluster import LocalClusterState
from tests.integration.processes import ROOT, kafka_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")
kafka = pytest.importorskip("kafka")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

KCAT = shutil.which("kcat")


OVERRIDES = {
    "broker.heartbeat.interval.ms": "250",
    "broker.session.timeout.ms": "1500",
    "offsets.topic.num.partitions": "3",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterState]:
    with kafka_cluster(tmp_path_factory.mktemp("kafka-clients") / "cluster", OVERRIDES) as state:
        yield state


def minibroker(
    cluster: LocalClusterState, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "cluster", *args, "--bootstrap-server", cluster.bootstrap],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )


def create_topic(cluster: LocalClusterState, name: str, partitions: int = 3) -> None:
    done = minibroker(cluster, "topic", "create", name, "--partitions", str(partitions), "--replication-factor", "3")
    assert done.returncode == 0, done.stderr.decode()


def consume_json(cluster: LocalClusterState, topic: str, count: int) -> list[dict[str, object]]:
    done = minibroker(cluster, "consume", topic, "--from-beginning", "--max-messages", str(count), "--json")
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


def confluent_consume(cluster: LocalClusterState, topic: str, count: int, partitions: int = 3) -> list[object]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[object] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(message)
    finally:
        consumer.close()
    return got


def test_metadata_names_every_broker_by_its_kafka_listener(cluster: LocalClusterState) -> None:
    create_topic(cluster, "meta")
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    md = admin.list_topics(timeout=10)
    assert {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()} == {
        b.node_id: f"{b.host}:{b.kafka_port}" for b in cluster.brokers
    }
    partitions = md.topics["meta"].partitions
    assert sorted(partitions) == [0, 1, 2]
    assert all(p.leader in (1, 2, 3) and sorted(p.isrs) == [1, 2, 3] for p in partitions.values())


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_an_idempotent_confluent_kafka_producer_writes_what_minibroker_consume_reads(
    cluster: LocalClusterState, codec: str
) -> None:
    topic = f"ck-{codec}"
    create_topic(cluster, topic)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 5,
        }
    )
    reports: list[tuple[object, int, int]] = []
    sent = {f"value-{i}".encode(): f"key-{i}".encode() for i in range(300)}
    for value, key in sent.items():
        producer.produce(
            topic,
            value=value,
            key=key,
            headers=[("seq", value[6:]), ("empty", None)],
            on_delivery=lambda err, msg: reports.append((err, msg.partition(), msg.offset())),
        )
    assert producer.flush(30) == 0
    assert [r for r in reports if r[0] is not None] == []
    # Every delivery report names a distinct offset: no record was written twice.
    assert len({(p, o) for _, p, o in reports}) == len(sent)

    records = consume_json(cluster, topic, len(sent))
    assert sorted(r["value"] for r in records) == sorted(v.decode() for v in sent)
    back = confluent_consume(cluster, topic, len(sent))
    assert {m.value(): m.key() for m in back} == sent
    assert all(dict(m.headers())["seq"] == m.value()[6:] and dict(m.headers())["empty"] is None for m in back)
    assert {(m.partition(), m.offset()) for m in back} == {(p, o) for _, p, o in reports}


def test_what_minibroker_produce_writes_reads_the_same_through_kafka_clients(cluster: LocalClusterState) -> None:
    create_topic(cluster, "native", partitions=1)
    lines = b"".join(f"line {i} \xe2\x9c\x93\n".encode() for i in range(50))
    done = minibroker(cluster, "produce", "native", "--key", "k1", "--header", "origin=cli", stdin=lines)
    assert done.returncode == 0, done.stderr.decode()
    expected = [line for line in lines.split(b"\n") if line]
    back = confluent_consume(cluster, "native", len(expected), partitions=1)
    assert [m.value() for m in back] == expected
    assert {m.key() for m in back} == {b"k1"}
    assert all(m.headers() == [("origin", b"cli")] for m in back)
    assert [m.offset() for m in back] == list(range(len(expected)))

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=cluster.kafka_bootstrap, consumer_timeout_ms=5000, enable_auto_commit=False
    )
    consumer.assign([kafka.TopicPartition("native", 0)])
    consumer.seek_to_beginning()
    read = [(r.offset, r.key, r.value, r.headers) for r in consumer]
    consumer.close()
    assert read == [(i, b"k1", v, [("origin", b"cli")]) for i, v in enumerate(expected)]


def test_kafka_python_and_aiokafka_produce_and_consume(cluster: LocalClusterState) -> None:
    create_topic(cluster, "py")
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, acks="all", compression_type="gzip")
    futures = [producer.send("py", key=b"kp", value=b"kafka-python %d" % i) for i in range(100)]
    producer.flush()
    offsets = {(f.get(timeout=10).partition, f.get(timeout=10).offset) for f in futures}
    producer.close()
    assert len(offsets) == 100

    aiokafka = pytest.importorskip("aiokafka")

    async def with_aiokafka() -> list[bytes]:
        prod = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, acks="all")
        await prod.start()
        try:
            for i in range(50):
                await prod.send_and_wait("py", b"aiokafka %d" % i, partition=0)
        finally:
            await prod.stop()
        cons = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.kafka_bootstrap, enable_auto_commit=False)
        await cons.start()
        values: list[bytes] = []
        try:
            cons.assign([aiokafka.TopicPartition("py", p) for p in range(3)])
            await cons.seek_to_beginning()
            while len(values) < 150:
                batch = await asyncio.wait_for(cons.getmany(timeout_ms=1000), 10)
                values += [m.value for messages in batch.values() for m in messages]
        finally:
            await cons.stop()
        return values

    values = asyncio.run(with_aiokafka())
    assert sorted(values) == sorted(
        [b"kafka-python %d" % i for i in range(100)] + [b"aiokafka %d" % i for i in range(50)]
    )


@pytest.mark.skipif(KCAT is None, reason="kcat is installed by scripts/test.sh")
def test_kcat_lists_produces_and_consumes_with_keys_and_headers(cluster: LocalClusterState) -> None:
    assert KCAT is not None
    create_topic(cluster, "kcat", partitions=1)
    listing = subprocess.run([KCAT, "-b", cluster.kafka_bootstrap, "-L", "-t", "kcat"], capture_output=True, timeout=30)
    assert listing.returncode == 0, listing.stderr.decode()
    assert "3 brokers" in listing.stdout.decode() and 'topic "kcat" with 1 partitions' in listing.stdout.decode()

    produced = subprocess.run(
        [KCAT, "-b", cluster.kafka_bootstrap, "-P", "-t", "kcat", "-K", ":", "-H", "h=1", "-z", "lz4"],
        input=b"a:one\nb:two\nc:three\n",
        capture_output=True,
        timeout=30,
    )
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = subprocess.run(
        [KCAT, "-b", cluster.kafka_bootstrap, "-C", "-t", "kcat", "-e", "-f", "%o %k %s %h\n"],
        capture_output=True,
        timeout=30,
    )
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert consumed.stdout.decode().splitlines() == ["0 a one h=1", "1 b two h=1", "2 c three h=1"]
    assert [r["value"] for r in consume_json(cluster, "kcat", 3)] == ["one", "two", "three"]


def test_an_api_versions_request_above_the_served_range_gets_the_ranges_in_the_v0_layout(
    cluster: LocalClusterState,
) -> None:
    from kafka.protocol.metadata.api_versions import ApiVersionsResponse

    broker = cluster.brokers[0]
    with socket.create_connection((broker.host, broker.kafka_port), timeout=10) as sock:
        # ApiVersions v99 (a version no broker knows), correlation id 7, client id "probe", then a body
        # this broker cannot know the layout of.
        body = struct.pack(">hhih", 18, 99, 7, 5) + b"probe" + b"\x00\x01\x02"
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _read(sock, 4))[0]
        answer = _read(sock, size)
    assert struct.unpack(">i", answer[:4])[0] == 7  # response header v0: the correlation id alone
    response = ApiVersionsResponse.decode(answer[4:], version=0)
    assert response.error_code == 35
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[18] == (0, 3) and ranges[0][0] == 0 and ranges[1][0] <= 4 <= ranges[1][1]
    assert ranges[21] == ranges[42] == (0, 2)  # DeleteRecords, DeleteGroups


def test_an_unknown_api_key_closes_only_that_connection(cluster: LocalClusterState) -> None:
    broker = cluster.brokers[0]
    with socket.create_connection((broker.host, broker.kafka_port), timeout=10) as sock:
        body = struct.pack(">hhih", 999, 0, 1, -1)
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert sock.recv(1) == b""  # closed, as Kafka closes a connection on a request it cannot parse
    admin = confluent_admin.AdminClient({"bootstrap.servers": f"{broker.host}:{broker.kafka_port}"})
    assert len(admin.list_topics(timeout=10).brokers) == 3


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed early"
        data += chunk
    return data


def test_the_kafka_listener_is_in_the_cluster_state_file(cluster: LocalClusterState) -> None:
    saved = json.loads((Path(cluster.dir) / "cluster.json").read_text())
    assert [b["kafka_port"] for b in saved["brokers"]] == [b.kafka_port for b in cluster.brokers]


def test_a_producer_to_a_topic_that_does_not_exist_creates_it_as_kafka_does(cluster: LocalClusterState) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    reports: list[object] = []
    producer.produce("made-on-demand", value=b"first", on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(30) == 0
    assert reports == [None]
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    topic = admin.list_topics(timeout=10).topics["made-on-demand"]
    assert topic.error is None and topic.partitions  # created with the controller's num.partitions
    # A consumer's metadata request does not create (librdkafka's allow.auto.create.topics=false).
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "x"})
    try:
        assert "never-made" not in consumer.list_topics("never-made", timeout=10).topics or (
            consumer.list_topics("never-made", timeout=10).topics["never-made"].error is not None
        )
    finally:
        consumer.close()
    assert "never-made" not in admin.list_topics(timeout=10).topics


def test_an_admin_client_creates_topics_through_the_controller_the_metadata_names(cluster: LocalClusterState) -> None:
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    md = admin.list_topics(timeout=10)
    assert md.controller_id in md.brokers  # a broker the client can reach, which forwards to the controller
    futures = admin.create_topics([confluent_admin.NewTopic("via-admin", num_partitions=2, replication_factor=3)])
    futures["via-admin"].result(timeout=30)
    # The answer comes once the controller has the topic; the broker asked next learns it from the
    # controller's UPDATE_METADATA a moment later (Kafka's admin API is eventually consistent the same way).
    deadline = time.monotonic() + 30
    while "via-admin" not in (topics := admin.list_topics(timeout=10).topics) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sorted(topics["via-admin"].partitions) == [0, 1]


def test_a_commit_for_a_partition_that_does_not_exist_fails_only_for_it(cluster: LocalClusterState) -> None:
    create_topic(cluster, "committed", partitions=1)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "committer"})
    try:
        asked = [confluent_kafka.TopicPartition("committed", 0, 5), confluent_kafka.TopicPartition("nowhere", 0, 5)]
        try:
            answered = consumer.commit(offsets=asked, asynchronous=False)
        except confluent_kafka.KafkaException as exc:  # librdkafka raises when any partition failed
            answered = exc.args[0].partitions if hasattr(exc.args[0], "partitions") else None
        committed = consumer.committed([confluent_kafka.TopicPartition("committed", 0)], timeout=20)
        assert committed[0].offset == 5
        if answered is not None:
            errors = {tp.topic: tp.error for tp in answered}
            assert errors["committed"] is None
            assert errors["nowhere"].code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        consumer.close()


def test_an_admin_client_changes_and_reads_a_topics_configs(cluster: LocalClusterState) -> None:
    create_topic(cluster, "configured", partitions=1)
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    resource = confluent_admin.ConfigResource(
        confluent_admin.ResourceType.TOPIC,
        "configured",
        incremental_configs=[
            confluent_admin.ConfigEntry(
                "retention.ms", "3600000", incremental_operation=confluent_admin.AlterConfigOpType.SET
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)

    def described_when(ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The topic's configs as DescribeConfigs answers them, once `ready`: the broker that answers learns
        the controller's change in its next UPDATE_METADATA, a moment after the change was answered."""
        deadline = time.monotonic() + 30
        while True:
            described = admin.describe_configs(
                [confluent_admin.ConfigResource(confluent_admin.ResourceType.TOPIC, "configured")]
            )
            configs: dict[str, Any] = next(iter(described.values())).result(timeout=30)
            if ready(configs) or time.monotonic() > deadline:
                return configs
            time.sleep(0.1)

    configs = described_when(lambda c: c["retention.ms"].value == "3600000")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == confluent_admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # AlterConfigs (API 33, before KIP-339): the topic's own configs become exactly the ones listed
    legacy = confluent_admin.ConfigResource(
        confluent_admin.ResourceType.TOPIC, "configured", set_config={"segment.ms": "600000"}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # confluent-kafka marks alter_configs deprecated
        futures = admin.alter_configs([legacy])
    for future in futures.values():
        future.result(timeout=30)
    configs = described_when(lambda c: c["segment.ms"].value == "600000" and c["retention.ms"].value != "3600000")
    assert configs["segment.ms"].value == "600000"
    assert configs["segment.ms"].source == confluent_admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].source != confluent_admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value  # removed


def produce_to_partitions(cluster: LocalClusterState, topic: str, partitions: int, per_partition: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=b"%d-%d" % (p, i), partition=p)
    assert producer.flush(30) == 0


def earliest_offsets(cluster: LocalClusterState, topic: str, partitions: int) -> list[int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "unused"})
    try:
        return [consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[0]
                for p in range(partitions)]  # fmt: skip
    finally:
        consumer.close()


def test_records_are_deleted_through_the_admin_apis_of_confluent_kafka_aiokafka_and_kafka_python(
    cluster: LocalClusterState,
) -> None:
    create_topic(cluster, "trimmed")
    produce_to_partitions(cluster, "trimmed", 3, 10)
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    # confluent-kafka (librdkafka's DeleteRecords)
    (deleted,) = admin.delete_records([confluent_kafka.TopicPartition("trimmed", 0, 4)]).values()
    assert deleted.result(timeout=30).low_watermark == 4

    # aiokafka
    aiokafka_admin = pytest.importorskip("aiokafka.admin")
    aiokafka_structs = pytest.importorskip("aiokafka.structs")

    async def with_aiokafka() -> dict[Any, int]:
        client = aiokafka_admin.AIOKafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
        await client.start()
        try:
            tp = aiokafka_structs.TopicPartition("trimmed", 1)
            return dict(await client.delete_records({tp: aiokafka_admin.RecordsToDelete(before_offset=6)}))
        finally:
            await client.close()

    assert list(asyncio.run(with_aiokafka()).values()) == [6]

    # kafka-python (DeleteRecords v2, a flexible version); -1 deletes up to the high watermark
    python_admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        answered = python_admin.delete_records({kafka.TopicPartition("trimmed", 2): -1})
    finally:
        python_admin.close()
    assert [v["low_watermark"] for v in answered.values()] == [10]

    assert earliest_offsets(cluster, "trimmed", 3) == [4, 6, 10]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "unused"})
    consumer.assign([confluent_kafka.TopicPartition("trimmed", 0, confluent_kafka.OFFSET_BEGINNING)])
    try:
        read = [consumer.poll(10) for _ in range(6)]
    finally:
        consumer.close()
    assert [m.offset() if m is not None else None for m in read] == list(range(4, 10))  # from the new log start

    # Kafka's errors, per partition: past the high watermark; the group coordinators' own topic
    refused = admin.delete_records(
        [confluent_kafka.TopicPartition("trimmed", 1, 11), confluent_kafka.TopicPartition("__consumer_offsets", 0, 0)]
    )
    codes = {}
    for tp, future in refused.items():
        with pytest.raises(confluent_kafka.KafkaException) as failed:
            future.result(timeout=30)
        codes[tp.topic] = failed.value.args[0].code()
    assert codes == {"trimmed": confluent_kafka.KafkaError.OFFSET_OUT_OF_RANGE,
                     "__consumer_offsets": confluent_kafka.KafkaError.TOPIC_EXCEPTION}  # fmt: skip
    assert earliest_offsets(cluster, "trimmed", 3) == [4, 6, 10]


def test_an_empty_group_is_deleted_through_the_admin_apis_and_a_group_with_members_is_not(
    cluster: LocalClusterState,
) -> None:
    create_topic(cluster, "grouped", partitions=1)
    produce_to_partitions(cluster, "grouped", 1, 3)
    member = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "doomed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})

    def delete(*groups: str) -> dict[str, int]:
        codes = {}
        for group, future in admin.delete_consumer_groups(list(groups), request_timeout=30).items():
            try:
                future.result(timeout=60)
                codes[group] = 0
            except confluent_kafka.KafkaException as exc:
                codes[group] = exc.args[0].code()
        return codes

    try:
        member.subscribe(["grouped"])
        message = member.poll(30)
        assert message is not None and message.error() is None
        member.commit(message=message, asynchronous=False)
        assert delete("doomed", "never-was") == {
            "doomed": confluent_kafka.KafkaError.NON_EMPTY_GROUP,
            "never-was": confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND,
        }
    finally:
        member.close()  # leaves the group: it is Empty, its committed offset kept
    listed = admin.list_consumer_groups().result(timeout=30).valid
    assert "doomed" in {g.group_id for g in listed}
    assert delete("doomed") == {"doomed": 0}
    listed = admin.list_consumer_groups().result(timeout=30).valid
    assert "doomed" not in {g.group_id for g in listed}
    offsets = admin.list_consumer_group_offsets([confluent_kafka.ConsumerGroupTopicPartitions("doomed")])
    assert next(iter(offsets.values())).result(timeout=30).topic_partitions == []

    # kafka-python (DeleteGroups v2, a flexible version), on a group that only ever committed offsets
    python_admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        python_admin.alter_group_offsets(
            "standalone", {kafka.TopicPartition("grouped", 0): kafka.OffsetAndMetadata(2, "", -1)}
        )
        assert python_admin.delete_groups(["standalone"]) == {"standalone": "OK"}
    finally:
        python_admin.close()
    done = minibroker(cluster, "group", "list", "--json")
    assert done.returncode == 0, done.stderr.decode()
    assert not {"doomed", "standalone"} & {g["group"] for g in json.loads(done.stdout)}


NODE = shutil.which("node")
KAFKAJS = ROOT / "cluster" / "js" / "node_modules" / "kafkajs"


@pytest.mark.skipif(NODE is None or not KAFKAJS.exists(), reason="KafkaJS is installed by scripts/setup.sh (npm ci)")
def test_kafkajs_deletes_records_and_groups(cluster: LocalClusterState) -> None:
    assert NODE is not None
    create_topic(cluster, "js-trimmed", partitions=1)
    produce_to_partitions(cluster, "js-trimmed", 1, 5)
    done = subprocess.run(
        [NODE, str(ROOT / "tests" / "js" / "admin_deletes.js"), cluster.kafka_bootstrap, "js-trimmed", "js-group"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["offsets"] == [{"partition": 0, "offset": "5", "high": "5", "low": "3"}]
    assert seen["beyond"] == ["OFFSET_OUT_OF_RANGE"]
    assert seen["deleted"] == [{"groupId": "js-group", "errorCode": 0}]
    assert seen["missing"] == ["GROUP_ID_NOT_FOUND"]
    assert "js-group" not in seen["groups"]


def test_describe_configs_answers_each_configs_synonyms_with_their_sources_when_asked(
    cluster: LocalClusterState,
) -> None:
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    topic = confluent_admin.NewTopic("synonyms", 1, 3, config={"retention.ms": "3600000"})
    admin.create_topics([topic])["synonyms"].result(timeout=30)
    from kafka.admin import ConfigResource, ConfigResourceType

    python_admin = kafka.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, "synonyms")
        deadline = time.monotonic() + 30
        while True:  # the broker asked learns the new topic from the controller a moment after it is created
            try:
                described = python_admin.describe_configs([resource], include_synonyms=True, config_filter="all")
                break
            except kafka.errors.UnknownTopicOrPartitionError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        plain = python_admin.describe_configs([resource], config_filter="all")
    finally:
        python_admin.close()
    retention = described["topic"]["synonyms"]["retention.ms"]
    # Kafka's chain, the value in effect first: the topic's own, then the broker key it stands for
    assert retention["synonyms"] == [
        {"name": "retention.ms", "value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"},
        {"name": "log.retention.ms", "value": "604800000", "source": "DEFAULT_CONFIG"},
    ]
    segment = described["topic"]["synonyms"]["segment.bytes"]
    assert segment["config_source"] == "DEFAULT_CONFIG"
    assert segment["synonyms"] == [{"name": "log.segment.bytes", "value": str(1 << 30), "source": "DEFAULT_CONFIG"}]
    assert plain["topic"]["synonyms"]["retention.ms"]["synonyms"] == []  # not asked for

    # librdkafka asks for them too
    (future,) = admin.describe_configs(
        [confluent_admin.ConfigResource(confluent_admin.ResourceType.TOPIC, "synonyms")]
    ).values()
    entry = future.result(timeout=30)["retention.ms"]
    assert {name: s.source for name, s in entry.synonyms.items()} == {
        "retention.ms": confluent_admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
        "log.retention.ms": confluent_admin.ConfigSource.DEFAULT_CONFIG.value,
    }
