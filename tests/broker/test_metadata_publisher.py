"""A broker applies the committed metadata log: partitions it holds change role, deleted topics and replicas
moved away leave its disk and its metadata, configs apply, and nothing reaches the replicas before the broker
has caught up with the log. Real logs in a temp dir; the batches are what the quorum would deliver."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.metadata_publisher import BrokerMetadataPublisher
from metadata.image import MetadataImage
from metadata.records import (
    TOPIC_RESOURCE,
    ConfigRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    encode_record,
)
from protocol.messages import TopicPartition
from raft.replicated_log import LogBatch, Snapshot
from tests.broker.leader_fixtures import FOLLOWER_ID, LOCAL_ID, LeaderBroker
from tests.broker.test_topic_configs import broker_apis

pytestmark = pytest.mark.timeout(30)

OTHER = 9


class Feed:
    """The quorum's side: committed batches handed to the publisher, one per call, with offsets."""

    def __init__(self, publisher: BrokerMetadataPublisher) -> None:
        self.publisher = publisher
        self.offset = 0
        self.published = asyncio.Event()
        publisher.on_published = lambda offset: self.published.set()

    def commit(self, *records: MetadataRecord) -> None:
        batch = LogBatch(self.offset, self.offset + len(records) - 1, 1, 0, False, [encode_record(r) for r in records])
        self.offset += len(records)
        self.publisher.handle_commit([batch])

    async def applied(self) -> None:
        """Until the publisher has applied everything committed so far."""
        while self.publisher.published_offset < self.offset - 1:
            self.published.clear()
            await self.published.wait()


def brokers(*ids: int) -> list[MetadataRecord]:
    records: list[MetadataRecord] = []
    for i, broker_id in enumerate(ids):
        records += [RegisterBrokerRecord(broker_id, i, f"inc-{broker_id}", "127.0.0.1", 9000 + broker_id)]
        records += [UnfenceBrokerRecord(broker_id, i)]
    return records


def topic(name: str, *replica_lists: tuple[int, ...]) -> list[MetadataRecord]:
    records: list[MetadataRecord] = [TopicRecord(name, topic_id=f"id-{name}")]
    for p, replicas in enumerate(replica_lists):
        records.append(PartitionRecord(name, p, replicas, replicas, replicas[0]))
    return records


@pytest.fixture
async def setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    broker = LeaderBroker(tmp_path)
    apis = broker_apis(broker)
    publisher = BrokerMetadataPublisher(LOCAL_ID, apis, broker.log_manager, broker.time, {"min.insync.replicas": "1"})
    task = asyncio.create_task(publisher.run())
    try:
        yield broker, apis, publisher, Feed(publisher)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        broker.close()


async def test_a_new_topic_makes_this_broker_lead_and_follow_what_it_holds(setup) -> None:  # type: ignore[no-untyped-def]
    broker, apis, publisher, feed = setup
    feed.commit(*brokers(LOCAL_ID, FOLLOWER_ID, OTHER))
    feed.commit(*topic("t", (LOCAL_ID, FOLLOWER_ID), (FOLLOWER_ID, LOCAL_ID), (OTHER, FOLLOWER_ID)))
    await feed.applied()
    partitions = broker.replica_manager.partitions
    assert sorted(tp.partition for tp in partitions) == [0, 1]  # not partition 2: no replica here
    assert partitions[TopicPartition("t", 0)].is_leader and not partitions[TopicPartition("t", 1)].is_leader
    assert apis.metadata_cache.topics() == ["t"] and sorted(apis.metadata_cache.brokers) == [
        LOCAL_ID,
        FOLLOWER_ID,
        OTHER,
    ]


async def test_a_leadership_moved_away_makes_this_broker_follow(setup) -> None:  # type: ignore[no-untyped-def]
    broker, apis, publisher, feed = setup
    feed.commit(*brokers(LOCAL_ID, FOLLOWER_ID))
    feed.commit(*topic("t", (LOCAL_ID, FOLLOWER_ID)))
    await feed.applied()
    feed.commit(PartitionChangeRecord("t", 0, leader=FOLLOWER_ID, isr=(FOLLOWER_ID,)))
    await feed.applied()
    p = broker.replica_manager.partitions[TopicPartition("t", 0)]
    assert not p.is_leader and p.leader_epoch == 1
    assert apis.metadata_cache.partitions[TopicPartition("t", 0)].leader == FOLLOWER_ID


async def test_a_deleted_topic_leaves_the_disk_and_the_metadata(setup) -> None:  # type: ignore[no-untyped-def]
    broker, apis, publisher, feed = setup
    feed.commit(*brokers(LOCAL_ID, FOLLOWER_ID))
    feed.commit(*topic("gone", (LOCAL_ID, FOLLOWER_ID), (FOLLOWER_ID, LOCAL_ID)), *topic("kept", (LOCAL_ID,)))
    await feed.applied()
    assert sorted(tp.topic for tp in broker.log_manager.existing_partitions()) == ["gone", "gone", "kept"]
    feed.commit(RemoveTopicRecord("gone"))
    await feed.applied()
    assert [tp.topic for tp in broker.log_manager.existing_partitions()] == ["kept"]
    assert apis.metadata_cache.topics() == ["kept"]
    assert all(tp.topic == "kept" for tp in broker.replica_manager.partitions)


async def test_a_replica_moved_to_another_broker_is_deleted_here(setup) -> None:  # type: ignore[no-untyped-def]
    broker, apis, publisher, feed = setup
    feed.commit(*brokers(LOCAL_ID, FOLLOWER_ID, OTHER))
    feed.commit(*topic("t", (FOLLOWER_ID, LOCAL_ID)))
    await feed.applied()
    feed.commit(PartitionChangeRecord("t", 0, isr=(FOLLOWER_ID,), replicas=(FOLLOWER_ID, OTHER)))
    await feed.applied()
    assert TopicPartition("t", 0) not in broker.replica_manager.partitions
    assert broker.log_manager.existing_partitions() == []


async def test_topic_configs_apply_to_the_partitions(setup) -> None:  # type: ignore[no-untyped-def]
    broker, apis, publisher, feed = setup
    feed.commit(*brokers(LOCAL_ID))
    feed.commit(*topic("t", (LOCAL_ID,)))
    feed.commit(ConfigRecord(TOPIC_RESOURCE, "t", "min.insync.replicas", "3"))
    await feed.applied()
    assert apis.metadata_cache.topic_configs_in_effect()["t"]["min.insync.replicas"] == "3"
    assert broker.replica_manager.partitions[TopicPartition("t", 0)].min_insync_replicas == 3


async def test_nothing_changes_a_replica_before_the_broker_has_caught_up(setup) -> None:  # type: ignore[no-untyped-def]
    broker, apis, publisher, feed = setup
    caught_up = False
    publisher.caught_up = lambda: caught_up
    feed.commit(*brokers(LOCAL_ID, FOLLOWER_ID))
    feed.commit(*topic("t", (LOCAL_ID, FOLLOWER_ID)))
    await asyncio.sleep(0.2)
    assert broker.replica_manager.partitions == {} and publisher.applied_offset == feed.offset - 1
    caught_up = True
    publisher.wake()
    await feed.applied()
    assert broker.replica_manager.partitions[TopicPartition("t", 0)].is_leader


async def test_the_first_publication_deletes_local_logs_the_image_does_not_give_this_broker(setup) -> None:  # type: ignore[no-untyped-def]
    broker, apis, publisher, feed = setup
    # a topic deleted while this broker was down: its log is still on disk, the image never names it
    broker.log_manager.get_or_create_log(TopicPartition("deleted-meanwhile", 0))
    image = MetadataImage()
    for record in [*brokers(LOCAL_ID), *topic("t", (LOCAL_ID,))]:
        image.replay(record)
    publisher.handle_load_snapshot(Snapshot(10, 1, [encode_record(r) for r in image.to_records()]))
    feed.offset = 10
    await feed.applied()
    assert [tp.topic for tp in broker.log_manager.existing_partitions()] == ["t"]
