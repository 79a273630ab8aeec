"""The one config loader: file, then MINIBROKER_* env, then overrides; unknown keys are named errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BROKER_CONFIG, CONTROLLER_CONFIG, load_config
from server_common.config import ConfigError, parse_host_port


def test_later_sources_win_file_then_env_then_overrides(tmp_path: Path) -> None:
    f = tmp_path / "broker.properties"
    f.write_text("# comment\nbroker.id=1\nlog.dirs=/data\nreplica.fetch.max.bytes=100\nreplica.fetch.wait.max.ms: 7\n")
    env = {"MINIBROKER_REPLICA_FETCH_MAX_BYTES": "200", "MINIBROKER_MIN_INSYNC_REPLICAS": "2"}
    config = load_config(BROKER_CONFIG, f, {"min.insync.replicas": "3"}, environ=env)
    assert config["replica.fetch.max.bytes"] == 200
    assert config["replica.fetch.wait.max.ms"] == 7
    assert config["min.insync.replicas"] == 3
    assert config["replica.lag.time.max.ms"] == 30000  # Kafka's default


def test_a_misspelled_key_is_an_error_naming_it(tmp_path: Path) -> None:
    f = tmp_path / "b.properties"
    f.write_text("broker.id=1\nlog.dirs=/d\nreplica.fetch.max.byte=5\n")
    with pytest.raises(ConfigError, match="replica.fetch.max.byte"):
        load_config(BROKER_CONFIG, f, environ={})
    with pytest.raises(ConfigError, match="MINIBROKER_REPLICA_FETCH_MAX_BYTE\\b"):
        load_config(
            BROKER_CONFIG, None, {"broker.id": 1, "log.dirs": "/d"}, environ={"MINIBROKER_REPLICA_FETCH_MAX_BYTE": "1"}
        )


def test_one_environment_can_serve_the_controller_and_its_brokers() -> None:
    env = {
        "MINIBROKER_BROKER_ID": "1",  # a broker key, in the controller's environment
        "MINIBROKER_CLUSTER_SECRET": "s",  # both kinds
        "MINIBROKER_BOOTSTRAP_SERVER": "127.0.0.1:9092",  # read by the CLI, not a config key
        "MINIBROKER_METADATA_LOG_DIR": "/meta",
    }
    controller = load_config(CONTROLLER_CONFIG, None, environ=env)
    assert controller["cluster.secret"] == "s" and controller["metadata.log.dir"] == "/meta"
    broker = load_config(BROKER_CONFIG, None, {"log.dirs": "/d"}, environ=env)
    assert broker["broker.id"] == 1 and broker["cluster.secret"] == "s"


def test_values_are_typed_and_bad_ones_named() -> None:
    with pytest.raises(ConfigError, match="broker.id: expected an integer"):
        load_config(BROKER_CONFIG, None, {"broker.id": "one", "log.dirs": "/d"}, environ={})
    with pytest.raises(ConfigError, match="controlled.shutdown.enable: expected true or false"):
        load_config(
            BROKER_CONFIG, None, {"broker.id": 1, "log.dirs": "/d", "controlled.shutdown.enable": "maybe"}, environ={}
        )
    with pytest.raises(ConfigError, match="missing required config 'log.dirs'"):
        load_config(BROKER_CONFIG, None, {"broker.id": 1}, environ={})


def test_listeners_accept_kafka_style_and_plain_addresses() -> None:
    assert parse_host_port("PLAINTEXT://0.0.0.0:9092") == ("0.0.0.0", 9092)
    assert parse_host_port("127.0.0.1:9") == ("127.0.0.1", 9)
    with pytest.raises(ConfigError):
        parse_host_port("nohost")


def test_cluster_up_gives_brokers_a_laptops_connection_limits_and_an_override_wins(tmp_path: Path) -> None:
    from cluster.local_cluster import LAPTOP_CONNECTION_LIMITS, broker_props

    props = broker_props(tmp_path, 1, 9092, "3000@127.0.0.1:9192", None, {})
    config = load_config(BROKER_CONFIG, overrides={k: str(v) for k, v in props.items() if v is not None}, environ={})
    assert config["max.connections"] == 1000 and config["connections.max.idle.ms"] == 300_000
    assert config["max.connections.per.ip"] == 500
    alone = load_config(BROKER_CONFIG, overrides={"broker.id": "1", "log.dirs": str(tmp_path)}, environ={})
    assert alone["max.connections"] == alone["max.connections.per.ip"] == 2**31 - 1  # Kafka's
    assert alone["connections.max.idle.ms"] == 600_000
    props = broker_props(tmp_path, 1, 9092, "3000@127.0.0.1:9192", None, {"max.connections": "5000"})
    assert props["max.connections"] == "5000"
    assert props["connections.max.idle.ms"] == LAPTOP_CONNECTION_LIMITS["connections.max.idle.ms"]


def test_cluster_up_auto_creates_topics_with_three_partitions_and_as_many_replicas_as_it_has_brokers(
    tmp_path: Path,
) -> None:
    from broker.config import CONTROLLER_CONFIG
    from cluster.local_cluster import controller_props

    def auto_topics(brokers: int, **overrides: str) -> tuple[int, int]:
        props = controller_props(tmp_path, 3000, 9192, "3000@127.0.0.1:9192", None, overrides, num_brokers=brokers)
        config = load_config(CONTROLLER_CONFIG, overrides={k: str(v) for k, v in props.items() if v is not None})
        return config["num.partitions"], config["default.replication.factor"]

    assert auto_topics(3) == auto_topics(5) == (3, 3)
    # a smaller cluster still creates them (a replication factor above the brokers would be refused)
    assert auto_topics(1) == (3, 1) and auto_topics(2) == (3, 2)
    assert auto_topics(3, **{"num.partitions": "1", "default.replication.factor": "1"}) == (1, 1)  # Kafka's


def test_a_sasl_listener_needs_cluster_secret_and_ssl_is_refused(tmp_path: Path) -> None:
    from broker.broker_server import BrokerServer

    base = {"broker.id": "1", "log.dirs": str(tmp_path / "data")}
    sasl = {**base, "listeners": "127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}
    with pytest.raises(ConfigError, match="SASL_PLAINTEXT, whose PLAIN password is cluster.secret"):
        BrokerServer(load_config(BROKER_CONFIG, overrides=sasl, environ={}))
    ssl = {**base, "listeners": "127.0.0.1:0,SSL://127.0.0.1:0"}
    with pytest.raises(ConfigError, match="uses SSL; minibroker serves PLAINTEXT and SASL_PLAINTEXT"):
        BrokerServer(load_config(BROKER_CONFIG, overrides=ssl, environ={}))
