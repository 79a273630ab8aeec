"""The group coordinator as scenarios: members join, the leader assigns, sessions expire, commits become
durable only when written, and a new coordinator replaying the log serves the same group and offsets.
A manual clock and an in-memory log stand in for the broker (the real broker and clients are in
tests/integration/test_consumer_groups.py)."""

from __future__ import annotations

import asyncio
import random

import pytest

from group_coordinator import GroupConfig, GroupCoordinator, java_string_hash
from group_coordinator.coordinator_records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    group_key,
    group_value,
    offset_key,
    offset_value,
    read_group_value,
    read_key,
    read_offset_value,
)
from protocol.errors import ErrorCode
from server_common.time import ManualTime

CONFIG = GroupConfig(group_initial_rebalance_delay_ms=100, offsets_topic_num_partitions=3)
RANGE = [("range", b"subscription")]


class Log:
    """__consumer_offsets as a list of records per partition; `fail_with` makes the next appends fail."""

    def __init__(self) -> None:
        self.records: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        self.fail_with = 0

    async def append(self, partition: int, records: list[tuple[bytes | None, bytes | None]]) -> int:
        await asyncio.sleep(0)
        if self.fail_with:
            return self.fail_with
        self.records.setdefault(partition, []).extend(records)
        return 0


async def coordinator(log: Log, clock: ManualTime, group: str = "g") -> GroupCoordinator:
    c = GroupCoordinator(1, clock, log.append, CONFIG, random.Random(7))
    await c.on_elected(c.partition_for(group), list(log.records.get(c.partition_for(group), [])))
    return c


async def join(c: GroupCoordinator, member_id: str = "", client: str = "c", **kw: object) -> asyncio.Task:  # type: ignore[type-arg]
    args = dict(group_id="g", member_id=member_id, group_instance_id=None, client_id=client, client_host="/h",
                session_timeout_ms=10000, rebalance_timeout_ms=5000, protocol_type="consumer", protocols=RANGE,
                require_known_member_id=True)  # fmt: skip
    args.update(kw)
    task = asyncio.create_task(c.join_group(**args))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    return task


async def new_member(c: GroupCoordinator, client: str = "c") -> str:
    first = await (await join(c, client=client))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    return first.member_id


async def settle(c: GroupCoordinator, clock: ManualTime, ms: int = 150) -> None:
    clock.advance(ms)
    c.tick(clock.milliseconds())
    await asyncio.sleep(0)


async def stable_group_of_two(c: GroupCoordinator, clock: ManualTime) -> tuple[str, str, int]:
    a, b = await new_member(c, "a"), await new_member(c, "b")
    ja, jb = await join(c, a), await join(c, b)
    await settle(c, clock)
    ra, rb = await ja, await jb
    assert ra.error_code == rb.error_code == 0 and ra.generation_id == rb.generation_id
    leader = ra if ra.leader == ra.member_id else rb
    follower = rb if leader is ra else ra
    assert [m[0] for m in leader.members] == [a, b] and follower.members == []
    fs = asyncio.create_task(c.sync_group("g", follower.generation_id, follower.member_id, None, None, None, {}))
    await asyncio.sleep(0)
    assert not fs.done()  # a follower waits for the leader's assignment
    ls = await c.sync_group("g", leader.generation_id, leader.member_id, None, None, None,
                            {leader.member_id: b"L", follower.member_id: b"F"})  # fmt: skip
    assert (ls.error_code, ls.assignment) == (0, b"L")
    assert ((await fs).error_code, (await fs).assignment) == (0, b"F")
    return leader.member_id, follower.member_id, leader.generation_id


def test_groups_map_to_partitions_as_in_kafka() -> None:
    assert java_string_hash("a") == 97
    assert java_string_hash("ab") == 3105
    # The values Java 17 gives for "my-group".hashCode() (negative: it wraps at 32 bits, signed) and for
    # a string with a character outside the BMP (counted as its two UTF-16 surrogates).
    assert java_string_hash("my-group") == -1906497762
    assert java_string_hash("\u00e9\U0001f600") == 1996812
    c = GroupCoordinator(1, ManualTime(), Log().append, GroupConfig(offsets_topic_num_partitions=50))
    assert c.partition_for("my-group") == 36  # (hashCode & 0x7fffffff) % 50, as Kafka's Utils.abs


async def test_two_members_join_and_each_gets_the_leaders_assignment_for_it() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    await stable_group_of_two(c, clock)
    assert c.describe_group("g").state == "Stable"
    assert [k for k, _ in log.records[c.partition_for("g")]] != []  # the membership was written


async def test_a_third_member_starts_a_rebalance_and_a_new_generation() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    leader, follower, generation = await stable_group_of_two(c, clock)
    third = await new_member(c, "c")
    joining = await join(c, third)
    assert c.heartbeat("g", generation, follower, None) == ErrorCode.REBALANCE_IN_PROGRESS
    rejoins = [await join(c, leader), await join(c, follower)]
    results = [await t for t in [joining, *rejoins]]
    assert {r.generation_id for r in results} == {generation + 1}
    assert {r.error_code for r in results} == {0}


async def test_a_silent_member_is_removed_after_its_session_timeout_and_the_others_rebalance() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    leader, follower, generation = await stable_group_of_two(c, clock)
    for _ in range(12):  # the leader heartbeats every second; the follower says nothing for 12 s
        clock.advance(1000)
        c.tick(clock.milliseconds())
        code = c.heartbeat("g", generation, leader, None)
    assert code == ErrorCode.REBALANCE_IN_PROGRESS
    assert c.heartbeat("g", generation, follower, None) == ErrorCode.UNKNOWN_MEMBER_ID
    rejoined = await (await join(c, leader))
    assert rejoined.generation_id == generation + 1 and [m[0] for m in rejoined.members] == [leader]


async def test_heartbeats_and_commits_from_a_stale_generation_or_an_unknown_member_are_refused() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    leader, _, generation = await stable_group_of_two(c, clock)
    assert c.heartbeat("g", generation, leader, None) == 0
    assert c.heartbeat("g", generation - 1, leader, None) == ErrorCode.ILLEGAL_GENERATION
    assert c.heartbeat("g", generation, "nobody", None) == ErrorCode.UNKNOWN_MEMBER_ID
    commit = {("t", 0): (5, -1, None)}
    assert await c.commit_offsets("g", generation - 1, leader, None, commit) == {("t", 0): ErrorCode.ILLEGAL_GENERATION}
    assert await c.commit_offsets("g", generation, "nobody", None, commit) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert await c.commit_offsets("g", -1, "", None, commit) == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    assert await c.commit_offsets("g", generation, leader, None, commit) == {("t", 0): 0}
    assert c.fetch_offsets("g", [("t", 0), ("t", 1)]) == (0, {("t", 0): (5, -1, "", 0), ("t", 1): (-1, -1, "", 0)})


async def test_a_commit_is_visible_only_once_it_is_written() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    log.fail_with = int(ErrorCode.NOT_ENOUGH_REPLICAS)
    answer = await c.commit_offsets("g", -1, "", None, {("t", 0): (9, 3, "m")})
    assert answer == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert c.fetch_offsets("g", [("t", 0)])[1][("t", 0)][0] == -1
    log.fail_with = 0
    assert await c.commit_offsets("g", -1, "", None, {("t", 0): (9, 3, "m")}) == {("t", 0): 0}
    assert c.fetch_offsets("g", None) == (0, {("t", 0): (9, 3, "m", 0)})


async def test_a_new_coordinator_replaying_the_log_has_the_same_offsets_and_group() -> None:
    clock, log = ManualTime(), Log()
    old = await coordinator(log, clock)
    leader, follower, generation = await stable_group_of_two(old, clock)
    assert await old.commit_offsets("g", generation, leader, None, {("t", 0): (42, 1, None)}) == {("t", 0): 0}
    waiting = await join(old, await new_member(old, "late"))

    old.on_resigned(old.partition_for("g"))  # the leadership of the group's partition moves
    assert (await waiting).error_code == ErrorCode.NOT_COORDINATOR
    assert old.heartbeat("g", generation, leader, None) == ErrorCode.NOT_COORDINATOR

    new = await coordinator(log, clock)
    assert new.fetch_offsets("g", [("t", 0)]) == (0, {("t", 0): (42, 1, "", 0)})
    description = new.describe_group("g")
    assert description.state == "Stable" and [m.member_id for m in description.members] == [leader, follower]
    assert new.heartbeat("g", generation, follower, None) == 0  # the members go on where they were
    assert await new.commit_offsets("g", generation, follower, None, {("t", 1): (7, 1, None)}) == {("t", 1): 0}


async def test_requests_for_a_partition_not_led_here_or_still_loading_say_so() -> None:
    clock, log = ManualTime(), Log()
    c = GroupCoordinator(1, clock, log.append, CONFIG)
    assert c.heartbeat("g", 0, "m", None) == ErrorCode.NOT_COORDINATOR
    assert (await c.join_group("g", "", None, "c", "/h", 10000, 5000, "consumer", RANGE, True)).error_code == (
        ErrorCode.NOT_COORDINATOR
    )
    gate = asyncio.Event()

    async def slow_records():  # type: ignore[no-untyped-def]
        await gate.wait()
        for record in []:
            yield record

    loading = asyncio.create_task(c.on_elected(c.partition_for("g"), slow_records()))
    await asyncio.sleep(0)
    assert c.heartbeat("g", 0, "m", None) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    gate.set()
    await loading
    assert c.heartbeat("g", 0, "m", None) == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await c.join_group("", "", None, "c", "/h", 10000, 5000, "consumer", RANGE, True)).error_code == (
        ErrorCode.INVALID_GROUP_ID
    )
    assert (await c.join_group("g", "", None, "c", "/h", 10, 5000, "consumer", RANGE, True)).error_code == (
        ErrorCode.INVALID_SESSION_TIMEOUT
    )


async def test_a_member_that_leaves_rebalances_the_rest_and_the_last_one_empties_the_group() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    leader, follower, generation = await stable_group_of_two(c, clock)
    assert await c.leave_group("g", [(follower, None), ("ghost", None)]) == (
        0,
        [(follower, None, 0), ("ghost", None, ErrorCode.UNKNOWN_MEMBER_ID)],
    )
    assert c.describe_group("g").state == "PreparingRebalance"
    assert (await (await join(c, leader))).generation_id == generation + 1
    await c.leave_group("g", [(leader, None)])
    assert c.describe_group("g").state == "Empty"
    assert await c.commit_offsets("g", -1, "", None, {("t", 0): (1, -1, None)}) == {("t", 0): 0}


def test_the_records_are_kafkas_layouts_and_read_back() -> None:
    key = offset_key("g", "t", 3)
    assert key == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    assert read_key(key) == OffsetKey("g", "t", 3)
    assert read_key(group_key("g")) == GroupKey("g")
    value = OffsetValue(10, 2, "meta", 1_700_000_000_000)
    assert read_offset_value(offset_value(value)) == value
    group = GroupValue("consumer", 4, "range", "m1", 5, (MemberValue("m1", None, "c", "/h", 1, 2, b"s", b"a"),))
    assert read_group_value(group_value(group)) == group


@pytest.mark.parametrize("bad", [b"", b"\x00\x09", b"\x00\x01\x00"])
def test_a_record_that_does_not_parse_is_skipped_on_load(bad: bytes) -> None:
    async def scenario() -> None:
        c = GroupCoordinator(1, ManualTime(), Log().append, CONFIG)
        await c.on_elected(
            c.partition_for("g"), [(bad, b"x"), (offset_key("g", "t", 0), offset_value(OffsetValue(1, -1, "", 0)))]
        )
        assert c.fetch_offsets("g", [("t", 0)])[1][("t", 0)][0] == 1

    asyncio.run(scenario())


# -- static membership (KIP-345) ------------------------------------------------------------------------


async def static_group_of_two(c: GroupCoordinator, clock: ManualTime) -> dict[str, str]:
    """Instances i-a and i-b joined (no MEMBER_ID_REQUIRED round for static members), i-a leading, assigned
    b"A" and b"B"; their member ids by instance."""
    ja, jb = await join(c, group_instance_id="i-a"), await join(c, group_instance_id="i-b")
    await settle(c, clock)
    ra, rb = await ja, await jb
    assert ra.error_code == rb.error_code == 0 and ra.member_id.startswith("i-a-") and ra.leader == ra.member_id
    assert [(m, i) for m, i, _ in ra.members] == [(ra.member_id, "i-a"), (rb.member_id, "i-b")]
    fs = asyncio.create_task(c.sync_group("g", rb.generation_id, rb.member_id, "i-b", None, None, {}))
    await asyncio.sleep(0)
    ls = await c.sync_group("g", ra.generation_id, ra.member_id, "i-a", None, None,
                            {ra.member_id: b"A", rb.member_id: b"B"})  # fmt: skip
    assert (ls.assignment, (await fs).assignment) == (b"A", b"B")
    return {"i-a": ra.member_id, "i-b": rb.member_id}


async def test_a_restarted_static_member_gets_its_assignment_back_without_a_rebalance_and_fences_its_old_id() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    ids = await static_group_of_two(c, clock)
    generation = c.groups["g"].generation_id
    again = await (await join(c, group_instance_id="i-a"))  # the leader's process restarted: no member id
    assert again.error_code == 0 and again.generation_id == generation and again.members == []
    assert again.member_id != ids["i-a"] and again.member_id.startswith("i-a-")
    assert again.leader == ids["i-a"]  # the old id: the new one must not think it leads and assign
    assert c.describe_group("g").state == "Stable"
    synced = await c.sync_group("g", generation, again.member_id, "i-a", None, None, {})
    assert (synced.error_code, synced.assignment) == (0, b"A")
    assert c.heartbeat("g", generation, again.member_id, "i-a") == 0
    assert c.heartbeat("g", generation, ids["i-b"], "i-b") == 0  # the other member saw no rebalance
    # The old process, still alive somewhere, is told to stop.
    assert c.heartbeat("g", generation, ids["i-a"], "i-a") == ErrorCode.FENCED_INSTANCE_ID
    commit = {("t", 0): (5, -1, None)}
    fenced = {("t", 0): ErrorCode.FENCED_INSTANCE_ID}
    assert await c.commit_offsets("g", generation, ids["i-a"], "i-a", commit) == fenced
    old_sync = await c.sync_group("g", generation, ids["i-a"], "i-a", None, None, {})
    assert old_sync.error_code == ErrorCode.FENCED_INSTANCE_ID
    rejoin_old = await (await join(c, ids["i-a"], group_instance_id="i-a"))
    assert rejoin_old.error_code == ErrorCode.FENCED_INSTANCE_ID
    # The new member id was written: a coordinator that loads the group knows the instance by it.
    new = await coordinator(log, clock)
    assert new.heartbeat("g", generation, again.member_id, "i-a") == 0
    assert new.heartbeat("g", generation, ids["i-a"], "i-a") == ErrorCode.FENCED_INSTANCE_ID


async def test_a_static_member_rejoining_while_the_leader_assigns_rebalances_and_fences_the_waiting_old_id() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    ja, jb = await join(c, group_instance_id="i-a"), await join(c, group_instance_id="i-b")
    await settle(c, clock)
    ra, rb = await ja, await jb
    waiting = asyncio.create_task(c.sync_group("g", rb.generation_id, rb.member_id, "i-b", None, None, {}))
    await asyncio.sleep(0)
    assert c.describe_group("g").state == "CompletingRebalance"
    rejoin = await join(c, group_instance_id="i-b")
    assert (await waiting).error_code == ErrorCode.FENCED_INSTANCE_ID
    assert c.describe_group("g").state == "PreparingRebalance"
    leader_again = await join(c, ra.member_id, group_instance_id="i-a")
    await settle(c, clock)
    r1, r2 = await leader_again, await rejoin
    assert r1.error_code == r2.error_code == 0 and r1.generation_id == r2.generation_id == ra.generation_id + 1
    assert {m for m, _, _ in r1.members} == {ra.member_id, r2.member_id}


async def test_an_admin_removes_a_static_member_by_its_instance_id_and_an_expired_one_loses_its_place() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    ids = await static_group_of_two(c, clock)
    assert await c.leave_group("g", [("", "i-b"), ("", "i-zz")]) == (
        0,
        [(ids["i-b"], "i-b", 0), ("", "i-zz", ErrorCode.UNKNOWN_MEMBER_ID)],
    )
    assert c.describe_group("g").state == "PreparingRebalance"
    assert c.heartbeat("g", 0, ids["i-b"], "i-b") == ErrorCode.UNKNOWN_MEMBER_ID
    assert (await c.leave_group("g", [(ids["i-b"], "i-a")]))[1] == [(ids["i-b"], "i-a", ErrorCode.FENCED_INSTANCE_ID)]
    # i-a goes silent past its session: the group forgets the instance, so it joins afresh later.
    clock.advance(11_000)
    c.tick(clock.milliseconds())
    assert "i-a" not in c.groups["g"].static_members and c.describe_group("g").state == "Empty"
    fresh = await join(c, group_instance_id="i-a")
    await settle(c, clock)
    assert (await fresh).error_code == 0 and (await fresh).member_id != ids["i-a"]


async def test_a_static_rejoin_whose_write_fails_keeps_the_old_member_id() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    ids = await static_group_of_two(c, clock)
    generation = c.groups["g"].generation_id
    log.fail_with = int(ErrorCode.NOT_ENOUGH_REPLICAS)
    failed = await (await join(c, group_instance_id="i-b"))
    assert failed.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and failed.member_id == ""
    assert c.heartbeat("g", generation, ids["i-b"], "i-b") == 0
    assert c.groups["g"].static_members == ids


# -- offset retention -------------------------------------------------------------------------------------

RETENTION = GroupConfig(
    group_initial_rebalance_delay_ms=100, offsets_topic_num_partitions=3, offsets_retention_minutes=1
)


async def test_an_empty_groups_offsets_expire_a_retention_after_it_emptied_and_the_group_is_gone() -> None:
    clock, log = ManualTime(), Log()
    c = GroupCoordinator(1, clock, log.append, RETENTION, random.Random(7))
    await c.on_elected(c.partition_for("g"), [])
    leader, follower, generation = await stable_group_of_two(c, clock)
    assert await c.commit_offsets("g", generation, leader, None, {("t", 0): (10, 1, None)}) == {("t", 0): 0}
    clock.advance(120_000)  # long after the commit: a group with members keeps its offsets
    assert await c.expire_offsets() == 0
    await c.leave_group("g", [(leader, None), (follower, None)])
    await asyncio.sleep(0)  # the empty group's record is written
    assert c.describe_group("g").state == "Empty"
    clock.advance(59_000)
    assert await c.expire_offsets() == 0  # retention counts from when the group became Empty
    clock.advance(1_000)
    assert await c.expire_offsets() == 1
    assert c.fetch_offsets("g", [("t", 0)])[1][("t", 0)][0] == -1 and "g" not in c.groups
    # Tombstones in the log: a coordinator that loads it finds neither the offset nor the group's members.
    new = GroupCoordinator(1, clock, log.append, RETENTION)
    await new.on_elected(new.partition_for("g"), list(log.records[new.partition_for("g")]))
    assert new.fetch_offsets("g", [("t", 0)])[1][("t", 0)][0] == -1
    assert new.describe_group("g").state == "Dead" and new.describe_group("g").members == []


async def test_a_standalone_groups_offsets_expire_by_their_commit_time_but_not_while_a_commit_is_written() -> None:
    clock, log = ManualTime(), Log()
    c = GroupCoordinator(1, clock, log.append, RETENTION, random.Random(7))
    await c.on_elected(c.partition_for("g"), [])
    assert await c.commit_offsets("g", -1, "", None, {("t", 0): (5, -1, None)}) == {("t", 0): 0}
    clock.advance(30_000)
    assert await c.commit_offsets("g", -1, "", None, {("t", 1): (6, -1, None)}) == {("t", 1): 0}
    clock.advance(30_000)
    assert await c.expire_offsets() == 1  # t-0's commit is a minute old, t-1's half a minute
    assert sorted(c.fetch_offsets("g", None)[1]) == [("t", 1)]
    clock.advance(30_000)
    gate = asyncio.Event()
    original = log.append

    async def slow_append(partition: int, records: list[tuple[bytes | None, bytes | None]]) -> int:
        await gate.wait()
        return await original(partition, records)

    c.append = slow_append  # type: ignore[method-assign]
    recommit = asyncio.create_task(c.commit_offsets("g", -1, "", None, {("t", 1): (7, -1, None)}))
    await asyncio.sleep(0)
    c.append = original  # type: ignore[method-assign]
    assert await c.expire_offsets() == 0  # t-1's new commit is being written: not expired under it
    gate.set()
    assert await recommit == {("t", 1): 0}
    assert c.fetch_offsets("g", None)[1] == {("t", 1): (7, -1, "", 0)}


async def test_deleting_groups_removes_an_empty_one_with_its_offsets_and_refuses_the_others() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    leader, follower, generation = await stable_group_of_two(c, clock)
    assert await c.commit_offsets("g", generation, leader, None, {("t", 0): (10, 1, None)}) == {("t", 0): 0}
    standalone = "s"  # offsets only (assign() and commits): Empty, never had members
    await c.on_elected(c.partition_for(standalone), list(log.records.get(c.partition_for(standalone), [])))
    assert await c.commit_offsets(standalone, -1, "", None, {("t", 1): (5, -1, None)}) == {("t", 1): 0}
    other = GroupCoordinator(2, clock, Log().append, CONFIG)  # coordinates nothing

    assert await c.delete_groups(["g", standalone, "never-used", ""]) == {
        "g": ErrorCode.NON_EMPTY_GROUP,
        standalone: 0,
        "never-used": ErrorCode.GROUP_ID_NOT_FOUND,
        "": ErrorCode.INVALID_GROUP_ID,
    }
    assert await other.delete_groups(["g"]) == {"g": ErrorCode.NOT_COORDINATOR}
    assert c.describe_group(standalone).state == "Dead" and c.fetch_offsets(standalone, None)[1] == {}
    assert await c.delete_groups([standalone]) == {standalone: ErrorCode.GROUP_ID_NOT_FOUND}

    # Once its members have left, "g" goes too: tombstones for its offset and for the group
    await c.leave_group("g", [(leader, None), (follower, None)])
    await asyncio.sleep(0)
    assert await c.delete_groups(["g"]) == {"g": 0}
    assert "g" not in c.groups and [name for name, *_ in c.list_groups()] == []
    tail = log.records[c.partition_for("g")][-2:]
    assert [(read_key(k or b""), v) for k, v in tail] == [(OffsetKey("g", "t", 0), None), (GroupKey("g"), None)]

    # A coordinator replaying the log knows neither group (nor their offsets)
    for group in ("g", standalone):
        new = GroupCoordinator(1, clock, log.append, CONFIG)
        await new.on_elected(new.partition_for(group), list(log.records[new.partition_for(group)]))
        assert group not in new.groups and new.describe_group(group).state == "Dead"


async def test_a_group_whose_tombstones_were_not_written_is_kept_and_the_error_answered() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    assert await c.commit_offsets("g", -1, "", None, {("t", 0): (3, -1, None)}) == {("t", 0): 0}
    log.fail_with = int(ErrorCode.NOT_ENOUGH_REPLICAS)
    assert await c.delete_groups(["g"]) == {"g": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert c.fetch_offsets("g", None)[1] == {("t", 0): (3, -1, "", 0)}
    log.fail_with = 0
    assert await c.delete_groups(["g"]) == {"g": 0}
    assert c.fetch_offsets("g", None)[1] == {}


async def test_commit_metadata_over_offset_metadata_max_bytes_is_refused_for_its_partition_only() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    too_long = "m" * (CONFIG.offset_metadata_max_bytes + 1)
    offsets: dict[tuple[str, int], tuple[int, int, str | None]] = {
        ("t", 0): (5, -1, "x" * CONFIG.offset_metadata_max_bytes),
        ("t", 1): (7, -1, too_long),
    }
    answers = await c.commit_offsets("g", -1, "", None, offsets)
    assert answers == {("t", 0): 0, ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE}
    _, committed = c.fetch_offsets("g", [("t", 0), ("t", 1)])
    assert committed[("t", 0)][0] == 5 and committed[("t", 1)][0] == -1
    assert len(log.records[c.partition_for("g")]) == 1  # only the one that fits was written


async def test_a_group_whose_record_is_too_large_to_write_fails_its_sync_and_lets_its_members_go() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    a, b = await new_member(c, "a"), await new_member(c, "b")
    ja, jb = await join(c, a), await join(c, b)
    await settle(c, clock)
    ra, rb = await ja, await jb
    leader = ra if ra.leader == ra.member_id else rb
    follower = rb if leader is ra else ra
    fs = asyncio.create_task(c.sync_group("g", follower.generation_id, follower.member_id, None, None, None, {}))
    await asyncio.sleep(0)
    log.fail_with = int(ErrorCode.MESSAGE_TOO_LARGE)  # the record of the assignments is over max.message.bytes
    ls = await c.sync_group("g", leader.generation_id, leader.member_id, None, None, None,
                            {leader.member_id: b"L" * 100, follower.member_id: b"F" * 100})  # fmt: skip
    assert ls.error_code == (await fs).error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    # Not a group that rebalances for ever around a record it cannot write: empty, its members forgotten.
    described = c.describe_group("g")
    assert (described.state, described.members) == ("Empty", [])
    assert c.heartbeat("g", leader.generation_id, leader.member_id, None) == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_group_takes_at_most_group_max_size_members_counting_those_waiting_for_an_id() -> None:
    clock, log = ManualTime(), Log()
    c = GroupCoordinator(1, clock, log.append, GroupConfig(**{**vars(CONFIG), "group_max_size": 3}), random.Random(7))
    await c.on_elected(c.partition_for("g"), [])
    ids = [await new_member(c, f"c{i}") for i in range(3)]
    refused = await (await join(c, client="c3"))
    assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    joined = await join(c, ids[0])  # one of the three, coming back with its id, is let in
    await settle(c, clock, 10_000)
    assert (await joined).error_code == 0


async def test_a_group_of_joins_that_never_came_back_is_forgotten_when_their_ids_expire() -> None:
    clock, log = ManualTime(), Log()
    c = await coordinator(log, clock)
    owned = [g for g in (f"junk-{i}" for i in range(200)) if c.partition_for(g) == c.partition_for("g")]
    for group in owned:
        first = await (await join(c, group_id=group))
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert len(c.groups) == len(owned) > 10
    await settle(c, clock, 10_001)  # the session timeout of the ids handed out
    assert c.groups == {}
    assert log.records == {}  # nothing of them was ever written, so nothing to tombstone
