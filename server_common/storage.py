"""Files that must survive a crash whole: write a file atomically (temp file, fsync, rename, fsync the
directory) and make a directory's entries durable. Shared by the broker's checkpoints and the
controller's metadata store."""

from __future__ import annotations

import os
from pathlib import Path

_TMP_SUFFIX = ".tmp"


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new contents."""
    tmp = path.with_name(path.name + _TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make renames, creations and deletions inside `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
