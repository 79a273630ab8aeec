"""Polling until a condition holds or a deadline passes, and retrying with back-off, on an injected clock.

Both take the clock as a `server_common.time.Time`: real tools pass `SYSTEM_TIME` (monotonic seconds, real
sleeps), the simulator passes its `sim.loop.LoopTime`, so a timeout there is virtual time and a run stays
deterministic.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from server_common.time import Time

T = TypeVar("T")

Condition = Callable[[], bool | Awaitable[bool]]


async def wait_until(condition: Condition, timeout_s: float, *, clock: Time, interval_s: float = 0.05) -> bool:
    """Whether `condition` (a function, or a coroutine function) became true within `timeout_s` on `clock`.

    It is asked at once, then every `interval_s`, and once more when the deadline has passed, so a
    condition that came true during the last sleep still counts. An exception it raises propagates: a
    condition that wants to go on through one catches it and answers False."""
    deadline = clock.hi_res_milliseconds() + timeout_s * 1000.0
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return True
        if clock.hi_res_milliseconds() >= deadline:
            return False
        await clock.sleep(interval_s)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often to try and how long to wait between tries.

    `attempts` tries in all; before try n+1 (n from 0) the wait is `backoff_s` ("fixed"),
    `backoff_s * (n + 1)` ("linear") or `backoff_s * 2**n` ("exponential"), at most `max_backoff_s`."""

    attempts: int
    backoff_s: float
    max_backoff_s: float | None = None
    growth: Literal["fixed", "linear", "exponential"] = "fixed"

    def delay_s(self, attempt: int) -> float:
        """The wait after try `attempt` (0 for the first)."""
        if self.growth == "linear":
            delay = self.backoff_s * (attempt + 1)
        elif self.growth == "exponential":
            delay = self.backoff_s * (2**attempt)
        else:
            delay = self.backoff_s
        return delay if self.max_backoff_s is None else min(delay, self.max_backoff_s)


async def retry(attempt: Callable[[], Awaitable[T | None]], policy: RetryPolicy, *, clock: Time) -> T | None:
    """`attempt()`'s first answer that is not None, trying up to `policy.attempts` times with its back-off
    between tries; None when every try answered None. To give up early, `attempt` raises."""
    for n in range(policy.attempts):
        result = await attempt()
        if result is not None:
            return result
        if n + 1 < policy.attempts:
            await clock.sleep(policy.delay_s(n))
    return None
