"""Kafka's ProducerIdControlManager: blocks of producer ids for the brokers (KIP-730).

How this works
--------------
The image holds the next producer id no broker has been given. ALLOCATE_PRODUCER_IDS gives the asking
broker the next block of `PRODUCER_ID_BLOCK_SIZE` ids and commits a ProducerIdsRecord that moves the next
id past it before answering, so no id is ever given twice, across controller failovers too (every
controller replays the record). The broker then answers INIT_PRODUCER_ID from its block without asking
anyone (broker/producer_id_manager.py), which is why a broker that cannot reach any controller still
starts new idempotent producers while its block lasts.
"""

from __future__ import annotations

from controller.metadata_log import MetadataLog
from metadata.records import MetadataRecord, ProducerIdsRecord
from protocol.errors import ErrorCode
from protocol.messages import AllocateProducerIdsRequest, AllocateProducerIdsResponse

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_PRODUCER_EPOCH = 2**15 - 1  # an int16 in the batch header


class ProducerIdControlManager:
    def __init__(self, log: MetadataLog) -> None:
        self._log = log

    def allocate_producer_ids(
        self, request: AllocateProducerIdsRequest, committed: list[MetadataRecord]
    ) -> AllocateProducerIdsResponse:
        """The next block of ids for a registered broker, made durable by a ProducerIdsRecord first."""
        broker = self._log.image.brokers.get(request.broker_id)
        if broker is None:
            return AllocateProducerIdsResponse(
                ErrorCode.BROKER_ID_NOT_REGISTERED, f"broker {request.broker_id} is not registered"
            )
        if broker.broker_epoch != request.broker_epoch:
            return AllocateProducerIdsResponse(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {request.broker_id} has epoch {broker.broker_epoch}, not {request.broker_epoch}",
            )
        start = self._log.image.next_producer_id
        self._log.commit(
            [ProducerIdsRecord(start + PRODUCER_ID_BLOCK_SIZE, request.broker_id, request.broker_epoch)], committed
        )
        return AllocateProducerIdsResponse(producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE)
