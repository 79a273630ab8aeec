"""DeleteRecords and DeleteGroups on a Kafka listener of a cluster with a secret: a connection that has not
authenticated gets Kafka's authorization errors per partition and per group, and nothing is deleted; one that
has (SASL/PLAIN with cluster.secret) deletes. The broker's real handlers, replica manager and group
coordinator; requests are Kafka frames decoded by the listener's own wire."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.kafka_wire_apis import KafkaWireApis
from group_coordinator import GroupConfig, GroupCoordinator
from network.kafka_wire import KAFKA_WIRE
from network.request_context import ConnectionContext
from protocol.errors import ErrorCode
from tests.broker.leader_fixtures import TOPIC, TP0, LeaderBroker
from tests.broker.test_topic_configs import broker_apis

kafka = pytest.importorskip("kafka")
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
