"""The leader end point over TCP: what a follower fetcher sends to its leader broker.

It sends through a `Transport` (protocol/transport.py) addressed by the leader's broker id; the broker
gives each fetcher a transport of its own, so one connection per fetcher (Kafka: one per
ReplicaFetcherThread), opened lazily and re-opened after a failure. A request that fails on the network
raises one of NETWORK_ERRORS and the fetcher backs the whole request off (F5). Requests time out after
`replica.socket.timeout.ms`.
"""

from __future__ import annotations

import logging

from fetcher.leader_end_point import LeaderEndPoint
from protocol.codec import Message
from protocol.errors import ErrorCode, error_for_code
from protocol.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    UNDEFINED_EPOCH,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochPartition,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    TopicPartition,
)
from protocol.transport import Transport

log = logging.getLogger(__name__)


def ibp_tuple(version: str) -> tuple[int, ...]:
    """ "2.8" or "0.11.0" as a tuple that compares as versions do; ValueError for anything else."""
    try:
        parts = tuple(int(x) for x in version.split("-")[0].split("."))
    except ValueError:
        raise ValueError(f"inter.broker.protocol.version must look like 2.8 or 0.11.0, got {version!r}") from None
    if len(parts) < 2:
        raise ValueError(f"inter.broker.protocol.version must look like 2.8 or 0.11.0, got {version!r}")
    return parts


class RemoteLeaderEndPoint(LeaderEndPoint):
    def __init__(
        self,
        leader_broker_id: int,
        transport: Transport,
        local_broker_id: int,
        socket_timeout_ms: int = 30000,
        inter_broker_protocol_version: str = "3.0",
    ) -> None:
        self.leader_broker_id = leader_broker_id
        ibp = ibp_tuple(inter_broker_protocol_version)
        # Kafka's IBP gates: OffsetsForLeaderEpoch from 0.11 (KIP-101); its answer carries the leader's
        # epoch from 2.0 (KIP-279); truncation on fetch from 2.7. Older settings reproduce the behaviour
        # those changes replaced.
        self.supports_offsets_for_leader_epoch = ibp >= (0, 11)
        self._epoch_in_answer = ibp >= (2, 0)
        self.supports_truncate_on_fetch = ibp >= (2, 7)
        self._local_broker_id = local_broker_id
        self._transport = transport
        self._timeout_ms = socket_timeout_ms

    async def _send(self, request: Message) -> object:
        return await self._transport.send(self.leader_broker_id, request, self._timeout_ms)

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        response = await self._send(request)
        assert isinstance(response, FetchResponse)
        return response

    async def fetch_epoch_end_offsets(
        self, partitions: list[OffsetForLeaderEpochPartition]
    ) -> dict[TopicPartition, EpochEndOffset]:
        response = await self._send(OffsetForLeaderEpochRequest(partitions, replica_id=self._local_broker_id))
        assert isinstance(response, OffsetForLeaderEpochResponse)
        if response.error_code != ErrorCode.NONE:
            raise error_for_code(response.error_code, response.error_message)
        if not self._epoch_in_answer:
            # Version 0 of the answer had only the end offset.
            for p in response.partitions:
                if p.error_code == ErrorCode.NONE:
                    p.leader_epoch = UNDEFINED_EPOCH
        return {TopicPartition(p.topic, p.partition): p for p in response.partitions}

    async def _list_offset(self, tp: TopicPartition, current_leader_epoch: int, timestamp: int) -> tuple[int, int]:
        request = ListOffsetsRequest(
            replica_id=self._local_broker_id,
            partitions=[ListOffsetsPartition(tp.topic, tp.partition, timestamp, current_leader_epoch)],
        )
        response = await self._send(request)
        assert isinstance(response, ListOffsetsResponse)
        code = response.error_code or (response.partitions[0].error_code if response.partitions else 0)
        if code != ErrorCode.NONE or not response.partitions:
            message = response.error_message or (response.partitions[0].error_message if response.partitions else "")
            raise error_for_code(code or -1, message or f"ListOffsets failed for {tp}")
        p = response.partitions[0]
        return p.leader_epoch, p.offset

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> tuple[int, int]:
        return await self._list_offset(tp, current_leader_epoch, LATEST_TIMESTAMP)

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> tuple[int, int]:
        return await self._list_offset(tp, current_leader_epoch, EARLIEST_TIMESTAMP)

    async def close(self) -> None:
        await self._transport.close()
