"""How much request work the event loop does before timers and other I/O get their turn.

How this works
--------------
A broker's requests, its replica fetchers, its metadata FETCHes and its timers share one event loop (a
controller's runs the quorum's Raft; a broker's heartbeats have a thread of their own). Each request is
bounded on its own (network/request_limits.py), but a thousand bounded requests run back to back still hold
the loop for seconds: pipelined on one connection, or one each on many. So request work is metered per turn
of the loop: the socket servers charge the time they spend decoding, starting and answering requests
(`charge`), and once a turn has spent `slice_s` (20 ms), `due()` is true and further requests wait for a
later turn (`next_turn`); so do the slices of long conversions (the Kafka listener's records). While
anything waits (`busy()`), a request that arrives is queued behind it rather than started on the spot.
Timers (a delayed FETCH's deadline, a Raft election timeout) and other I/O run between two turns, so the
loop never keeps ready work waiting much longer than one slice plus the one unit of work that crossed it.

A turn starts at the first charge after the loop last went round: that charge schedules `_new_turn`
with `call_soon`, which runs once every callback already queued has run, that is at the start of the
next turn. Waiters are resumed in the order they started waiting, so connections take turns.

One budget per event loop, shared by every listener of the process (`loop_budget()`): the bound holds
for all connections together. Only the process shell (the socket servers and the Kafka listener's
handlers, which the simulator does not run) uses it: it reads the real clock.
"""

from __future__ import annotations

import asyncio
import time
import weakref

DEFAULT_SLICE_S = 0.020


class LoopBudget:
    def __init__(self, loop: asyncio.AbstractEventLoop, slice_s: float = DEFAULT_SLICE_S) -> None:
        self._loop = loop
        self.slice_s = slice_s
        self._spent_s = 0.0
        self._turn_scheduled = False
        self._waiting = 0  # tasks in next_turn
        self.turns_cut = 0  # turns that ran out of budget (a loaded broker's sign)

    def due(self) -> bool:
        """This turn has had its share of request work: what is left waits for `next_turn`."""
        return self._spent_s >= self.slice_s

    def charge(self, seconds: float) -> None:
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self._loop.call_soon(self._new_turn)
        before = self._spent_s
        self._spent_s = before + seconds
        if before < self.slice_s <= self._spent_s:
            self.turns_cut += 1

    def _new_turn(self) -> None:
        self._spent_s = 0.0
        self._turn_scheduled = False

    def busy(self) -> bool:
        """This turn is spent, or work is waiting for a later one: new work queues behind it (a request
        arriving now does not go ahead of those already waiting)."""
        return self._waiting > 0 or self._spent_s >= self.slice_s

    async def next_turn(self) -> None:
        """Wait until the loop has gone round (timers and I/O had their turn) and a turn with budget left
        has begun."""
        self._waiting += 1
        try:
            await asyncio.sleep(0)
            # Nothing could set an event when a turn begins without running every turn: poll once per turn.
            while self.due():  # noqa: ASYNC110 - spent by those resumed before us: the next turn
                await asyncio.sleep(0)
        finally:
            self._waiting -= 1

    async def pause_if_due(self, started_s: float) -> float:
        """For a long piece of work done in slices: charge what it did since `started_s` (a perf_counter
        time), wait for a later turn if this one is spent, and return the time to measure from next."""
        now = time.perf_counter()
        self.charge(now - started_s)
        if self.due():
            await self.next_turn()
            return time.perf_counter()
        return now


_BUDGETS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopBudget] = weakref.WeakKeyDictionary()


def loop_budget() -> LoopBudget:
    """The budget of the running event loop (made on first use)."""
    loop = asyncio.get_running_loop()
    budget = _BUDGETS.get(loop)
    if budget is None:
        budget = _BUDGETS[loop] = LoopBudget(loop)
    return budget
