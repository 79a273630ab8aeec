"""Client side of incremental fetch sessions (KIP-227), as a follower uses them toward one leader.

How this works
--------------
`FetchMetadata(session_id, epoch)` says what kind of request comes next:

    (0, 0)       INITIAL: a full request asking the leader to create a session
    (id, 0)      full request closing session `id` and asking for a new one (after an error)
    (id, n > 0)  incremental request number n in session `id`
    (0, -1)      sessionless full request (FINAL_EPOCH)

Each fetch, the caller adds the partitions it wants (with their current fetch positions) to a
`Builder`. A full build sends everything. An incremental build compares with the session's partitions
and sends only added or changed partitions, plus the ones to forget. The leader's incremental
response omits partitions with nothing new, so the caller maps a response back through
`FetchRequestData.session_partitions`, not through what was sent.

`handle_response` checks the response (full: exactly the session's partitions; incremental: a subset)
and advances the metadata: FETCH_SESSION_ID_NOT_FOUND → INITIAL; any other top-level error or a
malformed response → a full request that closes the old session; a network error → the same.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from protocol.errors import ErrorCode
from protocol.messages import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchPartition,
    FetchResponse,
    TopicPartition,
)

log = logging.getLogger(__name__)

_MAX_EPOCH = 2**31 - 1


def next_epoch(prev_epoch: int) -> int:
    """The epoch after `prev_epoch`: FINAL stays FINAL, and the counter wraps to 1, never to 0."""
    if prev_epoch < 0:
        return FINAL_EPOCH
    if prev_epoch == _MAX_EPOCH:
        return 1
    return prev_epoch + 1


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def next_close_existing_attempt_new(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    def next_incremental(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, next_epoch(self.epoch))

    @staticmethod
    def new_incremental(session_id: int) -> FetchMetadata:
        return FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))


INITIAL_METADATA = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
LEGACY_METADATA = FetchMetadata(INVALID_SESSION_ID, FINAL_EPOCH)


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """One built request: what to send, what to forget, and every partition the session now holds."""

    to_send: dict[TopicPartition, FetchPartition]
    to_forget: list[TopicPartition]
    session_partitions: dict[TopicPartition, FetchPartition]
    metadata: FetchMetadata = field(default=INITIAL_METADATA)


class FetchSessionHandler:
    """Tracks one session with one leader. Invariant: `session_partitions` is what the leader holds
    for us after our last built request was applied."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self._next_metadata = INITIAL_METADATA
        self._session_partitions: dict[TopicPartition, FetchPartition] = {}

    @property
    def next_metadata(self) -> FetchMetadata:
        return self._next_metadata

    @property
    def session_id(self) -> int:
        return self._next_metadata.session_id

    def session_topic_partitions(self) -> set[TopicPartition]:
        return set(self._session_partitions)

    def new_builder(self) -> Builder:
        return Builder(self)

    # -- responses --------------------------------------------------------------------------------

    def handle_response(self, response: FetchResponse) -> bool:
        """Advance the session for `response`; False if it cannot be processed (error or malformed)."""
        if response.error_code != ErrorCode.NONE:
            log.info(
                "node %d could not process fetch %s: error %d",
                self.node_id,
                self._next_metadata,
                response.error_code,
            )
            if response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self._next_metadata = INITIAL_METADATA
            else:
                self._next_metadata = self._next_metadata.next_close_existing_attempt_new()
            return False
        returned = {TopicPartition(p.topic, p.partition) for p in response.partitions}
        if self._next_metadata.is_full:
            problem = self.verify_full_fetch_response_partitions(returned)
            if problem is not None:
                log.info("node %d sent an invalid full fetch response: %s", self.node_id, problem)
                self._next_metadata = INITIAL_METADATA
                return False
            if response.session_id == INVALID_SESSION_ID:
                self._next_metadata = INITIAL_METADATA  # the leader did not create a session
            else:
                self._next_metadata = FetchMetadata.new_incremental(response.session_id)
            return True
        problem = self.verify_incremental_fetch_response_partitions(returned)
        if problem is not None:
            log.info("node %d sent an invalid incremental fetch response: %s", self.node_id, problem)
            self._next_metadata = self._next_metadata.next_close_existing_attempt_new()
            return False
        if response.session_id == INVALID_SESSION_ID:
            self._next_metadata = INITIAL_METADATA  # the leader closed the session
        else:
            self._next_metadata = self._next_metadata.next_incremental()
        return True

    def handle_error(self, exc: BaseException) -> None:
        """A network error: the next request closes the session and asks for a new one."""
        log.info("error sending fetch %s to node %d: %r", self._next_metadata, self.node_id, exc)
        self._next_metadata = self._next_metadata.next_close_existing_attempt_new()

    def notify_close(self) -> None:
        self._next_metadata = FetchMetadata(self._next_metadata.session_id, FINAL_EPOCH)

    def verify_full_fetch_response_partitions(self, returned: set[TopicPartition]) -> str | None:
        expected = set(self._session_partitions)
        omitted = expected - returned
        extra = returned - expected
        if not omitted and not extra:
            return None
        return f"omitted={sorted(map(str, omitted))} extra={sorted(map(str, extra))}"

    def verify_incremental_fetch_response_partitions(self, returned: set[TopicPartition]) -> str | None:
        extra = returned - set(self._session_partitions)
        return None if not extra else f"extra={sorted(map(str, extra))}"


class Builder:
    """Collects the partitions wanted in the next fetch; `build()` diffs them against the session."""

    def __init__(self, handler: FetchSessionHandler) -> None:
        self._handler = handler
        self._next: dict[TopicPartition, FetchPartition] = {}
        self._built = False

    def add(self, tp: TopicPartition, data: FetchPartition) -> None:
        self._next[tp] = data

    def build(self) -> FetchRequestData:
        if self._built:
            raise RuntimeError("a fetch session builder builds once")
        self._built = True
        handler = self._handler
        metadata = handler.next_metadata
        if metadata.is_full:
            handler._session_partitions = dict(self._next)
            return FetchRequestData(dict(self._next), [], dict(self._next), metadata)

        session = handler._session_partitions
        wanted = self._next
        to_send: dict[TopicPartition, FetchPartition] = {}
        to_forget: list[TopicPartition] = []
        for tp in list(session):
            if tp not in wanted:
                del session[tp]
                to_forget.append(tp)
        for tp, data in wanted.items():
            if session.get(tp) != data:
                to_send[tp] = data
            session[tp] = data
        return FetchRequestData(to_send, to_forget, dict(session), metadata)
