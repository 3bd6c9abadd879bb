"""Splitting a byte stream into Kafka frames (int32 size prefix) without copying payloads.

Sans-IO: feed it whatever the socket produced, get whole frames back.
"""

from __future__ import annotations

import struct

from .errors import FrameTooLarge
from .primitives import Buffer

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameSplitter", "encode_frame", "encode_frame_prefix"]

#: Kafka's default ``socket.request.max.bytes``.
DEFAULT_MAX_FRAME_SIZE = 104857600

_SIZE = struct.Struct(">i")


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
    A frame spread over several chunks is assembled into its own buffer, copied once.

    After :class:`~protocol.errors.FrameTooLarge` the stream cannot be resynchronised: close it.
    """

    __slots__ = ("_filled", "_frame", "_prefix", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._prefix = bytearray()  # 0-3 bytes of a size prefix split across chunks
        self._frame: bytearray | None = None  # a frame being assembled across chunks
        self._filled = 0

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return len(self._prefix) + self._filled

    def _check(self, size: int) -> None:
        if size < 0 or size > self.max_frame_size:
            raise FrameTooLarge(
                f"frame size {size} is {'negative' if size < 0 else 'above'} the limit of "
                f"{self.max_frame_size} bytes; raise FrameSplitter(max_frame_size=...) (the proxy's "
                f"max frame size setting, like the broker's socket.request.max.bytes) if it is legitimate, "
                f"otherwise the peer is not speaking the Kafka protocol (TLS or HTTP on a plaintext port?)"
            )

    def feed(self, data: Buffer) -> list[memoryview]:
        """Consume a chunk of the stream; return the frames it completed, in order."""
        mv = data if isinstance(data, memoryview) else memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = len(mv)
        pos = 0
        frames: list[memoryview] = []

        # Finish what an earlier chunk left incomplete.
        while pos < n and (self._prefix or self._frame is not None):
            frame = self._frame
            if frame is None:
                take = min(4 - len(self._prefix), n - pos)
                self._prefix += mv[pos : pos + take]
                pos += take
                if len(self._prefix) == 4:
                    size = _SIZE.unpack(self._prefix)[0]
                    self._check(size)
                    self._prefix = bytearray()
                    self._frame = bytearray(size)
                    self._filled = 0
                    if size == 0:
                        frames.append(memoryview(self._frame))
                        self._frame = None
            else:
                filled = self._filled
                take = min(len(frame) - filled, n - pos)
                frame[filled : filled + take] = mv[pos : pos + take]
                pos += take
                self._filled = filled + take
                if self._filled == len(frame):
                    frames.append(memoryview(frame))
                    self._frame = None
                    self._filled = 0

        # Whole frames inside this chunk: views, no copy.
        unpack = _SIZE.unpack_from
        limit = self.max_frame_size
        while n - pos >= 4:
            size = unpack(mv, pos)[0]
            if size < 0 or size > limit:
                self._check(size)
            end = pos + 4 + size
            if end > n:
                break
            frames.append(mv[pos + 4 : end])
            pos = end

        # Keep the incomplete tail.
        rest = n - pos
        if rest:
            if rest < 4:
                self._prefix += mv[pos:]
            else:
                size = unpack(mv, pos)[0]
                frame = bytearray(size)
                frame[: rest - 4] = mv[pos + 4 :]
                self._frame = frame
                self._filled = rest - 4
        return frames
