"""server_common.poll on a manual clock: deadlines are the clock's, not the wall's."""

from __future__ import annotations

from server_common.poll import RetryPolicy, retry, wait_until
from server_common.time import ManualTime


async def test_true_at_once_does_not_sleep() -> None:
    clock = ManualTime()
    start = clock.hi_res_milliseconds()
    assert await wait_until(lambda: True, 10.0, clock=clock)
    assert clock.hi_res_milliseconds() == start


async def test_times_out_on_the_given_clock() -> None:
    clock = ManualTime()
    start = clock.hi_res_milliseconds()
    assert not await wait_until(lambda: False, 1.0, clock=clock, interval_s=0.25)
    assert clock.hi_res_milliseconds() - start == 1000.0


async def test_async_condition_and_a_last_look_at_the_deadline() -> None:
    clock = ManualTime()
    start = clock.hi_res_milliseconds()

    async def after_one_second() -> bool:
        return clock.hi_res_milliseconds() - start >= 1000.0

    assert await wait_until(after_one_second, 1.0, clock=clock, interval_s=0.5)


def test_policy_delays() -> None:
    assert [RetryPolicy(4, 0.05).delay_s(n) for n in range(3)] == [0.05, 0.05, 0.05]
    linear = RetryPolicy(40, 0.05, 0.5, "linear")
    assert [round(linear.delay_s(n), 2) for n in (0, 1, 9, 20)] == [0.05, 0.1, 0.5, 0.5]
    exponential = RetryPolicy(10, 0.05, 1.0, "exponential")
    assert [exponential.delay_s(n) for n in (0, 1, 2, 5)] == [0.05, 0.1, 0.2, 1.0]


async def test_retry_until_an_answer_or_out_of_attempts() -> None:
    clock = ManualTime()
    calls: list[int] = []

    async def third_time() -> str | None:
        calls.append(1)
        return "ok" if len(calls) == 3 else None

    assert await retry(third_time, RetryPolicy(5, 0.1), clock=clock) == "ok"
    calls.clear()

    async def never() -> str | None:
        calls.append(1)
        return None

    start = clock.hi_res_milliseconds()
    assert await retry(never, RetryPolicy(3, 0.1), clock=clock) is None
    assert len(calls) == 3
    assert round(clock.hi_res_milliseconds() - start) == 200  # no wait after the last try
