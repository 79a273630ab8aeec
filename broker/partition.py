"""One partition replica on this broker: leader or follower role, leader epoch, ISR and high watermark.

How this works
--------------
A `Partition` wraps the replica's `Log` and holds what the controller told us (leader, leader epoch,
partition epoch, assigned replicas, ISR). As leader it also tracks every follower (`Replica`): their LEO
from the offsets they fetch, and when each was last caught up. From those it derives:

* the high watermark (L6): the smallest LEO over the leader and the followers that are in the *maximal*
  ISR (the committed ISR plus a pending expansion) or caught up within `replica.lag.time.max.ms`.
  The HW only moves forward while this broker leads, and never past the leader's LEO;
* ISR expansion (L7): a follower whose LEO reached both the HW and the start offset of the current leader
  epoch joins (KAFKA-7128: a replica that has not fetched anything of this epoch cannot be in sync);
* ISR shrink (L8): a follower not caught up for `replica.lag.time.max.ms` leaves, then the HW may jump.

ISR changes are proposed through an `IsrChangeSink` (ALTER_PARTITION to the controller, or applied locally
in standalone mode). While one is in flight no other is proposed, and the HW is computed over the maximal
ISR so it never counts on a replica the controller has not yet accepted — that is KIP-497's rule.

Epoch checks (L1) on every request that names a `current_leader_epoch`: ours > theirs → FENCED_LEADER_EPOCH,
ours < theirs → UNKNOWN_LEADER_EPOCH, -1 → no check.

Everything here runs on the broker's event loop thread: no locks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from broker.replica import Replica
from protocol.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    KafkaError,
    MessageTooLargeError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from protocol.messages import (
    EARLIEST_TIMESTAMP,
    NO_LEADER_EPOCH,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderAndIsrPartition,
    TopicPartition,
)
from protocol.record_batch import iter_headers
from server_common.replication_observer import NO_OBSERVER, ReplicationObserver
from storage.file_records import FileRecords
from storage.log_validator import validate_records

if TYPE_CHECKING:
    from storage.log import AppendInfo, Log

log = logging.getLogger(__name__)


class IsrChangeSink(Protocol):
    """Where a leader sends ISR changes: the controller (ALTER_PARTITION) or a local stand-in."""

    def propose(self, partition: Partition, new_isr: frozenset[int]) -> None: ...


@dataclass(slots=True)
class PartitionCounters:
    """Running totals for metrics (Kafka meter counts)."""

    bytes_in: int = 0
    bytes_out: int = 0
    replication_bytes_in: int = 0
    replication_bytes_out: int = 0
    messages_in: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0


@dataclass(slots=True)
class LogReadInfo:
    """What a read returns, with HW / log start / LEO snapshotted *before* any follower state update (L3)."""

    records: bytes | FileRecords  # FileRecords: slices of the segment files, to send unread (FETCH v1)
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging: tuple[int, int] | None = None  # (epoch, end offset) when the follower's log diverges


@dataclass(slots=True)
class PendingIsr:
    proposed: frozenset[int]
    # Per member, the broker epoch it was proposed with (KIP-903's NewIsrWithEpochs) and its broker's
    # registration in our metadata then: a refusal is about what the proposal saw, not about a fetch or a
    # registration that arrived while it was in flight.
    seen: dict[int, tuple[int, object]] = field(default_factory=dict)


@dataclass
class Partition:
    topic_partition: TopicPartition
    local_broker_id: int
    log: Log
    replica_lag_time_max_ms: int = 30000
    min_insync_replicas: int = 1
    leader_id: int = -1
    leader_epoch: int = -1
    leader_epoch_start_offset: int = -1
    partition_epoch: int = -1
    assignment: list[int] = field(default_factory=list)
    isr: frozenset[int] = frozenset()
    pending_isr: PendingIsr | None = None
    remote_replicas: dict[int, Replica] = field(default_factory=dict)
    counters: PartitionCounters = field(default_factory=PartitionCounters)
    isr_sink: IsrChangeSink | None = None
    # KIP-841: a fenced or shutting-down broker may not join the ISR, and a dead follower that was caught
    # up a moment ago must not hold the HW back for replica.lag.time.max.ms. True for all in standalone mode.
    is_broker_eligible: Callable[[int], bool] = field(default=lambda broker_id: True)
    # A broker's registration as the metadata has it (any value that changes when the registration does).
    broker_state: Callable[[int], object] = field(default=lambda broker_id: None)
    # Followers the controller refused as INELIGIBLE_REPLICA, with the broker epoch they fetched with and
    # their broker's registration in our metadata when proposed: not proposed again until either changes
    # (Kafka's Partition.maybeExpandIsr proposes a replica only when its state says it can join). Cleared
    # by any new partition state from the controller.
    refused_replicas: dict[int, tuple[int, object]] = field(default_factory=dict)
    # Told of every ISR change this replica proposes as leader (server_common/replication_observer.py).
    observer: ReplicationObserver = NO_OBSERVER

    # -- identity and role --------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    @property
    def partition(self) -> int:
        return self.topic_partition.partition

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr | self.pending_isr.proposed if self.pending_isr else self.isr

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def make_leader(self, state: LeaderAndIsrPartition, now_ms: int) -> bool:
        """Become (or stay) leader for `state.leader_epoch` (L9). Returns True if this is a new leadership."""
        is_new_leader = not self.is_leader or state.leader_epoch != self.leader_epoch
        self._apply_assignment(state)
        if is_new_leader:
            leo = self.log_end_offset
            self.leader_epoch_start_offset = leo
            # KAFKA-7415: record (epoch, LEO) so OffsetsForLeaderEpoch can answer for an epoch we never wrote in.
            self.log.maybe_assign_epoch_start_offset(state.leader_epoch, leo)
            self.remote_replicas = {b: Replica(b) for b in self.assignment if b != self.local_broker_id}
            for broker_id, replica in self.remote_replicas.items():
                replica.reset_replica_state(now_ms, leo, broker_id in self.isr)
            self.pending_isr = None
            log.info(
                "%s: became leader at epoch %d, epoch start offset %d, ISR %s",
                self.topic_partition,
                state.leader_epoch,
                leo,
                sorted(self.isr),
            )
        self.maybe_increment_leader_hw(now_ms)
        return is_new_leader

    def make_follower(self, state: LeaderAndIsrPartition) -> bool:
        """Become follower of `state.leader`. True when leader or epoch changed, so the fetcher must
        restart and truncate again (KAFKA-7164: after *every* epoch change, even with the same leader)."""
        changed = state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
        self._apply_assignment(state)
        self.remote_replicas = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = -1
        return changed

    def update_assignment(self, replicas: list[int], now_ms: int) -> None:
        """A new replica set at the same leader epoch (Kafka's updateAssignmentAndIsr): a leader starts
        tracking added replicas (LEO unknown, never caught up) and forgets removed ones."""
        self.assignment = list(replicas)
        if not self.is_leader:
            return
        wanted = [b for b in self.assignment if b != self.local_broker_id]
        for broker_id in list(self.remote_replicas):
            if broker_id not in wanted:
                del self.remote_replicas[broker_id]
        for broker_id in wanted:
            if broker_id not in self.remote_replicas:
                replica = Replica(broker_id)
                replica.reset_replica_state(now_ms, self.log_end_offset, in_isr=False)
                self.remote_replicas[broker_id] = replica

    def _apply_assignment(self, state: LeaderAndIsrPartition) -> None:
        if state.leader_epoch != self.leader_epoch or state.partition_epoch != self.partition_epoch:
            self.refused_replicas.clear()
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.assignment = list(state.replicas)
        self.isr = frozenset(state.isr)

    # -- epoch validation (L1) ----------------------------------------------------------------------

    def check_current_leader_epoch(self, requested_epoch: int) -> None:
        if requested_epoch == NO_LEADER_EPOCH:
            return
        if requested_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic_partition}: request epoch {requested_epoch} is older than the current {self.leader_epoch}"
            )
        if requested_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"{self.topic_partition}: request epoch {requested_epoch} is newer than the current {self.leader_epoch}"
            )

    def check_leader(self, current_leader_epoch: int, require_leader: bool = True) -> None:
        self.check_current_leader_epoch(current_leader_epoch)
        if require_leader and not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic_partition} (leader: {self.leader_id})"
            )

    # -- leader append ------------------------------------------------------------------------------

    def append_records_to_leader(
        self, records: bytes, required_acks: int, now_ms: int, check_batch_size: bool = True
    ) -> AppendInfo:
        self.check_leader(NO_LEADER_EPOCH)
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic_partition}: ISR {sorted(self.isr)} is smaller than min.insync.replicas="
                f"{self.min_insync_replicas}"
            )
        max_bytes = self.log.config.max_message_bytes
        if check_batch_size and len(records) > max_bytes:
            for header in iter_headers(records):
                if header.size_in_bytes > max_bytes:
                    raise MessageTooLargeError(
                        f"{self.topic_partition}: a batch of {header.size_in_bytes} bytes is larger than "
                        f"max.message.bytes={max_bytes}"
                    )
        # Kafka's LogValidator: poison with a valid CRC never reaches the log; max timestamps are recomputed,
        # or, on a LogAppendTime topic, every batch is stamped with the append time.
        checked = validate_records(records, now_ms if self.log.config.log_append_time else None)
        info = self.log.append_as_leader(checked, self.leader_epoch)
        self.counters.bytes_in += info.size_bytes
        self.counters.messages_in += info.num_records
        self.maybe_increment_leader_hw(now_ms)
        return info

    def check_enough_replicas_reached_offset(self, required_offset: int) -> tuple[bool, KafkaError | None]:
        """For acks=all: (done, error). Done when HW ≥ required offset (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the
        ISR is below min.insync.replicas by then), or when leadership moved.

        Leadership moving while we wait answers NOT_ENOUGH_REPLICAS_AFTER_APPEND, not Kafka's
        NOT_LEADER_OR_FOLLOWER: the records are in this broker's log and may survive on the new leader, so
        a client must treat the write as indeterminate. NOT_LEADER_OR_FOLLOWER stays reserved for "not
        appended", which clients may safely retry.
        """
        if not self.is_leader:
            return True, KafkaError(
                f"{self.topic_partition}: leadership moved while waiting for acks; written to this broker's log "
                "but not known to be replicated",
                code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
            )
        if self.high_watermark >= required_offset:
            # Against the maximal ISR, as Kafka's checkEnoughReplicasReachOffset: a shrink still in flight
            # has not taken effect, and the HW was computed over the maximal ISR too.
            if len(self.maximal_isr) < self.min_insync_replicas:
                # AFTER_APPEND, not NOT_ENOUGH_REPLICAS: the records are in the log (and committed by the
                # smaller ISR), so a client must not take this as "not written" and resend them.
                return True, KafkaError(
                    f"{self.topic_partition}: written, but the ISR {sorted(self.isr)} shrank below "
                    f"min.insync.replicas={self.min_insync_replicas}",
                    code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                )
            return True, None
        return False, None

    # -- reads ---------------------------------------------------------------------------------------

    def diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """Our (epoch, end offset) for a follower's last fetched epoch when its log diverges from ours:
        we know no such epoch (ours is the largest below it), or ours ends before the fetch offset. None
        when nothing was sent or the logs agree up to the fetch offset."""
        if last_fetched_epoch == UNDEFINED_EPOCH or fetch_offset <= self.log_start_offset:
            return None
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def read_records(
        self,
        fetch_offset: int,
        current_leader_epoch: int,
        max_bytes: int,
        fetch_only_from_leader: bool,
        read_up_to_log_end: bool,
        min_one_message: bool,
        last_fetched_epoch: int = UNDEFINED_EPOCH,
        file_records: bool = False,
    ) -> LogReadInfo:
        """L2/L3: followers read to the LEO, consumers to the HW (above it: empty, no error).

        `file_records`: return the records as FileRecords (slices of the segment files, sent unread) where
        the log can (what it already verified), bytes elsewhere.

        Truncate on fetch (L10 case H): a follower that sends the epoch of its last batch is checked
        against our epochs first. If we know no such epoch, or it ends before the fetch offset, the
        follower's log diverges from ours: the answer carries our (epoch, end offset) for it and no
        records (Kafka's validateFetchOffsetAndMaybeGetDivergingEpoch)."""
        self.check_leader(current_leader_epoch, fetch_only_from_leader)
        hw = self.high_watermark
        log_start = self.log_start_offset
        leo = self.log_end_offset
        diverging = self.diverging_epoch(fetch_offset, last_fetched_epoch)
        if diverging is not None:
            return LogReadInfo(b"", hw, log_start, leo, diverging)
        if fetch_offset < log_start or fetch_offset > leo:
            raise OffsetOutOfRangeError(
                f"{self.topic_partition}: fetch offset {fetch_offset} is outside [{log_start}, {leo}]"
            )
        upper_bound = leo if read_up_to_log_end else hw
        records: bytes | FileRecords = b""
        if fetch_offset < upper_bound:
            unread = (
                self.log.read_file_records(fetch_offset, max_bytes, upper_bound, min_one_message)
                if file_records
                else None
            )
            records = unread or self.log.read(fetch_offset, max_bytes, upper_bound, min_one_message)
        return LogReadInfo(records, hw, log_start, leo)

    # -- follower fetch state on the leader ----------------------------------------------------------

    def update_follower_fetch_state(
        self,
        replica_id: int,
        fetch_offset: int,
        follower_log_start_offset: int,
        fetch_time_ms: int,
        leader_end_offset: int,
        broker_epoch: int = -1,
    ) -> bool:
        """Record a follower's fetch (L4, L5); maybe expand the ISR and raise the HW. False: unknown replica.
        The caller refuses a fetch from an earlier incarnation first (`stale_replica_epoch`), with an answer
        that says so; it never reaches here."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None:
            return False
        old_leo = replica.log_end_offset
        replica.update_fetch_state(
            fetch_offset, follower_log_start_offset, fetch_time_ms, leader_end_offset, broker_epoch
        )
        self.maybe_expand_isr(replica, fetch_time_ms)
        if old_leo != replica.log_end_offset:
            self.maybe_increment_leader_hw(fetch_time_ms)
        return True

    def stale_replica_epoch(self, replica_id: int, broker_epoch: int) -> int | None:
        """The newer broker epoch this follower has fetched with, when `broker_epoch` is older (KIP-903): the
        fetch comes from an incarnation that has since restarted, late, and its offset says what a log that
        may be gone held. None when the fetch is current (or either epoch is unknown)."""
        replica = self.remote_replicas.get(replica_id)
        if replica is None or broker_epoch == -1 or broker_epoch >= replica.broker_epoch:
            return None
        return replica.broker_epoch

    def isr_with_epochs(self, isr: Iterable[int]) -> list[tuple[int, int]]:
        """(broker, broker epoch) for each member, as the leader last heard the followers fetch (-1 for
        itself and for a follower not heard from in this leadership): KIP-903's NewIsrWithEpochs."""
        return [
            (b, replica.broker_epoch if (replica := self.remote_replicas.get(b)) is not None else -1)
            for b in sorted(isr)
        ]

    def maybe_expand_isr(self, replica: Replica, now_ms: int) -> None:
        if self.pending_isr is not None or replica.broker_id in self.isr:
            return
        if not self.is_broker_eligible(replica.broker_id):
            # Fenced or shutting down: when the metadata lists it again, that is a change worth a proposal.
            self.refused_replicas.pop(replica.broker_id, None)
            return
        refused_at = self.refused_replicas.get(replica.broker_id)
        if refused_at is not None:
            if refused_at == (replica.broker_epoch, self.broker_state(replica.broker_id)):
                return
            # A new incarnation (its replica may be whole again), or a registration changed since (fenced
            # then unfenced, with or without a new epoch: the refusal may have been for the fencing).
            del self.refused_replicas[replica.broker_id]
        if replica.log_end_offset >= self.high_watermark and replica.log_end_offset >= self.leader_epoch_start_offset:
            self._propose_isr(self.isr | {replica.broker_id}, "expand", replica.broker_id)

    def out_of_sync_replicas(self, now_ms: int) -> set[int]:
        """L8: followers in the ISR whose LEO differs from ours and that were not caught up for too long."""
        leo = self.log_end_offset
        return {
            r.broker_id
            for r in self.remote_replicas.values()
            if r.broker_id in self.isr
            and r.log_end_offset != leo
            and now_ms - r.last_caught_up_time_ms > self.replica_lag_time_max_ms
        }

    def maybe_shrink_isr(self, now_ms: int) -> bool:
        if not self.is_leader or self.pending_isr is not None:
            return False
        out = self.out_of_sync_replicas(now_ms)
        if not out:
            return False
        self._propose_isr(self.isr - out, "shrink", *out)
        return True

    def _propose_isr(self, new_isr: frozenset[int], kind: str, *brokers: int) -> None:
        log.info("%s: proposing ISR %s (%s %s)", self.topic_partition, sorted(new_isr), kind, list(brokers))
        self.observer.isr_change_proposed(self.topic_partition, self.leader_epoch, self.isr, new_isr)
        if kind == "expand":
            self.pending_isr = PendingIsr(
                new_isr, {b: (epoch, self.broker_state(b)) for b, epoch in self.isr_with_epochs(new_isr)}
            )
        else:
            # A shrink takes effect for the HW only once committed; the maximal ISR is still the old one.
            self.pending_isr = PendingIsr(self.isr)
        if self.isr_sink is None:
            self.apply_committed_isr(self.leader_epoch, new_isr, self.partition_epoch + 1)
        else:
            self.isr_sink.propose(self, new_isr)

    def apply_committed_isr(self, leader_epoch: int, isr: Iterable[int], partition_epoch: int) -> None:
        """The controller accepted an ISR (ALTER_PARTITION response, or locally in standalone mode)."""
        if leader_epoch != self.leader_epoch:
            return  # a stale answer for an older leadership
        new_isr = frozenset(isr)
        if len(new_isr) < len(self.isr):
            self.counters.isr_shrinks += 1
        elif len(new_isr) > len(self.isr):
            self.counters.isr_expands += 1
        self.isr = new_isr
        self.partition_epoch = partition_epoch
        self.pending_isr = None

    def isr_change_rejected(self, error_code: int) -> None:
        """The controller refused our proposal: back to the committed ISR. After INELIGIBLE_REPLICA the
        followers it would have added are not proposed again until their broker epoch differs from the one
        the proposal named, their broker's registration in the metadata differs from what it was then, or a
        new partition state arrives; the refusal is logged once, here, instead of on every fetch."""
        pending, self.pending_isr = self.pending_isr, None
        if error_code != ErrorCode.INELIGIBLE_REPLICA or pending is None:
            return
        for broker_id in sorted(pending.proposed - self.isr):
            epoch, registration = pending.seen.get(broker_id, (-1, None))
            self.refused_replicas[broker_id] = (epoch, registration)
            log.info(
                "%s: the controller refused broker %d (broker epoch %d) for the ISR; not proposing it again "
                "until its broker epoch, its registration or the partition's state changes",
                self.topic_partition,
                broker_id,
                epoch,
            )

    # -- high watermark (L6) -------------------------------------------------------------------------

    def maybe_increment_leader_hw(self, now_ms: int) -> bool:
        """New HW = min LEO over the leader and every follower in the maximal ISR or caught up (L6) and
        eligible to join the ISR (KIP-841: not fenced, not shutting down).

        A follower whose LEO is still unknown (-1, no fetch since this leadership began) holds the HW
        where it is; the HW never goes backwards while we lead.
        """
        if not self.is_leader:
            return False
        leader_leo = self.log_end_offset
        new_hw = leader_leo
        maximal = self.maximal_isr
        for replica in self.remote_replicas.values():
            if replica.log_end_offset < new_hw and (
                replica.broker_id in maximal
                or (
                    replica.is_caught_up(leader_leo, now_ms, self.replica_lag_time_max_ms)
                    and self.is_broker_eligible(replica.broker_id)
                )
            ):
                new_hw = replica.log_end_offset
        if new_hw > self.high_watermark:
            return bool(self.log.maybe_increment_high_watermark(new_hw))
        return False

    # -- OffsetsForLeaderEpoch and ListOffsets (L14) -------------------------------------------------

    def last_offset_for_leader_epoch(
        self, current_leader_epoch: int, leader_epoch: int, fetch_only_from_leader: bool
    ) -> tuple[int, int]:
        self.check_leader(current_leader_epoch, fetch_only_from_leader)
        epoch, end = self.log.end_offset_for_epoch(leader_epoch)
        if epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return int(epoch), int(end)

    def fetch_offset_for_timestamp(
        self, timestamp: int, current_leader_epoch: int, isolation_high_watermark: bool, fetch_only_from_leader: bool
    ) -> tuple[int, int]:
        """(leader epoch, offset) for EARLIEST or LATEST; consumers see the HW as the latest offset.

        The epoch is that of the records at the offset, as Kafka answers: for EARLIEST the epoch of the batch
        at the log start offset (from the epoch cache), for LATEST the current leader epoch (which the
        leader's epoch cache holds from the moment it leads).
        """
        self.check_leader(current_leader_epoch, fetch_only_from_leader)
        if timestamp == EARLIEST_TIMESTAMP:
            log_start = self.log_start_offset
            return self.log.epoch_cache.epoch_for_offset(log_start), log_start
        if isolation_high_watermark:
            # testMonotonicOffsetsAfterLeaderChange: until the HW reaches the epoch start, a consumer
            # could see offsets go backwards; Kafka answers OFFSET_NOT_AVAILABLE meanwhile.
            if self.is_leader and self.high_watermark < self.leader_epoch_start_offset:
                raise KafkaError(
                    f"{self.topic_partition}: high watermark {self.high_watermark} has not reached the "
                    f"current epoch's start offset {self.leader_epoch_start_offset} yet",
                    code=ErrorCode.OFFSET_NOT_AVAILABLE,
                )
            return self.leader_epoch, self.high_watermark
        return self.leader_epoch, self.log_end_offset

    def fetch_offset_by_timestamp(
        self, timestamp: int, current_leader_epoch: int, isolation_high_watermark: bool, fetch_only_from_leader: bool
    ) -> tuple[int, int, int]:
        """(timestamp, leader epoch, offset) of the earliest record whose timestamp is ≥ `timestamp` (≥ 0),
        the epoch being that of its batch; (-1, -1, -1) when there is none, or when it is not yet readable
        (at or past the high watermark for a consumer, past the log end otherwise), as Kafka's
        Partition.fetchOffsetForTimestamp answers."""
        self.check_leader(current_leader_epoch, fetch_only_from_leader)
        found = self.log.fetch_offset_by_timestamp(timestamp)
        last_fetchable = self.high_watermark if isolation_high_watermark else self.log_end_offset
        if found is None or found[1] >= last_fetchable:
            return -1, NO_LEADER_EPOCH, -1
        record_timestamp, offset, epoch = found
        return record_timestamp, epoch if epoch >= 0 else NO_LEADER_EPOCH, offset

    # -- metrics --------------------------------------------------------------------------------------

    @property
    def under_replicated(self) -> bool:
        return self.is_leader and len(self.isr) < len(self.assignment)

    @property
    def under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.min_insync_replicas
