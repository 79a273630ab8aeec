"""Kafka's ConfigurationControlManager: topic configs and dynamic broker configs (INCREMENTAL_ALTER_CONFIGS).

How this works
--------------
A topic stores only the configs set on it (CREATE_TOPICS, INCREMENTAL_ALTER_CONFIGS); a key it leaves out
follows the controller's default (`topic_config_defaults`), so DESCRIBE_CONFIGS can tell one from the
other. Every change is a ConfigRecord, committed only when the resource's whole change is valid; brokers
hear of it in UPDATE_METADATA and apply it to the topic's logs and partitions at once. Broker configs
are only the dynamic replication throttle rates, for the cluster default (name "") or one broker.
`unclean_leader_election_enabled` answers, for the partition changes, a topic's own setting or else
the controller's.
"""

from __future__ import annotations

from collections import Counter

from controller.controller_config import ControllerConfig
from controller.metadata_log import MetadataLog
from metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE, ConfigRecord, MetadataRecord
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import (
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from server_common.dynamic_config import dynamic_broker_config_error
from server_common.log_config import topic_config_error, topic_config_key_error


class ConfigurationControlManager:
    def __init__(self, config: ControllerConfig, log: MetadataLog) -> None:
        self.config = config
        self._log = log

    def topic_config_defaults(self) -> dict[str, str]:
        """What a topic that does not set these keys gets from the controller (brokers learn them through
        UPDATE_METADATA): its min.insync.replicas and unclean.leader.election.enable."""
        return {
            "min.insync.replicas": str(self.config.min_insync_replicas),
            "unclean.leader.election.enable": str(self.config.unclean_leader_election_enable).lower(),
        }

    def topic_configs(self, topic: str) -> dict[str, str]:
        """The configs METADATA carries for `topic`: those set on it, plus the min.insync.replicas in effect
        (clients check acks=all against it)."""
        info = self._log.image.topics.get(topic)
        if info is None:
            return {}
        return {"min.insync.replicas": str(self.config.min_insync_replicas), **info.configs}

    def unclean_leader_election_enabled(self, topic: str) -> bool:
        """unclean.leader.election.enable for `topic`: its own config, else the controller's."""
        info = self._log.image.topics.get(topic)
        value = info.configs.get("unclean.leader.election.enable") if info is not None else None
        return self.config.unclean_leader_election_enable if value is None else value.strip().lower() == "true"

    def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest, committed: list[MetadataRecord]
    ) -> IncrementalAlterConfigsResponse:
        """SET or DELETE topic configs, each key checked as CREATE_TOPICS checks it (`topic_config_error`);
        a resource gets all of its changes or none. Every change is a ConfigRecord; the topic's new configs
        reach every broker in UPDATE_METADATA, and brokers apply them to the topic's logs and partitions at
        once. Deleting a key the topic does not set changes nothing; setting or deleting a key minibroker
        does not know is INVALID_CONFIG (Kafka lets a DELETE of an unknown key pass, so a typo there would go
        unnoticed). With `validate_only` nothing is committed."""
        counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
        answers: list[AlterConfigsResourceResponse] = []
        for resource in request.resources:
            count = counts[(resource.resource_type, resource.resource_name)]
            if count == 0:
                continue  # a duplicate already answered
            answer = AlterConfigsResourceResponse(resource.resource_type, resource.resource_name)
            answers.append(answer)
            try:
                if count > 1:
                    counts[(resource.resource_type, resource.resource_name)] = 0
                    raise KafkaError(
                        f"resource {resource.resource_name} is listed {count} times in one request",
                        ErrorCode.INVALID_REQUEST,
                    )
                records = self._topic_config_changes(resource)
            except KafkaError as exc:
                answer.error_code, answer.error_message = exc.code, exc.message
                continue
            if not request.validate_only:
                self._log.commit(records, committed)
        return IncrementalAlterConfigsResponse(responses=answers)

    def _broker_config_changes(self, resource: AlterConfigsResource) -> list[MetadataRecord]:
        """Dynamic broker configs: only the replication throttle rates (what kafka-reassign-partitions
        --throttle sets), for the cluster default (name "") or one broker (its id)."""
        entity = resource.resource_name
        if entity != "" and not entity.isdigit():
            raise KafkaError(
                f"broker resource name {entity!r}: a broker id, or empty for the cluster-wide default",
                ErrorCode.INVALID_REQUEST,
            )
        current = self._log.image.broker_configs.get(entity, {})
        records: list[MetadataRecord] = []
        for c in resource.configs:
            if c.config_operation == AlterConfigOp.SET:
                value: str | None = c.value if c.value is not None else ""  # SET without a value: refused as not a rate
            elif c.config_operation == AlterConfigOp.DELETE:
                value = None
            else:
                raise KafkaError(
                    f"config operation {c.config_operation} does not apply to {c.name}", ErrorCode.INVALID_CONFIG
                )
            if (problem := dynamic_broker_config_error(c.name, value)) is not None:
                raise KafkaError(problem, ErrorCode.INVALID_CONFIG)
            if value is not None:
                value = str(int(value))
            if current.get(c.name) != value:
                records.append(ConfigRecord(BROKER_RESOURCE, entity, c.name, value))
        return records

    def _topic_config_changes(self, resource: AlterConfigsResource) -> list[MetadataRecord]:
        """The ConfigRecords that apply `resource`'s operations; KafkaError when any of them is refused."""
        if resource.resource_type == BROKER_RESOURCE:
            return self._broker_config_changes(resource)
        if resource.resource_type != TOPIC_RESOURCE:
            raise KafkaError(
                f"only topic ({TOPIC_RESOURCE}) and broker ({BROKER_RESOURCE}) configs can be altered, not resource "
                f"type {resource.resource_type}",
                ErrorCode.INVALID_REQUEST,
            )
        topic = self._log.image.topics.get(resource.resource_name)
        if topic is None:
            raise KafkaError(f"topic {resource.resource_name} does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        names = Counter(c.name for c in resource.configs)
        if duplicates := sorted(name for name, n in names.items() if n > 1):
            raise KafkaError(f"duplicate config keys: {', '.join(duplicates)}", ErrorCode.INVALID_REQUEST)
        sets: dict[str, str] = {}
        for c in resource.configs:
            if c.config_operation == AlterConfigOp.SET:
                if c.value is None:
                    raise KafkaError(f"SET {c.name} without a value", ErrorCode.INVALID_REQUEST)
                sets[c.name] = c.value
            elif c.config_operation == AlterConfigOp.DELETE:
                if (unknown := topic_config_key_error(c.name)) is not None:
                    raise KafkaError(unknown, ErrorCode.INVALID_CONFIG)
            elif c.config_operation in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                raise KafkaError(
                    f"{AlterConfigOp(c.config_operation).name} applies to list configs and {c.name} is not one",
                    ErrorCode.INVALID_CONFIG,
                )
            else:
                raise KafkaError(
                    f"unknown config operation {c.config_operation} for {c.name}", ErrorCode.INVALID_REQUEST
                )
        if (problem := topic_config_error(sets)) is not None:
            raise KafkaError(problem, ErrorCode.INVALID_CONFIG)
        records: list[MetadataRecord] = []
        for c in resource.configs:
            value = sets.get(c.name)  # None for a DELETE
            if topic.configs.get(c.name) != value:
                records.append(ConfigRecord(TOPIC_RESOURCE, topic.name, c.name, value))
        return records
