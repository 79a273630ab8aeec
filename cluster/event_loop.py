"""How minibroker's commands run their event loop: uvloop, as the brokers do."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_on_uvloop(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(coro)
    return uvloop.run(coro)
