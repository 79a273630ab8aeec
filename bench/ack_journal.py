"""What the produce acknowledgement journal (`produce.ack.journal`) costs a broker per acknowledged batch.

    .venv/bin/python -m bench.ack_journal [--quick] [--rounds N] [--dir D]

In one process, a broker's real request path without sockets: `KafkaApis.handle_produce` over a real
`ReplicaManager` and log on a temporary directory (on the disk unless `--dir`), the broker leading one
partition alone (ISR of one, so an acks=all PRODUCE is answered as soon as it is appended, as it would be
once the followers have fetched). Each PRODUCE carries one batch of 16 records of 100 bytes, acks=all:
the shape of a chaos load's requests. The same batches go through with the journal off (the baseline, the
default) and on (appending to a file in the same directory), alternating for `--rounds` rounds (5); each
variant keeps its best round, since the machine is shared.

Reported (CPU time, user + system, so the journal's write syscall counts): `off_cpu_us_per_batch`,
`on_cpu_us_per_batch`, `journal_cpu_us_per_batch` (on minus off), `journal_ratio` (on / off),
`record_cpu_us_per_batch` (the journal's `record` call alone, one batch: what the on-path adds, measured
without the rest of the request's noise), `off_check_ns` (what the handler does when the journal is off:
one `is None` test, timed by itself), `journal_bytes_per_batch`, `batches`.
Prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import timeit
from pathlib import Path
from time import process_time
from typing import Any

from bench.common import emit, progress, rounded
from broker.fetch_session import FetchManager, FetchSessionCache
from broker.kafka_apis import KafkaApis
from broker.log_manager import LogManager
from broker.metadata_cache import MetadataCache
from broker.produce_ack_journal import ProduceAckJournal
from broker.purgatory import DelayedOperationPurgatory
from broker.replica_manager import ReplicaManager
from broker.timer import SystemTimer
from network.request_context import ConnectionContext
from protocol.errors import ErrorCode
from protocol.messages import (
    LeaderAndIsrPartition,
    LeaderAndIsrRequest,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
)
from protocol.record_batch import build_batch
from server_common.log_config import LogConfig
from server_common.time import SYSTEM_TIME

BROKER_ID = 1
TOPIC = "bench"
RECORDS_PER_BATCH = 16
VALUE_BYTES = 100
CTX = ConnectionContext(1, "bench")


def broker_apis(directory: Path) -> tuple[KafkaApis, LogManager]:
    """KafkaApis over a real replica manager leading partition 0 of TOPIC alone."""
    log_manager = LogManager(directory, LogConfig(), SYSTEM_TIME)
    fetch: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory("Fetch", SystemTimer(SYSTEM_TIME))
    produce: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory("Produce", SystemTimer(SYSTEM_TIME))
    replica_manager = ReplicaManager(BROKER_ID, log_manager, SYSTEM_TIME, fetch, produce)
    state = LeaderAndIsrPartition(TOPIC, 0, BROKER_ID, 1, [BROKER_ID], 1, [BROKER_ID])
    response = replica_manager.become_leader_or_follower(LeaderAndIsrRequest(3000, 1, [state]))
    assert [p.error_code for p in response.partitions] == [ErrorCode.NONE], response
    apis = KafkaApis(
        BROKER_ID,
        replica_manager,
        MetadataCache(BROKER_ID),
        FetchManager(FetchSessionCache(), SYSTEM_TIME),
        SYSTEM_TIME,
    )
    return apis, log_manager


CHUNK = 250  # batches of one variant before the other's turn: both see the same moments of a shared machine


async def paired_round(directory: Path, batches: list[bytes]) -> tuple[float, float, int]:
    """(CPU seconds off, CPU seconds on, journal bytes): the same batches through two brokers on fresh logs,
    one without the journal and one with it, CHUNK requests at a time in turn."""
    off, off_logs = broker_apis(directory / "off")
    on, on_logs = broker_apis(directory / "on")
    path = directory / "ack.journal"
    journal = on.ack_journal = ProduceAckJournal(path)
    spent = {id(off): 0.0, id(on): 0.0}
    try:
        for first in range(0, len(batches), CHUNK):
            requests = [
                ProduceRequest(-1, 30_000, [ProducePartition(TOPIC, 0, b)]) for b in batches[first : first + CHUNK]
            ]
            for apis in (off, on) if first // CHUNK % 2 == 0 else (on, off):
                start = process_time()
                for request in requests:
                    response = await apis.handle_produce(CTX, request)
                    assert isinstance(response, ProduceResponse) and not response.partitions[0].error_code, response
                spent[id(apis)] += process_time() - start
    finally:
        off_logs.close()
        on_logs.close()
        journal.close()
    return spent[id(off)], spent[id(on)], path.stat().st_size


def record_alone(directory: Path, batches: list[bytes]) -> float:
    """CPU seconds of ProduceAckJournal.record for each batch, answered NONE at consecutive offsets."""
    from protocol.messages import ProducePartitionResponse

    journal = ProduceAckJournal(directory / "record-alone.journal")
    entries = [[ProducePartition(TOPIC, 0, b)] for b in batches]
    answers = [[ProducePartitionResponse(TOPIC, 0, base_offset=i * RECORDS_PER_BATCH)] for i in range(len(batches))]
    start = process_time()
    for entry, answer in zip(entries, answers, strict=True):
        journal.record(-1, entry, answer, 1_700_000_000_000, lambda topic, partition: 1)
    seconds = process_time() - start
    journal.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 batches a round instead of 20,000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", help="where the logs and the journal go (default: a temporary dir on the disk)")
    args = parser.parse_args()
    count = 5_000 if args.quick else 20_000
    values = [os.urandom(VALUE_BYTES) for _ in range(RECORDS_PER_BATCH)]
    batches = [build_batch(values, timestamp_ms=1_700_000_000_000 + i) for i in range(count)]
    base = Path(tempfile.mkdtemp(prefix="bench-ack-journal-", dir=args.dir))
    try:
        off: list[float] = []
        on: list[float] = []
        journal_bytes = 0
        for n in range(args.rounds):
            directory = base / f"round-{n}"
            directory.mkdir()
            off_s, on_s, journal_bytes = asyncio.run(paired_round(directory, batches))
            off.append(off_s)
            on.append(on_s)
            progress(f"round {n + 1}/{args.rounds}: off {off_s / count * 1e6:.2f} µs, on {on_s / count * 1e6:.2f} µs")
        record = min(record_alone(base, batches) for _ in range(args.rounds))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    apis_off = type("Apis", (), {"ack_journal": None})()
    check_s = min(timeit.repeat("apis.ack_journal is not None", globals={"apis": apis_off}, number=1_000_000, repeat=5))
    best_off, best_on = min(off), min(on)
    emit(
        {
            "benchmark": "ack_journal",
            "batches": count,
            "records_per_batch": RECORDS_PER_BATCH,
            "off_cpu_us_per_batch": rounded(best_off / count * 1e6),
            "on_cpu_us_per_batch": rounded(best_on / count * 1e6),
            "journal_cpu_us_per_batch": rounded((best_on - best_off) / count * 1e6),
            "journal_ratio": rounded(best_on / best_off, 3),
            "record_cpu_us_per_batch": rounded(record / count * 1e6),
            "off_check_ns": rounded(check_s / 1_000_000 * 1e9, 1),
            "journal_bytes_per_batch": rounded(journal_bytes / count, 1),
        }
    )


if __name__ == "__main__":
    main()
