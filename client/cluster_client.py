"""A small client for the whole cluster: metadata, a connection per broker, produce, fetch, admin.

It routes each partition's requests to the leader named by METADATA and refreshes metadata when a
broker answers NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH or a connection breaks. It never
resends a PRODUCE on its own: whether to retry is the caller's decision, because a request that timed
out or lost its connection may or may not have been written (the chaos producers count those as
indeterminate).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from client.errors import ClusterUnavailableError as ClusterUnavailableError  # raised here, named by callers
from client.sender import DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_REQUEST_BYTES, Sender
from network.connection import BrokerConnection
from protocol.codec import Message
from protocol.errors import ErrorCode
from protocol.fetch_frame import FETCH_RECORDS_APART
from protocol.messages import (
    EARLIEST_TIMESTAMP,
    ELECTION_PREFERRED,
    LATEST_TIMESTAMP,
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    BrokerEndpoint,
    ConfigResourceType,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    ElectionTopic,
    ElectLeadersRequest,
    ElectLeadersResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionMetadata,
    ProduceResponse,
    ReassignablePartition,
    SaslAuthenticateRequest,
    TopicPartition,
)
from server_common.poll import RetryPolicy, retry, wait_until
from server_common.time import SYSTEM_TIME, Time

log = logging.getLogger(__name__)

# INIT_PRODUCER_ID while the controller is unreachable: 40 tries, 50 ms more between each, at most 0.5 s (~17 s)
INIT_PRODUCER_ID_RETRY = RetryPolicy(40, 0.05, 0.5, "linear")

REFRESH_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}


@dataclass(slots=True)
class PartitionInfo:
    tp: TopicPartition
    leader_id: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for item in servers.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server must be HOST:PORT, got {item.strip()!r}")
        out.append((host, int(port)))
    return out


class ClusterClient:
    def __init__(
        self,
        bootstrap: str,
        client_id: str = "minibroker-cli",
        request_timeout_s: float = 30.0,
        secret: str | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        batches_per_partition: int = 1,
        time: Time = SYSTEM_TIME,
    ):
        self.bootstrap = parse_bootstrap(bootstrap)
        self.time = time  # what its waits and back-offs are timed by
        self.client_id = client_id
        # With a cluster secret every connection authenticates first, so admin requests (CREATE_TOPICS,
        # DELETE_RECORDS) are accepted by a cluster that requires it (docs/protocol.md, trust model).
        self.secret = secret
        self.request_timeout_s = request_timeout_s
        self.brokers: dict[int, BrokerEndpoint] = {}
        self.partitions: dict[TopicPartition, PartitionInfo] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.controller_id = -1
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self.sender = Sender(self, max_in_flight, max_request_bytes, batches_per_partition)

    async def __aenter__(self) -> ClusterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.sender.close()
        conns, self._connections = list(self._connections.values()), {}
        for c in conns:
            try:
                await asyncio.wait_for(c.close(), 1.0)
            except (TimeoutError, OSError):
                pass

    async def connection(self, host: str, port: int) -> BrokerConnection:
        key = (host, port)
        conn = self._connections.get(key)
        if conn is None or not conn.is_open:
            conn = await BrokerConnection.connect(host, port, self.client_id, timeout_s=5.0)
            if self.secret is not None:
                auth = await conn.send(SaslAuthenticateRequest(self.secret.encode()), timeout_s=5.0)
                if auth.error_code != ErrorCode.NONE:
                    await conn.close()
                    raise PermissionError(f"{host}:{port} refused the cluster secret: {auth.error_message}")
            self._connections[key] = conn
        return conn

    async def send_to(
        self, broker_id: int, request: Message, timeout_s: float | None = None, api_version: int = 0
    ) -> Any:
        ep = self.brokers.get(broker_id)
        if ep is None:
            raise ClusterUnavailableError(f"broker {broker_id} is not in the cluster metadata")
        conn = await self.connection(ep.host, ep.port)
        try:
            return await conn.send(request, timeout_s=timeout_s or self.request_timeout_s, api_version=api_version)
        except (ConnectionError, OSError):
            self._connections.pop((ep.host, ep.port), None)
            raise

    async def send_any(self, request: Message, timeout_s: float | None = None) -> Any:
        """Send to the first bootstrap server (then known brokers) that answers."""
        candidates = list(self.bootstrap) + [(b.host, b.port) for b in self.brokers.values()]
        errors = []
        for host, port in dict.fromkeys(candidates):
            try:
                conn = await self.connection(host, port)
                return await conn.send(request, timeout_s=timeout_s or self.request_timeout_s)
            except (TimeoutError, ConnectionError, OSError) as exc:
                self._connections.pop((host, port), None)
                errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
        raise ClusterUnavailableError("no broker reachable (" + "; ".join(errors) + ")")

    # -- metadata -----------------------------------------------------------------------------------

    async def refresh_metadata(self, topics: list[str] | None = None) -> MetadataResponse:
        resp: MetadataResponse = await self.send_any(MetadataRequest(topics))
        self.brokers = {b.broker_id: b for b in resp.brokers}
        self.controller_id = resp.controller_id
        for t in resp.topics:
            if t.error_code != ErrorCode.NONE:
                continue
            self.topic_configs[t.topic] = dict(t.configs)
            for p in t.partitions:
                self.partitions[TopicPartition(t.topic, p.partition)] = _info(t.topic, p)
        return resp

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.partitions if tp.topic == topic)

    def min_isr_unreachable(self, tp: TopicPartition) -> bool:
        """True when acks=all to `tp` cannot succeed however long one waits: even with every replica in
        the ISR it would be smaller than the topic's min.insync.replicas."""
        info = self.partitions.get(tp)
        min_isr = int(self.topic_configs.get(tp.topic, {}).get("min.insync.replicas", 1))
        return info is not None and len(info.replicas) < min_isr

    def leader_of(self, tp: TopicPartition) -> PartitionInfo:
        info = self.partitions.get(tp)
        if info is None:
            raise KeyError(f"unknown partition {tp}")
        return info

    async def wait_for_leaders(self, topic: str, timeout_s: float = 30.0, partitions: int = 1) -> None:
        """Until METADATA lists at least `partitions` partitions of `topic`, each with a leader."""

        async def led() -> bool:
            resp = await self.refresh_metadata([topic])
            t = resp.topics[0] if resp.topics else None
            return bool(
                t
                and t.error_code == ErrorCode.NONE
                and len(t.partitions) >= max(partitions, 1)
                and all(p.leader_id >= 0 for p in t.partitions)
            )

        if not await wait_until(led, timeout_s, clock=self.time):
            raise TimeoutError(
                f"topic {topic!r} does not have {max(partitions, 1)} partitions each with a leader after {timeout_s}s"
            )

    # -- admin --------------------------------------------------------------------------------------

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str] | None = None
    ) -> CreateTopicsResponse:
        req = CreateTopicsRequest([CreatableTopic(name, partitions, replication_factor, configs or {})])
        response: CreateTopicsResponse = await self.send_any(req)
        return response

    async def delete_topics(self, names: list[str]) -> DeleteTopicsResponse:
        response: DeleteTopicsResponse = await self.send_any(DeleteTopicsRequest(list(names)))
        return response

    async def create_partitions(self, name: str, count: int) -> CreatePartitionsResponse:
        """Grow `name` to `count` partitions in all."""
        response: CreatePartitionsResponse = await self.send_any(
            CreatePartitionsRequest([CreatePartitionsTopic(name, count)])
        )
        return response

    async def describe_topic_configs(self, name: str) -> DescribeConfigsResponse:
        request = DescribeConfigsRequest([DescribeConfigsResource(int(ConfigResourceType.TOPIC), name)])
        response: DescribeConfigsResponse = await self.send_any(request)
        return response

    async def alter_topic_configs(
        self, name: str, set_configs: dict[str, str], delete: list[str]
    ) -> IncrementalAlterConfigsResponse:
        """INCREMENTAL_ALTER_CONFIGS: SET each of `set_configs`, DELETE each of `delete`, all or none."""
        return await self.alter_configs(ConfigResourceType.TOPIC, name, set_configs, delete)

    async def alter_broker_configs(
        self, entity: str, set_configs: dict[str, str], delete: list[str]
    ) -> IncrementalAlterConfigsResponse:
        """Dynamic broker configs (the replication throttle rates) of broker `entity`, or with "" the
        cluster-wide default."""
        return await self.alter_configs(ConfigResourceType.BROKER, entity, set_configs, delete)

    async def alter_configs(
        self, resource_type: int, name: str, set_configs: dict[str, str], delete: list[str]
    ) -> IncrementalAlterConfigsResponse:
        ops = [AlterableConfig(k, int(AlterConfigOp.SET), v) for k, v in set_configs.items()]
        ops += [AlterableConfig(k, int(AlterConfigOp.DELETE)) for k in delete]
        request = IncrementalAlterConfigsRequest([AlterConfigsResource(int(resource_type), name, ops)])
        response: IncrementalAlterConfigsResponse = await self.send_any(request)
        return response

    async def alter_partition_reassignments(
        self, targets: list[tuple[TopicPartition, list[int] | None]]
    ) -> AlterPartitionReassignmentsResponse:
        request = AlterPartitionReassignmentsRequest(
            [ReassignablePartition(tp.topic, tp.partition, replicas) for tp, replicas in targets]
        )
        response: AlterPartitionReassignmentsResponse = await self.send_any(request)
        return response

    async def elect_leaders(
        self, partitions: list[TopicPartition] | None = None, election_type: int = ELECTION_PREFERRED
    ) -> ElectLeadersResponse:
        """Leader election (ELECTION_PREFERRED or ELECTION_UNCLEAN) for these partitions (None: every
        partition that needs it)."""
        topics: list[ElectionTopic] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [ElectionTopic(topic, numbers) for topic, numbers in by_topic.items()]
        response: ElectLeadersResponse = await self.send_any(ElectLeadersRequest(election_type, topics))
        return response

    async def list_partition_reassignments(self, topics: list[str] | None = None) -> ListPartitionReassignmentsResponse:
        response: ListPartitionReassignmentsResponse = await self.send_any(ListPartitionReassignmentsRequest(topics))
        return response

    async def init_producer_id(self, producer_id: int = -1, producer_epoch: int = -1) -> tuple[int, int]:
        """(producer id, epoch) for an idempotent producer; naming the current ones bumps the epoch. Retries
        while the controller is unreachable (a broker answers NOT_CONTROLLER) for up to ~10 s."""
        last = ""

        async def attempt() -> tuple[int, int] | None:
            nonlocal last
            response: InitProducerIdResponse = await self.send_any(
                InitProducerIdRequest(None, 60000, producer_id, producer_epoch)
            )
            if response.error_code == ErrorCode.NONE:
                return response.producer_id, response.producer_epoch
            last = f"{ErrorCode(response.error_code).name}: {response.error_message}"
            if not ErrorCode(response.error_code).retriable:
                raise ClusterUnavailableError(f"INIT_PRODUCER_ID failed: {last}")
            return None

        ids = await retry(attempt, INIT_PRODUCER_ID_RETRY, clock=self.time)
        if ids is None:
            raise ClusterUnavailableError(f"INIT_PRODUCER_ID failed: {last}")
        return ids

    # -- data ---------------------------------------------------------------------------------------

    async def produce(
        self, tp: TopicPartition, records: bytes, acks: int = -1, timeout_ms: int = 30000
    ) -> ProduceResponse | None:
        """`tp`'s answer to `records`, sent to its leader in a PRODUCE it may share with record sets for
        the leader's other partitions (client/sender.py); None for acks=0."""
        info = self.leader_of(tp)
        if info.leader_id not in self.brokers:
            raise ClusterUnavailableError(f"broker {info.leader_id} is not in the cluster metadata")
        response: ProduceResponse | None = await self.sender.produce(info.leader_id, tp, records, acks, timeout_ms)
        return response

    async def send_to_no_response(self, broker_id: int, req: Message) -> None:
        ep = self.brokers[broker_id]
        conn = await self.connection(ep.host, ep.port)
        await conn.send(req, expect_response=False)

    async def list_offset(self, tp: TopicPartition, earliest: bool, replica_id: int = -1) -> tuple[int, int]:
        """(error_code, offset) from the leader: earliest or latest (the HW for consumers)."""
        info = self.leader_of(tp)
        ts = EARLIEST_TIMESTAMP if earliest else LATEST_TIMESTAMP
        req = ListOffsetsRequest(replica_id, [ListOffsetsPartition(tp.topic, tp.partition, ts, info.leader_epoch)])
        resp: ListOffsetsResponse = await self.send_to(info.leader_id, req)
        p = resp.partitions[0] if resp.partitions else None
        code = resp.error_code or (p.error_code if p else ErrorCode.UNKNOWN_SERVER_ERROR)
        return int(code), p.offset if p else -1

    async def fetch(
        self,
        broker_id: int,
        partitions: Iterable[FetchPartition],
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 50 * 1024 * 1024,
        replica_id: int = -1,
    ) -> FetchResponse:
        """One FETCH in version 1: each partition's `records` is a view of the answer's frame (bytes-like)."""
        req = FetchRequest(replica_id, max_wait_ms, min_bytes, max_bytes, list(partitions))
        response: FetchResponse = await self.send_to(
            broker_id, req, timeout_s=max_wait_ms / 1000.0 + self.request_timeout_s, api_version=FETCH_RECORDS_APART
        )
        return response


def _info(topic: str, p: PartitionMetadata) -> PartitionInfo:
    return PartitionInfo(TopicPartition(topic, p.partition), p.leader_id, p.leader_epoch, list(p.replicas), list(p.isr))
