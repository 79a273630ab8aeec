"""Requests from a broker to the active controller (Kafka's NodeToControllerChannelManager).

How this works
--------------
The broker knows the quorum's voters from `controller.quorum.voters` and, from the metadata log it
replicates, which of them leads (the quorum's leader is the active controller). `send` goes to that one;
while no leader is known it tries the voters in turn. An answer of NOT_CONTROLLER (a voter that does not
lead, or one that has just lost the leadership) or a network error makes it try again, after a short
backoff, with the leader it knows by then, until the request's deadline: a failover costs the caller time,
not an error. Past the deadline a network failure raises (the caller backs off) and a NOT_CONTROLLER
answer is returned as it is.

A voter that let a request time out (paused, cut off: not refused, which is quick) is asked last, after
the others, until it answers again, even while the metadata log still names it the leader: a broker
learns of a new leader only when its own metadata fetch gives up on the old one, and until then each
request sent to the silent one would spend its whole deadline there. A heartbeat (whose deadline is its
interval or 1 s) would then miss the new controller's first session timeout and get this broker fenced,
its leaderships moved away, though the new controller was one quick NOT_CONTROLLER away. For the same
reason a request to a silent voter, once the others said no, gets half the time left, and the deadline
bounds the connect as well as the answer.

Each attempt waits at most `request_timeout_ms` (Kafka's `controller.socket.timeout.ms`) within the
deadline: a request lost on the way (a cut link the simulator drops messages on, a connection that died
without a reset) is sent again while the deadline lasts, instead of spending all of it on one attempt.

It offers the `Transport` interface, so the ALTER_PARTITION sender and the forwarding of admin requests
use it as they would a link to one controller: the node id they pass is ignored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from protocol.codec import Message
from protocol.errors import ErrorCode
from protocol.transport import NETWORK_ERRORS, Transport
from server_common.time import Time

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 50


class ControllerChannel:
    def __init__(
        self,
        transport: Transport,
        voters: Sequence[int],
        leader: Callable[[], int | None],
        time: Time,
        timeout_ms: int = 30000,
        request_timeout_ms: int = 30000,
    ) -> None:
        self.transport = transport
        self.voters = sorted(voters)
        self.leader = leader
        self.time = time
        self.timeout_ms = timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self._next_voter = 0
        self.retries = 0
        self.silent: set[int] = set()  # voters whose last request timed out

    def candidates(self) -> list[int]:
        """Whom to ask, in order: the active controller as far as we know, then the other voters in turn;
        the silent ones last."""
        leader = self.leader()
        self._next_voter += 1
        rotation = [self.voters[(self._next_voter + i) % len(self.voters)] for i in range(len(self.voters))]
        known = [leader] if leader is not None and leader >= 0 else []
        order = known + [v for v in rotation if v not in known]
        return [v for v in order if v not in self.silent] + [v for v in order if v in self.silent]

    async def send(self, node_id: int, request: Message, timeout_ms: int | None = None) -> Any:
        """`request` to the active controller (`node_id` is ignored), retried through failovers until the
        deadline."""
        deadline = self.time.hi_res_milliseconds() + (self.timeout_ms if timeout_ms is None else timeout_ms)
        asked: set[int] = set()  # this pass: a voter that failed us is asked again once the others were
        while True:
            order = [v for v in self.candidates() if v not in asked]
            if not order:
                asked.clear()
                order = self.candidates()
            target = order[0]
            asked.add(target)
            remaining = deadline - self.time.hi_res_milliseconds()
            if target in self.silent and len(order) < len(self.voters):
                # Silent, and the others already said no this pass: half what is left, so a new leader
                # elected meanwhile is still asked before the deadline.
                remaining /= 2
            remaining = min(remaining, self.request_timeout_ms)
            try:
                # The deadline bounds the connect too: a transport's connect to a cut-off voter (its SYNs
                # dropped) waits out the transport's own, longer, connect timeout.
                attempt = asyncio.ensure_future(self.transport.send(target, request, max(int(remaining), 1)))
                try:
                    response = await asyncio.wait_for(attempt, max(remaining, 1) / 1000.0)
                except asyncio.CancelledError:
                    # Our caller was cancelled (its broker stops) as the attempt failed: wait_for waited for
                    # the attempt to end and re-raises the cancellation; the attempt's own error (its sender
                    # died) is seen here, or the event loop reports it as never retrieved.
                    if attempt.done() and not attempt.cancelled():
                        attempt.exception()
                    raise
            except NETWORK_ERRORS as exc:
                if isinstance(exc, TimeoutError):
                    self.silent.add(target)
                if self.time.hi_res_milliseconds() + RETRY_BACKOFF_MS >= deadline:
                    raise
            else:
                self.silent.discard(target)
                if getattr(response, "error_code", ErrorCode.NONE) != ErrorCode.NOT_CONTROLLER:
                    return response
                if self.time.hi_res_milliseconds() + RETRY_BACKOFF_MS >= deadline:
                    return response
            self.retries += 1
            await self.time.sleep(RETRY_BACKOFF_MS / 1000.0)

    async def close(self) -> None:
        await self.transport.close()
