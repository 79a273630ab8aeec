"""Kafka's ReplicationControlManager: who leads each partition and who is in its ISR.

How this works
--------------
Leadership and ISR change only through PartitionChangeRecords built here (partition_change.py decides
each one):

* a broker about to be inactive (fenced, in controlled shutdown, a new incarnation) leaves every ISR,
  never emptying one, and its leaderships move to the first live ISR member in replica order
  (`removal_changes`); with none, the partition goes offline (leader -1), unless unclean election is
  enabled for its topic and a live replica takes it with an ISR of itself;
* a broker that comes back leads the offline partitions whose ISR holds it
  (`offline_partition_elections`);
* a broker reports replicas it cannot serve (disk failure, corruption) in its heartbeats: it leaves
  their ISRs and leaderships, and may not rejoin those ISRs while it reports them
  (`take_offline_replicas`);
* a leader asks to shrink or expand its ISR (ALTER_PARTITION), checked as KRaft's
  validateAlterPartitionData does (`_alter_partition_error`); after each change a reassignment in
  progress may complete (reassignment_control_manager.py);
* an operator asks for preferred or unclean elections (ELECT_LEADERS, KIP-460), and with
  auto.leader.rebalance.enable the controller runs the preferred one itself every
  leader.imbalance.check.interval.seconds (`maybe_rebalance`).

A leader change bumps `leader_epoch` and `partition_epoch`, an ISR-only change only `partition_epoch`.
"""

from __future__ import annotations

from controller.configuration_control_manager import ConfigurationControlManager
from controller.controller_config import ControllerConfig
from controller.metadata_log import MetadataLog
from controller.partition_change import partition_change
from controller.reassignment_control_manager import ReassignmentControlManager
from metadata.image import PartitionRegistration, in_replica_order
from metadata.records import NO_LEADER, MetadataRecord, PartitionChangeRecord
from protocol.errors import ErrorCode
from protocol.messages import (
    ELECTION_PREFERRED,
    ELECTION_UNCLEAN,
    AlterPartitionItem,
    AlterPartitionItemResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionElectionResult,
    TopicPartition,
)


class ReplicationControlManager:
    def __init__(
        self,
        config: ControllerConfig,
        log: MetadataLog,
        configuration: ConfigurationControlManager,
        reassignment: ReassignmentControlManager,
    ) -> None:
        self.config = config
        self._log = log
        self._configuration = configuration
        self._reassignment = reassignment
        # Replicas each broker reported it cannot serve (its latest heartbeat): they leave the ISR, lose
        # leadership and may not rejoin the ISR until the broker stops reporting them.
        self._offline_replicas: dict[int, frozenset[TopicPartition]] = {}
        # When the next automatic preferred leader election runs (auto.leader.rebalance.enable): set by the
        # first tick, then every leader.imbalance.check.interval.seconds.
        self._next_rebalance_ms: int | None = None

    def _unclean(self, topic: str) -> bool:
        return self._configuration.unclean_leader_election_enabled(topic)

    # -- brokers leaving and coming back ------------------------------------------------------------

    def removal_changes(self, broker_id: int) -> list[MetadataRecord]:
        """Changes that take `broker_id` out of every ISR and leadership (it is about to be inactive)."""
        active = self._log.image.active_broker_ids() - {broker_id}
        touched = {p.topic_partition: p for p in self._log.image.partitions_with_isr_member(broker_id)}
        touched.update((p.topic_partition, p) for p in self._log.image.partitions_led_by(broker_id))
        return [
            change
            for p in touched.values()
            if (change := partition_change(p, broker_id, active, self._unclean(p.topic))) is not None
        ]

    def offline_partition_elections(self, returning_broker_id: int) -> list[MetadataRecord]:
        """Leaders for offline partitions, now that `returning_broker_id` is active again (it is unfenced)."""
        active = self._log.image.active_broker_ids() | {returning_broker_id}
        return [
            change
            for p in self._log.image.offline_partitions()
            if (change := partition_change(p, None, active, self._unclean(p.topic))) is not None
        ]

    def maybe_rebalance(self, now_ms: int, committed: list[MetadataRecord]) -> None:
        """With auto.leader.rebalance.enable, every leader.imbalance.check.interval.seconds give each partition
        back to its preferred replica where that one can lead (as a PREFERRED ELECT_LEADERS does)."""
        if not self.config.auto_leader_rebalance_enable:
            return
        interval_ms = self.config.leader_imbalance_check_interval_seconds * 1000
        if self._next_rebalance_ms is None:
            self._next_rebalance_ms = now_ms + interval_ms
        elif now_ms >= self._next_rebalance_ms:
            self._next_rebalance_ms = now_ms + interval_ms
            active = self._log.image.active_broker_ids()
            ordered = sorted(self._log.image.partitions.values(), key=lambda p: p.topic_partition)
            moves = [move for p in ordered if (move := self._election(p, False, active)[2]) is not None]
            self._log.commit(moves, committed)  # one metadata write for the whole rebalance

    def take_offline_replicas(
        self, broker_id: int, offline: frozenset[TopicPartition], committed: list[MetadataRecord]
    ) -> None:
        """A broker whose disk failed or that found corruption reports those replicas: take it out of
        their ISRs and move their leaderships to a healthy ISR member, with an epoch bump."""
        self._offline_replicas[broker_id] = offline
        if not offline:
            return
        active = self._log.image.active_broker_ids() - {broker_id}
        changes: list[MetadataRecord] = []
        for tp in sorted(offline):
            p = self._log.image.partitions.get(tp)
            if p is None or (broker_id not in p.isr and p.leader != broker_id):
                continue
            if (change := partition_change(p, broker_id, active, self._unclean(tp.topic))) is not None:
                changes.append(change)
        if changes:
            self._log.commit(changes, committed)

    # -- leader elections (ELECT_LEADERS, KIP-460) --------------------------------------------------

    def elect_leaders(self, request: ElectLeadersRequest, committed: list[MetadataRecord]) -> ElectLeadersResponse:
        """Kafka's ElectLeaders (KIP-460). PREFERRED: each partition whose first replica is active and in the
        ISR, and does not lead, gets it as leader, with a leader epoch bump; it is clean (the new leader
        holds every acknowledged record) and moves leadership back where the assignment spread it, after
        kills and restarts left it skewed. UNCLEAN: each partition with no leader gets one, from the ISR if
        a member is live, else the first live replica, whose ISR becomes itself: records only the old ISR
        held are lost, which is what the operator accepts by asking (unclean.leader.election.enable for
        one request). `topic_partitions` None means every partition; then the answer lists only the
        partitions that changed or could not, not those that needed nothing."""
        unclean = request.election_type == ELECTION_UNCLEAN
        if request.election_type not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
            return ElectLeadersResponse(
                error_code=int(ErrorCode.INVALID_REQUEST),
                error_message=f"election_type {request.election_type}: PREFERRED (0) or UNCLEAN (1)",
            )
        every = request.topic_partitions is None
        if request.topic_partitions is None:
            wanted = sorted(self._log.image.partitions)
        else:
            wanted = [TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        active = self._log.image.active_broker_ids()
        changes: dict[TopicPartition, PartitionChangeRecord] = {}  # one per partition, however often named
        results: list[PartitionElectionResult] = []
        for tp in wanted:
            result = PartitionElectionResult(tp.topic, tp.partition)
            partition = self._log.image.partitions.get(tp)
            if partition is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"unknown partition {tp}"
            else:
                code, message, change = self._election(partition, unclean, active)
                if change is not None:
                    changes.setdefault(tp, change)
                if code == ErrorCode.ELECTION_NOT_NEEDED and every:
                    continue
                result.error_code, result.error_message = code, message
            results.append(result)
        self._log.commit(list(changes.values()), committed)  # one metadata write for the whole request
        return ElectLeadersResponse(results=results)

    def _election(
        self, partition: PartitionRegistration, unclean: bool, active: frozenset[int]
    ) -> tuple[ErrorCode, str | None, PartitionChangeRecord | None]:
        """What an ELECT_LEADERS of this type answers for `partition`, and the change to commit if any."""
        tp = partition.topic_partition
        if unclean:
            if partition.leader != NO_LEADER:
                return ErrorCode.ELECTION_NOT_NEEDED, f"broker {partition.leader} leads {tp}", None
            change = partition_change(partition, None, active, unclean=True)
            if change is None:
                return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"no replica of {tp} is live", None
            return ErrorCode.NONE, None, change
        if partition.leader == partition.replicas[0]:
            return ErrorCode.ELECTION_NOT_NEEDED, f"broker {partition.leader} already leads {tp}", None
        if (problem := self._preferred_problem(partition, active)) is not None:
            return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, problem, None
        return (
            ErrorCode.NONE,
            None,
            PartitionChangeRecord(partition.topic, partition.partition, leader=partition.replicas[0]),
        )

    @staticmethod
    def _preferred_problem(partition: PartitionRegistration, active: frozenset[int]) -> str | None:
        """Why the partition's preferred (first) replica cannot lead it now; None when it can."""
        preferred = partition.replicas[0]
        if preferred not in active:
            return f"preferred replica {preferred} of {partition.topic_partition} is fenced or shutting down"
        if preferred not in partition.isr:
            return f"preferred replica {preferred} of {partition.topic_partition} is not in the ISR"
        return None

    def alter_partition(
        self, request: AlterPartitionRequest, committed: list[MetadataRecord]
    ) -> AlterPartitionResponse:
        """Apply ISR changes a leader asks for, after KRaft's checks (see `_alter_partition_error`)."""
        broker = self._log.image.brokers.get(request.broker_id)
        if broker is None:
            return AlterPartitionResponse(
                error_code=ErrorCode.BROKER_ID_NOT_REGISTERED,
                error_message=f"broker {request.broker_id} is not registered",
            )
        if request.broker_epoch != broker.broker_epoch:
            return AlterPartitionResponse(
                error_code=ErrorCode.STALE_BROKER_EPOCH,
                error_message=f"broker {request.broker_id} has epoch {broker.broker_epoch}, not {request.broker_epoch}",
            )
        items = [self._alter_one(request.broker_id, item, committed) for item in request.partitions]
        return AlterPartitionResponse(partitions=items)

    def _alter_one(
        self, broker_id: int, item: AlterPartitionItem, committed: list[MetadataRecord]
    ) -> AlterPartitionItemResponse:
        partition = self._log.image.partition(item.topic, item.partition)
        failure = self._alter_partition_error(broker_id, item, partition)
        if failure is not None:
            code, message = failure
            return AlterPartitionItemResponse(
                topic=item.topic, partition=item.partition, error_code=code, error_message=message
            )
        assert partition is not None  # checked by _alter_partition_error
        new_isr = in_replica_order(partition.replicas, item.new_isr)
        if new_isr != partition.isr:
            change = PartitionChangeRecord(topic=item.topic, partition=item.partition, isr=new_isr)
            self._log.commit([change], committed)
            self._reassignment.maybe_complete_reassignment(partition.topic_partition, committed)
        current = self._log.image.partitions[partition.topic_partition]
        return AlterPartitionItemResponse(
            topic=item.topic,
            partition=item.partition,
            leader_id=current.leader,
            leader_epoch=current.leader_epoch,
            isr=list(current.isr),
            partition_epoch=current.partition_epoch,
        )

    def _alter_partition_error(
        self, broker_id: int, item: AlterPartitionItem, partition: PartitionRegistration | None
    ) -> tuple[ErrorCode, str] | None:
        """Why an ISR change is refused, or None. Order follows KRaft's validateAlterPartitionData."""
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown partition {item.topic}-{item.partition}"
        if item.leader_epoch != partition.leader_epoch:
            return (
                ErrorCode.FENCED_LEADER_EPOCH,
                f"leader epoch is {partition.leader_epoch}, request has {item.leader_epoch}",
            )
        if broker_id != partition.leader:
            return (
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {broker_id} is not the leader ({partition.leader})",
            )
        if item.partition_epoch != partition.partition_epoch:
            return (
                ErrorCode.INVALID_UPDATE_VERSION,
                f"partition epoch is {partition.partition_epoch}, request has {item.partition_epoch}",
            )
        if len(set(item.new_isr)) != len(item.new_isr) or partition.leader not in item.new_isr:
            return ErrorCode.INVALID_REQUEST, f"ISR {item.new_isr} must hold the leader and no duplicates"
        outsiders = [r for r in item.new_isr if r not in partition.replicas]
        if outsiders:
            return ErrorCode.INELIGIBLE_REPLICA, f"brokers {outsiders} are not replicas of this partition"
        # Only members being added must be active: one already in the ISR stays until the controller
        # itself removes it (fencing does that and bumps the partition epoch).
        active = self._log.image.active_broker_ids()
        ineligible = [r for r in item.new_isr if r not in partition.isr and r not in active]
        if ineligible:
            return ErrorCode.INELIGIBLE_REPLICA, f"brokers {ineligible} are fenced or shutting down"
        # KIP-903: the leader names the broker epoch each new member last fetched with. Another epoch than the
        # registered one means the fetch that made it look caught up came from an earlier incarnation (it
        # reached the leader late), whose log the broker may not have kept.
        brokers = self._log.image.brokers
        stale = [
            f"{m.broker_id} (epoch {m.broker_epoch}, registered {brokers[m.broker_id].broker_epoch})"
            for m in item.new_isr_with_epochs
            if m.broker_id not in partition.isr
            and m.broker_epoch != -1
            and m.broker_id in brokers
            and brokers[m.broker_id].broker_epoch != m.broker_epoch
        ]
        if stale:
            return ErrorCode.INELIGIBLE_REPLICA, f"brokers {', '.join(stale)} fetched from an earlier incarnation"
        tp = TopicPartition(partition.topic, partition.partition)
        offline = [r for r in item.new_isr if r not in partition.isr and tp in self._offline_replicas.get(r, ())]
        if offline:
            return ErrorCode.INELIGIBLE_REPLICA, f"brokers {offline} reported this replica offline"
        return None
