"""The sans-IO connection core's test harness: a listener, an adapter that records every action the core asks for,
and frame builders (tests/unit/test_connection_core.py and every test that drives a core with plain bytes)."""

from __future__ import annotations

import struct
from collections.abc import Awaitable

from insync_proxy.protocol import RequestHeader, encode_request_header
from insync_proxy.proxy.config.broker_ports import BrokerPorts
from insync_proxy.proxy.datapath.core import CloseReason, ConnectionCore
from insync_proxy.proxy.datapath.exchange import (
    BehaviourRegistry,
    CoreObserver,
    Exchange,
    Frame,
    ListenerAddresses,
    ListenerSettings,
)

__all__ = ["LISTENER", "RecordingIO", "core_with", "request", "request_ids", "response", "response_ids"]

LISTENER = ListenerSettings(
    name="default", label="bootstrap", metadata_schema="tagged", hide_unready_partitions=False,
    addresses=ListenerAddresses("127.0.0.1", BrokerPorts(9100)), broker_listeners=frozenset(),
)


class RecordingIO:
    """Records every action the core asks for.

    `to_client` / `to_upstream`: what was written, one entry per whole frame (a write of several frames
    is split back into them) or per piece of a frame written in parts (cut-through); `client_writes` /
    `upstream_writes`: how many writes (syscalls, in the real adapter) the core asked for."""

    def __init__(self) -> None:
        self.to_client: list[bytes] = []
        self.to_upstream: list[bytes] = []
        self.client_writes = 0
        self.upstream_writes = 0
        self.upstream_buffers: list[tuple[Frame, ...]] = []  #: each write's buffers, as the core passed them
        self.client_buffers: list[tuple[Frame, ...]] = []
        self.pending_async: list[tuple[Exchange, Awaitable[Frame | None]]] = []
        self.closed: list[CloseReason] = []

    def write_client(self, data: list[Frame]) -> None:
        self.client_writes += 1
        self.client_buffers.append(tuple(data))
        self.to_client.extend(_frames_or_piece(b"".join(bytes(d) for d in data)))

    def write_upstream(self, data: list[Frame]) -> None:
        self.upstream_writes += 1
        self.upstream_buffers.append(tuple(data))
        self.to_upstream.extend(_frames_or_piece(b"".join(bytes(d) for d in data)))

    def run_async(self, exchange: Exchange, result: Awaitable[Frame | None]) -> None:
        self.pending_async.append((exchange, result))

    def close(self, reason: CloseReason) -> None:
        self.closed.append(reason)


def _frames_or_piece(data: bytes) -> list[bytes]:
    """`data` split into its size-prefixed frames when it is exactly whole frames, else `[data]`."""
    frames, pos = [], 0
    while pos + 4 <= len(data):
        end = pos + 4 + struct.unpack_from(">i", data, pos)[0]
        if end <= pos + 4 or end > len(data):
            break
        frames.append(data[pos:end])
        pos = end
    return frames if pos == len(data) and frames else [data]


def request(api_key: int, correlation_id: int, body: bytes = b"", version: int = 1) -> bytes:
    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                           client_id="c")
    payload = encode_request_header(header) + body
    return struct.pack(">i", len(payload)) + payload


def response(correlation_id: int, body: bytes) -> bytes:
    payload = struct.pack(">i", correlation_id) + body
    return struct.pack(">i", len(payload)) + payload


def request_ids(frames: list[bytes]) -> list[int]:
    """Correlation ids of size-prefixed requests (after api key and version)."""
    return [struct.unpack_from(">i", f, 8)[0] for f in frames]


def response_ids(frames: list[bytes]) -> list[int]:
    """Correlation ids of size-prefixed responses."""
    return [struct.unpack_from(">i", f, 4)[0] for f in frames]


def core_with(*behaviours: object, observer: CoreObserver | None = None, observe_whole_frames: bool = False
              ) -> tuple[ConnectionCore, RecordingIO]:
    io = RecordingIO()
    registry = BehaviourRegistry(list(behaviours))  # type: ignore[arg-type]
    core = ConnectionCore(registry, LISTENER, io, max_frame_bytes=1 << 20, observer=observer,
                          observe_whole_frames=observe_whole_frames)
    return core, io
