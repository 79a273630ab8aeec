"""The fetcher manager: Kafka's fetcher ids, assignment of partitions to fetchers, and task ownership."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fetcher.partition_fetch_state import InitialFetchState
from fetcher.replica_fetcher import FetcherConfig
from fetcher.replica_fetcher_manager import (
    BrokerIdAndFetcherId,
    ReplicaFetcherManager,
    fetcher_id_for,
    java_string_hash,
)
from protocol.messages import TopicPartition
from server_common.time import ManualTime
from tests.fetcher.memory_log import MemoryLog, MemoryReplicas
from tests.fetcher.scripted_leader import ScriptedLeader


def test_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("foo") == 101574  # 102*31^2 + 111*31 + 111
    assert java_string_hash("Hello World") == -862545276  # overflows int: Java's published value


def test_fetcher_ids_follow_kafkas_formula() -> None:
    # abs(31 * hash + partition) % n, in 32-bit int arithmetic:
    # "foo": 31 * 101574 + 1 = 3148795; 3148795 % 4 = 3
    assert fetcher_id_for(TopicPartition("foo", 1), 4) == 3
    # "a": 31 * 97 + 0 = 3007; 3007 % 3 = 1
    assert fetcher_id_for(TopicPartition("a", 0), 3) == 1
    # "Hello World": 31 * -862545276 = -26738903556, wrapped to int: -969099780; abs → 969099780;
    # + partition 2 → 31 * -862545276 + 2 wraps to -969099778 → 969099778 % 5 = 3
    assert fetcher_id_for(TopicPartition("Hello World", 0), 3) == 969099780 % 3 == 0
    assert fetcher_id_for(TopicPartition("Hello World", 2), 5) == 3
    assert fetcher_id_for(TopicPartition("anything", 7), 1) == 0


class Cluster:
    def __init__(self, num_fetchers: int = 2) -> None:
        self.time = ManualTime()
        self.replicas = MemoryReplicas()
        self.leaders: list[ScriptedLeader] = []
        self.leader_logs: dict[TopicPartition, MemoryLog] = {}
        self.progress = asyncio.Event()
        self.manager = ReplicaFetcherManager(
            broker_id=9,
            config=FetcherConfig(num_replica_fetchers=num_fetchers),
            replicas=self.replicas,
            leader_end_point_factory=self._leader,
            time=self.time,
        )

    def _leader(self, leader_id: int, fetcher_id: int) -> ScriptedLeader:
        leader = ScriptedLeader(leader_id)
        leader.fetched = self.progress  # one event for every leader: "some fetcher made a round"
        for tp, mlog in self.leader_logs.items():
            leader.set_partition(tp, mlog, 0)
        self.leaders.append(leader)
        return leader

    def partitions(self, count: int) -> dict[TopicPartition, InitialFetchState]:
        states = {}
        for p in range(count):
            tp = TopicPartition("orders", p)
            self.replicas.logs[tp] = MemoryLog(tp)
            self.leader_logs[tp] = MemoryLog.with_batches(tp, [(1, 0)])
            states[tp] = InitialFetchState(leader_id=1 + p % 2, current_leader_epoch=0, init_offset=0)
        return states

    async def until(self, condition: Callable[[], bool]) -> None:
        async def wait() -> None:
            while not condition():
                self.progress.clear()
                await self.progress.wait()

        await asyncio.wait_for(wait(), timeout=10)

    def assignment(self) -> list[TopicPartition]:
        return sorted(tp for f in self.manager.fetchers.values() for tp in f.partitions())


async def test_partitions_are_grouped_by_leader_and_fetcher_id_exactly_once() -> None:
    c = Cluster(num_fetchers=2)
    states = c.partitions(8)
    c.manager.add_fetcher_for_partitions(states)
    try:
        assert c.assignment() == sorted(states)
        for key, fetcher in c.manager.fetchers.items():
            for tp in fetcher.partitions():
                assert key == BrokerIdAndFetcherId(states[tp].leader_id, fetcher_id_for(tp, 2))
        # a partition whose leader moved leaves its old fetcher
        moved = TopicPartition("orders", 0)
        c.manager.add_fetcher_for_partitions({moved: InitialFetchState(2, 1, 0)})
        assert c.assignment() == sorted(states)
        assert c.manager.fetcher_for(moved) is c.manager.fetchers[BrokerIdAndFetcherId(2, fetcher_id_for(moved, 2))]
    finally:
        await c.manager.close()


async def test_removing_partitions_returns_their_states_and_idle_fetchers_shut_down() -> None:
    c = Cluster(num_fetchers=1)
    states = c.partitions(4)
    c.manager.add_fetcher_for_partitions(states)
    leader_two = [tp for tp, s in states.items() if s.leader_id == 2]
    removed = c.manager.remove_fetcher_for_partitions(leader_two)
    assert set(removed) == set(leader_two)
    await c.manager.shutdown_idle_fetchers()
    assert set(c.manager.fetchers) == {BrokerIdAndFetcherId(1, 0)}
    assert [leader.closed for leader in c.leaders] == [False, True]
    await c.manager.close()
    assert c.manager.fetchers == {} and all(leader.closed for leader in c.leaders)


async def test_close_during_an_idle_shutdown_shuts_each_fetcher_down_once() -> None:
    # A broker killed while its idle fetchers were shutting down: both paths await the same fetcher task.
    c = Cluster(num_fetchers=1)
    states = c.partitions(4)
    c.manager.add_fetcher_for_partitions(states)
    c.manager.remove_fetcher_for_partitions(list(states))
    idle = asyncio.ensure_future(c.manager.shutdown_idle_fetchers())
    await asyncio.sleep(0)  # the idle shutdown is now waiting for the first fetcher to stop
    await c.manager.close()
    await idle
    assert c.manager.fetchers == {} and all(leader.closed for leader in c.leaders)


async def test_an_idle_fetcher_given_partitions_meanwhile_is_not_shut_down() -> None:
    c = Cluster(num_fetchers=1)
    states = c.partitions(4)
    c.manager.add_fetcher_for_partitions(states)
    c.manager.remove_fetcher_for_partitions(list(states))
    idle = asyncio.ensure_future(c.manager.shutdown_idle_fetchers())
    await asyncio.sleep(0)  # shutting down the first idle fetcher
    leader_two = {tp: s for tp, s in states.items() if s.leader_id == 2}
    c.manager.add_fetcher_for_partitions(leader_two)  # the second one is busy again
    await idle
    try:
        assert c.assignment() == sorted(leader_two)
    finally:
        await c.manager.close()


async def test_resizing_the_pool_keeps_every_partition_assigned_once() -> None:
    c = Cluster(num_fetchers=1)
    states = c.partitions(10)
    c.manager.add_fetcher_for_partitions(states)
    try:
        for size in (3, 2, 1):
            await c.manager.resize_thread_pool(size)
            assert c.assignment() == sorted(states)
            assert all(key.fetcher_id < size for key in c.manager.fetchers)
            for key, fetcher in c.manager.fetchers.items():
                assert fetcher.partition_count > 0
                assert all(fetcher_id_for(tp, size) == key.fetcher_id for tp in fetcher.partitions())
    finally:
        await c.manager.close()


async def test_fetchers_replicate_and_report_lag_through_the_manager() -> None:
    c = Cluster(num_fetchers=2)
    states = c.partitions(4)
    c.manager.add_fetcher_for_partitions(states)
    try:
        await c.until(lambda: all(c.replicas.logs[tp].log_end_offset == 1 for tp in states))
        snapshot = c.manager.snapshot()
        assert set(snapshot) == set(states)
        assert c.manager.max_lag == 0
    finally:
        await c.manager.close()


async def test_failed_partitions_are_cleared_by_removal_or_re_adding() -> None:
    c = Cluster(num_fetchers=1)
    states = c.partitions(2)
    fenced = TopicPartition("orders", 0)
    c.leader_logs[fenced] = MemoryLog.with_batches(fenced, [(1, 0)])
    c.manager.add_fetcher_for_partitions(states)
    try:
        leader = c.manager.fetcher_for(fenced)
        assert leader is not None
        leader.leader.bump_epoch(fenced, 3)  # type: ignore[attr-defined]

        await c.until(lambda: fenced in c.manager.failed_partitions)
        assert c.manager.fetcher_for(fenced) is None
        c.manager.add_fetcher_for_partitions({fenced: InitialFetchState(1, 3, 0)})
        assert fenced not in c.manager.failed_partitions
        c.manager.remove_fetcher_for_partitions({fenced})
        assert c.manager.fetcher_for(fenced) is None
    finally:
        await c.manager.close()
