"""The leader's view of its followers in the metric records: lag that goes on while a follower is silent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.broker_metrics import partition_records
from fetcher.fetcher_lag import FetcherLagStats
from metrics import fields as f
from tests.broker.leader_fixtures import FOLLOWER_ID, TP0, LeaderBroker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LeaderBroker]:
    b = LeaderBroker(tmp_path / "broker-0", replica_lag_time_max_ms=10_000)
    yield b
    b.close()


def follower_of(broker: LeaderBroker) -> dict[str, object]:
    [record] = partition_records(broker.replica_manager, 0, 0, broker.now_ms, {})
    assert record[f.ROLE] == f.ROLE_LEADER
    [follower] = record[f.FOLLOWERS]
    assert follower[f.BROKER_ID] == FOLLOWER_ID
    return follower


async def test_a_silent_follower_falls_behind_in_the_leaders_records(broker: LeaderBroker) -> None:
    broker.make_leader()
    for i in range(3):
        await broker.produce(TP0, b"r%d" % i)
    await broker.follower_fetch(3)  # caught up: it has all 3 records
    caught_up = follower_of(broker)
    assert caught_up[f.LAG_MESSAGES] == 0 and caught_up[f.TIME_SINCE_CAUGHT_UP_MS] == 0
    # the follower dies: it fetches no more, the load goes on
    for i in range(5):
        broker.advance(1000)
        await broker.produce(TP0, b"late%d" % i)
    behind = follower_of(broker)
    assert behind[f.LAG_MESSAGES] == 5
    assert behind[f.TIME_SINCE_CAUGHT_UP_MS] == 5000
    assert behind[f.LOG_END_OFFSET] == 3


def test_a_follower_without_an_answer_from_its_leader_reports_no_fetch_offset(broker: LeaderBroker) -> None:
    # A fetcher entry exists from the moment the partition is followed (after a restart or a leader
    # change), but its offset is only known from the first answer: until then there is none to report,
    # where -1 used to go out and read as a drop from the last offset (a TRUNCATE status downstream).
    broker.make_follower()
    stats = FetcherLagStats()
    stats.add(TP0, broker.now_ms)
    [record] = partition_records(broker.replica_manager, 0, 0, broker.now_ms, stats.snapshot(broker.now_ms))
    assert record[f.ROLE] == f.ROLE_FOLLOWER
    assert record[f.FETCH_OFFSET] is None and record[f.LAG_MESSAGES] is None
    stats.record_response(TP0, 7, 9, 0, broker.now_ms)
    [record] = partition_records(broker.replica_manager, 0, 0, broker.now_ms, stats.snapshot(broker.now_ms))
    assert record[f.FETCH_OFFSET] == 7 and record[f.LAG_MESSAGES] == 2


async def test_a_follower_that_has_not_fetched_in_this_leadership_has_no_known_offsets(broker: LeaderBroker) -> None:
    broker.make_leader()
    await broker.produce(TP0, b"r0")
    unknown = follower_of(broker)
    # Kafka keeps -1 (its unknown offset) until the first fetch; the records say null, as for the lag
    assert unknown[f.LOG_END_OFFSET] is None and unknown[f.LAG_MESSAGES] is None
    await broker.follower_fetch(1)
    known = follower_of(broker)
    assert known[f.LOG_END_OFFSET] == 1 and known[f.LAG_MESSAGES] == 0
