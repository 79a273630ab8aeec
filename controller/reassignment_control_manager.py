"""Partition reassignment (KIP-455): moving a partition's replicas to other brokers
(ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS). Kafka does this inside its
ReplicationControlManager; here it has its own file.

How this works
--------------
A reassignment makes the partition's replicas target + removing, with adding = target - original and
removing = original - target, at the same leader epoch: the added replicas start following from an
empty log. The leaders' ISR changes (ALTER_PARTITION, replication_control_manager.py) bring the added
replicas in; after each one `maybe_complete_reassignment` checks whether every target replica is in
the ISR. Then the replica set becomes the target, the leader moves if it was removed (to the first live
in-sync target replica, or none until one returns), the leader epoch goes up when replicas leave (so a
removed replica's late fetches are refused), and the removed replicas are stopped and deleted. A new
reassignment of a partition replaces the one in progress; one without replicas cancels it, back to the
original replicas. A change that would leave no in-sync replica is refused, as it would need an
unclean election.
"""

from __future__ import annotations

from controller.metadata_log import MetadataLog
from controller.partition_change import elect_leader
from metadata.image import PartitionRegistration, in_replica_order
from metadata.records import NO_LEADER, MetadataRecord, PartitionChangeRecord
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    ReassignablePartition,
    ReassignablePartitionResponse,
    TopicPartition,
)


class ReassignmentControlManager:
    def __init__(self, log: MetadataLog) -> None:
        self._log = log

    def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest, committed: list[MetadataRecord]
    ) -> AlterPartitionReassignmentsResponse:
        """Start (or replace, or with `replicas` None cancel) a reassignment per partition. The partition's
        replicas become target + removing, with adding = target - original and removing = original - target,
        at the same leader epoch: the added replicas start following from an empty log. Once every target
        replica is in the ISR (`maybe_complete_reassignment`, also run after each ISR change) the replica
        set becomes the target, the leader moves if it was removed, and the removed replicas are stopped
        and deleted."""
        answers: list[ReassignablePartitionResponse] = []
        registered = frozenset(self._log.image.brokers)
        for item in request.partitions:
            answer = ReassignablePartitionResponse(item.topic, item.partition)
            answers.append(answer)
            try:
                self._reassign(item, registered, committed)
            except KafkaError as exc:
                answer.error_code, answer.error_message = exc.code, exc.message
        return AlterPartitionReassignmentsResponse(responses=answers)

    def _reassign(
        self, item: ReassignablePartition, registered: frozenset[int], committed: list[MetadataRecord]
    ) -> None:
        """Start, replace or cancel the reassignment `item` asks for; KafkaError when it is refused."""
        partition = self._log.image.partition(item.topic, item.partition)
        if partition is None:
            raise KafkaError(f"unknown partition {item.topic}-{item.partition}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        original = partition.original_replicas
        target = self._target_replicas(item, partition, registered)
        adding = tuple(r for r in target if r not in original)
        removing = tuple(r for r in original if r not in target)
        full = target + removing
        if (full, adding, removing) != (partition.replicas, partition.adding_replicas, partition.removing_replicas):
            self._change_replicas(partition, full, adding, removing, committed)
        self.maybe_complete_reassignment(partition.topic_partition, committed)

    @staticmethod
    def _target_replicas(
        item: ReassignablePartition, partition: PartitionRegistration, registered: frozenset[int]
    ) -> tuple[int, ...]:
        """The replicas `item` moves the partition to (its original ones, to cancel); KafkaError when refused."""
        if item.replicas is None:
            if not partition.is_reassigning:
                raise KafkaError(
                    f"no reassignment of {item.topic}-{item.partition} is in progress",
                    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                )
            return partition.original_replicas  # cancel: back to where it started
        target = tuple(item.replicas)
        if not target or len(set(target)) != len(target) or any(r < 0 for r in target):
            raise KafkaError(
                f"replicas {list(target)} must be distinct broker ids, at least one",
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
        if unknown := [r for r in target if r not in registered]:
            raise KafkaError(f"brokers {unknown} are not registered", ErrorCode.INVALID_REPLICA_ASSIGNMENT)
        return target

    def _change_replicas(
        self,
        partition: PartitionRegistration,
        full: tuple[int, ...],
        adding: tuple[int, ...],
        removing: tuple[int, ...],
        committed: list[MetadataRecord],
    ) -> None:
        """Commit the replicas `full` (target + removing) with what is being added and removed."""
        isr = in_replica_order(full, [r for r in partition.isr if r in full])
        if not isr:
            # Every in-sync replica is one this change drops (replicas a replaced reassignment was
            # adding, the original ones having died): as Kafka refuses a revert that would need an
            # unclean leader election.
            raise KafkaError(
                f"replicas {list(full)} would leave {partition.topic}-{partition.partition} with no in-sync replica "
                f"(its ISR is {list(partition.isr)}): that would need an unclean leader election",
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
        dropped = not set(partition.replicas) <= set(full)
        leader: int | None = None
        if partition.leader != NO_LEADER and partition.leader not in full:
            # The leader is a replica a replaced reassignment was adding (elected after the original
            # leader died): as Kafka's PartitionChangeBuilder, another in-sync replica leads.
            leader = elect_leader(full, isr, self._log.image.active_broker_ids(), unclean=False)
        elif dropped and partition.leader != NO_LEADER:
            leader = partition.leader  # replicas leave the list: a leader epoch bump, as at the end
        change = PartitionChangeRecord(
            topic=partition.topic,
            partition=partition.partition,
            leader=leader,
            replicas=full,
            isr=isr,
            adding_replicas=adding,
            removing_replicas=removing,
        )
        self._log.commit([change], committed)
        # Replicas a replaced reassignment was adding and this one drops: stop and delete them.
        self._log.delete_replicas(partition.topic_partition, [b for b in partition.replicas if b not in full])

    def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        wanted = None if request.topics is None else set(request.topics)
        ongoing = [
            OngoingPartitionReassignment(
                p.topic, p.partition, list(p.replicas), list(p.adding_replicas), list(p.removing_replicas)
            )
            for p in self._log.image.partitions.values()
            if p.is_reassigning and (wanted is None or p.topic in wanted)
        ]
        ongoing.sort(key=lambda r: (r.topic, r.partition))
        return ListPartitionReassignmentsResponse(reassignments=ongoing)

    def maybe_complete_reassignment(self, tp: TopicPartition, committed: list[MetadataRecord]) -> None:
        """Finish the reassignment of `tp` once every target replica is in its ISR (run after each ISR change)."""
        partition = self._log.image.partitions.get(tp)
        if partition is None or not partition.is_reassigning:
            return
        target = partition.target_replicas
        if not set(target) <= set(partition.isr):
            return  # an added replica is still catching up
        isr = in_replica_order(target, [r for r in partition.isr if r in target])
        leader: int | None = None
        if partition.leader not in target:
            # The first live in-sync target replica; none (-1, offline until one returns) rather than a
            # fenced one, which would be named leader while it is down.
            leader = elect_leader(target, isr, self._log.image.active_broker_ids(), unclean=False)
        elif partition.removing_replicas:
            # As KRaft's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded: replicas leave the list, so the
            # leader epoch goes up (same leader). A removed replica's late fetches then carry an old epoch
            # and are refused, even if a later reassignment brings it back before they arrive.
            leader = partition.leader
        change = PartitionChangeRecord(
            topic=tp.topic,
            partition=tp.partition,
            leader=leader,
            isr=isr,
            replicas=target,
            adding_replicas=(),
            removing_replicas=(),
        )
        self._log.commit([change], committed)
        self._log.delete_replicas(tp, partition.removing_replicas)
