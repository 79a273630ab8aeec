"""Whose fault: the chaos verdict's split of what the cluster lost from what a client only claimed.

How this works
--------------
A chaos load's client reports each record delivered at (partition, offset) or not. Those reports are the
client's word, and a client can be wrong: KafkaJS 2.2.4 resolves `send()` under leader kills for records
no broker ever acknowledged. Held to the reports alone, the verdict would blame the cluster for the
client's bug. So the brokers journal every batch they acknowledge (broker/produce_ack_journal.py:
partition, base offset, record count, producer id/epoch/base sequence, written before the answer), and
`classify` sets three things side by side: those journals (acks=all lines only: acks=1 promises less),
the final log (the leader's copy once the replicas have converged, which the oracle separately checks
byte-identical), and the client's claims.

The cluster's, any of which makes the run invalid:
* lost: a journalled batch that is not in the final log as acknowledged: no batch starts at its base
  offset, or the one there is another batch (another record count, producer id, epoch or base sequence;
  without a producer id, another first timestamp). Reported per batch, with the broker(s) that
  acknowledged it, their leader epoch, and the values the client claimed at those offsets.
* duplicated: a value the brokers acknowledged that the final log holds at two offsets, both copies under
  the same producer id, epoch and sequence, which is exactly what the broker must deduplicate; a load
  whose client never resends a value as a new record (minibroker's own) has every such duplicate
  counted here.

The client's, reported and never by themselves an invalid run:
* unacknowledged: a value the client reported delivered that no journalled batch holds: the client
  claimed a write no broker acknowledged (not in the log at all, or in it, but never acknowledged);
* misplaced: a value acknowledged at one offset that the client reported at another;
* resent: a value in the log twice under different producer identities (a new epoch, or no producer
  id): the client sent it again as a new record, which only the client could have avoided;
* unclaimed (a count): acknowledged records the client did not report delivered (it reported them
  failed or indeterminate): no harm to anyone's data, but what the application was told.

Values the brokers acknowledged (`acknowledged`) are the ones the rest of the run must find (the consumer
group's "acknowledged, never read" check); a claim backed by nothing is not held against the cluster.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.produce_ack_journal import AckedBatch
from protocol.messages import TopicPartition
from protocol.record_batch import BatchHeader, iter_headers, iter_records

Claims = dict[str, tuple[TopicPartition, int]]  # value -> where the client said it was delivered


@dataclass
class Verdict:
    acknowledged: Claims = field(default_factory=dict)  # value -> where a broker acknowledged it and it is
    acknowledged_batches: int = 0
    lost: list[dict[str, Any]] = field(default_factory=list)  # per batch
    duplicated: list[dict[str, Any]] = field(default_factory=list)
    unacknowledged: list[dict[str, Any]] = field(default_factory=list)
    misplaced: list[dict[str, Any]] = field(default_factory=list)
    resent: list[dict[str, Any]] = field(default_factory=list)
    unclaimed: int = 0  # acknowledged records the client did not report delivered (it reported them failed)

    @property
    def lost_records(self) -> int:
        return sum(b["records"] for b in self.lost)

    def report(self, examples: int = 5) -> dict[str, Any]:
        """The JSON report's `acknowledgements` section: every lost batch and every unacknowledged claim, with
        its partition and offsets; `examples` of the rest."""
        return {
            "evidence": "produce.ack.journal of every broker",
            "broker_acknowledged_batches": self.acknowledged_batches,
            "broker_acknowledged_records": len(self.acknowledged),
            "cluster": {
                "lost_batches": len(self.lost),
                "lost_records": self.lost_records,
                "duplicated_records": len(self.duplicated),
                "lost": self.lost,
                "duplicated": self.duplicated[:examples],
            },
            "client": {
                "unacknowledged_claims": len(self.unacknowledged),
                "misplaced_claims": len(self.misplaced),
                "resent_records": len(self.resent),
                "acknowledged_not_claimed": self.unclaimed,
                "unacknowledged": self.unacknowledged,
                "unacknowledged_by_partition": _by_partition(self.unacknowledged),
                "misplaced": self.misplaced[:examples],
                "resent": self.resent[:examples],
            },
        }


def stored_batches(blob: bytes) -> tuple[dict[int, BatchHeader], dict[int, str | None]]:
    """A replica's bytes as (its batch headers by base offset, each record's value by offset)."""
    batches = {h.base_offset: h for h in iter_headers(blob)}
    values = {r.offset: (None if r.value is None else r.value.decode(errors="replace")) for r in iter_records(blob)}
    return batches, values


def same_batch(acked: AckedBatch, stored: BatchHeader) -> bool:
    """Is the batch in the log the one the journal line acknowledged? An idempotent batch is known by its
    producer id, epoch and base sequence (what the broker deduplicates on; a client may re-encode a resend
    with new timestamps); another by its first timestamp, which no leader rewrites."""
    if (acked.record_count, acked.producer_id) != (stored.record_count, stored.producer_id):
        return False
    if acked.producer_id >= 0:
        return (acked.producer_epoch, acked.base_sequence) == (stored.producer_epoch, stored.base_sequence)
    return acked.first_timestamp == stored.first_timestamp


def classify(
    claims: Claims,
    journal: Iterable[AckedBatch],
    copies: dict[TopicPartition, dict[int, bytes]],
    leaders: dict[TopicPartition, int],
    client_resends: bool = True,
) -> Verdict:
    """See the module's doc. `copies` and `leaders` are the oracle's (each replica's bytes below its HW after
    convergence, and each partition's leader); `client_resends` is False for a load that never sends a
    value twice as two records (then any duplicate is the cluster's)."""
    verdict = Verdict()
    logs = {tp: stored_batches(replicas[leaders[tp]]) for tp, replicas in copies.items()}
    found: dict[str, list[tuple[TopicPartition, int]]] = defaultdict(list)
    for tp, (_, values) in logs.items():
        for offset, value in values.items():
            if value is not None:
                found[value].append((tp, offset))
    claimed_at: dict[tuple[TopicPartition, int], str] = {where: value for value, where in claims.items()}

    # The journals: one entry per acknowledged batch, whoever acknowledged it and however often.
    promises: dict[tuple[TopicPartition, int, int, int, int, int], list[AckedBatch]] = defaultdict(list)
    for acked in journal:
        if acked.acks != -1:
            continue
        tp = TopicPartition(acked.topic, acked.partition)
        key = (tp, acked.base_offset, acked.record_count, acked.producer_id, acked.producer_epoch, acked.base_sequence)
        promises[key].append(acked)
    verdict.acknowledged_batches = len(promises)
    for (tp, base, count, *_), lines in sorted(promises.items(), key=lambda item: (str(item[0][0]), item[0][1])):
        batches, values = logs.get(tp, ({}, {}))
        stored = batches.get(base)
        if stored is not None and same_batch(lines[0], stored):
            for offset in range(base, base + count):
                value = values.get(offset)
                if value is not None:
                    verdict.acknowledged[value] = (tp, offset)
            continue
        first = lines[0]
        verdict.lost.append(
            {
                "partition": str(tp),
                "offsets": [base, base + count - 1],
                "records": count,
                "producer_id": first.producer_id,
                "producer_epoch": first.producer_epoch,
                "base_sequence": first.base_sequence,
                "acknowledged_by": sorted({line.broker_id for line in lines}),
                "leader_epoch": first.leader_epoch,
                "in_the_log_there": "nothing" if stored is None else "another batch",
                "claimed_values": [claimed_at[(tp, o)] for o in range(base, base + count) if (tp, o) in claimed_at],
            }
        )

    for value, where in sorted(found.items()):
        if len(where) < 2 or (value not in verdict.acknowledged and value not in claims):
            continue
        identities = [_identity(logs[t][0], o) for t, o in where]
        same = any(i is not None and identities.count(i) > 1 for i in identities)
        # each copy's (producer id, epoch, sequence), null without a producer id: what tells the two apart
        entry = {"value": value, "found_at": [[str(t), o] for t, o in where], "producer": identities}
        cluster_s = value in verdict.acknowledged and (same or not client_resends)
        (verdict.duplicated if cluster_s else verdict.resent).append(entry)

    verdict.unclaimed = sum(1 for value in verdict.acknowledged if value not in claims)
    for value, (tp, offset) in claims.items():
        at = verdict.acknowledged.get(value)
        if at is None:
            verdict.unacknowledged.append(
                {
                    "value": value,
                    "partition": str(tp),
                    "offset": offset,
                    "in_the_log_at": [[str(t), o] for t, o in found.get(value, [])],
                    # what the offset the client named holds: another value a broker acknowledged there means
                    # the client took that answer for this record (a reused producer sequence is answered
                    # as a duplicate of the record first written with it, as Kafka does)
                    "offset_holds": logs[tp][1].get(offset) if tp in logs and offset >= 0 else None,
                }
            )
        elif offset >= 0 and at != (tp, offset):
            verdict.misplaced.append(
                {"value": value, "claimed_at": [str(tp), offset], "acknowledged_at": [str(at[0]), at[1]]}
            )
    return verdict


def _identity(batches: dict[int, BatchHeader], offset: int) -> tuple[int, int, int] | None:
    """(producer id, epoch, sequence) of the record at `offset`, or None for a record without a producer id."""
    for base, batch in batches.items():
        if base <= offset < base + batch.record_count:
            if batch.producer_id < 0:
                return None
            return batch.producer_id, batch.producer_epoch, batch.base_sequence + offset - base
    return None


def _by_partition(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per partition: how many claims, and the lowest and highest offset the client gave (-1: it gave none)."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        p = out.setdefault(e["partition"], {"claims": 0, "offsets": [e["offset"], e["offset"]]})
        p["claims"] += 1
        p["offsets"] = [min(p["offsets"][0], e["offset"]), max(p["offsets"][1], e["offset"])]
    return dict(sorted(out.items()))
