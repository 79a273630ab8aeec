"""A scripted in-memory leader for fetcher tests (like Kafka's MockLeaderEndPoint).

Each partition has a leader log (a MemoryLog of real batches) and a leader epoch. Requests are checked
like a real leader does: an older `current_leader_epoch` is FENCED, a newer one UNKNOWN_LEADER_EPOCH; a
fetch offset outside [log start, LEO] is OFFSET_OUT_OF_RANGE. A fetch returns one batch per partition
by default. Hooks inject failures; counters record what was asked. With `sessions=True` it also keeps
server-side fetch sessions and answers incremental requests with only the changed partitions.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from fetcher.leader_end_point import LeaderEndPoint
from protocol.errors import ErrorCode, FencedLeaderEpochError, KafkaError, UnknownLeaderEpochError
from protocol.messages import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionResponse,
    FetchRequest,
    FetchResponse,
    OffsetForLeaderEpochPartition,
    TopicPartition,
)
from tests.fetcher.memory_log import MemoryLog


@dataclass
class LeaderPartition:
    log: MemoryLog
    leader_epoch: int


@dataclass
class _Session:
    partitions: dict[TopicPartition, FetchPartition]
    epoch: int
    sent: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)  # (hw, log start) last sent


class ScriptedLeader(LeaderEndPoint):
    def __init__(self, leader_broker_id: int = 1, *, sessions: bool = False, batches_per_fetch: int = 1) -> None:
        self.report_log_end_offset = False  # FETCH responses carry the leader LEO only when asked
        self.leader_broker_id = leader_broker_id
        self.supports_offsets_for_leader_epoch = True
        self.supports_truncate_on_fetch = False  # True: answer a divergence in FETCH, like a 2.7+ leader
        self.partitions: dict[TopicPartition, LeaderPartition] = {}
        self.batches_per_fetch = batches_per_fetch
        self.sessions_enabled = sessions
        self._sessions: dict[int, _Session] = {}
        self._next_session_id = 1
        # counters
        self.fetch_count = 0
        self.epoch_request_count = 0
        self.latest_offset_count = 0
        self.earliest_offset_count = 0
        self.fetch_requests: list[FetchRequest] = []
        self.epoch_requests: list[list[OffsetForLeaderEpochPartition]] = []
        self.closed = False
        # hooks
        self.fetch_exception: BaseException | None = None  # raised by every fetch while set
        self.epoch_exception: BaseException | None = None
        self.close_exception: BaseException | None = None
        self.fetch_errors: dict[TopicPartition, collections.deque[ErrorCode]] = collections.defaultdict(
            collections.deque
        )
        self.epoch_errors: dict[TopicPartition, collections.deque[ErrorCode]] = collections.defaultdict(
            collections.deque
        )
        self.epoch_answers: dict[TopicPartition, collections.deque[tuple[int, int]]] = collections.defaultdict(
            collections.deque
        )
        self.latest_offset_errors: dict[TopicPartition, collections.deque[ErrorCode]] = collections.defaultdict(
            collections.deque
        )
        self.earliest_offset_errors: dict[TopicPartition, collections.deque[ErrorCode]] = collections.defaultdict(
            collections.deque
        )
        self.before_list_offsets: Callable[[TopicPartition], Awaitable[None] | None] | None = None
        self.fetched = asyncio.Event()  # set by every fetch, for tests that run the loop as a task
        self.top_level_errors: collections.deque[ErrorCode] = collections.deque()
        self.corrupt_next_fetch: set[TopicPartition] = set()
        self.extra_epoch_partition: TopicPartition | None = None
        self.before_fetch_answer: Callable[[FetchRequest], Awaitable[None] | None] | None = None
        self.before_epoch_answer: Callable[[list[OffsetForLeaderEpochPartition]], Awaitable[None] | None] | None = None

    # -- script -----------------------------------------------------------------------------------

    def set_partition(self, tp: TopicPartition, log: MemoryLog, leader_epoch: int) -> LeaderPartition:
        log.become_leader(leader_epoch)
        self.partitions[tp] = LeaderPartition(log, leader_epoch)
        return self.partitions[tp]

    def bump_epoch(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp].leader_epoch = leader_epoch
        self.partitions[tp].log.become_leader(leader_epoch)

    # -- LeaderEndPoint ---------------------------------------------------------------------------

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        self.fetch_count += 1
        self.fetch_requests.append(request)
        self.fetched.set()
        await _maybe_await(self.before_fetch_answer, request)
        if self.fetch_exception is not None:
            raise self.fetch_exception
        if self.top_level_errors:
            return FetchResponse(error_code=self.top_level_errors.popleft())
        if not self.sessions_enabled or request.session_epoch == FINAL_EPOCH:
            return FetchResponse(partitions=self._answer(request.partitions, request.max_bytes))
        if request.session_epoch == INITIAL_EPOCH:
            self._sessions.pop(request.session_id, None)
            wanted = {TopicPartition(p.topic, p.partition): p for p in request.partitions}
            if not wanted:
                return FetchResponse()
            session_id = self._next_session_id
            self._next_session_id += 1
            session = _Session(wanted, epoch=1)
            self._sessions[session_id] = session
            answers = self._answer(list(wanted.values()), request.max_bytes)
            session.sent = {
                TopicPartition(a.topic, a.partition): (a.high_watermark, a.log_start_offset) for a in answers
            }
            return FetchResponse(partitions=answers, session_id=session_id)
        session = self._sessions.get(request.session_id)
        if session is None:
            return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != request.session_epoch:
            return FetchResponse(error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        for p in request.partitions:
            session.partitions[TopicPartition(p.topic, p.partition)] = p
        for f in request.forgotten:
            session.partitions.pop(TopicPartition(f.topic, f.partition), None)
            session.sent.pop(TopicPartition(f.topic, f.partition), None)
        session.epoch += 1
        if not session.partitions:
            del self._sessions[request.session_id]
            return FetchResponse(session_id=INVALID_SESSION_ID)
        answers = []
        for a in self._answer(list(session.partitions.values()), request.max_bytes):
            tp = TopicPartition(a.topic, a.partition)
            changed = a.records or a.error_code or session.sent.get(tp) != (a.high_watermark, a.log_start_offset)
            if changed:
                answers.append(a)
                session.sent[tp] = (a.high_watermark, a.log_start_offset)
        # A partition that got an answer advances its fetch offset in the session (as the real leader does
        # when the follower sends the new offset); here the follower always re-sends changed offsets.
        return FetchResponse(partitions=answers, session_id=request.session_id)

    def session_partitions(self, session_id: int) -> set[TopicPartition]:
        return set(self._sessions[session_id].partitions)

    def _answer(self, requested: list[FetchPartition], max_bytes: int) -> list[FetchPartitionResponse]:
        answers = []
        total = 0
        for p in requested:
            tp = TopicPartition(p.topic, p.partition)
            answer = self._answer_partition(tp, p, room=max_bytes - total, first=total == 0)
            total += len(answer.records)
            answers.append(answer)
        return answers

    def _answer_partition(
        self, tp: TopicPartition, p: FetchPartition, room: int, first: bool
    ) -> FetchPartitionResponse:
        leader = self.partitions.get(tp)
        if leader is None:
            return FetchPartitionResponse(p.topic, p.partition, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        queued = self.fetch_errors.get(tp)
        if queued:
            return FetchPartitionResponse(p.topic, p.partition, error_code=queued.popleft())
        code = self._epoch_check(leader, p.current_leader_epoch)
        mlog = leader.log
        if code is ErrorCode.NONE and not mlog.log_start_offset <= p.fetch_offset <= mlog.log_end_offset:
            code = ErrorCode.OFFSET_OUT_OF_RANGE
        if code is not ErrorCode.NONE:
            return FetchPartitionResponse(p.topic, p.partition, error_code=code)
        if self.supports_truncate_on_fetch and p.last_fetched_epoch >= 0 and p.fetch_offset > mlog.log_start_offset:
            epoch, end = mlog.end_offset_for_epoch(p.last_fetched_epoch)
            if epoch < p.last_fetched_epoch or end < p.fetch_offset:
                return FetchPartitionResponse(
                    p.topic,
                    p.partition,
                    high_watermark=mlog.high_watermark,
                    log_start_offset=mlog.log_start_offset,
                    diverging_epoch=epoch,
                    diverging_end_offset=end,
                )
        records = b""
        if room > 0 or first:
            limit = min(p.partition_max_bytes, max(room, 0))
            records = mlog.read(p.fetch_offset, self.batches_per_fetch, limit)
            if not first and len(records) > room:
                records = b""  # only the first partition of a response may exceed the response cap
        if records and tp in self.corrupt_next_fetch:
            self.corrupt_next_fetch.discard(tp)
            flipped = bytearray(records)
            flipped[-1] ^= 0xFF  # inside the CRC-covered payload
            records = bytes(flipped)
        return FetchPartitionResponse(
            p.topic,
            p.partition,
            high_watermark=mlog.high_watermark,
            log_start_offset=mlog.log_start_offset,
            records=records,
            log_end_offset=mlog.log_end_offset if self.report_log_end_offset else -1,
        )

    async def fetch_epoch_end_offsets(
        self, partitions: list[OffsetForLeaderEpochPartition]
    ) -> dict[TopicPartition, EpochEndOffset]:
        self.epoch_request_count += 1
        self.epoch_requests.append(list(partitions))
        await _maybe_await(self.before_epoch_answer, partitions)
        if self.epoch_exception is not None:
            raise self.epoch_exception
        result: dict[TopicPartition, EpochEndOffset] = {}
        for p in partitions:
            tp = TopicPartition(p.topic, p.partition)
            result[tp] = self._epoch_end_offset(tp, p)
        if self.extra_epoch_partition is not None:
            tp = self.extra_epoch_partition
            result[tp] = EpochEndOffset(tp.topic, tp.partition, leader_epoch=0, end_offset=0)
        return result

    def _epoch_end_offset(self, tp: TopicPartition, p: OffsetForLeaderEpochPartition) -> EpochEndOffset:
        queued = self.epoch_errors.get(tp)
        if queued:
            return EpochEndOffset(tp.topic, tp.partition, error_code=queued.popleft())
        answers = self.epoch_answers.get(tp)
        if answers:
            epoch, end = answers.popleft()
            return EpochEndOffset(tp.topic, tp.partition, leader_epoch=epoch, end_offset=end)
        leader = self.partitions.get(tp)
        if leader is None:
            return EpochEndOffset(tp.topic, tp.partition, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        code = self._epoch_check(leader, p.current_leader_epoch)
        if code is not ErrorCode.NONE:
            return EpochEndOffset(tp.topic, tp.partition, error_code=code)
        epoch, end = leader.log.end_offset_for_epoch(p.leader_epoch)
        return EpochEndOffset(tp.topic, tp.partition, leader_epoch=epoch, end_offset=end)

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> tuple[int, int]:
        self.latest_offset_count += 1
        await _maybe_await(self.before_list_offsets, tp)
        leader = self._list_offsets_check(tp, current_leader_epoch, self.latest_offset_errors)
        return leader.leader_epoch, leader.log.log_end_offset

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> tuple[int, int]:
        self.earliest_offset_count += 1
        await _maybe_await(self.before_list_offsets, tp)
        leader = self._list_offsets_check(tp, current_leader_epoch, self.earliest_offset_errors)
        return leader.leader_epoch, leader.log.log_start_offset

    def _list_offsets_check(
        self,
        tp: TopicPartition,
        current_leader_epoch: int,
        errors: dict[TopicPartition, collections.deque[ErrorCode]],
    ) -> LeaderPartition:
        queued = errors.get(tp)
        if queued:
            raise KafkaError(f"scripted error for {tp}", code=queued.popleft())
        leader = self.partitions[tp]
        code = self._epoch_check(leader, current_leader_epoch)
        if code is ErrorCode.FENCED_LEADER_EPOCH:
            raise FencedLeaderEpochError(f"{tp} epoch {current_leader_epoch} < {leader.leader_epoch}")
        if code is ErrorCode.UNKNOWN_LEADER_EPOCH:
            raise UnknownLeaderEpochError(f"{tp} epoch {current_leader_epoch} > {leader.leader_epoch}")
        return leader

    async def close(self) -> None:
        self.closed = True
        if self.close_exception is not None:
            raise self.close_exception

    @staticmethod
    def _epoch_check(leader: LeaderPartition, current_leader_epoch: int) -> ErrorCode:
        if current_leader_epoch < 0:
            return ErrorCode.NONE
        if current_leader_epoch < leader.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > leader.leader_epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        return ErrorCode.NONE


async def _maybe_await(hook: Callable[..., Awaitable[None] | None] | None, arg: object) -> None:
    if hook is None:
        return
    result = hook(arg)
    if result is not None:
        await result
