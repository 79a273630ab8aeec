"""Walking the batches of a record set without building a Python object per record.

The log checks framing and CRC once, on the way in (append) or on the way back from a crash (segment
recovery); both use `scan`, which returns plain tuples so the hot path allocates as little as possible.
See protocol/record_batch.py for the header layout.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from protocol.record_batch import CRC_START, HEADER_SIZE, LOG_OVERHEAD, MAGIC

Buffer = bytes | bytearray | memoryview

# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta,
# first_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, record_count
HEADER = struct.Struct(">qiibIhiqqqhii")
OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
# base offset, batch length and last offset delta only: what a walk over a record set's offsets needs.
OFFSET_LENGTH_DELTA = struct.Struct(">qi11xi")
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


class BatchInfo(NamedTuple):
    """What the log needs from one batch header, and where the batch sits in its buffer."""

    position: int
    size: int  # bytes of the whole batch, header included
    base_offset: int
    partition_leader_epoch: int
    last_offset_delta: int
    max_timestamp: int
    record_count: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1


class ScanResult(NamedTuple):
    batches: list[BatchInfo]
    valid_bytes: int  # length of the prefix made of whole, valid batches
    error: str | None  # why the scan stopped before the end of the buffer, if it did
    incomplete: bool  # True when it stopped only because the last batch runs past the end


def scan(buf: Buffer, verify_crc: bool = True, start: int = 0) -> ScanResult:
    """Walk batches from `start` to the end of `buf`, stopping at the first one that is torn or invalid."""
    view = memoryview(buf)
    end = len(view)
    position = start
    batches: list[BatchInfo] = []
    unpack = HEADER.unpack_from
    while position < end:
        if end - position < HEADER_SIZE:
            return ScanResult(batches, position, f"truncated batch header at byte {position}", True)
        (base, length, epoch, magic, crc, _attrs, delta, _first_ts, max_ts, pid, pepoch, seq, count) = unpack(
            view, position
        )
        if magic != MAGIC:
            return ScanResult(batches, position, f"batch at byte {position} has magic {magic}", False)
        if length < _MIN_BATCH_LENGTH:
            return ScanResult(batches, position, f"batch at byte {position} has impossible length {length}", False)
        if delta < 0 or count <= 0:
            return ScanResult(batches, position, f"batch at byte {position} has no records", False)
        size = LOG_OVERHEAD + length
        stop = position + size
        if stop > end:
            return ScanResult(batches, position, f"batch at byte {position} runs past the end of the data", True)
        if verify_crc and crc32c(view[position + CRC_START : stop]) != crc:
            return ScanResult(batches, position, f"CRC mismatch in batch at byte {position} (offset {base})", False)
        batches.append(BatchInfo(position, size, base, epoch, delta, max_ts, count, pid, pepoch, seq))
        position = stop
    return ScanResult(batches, position, None, False)


def single_batch(buf: Buffer) -> tuple[int, int, int, int, int, int, int] | None:
    """(partition leader epoch, last offset delta, max timestamp, record count, producer id, producer epoch,
    base sequence) when `buf` is exactly one
    valid batch, CRC included; None otherwise (then `scan` tells what is wrong). The common case of one
    producer batch per append, without building a list."""
    if len(buf) < HEADER_SIZE:
        return None
    (_base, length, epoch, magic, crc, _attrs, delta, _first_ts, max_ts, pid, pepoch, seq, count) = HEADER.unpack_from(
        buf, 0
    )
    if (
        magic != MAGIC
        or LOG_OVERHEAD + length != len(buf)
        or length < _MIN_BATCH_LENGTH
        or delta < 0
        or count <= 0
        or crc32c(memoryview(buf)[CRC_START:]) != crc
    ):
        return None
    return epoch, delta, max_ts, count, pid, pepoch, seq
