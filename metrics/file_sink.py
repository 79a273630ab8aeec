"""JSON-lines metric files: one active file per broker, rolled into complete files by time and size.

How this works
--------------
Layout of a metrics directory (the contract the Spark job reads):

    <dir>/broker-<id>-<first_ts_ms>.jsonl     complete ("rolled") files; never written again
    <dir>/_active/broker-<id>.jsonl           the file still being written, one per broker

Each batch is appended as whole lines (one JSON object per record, `\\n`-terminated) and flushed, so a
reader sees complete lines except, after a crash, one cut last line. Rolling closes the active file,
fsyncs it and renames it into `<dir>` in one `os.replace`: a rolled file appears complete or not at
all, which is what Spark's streaming file source needs. `<first_ts_ms>` is the `ts_ms` of its first
record. The active file rolls when it is `roll_ms` old, before it would exceed `max_bytes`, and on
close. Opening a FileSink rolls a left-over active file from a crashed run first (its cut last line
trimmed), so nothing written before the crash is lost or overwritten.

`read_records(dir)` reads both kinds of file back, skipping a cut last line, for tests and tools.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from server_common.time import SYSTEM_TIME, Time

if TYPE_CHECKING:
    from metrics.emitter import MetricsBatch, Record

log = logging.getLogger(__name__)

ACTIVE_DIR_NAME = "_active"
DEFAULT_ROLL_MS = 10_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024

_ROLLED_NAME = re.compile(r"^broker-(-?\d+)-(\d+)(?:-(\d+))?\.jsonl$")
_ACTIVE_NAME = re.compile(r"^broker-(-?\d+)\.jsonl$")


def active_path(metrics_dir: Path, broker_id: int) -> Path:
    return metrics_dir / ACTIVE_DIR_NAME / f"broker-{broker_id}.jsonl"


def encode_records(records: Iterable[Record]) -> bytes:
    """Records as JSON lines (UTF-8, compact). NaN and infinities are refused: they are not JSON."""
    return b"".join(
        json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode() + b"\n"
        for record in records
    )


class FileSink:
    """Appends batches of one broker to `<dir>/_active/broker-<id>.jsonl` and rolls it into `<dir>`.

    Invariants: every line in the active file is complete after `write` returns; a rolled file is never
    opened for writing again; at most one active file per (directory, broker id) and one writer of it.
    """

    def __init__(
        self,
        metrics_dir: Path | str,
        broker_id: int,
        roll_ms: int = DEFAULT_ROLL_MS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        time: Time = SYSTEM_TIME,
    ) -> None:
        if roll_ms <= 0 or max_bytes <= 0:
            raise ValueError(
                f"metrics.file.roll.ms and metrics.file.max.bytes must be positive: {roll_ms}, {max_bytes}"
            )
        self.metrics_dir = Path(metrics_dir)
        self.broker_id = broker_id
        self.roll_ms = roll_ms
        self.max_bytes = max_bytes
        self._time = time
        self.active_path = active_path(self.metrics_dir, broker_id)
        self.active_path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[bytes] | None = None
        self._first_ts_ms = 0
        self._opened_ms = 0.0
        self._size_bytes = 0
        self.rolled: list[Path] = []
        """Files this sink rolled, oldest first (including a crash left-over rolled on open)."""
        self._recover_left_over()

    # -- writing -----------------------------------------------------------------------------------

    async def write(self, batch: MetricsBatch) -> None:
        # The append is a few kilobytes into the page cache: cheaper inline than a thread hop.
        self.append(batch)

    async def close(self) -> None:
        self.roll()

    def append(self, batch: MetricsBatch) -> None:
        """Append the batch's records as whole lines, rolling first if the active file is due."""
        data = encode_records(batch.records)
        if not data:
            return
        self.roll_if_due()
        if self._file is not None and self._size_bytes + len(data) > self.max_bytes:
            self.roll()
        if self._file is None:
            self._open(batch.ts_ms)
        assert self._file is not None
        self._file.write(data)
        self._file.flush()
        self._size_bytes += len(data)

    def roll_if_due(self) -> Path | None:
        """Roll the active file if it is `roll_ms` old; returns the rolled path."""
        if self._file is not None and self._time.hi_res_milliseconds() - self._opened_ms >= self.roll_ms:
            return self.roll()
        return None

    def roll(self) -> Path | None:
        """Close the active file and rename it to `broker-<id>-<first_ts_ms>.jsonl`; None if nothing open."""
        if self._file is None:
            return None
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        return self._publish(self._first_ts_ms)

    def _open(self, first_ts_ms: int) -> None:
        self._file = open(self.active_path, "ab")  # noqa: SIM115 - held open across batches, closed in roll
        self._first_ts_ms = first_ts_ms
        # Age is measured on the monotonic clock so a wall-clock step neither delays nor forces a roll.
        self._opened_ms = self._time.hi_res_milliseconds()
        self._size_bytes = 0

    def _publish(self, first_ts_ms: int) -> Path:
        target = _free_rolled_path(self.metrics_dir, self.broker_id, first_ts_ms)
        os.replace(self.active_path, target)
        _fsync_dir(self.metrics_dir)
        self.rolled.append(target)
        return target

    # -- crash recovery ----------------------------------------------------------------------------

    def _recover_left_over(self) -> None:
        """Roll an active file a previous process left behind, trimming a line the crash cut."""
        try:
            data = self.active_path.read_bytes()
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]
        if not complete:
            self.active_path.unlink()
            return
        if len(complete) != len(data):
            with open(self.active_path, "r+b") as file:
                file.truncate(len(complete))
                os.fsync(file.fileno())
        first_ts_ms = _first_ts_ms(complete)
        if first_ts_ms is None:
            first_ts_ms = int(self.active_path.stat().st_mtime * 1000)
        target = self._publish(first_ts_ms)
        log.info("metrics: rolled %s left over from a previous run to %s", self.active_path, target.name)


def _first_ts_ms(data: bytes) -> int | None:
    first_line = data[: data.find(b"\n")]
    try:
        ts_ms = json.loads(first_line).get("ts_ms")
    except (ValueError, AttributeError):
        return None
    return ts_ms if isinstance(ts_ms, int) and not isinstance(ts_ms, bool) else None


def _free_rolled_path(metrics_dir: Path, broker_id: int, first_ts_ms: int) -> Path:
    """`broker-<id>-<first_ts_ms>.jsonl`, or with `-<n>` appended if that name is taken (never overwrite)."""
    target = metrics_dir / f"broker-{broker_id}-{first_ts_ms}.jsonl"
    n = 1
    while target.exists():
        target = metrics_dir / f"broker-{broker_id}-{first_ts_ms}-{n}.jsonl"
        n += 1
    return target


def _fsync_dir(path: Path) -> None:
    # Makes the rename itself durable; some filesystems refuse fsync on a directory, which is harmless.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- reading back ----------------------------------------------------------------------------------


def metric_files(metrics_dir: Path | str) -> list[Path]:
    """Every metric file in `metrics_dir`: per broker, rolled files by first ts, then the active one."""
    root = Path(metrics_dir)
    keyed: list[tuple[int, int, int, int, Path]] = []
    for path in root.glob("broker-*.jsonl"):
        match = _ROLLED_NAME.match(path.name)
        if match:
            keyed.append((int(match[1]), 0, int(match[2]), int(match[3] or 0), path))
    for path in (root / ACTIVE_DIR_NAME).glob("broker-*.jsonl"):
        match = _ACTIVE_NAME.match(path.name)
        if match:
            keyed.append((int(match[1]), 1, 0, 0, path))
    return [path for *_, path in sorted(keyed)]


def read_records(metrics_dir: Path | str) -> list[Record]:
    """All records in `metrics_dir` (rolled and active files), in per-broker write order.

    A malformed last line of a file is what a crash mid-write leaves: it is skipped. A malformed line
    anywhere else is corruption and raises ValueError.
    """
    records: list[Record] = []
    for path in metric_files(metrics_dir):
        records.extend(read_file_records(path))
    return records


def read_file_records(path: Path) -> list[Record]:
    lines = path.read_bytes().split(b"\n")
    # A file that ends with "\n" splits into a trailing empty string; otherwise the tail is a cut line.
    records: list[Record] = []
    last = len(lines) - 1
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            if number == last or (number == last - 1 and not lines[last]):
                log.info("metrics: skipping a cut last line in %s", path)
                continue
            raise ValueError(f"{path}:{number + 1}: malformed metric record: {exc}") from exc
        records.append(record)
    return records
