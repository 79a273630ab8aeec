"""ConfigurationControlManager on its own: topic configs, dynamic broker configs and the unclean election
setting a partition change reads."""

from __future__ import annotations

from metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE, ConfigRecord, MetadataRecord
from protocol.errors import ErrorCode
from protocol.messages import AlterableConfig, AlterConfigOp, AlterConfigsResource, IncrementalAlterConfigsRequest
from tests.controller.managers import Managers


def set_configs(
    m: Managers, resource_type: int, name: str, validate_only: bool = False, **configs: str
) -> tuple[int, list[MetadataRecord]]:
    changes = [AlterableConfig(key.replace("_", "."), AlterConfigOp.SET, value) for key, value in configs.items()]
    request = IncrementalAlterConfigsRequest([AlterConfigsResource(resource_type, name, changes)], validate_only)
    committed: list[MetadataRecord] = []
    [answer] = m.configuration.incremental_alter_configs(request, committed).responses
    return answer.error_code, committed


def test_a_topic_config_is_a_config_record_and_metadata_shows_it_over_the_defaults() -> None:
    m = Managers(min_insync_replicas=2)
    m.partition([1])
    code, committed = set_configs(m, TOPIC_RESOURCE, "t", retention_ms="1000")
    assert code == ErrorCode.NONE and committed == [ConfigRecord(TOPIC_RESOURCE, "t", "retention.ms", "1000")]
    assert m.configuration.topic_configs("t") == {"min.insync.replicas": "2", "retention.ms": "1000"}


def test_validate_only_commits_nothing() -> None:
    m = Managers()
    m.partition([1])
    assert set_configs(m, TOPIC_RESOURCE, "t", validate_only=True, retention_ms="1000") == (ErrorCode.NONE, [])
    assert m.log.image.topics["t"].configs == {}


def test_only_the_replication_throttle_rates_are_dynamic_broker_configs() -> None:
    m = Managers()
    code, committed = set_configs(m, BROKER_RESOURCE, "", leader_replication_throttled_rate="500")
    assert code == ErrorCode.NONE and m.log.image.broker_configs == {"": {"leader.replication.throttled.rate": "500"}}
    assert set_configs(m, BROKER_RESOURCE, "", log_retention_ms="5")[0] == ErrorCode.INVALID_CONFIG


def test_a_topics_own_unclean_election_setting_wins_over_the_controllers() -> None:
    m = Managers(unclean_leader_election_enable=False)
    m.partition([1])
    assert not m.configuration.unclean_leader_election_enabled("t")
    set_configs(m, TOPIC_RESOURCE, "t", unclean_leader_election_enable="true")
    assert m.configuration.unclean_leader_election_enabled("t")
