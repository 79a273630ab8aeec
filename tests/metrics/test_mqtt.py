"""Metrics over MQTT against a real Mosquitto: emitter -> Mosquitto -> sink -> files, and outages."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time as wall
from collections.abc import AsyncIterator, Callable, Iterator
from itertools import pairwise
from pathlib import Path

import aiomqtt
import pytest

from metrics.emitter import MetricsBatch, MetricsEmitter, Record
from metrics.file_sink import read_records
from metrics.mqtt import (
    Backoff,
    InvalidPayloadError,
    MqttSink,
    decode_payload,
    encode_payload,
    parse_mqtt_url,
)
from metrics.sink import SinkStats, check_status, main, run_sink, write_status
from server_common.time import ManualTime
from tests.metrics.mosquitto import Mosquitto

REPO_ROOT = Path(__file__).resolve().parents[2]


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = wall.monotonic() + timeout_s
    while not predicate():
        if wall.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.005)


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    broker = Mosquitto(tmp_path / "mosquitto")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class RunningSink:
    """`run_sink` as a task the test owns, with its live counters."""

    def __init__(self, url: str, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.stats = SinkStats()
        self.stop_event = asyncio.Event()
        self.task = asyncio.create_task(run_sink(url, out_dir, self.stop_event, stats=self.stats, backoff_max_ms=500))

    async def stop(self) -> None:
        self.stop_event.set()
        async with asyncio.timeout(10):
            await self.task


@pytest.fixture
async def sink(mosquitto: Mosquitto, tmp_path: Path) -> AsyncIterator[RunningSink]:
    running = RunningSink(mosquitto.url, tmp_path / "out")
    try:
        await wait_until(lambda: running.stats.connects >= 1, what="the sink to subscribe")
        yield running
    finally:
        if not running.task.done():
            await running.stop()


class Provider:
    """A broker's snapshot provider: one broker record per interval with a growing request counter."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.calls: list[list[Record]] = []
        self.call_monotonic_s: list[float] = []

    def snapshot(self, now_ms: int) -> list[Record]:
        self.call_monotonic_s.append(wall.monotonic())
        n = len(self.calls) + 1
        records: list[Record] = [
            {
                "kind": "partition", "ts_ms": now_ms, "broker_id": self.broker_id, "broker_start_ms": 1,
                "topic": "t", "partition": 0, "role": "follower", "leader_id": 9, "leader_epoch": 1,
                "log_start_offset": 0, "log_end_offset": n, "high_watermark": n, "fetch_offset": n,
                "lag_messages": 0, "lag_ms": 0, "isr_size": None, "replica_count": None,
                "under_replicated": None, "under_min_isr": None, "followers": None,
                "BytesInPerSec": 0, "BytesOutPerSec": 0, "ReplicationBytesInPerSec": 10 * n,
                "ReplicationBytesOutPerSec": 0, "MessagesInPerSec": 0, "IsrShrinksPerSec": 0,
                "IsrExpandsPerSec": 0,
            },
            {"kind": "broker", "ts_ms": now_ms, "broker_id": self.broker_id, "broker_start_ms": 1,
             "RequestsPerSec": n, "MetricsDropped": 0},
        ]  # fmt: skip
        self.calls.append(records)
        return records


# -- over a real Mosquitto -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_records_travel_from_two_brokers_through_mosquitto_into_files_unchanged(
    mosquitto: Mosquitto, sink: RunningSink
) -> None:
    # given two brokers publishing every 20 ms
    providers = [Provider(1), Provider(2)]
    sinks = [MqttSink(mosquitto.url, p.broker_id) for p in providers]
    emitters = [
        MetricsEmitter(p.broker_id, p.snapshot, [s], interval_ms=20) for p, s in zip(providers, sinks, strict=True)
    ]

    # when each has emitted at least 10 intervals and stopped cleanly
    for emitter in emitters:
        emitter.start()
    await wait_until(lambda: all(len(p.calls) >= 10 for p in providers), what="ten intervals per broker")
    for emitter in emitters:
        await emitter.stop()
    published = sum(s.published for s in sinks)
    assert published == sum(len(p.calls) for p in providers)
    await wait_until(lambda: sink.stats.messages == published, what="the sink to receive every message")
    await sink.stop()

    # then the sink's files hold exactly the records each broker produced, in order, all rolled
    records = read_records(sink.out_dir)
    for provider in providers:
        mine = [r for r in records if r["broker_id"] == provider.broker_id]
        assert mine == [record for call in provider.calls for record in call]
    assert list((sink.out_dir / "_active").iterdir()) == []
    assert {p.name.split("-")[1] for p in sink.out_dir.glob("broker-*.jsonl")} == {"1", "2"}
    assert sink.stats.invalid == 0


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_emitter_and_sink_reconnect_after_mosquitto_restarts_on_the_same_port(
    mosquitto: Mosquitto, sink: RunningSink
) -> None:
    # given a broker publishing every 50 ms through Mosquitto to the sink
    provider = Provider(5)
    mqtt_sink = MqttSink(mosquitto.url, 5, backoff_max_ms=500)
    async with MetricsEmitter(5, provider.snapshot, [mqtt_sink], interval_ms=50, queue_size=100) as emitter:
        await wait_until(lambda: sink.stats.messages >= 3, what="the first messages")

        # when Mosquitto dies
        mosquitto.stop()
        down_at = len(provider.calls)

        # then the broker side keeps its interval while Mosquitto is down
        await wait_until(lambda: len(provider.calls) >= down_at + 10, what="ten intervals while Mosquitto is down")
        down_gaps_s = [b - a for a, b in pairwise(provider.call_monotonic_s[down_at:])]
        assert max(down_gaps_s) < 0.5
        assert not mqtt_sink.connected

        # when Mosquitto comes back on the same port
        await mosquitto.start_async()
        restarted_at = len(provider.calls)

        # then both sides reconnect and intervals emitted after the restart reach the sink's files
        await wait_until(lambda: len(provider.calls) >= restarted_at + 3, what="intervals after the restart")
        after_restart_ts_ms = provider.calls[restarted_at + 2][0]["ts_ms"]
        await wait_until(
            lambda: any(r["ts_ms"] == after_restart_ts_ms for r in read_records(sink.out_dir)),
            timeout_s=20,
            what="an interval emitted after the restart in the sink's files",
        )
    assert mqtt_sink.connects >= 2 and sink.stats.connects >= 2
    assert emitter.dropped == 0
    await sink.stop()
    # and what arrived is in emission order with every record intact
    broker_records = [r for r in read_records(sink.out_dir) if r["kind"] == "broker"]
    counters = [c for r in broker_records if isinstance(c := r["RequestsPerSec"], int)]
    assert len(counters) == len(broker_records)
    assert counters == sorted(counters)
    assert counters[-1] == len(provider.calls)


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_the_sink_skips_invalid_messages_and_keeps_writing(mosquitto: Mosquitto, sink: RunningSink) -> None:
    # given messages that break the payload format, then a valid one
    valid = MetricsBatch(7, 1234, [{"kind": "broker", "ts_ms": 1234, "broker_id": 7, "RequestsPerSec": 1}])
    async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
        for topic, payload in [
            ("minibroker/metrics/broker/7", b"\xff not json"),
            ("minibroker/metrics/broker/7", b'{"broker_id": 8, "ts_ms": 1, "records": []}'),
            ("minibroker/metrics/broker/7", b'{"broker_id": 7, "ts_ms": 1, "records": {}}'),
            ("minibroker/metrics/broker/x", b"{}"),
            ("minibroker/metrics/broker/7", encode_payload(valid)),
        ]:
            await client.publish(topic, payload, qos=1)

    # when the sink has handled them, then it counted four invalid, wrote the valid one and kept running
    await wait_until(lambda: sink.stats.invalid == 4 and sink.stats.messages == 1, what="five messages handled")
    assert not sink.task.done()
    await sink.stop()
    assert read_records(sink.out_dir) == list(valid.records)


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_the_sink_command_writes_files_and_exits_cleanly_on_sigterm(mosquitto: Mosquitto, tmp_path: Path) -> None:
    # given the sink running as its own process
    out = tmp_path / "cmd-out"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "metrics.sink", "--mqtt", mosquitto.url, "--out", str(out), "--json",
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        # when a broker publishes until the sink's active file shows its records
        provider = Provider(3)
        async with MetricsEmitter(3, provider.snapshot, [MqttSink(mosquitto.url, 3)], interval_ms=20):
            await wait_until(lambda: len(read_records(out)) >= 4 if out.exists() else False, what="records on disk")
        # and the process is asked to stop
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            stdout, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    # then it exited 0, rolled its active file and reported its counts as JSON
    assert process.returncode == 0, stderr.decode()
    stats = json.loads(stdout.decode().strip().splitlines()[-1])
    assert stats["messages"] >= 2 and stats["invalid"] == 0
    assert not (out / "_active" / "broker-3.jsonl").exists()
    assert len(read_records(out)) == stats["records"]


# -- pure parts: URL, payload, backoff, command line -----------------------------------------------


def test_mqtt_urls_parse_to_host_and_port_or_fail_with_the_expected_form() -> None:
    assert parse_mqtt_url("mqtt://127.0.0.1:1884") == ("127.0.0.1", 1884)
    assert parse_mqtt_url("mqtt://mosquitto") == ("mosquitto", 1883)
    for bad in (
        "127.0.0.1:1883",
        "tcp://h:1",
        "mqtt://",
        "mqtt://h:notaport",
        "mqtt://h:1/path",
        "mqtt://u:p@h:1",
    ):
        with pytest.raises(ValueError, match="expected mqtt://host:port"):
            parse_mqtt_url(bad)


def test_a_payload_round_trips_and_a_mismatched_one_is_rejected() -> None:
    batch = MetricsBatch(4, 99, [{"kind": "broker", "ts_ms": 99, "broker_id": 4, "note": "é"}])
    payload = encode_payload(batch)
    assert json.loads(payload) == {"broker_id": 4, "ts_ms": 99, "records": list(batch.records)}
    assert decode_payload("minibroker/metrics/broker/4", payload) == batch
    with pytest.raises(InvalidPayloadError, match="on topic"):
        decode_payload("minibroker/metrics/broker/5", payload)
    with pytest.raises(InvalidPayloadError, match="record of broker 3"):
        decode_payload(
            "minibroker/metrics/broker/4", b'{"broker_id":4,"ts_ms":1,"records":[{"kind":"x","broker_id":3}]}'
        )
    with pytest.raises(InvalidPayloadError, match="int broker_id"):
        decode_payload("minibroker/metrics/broker/4", b'{"broker_id":true,"ts_ms":1,"records":[]}')


def test_reconnect_backoff_doubles_from_100_ms_to_a_5_s_cap_and_resets() -> None:
    backoff = Backoff(ManualTime())
    assert [backoff.next_delay_ms() for _ in range(8)] == [100, 200, 400, 800, 1600, 3200, 5000, 5000]
    backoff.reset()
    assert backoff.next_delay_ms() == 100


def test_the_sink_command_explains_itself_and_rejects_a_bad_url(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as help_exit:
        main(["--help"])
    assert help_exit.value.code == 0
    assert "--mqtt URL" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad_exit:
        main(["--mqtt", "http://localhost:1883", "--out", "/nonexistent"])
    assert bad_exit.value.code == 2
    assert "expected mqtt://host:port" in capsys.readouterr().err


@pytest.mark.timeout(10)
def test_the_sink_check_with_json_prints_its_verdict_as_one_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # given no sink has ever written to the dir: unhealthy, and --json says so on stdout
    assert main(["--check", "--json", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    verdict = json.loads(captured.out)
    assert verdict["healthy"] is False and "no sink status" in verdict["problem"]
    assert "unhealthy" in captured.err
    # when a fresh status says subscribed: healthy, and stdout is still one document
    write_status(tmp_path, True, "mqtt://127.0.0.1:1883", int(wall.time() * 1000))
    assert main(["--check", "--json", "--out", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out) == {"healthy": True, "problem": None, "out": str(tmp_path)}


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_the_sink_healthcheck_follows_its_subscription(mosquitto: Mosquitto, tmp_path: Path) -> None:
    out = tmp_path / "out"

    def check() -> int:
        return main(["--check", "--out", str(out)])

    # given no sink yet: unhealthy
    assert check() == 1
    # when the sink is subscribed: healthy
    running = RunningSink(mosquitto.url, out)
    await wait_until(lambda: running.stats.connects >= 1, what="the sink to subscribe")
    assert check() == 0
    # when Mosquitto goes away: unhealthy until it is back and the sink has subscribed again
    mosquitto.stop()
    await wait_until(lambda: check() == 1, what="the check to see the lost subscription")
    await mosquitto.start_async()
    await wait_until(lambda: check() == 0, timeout_s=20, what="the check to see the new subscription")
    # when the sink stops: unhealthy
    await running.stop()
    assert check() == 1
    # and a sink killed without a last word goes stale: its fresh-looking status counts only 10 s
    write_status(out, True, mosquitto.url, 1_000_000)
    assert check_status(out, 1_005_000) is None
    assert check_status(out, 1_010_001) == "sink status is 10001 ms old: the sink is not running"
