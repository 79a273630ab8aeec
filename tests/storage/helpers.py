"""Helpers shared by the log tests: batches with known values, and reading them back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from protocol.record_batch import build_batch, iter_headers, iter_records

START_MS = 1_700_000_000_000


def batch(*values: bytes, epoch: int = -1, base_offset: int = 0, timestamp_ms: int = START_MS) -> bytes:
    """A producer-style batch holding `values` (one value b"v" when none are given)."""
    return build_batch(
        list(values) or [b"v"],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        timestamp_ms=timestamp_ms,
    )


def values_by_offset(data: bytes) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in iter_records(data)]


def batch_bases(data: bytes) -> list[int]:
    return [h.base_offset for h in iter_headers(data)]


def batch_epochs(data: bytes) -> list[int]:
    return [h.partition_leader_epoch for h in iter_headers(data)]


REPO_ROOT = Path(__file__).resolve().parents[3]

# Appends 3-record batches (offset k holds f"{k:08d}" * 20) as fast as it can, at leader epoch offset // 3000,
# printing the log end offset every 100 appends: what it prints is appended.
_APPENDER = """
import json, sys
from pathlib import Path
from storage.log import Log, LogConfig
from protocol.record_batch import build_batch
from server_common.time import SystemTime

log = Log.open(Path(sys.argv[1]), LogConfig(**json.loads(sys.argv[2])), SystemTime())
appends = 0
while True:
    start = log.log_end_offset
    values = [f"{start + k:08d}".encode() * 20 for k in range(3)]
    log.append_as_leader(build_batch(values, timestamp_ms=0), leader_epoch=start // 3000)
    appends += 1
    if appends % 100 == 0:
        print(log.log_end_offset, flush=True)
"""


def kill_appender_after(log_dir: Path, offsets: int, **config: Any) -> int:
    """Run a real process appending to the log in `log_dir` (LogConfig(**config)), SIGKILL it once it has
    appended at least `offsets` offsets, and return the last log end offset it reported."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", _APPENDER, str(log_dir), json.dumps(config)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    acknowledged = 0
    try:
        while acknowledged < offsets:
            line = child.stdout.readline()
            assert line, f"the appender died early with status {child.poll()}"
            acknowledged = int(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return acknowledged
