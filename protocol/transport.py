"""How a node reaches another node: the one network seam every inter-node caller goes through.

A follower's leader end point, the broker's link to the controller (registration, heartbeats,
ALTER_PARTITION, forwarded CREATE_TOPICS) and the controller's pushes to brokers all hold a `Transport`
and name the node they talk to by id. Broker processes plug in the TCP implementation
(`network/tcp_transport.py`); tests and a simulator can plug in an in-memory one. Nothing here touches a
socket or the event loop.

A request that fails on the way (connection refused or lost, timeout) raises one of `NETWORK_ERRORS`: the
request as a whole failed and the caller backs off. A node that answered with an error code is not a
network error: the error is a value in the response.
"""

from __future__ import annotations

from typing import Any, Protocol

from protocol.codec import Message

# Exceptions that mean "the request as a whole failed on the way", not "the node said no".
NETWORK_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, OSError, TimeoutError, EOFError)


class Transport(Protocol):
    async def send(self, node_id: int, request: Message, timeout_ms: int | None = None) -> Any:
        """Send `request` to node `node_id` and return its response; raise one of NETWORK_ERRORS if the
        request failed on the way. `timeout_ms` None means the transport's default."""

    async def close(self) -> None:
        """Close every connection; a later `send` may open them again."""
