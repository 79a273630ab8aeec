"""DeleteRecords and DeleteGroups on a Kafka listener of a cluster with a secret: a connection that has not
authenticated gets Kafka's authorization errors per partition and per group, and nothing is deleted; one that
has (SASL/PLAIN with cluster.secret) deletes. The broker's real handlers, replica manager and group
coordinator; requests are Kafka frames decoded by the listener's own wire. And DescribeQuorum: the active
controller's answer in Kafka's layout, each voter and observer read back by kafka-python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.kafka_wire_apis import KafkaWireApis
from group_coordinator import GroupConfig, GroupCoordinator
from network.kafka_wire import KAFKA_WIRE
from network.request_context import ConnectionContext
from protocol.errors import ErrorCode
from protocol.messages import DescribeQuorumResponse as QuorumAnswer
from protocol.messages import QuorumReplicaState
from tests.broker.leader_fixtures import TOPIC, TP0, LeaderBroker
from tests.broker.test_topic_configs import broker_apis

kafka = pytest.importorskip("kafka")
from kafka.protocol.admin import DescribeQuorumRequest, DescribeQuorumResponse  # noqa: E402
from kafka.protocol.admin.groups import DeleteGroupsRequest  # noqa: E402
from kafka.protocol.admin.topics import DeleteRecordsRequest  # noqa: E402

pytestmark = pytest.mark.timeout(20)


async def nothing_written(partition: int, records: list[tuple[bytes | None, bytes | None]]) -> int:
    raise AssertionError("a refused DeleteGroups wrote to __consumer_offsets")


async def ask(wire: KafkaWireApis, ctx: ConnectionContext, request: Any) -> Any:
    request.with_header(correlation_id=1, client_id="admin")
    header, decoded = KAFKA_WIRE.decode_request(bytes(request.encode(header=True)))
    return await wire.handle(ctx, header, decoded)


async def test_deleting_records_and_groups_needs_an_authenticated_connection_when_the_cluster_has_a_secret(
    tmp_path: Path,
) -> None:
    broker = LeaderBroker(tmp_path)
    broker.make_leader(isr=[0])
    for i in range(5):
        await broker.produce(TP0, b"v%d" % i)
    coordinator = GroupCoordinator(0, broker.time, nothing_written, GroupConfig(offsets_topic_num_partitions=1))
    await coordinator.on_elected(0, [])
    wire = KafkaWireApis(broker_apis(broker, cluster_secret="s3cret"), "PLAINTEXT", coordinator)
    D = DeleteRecordsRequest.DeleteRecordsTopic
    delete_records = DeleteRecordsRequest[1](
        topics=[D(name=TOPIC, partitions=[D.DeleteRecordsPartition(partition_index=0, offset=3)])], timeout_ms=1000
    )
    anonymous = ConnectionContext(1, "anonymous")

    refused = await ask(wire, anonymous, delete_records)
    assert [(p.error_code, p.low_watermark) for p in refused.topics[0].partitions] == [
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1)
    ]
    assert broker.partition().log_start_offset == 0
    groups = await ask(wire, anonymous, DeleteGroupsRequest[1](groups_names=["g"]))
    assert [(r.group_id, r.error_code) for r in groups.results] == [("g", ErrorCode.GROUP_AUTHORIZATION_FAILED)]

    admin = ConnectionContext(2, "admin", authenticated=True)
    deleted = await ask(wire, admin, delete_records)
    assert [(p.error_code, p.low_watermark) for p in deleted.topics[0].partitions] == [(0, 3)]
    assert broker.partition().log_start_offset == 3
    groups = await ask(wire, admin, DeleteGroupsRequest[1](groups_names=["g"]))
    assert [(r.group_id, r.error_code) for r in groups.results] == [("g", ErrorCode.GROUP_ID_NOT_FOUND)]


async def test_describe_quorum_answers_each_voter_and_observer_in_the_version_asked(tmp_path: Path) -> None:
    # The active controller's answer (forwarded, as a broker does) rewritten into Kafka's DescribeQuorum; the
    # replica states are a struct nested in the partition's schema, in v0 as in v1.
    async def active_controller(request: Any) -> QuorumAnswer:
        voters = [QuorumReplicaState(3000 + i, 15, 1_000 + i, 900 + i) for i in range(3)]
        return QuorumAnswer(0, None, 3001, 2, 15, voters, [QuorumReplicaState(1, 14, 1_100, 1_000)])

    voters = {3000 + i: ("127.0.0.1", 9300 + i) for i in range(3)}
    apis = broker_apis(LeaderBroker(tmp_path), forward_to_controller=active_controller)
    wire = KafkaWireApis(apis, "PLAINTEXT", quorum_voters=voters)
    T = DescribeQuorumRequest.TopicData
    for version in (0, 1, 2):
        request = DescribeQuorumRequest[version](
            topics=[T(topic_name="__cluster_metadata", partitions=[T.PartitionData(partition_index=0)])]
        )
        answer = await ask(wire, ConnectionContext(1, "anyone"), request)
        read = DescribeQuorumResponse[version].decode(answer.encode(version=version))
        (partition,) = read.topics[0].partitions
        assert (partition.error_code, partition.leader_id, partition.leader_epoch) == (0, 3001, 2)
        assert [(v.replica_id, v.log_end_offset) for v in partition.current_voters] == [
            (3000, 15),
            (3001, 15),
            (3002, 15),
        ]
        assert [(o.replica_id, o.log_end_offset) for o in partition.observers] == [(1, 14)]
        if version >= 1:
            assert [v.last_caught_up_timestamp for v in partition.current_voters] == [900, 901, 902]
        if version == 2:  # the controllers' listeners, and the partition's error message (kafka-python reads it)
            assert partition.error_message is None and read.error_message is None
            assert [(n.node_id, [(x.name, x.host, x.port) for x in n.listeners]) for n in read.nodes] == [
                (3000 + i, [("CONTROLLER", "127.0.0.1", 9300 + i)]) for i in range(3)
            ]
