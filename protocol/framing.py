"""Length-prefixed framing: a 4-byte unsigned big-endian length, then that many bytes of one msgpack value.

How this works
--------------
`FrameDecoder` is a push/pull state machine in the style of h11: bytes go in, whole frame bodies come
out (`next_frame`), and it never touches a socket, so partial reads, many frames per read and oversize
prefixes are plain unit tests. Bytes go in one of two ways:

* `receive_data(data)`: copy what a stream reader produced;
* `get_buffer()` / `buffer_updated(n)`: hand the kernel a writable view to `recv_into` directly, the
  shape of asyncio's `BufferedProtocol`. This is the broker's path: no bytes object per read.

Memory follows the bytes that actually arrived, never what a length prefix announces, so a peer that
sends `06 40 00 00 92` (a 100 MB prefix) and goes silent costs the broker nothing but its scratch:

* the scratch buffer is allocated on the first read (an idle connection holds none), starts at
  `initial_bytes` (16 KiB) and doubles, up to `scratch_bytes` (256 KiB), only when a read filled all the
  room it was offered (the peer has more to send than fits) or a frame being received fills it;
* a frame too large for the scratch moves to a buffer of its own once the scratch is full of it; that
  buffer also doubles as it fills, capped at the frame's exact size, so the completed frame is returned
  without a final copy and a 1 MiB frame costs about one extra MiB of copying on its way in;
* a client reading its own server's answers may pass `trust_prefix=True`: a large frame then gets a
  buffer of its exact size as soon as its prefix is in, and the kernel writes the body straight into it
  (one copy, no growth); the broker never trusts a prefix;
* `release()` gives the scratch back while nothing is buffered (the server calls it for connections that
  went quiet), and `held_bytes` says what a connection holds now.

    scratch: [ consumed | prefix+body | prefix+body | prefix+par.. | free             ]
                        ^_start                                   ^_end
    big:     [ body bytes received so far ......... | room | ]    (one frame; grows up to its size)

A length prefix larger than `max_frame_bytes` (Kafka's `socket.request.max.bytes`, 100 MiB by default)
is rejected as soon as the 4 prefix bytes are in, before any of the body is buffered. `pending` says
whether part of a frame is buffered, so the server can close a connection whose frame does not complete
in time (a slow or stalled peer holding memory).
"""

from __future__ import annotations

import struct

from protocol.errors import ProtocolError

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # socket.request.max.bytes
DEFAULT_SCRATCH_BYTES = 256 * 1024  # the most the scratch buffer grows to
DEFAULT_INITIAL_BYTES = 16 * 1024  # what it starts at, on the first read
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
    is set, `_big[:_big_have]` is the received part of the one large frame of `_big_size` bytes,
    `len(_big) <= _big_size`, and the scratch is empty. Nothing is allocated for bytes not yet received
    beyond doubling what is held.
    """

    __slots__ = (
        "_buf",
        "_start",
        "_end",
        "_big",
        "_big_have",
        "_big_size",
        "_offered",
        "_initial",
        "_scratch_max",
        "max_frame_bytes",
        "trust_prefix",
    )

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        scratch_bytes: int = DEFAULT_SCRATCH_BYTES,
        initial_bytes: int = DEFAULT_INITIAL_BYTES,
        trust_prefix: bool = False,
    ):
        self._scratch_max = max(scratch_bytes, 2 * PREFIX_SIZE)
        self._initial = max(min(initial_bytes, self._scratch_max), 2 * PREFIX_SIZE)
        self._buf = bytearray()  # allocated on the first read
        self._start = 0
        self._end = 0
        self._big: bytearray | None = None
        self._big_have = 0
        self._big_size = 0
        self._offered = 0  # room handed out by the last get_buffer
        self.max_frame_bytes = max_frame_bytes
        self.trust_prefix = trust_prefix

    # -- bytes in ---------------------------------------------------------------------------------

    def get_buffer(self) -> memoryview:
        """A writable view for the next read. Never empty."""
        big = self._big
        if big is not None:
            if self._big_have == len(big):
                big = self._grow_big()
            self._offered = len(big) - self._big_have
            return memoryview(big)[self._big_have :]
        if self._end == len(self._buf):
            self._make_room()
            if self._big is not None:  # the frame filling the scratch moved to a buffer of its own
                return self.get_buffer()
        self._offered = len(self._buf) - self._end
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_have += nbytes
            return
        self._end += nbytes
        if nbytes == self._offered and self._start == 0 and len(self._buf) < self._scratch_max:
            # The read filled all the room it had: the peer sends faster than one buffer drains, so the
            # next read gets twice the room (memory follows the traffic, up to the scratch maximum).
            self._resize_scratch(min(self._scratch_max, 2 * len(self._buf)))

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Copy `data` in. Call `next_frame` until it returns None between calls if frames may be large."""
        view = memoryview(data)
        while view:
            target = self.get_buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            del target  # release the export so the buffers may grow
            self.buffer_updated(n)
            view = view[n:]

    # -- frames out -------------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        return (self._end - self._start) + self._big_have

    @property
    def pending(self) -> bool:
        """Part of a frame (or a prefix) is buffered and waits for the rest."""
        return self._big is not None or self._end > self._start

    @property
    def held_bytes(self) -> int:
        """Buffer memory this decoder holds now."""
        return len(self._buf) + (len(self._big) if self._big is not None else 0)

    @property
    def large_frame_bytes(self) -> int:
        """The buffer of the one frame too large for the scratch that is being received (0: none)."""
        return len(self._big) if self._big is not None else 0

    def release(self) -> bool:
        """Give the scratch buffer back if nothing is buffered; True if it did. The next read allocates
        a fresh one of the initial size."""
        if self.pending or not self._buf:
            return False
        self._buf = bytearray()
        self._start = self._end = 0
        return True

    def next_frame(self) -> bytes | bytearray | None:
        """The next complete frame body, or None until more bytes arrive. Raises FrameTooLargeError."""
        big = self._big
        if big is not None:
            if self._big_have < self._big_size:
                return None
            self._big = None
            self._big_have = self._big_size = 0
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
        if self.trust_prefix and PREFIX_SIZE + size > self._scratch_max:
            self._to_big(size, exact=True)  # a trusted peer: read straight into a buffer of the frame's size
        return None

    # -- room, as bytes arrive --------------------------------------------------------------------

    def _make_room(self) -> None:
        """The scratch is full (or not allocated yet) and a read is coming."""
        buf = self._buf
        if not buf:
            self._buf = bytearray(self._initial)
            return
        if self._start:
            self._compact()
            return
        # Full from the front. Either whole frames nobody pulled yet (receive_data of a large chunk), or
        # the start of one frame that fills the scratch.
        if self._end >= PREFIX_SIZE:
            (size,) = PREFIX.unpack_from(buf, 0)
            if size > self.max_frame_bytes:
                raise FrameTooLargeError(size, self.max_frame_bytes)
            whole = PREFIX_SIZE + size
            if whole > self._end and whole > self._scratch_max:
                self._to_big(size)
                return
        self._resize_scratch(2 * len(buf))

    def _to_big(self, size: int, exact: bool = False) -> None:
        """Move the frame being received (at `_start`) out of the scratch into a buffer of its own."""
        begin = self._start + PREFIX_SIZE
        have = self._end - begin
        big = bytearray(size if exact else min(size, max(2 * have, self._scratch_max)))
        big[:have] = memoryview(self._buf)[begin : self._end]
        self._big, self._big_have, self._big_size = big, have, size
        self._buf = bytearray()  # empty while the large frame arrives; the next read allocates it again
        self._start = self._end = 0

    def _grow_big(self) -> bytearray:
        big = self._big
        assert big is not None
        grown = bytearray(min(self._big_size, 2 * len(big)))
        grown[: self._big_have] = big
        self._big = grown
        return grown

    def _resize_scratch(self, capacity: int) -> None:
        if self._start:
            self._compact()
        grown = bytearray(capacity)
        grown[: self._end] = memoryview(self._buf)[: self._end]
        self._buf = grown

    def _compact(self) -> None:
        n = self._end - self._start
        if self._start:
            self._buf[:n] = self._buf[self._start : self._end]
        self._start, self._end = 0, n
