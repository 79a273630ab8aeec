"""Every Kafka response the broker sends real clients, read again by a second, independent decoder.

The Kafka listener encodes its answers with kafka-python's message classes (network/kafka_wire.py); the
clients that read them here (librdkafka, kafka-python) would often shrug off a field encoded wrongly at the
end of a message or in a version they do not send. kio is generated from Kafka's JSON message schemas too,
but separately, and parses in native code: every answer must parse with it, header and body, to the last
byte. The clients talk through a recording proxy (the broker advertises the proxy's address, so every
connection, the coordinator's and the leader's included, goes through it), which notes each request's API
key, version and correlation id and keeps each answer's bytes.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin
import kafka
import kio.index as kio_index
import kio.serial as kio_serial
import pytest

from cluster.local_cluster import LocalClusterState, free_ports, start_cluster, stop_cluster
from network.kafka_wire import served_versions

confluent_admin: Any = confluent_kafka.admin  # its names are re-exported with `*`, which mypy does not follow

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

API_VERSIONS = 18
# What the clients below must have been answered, by API key: produce, fetch, offsets, metadata, groups,
# idempotence and the admin APIs.
REQUIRED = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    22: "InitProducerId",
    32: "DescribeConfigs",
    37: "CreatePartitions",
    42: "DeleteGroups",
    55: "DescribeQuorum",
    44: "IncrementalAlterConfigs",
}


class RecordingProxy:
    """A TCP proxy on its own thread and loop: Kafka frames pass unchanged; each answer is kept with the API
    key and version of the request it answers."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.answers: list[tuple[int, int, bytes]] = []
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: asyncio.Server | None = None

    def start(self, port: int) -> None:
        self.thread.start()
        started = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._serve, "127.0.0.1", port), self.loop)
        self.server = started.result(timeout=10)

    def stop(self) -> None:
        async def close() -> None:
            assert self.server is not None
            self.server.close()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    async def _serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        broker, to_broker = await asyncio.open_connection(*self.upstream)
        asked: dict[int, tuple[int, int]] = {}

        def request(body: bytes) -> None:
            key, version, correlation_id = struct.unpack_from(">hhi", body, 0)
            asked[correlation_id] = (key, version)  # before it is sent on: its answer cannot come first

        def answer(body: bytes) -> None:
            (correlation_id,) = struct.unpack_from(">i", body, 0)
            key, version = asked.pop(correlation_id, (-1, -1))
            with self.lock:
                self.answers.append((key, version, body))

        await asyncio.gather(_pump(client, to_broker, request), _pump(broker, to_client, answer))


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, seen: Callable[[bytes], None]) -> None:
    """Size-prefixed frames from `source` to `sink`, each shown to `seen` first, until either side closes."""
    try:
        while True:
            prefix = await source.readexactly(4)
            body = await source.readexactly(struct.unpack(">i", prefix)[0])
            seen(body)
            sink.write(prefix + body)
            await sink.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        sink.close()


def read_with_kio(key: int, version: int, body: bytes) -> object:
    """The answer parsed by kio, header and body; raises unless the bytes are exactly one such answer."""
    served = {k: hi for k, _, hi in served_versions()}
    if key == API_VERSIONS and version > served[API_VERSIONS]:
        version = 0  # KIP-511: a version the broker lacks is answered in v0's layout (with error 35)
    schema = kio_index.load_response_schema(key, version)
    header, used = kio_serial.entity_reader(schema.__header_schema__)(body, 0)
    message, size = kio_serial.entity_reader(schema)(body, used)
    assert used + size == len(body), f"{schema.__name__} v{version}: {len(body) - used - size} bytes left over"
    assert header.correlation_id == struct.unpack_from(">i", body, 0)[0]
    return message


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalClusterState, RecordingProxy, str]]:
    broker_port, controller_port, kafka_port, proxy_port = free_ports(4)
    overrides = {
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}",
        "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "broker.heartbeat.interval.ms": "250",
    }
    cluster_dir: Path = tmp_path_factory.mktemp("kio") / "cluster"
    state = asyncio.run(
        start_cluster(
            cluster_dir,
            1,
            controller_port=controller_port,
            broker_ports=[broker_port],
            kafka_ports=[kafka_port],
            overrides=overrides,
        )
    )
    broker = state.brokers[0]
    proxy = RecordingProxy((broker.host, broker.kafka_port))
    try:
        proxy.start(proxy_port)
        yield state, proxy, f"127.0.0.1:{proxy_port}"
    finally:
        proxy.stop()
        stop_cluster(state, timeout_s=10.0)


def admin_calls(bootstrap: str) -> None:
    admin = confluent_admin.AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([confluent_admin.NewTopic(t, 2, 1) for t in ("kio-a", "kio-b")]).values():
        future.result(timeout=30)
    resource = confluent_admin.ConfigResource(confluent_admin.ResourceType.TOPIC, "kio-a")
    change = confluent_admin.ConfigEntry(
        "retention.ms", "3600000", incremental_operation=confluent_admin.AlterConfigOpType.SET
    )
    for future in admin.incremental_alter_configs(
        [confluent_admin.ConfigResource(confluent_admin.ResourceType.TOPIC, "kio-a", incremental_configs=[change])]
    ).values():
        future.result(timeout=30)
    for future in admin.describe_configs([resource]).values():
        assert future.result(timeout=30)["retention.ms"].value == "3600000"
    for future in admin.create_partitions([confluent_admin.NewPartitions("kio-a", 3)]).values():
        future.result(timeout=30)


def confluent_round_trip(bootstrap: str) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "gzip", "linger.ms": 5}
    )
    for i in range(30):
        producer.produce("kio-a", key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"x")])
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kio-g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "heartbeat.interval.ms": 100,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe(["kio-a"])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < 30 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append(msg.value() or b"")
    time.sleep(0.3)  # a heartbeat or two at 100 ms
    consumer.commit(asynchronous=False)
    assert consumer.committed([confluent_kafka.TopicPartition("kio-a", 0)], timeout=30)
    consumer.close()  # LeaveGroup
    assert sorted(seen) == sorted(b"v%d" % i for i in range(30))
    admin = confluent_admin.AdminClient({"bootstrap.servers": bootstrap})
    groups = admin.list_consumer_groups().result(timeout=30)
    assert "kio-g" in {g.group_id for g in groups.valid}
    for future in admin.describe_consumer_groups(["kio-g"]).values():
        future.result(timeout=30)
    for future in admin.delete_records([confluent_kafka.TopicPartition("kio-a", 0, 1)]).values():
        future.result(timeout=30)
    for future in admin.delete_consumer_groups(["kio-g"]).values():
        future.result(timeout=30)
    for future in admin.delete_topics(["kio-a"]).values():
        future.result(timeout=30)


def kafka_python_round_trip(bootstrap: str) -> None:
    # kafka-python 3 asks ApiVersions v4 first: the v0-layout refusal is answered through the proxy too.
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(10):
        producer.send("kio-b", key=b"k", value=b"p%d" % i).get(timeout=30)
    producer.close()
    consumer = kafka.KafkaConsumer(
        "kio-b", bootstrap_servers=bootstrap, group_id="kio-p", auto_offset_reset="earliest", consumer_timeout_ms=20000
    )
    values = []
    for msg in consumer:
        values.append(msg.value)
        if len(values) == 10:
            break
    consumer.commit()
    consumer.close()
    assert sorted(values) == sorted(b"p%d" % i for i in range(10))
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)  # DeleteRecords and DeleteGroups v2 (flexible)
    try:
        admin.delete_records({kafka.TopicPartition("kio-b", 0): -1})
        assert admin.delete_groups(["kio-p"]) == {"kio-p": "OK"}
        # the controller quorum, as kafka-metadata-quorum.sh asks a broker (DescribeQuorum, forwarded)
        (quorum,) = admin.describe_metadata_quorum()["topics"][0]["partitions"]
        assert quorum["error"] is None and quorum["leader_id"] in (3000, 3001, 3002)
        assert sorted(v["replica_id"] for v in quorum["current_voters"]) == [3000, 3001, 3002]
        assert [o["replica_id"] for o in quorum["observers"]] == [1]  # the one broker
    finally:
        admin.close()


def test_every_answer_to_real_clients_parses_with_kio_to_the_last_byte(
    proxied: tuple[LocalClusterState, RecordingProxy, str],
) -> None:
    _, proxy, bootstrap = proxied
    admin_calls(bootstrap)
    confluent_round_trip(bootstrap)
    kafka_python_round_trip(bootstrap)
    with proxy.lock:
        answers = list(proxy.answers)
    assert all(key >= 0 for key, _, _ in answers), "an answer to no request the proxy saw"
    failures = []
    seen: dict[int, set[int]] = {}
    for key, version, body in answers:
        try:
            read_with_kio(key, version, body)
        except Exception as exc:  # noqa: BLE001 - every failure is listed below
            failures.append(f"api {key} v{version}: {type(exc).__name__}: {exc}")
        seen.setdefault(key, set()).add(version)
    assert not failures, "\n".join(failures[:20])
    missing = {name for key, name in REQUIRED.items() if key not in seen}
    assert not missing, f"no answer seen to {sorted(missing)} (seen: {seen})"
    assert len(seen[API_VERSIONS]) >= 2, seen[API_VERSIONS]  # librdkafka's v3 and kafka-python's v4 refused


@pytest.mark.timeout(30)
def test_an_answer_with_a_byte_too_many_or_too_few_does_not_parse() -> None:
    from kafka.protocol.metadata.api_versions import ApiVersionsResponse

    answer = ApiVersionsResponse[3](error_code=0, api_keys=[], throttle_time_ms=0)
    answer.with_header(correlation_id=7)
    body = bytes(answer.encode(header=True))
    assert read_with_kio(API_VERSIONS, 3, body) is not None
    with pytest.raises(AssertionError, match="1 bytes left over"):
        read_with_kio(API_VERSIONS, 3, body + b"\x00")
    with pytest.raises(Exception):  # noqa: B017 - kio's own error for a short buffer
        read_with_kio(API_VERSIONS, 3, body[:-1])
