"""Client side of fetch sessions: full then incremental requests, forgetting, and error resets."""

from __future__ import annotations

from fetcher.fetch_session_handler import FetchMetadata, FetchSessionHandler, next_epoch
from protocol.errors import ErrorCode
from protocol.messages import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchPartition,
    FetchPartitionResponse,
    FetchResponse,
    TopicPartition,
)

FOO0 = TopicPartition("foo", 0)
FOO1 = TopicPartition("foo", 1)
BAR0 = TopicPartition("bar", 0)


def data(tp: TopicPartition, offset: int) -> FetchPartition:
    return FetchPartition(tp.topic, tp.partition, offset, 1024)


def response(session_id: int, *tps: TopicPartition, error: ErrorCode = ErrorCode.NONE) -> FetchResponse:
    return FetchResponse(
        partitions=[FetchPartitionResponse(tp.topic, tp.partition) for tp in tps],
        error_code=error,
        session_id=session_id,
    )


def build(handler: FetchSessionHandler, *items: tuple[TopicPartition, int]):  # type: ignore[no-untyped-def]
    builder = handler.new_builder()
    for tp, offset in items:
        builder.add(tp, data(tp, offset))
    return builder.build()


def test_first_request_is_full_and_the_next_incremental_sends_only_changes() -> None:
    handler = FetchSessionHandler(1)
    full = build(handler, (FOO0, 0), (FOO1, 10))
    assert full.metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
    assert list(full.to_send) == [FOO0, FOO1] and full.to_forget == []
    assert handler.handle_response(response(123, FOO0, FOO1))
    incremental = build(handler, (FOO0, 5), (FOO1, 10))
    assert incremental.metadata == FetchMetadata(123, 1)
    assert list(incremental.to_send) == [FOO0]
    assert set(incremental.session_partitions) == {FOO0, FOO1}
    assert handler.handle_response(response(123, FOO0))  # FOO1 omitted: nothing new for it
    assert handler.next_metadata == FetchMetadata(123, 2)


def test_incremental_request_adds_new_partitions_and_forgets_dropped_ones() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, 0), (FOO1, 0))
    handler.handle_response(response(7, FOO0, FOO1))
    request = build(handler, (FOO1, 0), (BAR0, 3))
    assert list(request.to_send) == [BAR0]
    assert request.to_forget == [FOO0]
    assert set(request.session_partitions) == {FOO1, BAR0}
    assert handler.session_topic_partitions() == {FOO1, BAR0}


def test_sessionless_leader_keeps_every_request_full() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, 0))
    assert handler.handle_response(response(INVALID_SESSION_ID, FOO0))
    assert handler.next_metadata.is_full
    assert list(build(handler, (FOO0, 0)).to_send) == [FOO0]


def test_full_response_must_hold_exactly_the_requested_partitions() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, 0), (FOO1, 0))
    assert not handler.handle_response(response(9, FOO0))
    assert handler.next_metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


def test_incremental_response_with_an_unknown_partition_closes_the_session() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, 0))
    handler.handle_response(response(9, FOO0))
    build(handler, (FOO0, 1))
    assert not handler.handle_response(response(9, FOO0, BAR0))
    assert handler.next_metadata == FetchMetadata(9, INITIAL_EPOCH)


def test_session_id_not_found_starts_over() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, 0))
    handler.handle_response(response(9, FOO0))
    build(handler, (FOO0, 1))
    assert not handler.handle_response(response(0, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    assert handler.next_metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)
    assert list(build(handler, (FOO0, 1)).to_send) == [FOO0]


def test_invalid_session_epoch_and_other_errors_close_the_session_with_a_full_request() -> None:
    for error in (ErrorCode.INVALID_FETCH_SESSION_EPOCH, ErrorCode.UNKNOWN_SERVER_ERROR):
        handler = FetchSessionHandler(1)
        build(handler, (FOO0, 0), (FOO1, 0))
        handler.handle_response(response(9, FOO0, FOO1))
        build(handler, (FOO0, 1), (FOO1, 0))
        assert not handler.handle_response(response(0, error=error))
        again = build(handler, (FOO0, 1), (FOO1, 0))
        assert again.metadata == FetchMetadata(9, INITIAL_EPOCH)
        assert list(again.to_send) == [FOO0, FOO1]


def test_network_error_makes_the_next_request_full() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, 0))
    handler.handle_response(response(9, FOO0))
    build(handler, (FOO0, 1))
    handler.handle_error(ConnectionError("reset"))
    assert handler.next_metadata == FetchMetadata(9, INITIAL_EPOCH)


def test_leader_closing_the_session_in_an_incremental_response_starts_over() -> None:
    handler = FetchSessionHandler(1)
    build(handler, (FOO0, 0))
    handler.handle_response(response(9, FOO0))
    request = build(handler)
    assert request.to_forget == [FOO0]
    assert handler.handle_response(response(INVALID_SESSION_ID))
    assert handler.next_metadata == FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


def test_session_epochs_wrap_to_one_and_final_stays_final() -> None:
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
