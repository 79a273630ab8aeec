"""The one frame loop both ends of a connection share: asyncio's BufferedProtocol over a `FrameDecoder`.

Bytes are read straight into the decoder's buffer (`get_buffer` / `buffer_updated`), every complete frame
goes to `on_frame`, a frame that breaks the framing rules to `on_bad_frame` (the subclass closes the
connection), and `after_frames` runs once per read. Write back-pressure is tracked in `can_write`:
`pause_writing` clears it and `resume_writing` sets it. The server's connection (network/socket_server.py) and the
client's (network/connection.py) differ only in what they do with a frame.
"""

from __future__ import annotations

import asyncio
import socket

from protocol.errors import ProtocolError
from protocol.framing import FrameDecoder


class FrameProtocol(asyncio.BufferedProtocol):
    def __init__(self, decoder: FrameDecoder) -> None:
        self.decoder = decoder
        # The loop, looked up once: asyncio's running-loop lookup costs a getpid() system call, and the
        # connections would do one per request (timers, futures, asyncio.Event waits).
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        decoder = self.decoder
        decoder.buffer_updated(nbytes)
        try:
            while (frame := decoder.next_frame()) is not None:
                self.on_frame(frame)
        except ProtocolError as exc:
            self.on_bad_frame(exc)
            return
        self.after_frames()

    def on_frame(self, frame: bytes | bytearray) -> None:
        raise NotImplementedError

    def on_bad_frame(self, exc: ProtocolError) -> None:
        raise NotImplementedError

    def after_frames(self) -> None:
        """After every read whose frames were all good (the server tracks partial frames and its queue)."""

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()
