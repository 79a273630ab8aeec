"""Virtual time: an asyncio event loop whose clock jumps to the next timer whenever nothing is ready.

How this works
--------------
asyncio's loop runs ready callbacks, then asks its selector for I/O events, waiting at most until the
earliest timer is due. `VirtualTimeLoop` gives it a selector with no I/O that, instead of blocking for
`timeout` seconds, moves the loop's clock forward by `timeout` and returns at once. So every
`asyncio.sleep`, `call_later` and `wait_for` timeout runs exactly on schedule, in order, with no wall time
spent waiting: the model is trio's MockClock with autojump. Two sleepers of 1 s starting together wake
together at +1 s (a shared clock, unlike a clock each sleeper advances by itself).

A loop with nothing ready and no timer would block forever: that is a deadlock of the simulation and
raises `SimulationDeadlock`. `LoopTime` is the `Time` the nodes read: milliseconds since a fixed epoch
plus the loop's clock. Nothing here reads the wall clock.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import selectors
from asyncio import format_helpers
from typing import Any

from server_common.time import Time

SIM_EPOCH_MS = 1_700_000_000_000  # what virtual time 0 reads as, in epoch milliseconds
# asyncio.base_events' constants, which VirtualTimeLoop._run_once follows
_MIN_SCHEDULED_TIMER_HANDLES = 100
_MIN_CANCELLED_TIMER_HANDLES_FRACTION = 0.5
_MAXIMUM_SELECT_TIMEOUT = 24 * 3600


class SimulationDeadlock(RuntimeError):
    """Nothing is ready and no timer is pending: every task waits for something that cannot happen."""


class _VirtualSelector(selectors.BaseSelector):
    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._loop = loop
        self._keys: dict[Any, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        self.unregister(fileobj)
        return self.register(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise SimulationDeadlock("nothing is ready and no timer is pending")
        if timeout > 0:
            self._loop.advance(timeout)
        return []

    def close(self) -> None:
        self._keys.clear()

    def get_map(self) -> Any:
        return self._keys


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual_now = 0.0
        super().__init__(selector=_VirtualSelector(self))

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        self._virtual_now += seconds

    def _run_once(self) -> None:
        """asyncio's `BaseEventLoop._run_once` step for step (the same timers in the same order, the clock
        moved by the same sums), without what a loop with no I/O does not need: the selector round trip
        (its `select` only moves the clock or raises `SimulationDeadlock`, and there are no events to
        process) and, per callback, the debug branch and `Handle._run`'s frame. A run makes ~100,000
        callbacks per seed; this is the simulator's own overhead, the nodes' code runs as before."""
        loop: Any = self  # asyncio's private attributes, as its own _run_once reads them
        if loop._debug:
            super()._run_once()  # type: ignore[misc]
            return
        scheduled: list[Any] = loop._scheduled
        sched_count = len(scheduled)
        if sched_count > _MIN_SCHEDULED_TIMER_HANDLES and (
            loop._timer_cancelled_count / sched_count > _MIN_CANCELLED_TIMER_HANDLES_FRACTION
        ):
            live = []
            for handle in scheduled:
                if handle._cancelled:
                    handle._scheduled = False
                else:
                    live.append(handle)
            heapq.heapify(live)
            loop._scheduled = scheduled = live
            loop._timer_cancelled_count = 0
        else:
            while scheduled and scheduled[0]._cancelled:
                loop._timer_cancelled_count -= 1
                handle = heapq.heappop(scheduled)
                handle._scheduled = False
        ready: collections.deque[Any] = loop._ready
        if not ready and not loop._stopping:
            if not scheduled:
                raise SimulationDeadlock("nothing is ready and no timer is pending")
            timeout = min(max(0, scheduled[0]._when - self._virtual_now), _MAXIMUM_SELECT_TIMEOUT)
            if timeout > 0:
                self._virtual_now += timeout
        end_time = self._virtual_now + loop._clock_resolution
        while scheduled:
            handle = scheduled[0]
            if handle._when >= end_time:
                break
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
            ready.append(handle)
        popleft = ready.popleft
        for _ in range(len(ready)):
            handle = popleft()
            if handle._cancelled:
                continue
            try:
                handle._context.run(handle._callback, *handle._args)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # noqa: BLE001 - as Handle._run: to the loop's exception handler
                source = format_helpers._format_callback_source(handle._callback, handle._args)
                context = {
                    "message": f"Exception in callback {source}",
                    "exception": exc,
                    "handle": handle,
                }
                if handle._source_traceback:
                    context["source_traceback"] = handle._source_traceback
                self.call_exception_handler(context)
        handle = None  # no cycle through an exception's traceback


class LoopTime(Time):
    """Reads the running loop's clock (virtual under `VirtualTimeLoop`) as epoch milliseconds."""

    def __init__(self, loop: asyncio.AbstractEventLoop, epoch_ms: int = SIM_EPOCH_MS) -> None:
        self._loop = loop
        self._epoch_ms = epoch_ms

    def milliseconds(self) -> int:
        return self._epoch_ms + int(self._loop.time() * 1000.0)

    def hi_res_milliseconds(self) -> float:
        return self._epoch_ms + self._loop.time() * 1000.0

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def run(coro: Any) -> Any:
    """Run `coro` to completion on a fresh virtual-time loop and close the loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
