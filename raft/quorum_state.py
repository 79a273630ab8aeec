"""What a quorum member must remember across a crash: its epoch, whom it voted for, whom it follows.

How this works
--------------
Raft's safety rests on two facts surviving a restart: the highest epoch a node has seen, and the vote it
gave in that epoch (a node that forgot its vote could vote twice in one epoch and let two leaders be
elected). `QuorumStateStore.write` replaces the `quorum-state` file atomically (temp file, fsync, rename,
fsync of the directory) *before* the node acts on the new state: before it answers a VOTE it granted,
before it asks for votes as a candidate, before it acts as a leader or follower of a new epoch. It is JSON,
as Kafka's `quorum-state` file:

    {"leader_epoch": 5, "leader_id": 2, "voted_id": -1, "data_version": 0}

A missing file is epoch 0 with no leader and no vote: a node that never took part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from server_common.storage import write_atomically

QUORUM_STATE_FILE = "quorum-state"
DATA_VERSION = 0


class QuorumStateError(Exception):
    """The quorum-state file cannot be read: refuse to start rather than risk a second vote."""


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None


class QuorumStateStore:
    def __init__(self, directory: Path) -> None:
        self.path = directory / QUORUM_STATE_FILE
        self.writes = 0

    def read(self) -> ElectionState:
        if not self.path.exists():
            return ElectionState(0)
        try:
            data = json.loads(self.path.read_text())
            epoch, leader_id, voted_id = int(data["leader_epoch"]), int(data["leader_id"]), int(data["voted_id"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise QuorumStateError(f"{self.path}: unreadable quorum state: {exc}") from None
        if epoch < 0:
            raise QuorumStateError(f"{self.path}: negative epoch {epoch}")
        return ElectionState(epoch, leader_id if leader_id >= 0 else None, voted_id if voted_id >= 0 else None)

    def write(self, state: ElectionState) -> None:
        data = {
            "leader_epoch": state.epoch,
            "leader_id": -1 if state.leader_id is None else state.leader_id,
            "voted_id": -1 if state.voted_id is None else state.voted_id,
            "data_version": DATA_VERSION,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, (json.dumps(data) + "\n").encode())
        self.writes += 1
