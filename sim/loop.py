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
import selectors
from typing import Any

from server_common.time import Time

SIM_EPOCH_MS = 1_700_000_000_000  # what virtual time 0 reads as, in epoch milliseconds


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
