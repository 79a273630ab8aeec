"""The produce acknowledgement journal (`produce.ack.journal`): one line per batch this broker acknowledged.

How this works
--------------
A chaos run must tell what the cluster lost from what a client only believed was written. A client's
delivery report is no evidence of the first: a client with a retry bug (KafkaJS 2.2.4 under leader kills)
reports records as sent that no broker ever acknowledged. So a broker started with `produce.ack.journal=FILE`
appends to FILE, for every PRODUCE it answers, one line per batch it answered NONE for, written with one
`os.write` per request *before* the answer goes back to the socket:

    time_ms  topic  partition  base_offset  record_count  producer_id  producer_epoch  base_sequence
    first_timestamp  acks  leader_epoch

tab-separated (a topic name has no tab: Kafka's legal characters are `[a-zA-Z0-9._-]`), `\\n`-ended. An
idempotent resend answered as a duplicate is journalled with the original's offsets, as it is answered.
acks=0 requests get no answer, so no line. Internal writes (the group coordinator's commits) go through
the same handler and are journalled like any other topic's; readers filter by topic.

Durability: the line is in the kernel's page cache once `os.write` returns, and a process killed with
SIGKILL (or paused, or cut off the network) never loses what the kernel holds: the file has it for the
next reader. So the journal is complete for every fault a chaos run injects. It is not fsynced: only a
machine that loses power or its kernel would lose lines, and then the broker's own log (not fsynced per
write either, as Kafka's `log.flush.interval.messages` default) is not the evidence either; an fsync per
acknowledged request would cost milliseconds on a busy disk and change the very timing the run observes.

Off by default: the handler's only cost is then one `is None` test per PRODUCE (bench/ack_journal.py).
A write that fails (a full disk) is logged, once until one succeeds again, and the broker goes on: the
journal is a test instrument and must never take a partition down; a reader that finds it short would
see client claims it cannot back, not lost data.

`read_journal` parses a journal back (or the part of it written after a byte offset) for the chaos
verdict (cluster/chaos_verdict.py).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.messages import ProducePartition, ProducePartitionResponse
from protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD

log = logging.getLogger(__name__)

# The header fields a line needs, read straight from the batch header (protocol/record_batch.py's table):
# batch_length @8, last_offset_delta @23, first_timestamp @27, producer_id @43, producer_epoch @51,
# base_sequence @53. The log has checked the framing of every batch it appended; building a BatchHeader
# per batch cost 4 µs, this unpack a tenth of it (bench/ack_journal.py).
_LINE_FIELDS = struct.Struct(">8xi11xiq8xqhi")
assert _LINE_FIELDS.size <= HEADER_SIZE

FIELDS = (
    "time_ms",
    "topic",
    "partition",
    "base_offset",
    "record_count",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "first_timestamp",
    "acks",
    "leader_epoch",
)


@dataclass(frozen=True, slots=True)
class AckedBatch:
    """One journal line: a batch broker `broker_id` answered NONE for, and where it said it put it."""

    broker_id: int
    time_ms: int
    topic: str
    partition: int
    base_offset: int
    record_count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    first_timestamp: int
    acks: int
    leader_epoch: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1


class ProduceAckJournal:
    """Appends the acknowledged batches of each answered PRODUCE to one file (see the module's doc)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.failed_writes = 0

    def record(
        self,
        acks: int,
        entries: Iterable[ProducePartition],
        answers: Iterable[ProducePartitionResponse],
        now_ms: int,
        leader_epoch: Callable[[str, int], int],
    ) -> None:
        """Journal the batches of `entries` whose answer (same order) is NONE; `leader_epoch(topic, partition)`
        is this broker's epoch for the partition now."""
        lines = []
        for entry, answer in zip(entries, answers, strict=True):
            if answer.error_code:
                continue
            offset = answer.base_offset
            head = f"{now_ms}\t{entry.topic}\t{entry.partition}\t"
            tail = f"\t{acks}\t{leader_epoch(entry.topic, entry.partition)}\n"
            records = entry.records
            position, end = 0, len(records)
            while position + HEADER_SIZE <= end:
                length, delta, first_ts, pid, epoch, seq = _LINE_FIELDS.unpack_from(records, position)
                lines.append(f"{head}{offset}\t{delta + 1}\t{pid}\t{epoch}\t{seq}\t{first_ts}{tail}")
                offset += delta + 1
                position += LOG_OVERHEAD + length
        if lines:
            self._write("".join(lines).encode())

    def _write(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            if not self.failed_writes:
                log.error("produce.ack.journal %s: write failed (reported once until one succeeds): %s", self.path, exc)
            self.failed_writes += 1
            return
        if self.failed_writes:
            log.info("produce.ack.journal %s: writes work again after %d failed", self.path, self.failed_writes)
            self.failed_writes = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def parse_line(line: str, broker_id: int) -> AckedBatch:
    """One journal line (without its newline) as an AckedBatch; ValueError if it is not one."""
    parts = line.split("\t")
    if len(parts) != len(FIELDS):
        raise ValueError(f"a journal line has {len(FIELDS)} tab-separated fields, not {len(parts)}: {line!r}")
    numbers = [int(p) for i, p in enumerate(parts) if i != 1]
    return AckedBatch(broker_id, numbers[0], parts[1], *numbers[1:])


def read_journal(path: str | Path, broker_id: int, start: int = 0, topic: str | None = None) -> Iterator[AckedBatch]:
    """The batches journalled in `path` from byte `start` on (of `topic` only, when given). A last line without
    its newline is one being written right now: left for a later read. A missing file journals nothing."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return
    for raw in data.split(b"\n")[:-1]:
        batch = parse_line(raw.decode(), broker_id)
        if topic is None or batch.topic == topic:
            yield batch


def journal_size(path: str | Path) -> int:
    """Bytes in the journal now (0 when there is none): where a reader interested only in what follows starts."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
