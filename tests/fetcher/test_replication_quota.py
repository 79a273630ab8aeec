"""Replication quota: which replicas are throttled, and the windowed byte rate."""

from __future__ import annotations

import pytest

from broker.replication_quota import (
    ReplicationQuotaManager,
    dynamic_throttles,
    parse_throttled_replicas,
    quota_manager_from_kafka_props,
    throttled_partitions_of,
)
from protocol.messages import TopicPartition
from server_common.time import ManualTime


def test_only_the_defined_replicas_are_throttled() -> None:
    quota = ReplicationQuotaManager(100, ManualTime())
    quota.mark_throttled("topic1", {1, 2, 3})
    assert all(quota.is_throttled(TopicPartition("topic1", p)) for p in (1, 2, 3))
    assert not quota.is_throttled(TopicPartition("topic1", 4))
    assert not quota.is_throttled(TopicPartition("topic2", 1))
    quota.remove_throttle("topic1")
    assert not quota.is_throttled(TopicPartition("topic1", 1))


def test_marking_a_whole_topic_throttles_every_partition() -> None:
    quota = ReplicationQuotaManager(100, ManualTime())
    quota.mark_throttled("MyTopic")
    assert quota.is_throttled(TopicPartition("MyTopic", 0)) and quota.is_throttled(TopicPartition("MyTopic", 99))


def test_rate_exceeds_the_quota_then_falls_back_below_it_as_time_passes() -> None:
    time = ManualTime(start_ms=0)
    quota = ReplicationQuotaManager(100, time, num_windows=10, window_ms=1000)
    assert not quota.is_quota_exceeded()
    time.advance(1500)
    quota.record(1)
    assert not quota.is_quota_exceeded()
    quota.record(149)  # 150 B in 1.5 s
    assert not quota.is_quota_exceeded()
    quota.record(1)  # 151 B in 1.5 s
    assert quota.rate() == pytest.approx(151 / 1.5)
    assert quota.is_quota_exceeded()
    time.advance(500)
    assert quota.rate() == pytest.approx(151 / 2.0)
    assert not quota.is_quota_exceeded()
    # once every window has aged out, old traffic no longer counts
    time.advance(10_000)
    assert quota.rate() == 0


def test_without_a_rate_the_quota_is_never_exceeded() -> None:
    quota = ReplicationQuotaManager(None, ManualTime())
    quota.record(10**12)
    assert not quota.is_quota_exceeded()


def test_kafka_config_names_build_the_follower_manager() -> None:
    props = {
        "follower.replication.throttled.rate": "1000",
        "follower.replication.throttled.replicas": "orders:0,orders:2,audit:*",
        "leader.replication.throttled.rate": "5",
    }
    quota = quota_manager_from_kafka_props(props, "follower", ManualTime())
    assert quota.rate_bytes_s == 1000
    assert quota.is_throttled(TopicPartition("orders", 2)) and not quota.is_throttled(TopicPartition("orders", 1))
    assert quota.is_throttled(TopicPartition("audit", 7))
    wildcard = quota_manager_from_kafka_props({"leader.replication.throttled.replicas": "*"}, "leader", ManualTime())
    assert wildcard.is_throttled(TopicPartition("any", 3))


def test_malformed_throttled_replica_lists_are_rejected() -> None:
    assert parse_throttled_replicas("*") is None
    assert parse_throttled_replicas("") == {}
    for bad in ("orders", "orders:x", ":1"):
        with pytest.raises(ValueError):
            parse_throttled_replicas(bad)


def test_topic_throttled_replica_lists_name_partitions_per_broker_as_kafka_does() -> None:
    # Kafka's partition:broker entries: each broker throttles the partitions listed with its own id
    assert throttled_partitions_of("0:1,0:2,3:1", 1) == {0, 3}
    assert throttled_partitions_of("0:1,0:2,3:1", 2) == {0}
    assert throttled_partitions_of("0:1", 5) == set()
    assert throttled_partitions_of("*", 5) is None
    configs = {
        "a": {"leader.replication.throttled.replicas": "0:1,1:2", "follower.replication.throttled.replicas": "0:3"},
        "b": {"leader.replication.throttled.replicas": "*"},
        "c": {"min.insync.replicas": "2"},
    }
    assert dynamic_throttles(configs, "leader", 1) == {"a": {0}, "b": None}
    assert dynamic_throttles(configs, "follower", 3) == {"a": {0}}
    assert dynamic_throttles(configs, "follower", 1) == {}


def test_dynamic_throttles_and_rate_come_and_go_without_touching_the_static_ones() -> None:
    quota = ReplicationQuotaManager(None, ManualTime())  # the broker's own config: unthrottled
    quota.mark_throttled("static", {0})
    quota.set_dynamic_throttles({"moving": {1}})
    quota.set_dynamic_rate(1000)
    assert quota.is_throttled(TopicPartition("moving", 1)) and quota.is_throttled(TopicPartition("static", 0))
    assert not quota.is_throttled(TopicPartition("moving", 0))
    assert quota.rate_bytes_s == 1000
    quota.record(5000)
    assert quota.is_quota_exceeded()
    # the reassignment is done: --verify deletes the topic lists and the rates
    quota.set_dynamic_throttles({})
    quota.set_dynamic_rate(None)
    assert not quota.is_throttled(TopicPartition("moving", 1)) and quota.is_throttled(TopicPartition("static", 0))
    assert not quota.is_quota_exceeded()
