"""Producing records: batches routed to partition leaders, used by `minibroker produce` and the benches.

A batch is retried only when the broker said it was *not* written: NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS (checked before the append),
FENCED/UNKNOWN_LEADER_EPOCH, or a connection that could not be opened. A timeout or a connection that
broke after the request was sent is indeterminate and is reported as failed, never resent, so the tool
cannot introduce duplicates.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
from collections.abc import Iterable, Iterator
from typing import Any

from client.cluster_client import REFRESH_ERRORS, ClusterClient, ClusterUnavailableError
from protocol.errors import ErrorCode
from protocol.messages import TopicPartition
from protocol.record_batch import build_batch

NOT_WRITTEN = REFRESH_ERRORS | {ErrorCode.NOT_ENOUGH_REPLICAS}
ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


def _chunks(values: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    it = iter(values)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


async def send_batch(
    client: ClusterClient,
    tp: TopicPartition,
    values: list[bytes],
    acks: int,
    retries: int = 20,
    timeout_ms: int = 30000,
) -> tuple[str, int, str]:
    """('acked' | 'failed', base offset, message). Retries only errors that mean "not written"."""
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
            last = (resp.error_message or (p.error_message if p else None)) or ErrorCode(code).name
            if ErrorCode(code) not in NOT_WRITTEN:
                return "failed", -1, last
        await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
        try:
            await client.refresh_metadata([tp.topic])
        except ClusterUnavailableError as exc:
            last = str(exc)
    return "failed", -1, f"gave up after {retries} retries: {last}"


async def produce_command(args: argparse.Namespace, values: Iterable[bytes] | None) -> dict[str, Any]:
    from cluster.cli import EXIT_CLUSTER_ERROR, EXIT_UNREACHABLE, CliError

    if values is None:
        payload = os.urandom(max(args.size, 0) // 2 + 1).hex()[: args.size].encode()
        values = (payload for _ in range(args.count))
    acks = ACKS[args.acks]
    async with ClusterClient(args.bootstrap_server) as client:
        try:
            meta = await client.refresh_metadata([args.topic])
        except ClusterUnavailableError as exc:
            raise CliError(f"cluster not reachable at {args.bootstrap_server}: {exc}", EXIT_UNREACHABLE) from None
        topic = meta.topics[0]
        if topic.error_code != ErrorCode.NONE:
            raise CliError(
                f"unknown topic {args.topic!r} (create it with `minibroker topic create`)", EXIT_CLUSTER_ERROR
            )
        partitions = client.partitions_of(args.topic)
        if args.partition is not None:
            if TopicPartition(args.topic, args.partition) not in partitions:
                raise CliError(f"topic {args.topic!r} has no partition {args.partition}", EXIT_CLUSTER_ERROR)
            partitions = [TopicPartition(args.topic, args.partition)]
        acked = failed = 0
        errors: list[str] = []
        rr = itertools.cycle(partitions)
        for chunk in _chunks(values, max(args.batch_size, 1)):
            outcome, _, message = await send_batch(client, next(rr), chunk, acks)
            if outcome == "acked":
                acked += len(chunk)
            else:
                failed += len(chunk)
                errors.append(message)
        return {"topic": args.topic, "acked": acked, "failed": failed, "errors": errors[:5]}
