"""The broker's view of cluster metadata, as the committed metadata log builds it.

METADATA requests are answered from here; follower fetchers look up their leader's address here. With a
controller quorum, broker/metadata_publisher.py fills it from the broker's image of `__cluster_metadata`
(`update_from_image`). In standalone mode (no controller, e.g. a test fixture that assigns roles
directly) LEADER_AND_ISR's `live_leaders` and partition states fill it in, and UPDATE_METADATA replaces it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from metadata.image import MetadataImage
from protocol.errors import ErrorCode
from protocol.messages import (
    BrokerEndpoint,
    LeaderAndIsrPartition,
    MetadataResponse,
    PartitionMetadata,
    TopicMetadata,
    TopicPartition,
    UpdateMetadataRequest,
)


class MetadataCache:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.partitions: dict[TopicPartition, LeaderAndIsrPartition] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}  # the configs set on each topic
        self.topic_config_defaults: dict[str, str] = {}  # the controller's, for keys a topic does not set
        self.broker_configs: dict[str, dict[str, str]] = {}  # dynamic broker configs ("" = cluster default)
        self.controller_id = -1
        self.controller_epoch = -1
        # Every registered broker's address, live or not: a follower still finds a leader that is shutting
        # down. `brokers` holds only the live ones (what METADATA lists and who may join an ISR).
        self.endpoints: dict[int, BrokerEndpoint] = {}
        self.broker_states: dict[int, tuple[int, bool, bool]] = {}  # (broker epoch, fenced, shutting down)

    def update_from_image(
        self, image: MetadataImage, topic_config_defaults: Mapping[str, str], touched: Iterable[TopicPartition] | None
    ) -> None:
        """Take the image's brokers, topics and configs; the states of the `touched` partitions (None: all)."""
        self.brokers = {b.broker_id: b.endpoint() for b in image.brokers.values() if b.is_active}
        # Each broker's registration as the image has it: what a refused ISR proposal is held against.
        self.broker_states = {
            b.broker_id: (b.broker_epoch, b.fenced, b.in_controlled_shutdown) for b in image.brokers.values()
        }
        self.endpoints = {b.broker_id: b.endpoint() for b in image.brokers.values()}
        self.topic_configs = {name: dict(t.configs) for name, t in image.topics.items()}
        self.topic_config_defaults = dict(topic_config_defaults)
        self.broker_configs = {entity: dict(configs) for entity, configs in image.broker_configs.items()}
        if touched is None:
            self.partitions = {}
            touched = list(image.partitions)
        for tp in touched:
            p = image.partitions.get(tp)
            if p is None:
                self.partitions.pop(tp, None)
            else:
                topic = image.topics.get(tp.topic)
                self.partitions[tp] = p.to_leader_and_isr(topic_id=topic.topic_id if topic is not None else "")

    def update(self, request: UpdateMetadataRequest) -> None:
        """Replace everything: UPDATE_METADATA carries the controller's whole view."""
        if request.controller_epoch < self.controller_epoch:
            return
        self.controller_epoch = request.controller_epoch
        self.controller_id = request.controller_id
        self.brokers = {b.broker_id: b for b in request.brokers}
        self.partitions = {TopicPartition(p.topic, p.partition): p for p in request.partitions}
        self.topic_configs = dict(request.topic_configs)
        self.topic_config_defaults = dict(request.topic_config_defaults)
        self.broker_configs = {entity: dict(configs) for entity, configs in request.broker_configs.items()}

    def merge_partition_states(self, states: list[LeaderAndIsrPartition], leaders: list[BrokerEndpoint]) -> None:
        for b in leaders:
            self.brokers.setdefault(b.broker_id, b)
        for state in states:
            tp = TopicPartition(state.topic, state.partition)
            current = self.partitions.get(tp)
            if current is None or (state.leader_epoch, state.partition_epoch) >= (
                current.leader_epoch,
                current.partition_epoch,
            ):
                self.partitions[tp] = state

    def topic_configs_in_effect(self) -> dict[str, dict[str, str]]:
        """Each topic's configs as its partitions apply them: the controller's defaults, overridden by the
        topic's own."""
        return {topic: {**self.topic_config_defaults, **configs} for topic, configs in self.topic_configs.items()}

    def has_topic(self, topic: str) -> bool:
        return topic in self.topic_configs or any(tp.topic == topic for tp in self.partitions)

    def _metadata_configs(self, topic: str) -> dict[str, str]:
        """METADATA's configs of a topic: its own, plus the min.insync.replicas in effect for it."""
        min_isr = self.topic_config_defaults.get("min.insync.replicas")
        shown = {} if min_isr is None else {"min.insync.replicas": min_isr}
        return {**shown, **self.topic_configs.get(topic, {})}

    def endpoint(self, broker_id: int) -> BrokerEndpoint | None:
        return self.brokers.get(broker_id) or self.endpoints.get(broker_id)

    def topics(self) -> list[str]:
        return sorted({tp.topic for tp in self.partitions})

    def metadata_response(self, topics: list[str] | None) -> MetadataResponse:
        names = self.topics() if topics is None else topics
        by_topic: dict[str, list[PartitionMetadata]] = {}
        for tp, state in sorted(self.partitions.items()):
            offline = [r for r in state.replicas if r not in self.brokers]
            by_topic.setdefault(tp.topic, []).append(
                PartitionMetadata(
                    partition=tp.partition,
                    leader_id=state.leader,
                    leader_epoch=state.leader_epoch,
                    replicas=list(state.replicas),
                    isr=list(state.isr),
                    error_code=int(ErrorCode.LEADER_NOT_AVAILABLE if state.leader < 0 else ErrorCode.NONE),
                    offline_replicas=offline,
                )
            )
        out = []
        for name in names:
            parts = by_topic.get(name)
            if parts is None:
                out.append(
                    TopicMetadata(name, [], int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"unknown topic {name!r}")
                )
            else:
                out.append(TopicMetadata(name, parts, configs=self._metadata_configs(name)))
        return MetadataResponse(
            brokers=sorted(self.brokers.values(), key=lambda b: b.broker_id),
            topics=out,
            controller_id=self.controller_id,
        )
