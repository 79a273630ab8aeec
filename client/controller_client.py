"""A connection that reconnects on demand, authenticating with the cluster secret when one is set.

Used for every long-lived link between processes: a broker to the controller (registration,
heartbeats, ALTER_PARTITION, forwarded CREATE_TOPICS) and a follower fetcher to its leader. The peer's
address is looked up on each (re)connect, so a leader that moved is found through fresh metadata. A
request that fails on the network drops the connection and raises; the caller decides whether to retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from client.connection import BrokerConnection
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
    ) -> None:
        self.endpoint = endpoint
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
                *address, self.client_id, timeout_s=self.timeout_s, max_frame_bytes=self.max_frame_bytes
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


class ControllerClient(ReconnectingConnection):
    """The broker's link to the controller at a fixed address."""

    def __init__(self, host: str, port: int, client_id: str, secret: str | None = None, timeout_s: float = 5.0):
        super().__init__(
            lambda: (host, port), client_id, secret, timeout_s, describe=f"the controller at {host}:{port}"
        )
        self.host = host
        self.port = port
