"""The storage seam: how a log makes its bytes durable.

A log writes its segments with plain `os.pwrite` into the page cache; only `fsync` makes them survive a
power loss. Every fsync of segment data goes through a `Storage`, and so does the one blocking write the
broker moves off its event loop (the HW checkpoint). Broker processes use `OS_STORAGE`, which calls the
operating system. A simulator plugs in a disk that remembers, per file, how many bytes the last fsync
covered, so a simulated crash can drop exactly what was never flushed (`log.flush.interval.messages`,
`log.flush.interval.ms`, segment rolls and clean shutdowns are what flush).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Storage(Protocol):
    def fsync(self, fd: int, length: int | None = None) -> None:
        """Make every byte written to `fd` so far durable. `length`: where the file's data ends, when the
        file runs on past it (a preallocated segment's reserved zeros)."""

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        """Run a blocking write (temp file, fsync, rename) without holding up the node's other work."""


class OsStorage:
    def fsync(self, fd: int, length: int | None = None) -> None:
        os.fsync(fd)

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        # A worker thread: a checkpoint's fsyncs take 5-12 ms on a busy disk.
        return await asyncio.get_running_loop().run_in_executor(None, fn)


OS_STORAGE: Storage = OsStorage()
