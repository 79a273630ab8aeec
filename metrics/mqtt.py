"""Metrics over MQTT: the topic and payload format, and the sink that publishes a broker's batches.

How this works
--------------
Each broker publishes one message per interval to `minibroker/metrics/broker/<broker_id>`, QoS 1,
payload UTF-8 JSON `{"broker_id": int, "ts_ms": long, "records": [...]}` holding all of the interval's
records. `MqttSink.write` publishes one batch and returns once Mosquitto acknowledged it (PUBACK).

Connection handling: the sink connects lazily on its first write. When a publish or a connect fails
(Mosquitto down or restarting) it drops that client, waits with exponential backoff (100 ms doubling
to 5 s; reset by a successful connect) and retries the same batch with a new `aiomqtt.Client`, so
delivery is at least once. The emitter calls `write` from the sink's own delivery task, so while this
sink waits the broker keeps ticking and newer batches wait in the emitter's bounded queue (the oldest
evicted and counted when it is full).
"""

from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import urlsplit

import aiomqtt

from metrics.emitter import MetricsBatch, Record
from server_common.time import SYSTEM_TIME, Time

log = logging.getLogger(__name__)

TOPIC_PREFIX = "minibroker/metrics/broker/"
TOPIC_FILTER = TOPIC_PREFIX + "+"
DEFAULT_MQTT_PORT = 1883
DEFAULT_BACKOFF_INITIAL_MS = 100
DEFAULT_BACKOFF_MAX_MS = 5000
DEFAULT_TIMEOUT_MS = 5000


class InvalidPayloadError(ValueError):
    """A message on a metrics topic that does not follow the payload format."""


def parse_mqtt_url(url: str) -> tuple[str, int]:
    """`mqtt://host[:port]` -> (host, port). Raises ValueError naming the expected form."""
    expected = f"invalid MQTT URL {url!r}: expected mqtt://host:port (for example mqtt://127.0.0.1:1883)"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{expected} ({exc})") from None
    if parts.scheme != "mqtt" or not parts.hostname:
        raise ValueError(expected)
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(expected)
    return parts.hostname, DEFAULT_MQTT_PORT if port is None else port


def broker_topic(broker_id: int) -> str:
    return f"{TOPIC_PREFIX}{broker_id}"


def encode_payload(batch: MetricsBatch) -> bytes:
    body = {"broker_id": batch.broker_id, "ts_ms": batch.ts_ms, "records": list(batch.records)}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def decode_payload(topic: str, payload: object) -> MetricsBatch:
    """The batch in one metrics message; InvalidPayloadError if topic or payload break the format."""
    if not topic.startswith(TOPIC_PREFIX) or not _is_int_text(topic[len(TOPIC_PREFIX) :]):
        raise InvalidPayloadError(f"not a metrics topic: {topic!r}")
    topic_broker_id = int(topic[len(TOPIC_PREFIX) :])
    if not isinstance(payload, bytes | bytearray | str):
        raise InvalidPayloadError(f"payload of type {type(payload).__name__}")
    try:
        body = json.loads(payload)
    except ValueError as exc:
        raise InvalidPayloadError(f"payload is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidPayloadError("payload is not a JSON object")
    broker_id, ts_ms, records = body.get("broker_id"), body.get("ts_ms"), body.get("records")
    if not _is_int(broker_id) or not _is_int(ts_ms) or not isinstance(records, list):
        raise InvalidPayloadError("payload needs int broker_id, int ts_ms and a records array")
    if broker_id != topic_broker_id:
        raise InvalidPayloadError(f"payload broker_id {broker_id} on topic {topic!r}")
    checked: list[Record] = []
    for record in records:
        if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
            raise InvalidPayloadError("every record must be a JSON object with a string kind")
        if record.get("broker_id") != broker_id:
            raise InvalidPayloadError(f"record of broker {record.get('broker_id')!r} in broker {broker_id}'s batch")
        checked.append(record)
    assert isinstance(broker_id, int) and isinstance(ts_ms, int)
    return MetricsBatch(broker_id, ts_ms, checked)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_int_text(text: str) -> bool:
    return text.isdigit() or (text.startswith("-") and text[1:].isdigit())


class Backoff:
    """Exponential reconnect delay: initial, doubling up to max; `reset` after a successful connect."""

    def __init__(
        self,
        time: Time,
        initial_ms: int = DEFAULT_BACKOFF_INITIAL_MS,
        max_ms: int = DEFAULT_BACKOFF_MAX_MS,
    ) -> None:
        self._time = time
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self._next_ms = initial_ms

    def next_delay_ms(self) -> int:
        delay_ms = self._next_ms
        self._next_ms = min(self._next_ms * 2, self.max_ms)
        return delay_ms

    def reset(self) -> None:
        self._next_ms = self.initial_ms

    async def sleep(self) -> None:
        await self._time.sleep(self.next_delay_ms() / 1000.0)


class MqttSink:
    """Publishes each batch of one broker as one QoS 1 message; reconnects with backoff until it is sent.

    Invariant: at most one connected client at a time; `write` returns only after the broker's PUBACK
    (or raises CancelledError when the emitter gives up on it at shutdown).
    """

    def __init__(
        self,
        url: str,
        broker_id: int,
        time: Time = SYSTEM_TIME,
        qos: int = 1,
        client_id: str | None = None,
        backoff_initial_ms: int = DEFAULT_BACKOFF_INITIAL_MS,
        backoff_max_ms: int = DEFAULT_BACKOFF_MAX_MS,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        self.url = url
        self.hostname, self.port = parse_mqtt_url(url)
        self.broker_id = broker_id
        self.topic = broker_topic(broker_id)
        self.qos = qos
        self.client_id = client_id or f"minibroker-broker-{broker_id}-metrics"
        self._timeout_s = timeout_ms / 1000.0
        self._backoff = Backoff(time, backoff_initial_ms, backoff_max_ms)
        self._client: aiomqtt.Client | None = None
        self._failing = False
        self.published = 0
        self.connects = 0
        """Successful connections so far (1 + the number of reconnects)."""

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def write(self, batch: MetricsBatch) -> None:
        payload = encode_payload(batch)
        while True:
            client = await self._connected_client()
            try:
                await client.publish(self.topic, payload, qos=self.qos, timeout=self._timeout_s)
            except aiomqtt.MqttError as exc:
                self._note_failure(f"publish to {self.url} failed: {exc}")
                await self._drop_client()
                await self._backoff.sleep()
                continue
            self.published += 1
            return

    async def close(self) -> None:
        await self._drop_client()

    async def _connected_client(self) -> aiomqtt.Client:
        while self._client is None:
            client = aiomqtt.Client(self.hostname, self.port, identifier=self.client_id, timeout=self._timeout_s)
            try:
                await client.__aenter__()
            except aiomqtt.MqttError as exc:
                self._note_failure(f"cannot connect to {self.url}: {exc}")
                await self._backoff.sleep()
                continue
            self._client = client
            self.connects += 1
            self._backoff.reset()
            if self._failing:
                log.info("metrics: reconnected to %s", self.url)
            self._failing = False
        return self._client

    def _note_failure(self, message: str) -> None:
        # One warning per outage; the retries while it lasts go to debug so logs stay readable.
        if self._failing:
            log.debug("metrics: %s", message)
        else:
            log.warning("metrics: %s; retrying with backoff", message)
        self._failing = True

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        try:
            await asyncio.wait_for(client.__aexit__(None, None, None), timeout=self._timeout_s)
        except (aiomqtt.MqttError, TimeoutError) as exc:
            log.debug("metrics: disconnect from %s: %s", self.url, exc)
