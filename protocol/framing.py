"""Length-prefixed framing: a 4-byte unsigned big-endian length, then that many bytes of one msgpack value.

How this works
--------------
`FrameDecoder` is a push/pull state machine in the style of h11: bytes go in, whole frame bodies come
out (`next_frame`), and it never touches a socket, so partial reads, many frames per read and oversize
prefixes are plain unit tests. Bytes go in one of two ways:

* `receive_data(data)`: copy what a stream reader produced;
* `get_buffer()` / `buffer_updated(n)`: hand the kernel a writable view to `recv_into` directly, the
  shape of asyncio's `BufferedProtocol`. This is the broker's path: no bytes object per read.

Small frames live in one reusable scratch buffer (`scratch_bytes`, 256 KiB). A frame too large for it
gets its own `bytearray` of exactly its size as soon as its prefix is known, and from then on the kernel
writes straight into that, so a 1 MiB produce or fetch response is copied once by the kernel and never
again by us:

    scratch: [ consumed | prefix+body | prefix+body | prefix+par.. | free             ]
                        ^_start                                   ^_end
    big:     [ body bytes received so far ......... | still to come ]   (one frame, exact size)

A length prefix larger than `max_frame_bytes` (Kafka's `socket.request.max.bytes`, 100 MiB by default)
is rejected as soon as the 4 prefix bytes are in, before any of the body is buffered, so a broken or
hostile peer cannot make the broker allocate the memory.
"""

from __future__ import annotations

import struct

from protocol.errors import ProtocolError

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # socket.request.max.bytes
DEFAULT_SCRATCH_BYTES = 256 * 1024
PREFIX = struct.Struct(">I")
PREFIX_SIZE = PREFIX.size


class FrameTooLargeError(ProtocolError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes (socket.request.max.bytes)")
        self.size = size
        self.limit = limit


def frame_prefix(body_length: int) -> bytes:
    return PREFIX.pack(body_length)


def encode_frame(body: bytes) -> bytes:
    return PREFIX.pack(len(body)) + body


class FrameDecoder:
    """Turns a byte stream into frame bodies.

    Invariants: `_buf[_start:_end]` holds received, unconsumed bytes of the scratch buffer; while `_big`
    is set, `_big[:_big_have]` is the received part of the one oversize frame and the scratch is empty.
    """

    __slots__ = ("_buf", "_start", "_end", "_big", "_big_have", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, scratch_bytes: int = DEFAULT_SCRATCH_BYTES):
        self._buf = bytearray(scratch_bytes)
        self._start = 0
        self._end = 0
        self._big: bytearray | None = None
        self._big_have = 0
        self.max_frame_bytes = max_frame_bytes

    # -- bytes in ---------------------------------------------------------------------------------

    def get_buffer(self) -> memoryview:
        """A writable view for the next read. Never empty."""
        if self._big is not None:
            return memoryview(self._big)[self._big_have :]
        if self._end == len(self._buf):
            self._compact()
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_have += nbytes
        else:
            self._end += nbytes

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Copy `data` in. Call `next_frame` until it returns None between calls if frames may be large."""
        view = memoryview(data)
        while view:
            target = self.get_buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            self.buffer_updated(n)
            del target  # release the export so the scratch buffer may grow
            view = view[n:]
            if view:
                self._make_room()

    # -- frames out -------------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        return (self._end - self._start) + self._big_have

    def next_frame(self) -> bytes | bytearray | None:
        """The next complete frame body, or None until more bytes arrive. Raises FrameTooLargeError."""
        big = self._big
        if big is not None:
            if self._big_have < len(big):
                return None
            self._big = None
            self._big_have = 0
            return big
        available = self._end - self._start
        if available < PREFIX_SIZE:
            return None
        (size,) = PREFIX.unpack_from(self._buf, self._start)
        if size > self.max_frame_bytes:
            raise FrameTooLargeError(size, self.max_frame_bytes)
        if available >= PREFIX_SIZE + size:
            begin = self._start + PREFIX_SIZE
            self._start = begin + size
            if self._start == self._end:
                self._start = self._end = 0
            return bytes(self._buf[begin : begin + size])
        if PREFIX_SIZE + size > len(self._buf):
            # Too big for the scratch buffer: give it a buffer of its own and read into that directly.
            begin = self._start + PREFIX_SIZE
            have = self._end - begin
            self._big = bytearray(size)
            self._big[:have] = self._buf[begin : self._end]
            self._big_have = have
            self._start = self._end = 0
        elif self._start + PREFIX_SIZE + size > len(self._buf):
            self._compact()
        return None

    def _make_room(self) -> None:
        """Called by receive_data when the buffer filled: surface an oversize frame or compact."""
        if self._big is None and self._end - self._start >= PREFIX_SIZE:
            (size,) = PREFIX.unpack_from(self._buf, self._start)
            if size > self.max_frame_bytes:
                raise FrameTooLargeError(size, self.max_frame_bytes)
            if PREFIX_SIZE + size > len(self._buf) - self._start:
                self.next_frame()  # switches to a frame-sized buffer or compacts
                return
        if self._big is None:
            if self._start == 0 and self._end == len(self._buf):
                # Full of complete small frames nobody pulled yet (receive_data of a large chunk).
                self._buf.extend(bytes(len(self._buf)))
            else:
                self._compact()

    def _compact(self) -> None:
        n = self._end - self._start
        if self._start:
            self._buf[:n] = self._buf[self._start : self._end]
        self._start, self._end = 0, n
