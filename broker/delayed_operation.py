"""DelayedOperation: a request that waits until it can be completed or its delay runs out (Kafka P1).

How this works
--------------
A subclass says when it can complete (`try_complete`, which calls `force_complete` itself when its
condition holds), what completing means (`on_complete`, e.g. build and send the response) and what else
to do on timeout (`on_expiration`, e.g. count it). The purgatory calls `try_complete` whenever something
the operation watches changes; the timer calls `run` when `delay_ms` has passed.

Both paths go through `force_complete`, which lets exactly one of them win: the first call flips
`is_completed`, takes the operation out of the timer and calls `on_complete`; every later call (the
timer firing after data arrived, a second `try_complete`, a re-entrant call from inside `on_complete`)
returns False and does nothing. Kafka needs an AtomicBoolean and a lock for this; everything here runs on
the event loop thread, so a plain flag set *before* `on_complete` runs is enough.
"""

from __future__ import annotations

from abc import abstractmethod

from broker.timing_wheel import TimerTask


class DelayedOperation(TimerTask):
    """Invariants: `on_complete` runs at most once, and only after `is_completed` became True; once
    completed the operation is no longer in the timer; `on_expiration` runs only after `on_complete`, and
    only when the timer's `run` was the path that completed it.
    """

    __slots__ = ("_completed",)

    def __init__(self, delay_ms: int) -> None:
        # TimerTask.__init__, inlined: one operation is built per delayed request.
        self.delay_ms = delay_ms
        self.bucket = None
        self.expiration_ms = -1
        self._completed = False

    def force_complete(self) -> bool:
        """Complete now: True for the one call that completed the operation, False for every other."""
        if self._completed:
            return False
        # Set before on_complete so a re-entrant completion attempt from on_complete is refused.
        self._completed = True
        self.cancel()
        self.on_complete()
        return True

    def abandon(self) -> bool:
        """Nobody waits for the answer any more (the client's connection closed): leave the timer now and
        count as completed, so the purgatory's watch lists drop it at their next purge, without computing
        a response. True if this call ended the operation."""
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        return True

    @property
    def is_completed(self) -> bool:
        return self._completed

    @abstractmethod
    def try_complete(self) -> bool:
        """Check the completion condition; if it holds, call `force_complete()` and return its result."""

    @abstractmethod
    def on_complete(self) -> None:
        """What completing means (send the response). Called exactly once."""

    @abstractmethod
    def on_expiration(self) -> None:
        """Extra work when the operation completed because its delay ran out (after `on_complete`)."""

    def run(self) -> None:
        """The timeout path, called by the timer."""
        if self.force_complete():
            self.on_expiration()
