"""Each node of a local cluster has its own loopback address, and every link it opens leaves from there."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from client.cluster_client import ClusterClient
from cluster.chaos import CHAOS_OVERRIDES
from cluster.local_cluster import LocalClusterState, free_ports, random_base_address, start_cluster, stop_cluster
from protocol.errors import ErrorCode
from tests.integration.processes import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def tcp_connections(pid: int) -> list[tuple[str, str]]:
    """(local "a.b.c.d:port", remote "a.b.c.d:port") of the process's established IPv4 TCP sockets."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])

    def address(hex_text: str) -> str:
        ip, port = hex_text.split(":")
        return ".".join(str(int(ip[i : i + 2], 16)) for i in (6, 4, 2, 0)) + f":{int(port, 16)}"

    out = []
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
            out.append((address(fields[1]), address(fields[2])))
    return out


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[LocalClusterState]:
    ports = free_ports(4)
    state = await start_cluster(
        tmp_path / "c",
        3,
        controller_port=ports[3],
        broker_ports=ports[:3],
        overrides=dict(CHAOS_OVERRIDES),
        base_address=random_base_address(),
    )
    try:
        yield state
    finally:
        stop_cluster(state, timeout_s=10.0)


async def test_every_link_between_nodes_leaves_from_the_nodes_own_address(cluster: LocalClusterState) -> None:
    nodes = cluster.nodes
    hosts = [n.host for n in nodes]
    assert len(set(hosts)) == len(nodes), hosts
    assert all(h.startswith("127.") and h != "127.0.0.1" for h in hosts)
    listeners = {f"{n.host}:{n.port}": n for n in nodes}
    async with ClusterClient(cluster.bootstrap) as client:
        resp = await client.create_topic("links", 3, 3, {})
        assert resp.topics[0].error_code == ErrorCode.NONE
        await client.wait_for_leaders("links")

    def links() -> dict[int, list[tuple[str, str]]]:
        return {n.pid: [(lo, re) for lo, re in tcp_connections(n.pid) if re in listeners] for n in nodes}

    # Every broker talks to the active controller (its metadata FETCHes, heartbeats) and fetches from the
    # two other brokers; each controller fetches the metadata log from the quorum's leader.
    async def all_links_up() -> dict[int, list[tuple[str, str]]] | None:
        seen = links()
        controllers = {c.node_id for c in cluster.controllers}
        ok = (
            all(
                {listeners[re].node_id for _, re in seen[b.pid]} & controllers
                and {listeners[re].node_id for _, re in seen[b.pid]}
                >= {o.node_id for o in cluster.brokers if o is not b}
                for b in cluster.brokers
            )
            and sum(1 for c in cluster.controllers if seen[c.pid]) >= len(cluster.controllers) - 1
        )
        return seen if ok else None

    seen = await wait_until(all_links_up, what="every inter-node link")
    for node in nodes:
        for local, remote in seen[node.pid]:
            assert local.rsplit(":", 1)[0] == node.host, (node.role, node.node_id, local, remote)
