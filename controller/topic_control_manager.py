"""Topics: creating them, deleting them and adding partitions to them (CREATE_TOPICS, DELETE_TOPICS,
CREATE_PARTITIONS), with Kafka's replica placement. Kafka keeps these in its ReplicationControlManager;
here they have their own file, so partition leadership and ISR changes read on their own.

How this works
--------------
A new topic's partitions are placed on the active brokers by Kafka's rack-unaware
`assign_replicas_to_brokers` (first replica preferred, leaders spread round-robin from a start chosen by
the topic's name), committed as one TopicRecord and a PartitionRecord per partition, all led by their
preferred replica at epoch 0. A topic's id is the metadata offset of its TopicRecord. Added partitions
continue the same round-robin from partition 0's preferred replica. A deleted topic is one
RemoveTopicRecord, and every replica of its partitions is told to stop and delete its log. The work one
request may do is bounded (create.topics.request.max.topics and .max.partitions), so no request holds
the controller's loop, and with it every broker's heartbeat, for long.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Sequence

from controller.controller_config import ControllerConfig
from controller.metadata_log import MetadataLog
from metadata.records import MetadataRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import (
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    TopicPartition,
)
from server_common.log_config import topic_config_error


def assign_replicas_to_brokers(
    num_partitions: int,
    replication_factor: int,
    broker_ids: Sequence[int],
    start_index: int,
    replica_shift: int,
    start_partition_id: int = 0,
) -> list[tuple[int, ...]]:
    """Kafka's rack-unaware `assignReplicasToBrokers`: replicas of partitions `start_partition_id` onwards,
    first replica preferred.

    The first replica walks the sorted brokers round-robin from `start_index`, so leaders spread evenly;
    the followers sit at a shift from the first replica, and the shift grows by one every time the
    first replica wraps around, so follower sets differ between rounds. Partitions added to a topic
    (CREATE_PARTITIONS) are numbered on from the existing ones, so the round-robin goes on where it was.
    """
    brokers = sorted(broker_ids)
    n = len(brokers)
    if not 0 < replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} with {n} brokers")
    assignment: list[tuple[int, ...]] = []
    shift = replica_shift
    for p in range(start_partition_id, start_partition_id + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        assignment.append(tuple(replicas))
    return assignment


_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _topic_name_error(name: str) -> str | None:
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-]"
    return None


class TopicControlManager:
    def __init__(self, config: ControllerConfig, log: MetadataLog) -> None:
        self.config = config
        self._log = log

    def create_topics(self, request: CreateTopicsRequest, committed: list[MetadataRecord]) -> CreateTopicsResponse:
        """Validation is linear in the request and its work is bounded by
        `create.topics.request.max.topics` and `create.topics.request.max.partitions`, so no request can
        hold the controller's loop (and with it every broker's heartbeat) for long. A name listed more than
        once is refused with INVALID_REQUEST, once in the answer, as Kafka does."""
        config = self.config
        if len(request.topics) > config.create_topics_request_max_topics:
            return CreateTopicsResponse(
                error_code=ErrorCode.INVALID_REQUEST,
                error_message=f"{len(request.topics)} topics in one request; at most "
                f"{config.create_topics_request_max_topics} (create.topics.request.max.topics)",
            )
        counts = Counter(t.name for t in request.topics)
        results: list[CreatableTopicResult] = []
        partitions_left = config.create_topics_request_max_partitions
        for topic in request.topics:
            count = counts[topic.name]
            if count == 0:
                continue  # a duplicate already answered
            if count > 1:
                results.append(
                    CreatableTopicResult(
                        name=topic.name,
                        error_code=ErrorCode.INVALID_REQUEST,
                        error_message=f"topic {topic.name} is listed {count} times in one request",
                    )
                )
                counts[topic.name] = 0
                continue
            wanted = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            if wanted > partitions_left:
                results.append(
                    CreatableTopicResult(
                        name=topic.name,
                        error_code=ErrorCode.INVALID_PARTITIONS,
                        error_message=f"{wanted} partitions would pass the "
                        f"{config.create_topics_request_max_partitions} one request may create "
                        "(create.topics.request.max.partitions)",
                    )
                )
                continue
            result = self._create_topic(topic, committed)
            if result.error_code == ErrorCode.NONE:
                partitions_left -= wanted
            results.append(result)
        return CreateTopicsResponse(topics=results)

    def _create_topic(self, topic: CreatableTopic, committed: list[MetadataRecord]) -> CreatableTopicResult:
        num_partitions = self.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        replication_factor = (
            self.config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
        )
        active = sorted(self._log.image.active_broker_ids())

        def error(code: ErrorCode, message: str) -> CreatableTopicResult:
            return CreatableTopicResult(name=topic.name, error_code=code, error_message=message)

        if (name_error := _topic_name_error(topic.name)) is not None:
            return error(ErrorCode.INVALID_TOPIC_EXCEPTION, name_error)
        if topic.name in self._log.image.topics:
            return error(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name} already exists")
        if (config_error := topic_config_error(topic.configs)) is not None:
            return error(ErrorCode.INVALID_CONFIG, config_error)
        if num_partitions <= 0:
            return error(ErrorCode.INVALID_PARTITIONS, f"number of partitions must be positive, got {num_partitions}")
        if replication_factor <= 0:
            return error(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor must be positive, got {replication_factor}",
            )
        if replication_factor > len(active):
            return error(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication_factor} is larger than the {len(active)} available brokers",
            )
        seed = zlib.crc32(topic.name.encode())
        assignment = assign_replicas_to_brokers(
            num_partitions,
            replication_factor,
            active,
            start_index=seed % len(active),
            replica_shift=seed // len(active),
        )
        # Only what the request sets is stored: a key it leaves out follows the controller's default
        # (`topic_config_defaults`), so DESCRIBE_CONFIGS can tell one from the other.
        configs = dict(topic.configs)
        # The id is the metadata offset of the TopicRecord: unique for the life of the cluster, like broker
        # epochs, and the same in every replay (the simulator needs runs to repeat exactly).
        topic_id = f"{self._log.next_offset:016x}"
        records: list[MetadataRecord] = [TopicRecord(name=topic.name, configs=configs, topic_id=topic_id)]
        records += [
            PartitionRecord(topic=topic.name, partition=i, replicas=replicas, isr=replicas, leader=replicas[0])
            for i, replicas in enumerate(assignment)
        ]
        self._log.commit(records, committed)
        return CreatableTopicResult(
            name=topic.name, num_partitions=num_partitions, replication_factor=replication_factor
        )

    # -- deleting topics ----------------------------------------------------------------------------

    def delete_topics(self, request: DeleteTopicsRequest, committed: list[MetadataRecord]) -> DeleteTopicsResponse:
        """DELETE_TOPICS: one RemoveTopicRecord per existing topic; every replica of its partitions is then
        told to stop and delete its log (STOP_REPLICA, `deleted_replicas`). The name can be created again
        at once: the new topic has a new id, so a broker still holding an old log discards it."""
        results: list[DeletableTopicResult] = []
        for name in dict.fromkeys(request.topic_names):  # a name listed twice is deleted once
            topic = self._log.image.topics.get(name)
            if topic is None:
                results.append(
                    DeletableTopicResult(
                        name=name,
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"topic {name} does not exist",
                    )
                )
                continue
            for p in self._log.image.partitions_of(name):
                self._log.delete_replicas(p.topic_partition, p.replicas)
            self._log.commit([RemoveTopicRecord(name=name)], committed)
            results.append(DeletableTopicResult(name=name))
        return DeleteTopicsResponse(responses=results)

    # -- adding partitions (CREATE_PARTITIONS) -----------------------------------------------------

    def create_partitions(
        self, request: CreatePartitionsRequest, committed: list[MetadataRecord]
    ) -> CreatePartitionsResponse:
        """Grow topics to `count` partitions (kafka-topics.sh --alter --partitions). The new partitions get
        the replication factor of partition 0 and Kafka's placement for added partitions: round-robin over
        the active brokers from the one holding partition 0's preferred replica, numbered on from the
        existing partitions (`assign_replicas_to_brokers`). They are committed as PartitionRecords, so
        brokers hear of them as of a new topic's (LEADER_AND_ISR with is_new, UPDATE_METADATA). Existing
        partitions and their data stay where they are; as in Kafka, a key may map to another partition
        from now on. The partitions one request adds are bounded by create.topics.request.max.partitions."""
        counts = Counter(t.name for t in request.topics)
        results: list[CreatePartitionsTopicResult] = []
        partitions_left = self.config.create_topics_request_max_partitions
        for topic in request.topics:
            count = counts[topic.name]
            if count == 0:
                continue  # a duplicate already answered
            if count > 1:
                counts[topic.name] = 0
                results.append(
                    CreatePartitionsTopicResult(
                        topic.name,
                        ErrorCode.INVALID_REQUEST,
                        f"topic {topic.name} is listed {count} times in one request",
                    )
                )
                continue
            try:
                partitions_left -= self._add_partitions(topic, partitions_left, committed)
                results.append(CreatePartitionsTopicResult(topic.name))
            except KafkaError as exc:
                results.append(CreatePartitionsTopicResult(topic.name, exc.code, exc.message))
        return CreatePartitionsResponse(results=results)

    def _add_partitions(self, topic: CreatePartitionsTopic, limit: int, committed: list[MetadataRecord]) -> int:
        """Commit the partitions `topic` asks for and answer how many; KafkaError when it cannot have them."""
        info = self._log.image.topics.get(topic.name)
        if info is None:
            raise KafkaError(f"topic {topic.name} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        existing = info.num_partitions
        if topic.count < existing:
            raise KafkaError(
                f"Topic currently has {existing} partitions, which is higher than the requested {topic.count}.",
                ErrorCode.INVALID_PARTITIONS,
            )
        if topic.count == existing:
            raise KafkaError(f"Topic already has {existing} partitions.", ErrorCode.INVALID_PARTITIONS)
        added = topic.count - existing
        if added > limit:
            raise KafkaError(
                f"{added} new partitions would pass the {self.config.create_topics_request_max_partitions} one "
                "request may create (create.topics.request.max.partitions)",
                ErrorCode.INVALID_PARTITIONS,
            )
        first = self._log.image.partitions[TopicPartition(topic.name, 0)].target_replicas
        replication_factor = len(first)
        active = sorted(self._log.image.active_broker_ids())
        if replication_factor > len(active):
            raise KafkaError(
                f"replication factor {replication_factor} of topic {topic.name} is larger than the {len(active)} "
                "available brokers",
                ErrorCode.INVALID_REPLICATION_FACTOR,
            )
        # Kafka's createPartitions: start at the first broker from partition 0's preferred replica on, and
        # use that index as the initial follower shift too.
        start = next((i for i, broker_id in enumerate(active) if broker_id >= first[0]), 0)
        assignment = assign_replicas_to_brokers(
            added, replication_factor, active, start_index=start, replica_shift=start, start_partition_id=existing
        )
        records: list[MetadataRecord] = [
            PartitionRecord(
                topic=topic.name, partition=existing + i, replicas=replicas, isr=replicas, leader=replicas[0]
            )
            for i, replicas in enumerate(assignment)
        ]
        self._log.commit(records, committed)
        return added
