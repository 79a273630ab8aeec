"""The Time interface every stateful component takes, so tests can drive a manual clock.

Core logic reads `time.milliseconds()` and never calls `time.time()` or `asyncio.sleep` itself; the
event-loop edges (server, fetcher loops, controller loop) sleep through `Time.sleep`.
"""

from __future__ import annotations

import asyncio
import time as _time
from typing import Protocol


class Time(Protocol):
    def milliseconds(self) -> int: ...

    def hi_res_milliseconds(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemTime:
    """Wall-clock milliseconds (for timestamps) and a monotonic clock (for timeouts)."""

    def milliseconds(self) -> int:
        return int(_time.time() * 1000)

    def hi_res_milliseconds(self) -> float:
        return _time.monotonic() * 1000.0

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualTime:
    """A clock that moves only when told: `advance(ms)`. `sleep(s)` does not wait either: it moves the
    clock to the sleeper's deadline unless the clock is already past it, so sleepers share one clock (two
    that sleep 1 s from the same moment both wake at +1 s). Tests that need timers, timeouts and many
    sleepers on one faithful virtual clock run on `sim.loop.VirtualTimeLoop` with `sim.loop.LoopTime`."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = float(start_ms)

    def milliseconds(self) -> int:
        return int(self._now_ms)

    def hi_res_milliseconds(self) -> float:
        return self._now_ms

    def advance(self, ms: float) -> None:
        self._now_ms += ms

    async def sleep(self, seconds: float) -> None:
        deadline = self._now_ms + seconds * 1000.0
        await asyncio.sleep(0)
        self._now_ms = max(self._now_ms, deadline)


SYSTEM_TIME = SystemTime()
