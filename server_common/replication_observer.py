"""What replication did, told as it happens to whoever watches one node: the simulator's checker, a test.

How this works
--------------
A node's parts take one `ReplicationObserver` when they are built (`BrokerNode(observer=...)` hands it to
its `LogManager`, which gives it to every `Log` it opens, to its `ReplicaManager`, which gives it to
every `Partition`, and to its member of the metadata quorum, raft/, and that member's log;
`ControllerNode(observer=...)` to its quorum member and log) and call one method per event, at the moment
it happens, with what happened as plain values. The default, `NO_OBSERVER`, does nothing: a broker or
controller process never passes another, and an event costs it one call of an empty method (about
0.05 µs: one per partition position a leader records, one per FETCH it answers a follower, one per
move of the metadata high watermark).
Nothing is global: each node (each incarnation of a node) has its own observer, so two clusters in one
process never see each other's events.

An observer reads, never acts: it must not change the node's state or raise into the code that told it
(the simulator reports a broken invariant to its run, not to the broker's request handler). It lives in
server_common, below storage/, broker/ and controller/, so that every layer can tell it what it did;
an event therefore carries values and wire types only, and an observer that needs a node's objects
(the simulator reads the partitions of the node it watches) finds them itself.

Events are named for what happened. To add one: a method here with a docstring saying when it is called
and what its arguments are, an empty body, and the call at the place it happens.
"""

from __future__ import annotations

from protocol.messages import FetchPartition, FetchPartitionResponse, TopicPartition


class ReplicationObserver:
    """Every event a node's replication tells; each method is a no-op here. Subclass and override."""

    # -- the log (storage.log.Log) -------------------------------------------------------------------

    def log_truncated(
        self, topic_partition: TopicPartition, to_offset: int, log_end_offset: int, high_watermark: int
    ) -> None:
        """A replica's log was cut back: asked to end at `to_offset` (`truncate_to`, or emptied to start
        there: `truncate_fully_and_start_at`, also when opening finds everything deleted), and now ends at
        `log_end_offset` with `high_watermark`. Told after the cut (and the producer-state rebuild) is done;
        a call that cut nothing tells nothing."""

    # -- the leader side of FETCH (broker.replica_manager.ReplicaManager) ---------------------------

    def follower_fetch_recorded(
        self,
        topic_partition: TopicPartition,
        follower_id: int,
        fetch_offset: int,
        broker_epoch: int,
        previous_broker_epoch: int,
        requested_leader_epoch: int,
    ) -> None:
        """The leader of `topic_partition` recorded `follower_id`'s fetch: `fetch_offset` is now the follower's
        log end as the leader counts it (for the HW and the ISR). `broker_epoch` is the one the fetch was sent
        at, `previous_broker_epoch` the one the leader had last heard that follower fetch with (-1 when it
        had not, in this leadership; KIP-903), `requested_leader_epoch` the leader epoch the fetch named (-1:
        none). Told after the HW and the ISR have been updated for it."""

    def follower_fetch_answered(
        self, follower_id: int, requests: list[FetchPartition], answers: list[FetchPartitionResponse]
    ) -> None:
        """The leader answered a FETCH from follower `follower_id`: `answers[i]` (an error, a diverging epoch,
        records, or nothing) is the answer to `requests[i]`. Told once per answer, after every position it
        records was recorded, also when a parked fetch completes."""

    # -- the ISR (broker.partition.Partition, as leader) --------------------------------------------

    def isr_change_proposed(
        self, topic_partition: TopicPartition, leader_epoch: int, isr: frozenset[int], proposed_isr: frozenset[int]
    ) -> None:
        """The leader of `topic_partition` at `leader_epoch` proposes `proposed_isr` in place of the committed
        `isr` (an expansion adds followers, a shrink drops them). Told before the proposal is sent, with
        the leader's state as it decided (nothing is pending yet)."""

    # -- the metadata quorum (raft.raft_client.RaftClient, on controllers and brokers) --------------

    def metadata_leader_elected(self, epoch: int, leader_id: int, epoch_start_offset: int) -> None:
        """This voter, `leader_id`, won the election for `epoch` and leads the metadata quorum; its epoch
        starts at `epoch_start_offset` (where its LeaderChange batch goes). Told once per won election."""

    def metadata_committed(self, high_watermark: int) -> None:
        """This member of the quorum learned that every record of `__cluster_metadata` below
        `high_watermark` is committed (the leader: a majority of voters hold them; a follower or observer:
        the leader said so, and it holds them). Told each time its high watermark moves up, after its log's
        high watermark was set and before the records are applied."""


#: The observer of a node nobody watches.
NO_OBSERVER = ReplicationObserver()
