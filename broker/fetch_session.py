"""Leader-side incremental fetch sessions (KIP-227): the session cache, the fetch manager, fetch contexts.

How this works
--------------
A fetcher that asks for the same partitions over and over (every follower does) can open a *session*:
its first request is a full one (`session_id = 0`, `session_epoch = 0`) and the leader answers with a
new session id. Later requests are incremental (`session_id = N`, `session_epoch = 1, 2, ...`): they list
only the partitions whose fetch parameters changed, plus the `forgotten` ones, and the leader answers
with only the partitions that have something new. The leader keeps, per session, a `CachedPartition`
for each partition: what the fetcher sent last (fetch offset, its log start, its leader epoch, max
bytes) and what the leader answered last (high watermark, local log start).

    request (session_id, session_epoch)          FetchManager.new_context           context
    ------------------------------------------   ---------------------------------  ---------------------
    (any, -1 FINAL)                              close the given session            SessionlessFetchContext
    (any,  0 INITIAL)                            close the given session            FullFetchContext
    (N,    e > 0), N unknown                                                        SessionErrorContext
    (N,    e > 0), e != session's epoch                                             SessionErrorContext
    (N,    e > 0), e == session's epoch          apply adds/updates/forgotten,      IncrementalFetchContext
                                                 bump the session's epoch           (or sessionless if the
                                                                                    session became empty)

The broker's FETCH handler then reads `ctx.partitions_to_read()`, reads the logs (perhaps only after a
DelayedFetch completes) and calls `ctx.update_and_generate_response(parts)`. A full context creates the
session at that point, if the cache admits it, with the answered high watermarks cached. An
incremental context drops every partition with nothing new (no records, same high watermark, same log
start, no error), moves the ones it sends to the end of the session's order (so a `max_bytes`-limited
reader rotates fairly), and re-checks the session epoch: if another request of the same session got in
between (a duplicate or a retry), this answer is INVALID_FETCH_SESSION_EPOCH and nothing is updated.

Session epochs follow Kafka: a new session expects epoch 1 next; each incremental request bumps it by
one, wrapping from 2**31 - 1 to 1 (never back to 0, which means "full request").

The cache holds at most `max.incremental.fetch.session.cache.slots` sessions. A new session may take
the slot of an existing one only if (1) the least recently used session has been idle longer than
`evict_ms`, or else (2) the lowest `EvictableKey(privileged, size, id)` among the evictable sessions is
<= the newcomer's key. Followers' sessions are privileged. A session counts as evictable by anyone once
it is older than `evict_ms` (judged when it is touched); until then a consumer's session can be evicted
by a privileged newcomer only, and a follower's not at all.

Single-threaded: every method runs on the broker's event loop, so there are no locks. Searching for an
eviction victim scans the sessions (O(slots)); it happens only when the cache is full and someone asks
for a new session.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from protocol.errors import ErrorCode
from protocol.messages import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    NO_LEADER_EPOCH,
    UNDEFINED_EPOCH,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    ForgottenPartition,
    TopicPartition,
)
from server_common.time import Time

log = logging.getLogger(__name__)

MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS = 1000
"""Default of `max.incremental.fetch.session.cache.slots`."""

MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000
"""How long a session must be idle to be evicted by anyone (Kafka's constant of the same name)."""

_INT32_MAX = 2**31 - 1


def next_epoch(prev_epoch: int) -> int:
    """The session epoch that follows `prev_epoch`: FINAL stays FINAL, 2**31 - 1 wraps to 1, else + 1."""
    if prev_epoch < 0:
        return FINAL_EPOCH
    if prev_epoch == _INT32_MAX:
        return 1
    return prev_epoch + 1


def is_full_request(session_epoch: int) -> bool:
    """INITIAL (0) and FINAL (-1) requests carry every partition; any other epoch is incremental."""
    return session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)


# -- cached partitions and sessions ---------------------------------------------------------------


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the fetcher's last request parameters and our last answer.

    `fetcher_log_start_offset` is the fetcher's log start (what it sent); `local_log_start_offset` is
    this broker's log start as last answered. `high_watermark = -1` means "never answered" or "last
    answer was an error", so the next answer includes the partition whatever it holds.
    """

    topic: str
    partition: int
    partition_max_bytes: int
    fetch_offset: int
    current_leader_epoch: int = NO_LEADER_EPOCH
    fetcher_log_start_offset: int = -1
    high_watermark: int = -1
    local_log_start_offset: int = -1
    last_fetched_epoch: int = UNDEFINED_EPOCH  # truncation on fetch: the fetcher's, as it last sent it

    @classmethod
    def from_request(cls, request: FetchPartition) -> CachedPartition:
        return cls(
            topic=request.topic,
            partition=request.partition,
            partition_max_bytes=request.partition_max_bytes,
            fetch_offset=request.fetch_offset,
            current_leader_epoch=request.current_leader_epoch,
            fetcher_log_start_offset=request.log_start_offset,
            last_fetched_epoch=request.last_fetched_epoch,
        )

    @classmethod
    def from_request_and_response(cls, request: FetchPartition, response: FetchPartitionResponse) -> CachedPartition:
        cached = cls.from_request(request)
        cached.local_log_start_offset = response.log_start_offset
        cached.maybe_update_response_data(response, update=True)  # the same rule as every later answer
        return cached

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def to_fetch_partition(self) -> FetchPartition:
        """The request the fetcher would send for this partition if it listed it in full."""
        return FetchPartition(
            topic=self.topic,
            partition=self.partition,
            fetch_offset=self.fetch_offset,
            partition_max_bytes=self.partition_max_bytes,
            log_start_offset=self.fetcher_log_start_offset,
            current_leader_epoch=self.current_leader_epoch,
            last_fetched_epoch=self.last_fetched_epoch,
        )

    def update_request_params(self, request: FetchPartition) -> None:
        self.partition_max_bytes = request.partition_max_bytes
        self.fetch_offset = request.fetch_offset
        self.fetcher_log_start_offset = request.log_start_offset
        self.current_leader_epoch = request.current_leader_epoch
        self.last_fetched_epoch = request.last_fetched_epoch

    def maybe_update_response_data(self, response: FetchPartitionResponse, update: bool) -> bool:
        """Whether an incremental response must carry `response`; with `update`, remember what it says.

        Included: records present, high watermark or log start changed, a divergence (the follower must
        truncate), or an error. An error or a divergence also resets the cached high watermark to -1, so the
        partition is sent again once it is gone: the follower does not read the high watermark of a response
        it truncates from, and with no new produce the leader's HW would never change to be sent again (the
        follower's HW would stay behind for good).
        """
        must_respond = len(response.records) > 0
        if self.high_watermark != response.high_watermark:
            must_respond = True
            if update:
                self.high_watermark = response.high_watermark
        if self.local_log_start_offset != response.log_start_offset:
            must_respond = True
            if update:
                self.local_log_start_offset = response.log_start_offset
        if response.error_code != ErrorCode.NONE or response.diverging_epoch != UNDEFINED_EPOCH:
            must_respond = True
            if update:
                self.high_watermark = -1
        return must_respond


class EvictableKey(NamedTuple):
    """Eviction order: consumers before followers, then smaller sessions first, then lower ids."""

    privileged: bool
    size: int
    session_id: int


@dataclass(slots=True, eq=False)
class FetchSession:
    """An incremental fetch session.

    `partitions` keeps the session's order: insertion order, with every partition an incremental
    response carries moved to the end. `epoch` is the epoch the next incremental request must carry.
    `cached_size`, `last_used_ms` and the evictability flags belong to the cache and change only in
    `FetchSessionCache.touch`; `cached_size == -1` means "not (yet) in a cache".
    """

    id: int
    privileged: bool
    partitions: dict[TopicPartition, CachedPartition]
    creation_ms: int
    last_used_ms: int
    epoch: int
    cached_size: int = -1
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False

    @property
    def size(self) -> int:
        return len(self.partitions)

    def is_empty(self) -> bool:
        return not self.partitions

    @property
    def evictable_key(self) -> EvictableKey:
        return EvictableKey(self.privileged, self.cached_size, self.id)

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        cached = self.partitions.get(tp)
        return None if cached is None else cached.fetch_offset

    def update(
        self, requested: Iterable[FetchPartition], forgotten: Iterable[ForgottenPartition]
    ) -> tuple[list[TopicPartition], list[TopicPartition], list[TopicPartition]]:
        """Apply an incremental request: add or update the listed partitions, then drop the forgotten.

        Returns (added, updated, removed). A forgotten partition that was never in the session is
        ignored; a partition both listed and forgotten ends up removed, as in Kafka.
        """
        added: list[TopicPartition] = []
        updated: list[TopicPartition] = []
        removed: list[TopicPartition] = []
        for request in requested:
            tp = TopicPartition(request.topic, request.partition)
            cached = self.partitions.get(tp)
            if cached is None:
                self.partitions[tp] = CachedPartition.from_request(request)
                added.append(tp)
            else:
                cached.update_request_params(request)
                updated.append(tp)
        for gone in forgotten:
            tp = TopicPartition(gone.topic, gone.partition)
            if self.partitions.pop(tp, None) is not None:
                removed.append(tp)
        return added, updated, removed

    def move_to_end(self, tp: TopicPartition) -> None:
        self.partitions[tp] = self.partitions.pop(tp)


# -- the cache ------------------------------------------------------------------------------------


@dataclass(slots=True)
class FetchSessionCacheGauges:
    """Kafka's NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached and the eviction count."""

    num_incremental_fetch_sessions: int
    num_incremental_fetch_partitions_cached: int
    incremental_fetch_session_evictions_total: int


class FetchSessionCache:
    """At most `max_entries` sessions, with Kafka's admission and eviction rules (module docstring).

    Invariants: `size <= max_entries`; `total_partitions` is the sum of `cached_size` over the cached
    sessions (the sizes as of each session's last touch); session ids are positive and unique among
    the cached sessions.
    """

    def __init__(
        self,
        max_entries: int = MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS,
        evict_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
        time: Time | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        self.max_entries = max_entries
        self.evict_ms = evict_ms
        self._time = time
        # Ids need only be unpredictable enough not to collide with a stale client's old session;
        # `rng` is injectable so a simulation can replay them.
        self._rng = rng if rng is not None else random.Random()
        self._sessions: dict[int, FetchSession] = {}
        self._total_partitions = 0
        self._evictions = 0

    # -- gauges ---------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self._sessions)

    @property
    def total_partitions(self) -> int:
        return self._total_partitions

    @property
    def evictions(self) -> int:
        return self._evictions

    def gauges(self) -> FetchSessionCacheGauges:
        return FetchSessionCacheGauges(self.size, self._total_partitions, self._evictions)

    # -- lookups --------------------------------------------------------------------------------

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def new_session_id(self) -> int:
        """A random id in [1, 2**31 - 1) that no cached session uses (0 is INVALID_SESSION_ID)."""
        while True:
            session_id = self._rng.randint(1, _INT32_MAX - 1)
            if session_id != INVALID_SESSION_ID and session_id not in self._sessions:
                return session_id

    # -- admission and eviction -----------------------------------------------------------------

    def maybe_create_session(
        self,
        privileged: bool,
        size: int,
        create_partitions: Callable[[], dict[TopicPartition, CachedPartition]],
        now_ms: int | None = None,
    ) -> int:
        """Create a session if there is a free slot or one can be evicted; return its id, else 0.

        `create_partitions` is called only when the session is admitted, so a refused request costs
        nothing. The new session expects epoch 1 next.
        """
        now_ms = self._now(now_ms)
        if self.size >= self.max_entries and not self.try_evict(privileged, EvictableKey(privileged, size, 0), now_ms):
            log.debug("no fetch session created (privileged=%s, size=%d): cache full", privileged, size)
            return INVALID_SESSION_ID
        session = FetchSession(
            id=self.new_session_id(),
            privileged=privileged,
            partitions=create_partitions(),
            creation_ms=now_ms,
            last_used_ms=now_ms,
            epoch=next_epoch(INITIAL_EPOCH),
        )
        self._sessions[session.id] = session
        self.touch(session, now_ms)
        log.debug("created fetch session %d (privileged=%s, %d partitions)", session.id, privileged, session.size)
        return session.id

    def try_evict(self, privileged: bool, key: EvictableKey, now_ms: int) -> bool:
        """Evict one session to make room for a newcomer with `key`; True if one was evicted.

        First choice is the least recently used session if it has been idle more than `evict_ms`.
        Otherwise the lowest evictable key (among sessions evictable by this newcomer) goes, provided
        it is not above the newcomer's own key.
        """
        if not self._sessions:
            return False
        least_recent = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - least_recent.last_used_ms > self.evict_ms:
            log.debug("evicting stale fetch session %d", least_recent.id)
            self._evict(least_recent)
            return True
        candidates = [
            s for s in self._sessions.values() if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: s.evictable_key)
        if key < victim.evictable_key:
            return False
        log.debug("evicting fetch session %s for newcomer %s", victim.evictable_key, key)
        self._evict(victim)
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        """Drop a session (closed by its fetcher, or empty); returns it, or None if it was not cached."""
        session = self._sessions.get(session_id)
        if session is not None:
            self._remove(session)
        return session

    def touch(self, session: FetchSession, now_ms: int | None = None) -> None:
        """Record a use of `session`: refresh its last-used time, size accounting and evictability."""
        now_ms = self._now(now_ms)
        session.last_used_ms = now_ms
        if session.cached_size != -1:
            self._total_partitions -= session.cached_size
        session.cached_size = session.size
        self._total_partitions += session.cached_size
        old_enough = now_ms - session.creation_ms > self.evict_ms
        # A young follower session is protected from everyone; a young consumer session only from
        # other consumers. Past `evict_ms` of age, anyone with a better key may take the slot.
        session.evictable_by_privileged = (not session.privileged) or old_enough
        session.evictable_by_all = old_enough

    # -- internals ------------------------------------------------------------------------------

    def _evict(self, session: FetchSession) -> None:
        self._remove(session)
        self._evictions += 1

    def _remove(self, session: FetchSession) -> None:
        # Only the cached object itself: a detached session (already evicted) must not take out a
        # newer session that happens to have drawn the same id.
        if self._sessions.get(session.id) is not session:
            return
        del self._sessions[session.id]
        self._total_partitions -= session.cached_size
        session.cached_size = -1
        session.evictable_by_all = session.evictable_by_privileged = False

    def _now(self, now_ms: int | None) -> int:
        if now_ms is not None:
            return now_ms
        if self._time is None:
            raise ValueError("FetchSessionCache has no Time: pass now_ms")
        return self._time.milliseconds()


# -- fetch contexts -------------------------------------------------------------------------------


def _by_topic_partition(partitions: Iterable[FetchPartition]) -> dict[TopicPartition, FetchPartition]:
    """Request partitions keyed by topic-partition; a partition listed twice keeps its last entry."""
    return {TopicPartition(p.topic, p.partition): p for p in partitions}


class FetchContext:
    """What the FETCH handler asks, in order: `error`, `partitions_to_read()`, then (possibly after a
    DelayedFetch) `update_and_generate_response(parts)`, or `error_response()` when `error` is set."""

    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None

    def partitions_to_read(self) -> list[FetchPartition]:
        raise NotImplementedError

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        raise NotImplementedError

    def update_and_generate_response(self, parts: list[FetchPartitionResponse]) -> FetchResponse:
        raise NotImplementedError

    def error_response(self) -> FetchResponse:
        """A response with this context's top-level error and no partitions."""
        return FetchResponse(
            partitions=[],
            error_code=self.error,
            error_message=self.error_message,
            session_id=INVALID_SESSION_ID,
        )

    def throttled_response(self, throttle_time_ms: int) -> FetchResponse:
        """An empty response for a quota-throttled fetcher; the session, if any, is left as it was."""
        return FetchResponse(partitions=[], throttle_time_ms=throttle_time_ms, session_id=INVALID_SESSION_ID)


class SessionErrorContext(FetchContext):
    """The request named a session we cannot serve: nothing is read, the answer is the error alone."""

    def __init__(self, error: ErrorCode, error_message: str) -> None:
        self.error = error
        self.error_message = error_message

    def partitions_to_read(self) -> list[FetchPartition]:
        return []

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        return None

    def update_and_generate_response(self, parts: list[FetchPartitionResponse]) -> FetchResponse:
        # We do not know which partitions the fetcher meant, so nothing read can be sent.
        return self.error_response()


class SessionlessFetchContext(FetchContext):
    """A full request that does not want a session (FINAL epoch), or an incremental one that emptied
    its session: the answer carries every partition read and session id 0."""

    def __init__(self, requested: dict[TopicPartition, FetchPartition]) -> None:
        self._requested = requested

    def partitions_to_read(self) -> list[FetchPartition]:
        return list(self._requested.values())

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        request = self._requested.get(tp)
        return None if request is None else request.fetch_offset

    def update_and_generate_response(self, parts: list[FetchPartitionResponse]) -> FetchResponse:
        return FetchResponse(partitions=list(parts), session_id=INVALID_SESSION_ID)


class FullFetchContext(FetchContext):
    """A full request asking for a session (INITIAL epoch): every partition is read and answered, and
    the session is created when the answer is generated, if the cache admits it."""

    def __init__(
        self,
        time: Time,
        cache: FetchSessionCache,
        requested: dict[TopicPartition, FetchPartition],
        is_from_follower: bool,
    ) -> None:
        self._time = time
        self._cache = cache
        self._requested = requested
        self._is_from_follower = is_from_follower

    def partitions_to_read(self) -> list[FetchPartition]:
        return list(self._requested.values())

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        request = self._requested.get(tp)
        return None if request is None else request.fetch_offset

    def update_and_generate_response(self, parts: list[FetchPartitionResponse]) -> FetchResponse:
        def create_partitions() -> dict[TopicPartition, CachedPartition]:
            cached: dict[TopicPartition, CachedPartition] = {}
            for part in parts:
                tp = TopicPartition(part.topic, part.partition)
                request = self._requested.get(tp)
                # Answers are built from partitions_to_read(), so each has its request; a stray one
                # could not be served incrementally anyway, so it is not cached.
                if request is not None:
                    cached[tp] = CachedPartition.from_request_and_response(request, part)
            return cached

        session_id = self._cache.maybe_create_session(
            self._is_from_follower, len(parts), create_partitions, self._time.milliseconds()
        )
        return FetchResponse(partitions=list(parts), session_id=session_id)


class IncrementalFetchContext(FetchContext):
    """An incremental request on a live session: read every partition of the session, answer only
    those with something new."""

    def __init__(self, request_epoch: int, session: FetchSession) -> None:
        self._request_epoch = request_epoch
        self.session = session

    def partitions_to_read(self) -> list[FetchPartition]:
        return [cached.to_fetch_partition() for cached in self.session.partitions.values()]

    def get_fetch_offset(self, tp: TopicPartition) -> int | None:
        return self.session.get_fetch_offset(tp)

    def _epoch_still_current(self) -> bool:
        # new_context bumped the session to next_epoch(request epoch); any other value means another
        # request of this session was accepted since (a duplicate or a retry), which wins.
        return self.session.epoch == next_epoch(self._request_epoch)

    def _stale_epoch_response(self, throttle_time_ms: int = 0) -> FetchResponse:
        log.info(
            "fetch session %d expected epoch %d, request had %d: possible duplicate request",
            self.session.id,
            self.session.epoch,
            self._request_epoch,
        )
        return FetchResponse(
            partitions=[],
            error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH,
            error_message=f"fetch session {self.session.id} moved on to epoch {self.session.epoch}",
            session_id=self.session.id,
            throttle_time_ms=throttle_time_ms,
        )

    def update_and_generate_response(self, parts: list[FetchPartitionResponse]) -> FetchResponse:
        if not self._epoch_still_current():
            return self._stale_epoch_response()
        included: list[FetchPartitionResponse] = []
        for part in parts:
            tp = TopicPartition(part.topic, part.partition)
            cached = self.session.partitions.get(tp)
            if cached is None:
                # Not a partition of this session (the answer was built from partitions_to_read(), so
                # this cannot happen); the fetcher would reject a response naming it.
                continue
            if cached.maybe_update_response_data(part, update=True):
                included.append(part)
                # Sent partitions go to the back, so partitions that did not fit in max_bytes this
                # time come first next time.
                self.session.move_to_end(tp)
        return FetchResponse(partitions=included, session_id=self.session.id)

    def throttled_response(self, throttle_time_ms: int) -> FetchResponse:
        if not self._epoch_still_current():
            return self._stale_epoch_response(throttle_time_ms)
        return FetchResponse(partitions=[], throttle_time_ms=throttle_time_ms, session_id=self.session.id)


# -- the manager ----------------------------------------------------------------------------------


class FetchManager:
    """Turns each FetchRequest into a FetchContext, creating, updating and closing sessions."""

    def __init__(self, cache: FetchSessionCache, time: Time) -> None:
        self.cache = cache
        self.time = time

    def new_context(self, request: FetchRequest, is_from_follower: bool) -> FetchContext:
        requested = _by_topic_partition(request.partitions)
        if is_full_request(request.session_epoch):
            return self._full_context(request, requested, is_from_follower)
        return self._incremental_context(request, requested)

    def _full_context(
        self, request: FetchRequest, requested: dict[TopicPartition, FetchPartition], is_from_follower: bool
    ) -> FetchContext:
        # A full request closes whatever session it names: the fetcher has started over.
        if request.session_id != INVALID_SESSION_ID and self.cache.remove(request.session_id) is not None:
            log.debug("full fetch request closed fetch session %d", request.session_id)
        if request.session_epoch == FINAL_EPOCH:
            return SessionlessFetchContext(requested)
        return FullFetchContext(self.time, self.cache, requested, is_from_follower)

    def _incremental_context(
        self, request: FetchRequest, requested: dict[TopicPartition, FetchPartition]
    ) -> FetchContext:
        session = self.cache.get(request.session_id)
        if session is None:
            return SessionErrorContext(
                ErrorCode.FETCH_SESSION_ID_NOT_FOUND, f"fetch session {request.session_id} not found"
            )
        if session.epoch != request.session_epoch:
            return SessionErrorContext(
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session.id} expected epoch {session.epoch}, got {request.session_epoch}",
            )
        added, updated, removed = session.update(requested.values(), request.forgotten)
        if session.is_empty():
            log.debug("fetch session %d closed: no partitions left after removing %s", session.id, removed)
            self.cache.remove(session.id)
            return SessionlessFetchContext(requested)
        self.cache.touch(session, self.time.milliseconds())
        session.epoch = next_epoch(session.epoch)
        log.debug(
            "incremental fetch on session %d (next epoch %d): added %d, updated %d, removed %d",
            session.id,
            session.epoch,
            len(added),
            len(updated),
            len(removed),
        )
        return IncrementalFetchContext(request.session_epoch, session)
