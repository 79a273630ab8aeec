"""`minibroker cluster status`: processes, partitions, leaders, epochs, ISR, and HW/LEO/lag per replica.

Two sources: a local cluster's directory (`collect_status`: pids and process liveness from
cluster.json, METADATA from the controller), or any broker of any cluster (`collect_remote_status`:
what `rpk cluster info` and `kcat -L` show, from METADATA through a bootstrap server, plus each
broker's DESCRIBE_LOG_DIRS). Both return the same shape; `pid` is None for a remote cluster.
"""

from __future__ import annotations

import asyncio
from typing import Any

from client.cluster_client import ClusterClient
from cluster.local_cluster import LocalClusterState, node_alive, node_paused, node_pid
from network.connection import BrokerConnection
from protocol.messages import DescribeLogDirsRequest, MetadataRequest


async def _ask(host: str, port: int, request: Any) -> Any:
    try:
        conn = await BrokerConnection.connect(host, port, "status", timeout_s=1.0)
    except (TimeoutError, OSError):
        return None
    try:
        return await conn.send(request, timeout_s=3.0)
    except (TimeoutError, ConnectionError, OSError):
        return None
    finally:
        await conn.close()


async def collect_status(state: LocalClusterState) -> dict[str, Any]:
    c = state.controller
    meta = await _ask(c.host, c.port, MetadataRequest(None)) if node_alive(c) and not node_paused(c) else None
    registered = {b.broker_id for b in meta.brokers} if meta else set()
    logs = await asyncio.gather(
        *(
            _ask(b.host, b.port, DescribeLogDirsRequest()) if node_alive(b) and not node_paused(b) else _none()
            for b in state.brokers
        )
    )
    partitions, leads, follows = _partitions(meta, [b.node_id for b in state.brokers], logs)
    brokers = [
        {
            "id": b.node_id,
            "pid": node_pid(b),
            "address": f"{b.host}:{b.port}",
            "alive": node_alive(b),
            "paused": node_paused(b),
            "registered": b.node_id in registered,
            "leader_count": leads.get(b.node_id, 0),
            "follower_count": follows.get(b.node_id, 0),
        }
        for b in state.brokers
    ]
    return {
        "dir": state.dir,
        "controller": {
            "id": c.node_id,
            "pid": node_pid(c),
            "address": f"{c.host}:{c.port}",
            "alive": node_alive(c) and meta is not None,
            "paused": node_paused(c),
        },
        "brokers": brokers,
        "partitions": partitions,
    }


async def collect_remote_status(bootstrap: str) -> dict[str, Any]:
    """The cluster behind `bootstrap` as its brokers describe it; raises ClusterUnavailableError."""
    async with ClusterClient(bootstrap, client_id="status") as client:
        meta = await client.refresh_metadata(None)
    endpoints = sorted(meta.brokers, key=lambda b: b.broker_id)
    logs = await asyncio.gather(*(_ask(b.host, b.port, DescribeLogDirsRequest()) for b in endpoints))
    partitions, leads, follows = _partitions(meta, [b.broker_id for b in endpoints], logs)
    brokers = [
        {
            "id": b.broker_id,
            "pid": None,
            "address": f"{b.host}:{b.port}",
            "alive": resp is not None,
            "registered": True,
            "leader_count": leads.get(b.broker_id, 0),
            "follower_count": follows.get(b.broker_id, 0),
        }
        for b, resp in zip(endpoints, logs, strict=True)
    ]
    return {
        "bootstrap_server": bootstrap,
        # The controller is not a broker, so METADATA names it only by id (as Kafka's does in KRaft mode).
        "controller": {"id": meta.controller_id, "pid": None, "address": None, "alive": meta.controller_id >= 0},
        "brokers": brokers,
        "partitions": partitions,
    }


def _partitions(
    meta: Any, broker_ids: list[int], logs: list[Any]
) -> tuple[list[dict[str, Any]], dict[int, int], dict[int, int]]:
    replicas: dict[tuple[str, int], dict[int, Any]] = {}
    for broker_id, resp in zip(broker_ids, logs, strict=True):
        for r in resp.replicas if resp else []:
            replicas.setdefault((r.topic, r.partition), {})[broker_id] = r
    partitions = []
    leads: dict[int, int] = {}
    follows: dict[int, int] = {}
    for t in meta.topics if meta else []:
        for p in t.partitions:
            here = replicas.get((t.topic, p.partition), {})
            leader_leo = here[p.leader_id].log_end_offset if p.leader_id in here else None
            reps = []
            for broker_id in p.replicas:
                r = here.get(broker_id)
                reps.append(
                    {
                        "broker_id": broker_id,
                        "log_end_offset": r.log_end_offset if r else None,
                        "high_watermark": r.high_watermark if r else None,
                        "log_start_offset": r.log_start_offset if r else None,
                        "lag": (leader_leo - r.log_end_offset) if (r and leader_leo is not None) else None,
                    }
                )
                if broker_id == p.leader_id:
                    leads[broker_id] = leads.get(broker_id, 0) + 1
                else:
                    follows[broker_id] = follows.get(broker_id, 0) + 1
            partitions.append(
                {
                    "topic": t.topic,
                    "partition": p.partition,
                    "leader": p.leader_id,
                    "leader_epoch": p.leader_epoch,
                    "isr": p.isr,
                    "replicas": reps,
                }
            )
    return partitions, leads, follows


async def _none() -> None:
    return None


def render_status(status: dict[str, Any]) -> str:
    c = status["controller"]
    if c["address"] is None:
        head = f"controller id {c['id']}  (via {status['bootstrap_server']})" if c["alive"] else "controller unknown"
    else:
        up = "PAUSED" if c.get("paused") else ("up" if c["alive"] else "DOWN")
        head = f"controller {c['address']}  pid {c['pid']}  {up}"
    lines = [head, ""]
    lines.append(f"{'broker':>6}  {'address':<21} {'pid':>7}  {'state':<12} {'leaders':>7} {'followers':>9}")
    for b in status["brokers"]:
        state = "up" if b["alive"] and b["registered"] else ("up, fenced" if b["alive"] else "DOWN")
        if b.get("paused"):
            state = "PAUSED"  # SIGSTOP: the process exists but answers nothing until resumed
        if b["pid"] is None and not b["alive"]:
            state = "unreachable"  # in METADATA, but its DESCRIBE_LOG_DIRS got no answer from here
        lines.append(
            f"{b['id']:>6}  {b['address']:<21} {'-' if b['pid'] is None else b['pid']:>7}  {state:<12} "
            f"{b['leader_count']:>7} {b['follower_count']:>9}"
        )
    lines.append("")
    if not status["partitions"]:
        lines.append("(no topics)")
    # One column for topic-partition, as wide as the longest name, so the leader column lines up.
    width = max((len(f"{p['topic']}-{p['partition']}") for p in status["partitions"]), default=0)
    for p in status["partitions"]:
        reps = "  ".join(
            f"{r['broker_id']}:LEO={_v(r['log_end_offset'])},HW={_v(r['high_watermark'])},lag={_v(r['lag'])}"
            for r in p["replicas"]
        )
        lines.append(
            f"{p['topic'] + '-' + str(p['partition']):<{width}}  leader {p['leader']:>2}  "
            f"epoch {p['leader_epoch']:>3}  "
            f"isr {','.join(map(str, p['isr'])):<8} {reps}"
        )
    return "\n".join(lines)


def _v(value: Any) -> str:
    return "?" if value is None else str(value)
