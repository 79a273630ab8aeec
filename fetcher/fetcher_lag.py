"""Per-partition lag and byte counters of a follower's fetchers, for metrics.

How this works
--------------
Every processed fetch response updates the partition's entry, also when it carried no records:

* `lag_messages` = max(0, leader HW − next fetch offset), as the leader reported its HW in that response.
* The follower is *caught up* when its next fetch offset has reached the leader's log end offset as the
  leader reported it in that response (`log_end_offset`, our addition to FETCH); when a leader does not
  report it, when that lag is 0 (its next fetch offset has reached the leader's HW). The HW-based rule
  alone would make every ISR member look caught up by construction, since the HW is the minimum ISR LEO.
  `last_caught_up_ms` is the time of the latest response that found it caught up (or the time the
  partition was added, before any response). `lag_ms` is 0 while the latest response found it caught
  up, and otherwise `now − last_caught_up_ms`: how long the follower has been behind.
* `bytes_fetched` counts the record bytes appended from the leader, in total.

An entry exists from `add` to `remove`, so a partition's metrics disappear when it is no longer followed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from protocol.messages import TopicPartition


@dataclass(frozen=True, slots=True)
class FollowerFetchStats:
    topic_partition: TopicPartition
    lag_messages: int | None  # None until the first response
    lag_ms: int
    bytes_fetched: int
    fetch_offset: int
    leader_high_watermark: int
    last_caught_up_ms: int
    last_response_ms: int | None


@dataclass(slots=True)
class _Entry:
    lag_messages: int | None
    caught_up: bool
    last_caught_up_ms: int
    last_response_ms: int | None = None
    bytes_fetched: int = 0
    fetch_offset: int = -1
    leader_high_watermark: int = -1


class FetcherLagStats:
    def __init__(self) -> None:
        self._entries: dict[TopicPartition, _Entry] = {}

    def add(self, tp: TopicPartition, now_ms: int) -> None:
        if tp not in self._entries:
            self._entries[tp] = _Entry(lag_messages=None, caught_up=False, last_caught_up_ms=now_ms)

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._entries.pop(tp, None)

    def record_response(
        self,
        tp: TopicPartition,
        next_fetch_offset: int,
        leader_high_watermark: int,
        bytes_appended: int,
        now_ms: int,
        leader_log_end_offset: int = -1,
    ) -> int:
        """Record one processed response; returns the lag in messages."""
        lag = max(0, leader_high_watermark - next_fetch_offset)
        entry = self._entry(tp, now_ms)
        entry.bytes_fetched += bytes_appended
        entry.leader_high_watermark = leader_high_watermark
        caught_up = next_fetch_offset >= leader_log_end_offset if leader_log_end_offset >= 0 else lag == 0
        self._set_lag(entry, next_fetch_offset, lag, now_ms, caught_up)
        return lag

    def record_reset(self, tp: TopicPartition, next_fetch_offset: int, lag: int, now_ms: int) -> None:
        """An out-of-range reset computed a fresh lag from the leader's end offset."""
        self._set_lag(self._entry(tp, now_ms), next_fetch_offset, max(0, lag), now_ms, lag <= 0)

    def lag(self, tp: TopicPartition) -> int | None:
        entry = self._entries.get(tp)
        return None if entry is None else entry.lag_messages

    def __contains__(self, tp: object) -> bool:
        return tp in self._entries

    def snapshot(self, now_ms: int) -> dict[TopicPartition, FollowerFetchStats]:
        return {tp: self._freeze(tp, e, now_ms) for tp, e in self._entries.items()}

    @property
    def max_lag(self) -> int:
        return max((e.lag_messages or 0 for e in self._entries.values()), default=0)

    def _entry(self, tp: TopicPartition, now_ms: int) -> _Entry:
        self.add(tp, now_ms)
        return self._entries[tp]

    @staticmethod
    def _set_lag(entry: _Entry, next_fetch_offset: int, lag: int, now_ms: int, caught_up: bool) -> None:
        entry.lag_messages = lag
        entry.fetch_offset = next_fetch_offset
        entry.last_response_ms = now_ms
        entry.caught_up = caught_up
        if entry.caught_up:
            entry.last_caught_up_ms = now_ms

    @staticmethod
    def _freeze(tp: TopicPartition, e: _Entry, now_ms: int) -> FollowerFetchStats:
        lag_ms = 0 if e.caught_up else max(0, now_ms - e.last_caught_up_ms)
        return FollowerFetchStats(
            topic_partition=tp,
            lag_messages=e.lag_messages,
            lag_ms=lag_ms,
            bytes_fetched=e.bytes_fetched,
            fetch_offset=e.fetch_offset,
            leader_high_watermark=e.leader_high_watermark,
            last_caught_up_ms=e.last_caught_up_ms,
            last_response_ms=e.last_response_ms,
        )
