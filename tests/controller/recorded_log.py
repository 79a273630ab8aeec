"""The controller's writer kept in memory: the committed records another controller (a restarted one, or the
next voter to lead) replays. The replicated log itself is raft/'s and is tested there."""

from __future__ import annotations

from collections.abc import Sequence

from controller.controller import Controller
from metadata.records import MetadataRecord


class RecordedLog:
    def __init__(self) -> None:
        self.records: list[MetadataRecord] = []

    @property
    def next_offset(self) -> int:
        return len(self.records)

    def append(self, records: Sequence[MetadataRecord]) -> int:
        self.records.extend(records)
        return len(self.records) - 1

    def replay_into(self, controller: Controller) -> None:
        """What a controller that takes over does: replay everything committed, then become active."""
        if self.records:
            controller.replay(list(self.records), len(self.records) - 1)
        controller.activate()
