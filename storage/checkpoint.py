"""Small text checkpoint files, written atomically: high watermarks, leader epochs, the log start offset.

How this works
--------------
Every checkpoint is rewritten whole through `write_atomically`: the new contents go to a temporary
file in the same directory, which is fsynced, renamed over the old file, and then the directory is
fsynced so the rename itself is durable. A reader therefore sees either the old file or the new one,
never a mix, even across a crash or power loss.

The formats follow Kafka's text checkpoints: a version line (always 0), a count line, then one entry
per line with fields separated by single spaces.

    replication-offset-checkpoint        leader-epoch-checkpoint        log-start-offset
    0                                    0                              0
    2                                    2                              1
    orders 0 1200                        0 0                            500
    orders 1 877                         3 1200

A missing file reads as empty (no entries, or None for the log start offset). A file that does not
follow the format raises CorruptCheckpointError naming the file and the problem.
"""

from __future__ import annotations

from pathlib import Path

from server_common.storage import write_atomically
from storage.epoch_cache import EpochEntry

CHECKPOINT_VERSION = 0


class CorruptCheckpointError(ValueError):
    """A checkpoint file exists but does not follow its format."""


def _write_entries(path: Path, entries: list[str]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(entries)), *entries]
    write_atomically(path, ("\n".join(lines) + "\n").encode("ascii"))


def _read_entries(path: Path, fields_per_entry: int) -> list[list[str]] | None:
    """The entries of a checkpoint split into fields; None when the file does not exist."""
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: not an ASCII checkpoint file") from exc
    lines = text.splitlines()
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: missing version or count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptCheckpointError(f"{path}: unsupported version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: malformed count line {lines[1]!r}") from exc
    body = lines[2:]
    if count != len(body):
        raise CorruptCheckpointError(f"{path}: count says {count} entries but the file holds {len(body)}")
    entries = [line.split() for line in body]
    for line, fields in zip(body, entries, strict=True):
        if len(fields) != fields_per_entry:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}")
    return entries


def _parse_int(path: Path, text: str) -> int:
    try:
        return int(text)
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: {text!r} is not an integer") from exc


class HighWatermarkCheckpoint:
    """Every partition's high watermark in one file per log dir (Kafka's replication-offset-checkpoint)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, high_watermarks: dict[tuple[str, int], int]) -> None:
        entries = []
        for (topic, partition), offset in sorted(high_watermarks.items()):
            if not topic or any(ch.isspace() for ch in topic):
                raise ValueError(f"topic name {topic!r} cannot be stored in a checkpoint")
            entries.append(f"{topic} {partition} {offset}")
        _write_entries(self.path, entries)

    def read(self) -> dict[tuple[str, int], int]:
        entries = _read_entries(self.path, 3)
        if entries is None:
            return {}
        result: dict[tuple[str, int], int] = {}
        for topic, partition, offset in entries:
            result[(topic, _parse_int(self.path, partition))] = _parse_int(self.path, offset)
        return result


class LeaderEpochCheckpoint:
    """The leader-epoch-checkpoint of one partition replica: (epoch, start offset) pairs, in order."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: list[EpochEntry]) -> None:
        _write_entries(self.path, [f"{e.epoch} {e.start_offset}" for e in entries])

    def read(self) -> list[EpochEntry]:
        entries = _read_entries(self.path, 2)
        if entries is None:
            return []
        return [EpochEntry(_parse_int(self.path, e), _parse_int(self.path, o)) for e, o in entries]


class LogStartOffsetCheckpoint:
    """The log start offset of one partition replica (it can lie inside the first segment)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, log_start_offset: int) -> None:
        _write_entries(self.path, [str(log_start_offset)])

    def read(self) -> int | None:
        entries = _read_entries(self.path, 1)
        if entries is None:
            return None
        if len(entries) != 1:
            raise CorruptCheckpointError(f"{self.path}: expected exactly one offset")
        return _parse_int(self.path, entries[0][0])
