"""How a run hears what its brokers' replication does: one `ReplicationObserver` per broker incarnation.

How this works
--------------
`SimCluster` builds every `BrokerNode` with a `BrokerObserver` of its own (server_common/
replication_observer.py: the node's log manager, logs and replica manager call it as things happen), all
reporting to the run's `RunObserver`, which owns the run's trace and checker. Nothing is shared between
runs, so two clusters in one process (a test, a sweep's threads) never see each other's events, and no
broker class is changed for a run.

What each event does:

- `log_truncated`: a `truncate` line in the trace (runs that cut logs differently get different hashes;
  Kafka logs the same line), `Checker.on_log_cut`, which judges follower positions afresh, and
  `Checker.check_producer_state` on the log that was cut (`producer_state_differs`);
- `follower_fetch_recorded`: `Checker.on_follower_fetch_recorded` (`stale_incarnation_recorded`) and
  `Checker.on_follower_position` (`follower_position_not_held`), on the leader's partition as the
  leader records the fetch;
- `follower_fetch_answered`: `Checker.on_fetch_answered` (`stale_epoch_served`) for each partition;
- `isr_change_proposed`: `Checker.on_isr_change_proposed` (`isr_expansion_against_rule`), with the
  brokers the leader's metadata lists as live.

Every controller incarnation has a `ControllerObserver` of its own, for the metadata quorum:
`metadata_leader_elected` goes to `Checker.on_metadata_leader_elected` (`two_metadata_leaders`),
`metadata_committed` to `Checker.on_metadata_committed` with the voter's log, and a truncation of that log
to `Checker.on_metadata_truncated` (`committed_metadata_changed`, `committed_metadata_lost`). A
controller's events write nothing to the trace (its hash is what it was before they were heard); a
broker's metadata-log truncation is a `truncate` line, as any of its logs'. A broker's quorum events are
not judged: the checks are of the voters.

A violation found in an event is reported to the run (`RunObserver.report`), never raised into the
broker's request handler; after the run's first failure, and once the run has ended, events are ignored,
as the checks are over.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.messages import FetchPartition, FetchPartitionResponse, TopicPartition
from server_common.replication_observer import ReplicationObserver
from sim.checker import Checker, Violation
from sim.trace import Trace

if TYPE_CHECKING:
    from broker.broker_node import BrokerNode
    from controller.controller_node import ControllerNode


class RunObserver:
    """The events of one run's brokers, for that run's trace and checker."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.checker: Checker | None = None  # set once the run has built it (it reads the cluster)
        self.report: Callable[[Violation], None] = lambda violation: None
        self.failed: Callable[[], bool] = lambda: False
        self.watching = True  # False once the run has ended: the brokers it closes tell nothing more

    def broker(self, broker_id: int) -> BrokerObserver:
        """The observer of one incarnation of broker `broker_id` (its `node` is set once it is built)."""
        return BrokerObserver(broker_id, self)

    def controller(self, node_id: int) -> ControllerObserver:
        """The observer of one incarnation of controller `node_id` (its `node` is set once it is built)."""
        return ControllerObserver(node_id, self)

    def _judging(self) -> Checker | None:
        """The checker, while events are still judged."""
        return self.checker if self.watching and not self.failed() else None


class BrokerObserver(ReplicationObserver):
    def __init__(self, broker_id: int, run: RunObserver) -> None:
        self.broker_id = broker_id
        self.run = run
        self.node: BrokerNode | None = None

    def log_truncated(
        self, topic_partition: TopicPartition, to_offset: int, log_end_offset: int, high_watermark: int
    ) -> None:
        run = self.run
        if not run.watching:
            return
        if run.checker is not None:
            run.checker.on_log_cut()
        run.trace.event(
            self.broker_id, "truncate", tp=str(topic_partition), to=to_offset, leo=log_end_offset, hw=high_watermark
        )
        checker = run._judging()
        # A log being opened (its recovery cut it) is not the log manager's yet: judged at the end of the run.
        log = None if self.node is None else self.node.log_manager.logs.get(topic_partition)
        if checker is None or log is None:
            return
        try:
            checker.check_producer_state(self.broker_id, topic_partition, log)
        except Violation as v:
            run.report(v)

    def follower_fetch_recorded(
        self,
        topic_partition: TopicPartition,
        follower_id: int,
        fetch_offset: int,
        broker_epoch: int,
        previous_broker_epoch: int,
        requested_leader_epoch: int,
    ) -> None:
        judged = self._judged(topic_partition)
        if judged is None:
            return
        checker, partition = judged
        try:
            position = fetch_offset
            checker.on_follower_fetch_recorded(partition, follower_id, position, broker_epoch, previous_broker_epoch)
            checker.on_follower_position(partition, follower_id, position, broker_epoch, requested_leader_epoch)
        except Violation as v:
            self.run.report(v)

    def isr_change_proposed(
        self, topic_partition: TopicPartition, leader_epoch: int, isr: frozenset[int], proposed_isr: frozenset[int]
    ) -> None:
        judged = self._judged(topic_partition)
        if judged is None or self.node is None:
            return
        checker, partition = judged
        try:
            checker.on_isr_change_proposed(partition, isr, proposed_isr, self.node.metadata_cache.brokers)
        except Violation as v:
            self.run.report(v)

    def _judged(self, topic_partition: TopicPartition) -> tuple[Checker, Any] | None:
        """The run's checker and this broker's replica of `topic_partition`, while the run judges."""
        checker = self.run._judging()
        if checker is None or self.node is None:
            return None
        partition = self.node.replica_manager.partitions.get(topic_partition)
        return None if partition is None else (checker, partition)

    def follower_fetch_answered(
        self, follower_id: int, requests: list[FetchPartition], answers: list[FetchPartitionResponse]
    ) -> None:
        if self.node is None:
            return
        partitions = self.node.replica_manager.partitions
        for request, answer in zip(requests, answers, strict=True):
            checker = self.run._judging()
            partition = partitions.get(TopicPartition(request.topic, request.partition))
            if checker is None or partition is None:
                continue
            try:
                checker.on_fetch_answered(partition, follower_id, request.current_leader_epoch, answer)
            except Violation as v:
                self.run.report(v)


class ControllerObserver(ReplicationObserver):
    """One controller incarnation's part in the metadata quorum, for the run's checker (never its trace)."""

    def __init__(self, node_id: int, run: RunObserver) -> None:
        self.node_id = node_id
        self.run = run
        self.node: ControllerNode | None = None

    def metadata_leader_elected(self, epoch: int, leader_id: int, epoch_start_offset: int) -> None:
        checker = self.run._judging()
        if checker is None:
            return
        try:
            checker.on_metadata_leader_elected(leader_id, epoch)
        except Violation as v:
            self.run.report(v)

    def metadata_committed(self, high_watermark: int) -> None:
        checker = self.run._judging()
        if checker is None or self.node is None:
            return
        try:
            checker.on_metadata_committed(self.node_id, self.node.raft_log, high_watermark)
        except Violation as v:
            self.run.report(v)

    def log_truncated(
        self, topic_partition: TopicPartition, to_offset: int, log_end_offset: int, high_watermark: int
    ) -> None:
        checker = self.run._judging()
        # A log being opened (its recovery cut it) is not the node's yet: nothing of it has been judged.
        if checker is None or self.node is None:
            return
        try:
            checker.on_metadata_truncated(self.node_id, self.node.raft_log, to_offset)
        except Violation as v:
            self.run.report(v)
