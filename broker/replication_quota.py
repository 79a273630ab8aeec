"""Replication throttling (KIP-73): which replicas are throttled, and a windowed byte-rate quota.

How this works
--------------
A `ReplicationQuotaManager` has a set of throttled replicas (per topic: some partitions or all) and a
byte rate measured over `num_windows` samples of `window_ms` each, like Kafka's sensor with a
SimpleRate:

    rate = bytes in the retained samples / max(now − start of the oldest sample, window_ms)

A sample older than `num_windows × window_ms` is reset, so old traffic stops counting. The quota is
exceeded when that rate is above `rate_bytes_s`. `record` never fails: it only feeds the rate.

Two managers exist per broker: the leader's (which fetches it answers, L13) and the follower's (which
partitions it asks for, F18). Only replicas that are out of sync are ever throttled, so throttling
cannot push a replica out of the ISR.

Configuration keeps Kafka's names: `leader.replication.throttled.rate` /
`follower.replication.throttled.rate` (bytes/s; absent = unthrottled) and
`leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`, a comma list of
`topic:partition` entries, `topic:*` for every partition of a topic, or `*` for everything.

At runtime, as Kafka's dynamic configs do it (what `kafka-reassign-partitions --throttle` sets): each
topic's `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas` (Kafka's
`partition:broker` list, or `*`) marks the partitions listed with this broker's id, and the cluster's
dynamic `<side>.replication.throttled.rate` (UPDATE_METADATA's broker_configs) replaces the broker's own
rate until it is deleted (`set_dynamic_throttles`, `set_dynamic_rate`; broker/kafka_apis.py applies both).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from protocol.messages import TopicPartition
from server_common.time import Time

UNLIMITED_RATE = 2**63 - 1  # Kafka's default (Long.MAX_VALUE): no throttling
DEFAULT_NUM_WINDOWS = 11
DEFAULT_WINDOW_MS = 1000

_ALL = None  # "every partition" in a per-topic entry


@dataclass(slots=True)
class _Sample:
    start_ms: int
    value: float = 0.0


class ReplicationQuotaManager:
    def __init__(
        self,
        rate_bytes_s: float | None,
        time: Time,
        num_windows: int = DEFAULT_NUM_WINDOWS,
        window_ms: int = DEFAULT_WINDOW_MS,
    ) -> None:
        if num_windows < 1 or window_ms < 1:
            raise ValueError("num_windows and window_ms must be positive")
        self._time = time
        self._num_windows = num_windows
        self._window_ms = window_ms
        self._rate_bytes_s = UNLIMITED_RATE if rate_bytes_s is None else rate_bytes_s
        self._static_rate = self._rate_bytes_s
        self._samples: list[_Sample] = []
        self._current = 0
        self._throttled: dict[str, set[int] | None] = {}
        self._all_throttled = False
        # Set at runtime: the topics' <side>.replication.throttled.replicas and the cluster's dynamic
        # <side>.replication.throttled.rate (what kafka-reassign-partitions --throttle sets).
        self._dynamic: dict[str, set[int] | None] = {}

    # -- which replicas ---------------------------------------------------------------------------

    def mark_throttled(self, topic: str, partitions: set[int] | None = None) -> None:
        """Throttle `partitions` of `topic` (None: every partition), replacing earlier marks."""
        self._throttled[topic] = None if partitions is None else set(partitions)

    def mark_all_throttled(self) -> None:
        self._all_throttled = True

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    def clear_throttles(self) -> None:
        self._throttled.clear()
        self._all_throttled = False

    def set_dynamic_throttles(self, marks: Mapping[str, set[int] | None]) -> None:
        """Replace the throttles that come from topic configs (None: every partition of the topic); those
        of the broker's own config stay."""
        self._dynamic = {topic: None if p is None else set(p) for topic, p in marks.items()}

    def set_dynamic_rate(self, rate_bytes_s: float | None) -> None:
        """The cluster's dynamic rate, or None to fall back to the broker's own config."""
        self._rate_bytes_s = self._static_rate if rate_bytes_s is None else rate_bytes_s

    def is_throttled(self, tp: TopicPartition) -> bool:
        if self._all_throttled:
            return True
        for marks in (self._throttled, self._dynamic):
            if tp.topic in marks:
                partitions = marks[tp.topic]
                if partitions is _ALL or tp.partition in partitions:
                    return True
        return False

    # -- how fast ---------------------------------------------------------------------------------

    @property
    def rate_bytes_s(self) -> float:
        return self._rate_bytes_s

    def update_quota(self, rate_bytes_s: float | None) -> None:
        self._rate_bytes_s = UNLIMITED_RATE if rate_bytes_s is None else rate_bytes_s
        self._static_rate = self._rate_bytes_s

    def record(self, num_bytes: int) -> None:
        now = self._time.milliseconds()
        sample = self._current_sample(now)
        if now - sample.start_ms >= self._window_ms:
            sample = self._advance(now)
        sample.value += num_bytes

    def rate(self) -> float:
        """Bytes per second over the retained windows."""
        now = self._time.milliseconds()
        self._purge_obsolete(now)
        total = sum(s.value for s in self._samples)
        oldest = min(s.start_ms for s in self._samples) if self._samples else self._first_sample(now).start_ms
        elapsed_ms = max(now - oldest, self._window_ms)
        return total * 1000.0 / elapsed_ms

    def is_quota_exceeded(self) -> bool:
        if self._rate_bytes_s >= UNLIMITED_RATE:
            return False
        return self.rate() > self._rate_bytes_s

    # -- samples ----------------------------------------------------------------------------------

    def _first_sample(self, now_ms: int) -> _Sample:
        sample = _Sample(now_ms)
        self._samples.append(sample)
        return sample

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            return self._first_sample(now_ms)
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % self._num_windows
        if self._current >= len(self._samples):
            return self._first_sample(now_ms)
        sample = self._samples[self._current]
        sample.start_ms, sample.value = now_ms, 0.0
        return sample

    def _purge_obsolete(self, now_ms: int) -> None:
        expire_age_ms = self._num_windows * self._window_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire_age_ms:
                sample.start_ms, sample.value = now_ms, 0.0


# -- configuration ---------------------------------------------------------------------------------


def parse_throttled_replicas(value: str) -> dict[str, set[int] | None] | None:
    """`"*"` → None (everything); `"t:0,t:1,u:*"` → {"t": {0, 1}, "u": None}. Raises ValueError."""
    text = value.strip()
    if text == "*":
        return None
    result: dict[str, set[int] | None] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        topic, sep, partition = item.rpartition(":")
        if not sep or not topic:
            raise ValueError(f"throttled replica {item!r} is not topic:partition")
        if partition == "*":
            result[topic] = _ALL
            continue
        if not partition.isdigit():
            raise ValueError(f"throttled replica {item!r} has a bad partition")
        current = result.setdefault(topic, set())
        if current is not _ALL:
            current.add(int(partition))
    return result


def quota_manager_from_kafka_props(
    props: Mapping[str, object],
    side: str,
    time: Time,
    num_windows: int = DEFAULT_NUM_WINDOWS,
    window_ms: int = DEFAULT_WINDOW_MS,
) -> ReplicationQuotaManager:
    """Build the `side` ("leader" or "follower") manager from `<side>.replication.throttled.*` keys."""
    if side not in ("leader", "follower"):
        raise ValueError(f"side must be 'leader' or 'follower', got {side!r}")
    num_windows = int(str(props.get("replication.quota.window.num", num_windows)))
    if "replication.quota.window.size.seconds" in props:
        window_ms = int(float(str(props["replication.quota.window.size.seconds"])) * 1000)
    rate = props.get(f"{side}.replication.throttled.rate")
    manager = ReplicationQuotaManager(None if rate is None else float(str(rate)), time, num_windows, window_ms)
    replicas = props.get(f"{side}.replication.throttled.replicas")
    if replicas is not None:
        parsed = parse_throttled_replicas(str(replicas))
        if parsed is None:
            manager.mark_all_throttled()
        else:
            for topic, partitions in parsed.items():
                manager.mark_throttled(topic, partitions)
    return manager


def throttled_partitions_of(value: str, broker_id: int) -> set[int] | None:
    """The partitions a topic's `<side>.replication.throttled.replicas` (Kafka's `partition:broker` list,
    or `*`) throttles on `broker_id`: None for every partition, an empty set for none."""
    text = value.strip()
    if text == "*":
        return None
    partitions: set[int] = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        partition, _, broker = item.partition(":")
        if partition.isdigit() and broker.isdigit() and int(broker) == broker_id:
            partitions.add(int(partition))
    return partitions


def dynamic_throttles(
    topic_configs: Mapping[str, Mapping[str, str]], side: str, broker_id: int
) -> dict[str, set[int] | None]:
    """Per topic, what its `<side>.replication.throttled.replicas` throttles on `broker_id`."""
    key = f"{side}.replication.throttled.replicas"
    marks: dict[str, set[int] | None] = {}
    for topic, configs in topic_configs.items():
        value = configs.get(key)
        if value:
            partitions = throttled_partitions_of(value, broker_id)
            if partitions is None or partitions:
                marks[topic] = partitions
    return marks
