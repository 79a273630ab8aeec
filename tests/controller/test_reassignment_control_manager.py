"""ReassignmentControlManager on its own: a move adds the new replicas first and completes once they are
in sync, deleting the removed ones."""

from __future__ import annotations

from metadata.records import PartitionChangeRecord
from protocol.errors import ErrorCode
from protocol.messages import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
    ReassignablePartition,
    TopicPartition,
)
from tests.controller.managers import Managers

TP = TopicPartition("t", 0)


def test_a_move_adds_first_and_completes_once_the_new_replica_is_in_the_isr() -> None:
    m = Managers()
    m.live_brokers(1, 2, 3)
    m.partition([1, 2])
    request = AlterPartitionReassignmentsRequest([ReassignablePartition("t", 0, [1, 3])])
    [answer] = m.reassignment.alter_partition_reassignments(request, []).responses
    p = m.log.image.partitions[TP]
    assert answer.error_code == ErrorCode.NONE
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((1, 3, 2), (3,), (2,))
    [ongoing] = m.reassignment.list_partition_reassignments(ListPartitionReassignmentsRequest()).reassignments
    assert (ongoing.adding_replicas, ongoing.removing_replicas) == ([3], [2])

    m.reassignment.maybe_complete_reassignment(TP, [])  # broker 3 is not in sync yet
    assert m.log.image.partitions[TP].is_reassigning
    m.commit(PartitionChangeRecord("t", 0, isr=(1, 3, 2)))  # the leader took broker 3 in (ALTER_PARTITION)
    m.reassignment.maybe_complete_reassignment(TP, [])
    p = m.log.image.partitions[TP]
    assert (p.replicas, p.isr, p.is_reassigning) == ((1, 3), (1, 3), False)
    assert m.log.take_deleted_replicas() == {2: [TP]}


def test_cancelling_when_nothing_moves_is_refused() -> None:
    m = Managers()
    m.live_brokers(1)
    m.partition([1])
    request = AlterPartitionReassignmentsRequest([ReassignablePartition("t", 0, None)])
    [answer] = m.reassignment.alter_partition_reassignments(request, []).responses
    assert answer.error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
