"""Helpers shared by the log tests: batches with known values, and reading them back."""

from __future__ import annotations

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
