"""How long the event loop keeps ready work waiting: the one number that says a request starved the rest.

Everything a broker does shares one asyncio loop: request handlers, the replica fetchers, the heartbeat to
the controller, the metrics emitter. A callback that holds the loop (a huge request decoded in one go, a
slow disk read) delays all of them, and a heartbeat held past `broker.session.timeout.ms` gets the
broker fenced. Kafka watches the same thing from its side as the request queue time and the network
threads' idle ratio; here it is measured directly.

How this works
--------------
A probe is scheduled every `interval_s` with `loop.call_at`; when it runs, the time since its deadline is
how long a ready callback waited for the loop (timers are moved to the ready queue once due, so a late
timer is a callback that waited, whether behind one long callback or a crowd of short ones). `take()`
returns the largest and the mean wait since the previous `take()` (the metrics interval) and starts
over; the broker emits them as `LoopLagMaxMs` and `LoopLagAvgMs` and logs a warning when one wait passes
`warn_ms`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.05
DEFAULT_WARN_MS = 1000.0


@dataclass(frozen=True)
class LoopLag:
    max_ms: float
    avg_ms: float
    probes: int


class LoopLagMonitor:
    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, warn_ms: float = DEFAULT_WARN_MS) -> None:
        self.interval_s = interval_s
        self.warn_ms = warn_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._max_s = 0.0
        self._sum_s = 0.0
        self._probes = 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._schedule(self._loop.time() + self.interval_s)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def take(self) -> LoopLag:
        """The waits since the previous call (0 when no probe ran), and a fresh start."""
        probes = self._probes
        lag = LoopLag(self._max_s * 1000.0, self._sum_s * 1000.0 / probes if probes else 0.0, probes)
        self._max_s = self._sum_s = 0.0
        self._probes = 0
        return lag

    def _schedule(self, deadline: float) -> None:
        assert self._loop is not None
        self._deadline = deadline
        self._handle = self._loop.call_at(deadline, self._probe)

    def _probe(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        waited = max(0.0, now - self._deadline)
        self._max_s = max(self._max_s, waited)
        self._sum_s += waited
        self._probes += 1
        if waited * 1000.0 >= self.warn_ms:
            log.warning("the event loop kept ready work waiting %.0f ms (a long callback or request)", waited * 1000.0)
        self._schedule(now + self.interval_s)  # from now: a long stall is one late probe, not a burst of them
