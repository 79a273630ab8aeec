"""Builds the per-interval metric records (docs/metrics.md) from the broker's live state; the field names
are metrics/fields.py's, the ones the Spark job reads."""

from __future__ import annotations

from typing import Any

from broker.partition import Partition
from broker.replica import Replica
from broker.replica_manager import ReplicaManager
from metrics import fields as f


def partition_records(
    replica_manager: ReplicaManager, broker_id: int, broker_start_ms: int, now_ms: int, fetcher_stats: dict[Any, Any]
) -> list[dict[str, Any]]:
    records = []
    for tp, p in sorted(replica_manager.partitions.items()):
        c = p.counters
        record: dict[str, Any] = {
            f.KIND: f.KIND_PARTITION,
            f.TS_MS: now_ms,
            f.BROKER_ID: broker_id,
            f.BROKER_START_MS: broker_start_ms,
            f.TOPIC: tp.topic,
            f.PARTITION: tp.partition,
            f.ROLE: f.ROLE_LEADER if p.is_leader else (f.ROLE_FOLLOWER if p.leader_id >= 0 else f.ROLE_OFFLINE),
            f.LEADER_ID: p.leader_id,
            f.LEADER_EPOCH: p.leader_epoch,
            f.LOG_START_OFFSET: p.log_start_offset,
            f.LOG_END_OFFSET: p.log_end_offset,
            f.HIGH_WATERMARK: p.high_watermark,
            f.FETCH_OFFSET: None,
            f.LAG_MESSAGES: None,
            f.LAG_MS: None,
            f.ISR_SIZE: None,
            f.REPLICA_COUNT: None,
            f.UNDER_REPLICATED: None,
            f.UNDER_MIN_ISR: None,
            f.FOLLOWERS: None,
            f.BYTES_IN: c.bytes_in,
            f.BYTES_OUT: c.bytes_out,
            f.REPLICATION_BYTES_IN: c.replication_bytes_in,
            f.REPLICATION_BYTES_OUT: c.replication_bytes_out,
            f.MESSAGES_IN: c.messages_in,
            f.ISR_SHRINKS: c.isr_shrinks,
            f.ISR_EXPANDS: c.isr_expands,
        }
        if p.is_leader:
            record.update(
                isr_size=len(p.isr),
                replica_count=len(p.assignment),
                under_replicated=p.under_replicated,
                under_min_isr=p.under_min_isr,
                followers=[
                    follower_view(p, r, now_ms) for r in sorted(p.remote_replicas.values(), key=lambda r: r.broker_id)
                ],
            )
        else:
            stats = fetcher_stats.get(tp)
            if stats is not None:
                fetch_offset = getattr(stats, "fetch_offset", None)
                record.update(
                    # -1 until the fetcher's first answer: no position yet, so none is reported
                    fetch_offset=fetch_offset if fetch_offset is not None and fetch_offset >= 0 else None,
                    lag_messages=getattr(stats, "lag_messages", None),
                    lag_ms=getattr(stats, "lag_ms", None),
                    ReplicationBytesInPerSec=getattr(stats, "bytes_fetched", c.replication_bytes_in),
                )
            else:
                record.update(fetch_offset=p.log_end_offset, lag_messages=None, lag_ms=None)
        records.append(record)
    return records


def follower_view(partition: Partition, replica: Replica, now_ms: int) -> dict[str, Any]:
    """The leader's view of one follower: where it is, whether it is in the ISR, and how far behind.

    The follower may be dead or cut off and report nothing itself; this is what the lag charts draw.
    Unknown values (no fetch yet since this leadership began, never caught up) are None."""
    leo = replica.log_end_offset
    caught_up = replica.last_caught_up_time_ms
    return {
        f.BROKER_ID: replica.broker_id,
        f.LOG_END_OFFSET: leo if leo >= 0 else None,  # -1: Kafka's unknown offset
        f.LAST_CAUGHT_UP_MS: caught_up,
        f.IN_SYNC: replica.broker_id in partition.isr,
        f.LAG_MESSAGES: max(0, partition.log_end_offset - leo) if leo >= 0 else None,
        f.TIME_SINCE_CAUGHT_UP_MS: max(0, now_ms - caught_up) if caught_up and caught_up > 0 else None,
    }
