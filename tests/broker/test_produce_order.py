"""A connection's PRODUCEs reach the log in the order they arrived, whatever a handler awaits before its
append: a real socket server on real TCP, the broker's real handlers and replica manager on a temp dir.
Only the controller's answer about a new producer id is scripted, so the first PRODUCE waits exactly
while the test sends the next ones (in a cluster that wait is a heartbeat round trip, and the batches
behind it overtook it: issue 40)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.producer_id_manager import ProducerIdManager
from network.connection import BrokerConnection
from network.socket_server import SocketServer
from protocol.messages import ProducePartition, ProduceRequest
from protocol.record_batch import build_batch
from tests.broker.leader_fixtures import TOPIC, LeaderBroker
from tests.broker.test_topic_configs import broker_apis
from tests.integration.processes import wait_until

pytestmark = pytest.mark.timeout(20)

PRODUCER_ID = 7


def produce(sequence: int, acks: int) -> ProduceRequest:
    batch = build_batch([b"v%d" % sequence], producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=sequence)
    return ProduceRequest(acks, 10_000, [ProducePartition(TOPIC, 0, batch)])


@pytest.mark.parametrize("acks", [1, -1])
async def test_batches_behind_one_waiting_for_its_producer_id_are_appended_after_it(tmp_path: Path, acks: int) -> None:
    broker = LeaderBroker(tmp_path)
    broker.make_leader(isr=[0])
    apis = broker_apis(broker)
    asked, answer = asyncio.Event(), asyncio.Event()

    async def ask_controller() -> int:
        asked.set()
        await answer.wait()
        return PRODUCER_ID + 1

    apis.producer_ids = ProducerIdManager(ask_controller)
    server = SocketServer(apis.handle, "127.0.0.1", 0, max_in_flight=5)
    await server.start()
    try:
        async with await BrokerConnection.connect("127.0.0.1", server.port) as conn:
            first = asyncio.ensure_future(conn.send(produce(0, acks)))
            await asyncio.wait_for(asked.wait(), 5)  # the leader asks the controller about the new id
            apis.producer_ids.note(PRODUCER_ID + 1)  # meanwhile a heartbeat's answer makes it known
            rest = [asyncio.ensure_future(conn.send(produce(sequence, acks))) for sequence in range(1, 5)]

            async def arrived() -> bool:  # all five read by the server: started, or queued behind the first
                return server.stats.requests_total + server.queued_requests() == 5

            await wait_until(arrived, 5, 0.005)
            answer.set()
            answers = [(await f).partitions[0] for f in [first, *rest]]
    finally:
        await server.close()
    assert [(a.error_code, a.base_offset) for a in answers] == [(0, offset) for offset in range(5)]


async def test_acks_all_produces_pipelined_on_one_connection_wait_for_their_followers_together(
    tmp_path: Path,
) -> None:
    broker = LeaderBroker(tmp_path)
    broker.make_leader()  # ISR {0, 1}: follower 1 has fetched nothing yet
    server = SocketServer(broker_apis(broker).handle, "127.0.0.1", 0, max_in_flight=5)
    await server.start()
    try:
        async with await BrokerConnection.connect("127.0.0.1", server.port) as conn:
            sent = [
                asyncio.ensure_future(conn.send(ProduceRequest(-1, 30_000, [ProducePartition(TOPIC, 0, batch)])))
                for batch in (build_batch([b"v%d" % i]) for i in range(3))
            ]

            async def all_appended() -> bool:
                return broker.partition().log_end_offset == 3

            # all three are in the log while each still waits for the follower: the order held for each
            # until its append, not until its answer
            await wait_until(all_appended, 5, 0.005)
            assert not any(f.done() for f in sent)
            await broker.follower_fetch(3)  # the follower has them all: the high watermark passes them
            answers = [(await f).partitions[0] for f in sent]
    finally:
        await server.close()
    assert [(a.error_code, a.base_offset) for a in answers] == [(0, 0), (0, 1), (0, 2)]
