"""The console tools' record formats: lines in (`produce`), text or JSON out (`consume`).

The producer side reads lines the way Kafka's console producer (`LineMessageReader`) does, under the
same property names: with `parse.headers=true` a line starts with headers up to `headers.delimiter`,
with `parse.key=true` the key runs up to `key.separator`, and the rest is the value. The consumer side
prints the way Kafka's `DefaultMessageFormatter` does (`print.key=true`, ...), or through a kcat-style
`--format` string, or as one JSON object per record.
"""

from __future__ import annotations

import base64
import difflib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, BinaryIO

from protocol.record_batch import CREATE_TIME, LOG_APPEND_TIME, Header, Record

TIMESTAMP_TYPE_NAMES = {CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime"}  # as Kafka's tools print them

PRODUCER_PROPERTIES = {
    "parse.key": "false",
    "key.separator": "\t",
    "parse.headers": "false",
    "headers.delimiter": "\t",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.marker": "",
}
CONSUMER_PROPERTIES = {
    "print.timestamp": "false",
    "print.partition": "false",
    "print.offset": "false",
    "print.headers": "false",
    "print.key": "false",
    "print.value": "true",
    "key.separator": "\t",
    "line.separator": "\n",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.literal": "null",
}

ProducerRecord = tuple[bytes | None, bytes | None, Sequence[Header]]
Formatter = Callable[[str, int, Record], bytes]


class InputLineError(ValueError):
    """A line the reader cannot split as its properties say (no key separator, ...)."""


def parse_properties(items: Iterable[str], known: dict[str, str]) -> dict[str, str]:
    """NAME=VALUE items over the defaults in `known`; an unknown name is an error with a close match."""
    props = dict(known)
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--property expects NAME=VALUE, got {item!r}")
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.7)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(known))})"
            raise ValueError(f"unknown property {name!r}{hint}")
        if name.startswith(("parse.", "print.")) and value.lower() not in ("true", "false"):
            raise ValueError(f"property {name} expects true or false, got {value!r}")
        props[name] = _unescape(value)
    return props


def _flag(props: dict[str, str], name: str) -> bool:
    return props[name].lower() == "true"


def _unescape(text: str) -> str:
    """`\\t` and `\\n` typed on a shell command line mean a tab and a newline, as in Kafka's tools."""
    return text.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")


def parse_header(item: str) -> Header:
    name, sep, value = item.partition("=")
    if not sep or not name:
        raise ValueError(f"--header expects NAME=VALUE, got {item!r}")
    return name, value.encode()


class LineReader:
    """Turns input lines into (key, value, headers) as kafka-console-producer does."""

    def __init__(self, props: dict[str, str], key: bytes | None = None, headers: Sequence[Header] = ()) -> None:
        self.parse_key = _flag(props, "parse.key")
        self.parse_headers = _flag(props, "parse.headers")
        self.key_separator = props["key.separator"].encode()
        self.headers_delimiter = props["headers.delimiter"].encode()
        self.headers_separator = props["headers.separator"].encode()
        self.header_key_separator = props["headers.key.separator"].encode()
        self.null_marker = props["null.marker"].encode() or None
        self.key = key
        self.headers = list(headers)

    def records(self, lines: BinaryIO | Iterable[bytes]) -> Iterator[ProducerRecord]:
        for number, raw in enumerate(lines, 1):
            yield self.parse(raw.rstrip(b"\n").rstrip(b"\r"), number)

    def parse(self, line: bytes, number: int = 1) -> ProducerRecord:
        headers = list(self.headers)
        rest = line
        if self.parse_headers:
            part, sep, rest = line.partition(self.headers_delimiter)
            if not sep:
                raise InputLineError(
                    f"line {number}: no headers delimiter {self.headers_delimiter.decode()!r} (parse.headers=true)"
                )
            headers += self._headers(part, number)
        key = self.key
        if self.parse_key:
            raw_key, sep, rest = rest.partition(self.key_separator)
            if not sep:
                raise InputLineError(
                    f"line {number}: no key separator {self.key_separator.decode()!r} (parse.key=true)"
                )
            key = self._null(raw_key)
        return key, self._null(rest), headers

    def _null(self, data: bytes) -> bytes | None:
        return None if self.null_marker is not None and data == self.null_marker else data

    def _headers(self, part: bytes, number: int) -> list[Header]:
        out: list[Header] = []
        if not part or part == self.null_marker:
            return out
        for item in part.split(self.headers_separator):
            name, sep, value = item.partition(self.header_key_separator)
            if not name:
                raise InputLineError(f"line {number}: a header without a name in {part.decode(errors='replace')!r}")
            out.append((name.decode(errors="replace"), self._null(value) if sep else None))
        return out


def make_formatter(props: dict[str, str], fmt: str | None, as_json: bool, print_offsets: bool) -> Formatter:
    if sum(bool(x) for x in (fmt, as_json)) > 1:
        raise ValueError("give --format or --json, not both")
    if as_json:
        return _json_line
    if fmt is not None:
        return _kcat_formatter(fmt)
    return _default_formatter(props, print_offsets)


def _default_formatter(props: dict[str, str], print_offsets: bool) -> Formatter:
    """Kafka's DefaultMessageFormatter: CreateTime:, Partition:, Offset:, headers, key, value."""
    sep = props["key.separator"].encode()
    end = props["line.separator"].encode()
    null = props["null.literal"].encode()
    hsep = props["headers.separator"].encode()
    hkey = props["headers.key.separator"].encode()
    flags = {name: _flag(props, name) for name in props if name.startswith("print.")}

    def fmt(topic: str, partition: int, rec: Record) -> bytes:
        parts: list[bytes] = []
        if flags["print.timestamp"]:
            parts.append(f"{TIMESTAMP_TYPE_NAMES[rec.timestamp_type]}:{rec.timestamp}".encode())
        if flags["print.partition"]:
            parts.append(f"Partition:{partition}".encode())
        if flags["print.offset"]:
            parts.append(f"Offset:{rec.offset}".encode())
        if flags["print.headers"]:
            parts.append(
                hsep.join(n.encode() + hkey + (null if v is None else v) for n, v in rec.headers) or b"NO_HEADERS"
            )
        if flags["print.key"]:
            parts.append(null if rec.key is None else rec.key)
        if flags["print.value"]:
            parts.append(null if rec.value is None else rec.value)
        # --print-offsets, minibroker's older shorthand: partition and offset first, tab separated.
        prefix = f"{partition}\t{rec.offset}\t".encode() if print_offsets else b""
        return prefix + sep.join(parts) + end

    return fmt


def _kcat_formatter(fmt: str) -> Formatter:
    """kcat's -f: %t %p %o %T %k %K %s %S %h %%, with \\n \\t \\r \\\\ escapes; a null prints as empty."""
    tokens: list[str | Callable[[str, int, Record], bytes]] = []
    fields: dict[str, Callable[[str, int, Record], bytes]] = {
        "t": lambda t, p, r: t.encode(),
        "p": lambda t, p, r: str(p).encode(),
        "o": lambda t, p, r: str(r.offset).encode(),
        "T": lambda t, p, r: str(r.timestamp).encode(),
        "k": lambda t, p, r: r.key or b"",
        "K": lambda t, p, r: str(-1 if r.key is None else len(r.key)).encode(),
        "s": lambda t, p, r: r.value or b"",
        "S": lambda t, p, r: str(-1 if r.value is None else len(r.value)).encode(),
        "h": lambda t, p, r: b",".join(n.encode() + b"=" + (v or b"") for n, v in r.headers),
    }
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
    i = 0
    literal = ""
    while i < len(fmt):
        c = fmt[i]
        nxt = fmt[i + 1] if i + 1 < len(fmt) else ""
        if c == "%" and nxt in fields:
            if literal:
                tokens.append(literal)
                literal = ""
            tokens.append(fields[nxt])
            i += 2
        elif c == "%" and nxt == "%":
            literal += "%"
            i += 2
        elif c == "%":
            raise ValueError(f"--format: unknown token %{nxt} (known: %t %p %o %T %k %K %s %S %h %%)")
        elif c == "\\" and nxt in escapes:
            literal += escapes[nxt]
            i += 2
        else:
            literal += c
            i += 1
    if literal:
        tokens.append(literal)
    encoded = [t.encode() if isinstance(t, str) else t for t in tokens]

    def format_record(topic: str, partition: int, rec: Record) -> bytes:
        return b"".join(t if isinstance(t, bytes) else t(topic, partition, rec) for t in encoded)

    return format_record


def _text(data: bytes | None) -> Any:
    """A key, value or header value for JSON: a string when it is UTF-8, else {"base64": ...}."""
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def _json_line(topic: str, partition: int, rec: Record) -> bytes:
    doc = {
        "topic": topic,
        "partition": partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "timestamp_type": TIMESTAMP_TYPE_NAMES[rec.timestamp_type],
        "key": _text(rec.key),
        "value": _text(rec.value),
        "headers": [[name, _text(value)] for name, value in rec.headers],
    }
    return json.dumps(doc, ensure_ascii=False).encode() + b"\n"
