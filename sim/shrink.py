"""Shrinking a failing run: drop faults from its schedule while the same check still fails.

Greedy delta debugging: try dropping halves, then quarters, ... then single faults, keeping every drop
after which the run still ends in a violation of the same check. Each try is a full replay of the seed
with the smaller schedule (the workload draws from its own random stream, so it stays the same).
"""

from __future__ import annotations

from collections.abc import Callable

from sim.cluster import SimOptions
from sim.faults import Fault
from sim.runner import RunResult, run_seed


def shrink(
    seed: int,
    options: SimOptions,
    failing: RunResult,
    progress: Callable[[str], None] = lambda _line: None,
    max_runs: int = 200,
) -> tuple[list[Fault], RunResult, int]:
    """The smallest schedule found that still fails the same check, its run, and how many runs it took."""
    assert failing.violation is not None
    check = failing.violation.check
    schedule = list(failing.schedule)
    best = failing
    runs = 0
    chunk = max(1, len(schedule) // 2)
    while chunk >= 1 and schedule and runs < max_runs:
        i = 0
        removed_any = False
        while i < len(schedule) and runs < max_runs:
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
    return schedule, best, runs
