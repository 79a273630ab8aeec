"""What a ListOffsets by timestamp costs without a time index, on a log of several segments.

    .venv/bin/python -m bench.offsets_by_timestamp [--segments 8] [--segment-mib 64] [--rounds 3]

Builds a log in a temporary directory of `--segments` segments of `--segment-mib` MiB, in 16 KiB batches of
100 records each (values of 150 bytes), timestamps rising 1 ms a record, then times
`Log.fetch_offset_by_timestamp` (storage/log.py) for a time in the first, the middle and the last
segment, each placed in the last batch of its segment (the longest header walk there is):

* open: `Log.open` of the clean log, which reads every closed segment's batch headers (the offset check) and
  takes each segment's largest timestamp from them on the way;
* cold: the first lookup after the open: one header walk of the answer's segment up to the batch, and the
  read and decode of that batch (its CRC checked, the first read of it since the open);
* warm: the same lookup again.

The files are in the page cache, having just been written: a lookup on a cold disk reads the headers it
walks from it (the kernel's read-ahead reads the segment, as the offset check at open does).

Each figure is the best of --rounds; the per-header cost is the warm last-batch lookup divided by the
batches in a segment. Last, the CPU time of a whole walk over one segment's headers two ways, alternated,
best of 7: through a read-only mapping (what the lookup does) and with a pread per header (the segment's
general `_walk_headers`). Prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import msgpack

from protocol.record_batch import assemble_batch
from server_common.log_config import LogConfig
from server_common.time import SystemTime
from storage.log import Log

RECORDS_PER_BATCH = 100
VALUE_BYTES = 150
T0 = 1_700_000_000_000


def build(dir: Path, segments: int, segment_bytes: int) -> tuple[int, list[tuple[int, int]]]:
    """Fill the log; answer the batches per segment and each segment's (first, last) record timestamps."""
    payload = msgpack.packb(
        [[i, i, None, bytes([65 + i % 26]) * VALUE_BYTES] for i in range(RECORDS_PER_BATCH)], use_bin_type=True
    )
    batch_size = len(assemble_batch(0, 0, RECORDS_PER_BATCH - 1, 0, 0, RECORDS_PER_BATCH, payload))
    per_segment = segment_bytes // batch_size
    log = Log.open(dir, LogConfig(segment_bytes=per_segment * batch_size), SystemTime())
    offset = 0
    for _ in range(segments * per_segment):
        ts = T0 + offset
        batch = assemble_batch(
            offset, 0, RECORDS_PER_BATCH - 1, ts, ts + RECORDS_PER_BATCH - 1, RECORDS_PER_BATCH, payload
        )
        log.append_as_follower(batch)
        offset += RECORDS_PER_BATCH
    assert log.num_segments == segments, log.num_segments
    spans = [(T0 + s.base_offset, T0 + s.next_offset - 1) for s in log.segments]
    log.close()
    return per_segment, spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="offsets-by-ts-") as tmp:
        dir = Path(tmp) / "bench-0"
        per_segment, spans = build(dir, args.segments, args.segment_mib * 1024 * 1024)
        # a record in the last batch of the first, the middle and the last segment
        targets = {
            "first": spans[0][1] - RECORDS_PER_BATCH // 2,
            "middle": spans[len(spans) // 2][1] - RECORDS_PER_BATCH // 2,
            "last": spans[-1][1] - RECORDS_PER_BATCH // 2,
        }
        results: dict[str, dict[str, float]] = {}
        for name, target in targets.items():
            opened, cold, warm = [], [], []
            for _ in range(args.rounds):
                start = time.perf_counter()
                log = Log.open(dir, LogConfig(segment_bytes=args.segment_mib * 1024 * 1024), SystemTime())
                opened.append(time.perf_counter() - start)
                try:
                    start = time.perf_counter()
                    found = log.fetch_offset_by_timestamp(target)
                    cold.append(time.perf_counter() - start)
                    assert found is not None and found[0] == target, (found, target)
                    start = time.perf_counter()
                    log.fetch_offset_by_timestamp(target)
                    warm.append(time.perf_counter() - start)
                finally:
                    log.close()
            results[name] = {
                "open_ms": round(min(opened) * 1000, 2),
                "cold_ms": round(min(cold) * 1000, 2),
                "warm_ms": round(min(warm) * 1000, 2),
            }
            open_ms, cold_ms, warm_ms = (results[name][k] for k in ("open_ms", "cold_ms", "warm_ms"))
            print(f"{name:>6} segment: open {open_ms:8.2f} ms  cold {cold_ms:8.2f} ms  warm {warm_ms:8.2f} ms")
        log = Log.open(dir, LogConfig(segment_bytes=args.segment_mib * 1024 * 1024), SystemTime())
        try:
            segment = log.segments[0]
            walks: dict[str, list[float]] = {"mmap": [], "pread": []}
            for _ in range(7):
                start = time.process_time()
                walked = sum(1 for _ in segment._batches_reaching(-1, 0))
                walks["mmap"].append(time.process_time() - start)
                start = time.process_time()
                assert sum(1 for _ in segment._walk_headers(0)) == walked == per_segment
                walks["pread"].append(time.process_time() - start)
        finally:
            log.close()
        walk_us = {name: round(min(times) * 1e6 / per_segment, 3) for name, times in walks.items()}
        print(f"a whole segment's walk, CPU a header: mmap {walk_us['mmap']} µs, pread {walk_us['pread']} µs")
        per_header_us = results["last"]["warm_ms"] * 1000 / per_segment
        print(f"{per_segment} batches a segment; warm walk ≈ {per_header_us:.2f} µs a batch header")
        print(
            json.dumps(
                {
                    "segments": args.segments,
                    "segment_mib": args.segment_mib,
                    "batches_per_segment": per_segment,
                    "results": results,
                    "per_header_us": round(per_header_us, 3),
                    "walk_cpu_us_per_header": walk_us,
                }
            )
        )


if __name__ == "__main__":
    main()
