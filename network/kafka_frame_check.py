"""A strict walk over a Kafka request before it is decoded: every length inside the frame, nothing after it,
no negative count, and at most so many entries.

How this works
--------------
kafka-python's decoders (network/kafka_wire.py decodes with them) trust the frame: a string whose length
runs past the end decodes short, a count of -5 reads as an empty array, a null where the schema has
none reads as None, and bytes after the last field are ignored. Kafka's own parser (the generated `read`
methods over a `ByteBufferAccessor`) refuses all of these, and so does this walk, before any object is
built:

* every string, bytes and records length is -1 (null, only where the schema allows null in that version)
  or a length that ends inside the frame;
* every array count is -1 (null, where allowed) or a count the rest of the frame can hold (each entry
  takes at least one byte); the counts of every array of the request are summed as they are met, and the
  walk stops with `EntryLimitError` as soon as the sum passes the caller's limit, so a request of two
  million entries costs only as much walking as the limit allows;
* a nullable struct's marker is 1 or -1; tagged fields (flexible versions) are a count, then tag, size and
  that many bytes each, inside the frame;
* the walk ends exactly at the end of the frame.

The walker of each (request, version) is generated once from the same schema kafka-python decodes with
(`_struct`, its fields and their versions), as flat Python like kafka-python's own decoders: no dispatch
per field, about a third of a decode's cost. Nothing here touches a socket.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import error as StructError
from struct import unpack_from
from typing import Any

from protocol.errors import ProtocolError

Walker = Callable[[bytes | bytearray | memoryview, int, int], int]


class MalformedRequestError(ProtocolError):
    """A length, count or marker the frame cannot hold, or bytes after the request."""


class EntryLimitError(ProtocolError):
    """More array entries in all than the request may have; nothing was decoded."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} entries (topics, partitions, groups, names, ...) in one request")
        self.limit = limit


class _Codegen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.counter = 0

    def var(self, prefix: str) -> str:
        self.counter += 1
        return f"_{prefix}{self.counter}"

    def emit(self, indent: str, line: str) -> None:
        self.lines.append(indent + line)


_FIXED = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8, "bool": 1, "uuid": 16}
_LENGTH_OF = {"string": (">h", 2), "bytes": (">i", 4), "records": (">i", 4)}


def _nullable(field: Any, version: int) -> bool:
    return bool(field.nullable_for_version_q(version))


def _emit_uvarint(cg: _Codegen, indent: str, target: str) -> None:
    """An unsigned varint of at most 5 bytes into `target` (data[pos] past the end raises IndexError)."""
    shift = cg.var("sh")
    byte = cg.var("b")
    cg.emit(indent, f"{target} = 0")
    cg.emit(indent, f"{shift} = 0")
    cg.emit(indent, "while True:")
    cg.emit(indent, f"    {byte} = data[pos]")
    cg.emit(indent, "    pos += 1")
    cg.emit(indent, f"    {target} |= ({byte} & 0x7F) << {shift}")
    cg.emit(indent, f"    if {byte} < 0x80: break")
    cg.emit(indent, f"    {shift} += 7")
    cg.emit(indent, f"    if {shift} > 28: raise _Malformed('a varint longer than 5 bytes')")


def _emit_length(cg: _Codegen, indent: str, kind: str, compact: bool, target: str) -> None:
    if compact:
        _emit_uvarint(cg, indent, target)
        cg.emit(indent, f"{target} -= 1")
    else:
        fmt, size = _LENGTH_OF[kind] if kind in _LENGTH_OF else (">i", 4)
        cg.emit(indent, f'{target} = unpack_from("{fmt}", data, pos)[0]')
        cg.emit(indent, f"pos += {size}")


def _emit_null_check(cg: _Codegen, indent: str, length: str, nullable: bool, what: str) -> None:
    """After it: `length` is >= 0 (null jumps over what follows through the caller's `if`)."""
    if nullable:
        cg.emit(indent, f"if {length} < -1: raise _Malformed('{what}: length ' + str({length}))")
    else:
        cg.emit(indent, f"if {length} < 0: raise _Malformed('{what}: length ' + str({length}) + ' (not nullable)')")


def _emit_simple(cg: _Codegen, indent: str, type_str: str, nullable: bool, compact: bool, what: str) -> None:
    if type_str in _FIXED:
        cg.emit(indent, f"pos += {_FIXED[type_str]}")
        return
    if type_str == "bitfield":
        cg.emit(indent, "pos += 4")
        return
    if type_str not in _LENGTH_OF:
        raise NotImplementedError(f"no walker for field type {type_str}")
    length = cg.var("ln")
    _emit_length(cg, indent, type_str, compact, length)
    _emit_null_check(cg, indent, length, nullable, what)
    cg.emit(indent, f"if {length} > 0:")
    cg.emit(indent, f"    pos += {length}")
    cg.emit(indent, f"    if pos > end: raise _Malformed('{what}: ' + str({length}) + ' bytes run past the frame')")


def _min_size(field: Any, version: int, compact: bool, tagged: bool) -> int:
    """The fewest bytes one value of `field` takes in `version` (an array entry takes at least this)."""
    if field.is_struct_array() or field.is_array():
        return 1 if compact else 4
    if field.is_struct():
        size = 1 if _nullable(field, version) else 0
        size += sum(_min_size(f, version, compact, tagged) for f in field.untagged_fields(version))
        return size + (1 if tagged else 0)
    type_str = field.type_str
    if type_str in _FIXED:
        return _FIXED[type_str]
    if type_str == "bitfield":
        return 4
    return 1 if compact else _LENGTH_OF[type_str][1]


def _emit_tagged_fields(cg: _Codegen, indent: str, what: str) -> None:
    count = cg.var("tc")
    _emit_uvarint(cg, indent, count)
    cg.emit(indent, f"if {count} > end - pos: raise _Malformed('{what}: ' + str({count}) + ' tagged fields')")
    loop = cg.var("t")
    cg.emit(indent, f"for {loop} in range({count}):")
    tag = cg.var("tag")
    size = cg.var("tsz")
    _emit_uvarint(cg, indent + "    ", tag)
    _emit_uvarint(cg, indent + "    ", size)
    cg.emit(indent, f"    pos += {size}")
    cg.emit(indent, f"    if pos > end: raise _Malformed('{what}: a tagged field runs past the frame')")


def _emit_struct_body(cg: _Codegen, indent: str, struct: Any, version: int, compact: bool, tagged: bool) -> None:
    for field in struct.untagged_fields(version):
        _emit_field(cg, indent, field, version, compact, tagged)
    if tagged:
        _emit_tagged_fields(cg, indent, struct.name)


def _emit_field(cg: _Codegen, indent: str, field: Any, version: int, compact: bool, tagged: bool) -> None:
    what = field.name
    if field.is_struct_array() or field.is_array():
        count = cg.var("n")
        _emit_length(cg, indent, "array", compact, count)
        _emit_null_check(cg, indent, count, _nullable(field, version), what)
        cg.emit(indent, f"if {count} > 0:")
        inner = indent + "    "
        element = field.array_of
        least = max(_min_size(element, version, compact, tagged), 1)
        cg.emit(inner, f"if {count} * {least} > end - pos:")
        cg.emit(inner, f"    raise _Malformed('{what}: ' + str({count}) + ' entries cannot fit in the frame')")
        cg.emit(inner, f"entries += {count}")
        cg.emit(inner, "if entries > limit: raise _Limit(limit)")
        if element.is_struct():
            loop = cg.var("i")
            cg.emit(inner, f"for {loop} in range({count}):")
            _emit_struct_body(cg, inner + "    ", element, version, compact, tagged)
        elif element.type_str in _FIXED:
            cg.emit(inner, f"pos += {count} * {_FIXED[element.type_str]}")
        else:
            loop = cg.var("i")
            cg.emit(inner, f"for {loop} in range({count}):")
            _emit_simple(cg, inner + "    ", element.type_str, False, compact, what)
        return
    if field.is_struct():
        if _nullable(field, version):
            marker = cg.var("m")
            cg.emit(indent, f"{marker} = data[pos]")
            cg.emit(indent, "pos += 1")
            cg.emit(indent, f"if {marker} not in (1, 0xFF): raise _Malformed('{what}: null marker ' + str({marker}))")
            cg.emit(indent, f"if {marker} == 1:")
            _emit_struct_body(cg, indent + "    ", field, version, compact, tagged)
        else:
            _emit_struct_body(cg, indent, field, version, compact, tagged)
        return
    _emit_simple(cg, indent, field.type_str, _nullable(field, version), compact, what)


def build_walker(request_class: Any, version: int) -> Walker:
    """The walker of `request_class` (a kafka-python request) in `version`: `walk(frame, body_start, limit)`
    returns the entries counted, or raises MalformedRequestError / EntryLimitError."""
    flexible = bool(request_class.flexible_version_q(version))
    cg = _Codegen()
    cg.lines.append("def walk(data, pos, limit):")
    indent = "    "
    cg.emit(indent, "end = len(data)")
    cg.emit(indent, "entries = 0")
    _emit_struct_body(cg, indent, request_class._struct, version, flexible, flexible)
    cg.emit(indent, "if pos != end: raise _Malformed(str(end - pos) + ' bytes after the request')")
    cg.emit(indent, "return entries")
    namespace: dict[str, Any] = {
        "unpack_from": unpack_from,
        "_Malformed": MalformedRequestError,
        "_Limit": EntryLimitError,
    }
    exec(compile("\n".join(cg.lines), f"<walker:{request_class.__name__}_v{version}>", "exec"), namespace)  # noqa: S102
    walker: Walker = namespace["walk"]
    return walker


_WALKERS: dict[tuple[type, int], Walker] = {}


def _build_header_tags() -> Callable[[bytes | bytearray | memoryview, int, int], int]:
    cg = _Codegen()
    cg.lines.append("def tags(data, pos, end):")
    _emit_tagged_fields(cg, "    ", "header")
    cg.emit("    ", "return pos")
    namespace: dict[str, Any] = {"_Malformed": MalformedRequestError}
    exec(compile("\n".join(cg.lines), "<walker:header>", "exec"), namespace)  # noqa: S102
    tags: Callable[[bytes | bytearray | memoryview, int, int], int] = namespace["tags"]
    return tags


_HEADER_TAGS = _build_header_tags()


def header_end(frame: bytes | bytearray | memoryview, flexible: bool) -> int:
    """Where the request header (v1: api key, version, correlation id, client id; v2, for a flexible
    version: the same and tagged fields) ends. The client id is never compact, as in Kafka."""
    try:
        (client_id,) = unpack_from(">h", frame, 8)
        if client_id < -1:
            raise MalformedRequestError(f"client_id: length {client_id}")
        position = 10 + max(client_id, 0)
        if position > len(frame):
            raise MalformedRequestError(f"client_id: {client_id} bytes run past the frame")
        return _HEADER_TAGS(frame, position, len(frame)) if flexible else position
    except (StructError, IndexError):
        raise MalformedRequestError("the request header runs past the frame") from None


def check_request(request_class: Any, version: int, frame: bytes | bytearray | memoryview, limit: int) -> int:
    """Walk `frame` (a whole Kafka request, header included); the number of entries in it."""
    flexible = bool(request_class.flexible_version_q(version))
    start = header_end(frame, flexible)
    walker = _WALKERS.get((request_class, version))
    if walker is None:
        walker = _WALKERS[(request_class, version)] = build_walker(request_class, version)
    try:
        return walker(frame, start, limit)
    except (StructError, IndexError):
        raise MalformedRequestError(f"{request_class.__name__} v{version} runs past the end of its frame") from None
