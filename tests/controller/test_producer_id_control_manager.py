"""ProducerIdControlManager on its own: new ids are durable before they are given; a known id gets its next
epoch until the epoch runs out."""

from __future__ import annotations

from controller.producer_id_control_manager import MAX_PRODUCER_EPOCH
from metadata.records import MetadataRecord, ProducerIdsRecord
from protocol.messages import InitProducerIdRequest
from tests.controller.managers import Managers


def test_each_new_producer_gets_the_next_id_committed_before_the_answer() -> None:
    m = Managers()
    committed: list[MetadataRecord] = []
    first = m.producer_ids.init_producer_id(InitProducerIdRequest(), committed)
    second = m.producer_ids.init_producer_id(InitProducerIdRequest(), committed)
    assert (first.producer_id, second.producer_id) == (0, 1) and first.producer_epoch == second.producer_epoch == 0
    assert committed == [ProducerIdsRecord(1), ProducerIdsRecord(2)]


def test_a_known_producer_gets_its_next_epoch_and_at_the_limit_a_new_id() -> None:
    m = Managers()
    m.producer_ids.init_producer_id(InitProducerIdRequest(), [])
    committed: list[MetadataRecord] = []
    bumped = m.producer_ids.init_producer_id(InitProducerIdRequest(None, 60000, 0, 4), committed)
    assert (bumped.producer_id, bumped.producer_epoch, committed) == (0, 5, [])
    renewed = m.producer_ids.init_producer_id(InitProducerIdRequest(None, 60000, 0, MAX_PRODUCER_EPOCH), [])
    assert (renewed.producer_id, renewed.producer_epoch) == (1, 0)
