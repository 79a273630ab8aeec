"""Controller scenarios: registration and liveness, topic creation, elections, controlled shutdown,
ALTER_PARTITION, durability and metadata. The controller is pure logic, driven by a manual clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controller.controller import Controller, ControllerResult
from controller.controller_config import ControllerConfig
from controller.partition_change import elect_leader, partition_change
from controller.topic_control_manager import assign_replicas_to_brokers
from metadata.image import MetadataImage, PartitionRegistration, replay_all
from metadata.records import NO_LEADER, ConfigRecord, MetadataReplayError, PartitionChangeRecord, PartitionRecord
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import (
    ELECTION_UNCLEAN,
    AllocateProducerIdsRequest,
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    AlterPartitionItem,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    ConfigResourceType,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    ElectionTopic,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    IsrMember,
    ListPartitionReassignmentsRequest,
    ReassignablePartition,
    TopicPartition,
)
from server_common.time import ManualTime
from tests.controller.recorded_log import RecordedLog

SESSION_MS = 1000


class Cluster:
    """A controller on a manual clock, plus the epoch each broker was last given."""

    def __init__(self, log: RecordedLog | None = None, time: ManualTime | None = None, **config: Any) -> None:
        """With a `log` that holds records: the controller that takes over from the one that wrote them."""
        self.time = time or ManualTime()
        self.config = ControllerConfig(broker_session_timeout_ms=SESSION_MS, **config)
        self.controller = Controller(self.config, self.time, log)
        if log is not None:
            log.replay_into(self.controller)
        self.epochs: dict[int, int] = {}

    @property
    def now_ms(self) -> int:
        return self.time.milliseconds()

    def register(self, broker_id: int, incarnation_id: str | None = None) -> int:
        request = BrokerRegistrationRequest(
            broker_id=broker_id,
            host="127.0.0.1",
            port=9000 + broker_id,
            incarnation_id=incarnation_id or f"incarnation-{broker_id}",
        )
        response = self.controller.register_broker(request, self.now_ms).response
        assert response.error_code == ErrorCode.NONE
        self.epochs[broker_id] = response.broker_epoch
        return response.broker_epoch

    def heartbeat_result(self, broker_id: int, **flags: bool) -> ControllerResult[BrokerHeartbeatResponse]:
        # Caught up with the metadata (its own registration included), as a running broker soon is.
        request = BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=self.epochs[broker_id], current_metadata_offset=10**9, **flags
        )
        return self.controller.heartbeat(request, self.now_ms)

    def heartbeat(self, broker_id: int, **flags: bool) -> BrokerHeartbeatResponse:
        return self.heartbeat_result(broker_id, **flags).response

    def start_brokers(self, *broker_ids: int) -> None:
        for broker_id in broker_ids:
            self.register(broker_id)
            assert not self.heartbeat(broker_id).is_fenced

    def create(self, name: str, num_partitions: int, replication_factor: int, **configs: str) -> CreateTopicsResponse:
        topic = CreatableTopic(
            name=name, num_partitions=num_partitions, replication_factor=replication_factor, configs=configs
        )
        return self.controller.create_topics(CreateTopicsRequest(topics=[topic])).response

    def partition(self, topic: str = "t", partition: int = 0) -> PartitionRegistration:
        p = self.controller.image.partition(topic, partition)
        assert p is not None
        return p

    def advance(self, ms: int) -> None:
        self.time.advance(ms)

    def tick(self) -> ControllerResult[list[int]]:
        return self.controller.tick(self.now_ms)

    def keep_alive(self, *broker_ids: int) -> None:
        for broker_id in broker_ids:
            self.heartbeat(broker_id)

    def alter(
        self,
        broker_id: int,
        new_isr: list[int],
        leader_epoch: int | None = None,
        partition_epoch: int | None = None,
        member_epochs: dict[int, int] | None = None,
    ) -> ControllerResult[AlterPartitionResponse]:
        p = self.partition()
        item = AlterPartitionItem(
            topic=p.topic,
            partition=p.partition,
            leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
            new_isr=new_isr,
            partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch,
            new_isr_with_epochs=[IsrMember(b, e) for b, e in (member_epochs or {}).items()],
        )
        request = AlterPartitionRequest(broker_id=broker_id, broker_epoch=self.epochs[broker_id], partitions=[item])
        return self.controller.alter_partition(request, self.now_ms)


def three_brokers_one_partition(**config: Any) -> Cluster:
    """Brokers 1, 2, 3 and topic t with one partition on all three, led by its preferred replica at
    epoch 0. The replica order comes from the assignment; `replicas_of` names the three."""
    cluster = Cluster(**config)
    cluster.start_brokers(1, 2, 3)
    assert cluster.create("t", num_partitions=1, replication_factor=3).topics[0].error_code == ErrorCode.NONE
    return cluster


def replicas_of(cluster: Cluster) -> tuple[int, int, int]:
    """(preferred, second, third) replica of t-0."""
    preferred, second, third = cluster.partition().replicas
    return preferred, second, third


# -- leader election ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "isr", "live", "unclean", "leader"),
    [
        pytest.param([1, 2, 3], [1, 2, 3], [1, 2, 3], False, 1, id="preferred-leader-when-live-and-in-isr"),
        pytest.param([1, 2, 3], [1, 2, 3], [2, 3], False, 2, id="next-live-isr-member-in-replica-order"),
        pytest.param([1, 2, 3], [3, 2], [2, 3], False, 2, id="replica-order-not-isr-order"),
        pytest.param([1, 2, 3], [2, 3], [1, 2, 3], False, 2, id="preferred-skipped-when-out-of-isr"),
        pytest.param([1, 2, 3], [1], [2, 3], False, NO_LEADER, id="no-live-isr-member-goes-offline"),
        pytest.param([1, 2, 3], [1], [2, 3], True, 2, id="unclean-takes-first-live-replica"),
        pytest.param([1, 2, 3], [3], [2, 3], True, 3, id="unclean-still-prefers-a-live-isr-member"),
        pytest.param([1, 2, 3], [1], [], True, NO_LEADER, id="unclean-with-nothing-live-goes-offline"),
    ],
)
def test_leader_election_choices(
    replicas: list[int], isr: list[int], live: list[int], unclean: bool, leader: int
) -> None:
    assert elect_leader(replicas, isr, live, unclean) == leader


def test_an_unclean_election_resets_the_isr_to_the_new_leader() -> None:
    p = PartitionRegistration("t", 0, replicas=(1, 2, 3), isr=(1,), leader=1, leader_epoch=4, partition_epoch=9)

    change = partition_change(p, remove=1, active=frozenset({2, 3}), unclean=True)

    assert change is not None
    assert (change.leader, change.isr) == (2, (2,))


def test_removing_the_last_isr_member_keeps_it_in_the_isr_and_takes_the_partition_offline() -> None:
    p = PartitionRegistration("t", 0, replicas=(1, 2, 3), isr=(1,), leader=1, leader_epoch=4, partition_epoch=9)

    change = partition_change(p, remove=1, active=frozenset({2, 3}), unclean=False)

    assert change is not None
    assert (change.leader, change.isr) == (NO_LEADER, None)


def test_removing_a_follower_changes_only_the_isr() -> None:
    p = PartitionRegistration("t", 0, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=4, partition_epoch=9)

    change = partition_change(p, remove=3, active=frozenset({1, 2}), unclean=False)

    assert change is not None
    assert (change.leader, change.isr) == (None, (1, 2))


# -- replica assignment ---------------------------------------------------------------------------


def test_assignment_matches_kafkas_rack_unaware_layout() -> None:
    # Kafka's AdminZkClientTest.testReplicaAssignment: 5 brokers, 10 partitions, RF 3, start index 0
    expected = [
        (0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1),
        (0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2),
    ]  # fmt: skip

    assert assign_replicas_to_brokers(10, 3, [4, 2, 0, 3, 1], start_index=0, replica_shift=0) == expected


def test_three_brokers_six_partitions_rf3_gives_each_broker_two_leaderships() -> None:
    cluster = Cluster()
    cluster.start_brokers(1, 2, 3)

    result = cluster.controller.create_topics(
        CreateTopicsRequest(topics=[CreatableTopic(name="orders", num_partitions=6, replication_factor=3)])
    )

    assert result.response.topics[0].error_code == ErrorCode.NONE
    partitions = cluster.controller.image.partitions_of("orders")
    leaders = [p.leader for p in partitions]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    for p in partitions:
        assert sorted(p.replicas) == [1, 2, 3]
        assert p.isr == p.replicas
        assert p.leader == p.replicas[0]  # the preferred replica leads
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    assert len(result.changed_partitions) == 6
    assert all(lai.is_new for lai in result.changed_partitions)
    assert {b: len(ps) for b, ps in result.leader_and_isr_by_broker().items()} == {1: 6, 2: 6, 3: 6}


def test_topics_are_placed_only_on_unfenced_brokers() -> None:
    cluster = Cluster()
    cluster.start_brokers(1, 2, 3)
    cluster.register(4)  # registered, never heartbeated: fenced

    cluster.create("t", num_partitions=8, replication_factor=2)

    assert all(4 not in p.replicas for p in cluster.controller.image.partitions_of("t"))


def test_missing_counts_take_the_configured_defaults_and_configs_carry_min_insync_replicas() -> None:
    cluster = Cluster(num_partitions=4, default_replication_factor=2, min_insync_replicas=2)
    cluster.start_brokers(1, 2, 3)

    response = cluster.create("t", num_partitions=-1, replication_factor=-1)
    cluster.create("u", num_partitions=1, replication_factor=1, **{"min.insync.replicas": "1"})

    assert (response.topics[0].num_partitions, response.topics[0].replication_factor) == (4, 2)
    assert cluster.controller.topic_configs("t") == {"min.insync.replicas": "2"}
    assert cluster.controller.topic_configs("u") == {"min.insync.replicas": "1"}


@pytest.mark.parametrize(
    ("name", "num_partitions", "replication_factor", "error"),
    [
        pytest.param("t", 1, 1, ErrorCode.TOPIC_ALREADY_EXISTS, id="existing-topic"),
        pytest.param("new", 0, 1, ErrorCode.INVALID_PARTITIONS, id="zero-partitions"),
        pytest.param("new", -5, 1, ErrorCode.INVALID_PARTITIONS, id="negative-partitions"),
        pytest.param("new", 1, 0, ErrorCode.INVALID_REPLICATION_FACTOR, id="zero-replication-factor"),
        pytest.param("new", 1, 3, ErrorCode.INVALID_REPLICATION_FACTOR, id="more-replicas-than-live-brokers"),
        pytest.param("bad/name", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION, id="illegal-topic-name"),
    ],
)
def test_topic_creation_errors(name: str, num_partitions: int, replication_factor: int, error: ErrorCode) -> None:
    cluster = Cluster()
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 1, 1)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(1, 2)
    cluster.tick()  # broker 3 is fenced: two live brokers

    result = cluster.controller.create_topics(
        CreateTopicsRequest(
            topics=[CreatableTopic(name=name, num_partitions=num_partitions, replication_factor=replication_factor)]
        )
    )

    assert result.response.topics[0].error_code == error
    assert result.response.topics[0].error_message
    assert result.records == []


def test_a_topic_named_twice_in_one_request_is_refused_but_others_are_created() -> None:
    cluster = Cluster()
    cluster.start_brokers(1)
    topics = [CreatableTopic("a", 1, 1), CreatableTopic("b", 1, 1), CreatableTopic("a", 2, 1)]

    response = cluster.controller.create_topics(CreateTopicsRequest(topics=topics)).response

    # one answer per name, as Kafka's response (keyed by topic name) has
    assert [(t.name, t.error_code) for t in response.topics] == [("a", ErrorCode.INVALID_REQUEST), ("b", 0)]
    assert list(cluster.controller.image.topics) == ["b"]


def test_a_request_naming_one_topic_twenty_thousand_times_is_answered_in_linear_time() -> None:
    import time

    topics = [CreatableTopic("same", 1, 1)] * 20_000
    # with the default cap, such a request is refused whole before anything is looked at
    cluster = Cluster()
    cluster.start_brokers(1)
    response = cluster.controller.create_topics(CreateTopicsRequest(topics=topics)).response
    assert response.error_code == ErrorCode.INVALID_REQUEST and response.topics == []

    # and where the cap allows it, validation is linear: a quadratic check took ~5.5 s of CPU here
    cluster = Cluster(create_topics_request_max_topics=100_000)
    cluster.start_brokers(1)
    started = time.process_time()
    response = cluster.controller.create_topics(CreateTopicsRequest(topics=topics)).response
    assert time.process_time() - started < 0.5
    assert [(t.name, t.error_code) for t in response.topics] == [("same", ErrorCode.INVALID_REQUEST)]
    assert "20000 times" in (response.topics[0].error_message or "")


def test_create_topics_refuses_more_topics_or_partitions_than_one_request_may_create() -> None:
    cluster = Cluster(create_topics_request_max_topics=3, create_topics_request_max_partitions=10)
    cluster.start_brokers(1)
    too_many = cluster.controller.create_topics(
        CreateTopicsRequest(topics=[CreatableTopic(f"t{i}", 1, 1) for i in range(4)])
    ).response
    assert too_many.error_code == ErrorCode.INVALID_REQUEST and "create.topics.request.max.topics" in (
        too_many.error_message or ""
    )
    assert not cluster.controller.image.topics

    partly = cluster.controller.create_topics(
        CreateTopicsRequest(topics=[CreatableTopic("six", 6, 1), CreatableTopic("five", 5, 1)])
    ).response
    assert [(t.name, t.error_code) for t in partly.topics] == [("six", 0), ("five", ErrorCode.INVALID_PARTITIONS)]
    assert list(cluster.controller.image.topics) == ["six"]


def test_unknown_topic_configs_and_bad_values_are_refused_with_invalid_config() -> None:
    cluster = Cluster()
    cluster.start_brokers(1)
    response = cluster.controller.create_topics(
        CreateTopicsRequest(
            topics=[
                CreatableTopic("typo", 1, 1, configs={"segment.byte": "65536"}),
                CreatableTopic("unknown", 1, 1, configs={"foo.bar": "1"}),
                CreatableTopic("bad", 1, 1, configs={"retention.ms": "soon"}),
                CreatableTopic(
                    "good", 1, 1, configs={"segment.bytes": "65536", "unclean.leader.election.enable": "true"}
                ),
            ]
        )
    ).response
    codes = {t.name: (t.error_code, t.error_message) for t in response.topics}
    assert codes["typo"] == (
        ErrorCode.INVALID_CONFIG,
        "unknown topic config 'segment.byte'; did you mean segment.bytes?",
    )
    assert codes["unknown"][0] == ErrorCode.INVALID_CONFIG and "foo.bar" in (codes["unknown"][1] or "")
    assert codes["bad"] == (ErrorCode.INVALID_CONFIG, "topic config retention.ms: expected an integer, got 'soon'")
    assert codes["good"][0] == ErrorCode.NONE
    assert sorted(cluster.controller.image.topics) == ["good"]


# -- registration and heartbeats ------------------------------------------------------------------


def test_a_registered_broker_is_fenced_until_its_first_heartbeat() -> None:
    cluster = Cluster()
    cluster.register(1)
    assert cluster.controller.image.brokers[1].fenced

    result = cluster.heartbeat_result(1)

    assert not result.response.is_fenced
    assert result.unfenced_brokers == [1]
    assert not cluster.controller.image.brokers[1].fenced


def test_every_registration_of_a_new_incarnation_gets_a_higher_broker_epoch() -> None:
    cluster = Cluster()
    first = cluster.register(1, "one")
    other = cluster.register(2, "two")
    again = cluster.register(1, "one-restarted")

    assert first < other < again


def test_a_retried_registration_of_the_same_incarnation_keeps_its_epoch_and_writes_nothing() -> None:
    cluster = Cluster()
    cluster.start_brokers(1)
    request = BrokerRegistrationRequest(broker_id=1, host="127.0.0.1", port=9001, incarnation_id="incarnation-1")

    result = cluster.controller.register_broker(request, cluster.now_ms)

    assert result.response.broker_epoch == cluster.epochs[1]
    assert result.records == []
    assert not cluster.controller.image.brokers[1].fenced


def test_a_heartbeat_from_an_unknown_broker_is_refused() -> None:
    cluster = Cluster()

    response = cluster.controller.heartbeat(BrokerHeartbeatRequest(broker_id=5, broker_epoch=0), cluster.now_ms)

    assert response.response.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert response.response.is_fenced


def test_a_heartbeat_with_the_epoch_of_an_earlier_incarnation_is_stale() -> None:
    cluster = Cluster()
    cluster.start_brokers(1)
    old_epoch = cluster.epochs[1]
    cluster.register(1, "restarted")

    response = cluster.controller.heartbeat(BrokerHeartbeatRequest(broker_id=1, broker_epoch=old_epoch), cluster.now_ms)

    assert response.response.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert cluster.controller.image.brokers[1].fenced


# -- fencing on missed heartbeats -----------------------------------------------------------------


def test_a_broker_silent_for_exactly_the_session_timeout_is_still_alive() -> None:
    cluster = three_brokers_one_partition()
    cluster.advance(SESSION_MS)
    cluster.keep_alive(2, 3)

    result = cluster.tick()

    assert result.response == []
    assert result.records == []
    assert not cluster.controller.image.brokers[1].fenced


def test_a_broker_silent_one_millisecond_past_the_timeout_is_fenced_and_its_leadership_moves() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(second, third)

    result = cluster.tick()

    assert result.response == [preferred]
    assert result.fenced_brokers == [preferred]
    assert cluster.controller.image.brokers[preferred].fenced
    p = cluster.partition()
    assert p.leader == second  # next live ISR member in replica order
    assert p.isr == (second, third)
    assert (p.leader_epoch, p.partition_epoch) == (1, 1)
    [pushed] = result.changed_partitions
    assert (pushed.leader, pushed.leader_epoch, pushed.isr, pushed.partition_epoch) == (
        second,
        1,
        [second, third],
        1,
    )
    assert set(result.leader_and_isr_by_broker()) == {preferred, second, third}


def test_a_fenced_follower_leaves_the_isr_without_a_leader_epoch_bump() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(preferred, second)

    cluster.tick()

    p = cluster.partition()
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (preferred, (preferred, second), 0, 1)


def test_when_the_last_isr_member_dies_the_partition_goes_offline_and_keeps_it_in_the_isr() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    assert cluster.alter(preferred, [preferred]).response.partitions[0].error_code == ErrorCode.NONE
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(second, third)

    cluster.tick()

    p = cluster.partition()
    assert (p.leader, p.isr, p.leader_epoch) == (NO_LEADER, (preferred,), 1)
    [meta] = cluster.controller.metadata(["t"]).topics[0].partitions
    assert meta.error_code == ErrorCode.LEADER_NOT_AVAILABLE
    assert meta.offline_replicas == [preferred]


def test_with_unclean_election_the_first_live_replica_leads_with_an_isr_of_itself() -> None:
    cluster = three_brokers_one_partition(unclean_leader_election_enable=True)
    preferred, second, third = replicas_of(cluster)
    cluster.alter(preferred, [preferred])
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(second, third)

    cluster.tick()

    p = cluster.partition()
    assert (p.leader, p.isr, p.leader_epoch) == (second, (second,), 1)


def test_a_fenced_broker_that_heartbeats_again_is_unfenced_and_sent_its_full_state() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(second, third)
    cluster.tick()

    result = cluster.heartbeat_result(preferred)

    assert not result.response.is_fenced
    assert result.unfenced_brokers == [preferred]
    assert result.changed_partitions == []  # the partition has a leader: nothing to re-elect
    [state] = cluster.controller.leader_and_isr_for_broker(preferred)
    assert (state.leader, state.isr) == (second, [second, third])  # it must catch up to rejoin the ISR


def offline_with_its_last_isr_member_dead() -> tuple[Cluster, int, int, int]:
    """t-0 with ISR {preferred} only, then preferred fenced: offline, unclean election off."""
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.alter(preferred, [preferred])
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(second, third)
    cluster.tick()
    assert (cluster.partition().leader, cluster.partition().isr) == (NO_LEADER, (preferred,))
    return cluster, preferred, second, third


def test_an_offline_partition_comes_back_when_its_isr_member_returns() -> None:
    cluster, preferred, _, _ = offline_with_its_last_isr_member_dead()
    assert cluster.partition().is_offline

    result = cluster.heartbeat_result(preferred)

    p = cluster.partition()
    assert (p.leader, p.isr, p.leader_epoch) == (preferred, (preferred,), 2)
    assert [lai.leader for lai in result.changed_partitions] == [preferred]


def test_an_offline_partition_stays_offline_when_only_an_out_of_sync_replica_returns() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.alter(preferred, [preferred])
    cluster.advance(SESSION_MS + 1)
    cluster.tick()  # every broker is fenced
    assert cluster.partition().is_offline

    cluster.heartbeat(second)

    assert cluster.partition().is_offline


def test_a_broker_asking_to_be_fenced_gives_up_its_leadership() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)

    response = cluster.heartbeat(preferred, want_fence=True)

    assert response.is_fenced
    assert (cluster.partition().leader, cluster.partition().isr) == (second, (second, third))


def test_a_new_incarnation_fences_the_old_one_and_takes_it_out_of_leadership_and_isr() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)

    result = cluster.controller.register_broker(
        BrokerRegistrationRequest(broker_id=preferred, host="127.0.0.1", port=9000 + preferred, incarnation_id="new"),
        cluster.now_ms,
    )

    assert result.response.broker_epoch > cluster.epochs[preferred]
    assert cluster.controller.image.brokers[preferred].fenced
    p = cluster.partition()
    assert (p.leader, p.isr, p.leader_epoch) == (second, (second, third), 1)


# -- controlled shutdown --------------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_first_then_says_shut_down() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)

    first = cluster.heartbeat_result(preferred, want_shutdown=True)

    assert not first.response.should_shutdown
    p = cluster.partition()
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (second, (second, third), 1, 1)
    assert [lai.leader for lai in first.changed_partitions] == [second]
    assert cluster.controller.image.brokers[preferred].in_controlled_shutdown

    second_beat = cluster.heartbeat(preferred, want_shutdown=True)

    assert second_beat.should_shutdown
    assert second_beat.is_fenced


def test_a_broker_leading_nothing_may_shut_down_at_once_after_leaving_the_isrs() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)

    response = cluster.heartbeat(third, want_shutdown=True)

    assert response.should_shutdown
    assert cluster.partition().isr == (preferred, second)
    assert cluster.partition().leader_epoch == 0


def test_a_broker_in_controlled_shutdown_is_not_elected_when_the_leader_dies() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.heartbeat(third, want_shutdown=True)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(second)

    cluster.tick()

    p = cluster.partition()
    assert (p.leader, p.isr) == (second, (second,))


def test_controlled_shutdown_of_the_only_isr_member_takes_the_partition_offline() -> None:
    cluster = three_brokers_one_partition()
    preferred, _, _ = replicas_of(cluster)
    cluster.alter(preferred, [preferred])

    first = cluster.heartbeat(preferred, want_shutdown=True)
    then = cluster.heartbeat(preferred, want_shutdown=True)

    assert not first.should_shutdown and then.should_shutdown
    assert (cluster.partition().leader, cluster.partition().isr) == (NO_LEADER, (preferred,))


# -- ALTER_PARTITION ------------------------------------------------------------------------------


def test_a_leader_shrinks_then_expands_its_isr() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)

    shrink = cluster.alter(preferred, [preferred, second])

    [item] = shrink.response.partitions
    assert item.error_code == ErrorCode.NONE
    assert (item.leader_id, item.leader_epoch, item.isr, item.partition_epoch) == (
        preferred,
        0,
        [preferred, second],
        1,
    )
    assert [lai.isr for lai in shrink.changed_partitions] == [[preferred, second]]

    expand = cluster.alter(preferred, [third, second, preferred])

    [item] = expand.response.partitions
    assert item.error_code == ErrorCode.NONE
    assert (item.isr, item.partition_epoch, item.leader_epoch) == ([preferred, second, third], 2, 0)
    assert cluster.partition().isr == (preferred, second, third)


def test_an_alter_partition_that_changes_nothing_writes_nothing() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)

    result = cluster.alter(preferred, [preferred, second, third])

    assert result.records == []
    assert result.response.partitions[0].partition_epoch == 0


def test_alter_partition_from_a_stale_broker_epoch_is_refused_as_a_whole() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, _ = replicas_of(cluster)
    request = AlterPartitionRequest(
        broker_id=preferred,
        broker_epoch=cluster.epochs[preferred] - 1,
        partitions=[AlterPartitionItem("t", 0, leader_epoch=0, new_isr=[preferred, second], partition_epoch=0)],
    )

    result = cluster.controller.alter_partition(request, cluster.now_ms)

    assert result.response.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert result.records == []


def test_alter_partition_from_an_unregistered_broker_is_refused() -> None:
    cluster = three_brokers_one_partition()
    request = AlterPartitionRequest(broker_id=9, broker_epoch=0, partitions=[])

    result = cluster.controller.alter_partition(request, cluster.now_ms)

    assert result.response.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_alter_partition_of_an_unknown_partition_is_refused() -> None:
    cluster = three_brokers_one_partition()
    preferred, _, _ = replicas_of(cluster)
    request = AlterPartitionRequest(
        broker_id=preferred,
        broker_epoch=cluster.epochs[preferred],
        partitions=[AlterPartitionItem("t", 7, leader_epoch=0, new_isr=[preferred], partition_epoch=0)],
    )

    result = cluster.controller.alter_partition(request, cluster.now_ms)

    assert result.response.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_deposed_leader_with_an_old_leader_epoch_is_fenced() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(second, third)
    cluster.tick()  # second leads at epoch 1
    cluster.heartbeat(preferred)  # the old leader is back, still believing in epoch 0

    result = cluster.alter(preferred, [preferred], leader_epoch=0, partition_epoch=0)

    assert result.response.partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert result.records == []


def test_a_leader_working_from_an_old_partition_epoch_gets_invalid_update_version() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(preferred, second)
    cluster.tick()  # the controller removed the third replica: partition epoch 1

    result = cluster.alter(preferred, [preferred], partition_epoch=0)

    assert result.response.partitions[0].error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert cluster.partition().isr == (preferred, second)


def test_only_the_leader_may_change_the_isr() -> None:
    cluster = three_brokers_one_partition()
    _, second, third = replicas_of(cluster)

    result = cluster.alter(second, [second, third])

    assert result.response.partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_fenced_broker_may_not_join_the_isr() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(preferred, second)
    cluster.tick()

    result = cluster.alter(preferred, [preferred, second, third])

    assert result.response.partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA
    assert cluster.partition().isr == (preferred, second)


def test_a_broker_joins_the_isr_only_at_the_broker_epoch_it_is_registered_with() -> None:
    # KIP-903: the leader names the broker epoch each new member last fetched with. A fetch its earlier
    # incarnation sent reached the leader late and made it look caught up; the broker has restarted since, on
    # a log that may be shorter, and must catch up again before it counts.
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    assert cluster.alter(preferred, [preferred, second]).response.partitions[0].error_code == ErrorCode.NONE
    old_epoch = cluster.epochs[third]
    cluster.register(third, incarnation_id="restarted")
    assert not cluster.heartbeat(third).is_fenced

    stale = cluster.alter(preferred, [preferred, second, third], member_epochs={third: old_epoch})
    refused = stale.response.partitions[0]
    assert refused.error_code == ErrorCode.INELIGIBLE_REPLICA
    assert f"{third} (epoch {old_epoch}, registered {cluster.epochs[third]})" in (refused.error_message or "")
    assert cluster.partition().isr == (preferred, second)

    current = cluster.alter(preferred, [preferred, second, third], member_epochs={third: cluster.epochs[third]})
    assert current.response.partitions[0].error_code == ErrorCode.NONE
    assert set(cluster.partition().isr) == {preferred, second, third}
    # a member already in the ISR is not re-judged (only the controller takes one out), nor one with no epoch
    unknown = cluster.alter(preferred, [preferred, second, third], member_epochs={second: -1, third: old_epoch})
    assert unknown.response.partitions[0].error_code == ErrorCode.NONE


def test_a_broker_that_is_not_a_replica_may_not_join_the_isr() -> None:
    cluster = three_brokers_one_partition()
    cluster.start_brokers(4)
    preferred, second, third = replicas_of(cluster)

    result = cluster.alter(preferred, [preferred, second, third, 4])

    assert result.response.partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA


def test_an_isr_without_the_leader_is_an_invalid_request() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)

    result = cluster.alter(preferred, [second, third])

    assert result.response.partitions[0].error_code == ErrorCode.INVALID_REQUEST


# -- deleting topics -----------------------------------------------------------------------------


def test_deleting_a_topic_removes_it_and_names_every_replica_to_stop_and_delete(tmp_path: Path) -> None:
    time = ManualTime()
    log = RecordedLog()
    cluster = Cluster(log=log, time=time)
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 3, 2)
    cluster.create("keep", 1, 1)
    old_id = cluster.controller.image.topics["t"].topic_id
    assert old_id != ""
    replicas = {p.topic_partition: p.replicas for p in cluster.controller.image.partitions_of("t")}

    result = cluster.controller.delete_topics(DeleteTopicsRequest(["t", "nope", "t"]))

    # one answer per name: t deleted (once), nope unknown
    answers = {(r.name, r.error_code) for r in result.response.responses}
    assert answers == {("t", ErrorCode.NONE), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
    assert "t" not in cluster.controller.image.topics
    assert cluster.controller.image.partitions_of("t") == []
    assert cluster.controller.metadata(["t"]).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # every replica of every partition of t is told to stop and delete, and only those
    told = {(b, tp) for b, tps in result.deleted_replicas.items() for tp in tps}
    assert told == {(b, tp) for tp, rs in replicas.items() for b in rs}
    assert result.changed_partitions == []
    # the name is free again, and the new topic has a new id that its LEADER_AND_ISR states carry
    assert cluster.create("t", 1, 3).topics[0].error_code == ErrorCode.NONE
    new_id = cluster.controller.image.topics["t"].topic_id
    assert new_id not in ("", old_id)
    assert {s.topic_id for s in cluster.controller.leader_and_isr_for_broker(1) if s.topic == "t"} == {new_id}
    # and a restarted controller replays the deletion and the re-creation
    restarted = Cluster(log=log, time=time)
    assert restarted.controller.image.topics == cluster.controller.image.topics
    assert dict(restarted.controller.image.partitions) == dict(cluster.controller.image.partitions)


# -- adding partitions (CREATE_PARTITIONS) -------------------------------------------------------


def add_partitions(cluster: Cluster, *counts: tuple[str, int]) -> ControllerResult[CreatePartitionsResponse]:
    request = CreatePartitionsRequest([CreatePartitionsTopic(name, count) for name, count in counts])
    return cluster.controller.create_partitions(request)


def test_partitions_added_to_a_topic_are_placed_like_kafkas_and_pushed_like_a_new_topics(tmp_path: Path) -> None:
    time = ManualTime()
    log = RecordedLog()
    cluster = Cluster(log=log, time=time)
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 1, 3)
    first = cluster.partition()

    result = add_partitions(cluster, ("t", 3))

    assert result.response.results == [CreatePartitionsTopicResult("t")]
    partitions = cluster.controller.image.partitions_of("t")
    assert partitions[0] == first  # untouched: same replicas, leader and epochs
    # Kafka's createPartitions: round robin on from the broker of partition 0's preferred replica, with the
    # replication factor of partition 0, so the three partitions have three different leaders
    start = sorted((1, 2, 3)).index(first.replicas[0])
    expected = assign_replicas_to_brokers(2, 3, [1, 2, 3], start, start, start_partition_id=1)
    assert [p.replicas for p in partitions[1:]] == expected
    assert sorted(p.leader for p in partitions) == [1, 2, 3]
    for p in partitions[1:]:
        assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (p.replicas[0], p.replicas, 0, 0)
    # committed as PartitionRecords, told to every replica as new partitions
    assert [type(r) for r in result.records] == [PartitionRecord, PartitionRecord]
    assert [(lai.partition, lai.is_new) for lai in result.changed_partitions] == [(1, True), (2, True)]
    assert {b: len(ps) for b, ps in result.leader_and_isr_by_broker().items()} == {1: 2, 2: 2, 3: 2}
    assert [p.partition for p in cluster.controller.metadata(["t"]).topics[0].partitions] == [0, 1, 2]
    # and a restarted controller has them
    restarted = Cluster(log=log, time=time)
    assert restarted.controller.image.partitions_of("t") == partitions


def test_added_partitions_continue_the_layout_kafka_gives_a_topic_created_with_them() -> None:
    # Kafka's AdminZkClientTest.testReplicaAssignment layout (5 brokers, RF 3, start index 0): partitions 5-9
    # added to the first five are the last five of the ten-partition layout
    brokers = [4, 2, 0, 3, 1]
    whole = assign_replicas_to_brokers(10, 3, brokers, start_index=0, replica_shift=0)

    assert assign_replicas_to_brokers(5, 3, brokers, start_index=0, replica_shift=0, start_partition_id=5) == whole[5:]


@pytest.mark.parametrize(
    ("counts", "error", "message"),
    [
        pytest.param(
            [("t", 2)],
            ErrorCode.INVALID_PARTITIONS,
            "Topic currently has 3 partitions, which is higher than the requested 2.",
            id="fewer",
        ),
        pytest.param([("t", 3)], ErrorCode.INVALID_PARTITIONS, "Topic already has 3 partitions.", id="as-many"),
        pytest.param([("nope", 4)], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic nope does not exist", id="unknown"),
        pytest.param(
            [("t", 4), ("t", 5)], ErrorCode.INVALID_REQUEST, "topic t is listed 2 times in one request", id="twice"
        ),
        pytest.param(
            [("t", 30)],
            ErrorCode.INVALID_PARTITIONS,
            "27 new partitions would pass the 10 one request may create (create.topics.request.max.partitions)",
            id="too-many",
        ),
    ],
)
def test_partitions_that_cannot_be_added_are_refused_and_change_nothing(
    counts: list[tuple[str, int]], error: ErrorCode, message: str
) -> None:
    cluster = Cluster(create_topics_request_max_partitions=10)
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 3, 2)
    before = list(cluster.controller.image.partitions_of("t"))

    result = add_partitions(cluster, *counts)

    assert [(r.error_code, r.error_message) for r in result.response.results] == [(error, message)]
    assert result.records == [] and result.changed_partitions == []
    assert cluster.controller.image.partitions_of("t") == before


def test_partitions_are_not_added_with_fewer_live_brokers_than_the_replication_factor() -> None:
    cluster = three_brokers_one_partition()
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(1, 2)
    cluster.tick()  # broker 3 fenced: two live brokers for a topic of replication factor 3

    result = add_partitions(cluster, ("t", 2))

    (answer,) = result.response.results
    assert answer.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert answer.error_message == "replication factor 3 of topic t is larger than the 2 available brokers"
    assert result.records == []
    assert cluster.controller.image.topics["t"].num_partitions == 1


# -- topic configs (INCREMENTAL_ALTER_CONFIGS) ---------------------------------------------------

SET, DELETE = AlterConfigOp.SET, AlterConfigOp.DELETE


def alter_configs(
    cluster: Cluster, topic: str, *ops: tuple[str, int, str | None], validate_only: bool = False
) -> ControllerResult[IncrementalAlterConfigsResponse]:
    resource = AlterConfigsResource(2, topic, [AlterableConfig(name, op, value) for name, op, value in ops])
    return cluster.controller.incremental_alter_configs(IncrementalAlterConfigsRequest([resource], validate_only))


def test_topic_configs_set_and_deleted_are_committed_pushed_and_replayed_after_a_restart(tmp_path: Path) -> None:
    time = ManualTime()
    log = RecordedLog()
    cluster = Cluster(log=log, time=time, min_insync_replicas=2)
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 1, 3, **{"retention.ms": "1000"})
    # only what the topic sets is stored; METADATA adds the controller's min.insync.replicas
    assert cluster.controller.image.topics["t"].configs == {"retention.ms": "1000"}
    assert cluster.controller.topic_configs("t") == {"min.insync.replicas": "2", "retention.ms": "1000"}

    result = alter_configs(
        cluster, "t", ("min.insync.replicas", SET, "3"), ("segment.bytes", SET, "65536"), ("retention.ms", DELETE, None)
    )

    assert [(r.resource_name, r.error_code) for r in result.response.responses] == [("t", ErrorCode.NONE)]
    assert result.records == [
        ConfigRecord(2, "t", "min.insync.replicas", "3"),
        ConfigRecord(2, "t", "segment.bytes", "65536"),
        ConfigRecord(2, "t", "retention.ms", None),
    ]
    assert result.changed_partitions == []  # brokers learn configs from UPDATE_METADATA, not LEADER_AND_ISR
    assert cluster.controller.image.topics["t"].configs == {"min.insync.replicas": "3", "segment.bytes": "65536"}
    assert cluster.controller.metadata(["t"]).topics[0].configs == {
        "min.insync.replicas": "3",
        "segment.bytes": "65536",
    }
    # the same values again, or a delete of a key the topic does not set: nothing to commit
    assert alter_configs(cluster, "t", ("segment.bytes", SET, "65536"), ("retention.ms", DELETE, None)).records == []

    restarted = Cluster(log=log, time=time, min_insync_replicas=2)
    assert restarted.controller.image.topics == cluster.controller.image.topics
    # deleting min.insync.replicas falls back to the controller's
    alter_configs(restarted, "t", ("min.insync.replicas", DELETE, None))
    assert restarted.controller.topic_configs("t") == {"min.insync.replicas": "2", "segment.bytes": "65536"}


def test_topic_configs_survive_a_restart_from_a_snapshot(tmp_path: Path) -> None:
    time = ManualTime()
    log = RecordedLog()
    cluster = Cluster(log=log, time=time)
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 1, 3)
    alter_configs(cluster, "t", ("retention.ms", SET, "60000"), ("unclean.leader.election.enable", SET, "true"))
    alter_configs(cluster, "t", ("retention.ms", SET, "120000"))

    restarted = Controller(cluster.config, time)
    restarted.reset(replay_all(list(cluster.controller.image.to_records())), cluster.controller.last_offset)

    assert restarted.image.topics["t"].configs == {"retention.ms": "120000", "unclean.leader.election.enable": "true"}


@pytest.mark.parametrize(
    ("ops", "error", "message"),
    [
        pytest.param(
            [("segment.byte", SET, "65536")],
            ErrorCode.INVALID_CONFIG,
            "unknown topic config 'segment.byte'; did you mean segment.bytes?",
            id="unknown-key",
        ),
        pytest.param(
            [("retention.m", DELETE, None)],
            ErrorCode.INVALID_CONFIG,
            "unknown topic config 'retention.m'; did you mean retention.ms?",
            id="delete-of-an-unknown-key",
        ),
        pytest.param(
            [("retention.ms", SET, "soon")],
            ErrorCode.INVALID_CONFIG,
            "topic config retention.ms: expected an integer, got 'soon'",
            id="bad-value",
        ),
        pytest.param(
            [("min.insync.replicas", SET, "0")],
            ErrorCode.INVALID_CONFIG,
            "topic config min.insync.replicas: must be in [1, 2147483647], got 0",
            id="out-of-range",
        ),
        pytest.param(
            [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)],
            ErrorCode.INVALID_REQUEST,
            "duplicate config keys: retention.ms",
            id="duplicate-key",
        ),
        pytest.param(
            [("retention.ms", SET, None)], ErrorCode.INVALID_REQUEST, "SET retention.ms without a value", id="no-value"
        ),
        pytest.param(
            [("retention.ms", AlterConfigOp.APPEND, "1")],
            ErrorCode.INVALID_CONFIG,
            "APPEND applies to list configs and retention.ms is not one",
            id="append",
        ),
        pytest.param(
            [("retention.ms", 9, "1")],
            ErrorCode.INVALID_REQUEST,
            "unknown config operation 9 for retention.ms",
            id="unknown-operation",
        ),
    ],
)
def test_a_refused_config_change_changes_none_of_the_resources_configs(
    ops: list[tuple[str, int, str | None]], error: ErrorCode, message: str
) -> None:
    cluster = Cluster()
    cluster.start_brokers(1)
    cluster.create("t", 1, 1, **{"segment.bytes": "65536"})

    # a valid change listed before the bad one is not applied either
    result = alter_configs(cluster, "t", ("flush.messages", SET, "10"), *ops)

    assert [(r.error_code, r.error_message) for r in result.response.responses] == [(error, message)]
    assert result.records == []
    assert cluster.controller.image.topics["t"].configs == {"segment.bytes": "65536"}


def test_config_changes_to_an_unknown_topic_a_static_broker_key_or_a_resource_named_twice_are_refused() -> None:
    cluster = Cluster()
    cluster.start_brokers(1)
    cluster.create("t", 1, 1)
    request = IncrementalAlterConfigsRequest(
        [
            AlterConfigsResource(2, "nope", [AlterableConfig("retention.ms", SET, "1")]),
            AlterConfigsResource(4, "1", [AlterableConfig("log.retention.ms", SET, "1")]),
            AlterConfigsResource(8, "1", [AlterableConfig("kafka.log", SET, "DEBUG")]),
            AlterConfigsResource(2, "t", [AlterableConfig("retention.ms", SET, "1")]),
            AlterConfigsResource(2, "t", [AlterableConfig("retention.ms", SET, "2")]),
        ]
    )

    result = cluster.controller.incremental_alter_configs(request)

    assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in result.response.responses] == [
        (2, "nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic nope does not exist"),
        (
            4,
            "1",
            ErrorCode.INVALID_CONFIG,
            "broker config 'log.retention.ms' cannot be changed at runtime here (only "
            "follower.replication.throttled.rate, leader.replication.throttled.rate)",
        ),
        (
            8,
            "1",
            ErrorCode.INVALID_REQUEST,
            "only topic (2) and broker (4) configs can be altered, not resource type 8",
        ),
        (2, "t", ErrorCode.INVALID_REQUEST, "resource t is listed 2 times in one request"),
    ]
    assert result.records == [] and cluster.controller.image.topics["t"].configs == {}


def test_validate_only_answers_as_the_change_would_and_commits_nothing() -> None:
    cluster = Cluster()
    cluster.start_brokers(1)
    cluster.create("t", 1, 1)

    good = alter_configs(cluster, "t", ("retention.ms", SET, "1"), validate_only=True)
    bad = alter_configs(cluster, "t", ("retention.m", SET, "1"), validate_only=True)

    assert good.response.responses[0].error_code == ErrorCode.NONE and good.records == []
    assert bad.response.responses[0].error_code == ErrorCode.INVALID_CONFIG
    assert cluster.controller.image.topics["t"].configs == {}


def test_a_topic_config_of_unclean_leader_election_set_at_runtime_decides_the_next_election() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.alter(preferred, [preferred])  # the followers fell out of the ISR
    alter_configs(cluster, "t", ("unclean.leader.election.enable", SET, "true"))

    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(second, third)
    cluster.tick()  # the only ISR member is fenced

    assert (cluster.partition().leader, cluster.partition().isr) == (second, (second,))


# -- dynamic broker configs (the replication throttle rates) -------------------------------------------


def test_dynamic_broker_throttle_rates_are_committed_replayed_and_kept_in_snapshots(tmp_path: Path) -> None:
    time = ManualTime()
    log = RecordedLog()
    cluster = Cluster(log=log, time=time)

    def alter(entity: str, *ops: AlterableConfig) -> AlterConfigsResourceResponse:
        request = IncrementalAlterConfigsRequest(
            [AlterConfigsResource(int(ConfigResourceType.BROKER), entity, list(ops))]
        )
        (answer,) = cluster.controller.incremental_alter_configs(request).response.responses
        return answer

    rate = "leader.replication.throttled.rate"
    assert alter("", AlterableConfig(rate, int(AlterConfigOp.SET), "1000")).error_code == ErrorCode.NONE
    assert alter("2", AlterableConfig(rate, int(AlterConfigOp.SET), "5")).error_code == ErrorCode.NONE
    assert cluster.controller.image.broker_configs == {"": {rate: "1000"}, "2": {rate: "5"}}
    # only the throttle rates can change at runtime, and only to a positive rate
    typo = alter("", AlterableConfig("leader.replication.throttled.rat", int(AlterConfigOp.SET), "1"))
    assert typo.error_code == ErrorCode.INVALID_CONFIG and "did you mean leader.replication.throttled.rate" in (
        typo.error_message or ""
    )
    assert alter("", AlterableConfig(rate, int(AlterConfigOp.SET), "-3")).error_code == ErrorCode.INVALID_CONFIG
    assert alter("nope", AlterableConfig(rate, int(AlterConfigOp.SET), "1")).error_code == ErrorCode.INVALID_REQUEST
    # a restarted controller has them (replayed), and deleting one removes the entity
    restarted = Cluster(log=log, time=time)
    assert restarted.controller.image.broker_configs == cluster.controller.image.broker_configs
    assert alter("2", AlterableConfig(rate, int(AlterConfigOp.DELETE))).error_code == ErrorCode.NONE
    assert cluster.controller.image.broker_configs == {"": {rate: "1000"}}
    # and a snapshot keeps them
    rebuilt = MetadataImage()
    for record in cluster.controller.image.to_records():
        rebuilt.replay(record)
    assert rebuilt.broker_configs == {"": {rate: "1000"}}


# -- producer ids (KIP-98) -----------------------------------------------------------------------


def test_producer_id_blocks_are_never_given_twice_even_by_the_next_controller() -> None:
    time = ManualTime()
    log = RecordedLog()
    cluster = Cluster(log=log, time=time)
    cluster.start_brokers(1, 2)
    first = cluster.controller.allocate_producer_ids(AllocateProducerIdsRequest(1, cluster.epochs[1])).response
    second = cluster.controller.allocate_producer_ids(AllocateProducerIdsRequest(2, cluster.epochs[2])).response
    assert (first.error_code, second.error_code) == (0, 0)
    assert second.producer_id_start == first.producer_id_start + first.producer_id_len
    taken_over = Cluster(log=log, time=time)  # the next controller replays the blocks
    taken_over.epochs = dict(cluster.epochs)
    third = taken_over.controller.allocate_producer_ids(AllocateProducerIdsRequest(1, cluster.epochs[1])).response
    assert third.producer_id_start == second.producer_id_start + second.producer_id_len


def test_init_producer_id_refuses_transactions() -> None:
    with pytest.raises(ProtocolError, match="transactions are not supported"):
        InitProducerIdRequest("tx-1").validate()


# -- preferred leader election (KIP-460) ----------------------------------------------------------


def elect(cluster: Cluster, partitions: dict[str, list[int]] | None) -> ControllerResult[ElectLeadersResponse]:
    topics = None if partitions is None else [ElectionTopic(t, ps) for t, ps in partitions.items()]
    return cluster.controller.elect_leaders(ElectLeadersRequest(topic_partitions=topics))


def preferred_fenced_then_back(cluster: Cluster) -> tuple[int, int, int]:
    """Fence t-0's preferred replica (leadership moves to the second), then let it heartbeat again and
    catch up into the ISR: the state leader-kill chaos leaves behind."""
    preferred, second, third = replicas_of(cluster)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(second, third)
    cluster.tick()
    cluster.heartbeat(preferred)
    cluster.alter(second, [second, third, preferred])
    p = cluster.partition()
    assert (p.leader, p.leader_epoch, set(p.isr)) == (second, 1, {preferred, second, third})
    return preferred, second, third


def test_a_preferred_election_gives_leadership_back_to_the_first_replica_with_an_epoch_bump() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = preferred_fenced_then_back(cluster)

    result = elect(cluster, {"t": [0]})

    assert [(r.topic, r.partition, r.error_code) for r in result.response.results] == [("t", 0, ErrorCode.NONE)]
    p = cluster.partition()
    assert (p.leader, p.leader_epoch, set(p.isr)) == (preferred, 2, {preferred, second, third})
    [pushed] = result.changed_partitions
    assert (pushed.leader, pushed.leader_epoch) == (preferred, 2)
    assert set(result.leader_and_isr_by_broker()) == {preferred, second, third}


def test_a_preferred_election_is_not_needed_when_the_preferred_replica_leads() -> None:
    cluster = three_brokers_one_partition()

    result = elect(cluster, {"t": [0]})

    assert [r.error_code for r in result.response.results] == [ErrorCode.ELECTION_NOT_NEEDED]
    assert result.records == [] and cluster.partition().leader_epoch == 0


def test_a_preferred_replica_out_of_the_isr_or_fenced_cannot_lead() -> None:
    cluster = three_brokers_one_partition()
    preferred, second, third = replicas_of(cluster)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(second, third)
    cluster.tick()  # fenced: leadership moved to the second replica

    fenced = elect(cluster, {"t": [0]}).response.results
    cluster.heartbeat(preferred)  # back, but not caught up into the ISR
    behind = elect(cluster, {"t": [0]}).response.results

    assert [r.error_code for r in fenced + behind] == [ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE] * 2
    assert "fenced" in (fenced[0].error_message or "") and "not in the ISR" in (behind[0].error_message or "")
    assert ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE.retriable
    p = cluster.partition()
    assert (p.leader, p.leader_epoch) == (second, 1)


def test_an_election_for_every_partition_answers_only_those_that_changed_or_could_not() -> None:
    cluster = three_brokers_one_partition()
    assert cluster.create("u", num_partitions=3, replication_factor=3).topics[0].error_code == ErrorCode.NONE
    preferred, _, _ = preferred_fenced_then_back(cluster)  # back in t-0's ISR only
    u = [cluster.partition("u", n) for n in range(3)]
    moved_away = [p.partition for p in u if p.replicas[0] == preferred]  # it is not in their ISRs yet
    assert moved_away and all(p.leader == p.replicas[0] for p in u if p.partition not in moved_away)

    result = elect(cluster, None)

    assert [(r.topic, r.partition, r.error_code) for r in result.response.results] == [
        ("t", 0, ErrorCode.NONE),
        *(("u", n, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE) for n in moved_away),
    ]
    assert cluster.partition().leader == preferred


def test_the_automatic_rebalance_gives_leadership_back_once_per_check_interval() -> None:
    cluster = three_brokers_one_partition(leader_imbalance_check_interval_seconds=10)
    cluster.tick()  # the first tick starts the interval
    preferred, second, third = preferred_fenced_then_back(cluster)  # took SESSION_MS + 1 of the 10 s
    cluster.keep_alive(preferred, second, third)

    early = cluster.tick()
    assert early.records == [] and cluster.partition().leader == second
    cluster.advance(10_000 - SESSION_MS)
    cluster.keep_alive(preferred, second, third)
    due = cluster.tick()

    assert [(c.leader, c.leader_epoch) for c in due.changed_partitions] == [(preferred, 2)]
    assert cluster.partition().leader == preferred


def test_the_automatic_rebalance_leaves_alone_what_cannot_move_and_can_be_turned_off() -> None:
    for config in ({"auto_leader_rebalance_enable": False}, {}):
        cluster = three_brokers_one_partition(leader_imbalance_check_interval_seconds=1, **config)
        cluster.tick()
        preferred, second, third = replicas_of(cluster)
        cluster.advance(SESSION_MS + 1)
        cluster.keep_alive(second, third)
        cluster.tick()  # fenced: the second replica leads, and the rebalance finds nothing it may move
        cluster.heartbeat(preferred)  # back, but not in the ISR: still nothing to move
        cluster.advance(1000)
        cluster.keep_alive(preferred, second, third)
        assert cluster.tick().records == []
        cluster.alter(second, [second, third, preferred])  # caught up
        cluster.advance(1000)
        cluster.keep_alive(preferred, second, third)
        cluster.tick()
        expected = second if config else preferred
        assert cluster.partition().leader == expected, config


def test_an_election_names_unknown_partitions_and_refuses_unknown_election_types() -> None:
    cluster = three_brokers_one_partition()

    unknown = elect(cluster, {"t": [7], "nope": [0]}).response.results
    other = cluster.controller.elect_leaders(ElectLeadersRequest(election_type=2)).response

    assert [(r.topic, r.partition, r.error_code) for r in unknown] == [
        ("t", 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert other.error_code == ErrorCode.INVALID_REQUEST and "UNCLEAN (1)" in (other.error_message or "")


def test_an_unclean_election_gives_an_offline_partition_its_first_live_replica() -> None:
    cluster, preferred, second, third = offline_with_its_last_isr_member_dead()
    request = ElectLeadersRequest(election_type=ELECTION_UNCLEAN, topic_partitions=[ElectionTopic("t", [0])])

    result = cluster.controller.elect_leaders(request)

    assert [r.error_code for r in result.response.results] == [ErrorCode.NONE]
    p = cluster.partition()
    assert (p.leader, p.isr, p.leader_epoch) == (second, (second,), 2)  # what only `preferred` held is gone
    [pushed] = result.changed_partitions
    assert (pushed.leader, pushed.isr) == (second, [second])
    again = cluster.controller.elect_leaders(request).response.results
    assert [r.error_code for r in again] == [ErrorCode.ELECTION_NOT_NEEDED]
    everything = cluster.controller.elect_leaders(ElectLeadersRequest(election_type=ELECTION_UNCLEAN))
    assert everything.response.results == [] and everything.records == []


def test_an_unclean_election_with_no_live_replica_changes_nothing() -> None:
    cluster, preferred, second, third = offline_with_its_last_isr_member_dead()
    cluster.advance(SESSION_MS + 1)
    cluster.tick()  # second and third fenced too

    result = cluster.controller.elect_leaders(ElectLeadersRequest(election_type=ELECTION_UNCLEAN))

    assert [(r.partition, r.error_code) for r in result.response.results] == [
        (0, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
    ]
    assert result.records == [] and cluster.partition().leader == NO_LEADER


# -- partition reassignment (KIP-455) ------------------------------------------------------------


def reassign(cluster: Cluster, replicas: list[int] | None) -> ControllerResult[AlterPartitionReassignmentsResponse]:
    request = AlterPartitionReassignmentsRequest([ReassignablePartition("t", 0, replicas)])
    return cluster.controller.alter_partition_reassignments(request)


def outsider(p: PartitionRegistration) -> int:
    """A broker of 1..4 that holds no replica of `p`."""
    return next(b for b in (1, 2, 3, 4) if b not in p.replicas)


def test_a_reassignment_adds_first_then_drops_the_removed_replicas_once_the_new_ones_are_in_sync() -> None:
    cluster = Cluster()
    cluster.start_brokers(1, 2, 3, 4)
    cluster.create("t", 1, 3)
    before = cluster.partition()
    leader = before.leader
    dropped = next(r for r in before.replicas if r != leader)
    kept = [r for r in before.replicas if r != dropped]
    new = outsider(before)
    target = [new, *kept]

    started = reassign(cluster, target)

    # then: replicas = target + removing, the new one is told (LEADER_AND_ISR), same leader and epoch
    assert [r.error_code for r in started.response.responses] == [ErrorCode.NONE]
    moving = cluster.partition()
    assert (moving.replicas, moving.adding_replicas, moving.removing_replicas) == (
        (*target, dropped),
        (new,),
        (dropped,),
    )
    assert (moving.leader, moving.leader_epoch, set(moving.isr)) == (leader, before.leader_epoch, set(before.isr))
    assert new in started.leader_and_isr_by_broker()
    assert started.deleted_replicas == {}
    listed = cluster.controller.list_partition_reassignments(ListPartitionReassignmentsRequest()).response
    assert [(r.adding_replicas, r.removing_replicas) for r in listed.reassignments] == [([new], [dropped])]

    # when the leader reports broker 4 in sync, then the move completes and the dropped replica is deleted; a
    # replica left the list, so the leader epoch goes up with the same leader (KRaft's
    # triggerLeaderEpochBumpForReplicaReassignmentIfNeeded): the dropped replica's late fetches are fenced
    done = cluster.alter(leader, [*before.isr, new])
    after = cluster.partition()
    assert (after.replicas, after.adding_replicas, after.removing_replicas) == (tuple(target), (), ())
    assert set(after.isr) == set(target) and after.leader == leader and after.leader_epoch == before.leader_epoch + 1
    assert done.deleted_replicas == {dropped: [TopicPartition("t", 0)]}
    assert (
        cluster.controller.list_partition_reassignments(ListPartitionReassignmentsRequest()).response.reassignments
        == []
    )


def test_a_reassignment_away_from_the_leader_elects_a_target_replica_when_it_completes() -> None:
    cluster = Cluster()
    cluster.start_brokers(1, 2, 3, 4)
    cluster.create("t", 1, 3)
    before = cluster.partition()
    new = outsider(before)
    target = [new, *[r for r in before.replicas if r != before.leader]]
    reassign(cluster, target)
    cluster.alter(before.leader, [*before.isr, new])
    after = cluster.partition()
    assert after.leader in target and after.leader != before.leader
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.replicas == tuple(target)


def test_a_cancelled_reassignment_goes_back_and_deletes_what_it_added() -> None:
    cluster = Cluster()
    cluster.start_brokers(1, 2, 3, 4)
    cluster.create("t", 1, 3)
    before = cluster.partition()
    new = outsider(before)
    reassign(cluster, [new, *before.replicas[1:]])
    cancelled = reassign(cluster, None)
    after = cluster.partition()
    # back to the original replicas (in the order of the moving set, as in Kafka), and the same leader
    assert (set(after.replicas), after.adding_replicas, after.removing_replicas) == (set(before.replicas), (), ())
    assert after.leader == before.leader
    assert cancelled.deleted_replicas == {new: [TopicPartition("t", 0)]}
    # the added replica left the list: a new leader epoch, so its late fetches are fenced
    assert after.leader_epoch == before.leader_epoch + 1


def fence(cluster: Cluster, dead: int, alive: list[int]) -> None:
    """Let `dead`'s session expire while `alive` keep theirs: the controller takes it out of every ISR."""
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(*alive)
    cluster.tick()


def a_reassignment_led_by_a_replica_it_is_adding(store: Path) -> tuple[Cluster, PartitionRegistration, int, int]:
    """t-0 on (a, b, c) of brokers 1-5, moving to (new, new2, a); `new` caught up, then `a` died, so `new`
    leads while the move is still in progress. Returns the cluster, the partition before, new and new2."""
    cluster = Cluster(log=RecordedLog())
    cluster.start_brokers(1, 2, 3, 4, 5)
    cluster.create("t", 1, 3)
    before = cluster.partition()
    a, b, c = before.replicas
    new, new2 = (x for x in (1, 2, 3, 4, 5) if x not in before.replicas)
    reassign(cluster, [new, new2, a])
    cluster.alter(a, [a, b, c, new])
    fence(cluster, a, [b, c, new, new2])
    moving = cluster.partition()
    assert (moving.leader, moving.adding_replicas) == (new, (new, new2))
    return cluster, before, new, new2


@pytest.mark.parametrize("cancel", [True, False], ids=["cancelled", "replaced"])
def test_a_reassignment_that_drops_its_leader_elects_another_in_sync_replica(tmp_path: Path, cancel: bool) -> None:
    # Given a move whose leader is a replica it was adding (the original leader died meanwhile),
    cluster, before, new, new2 = a_reassignment_led_by_a_replica_it_is_adding(tmp_path)
    a, b, c = before.replicas
    led = cluster.partition()

    # when the move is cancelled, or replaced by one without that replica,
    result = reassign(cluster, None if cancel else [b, c])

    # then the replica leaves the list and the leadership with it: an in-sync replica that is alive leads,
    # at a new epoch, and the replicas it was adding are deleted (with the dead original one, if replaced).
    assert [r.error_code for r in result.response.responses] == [ErrorCode.NONE]
    after = cluster.partition()
    assert new not in after.replicas and new2 not in after.replicas
    assert after.leader == b and set(after.isr) == {b, c}
    assert (
        after.leader_epoch > led.leader_epoch
    )  # the dropped leader is fenced (a move that completes at once bumps twice)
    assert sorted(result.deleted_replicas) == sorted([new, new2] if cancel else [new, new2, a])
    # and what it made durable replays: a restarted controller has the same partition.
    log = cluster.controller._log._writer
    assert isinstance(log, RecordedLog)
    assert Cluster(log=log, time=cluster.time).partition() == after


def test_a_reassignment_that_would_leave_no_in_sync_replica_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    # Given a move whose only in-sync replica is one it is adding (every original replica died),
    cluster, before, new, _ = a_reassignment_led_by_a_replica_it_is_adding(tmp_path)
    _, b, c = before.replicas
    fence(cluster, b, [c, new])
    fence(cluster, c, [new])
    stranded = cluster.partition()
    assert stranded.isr == (new,)

    # when it is cancelled, which would drop that replica, then it is refused as Kafka refuses a revert that
    # needs an unclean election, and nothing changes.
    result = reassign(cluster, None)
    (answer,) = result.response.responses
    assert answer.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "no in-sync replica" in (answer.error_message or "")
    assert result.records == [] and cluster.partition() == stranded


@pytest.mark.parametrize(
    ("replicas", "error"),
    [
        ([1, 1], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ([1, 9], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ([], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (None, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS),
    ],
)
def test_bad_reassignments_are_refused_and_change_nothing(replicas: list[int] | None, error: ErrorCode) -> None:
    cluster = three_brokers_one_partition()
    before = cluster.partition()
    result = reassign(cluster, replicas)
    assert [r.error_code for r in result.response.responses] == [error]
    assert result.records == [] and cluster.partition() == before


def test_a_move_that_completes_with_no_live_target_replica_leaves_the_partition_offline_until_one_returns() -> None:
    # Given a move to (d, e) whose only in-sync replica is d, and d died too (the last ISR member stays in
    # the ISR, with no leader),
    cluster = Cluster()
    cluster.start_brokers(1, 2, 3, 4, 5)
    cluster.create("t", 1, 3)
    a, b, c = cluster.partition().replicas
    d, e = (x for x in (1, 2, 3, 4, 5) if x not in (a, b, c))
    reassign(cluster, [d, e])
    cluster.alter(a, [a, b, c, d])
    fence(cluster, a, [b, c, d, e])
    fence(cluster, b, [c, d, e])
    fence(cluster, c, [d, e])
    fence(cluster, d, [e])
    assert (cluster.partition().isr, cluster.partition().leader) == ((d,), NO_LEADER)

    # when the move is replaced by one to d alone, it completes at once (d is in the ISR), but d is fenced:
    reassign(cluster, [d])

    # then no replica leads rather than a dead one, as Kafka elects only among live brokers,
    done = cluster.partition()
    assert (done.replicas, done.isr, done.leader) == ((d,), (d,), NO_LEADER)
    # and when d comes back, it is elected.
    cluster.register(d)
    cluster.heartbeat(d)
    assert cluster.partition().leader == d


@pytest.mark.parametrize("kind", ["change", "new partition"])
def test_a_record_the_image_would_refuse_is_not_made_durable_and_changes_nothing(tmp_path: Path, kind: str) -> None:
    # A command that computed a bad record (here, by hand: a leader outside the ISR) fails before the record
    # reaches the metadata log, which a restarted controller must be able to replay.
    log = RecordedLog()
    cluster = Cluster(log=log)
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 1, 3)
    before = cluster.partition()
    outside = before.replicas[-1]
    isr = tuple(r for r in before.isr if r != outside)
    bad: PartitionChangeRecord | PartitionRecord = (
        PartitionChangeRecord(topic="t", partition=0, isr=isr, leader=outside)
        if kind == "change"
        else PartitionRecord(topic="t", partition=1, replicas=before.replicas, isr=isr, leader=outside)
    )

    with pytest.raises(MetadataReplayError, match="is not in ISR"):
        cluster.controller._commit([bad], [])

    assert cluster.partition() == before and cluster.controller.image.partition("t", 1) is None
    restarted = Cluster(log=log, time=cluster.time)
    assert restarted.partition() == before and restarted.controller.image.partition("t", 1) is None


# -- durability -----------------------------------------------------------------------------------


def test_the_next_controller_has_the_same_topics_leaders_epochs_and_brokers_and_fences_nobody(
    tmp_path: Path,
) -> None:
    time = ManualTime()
    log = RecordedLog()
    cluster = Cluster(log=log, time=time)
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 3, 3)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(1, 2)
    cluster.tick()  # broker 3 fenced: leaders moved, epochs bumped
    partitions_before = dict(cluster.controller.image.partitions)
    brokers_before = dict(cluster.controller.image.brokers)

    restarted = Cluster(log=log, time=time)
    restarted.epochs = dict(cluster.epochs)

    assert dict(restarted.controller.image.partitions) == partitions_before
    assert restarted.controller.image.topics == cluster.controller.image.topics
    assert dict(restarted.controller.image.brokers) == brokers_before  # 1 and 2 live, 3 fenced: as they were
    assert restarted.controller.last_offset == cluster.controller.last_offset  # a failover commits nothing

    response = restarted.heartbeat(1)

    assert not response.is_fenced
    assert dict(restarted.controller.image.partitions) == partitions_before
    assert restarted.register(4) > max(cluster.epochs.values())


def test_a_broker_silent_after_a_controller_restart_loses_its_leadership_after_the_session_timeout(
    tmp_path: Path,
) -> None:
    time = ManualTime()
    log = RecordedLog()
    cluster = Cluster(log=log, time=time)
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 1, 3)
    preferred, second, third = replicas_of(cluster)
    restarted = Cluster(log=log, time=time)
    restarted.epochs = dict(cluster.epochs)
    restarted.keep_alive(second, third)

    restarted.advance(SESSION_MS)
    restarted.keep_alive(second, third)
    assert restarted.tick().records == []
    assert restarted.partition().leader == preferred

    restarted.advance(1)
    restarted.tick()

    assert (restarted.partition().leader, restarted.partition().isr) == (second, (second, third))


def test_a_restart_after_snapshots_rebuilds_the_same_image(tmp_path: Path) -> None:
    time = ManualTime()
    log = RecordedLog()
    cluster = Cluster(log=log, time=time)
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 4, 2)
    cluster.create("u", 2, 3)
    preferred, _, _ = cluster.controller.image.partition("u", 0).replicas  # type: ignore[union-attr]
    cluster.heartbeat(preferred, want_shutdown=True)

    restarted = Controller(cluster.config, time)
    restarted.reset(replay_all(list(cluster.controller.image.to_records())), cluster.controller.last_offset)

    assert dict(restarted.image.partitions) == dict(cluster.controller.image.partitions)
    assert restarted.image.brokers[preferred].in_controlled_shutdown


# -- metadata -------------------------------------------------------------------------------------


def test_metadata_lists_live_brokers_and_each_partitions_leader_epoch_replicas_and_isr() -> None:
    cluster = three_brokers_one_partition(node_id=3000)
    preferred, second, third = replicas_of(cluster)
    cluster.create("u", 2, 1)
    cluster.advance(SESSION_MS + 1)
    cluster.keep_alive(preferred, second)
    cluster.tick()

    response = cluster.controller.metadata(None)

    assert response.controller_id == 3000
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [
        (b, "127.0.0.1", 9000 + b) for b in sorted([preferred, second])
    ]
    assert [t.topic for t in response.topics] == ["t", "u"]
    [t0] = response.topics[0].partitions
    assert (t0.partition, t0.leader_id, t0.leader_epoch) == (0, preferred, 0)
    assert (t0.replicas, t0.isr, t0.offline_replicas) == (
        [preferred, second, third],
        [preferred, second],
        [third],
    )
    assert t0.error_code == ErrorCode.NONE
    assert [p.partition for p in response.topics[1].partitions] == [0, 1]


def test_metadata_for_an_unknown_topic_says_so() -> None:
    cluster = three_brokers_one_partition()

    response = cluster.controller.metadata(["nope", "t"])

    assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert response.topics[0].partitions == []
    assert response.topics[1].error_code == ErrorCode.NONE


def test_a_brokers_full_state_lists_every_partition_it_holds_a_replica_of() -> None:
    cluster = Cluster()
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", 6, 2)

    held = {(p.topic, p.partition) for p in cluster.controller.leader_and_isr_for_broker(1)}

    expected = {(p.topic, p.partition) for p in cluster.controller.image.partitions_of("t") if 1 in p.replicas}
    assert held == expected
    assert len(held) == 4


# -- configuration --------------------------------------------------------------------------------


def test_config_reads_kafkas_dotted_keys() -> None:
    config = ControllerConfig.from_properties(
        {"broker.session.timeout.ms": "1000", "unclean.leader.election.enable": "true", "num.partitions": 3}
    )

    assert config.broker_session_timeout_ms == 1000
    assert config.unclean_leader_election_enable is True
    assert config.num_partitions == 3
    assert config.broker_heartbeat_interval_ms == 2000


def test_config_refuses_unknown_keys() -> None:
    with pytest.raises(ValueError, match="session.timeout"):
        ControllerConfig.from_properties({"session.timeout.ms": "1"})


# -- replicas a broker reports offline (corruption, disk errors) ----------------------------------


def test_a_leader_that_reports_its_replica_offline_loses_leadership_and_isr_until_it_stops_reporting() -> None:
    from protocol.messages import OfflineReplica

    cluster = three_brokers_one_partition()
    first, second, third = replicas_of(cluster)
    before = cluster.partition()
    assert before.leader == first
    # when the leader's heartbeat says its replica of t-0 cannot be served
    request = BrokerHeartbeatRequest(first, cluster.epochs[first], offline_replicas=[OfflineReplica("t", 0)])
    cluster.controller.heartbeat(request, cluster.now_ms)
    # then the next ISR member leads, with a new epoch, and the reporter is out of the ISR
    after = cluster.partition()
    assert after.leader == second and after.leader_epoch == before.leader_epoch + 1
    assert first not in after.isr and sorted(after.isr) == sorted([second, third])
    # and the new leader may not bring it back while it is reported offline
    refused = cluster.alter(second, [second, third, first]).response.partitions[0]
    assert refused.error_code == ErrorCode.INELIGIBLE_REPLICA
    # once the broker stops reporting it (restarted, disk replaced), it may rejoin
    cluster.heartbeat(first)
    accepted = cluster.alter(second, [second, third, first]).response.partitions[0]
    assert accepted.error_code == ErrorCode.NONE
