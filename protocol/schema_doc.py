"""Renders the message schemas and the error codes as Markdown tables, for docs/protocol.md.

`python -m protocol.schema_doc --write` rewrites both generated blocks of docs/protocol.md in place; without
`--write` it prints them. A test keeps the doc in sync with the code.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from protocol.errors import ErrorCode
from protocol.messages import REQUEST_TYPES, RESPONSE_TYPES, SUPPORTED_VERSIONS

BEGIN = "<!-- BEGIN GENERATED SCHEMAS: python -m protocol.schema_doc -->"
END = "<!-- END GENERATED SCHEMAS -->"
ERRORS_BEGIN = "<!-- BEGIN GENERATED ERRORS: python -m protocol.schema_doc --write -->"
ERRORS_END = "<!-- END GENERATED ERRORS -->"


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is int:
        return "int"
    if tp is str:
        return "str"
    if tp is bytes:
        return "bin"
    if tp is bool:
        return "bool"
    if tp is float:
        return "float"
    if origin is list:
        return f"array of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        k, v = typing.get_args(tp)
        return f"map {_type_name(k)} → {_type_name(v)}"
    if origin is not None and type(None) in typing.get_args(tp):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return f"{_type_name(inner)} or nil"
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return f"`{tp.__name__}`"
    return str(tp)


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return "`" + repr(f.default).replace("b''", 'b""') + "`"
    if f.default_factory is not dataclasses.MISSING:
        return "`" + repr(f.default_factory()) + "`"
    return "**required**"


def _table(cls: type[Any]) -> list[str]:
    hints = typing.get_type_hints(cls)
    lines = [f"#### `{cls.__name__}`", "", "| key | type | default |", "|---|---|---|"]
    for f in dataclasses.fields(cls):
        lines.append(f"| `{f.name}` | {_type_name(hints[f.name])} | {_default(f)} |")
    lines.append("")
    return lines


def _nested(cls: type, seen: set[type]) -> list[type]:
    out = []
    for tp in typing.get_type_hints(cls).values():
        stack = [tp]
        while stack:
            t = stack.pop()
            if dataclasses.is_dataclass(t) and isinstance(t, type) and t not in seen:
                seen.add(t)
                out.append(t)
                out.extend(_nested(t, seen))
            stack.extend(typing.get_args(t))
    return out


def render() -> str:
    lines = [BEGIN, ""]
    seen: set[type] = set()
    for key, req in sorted(REQUEST_TYPES.items()):
        resp = RESPONSE_TYPES[key]
        low, high = SUPPORTED_VERSIONS[key]
        versions = f"version {low}" if low == high else f"versions {low}-{high}"
        lines += [f"### {key.name} (api key {int(key)}, {versions})", ""]
        for cls in (req, resp):
            seen.add(cls)
            lines += _table(cls)
            for nested in _nested(cls, seen):
                lines += _table(nested)
    lines.append(END)
    return "\n".join(lines) + "\n"


def render_errors() -> str:
    lines = [ERRORS_BEGIN, "", "| code | name | retriable | meaning |", "|---|---|---|---|"]
    for code in sorted(ErrorCode):
        lines.append(f"| {int(code)} | {code.name} | {'yes' if code.retriable else 'no'} | {code.description} |")
    lines += ["", ERRORS_END]
    return "\n".join(lines) + "\n"


def rewrite(text: str) -> str:
    """`text` (docs/protocol.md) with both generated blocks replaced by what the code says now."""
    head, _, rest = text.partition(ERRORS_BEGIN)
    _, _, tail = rest.partition(ERRORS_END + "\n")
    text = head + render_errors() + tail
    return text[: text.index(BEGIN)] + render()


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if "--write" in sys.argv[1:]:
        doc = Path(__file__).resolve().parents[1] / "docs" / "protocol.md"
        doc.write_text(rewrite(doc.read_text()))
    else:
        print(render_errors() + "\n" + render(), end="")
