"""The console tools' line reader and formatters: Kafka's property names and kcat's format tokens."""

from __future__ import annotations

import json

import pytest

from client.console import (
    CONSUMER_PROPERTIES,
    PRODUCER_PROPERTIES,
    InputLineError,
    LineReader,
    make_formatter,
    parse_properties,
)
from protocol.record_batch import Record


def reader(*props: str) -> LineReader:
    return LineReader(parse_properties(props, PRODUCER_PROPERTIES))


def test_lines_split_into_headers_key_and_value_as_kafka_console_producer_does() -> None:
    r = reader("parse.key=true", "key.separator=:", "parse.headers=true")
    assert r.parse(b"h1:a,h2:b\tuser-1:hello:world") == (b"user-1", b"hello:world", [("h1", b"a"), ("h2", b"b")])
    assert r.parse(b"flag\tk:v") == (b"k", b"v", [("flag", None)])
    assert reader().parse(b"a\tb") == (None, b"a\tb", [])


def test_a_line_without_the_separator_names_the_line() -> None:
    with pytest.raises(InputLineError, match=r"line 3: no key separator ':' \(parse.key=true\)"):
        list(reader("parse.key=true", "key.separator=:").records([b"a:1\n", b"b:2\n", b"c\n"]))


def test_the_null_marker_makes_a_null_key_or_value() -> None:
    assert reader("parse.key=true", "null.marker=NULL").parse(b"NULL\tNULL") == (None, None, [])


def test_an_unknown_property_is_refused_with_the_close_name() -> None:
    with pytest.raises(ValueError, match=r"unknown property 'print.kye'; did you mean 'print.key'\?"):
        parse_properties(["print.kye=true"], CONSUMER_PROPERTIES)
    with pytest.raises(ValueError, match="expects true or false"):
        parse_properties(["print.key=yes please"], CONSUMER_PROPERTIES)


RECORD = Record(offset=7, timestamp=1000, key=b"k", value=b"v", headers=(("a", b"1"), ("b", None)))


def test_the_default_formatter_prints_like_kafkas() -> None:
    props = parse_properties(
        ["print.key=true", "print.partition=true", "print.offset=true", "print.headers=true", "key.separator=|"],
        CONSUMER_PROPERTIES,
    )
    assert make_formatter(props, None, False, False)("t", 2, RECORD) == b"Partition:2|Offset:7|a:1,b:null|k|v\n"
    plain = make_formatter(dict(CONSUMER_PROPERTIES), None, False, False)
    assert plain("t", 2, Record(7, 1000, None, None)) == b"null\n"


def test_the_format_string_takes_kcats_tokens() -> None:
    fmt = make_formatter(dict(CONSUMER_PROPERTIES), "%t/%p@%o %T %k(%K)=%s(%S) [%h] 100%%\\n", False, False)
    assert fmt("t", 2, RECORD) == b"t/2@7 1000 k(1)=v(1) [a=1,b=] 100%\n"
    with pytest.raises(ValueError, match="unknown token %x"):
        make_formatter(dict(CONSUMER_PROPERTIES), "%x", False, False)


def test_json_lines_carry_every_field_and_bytes_that_are_not_utf8_as_base64() -> None:
    line = make_formatter(dict(CONSUMER_PROPERTIES), None, True, False)("t", 2, Record(7, 1000, b"\xff", b"v"))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "topic": "t",
        "partition": 2,
        "offset": 7,
        "timestamp": 1000,
        "timestamp_type": "CreateTime",
        "key": {"base64": "/w=="},
        "value": "v",
        "headers": [],
    }
