"""Kafka's classic group coordinator: consumer groups whose state and offsets live in __consumer_offsets.

How this works
--------------
A group belongs to one partition of __consumer_offsets, `abs(hash(group_id)) % offsets.topic.num.partitions`
with Java's String.hashCode (so a group maps where it would in Kafka), and its coordinator is the broker
that leads that partition. The broker tells this object when it becomes leader of such a partition
(`on_elected`, with the partition's records to replay: the group coordinator is a state machine over its
log, as Kafka's GroupMetadataManager is) and when it stops (`on_resigned`: the groups are forgotten and
whoever waits is answered NOT_COORDINATOR; the clients find the new coordinator and rejoin there).

What must survive a coordinator's failure is written through `append` (acks=all on that partition)
before it is answered: an offset commit is acknowledged only once the ISR has it, so the next leader, which
replays the same records, returns the same offsets. A group's membership is written when a rebalance
completes (the leader's SyncGroup); a new coordinator restores the group as Stable with the same members
and generation, whose next heartbeats or commits go on as before.

Requests that wait (JoinGroup until the join phase ends, SyncGroup until the leader's assignment) are
futures; time enters through `tick(now_ms)`, which the broker calls every 100 ms to expire sessions, end
join phases at the rebalance timeout and the initial rebalance delay, and drop members that never synced.
Nothing here touches the network or the disk, so the same code runs in the simulator.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import AsyncIterable, Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from group_coordinator.coordinator_records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    group_key,
    group_value,
    offset_key,
    offset_value,
    read_group_value,
    read_key,
    read_offset_value,
)
from group_coordinator.group_metadata import (
    GroupDescription,
    GroupMetadata,
    GroupState,
    JoinGroupResult,
    Member,
    SyncGroupResult,
)
from protocol.errors import ErrorCode
from server_common.time import Time

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

#: Writes one batch of (key, value) records to __consumer_offsets-<partition> as its leader, acks=all;
#: returns Kafka's error code (0: the ISR has it).
AppendRecords = Callable[[int, list[tuple[bytes | None, bytes | None]]], Awaitable[int]]
Records = Iterable[tuple[bytes | None, bytes | None]] | AsyncIterable[tuple[bytes | None, bytes | None]]


@dataclass(frozen=True)
class GroupConfig:
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    offsets_topic_num_partitions: int = 50
    offsets_retention_minutes: int = 10080  # committed offsets of an Empty group expire after this
    offset_metadata_max_bytes: int = 4096  # the longest metadata a commit may carry (Kafka's default)
    group_max_size: int = 1000  # members of one group, joined or given a member id to join with


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits (signed)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


# What a failed append of the coordinator's answers as (Kafka's GroupMetadataManager mapping): the
# client looks for the coordinator again and retries there.
_APPEND_ERRORS = {
    int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION): ErrorCode.COORDINATOR_NOT_AVAILABLE,
    int(ErrorCode.NOT_ENOUGH_REPLICAS): ErrorCode.COORDINATOR_NOT_AVAILABLE,
    int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND): ErrorCode.COORDINATOR_NOT_AVAILABLE,
    int(ErrorCode.REQUEST_TIMED_OUT): ErrorCode.COORDINATOR_NOT_AVAILABLE,
    int(ErrorCode.NOT_LEADER_OR_FOLLOWER): ErrorCode.NOT_COORDINATOR,
    int(ErrorCode.KAFKA_STORAGE_ERROR): ErrorCode.NOT_COORDINATOR,
    int(ErrorCode.MESSAGE_TOO_LARGE): ErrorCode.UNKNOWN_SERVER_ERROR,
    int(ErrorCode.RECORD_LIST_TOO_LARGE): ErrorCode.UNKNOWN_SERVER_ERROR,
}


_TOO_LARGE = frozenset({int(ErrorCode.MESSAGE_TOO_LARGE), int(ErrorCode.RECORD_LIST_TOO_LARGE)})


def _append_error(code: int) -> int:
    return int(_APPEND_ERRORS.get(code, ErrorCode.UNKNOWN_SERVER_ERROR)) if code else 0


class GroupCoordinator:
    def __init__(
        self,
        broker_id: int,
        time: Time,
        append: AppendRecords,
        config: GroupConfig = GroupConfig(),
        rng: random.Random | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.time = time
        self.append = append
        self.config = config
        self.rng = rng or random.Random()
        self.groups: dict[str, GroupMetadata] = {}
        self._owned: set[int] = set()
        self._loading: set[int] = set()
        self._epochs: dict[int, int] = {}  # partition -> how many times elected: a stale load stops
        self._tasks: set[asyncio.Task[None]] = set()  # writes nobody waits for (an empty group's record)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write_group(self, group: GroupMetadata) -> int:
        """Append the group's record (its membership now) to its __consumer_offsets partition; the error code."""
        value = group_value(group.to_value(self.time.milliseconds()))
        return await self.append(self.partition_for(group.group_id), [(group_key(group.group_id), value)])

    async def _store_empty(self, group: GroupMetadata) -> None:
        if self.groups.get(group.group_id) is not group:
            return  # deleted (DeleteGroups) before this ran: its record would bring it back after the tombstone
        if code := await self._write_group(group):
            log.warning("group %s: its empty state was not written (error %d)", group.group_id, code)

    # -- where groups live ------------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return (java_string_hash(group_id or "") & 0x7FFFFFFF) % self.config.offsets_topic_num_partitions

    def is_loading(self, partition: int) -> bool:
        return partition in self._loading

    def owns(self, partition: int) -> bool:
        return partition in self._owned

    def _not_owned(self, group_id: str) -> int:
        """The error for a group this coordinator cannot serve now, or 0."""
        if not group_id:
            return int(ErrorCode.INVALID_GROUP_ID)
        partition = self.partition_for(group_id)
        if partition in self._loading:
            return int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        if partition not in self._owned:
            return int(ErrorCode.NOT_COORDINATOR)
        return 0

    async def on_elected(self, partition: int, records: Records) -> None:
        """This broker now leads __consumer_offsets-`partition`: replay its records, then serve its groups."""
        epoch = self._epochs.get(partition, 0) + 1
        self._epochs[partition] = epoch
        self._forget(partition, ErrorCode.NOT_COORDINATOR)
        self._loading.add(partition)
        loaded: dict[str, GroupMetadata] = {}
        now = self.time.milliseconds()
        try:
            if isinstance(records, AsyncIterable):
                async for key, value in records:
                    self._replay(loaded, key, value, now)
            else:
                for key, value in records:
                    self._replay(loaded, key, value, now)
        finally:
            if self._epochs.get(partition) == epoch:
                self._loading.discard(partition)
        if self._epochs.get(partition) != epoch:
            return  # resigned or re-elected meanwhile: that call decides
        self.groups.update(loaded)
        self._owned.add(partition)
        log.info("coordinator of %s-%d: loaded %d groups", OFFSETS_TOPIC, partition, len(loaded))

    def _replay(self, groups: dict[str, GroupMetadata], key: bytes | None, value: bytes | None, now: int) -> None:
        if key is None:
            return
        try:
            parsed = read_key(key)
            if isinstance(parsed, OffsetKey):
                group = groups.setdefault(parsed.group, GroupMetadata(parsed.group))
                if value is None:
                    group.offsets.pop((parsed.topic, parsed.partition), None)
                else:
                    group.offsets[(parsed.topic, parsed.partition)] = read_offset_value(value)
            elif isinstance(parsed, GroupKey):
                group = groups.setdefault(parsed.group, GroupMetadata(parsed.group))
                if value is None and not group.offsets:
                    del groups[parsed.group]  # deleted (DeleteGroups), or expired with its last offsets
                elif value is None:
                    group.members.clear()
                    group.static_members.clear()
                    group.set_state(GroupState.EMPTY, now)
                else:
                    group.restore(read_group_value(value), now)
        except (RecordFormatError, UnicodeDecodeError) as exc:
            log.warning("skipping a %s record that does not parse: %s", OFFSETS_TOPIC, exc)

    def on_resigned(self, partition: int) -> None:
        """This broker no longer leads __consumer_offsets-`partition`."""
        self._epochs[partition] = self._epochs.get(partition, 0) + 1
        self._loading.discard(partition)
        self._owned.discard(partition)
        self._forget(partition, ErrorCode.NOT_COORDINATOR)

    def _forget(self, partition: int, error: ErrorCode) -> None:
        for group_id in [g for g in self.groups if self.partition_for(g) == partition]:
            self.groups.pop(group_id).fail_waiting(int(error))

    # -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------------

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinGroupResult:
        if not group_id:
            return JoinGroupResult(int(ErrorCode.INVALID_GROUP_ID), member_id=member_id)
        if error := self._not_owned(group_id):
            return JoinGroupResult(error, member_id=member_id)
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= session_timeout_ms <= cfg.group_max_session_timeout_ms:
            return JoinGroupResult(int(ErrorCode.INVALID_SESSION_TIMEOUT), member_id=member_id)
        now = self.time.milliseconds()
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinGroupResult(int(ErrorCode.UNKNOWN_MEMBER_ID), member_id=member_id)
            group = self.groups[group_id] = GroupMetadata(group_id)
        if not group.supports(protocol_type, protocols):
            return JoinGroupResult(int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL), member_id=member_id)
        newcomer = not member_id or (member_id not in group.members and member_id not in group.pending_members)
        if newcomer and len(group.members) + len(group.pending_members) >= cfg.group_max_size:
            # Kafka's group.max.size, counting the members waiting for their member id too: the leader's
            # JoinGroup answer and the group's record list every member, and each join is cheap to send.
            return JoinGroupResult(int(ErrorCode.GROUP_MAX_SIZE_REACHED), member_id=member_id)
        if not member_id and group_instance_id is not None:
            # KIP-345: a static member joins under a new member id without the MEMBER_ID_REQUIRED round; one
            # whose instance id the group knows takes over that member's place (a restart, or a duplicate).
            member_id = f"{group_instance_id}-{self.rng.getrandbits(128):032x}"
            known = group.static_members.get(group_instance_id)
            if known is not None and known in group.members:
                return await self._rejoin_static(
                    group, group_instance_id, known, member_id, protocols, session_timeout_ms, rebalance_timeout_ms
                )
        elif not member_id:
            member_id = f"{client_id}-{self.rng.getrandbits(128):032x}"
            if require_known_member_id:
                # KIP-394: the member must come back with this id, so a join lost in a timeout does not
                # leave a member the group waits for.
                group.pending_members[member_id] = now + session_timeout_ms
                return JoinGroupResult(int(ErrorCode.MEMBER_ID_REQUIRED), member_id=member_id)
        elif group_instance_id is not None:
            if error := group.member_error(member_id, group_instance_id):
                return JoinGroupResult(error, member_id=member_id)
        elif member_id not in group.members and member_id not in group.pending_members:
            return JoinGroupResult(int(ErrorCode.UNKNOWN_MEMBER_ID), member_id=member_id)
        group.pending_members.pop(member_id, None)
        member = group.members.get(member_id)
        changed = member is None or member.protocols != protocols
        if member is None:
            member = Member(
                member_id, group_instance_id, client_id, client_host, session_timeout_ms,
                rebalance_timeout_ms, protocol_type, protocols,
            )  # fmt: skip
            group.add(member)
            if group.protocol_type is None:
                group.protocol_type = protocol_type
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_deadline_ms = now + session_timeout_ms
        if member.join is not None:
            member.answer_join(JoinGroupResult(int(ErrorCode.UNKNOWN_MEMBER_ID), member_id=member_id))
        future: asyncio.Future[JoinGroupResult] = asyncio.get_running_loop().create_future()
        member.join = future
        if group.state == GroupState.STABLE and not changed and member_id != group.leader_id:
            # A follower rejoining with what it had: it gets the current generation back at once.
            member.answer_join(self._join_answer(group, member))
        elif group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, now, f"{member_id} joined")
        elif group.initial_delay_deadline_ms and changed:
            # Kafka's InitialDelayedJoin: each new member of a new group waits a little longer for others.
            group.initial_delay_deadline_ms = min(
                now + cfg.group_initial_rebalance_delay_ms, group.rebalance_deadline_ms
            )
        self._maybe_complete_join(group, now)
        return await future

    async def _rejoin_static(
        self,
        group: GroupMetadata,
        instance: str,
        old_id: str,
        new_id: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> JoinGroupResult:
        """Kafka's updateStaticMemberAndRebalance: the member of `instance` goes on under `new_id`. In a Stable
        group whose protocol this does not change, nothing rebalances: the new id is written to the log and the
        member gets the current generation back (with the old leader id, so that it does not assign), then its
        own assignment from SyncGroup. Otherwise the group rebalances, the member taking part under its new id."""
        now = self.time.milliseconds()
        leader_before = group.leader_id or ""
        member = group.replace_static_member(instance, old_id, new_id)
        before = (member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms)
        member.protocols, member.session_timeout_ms, member.rebalance_timeout_ms = (
            protocols, session_timeout_ms, rebalance_timeout_ms,
        )  # fmt: skip
        member.session_deadline_ms = now + session_timeout_ms
        log.info("group %s: static member %s rejoined as %s (was %s)", group.group_id, instance, new_id, old_id)
        if group.state == GroupState.STABLE and group.select_protocol() == group.protocol_name:
            if code := await self._write_group(group):
                if self.groups.get(group.group_id) is group and group.static_members.get(instance) == new_id:
                    back = group.replace_static_member(instance, new_id, old_id)
                    back.protocols, back.session_timeout_ms, back.rebalance_timeout_ms = before
                return JoinGroupResult(_append_error(code), member_id="")
            return JoinGroupResult(
                0, group.generation_id, group.protocol_type, group.protocol_name, leader_before, new_id, []
            )
        future: asyncio.Future[JoinGroupResult] = asyncio.get_running_loop().create_future()
        member.join = future
        if group.state != GroupState.PREPARING_REBALANCE:
            # Stable with a protocol change, or CompletingRebalance (the leader may be assigning to the old id).
            self._prepare_rebalance(group, now, f"static member {instance} rejoined as {new_id}")
        self._maybe_complete_join(group, now)
        return await future

    def _prepare_rebalance(self, group: GroupMetadata, now: int, reason: str) -> None:
        if group.state == GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.answer_sync(SyncGroupResult(int(ErrorCode.REBALANCE_IN_PROGRESS)))
        was_empty = group.state == GroupState.EMPTY
        group.set_state(GroupState.PREPARING_REBALANCE, now)
        group.rebalance_deadline_ms = now + group.rebalance_timeout_ms()
        group.initial_delay_deadline_ms = (
            min(now + self.config.group_initial_rebalance_delay_ms, group.rebalance_deadline_ms) if was_empty else 0
        )
        log.info("group %s: preparing to rebalance (generation %d): %s", group.group_id, group.generation_id, reason)

    def _maybe_complete_join(self, group: GroupMetadata, now: int) -> None:
        if group.state != GroupState.PREPARING_REBALANCE:
            return
        delayed = group.initial_delay_deadline_ms and now < group.initial_delay_deadline_ms
        if (group.all_joined() and not delayed) or now >= group.rebalance_deadline_ms:
            self._complete_join(group, now)

    def _complete_join(self, group: GroupMetadata, now: int) -> None:
        for member_id in [m.member_id for m in group.members.values() if m.join is None]:
            group.remove(member_id)  # did not rejoin within the rebalance timeout
        group.pending_members.clear()
        group.generation_id += 1
        group.initial_delay_deadline_ms = 0
        if group.is_empty():
            group.set_state(GroupState.EMPTY, now)
            group.protocol_name = None
            group.leader_id = None
            # Written as Kafka writes it: the empty group and since when (offset retention counts from it, on
            # whichever broker coordinates the group by then).
            self._spawn(self._store_empty(group), f"store empty group {group.group_id}")
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.set_state(GroupState.COMPLETING_REBALANCE, now)
        group.sync_deadline_ms = now + group.rebalance_timeout_ms()
        for member in group.members.values():
            member.assignment = b""
            member.session_deadline_ms = now + member.session_timeout_ms
            member.answer_join(self._join_answer(group, member))
        log.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            group.group_id, group.generation_id, len(group.members), group.protocol_name, group.leader_id,
        )  # fmt: skip

    def _join_answer(self, group: GroupMetadata, member: Member) -> JoinGroupResult:
        is_leader = member.member_id == group.leader_id
        return JoinGroupResult(
            0,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            member.member_id,
            [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name)) for m in group.members.values()]
            if is_leader
            else [],
        )

    def _member_error(
        self, group_id: str, member_id: str, generation_id: int, group_instance_id: str | None = None
    ) -> tuple[int, GroupMetadata | None]:
        if error := self._not_owned(group_id):
            return error, None
        group = self.groups.get(group_id)
        if group is None:
            return int(ErrorCode.UNKNOWN_MEMBER_ID), group
        if error := group.member_error(member_id, group_instance_id):
            return error, group
        if generation_id != group.generation_id:
            return int(ErrorCode.ILLEGAL_GENERATION), group
        return 0, group

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncGroupResult:
        error, group = self._member_error(group_id, member_id, generation_id, group_instance_id)
        if error or group is None:
            return SyncGroupResult(error or int(ErrorCode.UNKNOWN_MEMBER_ID))
        if protocol_type is not None and protocol_type != group.protocol_type:
            return SyncGroupResult(int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        member = group.members[member_id]
        member.session_deadline_ms = self.time.milliseconds() + member.session_timeout_ms
        if group.state == GroupState.STABLE:
            return SyncGroupResult(0, group.protocol_type, group.protocol_name, member.assignment)
        if group.state != GroupState.COMPLETING_REBALANCE:
            return SyncGroupResult(int(ErrorCode.REBALANCE_IN_PROGRESS))
        future: asyncio.Future[SyncGroupResult] = asyncio.get_running_loop().create_future()
        member.answer_sync(SyncGroupResult(int(ErrorCode.REBALANCE_IN_PROGRESS)))
        member.sync = future
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            await self._store_assignment(group, generation_id)
        return await future

    async def _store_assignment(self, group: GroupMetadata, generation_id: int) -> None:
        """Write the group's membership, then let every member have its assignment."""
        code = await self._write_group(group)
        if self.groups.get(group.group_id) is not group or group.generation_id != generation_id:
            return  # the group moved on (a rebalance, a resignation) while the write was in flight
        if group.state != GroupState.COMPLETING_REBALANCE:
            return
        if code in _TOO_LARGE:
            self._drop_unwritable(group, code)
            return
        if code:
            error = _append_error(code)
            for m in group.members.values():
                m.answer_sync(SyncGroupResult(error))
            self._prepare_rebalance(group, self.time.milliseconds(), f"its assignment was not written ({code})")
            return
        group.set_state(GroupState.STABLE, self.time.milliseconds())
        for m in group.members.values():
            m.answer_sync(SyncGroupResult(0, group.protocol_type, group.protocol_name, m.assignment))

    @staticmethod
    def _never_written(group: GroupMetadata) -> bool:
        return (
            group.state == GroupState.EMPTY
            and group.generation_id == 0
            and not group.members
            and not group.pending_members
            and not group.offsets
            and not group.pending_commits
        )

    def _drop_unwritable(self, group: GroupMetadata, code: int) -> None:
        """The group's record (every member's subscription and assignment) is larger than __consumer_offsets
        takes: no generation of these members can ever be written. Their SyncGroups fail (UNKNOWN_SERVER_ERROR,
        as Kafka maps MESSAGE_TOO_LARGE) and they are removed, so the group is Empty and holds none of their
        metadata; each client rejoins as a new member, with smaller assignments or not at all."""
        now = self.time.milliseconds()
        size = len(group_value(group.to_value(now)))
        log.error(
            "group %s: its record of %d members (%d bytes) is refused by %s (%s): the SyncGroup fails and the "
            "members are removed",
            group.group_id, len(group.members), size, OFFSETS_TOPIC, ErrorCode(code).name,
        )  # fmt: skip
        for m in group.members.values():
            m.answer_sync(SyncGroupResult(_append_error(code)))
        for m in list(group.members.values()):
            self._remove(group, m, now, "the group's record could not be written")

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
        if error := self._not_owned(group_id):
            return error
        group = self.groups.get(group_id)
        if group is None:
            return int(ErrorCode.UNKNOWN_MEMBER_ID)
        if error := group.member_error(member_id, group_instance_id):
            return error
        member = group.members[member_id]
        member.session_deadline_ms = self.time.milliseconds() + member.session_timeout_ms
        if group.state == GroupState.PREPARING_REBALANCE:
            return int(ErrorCode.REBALANCE_IN_PROGRESS)
        if generation_id != group.generation_id:
            return int(ErrorCode.ILLEGAL_GENERATION)
        return 0

    async def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[int, list[tuple[str, str | None, int]]]:
        if error := self._not_owned(group_id):
            return error, [(m, i, error) for m, i in members]
        group = self.groups.get(group_id)
        results = []
        left = []
        for member_id, instance in members:
            if group is None:
                results.append((member_id, instance, int(ErrorCode.UNKNOWN_MEMBER_ID)))
                continue
            if not member_id and instance is not None:
                # KIP-345: an admin removes a static member by its instance id alone.
                member_id = group.static_members.get(instance, "")
                instance_error = 0 if member_id else int(ErrorCode.UNKNOWN_MEMBER_ID)
            else:
                instance_error = group.member_error(member_id, instance)
            if instance_error:
                results.append((member_id, instance, instance_error))
                continue
            results.append((member_id, instance, 0))
            left.append(group.members[member_id])
        if group is not None and left:
            now = self.time.milliseconds()
            for member in left:
                self._remove(group, member, now, "it left the group")
        return 0, results

    def _remove(self, group: GroupMetadata, member: Member, now: int, reason: str) -> None:
        member.answer_join(JoinGroupResult(int(ErrorCode.UNKNOWN_MEMBER_ID), member_id=member.member_id))
        member.answer_sync(SyncGroupResult(int(ErrorCode.UNKNOWN_MEMBER_ID)))
        group.remove(member.member_id)
        log.info("group %s: removing member %s: %s", group.group_id, member.member_id, reason)
        if group.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)
        elif group.is_empty() and group.state != GroupState.EMPTY:
            self._prepare_rebalance(group, now, reason)
            self._complete_join(group, now)
        elif group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, reason)

    # -- OffsetCommit, OffsetFetch ----------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
    ) -> dict[tuple[str, int], int]:
        def every(code: int) -> dict[tuple[str, int], int]:
            return dict.fromkeys(offsets, code)

        if error := self._not_owned(group_id):
            return every(error)
        group = self.groups.get(group_id)
        if generation_id < 0 and not member_id:
            # A commit from outside any generation (a consumer using assign(), an admin tool): allowed only
            # while the group has no members, as in Kafka.
            if group is not None and not group.is_empty():
                return every(int(ErrorCode.UNKNOWN_MEMBER_ID))
            if group is None:
                group = self.groups[group_id] = GroupMetadata(group_id)
        else:
            if group is None:
                return every(int(ErrorCode.UNKNOWN_MEMBER_ID))
            if error := group.member_error(member_id, group_instance_id):
                return every(error)
            if generation_id != group.generation_id:
                return every(int(ErrorCode.ILLEGAL_GENERATION))
            if group.state == GroupState.COMPLETING_REBALANCE:
                return every(int(ErrorCode.REBALANCE_IN_PROGRESS))
            member = group.members[member_id]
            member.session_deadline_ms = self.time.milliseconds() + member.session_timeout_ms
        now = self.time.milliseconds()
        # Kafka's validateOffsetMetadataLength: a partition whose metadata is too long is answered
        # OFFSET_METADATA_TOO_LARGE and not committed; the others are.
        limit = self.config.offset_metadata_max_bytes
        too_large = int(ErrorCode.OFFSET_METADATA_TOO_LARGE)
        refused = {tp: too_large for tp, (_, _, md) in offsets.items() if md is not None and len(md) > limit}
        if refused:
            offsets = {tp: value for tp, value in offsets.items() if tp not in refused}
            if not offsets:
                return refused
        values = {tp: OffsetValue(o, epoch, metadata or "", now) for tp, (o, epoch, metadata) in offsets.items()}
        records: list[tuple[bytes | None, bytes | None]] = [
            (offset_key(group_id, topic, partition), offset_value(value))
            for (topic, partition), value in values.items()
        ]
        group.pending_commits.update(values.keys())
        try:
            code = await self.append(self.partition_for(group_id), records)
        finally:
            group.pending_commits.subtract(values.keys())
            group.pending_commits += Counter()  # drops the zero counts
        if code:
            return every(_append_error(code)) | refused
        if self.groups.get(group_id) is group:
            group.offsets.update(values)
        return every(0) | refused

    # -- DeleteGroups -----------------------------------------------------------------------------------

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        """Kafka's handleDeleteGroups: each Empty group this coordinator serves is removed with a tombstone
        for each of its committed offsets and one for the group, written acks=all to its partition before
        it is answered NONE. A group with members is NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND.

        The groups leave memory before their tombstones are written (Kafka's Dead state), so a member
        joining meanwhile starts a new group, whose record follows the tombstones in the log. A group whose
        tombstones could not be written is put back, as the log still has it, and answered with the append's
        error (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the client retries)."""
        errors: dict[str, int] = {}
        deleting: dict[int, list[GroupMetadata]] = {}
        for group_id in dict.fromkeys(group_ids):
            if error := self._not_owned(group_id):
                errors[group_id] = error
                continue
            group = self.groups.get(group_id)
            if group is None:
                errors[group_id] = int(ErrorCode.GROUP_ID_NOT_FOUND)
            elif group.state != GroupState.EMPTY or group.pending_commits:
                # A commit being written would land after the tombstones and bring its offset back.
                errors[group_id] = int(ErrorCode.NON_EMPTY_GROUP)
            else:
                del self.groups[group_id]
                deleting.setdefault(self.partition_for(group_id), []).append(group)
        for partition, groups in deleting.items():
            epoch = self._epochs.get(partition)
            records: list[tuple[bytes | None, bytes | None]] = []
            for group in groups:
                records += [(offset_key(group.group_id, topic, p), None) for topic, p in group.offsets]
                records.append((group_key(group.group_id), None))
            code = await self.append(partition, records)
            for group in groups:
                errors[group.group_id] = _append_error(code)
                if code and self._epochs.get(partition) == epoch and group.group_id not in self.groups:
                    self.groups[group.group_id] = group
            log.info("groups %s deleted%s", [g.group_id for g in groups], f": not written ({code})" if code else "")
        return {group_id: errors[group_id] for group_id in dict.fromkeys(group_ids)}

    # -- offset retention -------------------------------------------------------------------------------

    async def expire_offsets(self) -> int:
        """Kafka's cleanupGroupMetadata: the committed offsets past `offsets.retention.minutes`
        (`GroupMetadata.expired_offsets`) get tombstones in __consumer_offsets, and an Empty group left with
        no offsets gets one too and is gone (a new member starts it afresh, from auto.offset.reset). Returns
        how many offsets expired."""
        retention_ms = self.config.offsets_retention_minutes * 60_000
        expired_total = 0
        for group in list(self.groups.values()):
            partition = self.partition_for(group.group_id)
            if partition not in self._owned:
                continue
            now = self.time.milliseconds()
            expired = group.expired_offsets(now, retention_ms)
            values = {tp: group.offsets[tp] for tp in expired}
            gone = group.state == GroupState.EMPTY and len(expired) == len(group.offsets) and not group.pending_commits
            records: list[tuple[bytes | None, bytes | None]] = [
                (offset_key(group.group_id, topic, p), None) for topic, p in expired
            ]
            if gone:
                records.append((group_key(group.group_id), None))
            if not records:
                continue
            code = await self.append(partition, records)
            if code or self.groups.get(group.group_id) is not group:
                continue  # not written (tried again next round), or the group moved meanwhile
            for tp, value in values.items():
                if group.offsets.get(tp) is value:  # not committed again while the tombstones were written
                    del group.offsets[tp]
                    expired_total += 1
            if gone and group.state == GroupState.EMPTY and not group.offsets and not group.members:
                del self.groups[group.group_id]
            removed = ", group removed" if gone else ""
            log.info("group %s: %d committed offsets expired%s", group.group_id, len(values), removed)
        return expired_total

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> tuple[int, dict[tuple[str, int], tuple[int, int, str | None, int]]]:
        if error := self._not_owned(group_id):
            return error, {}
        group = self.groups.get(group_id)
        stored = group.offsets if group is not None else {}
        wanted = list(stored) if partitions is None else partitions
        out: dict[tuple[str, int], tuple[int, int, str | None, int]] = {}
        for tp in wanted:
            value = stored.get(tp)
            out[tp] = (value.offset, value.leader_epoch, value.metadata, 0) if value else (-1, -1, "", 0)
        return 0, out

    # -- ListGroups, DescribeGroups ---------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str]]:
        return [
            (g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if self.partition_for(g.group_id) in self._owned
        ]

    def describe_group(self, group_id: str) -> GroupDescription:
        if error := self._not_owned(group_id):
            return GroupDescription(error)
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(0, GroupState.DEAD.value)
        return group.describe()

    # -- time -------------------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Expire what has run out of time: sessions, pending member ids, join phases, sync phases. A group
        that only ever had members waiting for their id (never a generation, never an offset: nothing of it
        was written) is forgotten when the last of them expires, so joins under made-up group ids do not pile
        up; an Empty group with nothing to expire costs a glance."""
        for group in list(self.groups.values()):
            if group.state == GroupState.EMPTY and not group.members and not group.pending_members:
                continue
            if group.pending_members:
                for member_id, deadline in list(group.pending_members.items()):
                    if now_ms >= deadline:
                        del group.pending_members[member_id]
                if self._never_written(group):
                    del self.groups[group.group_id]
                    continue
            for member in list(group.members.values()):
                waiting = member.join is not None or member.sync is not None
                if not waiting and now_ms >= member.session_deadline_ms:
                    self._remove(group, member, now_ms, f"no heartbeat within {member.session_timeout_ms} ms")
            if group.state == GroupState.PREPARING_REBALANCE:
                self._maybe_complete_join(group, now_ms)
            elif group.state == GroupState.COMPLETING_REBALANCE and now_ms >= group.sync_deadline_ms:
                leader = group.members.get(group.leader_id or "")
                if leader is None or leader.sync is None:
                    self._prepare_rebalance(group, now_ms, "the leader's assignment did not come in time")
