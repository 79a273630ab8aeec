"""Kafka's PartitionChangeBuilder, in two functions: who leads a partition, and the change that takes a
broker out of its ISR and leadership.

Partition epochs follow KRaft (metadata.py): a leader change bumps `leader_epoch` and `partition_epoch`,
an ISR-only change bumps `partition_epoch`. ISRs are kept in replica order. A clean election picks an
ISR member; an unclean one (only when enabled, only when no ISR member is live) picks any live replica
and resets the ISR to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from metadata.image import PartitionRegistration
from metadata.records import NO_LEADER, PartitionChangeRecord


def elect_leader(replicas: Sequence[int], isr: Iterable[int], live: Iterable[int], unclean: bool) -> int:
    """The new leader, or -1 (NO_LEADER) when no acceptable replica exists.

    Clean: the first replica, in replica order, that is both live and in the ISR, so the preferred
    (first) replica wins whenever it can. Unclean (only when enabled, and only when no ISR member is
    live): the first live replica; the caller then resets the ISR to that leader alone, accepting that
    records acknowledged by the old ISR may be lost.
    """
    isr_set, live_set = set(isr), set(live)
    for replica in replicas:
        if replica in isr_set and replica in live_set:
            return replica
    if unclean:
        for replica in replicas:
            if replica in live_set:
                return replica
    return NO_LEADER


def partition_change(
    partition: PartitionRegistration, remove: int | None, active: frozenset[int], unclean: bool
) -> PartitionChangeRecord | None:
    """The change that takes `remove` out of the partition's ISR and leadership, re-electing as needed.

    With `remove=None` this only elects a leader for a partition that has none (an offline partition
    whose ISR member came back). New leaders are chosen from `active` only. The ISR never becomes empty: when
    `remove` is its last member it stays, and the partition goes offline (leader -1) unless an unclean
    election finds a live replica, whose ISR then becomes just that replica. Returns None when nothing
    changes.
    """
    target_isr = tuple(r for r in partition.isr if r != remove) or partition.isr
    leader = partition.leader
    # Only a missing or removed leader is replaced. A leader that is merely not active stays: that is
    # a broker loaded fenced after a controller restart, which keeps its leaderships until its own
    # session expires (then it is the one removed).
    if leader == NO_LEADER or leader == remove or leader not in target_isr:
        leader = elect_leader(partition.replicas, target_isr, active, unclean)
        if leader != NO_LEADER and leader not in target_isr:
            target_isr = (leader,)
    new_leader = leader if leader != partition.leader else None
    new_isr = target_isr if target_isr != partition.isr else None
    if new_leader is None and new_isr is None:
        return None
    return PartitionChangeRecord(topic=partition.topic, partition=partition.partition, leader=new_leader, isr=new_isr)
