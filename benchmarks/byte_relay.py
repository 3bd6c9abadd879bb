"""A bare uvloop TCP byte relay: the floor of any Python proxy (not a test, no Kafka logic at all).

    python benchmarks/byte_relay.py LISTEN_PORT:TARGET_HOST:TARGET_PORT [...]

Listens on 127.0.0.1:LISTEN_PORT for each mapping; every accepted connection gets its own upstream
connection to TARGET_HOST:TARGET_PORT and bytes are copied both ways as they arrive, with the usual
transport flow control (a side whose peer's write buffer is full stops reading). Prints "ready" on
stdout once every port listens. It cannot rewrite the brokers' addresses in Metadata: clients must
address the port of the broker they mean (raw clients only). Used by benchmarks/peers_bench.py.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from typing import cast

try:
    import uvloop
except ImportError:  # pragma: no cover - the benchmark says which loop it ran on
    uvloop = None  # type: ignore[assignment]

HIGH_WATER = 4 * 1024 * 1024


class Side(asyncio.Protocol):
    """One end of a relayed connection; `peer` is the other end."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Side | None = None
        self.pending: list[bytes] = []  # bytes that arrived before the peer was connected
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are no asyncio.Transport subclass
        self.transport.set_write_buffer_limits(high=HIGH_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def attach(self, peer: Side) -> None:
        self.peer = peer
        assert peer.transport is not None
        for data in self.pending:
            peer.transport.write(data)
        self.pending.clear()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def eof_received(self) -> bool:
        if self.peer is not None and self.peer.transport is not None and self.peer.transport.can_write_eof():
            self.peer.transport.write_eof()
            return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class Downstream(Side):
    """The client's connection: opens the upstream one and relays once it is up."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__()
        self.target = (host, port)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        assert self.transport is not None
        try:
            _, upstream = await asyncio.get_running_loop().create_connection(Side, *self.target)
        except OSError:
            self.transport.close()
            return
        if self.closed:
            assert upstream.transport is not None
            upstream.transport.close()
            return
        upstream.peer = self
        self.attach(upstream)


async def serve(mappings: list[tuple[int, str, int]]) -> None:
    loop = asyncio.get_running_loop()
    servers = []
    for listen, host, port in mappings:
        servers.append(await loop.create_server(lambda h=host, p=port: Downstream(h, p), "127.0.0.1", listen,
                                                backlog=2048, reuse_address=True))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    await stop.wait()
    for server in servers:
        server.close()


def parse(argv: list[str]) -> list[tuple[int, str, int]]:
    """LISTEN_PORT:TARGET_HOST:TARGET_PORT arguments as tuples."""
    out = []
    for arg in argv:
        listen, host, port = arg.split(":")
        out.append((int(listen), host, int(port)))
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    runner = uvloop.run if uvloop is not None else asyncio.run
    runner(serve(parse(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
