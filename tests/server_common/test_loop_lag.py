"""The event-loop lag probe on a real loop: a callback that holds the loop shows as one long wait, an idle
loop as waits of a few ms, and each take() starts a new interval."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from server_common.loop_lag import LoopLagMonitor

pytestmark = pytest.mark.timeout(30)


async def probes(monitor: LoopLagMonitor, n: int) -> None:
    """Wait until at least n probes ran since the last take()."""
    while monitor._probes < n:  # noqa: ASYNC110 - the probe is the loop's own timer; nothing to signal
        await asyncio.sleep(monitor.interval_s / 2)


def hold_the_loop(seconds: float) -> None:
    """What a huge request decoded in one go does to every other task on the loop."""
    time.sleep(seconds)


async def test_a_callback_that_holds_the_loop_is_one_long_wait(caplog: pytest.LogCaptureFixture) -> None:
    monitor = LoopLagMonitor(interval_s=0.01, warn_ms=200)
    monitor.start()
    try:
        await probes(monitor, 5)
        idle = monitor.take()
        assert idle.probes >= 5
        assert idle.max_ms < 150  # two shared cores: generous, far below the stall below

        with caplog.at_level(logging.WARNING, logger="server_common.loop_lag"):
            hold_the_loop(0.4)
            await probes(monitor, 3)
        held = monitor.take()
        assert 350 <= held.max_ms < 2000
        assert held.avg_ms < held.max_ms  # the probes after the stall waited little
        assert any("kept ready work waiting" in r.getMessage() for r in caplog.records)

        after = monitor.take()
        assert after.probes == 0 and after.max_ms == 0.0  # the stall counted once, in its interval
    finally:
        monitor.stop()


async def test_stop_cancels_the_probe() -> None:
    monitor = LoopLagMonitor(interval_s=0.01)
    monitor.start()
    await probes(monitor, 1)
    monitor.stop()
    monitor.take()
    await asyncio.sleep(0.05)
    assert monitor.take().probes == 0
