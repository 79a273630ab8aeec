"""TopicControlManager on its own: creating and deleting topics and adding partitions."""

from __future__ import annotations

from metadata.records import MetadataRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from protocol.errors import ErrorCode
from protocol.messages import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    TopicPartition,
)
from tests.controller.managers import Managers


def test_a_topic_is_one_topic_record_and_a_partition_record_per_partition_led_by_its_first_replica() -> None:
    m = Managers()
    m.live_brokers(1, 2, 3)
    offset = m.log.last_offset + 1
    committed: list[MetadataRecord] = []
    [result] = m.topics.create_topics(CreateTopicsRequest([CreatableTopic("t", 3, 2)]), committed).topics
    assert result.error_code == ErrorCode.NONE
    assert committed[0] == TopicRecord("t", {}, f"{offset:016x}")  # the id is the record's offset
    partitions = [r for r in committed if isinstance(r, PartitionRecord)]
    assert [p.partition for p in partitions] == [0, 1, 2]
    assert all(len(p.replicas) == 2 and p.leader == p.replicas[0] and p.isr == p.replicas for p in partitions)
    assert sorted(p.leader for p in partitions) == [1, 2, 3]  # leaders spread over the brokers


def test_a_topic_needs_as_many_live_brokers_as_its_replication_factor() -> None:
    m = Managers()
    m.live_brokers(1)
    [result] = m.topics.create_topics(CreateTopicsRequest([CreatableTopic("t", 1, 2)]), []).topics
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR and "t" not in m.log.image.topics


def test_deleting_a_topic_names_each_replica_to_delete() -> None:
    m = Managers()
    m.live_brokers(1, 2)
    m.partition([1, 2])
    committed: list[MetadataRecord] = []
    [result] = m.topics.delete_topics(DeleteTopicsRequest(["t"]), committed).responses
    assert result.error_code == ErrorCode.NONE and committed == [RemoveTopicRecord("t")]
    assert m.log.take_deleted_replicas() == {1: [TopicPartition("t", 0)], 2: [TopicPartition("t", 0)]}


def test_added_partitions_are_numbered_on_with_partition_zeros_replication_factor() -> None:
    m = Managers()
    m.live_brokers(1, 2, 3)
    m.partition([2, 3])
    [result] = m.topics.create_partitions(CreatePartitionsRequest([CreatePartitionsTopic("t", 3)]), []).results
    assert result.error_code == ErrorCode.NONE
    assert [len(p.replicas) for p in m.log.image.partitions_of("t")] == [2, 2, 2]
    [shrink] = m.topics.create_partitions(CreatePartitionsRequest([CreatePartitionsTopic("t", 2)]), []).results
    assert shrink.error_code == ErrorCode.INVALID_PARTITIONS
