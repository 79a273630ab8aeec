"""ProducerIdControlManager on its own: each broker gets a block of ids no other broker gets, committed
before the answer; only a registered broker at its current epoch gets one."""

from __future__ import annotations

from controller.producer_id_control_manager import PRODUCER_ID_BLOCK_SIZE
from metadata.records import MetadataRecord, ProducerIdsRecord, RegisterBrokerRecord
from protocol.errors import ErrorCode
from protocol.messages import AllocateProducerIdsRequest
from tests.controller.managers import Managers


def _registered(m: Managers, *broker_ids: int) -> None:
    for broker_id in broker_ids:
        m.log.commit([RegisterBrokerRecord(broker_id, broker_id * 10, f"i{broker_id}", "h", 1)], [])


def test_each_broker_gets_the_next_block_committed_before_the_answer() -> None:
    m = Managers()
    _registered(m, 1, 2)
    committed: list[MetadataRecord] = []
    first = m.producer_ids.allocate_producer_ids(AllocateProducerIdsRequest(1, 10), committed)
    second = m.producer_ids.allocate_producer_ids(AllocateProducerIdsRequest(2, 20), committed)
    assert (first.producer_id_start, first.producer_id_len) == (0, PRODUCER_ID_BLOCK_SIZE)
    assert second.producer_id_start == PRODUCER_ID_BLOCK_SIZE
    assert committed == [
        ProducerIdsRecord(PRODUCER_ID_BLOCK_SIZE, 1, 10),
        ProducerIdsRecord(2 * PRODUCER_ID_BLOCK_SIZE, 2, 20),
    ]
    assert m.log.image.next_producer_id == 2 * PRODUCER_ID_BLOCK_SIZE


def test_an_unknown_broker_or_an_old_epoch_gets_no_block() -> None:
    m = Managers()
    _registered(m, 1)
    committed: list[MetadataRecord] = []
    unknown = m.producer_ids.allocate_producer_ids(AllocateProducerIdsRequest(9, 0), committed)
    stale = m.producer_ids.allocate_producer_ids(AllocateProducerIdsRequest(1, 3), committed)
    assert unknown.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert committed == [] and m.log.image.next_producer_id == 0
