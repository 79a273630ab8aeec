"""The msgpack codec: typed dataclasses on both sides, strict validation on the way in.

How this works
--------------
Every message is a frozen-free `@dataclass(slots=True)` whose field annotations are the schema: `int`,
`str`, `bytes`, `bool`, `float`, `T | None`, `list[T]` and nested message dataclasses. On first use a class
is compiled into a list of field codecs; encoding turns an instance into a msgpack map keyed by field
name, decoding checks every field's type (bool is not an int, bytes must be msgpack `bin`), fills
defaults for absent optional fields, ignores unknown keys (forward compatibility) and finally calls the
class's `validate()` for value rules (no negative sizes, ...). Any failure raises `ProtocolError` with
the path of the offending field, e.g. `FetchRequest.partitions[2].fetch_offset: expected int, got str`.

Hot path: the first time a class is used its field list is also turned into two straight-line Python
functions, generated as source (as `dataclasses` builds `__init__`): a decoder that checks each field's
type inline and calls the class with positional arguments, and an encoder that builds the map in one
dict display. They hold no loops over field descriptions and build no path strings, so a message costs
a few dict lookups and type checks per field. The decoder does not say what was wrong: on any failure
`from_wire` decodes again with the field-by-field decoders above, which name the field; the accepted
values and the error messages are those of the field-by-field path.

A frame body is one msgpack value: `[header, body]` for requests, `[header, body]` for responses
(docs/protocol.md has the details and example bytes). Trailing bytes after that value are an error.
"""

from __future__ import annotations

import dataclasses
import threading
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import msgpack

from protocol.errors import ProtocolError

T = TypeVar("T")
# A decoder takes the value and the path of the field for error messages, or None on the fast first
# attempt: `from_wire` decodes without building path strings and, only when that fails, decodes again
# with paths to say exactly where. Error messages are the same; the common case skips ~a third of the work.
Decoder = Callable[[Any, str | None], Any]
Encoder = Callable[[Any], Any]

_MISSING = dataclasses.MISSING


class Message:
    """Base of every wire message. `validate` raises ProtocolError for values no sender may use."""

    def validate(self) -> None:  # pragma: no cover - default has no rules
        return None


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    return type(value).__name__


def _scalar_decoder(expected: type, name: str) -> Decoder:
    if expected is int:

        def decode_int(value: Any, path: str | None) -> Any:
            if type(value) is not int:
                raise ProtocolError(f"{path}: expected int, got {_type_name(value)}")
            return value

        return decode_int

    if expected is float:

        def decode_float(value: Any, path: str | None) -> Any:
            if type(value) is float or type(value) is int:
                return float(value)
            raise ProtocolError(f"{path}: expected float, got {_type_name(value)}")

        return decode_float

    def decode_exact(value: Any, path: str | None) -> Any:
        if type(value) is not expected:
            raise ProtocolError(f"{path}: expected {name}, got {_type_name(value)}")
        return value

    return decode_exact


def _decoder_for(tp: Any) -> Decoder:
    origin = typing.get_origin(tp)
    if tp in (int, str, bytes, bool, float):
        return _scalar_decoder(tp, tp.__name__)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {tp}")
        inner = _decoder_for(args[0])

        def decode_optional(value: Any, path: str | None) -> Any:
            return None if value is None else inner(value, path)

        return decode_optional
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        item = _decoder_for(item_tp)

        def decode_list(value: Any, path: str | None) -> Any:
            if type(value) is not list:
                raise ProtocolError(f"{path}: expected array, got {_type_name(value)}")
            if path is None:
                return [item(v, None) for v in value]
            return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]

        return decode_list
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        kdec, vdec = _decoder_for(key_tp), _decoder_for(value_tp)

        def decode_dict(value: Any, path: str | None) -> Any:
            if type(value) is not dict:
                raise ProtocolError(f"{path}: expected map, got {_type_name(value)}")
            if path is None:
                return {kdec(k, None): vdec(v, None) for k, v in value.items()}
            return {kdec(k, f"{path}.<key>"): vdec(v, f"{path}[{k!r}]") for k, v in value.items()}

        return decode_dict
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return lambda value, path: _decode_struct(tp, value, path)
    raise TypeError(f"unsupported field type {tp!r}")


def _encoder_for(tp: Any) -> Encoder | None:
    """None means the value is already msgpack-ready (scalars, lists of scalars)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional_inner = _encoder_for(args[0])
        if optional_inner is None:
            return None
        return lambda v: None if v is None else optional_inner(v)
    if origin is list:
        item_encoder = _encoder_for(typing.get_args(tp)[0])
        if item_encoder is None:
            return None
        return lambda v: [item_encoder(x) for x in v]
    if origin is dict:
        inner = _encoder_for(typing.get_args(tp)[1])
        if inner is None:
            return None
        return lambda v: {k: inner(x) for k, x in v.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return to_wire
    return None


class _Compiled:
    __slots__ = ("fields", "encoders")

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls)
        self.fields: list[tuple[str, Decoder, Any, Any]] = []
        self.encoders: list[tuple[str, Encoder | None]] = []
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            self.fields.append((f.name, _decoder_for(tp), f.default, f.default_factory))
            self.encoders.append((f.name, _encoder_for(tp)))


_compiled: dict[type, _Compiled] = {}


class _Rejected(Exception):
    """The generated decoder's only failure signal: decode again the slow way to say why."""


_SCALARS = {int: "int", str: "str", bytes: "bytes", bool: "bool"}


def _fast_check(tp: Any, var: str, ns: dict[str, Any], lines: list[str], indent: str) -> None:
    """Append lines that check (and convert, for nested messages) `var` of type `tp` in place."""
    origin = typing.get_origin(tp)
    if tp in _SCALARS:
        lines.append(f"{indent}if type({var}) is not {_SCALARS[tp]}: raise _Rejected")
    elif tp is float:
        lines.append(f"{indent}if type({var}) is int: {var} = float({var})")
        lines.append(f"{indent}elif type({var}) is not float: raise _Rejected")
    elif origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        lines.append(f"{indent}if {var} is not None:")
        _fast_check(inner, var, ns, lines, indent + "    ")
    elif origin is list:
        (item_tp,) = typing.get_args(tp)
        lines.append(f"{indent}if type({var}) is not list: raise _Rejected")
        if item_tp in _SCALARS:
            name = _SCALARS[item_tp]
            lines.append(f"{indent}for _x in {var}:")
            lines.append(f"{indent}    if type(_x) is not {name}: raise _Rejected")
        elif isinstance(item_tp, type) and dataclasses.is_dataclass(item_tp):
            dec = f"_dec_{item_tp.__name__}"
            ns[dec] = _fast_decoder(item_tp)
            lines.append(f"{indent}{var} = [{dec}(_x) for _x in {var}]")
        else:
            slow = f"_slow_{len(ns)}"
            ns[slow] = _decoder_for(tp)
            lines.append(f"{indent}{var} = {slow}({var}, None)")
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        dec = f"_dec_{tp.__name__}"
        ns[dec] = _fast_decoder(tp)
        lines.append(f"{indent}{var} = {dec}({var})")
    else:  # maps and anything rarer: the field-by-field decoder, which raises ProtocolError itself
        slow = f"_slow_{len(ns)}"
        ns[slow] = _decoder_for(tp)
        lines.append(f"{indent}{var} = {slow}({var}, None)")


_fast_decoders: dict[type, Callable[[Any], Any]] = {}
_fast_encoders: dict[type, Callable[[Any], dict[str, Any]]] = {}


def _fast_decoder(cls: type) -> Callable[[Any], Any]:
    fn = _fast_decoders.get(cls)
    if fn is not None:
        return fn
    hints = typing.get_type_hints(cls)
    ns: dict[str, Any] = {"_Rejected": _Rejected, "_cls": cls, "_MISSING": _MISSING}
    lines = ["def decode(value):", "    if type(value) is not dict: raise _Rejected", "    get = value.get"]
    args = []
    for i, f in enumerate(dataclasses.fields(cls)):
        var = f"v{i}"
        args.append(var)
        lines.append(f"    {var} = get({f.name!r}, _MISSING)")
        if f.default is not _MISSING:
            ns[f"_default{i}"] = f.default
            missing = f"{var} = _default{i}"
        elif f.default_factory is not _MISSING:
            ns[f"_factory{i}"] = f.default_factory
            missing = f"{var} = _factory{i}()"
        else:
            missing = "raise _Rejected"
        lines.append(f"    if {var} is _MISSING: {missing}")
        lines.append("    else:")
        _fast_check(hints[f.name], var, ns, lines, "        ")
    lines.append(f"    obj = _cls({', '.join(args)})")
    if issubclass(cls, Message) and cls.validate is not Message.validate:
        lines.append("    obj.validate()")
    lines.append("    return obj")
    exec("\n".join(lines), ns)  # noqa: S102 - source built above from the class's own field list
    fn = _fast_decoders[cls] = ns["decode"]
    return fn  # type: ignore[no-any-return]


def _fast_encoder(cls: type) -> Callable[[Any], dict[str, Any]]:
    fn = _fast_encoders.get(cls)
    if fn is not None:
        return fn
    ns: dict[str, Any] = {}
    items = []
    for i, (name, enc) in enumerate(_compile(cls).encoders):
        if enc is None:
            items.append(f"{name!r}: obj.{name}")
        elif enc is to_wire:
            sub = typing.get_type_hints(cls)[name]
            ns[f"_enc{i}"] = _fast_encoder(sub) if isinstance(sub, type) else enc
            items.append(f"{name!r}: _enc{i}(obj.{name})")
        else:
            ns[f"_enc{i}"] = enc
            items.append(f"{name!r}: _enc{i}(obj.{name})")
    exec(f"def encode(obj):\n    return {{{', '.join(items)}}}", ns)  # noqa: S102
    fn = _fast_encoders[cls] = ns["encode"]
    return fn  # type: ignore[no-any-return]


def _compile(cls: type) -> _Compiled:
    c = _compiled.get(cls)
    if c is None:
        c = _compiled[cls] = _Compiled(cls)
    return c


def _decode_struct(cls: type[T], value: Any, path: str | None) -> T:
    if type(value) is not dict:
        raise ProtocolError(f"{path}: expected map, got {_type_name(value)}")
    kwargs: dict[str, Any] = {}
    for name, decode, default, factory in _compile(cls).fields:
        if name in value:
            kwargs[name] = decode(value[name], None if path is None else f"{path}.{name}")
        elif default is not _MISSING:
            kwargs[name] = default
        elif factory is not _MISSING:
            kwargs[name] = factory()
        else:
            raise ProtocolError(f"{path}: missing required field {name!r}")
    obj = cls(**kwargs)
    if isinstance(obj, Message):
        obj.validate()
    return obj


def from_wire(cls: type[T], value: Any) -> T:
    """Build and validate a message from a decoded msgpack value."""
    decode = _fast_decoders.get(cls) or _fast_decoder(cls)
    try:
        return decode(value)  # type: ignore[no-any-return]
    except (_Rejected, ProtocolError):
        return _decode_struct(cls, value, cls.__name__)  # raises again, now naming the field


def to_wire(obj: Any) -> dict[str, Any]:
    """The msgpack-ready map of a message (nested messages become maps too)."""
    cls = type(obj)
    encode = _fast_encoders.get(cls) or _fast_encoder(cls)
    return encode(obj)


_packers = threading.local()
#: A packer's buffer keeps the size of the largest value it packed; past this, the packer is replaced so a
#: large FETCH answer does not hold its size in memory for the life of the thread.
_PACKER_KEEP_BYTES = 1 << 20


def packb(value: Any) -> bytes:
    """`msgpack.packb(value, use_bin_type=True)`, the same bytes, through one `Packer` per thread:
    `msgpack.packb` builds a Packer and its buffer for every call, about half the cost of packing a
    small request or response."""
    try:
        packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    data: bytes = packer.pack(value)  # resets the packer's buffer on success and on error
    if len(data) > _PACKER_KEEP_BYTES:
        _packers.packer = msgpack.Packer(use_bin_type=True)
    return data


#: The most entries any array or map of a message may have. Decoding is the one step of a request that
#: runs before anything can refuse it, and it shares the event loop with heartbeats: a FETCH listing
#: 1,000,000 partitions took 2.7 s to decode, long enough for the controller to fence the broker. The
#: parser checks each array's length at its header, so a longer one is refused before it is read.
MAX_ENTRIES = 100_000


class TooManyEntriesError(ProtocolError):
    """An array or map longer than the caller allowed, refused at its header before its entries were read."""


def unpackb(data: bytes | bytearray | memoryview, max_entries: int = MAX_ENTRIES) -> Any:
    """Exactly one msgpack value; trailing bytes, bad bytes, non-string map keys or an array or map of
    more than `max_entries` (at most MAX_ENTRIES) entries are ProtocolErrors (TooManyEntriesError for the
    last)."""
    max_entries = min(max_entries, MAX_ENTRIES)
    try:
        return msgpack.unpackb(
            data, raw=False, use_list=True, strict_map_key=False, max_array_len=max_entries, max_map_len=max_entries
        )
    except msgpack.ExtraData as exc:
        raise ProtocolError(f"{len(exc.extra)} trailing bytes after the message") from exc
    except ValueError as exc:
        if "exceeds max_array_len" in str(exc) or "exceeds max_map_len" in str(exc):
            raise TooManyEntriesError(f"an array or map of more than {max_entries} entries") from exc
        raise ProtocolError(f"undecodable msgpack: {exc}") from exc
    except (msgpack.UnpackException, TypeError) as exc:
        raise ProtocolError(f"undecodable msgpack: {exc}") from exc


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ProtocolError(message)
