"""Builds the per-interval metric records (docs/metrics.md) from the broker's live state."""

from __future__ import annotations

from typing import Any

from broker.replica_manager import ReplicaManager


def partition_records(
    replica_manager: ReplicaManager, broker_id: int, broker_start_ms: int, now_ms: int, fetcher_stats: dict[Any, Any]
) -> list[dict[str, Any]]:
    records = []
    for tp, p in sorted(replica_manager.partitions.items()):
        c = p.counters
        record: dict[str, Any] = {
            "kind": "partition",
            "ts_ms": now_ms,
            "broker_id": broker_id,
            "broker_start_ms": broker_start_ms,
            "topic": tp.topic,
            "partition": tp.partition,
            "role": "leader" if p.is_leader else ("follower" if p.leader_id >= 0 else "offline"),
            "leader_id": p.leader_id,
            "leader_epoch": p.leader_epoch,
            "log_start_offset": p.log_start_offset,
            "log_end_offset": p.log_end_offset,
            "high_watermark": p.high_watermark,
            "fetch_offset": None,
            "lag_messages": None,
            "lag_ms": None,
            "isr_size": None,
            "replica_count": None,
            "under_replicated": None,
            "under_min_isr": None,
            "followers": None,
            "BytesInPerSec": c.bytes_in,
            "BytesOutPerSec": c.bytes_out,
            "ReplicationBytesInPerSec": c.replication_bytes_in,
            "ReplicationBytesOutPerSec": c.replication_bytes_out,
            "MessagesInPerSec": c.messages_in,
            "IsrShrinksPerSec": c.isr_shrinks,
            "IsrExpandsPerSec": c.isr_expands,
        }
        if p.is_leader:
            record.update(
                isr_size=len(p.isr),
                replica_count=len(p.assignment),
                under_replicated=p.under_replicated,
                under_min_isr=p.under_min_isr,
                followers=[
                    {
                        "broker_id": r.broker_id,
                        "log_end_offset": r.log_end_offset,
                        "last_caught_up_ms": r.last_caught_up_time_ms,
                        "in_sync": r.broker_id in p.isr,
                    }
                    for r in sorted(p.remote_replicas.values(), key=lambda r: r.broker_id)
                ],
            )
        else:
            stats = fetcher_stats.get(tp)
            if stats is not None:
                record.update(
                    fetch_offset=getattr(stats, "fetch_offset", None),
                    lag_messages=getattr(stats, "lag_messages", None),
                    lag_ms=getattr(stats, "lag_ms", None),
                    ReplicationBytesInPerSec=getattr(stats, "bytes_fetched", c.replication_bytes_in),
                )
            else:
                record.update(fetch_offset=p.log_end_offset, lag_messages=None, lag_ms=None)
        records.append(record)
    return records
