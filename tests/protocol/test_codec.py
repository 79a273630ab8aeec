"""Codec: every message round-trips, and bad input becomes a clear ProtocolError, never a crash."""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.api_keys import ApiKey
from protocol.codec import Message, from_wire, packb, to_wire, unpackb
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import (
    REQUEST_TYPES,
    RESPONSE_TYPES,
    FetchRequest,
    ProduceRequest,
    RequestDecodeError,
    RequestHeader,
    decode_request_value,
)


def _strategy(tp: Any) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(tp)
    if tp is int:
        return st.integers(0, 2**40)
    if tp is str:
        return st.text(max_size=8)
    if tp is bytes:
        return st.binary(max_size=32)
    if tp is bool:
        return st.booleans()
    if tp is float:
        return st.floats(allow_nan=False)
    if origin is list:
        return st.lists(_strategy(typing.get_args(tp)[0]), max_size=3)
    if origin is dict:
        k, v = typing.get_args(tp)
        return st.dictionaries(_strategy(k), _strategy(v), max_size=3)
    if origin is not None and type(None) in typing.get_args(tp):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return st.none() | _strategy(inner)
    if dataclasses.is_dataclass(tp):
        return _message_strategy(tp)
    raise AssertionError(tp)


# Fields whose value rules leave only a few legal values.
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "acks": st.sampled_from([-1, 0, 1]),
    "isolation_level": st.sampled_from([0, 1]),
    "timestamp": st.sampled_from([-1, -2]),
    "port": st.integers(1, 65535),
}


def _message_strategy(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    fields = {
        f.name: FIELD_VALUES[f.name] if f.name in FIELD_VALUES else _strategy(hints[f.name])
        for f in dataclasses.fields(cls)
    }
    return st.builds(cls, **fields)


def _valid(msg: Message) -> bool:
    """Generated values may break a value rule (an empty topic name, ...); those are not round-trip cases."""
    try:
        from_wire(type(msg), to_wire(msg))
    except ProtocolError:
        return False
    return True


ALL_MESSAGES = sorted({*REQUEST_TYPES.values(), *RESPONSE_TYPES.values()}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", ALL_MESSAGES, ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_message_round_trips_through_msgpack(cls: type[Message], data: st.DataObject) -> None:
    msg = data.draw(_message_strategy(cls).filter(_valid))
    assert from_wire(cls, unpackb(packb(to_wire(msg)))) == msg


def _fetch_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replica_id": -1,
        "max_wait_ms": 100,
        "min_bytes": 1,
        "max_bytes": 1000,
        "partitions": [{"topic": "t", "partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}],
    }
    body.update(overrides)
    return body


def _request(api_key: int, body: Any, version: int = 0) -> Any:
    """A request as the broker sees it: through real msgpack bytes."""
    return unpackb(
        packb([{"api_key": int(api_key), "api_version": version, "correlation_id": 5, "client_id": "c"}, body])
    )


def test_a_wrong_field_type_names_the_field() -> None:
    with pytest.raises(RequestDecodeError) as info:
        decode_request_value(_request(ApiKey.FETCH, _fetch_body(max_bytes="lots")))
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert "FetchRequest.max_bytes: expected int, got str" in str(info.value)


def test_a_bool_is_not_accepted_as_an_int() -> None:
    with pytest.raises(RequestDecodeError, match="expected int, got bool"):
        decode_request_value(_request(ApiKey.FETCH, _fetch_body(min_bytes=True)))


def test_a_nested_wrong_type_names_the_path() -> None:
    body = _fetch_body(partitions=[{"topic": "t", "partition": "zero", "fetch_offset": 0, "partition_max_bytes": 1}])
    with pytest.raises(RequestDecodeError, match=r"partitions\[0\]\.partition"):
        decode_request_value(_request(ApiKey.FETCH, body))


def test_a_missing_required_field_is_named() -> None:
    body = _fetch_body()
    del body["min_bytes"]
    with pytest.raises(RequestDecodeError, match="missing required field 'min_bytes'"):
        decode_request_value(_request(ApiKey.FETCH, body))


def test_negative_sizes_are_rejected() -> None:
    with pytest.raises(RequestDecodeError, match="max_bytes must be >= 0"):
        decode_request_value(_request(ApiKey.FETCH, _fetch_body(max_bytes=-1)))


def test_records_must_be_binary_not_a_string() -> None:
    body = {"acks": 1, "timeout_ms": 10, "partitions": [{"topic": "t", "partition": 0, "records": "text"}]}
    with pytest.raises(RequestDecodeError, match="expected bytes, got str"):
        decode_request_value(_request(ApiKey.PRODUCE, body))


def test_an_unknown_api_key_is_an_answerable_error() -> None:
    with pytest.raises(RequestDecodeError) as info:
        decode_request_value(_request(999, {}))
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert info.value.header.correlation_id == 5
    assert "unknown api key 999" in str(info.value)


def test_an_unsupported_version_is_answered_with_unsupported_version() -> None:
    with pytest.raises(RequestDecodeError) as info:
        decode_request_value(_request(ApiKey.FETCH, _fetch_body(), version=7))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("value", [None, 5, "x", [], [1, 2, 3], [{"api_key": 1}, {}], [{"api_key": "1"}, {}]])
def test_an_unreadable_header_is_a_protocol_error(value: Any) -> None:
    with pytest.raises(ProtocolError):
        decode_request_value(value)


def test_trailing_bytes_after_the_message_are_rejected() -> None:
    with pytest.raises(ProtocolError, match="trailing bytes"):
        unpackb(packb({"a": 1}) + b"\x00")


def test_garbage_bytes_are_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        unpackb(b"\xc1")


def test_unknown_keys_are_ignored_for_forward_compatibility() -> None:
    header, body = decode_request_value(_request(ApiKey.FETCH, _fetch_body(future_field=1)))
    assert isinstance(body, FetchRequest) and isinstance(header, RequestHeader)


def test_produce_acks_must_be_a_kafka_value() -> None:
    body = {"acks": 2, "timeout_ms": 10, "partitions": []}
    with pytest.raises(RequestDecodeError, match="acks"):
        decode_request_value(_request(ApiKey.PRODUCE, body))
    assert ProduceRequest(acks=-1, timeout_ms=0, partitions=[]).acks == -1


def _mutations(value: Any) -> st.SearchStrategy[Any]:
    """A wire value with one field somewhere replaced by a value of another type, or removed."""
    odd = st.sampled_from([None, True, 1, 1.5, "s", b"b", [], {}, [1], ["s"], [{}]])
    if isinstance(value, dict) and value:
        key = st.sampled_from(sorted(value))
        return st.one_of(
            st.builds(lambda k, v: {**value, k: v}, key, odd),
            st.builds(lambda k: {n: v for n, v in value.items() if n != k}, key),
            key.flatmap(lambda k: _mutations(value[k]).map(lambda v: {**value, k: v})),
        )
    if isinstance(value, list) and value:
        return st.builds(lambda v: [v, *value[1:]], _mutations(value[0]))
    return odd


@pytest.mark.parametrize("cls", ALL_MESSAGES, ids=lambda c: c.__name__)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_the_generated_decoder_accepts_exactly_what_the_field_by_field_decoder_accepts(
    cls: type[Message], data: st.DataObject
) -> None:
    from protocol.codec import _decode_struct, _fast_decoder, _Rejected

    wire = to_wire(data.draw(_message_strategy(cls).filter(_valid)))
    value = data.draw(st.just(wire) | _mutations(wire))
    try:
        slow: Any = _decode_struct(cls, value, cls.__name__)
    except ProtocolError as exc:
        slow = exc
    try:
        fast: Any = _fast_decoder(cls)(value)
    except (_Rejected, ProtocolError) as exc:
        fast = exc
    if isinstance(slow, ProtocolError):
        assert isinstance(fast, Exception), f"accepted what the field-by-field decoder refuses: {slow}"
        with pytest.raises(ProtocolError, match=re.escape(str(slow))):
            from_wire(cls, value)
    else:
        assert fast == slow
