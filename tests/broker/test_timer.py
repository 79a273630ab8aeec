"""SystemTimer against a manual clock (Kafka's TimerTest, plus a property test), and the asyncio reaper
against the real clock on uvloop."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.timer import SystemTimer, TimerReaper
from broker.timing_wheel import TimerTask
from server_common.time import ManualTime, SystemTime, Time

START_MS = 1_700_000_000_123


class RecordingTask(TimerTask):
    """Records (task_id, clock at run) into a shared list, so order, count and timing can be checked."""

    def __init__(self, delay_ms: int, task_id: int, time: Time, fired: list[tuple[int, float]]) -> None:
        super().__init__(delay_ms)
        self.task_id = task_id
        self._time = time
        self._fired = fired

    def run(self) -> None:
        self._fired.append((self.task_id, self._time.hi_res_milliseconds()))


def run_until_empty(timer: SystemTimer, time: ManualTime, max_ms: int = 10_000) -> None:
    """Step the manual clock one tick at a time, advancing the timer at each step."""
    for _ in range(max_ms):
        if timer.size == 0:
            return
        time.advance(1)
        timer.advance_clock()
    raise AssertionError(f"{timer.size} tasks still pending after {max_ms} ms")


def test_already_expired_tasks_run_at_once_exactly_once() -> None:
    # given a timer with tick 1 ms and wheel size 3
    time = ManualTime(START_MS)
    timer = SystemTimer(time, tick_ms=1, wheel_size=3)
    fired: list[tuple[int, float]] = []

    # when five tasks with negative delays are added
    for i in range(5):
        timer.add(RecordingTask(-5 + i, i, time, fired))

    # then they have run during add, without the clock moving, and never again
    assert [task_id for task_id, _ in fired] == [0, 1, 2, 3, 4]
    assert timer.size == 0
    assert not timer.advance_clock(0)
    time.advance(100)
    timer.advance_clock(0)
    assert len(fired) == 5


def test_tasks_across_overflow_wheels_each_run_exactly_once_in_order_never_early() -> None:
    # given delays 0-4, 10-99 twice and 100-499 on a wheel of size 3 (levels of 1, 3, 9, 27, 81, 243 ms)
    time = ManualTime(START_MS)
    timer = SystemTimer(time, tick_ms=1, wheel_size=3)
    fired: list[tuple[int, float]] = []
    delays = list(range(0, 5)) + list(range(10, 100)) + list(range(10, 100)) + list(range(100, 500))
    for task_id, delay_ms in enumerate(delays):
        timer.add(RecordingTask(delay_ms, task_id, time, fired))

    # when the clock moves one tick at a time
    run_until_empty(timer, time)

    # then every task ran once, exactly at its deadline, so outputs come out sorted by delay
    assert sorted(task_id for task_id, _ in fired) == list(range(len(delays)))
    for task_id, at_ms in fired:
        assert at_ms == START_MS + delays[task_id]
    assert [delays[task_id] for task_id, _ in fired] == sorted(delays)
    assert len(timer.timing_wheel.levels()) >= 5


def test_a_cancelled_task_never_runs_and_leaves_the_timer() -> None:
    time = ManualTime(START_MS)
    timer = SystemTimer(time)
    fired: list[tuple[int, float]] = []
    keep, drop = RecordingTask(30, 1, time, fired), RecordingTask(30, 2, time, fired)
    timer.add(keep)
    timer.add(drop)

    drop.cancel()

    assert timer.size == 1
    run_until_empty(timer, time)
    assert [task_id for task_id, _ in fired] == [1]


def test_readding_a_pending_task_reschedules_it_instead_of_running_it_twice() -> None:
    time = ManualTime(START_MS)
    timer = SystemTimer(time)
    fired: list[tuple[int, float]] = []
    task = RecordingTask(10, 1, time, fired)
    timer.add(task)
    time.advance(5)

    timer.add(task)  # delay counted again from now: due at +15

    assert timer.size == 1
    run_until_empty(timer, time)
    assert fired == [(1, START_MS + 15)]


def test_next_expiration_is_the_earliest_bucket_so_a_reaper_can_sleep_until_then() -> None:
    time = ManualTime(START_MS)
    timer = SystemTimer(time)
    assert timer.next_expiration_ms() is None

    timer.add(RecordingTask(300, 1, time, []))
    timer.add(RecordingTask(7, 2, time, []))

    assert timer.next_expiration_ms() == START_MS + 7


def test_a_task_cancelled_before_the_earliest_staged_one_is_due_never_reaches_the_wheel() -> None:
    # given two tasks waiting in the timer, the earlier due in 5 ms
    time = ManualTime(START_MS)
    timer = SystemTimer(time)
    fired: list[tuple[int, float]] = []
    early, late = RecordingTask(5, 1, time, fired), RecordingTask(300, 2, time, fired)
    timer.add(early)
    timer.add(late)
    assert timer.size == 2 and timer.timing_wheel.task_count() == 0

    # when the later one completes (is cancelled) before the earlier one is due
    time.advance(2)
    late.cancel()
    timer.advance_clock()

    # then no bucket of the wheel ever held it: only the early task went to the wheel when it came due
    assert timer.timing_wheel.task_count() == 0 and timer.size == 1
    time.advance(3)
    timer.advance_clock()
    assert fired == [(1, START_MS + 5)]
    assert timer.size == 0 and timer.next_expiration_ms() is None


def test_tasks_still_pending_when_the_earliest_is_due_move_to_the_wheel_and_fire_on_time() -> None:
    time = ManualTime(START_MS)
    timer = SystemTimer(time)
    fired: list[tuple[int, float]] = []
    for task_id, delay_ms in enumerate((7, 250, 30)):
        timer.add(RecordingTask(delay_ms, task_id, time, fired))

    time.advance(7)
    timer.advance_clock()

    assert fired == [(0, START_MS + 7)]
    assert timer.timing_wheel.task_count() == 2 and timer.size == 2
    assert timer.next_expiration_ms() is not None and timer.next_expiration_ms() <= START_MS + 30
    run_until_empty(timer, time)
    assert fired == [(0, START_MS + 7), (2, START_MS + 30), (1, START_MS + 250)]


def test_a_task_added_between_two_milliseconds_is_due_at_the_next_whole_one_never_before() -> None:
    # given a clock 0.3 ms past a whole millisecond
    time = ManualTime(START_MS)
    time.advance(0.3)
    timer = SystemTimer(time)
    fired: list[tuple[int, float]] = []

    timer.add(RecordingTask(10, 1, time, fired))

    # then the reaper is told to wake at +11 (the deadline +10.3 rounded up), and it runs then, not at +10
    assert timer.next_expiration_ms() == START_MS + 11
    time.advance(9.7)
    timer.advance_clock()
    assert fired == []
    time.advance(1)
    timer.advance_clock()
    assert fired == [(1, START_MS + 11)]


def test_a_failing_task_does_not_stop_the_others_due_in_the_same_bucket(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Boom(TimerTask):
        def run(self) -> None:
            raise RuntimeError("boom")

    time = ManualTime(START_MS)
    timer = SystemTimer(time)
    fired: list[tuple[int, float]] = []
    timer.add(Boom(5))
    timer.add(RecordingTask(5, 2, time, fired))

    with caplog.at_level(logging.ERROR):
        time.advance(5)
        timer.advance_clock()

    assert [task_id for task_id, _ in fired] == [2]
    assert "boom" in caplog.text


def test_close_drops_pending_tasks_without_running_them() -> None:
    time = ManualTime(START_MS)
    timer = SystemTimer(time)
    fired: list[tuple[int, float]] = []
    timer.add(RecordingTask(5, 1, time, fired))

    timer.close()
    time.advance(10)
    timer.advance_clock()

    assert fired == [] and timer.size == 0 and timer.next_expiration_ms() is None
    with pytest.raises(RuntimeError):
        timer.add(RecordingTask(5, 2, time, fired))


# One scheduled action: at `at_ms` add task `task_id` with `delay_ms`, or cancel it.
operation = st.tuples(
    st.integers(min_value=-5, max_value=3000),  # delay_ms
    st.integers(min_value=0, max_value=40),  # gap before the add, ms
    st.one_of(st.none(), st.integers(min_value=0, max_value=3500)),  # cancel this long after adding
)


@settings(max_examples=100, deadline=None)
@given(
    operations=st.lists(operation, min_size=1, max_size=300),
    wheel_size=st.integers(min_value=2, max_value=20),
)
def test_random_delays_and_cancels_fire_exactly_once_never_early_at_most_one_tick_late(
    operations: list[tuple[int, int, int | None]], wheel_size: int
) -> None:
    check_schedule(operations, wheel_size)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32), wheel_size=st.integers(min_value=2, max_value=20))
def test_thousands_of_random_delays_and_cancels_fire_exactly_once_never_early(seed: int, wheel_size: int) -> None:
    rng = random.Random(seed)
    operations = [
        (rng.randint(-5, 3000), rng.randint(0, 3), rng.randint(0, 3500) if rng.random() < 0.5 else None)
        for _ in range(rng.randint(2000, 5000))
    ]
    check_schedule(operations, wheel_size)


def check_schedule(operations: list[tuple[int, int, int | None]], wheel_size: int) -> None:
    # given a manual clock driven the way the reaper drives the real one: jump to the next event or bucket
    time = ManualTime(START_MS)
    timer = SystemTimer(time, tick_ms=1, wheel_size=wheel_size)
    fired: list[tuple[int, float]] = []
    events: list[tuple[int, int, int]] = []  # (at_ms, kind 0=add 1=cancel, task_id)
    at_ms = START_MS
    for task_id, (_, gap_ms, cancel_after_ms) in enumerate(operations):
        at_ms += gap_ms
        events.append((at_ms, 0, task_id))
        if cancel_after_ms is not None:
            events.append((at_ms + cancel_after_ms, 1, task_id))
    events.sort()
    tasks: dict[int, RecordingTask] = {}
    added_at: dict[int, int] = {}
    cancelled_at: dict[int, int] = {}

    # when every add and cancel happens at its time, the timer advancing first at each instant
    i = 0
    while i < len(events) or timer.size:
        candidates = [events[i][0]] if i < len(events) else []
        next_bucket_ms = timer.next_expiration_ms()
        if next_bucket_ms is not None:
            candidates.append(next_bucket_ms)
        target_ms = max(min(candidates), time.milliseconds())
        time.advance(target_ms - time.milliseconds())
        timer.advance_clock()
        while i < len(events) and events[i][0] <= time.milliseconds():
            _, kind, task_id = events[i]
            if kind == 0:
                tasks[task_id] = RecordingTask(operations[task_id][0], task_id, time, fired)
                added_at[task_id] = time.milliseconds()
                timer.add(tasks[task_id])
            else:
                tasks[task_id].cancel()
                cancelled_at[task_id] = time.milliseconds()
            i += 1

    # then each task not cancelled before its deadline fired once, never early, at most one tick late
    fire_times = dict(fired)
    assert len(fire_times) == len(fired), "a task fired twice"
    for task_id, (delay_ms, _, _) in enumerate(operations):
        deadline_ms = added_at[task_id] + max(delay_ms, 0)
        cancelled_before_deadline = task_id in cancelled_at and cancelled_at[task_id] < deadline_ms
        if cancelled_before_deadline:
            assert task_id not in fire_times
        else:
            assert task_id in fire_times, f"task {task_id} (delay {delay_ms}) never fired"
            assert deadline_ms <= fire_times[task_id] <= deadline_ms + 1
    assert timer.size == 0


def test_reaper_fires_a_task_on_time_on_uvloop_and_stops_cleanly() -> None:
    async def scenario() -> tuple[float, float, bool, bool]:
        time = SystemTime()
        timer = SystemTimer(time)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[float] = loop.create_future()

        class FiresFuture(TimerTask):
            def run(self) -> None:
                done.set_result(time.hi_res_milliseconds())

        reaper = TimerReaper(timer, time)
        async with reaper:
            # the reaper is idle (nothing queued: it sleeps up to 200 ms) when the task arrives
            await asyncio.sleep(0.01)
            added_ms = time.hi_res_milliseconds()
            timer.add(FiresFuture(50))
            fired_ms = await asyncio.wait_for(done, timeout=5)
            running_inside = reaper.running
        return added_ms, fired_ms, running_inside, reaper.running

    added_ms, fired_ms, running_inside, running_after = uvloop.run(scenario())

    late_ms = fired_ms - added_ms - 50
    # Never early. The upper bound is not a latency target (bench.purgatory measures that): it is below
    # the reaper's idle sleep (200 ms), so it fails if the new task did not wake the sleeping reaper,
    # and leaves room for a loaded machine's scheduling delays.
    assert 0 <= late_ms <= 100, f"fired {late_ms:.2f} ms after its deadline"
    assert running_inside and not running_after


def test_reaper_sleeps_until_each_bucket_is_due_instead_of_spinning_on_uvloop() -> None:
    # uvloop's timers count whole milliseconds: a wait under 1 ms fires at once. A reaper asking for one
    # woke ~26 times per expiry, spinning until the bucket came due.
    expiries = 200

    async def scenario() -> tuple[int, int]:
        time = SystemTime()
        timer = SystemTimer(time)
        wakes = 0

        def on_advance() -> None:
            nonlocal wakes
            wakes += 1

        done = asyncio.Event()
        fired = 0

        class Counts(TimerTask):
            def run(self) -> None:
                nonlocal fired
                fired += 1
                if fired == expiries:
                    done.set()

        async with TimerReaper(timer, time, on_advance=on_advance):
            for i in range(expiries):  # one task due every millisecond
                timer.add(Counts(i + 1))
            await asyncio.wait_for(done.wait(), timeout=10)
        return fired, wakes

    fired, wakes = uvloop.run(scenario())

    assert fired == expiries
    assert wakes <= 3 * expiries, f"{wakes} wake-ups for {expiries} expiries"


def test_reaper_runs_the_purge_hook_and_can_be_stopped_while_idle() -> None:
    async def scenario() -> int:
        time = SystemTime()
        timer = SystemTimer(time)
        calls = 0
        hook_ran = asyncio.Event()

        def on_advance() -> None:
            nonlocal calls
            calls += 1
            hook_ran.set()

        reaper = TimerReaper(timer, time, on_advance=on_advance)
        await reaper.start()
        await asyncio.wait_for(hook_ran.wait(), timeout=5)
        await reaper.stop()
        await reaper.stop()  # idempotent
        return calls

    assert uvloop.run(scenario()) >= 1


def test_a_failing_purge_hook_is_logged_and_the_reaper_keeps_expiring_tasks(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> bool:
        time = SystemTime()
        timer = SystemTimer(time)
        fired = asyncio.Event()

        def on_advance() -> None:
            raise RuntimeError("purge failed")

        class Fires(TimerTask):
            def run(self) -> None:
                fired.set()

        async with TimerReaper(timer, time, on_advance=on_advance) as reaper:
            await asyncio.sleep(0.005)  # the first wake-up has failed by now
            timer.add(Fires(20))
            await asyncio.wait_for(fired.wait(), timeout=5)
            return reaper.running

    with caplog.at_level(logging.ERROR, logger="broker.timer"):
        assert uvloop.run(scenario())
    failures = [r for r in caplog.records if "advancing the timer failed" in r.getMessage()]
    assert failures and all(r.exc_info and "purge failed" in str(r.exc_info[1]) for r in failures)
