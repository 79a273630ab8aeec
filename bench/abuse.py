"""bench.abuse: hostile clients against real brokers: what each costs a broker, and whether it stays a member.

Two benchmarks, each printing one JSON object as its last line of stdout:

* `probes` (the default): a `cluster up`-shaped cluster (a quorum of 3 controllers, 3 brokers, each with a
  msgpack and a Kafka listener, `broker.session.timeout.ms=3000`, heartbeats every 500 ms, metrics every
  250 ms) holds a topic of 6 partitions (RF 3) filled with known records. Each probe (`PROBES`, the rows of
  issue 41's table on the Kafka listener and their equivalents on the msgpack one) is sent to broker 1 from
  an ordinary client without credentials, one after the other. For each: how long broker 1's event loop
  kept ready work waiting (`loop_held_ms`, the largest `LoopLagMaxMs` it reported from the probe's start
  to a second after its end), whether the active controller fenced any broker (its METADATA polled every
  100 ms) or any leadership moved (every partition's leader and leader epoch before and after), and what
  the client got (answers, or the connection closed). A fenced broker's leaderships are moved back
  (preferred election) before the next probe. At the end every partition of the topic must read back
  byte-identical. Baseline, same run: `loop_held_ms` over a quiet interval before the first probe.
* `connections`: one broker leading a partition of a few MiB serves a consumer whose round trips are
  measured alone (the baseline), then while 1,000 connections each hold an incomplete frame (a length
  prefix announcing 100 MB, one byte sent) and 1,000 more are open and silent: the broker's RSS growth
  (target < 100 MB) and the consumer's p99 before and during (target ratio < 2). `--quick`: 200 + 200.

    .venv/bin/python -m bench.abuse [probes] [--probe NAME ...] [--listener kafka|msgpack] [--quick] [--json FILE]
    .venv/bin/python -m bench.abuse connections [--quick]

The probes are reusable: `tests/integration/test_hostile_clients.py` sends them with the same checks, and
`bench.kafka_fuzz` starts its mutations from their frames.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import resource
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from bench.common import ProcessReaper, free_port, main_guard, percentile, process_cpu_s, progress, rounded
from client.cluster_client import ClusterClient
from cluster.local_cluster import LocalClusterState, ProcessInfo, random_base_address, start_cluster, stop_cluster
from metrics.file_sink import read_records
from network.connection import BrokerConnection
from network.request_limits import DATA_ENTRIES
from protocol.codec import Message, packb, to_wire
from protocol.kafka_records import _zigzag
from protocol.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    ElectLeadersRequest,
    FetchPartition,
    FetchRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    MetadataRequest,
    MetadataResponse,
    OffsetForLeaderEpochPartition,
    OffsetForLeaderEpochRequest,
    ProducePartition,
    ProduceRequest,
    RequestHeader,
    TopicPartition,
    api_key_of,
)
from protocol.record_batch import MAX_RECORDS_PER_BATCH, build_batch, iter_records

MIB = 1024 * 1024
TOPIC = "abuse"
PARTITIONS = 6
#: Records per partition, 100 bytes each (2 MB a partition): what the pipelined FETCHes convert.
RECORDS_PER_PARTITION = 20_000
RECORDS_PER_BATCH = 500
TARGET = 1  # the broker every probe is sent to
#: The entry cap of the msgpack listener (protocol/codec.py's MAX_ENTRIES): a msgpack probe sends this many.
MSGPACK_CAP = 100_000
OVERRIDES = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "metrics.interval.ms": "250",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "6",
}
SETTLE_S = 1.0  # after a probe: the metrics record that covers its end is written by then

# -- frames: Kafka's binary protocol, written by hand so a probe of millions of entries builds in a second --

_KAFKA_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def kafka_frame(api_key: int, version: int, body: bytes, correlation_id: int = 1, client_id: bytes = b"abuse") -> bytes:
    """A length-prefixed Kafka request (header v1: every version the listener serves but ApiVersions v3)."""
    payload = _KAFKA_HEADER.pack(api_key, version, correlation_id, len(client_id)) + client_id + body
    return _I32.pack(len(payload)) + payload


def kstr(value: bytes | None) -> bytes:
    return _I16.pack(-1) if value is None else _I16.pack(len(value)) + value


def kbytes(value: bytes | None) -> bytes:
    return _I32.pack(-1) if value is None else _I32.pack(len(value)) + value


def karray(items: Iterable[bytes], count: int | None = None) -> bytes:
    items = list(items)
    return _I32.pack(len(items) if count is None else count) + b"".join(items)


def msgpack_frame(body: Message, correlation_id: int = 1) -> bytes:
    payload = packb([to_wire(RequestHeader(int(api_key_of(body)), 0, correlation_id, "abuse")), to_wire(body)])
    return _I32.pack(len(payload)) + payload


def kafka_batch(values: list[bytes | None], codec: int = 0) -> bytes:
    """A Kafka v2 record batch (not idempotent) of `values`, compressed with `codec` (0 none, 1 gzip, 4 zstd)."""
    import cramjam
    from crc32c import crc32c

    records = []
    for delta, value in enumerate(values):
        body = b"\x00\x00" + _zigzag(delta) + b"\x01"  # attributes, timestamp delta 0, offset delta, null key
        body += b"\x01" if value is None else _zigzag(len(value)) + value
        body += b"\x00"  # no headers
        records.append(_zigzag(len(body)) + body)
    payload = b"".join(records)
    if codec == 1:
        payload = bytes(cramjam.gzip.compress(payload))
    elif codec == 4:
        payload = bytes(cramjam.zstd.compress(payload))
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", codec, len(values) - 1, now, now, -1, -1, -1, len(values)) + payload
    return struct.pack(">qiib", 0, 4 + 1 + 4 + len(after_crc), -1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc


@cache
def tiny_records_batch(count: int) -> bytes:
    """`count` empty records (value b"") in one zstd batch: 2,000,000 of them is about 1.5 MB."""
    import cramjam
    from crc32c import crc32c

    # Every record is [length, attributes, ts delta, offset delta, key -1, value 0, headers 0]; the offset
    # delta's varint grows, so the records are built from the precomputed encodings.
    parts = []
    for delta in range(count):
        z = _zigzag(delta)
        parts.append(_zigzag(5 + len(z)) + b"\x00\x00" + z + b"\x01\x00\x00")
    payload = bytes(cramjam.zstd.compress(b"".join(parts)))
    now = int(time.time() * 1000)
    after_crc = struct.pack(">hiqqqhii", 4, count - 1, now, now, -1, -1, -1, count) + payload
    return struct.pack(">qiib", 0, 4 + 1 + 4 + len(after_crc), -1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc


def produce_v3(topics: list[tuple[bytes, list[tuple[int, bytes]]]], acks: int = 1) -> bytes:
    body = kstr(None) + _I16.pack(acks) + _I32.pack(5000)
    body += karray(
        kstr(name) + karray(_I32.pack(p) + kbytes(records) for p, records in parts) for name, parts in topics
    )
    return kafka_frame(0, 3, body)


def fetch_v4(partitions: list[int], max_bytes: int = 50 * MIB, partition_max_bytes: int = MIB) -> bytes:
    entries = [_I32.pack(p) + _I64.pack(0) + _I32.pack(partition_max_bytes) for p in partitions]
    body = _I32.pack(-1) + _I32.pack(0) + _I32.pack(1) + _I32.pack(max_bytes) + b"\x00"
    body += karray([kstr(TOPIC.encode()) + karray(entries)])
    return kafka_frame(1, 4, body)


# -- the target and what a probe gets back ------------------------------------------------------------


@dataclass
class Target:
    """The broker the probes are sent to, and what a probe needs to know about the cluster."""

    host: str
    port: int  # msgpack listener
    kafka_port: int
    led: list[int]  # partitions of TOPIC this broker leads
    group_id: str  # a group this broker coordinates
    pid: int = 0  # its process, for the CPU time a probe cost it


@dataclass
class Outcome:
    """What a probe's client saw: answers read, whether the broker closed a connection, how long it took."""

    answers: int = 0
    closed: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def merge(self, other: Outcome) -> None:
        self.answers += other.answers
        self.closed |= other.closed
        self.notes += other.notes


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def exchange(
    host: str, port: int, data: bytes, answers: int, timeout_s: float = 120.0, source: str | None = None
) -> Outcome:
    """Send `data` (one or more frames) on a new connection and read up to `answers` answers, each as a
    whole frame, until the broker closes the connection or `timeout_s` passes. Sending goes on in a thread
    of its own, so a broker that stops reading (back-pressure) does not stop the answers being read."""
    started = time.perf_counter()
    outcome = Outcome()
    sock = socket.create_connection((host, port), timeout=timeout_s, source_address=(source, 0) if source else None)

    def send() -> None:
        with contextlib.suppress(OSError):
            sock.sendall(data)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        while outcome.answers < answers:
            prefix = _recv_exact(sock, 4)
            if prefix is None or _recv_exact(sock, _I32.unpack(prefix)[0]) is None:
                outcome.closed = True
                break
            outcome.answers += 1
    except TimeoutError:
        outcome.notes.append(f"no answer within {timeout_s:.0f} s")
    except OSError as exc:  # reset: the broker closed it with bytes unread
        outcome.closed = True
        outcome.notes.append(type(exc).__name__)
    finally:
        sock.close()
        sender.join(5.0)
    outcome.seconds = time.perf_counter() - started
    return outcome


def pipeline_without_reading(host: str, port: int, data: bytes, hold_s: float) -> Outcome:
    """Send `data` and read nothing for `hold_s` (the broker's answers pile up unread), then hang up."""
    started = time.perf_counter()
    outcome = Outcome()
    with socket.create_connection((host, port), timeout=hold_s + 5) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        try:
            sock.sendall(data)
        except OSError as exc:
            outcome.closed = True
            outcome.notes.append(type(exc).__name__)
        time.sleep(hold_s)
    outcome.seconds = time.perf_counter() - started
    return outcome


def in_parallel(jobs: list[Callable[[], Outcome]]) -> Outcome:
    results: list[Outcome] = [Outcome() for _ in jobs]
    started = time.perf_counter()

    def run(i: int) -> None:
        results[i] = jobs[i]()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = Outcome()
    for r in results:
        total.merge(r)
    total.seconds = time.perf_counter() - started
    return total


# -- the probes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    name: str
    listener: str  # "kafka" or "msgpack"
    what: str  # the row of issue 41's table it reproduces
    send: Callable[[Target], Outcome]  # runs in a thread: builds its frames and sends them
    frames: Callable[[Target], list[bytes]] | None = None  # one representative frame each, for the fuzzer
    #: The same probe at a size a CI run can afford, for one whose full size takes long to build or to
    #: serve; still past the limit it tests (`--quick`, tests/integration/test_hostile_clients.py).
    quick: Callable[[Target], Outcome] | None = None

    def run(self, target: Target, quick: bool = False) -> Outcome:
        return (self.quick if quick and self.quick is not None else self.send)(target)


def _k(t: Target, frame: bytes, answers: int = 1) -> Outcome:
    return exchange(t.host, t.kafka_port, frame, answers)


def _m(t: Target, frame: bytes, answers: int = 1) -> Outcome:
    return exchange(t.host, t.port, frame, answers)


def _produce_empty_topics(n: int) -> bytes:
    body = kstr(None) + _I16.pack(1) + _I32.pack(1000) + _I32.pack(n) + (kstr(b"") + _I32.pack(0)) * n
    return kafka_frame(0, 3, body)


def _metadata_names(n: int) -> bytes:
    return kafka_frame(3, 4, _I32.pack(n) + kstr(b"") * n + b"\x00")  # allow_auto_topic_creation false


def _describe_groups(n: int) -> bytes:
    return kafka_frame(15, 0, _I32.pack(n) + kstr(b"") * n)


def _offset_fetch(n: int) -> bytes:
    return kafka_frame(9, 1, kstr(b"g") + karray([kstr(TOPIC.encode()) + _I32.pack(n) + _I32.pack(0) * n]))


def _list_offsets(n: int) -> bytes:
    partitions = (_I32.pack(0) + _I64.pack(-1)) * n
    return kafka_frame(2, 1, _I32.pack(-1) + karray([kstr(TOPIC.encode()) + _I32.pack(n) + partitions]))


def _offset_for_leader_epoch(n: int) -> bytes:
    partitions = (_I32.pack(0) + _I32.pack(-1) + _I32.pack(0)) * n
    return kafka_frame(23, 2, karray([kstr(TOPIC.encode()) + _I32.pack(n) + partitions]))


def _describe_broker_configs(n: int) -> bytes:
    resource_ = b"\x04" + kstr(b"1") + _I32.pack(-1)  # BROKER "1", every config
    return kafka_frame(32, 1, _I32.pack(n) + resource_ * n + b"\x00")


def _kafka_fetch_at(n: int) -> bytes:
    return fetch_v4([i % PARTITIONS for i in range(n)], partition_max_bytes=1)


def _join_group(t: Target, correlation_id: int) -> bytes:
    body = kstr(t.group_id.encode()) + _I32.pack(10_000) + _I32.pack(10_000) + kstr(b"") + kstr(None)
    body += kstr(b"consumer") + karray([kstr(b"range") + kbytes(b"\x00\x01" + b"\x00" * 8)])
    return kafka_frame(11, 5, body, correlation_id)


def _create_topics(n: int) -> bytes:
    topic = _I32.pack(-1) + _I16.pack(-1) + _I32.pack(0) + _I32.pack(0)  # partitions, RF, assignments, configs
    topics = b"".join(kstr(f"f{i}".encode()) + topic for i in range(n))
    return kafka_frame(19, 2, _I32.pack(n) + topics + _I32.pack(30_000) + b"\x00")


def _join_group_burst(t: Target, n: int) -> Outcome:
    return _k(t, b"".join(_join_group(t, i) for i in range(n)), answers=n)


def _same_partition(t: Target, n: int) -> bytes:
    batch = kafka_batch([b"x"])
    return produce_v3([(TOPIC.encode(), [(t.led[0], batch)] * n)])


def _msgpack_fetch_at_cap() -> bytes:
    return msgpack_frame(FetchRequest(-1, 0, 1, MIB, [FetchPartition("nope", i, 0, 1) for i in range(MSGPACK_CAP)]))


def _msgpack_fetches(t: Target, connections: int, each: int) -> Outcome:
    frame = _msgpack_fetch_at_cap()
    return in_parallel([lambda: _m(t, frame * each, answers=each) for _ in range(connections)])


def _kafka_fetches(t: Target, connections: int, each: int, entries: int) -> Outcome:
    frame = _kafka_fetch_at(entries)
    return in_parallel([lambda: _k(t, frame * each, answers=each) for _ in range(connections)])


def _msgpack_pipelined_fetches(t: Target, hold_s: float) -> Outcome:
    fetch = FetchRequest(-1, 0, 1, 50 * MIB, [FetchPartition(TOPIC, p, 0, MIB) for p in t.led])
    return pipeline_without_reading(t.host, t.port, msgpack_frame(fetch) * 500, hold_s)


def _msgpack_same_partition(t: Target, n: int) -> bytes:
    batch = build_batch([b"x"])
    return msgpack_frame(ProduceRequest(1, 5000, [ProducePartition(TOPIC, t.led[0], batch)] * n))


#: What the listeners take (network/request_limits.py): the "at_limit" probes send the largest request each
#: API accepts, the worst an ordinary request can cost.
LIMIT = DATA_ENTRIES - 1  # topics count as entries too: one topic and this many partitions


def _list_offsets_by_time(t: Target, n: int) -> bytes:
    partitions = b"".join(_I32.pack(t.led[i % len(t.led)]) + _I64.pack(0) for i in range(n))
    return kafka_frame(2, 1, _I32.pack(-1) + karray([kstr(TOPIC.encode()) + _I32.pack(n) + partitions]))


def _offset_for_leader_epoch_of(t: Target, n: int) -> bytes:
    partitions = b"".join(_I32.pack(t.led[i % len(t.led)]) + _I32.pack(-1) + _I32.pack(0) for i in range(n))
    return kafka_frame(23, 2, karray([kstr(TOPIC.encode()) + _I32.pack(n) + partitions]))


def _metadata_unknown(n: int) -> bytes:
    return kafka_frame(3, 4, _I32.pack(n) + b"".join(kstr(b"u%07d" % i) for i in range(n)) + b"\x00")


PROBES: dict[str, Probe] = {
    p.name: p
    for p in [
        Probe(
            "kafka.produce_1m_topics",
            "kafka",
            "Produce naming 1,000,000 topics with no partitions (5.9 MB)",
            lambda t: _k(t, _produce_empty_topics(1_000_000)),
            lambda t: [_produce_empty_topics(3)],
        ),
        Probe(
            "kafka.metadata_2m_names",
            "kafka",
            "Metadata with 2M topic names",
            lambda t: _k(t, _metadata_names(2_000_000)),
            lambda t: [_metadata_names(3)],
        ),
        Probe(
            "kafka.describe_groups_2m",
            "kafka",
            "DescribeGroups 2M",
            lambda t: _k(t, _describe_groups(2_000_000)),
            lambda t: [_describe_groups(3)],
        ),
        Probe(
            "kafka.offset_fetch_1m",
            "kafka",
            "OffsetFetch 1M",
            lambda t: _k(t, _offset_fetch(1_000_000)),
            lambda t: [_offset_fetch(3)],
        ),
        Probe(
            "kafka.list_offsets_340k",
            "kafka",
            "ListOffsets 340k",
            lambda t: _k(t, _list_offsets(340_000)),
            lambda t: [_list_offsets(3)],
        ),
        Probe(
            "kafka.offset_for_leader_epoch_300k",
            "kafka",
            "OffsetForLeaderEpoch 300k",
            lambda t: _k(t, _offset_for_leader_epoch(300_000)),
            lambda t: [_offset_for_leader_epoch(3)],
        ),
        Probe(
            "kafka.describe_configs_10k",
            "kafka",
            "DescribeConfigs naming the broker 10,000 times (78 KB in, 26.7 MB out)",
            lambda t: _k(t, _describe_broker_configs(10_000)),
            lambda t: [_describe_broker_configs(2)],
        ),
        Probe(
            "kafka.fetch_pipelined_1000",
            "kafka",
            "1,000 Fetch requests pipelined on one connection (no reading)",
            lambda t: pipeline_without_reading(t.host, t.kafka_port, fetch_v4(t.led) * 1000, hold_s=8.0),
            lambda t: [fetch_v4(t.led)],
            lambda t: pipeline_without_reading(t.host, t.kafka_port, fetch_v4(t.led) * 1000, hold_s=2.0),
        ),
        Probe(
            "kafka.produce_2m_tiny_records",
            "kafka",
            "Produce of 2M tiny records (1.5 MB zstd)",
            lambda t: _k(t, produce_v3([(TOPIC.encode(), [(t.led[0], tiny_records_batch(2_000_000))])])),
            lambda t: [produce_v3([(TOPIC.encode(), [(t.led[0], tiny_records_batch(10))])])],
            lambda t: _k(
                t, produce_v3([(TOPIC.encode(), [(t.led[0], tiny_records_batch(MAX_RECORDS_PER_BATCH + 1))])])
            ),
        ),
        Probe(
            "kafka.produce_same_partition_100k",
            "kafka",
            "the same partition named 100,000 times in one Produce",
            lambda t: _k(t, _same_partition(t, 100_000)),
            lambda t: [_same_partition(t, 2)],
        ),
        Probe(
            "kafka.fetch_8x6_at_cap",
            "kafka",
            "8 connections x 6 FETCHes of 100,000 partitions (the msgpack row's equivalent)",
            lambda t: _kafka_fetches(t, 8, 6, MSGPACK_CAP),
            lambda t: [_kafka_fetch_at(3)],
        ),
        Probe(
            "kafka.join_group_100k",
            "kafka",
            "100,000 JoinGroups in one burst",
            lambda t: _join_group_burst(t, 100_000),
            lambda t: [_join_group(t, 1)],
            lambda t: _join_group_burst(t, 5_000),  # past group.max.size (1,000) all the same
        ),
        Probe(
            "kafka.create_topics_forwarded_100k",
            "kafka",
            "a forwarded request over 100,000 entries (CreateTopics of 100,001 topics)",
            lambda t: _k(t, _create_topics(MSGPACK_CAP + 1)),
            lambda t: [_create_topics(2)],
        ),
        Probe(
            "kafka.metadata_at_limit",
            "kafka",
            f"Metadata naming {DATA_ENTRIES:,} topics that do not exist (the most it takes)",
            lambda t: _k(t, _metadata_unknown(DATA_ENTRIES)),
        ),
        Probe(
            "kafka.fetch_at_limit",
            "kafka",
            f"Fetch of {LIMIT:,} partitions, 8 connections x 6 at once",
            lambda t: _kafka_fetches(t, 8, 6, LIMIT),
        ),
        Probe(
            "kafka.list_offsets_by_time_at_limit",
            "kafka",
            f"ListOffsets by timestamp for {LIMIT:,} partitions (an index and a segment read each)",
            lambda t: _k(t, _list_offsets_by_time(t, LIMIT)),
        ),
        Probe(
            "kafka.offset_for_leader_epoch_at_limit",
            "kafka",
            f"OffsetForLeaderEpoch for {LIMIT:,} partitions",
            lambda t: _k(t, _offset_for_leader_epoch_of(t, LIMIT)),
        ),
        Probe(
            "kafka.produce_same_partition_at_limit",
            "kafka",
            f"the same partition named {LIMIT:,} times in one Produce",
            lambda t: _k(t, _same_partition(t, LIMIT)),
        ),
        Probe(
            "kafka.produce_records_at_limit",
            "kafka",
            f"a Produce of one batch of {MAX_RECORDS_PER_BATCH:,} tiny records (zstd), the most a batch may hold",
            lambda t: _k(t, produce_v3([(TOPIC.encode(), [(t.led[0], tiny_records_batch(MAX_RECORDS_PER_BATCH))])])),
        ),
        Probe(
            "msgpack.fetch_at_limit",
            "msgpack",
            f"8 connections x 6 FETCHes of {DATA_ENTRIES:,} partitions (the msgpack listener's limit)",
            lambda t: in_parallel(
                [
                    lambda: _m(
                        t,
                        msgpack_frame(
                            FetchRequest(-1, 0, 1, MIB, [FetchPartition("nope", i, 0, 1) for i in range(DATA_ENTRIES)])
                        )
                        * 6,
                        answers=6,
                    )
                    for _ in range(8)
                ]
            ),
        ),
        Probe(
            "msgpack.produce_same_partition_at_limit",
            "msgpack",
            f"the same partition named {DATA_ENTRIES:,} times in one PRODUCE",
            lambda t: _m(t, _msgpack_same_partition(t, DATA_ENTRIES)),
        ),
        Probe(
            "msgpack.metadata_at_cap",
            "msgpack",
            "METADATA naming 100,000 topics (the msgpack entry cap)",
            lambda t: _m(t, msgpack_frame(MetadataRequest([f"t{i}" for i in range(MSGPACK_CAP)]))),
        ),
        Probe(
            "msgpack.list_offsets_at_cap",
            "msgpack",
            "LIST_OFFSETS of 100,000 partitions",
            lambda t: _m(t, msgpack_frame(ListOffsetsRequest(-1, [ListOffsetsPartition(TOPIC, 0, -1)] * MSGPACK_CAP))),
        ),
        Probe(
            "msgpack.offset_for_leader_epoch_at_cap",
            "msgpack",
            "OFFSET_FOR_LEADER_EPOCH of 100,000 partitions",
            lambda t: _m(
                t,
                msgpack_frame(OffsetForLeaderEpochRequest([OffsetForLeaderEpochPartition(TOPIC, 0, 0)] * MSGPACK_CAP)),
            ),
        ),
        Probe(
            "msgpack.describe_configs_10k",
            "msgpack",
            # At the cap (100,000) the answer grew the broker past 4 GB in two minutes: 10,000 as the Kafka row.
            "DESCRIBE_CONFIGS naming the broker 10,000 times",
            lambda t: _m(t, msgpack_frame(DescribeConfigsRequest([DescribeConfigsResource(4, "1", None)] * 10_000))),
        ),
        Probe(
            "msgpack.produce_same_partition_at_cap",
            "msgpack",
            "the same partition named 100,000 times in one PRODUCE",
            lambda t: _m(t, _msgpack_same_partition(t, MSGPACK_CAP)),
        ),
        Probe(
            "msgpack.fetch_8x6_at_cap",
            "msgpack",
            "8 connections x 6 msgpack FETCHes at the 100,000-entry cap",
            lambda t: _msgpack_fetches(t, 8, 6),
        ),
        Probe(
            "msgpack.fetch_pipelined_500",
            "msgpack",
            "500 FETCHes pipelined on one connection (no reading)",
            lambda t: _msgpack_pipelined_fetches(t, hold_s=4.0),
            quick=lambda t: _msgpack_pipelined_fetches(t, hold_s=2.0),
        ),
        Probe(
            "msgpack.create_topics_forwarded_at_cap",
            "msgpack",
            "a forwarded CREATE_TOPICS of 100,000 topics",
            lambda t: _m(
                t, msgpack_frame(CreateTopicsRequest([CreatableTopic(f"f{i}", -1, -1) for i in range(MSGPACK_CAP)]))
            ),
        ),
    ]
}


# -- the cluster, and what is checked around each probe -------------------------------------------------


async def start_probe_cluster(work: Path, overrides: dict[str, str] | None = None) -> LocalClusterState:
    """Three brokers, each with a Kafka listener, on a loopback base address of their own."""
    ports = [free_port() for _ in range(7)]
    return await start_cluster(
        work,
        3,
        controller_port=ports[6],
        broker_ports=ports[:3],
        kafka_ports=ports[3:6],
        overrides={**OVERRIDES, **(overrides or {})},
        base_address=random_base_address(),
    )


#: The quorum's leader last seen per cluster directory: asked first, so a poll is one round trip.
_active_controller: dict[str, int] = {}


async def _metadata_of(c: ProcessInfo) -> MetadataResponse:
    async with await BrokerConnection.connect(c.host, c.port, "abuse-watch", timeout_s=2.0) as conn:
        response: MetadataResponse = await conn.send(MetadataRequest(None), timeout_s=5.0)
        return response


async def controller_metadata(state: LocalClusterState) -> MetadataResponse:
    """METADATA from the active controller: the quorum's leader decides fencing and leaderships, and a
    follower's image may trail it by a fetch. Every controller names the leader it knows (controller_id),
    so one that does not lead points at the one that does; during an election a follower's answer is used."""
    known = _active_controller.get(state.dir)
    fallback: MetadataResponse | None = None
    for c in sorted(state.controllers, key=lambda c: c.node_id != known):
        try:
            answer = await _metadata_of(c)
            asked = c
            if answer.controller_id not in (c.node_id, -1):
                fallback = fallback or answer
                asked = state.controller(answer.controller_id)
                answer = await _metadata_of(asked)
        except (OSError, ConnectionError, TimeoutError):
            continue
        if answer.controller_id == asked.node_id:
            _active_controller[state.dir] = asked.node_id
            return answer
        fallback = fallback or answer
    if fallback is None:
        raise ConnectionError(f"no controller of {state.dir} answered METADATA")
    return fallback


def cpu_stretch(cpu_s: float = 0.03) -> float:
    """How many wall seconds a CPU second of computation takes on this machine now: 1 with a core to itself,
    about the load average over the cores when they are shared. A broker's loop lag stretches alike."""
    wall_started, cpu_started = time.perf_counter(), time.process_time()
    spins = 0
    while time.process_time() - cpu_started < cpu_s:
        spins += 1
    return max(1.0, (time.perf_counter() - wall_started) / max(time.process_time() - cpu_started, 1e-6))


def leaderships(metadata: MetadataResponse) -> dict[tuple[str, int], tuple[int, int]]:
    return {(t.topic, p.partition): (p.leader_id, p.leader_epoch) for t in metadata.topics for p in t.partitions}


class FenceWatch:
    """Polls the active controller's METADATA every 100 ms: a registered broker missing from its broker list is
    fenced (the controller lists a broker only while it is unfenced or still leads something)."""

    def __init__(self, state: LocalClusterState) -> None:
        self.state = state
        self.fenced: set[int] = set()
        self.unreachable = 0
        self._task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        want = {b.node_id for b in self.state.brokers}
        while True:
            try:
                listed = {b.broker_id for b in (await controller_metadata(self.state)).brokers}
                self.fenced |= want - listed
            except (OSError, ConnectionError, TimeoutError):
                self.unreachable += 1
            await asyncio.sleep(0.1)

    def __enter__(self) -> FenceWatch:
        self._task = asyncio.get_running_loop().create_task(self._poll())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def loop_held_ms(
    state: LocalClusterState, broker_id: int, since_ms: float, until_ms: float, attempts: int = 20
) -> float | None:
    """The largest LoopLagMaxMs `broker_id` reported in (since_ms, until_ms], from its metrics files (read
    again when a file rolled while the directory was read, which can hide the records just written)."""
    for attempt in range(attempts):
        try:
            records = read_records(Path(state.metrics_dir))
        except FileNotFoundError:
            records = []
        waits = [
            float(r["LoopLagMaxMs"])  # type: ignore[arg-type]
            for r in records
            if r.get("kind") == "broker"
            and r.get("broker_id") == broker_id
            and since_ms < float(r["ts_ms"]) <= until_ms  # type: ignore[arg-type]
            and r.get("LoopLagMaxMs") is not None
        ]
        if waits:
            return max(waits)
        if attempt + 1 < attempts:
            time.sleep(0.05)
    return None


async def metrics_after(state: LocalClusterState, broker_id: int, after_ms: float, timeout_s: float = 60.0) -> None:
    """Wait until `broker_id` wrote a metrics record stamped after `after_ms` (a stalled broker writes the
    record covering its stall only once its loop runs again)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if loop_held_ms(state, broker_id, after_ms, float("inf"), attempts=1) is not None:
            return
        await asyncio.sleep(0.25)


async def seed(state: LocalClusterState) -> dict[int, str]:
    """Create TOPIC and fill it with known records; the digest of every partition's log as read back."""
    async with ClusterClient(state.bootstrap) as client:
        created = await client.create_topic(TOPIC, PARTITIONS, 3)
        if created.topics[0].error_code:
            raise RuntimeError(f"creating {TOPIC}: {created.topics[0]}")
        await client.wait_for_leaders(TOPIC, partitions=PARTITIONS)
        await client.refresh_metadata([TOPIC])
        for p in range(PARTITIONS):
            for start in range(0, RECORDS_PER_PARTITION, RECORDS_PER_BATCH):
                values = [b"%08d-%08d" % (p, start + i) + b"v" * 82 for i in range(RECORDS_PER_BATCH)]
                resp = await client.produce(TopicPartition(TOPIC, p), build_batch(values))
                assert resp is not None and resp.partitions[0].error_code == 0, resp
    return await digests(state)


async def digests(state: LocalClusterState) -> dict[int, str]:
    """sha256 of each partition's seeded records (offset, key, value, headers of the first
    RECORDS_PER_PARTITION), read from its leader with consumer fetches: what probes append after them
    is not compared."""
    out: dict[int, str] = {}
    async with ClusterClient(state.bootstrap) as client:
        await client.refresh_metadata([TOPIC])
        for p in range(PARTITIONS):
            info = client.leader_of(TopicPartition(TOPIC, p))
            digest = hashlib.sha256()
            offset = 0
            while offset < RECORDS_PER_PARTITION:
                resp = await client.fetch(info.leader_id, [FetchPartition(TOPIC, p, offset, 4 * MIB)], max_wait_ms=0)
                part = resp.partitions[0]
                if part.error_code or not part.records:
                    break
                for record in iter_records(bytes(part.records)):
                    if record.offset >= RECORDS_PER_PARTITION:
                        break
                    digest.update(repr((record.offset, record.key, record.value, record.headers)).encode())
                    offset = record.offset + 1
            out[p] = f"{digest.hexdigest()}@{offset}"
    return out


async def find_target(state: LocalClusterState) -> Target:
    """Broker TARGET, the partitions of TOPIC it leads, and a group id it coordinates."""
    b = state.broker(TARGET)
    meta = await controller_metadata(state)
    led = [p.partition for t in meta.topics if t.topic == TOPIC for p in t.partitions if p.leader_id == TARGET]
    group_id = await coordinated_group(b.host, b.kafka_port, TARGET)
    return Target(b.host, b.port, b.kafka_port, sorted(led), group_id, b.pid)


async def coordinated_group(host: str, kafka_port: int, broker_id: int, timeout_s: float = 60.0) -> str:
    """A group id whose coordinator is `broker_id` (FindCoordinator creates __consumer_offsets the first time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for i in range(64):
            group = f"abuse-{i}"
            answer = await asyncio.to_thread(
                exchange_answer, host, kafka_port, kafka_frame(10, 0, kstr(group.encode()))
            )
            if answer is None:
                continue
            error, node = struct.unpack_from(">hi", answer, 4)
            if error == 0 and node == broker_id:
                return group
        await asyncio.sleep(0.5)
    raise RuntimeError(f"no group coordinated by broker {broker_id} within {timeout_s:.0f} s")


def exchange_answer(host: str, port: int, frame: bytes) -> bytes | None:
    """One request, its answer's body (correlation id first), or None if the connection closed."""
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(frame)
        prefix = _recv_exact(sock, 4)
        return None if prefix is None else _recv_exact(sock, _I32.unpack(prefix)[0])


async def restore_leaders(state: LocalClusterState, want: dict[tuple[str, int], tuple[int, int]]) -> None:
    """After a fence: every partition back on its preferred replica (the leader it had), waited for."""
    async with ClusterClient(state.bootstrap) as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = leaderships(await controller_metadata(state))
            if all(now.get(tp, (-1, -1))[0] == leader for tp, (leader, _) in want.items()):
                return
            with contextlib.suppress(Exception):
                await client.send_any(ElectLeadersRequest(), timeout_s=10)
            await asyncio.sleep(0.5)


@dataclass
class ProbeResult:
    name: str
    listener: str
    what: str
    loop_held_ms: float | None
    broker_cpu_ms: float  # the target's CPU time from the probe's start to a second after its end
    stretch: float  # wall time per CPU second of a computation here around the probe (`cpu_stretch`)
    fenced: list[int]
    moved: int  # partitions whose leader or leader epoch changed
    answers: int
    closed: bool
    seconds: float
    notes: list[str]

    def passed(self, bound_ms: float) -> bool:
        return not self.fenced and not self.moved and self.loop_held_ms is not None and self.loop_held_ms < bound_ms


async def run_probe(state: LocalClusterState, target: Target, probe: Probe, quick: bool = False) -> ProbeResult:
    """Send one probe to the target and measure what it cost (module docstring)."""
    before = leaderships(await controller_metadata(state))
    watch = FenceWatch(state)
    stretch = await asyncio.to_thread(cpu_stretch)
    cpu_before_s = process_cpu_s(target.pid)
    started_ms = time.time() * 1000
    with watch:
        try:
            outcome = await asyncio.to_thread(probe.run, target, quick)
        except OSError as exc:
            outcome = Outcome(closed=True, notes=[f"{type(exc).__name__}: {exc}"])
        except Exception as exc:  # noqa: BLE001 - a probe that cannot be built is reported, the rest still run
            outcome = Outcome(notes=[f"probe failed: {type(exc).__name__}: {exc}"])
        ended_ms = time.time() * 1000
        await asyncio.sleep(SETTLE_S)
        await metrics_after(state, TARGET, ended_ms + SETTLE_S * 1000)
    await watch.stop()
    after = leaderships(await controller_metadata(state))
    moved = sum(1 for tp, value in before.items() if after.get(tp) != value)
    result = ProbeResult(
        probe.name,
        probe.listener,
        probe.what,
        loop_held_ms(state, TARGET, started_ms, time.time() * 1000),
        round((process_cpu_s(target.pid) - cpu_before_s) * 1000),
        round(max(stretch, await asyncio.to_thread(cpu_stretch)), 2),
        sorted(watch.fenced),
        moved,
        outcome.answers,
        outcome.closed,
        round(outcome.seconds, 2),
        outcome.notes,
    )
    if moved or watch.fenced:
        await restore_leaders(state, before)
    return result


async def prepared_cluster(reaper: ProcessReaper, prefix: str) -> tuple[LocalClusterState, dict[int, str], Target]:
    """The probes' cluster, started in a temporary directory the reaper removes, its processes watched, the
    topic seeded (its digests) and the target found."""
    work = reaper.temp_dir(prefix)
    progress("starting 3 controllers and 3 brokers (broker.session.timeout.ms=3000)")
    state = await start_probe_cluster(work / "cluster")
    reaper.watch(lambda: [p.pid for p in state.nodes])
    progress(f"filling {TOPIC}: {PARTITIONS} partitions x {RECORDS_PER_PARTITION} records")
    seeded = await seed(state)
    target = await find_target(state)
    progress(f"target broker {TARGET}: leads {TOPIC} partitions {target.led}, coordinates {target.group_id}")
    return state, seeded, target


async def quiet_loop_held_ms(state: LocalClusterState, seconds: float = 3.0) -> float | None:
    """The baseline: the target's LoopLagMaxMs over `seconds` with nothing sent to it."""
    quiet_from = time.time() * 1000
    await asyncio.sleep(seconds)
    return loop_held_ms(state, TARGET, quiet_from, time.time() * 1000)


def save(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=1) + "\n")


def selected(names: list[str] | None, listener: str | None) -> list[Probe]:
    chosen = [PROBES[n] for n in names] if names else list(PROBES.values())
    return [p for p in chosen if listener is None or p.listener == listener]


async def run_probes(
    reaper: ProcessReaper,
    names: list[str] | None,
    listener: str | None,
    json_file: Path | None = None,
    quick: bool = False,
) -> dict[str, Any]:
    state: LocalClusterState | None = None
    try:
        state, seeded, target = await prepared_cluster(reaper, "bench-abuse-probes-")
        baseline = await quiet_loop_held_ms(state)
        results = []
        for probe in selected(names, listener):
            progress(f"probe {probe.name}: {probe.what}")
            result = await run_probe(state, target, probe, quick)
            progress(
                f"  loop held {result.loop_held_ms} ms, broker CPU {result.broker_cpu_ms} ms, "
                f"stretch {result.stretch}, fenced {result.fenced}, moved {result.moved}, "
                f"answers {result.answers}, closed {result.closed}, {result.seconds} s {result.notes}"
            )
            results.append(result)
            if json_file is not None:  # what was measured so far survives an interrupted run
                save(json_file, [vars(r) for r in results])
        intact = await digests(state) == seeded
    finally:
        if state is not None:
            await asyncio.to_thread(stop_cluster, state, 10.0)
    return {
        "bench": "abuse.probes",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "quick": quick,
        "session_timeout_ms": int(OVERRIDES["broker.session.timeout.ms"]),
        "baseline_loop_held_ms": baseline,
        "probes": [vars(r) for r in results],
        "max_loop_held_ms": max((r.loop_held_ms or 0 for r in results), default=None),
        "fenced_probes": [r.name for r in results if r.fenced or r.moved],
        "data_intact": intact,
    }


# -- connections: idle and half-sent connections beside a consumer ------------------------------------

HALF_SENT = bytes.fromhex("0640000092")  # a 100 MB length prefix and one byte of body


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def consumer_latencies_ms(conn: BrokerConnection, duration_s: float) -> list[float]:
    """Round trips of 64 KiB consumer fetches walking the log from the start (wrapping around)."""
    from bench.fetch_rpc import TOPIC as FETCH_TOPIC

    out: list[float] = []
    offset = 0
    deadline = time.perf_counter() + duration_s
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        resp = await conn.send(FetchRequest(-1, 0, 1, 65536, [FetchPartition(FETCH_TOPIC, 0, offset, 65536)]))
        out.append((time.perf_counter() - started) * 1000)
        p = resp.partitions[0]
        offset = p.high_watermark and (offset + 1) % max(p.high_watermark, 1)
        await asyncio.sleep(0.002)
    return out


def open_connections(port: int, count: int, payload: bytes) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        if payload:
            s.sendall(payload)
        socks.append(s)
    return socks


async def run_connections(reaper: ProcessReaper, quick: bool) -> dict[str, Any]:
    from bench.fetch_rpc import MIB as FETCH_MIB
    from bench.fetch_rpc import fill_log, make_leader, start_broker

    half_sent, idle = (200, 200) if quick else (1000, 1000)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = half_sent + idle + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    work = reaper.temp_dir("bench-abuse-")
    port, proc = await start_broker(reaper, work)
    async with await BrokerConnection.connect("127.0.0.1", port) as conn:
        await make_leader(conn, port)
        await fill_log(conn, 4 * FETCH_MIB)
        progress("baseline: consumer alone")
        before = await consumer_latencies_ms(conn, 3.0)
        rss_before = rss_mb(proc.pid)
        progress(f"opening {half_sent} half-sent and {idle} idle connections")
        socks = await asyncio.to_thread(open_connections, port, half_sent, HALF_SENT)
        socks += await asyncio.to_thread(open_connections, port, idle, b"")
        try:
            during = await consumer_latencies_ms(conn, 3.0)
            rss_during = rss_mb(proc.pid)
        finally:
            for s in socks:
                s.close()
        await asyncio.sleep(1.0)
        rss_after_close = rss_mb(proc.pid)
    p99_before = percentile(before, 99)
    p99_during = percentile(during, 99)
    ratio = (p99_during / p99_before) if p99_before and p99_during else None
    return {
        "bench": "abuse.connections",
        "quick": quick,
        "half_sent_connections": half_sent,
        "idle_connections": idle,
        "rss_before_mb": rounded(rss_before, 1),
        "rss_during_mb": rounded(rss_during, 1),
        "rss_after_close_mb": rounded(rss_after_close, 1),
        "rss_growth_mb": rounded(rss_during - rss_before, 1),
        "target_rss_growth_mb": 100,
        "consumer_p50_ms_before": rounded(percentile(before, 50), 3),
        "consumer_p99_ms_before": rounded(p99_before, 3),
        "consumer_p50_ms_during": rounded(percentile(during, 50), 3),
        "consumer_p99_ms_during": rounded(p99_during, 3),
        "p99_ratio": rounded(ratio, 2),
        "target_p99_ratio": 2,
        "fetches_before": len(before),
        "fetches_during": len(during),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.abuse", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=["probes", "connections"], default="probes")
    parser.add_argument("--probe", action="append", choices=sorted(PROBES), help="only this probe (repeatable)")
    parser.add_argument("--listener", choices=["kafka", "msgpack"], help="only the probes of this listener")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="probes: the smaller sizes CI sends where the full one is slow to build; connections: 200 + 200",
    )
    parser.add_argument("--json", type=Path, help="also write the result to this file")
    args = parser.parse_args(argv)

    async def run(reaper: ProcessReaper) -> dict[str, Any]:
        if args.mode == "connections":
            result = await run_connections(reaper, args.quick)
        else:
            result = await run_probes(reaper, args.probe, args.listener, args.json, args.quick)
        if args.json:
            save(args.json, result)
        return result

    return main_guard(run)


if __name__ == "__main__":
    sys.exit(main())
