"""How the process reads its sockets under the memory budget: plain protocols while a whole read fits, a buffered
protocol sizing each read by the budget once it does not (proxy/datapath/budget.py says when)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from insync_proxy.proxy.datapath.budget import MemoryBudget

__all__ = ["ReadBuffer", "ReadingSide", "SizedReads"]


class ReadBuffer:
    """How the process reads its sockets. While the memory budget has room for a whole read (the event loops'
    own: 256 KiB), every side is read as a plain protocol: the loop reads into its own buffer and hands over a
    copy (data_received), one call per read and nothing else. Once the room is gone, every side is read through
    its `SizedReads`, a buffered protocol: each read lands in the process's one read buffer, as large as the
    budget allows (`MemoryBudget.read_size`), and is copied out before the next read (the copy uvloop makes of
    its own buffer for a plain protocol: exactly the bytes read, so a write buffer holding part of it keeps no
    more alive than the read). The budget says when to switch (`MemoryBudget.watch_room`), before the next read.
    The event loop reads one socket at a time and hands each read over at once, so one buffer serves every
    connection."""

    __slots__ = ("budget", "sides", "sized", "view", "whole")

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        self.whole = budget.read_bytes
        self.view = memoryview(bytearray(self.whole))
        #: The sides open now (each one's protocol is switched when the budget's room comes or goes).
        self.sides: set[ReadingSide] = set()
        self.sized = not budget.watch_room(self._room)

    def opened(self, side: ReadingSide) -> None:
        """A side's transport is there (connection_made): read it as the budget's room says, from the first read."""
        self.sides.add(side)
        if self.sized:
            side.transport.set_protocol(SizedReads(side, self))

    def closed(self, side: ReadingSide) -> None:
        self.sides.discard(side)

    def _room(self, whole: bool) -> None:
        """The budget's room for a whole read went (every side's next read is sized) or came back (read whole)."""
        self.sized = not whole
        for side in list(self.sides):
            transport = side.transport
            if transport is not None and not side.closed:
                transport.set_protocol(side if whole else SizedReads(side, self))

    def get(self) -> memoryview:
        """Where the next read goes (the protocol's get_buffer): all of it, or its start when the budget is tight."""
        size = self.budget.read_size()
        return self.view if size >= self.whole else self.view[:size]

    def take(self, nbytes: int) -> bytes:
        """The bytes just read (the protocol's buffer_updated), before the buffer is read into again."""
        return self.view[:nbytes].tobytes()


class ReadingSide(Protocol):
    """What `ReadBuffer` switches: a connection side (a plain protocol) and its transport."""

    transport: Any
    closed: bool

    def data_received(self, data: bytes) -> None: ...
    def pause_writing(self) -> None: ...
    def resume_writing(self) -> None: ...
    def eof_received(self) -> bool | None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...


class SizedReads(asyncio.BufferedProtocol):
    """A side's protocol while the memory budget is tight: reads sized by the budget into the process's read
    buffer, each copied out and handed to the side; every other call of the transport goes to the side."""

    def __init__(self, side: ReadingSide, reads: ReadBuffer) -> None:
        self.side = side
        self.reads = reads

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reads.get()

    def buffer_updated(self, nbytes: int) -> None:
        self.side.data_received(self.reads.take(nbytes))

    def pause_writing(self) -> None:
        self.side.pause_writing()

    def resume_writing(self) -> None:
        self.side.resume_writing()

    def eof_received(self) -> bool | None:
        return self.side.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.side.connection_lost(exc)
