"""MetadataLog: the one way the image changes, and the replicas a command leaves to delete."""

from __future__ import annotations

import pytest

from controller.metadata_log import MetadataLog
from metadata.image import MetadataImage
from metadata.records import MetadataRecord, MetadataReplayError, PartitionRecord, TopicRecord
from protocol.messages import TopicPartition


def test_committed_records_get_the_next_offsets_and_are_replayed_in_order() -> None:
    log = MetadataLog()
    seen: list[MetadataRecord] = []
    log.on_replay = lambda record, image: seen.append(record)
    committed: list[MetadataRecord] = []
    records: list[MetadataRecord] = [TopicRecord("t"), PartitionRecord("t", 0, (1,), (1,), 1)]
    log.commit(records, committed)
    assert log.last_offset == 1 and committed == records == seen
    assert log.image.partition("t", 0) is not None


def test_a_record_the_image_would_refuse_changes_nothing() -> None:
    log = MetadataLog()
    committed: list[MetadataRecord] = []
    with pytest.raises(MetadataReplayError):
        log.commit([TopicRecord("t"), PartitionRecord("t", 0, (1,), (2,), 2)], committed)  # ISR outside replicas
    assert log.last_offset == -1 and committed == [] and log.image.topics == MetadataImage().topics


def test_replicas_to_delete_are_handed_over_once() -> None:
    log = MetadataLog()
    log.delete_replicas(TopicPartition("t", 0), [1, 2])
    assert log.take_deleted_replicas() == {1: [TopicPartition("t", 0)], 2: [TopicPartition("t", 0)]}
    assert log.take_deleted_replicas() == {}
