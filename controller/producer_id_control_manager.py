"""Kafka's ProducerIdControlManager: producer ids for idempotent producers (KIP-98).

How this works
--------------
The image holds the next producer id; INIT_PRODUCER_ID hands it out and commits a ProducerIdsRecord that
moves it on before answering, so no id is given twice, even by a restarted controller (it replays the
record). Kafka hands out blocks of ids to brokers; here the controller answers each producer itself.
"""

from __future__ import annotations

from controller.metadata_log import MetadataLog
from metadata.records import MetadataRecord, ProducerIdsRecord
from protocol.messages import InitProducerIdRequest, InitProducerIdResponse

MAX_PRODUCER_EPOCH = 2**15 - 1  # an int16 in the batch header


class ProducerIdControlManager:
    def __init__(self, log: MetadataLog) -> None:
        self._log = log

    def init_producer_id(
        self, request: InitProducerIdRequest, committed: list[MetadataRecord]
    ) -> InitProducerIdResponse:
        """INIT_PRODUCER_ID: a new producer id at epoch 0, made durable by a ProducerIdsRecord before the
        answer. A producer that names its id gets the same id at the next epoch (Kafka's epoch bump after
        UNKNOWN_PRODUCER_ID or a timeout); at the epoch's limit it gets a new id instead."""
        if 0 <= request.producer_id < self._log.image.next_producer_id and request.producer_epoch < MAX_PRODUCER_EPOCH:
            return InitProducerIdResponse(producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1)
        producer_id = self._log.image.next_producer_id
        self._log.commit([ProducerIdsRecord(next_producer_id=producer_id + 1)], committed)
        return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)
