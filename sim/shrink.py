"""Shrinking a failing run: drop faults from its schedule while the same check still fails.

Greedy delta debugging: try dropping halves, then quarters, ... then single faults, keeping every drop
after which the run still ends in a violation of the same check. Each try is a full replay of the seed
with the smaller schedule (the workload draws from its own random stream, so it stays the same).

A shrink has a budget of wall seconds and of runs: a run that fails late (a liveness check fails 20 or 30
virtual seconds into the settle) takes seconds to replay, and a long schedule takes many. When either is
spent before the last single fault was tried, the shrink stops with the smallest failing schedule found so
far, which replays the failure as well as the one it started from, and says it stopped short.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sim.cluster import SimOptions
from sim.faults import Fault
from sim.runner import RunResult, run_seed

DEFAULT_BUDGET_S = 60.0


@dataclass
class Shrunk:
    schedule: list[Fault]  # the smallest schedule found that still fails the same check
    run: RunResult  # its run
    runs: int  # replays made
    finished: bool  # False: the budget ran out first, and `schedule` is the best so far


def shrink(
    seed: int,
    options: SimOptions,
    failing: RunResult,
    progress: Callable[[str], None] = lambda _line: None,
    max_runs: int = 200,
    budget_s: float = DEFAULT_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
) -> Shrunk:
    """Shrink `failing`'s schedule within `max_runs` replays and `budget_s` wall seconds (checked before each
    replay, so the last one may end past it)."""
    assert failing.violation is not None
    check = failing.violation.check
    deadline = clock() + budget_s
    schedule = list(failing.schedule)
    best = failing
    runs = 0

    def spent() -> bool:
        return runs >= max_runs or clock() >= deadline

    chunk = max(1, len(schedule) // 2)
    while chunk >= 1 and schedule and not spent():
        i = 0
        removed_any = False
        while i < len(schedule) and not spent():
            candidate = schedule[:i] + schedule[i + chunk :]
            runs += 1
            result = run_seed(seed, options, candidate)
            if result.violation is not None and result.violation.check == check:
                progress(f"shrink: {len(schedule)} -> {len(candidate)} faults, still {check}")
                schedule, best, removed_any = candidate, result, True
            else:
                i += chunk
        if not removed_any:
            chunk //= 2
    finished = not schedule or chunk < 1
    return Shrunk(schedule, best, runs, finished)
