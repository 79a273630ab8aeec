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
