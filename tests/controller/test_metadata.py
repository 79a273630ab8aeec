"""Metadata records and the image they build on replay."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from metadata.image import replay_all
from metadata.records import (
    NO_LEADER,
    BrokerShutdownRecord,
    ConfigRecord,
    FenceBrokerRecord,
    MetadataRecord,
    MetadataReplayError,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    record_from_dict,
    record_to_dict,
)


def cluster_records() -> list[MetadataRecord]:
    """Three brokers and topic t with one partition on all of them, led by broker 1."""
    return [
        RegisterBrokerRecord(broker_id=1, broker_epoch=0, incarnation_id="a", host="127.0.0.1", port=9001),
        RegisterBrokerRecord(broker_id=2, broker_epoch=1, incarnation_id="b", host="127.0.0.1", port=9002),
        RegisterBrokerRecord(broker_id=3, broker_epoch=2, incarnation_id="c", host="127.0.0.1", port=9003),
        UnfenceBrokerRecord(broker_id=1, broker_epoch=0),
        UnfenceBrokerRecord(broker_id=2, broker_epoch=1),
        UnfenceBrokerRecord(broker_id=3, broker_epoch=2),
        TopicRecord(name="t", configs={"min.insync.replicas": "2"}),
        PartitionRecord(topic="t", partition=0, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1),
    ]


ALL_RECORD_KINDS: list[MetadataRecord] = [
    *cluster_records(),
    BrokerShutdownRecord(broker_id=3, broker_epoch=2),
    FenceBrokerRecord(broker_id=3, broker_epoch=2),
    PartitionChangeRecord(topic="t", partition=0, isr=(1, 2)),
    PartitionChangeRecord(topic="t", partition=0, leader=2, isr=(2,)),
    PartitionChangeRecord(topic="t", partition=0, leader=NO_LEADER),
    ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="1000"),
    ConfigRecord(resource_type=2, resource_name="t", name="min.insync.replicas", value=None),
]


# -- epochs on replay -----------------------------------------------------------------------------


def test_a_leader_change_bumps_both_the_leader_epoch_and_the_partition_epoch() -> None:
    image = replay_all(cluster_records())

    image.replay(PartitionChangeRecord(topic="t", partition=0, leader=2, isr=(2, 3)))

    p = image.partition("t", 0)
    assert p is not None
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2, 3), 1, 1)


def test_an_isr_only_change_bumps_the_partition_epoch_but_not_the_leader_epoch() -> None:
    image = replay_all(cluster_records())

    image.replay(PartitionChangeRecord(topic="t", partition=0, isr=(1, 3)))

    p = image.partition("t", 0)
    assert p is not None
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1, 3), 0, 1)


def test_going_offline_is_a_leader_change_to_minus_one() -> None:
    image = replay_all(cluster_records())
    image.replay(PartitionChangeRecord(topic="t", partition=0, leader=2, isr=(2,)))

    image.replay(PartitionChangeRecord(topic="t", partition=0, leader=NO_LEADER))

    p = image.partition("t", 0)
    assert p is not None
    assert p.is_offline and p.isr == (2,) and p.leader_epoch == 2 and p.partition_epoch == 2


# -- brokers on replay ----------------------------------------------------------------------------


def test_a_registered_broker_starts_fenced_and_unfences_by_record() -> None:
    image = replay_all(cluster_records()[:1])
    assert image.brokers[1].fenced and not image.brokers[1].is_active

    image.replay(UnfenceBrokerRecord(broker_id=1, broker_epoch=0))

    assert image.brokers[1].is_active
    assert image.active_broker_ids() == {1}


def test_a_broker_in_controlled_shutdown_is_not_active_though_unfenced() -> None:
    image = replay_all(cluster_records())

    image.replay(BrokerShutdownRecord(broker_id=2, broker_epoch=1))

    assert not image.brokers[2].fenced
    assert image.brokers[2].in_controlled_shutdown
    assert image.active_broker_ids() == {1, 3}


def test_a_re_registration_replaces_the_broker_with_its_new_epoch_fenced() -> None:
    image = replay_all(cluster_records())

    image.replay(RegisterBrokerRecord(broker_id=2, broker_epoch=8, incarnation_id="b2", host="h", port=1))

    broker = image.brokers[2]
    assert (broker.broker_epoch, broker.incarnation_id, broker.fenced) == (8, "b2", True)


# -- replay refuses what would break an invariant -------------------------------------------------


@pytest.mark.parametrize(
    "bad_record",
    [
        pytest.param(FenceBrokerRecord(broker_id=2, broker_epoch=99), id="fence-at-a-stale-broker-epoch"),
        pytest.param(UnfenceBrokerRecord(broker_id=7, broker_epoch=0), id="unfence-an-unknown-broker"),
        pytest.param(
            RegisterBrokerRecord(broker_id=2, broker_epoch=1, incarnation_id="x", host="h", port=1),
            id="register-without-a-newer-epoch",
        ),
        pytest.param(TopicRecord(name="t"), id="topic-twice"),
        pytest.param(
            PartitionRecord(topic="u", partition=0, replicas=(1,), isr=(1,), leader=1),
            id="partition-of-unknown-topic",
        ),
        pytest.param(
            PartitionRecord(topic="t", partition=5, replicas=(1,), isr=(1,), leader=1),
            id="partition-out-of-order",
        ),
        pytest.param(PartitionChangeRecord(topic="t", partition=0, isr=()), id="empty-isr"),
        pytest.param(PartitionChangeRecord(topic="t", partition=0, isr=(1, 4)), id="isr-outside-replicas"),
        pytest.param(PartitionChangeRecord(topic="t", partition=0, isr=(2, 1)), id="isr-out-of-replica-order"),
        pytest.param(PartitionChangeRecord(topic="t", partition=0, leader=3, isr=(1, 2)), id="leader-outside-isr"),
        pytest.param(PartitionChangeRecord(topic="t", partition=1, isr=(1,)), id="unknown-partition"),
        pytest.param(ConfigRecord(2, "u", "retention.ms", "1"), id="config-of-unknown-topic"),
        pytest.param(ConfigRecord(8, "1", "kafka.log", "DEBUG"), id="config-of-a-broker-logger"),
    ],
)
def test_replay_refuses_a_record_that_breaks_an_image_invariant(bad_record: MetadataRecord) -> None:
    image = replay_all(cluster_records())
    before = replay_all(cluster_records())

    with pytest.raises(MetadataReplayError):
        image.replay(bad_record)

    assert image == before


# -- serialization --------------------------------------------------------------------------------


@pytest.mark.parametrize("record", ALL_RECORD_KINDS, ids=lambda r: type(r).__name__)
def test_every_record_survives_a_trip_through_a_msgpack_dict(record: MetadataRecord) -> None:
    wire = msgpack.packb(record_to_dict(record), use_bin_type=True)

    assert record_from_dict(msgpack.unpackb(wire, raw=False)) == record


def test_an_unknown_record_type_is_a_replay_error() -> None:
    with pytest.raises(MetadataReplayError):
        record_from_dict({"type": "DeleteEverythingRecord"})


def test_an_image_rebuilt_from_its_own_records_is_equal() -> None:
    image = replay_all(ALL_RECORD_KINDS)

    assert image.topics["t"].configs == {"retention.ms": "1000"}  # set after creation, min ISR deleted
    assert replay_all(list(image.to_records())) == image


@given(st.lists(st.sampled_from([(1,), (1, 2), (1, 3), (1, 2, 3)]), max_size=20))
def test_epochs_only_grow_and_the_partition_epoch_counts_every_change(isrs: list[tuple[int, ...]]) -> None:
    image = replay_all(cluster_records())
    for isr in isrs:
        image.replay(PartitionChangeRecord(topic="t", partition=0, isr=isr))
    p = image.partition("t", 0)
    assert p is not None
    assert p.partition_epoch == len(isrs)
    assert p.leader_epoch == 0
