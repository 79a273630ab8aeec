"""The metrics emitter and the JSON-lines file sink: cadence, never blocking, rolling and crash recovery."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time as wall
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest

from metrics.emitter import MetricsBatch, MetricsEmitter, Record
from metrics.file_sink import FileSink, metric_files, read_file_records, read_records
from metrics.mqtt import MqttSink
from metrics.sink import sinks_from_config
from server_common.time import ManualTime, SystemTime

REPO_ROOT = Path(__file__).resolve().parents[2]


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0, what: str = "condition") -> None:
    deadline = wall.monotonic() + timeout_s
    while not predicate():
        if wall.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.002)


class CountingBroker:
    """A stand-in for the broker's snapshot provider: two partitions whose counters only grow."""

    def __init__(self, broker_id: int = 1, broker_start_ms: int = 1_700_000_000_000) -> None:
        self.broker_id = broker_id
        self.broker_start_ms = broker_start_ms
        self.calls: list[list[Record]] = []
        self.call_monotonic_s: list[float] = []
        self.bytes_in = {0: 0, 1: 0}
        self.requests = 0

    def snapshot(self, now_ms: int) -> list[Record]:
        self.call_monotonic_s.append(wall.monotonic())
        n = len(self.calls)
        records: list[Record] = []
        for partition in (0, 1):
            self.bytes_in[partition] += 100 * (partition + 1) + n % 7
            records.append(self._partition_record(now_ms, partition))
        self.requests += 3 + n % 5
        records.append(
            {
                "kind": "broker",
                "ts_ms": now_ms,
                "broker_id": self.broker_id,
                "broker_start_ms": self.broker_start_ms,
                "FetchPurgatorySize": n % 3,
                "ProducePurgatorySize": 0,
                "ActiveConnections": 2,
                "RequestsPerSec": self.requests,
                "UnderReplicatedPartitions": 0,
                "MaxLag": 0,
                "MetricsDropped": 0,
            }
        )
        self.calls.append(records)
        return records

    def _partition_record(self, now_ms: int, partition: int) -> Record:
        leo = self.bytes_in[partition] // 10
        return {
            "kind": "partition",
            "ts_ms": now_ms,
            "broker_id": self.broker_id,
            "broker_start_ms": self.broker_start_ms,
            "topic": "orders",
            "partition": partition,
            "role": "leader",
            "leader_id": self.broker_id,
            "leader_epoch": 3,
            "log_start_offset": 0,
            "log_end_offset": leo,
            "high_watermark": leo,
            "fetch_offset": None,
            "lag_messages": None,
            "lag_ms": None,
            "isr_size": 2,
            "replica_count": 2,
            "under_replicated": False,
            "under_min_isr": False,
            "followers": [{"broker_id": 2, "log_end_offset": leo, "last_caught_up_ms": now_ms, "in_sync": True}],
            "BytesInPerSec": self.bytes_in[partition],
            "BytesOutPerSec": 0,
            "ReplicationBytesInPerSec": 0,
            "ReplicationBytesOutPerSec": self.bytes_in[partition],
            "MessagesInPerSec": leo,
            "IsrShrinksPerSec": 0,
            "IsrExpandsPerSec": 0,
        }


class RecordingSink:
    def __init__(self) -> None:
        self.batches: list[MetricsBatch] = []
        self.closed = False

    async def write(self, batch: MetricsBatch) -> None:
        self.batches.append(batch)

    async def close(self) -> None:
        self.closed = True


class StuckSink:
    """A sink whose write waits for an event that never fires: a hung disk or network."""

    def __init__(self) -> None:
        self.never = asyncio.Event()
        self.started_writes = 0

    async def write(self, batch: MetricsBatch) -> None:
        self.started_writes += 1
        await self.never.wait()

    async def close(self) -> None:
        pass


def batch(broker_id: int, ts_ms: int, n: int = 1) -> MetricsBatch:
    records: list[Record] = [
        {"kind": "broker", "ts_ms": ts_ms, "broker_id": broker_id, "RequestsPerSec": i} for i in range(n)
    ]
    return MetricsBatch(broker_id, ts_ms, records)


def cut_line_at_the_end(path: Path) -> None:
    """What SIGKILL in the middle of a write leaves: the first bytes of a line, no newline."""
    with open(path, "ab") as file:
        file.write(b'{"kind":"broker","ts_ms":17000000')


def ints(values: list[object]) -> list[int]:
    assert all(isinstance(value, int) for value in values)
    return [value for value in values if isinstance(value, int)]


# -- the emitter -----------------------------------------------------------------------------------


async def test_every_interval_hands_exactly_the_providers_records_to_every_sink(tmp_path: Path) -> None:
    # given a broker on a manual clock with a recording sink and a file sink
    clock = ManualTime()
    broker = CountingBroker()
    recording = RecordingSink()
    files = FileSink(tmp_path, 1, time=clock)
    emitter = MetricsEmitter(1, broker.snapshot, [recording, files], time=clock, interval_ms=1000)

    # when it runs for at least five intervals
    async with emitter:
        await wait_until(lambda: len(broker.calls) >= 5, what="five snapshots")

    # then each sink got one batch per snapshot, in order, holding the provider's records unchanged
    assert [list(b.records) for b in recording.batches] == broker.calls
    timestamps = [b.ts_ms for b in recording.batches]
    assert [later - earlier for earlier, later in pairwise(timestamps)] == [1000] * (len(timestamps) - 1)
    assert all(record["ts_ms"] == b.ts_ms for b in recording.batches for record in b.records)
    assert read_records(tmp_path) == [record for records in broker.calls for record in records]
    assert emitter.dropped == 0 and recording.closed


async def test_running_totals_stay_monotonic_across_rolled_files(tmp_path: Path) -> None:
    # given a file sink that rolls every 3 intervals
    clock = ManualTime()
    broker = CountingBroker()
    emitter = MetricsEmitter(1, broker.snapshot, [FileSink(tmp_path, 1, roll_ms=3000, time=clock)], time=clock)

    # when the broker emits 20 intervals
    async with emitter:
        await wait_until(lambda: len(broker.calls) >= 20, what="twenty snapshots")

    # then the files, read back in order, carry every counter as a non-decreasing series
    assert len(metric_files(tmp_path)) >= 6
    records = read_records(tmp_path)
    for partition in (0, 1):
        series = ints([r["BytesInPerSec"] for r in records if r["kind"] == "partition" and r["partition"] == partition])
        assert len(series) == len(broker.calls)
        assert series == sorted(series) and series[-1] == broker.bytes_in[partition]
    requests = ints([r["RequestsPerSec"] for r in records if r["kind"] == "broker"])
    assert requests == sorted(requests) and requests[-1] == broker.requests


async def test_a_stuck_sink_makes_its_queue_drop_the_oldest_while_ticks_and_other_sinks_go_on() -> None:
    # given one healthy sink and one whose write never returns, with a queue of 3 batches
    clock = ManualTime()
    broker = CountingBroker()
    healthy, stuck = RecordingSink(), StuckSink()
    emitter = MetricsEmitter(
        1, broker.snapshot, [healthy, stuck], time=clock, interval_ms=1000, queue_size=3, flush_timeout_ms=50
    )

    # when 20 intervals pass and the emitter is stopped
    emitter.start()
    await wait_until(lambda: len(broker.calls) >= 20, what="twenty snapshots")
    async with asyncio.timeout(5):
        await emitter.stop()  # gives up on the stuck sink after the 50 ms flush timeout

    # then the stuck sink got the first batch, its queue kept the 3 newest, and every other one was dropped
    assert stuck.started_writes == 1
    assert emitter.emitted == len(broker.calls) >= 20
    assert emitter.dropped == emitter.emitted - 1 - 3
    # and the healthy sink received every batch
    assert [list(b.records) for b in healthy.batches] == broker.calls


@pytest.mark.timeout(30)
async def test_the_emitter_keeps_its_real_time_interval_while_a_sink_is_stuck() -> None:
    # given a 20 ms interval on the real clock and a sink that never finishes a write
    broker = CountingBroker()
    emitter = MetricsEmitter(
        1,
        broker.snapshot,
        [StuckSink()],
        time=SystemTime(),
        interval_ms=20,
        queue_size=2,
        flush_timeout_ms=50,
    )

    # when 16 snapshots have been taken
    async with emitter:
        await wait_until(lambda: len(broker.calls) >= 16, timeout_s=10, what="sixteen snapshots")

    # then they came at the interval (not in a burst, not held up), and the overflow was counted
    gaps_ms = [(b - a) * 1000 for a, b in pairwise(broker.call_monotonic_s)]
    assert 15 <= statistics.median(gaps_ms) <= 40
    assert emitter.dropped == emitter.emitted - 1 - 2


async def test_a_failing_snapshot_skips_one_interval_and_emission_goes_on() -> None:
    # given a provider that raises on its third call
    clock = ManualTime()
    broker = CountingBroker()
    calls = 0

    def flaky(now_ms: int) -> list[Record]:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("partition map changed under us")
        return broker.snapshot(now_ms)

    sink = RecordingSink()
    # when it runs past the failure
    async with MetricsEmitter(1, flaky, [sink], time=clock) as emitter:
        await wait_until(lambda: calls >= 6, what="six snapshot calls")
    # then only the failed interval is missing
    assert [list(b.records) for b in sink.batches] == broker.calls
    assert emitter.emitted == calls - 1
    timestamps = [b.ts_ms for b in sink.batches]
    assert timestamps[2] - timestamps[1] == 2000


async def test_a_sink_that_raises_loses_that_batch_only() -> None:
    # given a sink that fails its second write
    class FailingOnce(RecordingSink):
        async def write(self, batch: MetricsBatch) -> None:
            if len(self.batches) == 1 and not getattr(self, "failed", False):
                self.failed = True
                raise OSError("disk full")
            await super().write(batch)

    clock = ManualTime()
    broker = CountingBroker()
    sink = FailingOnce()
    async with MetricsEmitter(1, broker.snapshot, [sink], time=clock) as emitter:
        await wait_until(lambda: len(sink.batches) >= 4, what="four written batches")
    # then the emitter counted the failure and kept delivering later batches
    assert emitter.write_errors == 1
    assert [list(b.records) for b in sink.batches] == broker.calls[:1] + broker.calls[2:]


def test_an_emitter_refuses_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="metrics.interval.ms"):
        MetricsEmitter(1, CountingBroker().snapshot, [], interval_ms=0)


# -- the file sink ---------------------------------------------------------------------------------


async def test_the_active_file_lives_under__active_and_rolls_once_roll_ms_old(tmp_path: Path) -> None:
    # given a file sink with a 10 s roll
    clock = ManualTime()
    sink = FileSink(tmp_path, 7, roll_ms=10_000, time=clock)
    t0 = clock.milliseconds()

    # when batches arrive at 0 s and 9.999 s
    await sink.write(batch(7, t0))
    clock.advance(9_999)
    await sink.write(batch(7, t0 + 9_999))

    # then they share the active file and nothing is rolled yet
    active = tmp_path / "_active" / "broker-7.jsonl"
    assert [r["ts_ms"] for r in read_file_records(active)] == [t0, t0 + 9_999]
    assert metric_files(tmp_path) == [active]

    # when the next batch arrives at 10 s
    clock.advance(1)
    await sink.write(batch(7, t0 + 10_000))

    # then the first file was renamed after its first record's timestamp and a new active file started
    rolled = tmp_path / f"broker-7-{t0}.jsonl"
    assert [r["ts_ms"] for r in read_file_records(rolled)] == [t0, t0 + 9_999]
    assert [r["ts_ms"] for r in read_file_records(active)] == [t0 + 10_000]

    # when the sink closes (clean shutdown) the active file is rolled too
    await sink.close()
    assert not active.exists()
    assert [p.name for p in metric_files(tmp_path)] == [
        f"broker-7-{t0}.jsonl",
        f"broker-7-{t0 + 10_000}.jsonl",
    ]


async def test_the_active_file_rolls_before_it_would_pass_max_bytes(tmp_path: Path) -> None:
    # given a file sink limited to the size of two batches of 5 records
    clock = ManualTime()
    one_batch_bytes = len(
        b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in batch(1, 1000, 5).records)
    )
    sink = FileSink(tmp_path, 1, roll_ms=3_600_000, max_bytes=2 * one_batch_bytes + 10, time=clock)

    # when 7 batches are written within one roll period
    for i in range(7):
        await sink.write(batch(1, 1000 + i, 5))
    await sink.close()

    # then each rolled file holds whole batches, none passes max_bytes, and nothing was lost or reordered
    files = metric_files(tmp_path)
    assert [p.name for p in files] == [f"broker-1-{ts}.jsonl" for ts in (1000, 1002, 1004, 1006)]
    assert all(p.stat().st_size <= sink.max_bytes for p in files)
    assert [r["ts_ms"] for r in read_records(tmp_path)] == [1000 + i for i in range(7) for _ in range(5)]


async def test_a_left_over_active_file_from_a_crash_is_rolled_on_reopen_without_its_cut_line(
    tmp_path: Path,
) -> None:
    # given a sink that wrote two batches and then "crashed" mid-line (no close, a cut line at the end)
    clock = ManualTime()
    t0 = clock.milliseconds()
    crashed = FileSink(tmp_path, 3, time=clock)
    await crashed.write(batch(3, t0, 2))
    await crashed.write(batch(3, t0 + 1000, 2))
    active = tmp_path / "_active" / "broker-3.jsonl"
    cut_line_at_the_end(active)

    # then a reader already tolerates the cut line
    assert len(read_records(tmp_path)) == 4

    # when a new process opens a sink for the same broker and writes on
    reopened = FileSink(tmp_path, 3, time=clock)
    rolled = tmp_path / f"broker-3-{t0}.jsonl"
    assert not active.exists() and rolled.exists()
    await reopened.write(batch(3, t0 + 5000))

    # then the rolled file holds exactly the complete lines and the new records follow it
    assert rolled.read_bytes().endswith(b"}\n")
    assert [r["ts_ms"] for r in read_records(tmp_path)] == [t0, t0, t0 + 1000, t0 + 1000, t0 + 5000]


async def test_rolling_never_overwrites_a_file_with_the_same_first_timestamp(tmp_path: Path) -> None:
    clock = ManualTime()
    for value in ("first", "second"):
        sink = FileSink(tmp_path, 1, time=clock)
        await sink.write(MetricsBatch(1, 5, [{"kind": "broker", "ts_ms": 5, "broker_id": 1, "v": value}]))
        await sink.close()
    assert [p.name for p in metric_files(tmp_path)] == ["broker-1-5.jsonl", "broker-1-5-1.jsonl"]
    assert [r["v"] for r in read_records(tmp_path)] == ["first", "second"]


def test_the_reader_skips_a_cut_last_line_but_rejects_a_malformed_line_in_the_middle(tmp_path: Path) -> None:
    good = b'{"kind":"broker","ts_ms":1}\n'
    (tmp_path / "broker-1-1.jsonl").write_bytes(good + good + b'{"kind":"bro')
    assert len(read_records(tmp_path)) == 2
    (tmp_path / "broker-1-1.jsonl").write_bytes(good + b"{oops}\n" + good)
    with pytest.raises(ValueError, match=r"broker-1-1.jsonl:2"):
        read_records(tmp_path)


@pytest.mark.timeout(60)
def test_a_broker_killed_mid_run_loses_no_complete_record(tmp_path: Path) -> None:
    # given a real process emitting every 2 ms into a file sink
    script = f"""
import asyncio
from metrics.emitter import MetricsEmitter
from metrics.file_sink import FileSink
n = 0
def snapshot(now_ms):
    global n
    n += 1
    return [{{"kind": "broker", "ts_ms": now_ms, "broker_id": 4, "RequestsPerSec": n, "pad": "x" * 300}}]
async def main():
    async with MetricsEmitter(4, snapshot, [FileSink({str(tmp_path)!r}, 4, roll_ms=50)], interval_ms=2):
        await asyncio.Event().wait()
asyncio.run(main())
"""
    process = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT)
    try:
        # when it is SIGKILLed after it has rolled a few files
        deadline = wall.monotonic() + 30
        while len(list(tmp_path.glob("broker-4-*.jsonl"))) < 3:
            assert process.poll() is None, "emitter process died"
            assert wall.monotonic() < deadline, "no rolled files"
            wall.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    # then after a reopen every complete record is there, in order, with no gap
    FileSink(tmp_path, 4)
    assert not (tmp_path / "_active" / "broker-4.jsonl").exists()
    counters = [r["RequestsPerSec"] for r in read_records(tmp_path)]
    assert counters == list(range(1, len(counters) + 1)) and len(counters) >= 3


# -- config ----------------------------------------------------------------------------------------


def test_config_picks_a_file_sink_and_an_mqtt_sink(tmp_path: Path) -> None:
    sinks = sinks_from_config(
        {
            "metrics.dir": str(tmp_path / "m"),
            "metrics.file.roll.ms": "5000",
            "metrics.mqtt.url": "mqtt://mq:1884",
        },
        2,
        None,
    )
    file_sink, mqtt_sink = sinks
    assert isinstance(file_sink, FileSink) and file_sink.roll_ms == 5000 and file_sink.metrics_dir == tmp_path / "m"
    assert isinstance(mqtt_sink, MqttSink) and (mqtt_sink.hostname, mqtt_sink.port) == ("mq", 1884)
    assert mqtt_sink.topic == "minibroker/metrics/broker/2"


def test_config_can_turn_the_file_sink_off_and_defaults_the_directory(tmp_path: Path) -> None:
    assert sinks_from_config({"metrics.file.enable": "false"}, 1, tmp_path) == []
    (default_dir_sink,) = sinks_from_config({}, 1, tmp_path)
    assert isinstance(default_dir_sink, FileSink) and default_dir_sink.metrics_dir == tmp_path
    assert sinks_from_config({}, 1, None) == []


def test_config_with_a_bad_mqtt_url_fails_with_the_expected_form(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"expected mqtt://host:port"):
        sinks_from_config({"metrics.mqtt.url": "tcp://localhost:1883"}, 1, None)
    with pytest.raises(ValueError, match=r"metrics.file.max.bytes must be an integer"):
        sinks_from_config({"metrics.file.max.bytes": "lots"}, 1, tmp_path)
