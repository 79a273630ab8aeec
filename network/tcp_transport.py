"""The TCP `Transport` (protocol/transport.py): nodes reached by id over reconnecting connections.

`TcpTransport` keeps one `ReconnectingConnection` per node id it has talked to. A connection opens on
demand, authenticates with the cluster secret when one is set, and looks the node's address up on each
(re)connect through `resolve`, so a broker that moved is found through fresh metadata. A request that
fails on the network drops that connection and raises; the caller decides whether to retry.
With `local_address` (a node's `local.address`) every connection leaves from that address, so each link
between two nodes is one (source, destination) address pair that chaos can cut or slow down.

Used for every long-lived link between processes: a broker to the controller (registration, heartbeats,
ALTER_PARTITION, forwarded CREATE_TOPICS), a follower fetcher to its leader (one transport per fetcher,
as Kafka has one connection per ReplicaFetcherThread), the controller to each broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from network.connection import BrokerConnection
from protocol.codec import Message
from protocol.errors import ErrorCode
from protocol.framing import DEFAULT_MAX_FRAME_BYTES
from protocol.messages import SaslAuthenticateRequest


class ReconnectingConnection:
    def __init__(
        self,
        endpoint: Callable[[], tuple[str, int] | None],
        client_id: str,
        secret: str | None = None,
        timeout_s: float = 5.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        describe: str = "peer",
        local_address: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.local_address = local_address
        self.client_id = client_id
        self.secret = secret
        self.timeout_s = timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.describe = describe
        self._connection: BrokerConnection | None = None
        self._lock = asyncio.Lock()

    async def _connected(self) -> BrokerConnection:
        if self._connection is not None and self._connection.is_open:
            return self._connection
        async with self._lock:
            if self._connection is not None and self._connection.is_open:
                return self._connection
            address = self.endpoint()
            if address is None:
                raise ConnectionError(f"no known address for {self.describe}")
            conn = await BrokerConnection.connect(
                *address,
                self.client_id,
                timeout_s=self.timeout_s,
                max_frame_bytes=self.max_frame_bytes,
                local_address=self.local_address,
            )
            if self.secret is not None:
                auth = await conn.send(SaslAuthenticateRequest(self.secret.encode()), timeout_s=self.timeout_s)
                if auth.error_code != ErrorCode.NONE:
                    await conn.close()
                    raise PermissionError(f"{self.describe} refused the cluster secret: {auth.error_message}")
            self._connection = conn
            return conn

    async def send(self, request: Message, timeout_s: float | None = None) -> Any:
        conn = await self._connected()
        try:
            return await conn.send(request, timeout_s=timeout_s or self.timeout_s)
        except (TimeoutError, ConnectionError, OSError):
            await self.close()
            raise

    async def close(self) -> None:
        conn, self._connection = self._connection, None
        if conn is not None:
            try:
                await asyncio.wait_for(conn.close(), 1.0)
            except (TimeoutError, OSError):
                pass


class TcpTransport:
    """A `Transport` over TCP: `resolve(node_id)` gives a node's (host, port), or None when unknown."""

    def __init__(
        self,
        resolve: Callable[[int], tuple[str, int] | None],
        client_id: str,
        secret: str | None = None,
        timeout_ms: int = 5000,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        describe: Callable[[int], str] = lambda node_id: f"node {node_id}",
        local_address: str | None = None,
    ) -> None:
        self.resolve = resolve
        self.local_address = local_address
        self.client_id = client_id
        self.secret = secret
        self.timeout_ms = timeout_ms
        self.max_frame_bytes = max_frame_bytes
        self.describe = describe
        self._connections: dict[int, ReconnectingConnection] = {}

    def _connection(self, node_id: int) -> ReconnectingConnection:
        conn = self._connections.get(node_id)
        if conn is None:
            conn = ReconnectingConnection(
                lambda: self.resolve(node_id),
                self.client_id,
                self.secret,
                self.timeout_ms / 1000.0,
                self.max_frame_bytes,
                describe=self.describe(node_id),
                local_address=self.local_address,
            )
            self._connections[node_id] = conn
        return conn

    async def send(self, node_id: int, request: Message, timeout_ms: int | None = None) -> Any:
        return await self._connection(node_id).send(request, None if timeout_ms is None else timeout_ms / 1000.0)

    async def close(self) -> None:
        for conn in list(self._connections.values()):
            await conn.close()


def fixed_address(node_id: int, host: str, port: int) -> Callable[[int], tuple[str, int] | None]:
    """A resolver that knows one node at one address (a broker's controller, from its config)."""
    return lambda wanted: (host, port) if wanted == node_id else None
