"""Incremental fetch sessions on the leader: the session cache and the fetch contexts, as scenarios."""

from __future__ import annotations

import random
from collections.abc import Iterable
from functools import partial

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.fetch_session import (
    CachedPartition,
    FetchManager,
    FetchSession,
    FetchSessionCache,
    FetchSessionCacheGauges,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
    next_epoch,
)
from protocol.errors import ErrorCode
from protocol.messages import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    ForgottenPartition,
    TopicPartition,
)
from server_common.time import ManualTime

INT32_MAX = 2**31 - 1
FOLLOWER = True
CONSUMER = False


# -- helpers --------------------------------------------------------------------------------------


def part(
    topic: str,
    partition: int,
    fetch_offset: int = 0,
    max_bytes: int = 1000,
    log_start: int = 0,
    epoch: int = -1,
) -> FetchPartition:
    return FetchPartition(topic, partition, fetch_offset, max_bytes, log_start, epoch)


def answer(
    topic: str, partition: int, high_watermark: int, log_start: int = 0, records: bytes = b"", error: int = 0
) -> FetchPartitionResponse:
    return FetchPartitionResponse(
        topic,
        partition,
        error_code=error,
        high_watermark=high_watermark,
        log_start_offset=log_start,
        records=records,
    )


def request(
    session_id: int,
    session_epoch: int,
    partitions: Iterable[FetchPartition] = (),
    forgotten: Iterable[tuple[str, int]] = (),
) -> FetchRequest:
    return FetchRequest(
        replica_id=1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1 << 20,
        partitions=list(partitions),
        session_id=session_id,
        session_epoch=session_epoch,
        forgotten=[ForgottenPartition(t, p) for t, p in forgotten],
    )


def tps(partitions: Iterable[FetchPartition | FetchPartitionResponse]) -> list[TopicPartition]:
    return [TopicPartition(p.topic, p.partition) for p in partitions]


def dummy_partitions(size: int) -> dict[TopicPartition, CachedPartition]:
    return {TopicPartition("test", i): CachedPartition("test", i, 100, 0) for i in range(size)}


def new_manager(max_entries: int = 10, evict_ms: int = 1000) -> tuple[FetchManager, FetchSessionCache, ManualTime]:
    time = ManualTime()
    cache = FetchSessionCache(max_entries, evict_ms, time, rng=random.Random(7))
    return FetchManager(cache, time), cache, time


def open_session(
    manager: FetchManager,
    partitions: list[FetchPartition],
    answers: list[FetchPartitionResponse],
    is_from_follower: bool = FOLLOWER,
) -> int:
    ctx = manager.new_context(request(INVALID_SESSION_ID, INITIAL_EPOCH, partitions), is_from_follower)
    assert isinstance(ctx, FullFetchContext)
    session_id = ctx.update_and_generate_response(answers).session_id
    assert session_id > 0
    return session_id


def foo_session(manager: FetchManager) -> int:
    """A session on foo-0 (offset 0, HW 10) and foo-1 (offset 10, HW 20)."""
    return open_session(
        manager,
        [part("foo", 0, fetch_offset=0), part("foo", 1, fetch_offset=10)],
        [answer("foo", 0, 10), answer("foo", 1, 20)],
    )


def session_of(cache: FetchSessionCache, session_id: int) -> FetchSession:
    session = cache.get(session_id)
    assert session is not None, f"session {session_id} missing"
    return session


def assert_cache_contains(cache: FetchSessionCache, *session_ids: int) -> None:
    for session_id in session_ids:
        assert cache.get(session_id) is not None, f"session {session_id} missing"
    assert cache.size == len(session_ids)


# -- session ids ----------------------------------------------------------------------------------


def test_new_session_ids_are_positive_and_unique_among_cached_sessions() -> None:
    cache = FetchSessionCache(max_entries=3000, evict_ms=100, time=ManualTime(), rng=random.Random(1))
    ids = [cache.maybe_create_session(CONSUMER, 1, lambda: dummy_partitions(1), now_ms=0) for _ in range(3000)]
    assert all(session_id > 0 for session_id in ids)
    assert len(set(ids)) == 3000


class _ScriptedRandom(random.Random):
    def __init__(self, draws: list[int]) -> None:
        super().__init__()
        self.draws = draws

    def randint(self, a: int, b: int) -> int:
        return self.draws.pop(0)


def test_a_drawn_id_already_in_use_is_drawn_again() -> None:
    cache = FetchSessionCache(max_entries=3, evict_ms=100, time=ManualTime(), rng=_ScriptedRandom([42, 42, 42, 43]))
    first = cache.maybe_create_session(CONSUMER, 1, lambda: dummy_partitions(1), now_ms=0)
    second = cache.maybe_create_session(CONSUMER, 1, lambda: dummy_partitions(1), now_ms=0)
    assert (first, second) == (42, 43)


# -- the cache: admission, eviction, accounting ---------------------------------------------------


def test_full_cache_refuses_newcomers_until_sessions_go_stale_then_evicts_by_key() -> None:
    # given a cache of 3 slots whose sessions become evictable after 100 ms
    cache = FetchSessionCache(max_entries=3, evict_ms=100, time=ManualTime())

    def create(now_ms: int, privileged: bool, size: int) -> int:
        return cache.maybe_create_session(privileged, size, lambda: dummy_partitions(size), now_ms=now_ms)

    id1 = create(0, CONSUMER, 10)
    id2 = create(10, CONSUMER, 20)
    id3 = create(20, CONSUMER, 30)
    # when the cache is full and every session is young, bigger or smaller newcomers are refused
    assert create(30, CONSUMER, 40) == INVALID_SESSION_ID
    assert create(40, CONSUMER, 5) == INVALID_SESSION_ID
    assert_cache_contains(cache, id1, id2, id3)
    # when session 2 has been idle for more than 100 ms, it is the stale one that goes
    cache.touch(session_of(cache, id1), 200)
    id4 = create(210, CONSUMER, 11)
    assert_cache_contains(cache, id1, id3, id4)
    # when nothing is stale, the smallest old-enough session goes if the newcomer is at least as big
    cache.touch(session_of(cache, id1), 400)
    cache.touch(session_of(cache, id3), 390)
    cache.touch(session_of(cache, id4), 400)
    id5 = create(410, CONSUMER, 50)
    assert_cache_contains(cache, id3, id4, id5)
    # a smaller consumer newcomer cannot displace anyone
    assert create(410, CONSUMER, 5) == INVALID_SESSION_ID
    # but a privileged (follower) newcomer evicts the smallest consumer session, even a smaller one
    id6 = create(410, FOLLOWER, 5)
    assert_cache_contains(cache, id3, id5, id6)
    assert cache.evictions == 3


def test_total_partitions_follows_creation_eviction_removal_and_resize() -> None:
    cache = FetchSessionCache(max_entries=2, evict_ms=100, time=ManualTime())
    assert (cache.total_partitions, cache.size, cache.evictions) == (0, 0, 0)

    id1 = cache.maybe_create_session(CONSUMER, 2, lambda: dummy_partitions(2), now_ms=0)
    session1 = cache.get(id1)
    assert session1 is not None and session1.size == 2
    assert (cache.total_partitions, cache.size, cache.evictions) == (2, 1, 0)

    id2 = cache.maybe_create_session(CONSUMER, 4, lambda: dummy_partitions(4), now_ms=0)
    session2 = cache.get(id2)
    assert session2 is not None
    assert (cache.total_partitions, cache.size, cache.evictions) == (6, 2, 0)

    # when both are old enough, a 5-partition newcomer evicts the 2-partition session
    cache.touch(session1, 200)
    cache.touch(session2, 200)
    id3 = cache.maybe_create_session(CONSUMER, 5, lambda: dummy_partitions(5), now_ms=200)
    assert_cache_contains(cache, id2, id3)
    assert (cache.total_partitions, cache.size, cache.evictions) == (9, 2, 1)

    # removal is not an eviction
    cache.remove(id3)
    assert_cache_contains(cache, id2)
    assert (cache.total_partitions, cache.size, cache.evictions) == (4, 1, 1)

    # a session that shrank is re-counted at its next touch, not before
    del session2.partitions[TopicPartition("test", 0)]
    assert (session2.size, session2.cached_size, cache.total_partitions) == (3, 4, 4)
    cache.touch(session2, session2.last_used_ms)
    assert cache.total_partitions == 3
    assert cache.gauges() == FetchSessionCacheGauges(
        num_incremental_fetch_sessions=1,
        num_incremental_fetch_partitions_cached=3,
        incremental_fetch_session_evictions_total=1,
    )


def test_young_follower_session_is_protected_even_from_other_followers() -> None:
    # given a one-slot cache holding a fresh follower session
    cache = FetchSessionCache(max_entries=1, evict_ms=100, time=ManualTime())
    follower = cache.maybe_create_session(FOLLOWER, 1, lambda: dummy_partitions(1), now_ms=0)
    # when a much bigger consumer or follower asks while it is young and in use, both are refused
    cache.touch(session_of(cache, follower), 90)
    assert cache.maybe_create_session(CONSUMER, 500, lambda: dummy_partitions(500), now_ms=95) == 0
    assert cache.maybe_create_session(FOLLOWER, 500, lambda: dummy_partitions(500), now_ms=95) == 0
    # when it is older than 100 ms at its last use, a bigger follower may take the slot; a consumer may not
    cache.touch(session_of(cache, follower), 150)
    assert cache.maybe_create_session(CONSUMER, 500, lambda: dummy_partitions(500), now_ms=160) == 0
    bigger = cache.maybe_create_session(FOLLOWER, 2, lambda: dummy_partitions(2), now_ms=160)
    assert bigger > 0
    assert_cache_contains(cache, bigger)


def test_an_old_session_is_evicted_only_by_a_strictly_bigger_newcomer_of_its_kind() -> None:
    # given a one-slot cache with an old (but not idle) 3-partition consumer session
    cache = FetchSessionCache(max_entries=1, evict_ms=100, time=ManualTime())
    old = cache.maybe_create_session(CONSUMER, 3, lambda: dummy_partitions(3), now_ms=0)
    cache.touch(session_of(cache, old), 150)
    # a consumer of the same size loses the tie (the newcomer's id counts as 0), a bigger one wins
    assert cache.maybe_create_session(CONSUMER, 3, lambda: dummy_partitions(3), now_ms=160) == 0
    bigger = cache.maybe_create_session(CONSUMER, 4, lambda: dummy_partitions(4), now_ms=160)
    assert_cache_contains(cache, bigger)
    assert cache.evictions == 1


def test_a_refused_session_never_builds_its_partitions() -> None:
    cache = FetchSessionCache(max_entries=0, evict_ms=100, time=ManualTime())

    def must_not_be_called() -> dict[TopicPartition, CachedPartition]:
        raise AssertionError("partitions built for a refused session")

    assert cache.maybe_create_session(FOLLOWER, 3, must_not_be_called, now_ms=0) == INVALID_SESSION_ID
    assert cache.size == 0


def test_least_recently_used_session_is_evicted_first_once_stale() -> None:
    # given two consumer sessions in a two-slot cache
    manager, cache, time = new_manager(max_entries=2, evict_ms=1000)
    first = open_session(manager, [part("foo", 0)], [answer("foo", 0, 5)], CONSUMER)
    time.advance(10)
    second = open_session(manager, [part("bar", 0)], [answer("bar", 0, 5)], CONSUMER)
    # when the first (older) session keeps fetching and the second goes quiet past the eviction time
    time.advance(600)
    manager.new_context(request(first, 1), CONSUMER).update_and_generate_response([answer("foo", 0, 5)])
    time.advance(600)
    # then a newcomer takes the slot of the least recently used one, the second
    third = open_session(manager, [part("baz", 0)], [answer("baz", 0, 5)], CONSUMER)
    assert_cache_contains(cache, first, third)
    assert isinstance(manager.new_context(request(second, 1), CONSUMER), SessionErrorContext)


# -- the request sequence -------------------------------------------------------------------------


def test_session_lifecycle_sessionless_full_bad_epoch_unknown_id_incremental_close() -> None:
    manager, cache, time = new_manager()
    foo = [part("foo", 0, fetch_offset=0), part("foo", 1, fetch_offset=10)]
    foo_answers = [answer("foo", 0, 10), answer("foo", 1, 20)]

    # a sessionless request reads everything and opens nothing
    ctx = manager.new_context(request(INVALID_SESSION_ID, FINAL_EPOCH, foo), FOLLOWER)
    assert isinstance(ctx, SessionlessFetchContext)
    assert ctx.error == ErrorCode.NONE
    assert ctx.partitions_to_read() == foo
    response = ctx.update_and_generate_response(foo_answers)
    assert (response.session_id, response.partitions, response.error_code) == (
        INVALID_SESSION_ID,
        foo_answers,
        0,
    )
    assert cache.size == 0

    # a full request opens a session and answers every partition
    ctx = manager.new_context(request(INVALID_SESSION_ID, INITIAL_EPOCH, foo), FOLLOWER)
    assert isinstance(ctx, FullFetchContext)
    assert ctx.partitions_to_read() == foo
    response = ctx.update_and_generate_response(foo_answers)
    session_id = response.session_id
    assert session_id > 0 and response.partitions == foo_answers and response.error_code == 0
    assert_cache_contains(cache, session_id)
    assert cache.total_partitions == 2

    # a wrong epoch is refused and leaves the session as it was
    ctx = manager.new_context(request(session_id, 5), FOLLOWER)
    assert isinstance(ctx, SessionErrorContext)
    assert ctx.error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert ctx.partitions_to_read() == []
    error = ctx.error_response()
    assert (error.error_code, error.partitions, error.session_id) == (71, [], INVALID_SESSION_ID)
    assert ctx.update_and_generate_response(foo_answers) == error

    # an unknown id is refused
    ctx = manager.new_context(request(session_id + 1, 1), FOLLOWER)
    assert isinstance(ctx, SessionErrorContext)
    assert ctx.error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert ctx.error_response().error_code == 70

    # an empty incremental request reads every partition of the session and answers nothing unchanged
    time.advance(5)
    ctx = manager.new_context(request(session_id, 1), FOLLOWER)
    assert isinstance(ctx, IncrementalFetchContext)
    assert ctx.error == ErrorCode.NONE
    assert ctx.partitions_to_read() == foo
    assert ctx.get_fetch_offset(TopicPartition("foo", 1)) == 10
    response = ctx.update_and_generate_response(foo_answers)
    assert (response.session_id, response.partitions, response.error_code) == (session_id, [], 0)

    # the next one answers only the partition whose high watermark moved
    ctx = manager.new_context(request(session_id, 2), FOLLOWER)
    response = ctx.update_and_generate_response([answer("foo", 0, 10), answer("foo", 1, 25)])
    assert tps(response.partitions) == [TopicPartition("foo", 1)]

    # a FINAL request closes the session and is answered sessionless
    ctx = manager.new_context(request(session_id, FINAL_EPOCH, foo), FOLLOWER)
    assert isinstance(ctx, SessionlessFetchContext)
    assert ctx.update_and_generate_response(foo_answers).session_id == INVALID_SESSION_ID
    assert cache.size == 0 and cache.total_partitions == 0
    assert manager.new_context(request(session_id, 3), FOLLOWER).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_full_request_naming_a_session_replaces_it() -> None:
    manager, cache, _ = new_manager()
    old = foo_session(manager)
    new = open_session(manager, [part("bar", 0)], [answer("bar", 0, 3)])
    ctx = manager.new_context(request(old, INITIAL_EPOCH, [part("foo", 0)]), FOLLOWER)
    assert cache.get(old) is None
    replacement = ctx.update_and_generate_response([answer("foo", 0, 10)]).session_id
    assert replacement not in (old, INVALID_SESSION_ID)
    assert_cache_contains(cache, new, replacement)


def test_full_request_is_answered_without_session_when_the_cache_refuses() -> None:
    manager, cache, _ = new_manager(max_entries=0)
    ctx = manager.new_context(request(INVALID_SESSION_ID, INITIAL_EPOCH, [part("foo", 0)]), FOLLOWER)
    response = ctx.update_and_generate_response([answer("foo", 0, 10)])
    assert response.session_id == INVALID_SESSION_ID
    assert tps(response.partitions) == [TopicPartition("foo", 0)]
    assert cache.size == 0


def test_full_request_listing_a_partition_twice_keeps_its_last_entry() -> None:
    manager, cache, _ = new_manager()
    ctx = manager.new_context(
        request(
            INVALID_SESSION_ID,
            INITIAL_EPOCH,
            [part("foo", 0, fetch_offset=1), part("foo", 0, fetch_offset=7)],
        ),
        FOLLOWER,
    )
    assert ctx.partitions_to_read() == [part("foo", 0, fetch_offset=7)]


# -- incremental requests mutate the session ------------------------------------------------------


def test_incremental_request_adds_bar_and_forgets_foo() -> None:
    # given a session on foo-0 and foo-1
    manager, cache, _ = new_manager()
    session_id = foo_session(manager)
    # when an incremental request adds bar-0 and forgets foo-0
    ctx = manager.new_context(request(session_id, 1, [part("bar", 0, fetch_offset=15)], [("foo", 0)]), FOLLOWER)
    # then the session reads foo-1 (as cached) and bar-0 (as sent), in session order
    assert isinstance(ctx, IncrementalFetchContext)
    assert ctx.partitions_to_read() == [part("foo", 1, fetch_offset=10), part("bar", 0, fetch_offset=15)]
    assert cache.total_partitions == 2
    # and the answer carries the new partition but not the unchanged one
    response = ctx.update_and_generate_response([answer("foo", 1, 20), answer("bar", 0, 15)])
    assert tps(response.partitions) == [TopicPartition("bar", 0)]
    assert response.session_id == session_id


def test_incremental_request_updates_the_cached_fetch_parameters_of_listed_partitions() -> None:
    manager, _, _ = new_manager()
    session_id = foo_session(manager)
    moved = part("foo", 0, fetch_offset=10, max_bytes=64, log_start=3, epoch=6)
    ctx = manager.new_context(request(session_id, 1, [moved]), FOLLOWER)
    ctx.update_and_generate_response([answer("foo", 0, 10, records=b"x"), answer("foo", 1, 20)])
    # the next request, listing nothing, is served from what the fetcher sent last
    ctx = manager.new_context(request(session_id, 2), FOLLOWER)
    by_tp = {TopicPartition(p.topic, p.partition): p for p in ctx.partitions_to_read()}
    assert by_tp[TopicPartition("foo", 0)] == moved
    assert by_tp[TopicPartition("foo", 1)] == part("foo", 1, fetch_offset=10)


def test_incremental_request_forgetting_every_partition_closes_the_session() -> None:
    manager, cache, _ = new_manager()
    session_id = foo_session(manager)
    ctx = manager.new_context(request(session_id, 1, forgotten=[("foo", 0), ("foo", 1)]), FOLLOWER)
    assert isinstance(ctx, SessionlessFetchContext)
    assert ctx.partitions_to_read() == []
    response = ctx.update_and_generate_response([])
    assert (response.session_id, response.partitions, response.error_code) == (INVALID_SESSION_ID, [], 0)
    assert cache.size == 0 and cache.total_partitions == 0


def test_forgetting_a_partition_the_session_never_had_is_harmless() -> None:
    manager, cache, _ = new_manager()
    session_id = foo_session(manager)
    ctx = manager.new_context(request(session_id, 1, forgotten=[("nope", 9)]), FOLLOWER)
    assert isinstance(ctx, IncrementalFetchContext)
    assert cache.total_partitions == 2


# -- what an incremental response carries ---------------------------------------------------------


def incremental_answer(changed: FetchPartitionResponse) -> list[TopicPartition]:
    """Open the foo session, then answer one incremental request with foo-0 as given, foo-1 unchanged."""
    manager, _, _ = new_manager()
    session_id = foo_session(manager)
    ctx = manager.new_context(request(session_id, 1), FOLLOWER)
    return tps(ctx.update_and_generate_response([changed, answer("foo", 1, 20)]).partitions)


def test_incremental_response_omits_a_partition_with_nothing_new() -> None:
    assert incremental_answer(answer("foo", 0, 10)) == []


def test_incremental_response_includes_a_partition_with_records() -> None:
    assert incremental_answer(answer("foo", 0, 10, records=b"batch")) == [TopicPartition("foo", 0)]


def test_incremental_response_includes_a_partition_whose_high_watermark_moved() -> None:
    assert incremental_answer(answer("foo", 0, 11)) == [TopicPartition("foo", 0)]


def test_incremental_response_includes_a_partition_whose_log_start_moved() -> None:
    assert incremental_answer(answer("foo", 0, 10, log_start=4)) == [TopicPartition("foo", 0)]


def test_incremental_response_includes_a_partition_with_an_error() -> None:
    failed = answer("foo", 0, 10, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert incremental_answer(failed) == [TopicPartition("foo", 0)]


def test_partition_is_sent_again_once_its_error_clears_even_if_nothing_else_changed() -> None:
    manager, _, _ = new_manager()
    session_id = foo_session(manager)
    failed = answer("foo", 0, 10, error=ErrorCode.KAFKA_STORAGE_ERROR)
    ctx = manager.new_context(request(session_id, 1), FOLLOWER)
    assert tps(ctx.update_and_generate_response([failed, answer("foo", 1, 20)]).partitions) == [
        TopicPartition("foo", 0)
    ]
    # the error is gone and the high watermark is what it was before it: foo-0 must still be re-sent
    ctx = manager.new_context(request(session_id, 2), FOLLOWER)
    assert tps(ctx.update_and_generate_response([answer("foo", 0, 10), answer("foo", 1, 20)]).partitions) == [
        TopicPartition("foo", 0)
    ]
    # and after that, quiet again
    ctx = manager.new_context(request(session_id, 3), FOLLOWER)
    assert ctx.update_and_generate_response([answer("foo", 0, 10), answer("foo", 1, 20)]).partitions == []


def test_a_divergence_is_sent_and_the_high_watermark_sent_again_after_it() -> None:
    # The follower truncates from a diverging answer and does not read its high watermark: with no new
    # produce the HW would never change again, so the session must not count it as sent.
    manager, _, _ = new_manager()
    session_id = foo_session(manager)
    diverging = answer("foo", 0, 11)
    diverging.diverging_epoch, diverging.diverging_end_offset = 2, 8
    ctx = manager.new_context(request(session_id, 1), FOLLOWER)
    assert tps(ctx.update_and_generate_response([diverging, answer("foo", 1, 20)]).partitions) == [
        TopicPartition("foo", 0)
    ]
    ctx = manager.new_context(request(session_id, 2), FOLLOWER)
    assert tps(ctx.update_and_generate_response([answer("foo", 0, 11), answer("foo", 1, 20)]).partitions) == [
        TopicPartition("foo", 0)
    ]
    ctx = manager.new_context(request(session_id, 3), FOLLOWER)
    assert ctx.update_and_generate_response([answer("foo", 0, 11), answer("foo", 1, 20)]).partitions == []


def test_a_divergence_in_the_answer_that_opens_a_session_does_not_count_its_high_watermark_as_sent() -> None:
    # the follower's first fetch of a new leader diverges: it truncates and ignores that answer's HW
    manager, _, _ = new_manager()
    diverging = answer("foo", 0, 11)
    diverging.diverging_epoch, diverging.diverging_end_offset = 2, 11
    session_id = open_session(manager, [part("foo", 0, fetch_offset=12)], [diverging])
    # so the next answer carries foo-0 although its HW did not change
    ctx = manager.new_context(request(session_id, 1), FOLLOWER)
    assert tps(ctx.update_and_generate_response([answer("foo", 0, 11)]).partitions) == [TopicPartition("foo", 0)]


def test_sent_partitions_move_to_the_end_of_the_session_order() -> None:
    manager, _, _ = new_manager()
    session_id = open_session(
        manager,
        [part("t", 0), part("t", 1), part("t", 2)],
        [answer("t", 0, 1), answer("t", 1, 1), answer("t", 2, 1)],
    )
    ctx = manager.new_context(request(session_id, 1), FOLLOWER)
    ctx.update_and_generate_response([answer("t", 0, 2), answer("t", 1, 1), answer("t", 2, 1)])
    ctx = manager.new_context(request(session_id, 2), FOLLOWER)
    assert tps(ctx.partitions_to_read()) == [
        TopicPartition("t", 1),
        TopicPartition("t", 2),
        TopicPartition("t", 0),
    ]


# -- epochs ---------------------------------------------------------------------------------------


def test_the_same_request_sent_twice_is_refused_the_second_time() -> None:
    manager, _, _ = new_manager()
    session_id = foo_session(manager)
    first = manager.new_context(request(session_id, 1), FOLLOWER)
    first.update_and_generate_response([answer("foo", 0, 10), answer("foo", 1, 20)])
    duplicate = manager.new_context(request(session_id, 1), FOLLOWER)
    assert duplicate.error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert duplicate.update_and_generate_response([answer("foo", 0, 99)]).partitions == []


def test_a_parked_request_overtaken_by_a_newer_one_is_answered_with_an_epoch_error() -> None:
    # given request epoch 1 parked (in DelayedFetch) and then request epoch 2 accepted
    manager, _, _ = new_manager()
    session_id = foo_session(manager)
    parked = manager.new_context(request(session_id, 1), FOLLOWER)
    newer = manager.new_context(request(session_id, 2), FOLLOWER)
    # when the parked one completes, it is refused and changes nothing
    stale = parked.update_and_generate_response([answer("foo", 0, 50), answer("foo", 1, 20)])
    assert (stale.error_code, stale.partitions, stale.session_id) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        [],
        session_id,
    )
    assert parked.throttled_response(30).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    # then the newer one still sees foo-0's high watermark move
    fresh = newer.update_and_generate_response([answer("foo", 0, 50), answer("foo", 1, 20)])
    assert fresh.error_code == 0 and tps(fresh.partitions) == [TopicPartition("foo", 0)]


def test_session_epoch_wraps_from_int32_max_to_one() -> None:
    assert [next_epoch(e) for e in (FINAL_EPOCH, INITIAL_EPOCH, 1, INT32_MAX - 1, INT32_MAX)] == [
        FINAL_EPOCH,
        1,
        2,
        INT32_MAX,
        1,
    ]
    manager, cache, _ = new_manager()
    session_id = foo_session(manager)
    session = cache.get(session_id)
    assert session is not None
    session.epoch = INT32_MAX
    ctx = manager.new_context(request(session_id, INT32_MAX), FOLLOWER)
    assert ctx.update_and_generate_response([]).error_code == 0
    assert session.epoch == 1
    assert isinstance(manager.new_context(request(session_id, 1), FOLLOWER), IncrementalFetchContext)


def test_throttled_incremental_response_is_empty_and_keeps_the_session() -> None:
    manager, cache, _ = new_manager()
    session_id = foo_session(manager)
    ctx = manager.new_context(request(session_id, 1), FOLLOWER)
    throttled = ctx.throttled_response(250)
    assert (throttled.partitions, throttled.throttle_time_ms, throttled.session_id) == ([], 250, session_id)
    assert isinstance(manager.new_context(request(session_id, 2), FOLLOWER), IncrementalFetchContext)
    assert cache.size == 1


def test_using_a_session_refreshes_its_last_use_and_partition_count() -> None:
    manager, cache, time = new_manager()
    session_id = foo_session(manager)
    time.advance(300)
    manager.new_context(request(session_id, 1, [part("bar", 0)]), FOLLOWER)
    session = cache.get(session_id)
    assert session is not None
    assert session.last_used_ms == time.milliseconds()
    assert cache.total_partitions == 3


# -- invariants under arbitrary use ---------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.booleans(), st.integers(0, 6)),
        st.tuples(st.just("touch"), st.integers(0, 20), st.integers(0, 6)),
        st.tuples(st.just("remove"), st.integers(0, 20), st.just(0)),
        st.tuples(st.just("advance"), st.integers(0, 150), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_cache_accounting_holds_under_any_sequence_of_operations(ops: list[tuple[str, int, int]]) -> None:
    cache = FetchSessionCache(max_entries=4, evict_ms=100, time=ManualTime(0), rng=random.Random(3))
    now_ms = 0
    created: list[int] = []
    for op, a, b in ops:
        if op == "create":
            session_id = cache.maybe_create_session(bool(a), b, partial(dummy_partitions, b), now_ms=now_ms)
            if session_id != INVALID_SESSION_ID:
                created.append(session_id)
        elif op == "touch" and created:
            session = cache.get(created[a % len(created)])
            if session is not None:
                session.partitions = dummy_partitions(b)
                cache.touch(session, now_ms)
        elif op == "remove" and created:
            cache.remove(created[a % len(created)])
        elif op == "advance":
            now_ms += a
        live = [s for s in (cache.get(i) for i in set(created)) if s is not None]
        assert cache.size == len(live) <= 4
        assert cache.total_partitions == sum(s.cached_size for s in live)
        assert all(s.id > 0 for s in live)
