"""Splitting a byte stream into Kafka frames (int32 size prefix) without copying payloads.

Sans-IO: feed it whatever the socket produced, get whole frames back.
"""

from __future__ import annotations

import struct
from typing import Final, SupportsIndex

from .errors import FrameTooLarge
from .native import is_whole_read as _core_is_whole_read
from .native import split_frame as _core_split_frame
from .native import view_of as _core_view_of
from .primitives import Buffer, bytes_view

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FRAME",
    "HEAD",
    "PART",
    "FrameSplitter",
    "FrameStream",
    "encode_frame",
    "encode_frame_prefix",
    "is_whole_read",
]

#: Kafka's default ``socket.request.max.bytes``.
DEFAULT_MAX_FRAME_SIZE: Final = 104857600

_SIZE: Final = struct.Struct(">i")


def is_whole_read(data: bytes, pieces: list[Buffer]) -> bool:
    """Whether `pieces`, taken from one read in stream order and none twice (a proxy's frames of it, forwarded), are
    that read: each a view of `data` and together as long. The compiled core answers in one call where it is built."""
    core = _core_is_whole_read
    if core is not None:
        return core(data, pieces)
    return whole_read_reference(data, pieces)


def whole_read_reference(data: bytes, pieces: list[Buffer]) -> bool:
    """`is_whole_read` in Python: the reference the compiled core is held to, and the interpreted build's."""
    if type(data) is not bytes or not pieces:
        return False
    total = 0
    for piece in pieces:
        if not isinstance(piece, memoryview) or piece.obj is not data or piece.ndim != 1 or piece.itemsize != 1 \
                or not piece.contiguous:
            return False
        total += piece.nbytes
    return total == len(data)


def encode_frame_prefix(size: int) -> bytes:
    """The 4-byte size prefix for a payload of ``size`` bytes."""
    return _SIZE.pack(size)


def encode_frame(payload: Buffer) -> bytes:
    """Prefix ``payload`` (header + body) with its int32 size."""
    return _SIZE.pack(len(payload) if not isinstance(payload, memoryview) else payload.nbytes) + payload


class FrameSplitter:
    """Incremental splitter of size-prefixed frames.

    ``feed`` returns each complete frame's payload (size prefix stripped) as a ``memoryview``.
    A frame that arrived whole inside one chunk is a view into that chunk (no copy), so a caller
    that passes a ``bytearray`` must not modify it while it still uses the returned frames.
    A frame spread over several chunks is joined into its own buffer once (no zero-filled buffer).
    It is a `FrameStream` that never passes a frame through.

    After :class:`~protocol.errors.FrameTooLarge` the stream cannot be resynchronised: close it.
    """

    __slots__ = ("_stream",)

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._stream = FrameStream(max_frame_size)

    @property
    def max_frame_size(self) -> int:
        return self._stream.max_frame_size

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return self._stream.buffered

    def feed(self, data: Buffer) -> list[memoryview]:
        """Consume a chunk of the stream; return the frames it completed, in order."""
        stream = self._stream
        stream.feed(data)
        frames: list[memoryview] = []
        while (event := stream.next()) is not None:
            frames.append(event[1])
        return frames


#: `FrameStream.next` event kinds.
FRAME: Final = 0  #: a whole frame's payload (size prefix stripped)
HEAD: Final = 1  #: the first bytes of a frame whose end has not arrived yet: pass it through, or let it be assembled
PART: Final = 2  #: raw bytes of a frame being passed through (the first part starts with its size prefix)


#: First four bytes of an HTTP request or answer, read as a frame size.
_HTTP_STARTS: Final = {int.from_bytes(word, "big"): word.decode().strip() for word in
                       (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC", b"HTTP")}


def _frame_too_large(size: int, limit: int) -> FrameTooLarge:
    unsigned = size & 0xFFFFFFFF
    if unsigned >> 24 in (0x15, 0x16) and (unsigned >> 16) & 0xFF == 0x03:
        # A TLS record (handshake 0x16, alert 0x15; version 3.x), e.g. 0x16030101: a ClientHello.
        return FrameTooLarge(
            f"frame size {size} is a TLS record (bytes {unsigned:#010x}), not a Kafka frame: the peer speaks TLS to a "
            "plaintext port: a client needs security.protocol=PLAINTEXT or SASL_PLAINTEXT towards a proxy without "
            "[downstream_tls] (or give the proxy [downstream_tls]); towards a broker's TLS listener, set "
            "[upstream_tls] enabled = true"
        )
    if unsigned in _HTTP_STARTS:
        return FrameTooLarge(
            f"frame size {size} is {_HTTP_STARTS[unsigned]!r}: the peer speaks HTTP, not the Kafka protocol: is it "
            "the right port (the admin port serves /metrics, the Kafka ports do not)?"
        )
    if size < 0:
        return FrameTooLarge(
            f"frame size {size} is negative: the peer is not speaking the Kafka protocol (TLS or HTTP on a "
            f"plaintext port?)"
        )
    return FrameTooLarge(
        f"frame size {size} is above the limit of {limit} bytes; raise max_frame_bytes (the proxy's setting, "
        f"like the broker's socket.request.max.bytes) if it is legitimate, otherwise the peer is not speaking "
        f"the Kafka protocol (TLS or HTTP on a plaintext port?)"
    )


class FrameStream:
    """Incremental frame splitter that can pass a large frame on as it arrives instead of assembling it.

    ``feed(chunk)``, then ``next()`` until it returns None; each event is a ``(kind, bytes)`` pair:

    - ``(FRAME, payload)``: a whole frame, size prefix stripped. A frame that arrived inside one chunk is a
      view into it (no copy; a caller passing a ``bytearray`` must not modify it while it uses the view);
      one spread over several chunks is joined once (no zero-filled buffer, no second copy).
    - ``(HEAD, head)``: a frame of at least ``pass_from`` bytes whose end is not in what was fed: ``head``
      is the start of its payload (at least ``head_size`` bytes, usually all that arrived; a view or a small
      copy) and ``size`` its payload size. Call ``pass_through()`` before the next ``next()`` to receive
      the frame's bytes as PART events; otherwise it is assembled and comes back as a FRAME.
    - ``(PART, data)``: raw bytes of the frame being passed through, in order, the size prefix at the
      start of the first part; ``passing`` (bytes still to come) is 0 after its last part.

    After :class:`~protocol.errors.FrameTooLarge` the stream cannot be resynchronised: close it.
    """

    __slots__ = ("_head", "_max_frame_object", "_missing", "_mv", "_n", "_offer", "_parts", "_pos", "_queued", "_readonly",
                 "_split", "_view_of", "framed", "head_size", "max_frame_size", "pass_from", "passing", "size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, pass_from: int | None = None,
                 head_size: int = 4) -> None:
        self.max_frame_size = max_frame_size
        #: The same, as the object the compiled core's split is given (compiled, an int attribute is boxed per call).
        self._max_frame_object: SupportsIndex = max_frame_size
        #: Frames of at least this many payload bytes may be offered as HEAD; None: never.
        self.pass_from = pass_from
        self.head_size = head_size
        self.size = 0  #: payload size of the frame last offered as HEAD
        self.passing = 0  #: bytes (prefix included) of the passed-through frame still to come
        #: The last FRAME event's frame as it came, size prefix included (a view, like the payload): a proxy
        #: that forwards a frame unchanged writes this, without joining a new prefix to the payload.
        self.framed = memoryview(b"")
        self._mv = memoryview(b"")
        self._pos = 0
        self._n = 0
        self._readonly = True
        self._head = bytearray()  # the start of a frame cut by a chunk boundary, size prefix included
        self._parts: list[Buffer] | None = None  # a frame being assembled, size prefix included
        self._missing = 0
        self._offer: tuple[bytes, int] | None = None  # (bytes from earlier chunks, start in this chunk)
        self._queued: list[memoryview] = []
        #: The compiled core's split of a whole frame (None: not built), kept here: a module global is a dict lookup.
        self._split = _core_split_frame
        self._view_of = _core_view_of

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete (not counting a frame being passed through)."""
        if self._parts is not None:
            return sum(len(p) for p in self._parts)
        return len(self._head)

    def feed(self, data: Buffer) -> None:
        """The next chunk of the stream; the previous one must have been consumed (`next()` gave None)."""
        if isinstance(data, bytes):  # what a socket read gives: a view of it is the walkers' shape, read-only
            view_of = self._view_of
            mv = memoryview(data) if view_of is None else view_of(data)
            self._readonly = True
        else:
            mv = bytes_view(data)
            self._readonly = mv.readonly
        self._mv = mv
        self._pos = 0
        self._n = len(mv)

    def _keep(self, view: memoryview) -> Buffer:
        """A piece of the current chunk to hold past this feed: a view of immutable data, else a copy."""
        return view if self._readonly else bytes(view)

    def pass_through(self) -> None:
        """Pass the frame just offered as HEAD through (PART events) instead of assembling it."""
        offer = self._offer
        if offer is None:
            raise RuntimeError("pass_through() without a HEAD offer")
        self._offer = None
        earlier, start = offer
        total = 4 + self.size
        queued = self._queued
        if earlier:
            queued.append(memoryview(earlier))
        if start < self._n:
            queued.append(self._mv[start:self._n])
        self.passing = total - len(earlier) - (self._n - start)

    def next_frame(self) -> memoryview | None:
        """`next()`'s common case without its event pair: the payload of the next frame when it is whole in the chunk
        and the compiled core splits it (`framed`: its bytes with their prefix), the event a FRAME; None: anything else,
        which `next()` then tells (it may be a FRAME too)."""
        split = self._split
        pos = self._pos
        if (split is None or pos >= self._n or self._queued or self._offer is not None or self.passing
                or self._parts is not None or self._head):
            return None
        parts = split(self._mv, pos, self._max_frame_object)
        if parts is None:
            return None
        framed, payload, self._pos = parts
        self.framed = framed
        return payload

    def next(self) -> tuple[int, memoryview] | None:
        """The next event of what was fed, or None when it needs more bytes."""
        if self._queued:
            part = self._queued.pop(0)
            return PART, part
        if self._offer is not None:  # the HEAD offer was not taken: assemble that frame
            earlier, start = self._offer
            self._offer = None
            parts: list[Buffer] = [earlier] if earlier else []
            if start < self._n:
                parts.append(self._keep(self._mv[start:self._n]))
            self._parts = parts
            self._missing = 4 + self.size - len(earlier) - (self._n - start)
        mv, pos, n = self._mv, self._pos, self._n
        if pos >= n:
            return None
        if self.passing:
            take = min(self.passing, n - pos)
            self.passing -= take
            self._pos = pos + take
            return PART, mv[pos:pos + take]
        if self._parts is not None:
            take = min(self._missing, n - pos)
            self._parts.append(self._keep(mv[pos:pos + take]))
            self._missing -= take
            self._pos = pos + take
            if self._missing:
                return None
            framed = self.framed = memoryview(b"".join(self._parts))
            self._parts = None
            return FRAME, framed[4:]
        head = self._head
        if head:
            return self._continue_head(head, mv, pos, n)
        if self._split is not None:  # a whole frame, split by the compiled core (protocol/native.py)
            split = self._split(mv, pos, self._max_frame_object)
            if split is not None:
                framed, payload, self._pos = split
                self.framed = framed
                return FRAME, payload
        if n - pos < 4:
            head += mv[pos:n]
            self._pos = n
            return None
        size: int = _SIZE.unpack_from(mv, pos)[0]
        if size < 0 or size > self.max_frame_size:
            raise _frame_too_large(size, self.max_frame_size)
        end = pos + 4 + size
        if end <= n:
            self._pos = end
            framed = self.framed = mv[pos:end]
            return FRAME, framed[4:]
        if self.pass_from is not None and size >= self.pass_from and n - pos >= 4 + self.head_size:
            self.size = size
            self._offer = (b"", pos)
            self._pos = n
            return HEAD, mv[pos + 4:n]
        if self.pass_from is not None and size >= self.pass_from:
            head += mv[pos:n]  # too little of its head to decide yet
            self._pos = n
            return None
        self._parts = [self._keep(mv[pos:n])]
        self._missing = end - n
        self._pos = n
        return None

    def _continue_head(self, head: bytearray, mv: memoryview, pos: int, n: int) -> tuple[int, memoryview] | None:
        """The start of a frame was cut by a chunk boundary: complete its prefix and head, then go on."""
        if len(head) < 4:
            take = min(4 - len(head), n - pos)
            head += mv[pos:pos + take]
            pos += take
            self._pos = pos
            if len(head) < 4:
                return None
        size: int = _SIZE.unpack_from(head, 0)[0]
        if size < 0 or size > self.max_frame_size:
            raise _frame_too_large(size, self.max_frame_size)
        total = 4 + size
        rest = total - len(head)
        if rest <= n - pos:  # its end is in this chunk: one copy, and it is whole
            framed = self.framed = memoryview(b"".join((head, mv[pos:pos + rest])))
            head.clear()
            self._pos = pos + rest
            return FRAME, framed[4:]
        if self.pass_from is None or size < self.pass_from:
            # Not to be offered: assemble the rest as any other frame.
            self._parts = [bytes(head)]
            self._missing = total - len(head)
            head.clear()
            return None if pos >= n else self.next()
        want = 4 + self.head_size  # less than total: the frame does not end in this chunk
        take = min(max(want - len(head), 0), n - pos)
        head += mv[pos:pos + take]
        pos += take
        self._pos = pos
        if len(head) < want:
            return None
        earlier = bytes(head)
        head.clear()
        self.size = size
        self._offer = (earlier, pos)
        self._pos = n
        peek = earlier[4:] + bytes(mv[pos:min(n, pos + 4096)])
        return HEAD, memoryview(peek)
