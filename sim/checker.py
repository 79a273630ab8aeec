"""The invariants, held after every event: every acknowledgement (its partition), every fault, every 50 virtual ms.

The checker reads every live replica directly (it is omniscient; nodes never see it) and keeps what it
has learned was committed. Checks, by the name a violation reports:

- `acked_write_lost`: an acks=all write the leader acknowledged is not at its offset in the current
  leader's log (acks=1 writes lost this way are counted as `acks1_lost`, the expected cost of acks=1);
- `committed_record_changed`: an offset once committed (below a leader's HW, or seen by a consumer)
  holds another record in the current leader's log, or is gone from it;
- `record_at_two_offsets`: one record committed at two offsets (without `--idempotence` producers never
  resend a value; with it, a resend a leader appended a second time shows here);
- `hw_above_leo`: a replica's high watermark is past its log end offset;
- `two_leaders_in_one_epoch`: two brokers led one partition in one leader epoch;
- `epoch_went_back`: a broker's leader epoch for a partition went down;
- `isr_member_missing_committed`: a live member of the ISR (the controller's, which elections use) does
  not hold, identically, every record below the leader's HW (so replicas in the ISR are identical below
  the HW);
- `consumer_went_back` / `consumer_saw_changed_record`: a consumer saw offsets go backwards, or a record
  at an offset other than the committed one;
- `follower_position_not_held`: a leader recorded a follower's fetch position P (what its HW and ISR
  count) while the follower's log did not hold offset P-1 in the leader epoch the leader's log holds it
  in. Judged when the leader records it (`on_follower_position`), against the follower's log then, for a
  fetch from the follower's current incarnation that still follows this leader at the epoch it named;
- `stale_incarnation_recorded`: a leader recorded a follower's fetch (its position, what the HW and ISR
  count) whose broker epoch is older than the one the leader last heard that follower fetch with: a late
  fetch of an earlier incarnation, whose log a crash may have cut, which KIP-903 refuses
  (`on_follower_fetch_recorded`);
- `stale_epoch_served`: a leader answered a follower's FETCH that names an older leader epoch than its own
  without an error (records, a diverging epoch, or nothing, its position counted), where KIP-320's fencing
  answers FENCED_LEADER_EPOCH (`on_fetch_answered`);
- `isr_expansion_against_rule`: an ISR expansion that Kafka's rule (`Partition.maybeExpandIsr`) does not
  allow. Judged where it is proposed (`on_isr_change_proposed`): the leader adds a follower only while no
  other ISR change of its is pending, only a replica of the partition that its metadata lists as live
  (unfenced, not shutting down: KIP-841), and only once the follower's position as the leader recorded it
  has reached both the leader's HW and the start offset of the leader's current epoch (KAFKA-7128; read
  from the leader's batches, not from its epoch cache). And where it is committed (`on_metadata`): an ISR
  the controller grows under the same leader and epoch (an ALTER_PARTITION) adds only brokers its image
  has active;
- `producer_state_differs`: a replica's idempotent-producer state (per producer id: the epoch and the
  sequence and offset ranges of its last five batches, hence its last sequence) is not what the batches in
  its log give, read from the log start. Judged after every truncation of a log (`check_producer_state`: the
  state is rebuilt then, and a wrong rebuild shows at once, long before a resend it misjudges) and on every
  replica at the end of a run (`check_producer_states`); not judged on a log whose start has moved past 0,
  whose state may rightly remember producers whose batches were deleted;
- `two_metadata_leaders`: two controllers won the metadata quorum's election for one epoch
  (`on_metadata_leader_elected`; Raft's election safety);
- `committed_metadata_changed` / `committed_metadata_lost`: a voter of the metadata quorum holds, at an
  offset of `__cluster_metadata` once committed, another batch than the committed one, or cut its log
  below a committed offset it held. Each voter's batches are compared with the committed ones each time
  its high watermark moves (`on_metadata_committed`: the first voter to hold a committed batch says what
  it is), each truncation of its log is judged as it happens (`on_metadata_truncated`), and every live
  voter's log up to its own high watermark once more at the end of a run (`check_metadata_logs`; above
  it a voter may hold an uncommitted tail of an older epoch at a committed offset, which its next FETCH
  cuts). A crash that loses what
  a voter never flushed is no truncation: the next incarnation's batches are judged afresh.

Losses are excused, and counted, only where Kafka promises nothing, by one of three rules:

- every replica of the partition crashed since it was last fully in sync, and at least one of them lost
  unflushed data in its crash (the excuse names who lost data; the others may have stopped with the
  record flushed, as B does in kip101-2);
- a leader elected from an ISR whose every member lost unflushed data in a crash and has not been back in
  the ISR since it came back up (a broker that was the last ISR member stays in it through its crash, so
  nothing tells the controller its log is short: the gap KIP-966's eligible leader replicas close). A
  broker added to the ISR while it is down does not count as back: the leader judged it on a fetch from
  before the crash (the change took effect after it, or the fetch arrived late), which says what its log
  held then, not what its disk kept;
- with unclean.leader.election.enable, an election outside the ISR (an `elected-unclean` event, with the
  new leader's log end then) since the partition was last in sync, and only for a record the replica it
  elected did not hold at that offset. The flag alone excuses nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, NoReturn

from broker.broker_node import BrokerNode
from protocol.errors import KafkaError
from protocol.messages import TopicPartition
from protocol.record_batch import iter_headers, iter_records, next_sequence
from sim.trace import Trace
from sim.workload import WriteHistory, record_id
from storage.producer_state import BATCHES_PER_PRODUCER

CHECKS = (
    "acked_write_lost",
    "committed_record_changed",
    "record_at_two_offsets",
    "hw_above_leo",
    "two_leaders_in_one_epoch",
    "epoch_went_back",
    "isr_member_missing_committed",
    "consumer_went_back",
    "consumer_saw_changed_record",
    "follower_position_not_held",
    "stale_incarnation_recorded",
    "stale_epoch_served",
    "isr_expansion_against_rule",
    "producer_state_differs",
    "no_progress",  # sim.runner's liveness checks
    "not_converged",
)


class Violation(Exception):
    def __init__(self, check: str, message: str) -> None:
        super().__init__(check, message)  # both in args, so a sweep's worker processes can pickle it
        self.check = check
        self.message = message

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"


@dataclass
class _ReplicaView:
    log: Any
    truncations: int
    records: list[bytes | None] = field(default_factory=list)
    # The leader epoch written in the batch that holds each offset (-1 below the log start), read from the
    # batches themselves as they are read for `records`, never from the epoch cache.
    epochs: list[int] = field(default_factory=list)


class Checker:
    def __init__(self, cluster: Any, partitions: list[TopicPartition], history: WriteHistory, trace: Trace) -> None:
        self.cluster = cluster
        self.partitions = partitions
        self.history = history
        self.trace = trace
        self.committed: dict[TopicPartition, dict[int, bytes]] = {tp: {} for tp in partitions}
        self.offset_of: dict[bytes, tuple[TopicPartition, int]] = {}
        self.epoch_leader: dict[tuple[TopicPartition, int], int] = {}
        self.last_epoch: dict[tuple[int, TopicPartition], int] = {}
        self.leader_seen: dict[TopicPartition, tuple[int, int, tuple[int, ...]]] = {}
        self.consumer_pos: dict[tuple[int, TopicPartition], int] = {}
        # follower_position_not_held: (position, leader log, follower log, log_cuts) last found held, per
        # (partition, leader, follower); log_cuts counts truncations and crashes.
        self.log_cuts = 0
        self.positions_judged: dict[tuple[TopicPartition, int, int], tuple[int, int, int, int]] = {}
        # Per partition, since it was last seen fully in sync: brokers that crashed, and whether a crash lost
        # unflushed data. A loss is excused once every replica crashed and one of them lost data.
        self.crashed: dict[TopicPartition, set[int]] = {tp: set() for tp in partitions}
        self.lost_power: dict[TopicPartition, set[int]] = {tp: set() for tp in partitions}
        # Per partition, since it was last seen fully in sync: for each election outside the ISR (unclean), the
        # record ids its new leader held by offset then. Only a record none of them held is excused.
        self.unclean_held: dict[TopicPartition, list[list[bytes | None]]] = {tp: [] for tp in partitions}
        self._unclean_unread: dict[TopicPartition, tuple[int, int]] = {}  # (leader, epoch) not read yet
        # Per partition: brokers that lost unflushed data in a crash and have not joined the ISR since they
        # came back up (joining then means the leader saw them reach its HW), and whether the current leader
        # was elected from an ISR made only of such brokers (see the module docstring).
        self.lost_data: dict[TopicPartition, set[int]] = {tp: set() for tp in partitions}
        self.elected_without_data: dict[TopicPartition, bool] = {tp: False for tp in partitions}
        # Per partition: (leader, epoch) of the last election made from an ISR that had all lost unflushed
        # data, while that leadership stands and the partition has not been back in sync since.
        self.without_data_leadership: dict[TopicPartition, tuple[int, int]] = {}
        self._metadata: dict[TopicPartition, tuple[int, int, tuple[int, ...]]] = {}
        self._views: dict[tuple[int, TopicPartition], _ReplicaView] = {}
        # Per partition: acknowledged writes not seen committed yet, with their offset, acks and the broker
        # that acknowledged them.
        self.pending_acks: dict[TopicPartition, dict[bytes, tuple[int, int, int]]] = {tp: {} for tp in partitions}
        self._leader_key: dict[TopicPartition, tuple[int, int, int, int]] = {}
        self._commit_cursor: dict[TopicPartition, int] = {}
        self._isr_verified: dict[tuple[int, TopicPartition], tuple[int, Any]] = {}
        self.checks_run = 0
        self.acks1_lost = 0
        self.excused_losses = 0
        # The metadata quorum: the voter that won each epoch's election; each committed batch of
        # __cluster_metadata by base offset (last offset, epoch, values); the end of what is committed; per
        # voter, the log (one per incarnation) and the offset below which its batches were found committed.
        self.metadata_leaders: dict[int, int] = {}
        self.metadata_batches: dict[int, tuple[int, int, tuple[bytes, ...]]] = {}
        self.metadata_committed_end = 0
        self._metadata_held: dict[int, tuple[Any, int]] = {}

    # -- reading replicas --------------------------------------------------------------------------

    def records(self, broker_id: int, tp: TopicPartition, log: Any) -> list[bytes | None]:
        """The record ids of a replica's log by offset (None below its log start), read incrementally."""
        return self._view(broker_id, tp, log).records

    def _view(self, broker_id: int, tp: TopicPartition, log: Any) -> _ReplicaView:
        key = (broker_id, tp)
        view = self._views.get(key)
        if view is None or view.log is not log or view.truncations != log.truncations:
            view = self._views[key] = _ReplicaView(log, log.truncations)
        leo = log.log_end_offset
        records, epochs = view.records, view.epochs
        have = len(records)
        if leo > have:
            start = max(have, log.log_start_offset)
            records.extend([None] * (start - have))
            epochs.extend([-1] * (start - have))
            data = memoryview(log.read(start, 1 << 30))
            for header in iter_headers(data):
                if header.last_offset < len(records):
                    continue  # the batch holding `start` begins before it
                epoch = int(header.partition_leader_epoch)
                for record in iter_records(data[header.position : header.position + header.size_in_bytes]):
                    if record.offset >= len(records):
                        records.append(record_id(record.value))
                        epochs.append(epoch)
        return view

    def _epoch_at(self, broker_id: int, tp: TopicPartition, log: Any, offset: int) -> int | None:
        """The leader epoch of the batch holding `offset` in broker `broker_id`'s `log` (read from the batch
        itself, not the epoch cache), None when the log does not hold it."""
        if not log.log_start_offset <= offset < log.log_end_offset:
            return None
        try:
            epochs = self._view(broker_id, tp, log).epochs
        except KafkaError:
            return None
        epoch = epochs[offset] if offset < len(epochs) else -1
        return None if epoch < 0 else epoch

    def on_log_cut(self) -> None:
        """A replica's log was truncated: positions judged before are judged again."""
        self.log_cuts += 1

    def on_isr_change_proposed(
        self,
        partition: Any,
        isr: frozenset[int],
        proposed: frozenset[int],
        live_brokers: Collection[int],
    ) -> None:
        """The leader of `partition` proposes `proposed` for its committed `isr`; `live_brokers` are the brokers
        its metadata lists as live. An expansion must keep Kafka's rule (maybeExpandIsr)."""
        tp = partition.topic_partition
        added = sorted(proposed - isr)
        if not added or tp not in self.committed:
            return
        leader, log = partition.local_broker_id, partition.log
        hw = log.high_watermark
        start = self._epoch_start(leader, tp, log, partition.leader_epoch)
        broken: list[str] = []
        if partition.pending_isr is not None:
            broken.append(f"its proposal of {sorted(partition.pending_isr.proposed)} was still pending")
        for follower in added:
            remote = partition.remote_replicas.get(follower)
            position = -1 if remote is None else remote.log_end_offset
            if follower not in partition.assignment:
                broken.append(f"{follower} is not a replica ({partition.assignment})")
            if follower not in live_brokers:
                broken.append(f"its metadata lists {follower} as fenced or shutting down")
            if position < hw:
                broken.append(f"{follower} is at {position}, below the HW {hw}")
            if position < start:
                broken.append(
                    f"{follower} is at {position}, below the start offset {start} of epoch {partition.leader_epoch}"
                )
        if broken:
            self.fail(
                "isr_expansion_against_rule",
                f"{tp}: leader {leader} (epoch {partition.leader_epoch}) proposed ISR {sorted(proposed)} for "
                f"{sorted(isr)} although " + "; ".join(broken),
            )

    def _epoch_start(self, broker_id: int, tp: TopicPartition, log: Any, epoch: int) -> int:
        """The first offset of leader epoch `epoch` in a leader's log, read from its batches: where it began
        leading at that epoch (its log end then, where nothing has been written in it since)."""
        end, start = int(log.log_end_offset), int(log.log_start_offset)
        epochs = self._view(broker_id, tp, log).epochs if end > start else []
        for offset in range(len(epochs) - 1, start - 1, -1):
            if epochs[offset] < epoch:
                return offset + 1
        return start if epochs else end

    def check_producer_states(self) -> None:
        """Every live replica's producer state against its log (at the end of a run)."""
        for b, node in sorted(self.cluster.brokers.items()):
            for tp, partition in sorted(node.replica_manager.partitions.items()):
                self.check_producer_state(b, tp, partition.log)

    def check_producer_state(self, broker_id: int, tp: TopicPartition, log: Any) -> None:
        if log.log_start_offset != 0 or getattr(log, "offline_reason", None) is not None:
            return
        try:
            data = memoryview(log.read(0, 1 << 30)) if log.log_end_offset > 0 else memoryview(b"")
        except KafkaError:
            return
        from_log: dict[int, tuple[int, list[tuple[int, int, int, int]]]] = {}
        for header in iter_headers(data):
            if header.producer_id < 0:
                continue
            epoch, batches = from_log.get(header.producer_id, (header.producer_epoch, []))
            if epoch != header.producer_epoch:
                epoch, batches = header.producer_epoch, []  # a new epoch starts the producer's batches afresh
            last_seq = next_sequence(header.base_sequence, header.last_offset_delta)
            batches = [*batches, (header.base_sequence, last_seq, header.base_offset, header.last_offset)]
            from_log[header.producer_id] = (epoch, batches[-BATCHES_PER_PRODUCER:])
        state = {e.producer_id: (e.producer_epoch, [b[:4] for b in e.batches]) for e in log.producer_state}
        if state == from_log:
            return
        differing = sorted(p for p in set(state) | set(from_log) if state.get(p) != from_log.get(p))
        pid = differing[0]
        self.fail(
            "producer_state_differs",
            f"{tp} on broker {broker_id} (log end {log.log_end_offset}): producer {pid} is "
            f"{_producer(state.get(pid))} in its producer state but {_producer(from_log.get(pid))} in its log's "
            f"batches ({len(differing)} producer(s) differ)",
        )

    def on_crash(self, broker_id: int, lost_unflushed: bool) -> None:
        self.log_cuts += 1
        for tp in self.partitions:
            self.crashed[tp].add(broker_id)
            if lost_unflushed:
                self.lost_power[tp].add(broker_id)
            if lost_unflushed:
                self.lost_data[tp].add(broker_id)

    def on_metadata(self, record: Any, image: Any) -> None:
        """A record the controller committed: follow each partition's leader and ISR as elections see them."""
        topic, partition = getattr(record, "topic", None), getattr(record, "partition", None)
        if not isinstance(topic, str) or not isinstance(partition, int):
            return
        tp = TopicPartition(topic, partition)
        state = image.partitions.get(tp)
        if tp not in self.lost_data or state is None:
            return
        isr = tuple(state.isr)
        before = self._metadata.get(tp)
        self._metadata[tp] = (state.leader, state.leader_epoch, isr)
        lost = self.lost_data[tp]
        # Only a member that joins while it is up has fetched the leader's log since its crash. One that is
        # down joins on a fetch from before the crash (the expansion was committed after it, or the fetch
        # arrived late): its disk may not have kept what that fetch says it had.
        up = self.cluster.brokers
        joined = sorted(set(isr) - set(before[2] if before else ()))
        for b in joined:
            if b in up:
                lost.discard(b)
            elif b in lost:
                self.trace.event("checker", "isr-join-while-down", tp=str(tp), broker=b, isr=list(isr))
        elected = before is None or (before[0], before[1]) != (state.leader, state.leader_epoch)
        inactive = [b for b in joined if (r := image.brokers.get(b)) is None or not r.is_active]
        if not elected and inactive:
            self.fail(
                "isr_expansion_against_rule",
                f"{tp}: the controller put {inactive} in the ISR {list(isr)} of leader {state.leader} (epoch "
                f"{state.leader_epoch}), fenced or shutting down",
            )
        if elected:
            self.without_data_leadership.pop(tp, None)
        if elected and before is not None and state.leader >= 0 and state.leader not in before[2]:
            self._elected_unclean(tp, state.leader, state.leader_epoch, before[2])
        if elected and state.leader >= 0 and state.leader in lost and set(isr) <= lost:
            self.elected_without_data[tp] = True
            self.without_data_leadership[tp] = (state.leader, state.leader_epoch)
            self.trace.event(
                "checker",
                "elected-without-data",
                tp=str(tp),
                leader=state.leader,
                epoch=state.leader_epoch,
                isr=list(isr),
            )

    def _elected_unclean(self, tp: TopicPartition, leader: int, epoch: int, isr_before: tuple[int, ...]) -> None:
        """An election outside the ISR: remember what the new leader held, the most an excuse can cover. A
        leader that has not opened the partition yet (just restarted) is read when first seen leading."""
        node = self.cluster.brokers.get(leader)
        partition = None if node is None else node.replica_manager.partitions.get(tp)
        if partition is None:
            self._unclean_unread[tp] = (leader, epoch)
            self.trace.event(
                "checker", "elected-unclean", tp=str(tp), leader=leader, epoch=epoch, isr_before=list(isr_before)
            )
            return
        held = list(self.records(leader, tp, partition.log))
        self.unclean_held[tp].append(held)
        self.trace.event(
            "checker",
            "elected-unclean",
            tp=str(tp),
            leader=leader,
            epoch=epoch,
            isr_before=list(isr_before),
            leo=len(held),
        )

    # -- checks ------------------------------------------------------------------------------------

    def check(self, only: TopicPartition | None = None) -> None:
        """Every check, on every partition (or on `only`)."""
        self.checks_run += 1
        brokers: dict[int, BrokerNode] = self.cluster.brokers
        controller = self.cluster.controller
        for tp in self.partitions if only is None else (only,):
            replicas = []
            for b in sorted(brokers):
                partition = brokers[b].replica_manager.partitions.get(tp)
                if partition is None or getattr(partition.log, "offline_reason", None) is not None:
                    continue
                replicas.append((b, partition))
            leaders: list[tuple[int, int]] = []
            for b, p in replicas:
                log = p.log
                hw, leo = log.high_watermark, log.log_end_offset
                if hw > leo:
                    self.fail("hw_above_leo", f"{tp} on broker {b}: HW {hw} > LEO {leo}")
                epoch = p.leader_epoch
                previous = self.last_epoch.get((b, tp))
                if previous is not None and epoch < previous:
                    self.fail("epoch_went_back", f"{tp} on broker {b}: leader epoch {previous} -> {epoch}")
                self.last_epoch[(b, tp)] = epoch
                if p.is_leader:
                    owner = self.epoch_leader.setdefault((tp, epoch), b)
                    if owner != b:
                        self.fail("two_leaders_in_one_epoch", f"{tp} epoch {epoch}: brokers {owner} and {b}")
                    leaders.append((epoch, b))
            if not leaders:
                continue
            epoch, leader = max(leaders)
            if controller is not None:
                state = controller.controller.image.partitions.get(tp)
                if state is not None and (state.leader != leader or state.leader_epoch != epoch):
                    continue  # a zombie or a leader the controller has already replaced: not authoritative
            partition = dict(replicas)[leader]
            self._check_leader(tp, leader, epoch, partition, dict(replicas))

    def _check_leader(
        self, tp: TopicPartition, leader: int, epoch: int, partition: Any, replicas: dict[int, Any]
    ) -> None:
        log = partition.log
        leader_records = self.records(leader, tp, log)
        # The ISR that elections use: the controller's (the leader's own may still list a member the
        # controller has fenced, while the news is on its way; that member only holds the HW back).
        isr = tuple(sorted(self._controller_isr(tp) or partition.isr))
        if self.leader_seen.get(tp) != (leader, epoch, isr):
            self.leader_seen[tp] = (leader, epoch, isr)
            self.trace.event(
                leader, "leader", tp=str(tp), epoch=epoch, isr=list(isr), hw=log.high_watermark, leo=log.log_end_offset
            )
        if self._unclean_unread.get(tp) == (leader, epoch):
            # Elected outside the ISR before it had opened the partition: what it leads with is what it held.
            del self._unclean_unread[tp]
            self.unclean_held[tp].append(list(leader_records))
            self.trace.event("checker", "elected-unclean-read", tp=str(tp), leader=leader, leo=len(leader_records))
        committed = self.committed[tp]
        leader_view = self._views[(leader, tp)]
        key = (leader, epoch, id(leader_view), leader_view.truncations)
        if self._leader_key.get(tp) != key:
            # A new leader, or its log was cut back: everything committed must still be there, unchanged.
            self._leader_key[tp] = key
            self._isr_verified = {k: v for k, v in self._isr_verified.items() if k[1] != tp}
            for offset, rid in committed.items():
                if self._hold(tp, leader, epoch, leader_records, offset, rid):
                    return
        hw = log.high_watermark
        for offset in range(self._commit_cursor.get(tp, 0), min(hw, len(leader_records))):
            found = leader_records[offset]
            if found is None:
                continue
            if offset in committed:
                if self._hold(tp, leader, epoch, leader_records, offset, committed[offset]):
                    return
            else:
                self._commit(tp, offset, found)
        self._commit_cursor[tp] = max(self._commit_cursor.get(tp, 0), min(hw, len(leader_records)))
        # Acknowledged writes of this partition not yet seen committed.
        pending = self.pending_acks[tp]
        for rid, (offset, acks, acked_by) in list(pending.items()):
            have = leader_records[offset] if offset < len(leader_records) else None
            if have == rid:
                if offset < hw:
                    del pending[rid]
                continue
            del pending[rid]
            if acks != -1:
                self.acks1_lost += 1
                self.trace.event(leader, "acks1-write-lost", tp=str(tp), id=rid.decode(), offset=offset)
                continue
            if self._excused(tp, f"acked {rid!r} gone from leader {leader}", offset, rid):
                return
            if acked_by != leader and self.without_data_leadership.get(tp) == (leader, epoch):
                # A zombie of an earlier leadership acknowledged it after this leader was elected without the
                # data: its HW counted a replica's fetch from before that replica lost the write in a crash.
                # The same loss as the election's, only acknowledged later.
                self._count_excused(
                    tp,
                    f"acked {rid!r} gone from leader {leader}",
                    f"acknowledged by broker {acked_by}, a leader of an earlier epoch, after leader {leader} "
                    "was elected from an ISR that had all lost unflushed data",
                )
                continue
            self.fail(
                "acked_write_lost",
                f"{tp}: {rid.decode()} was acknowledged at offset {offset} but leader {leader} (epoch {epoch}) "
                f"has {have.decode() if have else 'nothing'} there",
            )
        # Every live ISR member holds every committed record, identically (checked from where it last was).
        upto = min(hw, len(leader_records))
        for member in isr:
            if member == leader or member not in replicas:
                continue
            member_records = self.records(member, tp, replicas[member].log)
            member_view = self._views[(member, tp)]
            mkey = (member, tp)
            start, seen_key = self._isr_verified.get(mkey, (0, None))
            if seen_key != (id(member_view), member_view.truncations):
                start = 0
            for offset in range(start, upto):
                if offset >= len(member_records) or member_records[offset] != leader_records[offset]:
                    self.fail(
                        "isr_member_missing_committed",
                        f"{tp}: ISR member {member} differs from leader {leader} (epoch {epoch}) at offset "
                        f"{offset} below the HW {hw} (member LEO {len(member_records)})",
                    )
            self._isr_verified[mkey] = (max(start, upto), (id(member_view), member_view.truncations))
        # Only now, with every loss above judged against the crashes that may excuse it: once the whole
        # assignment is in the ISR, alive and holding the HW, every replica holds every committed record.
        if set(isr) == set(self._assignment(tp)) and all(
            m in replicas and replicas[m].log.log_end_offset >= hw for m in isr
        ):
            self.crashed[tp].clear()
            self.lost_power[tp] = set()
            self.unclean_held[tp] = []
            self.elected_without_data[tp] = False
            self.without_data_leadership.pop(tp, None)

    def _hold(
        self, tp: TopicPartition, leader: int, epoch: int, records: list[bytes | None], offset: int, rid: bytes
    ) -> bool:
        """Check the leader still holds committed `rid` at `offset`; True when a loss was excused."""
        have = records[offset] if offset < len(records) else None
        if have == rid:
            return False
        if self._excused(tp, f"committed offset {offset} ({rid!r}) gone from leader {leader}", offset, rid):
            return True
        acked = self.history.acked.get(rid)
        if acked is not None and acked[2] == -1:
            self.fail(
                "acked_write_lost",
                f"{tp}: {rid.decode()} was acknowledged at offset {offset} but leader {leader} (epoch {epoch}) "
                f"has {have.decode() if have else 'nothing'} there",
            )
        self.fail(
            "committed_record_changed",
            f"{tp} offset {offset}: committed {rid.decode()} but leader {leader} (epoch {epoch}) has "
            f"{have.decode() if have else 'nothing'}",
        )

    def on_follower_fetch_recorded(
        self, partition: Any, follower: int, position: int, broker_epoch: int, heard_epoch: int
    ) -> None:
        """A leader just recorded `follower`'s fetch at `position`, sent at `broker_epoch`, having last heard the
        follower fetch at broker epoch `heard_epoch` (-1: not in this leadership). A fetch sent at an older
        broker epoch than that comes from an incarnation that has since restarted: KIP-903 refuses it, for
        its position says what a log the crash may have cut held. Either epoch unknown (-1): not judged."""
        if partition.topic_partition not in self.committed:
            return
        if broker_epoch == -1 or heard_epoch == -1 or broker_epoch >= heard_epoch:
            return
        self.fail(
            "stale_incarnation_recorded",
            f"{partition.topic_partition}: leader {partition.local_broker_id} (epoch {partition.leader_epoch}) "
            f"recorded follower {follower} at position {position} from a fetch at broker epoch {broker_epoch}, "
            f"after hearing it fetch at broker epoch {heard_epoch}",
        )

    def on_follower_position(
        self, partition: Any, follower: int, position: int, broker_epoch: int, requested_epoch: int = -1
    ) -> None:
        """A leader just recorded `follower`'s fetch position (its LEO as the leader sees it, which the HW and
        the ISR count): the follower's log must hold offset position-1 in the leader's epoch there.

        Not judged (nothing can be said of the log that sent the fetch) when the follower is down, the fetch
        comes from an earlier incarnation (its broker epoch is not the follower's now: KIP-903's late fetch,
        whose log a crash may have cut), or the follower has since moved to another leader or epoch than the
        fetch names (`requested_epoch`; it may have truncated for the new one after sending). A follower
        still at the epoch it fetched with truncates only what that leader does not hold, so a position it
        sent is still held, or never was. A fetch naming no epoch (-1) is judged while the follower follows
        this leader in no later epoch than the leader's."""
        tp = partition.topic_partition
        if tp not in self.committed:
            return
        node = self.cluster.brokers.get(follower)
        if node is None:
            return
        lifecycle = node.lifecycle
        current = lifecycle.broker_epoch if lifecycle is not None else -1
        if broker_epoch != -1 and current != -1 and broker_epoch != current:
            return
        replica = node.replica_manager.partitions.get(tp)
        if replica is None or getattr(replica.log, "offline_reason", None) is not None:
            return
        leader = partition.local_broker_id
        if replica.leader_id != leader:
            return
        if (
            replica.leader_epoch != requested_epoch
            if requested_epoch >= 0
            else replica.leader_epoch > partition.leader_epoch
        ):
            return
        leader_log, follower_log = partition.log, replica.log
        if position <= max(leader_log.log_start_offset, follower_log.log_start_offset):
            return
        # A position judged before, on the same two logs, with no log cut or crash since, holds what it held
        # (appends change no offset below the end): most partitions of a FETCH come back unmoved.
        judged = (position, id(leader_log), id(follower_log), self.log_cuts)
        key = (tp, leader, follower)
        if self.positions_judged.get(key) == judged:
            return
        offset = position - 1
        expected = self._epoch_at(leader, tp, leader_log, offset)
        if expected is None:
            return  # the leader does not hold it either: its read refuses such a fetch as out of range
        held = self._epoch_at(follower, tp, follower_log, offset)
        if held == expected:
            self.positions_judged[key] = judged
        else:
            self.fail(
                "follower_position_not_held",
                f"{tp}: leader {leader} (epoch {partition.leader_epoch}) counts follower {follower} at position "
                f"{position}, but the follower's log "
                + (
                    f"ends at {follower_log.log_end_offset}"
                    if held is None
                    else f"holds offset {offset} in epoch {held}, the leader's in epoch {expected}"
                ),
            )

    def on_fetch_answered(self, partition: Any, follower: int, requested_epoch: int, answer: Any) -> None:
        """A leader answered one partition of a follower's FETCH: one that names an epoch older than the
        leader's must be refused (FENCED_LEADER_EPOCH), neither served nor counted. A follower a step behind
        (its news of the new epoch still on the way) is harmless; one that missed a whole leadership in
        between holds what that leadership truncated (kafka-7164), and only this fencing stops the leader
        counting it."""
        if requested_epoch < 0 or requested_epoch >= partition.leader_epoch or answer.error_code != 0:
            return
        if partition.topic_partition not in self.committed:
            return
        if answer.diverging_epoch >= 0:
            what = f"a diverging epoch ({answer.diverging_epoch}, end offset {answer.diverging_end_offset})"
        else:
            what = f"{len(answer.records)} bytes of records"
        self.fail(
            "stale_epoch_served",
            f"{partition.topic_partition}: leader {partition.local_broker_id} (epoch {partition.leader_epoch}) "
            f"answered follower {follower}'s FETCH naming epoch {requested_epoch} with {what}, not "
            "FENCED_LEADER_EPOCH",
        )

    def on_ack(self, rid: bytes, tp: TopicPartition, offset: int, acks: int, leader: int) -> None:
        self.pending_acks[tp][rid] = (offset, acks, leader)
        self.check(tp)

    def _commit(self, tp: TopicPartition, offset: int, rid: bytes) -> None:
        where = self.offset_of.get(rid)
        if where is not None and where != (tp, offset):
            self.fail("record_at_two_offsets", f"{rid.decode()} committed at {where[0]}@{where[1]} and {tp}@{offset}")
        self.offset_of[rid] = (tp, offset)
        self.committed[tp][offset] = rid

    def _excused(self, tp: TopicPartition, what: str, offset: int, rid: bytes) -> bool:
        """A loss Kafka allows (see the module docstring): forget what tp had committed and go on from the
        current leader's log."""
        replicas = set(self._assignment(tp))
        if bool(replicas) and replicas <= self.crashed[tp] and self.lost_power[tp]:
            why = (
                f"every replica {sorted(replicas)} crashed since the partition was last in sync, and "
                f"{sorted(self.lost_power[tp])} lost unflushed data"
            )
        elif self.elected_without_data[tp]:
            why = "leader elected from an ISR that had all lost unflushed data"
        elif self.cluster.options.unclean_leader_election and any(
            offset >= len(held) or held[offset] != rid for held in self.unclean_held[tp]
        ):
            why = f"unclean leader election: offset {offset} was not in the elected replica's log"
        else:
            return False
        self._count_excused(tp, what, why)
        self.pending_acks[tp].clear()
        for committed in self.committed[tp].values():
            self.offset_of.pop(committed, None)
        self.committed[tp] = {}
        self._commit_cursor[tp] = 0
        self._leader_key.pop(tp, None)
        self.crashed[tp] = set()
        self.lost_power[tp] = set()
        self.elected_without_data[tp] = False
        self.unclean_held[tp] = []
        return True

    def _count_excused(self, tp: TopicPartition, what: str, why: str) -> None:
        self.excused_losses += 1
        self.trace.event("checker", "excused-loss", tp=str(tp), what=what, why=why)

    def _controller_isr(self, tp: TopicPartition) -> tuple[int, ...] | None:
        controller = self.cluster.controller
        if controller is None:
            return None
        state = controller.controller.image.partitions.get(tp)
        return None if state is None else tuple(state.isr)

    def _assignment(self, tp: TopicPartition) -> tuple[int, ...]:
        controller = self.cluster.controller
        if controller is not None:
            state = controller.controller.image.partitions.get(tp)
            if state is not None:
                return tuple(state.replicas)
        return tuple(self.cluster.broker_ids)

    def on_consumed(self, consumer: int, tp: TopicPartition, offset: int, rid: bytes, hw: int) -> None:
        last = self.consumer_pos.get((consumer, tp), -1)
        if offset <= last:
            self.fail("consumer_went_back", f"consumer {consumer} on {tp}: offset {offset} after {last}")
        self.consumer_pos[(consumer, tp)] = offset
        committed = self.committed[tp].get(offset)
        if committed is not None and committed != rid:
            # The consumer may have read from a leader elected since the last pass of the checks. Judge that
            # leader first, so a loss Kafka allows (an unclean election) is excused here as it is there.
            self.check(tp)
            committed = self.committed[tp].get(offset)
        if committed is not None and committed != rid:
            self.fail(
                "consumer_saw_changed_record",
                f"consumer {consumer} read {rid.decode()} at {tp}@{offset}, committed is {committed.decode()}",
            )
        if committed is None:
            self._commit(tp, offset, rid)

    # -- the metadata quorum ------------------------------------------------------------------------

    def on_metadata_leader_elected(self, node_id: int, epoch: int) -> None:
        """Controller `node_id` won the election for `epoch`: no other may have won it."""
        leader = self.metadata_leaders.setdefault(epoch, node_id)
        if leader != node_id:
            self.fail(
                "two_metadata_leaders",
                f"controllers {leader} and {node_id} both won the metadata quorum's election for epoch {epoch}",
            )

    def on_metadata_committed(self, node_id: int, raft_log: Any, high_watermark: int) -> None:
        """Voter `node_id`'s high watermark moved to `high_watermark`: its batches below it are committed ones."""
        self._judge_metadata_log(node_id, raft_log, high_watermark)

    def on_metadata_truncated(self, node_id: int, raft_log: Any, to_offset: int) -> None:
        """Voter `node_id` cut its metadata log back to `to_offset` (or emptied it to start there)."""
        held = self._metadata_held.get(node_id)
        if held is not None and held[0] is raft_log and to_offset < held[1]:
            self.fail(
                "committed_metadata_lost",
                f"controller {node_id} cut its metadata log to offset {to_offset}, below {held[1]}: it held the "
                f"committed batches up to there",
            )

    def check_metadata_logs(self) -> None:
        """Every live voter's metadata log, up to its own high watermark, against the committed batches (at the
        end of a run). Above it a voter may rightly hold another epoch's batch at a committed offset: an
        uncommitted tail its next FETCH will cut."""
        for node_id, node in sorted(self.cluster.controllers.items()):
            self._judge_metadata_log(node_id, node.raft_log, node.raft.high_watermark)

    def _judge_metadata_log(self, node_id: int, raft_log: Any, upto: int) -> None:
        held = self._metadata_held.get(node_id)
        start = held[1] if held is not None and held[0] is raft_log else 0
        start = max(start, raft_log.log_start_offset)  # below: in a snapshot
        end = min(upto, raft_log.log_end_offset)
        if end <= start:
            return
        for batch in raft_log.batches(start, end):
            mine = (batch.last_offset, batch.epoch, tuple(batch.values))
            committed = self.metadata_batches.setdefault(batch.base_offset, mine)
            if committed != mine:
                self.fail(
                    "committed_metadata_changed",
                    f"controller {node_id} holds at metadata offset {batch.base_offset} a batch of epoch {batch.epoch} "
                    f"ending at {batch.last_offset}, where the committed one is of epoch {committed[1]} ending at "
                    f"{committed[0]}" + ("" if committed[:2] != mine[:2] else ", with other records"),
                )
        self._metadata_held[node_id] = (raft_log, end)
        self.metadata_committed_end = max(self.metadata_committed_end, end)

    def fail(self, check: str, message: str) -> NoReturn:
        self.trace.event("checker", "violation", check=check, message=message)
        raise Violation(check, message)

    def replica_table(self) -> list[dict[str, Any]]:
        """Per replica: role, epoch, HW, LEO and ISR, for the timeline of a violation."""
        rows = []
        for b, node in sorted(self.cluster.brokers.items()):
            for tp, p in sorted(node.replica_manager.partitions.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
                rows.append(
                    {
                        "broker": b,
                        "tp": str(tp),
                        "role": "leader" if p.is_leader else "follower",
                        "epoch": p.leader_epoch,
                        "hw": p.log.high_watermark,
                        "leo": p.log.log_end_offset,
                        "isr": sorted(p.isr) if p.is_leader else None,
                    }
                )
        return rows


def _producer(entry: tuple[int, list[tuple[int, int, int, int]]] | None) -> str:
    """One producer's entry, as a violation names it."""
    if entry is None:
        return "absent"
    epoch, batches = entry
    ranges = ", ".join(f"seq {a}-{b} at {c}-{d}" for a, b, c, d in batches)
    return f"epoch {epoch}, last batches [{ranges}]"
