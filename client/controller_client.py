"""A reconnecting connection to the controller, authenticated with the cluster secret when one is set."""

from __future__ import annotations

import asyncio
from typing import Any

from client.connection import BrokerConnection
from protocol.codec import Message
from protocol.errors import ErrorCode
from protocol.messages import SaslAuthenticateRequest


class ControllerClient:
    def __init__(self, host: str, port: int, client_id: str, secret: str | None = None, timeout_s: float = 5.0):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.secret = secret
        self.timeout_s = timeout_s
        self._connection: BrokerConnection | None = None
        self._lock = asyncio.Lock()

    async def _connected(self) -> BrokerConnection:
        if self._connection is not None and self._connection.is_open:
            return self._connection
        async with self._lock:
            if self._connection is not None and self._connection.is_open:
                return self._connection
            conn = await BrokerConnection.connect(self.host, self.port, self.client_id, timeout_s=self.timeout_s)
            if self.secret is not None:
                auth = await conn.send(SaslAuthenticateRequest(self.secret.encode()), timeout_s=self.timeout_s)
                if auth.error_code != ErrorCode.NONE:
                    await conn.close()
                    raise PermissionError(f"controller refused the cluster secret: {auth.error_message}")
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
