"""Producing records: batches routed to partition leaders, used by `minibroker produce` and the benches.

A batch is retried only when the broker said it was *not* written: NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS (checked before the append),
FENCED/UNKNOWN_LEADER_EPOCH, or a connection that could not be opened. A timeout or a connection that
broke after the request was sent is indeterminate and is reported as failed, never resent, so the tool
cannot introduce duplicates. NOT_ENOUGH_REPLICAS is not retried when the topic's min.insync.replicas is
larger than its replication factor: no ISR change can ever satisfy it.

`produce_command` picks each record's partition as Kafka's producer does (`--partition`, else the
key's murmur2 hash, else one partition per batch in turn), reports the first error of each kind with
its reason as it happens, and prints progress to stderr while a long produce runs.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from client.cluster_client import REFRESH_ERRORS, ClusterClient, ClusterUnavailableError
from client.console import InputLineError, ProducerRecord
from client.errors import ClusterAnswerError, ClusterUnreachableError
from client.partitioner import partition_for_key
from protocol.errors import ErrorCode
from protocol.messages import TopicPartition
from protocol.record_batch import Header, build_batch

NOT_WRITTEN = REFRESH_ERRORS | {ErrorCode.NOT_ENOUGH_REPLICAS}
ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


PROGRESS_INTERVAL_S = 2.0


async def send_batch(
    client: ClusterClient,
    tp: TopicPartition,
    values: Sequence[bytes | ProducerRecord],
    acks: int,
    retries: int = 20,
    timeout_ms: int = 30000,
    on_retry: Callable[[str], None] | None = None,
) -> tuple[str, int, str]:
    """('acked' | 'failed', base offset, message). Retries only errors that mean "not written".

    A failure's message starts with the error's name (`NOT_ENOUGH_REPLICAS: ...`); `on_retry` hears
    each reason before the batch is sent again."""
    records = build_batch(values)
    last = ""
    for attempt in range(retries + 1):
        try:
            resp = await client.produce(tp, records, acks=acks, timeout_ms=timeout_ms)
        except (ConnectionRefusedError, ClusterUnavailableError) as exc:
            last = str(exc)
        except (TimeoutError, ConnectionError, OSError) as exc:
            return "failed", -1, f"indeterminate: {exc or type(exc).__name__}"
        else:
            if resp is None:
                return "acked", -1, ""
            p = resp.partitions[0] if resp.partitions else None
            code = resp.error_code or (p.error_code if p else ErrorCode.UNKNOWN_SERVER_ERROR)
            if code == ErrorCode.NONE and p is not None:
                return "acked", p.base_offset, ""
            name = ErrorCode(code).name
            reason = resp.error_message or (p.error_message if p else None)
            last = f"{name}: {reason}" if reason else name
            if ErrorCode(code) not in NOT_WRITTEN:
                return "failed", -1, last
            if code == ErrorCode.NOT_ENOUGH_REPLICAS and acks == -1 and client.min_isr_unreachable(tp):
                return "failed", -1, last + " (permanent: min.insync.replicas exceeds the replication factor)"
        if on_retry is not None and attempt < retries:
            on_retry(last)
        await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
        try:
            await client.refresh_metadata([tp.topic])
        except ClusterUnavailableError as exc:
            last = str(exc)
    return "failed", -1, f"{last} (gave up after {retries} retries)"


async def produce_command(
    args: argparse.Namespace,
    records: Iterable[ProducerRecord] | None,
    key: bytes | None = None,
    headers: Sequence[Header] = (),
) -> dict[str, Any]:
    if records is None:
        payload = os.urandom(max(args.size, 0) // 2 + 1).hex()[: args.size].encode()
        records = ((key, payload, headers) for _ in range(args.count))
    acks = ACKS[args.acks]
    async with ClusterClient(args.bootstrap_server, secret=getattr(args, "cluster_secret", None)) as client:
        try:
            meta = await client.refresh_metadata([args.topic])
        except ClusterUnavailableError as exc:
            raise ClusterUnreachableError(f"cluster not reachable at {args.bootstrap_server}: {exc}") from None
        topic = meta.topics[0]
        if topic.error_code != ErrorCode.NONE:
            raise ClusterAnswerError(
                f"unknown topic {args.topic!r} (create it with "
                f"`minibroker topic create {args.topic} --bootstrap-server {args.bootstrap_server}`)"
            )
        partitions = client.partitions_of(args.topic)
        if args.partition is not None:
            if TopicPartition(args.topic, args.partition) not in partitions:
                raise ClusterAnswerError(f"topic {args.topic!r} has no partition {args.partition}")
        targets = [TopicPartition(args.topic, args.partition)] if args.partition is not None else partitions
        if acks == -1 and any(client.min_isr_unreachable(tp) for tp in targets):
            rf = min(len(client.leader_of(tp).replicas) for tp in targets)
            min_isr = client.topic_configs.get(args.topic, {}).get("min.insync.replicas")
            raise ClusterAnswerError(
                f"acks=all to {args.topic!r} can never succeed: min.insync.replicas={min_isr} is larger than "
                f"its replication factor {rf} (use --acks 1, or a topic with a lower min.insync.replicas)"
            )
        return await _produce(client, args, records, partitions, acks)


async def _produce(
    client: ClusterClient,
    args: argparse.Namespace,
    records: Iterable[ProducerRecord],
    partitions: list[TopicPartition],
    acks: int,
) -> dict[str, Any]:
    batch_size = max(args.batch_size, 1)
    acked = failed = 0
    errors: dict[str, dict[str, Any]] = {}  # first message and count per error name
    buffers: dict[TopicPartition, list[ProducerRecord]] = {}
    turn = itertools.cycle(partitions)
    sticky = next(turn)
    started = last_progress = time.monotonic()
    retrying: set[str] = set()

    def on_retry(message: str) -> None:
        kind = message.split(":", 1)[0].split(" ", 1)[0]
        if kind not in retrying:  # say why it is waiting, once per kind, instead of retrying silently
            retrying.add(kind)
            print(f"minibroker: produce: {message} (retrying)", file=sys.stderr, flush=True)

    async def flush(tp: TopicPartition) -> None:
        nonlocal acked, failed, last_progress
        batch = buffers.pop(tp, [])
        if not batch:
            return
        outcome, _, message = await send_batch(client, tp, batch, acks, on_retry=on_retry)
        if outcome == "acked":
            acked += len(batch)
        else:
            failed += len(batch)
            kind = message.split(":", 1)[0].split(" ", 1)[0]
            if kind not in errors:
                errors[kind] = {"error": kind, "first": f"{tp}: {message}", "records": 0}
                print(f"minibroker: produce: {tp}: {message}", file=sys.stderr, flush=True)
            errors[kind]["records"] += len(batch)
        now = time.monotonic()
        if now - last_progress >= PROGRESS_INTERVAL_S:
            last_progress = now
            print(
                f"minibroker: produce: {acked} acked, {failed} failed after {now - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    input_error = None
    try:
        for record in records:
            if args.partition is not None:
                tp = TopicPartition(args.topic, args.partition)
            elif record[0] is not None:
                tp = partitions[partition_for_key(record[0], len(partitions))]
            else:
                tp = sticky
            buffer = buffers.setdefault(tp, [])
            buffer.append(record)
            if len(buffer) >= batch_size:
                await flush(tp)
                if tp == sticky:
                    sticky = next(turn)  # keyless records move on to the next partition per batch
    except InputLineError as exc:
        input_error = str(exc)
    for tp in list(buffers):
        await flush(tp)
    result: dict[str, Any] = {
        "topic": args.topic,
        "acked": acked,
        "failed": failed,
        "errors": list(errors.values()),
    }
    if input_error:
        result["input_error"] = input_error
    return result
