"""Log append and read throughput against raw file I/O of the same sizes, measured in the same run.

    .venv/bin/python -m bench.log_append_read [--quick] [--dir D]

Appends 1 GiB (128 MiB with --quick) in 16 KiB batches with Log.append_as_leader, then reads it all back
by offset with Log.read(offset, 1 MiB). The baseline writes the same bytes with os.write in 16 KiB chunks
to a plain file in the same directory and reads them back with os.read in 1 MiB chunks. Baseline and log
alternate for --rounds rounds (3) and each keeps its best round, since the machine may be shared. The
batches are built once, before any timing; inside the timed loop only the offsets the log assigns change.
A second baseline, the floor, does only what no leader append can skip (check the batch and its CRC,
stamp offset, length and epoch into a copy, write it): `floor_ratio` is the most `append_ratio` can be.

The log appends twice a round: with Kafka's defaults (`append_*`), and with `log.preallocate=true`
(`append_preallocated_*`), where each segment reserves its segment.bytes of disk when it is created and
the kernel no longer allocates blocks on every write. Its ratio is against the same raw write as the
rest; `raw_write_preallocated_mb_s` is that raw write into a preallocated file, and
`append_preallocated_vs_raw_preallocated` compares like with like.
Prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, build_batch
from server_common.time import SystemTime
from storage.batches import OFFSET_LENGTH_EPOCH, single_batch
from storage.log import Log, LogConfig

BATCH_BYTES = 16 * 1024
READ_BYTES = 1024 * 1024
RECORDS_PER_BATCH = 16
DISTINCT_BATCHES = 64  # cycled through so the payloads are not all identical


def build_batches() -> list[bytes]:
    """DISTINCT_BATCHES batches of exactly BATCH_BYTES each, holding random values."""
    batches = []
    for _ in range(DISTINCT_BATCHES):
        value_bytes = (BATCH_BYTES - HEADER_SIZE) // RECORDS_PER_BATCH - 16
        values = [os.urandom(value_bytes) for _ in range(RECORDS_PER_BATCH)]
        shortfall = BATCH_BYTES - len(build_batch(values, timestamp_ms=0))
        values[-1] = os.urandom(value_bytes + shortfall)  # per-record framing stays the same size
        batch = build_batch(values, timestamp_ms=0)
        assert len(batch) == BATCH_BYTES, len(batch)
        batches.append(batch)
    return batches


def bench_log(directory: Path, batches: list[bytes], total_bytes: int, config: LogConfig) -> tuple[float, float, int]:
    log_dir = directory / "bench-0"
    log = Log.open(log_dir, config, SystemTime())
    count = total_bytes // BATCH_BYTES
    n = len(batches)
    append = log.append_as_leader
    started = time.perf_counter()
    for i in range(count):
        append(batches[i % n], 1)
    append_s = time.perf_counter() - started

    log_end = log.log_end_offset
    read = log.read
    offset = 0
    read_total = 0
    started = time.perf_counter()
    while offset < log_end:
        data = read(offset, READ_BYTES)
        read_total += len(data)
        offset += len(data) // BATCH_BYTES * RECORDS_PER_BATCH  # every batch is alike
    read_s = time.perf_counter() - started
    if read_total != count * BATCH_BYTES:
        raise SystemExit(f"read back {read_total} bytes, expected {count * BATCH_BYTES}")
    log.close()
    shutil.rmtree(log_dir)
    return append_s, read_s, read_total


def bench_floor(directory: Path, batches: list[bytes], total_bytes: int) -> float:
    """The least a leader append does, and nothing else: check the batch (CRC included), copy it with its
    base offset, length and leader epoch stamped, and write it at the end of the file. No index, no
    segment roll, no epoch cache, no producer state, no result object."""
    path = directory / "floor.bin"
    count = total_bytes // BATCH_BYTES
    n = len(batches)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    pwrite, stamp = os.pwrite, OFFSET_LENGTH_EPOCH.pack_into
    position = offset = 0
    started = time.perf_counter()
    for i in range(count):
        batch = batches[i % n]
        checked = single_batch(batch)
        if checked is None:
            raise SystemExit("a bench batch failed its check")
        stamped = bytearray(batch)
        stamp(stamped, 0, offset, len(stamped) - LOG_OVERHEAD, 1)
        position += pwrite(fd, stamped, position)
        offset += checked[1] + 1
    floor_s = time.perf_counter() - started
    os.close(fd)
    path.unlink()
    return floor_s


def bench_raw(
    directory: Path, batches: list[bytes], total_bytes: int, preallocate: bool = False
) -> tuple[float, float]:
    path = directory / "raw.bin"
    count = total_bytes // BATCH_BYTES
    n = len(batches)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if preallocate:
        os.posix_fallocate(fd, 0, count * BATCH_BYTES)  # as a preallocated segment is, before timing
    write = os.write
    started = time.perf_counter()
    for i in range(count):
        write(fd, batches[i % n])
    write_s = time.perf_counter() - started
    os.close(fd)

    fd = os.open(path, os.O_RDONLY)
    read = os.read
    got = 0
    started = time.perf_counter()
    while True:
        chunk = read(fd, READ_BYTES)
        if not chunk:
            break
        got += len(chunk)
    read_s = time.perf_counter() - started
    os.close(fd)
    path.unlink()
    if got != count * BATCH_BYTES:
        raise SystemExit(f"raw read {got} bytes, expected {count * BATCH_BYTES}")
    return write_s, read_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="128 MiB instead of 1 GiB")
    parser.add_argument("--dir", type=Path, default=None, help="directory for the files (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best of each counts")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    total = (128 if args.quick else 1024) * 1024 * 1024
    batches = build_batches()
    base = Path(tempfile.mkdtemp(prefix="log-bench-", dir=args.dir))
    raw_write_s = raw_read_s = append_s = read_s = floor_s = float("inf")
    raw_pre_s = append_pre_s = float("inf")
    # Segments big enough that no roll happens inside the timed loop (as in the default 1 GiB, --quick
    # included), and the preallocation is made once per log, as a broker makes it once per segment.
    plain = LogConfig(segment_bytes=max(LogConfig().segment_bytes, total))
    preallocated = LogConfig(segment_bytes=plain.segment_bytes, preallocate=True)
    nbytes = 0
    try:
        for _ in range(args.rounds):
            # The machine is shared: alternate baseline and log and keep each one's best round. Each phase
            # starts without dirty pages left by the previous one, which would throttle its writes.
            os.sync()
            write_s, raw_r_s = bench_raw(base, batches, total)
            raw_write_s, raw_read_s = min(raw_write_s, write_s), min(raw_read_s, raw_r_s)
            os.sync()
            log_a_s, log_r_s, nbytes = bench_log(base, batches, total, plain)
            append_s, read_s = min(append_s, log_a_s), min(read_s, log_r_s)
            os.sync()
            floor_s = min(floor_s, bench_floor(base, batches, total))
            os.sync()
            raw_pre_s = min(raw_pre_s, bench_raw(base, batches, total, preallocate=True)[0])
            os.sync()
            append_pre_s = min(append_pre_s, bench_log(base, batches, total, preallocated)[0])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    mb = nbytes / 1e6
    result = {
        "bytes": nbytes,
        "rounds": args.rounds,
        "append_mb_s": round(mb / append_s, 1),
        "read_mb_s": round(mb / read_s, 1),
        "raw_write_mb_s": round(mb / raw_write_s, 1),
        "raw_read_mb_s": round(mb / raw_read_s, 1),
        "append_ratio": round(raw_write_s / append_s, 3),
        "read_ratio": round(raw_read_s / read_s, 3),
        "floor_mb_s": round(mb / floor_s, 1),
        "floor_ratio": round(raw_write_s / floor_s, 3),
        "append_preallocated_mb_s": round(mb / append_pre_s, 1),
        "append_preallocated_ratio": round(raw_write_s / append_pre_s, 3),
        "raw_write_preallocated_mb_s": round(mb / raw_pre_s, 1),
        "append_preallocated_vs_raw_preallocated": round(raw_pre_s / append_pre_s, 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
