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

It offers the `Transport` interface, so the ALTER_PARTITION sender and the forwarding of admin requests
use it as they would a link to one controller: the node id they pass is ignored.
"""

from __future__ import annotations

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
    ) -> None:
        self.transport = transport
        self.voters = sorted(voters)
        self.leader = leader
        self.time = time
        self.timeout_ms = timeout_ms
        self._next_voter = 0
        self.retries = 0

    def target(self) -> int:
        """The active controller as far as we know, else the next voter to try."""
        leader = self.leader()
        if leader is not None and leader >= 0:
            return leader
        self._next_voter += 1
        return self.voters[self._next_voter % len(self.voters)]

    async def send(self, node_id: int, request: Message, timeout_ms: int | None = None) -> Any:
        """`request` to the active controller (`node_id` is ignored), retried through failovers until the
        deadline."""
        deadline = self.time.hi_res_milliseconds() + (self.timeout_ms if timeout_ms is None else timeout_ms)
        tried: int | None = None
        while True:
            target = self.target()
            if target == tried and self.leader() == tried:
                # Still named the leader after it failed us: ask the others meanwhile.
                self._next_voter += 1
                target = self.voters[self._next_voter % len(self.voters)]
            remaining = deadline - self.time.hi_res_milliseconds()
            try:
                response = await self.transport.send(target, request, max(int(remaining), 1))
            except NETWORK_ERRORS:
                if self.time.hi_res_milliseconds() + RETRY_BACKOFF_MS >= deadline:
                    raise
                tried = target
            else:
                if getattr(response, "error_code", ErrorCode.NONE) != ErrorCode.NOT_CONTROLLER:
                    return response
                if self.time.hi_res_milliseconds() + RETRY_BACKOFF_MS >= deadline:
                    return response
                tried = target
            self.retries += 1
            await self.time.sleep(RETRY_BACKOFF_MS / 1000.0)

    async def close(self) -> None:
        await self.transport.close()
