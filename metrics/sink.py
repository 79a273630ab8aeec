"""Choosing a broker's metric sinks from config, and the stand-alone MQTT -> JSON-lines metrics sink.

How this works
--------------
`sinks_from_config` turns the broker's `metrics.*` config into sinks: a FileSink in `metrics.dir`
(unless `metrics.file.enable=false`) and an MqttSink when `metrics.mqtt.url` is set.

`run_sink` (the `minibroker metrics sink --mqtt URL --out DIR` command) subscribes to
`minibroker/metrics/broker/+` and appends each message's records through one FileSink per broker id
seen, so the files it writes have exactly the layout brokers write themselves and the Spark job reads
one format however the metrics travelled. It owns two tasks:

    consume:  connect -> subscribe (QoS 1, persistent session) -> for each message: decode, append
              on MqttError (Mosquitto down or restarting): back off 100 ms .. 5 s, new client, again
    roll:     every second, roll active files that are `roll_ms` old (a broker that went quiet still
              gets its last records into a rolled file that `--follow` readers see)

A message that breaks the payload format is logged, counted in `invalid` and skipped. On start,
active files a crashed sink left behind are rolled; on stop every active file is rolled.

Health: the roll task also rewrites `DIR/.sink-status.json` every second with whether the sink is
subscribed right now. `minibroker metrics sink --check --out DIR` (the compose healthcheck) exits 0
only when that file says subscribed and is fresh, so a sink that lost Mosquitto, or hangs, is unhealthy.
The leading dot keeps the file out of Spark's reads of DIR (Spark skips hidden files).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiomqtt

from metrics.emitter import MetricsSink
from metrics.file_sink import ACTIVE_DIR_NAME, DEFAULT_MAX_BYTES, DEFAULT_ROLL_MS, FileSink
from metrics.mqtt import (
    DEFAULT_BACKOFF_INITIAL_MS,
    DEFAULT_BACKOFF_MAX_MS,
    DEFAULT_TIMEOUT_MS,
    TOPIC_FILTER,
    Backoff,
    InvalidPayloadError,
    MqttSink,
    decode_payload,
    parse_mqtt_url,
)
from server_common.time import SYSTEM_TIME, Time

log = logging.getLogger(__name__)

DEFAULT_SINK_CLIENT_ID = "minibroker-metrics-sink"
ROLL_CHECK_INTERVAL_MS = 1000
STATUS_FILE = ".sink-status.json"
STATUS_MAX_AGE_MS = 10_000


def write_status(out_dir: Path, subscribed: bool, mqtt_url: str, now_ms: int) -> None:
    path = out_dir / STATUS_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"subscribed": subscribed, "mqtt": mqtt_url, "updated_ms": now_ms}))
    tmp.replace(path)


def check_status(out_dir: Path, now_ms: int, max_age_ms: int = STATUS_MAX_AGE_MS) -> str | None:
    """None when the sink writing to `out_dir` is subscribed and alive, else why not."""
    try:
        status = json.loads((out_dir / STATUS_FILE).read_text())
    except (OSError, ValueError) as exc:
        return f"no sink status in {out_dir} ({exc})"
    age_ms = now_ms - int(status.get("updated_ms", 0))
    if age_ms > max_age_ms:
        return f"sink status is {age_ms} ms old: the sink is not running"
    if not status.get("subscribed"):
        return f"the sink is not subscribed to {status.get('mqtt')} (reconnecting)"
    return None


# -- broker side: config -> sinks ------------------------------------------------------------------


def sinks_from_config(
    config: Mapping[str, object],
    broker_id: int,
    metrics_dir: Path | str | None,
    time: Time = SYSTEM_TIME,
) -> list[MetricsSink]:
    """The sinks a broker's `metrics.*` config asks for.

    `metrics.dir` (default: `metrics_dir`) -> FileSink with `metrics.file.roll.ms` and
    `metrics.file.max.bytes`, unless `metrics.file.enable` is false; `metrics.mqtt.url` -> MqttSink.
    Values may be strings, as read from a properties file.
    """
    sinks: list[MetricsSink] = []
    directory = config.get("metrics.dir") or metrics_dir
    if _config_bool(config, "metrics.file.enable", True) and directory:
        sinks.append(
            FileSink(
                Path(str(directory)),
                broker_id,
                roll_ms=_config_int(config, "metrics.file.roll.ms", DEFAULT_ROLL_MS),
                max_bytes=_config_int(config, "metrics.file.max.bytes", DEFAULT_MAX_BYTES),
                time=time,
            )
        )
    url = config.get("metrics.mqtt.url")
    if url:
        sinks.append(MqttSink(str(url), broker_id, time=time))
    return sinks


def _config_int(config: Mapping[str, object], key: str, default: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {value!r}") from None


def _config_bool(config: Mapping[str, object], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{key} must be true or false, got {value!r}")


# -- the MQTT -> files sink ------------------------------------------------------------------------


@dataclass
class SinkStats:
    connects: int = 0
    """Successful connect + subscribe rounds (1 + reconnects)."""
    messages: int = 0
    records: int = 0
    invalid: int = 0
    """Messages skipped because they broke the payload format."""
    write_errors: int = 0


class _BrokerFiles:
    """One FileSink per broker id seen, all in one output directory."""

    def __init__(self, out_dir: Path, roll_ms: int, max_bytes: int, time: Time, stats: SinkStats) -> None:
        self._out_dir = out_dir
        self._roll_ms = roll_ms
        self._max_bytes = max_bytes
        self._time = time
        self._stats = stats
        self._sinks: dict[int, FileSink] = {}
        out_dir.mkdir(parents=True, exist_ok=True)
        self._recover_left_overs()

    def _recover_left_overs(self) -> None:
        # Opening a FileSink rolls its broker's left-over active file; brokers that never send again
        # would otherwise keep theirs in _active/ forever.
        for path in sorted((self._out_dir / ACTIVE_DIR_NAME).glob("broker-*.jsonl")):
            broker_id_text = path.stem.removeprefix("broker-")
            if broker_id_text.lstrip("-").isdigit():
                self._sink(int(broker_id_text))

    def handle(self, topic: str, payload: object) -> None:
        try:
            batch = decode_payload(topic, payload)
        except InvalidPayloadError as exc:
            self._stats.invalid += 1
            log.warning("metrics sink: skipping a message on %s: %s", topic, exc)
            return
        try:
            self._sink(batch.broker_id).append(batch)
        except (OSError, ValueError):
            self._stats.write_errors += 1
            log.exception("metrics sink: cannot write broker %d's batch", batch.broker_id)
            return
        self._stats.messages += 1
        self._stats.records += len(batch.records)

    def roll_due(self) -> None:
        for sink in self._sinks.values():
            sink.roll_if_due()

    def close(self) -> None:
        for sink in self._sinks.values():
            sink.roll()

    def _sink(self, broker_id: int) -> FileSink:
        sink = self._sinks.get(broker_id)
        if sink is None:
            sink = FileSink(self._out_dir, broker_id, self._roll_ms, self._max_bytes, self._time)
            self._sinks[broker_id] = sink
        return sink


async def run_sink(
    mqtt_url: str,
    out_dir: Path | str,
    stop_event: asyncio.Event | None = None,
    qos: int = 1,
    *,
    time: Time = SYSTEM_TIME,
    client_id: str = DEFAULT_SINK_CLIENT_ID,
    roll_ms: int = DEFAULT_ROLL_MS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    backoff_initial_ms: int = DEFAULT_BACKOFF_INITIAL_MS,
    backoff_max_ms: int = DEFAULT_BACKOFF_MAX_MS,
    stats: SinkStats | None = None,
) -> SinkStats:
    """Write every metrics message on `mqtt_url` into `out_dir` until `stop_event` is set (or cancelled).

    `stats` (optional) is updated in place while running, so a caller can watch progress.
    """
    hostname, port = parse_mqtt_url(mqtt_url)
    stats = SinkStats() if stats is None else stats
    files = _BrokerFiles(Path(out_dir), roll_ms, max_bytes, time, stats)
    backoff = Backoff(time, backoff_initial_ms, backoff_max_ms)
    subscribed = False

    def report_status() -> None:
        try:
            write_status(Path(out_dir), subscribed, mqtt_url, time.milliseconds())
        except OSError as exc:
            log.warning("metrics sink: cannot write %s: %s", STATUS_FILE, exc)

    async def consume() -> None:
        nonlocal subscribed
        failing = False
        while True:
            # A fixed identifier with a persistent session: Mosquitto keeps QoS 1 messages published
            # while only the sink is away (a sink restart) and delivers them when it is back.
            client = aiomqtt.Client(
                hostname, port, identifier=client_id, clean_session=False, timeout=DEFAULT_TIMEOUT_MS / 1000.0
            )
            try:
                async with client:
                    await client.subscribe(TOPIC_FILTER, qos=qos)
                    subscribed = True
                    report_status()
                    stats.connects += 1
                    backoff.reset()
                    log.info("metrics sink: subscribed to %s on %s", TOPIC_FILTER, mqtt_url)
                    failing = False
                    async for message in client.messages:
                        files.handle(message.topic.value, message.payload)
            except aiomqtt.MqttError as exc:
                subscribed = False
                report_status()
                (log.debug if failing else log.warning)("metrics sink: %s: %s; reconnecting", mqtt_url, exc)
                failing = True
                await backoff.sleep()

    async def roll() -> None:
        while True:
            await time.sleep(ROLL_CHECK_INTERVAL_MS / 1000.0)
            files.roll_due()
            report_status()

    try:
        async with asyncio.TaskGroup() as group:
            consumer = group.create_task(consume(), name="metrics-sink-consume")
            roller = group.create_task(roll(), name="metrics-sink-roll")
            if stop_event is not None:
                await stop_event.wait()
                consumer.cancel()
                roller.cancel()
    finally:
        files.close()
        subscribed = False
        report_status()
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="minibroker metrics sink",
        description=(
            "Subscribe to minibroker/metrics/broker/+ and write the records as JSON-lines files "
            "(DIR/broker-<id>-<first_ts_ms>.jsonl, active files in DIR/_active/), the layout the "
            "Spark lag job reads."
        ),
    )
    parser.add_argument("--mqtt", metavar="URL", help="Mosquitto to read, mqtt://host:port (required to run)")
    parser.add_argument("--out", required=True, metavar="DIR", help="metrics directory to write")
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not run: exit 0 if the sink writing to --out is subscribed to MQTT now, else 1 (a healthcheck)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the final counts (with --check: the verdict) as one JSON object"
    )
    parser.add_argument("--qos", type=int, choices=(0, 1, 2), default=1, help="subscription QoS (default 1)")
    parser.add_argument("--client-id", default=DEFAULT_SINK_CLIENT_ID, help="MQTT client identifier")
    parser.add_argument("--roll-ms", type=int, default=DEFAULT_ROLL_MS, help="metrics.file.roll.ms")
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES, help="metrics.file.max.bytes")
    args = parser.parse_args(argv)
    if args.check:
        problem = check_status(Path(args.out), SYSTEM_TIME.milliseconds())
        if args.json:
            # With --json the verdict is one document on stdout whichever way it goes.
            print(json.dumps({"healthy": problem is None, "problem": problem, "out": args.out}))
        if problem:
            print(f"minibroker metrics sink: unhealthy: {problem}", file=sys.stderr)
            return 1
        return 0
    if not args.mqtt:
        parser.error("--mqtt is required")
    try:
        parse_mqtt_url(args.mqtt)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def run() -> SinkStats:
        stop_event = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop_event.set)
        return await run_sink(
            args.mqtt,
            args.out,
            stop_event,
            args.qos,
            client_id=args.client_id,
            roll_ms=args.roll_ms,
            max_bytes=args.max_bytes,
        )

    stats = asyncio.run(run())
    if args.json:
        print(json.dumps(asdict(stats)))
    else:
        print(
            f"metrics sink stopped: {stats.messages} messages, {stats.records} records, "
            f"{stats.invalid} invalid, {stats.connects} connects",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
