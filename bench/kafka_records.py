"""Kafka record conversion cost per 16 KiB batch, against the msgpack floor measured in the same run.

    .venv/bin/python -m bench.kafka_records [--quick] [--rounds N] [--codec zstd|lz4|gzip|snappy]

For values of 100 bytes and of 1 KiB (each record with an 8-byte key, no headers, as many records as fill
a 16 KiB stored batch), times per batch, in µs:

* `kafka_to_native` (PRODUCE) of the same records as an uncompressed Kafka batch, and as a Kafka batch
  compressed with `--codec` (zstd by default: it halves these values, so the decompression is real work);
* `native_to_kafka` (FETCH) of the stored batch;
* the floor: `msgpack.unpackb` then `msgpack.packb` of the stored payload, the least any conversion
  to or from the msgpack form does (decode the records, encode them again), with no Kafka framing,
  no CRC and no per-record Python; and, for the compressed case, the codec's decompression alone.

The values are hex text: random, so every batch differs, and compressible about 2:1 by the codecs that
entropy-code (gzip, zstd); lz4 and snappy gain little on hex. Each measurement loops over DISTINCT_BATCHES
batches for a fixed number of conversions, alternates with the others for --rounds rounds (3) and keeps
its best round, since the machine may be shared. All input batches are built before any timing.
Prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

import cramjam
import msgpack

from protocol.kafka_records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    _with_payload,
    kafka_to_native,
    native_to_kafka,
)
from protocol.record_batch import HEADER_SIZE, build_batch, read_header

BATCH_BYTES = 16 * 1024
DISTINCT_BATCHES = 32
KEY_BYTES = 8
VALUE_SIZES = {"v100": 100, "v1k": 1024}

# The codecs as a producer applies them (snappy raw, as librdkafka sends it).
COMPRESSORS: dict[str, tuple[int, Callable[[bytes], Any]]] = {
    "gzip": (CODEC_GZIP, cramjam.gzip.compress),
    "snappy": (CODEC_SNAPPY, cramjam.snappy.compress_raw),
    "lz4": (CODEC_LZ4, cramjam.lz4.compress),
    "zstd": (CODEC_ZSTD, cramjam.zstd.compress),
}
DECOMPRESSORS: dict[str, Callable[[bytes], Any]] = {
    "gzip": cramjam.gzip.decompress,
    "snappy": cramjam.snappy.decompress_raw,
    "lz4": cramjam.lz4.decompress,
    "zstd": cramjam.zstd.decompress,
}


def native_batch(value_bytes: int) -> bytes:
    """A stored batch of about BATCH_BYTES (never more) of records with random hex values."""
    records: list[tuple[bytes | None, bytes | None]] = []
    while True:
        record = (os.urandom(KEY_BYTES // 2).hex().encode(), os.urandom(value_bytes // 2).hex().encode())
        if len(build_batch([*records, record], timestamp_ms=0)) > BATCH_BYTES:
            return build_batch(records, base_offset=1000, partition_leader_epoch=3, timestamp_ms=1_700_000_000_000)
        records.append(record)


def compressed(kafka: bytes, codec: str) -> bytes:
    """The uncompressed Kafka batch with its records compressed by `codec`, length and CRC made right."""
    header = read_header(kafka)
    codec_id, compress = COMPRESSORS[codec]
    return _with_payload(header, bytes(compress(kafka[HEADER_SIZE:])), codec_id)


def per_batch_us(fn: Callable[[Any], Any], inputs: list[Any], count: int) -> float:
    n = len(inputs)
    started = time.perf_counter()
    for i in range(count):
        fn(inputs[i % n])
    return (time.perf_counter() - started) / count * 1e6


def msgpack_floor(payload: bytes) -> bytes:
    return msgpack.packb(msgpack.unpackb(payload), use_bin_type=True)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 conversions per measurement instead of 10,000")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best of each counts")
    parser.add_argument("--codec", choices=sorted(COMPRESSORS), default="zstd", help="the compressed case's codec")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    count = 1_000 if args.quick else 10_000

    result: dict[str, Any] = {"batch_bytes": BATCH_BYTES, "codec": args.codec, "rounds": args.rounds, "count": count}
    for name, value_bytes in VALUE_SIZES.items():
        natives = [native_batch(value_bytes) for _ in range(DISTINCT_BATCHES)]
        kafkas = [native_to_kafka(b) for b in natives]
        packed = [compressed(k, args.codec) for k in kafkas]
        payloads = [b[HEADER_SIZE:] for b in natives]
        packed_payloads = [p[HEADER_SIZE:] for p in packed]
        for native, kafka, squeezed in zip(natives, kafkas, packed, strict=True):
            assert kafka_to_native(kafka) == native and kafka_to_native(squeezed) == native
        decompress = DECOMPRESSORS[args.codec]
        cases: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
            "kafka_to_native_us": (kafka_to_native, kafkas),
            f"kafka_to_native_{args.codec}_us": (kafka_to_native, packed),
            "native_to_kafka_us": (native_to_kafka, natives),
            "msgpack_floor_us": (msgpack_floor, payloads),
            f"{args.codec}_decompress_us": (decompress, packed_payloads),
        }
        best = dict.fromkeys(cases, float("inf"))
        for _ in range(args.rounds):
            for key, (fn, inputs) in cases.items():
                best[key] = min(best[key], per_batch_us(fn, inputs, count))
        result[f"{name}_records_per_batch"] = read_header(natives[0]).record_count
        result[f"{name}_kafka_batch_bytes"] = len(kafkas[0])
        result[f"{name}_{args.codec}_batch_bytes"] = len(packed[0])
        for key, us in best.items():
            result[f"{name}_{key}"] = round(us, 1)
        floor = best["msgpack_floor_us"]
        result[f"{name}_kafka_to_native_vs_floor"] = round(best["kafka_to_native_us"] / floor, 2)
        result[f"{name}_native_to_kafka_vs_floor"] = round(best["native_to_kafka_us"] / floor, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
