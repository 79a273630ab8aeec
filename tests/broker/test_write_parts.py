"""An answer's parts written to a real socket: bytes through the transport, FileRecords from the segment
files (sendfile while the socket takes them, read and queued behind when it is full), always in order."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path

import pytest
import uvloop

from network.socket_server import write_parts
from protocol.record_batch import build_batch
from server_common.time import ManualTime
from storage.log import Log, LogConfig

pytestmark = pytest.mark.timeout(30)


def log_with(tmp_path: Path, batches: int, value_bytes: int) -> Log:
    log = Log.open(tmp_path / "t-0", LogConfig(), ManualTime(0))
    for _ in range(batches):
        log.append_as_leader(build_batch([os.urandom(value_bytes) for _j in range(4)]), 0)
    return log


async def write_and_receive(parts: list[object], expect_bytes: int) -> tuple[bool, bytes]:
    """Write `parts` through a uvloop transport on one end of a socket pair; what the other end reads."""
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
    try:
        ok = write_parts(transport, parts)  # type: ignore[arg-type]
        received = bytearray()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):  # what has not come by then is not coming
                while len(received) < expect_bytes:
                    chunk = await loop.sock_recv(theirs, 1 << 20)
                    if not chunk:
                        break
                    received += chunk
        return ok, bytes(received)
    finally:
        transport.close()
        theirs.close()


@pytest.mark.parametrize("batches", [3, 400])  # ~25 KB: sendfile takes it all; ~3.2 MB: the socket fills
def test_file_records_arrive_between_the_bytes_around_them_exactly_as_read(tmp_path: Path, batches: int) -> None:
    log = log_with(tmp_path, batches, 2000)
    records = log.read_file_records(0, 8 << 20)
    assert records is not None
    expected = b"head" + log.read(0, 8 << 20) + b"tail"

    async def go() -> tuple[bool, bytes]:
        return await write_and_receive([b"he", b"ad", records, b"tail"], len(expected))

    ok, received = uvloop.run(go())
    assert ok and received == expected


def test_records_truncated_since_the_read_are_not_sent(tmp_path: Path) -> None:
    log = log_with(tmp_path, 3, 100)
    records = log.read_file_records(0, 1 << 20)
    assert records is not None
    log.truncate_to(4)

    async def go() -> tuple[bool, bytes]:
        return await write_and_receive([b"head", records, b"tail"], len(b"head"))

    ok, received = uvloop.run(go())
    assert not ok and received == b"head"  # the caller closes the connection: the frame cannot complete
