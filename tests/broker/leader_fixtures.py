"""One broker's leader side on real logs, for the partition / replica manager / purgatory scenarios.

`LeaderBroker` wires the real pieces together the way `broker_server.py` does, minus the sockets: a
`LogManager` on a temporary directory, a fetch and a produce purgatory each with its own `SystemTimer`,
and the `ReplicaManager`, all on one `ManualTime`. Time moves only through `advance(ms)`, which also
advances both timers, so an expiring DelayedFetch / DelayedProduce completes exactly then.

Followers are not real brokers here: a follower is whoever sends FETCH with `replica_id >= 0`, so a test
says "follower 1 fetches at offset 5" and the leader records exactly that. A parked FETCH or acks=all
PRODUCE is an asyncio task waiting on its response future; `start_fetch` / `start_produce` return the
task after letting it run up to that wait, and `outcome(task)` hands back its result once the test has
caused it to complete (failing the test, rather than hanging, if it did not).

The only doubles are the two edges the replica manager talks to that are not under test: the follower
fetcher manager and the controller's ALTER_PARTITION channel, both of which just record the calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from broker.kafka_apis import answered
from broker.log_manager import LogManager
from broker.partition import Partition
from broker.purgatory import DelayedOperationPurgatory
from broker.replica_manager import FetchParams, ReplicaManager
from broker.timer import SystemTimer
from fetcher.partition_fetch_state import InitialFetchState
from protocol.messages import (
    CONSUMER_REPLICA_ID,
    NO_LEADER_EPOCH,
    UNDEFINED_EPOCH,
    FetchPartition,
    FetchPartitionResponse,
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    ProducePartition,
    ProducePartitionResponse,
    TopicPartition,
)
from protocol.record_batch import build_batch, iter_headers, iter_records
from server_common.time import ManualTime
from storage.log import LogConfig

T = TypeVar("T")

START_MS = 1_700_000_000_000
LOCAL_ID = 0  # the broker under test
FOLLOWER_ID = 1
OTHER_FOLLOWER_ID = 2
TOPIC = "orders"
TP0 = TopicPartition(TOPIC, 0)
TP1 = TopicPartition(TOPIC, 1)
BIG = 1 << 20  # a byte cap that never binds


def batch(*values: bytes, timestamp_ms: int = START_MS) -> bytes:
    """A producer batch (offsets and epoch are assigned by the leader)."""
    return build_batch(list(values) or [b"v"], timestamp_ms=timestamp_ms)


def values_of(records: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in a record set."""
    return [(r.offset, r.value) for r in iter_records(records)]


def batch_epochs(records: bytes) -> list[int]:
    return [h.partition_leader_epoch for h in iter_headers(records)]


class RecordingFetcherManager:
    """Stands in for the follower fetchers: remembers what the replica manager asked them to do."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, Any]:
        self.calls.append(("remove", frozenset(tps)))
        return {}

    def add_fetcher_for_partitions(self, initial_states: Mapping[TopicPartition, Any]) -> None:
        self.calls.append(("add", dict(initial_states)))


@dataclass
class RecordingIsrSink:
    """Stands in for ALTER_PARTITION: proposals are recorded and stay in flight until the test commits."""

    proposals: list[tuple[TopicPartition, frozenset[int]]] = field(default_factory=list)

    def propose(self, partition: Partition, new_isr: frozenset[int]) -> None:
        self.proposals.append((partition.topic_partition, new_isr))


class LeaderBroker:
    def __init__(
        self,
        log_dir: Path,
        time: ManualTime | None = None,
        *,
        broker_id: int = LOCAL_ID,
        replica_lag_time_max_ms: int = 30_000,
        min_insync_replicas: int = 1,
        isr_sink: RecordingIsrSink | None = None,
        purge_interval: int = 1000,
        log_config: LogConfig | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.time = time or ManualTime(START_MS)
        self.log_manager = LogManager(log_dir, log_config or LogConfig(), self.time)
        self.fetch_timer = SystemTimer(self.time)
        self.produce_timer = SystemTimer(self.time)
        self.fetch_purgatory: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            "Fetch", self.fetch_timer, purge_interval=purge_interval
        )
        self.produce_purgatory: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            "Produce", self.produce_timer, purge_interval=purge_interval
        )
        self.replica_manager = ReplicaManager(
            broker_id,
            self.log_manager,
            self.time,
            self.fetch_purgatory,
            self.produce_purgatory,
            replica_lag_time_max_ms=replica_lag_time_max_ms,
            min_insync_replicas=min_insync_replicas,
            isr_sink=isr_sink,
        )
        self.fetcher_manager = RecordingFetcherManager()
        self.replica_manager.fetcher_manager = self.fetcher_manager
        self.replica_manager.initial_fetch_state_factory = InitialFetchState
        self.isr_sink = isr_sink
        self.controller_epoch = 1

    # -- time -----------------------------------------------------------------------------------------

    def advance(self, ms: int) -> None:
        """Move the clock and let both purgatories' timers fire whatever is now due."""
        self.time.advance(ms)
        self.fetch_timer.advance_clock()
        self.produce_timer.advance_clock()

    @property
    def now_ms(self) -> int:
        return self.time.milliseconds()

    # -- LEADER_AND_ISR -------------------------------------------------------------------------------

    def leader_and_isr(
        self,
        tp: TopicPartition,
        *,
        leader: int,
        leader_epoch: int,
        isr: Sequence[int],
        replicas: Sequence[int] = (LOCAL_ID, FOLLOWER_ID),
        partition_epoch: int | None = None,
        topic_id: str = "",
    ) -> LeaderAndIsrResponse:
        state = LeaderAndIsrPartition(
            tp.topic,
            tp.partition,
            leader=leader,
            leader_epoch=leader_epoch,
            isr=list(isr),
            partition_epoch=leader_epoch if partition_epoch is None else partition_epoch,
            replicas=list(replicas),
            topic_id=topic_id,
        )
        request = LeaderAndIsrRequest(controller_id=3000, controller_epoch=self.controller_epoch, partitions=[state])
        return self.replica_manager.become_leader_or_follower(request)

    def make_leader(
        self,
        tp: TopicPartition = TP0,
        *,
        leader_epoch: int = 1,
        isr: Sequence[int] = (LOCAL_ID, FOLLOWER_ID),
        replicas: Sequence[int] = (LOCAL_ID, FOLLOWER_ID),
        partition_epoch: int | None = None,
        topic_id: str = "",
    ) -> Partition:
        response = self.leader_and_isr(
            tp,
            leader=self.replica_manager.broker_id,
            leader_epoch=leader_epoch,
            isr=isr,
            replicas=replicas,
            partition_epoch=partition_epoch,
            topic_id=topic_id,
        )
        assert [p.error_code for p in response.partitions] == [0], response
        return self.partition(tp)

    def make_follower(
        self,
        tp: TopicPartition = TP0,
        *,
        leader: int = FOLLOWER_ID,
        leader_epoch: int = 2,
        isr: Sequence[int] = (LOCAL_ID, FOLLOWER_ID),
        replicas: Sequence[int] = (LOCAL_ID, FOLLOWER_ID),
    ) -> Partition:
        response = self.leader_and_isr(tp, leader=leader, leader_epoch=leader_epoch, isr=isr, replicas=replicas)
        assert [p.error_code for p in response.partitions] == [0], response
        return self.partition(tp)

    def partition(self, tp: TopicPartition = TP0) -> Partition:
        return self.replica_manager.partitions[tp]

    # -- PRODUCE --------------------------------------------------------------------------------------

    async def produce(
        self, tp: TopicPartition, *values: bytes, acks: int = 1, timeout_ms: int = 30_000
    ) -> ProducePartitionResponse:
        responses: list[ProducePartitionResponse] = await answered(
            lambda respond: self.replica_manager.append_records(
                timeout_ms, acks, [ProducePartition(tp.topic, tp.partition, batch(*values))], respond
            )
        )
        [response] = responses
        return response

    async def start_produce(
        self, entries: Mapping[TopicPartition, Sequence[bytes]], *, acks: int = -1, timeout_ms: int = 30_000
    ) -> asyncio.Task[list[ProducePartitionResponse]]:
        partitions = [ProducePartition(tp.topic, tp.partition, batch(*values)) for tp, values in entries.items()]
        return await started(
            answered(lambda respond: self.replica_manager.append_records(timeout_ms, acks, partitions, respond))
        )

    # -- FETCH ----------------------------------------------------------------------------------------

    def fetch_request(
        self,
        replica_id: int,
        offsets: Mapping[TopicPartition, int],
        *,
        current_leader_epoch: int = NO_LEADER_EPOCH,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = BIG,
        partition_max_bytes: int = BIG,
        log_start_offset: int = 0,
        last_fetched_epoch: int = UNDEFINED_EPOCH,
        replica_epoch: int = -1,
    ) -> tuple[FetchParams, list[FetchPartition]]:
        params = FetchParams(replica_id, max_wait_ms, min_bytes, max_bytes, replica_epoch=replica_epoch)
        infos = [
            FetchPartition(
                tp.topic,
                tp.partition,
                offset,
                partition_max_bytes,
                log_start_offset=log_start_offset,
                current_leader_epoch=current_leader_epoch,
                last_fetched_epoch=last_fetched_epoch,
            )
            for tp, offset in offsets.items()
        ]
        return params, infos

    async def fetch(
        self, replica_id: int, offsets: Mapping[TopicPartition, int], **kwargs: Any
    ) -> dict[TopicPartition, FetchPartitionResponse]:
        """An immediate FETCH (max_wait_ms 0 unless given): the responses by partition."""
        params, infos = self.fetch_request(replica_id, offsets, **kwargs)
        return by_partition(await answered(lambda respond: self.replica_manager.fetch_messages(params, infos, respond)))

    async def follower_fetch(
        self, offset: int, tp: TopicPartition = TP0, replica_id: int = FOLLOWER_ID, **kwargs: Any
    ) -> FetchPartitionResponse:
        return (await self.fetch(replica_id, {tp: offset}, **kwargs))[tp]

    async def consumer_fetch(self, offset: int, tp: TopicPartition = TP0, **kwargs: Any) -> FetchPartitionResponse:
        return (await self.fetch(CONSUMER_REPLICA_ID, {tp: offset}, **kwargs))[tp]

    async def start_fetch(
        self, replica_id: int, offsets: Mapping[TopicPartition, int], **kwargs: Any
    ) -> asyncio.Task[list[FetchPartitionResponse]]:
        """A FETCH that may park: the task, run up to the point where it waits for its response."""
        params, infos = self.fetch_request(replica_id, offsets, **kwargs)
        return await started(answered(lambda respond: self.replica_manager.fetch_messages(params, infos, respond)))

    # -- lifecycle ------------------------------------------------------------------------------------

    def close(self) -> None:
        self.fetch_purgatory.shutdown()
        self.produce_purgatory.shutdown()
        self.log_manager.close()


def by_partition(responses: Iterable[FetchPartitionResponse]) -> dict[TopicPartition, FetchPartitionResponse]:
    return {TopicPartition(r.topic, r.partition): r for r in responses}


async def _yield_to_loop(times: int = 3) -> None:
    # Not a sleep: lets ready tasks run up to their next await (a parked request's response future).
    for _ in range(times):
        await asyncio.sleep(0)


async def started(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    task = asyncio.get_running_loop().create_task(coro)
    await _yield_to_loop()
    return task


async def outcome(task: asyncio.Task[T]) -> T:
    """The result of a request the test has just caused to complete; fails if it is still parked."""
    await _yield_to_loop()
    assert task.done(), "the request is still waiting in the purgatory"
    return task.result()


async def still_parked(task: asyncio.Task[Any]) -> bool:
    await _yield_to_loop()
    return not task.done()
