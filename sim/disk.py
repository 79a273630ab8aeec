"""The simulated disk: real files in a per-run directory, with a page cache that a crash can drop.

How this works
--------------
The log writes segments with `pwrite` and makes them durable only through `Storage.fsync`
(storage/storage.py): on segment rolls, on `log.flush.interval.messages` / `log.flush.interval.ms`,
on recovery and on a clean shutdown. `SimDisk.fsync` records, per file, how many bytes the last fsync
covered (the data's length, not the file's, for a preallocated segment). `crash(node_dir)` with
`loses_unflushed` cuts every segment of that node back to what its last fsync covered and removes its
index files (rebuilt on the next open), so a killed node loses exactly what it never flushed, as a power
loss does. Checkpoints (HW, leader epochs, log start) are written with
temp file, fsync and rename, so they survive whole. Blocking writes run inline: the simulation has one
thread and must stay deterministic.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from storage.batches import scan

T = TypeVar("T")


class SimDisk:
    def __init__(self, real_fsync: bool = False) -> None:
        self.real_fsync = real_fsync
        self.durable: dict[str, int] = {}  # path -> bytes covered by its last fsync
        self.bytes_lost = 0

    def fsync(self, fd: int, length: int | None = None) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        self.durable[path] = os.fstat(fd).st_size if length is None else length
        if self.real_fsync:
            os.fsync(fd)

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        return fn()

    def crash(self, node_dir: Path, loses_unflushed: bool) -> int:
        """What a power loss leaves of `node_dir`; returns the bytes lost."""
        if not loses_unflushed:
            return 0
        lost = 0
        for segment in sorted(node_dir.rglob("*.log")):
            size = segment.stat().st_size
            keep = min(size, self.durable.get(str(segment), 0))
            if keep < size:
                with open(segment, "rb") as f:
                    f.seek(keep)
                    # The batches past what was flushed, not the zeros after them in a preallocated file.
                    lost += scan(f.read(), verify_crc=False).valid_bytes
                os.truncate(segment, keep)
        for index in node_dir.rglob("*.index"):
            index.unlink(missing_ok=True)
        self.bytes_lost += lost
        return lost
