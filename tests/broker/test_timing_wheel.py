"""Buckets and wheels on their own: Kafka's TimerTaskListTest plus the wheel's placement and cascade rules."""

from __future__ import annotations

from broker.timing_wheel import TimerTask, TimerTaskList, TimingWheel


class CountingTask(TimerTask):
    def __init__(self, delay_ms: int, task_id: int = 0) -> None:
        super().__init__(delay_ms)
        self.task_id = task_id
        self.runs = 0

    def run(self) -> None:
        self.runs += 1


def due_at(task: TimerTask, expiration_ms: int) -> TimerTask:
    """`task` with the expiration a timer would have given it (what the wheel places it by)."""
    task.expiration_ms = expiration_ms
    return task


class RecordingQueue:
    def __init__(self) -> None:
        self.offered: list[tuple[int, TimerTaskList]] = []

    def offer(self, bucket: TimerTaskList) -> None:
        self.offered.append((bucket.expiration_ms, bucket))


def test_readding_a_task_moves_it_so_it_sits_in_exactly_one_list() -> None:
    # given ten tasks in list1
    list1, list2, list3 = TimerTaskList(), TimerTaskList(), TimerTaskList()
    tasks = [CountingTask(10, i) for i in range(10)]
    for task in tasks:
        list1.add(due_at(task, 10))
    assert list1.tasks() == tasks

    # when four of them are added to list2
    for task in tasks[:4]:
        list2.add(due_at(task, 10))

    # then they left list1
    assert len(list1) + len(list2) == 10
    assert list1.tasks() == tasks[4:]
    assert list2.tasks() == tasks[:4]

    # when the other six are added to list3
    for task in tasks[4:]:
        list3.add(due_at(task, 10))

    # then list1 is empty, each task sits in exactly one list
    assert len(list1) == 0 and len(list2) + len(list3) == 10
    assert list3.tasks() == tasks[4:]


def test_cancelled_tasks_disappear_from_their_bucket() -> None:
    bucket = TimerTaskList()
    tasks = [CountingTask(10, i) for i in range(10)]
    for task in tasks:
        bucket.add(due_at(task, 10))

    for task in tasks[::2]:
        task.cancel()

    assert bucket.tasks() == tasks[1::2]
    assert len(bucket) == 5
    assert not any(task.scheduled for task in tasks[::2]) and all(task.scheduled for task in tasks[1::2])


def test_cancelling_twice_or_cancelling_an_unscheduled_task_changes_nothing() -> None:
    bucket = TimerTaskList()
    scheduled, never_added = CountingTask(5), CountingTask(5)
    bucket.add(due_at(scheduled, 5))

    scheduled.cancel()
    scheduled.cancel()
    never_added.cancel()

    assert len(bucket) == 0 and not scheduled.scheduled


def test_adding_a_task_to_another_bucket_takes_it_out_of_the_first() -> None:
    old_bucket, new_bucket = TimerTaskList(), TimerTaskList()
    task = CountingTask(5)
    old_bucket.add(due_at(task, 5))

    new_bucket.add(due_at(task, 7))

    assert task.bucket is new_bucket
    assert len(old_bucket) == 0 and new_bucket.tasks() == [task]


def test_flush_hands_over_every_task_in_order_and_unschedules_the_bucket() -> None:
    bucket = TimerTaskList()
    tasks = [CountingTask(3, i) for i in range(5)]
    for task in tasks:
        bucket.add(due_at(task, 3))
    assert bucket.set_expiration(3)
    assert not bucket.set_expiration(3), "same expiration: no need to queue the bucket again"

    flushed: list[TimerTask] = []
    bucket.flush(flushed.append)

    assert flushed == tasks
    assert not any(task.scheduled for task in flushed)
    assert bucket.get_expiration() == -1
    assert len(bucket) == 0


def test_a_task_due_within_one_tick_is_rejected_as_expired() -> None:
    wheel = TimingWheel(tick_ms=1, wheel_size=20, start_ms=1000, queue=RecordingQueue())

    assert not wheel.add(due_at(CountingTask(0), 1000))
    assert not wheel.add(due_at(CountingTask(-5), 995))
    assert wheel.add(due_at(CountingTask(1), 1001))


def test_far_tasks_go_to_lazily_created_overflow_wheels_with_coarser_ticks() -> None:
    # given a 1 ms x 20 wheel at t=0
    queue = RecordingQueue()
    wheel = TimingWheel(1, 20, 0, queue)
    assert wheel.overflow_wheel is None

    # when tasks due at 7, 437 and 9000 are added
    for expiration_ms in (7, 437, 9000):
        assert wheel.add(due_at(CountingTask(expiration_ms), expiration_ms))

    # then they sit on levels 0, 2 and 3, in buckets expiring at the start of their slot
    levels = wheel.levels()
    assert [level.tick_ms for level in levels] == [1, 20, 400, 8000]
    assert [exp for exp, _ in queue.offered] == [7, 400, 8000]
    assert levels[0].buckets[7].expiration_ms == 7
    assert levels[2].buckets[1].expiration_ms == 400
    assert levels[3].buckets[1].expiration_ms == 8000
    assert wheel.task_count() == 3


def test_flushing_a_coarse_bucket_cascades_its_tasks_into_finer_buckets() -> None:
    # given a task due at 437 parked in the level-2 bucket that expires at 400
    queue = RecordingQueue()
    wheel = TimingWheel(1, 20, 0, queue)
    task = CountingTask(437)
    wheel.add(due_at(task, 437))
    _, level2_bucket = queue.offered[-1]

    # when the clock reaches 400 and that bucket is flushed back into the wheel
    wheel.advance_clock(400)
    level2_bucket.flush(wheel.add)

    # then it lands on level 1 (bucket 420); at 420 it drops to level 0 (bucket 437); at 437 it is expired
    exp, level1_bucket = queue.offered[-1]
    assert exp == 420 and level1_bucket.tasks() == [task]
    wheel.advance_clock(420)
    level1_bucket.flush(wheel.add)
    exp, level0_bucket = queue.offered[-1]
    assert exp == 437 and level0_bucket.tasks() == [task]
    wheel.advance_clock(437)
    expired: list[TimerTask] = []
    level0_bucket.flush(lambda t: None if wheel.add(t) else expired.append(t))
    assert expired == [task]


def test_advancing_the_clock_rounds_down_to_a_tick_and_carries_the_overflow_wheels() -> None:
    wheel = TimingWheel(1, 20, 0, RecordingQueue())
    wheel.add(due_at(CountingTask(500), 500))  # creates levels 1 and 2

    wheel.advance_clock(433)

    assert [level.current_time_ms for level in wheel.levels()] == [433, 420, 400]
