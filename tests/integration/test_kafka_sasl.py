"""SASL/PLAIN on a Kafka listener (security protocol SASL_PLAINTEXT), the password being cluster.secret: a
confluent-kafka producer, consumer and admin client that authenticate work as on a PLAINTEXT listener (admin
requests included: they are authenticated as the CLI is with the secret); a wrong password and a client that
does not speak SASL are refused, and the brokers go on serving."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator

import pytest

from cluster.local_cluster import LocalClusterState
from tests.integration.processes import kafka_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SECRET = "s3cret-for-sasl"
# cluster up names each broker's Kafka listener PLAINTEXT; the map gives that name SASL_PLAINTEXT
SASL = {"listener.security.protocol.map": "MINIBROKER:PLAINTEXT,PLAINTEXT:SASL_PLAINTEXT"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalClusterState]:
    with kafka_cluster(tmp_path_factory.mktemp("sasl") / "cluster", SASL, secret=SECRET) as state:
        yield state


def client_config(cluster: LocalClusterState, password: str = SECRET) -> dict[str, object]:
    return {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": password,
    }


def test_authenticated_clients_create_produce_and_consume(cluster: LocalClusterState) -> None:
    admin = confluent_admin.AdminClient(client_config(cluster))
    for future in admin.create_topics([confluent_admin.NewTopic("secured", 1, 3)]).values():
        future.result(timeout=30)
    producer = confluent_kafka.Producer({**client_config(cluster), "enable.idempotence": True})
    for i in range(20):
        producer.produce("secured", value=b"v%d" % i, key=b"k")
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer(
        {**client_config(cluster), "group.id": "sasl-readers", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["secured"])
    got: list[bytes] = []
    try:
        while len(got) < 20:
            message = consumer.poll(30)
            assert message is not None, f"only {len(got)} records read"
            assert message.error() is None, message.error()
            got.append(message.value())
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(20)]


def test_a_wrong_password_is_refused(cluster: LocalClusterState) -> None:
    errors: list[object] = []
    producer = confluent_kafka.Producer({**client_config(cluster, "wrong"), "error_cb": errors.append})
    with pytest.raises(confluent_kafka.KafkaException):
        producer.list_topics(timeout=5)
    producer.poll(1)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors  # type: ignore[attr-defined]


def test_a_client_that_skips_sasl_gets_its_connection_closed(cluster: LocalClusterState) -> None:
    host, port = cluster.kafka_bootstrap.split(",")[0].rsplit(":", 1)
    # Metadata v1 with a null topic list, no SaslHandshake first: answered by closing the connection
    body = struct.pack(">hhih", 3, 1, 7, 4) + b"test" + struct.pack(">i", -1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        assert s.recv(4) == b""
    # and the listener goes on serving authenticated clients
    admin = confluent_admin.AdminClient(client_config(cluster))
    assert len(admin.list_topics(timeout=20).brokers) == 3


def test_kcat_authenticates_with_debians_older_librdkafka(cluster: LocalClusterState) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is installed by scripts/test.sh")
    sasl = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=me"]
    done = subprocess.run(
        [kcat, "-b", cluster.kafka_bootstrap, *sasl, "-X", f"sasl.password={SECRET}", "-L", "-J"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["brokers"]) == 3
    refused = subprocess.run(
        [kcat, "-b", cluster.kafka_bootstrap, *sasl, "-X", "sasl.password=wrong", "-L", "-m", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "Authentication failed" in refused.stderr


def kafka_request(api_key: int, version: int, body: bytes, correlation_id: int = 1) -> bytes:
    payload = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test" + body
    return struct.pack(">i", len(payload)) + payload


def read_answer(s: socket.socket) -> bytes:
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    return s.recv(size, socket.MSG_WAITALL)


HANDSHAKE = kafka_request(17, 1, struct.pack(">h", 5) + b"PLAIN")


def authenticate(password: bytes) -> bytes:
    token = b"\0alice\0" + password
    return kafka_request(36, 0, struct.pack(">i", len(token)) + token, correlation_id=2)


def first_listener(cluster: LocalClusterState) -> tuple[str, int]:
    host, port = cluster.kafka_bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def test_a_wrong_password_is_answered_after_a_delay_then_the_connection_closed(cluster: LocalClusterState) -> None:
    # As on the msgpack listener (and Kafka's connection.failed.authentication.delay.ms, 100 ms): guessing costs
    # a connection and a tenth of a second a try (it cost nothing: 1,473 guesses a second).
    with socket.create_connection(first_listener(cluster), timeout=10) as s:
        s.sendall(HANDSHAKE)
        read_answer(s)
        started = time.perf_counter()
        s.sendall(authenticate(b"wrong"))
        answer = read_answer(s)
        waited = time.perf_counter() - started
        assert struct.unpack_from(">h", answer, 4)[0] == 58  # SASL_AUTHENTICATION_FAILED
        assert s.recv(1) == b""
    assert waited >= 0.1


def test_sasl_authenticate_before_the_handshake_closes_the_connection(cluster: LocalClusterState) -> None:
    with socket.create_connection(first_listener(cluster), timeout=10) as s:
        s.sendall(authenticate(SECRET.encode()))
        assert s.recv(4) == b""


def test_a_large_frame_before_authentication_is_refused_and_accepted_after(cluster: LocalClusterState) -> None:
    # sasl.server.max.receive.size (512 KB): before it authenticates a connection may not make the broker
    # read (or buffer) a larger frame; the prefix alone closes it.
    records = b"r" * 600_000  # not a record batch: answered with the partition's error once it is read
    topic = struct.pack(">h", 4) + b"nope" + struct.pack(">iii", 1, 0, len(records)) + records
    big = kafka_request(0, 3, struct.pack(">hhii", -1, 1, 1000, 1) + topic)
    with socket.create_connection(first_listener(cluster), timeout=10) as s:
        s.sendall(big[:4096])
        assert s.recv(4) == b""
    with socket.create_connection(first_listener(cluster), timeout=10) as s:
        s.sendall(HANDSHAKE)
        read_answer(s)
        s.sendall(authenticate(SECRET.encode()))
        assert struct.unpack_from(">h", read_answer(s), 4)[0] == 0
        s.sendall(big)
        assert struct.unpack_from(">i", read_answer(s))[0] == 1  # the Produce's answer
