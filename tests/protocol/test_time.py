"""ManualTime: sleepers share one clock."""

from __future__ import annotations

import asyncio

from server_common.time import ManualTime


async def test_two_sleepers_of_one_second_move_the_clock_one_second() -> None:
    time = ManualTime(start_ms=0)
    await asyncio.gather(time.sleep(1.0), time.sleep(1.0))
    assert time.milliseconds() == 1000
    await time.sleep(0.5)
    assert time.milliseconds() == 1500


async def test_a_sleep_never_moves_the_clock_back() -> None:
    time = ManualTime(start_ms=0)
    sleeper = asyncio.ensure_future(time.sleep(1.0))
    await asyncio.sleep(0)  # the sleeper has taken its deadline (+1 s)
    time.advance(5000)
    await sleeper
    assert time.milliseconds() == 5000
