"""One consumer group's state: its members, its generation and the offsets it committed.

How this works
--------------
Kafka's classic group protocol moves a group through these states:

    Empty ──join──▶ PreparingRebalance ──every member joined, or the rebalance timeout──▶ CompletingRebalance
      ▲                   ▲   │                                                              │
      │                   │   └── no member left ──▶ Empty                         leader's SyncGroup,
      │                   │                                                        written to the log
      └── last member leaves or expires ◀── Stable ◀────────────────────────────────────────┘
                              (a join, a leave or an expired session: back to PreparingRebalance)

Each completed join bumps the generation; the first member to join leads and gets every member's
subscription, assigns, and sends the assignments in its SyncGroup; each member then gets its own.
A member's session is kept alive by its heartbeats (and by its pending JoinGroup or SyncGroup); one that
stays silent past its session timeout is removed, which starts a rebalance for the others. The state
machine lives here; the coordinator (group_coordinator.py) drives it with requests and `tick`.

Static members (KIP-345) carry a `group.instance.id`; `static_members` maps each to the member id that holds
it now. One that rejoins without a member id takes its instance's place under a new id
(`replace_static_member`), and any request under the old id is fenced (`member_error`: FENCED_INSTANCE_ID).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from group_coordinator.coordinator_records import GroupValue, MemberValue, OffsetValue
from protocol.errors import ErrorCode


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class JoinGroupResult:
    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)  # the leader's answer only
    skip_assignment: bool = False


@dataclass
class SyncGroupResult:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass
class GroupDescription:
    error_code: int
    state: str = "Dead"
    protocol_type: str = ""
    protocol: str = ""
    members: list[MemberDescription] = field(default_factory=list)


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_deadline_ms: int = 0
    assignment: bytes = b""
    join: asyncio.Future[JoinGroupResult] | None = None  # waiting for the join phase to end
    sync: asyncio.Future[SyncGroupResult] | None = None  # waiting for the leader's assignment

    def metadata(self, protocol: str | None) -> bytes:
        return dict(self.protocols).get(protocol or "", b"")

    def vote(self, candidates: set[str]) -> str:
        """The first protocol of this member's preference order that every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)

    def answer_join(self, result: JoinGroupResult) -> None:
        if self.join is not None and not self.join.done():
            self.join.set_result(result)
        self.join = None

    def answer_sync(self, result: SyncGroupResult) -> None:
        if self.sync is not None and not self.sync.done():
            self.sync.set_result(result)
        self.sync = None


@dataclass
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in join order: the first may lead
    pending_members: dict[str, int] = field(default_factory=dict)  # member ids handed out, and until when
    rebalance_deadline_ms: int = 0  # PreparingRebalance: the join phase ends here at the latest
    initial_delay_deadline_ms: int = 0  # an empty group waits this long for more members (initial delay)
    sync_deadline_ms: int = 0  # CompletingRebalance: members that have not synced by then are removed
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> its member id now
    state_timestamp_ms: int = 0  # when the group entered its state (Kafka's currentStateTimestamp)
    pending_commits: Counter[tuple[str, int]] = field(default_factory=Counter)  # commits being written

    def set_state(self, state: GroupState, now_ms: int) -> None:
        if state != self.state:
            self.state = state
            self.state_timestamp_ms = now_ms

    def expired_offsets(self, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """Kafka's removeExpiredOffsets: a group with members keeps its offsets; one that has had a protocol
        (a consumer group) and is Empty loses them `retention_ms` after it became Empty; a standalone group
        (commits only: assign() and admin tools) loses each `retention_ms` after its commit. Never one whose
        commit is being written."""
        if self.state != GroupState.EMPTY:
            return []
        emptied_ms = self.state_timestamp_ms if self.protocol_type is not None else 0  # 0: per commit
        return [
            tp
            for tp, value in self.offsets.items()
            if not self.pending_commits[tp] and now_ms - (emptied_ms or value.commit_timestamp) >= retention_ms
        ]

    def add(self, member: Member) -> None:
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            if self.static_members.get(member.group_instance_id) == member_id:
                del self.static_members[member.group_instance_id]
        return member

    def member_error(self, member_id: str, group_instance_id: str | None) -> int:
        """Kafka's validateCurrentMember: a static member's instance id must map to `member_id`
        (FENCED_INSTANCE_ID when another member id holds it now), any other member must be in the group."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return int(ErrorCode.UNKNOWN_MEMBER_ID)
            return int(ErrorCode.FENCED_INSTANCE_ID) if current != member_id else 0
        return 0 if member_id in self.members else int(ErrorCode.UNKNOWN_MEMBER_ID)

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """A static member that came back (a restart, or a duplicate) takes over its instance's place under a
        new member id: same assignment and leadership; whoever still waits under the old id is fenced."""
        member = self.members.pop(old_member_id)
        member.answer_join(JoinGroupResult(int(ErrorCode.FENCED_INSTANCE_ID), member_id=old_member_id))
        member.answer_sync(SyncGroupResult(int(ErrorCode.FENCED_INSTANCE_ID)))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def is_empty(self) -> bool:
        return not self.members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join: same protocol type, one protocol in common."""
        if self.is_empty():
            return bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        return bool(self._candidates() & {name for name, _ in protocols})

    def _candidates(self) -> set[str]:
        names: set[str] | None = None
        for member in self.members.values():
            mine = {name for name, _ in member.protocols}
            names = mine if names is None else names & mine
        return names or set()

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol all members support."""
        candidates = self._candidates()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        return votes.most_common(1)[0][0]

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join is not None for m in self.members.values())

    def to_value(self, now_ms: int) -> GroupValue:
        return GroupValue(
            self.protocol_type or "",
            self.generation_id,
            self.protocol_name,
            self.leader_id,
            self.state_timestamp_ms or now_ms,
            tuple(
                MemberValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(self.protocol_name),
                    m.assignment,
                )
                for m in self.members.values()
            ),
        )

    def restore(self, value: GroupValue, now_ms: int) -> None:
        """A group read back from the log: Stable with its members (each gets a fresh session, as Kafka
        restores them), or Empty."""
        self.protocol_type = value.protocol_type or None
        self.generation_id = value.generation
        self.protocol_name = value.protocol
        self.leader_id = value.leader
        self.members = {
            m.member_id: Member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                value.protocol_type,
                [(value.protocol or "", m.subscription)],
                session_deadline_ms=now_ms + m.session_timeout_ms,
                assignment=m.assignment,
            )
            for m in value.members
        }
        self.static_members = {
            m.group_instance_id: m.member_id for m in self.members.values() if m.group_instance_id is not None
        }
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY
        self.state_timestamp_ms = value.current_state_timestamp

    def describe(self) -> GroupDescription:
        return GroupDescription(
            0,
            self.state.value,
            self.protocol_type or "",
            self.protocol_name or "" if self.state == GroupState.STABLE else "",
            [
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(self.protocol_name),
                    m.assignment if self.state == GroupState.STABLE else b"",
                )
                for m in self.members.values()
            ],
        )

    def fail_waiting(self, error_code: int) -> None:
        """Answer every member still waiting for a join or a sync with `error_code`."""
        for member in self.members.values():
            member.answer_join(JoinGroupResult(error_code, member_id=member.member_id))
            member.answer_sync(SyncGroupResult(error_code))


def debug_state(group: GroupMetadata) -> dict[str, Any]:
    """A group as plain values, for logs and test failure messages."""
    return {
        "state": group.state.value,
        "generation": group.generation_id,
        "leader": group.leader_id,
        "members": list(group.members),
        "pending": list(group.pending_members),
    }
