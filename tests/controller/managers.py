"""The control managers wired as the Controller wires them, over a `MetadataLog` built from records, so a
test can set up exactly the image it needs and call one manager's public methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controller.cluster_control_manager import ClusterControlManager
from controller.configuration_control_manager import ConfigurationControlManager
from controller.controller_config import ControllerConfig
from controller.metadata_log import MetadataLog
from controller.producer_id_control_manager import ProducerIdControlManager
from controller.reassignment_control_manager import ReassignmentControlManager
from controller.replication_control_manager import ReplicationControlManager
from controller.topic_control_manager import TopicControlManager
from metadata.records import MetadataRecord, PartitionRecord, RegisterBrokerRecord, TopicRecord, UnfenceBrokerRecord


class Managers:
    def __init__(self, **config: Any) -> None:
        self.config = ControllerConfig(broker_session_timeout_ms=1000, **config)
        self.log = MetadataLog()
        self.configuration = ConfigurationControlManager(self.config, self.log)
        self.reassignment = ReassignmentControlManager(self.log)
        self.replication = ReplicationControlManager(self.config, self.log, self.configuration, self.reassignment)
        self.topics = TopicControlManager(self.config, self.log)
        self.cluster = ClusterControlManager(self.config, self.log, self.replication)
        self.producer_ids = ProducerIdControlManager(self.log)

    def commit(self, *records: MetadataRecord) -> None:
        self.log.commit(records, [])

    def live_brokers(self, *broker_ids: int) -> None:
        """Registered and unfenced brokers, as if they had registered and heartbeat once."""
        for broker_id in broker_ids:
            epoch = self.log.last_offset + 1
            self.commit(
                RegisterBrokerRecord(broker_id, epoch, f"incarnation-{broker_id}", "127.0.0.1", 9000 + broker_id)
            )
            self.commit(UnfenceBrokerRecord(broker_id, epoch))

    def partition(
        self, replicas: Sequence[int], isr: Sequence[int] | None = None, leader: int | None = None, topic: str = "t"
    ) -> None:
        """Topic `topic` with one partition on `replicas`, led by `leader` (default: the first ISR member)."""
        isr = tuple(replicas if isr is None else isr)
        self.commit(TopicRecord(topic, topic_id=f"id-{topic}"))
        self.commit(PartitionRecord(topic, 0, tuple(replicas), isr, isr[0] if leader is None else leader))

    def epoch(self, broker_id: int) -> int:
        return self.log.image.brokers[broker_id].broker_epoch
