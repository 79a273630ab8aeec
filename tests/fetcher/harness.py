"""A follower fetcher wired to a scripted leader, in-memory follower logs and a manual clock."""

from __future__ import annotations

from collections.abc import Callable

from broker.replication_quota import ReplicationQuotaManager
from fetcher.partition_fetch_state import InitialFetchState, PartitionFetchState, ReplicaState
from fetcher.replica_fetcher import FetcherConfig, ReplicaFetcher
from protocol.messages import TopicPartition
from server_common.time import ManualTime
from tests.fetcher.memory_log import MemoryLog, MemoryReplicas
from tests.fetcher.scripted_leader import ScriptedLeader

LEADER_ID = 1
FOLLOWER_ID = 2


def single(epoch: int, count: int) -> list[tuple[int, int]]:
    """`count` one-record batches in `epoch`, as a MemoryLog.with_batches spec."""
    return [(1, epoch)] * count


class Harness:
    def __init__(
        self,
        *,
        backoff_ms: int = 1000,
        sessions: bool = False,
        batches_per_fetch: int = 1,
        quota: ReplicationQuotaManager | None = None,
        config: FetcherConfig | None = None,
        time: ManualTime | None = None,
        broker_epoch: int = -1,
    ) -> None:
        self.time = time or ManualTime()
        self.broker_epoch = broker_epoch
        self.leader = ScriptedLeader(LEADER_ID, sessions=sessions, batches_per_fetch=batches_per_fetch)
        self.replicas = MemoryReplicas()
        self.failed_reports: list[set[TopicPartition]] = []
        self.config = config or FetcherConfig(replica_fetch_backoff_ms=backoff_ms)
        self.fetcher = ReplicaFetcher(
            "fetcher-0-1",
            0,
            self.leader,
            self.replicas,
            self.config,
            self.time,
            FOLLOWER_ID,
            quota=quota,
            on_partitions_failed=self.failed_reports.append,
            broker_epoch=lambda: self.broker_epoch,
        )

    def follower_log(
        self, tp: TopicPartition, spec: list[tuple[int, int]] | None = None, high_watermark: int | None = None
    ) -> MemoryLog:
        mlog = MemoryLog.with_batches(tp, spec or [], high_watermark=high_watermark)
        self.replicas.logs[tp] = mlog
        return mlog

    def leader_log(
        self,
        tp: TopicPartition,
        spec: list[tuple[int, int]],
        leader_epoch: int,
        high_watermark: int | None = None,
    ) -> MemoryLog:
        mlog = MemoryLog.with_batches(tp, spec, high_watermark=high_watermark)
        self.leader.set_partition(tp, mlog, leader_epoch)
        return mlog

    def add(self, tp: TopicPartition, leader_epoch: int, init_offset: int | None = None) -> None:
        offset = self.replicas.logs[tp].high_watermark if init_offset is None else init_offset
        self.fetcher.add_partitions({tp: InitialFetchState(LEADER_ID, leader_epoch, offset)})

    def state(self, tp: TopicPartition) -> PartitionFetchState:
        state = self.fetcher.fetch_state(tp)
        assert state is not None, f"{tp} has no fetch state"
        return state

    def is_fetching(self, tp: TopicPartition) -> bool:
        state = self.fetcher.fetch_state(tp)
        return state is not None and state.state is ReplicaState.FETCHING

    async def run_until(self, condition: Callable[[], bool], max_rounds: int = 100) -> int:
        """do_work until `condition` holds; returns the rounds it took. Fails after `max_rounds`."""
        for rounds in range(max_rounds):
            if condition():
                return rounds
            await self.fetcher.do_work()
        assert condition(), f"condition not reached in {max_rounds} rounds"
        return max_rounds

    def in_step(self, tp: TopicPartition) -> bool:
        """The follower's log holds exactly the leader's bytes, and the same start, end and HW."""
        follower = self.replicas.logs[tp]
        leader = self.leader.partitions[tp].log
        return (
            follower.batches == leader.batches
            and follower.log_start_offset == leader.log_start_offset
            and follower.log_end_offset == leader.log_end_offset
            and follower.high_watermark == leader.high_watermark
        )
