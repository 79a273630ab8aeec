"""The event trace of one run: (virtual time, node, event, details) per line, and its hash.

The same seed gives the same trace, so its hash names a history: two runs agree on it exactly when they
did the same things in the same order at the same virtual times. `--trace FILE` writes it as JSON lines.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any


class Trace:
    def __init__(self, keep: bool = False) -> None:
        self._hash = hashlib.sha256()
        self.count = 0
        self.keep = keep
        self.lines: list[str] = []
        self.recent: list[dict[str, Any]] = []  # the last events, for the timeline of a violation
        self.recent_limit = 400

    def event(self, node: int | str, event: str, **details: Any) -> None:
        t_ms = round(asyncio.get_running_loop().time() * 1000.0, 3)
        entry = {"t_ms": t_ms, "node": node, "event": event, **details}
        line = json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str)
        self._hash.update(line.encode())
        self._hash.update(b"\n")
        self.count += 1
        if self.keep:
            self.lines.append(line)
        self.recent.append(entry)
        if len(self.recent) > self.recent_limit * 2:
            del self.recent[: self.recent_limit]

    @property
    def digest(self) -> str:
        return self._hash.hexdigest()[:16]
