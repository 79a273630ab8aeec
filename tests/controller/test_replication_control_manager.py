"""ReplicationControlManager on its own: a broker leaving, ISR changes from the leader, offline replicas
and the automatic rebalance."""

from __future__ import annotations

from metadata.records import MetadataRecord, PartitionChangeRecord
from protocol.errors import ErrorCode
from protocol.messages import AlterPartitionItem, AlterPartitionRequest, TopicPartition
from tests.controller.managers import Managers

TP = TopicPartition("t", 0)


def three_replicas(**config: bool | int) -> Managers:
    m = Managers(**config)
    m.live_brokers(1, 2, 3)
    m.partition([1, 2, 3])
    return m


def test_a_leaving_leader_hands_leadership_to_the_next_isr_member_in_replica_order() -> None:
    m = three_replicas()
    assert m.replication.removal_changes(1) == [PartitionChangeRecord("t", 0, leader=2, isr=(2, 3))]


def alter(m: Managers, broker_id: int, new_isr: list[int]) -> AlterPartitionRequest:
    p = m.log.image.partitions[TP]
    item = AlterPartitionItem("t", 0, p.leader_epoch, new_isr, p.partition_epoch)
    return AlterPartitionRequest(broker_id=broker_id, broker_epoch=m.epoch(broker_id), partitions=[item])


def test_the_leader_shrinks_its_isr_with_a_partition_epoch_bump_only() -> None:
    m = three_replicas()
    committed: list[MetadataRecord] = []
    [answer] = m.replication.alter_partition(alter(m, 1, [1, 3]), committed).partitions
    assert answer.error_code == ErrorCode.NONE and answer.isr == [1, 3]
    assert (answer.leader_epoch, answer.partition_epoch) == (0, 1)
    assert committed == [PartitionChangeRecord("t", 0, isr=(1, 3))]


def test_a_follower_may_not_change_the_isr() -> None:
    m = three_replicas()
    [answer] = m.replication.alter_partition(alter(m, 2, [2, 3]), []).partitions
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_replica_reported_offline_leaves_the_isr_and_may_not_rejoin_while_reported() -> None:
    m = three_replicas()
    m.replication.take_offline_replicas(3, frozenset({TP}), [])
    assert m.log.image.partitions[TP].isr == (1, 2)
    [answer] = m.replication.alter_partition(alter(m, 1, [1, 2, 3]), []).partitions
    assert answer.error_code == ErrorCode.INELIGIBLE_REPLICA
    m.replication.take_offline_replicas(3, frozenset(), [])
    [answer] = m.replication.alter_partition(alter(m, 1, [1, 2, 3]), []).partitions
    assert answer.error_code == ErrorCode.NONE and answer.isr == [1, 2, 3]


def test_the_rebalance_waits_one_interval_then_gives_leadership_back_to_the_preferred_replica() -> None:
    m = Managers(leader_imbalance_check_interval_seconds=10)
    m.live_brokers(1, 2, 3)
    m.partition([1, 2, 3], leader=2)
    m.replication.maybe_rebalance(0, [])  # schedules the first check
    m.replication.maybe_rebalance(9999, [])
    assert m.log.image.partitions[TP].leader == 2
    m.replication.maybe_rebalance(10000, [])
    assert m.log.image.partitions[TP].leader == 1
