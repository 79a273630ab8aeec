"""What a request handler may know about the connection a request arrived on, and the checks every
listener applies the same way: the cluster secret (SASL_AUTHENTICATE) and the API versions answer.

Brokers, the controller and the simulator's network all build a `ConnectionContext` per connection and
pass it with each request to their handler; nothing here touches a socket, so a handler can be called
from any listener (the msgpack socket server, the simulated network) with the same context.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from protocol.codec import Message
from protocol.errors import ErrorCode
from protocol.messages import (
    SUPPORTED_VERSIONS,
    ApiVersionRange,
    ApiVersionsResponse,
    ErrorResponse,
    RequestHeader,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ConnectionContext:
    """What a handler may know about the connection a request came from."""

    connection_id: int
    peer: str
    authenticated: bool = False
    attributes: dict[str, Any] = field(default_factory=dict)
    close_after_response: bool = False  # set by a handler: answer, then close (failed authentication)
    #: Set by the socket server while a request whose effect must keep arrival order (a PRODUCE: its
    #: append) has started and not reached that effect: no later request of the connection starts
    #: meanwhile, whatever the handler awaits first. The handler calls `release_order()` once the effect is
    #: done, so that what it waits for afterwards (followers, for acks=all) overlaps with later requests;
    #: the server releases it when the handler finishes, if the handler did not.
    order_held: bool = False
    #: Called on release while a later request is held back (set by the server only then).
    on_order_released: Callable[[], None] | None = None

    def release_order(self) -> None:
        """The request holding the order has reached its effect: later requests may start."""
        if self.order_held:
            self.order_held = False
            wake, self.on_order_released = self.on_order_released, None
            if wake is not None:
                wake()

    @contextlib.contextmanager
    def in_order(self) -> Iterator[None]:
        """Around effects a handler applies in slices, yielding to the loop between them (a LIST_OFFSETS of
        thousands of partitions): the connection's later requests start after, as if they ran one by one.
        Entered before the handler first waits, as the server learns of the hold only then. A hold the
        server already took (a PRODUCE's, until its append) is left to its own release."""
        held_already = self.order_held
        self.order_held = True
        try:
            yield
        finally:
            if not held_already:
                self.release_order()


Handler = Callable[[ConnectionContext, RequestHeader, Message], Awaitable[Message | None]]


def check_secret(ctx: ConnectionContext, secret: str | None, what: str = "this request") -> ErrorResponse | None:
    """Kafka's ClusterAction: with a secret set, requests only brokers (or admins) may send must come from a
    connection that authenticated. None when allowed."""
    if secret is None or ctx.authenticated:
        return None
    return ErrorResponse(
        int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        f"{what} needs the cluster secret: send SASL_AUTHENTICATE first",
    )


FAILED_AUTHENTICATION_DELAY_S = 0.1  # Kafka's connection.failed.authentication.delay.ms default, 100 ms


async def authenticate(
    ctx: ConnectionContext, secret: str | None, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    """Check the secret. A wrong one is answered after a delay and the connection is then closed, as Kafka
    does (connection.failed.authentication.delay.ms): guessing costs a connection and 100 ms a try."""
    if secret is None or hmac.compare_digest(request.auth_bytes, secret.encode()):
        ctx.authenticated = True
        return SaslAuthenticateResponse()
    log.warning("failed authentication from %s; closing the connection", ctx.peer)
    ctx.close_after_response = True
    await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
    return SaslAuthenticateResponse(int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "wrong cluster secret")


def api_versions_response() -> ApiVersionsResponse:
    return ApiVersionsResponse(
        api_keys=[ApiVersionRange(int(k), lo, hi) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())]
    )
