"""Consuming records from partition leaders, like kafka-console-consumer, with offset sanity checks.

Positions start at the earliest offset (`--from-beginning`), at the high watermark, or at a given
offset (`--offset N`, or `-N` for N records before the high watermark), kept within the log. Each fetch goes
to the partition's leader with its current leader epoch; NOT_LEADER / FENCED / UNKNOWN_LEADER_EPOCH
refresh metadata, OFFSET_OUT_OF_RANGE resets to the earliest offset. Records below the position in a
returned batch (a batch may start before the requested offset) are skipped, so each offset is
delivered once and in increasing order; `Consumer.nonmonotonic` counts any violation of that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from client.cluster_client import REFRESH_ERRORS, ClusterClient, ClusterUnavailableError
from client.errors import ClusterAnswerError, ClusterUnreachableError
from network.connection import BrokerConnection
from protocol.errors import CorruptRecordError, ErrorCode, error_for_code
from protocol.fetch_frame import FETCH_RECORDS_APART
from protocol.messages import DEBUGGING_REPLICA_ID, FetchPartition, FetchRequest, TopicPartition
from protocol.record_batch import Record, iter_headers, iter_records, read_header

MIB = 1024 * 1024
# Kafka's consumer fetch configs (`--consumer-property`), with Kafka's defaults except fetch.max.wait.ms
# (500 in Kafka): a console consumer here answers a quiet topic's end sooner.
FETCH_CONFIG_DEFAULTS = {
    "max.partition.fetch.bytes": MIB,
    "fetch.max.bytes": 50 * MIB,
    "fetch.min.bytes": 1,
    "fetch.max.wait.ms": 200,
}


def fetch_config(props: dict[str, str]) -> dict[str, int]:
    """Kafka's consumer fetch configs from `KEY=VALUE` strings, defaults filled in; ValueError names a bad
    key (with a close match) or value."""
    import difflib

    config = dict(FETCH_CONFIG_DEFAULTS)
    for key, value in props.items():
        if key not in config:
            close = difflib.get_close_matches(key, FETCH_CONFIG_DEFAULTS, n=1)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(FETCH_CONFIG_DEFAULTS)}"
            raise ValueError(f"unknown consumer property {key!r}; {hint}")
        least = 0 if key == "fetch.max.wait.ms" else 1
        if not value.isdigit() or int(value) < least:
            raise ValueError(f"consumer property {key}: expected an integer >= {least}, got {value!r}")
        config[key] = int(value)
    return config


@dataclass
class Consumer:
    client: ClusterClient
    partitions: list[TopicPartition]
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    nonmonotonic: int = 0
    last_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    max_wait_ms: int = FETCH_CONFIG_DEFAULTS["fetch.max.wait.ms"]
    # Bytes one fetch may return per partition and in all (KIP-74: the first batch comes whole even when
    # larger), and the least a fetch waits for: Kafka's max.partition.fetch.bytes, fetch.max.bytes and
    # fetch.min.bytes. Larger fetches mean fewer round trips for a consumer that is behind.
    max_partition_fetch_bytes: int = FETCH_CONFIG_DEFAULTS["max.partition.fetch.bytes"]
    fetch_max_bytes: int = FETCH_CONFIG_DEFAULTS["fetch.max.bytes"]
    fetch_min_bytes: int = FETCH_CONFIG_DEFAULTS["fetch.min.bytes"]
    corrupt: dict[TopicPartition, str] = field(default_factory=dict)  # partitions stopped at a bad batch
    on_corrupt: Callable[[TopicPartition, str], None] | None = None

    async def seek_all(self, earliest: bool) -> None:
        for tp in self.partitions:
            self.positions[tp] = await self._list(tp, earliest)

    async def seek(self, start: str | int) -> None:
        """earliest, latest, an offset N >= 0 or -N before the end; clamped to [log start, high watermark]."""
        if start in ("earliest", "latest"):
            await self.seek_all(earliest=start == "earliest")
            return
        assert isinstance(start, int)
        for tp in self.partitions:
            first, end = await self._list(tp, True), await self._list(tp, False)
            self.positions[tp] = min(max(start if start >= 0 else end + start, first), end)

    async def _list(self, tp: TopicPartition, earliest: bool) -> int:
        for _ in range(50):
            try:
                code, offset = await self.client.list_offset(tp, earliest)
            except (TimeoutError, ConnectionError, OSError, KeyError):
                code, offset = int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1
            if code == ErrorCode.NONE:
                return offset
            await asyncio.sleep(0.1)
            await self.client.refresh_metadata([tp.topic])
        raise ClusterUnavailableError(f"no offset for {tp}")

    def _records_before_corruption(self, tp: TopicPartition, data: bytes) -> list[Record]:
        """The records of the batches before the first one that cannot be read; that partition stops there
        (as Kafka's consumer stops at a CorruptRecordException) and `corrupt` says where and why."""
        good: list[Record] = []
        view = memoryview(data)
        position = 0  # of the batch being read
        try:
            for header in iter_headers(data):
                good.extend(iter_records(view[header.position : header.position + header.size_in_bytes]))
                position = header.position + header.size_in_bytes
        except CorruptRecordError as exc:
            offset = self.positions[tp]
            with contextlib.suppress(CorruptRecordError):
                offset = max(offset, read_header(data, position).base_offset)
            self.corrupt[tp] = f"corrupt batch at offset {offset}: {exc}"
            if self.on_corrupt is not None:
                self.on_corrupt(tp, self.corrupt[tp])
        return good

    async def poll(self) -> list[tuple[TopicPartition, Record]]:
        """One fetch round to every leader; records in offset order per partition."""
        by_leader: dict[int, list[FetchPartition]] = {}
        for tp in self.partitions:
            if tp in self.corrupt:
                continue  # stopped at a corrupt batch; the other partitions go on
            info = self.client.partitions.get(tp)
            if info is None or info.leader_id < 0:
                continue
            by_leader.setdefault(info.leader_id, []).append(
                FetchPartition(
                    tp.topic,
                    tp.partition,
                    self.positions[tp],
                    self.max_partition_fetch_bytes,
                    current_leader_epoch=info.leader_epoch,
                )
            )
        if not by_leader:
            await asyncio.sleep(0.1)
            await self.client.refresh_metadata(sorted({tp.topic for tp in self.partitions}))
            return []
        results = await asyncio.gather(
            *(
                self.client.fetch(leader, parts, self.max_wait_ms, self.fetch_min_bytes, self.fetch_max_bytes)
                for leader, parts in by_leader.items()
            ),
            return_exceptions=True,
        )
        out: list[tuple[TopicPartition, Record]] = []
        refresh = False
        for result in results:
            if isinstance(result, BaseException):
                refresh = True
                continue
            for p in result.partitions:
                tp = TopicPartition(p.topic, p.partition)
                if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self.positions[tp] = await self._list(tp, earliest=True)
                    continue
                if p.error_code != ErrorCode.NONE:
                    refresh = refresh or ErrorCode(p.error_code) in REFRESH_ERRORS
                    continue
                try:
                    records = list(iter_records(p.records))
                except CorruptRecordError:
                    records = self._records_before_corruption(tp, p.records)
                for rec in records:
                    if rec.offset < self.positions[tp]:
                        continue
                    last = self.last_offsets.get(tp, -1)
                    if rec.offset <= last:
                        self.nonmonotonic += 1
                    self.last_offsets[tp] = rec.offset
                    self.positions[tp] = rec.offset + 1
                    out.append((tp, rec))
        if refresh:
            await asyncio.sleep(0.05)
            try:
                await self.client.refresh_metadata(sorted({tp.topic for tp in self.partitions}))
            except ClusterUnavailableError:
                pass
        return out


async def consume_all(
    client: ClusterClient,
    partitions: list[TopicPartition],
    from_beginning: bool | str | int,
    max_messages: int | None,
    timeout_ms: int,
    on_record: Callable[[TopicPartition, Record], None] | None = None,
    on_corrupt: Callable[[TopicPartition, str], None] | None = None,
    config: dict[str, int] | None = None,
) -> Consumer:
    """Read until `max_messages` or `timeout_ms` without a new record (a negative `timeout_ms`: no
    timeout, as Kafka's console consumer by default). `from_beginning` is True/False
    (earliest/latest) or a `Consumer.seek` start. A partition that serves a batch that cannot be read stops
    there (`on_corrupt` hears where and why); the others are read on."""
    fetch = {**FETCH_CONFIG_DEFAULTS, **(config or {})}
    consumer = Consumer(
        client,
        partitions,
        on_corrupt=on_corrupt,
        max_wait_ms=fetch["fetch.max.wait.ms"],
        max_partition_fetch_bytes=fetch["max.partition.fetch.bytes"],
        fetch_max_bytes=fetch["fetch.max.bytes"],
        fetch_min_bytes=fetch["fetch.min.bytes"],
    )
    if isinstance(from_beginning, bool):
        await consumer.seek_all(earliest=from_beginning)
    else:
        await consumer.seek(from_beginning)
    count = 0
    last_new = time.monotonic()
    while max_messages is None or count < max_messages:
        if len(consumer.corrupt) == len(partitions):
            break  # every partition stopped at a corrupt batch: nothing more can be read
        batch = await consumer.poll()
        if batch:
            last_new = time.monotonic()
        for tp, rec in batch:
            if max_messages is not None and count >= max_messages:
                break
            count += 1
            if on_record is not None:
                on_record(tp, rec)
        if timeout_ms >= 0 and (time.monotonic() - last_new) * 1000 >= timeout_ms:
            break
    return consumer


async def consume_command(
    args: argparse.Namespace, formatter: Callable[[str, int, Record], bytes], start: str | int
) -> dict[str, Any]:
    counts: dict[str, int] = {}
    out = sys.stdout.buffer

    def on_record(tp: TopicPartition, rec: Record) -> None:
        counts[str(tp.partition)] = counts.get(str(tp.partition), 0) + 1
        out.write(formatter(tp.topic, tp.partition, rec))

    async with ClusterClient(args.bootstrap_server, secret=getattr(args, "cluster_secret", None)) as client:
        try:
            meta = await client.refresh_metadata([args.topic])
        except ClusterUnavailableError as exc:
            raise ClusterUnreachableError(f"cluster not reachable at {args.bootstrap_server}: {exc}") from None
        if meta.topics[0].error_code != ErrorCode.NONE:
            raise ClusterAnswerError(f"unknown topic {args.topic!r}")
        partitions = client.partitions_of(args.topic)
        if args.partition is not None:
            tp = TopicPartition(args.topic, args.partition)
            if tp not in partitions:
                raise ClusterAnswerError(f"topic {args.topic!r} has no partition {args.partition}")
            partitions = [tp]

        def on_corrupt(tp: TopicPartition, reason: str) -> None:
            out.flush()
            print(
                f"minibroker: error: {tp.topic} partition {tp.partition}: {reason}; reading the other partitions on",
                file=sys.stderr,
            )

        consumer = await consume_all(
            client,
            partitions,
            start,
            args.max_messages,
            args.timeout_ms,
            on_record,
            on_corrupt,
            getattr(args, "fetch_config", None),
        )
    out.flush()
    return {
        "count": sum(counts.values()),
        "partitions": counts,
        "corrupt": {str(tp.partition): reason for tp, reason in sorted(consumer.corrupt.items())},
    }


async def read_replica(conn: BrokerConnection, tp: TopicPartition, max_bytes: int = 8 * 1024 * 1024) -> bytes:
    """Every byte one replica (leader or follower) holds from its log start to its HW, as stored.

    Uses Kafka's debugging replica id (-2), which may read any replica up to its high watermark: the
    chaos oracle and the tests compare replicas byte for byte this way.
    """
    out = bytearray()
    offset = 0
    while True:
        req = FetchRequest(
            DEBUGGING_REPLICA_ID, 0, 1, max_bytes, [FetchPartition(tp.topic, tp.partition, offset, max_bytes)]
        )
        p = (await conn.send(req, timeout_s=10.0, api_version=FETCH_RECORDS_APART)).partitions[0]
        if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset == 0 and p.log_start_offset > 0:
            offset = p.log_start_offset  # retention or DeleteRecords moved the log start
            continue
        if p.error_code != ErrorCode.NONE:
            raise error_for_code(p.error_code, p.error_message)
        if not p.records:
            return bytes(out)
        out += p.records
        offset = [r.offset for r in iter_records(p.records)][-1] + 1
