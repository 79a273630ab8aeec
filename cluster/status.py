"""`minibroker cluster status`: the controller quorum, processes, partitions, leaders, epochs, ISR, and
HW/LEO/lag per replica.

Two sources: a local cluster's directory (`collect_status`: pids and process liveness from cluster.json,
the quorum from each controller's DESCRIBE_QUORUM, the partitions from a broker's METADATA), or any broker
of any cluster (`collect_remote_status`: what `rpk cluster info` and `kcat -L` show, from METADATA through
a bootstrap server, each broker's DESCRIBE_LOG_DIRS, and the quorum through a broker's DESCRIBE_QUORUM).
Both return the same shape; `pid` is None for a remote cluster. The partitions come from a broker's own
metadata, so they are shown when no controller can be reached, and the status then says so instead of
calling every broker fenced.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from client.cluster_client import ClusterClient
from cluster.local_cluster import LocalClusterState, node_alive, node_paused, node_pid
from network.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages import DescribeLogDirsRequest, DescribeQuorumRequest, MetadataRequest


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


def quorum_summary(described: Any, now_ms: int) -> dict[str, Any] | None:
    """The leader's DESCRIBE_QUORUM answer as status shows it: each voter's lag behind the leader's log end."""
    if described is None or described.error_code != ErrorCode.NONE:
        return None
    leader_end = max((v.log_end_offset for v in described.current_voters), default=-1)

    def replica(r: Any) -> dict[str, Any]:
        return {
            "id": r.replica_id,
            "log_end_offset": r.log_end_offset,
            "lag": max(leader_end - r.log_end_offset, 0) if r.log_end_offset >= 0 else None,
            "last_fetch_ms_ago": now_ms - r.last_fetch_timestamp if r.last_fetch_timestamp >= 0 else None,
        }

    return {
        "leader_id": described.leader_id,
        "leader_epoch": described.leader_epoch,
        "high_watermark": described.high_watermark,
        "voters": [replica(v) for v in described.current_voters],
        "observers": [replica(o) for o in described.observers],
    }


async def collect_status(state: LocalClusterState) -> dict[str, Any]:
    reachable = {c.node_id: node_alive(c) and not node_paused(c) for c in state.controllers}
    answers = await asyncio.gather(
        *(_ask(c.host, c.port, DescribeQuorumRequest()) if reachable[c.node_id] else _none() for c in state.controllers)
    )
    leader_answer = next((a for a in answers if a is not None and a.error_code == ErrorCode.NONE), None)
    up = [b for b in state.brokers if node_alive(b) and not node_paused(b)]
    meta = None
    for b in up:
        meta = await _ask(b.host, b.port, MetadataRequest(None))
        if meta is not None:
            break
    registered = {b.broker_id for b in meta.brokers} if meta else set()
    logs = await asyncio.gather(
        *(_ask(b.host, b.port, DescribeLogDirsRequest()) if b in up else _none() for b in state.brokers)
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
    controllers = [
        {
            "id": c.node_id,
            "pid": node_pid(c),
            "address": f"{c.host}:{c.port}",
            "alive": node_alive(c) and answer is not None,
            "paused": node_paused(c),
            "role": answer.state if answer is not None else None,
        }
        for c, answer in zip(state.controllers, answers, strict=True)
    ]
    active = leader_answer.leader_id if leader_answer is not None else -1
    return {
        "dir": state.dir,
        "controller": {"id": active, "alive": leader_answer is not None},
        "controllers": controllers,
        "quorum": quorum_summary(leader_answer, _now_ms()),
        "brokers": brokers,
        "partitions": partitions,
        "metadata_from": next((b.node_id for b in up if meta is not None), None),
    }


async def collect_remote_status(bootstrap: str) -> dict[str, Any]:
    """The cluster behind `bootstrap` as its brokers describe it; raises ClusterUnavailableError."""
    async with ClusterClient(bootstrap, client_id="status") as client:
        meta = await client.refresh_metadata(None)
        try:
            described = await client.send_any(DescribeQuorumRequest(), timeout_s=5.0)
        except (TimeoutError, ConnectionError, OSError):
            described = None
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
    quorum = quorum_summary(described, _now_ms())
    return {
        "bootstrap_server": bootstrap,
        # The controllers are not brokers, so METADATA names the active one only by id (as Kafka's does).
        "controller": {"id": meta.controller_id, "alive": quorum is not None},
        "controllers": [],
        "quorum": quorum,
        "brokers": brokers,
        "partitions": partitions,
    }


def _now_ms() -> int:
    return int(time.time() * 1000)


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
    lines = [*_render_quorum(status), ""]
    lines.append(f"{'broker':>6}  {'address':<21} {'pid':>7}  {'state':<12} {'leaders':>7} {'followers':>9}")
    no_controller = not status["controller"]["alive"]
    for b in status["brokers"]:
        state = "up" if b["alive"] and b["registered"] else ("up, fenced" if b["alive"] else "DOWN")
        if no_controller and b["alive"] and not b["registered"]:
            state = "up"  # the metadata that would say otherwise cannot change without a controller
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


def _render_quorum(status: dict[str, Any]) -> list[str]:
    quorum = status.get("quorum")
    lines = []
    if quorum is None:
        lines.append("controller quorum: NO ACTIVE CONTROLLER reachable (brokers keep serving their partitions;")
        lines.append("                   metadata changes, elections and new topics wait for one)")
    else:
        lines.append(
            f"controller quorum: leader {quorum['leader_id']} (the active controller), epoch {quorum['leader_epoch']}, "
            f"high watermark {quorum['high_watermark']}"
        )
    lag = {v["id"]: v for v in (quorum or {}).get("voters", [])}
    for c in status.get("controllers", []):
        up = "PAUSED" if c.get("paused") else ("up" if c["alive"] else "DOWN")
        v = lag.get(c["id"])
        behind = f"lag {v['lag']}" if v is not None and v["lag"] is not None else ""
        role = c.get("role") or "-"
        lines.append(f"  controller {c['id']:<5} {c['address']:<21} pid {c['pid']:>7}  {up:<6} {role:<12} {behind}")
    if not status.get("controllers") and quorum is not None:
        for v in quorum["voters"]:
            lines.append(f"  controller {v['id']:<5} lag {v['lag']}")
    return lines
