"""Durable metadata in the controller's data directory: an append-only record log plus a snapshot.

How this works
--------------
Two files live in the data directory:

``metadata.log``       one frame per record, appended and fsynced before a command is answered:
                       ``length: u32 BE | crc32c(payload): u32 BE | payload``, where payload is
                       msgpack ``[offset, record_dict]`` (metadata.record_to_dict).
``metadata.snapshot``  ``crc32c(payload): u32 BE | payload``, payload msgpack
                       ``{"version": 1, "last_offset": N, "records": [record_dict, ...]}``: the records
                       that rebuild the image as of offset N (MetadataImage.to_records).

`load` reads the snapshot (if any), then replays the log frames whose offset is above the snapshot's.
Offsets are dense and start at 0; every record has one, and a broker's epoch is the offset of its
registration record, so epochs keep growing across restarts.

Crash safety:

* a snapshot is written to a temp file, fsynced, renamed over the old one, then the directory is
  fsynced: a reader sees the old snapshot or the new one, never half of one;
* the log is truncated only after the snapshot that covers it is durable; a crash in between leaves
  frames at or below the snapshot offset, which `load` skips;
* a torn or corrupt tail (a crash mid-append) ends the log: `load` stops at the first bad frame and
  `MetadataStore` truncates the file there before appending again. Frames after a bad one are never
  trusted, because their records were never acknowledged as a whole.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import msgpack
from crc32c import crc32c

from metadata.image import MetadataImage
from metadata.records import MetadataRecord, MetadataReplayError, record_from_dict, record_to_dict
from server_common.storage import fsync_dir, write_atomically

LOG_FILE_NAME = "metadata.log"
SNAPSHOT_FILE_NAME = "metadata.snapshot"
SNAPSHOT_VERSION = 1
_FRAME_HEADER = struct.Struct(">II")  # length, crc32c
_CRC = struct.Struct(">I")


class MetadataStoreError(Exception):
    """The snapshot is unreadable or the log contradicts it: refuse to start rather than guess."""


def load(data_dir: Path | str) -> tuple[MetadataImage, int]:
    """The image and the offset of the last durable record (-1 when the directory holds nothing)."""
    image, last_offset, _ = _load(Path(data_dir))
    return image, last_offset


class MetadataStore:
    """Appends records durably and snapshots the image. Single writer: one controller per directory.

    `snapshot_interval_records`: after this many records appended since the last snapshot, `append`
    reports `snapshot_due` and the owner (the controller) calls `write_snapshot` with its image.
    """

    def __init__(self, data_dir: Path | str, snapshot_interval_records: int = 1000) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.snapshot_interval_records = snapshot_interval_records
        self._log: BinaryIO | None = None
        self._records_since_snapshot = 0

    def load(self) -> tuple[MetadataImage, int]:
        """Read what is on disk, cut a torn log tail and open the log for appending."""
        image, last_offset, log_valid_bytes = _load(self.data_dir)
        log_path = self.data_dir / LOG_FILE_NAME
        self._close_log()
        created = not log_path.exists()
        log = open(log_path, "ab")  # noqa: SIM115 - kept open for appends, closed by close()
        if log.tell() != log_valid_bytes:
            log.truncate(log_valid_bytes)
            os.fsync(log.fileno())
        if created:
            fsync_dir(self.data_dir)
        self._log = log
        self._records_since_snapshot = 0
        return image, last_offset

    @property
    def snapshot_due(self) -> bool:
        return self._records_since_snapshot >= self.snapshot_interval_records

    def append(self, first_offset: int, records: Sequence[MetadataRecord]) -> None:
        """Append records with offsets first_offset, first_offset + 1, ... and fsync them as one write."""
        if not records:
            return
        log = self._require_log()
        frames = bytearray()
        for i, record in enumerate(records):
            payload = msgpack.packb([first_offset + i, record_to_dict(record)], use_bin_type=True)
            frames += _FRAME_HEADER.pack(len(payload), crc32c(payload))
            frames += payload
        log.write(frames)
        log.flush()
        os.fsync(log.fileno())
        self._records_since_snapshot += len(records)

    def write_snapshot(self, image: MetadataImage, last_offset: int) -> None:
        """Make `image` (as of `last_offset`) the snapshot, then empty the log it covers."""
        log = self._require_log()
        payload = msgpack.packb(
            {
                "version": SNAPSHOT_VERSION,
                "last_offset": last_offset,
                "records": [record_to_dict(r) for r in image.to_records()],
            },
            use_bin_type=True,
        )
        write_atomically(self.data_dir / SNAPSHOT_FILE_NAME, _CRC.pack(crc32c(payload)) + payload)
        log.truncate(0)
        log.seek(0)
        os.fsync(log.fileno())
        self._records_since_snapshot = 0

    def close(self) -> None:
        self._close_log()

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _require_log(self) -> BinaryIO:
        if self._log is None:
            raise RuntimeError("MetadataStore.load() must run before appending")
        return self._log

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


# -- reading --------------------------------------------------------------------------------------


def _load(data_dir: Path) -> tuple[MetadataImage, int, int]:
    """(image, last offset, number of valid bytes at the head of the log)."""
    image = MetadataImage()
    last_offset = _load_snapshot(data_dir / SNAPSHOT_FILE_NAME, image)
    log_path = data_dir / LOG_FILE_NAME
    if not log_path.exists():
        return image, last_offset, 0
    data = log_path.read_bytes()
    position = 0
    for offset, record_dict, end in _iter_frames(data):
        if offset <= last_offset:  # covered by the snapshot; left by a crash before truncation
            position = end
            continue
        if offset != last_offset + 1:
            raise MetadataStoreError(f"{log_path}: offset {offset} follows {last_offset}")
        image.replay(record_from_dict(record_dict))
        last_offset = offset
        position = end
    return image, last_offset, position


def _load_snapshot(path: Path, image: MetadataImage) -> int:
    if not path.exists():
        return -1
    data = path.read_bytes()
    if len(data) < _CRC.size or _CRC.unpack_from(data)[0] != crc32c(data[_CRC.size :]):
        raise MetadataStoreError(f"{path}: checksum mismatch")
    try:
        snapshot = msgpack.unpackb(data[_CRC.size :], raw=False)
        if snapshot["version"] != SNAPSHOT_VERSION:
            raise MetadataStoreError(f"{path}: unsupported snapshot version {snapshot['version']}")
        for record_dict in snapshot["records"]:
            image.replay(record_from_dict(record_dict))
        last_offset = snapshot["last_offset"]
    except (KeyError, TypeError, ValueError, MetadataReplayError) as exc:
        raise MetadataStoreError(f"{path}: unreadable snapshot: {exc}") from exc
    if not isinstance(last_offset, int):
        raise MetadataStoreError(f"{path}: bad last_offset {last_offset!r}")
    return last_offset


def _iter_frames(data: bytes) -> Iterator[tuple[int, Any, int]]:
    """Yield (offset, record dict, end position) for each intact frame; stop at the first bad one."""
    position = 0
    while position + _FRAME_HEADER.size <= len(data):
        length, crc = _FRAME_HEADER.unpack_from(data, position)
        start = position + _FRAME_HEADER.size
        end = start + length
        if end > len(data):
            return
        payload = data[start:end]
        if crc32c(payload) != crc:
            return
        try:
            offset, record_dict = msgpack.unpackb(payload, raw=False)
        except (ValueError, TypeError):
            return
        yield offset, record_dict, end
        position = end


# -- writing --------------------------------------------------------------------------------------
