"""A member of the metadata quorum: Kafka's KafkaRaftClient, a pull-based Raft (KIP-595, KIP-630, KIP-996).

How this works
--------------
Every controller is a *voter*; every broker is an *observer* that replicates the log but never votes or
counts towards a commit. Each node is in one role at a time:

    unattached ──election timeout──▶ prospective ──majority of pre-votes──▶ candidate ──majority──▶ leader
        ▲  │                            │  ▲                                   │                        │
        │  └─BEGIN_QUORUM_EPOCH / a FETCH answer names the leader─▶ follower ◀──┘ (a leader found)     │
        │                                                           │  fetch timeout: prospective     │
        └──────────── a higher epoch (any request or answer) ◀──────┴── resigned ◀── lost its quorum ──┘

* **Epochs and votes.** A candidate bumps the epoch and votes for itself; a voter gives one vote per epoch,
  to a candidate whose log is at least as up to date as its own (last epoch, then log end offset), which
  is what makes a leader hold every committed record. The epoch and the vote are written durably
  (quorum_state.py) before the node acts on them. Any message naming a higher epoch moves a node to it.
* **Pre-vote** (KIP-996). Before bumping its epoch a voter asks whether it *would* win; voters that still
  hear from a leader say no. So a voter cut off from the quorum does not, on its return, force the working
  leader out with a higher epoch.
* **Replication is pulled.** Followers and observers FETCH from the leader with their log end and the epoch
  of their last batch; the leader answers records, its high watermark, a diverging epoch (the follower
  cuts its log by the data plane's rule, fetcher/truncation.py, and fetches again) or a snapshot to load
  first (FETCH_SNAPSHOT). A voter's fetch offset is its durable log end: followers fsync before they fetch
  again, and the leader fsyncs its own appends before counting them.
* **Commit.** The high watermark is the largest offset a majority of voters hold, and it moves only once
  it passes the start of the leader's epoch: a new leader first appends a control batch (its LeaderChange)
  and commits nothing, not even older records, until a majority holds that batch (Raft's rule that a leader
  commits only entries of its own term, which keeps a record it exposed from being lost by a later leader).
  The listener gets committed batches only, in order, once each; committed records are never truncated.
* **Liveness.** A follower that has not fetched successfully for `fetch.timeout.ms` starts a pre-vote; a
  leader that has not been fetched from by a majority for 1.5 times that resigns (check quorum), so a leader
  cut off from the others stops acting as one. A leader shutting down resigns with END_QUORUM_EPOCH, naming
  its most caught-up followers first; the first starts an election at once.

Everything runs on one event loop: requests are handled as they arrive (`handle_*`), and one task
(`_run`) drives the timers and the node's own fetching. Time comes from the injected `Time`, the network
from the injected `Transport`, randomness from the injected `random.Random`, so the simulator runs it as is.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from protocol.errors import ErrorCode
from protocol.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    QuorumReplicaState,
    VoteRequest,
    VoteResponse,
)
from protocol.transport import NETWORK_ERRORS, Transport
from raft.quorum_config import QuorumConfig
from raft.quorum_state import ElectionState, QuorumStateStore
from raft.replicated_log import (
    METADATA_PARTITION,
    METADATA_TOPIC,
    Diverging,
    LogBatch,
    OffsetAndEpoch,
    ReplicatedLog,
    Snapshot,
    SnapshotNeeded,
)
from server_common.replication_observer import NO_OBSERVER, ReplicationObserver
from server_common.time import Time
from storage.truncation import offset_truncation_state

log = logging.getLogger(__name__)

FETCH_MAX_BYTES = 1 << 20
SNAPSHOT_CHUNK_BYTES = 1 << 20
# `_last_leader_contact_ms` of a voter that has not heard its leader answer (gone, resigned, or not yet): it grants
# pre-votes, and runs once its fetch deadline passes.
NO_LEADER_CONTACT_MS = -(2**62)


class Role(enum.StrEnum):
    UNATTACHED = "unattached"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"


class NotLeaderError(Exception):
    """An append or a wait for a commit on a node that is not (or no longer) the leader of its epoch."""


class CommittedTruncationError(Exception):
    """The leader told this node to cut records it had already seen committed: Raft's safety is broken."""


class RaftListener(Protocol):
    def handle_commit(self, batches: list[LogBatch]) -> None:
        """Committed batches, in offset order, each once (control batches included: skip them)."""

    def handle_load_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the state with the snapshot's; committed batches after its end offset follow."""

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        """The leader (None: unknown) of `epoch`, as this node now knows it."""


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one replica (Kafka's ReplicaState)."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    sent_high_watermark: int = -1  # the HW the last answer told it: a fetch with nothing new but this waits


class RaftClient:
    def __init__(
        self,
        node_id: int,
        config: QuorumConfig,
        raft_log: ReplicatedLog,
        state_store: QuorumStateStore,
        time: Time,
        transport: Transport,
        rng: random.Random,
        listener: RaftListener,
        observer: ReplicationObserver = NO_OBSERVER,
    ) -> None:
        self.node_id = node_id
        self._observer = observer  # told of each election won and each commit (the simulator's checker)
        self.config = config
        self.log = raft_log
        self._store = state_store
        self._time = time
        self._transport = transport
        self._rng = rng
        self._listener = listener
        self.voters = frozenset(config.voters)
        self.is_voter = node_id in self.voters

        self.role = Role.UNATTACHED
        self.epoch = 0
        self.leader_id: int | None = None
        self.voted_id: int | None = None
        self.high_watermark = -1  # -1: not known yet
        self._delivered_offset = 0  # the next offset the listener gets
        self._delivered_epoch = 0
        self._bytes_since_snapshot = 0

        now = time.milliseconds()
        self._election_deadline_ms = now
        self._fetch_deadline_ms = now
        self._last_leader_contact_ms = NO_LEADER_CONTACT_MS
        self._retry_at_ms = 0
        self._found_gone: tuple[int, int] | None = None  # the (epoch, leader) a refused FETCH showed gone
        self._votes_granted: set[int] = set()
        self._votes_rejected: set[int] = set()
        # Leader state.
        self._epoch_start_offset = -1
        self._progress: dict[int, ReplicaProgress] = {}
        self._observers: dict[int, ReplicaProgress] = {}
        self._begin_acked: set[int] = set()
        self._check_quorum_deadline_ms = 0
        self._commit_waiters: list[tuple[int, asyncio.Future[None]]] = []
        # Observer state: the voter asked while no leader is known.
        self._bootstrap_index = rng.randrange(len(self.voters)) if self.voters else 0

        self._changed = asyncio.Event()
        self._fetch_wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._main: asyncio.Task[None] | None = None
        self.elections_won = 0
        self.on_commit: Callable[[int], None] = lambda high_watermark: None  # metrics: the HW moved
        # A follower's or observer's view of the leader: the HW it last reported, and whether this node has
        # once fetched up to it (`caught_up`); FETCH rounds sent and answered (`catch_up`).
        self.leader_high_watermark = -1
        self._caught_up = False
        self.on_caught_up: Callable[[], None] = lambda: None
        self._delivered = asyncio.Event()  # pulsed each time committed batches are delivered
        self.last_fetch_answer_ms = -1

    # -- reading -----------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def epoch_start_offset(self) -> int:
        """Where the leader's epoch starts (its LeaderChange batch); -1 when not leading."""
        return self._epoch_start_offset if self.is_leader else -1

    @property
    def delivered_offset(self) -> int:
        """The next offset the listener will get: every committed record below it has been delivered."""
        return self._delivered_offset

    def caught_up(self) -> bool:
        """Whether this node has once held every record its leader had committed when it answered (a
        leader: always). A broker publishes nothing before (broker/metadata_publisher.py)."""
        return self._caught_up or self.is_leader

    async def wait_delivered(self, offset: int, timeout_ms: int) -> bool:
        """Wait until every committed record below `offset` has been delivered to the listener (a leader's
        high watermark, asked by the caller: DESCRIBE_QUORUM, on a connection of its own, since this node's
        own connection to the leader carries its parked FETCH). False if that takes longer than `timeout_ms`."""
        if self._delivered_offset >= offset:
            return True
        timer = asyncio.ensure_future(self._time.sleep(timeout_ms / 1000.0))
        try:
            while self._delivered_offset < offset:
                delivered = asyncio.ensure_future(self._delivered.wait())
                try:
                    await asyncio.wait({delivered, timer}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    delivered.cancel()
                if timer.done() and self._delivered_offset < offset:
                    return False
            return True
        finally:
            timer.cancel()

    @property
    def snapshot_due(self) -> bool:
        return self._bytes_since_snapshot >= self.config.snapshot_bytes

    def describe(self) -> DescribeQuorumResponse:
        """DESCRIBE_QUORUM: the leader answers every replica's progress; another node what it knows."""
        now = self._time.milliseconds()

        def state(replica_id: int, p: ReplicaProgress) -> QuorumReplicaState:
            return QuorumReplicaState(replica_id, p.end_offset, p.last_fetch_ms, p.last_caught_up_ms)

        if not self.is_leader:
            return DescribeQuorumResponse(
                error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                error_message=f"node {self.node_id} is not the quorum's leader ({self.role}); the leader is "
                f"{self.leader_id if self.leader_id is not None else 'unknown'}",
                leader_id=-1 if self.leader_id is None else self.leader_id,
                leader_epoch=self.epoch,
                high_watermark=self.high_watermark,
                current_voters=[QuorumReplicaState(self.node_id, self.log.log_end_offset, -1, -1)],
                node_id=self.node_id,
                state=str(self.role),
            )
        self._progress[self.node_id].last_fetch_ms = now
        self._progress[self.node_id].last_caught_up_ms = now
        return DescribeQuorumResponse(
            leader_id=self.node_id,
            leader_epoch=self.epoch,
            high_watermark=self.high_watermark,
            current_voters=[state(v, self._progress[v]) for v in sorted(self.voters)],
            observers=[state(o, p) for o, p in sorted(self._observers.items())],
            node_id=self.node_id,
            state=str(self.role),
        )

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Load the newest snapshot into the listener, restore the persisted election state, and start."""
        snapshot = self.log.read_snapshot()
        if snapshot is not None:
            self._delivered_offset = snapshot.end_offset
            self._delivered_epoch = snapshot.epoch
            self.high_watermark = snapshot.end_offset
            self.log.update_high_watermark(snapshot.end_offset)
            self._listener.handle_load_snapshot(snapshot)
        else:
            self._delivered_offset = self.log.log_start_offset
        state = self._store.read()
        self.epoch = state.epoch
        self.voted_id = state.voted_id
        now = self._time.milliseconds()
        if state.leader_id is not None and state.leader_id == self.node_id:
            # We led this epoch before the restart; what followers held is forgotten, so we cannot lead it
            # again: wait for the next election.
            self.role, self.leader_id = Role.RESIGNED, self.node_id
            self._election_deadline_ms = now + self._random_election_timeout_ms()
        elif state.leader_id is not None:
            self.role, self.leader_id = Role.FOLLOWER, state.leader_id
            self._fetch_deadline_ms = now + self.config.fetch_timeout_ms
        else:
            self.role, self.leader_id = Role.UNATTACHED, None
            self._election_deadline_ms = now + self._random_election_timeout_ms()
        if self.is_voter and self.voters == {self.node_id} and self.role is not Role.RESIGNED:
            self._election_deadline_ms = now  # alone: elect ourselves at once
        log.info(
            "node %d starts as %s in epoch %d (voters %s)", self.node_id, self.role, self.epoch, sorted(self.voters)
        )
        self._main = asyncio.ensure_future(self._run())
        self._main.set_name(f"raft-{self.node_id}")

    async def close(self, graceful: bool = True) -> None:
        """Stop. A leader shutting down gracefully resigns first (END_QUORUM_EPOCH), so the next leader is
        elected at once instead of after a fetch timeout."""
        if graceful and self.is_leader and len(self.voters) > 1:
            self._resign("shutting down")
            try:
                await asyncio.wait_for(self._send_end_quorum_epoch(), self.config.request_timeout_ms / 1000.0)
            except NETWORK_ERRORS:
                pass
        self._fail_commit_waiters()
        tasks = [t for t in [self._main, *self._tasks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    # -- the leader's side: appends and commits ------------------------------------------------------

    def append(self, values: list[bytes]) -> int:
        """Append one batch of records in the leader's epoch, durably; returns its last offset."""
        if not self.is_leader:
            raise NotLeaderError(f"node {self.node_id} is not the leader ({self.role}, epoch {self.epoch})")
        info = self.log.append_as_leader(values, self.epoch)
        self.log.flush()
        self._progress[self.node_id].end_offset = self.log.log_end_offset
        # Not committed inside append, even where this voter alone is a majority: the caller (the
        # controller) replays what it appended once append returns, and a commit delivered to it before
        # that replayed the same records twice (a quorum of one failed its first registration).
        asyncio.get_running_loop().call_soon(self._advance_if_leading, self.epoch)
        self._wake_fetches()
        return info.last_offset

    def _advance_if_leading(self, epoch: int) -> None:
        if self.is_leader and self.epoch == epoch:
            self._maybe_advance_leader_hw()

    async def wait_committed(self, offset: int) -> None:
        """Return once `offset` is committed; NotLeaderError if this node stops leading first (the record
        may still be committed later by another leader, or truncated)."""
        if self.high_watermark > offset:
            return
        if not self.is_leader:
            raise NotLeaderError(f"node {self.node_id} no longer leads")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._commit_waiters.append((offset, future))
        await future

    def write_snapshot(self, values: list[bytes]) -> Snapshot:
        """Snapshot the listener's state as of everything delivered (`values` rebuild it)."""
        snapshot = Snapshot(self._delivered_offset, self._delivered_epoch, values)
        self.log.write_snapshot(snapshot)
        self._bytes_since_snapshot = 0
        return snapshot

    def _maybe_advance_leader_hw(self) -> None:
        offsets = sorted((self._progress[v].end_offset for v in self.voters), reverse=True)
        majority_offset = offsets[len(self.voters) // 2]
        # Raft's rule: nothing is committed until a record of the leader's own epoch is.
        if majority_offset > self._epoch_start_offset and majority_offset > self.high_watermark:
            self._set_high_watermark(majority_offset)
            self._wake_fetches()

    def _set_high_watermark(self, high_watermark: int) -> None:
        self.high_watermark = high_watermark
        self.log.update_high_watermark(high_watermark)
        self._observer.metadata_committed(high_watermark)
        still_waiting = []
        for offset, future in self._commit_waiters:
            if offset < high_watermark:
                if not future.done():
                    future.set_result(None)
            else:
                still_waiting.append((offset, future))
        self._commit_waiters = still_waiting
        self._deliver_committed()
        self.on_commit(high_watermark)

    def _deliver_committed(self) -> None:
        end = min(self.high_watermark, self.log.log_end_offset)
        if end <= self._delivered_offset:
            return
        batches = list(self.log.batches(self._delivered_offset, end))
        if not batches:
            return
        self._delivered_offset = batches[-1].last_offset + 1
        self._delivered_epoch = batches[-1].epoch
        self._bytes_since_snapshot += sum(len(v) for b in batches for v in b.values)
        self._listener.handle_commit(batches)
        delivered, self._delivered = self._delivered, asyncio.Event()
        delivered.set()

    def _fail_commit_waiters(self) -> None:
        waiters, self._commit_waiters = self._commit_waiters, []
        for _, future in waiters:
            if not future.done():
                future.set_exception(NotLeaderError(f"node {self.node_id} stopped leading epoch {self.epoch}"))

    # -- state transitions -------------------------------------------------------------------------

    def _become(self, role: Role, epoch: int, leader_id: int | None, voted_id: int | None) -> None:
        """Persist (epoch, leader, vote) first, then act on it."""
        if (epoch, leader_id, voted_id) != (self.epoch, self.leader_id, self.voted_id):
            self._store.write(ElectionState(epoch, leader_id, voted_id))
        was_leader = self.is_leader
        leader_changed = (epoch, leader_id) != (self.epoch, self.leader_id)
        if role is not self.role or leader_changed:
            log.info(
                "node %d: %s epoch %d -> %s epoch %d (leader %s)",
                self.node_id,
                self.role,
                self.epoch,
                role,
                epoch,
                leader_id,
            )
        self.role, self.epoch, self.leader_id, self.voted_id = role, epoch, leader_id, voted_id
        if was_leader and role is not Role.LEADER:
            self._fail_commit_waiters()
            self._epoch_start_offset = -1
        self._votes_granted, self._votes_rejected = set(), set()
        self._changed.set()
        self._wake_fetches()
        if leader_changed:
            self._listener.handle_leader_change(leader_id, epoch)

    def _to_unattached(self, epoch: int, voted_id: int | None = None) -> None:
        self._become(Role.UNATTACHED, epoch, None, voted_id)
        self._election_deadline_ms = self._time.milliseconds() + self._random_election_timeout_ms()

    def _to_follower(self, epoch: int, leader_id: int) -> None:
        # Kafka's QuorumState.transitionToFollower refuses the same: a node never follows itself.
        assert leader_id != self.node_id, f"node {self.node_id} cannot follow itself (epoch {epoch})"
        voted = self.voted_id if epoch == self.epoch else None
        self._become(Role.FOLLOWER, epoch, leader_id, voted)
        self._fetch_deadline_ms = self._time.milliseconds() + self.config.fetch_timeout_ms
        # Following is not hearing: until a FETCH of ours is answered, this voter grants pre-votes (Kafka's
        # FollowerState.hasFetchedFromLeader). Counted as contact, a rejected pre-vote that named a leader
        # was contact enough to reject the next voter's, whose rejection made that one follow again: two
        # voters kept each other following a leader neither heard from (simulator seed 45).
        self._last_leader_contact_ms = NO_LEADER_CONTACT_MS
        self._found_gone = None  # counting on it again: the next refused FETCH starts a new random delay

    def _to_prospective(self) -> None:
        """Ask for pre-votes for epoch + 1 without changing anything durable."""
        self.role = Role.PROSPECTIVE
        self._votes_granted, self._votes_rejected = {self.node_id}, set()
        self._election_deadline_ms = self._time.milliseconds() + self._random_election_timeout_ms()
        self._changed.set()
        request = VoteRequest(
            candidate_id=self.node_id,
            candidate_epoch=self.epoch + 1,
            last_offset_epoch=self.log.last_fetched_epoch,
            last_offset=self.log.log_end_offset,
            pre_vote=True,
        )
        self._request_votes(request)

    def _to_candidate(self) -> None:
        self._become(Role.CANDIDATE, self.epoch + 1, None, self.node_id)
        self._votes_granted = {self.node_id}
        self._election_deadline_ms = self._time.milliseconds() + self._random_election_timeout_ms()
        request = VoteRequest(
            candidate_id=self.node_id,
            candidate_epoch=self.epoch,
            last_offset_epoch=self.log.last_fetched_epoch,
            last_offset=self.log.log_end_offset,
        )
        self._request_votes(request)

    def _to_leader(self) -> None:
        # The leader's state first: the listener hears of the new leader inside _become and may ask for it.
        now = self._time.milliseconds()
        self._progress = {v: ReplicaProgress() for v in self.voters}
        self._observers = {}
        self._begin_acked = {self.node_id}
        self._epoch_start_offset = self.log.log_end_offset
        self._check_quorum_deadline_ms = now + self.config.check_quorum_timeout_ms
        self._progress[self.node_id].last_fetch_ms = now
        self._become(Role.LEADER, self.epoch, self.node_id, self.node_id)
        self.elections_won += 1
        self._observer.metadata_leader_elected(self.epoch, self.node_id, self._epoch_start_offset)
        # The LeaderChange control batch: the first record of our epoch. Until a majority holds it nothing
        # is committed, not even the records of earlier epochs we hold.
        marker = f'{{"leader_id": {self.node_id}, "voters": {sorted(self.voters)}}}'.encode()
        self.log.append_as_leader([marker], self.epoch, control=True)
        self.log.flush()
        self._progress[self.node_id].end_offset = self.log.log_end_offset
        log.info("node %d leads epoch %d from offset %d", self.node_id, self.epoch, self._epoch_start_offset)
        self._maybe_advance_leader_hw()
        for voter in sorted(self.voters - {self.node_id}):
            self._spawn(self._begin_quorum_epoch(voter, self.epoch), f"begin-epoch-{voter}")

    def _resign(self, why: str) -> None:
        log.warning("node %d resigns the leadership of epoch %d: %s", self.node_id, self.epoch, why)
        was_leader = self.is_leader
        self.role = Role.RESIGNED
        if was_leader:
            self._fail_commit_waiters()
        self._election_deadline_ms = self._time.milliseconds() + self._random_election_timeout_ms()
        self._changed.set()
        self._wake_fetches()

    def _learn_leader(self, epoch: int, leader_id: int) -> bool:
        """A message told us of `leader_id` leading `epoch` (-1: no known leader in that epoch). True if
        that changed our view."""
        if epoch > self.epoch:
            # (Ourselves named the leader of a later epoch than we know: our quorum-state was lost. We do not
            # lead it now either way.)
            if leader_id >= 0 and leader_id in self.voters and leader_id != self.node_id:
                self._to_follower(epoch, leader_id)
            elif self.is_voter:
                self._to_unattached(epoch)
            else:
                self._become(Role.UNATTACHED, epoch, None, None)
            return True
        if epoch == self.epoch and leader_id >= 0 and self.leader_id is None and leader_id != self.node_id:
            if self.role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.FOLLOWER):
                self._to_follower(epoch, leader_id)
                return True
        return False

    def _random_election_timeout_ms(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self._rng.randrange(max(timeout, 1))

    def _election_backoff_ms(self) -> int:
        return self._rng.randrange(max(self.config.election_backoff_max_ms, 1))

    # -- the main loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._changed.clear()
            wait_ms = self._poll(self._time.milliseconds())
            if wait_ms is None:
                await self._fetch()
            else:
                await self._wait_for_change(wait_ms)

    def _poll(self, now: int) -> int | None:
        """Act on expired timers; None when this node should fetch now, else how long it may wait."""
        role = self.role
        if role is Role.LEADER:
            return self._poll_leader(now)
        if role is Role.FOLLOWER:
            if self.is_voter and now >= self._fetch_deadline_ms:
                if self._last_leader_contact_ms == NO_LEADER_CONTACT_MS:
                    log.info("node %d: leader %s is gone or never answered", self.node_id, self.leader_id)
                else:
                    log.info(
                        "node %d heard nothing from leader %s for %d ms",
                        self.node_id,
                        self.leader_id,
                        now - self._last_leader_contact_ms,
                    )
                self._to_prospective()
                return 0
            return None
        if not self.is_voter:
            return None if now >= self._retry_at_ms else self._retry_at_ms - now  # observers look for a leader
        if role in (Role.UNATTACHED, Role.RESIGNED):
            if now >= self._election_deadline_ms:
                self._to_prospective()
                return 0
            return self._election_deadline_ms - now
        if role is Role.PROSPECTIVE:
            if len(self._votes_granted) >= self.config.majority:
                self._to_candidate()
                return 0
            if now >= self._election_deadline_ms:
                # No majority (voters that still hear a leader, or no answer): follow the leader we had
                # again, or back off and ask again.
                if self.leader_id is not None and self.leader_id != self.node_id:
                    self.role = Role.FOLLOWER
                    self._fetch_deadline_ms = now + self.config.fetch_timeout_ms
                    self._found_gone = None
                else:
                    self.role = Role.UNATTACHED
                    self._election_deadline_ms = now + self._election_backoff_ms()
                return 0
            return self._election_deadline_ms - now
        if role is Role.CANDIDATE:
            if len(self._votes_granted) >= self.config.majority:
                self._to_leader()
                return 0
            if now >= self._election_deadline_ms or self._vote_lost:
                log.info("node %d lost the election of epoch %d", self.node_id, self.epoch)
                self.role = Role.UNATTACHED  # keeps our vote for ourselves in this epoch
                self._election_deadline_ms = now + self._election_backoff_ms()
                return 0
            return self._election_deadline_ms - now
        raise AssertionError(f"unknown role {role}")

    @property
    def _vote_lost(self) -> bool:
        """Kafka's isVoteRejected: the votes granted and those still to come cannot make a majority."""
        return len(self.voters) - len(self._votes_rejected) < self.config.majority

    def _poll_leader(self, now: int) -> int:
        if now >= self._check_quorum_deadline_ms:
            horizon = now - self.config.check_quorum_timeout_ms
            heard = {v for v in self.voters if self._progress[v].last_fetch_ms >= horizon} | {self.node_id}
            if len(heard) < self.config.majority:
                self._resign(f"no FETCH from a majority of voters for {self.config.check_quorum_timeout_ms} ms")
                self._spawn(self._send_end_quorum_epoch(), "end-epoch")
                return 0
            # The next check: when the oldest of the majority's fetches would fall out of the window.
            times = sorted((self._progress[v].last_fetch_ms for v in heard), reverse=True)
            self._check_quorum_deadline_ms = times[self.config.majority - 1] + self.config.check_quorum_timeout_ms
        return max(self._check_quorum_deadline_ms - now, 1)

    async def _wait_for_change(self, wait_ms: int) -> None:
        if wait_ms <= 0 or self._changed.is_set():
            return
        changed = asyncio.ensure_future(self._changed.wait())
        timer = asyncio.ensure_future(self._time.sleep(wait_ms / 1000.0))
        try:
            await asyncio.wait({changed, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            timer.cancel()

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(f"raft-{self.node_id}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            task.get_loop().call_exception_handler(
                {"message": f"quorum task {task.get_name()} failed", "exception": task.exception(), "task": task}
            )

    # -- elections: the candidate's side -------------------------------------------------------------

    def _request_votes(self, request: VoteRequest) -> None:
        for voter in sorted(self.voters - {self.node_id}):
            self._spawn(self._request_vote(voter, request), f"vote-{voter}")

    async def _request_vote(self, voter: int, request: VoteRequest) -> None:
        role = Role.PROSPECTIVE if request.pre_vote else Role.CANDIDATE
        epoch = self.epoch
        try:
            response: VoteResponse = await self._transport.send(voter, request, self.config.request_timeout_ms)
        except NETWORK_ERRORS:
            if self.role is role and self.epoch == epoch:
                # No answer, and none will come: a vote is asked once per election. Counted as a no, so a
                # candidate that every live voter turned down backs off at once instead of waiting out its
                # election timeout: after a leader's death with both followers running in one epoch (a
                # split vote), the dead leader's refused connection is the no that ends the election.
                self._votes_rejected.add(voter)
                self._changed.set()
            return
        if response.leader_epoch > self.epoch:
            self._learn_leader(response.leader_epoch, response.leader_id)
            return
        if self.role is not role or self.epoch != epoch:
            return  # an answer to an election we have left
        if response.error_code == ErrorCode.NONE and response.vote_granted:
            self._votes_granted.add(voter)
        else:
            self._votes_rejected.add(voter)
            if (
                request.pre_vote
                and response.leader_id >= 0
                and response.leader_id != self.node_id
                and response.leader_epoch == self.epoch
            ):
                # A voter still hears a leader of our epoch: follow it again. Not when that leader is us (we
                # resigned it, and the voter has not yet noticed): a node that followed itself fetched from
                # no one, answered every FETCH NOT_LEADER as the leader its voters knew, and the quorum
                # stayed without a leader for good (simulator seed 45 of the controller sweep).
                self._to_follower(self.epoch, response.leader_id)
        self._changed.set()

    # -- elections: the voter's side ----------------------------------------------------------------

    def _log_up_to_date(self, last_epoch: int, last_offset: int) -> bool:
        ours = self.log.end_offset_and_epoch()
        return (last_epoch, last_offset) >= (ours.epoch, ours.offset)

    def _vote_answer(self, granted: bool, code: ErrorCode = ErrorCode.NONE, message: str | None = None) -> VoteResponse:
        return VoteResponse(
            error_code=code,
            error_message=message,
            leader_id=-1 if self.leader_id is None else self.leader_id,
            leader_epoch=self.epoch,
            vote_granted=granted,
        )

    def handle_vote(self, request: VoteRequest) -> VoteResponse:
        if not self.is_voter or request.candidate_id not in self.voters:
            return self._vote_answer(
                False, ErrorCode.INCONSISTENT_VOTER_SET, f"node {request.candidate_id} or {self.node_id} is no voter"
            )
        if request.candidate_epoch < self.epoch:
            return self._vote_answer(False)
        up_to_date = self._log_up_to_date(request.last_offset_epoch, request.last_offset)
        now = self._time.milliseconds()
        if request.pre_vote:
            hears_leader = self.is_leader or (
                self.role is Role.FOLLOWER and now - self._last_leader_contact_ms < self.config.fetch_timeout_ms
            )
            return self._vote_answer(up_to_date and not hears_leader)
        if request.candidate_epoch > self.epoch:
            self._to_unattached(request.candidate_epoch)
        if self.role in (Role.LEADER, Role.RESIGNED, Role.CANDIDATE, Role.FOLLOWER):
            return self._vote_answer(False)  # a leader is known, or we voted for ourselves, in this epoch
        if self.voted_id is not None:
            return self._vote_answer(self.voted_id == request.candidate_id)
        if not up_to_date:
            return self._vote_answer(False)
        self._become(Role.UNATTACHED, self.epoch, None, request.candidate_id)
        self._election_deadline_ms = now + self._random_election_timeout_ms()
        return self._vote_answer(True)

    def handle_begin_quorum_epoch(self, request: BeginQuorumEpochRequest) -> BeginQuorumEpochResponse:
        if request.leader_id not in self.voters:
            return self._begin_answer(ErrorCode.INCONSISTENT_VOTER_SET, f"node {request.leader_id} is no voter")
        if request.leader_epoch < self.epoch:
            return self._begin_answer(ErrorCode.FENCED_LEADER_EPOCH, f"epoch {request.leader_epoch} < {self.epoch}")
        if request.leader_epoch == self.epoch and self.is_leader:
            return self._begin_answer(ErrorCode.INVALID_REQUEST, f"node {self.node_id} leads epoch {self.epoch}")
        if request.leader_id == self.node_id:
            return self._begin_answer(
                ErrorCode.INVALID_REQUEST, f"node {self.node_id} does not lead epoch {self.epoch}"
            )
        if not (
            self.role is Role.FOLLOWER and self.leader_id == request.leader_id and self.epoch == request.leader_epoch
        ):
            self._to_follower(request.leader_epoch, request.leader_id)
        return self._begin_answer(ErrorCode.NONE)

    def _begin_answer(self, code: ErrorCode, message: str | None = None) -> BeginQuorumEpochResponse:
        return BeginQuorumEpochResponse(code, message, -1 if self.leader_id is None else self.leader_id, self.epoch)

    def handle_end_quorum_epoch(self, request: EndQuorumEpochRequest) -> EndQuorumEpochResponse:
        answer = EndQuorumEpochResponse
        if request.leader_epoch < self.epoch:
            return answer(
                ErrorCode.FENCED_LEADER_EPOCH, None, -1 if self.leader_id is None else self.leader_id, self.epoch
            )
        if request.leader_epoch > self.epoch:
            self._to_unattached(request.leader_epoch)
        if self.leader_id == request.leader_id and self.role is Role.FOLLOWER:
            # The leader is gone: stop counting on it (so we grant pre-votes) and run for election after a
            # backoff that grows with our place among its preferred successors.
            successors = list(request.preferred_successors)
            position = successors.index(self.node_id) if self.node_id in successors else len(successors)
            backoff = (
                0
                if position == 0
                else min(self.config.election_backoff_max_ms, self.config.retry_backoff_ms * 2**position)
                + self._rng.randrange(max(self.config.retry_backoff_ms, 1))
            )
            self._last_leader_contact_ms = NO_LEADER_CONTACT_MS
            self._fetch_deadline_ms = self._time.milliseconds() + backoff
            self._changed.set()
        return answer(ErrorCode.NONE, None, -1 if self.leader_id is None else self.leader_id, self.epoch)

    # -- the leader's messages ------------------------------------------------------------------------

    async def _begin_quorum_epoch(self, voter: int, epoch: int) -> None:
        """Tell `voter` we lead `epoch`, until it acknowledges or fetches from us (or we stop leading)."""
        while self.is_leader and self.epoch == epoch and voter not in self._begin_acked:
            try:
                response: BeginQuorumEpochResponse = await self._transport.send(
                    voter, BeginQuorumEpochRequest(self.node_id, epoch), self.config.request_timeout_ms
                )
            except NETWORK_ERRORS:
                await self._time.sleep(self.config.request_timeout_ms / 1000.0 / 4)
                continue
            if response.leader_epoch > self.epoch:
                self._learn_leader(response.leader_epoch, response.leader_id)
                return
            if response.error_code == ErrorCode.NONE:
                self._begin_acked.add(voter)
                return
            await self._time.sleep(self.config.retry_backoff_ms / 1000.0)

    async def _send_end_quorum_epoch(self) -> None:
        epoch = self.epoch
        others = sorted(
            self.voters - {self.node_id},
            key=lambda v: (-self._progress.get(v, ReplicaProgress()).end_offset, v),
        )
        request = EndQuorumEpochRequest(self.node_id, epoch, preferred_successors=others)

        async def tell(voter: int) -> None:
            try:
                await self._transport.send(voter, request, self.config.request_timeout_ms)
            except NETWORK_ERRORS:
                pass

        await asyncio.gather(*(tell(v) for v in others))

    # -- FETCH: the leader's side -------------------------------------------------------------------------

    def _fetch_error(self, code: ErrorCode, message: str) -> FetchResponse:
        return FetchResponse(
            partitions=[
                FetchPartitionResponse(
                    METADATA_TOPIC,
                    METADATA_PARTITION,
                    error_code=code,
                    error_message=message,
                    current_leader_id=-1 if self.leader_id is None else self.leader_id,
                    current_leader_epoch=self.epoch,
                )
            ]
        )

    async def handle_fetch(self, request: FetchRequest) -> FetchResponse:
        if len(request.partitions) != 1 or request.partitions[0].topic != METADATA_TOPIC:
            return FetchResponse(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"a quorum FETCH names one partition, {METADATA_TOPIC}-{METADATA_PARTITION}",
            )
        wanted = request.partitions[0]
        if wanted.partition != METADATA_PARTITION:
            return self._fetch_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {wanted.partition}")
        if wanted.current_leader_epoch < self.epoch:
            return self._fetch_error(
                ErrorCode.FENCED_LEADER_EPOCH, f"epoch {wanted.current_leader_epoch} < {self.epoch}"
            )
        if wanted.current_leader_epoch > self.epoch:
            return self._fetch_error(
                ErrorCode.UNKNOWN_LEADER_EPOCH, f"epoch {wanted.current_leader_epoch} > {self.epoch}"
            )
        if not self.is_leader:
            return self._fetch_error(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {self.node_id} is {self.role}")
        if wanted.fetch_offset < 0:
            return self._fetch_error(ErrorCode.OFFSET_OUT_OF_RANGE, f"fetch offset {wanted.fetch_offset} < 0")
        replica_id = request.replica_id
        # Before any range check: a fetcher past our log end is an old leader's uncommitted tail (or a
        # follower of one), which only the diverging epoch makes it truncate, as Kafka's
        # validateOffsetAndEpoch decides before the log end matters.
        validation = self.log.validate_offset_and_epoch(wanted.fetch_offset, wanted.last_fetched_epoch)
        if isinstance(validation, Diverging):
            return self._fetch_answer(b"", diverging=validation)
        if isinstance(validation, SnapshotNeeded):
            return self._fetch_answer(b"", snapshot=validation.snapshot_id)
        if wanted.fetch_offset > self.log.log_end_offset:
            return self._fetch_error(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"fetch offset {wanted.fetch_offset} outside [0, {self.log.log_end_offset}]",
            )
        progress = self._record_fetch(replica_id, wanted.fetch_offset)
        records = self.log.read(wanted.fetch_offset, min(wanted.partition_max_bytes, request.max_bytes) or 1)
        if not records and request.max_wait_ms > 0 and progress.sent_high_watermark == self.high_watermark:
            # Nothing new to tell: hold the FETCH until an append, a new HW or a role change (or max wait).
            epoch = self.epoch
            await self._wait_fetch_wake(request.max_wait_ms)
            if not self.is_leader or self.epoch != epoch:
                return self._fetch_error(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {self.node_id} stopped leading")
            records = self.log.read(wanted.fetch_offset, min(wanted.partition_max_bytes, request.max_bytes) or 1)
        progress.sent_high_watermark = self.high_watermark
        return self._fetch_answer(records)

    def _fetch_answer(
        self, records: bytes, diverging: Diverging | None = None, snapshot: OffsetAndEpoch | None = None
    ) -> FetchResponse:
        return FetchResponse(
            partitions=[
                FetchPartitionResponse(
                    METADATA_TOPIC,
                    METADATA_PARTITION,
                    high_watermark=self.high_watermark,
                    log_start_offset=self.log.log_start_offset,
                    log_end_offset=self.log.log_end_offset,
                    records=records,
                    diverging_epoch=diverging.epoch if diverging else -1,
                    diverging_end_offset=diverging.end_offset if diverging else -1,
                    current_leader_id=self.node_id,
                    current_leader_epoch=self.epoch,
                    snapshot_end_offset=snapshot.offset if snapshot else -1,
                    snapshot_epoch=snapshot.epoch if snapshot else -1,
                )
            ]
        )

    def _record_fetch(self, replica_id: int, fetch_offset: int) -> ReplicaProgress:
        """A fetcher at `fetch_offset` (its durable log end): record it, and for a voter maybe commit."""
        now = self._time.milliseconds()
        if replica_id in self.voters:
            progress = self._progress[replica_id]
            self._begin_acked.add(replica_id)
        else:
            progress = self._observers.setdefault(replica_id, ReplicaProgress())
        progress.end_offset = fetch_offset
        progress.last_fetch_ms = now
        if fetch_offset >= self.log.log_end_offset:
            progress.last_caught_up_ms = now
        if replica_id in self.voters:
            self._maybe_advance_leader_hw()
        return progress

    async def _wait_fetch_wake(self, max_wait_ms: int) -> None:
        wake = asyncio.ensure_future(self._fetch_wake.wait())
        timer = asyncio.ensure_future(self._time.sleep(max_wait_ms / 1000.0))
        try:
            await asyncio.wait({wake, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            wake.cancel()
            timer.cancel()

    def _wake_fetches(self) -> None:
        wake, self._fetch_wake = self._fetch_wake, asyncio.Event()
        wake.set()

    def handle_fetch_snapshot(self, request: FetchSnapshotRequest) -> FetchSnapshotResponse:
        leader = -1 if self.leader_id is None else self.leader_id

        def error(code: ErrorCode, message: str) -> FetchSnapshotResponse:
            return FetchSnapshotResponse(code, message, leader, self.epoch)

        if request.current_leader_epoch < self.epoch:
            return error(ErrorCode.FENCED_LEADER_EPOCH, f"epoch {request.current_leader_epoch} < {self.epoch}")
        if request.current_leader_epoch > self.epoch:
            return error(ErrorCode.UNKNOWN_LEADER_EPOCH, f"epoch {request.current_leader_epoch} > {self.epoch}")
        if not self.is_leader:
            return error(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"node {self.node_id} is {self.role}")
        snapshot_id = OffsetAndEpoch(request.snapshot_end_offset, request.snapshot_epoch)
        data = self.log.snapshot_bytes(snapshot_id)
        if data is None:
            return error(ErrorCode.SNAPSHOT_NOT_FOUND, f"no snapshot {snapshot_id.offset}-{snapshot_id.epoch}")
        if request.position > len(data):
            return error(ErrorCode.POSITION_OUT_OF_RANGE, f"position {request.position} > size {len(data)}")
        chunk = data[request.position : request.position + max(min(request.max_bytes, SNAPSHOT_CHUNK_BYTES), 1)]
        return FetchSnapshotResponse(
            current_leader_id=self.node_id,
            current_leader_epoch=self.epoch,
            snapshot_end_offset=snapshot_id.offset,
            snapshot_epoch=snapshot_id.epoch,
            size=len(data),
            position=request.position,
            unaligned_records=chunk,
        )

    # -- FETCH: the follower's and observer's side -----------------------------------------------------

    def _fetch_target(self) -> int:
        if self.leader_id is not None and self.leader_id != self.node_id:
            return self.leader_id
        voters = sorted(self.voters)
        return voters[self._bootstrap_index % len(voters)]

    async def _fetch(self) -> None:
        target = self._fetch_target()
        epoch, leader = self.epoch, self.leader_id
        request = FetchRequest(
            replica_id=self.node_id,
            max_wait_ms=self.config.fetch_max_wait_ms,
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            partitions=[
                FetchPartition(
                    METADATA_TOPIC,
                    METADATA_PARTITION,
                    fetch_offset=self.log.log_end_offset,
                    partition_max_bytes=FETCH_MAX_BYTES,
                    log_start_offset=self.log.log_start_offset,
                    current_leader_epoch=self.epoch,
                    last_fetched_epoch=self.log.last_fetched_epoch,
                )
            ],
        )
        sent = asyncio.ensure_future(
            self._transport.send(target, request, self.config.request_timeout_ms + self.config.fetch_max_wait_ms)
        )
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({sent, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            if not sent.done():
                # Our state changed while the FETCH was out (or we are stopping): its answer no longer matters.
                sent.cancel()
                sent.add_done_callback(_retrieved)
            else:
                # Done as we are stopped (a node killed as its FETCH failed): its error is seen here, or the
                # event loop reports it as never retrieved when the task is collected; when that happened
                # depended on the garbage collector, and so did a simulated run's course.
                _retrieved(sent)
        if not sent.done() or sent.cancelled():
            return
        try:
            response: FetchResponse = sent.result()
        except NETWORK_ERRORS as exc:
            log.debug("node %d: FETCH to %d failed: %s", self.node_id, target, exc)
            if (
                target == self.leader_id
                and self.is_voter
                and not isinstance(exc, TimeoutError)
                and self._found_gone != (self.epoch, target)
            ):
                # Refused or cut: the leader's process is gone (a timeout proves nothing). Stop counting on
                # it, so we grant pre-votes, and run after a random delay, so voters seldom run together.
                # The delay is drawn once, when the leader is first found gone: a draw on every refused
                # FETCH meanwhile (one each 100 ms) would keep the least of them, and the voters' runs would
                # bunch up early and collide more often.
                self._found_gone = (self.epoch, target)
                self._last_leader_contact_ms = NO_LEADER_CONTACT_MS
                self._fetch_deadline_ms = min(
                    self._fetch_deadline_ms,
                    self._time.milliseconds() + self._rng.randrange(max(self.config.election_timeout_ms // 2, 1)),
                )
            await self._fetch_failed(target)
            return
        if (self.epoch, self.leader_id) != (epoch, leader):
            return
        await self._handle_fetch_response(target, response)

    async def _fetch_failed(self, target: int) -> None:
        if not self.is_voter:
            # An observer cannot wait for an election: it asks the next voter, which names the leader it knows.
            self._bootstrap_index += 1
            if target == self.leader_id:
                self._become(Role.UNATTACHED, self.epoch, None, None)
        self._retry_at_ms = self._time.milliseconds() + self.config.retry_backoff_ms * 5
        await self._wait_for_change(self.config.retry_backoff_ms * 5)

    async def _handle_fetch_response(self, target: int, response: FetchResponse) -> bool:
        """Act on the answer; True when it was the leader's (records, a divergence or a snapshot to load)."""
        if response.error_code != ErrorCode.NONE or len(response.partitions) != 1:
            log.info("node %d: FETCH from %d refused: %s", self.node_id, target, response.error_message)
            await self._fetch_failed(target)
            return False
        answer = response.partitions[0]
        code = answer.error_code
        if code != ErrorCode.NONE:
            learned = self._learn_leader(answer.current_leader_epoch, answer.current_leader_id)
            if not learned:
                if (
                    target == self.leader_id
                    and answer.current_leader_epoch == self.epoch
                    and answer.current_leader_id != target
                ):
                    # Our leader no longer leads this epoch (it resigned): stop counting on it.
                    self._last_leader_contact_ms = NO_LEADER_CONTACT_MS
                    self._fetch_deadline_ms = min(self._fetch_deadline_ms, self._time.milliseconds())
                await self._fetch_failed(target)
            return False
        now = self._time.milliseconds()
        if self.role is not Role.FOLLOWER or self.leader_id != target:
            # Only the leader of an epoch answers a FETCH without an error: an observer found it.
            self._learn_leader(answer.current_leader_epoch, answer.current_leader_id)
            if self.leader_id != target:
                return False
        self._last_leader_contact_ms = now
        self._fetch_deadline_ms = now + self.config.fetch_timeout_ms
        if answer.diverging_epoch >= 0 or answer.diverging_end_offset >= 0:
            self._truncate_diverging(answer.diverging_epoch, answer.diverging_end_offset)
            return True
        if answer.snapshot_end_offset >= 0:
            await self._fetch_snapshot(target, OffsetAndEpoch(answer.snapshot_end_offset, answer.snapshot_epoch))
            return True
        if answer.records:
            self.log.append_as_follower(answer.records)
            self.log.flush()  # our next FETCH reports this log end as durable
        self._follower_high_watermark(answer.high_watermark)
        return True

    def _truncate_diverging(self, epoch: int, end_offset: int) -> None:
        fallback = max(self._delivered_offset, self.log.log_start_offset)
        truncation = offset_truncation_state(self.log, fallback, epoch, end_offset)
        if truncation.offset < self._delivered_offset:
            raise CommittedTruncationError(
                f"node {self.node_id}: leader {self.leader_id} (epoch {self.epoch}) says our log diverges at epoch "
                f"{epoch} offset {end_offset}: truncating to {truncation.offset} would remove committed records "
                f"below {self._delivered_offset}"
            )
        log.info(
            "node %d: log diverges from leader %s at epoch %d, end offset %d: truncating to %d",
            self.node_id,
            self.leader_id,
            epoch,
            end_offset,
            truncation.offset,
        )
        self.log.truncate_to(truncation.offset)

    def _follower_high_watermark(self, leader_high_watermark: int) -> None:
        self.leader_high_watermark = leader_high_watermark
        self.last_fetch_answer_ms = self._time.milliseconds()
        high_watermark = min(leader_high_watermark, self.log.log_end_offset)
        if high_watermark > self.high_watermark:
            self._set_high_watermark(high_watermark)
        if not self._caught_up and leader_high_watermark > 0 and self._delivered_offset >= leader_high_watermark:
            self._caught_up = True
            log.info("node %d caught up with the metadata log at offset %d", self.node_id, leader_high_watermark)
            self.on_caught_up()

    async def _fetch_snapshot(self, target: int, snapshot_id: OffsetAndEpoch) -> None:
        """Load the leader's snapshot in chunks, install it, and hand it to the listener."""
        epoch = self.epoch
        data = bytearray()
        while True:
            request = FetchSnapshotRequest(
                self.node_id, epoch, snapshot_id.offset, snapshot_id.epoch, len(data), SNAPSHOT_CHUNK_BYTES
            )
            try:
                response: FetchSnapshotResponse = await self._transport.send(
                    target, request, self.config.request_timeout_ms
                )
            except NETWORK_ERRORS:
                await self._fetch_failed(target)
                return
            if self.epoch != epoch or self.leader_id != target:
                return
            if response.error_code != ErrorCode.NONE or response.position != len(data):
                log.info("node %d: FETCH_SNAPSHOT from %d refused: %s", self.node_id, target, response.error_message)
                await self._fetch_failed(target)
                return
            data += response.unaligned_records
            if len(data) >= response.size:
                break
            if not response.unaligned_records:
                await self._fetch_failed(target)
                return
        if snapshot_id.offset < self._delivered_offset:
            return  # we already hold more than it covers
        snapshot = self.log.install_snapshot(bytes(data))
        log.info("node %d installed snapshot %d-%d from %d", self.node_id, snapshot.end_offset, snapshot.epoch, target)
        self._delivered_offset = snapshot.end_offset
        self._delivered_epoch = snapshot.epoch
        self._bytes_since_snapshot = 0
        self.high_watermark = max(self.high_watermark, snapshot.end_offset)
        self._listener.handle_load_snapshot(snapshot)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned request's outcome as seen: nobody waits for it any more."""
    if not task.cancelled():
        task.exception()
