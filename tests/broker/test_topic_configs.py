"""Topic configs changed at runtime, as a broker sees them: UPDATE_METADATA carries each topic's own configs
and the controller's defaults; partitions already here apply them at once (min.insync.replicas decides
acks=all, the log's config its segments), and DESCRIBE_CONFIGS answers every config with where its value
comes from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.config_helper import describe_topic_configs
from broker.fetch_session import FetchManager, FetchSessionCache
from broker.kafka_apis import KafkaApis
from broker.metadata_cache import MetadataCache
from network.request_context import ConnectionContext
from protocol.codec import Message
from protocol.errors import ErrorCode
from protocol.messages import (
    AlterableConfig,
    AlterConfigsResource,
    ConfigResourceType,
    ConfigSource,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsSynonym,
    IncrementalAlterConfigsRequest,
    LeaderAndIsrPartition,
    MetadataRequest,
    MetadataResponse,
    UpdateMetadataRequest,
)
from storage.log import LogConfig
from tests.broker.leader_fixtures import FOLLOWER_ID, LOCAL_ID, TOPIC, TP0, LeaderBroker

TOPIC_CONFIG, STATIC, DEFAULT = (
    int(ConfigSource.DYNAMIC_TOPIC_CONFIG),
    int(ConfigSource.STATIC_BROKER_CONFIG),
    int(ConfigSource.DEFAULT_CONFIG),
)
DYNAMIC_BROKER = int(ConfigSource.DYNAMIC_BROKER_CONFIG)
DYNAMIC_DEFAULT = int(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
CTX = ConnectionContext(1, "test")
CONTROLLER_DEFAULTS = {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"}


def broker_apis(broker: LeaderBroker, **kwargs: Any) -> KafkaApis:
    return KafkaApis(
        LOCAL_ID,
        broker.replica_manager,
        MetadataCache(LOCAL_ID),
        FetchManager(FetchSessionCache(), broker.time),
        broker.time,
        **kwargs,
    )


async def push(
    apis: KafkaApis, configs: dict[str, str], defaults: dict[str, str] | None = None, ctx: ConnectionContext = CTX
) -> None:
    """UPDATE_METADATA as the controller sends it: TOPIC's partition 0 and the topic's configs."""
    state = LeaderAndIsrPartition(TOPIC, 0, LOCAL_ID, 1, [LOCAL_ID], 1, [LOCAL_ID, FOLLOWER_ID])
    request = UpdateMetadataRequest(
        controller_id=3000,
        controller_epoch=1,
        brokers=[],
        partitions=[state],
        topic_configs={TOPIC: configs},
        topic_config_defaults=CONTROLLER_DEFAULTS if defaults is None else defaults,
    )
    response = await apis.handle_update_metadata(ctx, request)
    assert response.error_code == ErrorCode.NONE


async def describe(apis: KafkaApis, *resources: DescribeConfigsResource) -> DescribeConfigsResponse:
    response = await apis.handle_describe_configs(CTX, DescribeConfigsRequest(list(resources)))
    assert isinstance(response, DescribeConfigsResponse)
    return response


async def test_a_min_insync_replicas_change_reaches_a_leader_already_here_and_acks_all_follows_it(
    tmp_path: Path,
) -> None:
    broker = LeaderBroker(tmp_path)
    partition = broker.make_leader(isr=(LOCAL_ID,), replicas=(LOCAL_ID, FOLLOWER_ID))  # the follower is out
    apis = broker_apis(broker)
    await push(apis, {})
    assert (await broker.produce(TP0, b"a", acks=-1)).error_code == ErrorCode.NONE

    await push(apis, {"min.insync.replicas": "2"})

    assert partition.min_insync_replicas == 2
    assert (await broker.produce(TP0, b"b", acks=-1)).error_code == ErrorCode.NOT_ENOUGH_REPLICAS

    await push(apis, {})  # deleted: back to the controller's default

    assert partition.min_insync_replicas == 1
    assert (await broker.produce(TP0, b"c", acks=-1)).error_code == ErrorCode.NONE


async def test_the_controllers_default_min_insync_replicas_applies_where_a_topic_sets_none(tmp_path: Path) -> None:
    broker = LeaderBroker(tmp_path, min_insync_replicas=1)
    partition = broker.make_leader(isr=(LOCAL_ID,))
    apis = broker_apis(broker)

    await push(apis, {}, defaults={"min.insync.replicas": "2"})

    assert partition.min_insync_replicas == 2
    metadata = await apis.handle_metadata(CTX, MetadataRequest([TOPIC]))
    assert isinstance(metadata, MetadataResponse)
    assert metadata.topics[0].configs == {"min.insync.replicas": "2"}  # what producers check acks=all against


async def test_a_log_config_change_reaches_the_log_of_a_partition_already_here(tmp_path: Path) -> None:
    broker = LeaderBroker(tmp_path, log_config=LogConfig(retention_ms=3_600_000))
    partition = broker.make_leader()
    apis = broker_apis(broker)

    await push(apis, {"segment.bytes": "65536", "max.message.bytes": "2000"})

    assert (partition.log.config.segment_bytes, partition.log.config.max_message_bytes) == (65536, 2000)
    assert partition.log.config.retention_ms == 3_600_000  # the broker's own, not set on the topic
    assert (await broker.produce(TP0, b"x" * 3000)).error_code == ErrorCode.MESSAGE_TOO_LARGE

    await push(apis, {})

    assert partition.log.config == LogConfig(retention_ms=3_600_000)


async def test_describe_configs_lists_every_topic_config_with_its_value_and_source(tmp_path: Path) -> None:
    broker = LeaderBroker(tmp_path, log_config=LogConfig(retention_ms=3_600_000))
    broker.make_leader()
    apis = broker_apis(broker)
    await push(apis, {"min.insync.replicas": "3"}, defaults={**CONTROLLER_DEFAULTS, "min.insync.replicas": "2"})

    (result,) = (await describe(apis, DescribeConfigsResource(2, TOPIC))).results

    assert result.error_code == ErrorCode.NONE
    by_name = {c.name: c for c in result.configs}
    assert [c.name for c in result.configs] == [
        "flush.messages",
        "flush.ms",
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "max.message.bytes",
        "message.timestamp.type",
        "min.insync.replicas",
        "preallocate",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.ms",
        "unclean.leader.election.enable",
    ]
    # set on the topic, over the controller's default, over Kafka's
    assert by_name["min.insync.replicas"] == DescribeConfigsResourceResult(
        "min.insync.replicas",
        "3",
        config_source=TOPIC_CONFIG,
        synonyms=[
            DescribeConfigsSynonym("min.insync.replicas", "3", TOPIC_CONFIG),
            DescribeConfigsSynonym("min.insync.replicas", "2", STATIC),
            DescribeConfigsSynonym("min.insync.replicas", "1", DEFAULT),
        ],
    )
    # the broker's log.retention.ms
    assert (by_name["retention.ms"].value, by_name["retention.ms"].config_source) == ("3600000", STATIC)
    assert by_name["retention.ms"].synonyms[-1] == DescribeConfigsSynonym("log.retention.ms", "604800000", DEFAULT)
    # Kafka's defaults
    assert (by_name["segment.bytes"].value, by_name["segment.bytes"].config_source) == (str(1 << 30), DEFAULT)
    assert (by_name["flush.ms"].value, by_name["flush.ms"].config_source) == (str(2**63 - 1), DEFAULT)
    assert by_name["unclean.leader.election.enable"].value == "false"
    assert by_name["preallocate"].synonyms[-1] == DescribeConfigsSynonym("log.preallocate", "false", DEFAULT)


async def test_describe_configs_of_named_keys_an_unknown_topic_and_a_broker(tmp_path: Path) -> None:
    broker = LeaderBroker(tmp_path)
    broker.make_leader()
    apis = broker_apis(broker)
    await push(apis, {})

    named, unknown, of_broker = (
        await describe(
            apis,
            DescribeConfigsResource(2, TOPIC, ["retention.ms", "no.such.key"]),
            DescribeConfigsResource(2, "nope"),
            DescribeConfigsResource(4, "7"),  # another broker: it describes itself
        )
    ).results

    assert [c.name for c in named.configs] == ["retention.ms"]
    assert (unknown.error_code, unknown.error_message) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        "topic nope does not exist",
    )
    assert of_broker.error_code == ErrorCode.INVALID_REQUEST and of_broker.configs == []


def test_a_topic_created_with_the_broker_level_message_max_bytes_shows_it_as_its_max_message_bytes() -> None:
    configs = {c.name: c for c in describe_topic_configs({"message.max.bytes": "20000"}, {})}

    assert (configs["max.message.bytes"].value, configs["max.message.bytes"].config_source) == ("20000", TOPIC_CONFIG)
    assert (configs["message.max.bytes"].value, configs["message.max.bytes"].config_source) == ("20000", TOPIC_CONFIG)


async def test_adding_partitions_and_altering_configs_need_the_cluster_secret_and_describing_does_not(
    tmp_path: Path,
) -> None:
    broker = LeaderBroker(tmp_path)
    broker.make_leader()
    forwarded: list[Message] = []

    async def to_controller(request: Message) -> Message:
        forwarded.append(request)
        return CreatePartitionsResponse()

    apis = broker_apis(broker, cluster_secret="s3cret", forward_to_controller=to_controller)
    admin = ConnectionContext(2, "admin", authenticated=True)
    await push(apis, {}, ctx=admin)
    anonymous = ConnectionContext(3, "anonymous")
    grow = CreatePartitionsRequest([CreatePartitionsTopic(TOPIC, 3)])
    alter = IncrementalAlterConfigsRequest([AlterConfigsResource(2, TOPIC, [AlterableConfig("retention.ms", 0, "1")])])

    refused = [
        await apis.handle_create_partitions(anonymous, grow),
        await apis.handle_incremental_alter_configs(anonymous, alter),
    ]
    described = await apis.handle_describe_configs(
        anonymous, DescribeConfigsRequest([DescribeConfigsResource(2, TOPIC)])
    )

    assert [r.error_code for r in refused] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
    assert forwarded == []
    assert isinstance(described, DescribeConfigsResponse) and described.results[0].error_code == ErrorCode.NONE
    await apis.handle_create_partitions(admin, grow)
    await apis.handle_incremental_alter_configs(admin, alter)
    assert forwarded == [grow, alter]


async def test_a_broker_describes_its_own_configs_and_the_cluster_default_but_no_other_broker(tmp_path: Path) -> None:
    broker = LeaderBroker(tmp_path)
    apis = broker_apis(broker)
    apis.broker_config = {"broker.id": LOCAL_ID, "replica.fetch.max.bytes": 1048576, "cluster.secret": "s3cret"}
    rate = "follower.replication.throttled.rate"
    apis.metadata_cache.broker_configs = {"": {rate: "100"}, str(LOCAL_ID): {rate: "50"}}
    broker_type = int(ConfigResourceType.BROKER)
    response = await describe(
        apis,
        DescribeConfigsResource(broker_type, str(LOCAL_ID), [rate, "broker.id", "cluster.secret", "log.dirs"]),
        DescribeConfigsResource(broker_type, ""),
        DescribeConfigsResource(broker_type, str(FOLLOWER_ID)),
        DescribeConfigsResource(8, "x"),
    )
    own, default, other, unknown = response.results
    by_name = {c.name: c for c in own.configs}
    assert sorted(by_name) == ["broker.id", "cluster.secret", rate, "log.dirs"]
    assert [(x.value, x.source) for x in by_name[rate].synonyms] == [
        ("50", DYNAMIC_BROKER),
        ("100", DYNAMIC_DEFAULT),
        (str(2**63 - 1), DEFAULT),
    ]
    assert (by_name["broker.id"].value, by_name["broker.id"].config_source) == (str(LOCAL_ID), STATIC)
    # a secret is never sent back, whatever its source
    assert by_name["cluster.secret"].is_sensitive
    assert [x.value for x in by_name["cluster.secret"].synonyms] == [None]
    # a required key this broker was not given has no value and no source but its definition
    assert (by_name["log.dirs"].value, by_name["log.dirs"].synonyms) == (None, [])
    assert [(c.name, c.value, c.config_source) for c in default.configs] == [(rate, "100", DYNAMIC_DEFAULT)]
    assert other.error_code == ErrorCode.INVALID_REQUEST
    expected = f"Unexpected broker id, expected {LOCAL_ID} or empty string, but received {FOLLOWER_ID}"
    assert other.error_message == expected
    assert unknown.error_code == ErrorCode.INVALID_REQUEST


async def test_a_log_append_time_topic_has_its_batches_stamped_by_the_leader(tmp_path: Path) -> None:
    from protocol.record_batch import LOG_APPEND_TIME, iter_records

    broker = LeaderBroker(tmp_path)
    partition = broker.make_leader(isr=(LOCAL_ID,))
    apis = broker_apis(broker)
    before = await broker.produce(TP0, b"created")
    assert before.log_append_time_ms == -1, "CreateTime: Kafka's -1"

    await push(apis, {"message.timestamp.type": "LogAppendTime"})
    broker.time.advance(5_000)
    appended = await broker.produce(TP0, b"a", b"b")

    now = broker.time.milliseconds()
    assert appended.error_code == ErrorCode.NONE and appended.log_append_time_ms == now
    records = list(iter_records(partition.log.read(0, 1 << 20)))
    assert [(r.value, r.timestamp_type) for r in records] == [(b"created", 0), (b"a", LOG_APPEND_TIME), (b"b", 1)]
    assert records[1].timestamp == records[2].timestamp == now
    # the lookup by timestamp uses the append time (the debugging view: nothing is committed here yet)
    assert partition.fetch_offset_by_timestamp(now, -1, False, True) == (now, 1, 1)
    (result,) = (await describe(apis, DescribeConfigsResource(2, TOPIC, ["message.timestamp.type"]))).results
    [entry] = result.configs
    assert (entry.name, entry.value, entry.config_source) == ("message.timestamp.type", "LogAppendTime", TOPIC_CONFIG)


async def test_a_resource_named_twice_is_answered_once_and_log_dirs_is_a_name_to_anonymous_clients(
    tmp_path: Path,
) -> None:
    broker = LeaderBroker(tmp_path)
    apis = broker_apis(broker, cluster_secret="s3cret")
    apis.broker_config = {"broker.id": LOCAL_ID, "log.dirs": "/srv/kafka/broker-1/data"}
    broker_type = int(ConfigResourceType.BROKER)
    mine = DescribeConfigsResource(broker_type, str(LOCAL_ID), ["log.dirs"])
    # The broker named 10,000 times was 26.7 MB of answer for 78 KB of request: each name after the first is
    # answered with an error, not with the hundred configs again.
    anonymous = await apis.handle_describe_configs(CTX, DescribeConfigsRequest([mine, mine, mine]))
    assert isinstance(anonymous, DescribeConfigsResponse)
    first, *again = anonymous.results
    assert [r.error_code for r in again] == [ErrorCode.INVALID_REQUEST] * 2 and all(not r.configs for r in again)
    # as DESCRIBE_LOG_DIRS does: where the data lives on the host only for authenticated connections
    assert [c.value for c in first.configs] == ["data"]
    admin = ConnectionContext(2, "admin", authenticated=True)
    described = await apis.handle_describe_configs(admin, DescribeConfigsRequest([mine]))
    assert isinstance(described, DescribeConfigsResponse)
    assert [c.value for c in described.results[0].configs] == ["/srv/kafka/broker-1/data"]


def test_a_request_the_controller_would_refuse_whole_is_refused_before_it_is_forwarded() -> None:
    # The controller closes a connection whose request is over its limits: the link the broker's heartbeats
    # use. A CreateTopics of 100,001 topics through the Kafka listener got the broker fenced that way.
    from broker.kafka_apis import over_controller_limits
    from network.request_limits import ADMIN_ENTRIES
    from protocol.messages import CreatableTopic, CreateTopicsRequest

    fits = CreateTopicsRequest([CreatableTopic(f"t{i}", 1, 1) for i in range(ADMIN_ENTRIES)])
    assert over_controller_limits(fits) is None
    too_many = CreateTopicsRequest([CreatableTopic(f"t{i}", 1, 1) for i in range(ADMIN_ENTRIES + 1)])
    assert f"more than {ADMIN_ENTRIES} entries" in (over_controller_limits(too_many) or "")
