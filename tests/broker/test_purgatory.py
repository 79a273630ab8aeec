"""DelayedOperation and DelayedOperationPurgatory: the scenarios of Kafka's DelayedOperationTest."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.delayed_operation import DelayedOperation
from broker.purgatory import DelayedOperationPurgatory
from broker.timer import SystemTimer, TimerReaper
from server_common.time import ManualTime, SystemTime


class MockDelayedOperation(DelayedOperation):
    """Completes once `completable` is set; counts how often each callback ran."""

    def __init__(self, delay_ms: int, on_complete_hook: Callable[[MockDelayedOperation], None] | None = None):
        super().__init__(delay_ms)
        self.completable = False
        self.completions = 0
        self.expirations = 0
        self._on_complete_hook = on_complete_hook

    def try_complete(self) -> bool:
        return self.force_complete() if self.completable else False

    def on_complete(self) -> None:
        self.completions += 1
        if self._on_complete_hook is not None:
            self._on_complete_hook(self)

    def on_expiration(self) -> None:
        self.expirations += 1


def count_sweeps(purgatory: DelayedOperationPurgatory[MockDelayedOperation]) -> list[int]:
    """Each full sweep of the watch lists appends how many entries it dropped (a sweep may drop none)."""
    sweeps: list[int] = []
    sweep = purgatory.purge_completed

    def counted() -> int:
        sweeps.append(sweep())
        return sweeps[-1]

    purgatory.purge_completed = counted  # type: ignore[method-assign]
    return sweeps


def make_purgatory(
    time: ManualTime | None = None, purge_interval: int = 1000
) -> tuple[DelayedOperationPurgatory[MockDelayedOperation], ManualTime]:
    time = time or ManualTime()
    return DelayedOperationPurgatory("mock", SystemTimer(time), purge_interval=purge_interval), time


def test_check_and_complete_reports_nothing_until_an_operation_becomes_completable() -> None:
    # given r1 watching test1 and r2 watching test2
    purgatory, _ = make_purgatory()
    r1, r2 = MockDelayedOperation(100_000), MockDelayedOperation(100_000)
    assert not purgatory.try_complete_else_watch(r1, ["test1"])
    assert not purgatory.try_complete_else_watch(r2, ["test2"])

    # when nothing changed, then checking completes nothing
    assert purgatory.check_and_complete("test1") == 0
    assert purgatory.check_and_complete("test2") == 0

    # when r1 becomes completable, then checking its key completes it, once
    r1.completable = True
    assert purgatory.check_and_complete("test1") == 1
    assert purgatory.check_and_complete("test1") == 0
    r2.completable = True
    assert purgatory.check_and_complete("test2") == 1
    assert purgatory.check_and_complete("test2") == 0
    assert (r1.completions, r2.completions) == (1, 1)
    assert (r1.expirations, r2.expirations) == (0, 0)


def test_an_operation_expires_no_earlier_than_its_delay_and_others_stay_pending() -> None:
    # given r1 with 20 ms and r2 with 200 s
    purgatory, time = make_purgatory()
    r1, r2 = MockDelayedOperation(20), MockDelayedOperation(200_000)
    purgatory.try_complete_else_watch(r1, ["test1"])
    purgatory.try_complete_else_watch(r2, ["test1", "test2"])

    # when 19 ms pass, r1 has not expired
    time.advance(19)
    purgatory.timer.advance_clock()
    assert not r1.is_completed

    # when the 20th ms passes, r1 completed by expiration (on_complete then on_expiration), r2 waits on
    time.advance(1)
    purgatory.timer.advance_clock()
    assert r1.is_completed and (r1.completions, r1.expirations) == (1, 1)
    assert not r2.is_completed
    assert purgatory.num_delayed == 1


def test_completed_operations_leave_the_timer_at_once_and_the_watch_lists_when_their_key_is_checked() -> None:
    # given r1 {test1}, r2 {test1, test2}, r3 {test1, test2, test3}
    purgatory, _ = make_purgatory()
    r1, r2, r3 = (MockDelayedOperation(100_000) for _ in range(3))
    purgatory.try_complete_else_watch(r1, ["test1"])
    purgatory.try_complete_else_watch(r2, ["test1", "test2"])
    purgatory.try_complete_else_watch(r3, ["test1", "test2", "test3"])
    assert purgatory.num_delayed == 3
    assert purgatory.watched == 6

    # when r2 and r3 complete on their own, they leave the timer immediately
    r2.completable = True
    r2.try_complete()
    assert purgatory.num_delayed == 2
    r3.completable = True
    r3.try_complete()
    assert purgatory.num_delayed == 1

    # but they stay watched until each key is checked: 6 -> 4 -> 2 -> 1
    assert purgatory.watched == 6
    purgatory.check_and_complete("test1")
    assert purgatory.watched == 4
    purgatory.check_and_complete("test2")
    assert purgatory.watched == 2
    purgatory.check_and_complete("test3")
    assert purgatory.watched == 1
    assert purgatory.watch_keys() == ["test1"], "emptied watch lists are removed"


def test_cancel_for_key_returns_the_cancelled_operations_and_takes_them_out_of_the_timer() -> None:
    purgatory, _ = make_purgatory()
    key, key2 = ("t", 0), ("t", 1)
    op1, op2, op3 = (MockDelayedOperation(100_000) for _ in range(3))
    purgatory.try_complete_else_watch(op1, [key])
    purgatory.try_complete_else_watch(op2, [key])
    purgatory.try_complete_else_watch(op3, [key2])

    cancelled = purgatory.cancel_for_key(key)

    assert cancelled == [op1, op2]
    assert purgatory.num_delayed == 1
    assert purgatory.watched == 1
    assert all(op.completions == 0 for op in cancelled), "cancelling is not completing"


def test_cancel_for_an_unknown_key_returns_nothing() -> None:
    purgatory, _ = make_purgatory()
    purgatory.try_complete_else_watch(MockDelayedOperation(100_000), ["known"])

    assert purgatory.cancel_for_key("unknown") == []
    assert purgatory.num_delayed == 1


def test_a_completable_operation_is_completed_instead_of_watched() -> None:
    purgatory, _ = make_purgatory()
    op = MockDelayedOperation(100_000)
    op.completable = True

    assert purgatory.try_complete_else_watch(op, ["a", "b"])

    assert op.completions == 1
    assert purgatory.watched == 0 and purgatory.num_delayed == 0


def test_an_operation_that_cannot_complete_is_watched_on_every_key_and_timed() -> None:
    purgatory, _ = make_purgatory()
    op = MockDelayedOperation(100_000)

    assert not purgatory.try_complete_else_watch(op, ["a", "b", "c"])

    assert op.completions == 0
    assert purgatory.watched == 3 and purgatory.num_delayed == 1
    assert sorted(purgatory.watch_keys()) == ["a", "b", "c"]


def test_force_complete_runs_on_complete_exactly_once_even_when_called_again_from_on_complete() -> None:
    # given an operation whose on_complete tries to complete it again, directly and through the purgatory
    purgatory, time = make_purgatory()
    reentrant_results: list[object] = []

    def complete_again(op: MockDelayedOperation) -> None:
        reentrant_results.append(op.force_complete())
        reentrant_results.append(purgatory.check_and_complete("k"))

    op = MockDelayedOperation(50, on_complete_hook=complete_again)
    purgatory.try_complete_else_watch(op, ["k"])

    # when data arrives, and later the timer would have fired
    op.completable = True
    assert purgatory.check_and_complete("k") == 1
    time.advance(100)
    purgatory.timer.advance_clock()

    # then on_complete ran once, the re-entrant attempts were refused, and it never expired
    assert op.completions == 1 and op.expirations == 0
    assert reentrant_results == [False, 0]
    assert not op.force_complete()
    assert purgatory.num_delayed == 0 and purgatory.watched == 0


def test_an_operation_watched_from_on_complete_on_the_key_being_checked_stays_watched() -> None:
    purgatory, _ = make_purgatory()
    follow_up = MockDelayedOperation(100_000)

    def watch_follow_up(_: MockDelayedOperation) -> None:
        purgatory.try_complete_else_watch(follow_up, ["k"])

    first = MockDelayedOperation(100_000, on_complete_hook=watch_follow_up)
    purgatory.try_complete_else_watch(first, ["k"])
    first.completable = True

    assert purgatory.check_and_complete("k") == 1

    assert purgatory.watched == 1 and purgatory.num_delayed == 1
    follow_up.completable = True
    assert purgatory.check_and_complete("k") == 1


def test_expired_operations_are_purged_from_watch_lists_once_enough_pile_up() -> None:
    # given a purge interval of 10 and 30 operations on 30 keys that will all expire, plus one pending
    purgatory, time = make_purgatory(purge_interval=10)
    expiring = [MockDelayedOperation(5) for _ in range(30)]
    for i, op in enumerate(expiring):
        purgatory.try_complete_else_watch(op, [("t", i)])
    pending = MockDelayedOperation(100_000)
    purgatory.try_complete_else_watch(pending, [("t", 0)])

    # when they expire, they are still watched (nothing checked their keys)
    time.advance(5)
    purgatory.timer.advance_clock()
    assert all(op.expirations == 1 for op in expiring)
    assert purgatory.num_delayed == 1 and purgatory.watched == 31

    # then the purge drops them and the emptied watch lists
    assert purgatory.maybe_purge() == 30
    assert purgatory.watched == 1
    assert purgatory.watch_keys() == [("t", 0)]
    assert purgatory.maybe_purge() == 0, "only the pending operation is left"


def test_operations_completed_through_their_key_leave_nothing_behind_and_set_off_no_purge() -> None:
    # given a purge interval of 10 and 100 operations, each completed through the key it watches
    purgatory, _ = make_purgatory(purge_interval=10)
    sweeps = count_sweeps(purgatory)
    for i in range(100):
        op = MockDelayedOperation(100_000)
        purgatory.try_complete_else_watch(op, [("t", i % 3)])
        op.completable = True
        assert purgatory.check_and_complete(("t", i % 3)) == 1
        purgatory.maybe_purge()  # what the reaper does after each advance

    # then nothing is left, and no sweep ran: Kafka's estimate (operations watched since the last purge)
    # would have swept every list after every eleventh operation, to find nothing
    assert purgatory.watched == 0
    assert sweeps == []


def test_pending_operations_on_several_keys_do_not_set_off_a_sweep_at_every_wake_up() -> None:
    # given 20 pending operations, each watched on 5 keys (100 entries, 80 beyond one per operation)
    purgatory, time = make_purgatory(purge_interval=10)
    sweeps = count_sweeps(purgatory)
    pending = [MockDelayedOperation(100_000) for _ in range(20)]
    for op in pending:
        purgatory.try_complete_else_watch(op, [("t", k) for k in range(5)])
    # and 11 operations on one key that expire
    for i in range(11):
        purgatory.try_complete_else_watch(MockDelayedOperation(5), [("x", i)])
    time.advance(5)
    purgatory.timer.advance_clock()

    # when the reaper asks, then the expired ones are dropped, once
    assert purgatory.maybe_purge() == 11
    assert purgatory.maybe_purge() == 0
    assert sweeps == [11], "the pending operations' extra entries are not waste: no second sweep"
    assert purgatory.watched == 100

    # and once those operations complete through one key each, their entries on the other four are
    # stale: 80, counted against the interval plus what the pending ones held beyond one entry (80)
    for op in pending:
        op.completable = True
    assert purgatory.check_and_complete(("t", 0)) == 20
    assert purgatory.watched == 80 and purgatory.num_delayed == 0
    assert purgatory.maybe_purge() == 0 and sweeps == [11]
    for i in range(11):
        purgatory.try_complete_else_watch(MockDelayedOperation(5), [("y", i)])
    time.advance(5)
    purgatory.timer.advance_clock()
    assert purgatory.maybe_purge() == 91, "past the interval plus the excess, every stale entry goes"
    assert purgatory.watched == 0


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["watch", "check", "expire", "cancel_key", "purge", "maybe_purge"]),
            st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True),
            st.integers(1, 30),
            st.booleans(),
        ),
        max_size=60,
    )
)
def test_the_entry_count_matches_the_watch_lists_and_bounds_what_is_stale(
    steps: list[tuple[str, list[int], int, bool]],
) -> None:
    purgatory, time = make_purgatory(purge_interval=4)
    ops: list[MockDelayedOperation] = []
    for action, keys, delay_ms, flag in steps:
        if action == "watch":
            # an on_complete that watches a new operation on the same key exercises the re-entrant path
            hook = (
                (lambda _op, k=keys[0]: purgatory.try_complete_else_watch(MockDelayedOperation(50), [k]))
                if flag
                else None
            )
            op = MockDelayedOperation(delay_ms, on_complete_hook=hook)
            ops.append(op)
            purgatory.try_complete_else_watch(op, keys)
        elif action == "check":
            for op in ops:
                if flag or delay_ms % 2:
                    op.completable = True
            purgatory.check_and_complete(keys[0])
        elif action == "expire":
            time.advance(delay_ms)
            purgatory.timer.advance_clock()
        elif action == "cancel_key":
            purgatory.cancel_for_key(keys[0])
        elif action == "purge":
            purgatory.purge_completed()
        else:
            purgatory.maybe_purge()
        lists = [purgatory._watchers[key] for key in purgatory.watch_keys()]
        assert purgatory.watched == sum(len(ops) for ops in lists)
        assert all(lists), "no watch list is empty"
    # after a purge only pending operations are watched, each at least once
    purgatory.purge_completed()
    lists = [purgatory._watchers[key] for key in purgatory.watch_keys()]
    assert all(not op.is_completed for ops in lists for op in ops)
    assert purgatory.watched >= purgatory.num_delayed


def test_no_purge_while_completed_operations_stay_within_the_interval() -> None:
    purgatory, time = make_purgatory(purge_interval=10)
    for i in range(10):
        purgatory.try_complete_else_watch(MockDelayedOperation(5), [i])
    time.advance(5)
    purgatory.timer.advance_clock()

    assert purgatory.maybe_purge() == 0
    assert purgatory.watched == 10


def test_shutdown_closes_the_timer_without_completing_pending_operations() -> None:
    purgatory, time = make_purgatory()
    op = MockDelayedOperation(5)
    purgatory.try_complete_else_watch(op, ["k"])

    purgatory.shutdown()
    time.advance(10)
    purgatory.timer.advance_clock()

    assert op.completions == 0 and purgatory.watched == 0 and purgatory.num_delayed == 0


def test_the_reaper_expires_operations_and_purges_on_the_real_clock() -> None:
    async def scenario() -> tuple[list[MockDelayedOperation], int]:
        time = SystemTime()
        purgatory: DelayedOperationPurgatory[MockDelayedOperation] = DelayedOperationPurgatory(
            "real", SystemTimer(time), purge_interval=5
        )
        all_expired = asyncio.Event()
        ops: list[MockDelayedOperation] = []

        def on_expired(_: MockDelayedOperation) -> None:
            if all(op.is_completed for op in ops):
                all_expired.set()

        keys: list[Hashable] = [("t", i) for i in range(20)]
        async with TimerReaper(purgatory.timer, time, on_advance=purgatory.maybe_purge):
            for key in keys:
                op = MockDelayedOperation(10, on_complete_hook=on_expired)
                ops.append(op)
                purgatory.try_complete_else_watch(op, [key])
            await asyncio.wait_for(all_expired.wait(), timeout=5)
            # the reaper calls maybe_purge after every advance, before this task gets to run again; when
            # the expirations were spread over several advances (a loaded machine), the last few
            # completed operations may stay watched until more complete: at most purge_interval of them
            watched = purgatory.watched
        return ops, watched

    ops, watched = uvloop.run(scenario())

    assert all(op.expirations == 1 for op in ops)
    assert watched <= 5
