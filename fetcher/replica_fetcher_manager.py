"""The replica fetcher manager: which fetcher follows which partition, and the fetchers' tasks.

How this works
--------------
A broker follows each partition from that partition's leader. Partitions are grouped by
(leader broker id, fetcher id), one `ReplicaFetcher` per group, each running `run()` in a task this
manager owns (cancelled and awaited on removal and close). The fetcher id spreads one leader's
partitions over `num.replica.fetchers` fetchers with Kafka's formula,

    fetcher_id = abs(31 * topic.hashCode() + partition) % num_replica_fetchers

in Java's 32-bit arithmetic, so a partition lands on the same fetcher id as in Kafka.

Invariant: a partition is in at most one fetcher. Adding a partition that another fetcher holds (its
leader moved) takes it from that fetcher first. Partitions whose fetcher marked them failed are kept in
`failed_partitions` until they are removed or re-added.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from fetcher.fetcher_lag import FollowerFetchStats
from fetcher.follower_log import FollowerReplicas
from fetcher.leader_end_point import LeaderEndPoint
from fetcher.partition_fetch_state import InitialFetchState, PartitionFetchState
from fetcher.replica_fetcher import FetcherConfig, ReplicaFetcher
from fetcher.replica_quota import ReplicaQuota
from protocol.messages import TopicPartition
from server_common.time import Time

log = logging.getLogger(__name__)

_INT_MIN = -(2**31)


def to_int32(value: int) -> int:
    """`value` wrapped to a signed 32-bit integer, as Java int arithmetic does."""
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def java_string_hash(text: str) -> int:
    """Java's String.hashCode(): s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, in int arithmetic."""
    h = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return to_int32(h)


def fetcher_id_for(tp: TopicPartition, num_fetchers: int) -> int:
    value = to_int32(31 * java_string_hash(tp.topic) + tp.partition)
    value = 0 if value == _INT_MIN else abs(value)  # Kafka's Utils.abs
    return value % num_fetchers


@dataclass(frozen=True, slots=True, order=True)
class BrokerIdAndFetcherId:
    broker_id: int
    fetcher_id: int


class ReplicaFetcherManager:
    def __init__(
        self,
        broker_id: int,
        config: FetcherConfig,
        replicas: FollowerReplicas,
        leader_end_point_factory: Callable[[int, int], LeaderEndPoint],
        time: Time,
        quota: ReplicaQuota | None = None,
        broker_epoch: Callable[[], int] = lambda: -1,
    ) -> None:
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._config = config
        self._replicas = replicas
        self._factory = leader_end_point_factory
        self._time = time
        self._quota = quota
        self._num_fetchers = config.num_replica_fetchers
        self._fetchers: dict[BrokerIdAndFetcherId, ReplicaFetcher] = {}
        self._tasks: dict[BrokerIdAndFetcherId, asyncio.Task[None]] = {}
        self._failed: set[TopicPartition] = set()
        self._closed = False

    @property
    def num_fetchers(self) -> int:
        return self._num_fetchers

    def fetcher_id(self, tp: TopicPartition) -> int:
        return fetcher_id_for(tp, self._num_fetchers)

    @property
    def fetchers(self) -> dict[BrokerIdAndFetcherId, ReplicaFetcher]:
        return dict(self._fetchers)

    @property
    def failed_partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._failed)

    def fetcher_for(self, tp: TopicPartition) -> ReplicaFetcher | None:
        for fetcher in self._fetchers.values():
            if fetcher.fetch_state(tp) is not None:
                return fetcher
        return None

    # -- assignment -------------------------------------------------------------------------------

    def add_fetcher_for_partitions(self, initial_states: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Follow each partition from its leader, starting fetchers as needed. Must run in the event loop."""
        if self._closed:
            raise RuntimeError("the replica fetcher manager is closed")
        groups: dict[BrokerIdAndFetcherId, dict[TopicPartition, InitialFetchState]] = {}
        for tp, initial in initial_states.items():
            key = BrokerIdAndFetcherId(initial.leader_id, self.fetcher_id(tp))
            groups.setdefault(key, {})[tp] = initial
        for key, group in groups.items():
            for other_key, other in self._fetchers.items():
                if other_key != key:
                    other.remove_partitions(group)
            self._failed.difference_update(group)
            self._fetcher(key).add_partitions(group)

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionFetchState]:
        """Stop following `tps` (also forgetting that they failed); returns their last fetch states."""
        wanted = set(tps)
        removed: dict[TopicPartition, PartitionFetchState] = {}
        for fetcher in self._fetchers.values():
            removed.update(fetcher.remove_partitions(wanted))
        self._failed.difference_update(wanted)
        return removed

    async def shutdown_idle_fetchers(self) -> None:
        idle = [key for key, fetcher in self._fetchers.items() if fetcher.partition_count <= 0]
        for key in idle:
            # Checked again: while an earlier one shut down, partitions may have been added to this one.
            fetcher = self._fetchers.get(key)
            if fetcher is not None and fetcher.partition_count <= 0:
                await self._shutdown_fetcher(key)

    async def resize_thread_pool(self, new_size: int) -> None:
        """Change `num.replica.fetchers`: every partition is re-assigned by the new fetcher ids, keeping
        its leader epoch and fetch offset (it re-truncates in its new fetcher, as in Kafka)."""
        if new_size < 1:
            raise ValueError("num.replica.fetchers must be >= 1")
        if new_size != self._num_fetchers:
            self._num_fetchers = new_size
            moved: dict[TopicPartition, InitialFetchState] = {}
            for key, fetcher in list(self._fetchers.items()):
                for tp, state in fetcher.remove_all_partitions().items():
                    moved[tp] = InitialFetchState(key.broker_id, state.current_leader_epoch, state.fetch_offset)
                if key.fetcher_id >= new_size:
                    await self._shutdown_fetcher(key)
            self.add_fetcher_for_partitions(moved)
        await self.shutdown_idle_fetchers()

    async def close(self) -> None:
        self._closed = True
        for key in list(self._fetchers):
            await self._shutdown_fetcher(key)

    # -- metrics ----------------------------------------------------------------------------------

    def snapshot(self) -> dict[TopicPartition, FollowerFetchStats]:
        result: dict[TopicPartition, FollowerFetchStats] = {}
        for fetcher in self._fetchers.values():
            result.update(fetcher.lag_snapshot())
        return result

    @property
    def max_lag(self) -> int:
        return max((f.max_lag for f in self._fetchers.values()), default=0)

    # -- fetchers ---------------------------------------------------------------------------------

    def _fetcher(self, key: BrokerIdAndFetcherId) -> ReplicaFetcher:
        fetcher = self._fetchers.get(key)
        if fetcher is not None:
            return fetcher
        fetcher = ReplicaFetcher(
            name=f"ReplicaFetcherThread-{key.fetcher_id}-{key.broker_id}",
            fetcher_id=key.fetcher_id,
            leader=self._factory(key.broker_id, key.fetcher_id),
            replicas=self._replicas,
            config=self._config,
            time=self._time,
            broker_id=self._broker_id,
            quota=self._quota,
            on_partitions_failed=self._failed.update,
            broker_epoch=self._broker_epoch,
        )
        self._fetchers[key] = fetcher
        self._tasks[key] = asyncio.get_running_loop().create_task(fetcher.run(), name=fetcher.name)
        return fetcher

    async def _shutdown_fetcher(self, key: BrokerIdAndFetcherId) -> None:
        # Shutdowns interleave (close() and an idle-fetcher shutdown each await the fetcher's task): the
        # first one to get here shuts it down, a later one finds nothing left to do.
        fetcher = self._fetchers.pop(key, None)
        task = self._tasks.pop(key, None)
        if fetcher is None or task is None:
            return
        fetcher.stop()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # we ourselves were cancelled while waiting
        except Exception:
            log.exception("%s ended with an error", fetcher.name)
        await fetcher.close()
