"""The connection pipeline against a scripted fake broker: ordering and fault injection.

A fake broker is for fault injection only; the features themselves are proven against real Kafka in
tests/integration.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections.abc import Callable

import pytest

from harness.proxy_process import free_port_base
from insync_proxy.protocol import (
    ApiKey,
    RequestHeader,
    encode_request_header,
)
from insync_proxy.proxy.config.settings import AuditConfig, ListenerConfig, ProxyConfig
from insync_proxy.proxy.datapath.budget import MIN_READ_BYTES, MemoryBudget
from insync_proxy.proxy.datapath.reads import ReadBuffer
from insync_proxy.proxy.server import InsyncProxy
from tests.unit.pipeline_broker import FakeBroker, RawResponse


async def _start(broker: FakeBroker, miss_wait_ms: float = 2000) -> InsyncProxy:
    """The proxy in this event loop, in front of `broker`."""
    config = ProxyConfig(
        bootstrap_servers=(f"127.0.0.1:{broker.port}",),
        listeners=(ListenerConfig(bootstrap_port=0, broker_port_base=free_port_base()),),
        admin_port=0, audit=AuditConfig(enabled=False), min_insync_miss_wait_ms=miss_wait_ms,
        metadata_refresh_seconds=3600,
    )
    proxy = InsyncProxy(config)
    await proxy.start()
    return proxy


def _request(key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    payload = encode_request_header(RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=correlation_id, client_id="t"
    )) + body
    return struct.pack(">i", len(payload)) + payload


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def _metadata_request_v12() -> bytes:
    # topics: compact array with one topic (uuid zero, name "t"), allow_auto_topic_creation, include_topic_ops, tags
    return b"\x02" + b"\x00" * 16 + b"\x02t" + b"\x00" + b"\x01\x00\x00"


async def test_responses_come_back_in_request_order_when_an_earlier_one_is_slower() -> None:
    broker = FakeBroker()
    await broker.start()
    broker.describe_delay = 0.3  # the Metadata answer waits for min.insync.replicas (a cache miss)

    async def echo(key: int, version: int, correlation_id: int, frame: bytes) -> bytes:
        return struct.pack(">i", correlation_id) + b"list-offsets-answer"

    broker.script = echo
    proxy = await _start(broker)
    proxy.min_insync.invalidate_all()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.bootstrap_port)
        # Given a Metadata request (slow: cache miss) pipelined with a ListOffsets (fast: pass-through)
        writer.write(_request(ApiKey.METADATA, 12, 7, _metadata_request_v12()))
        writer.write(_request(ApiKey.LIST_OFFSETS, 1, 8, b"\x00\x00\x00\x00\x00\x00\x00\x00"))
        first, second = await _read_frame(reader), await _read_frame(reader)
        # Then the client gets them in request order, with their own correlation ids
        assert struct.unpack_from(">i", first)[0] == 7
        assert second == struct.pack(">i", 8) + b"list-offsets-answer"
        writer.close()
    finally:
        await proxy.stop(drain_timeout=1)


@pytest.mark.parametrize("fault", ["wrong_correlation_id", "huge_frame", "unsolicited"])
async def test_a_misbehaving_broker_costs_one_client_connection_not_the_proxy(fault: str) -> None:
    broker = FakeBroker()
    await broker.start()
    calls: list[int] = []

    async def misbehave(key: int, version: int, correlation_id: int, frame: bytes) -> bytes:
        calls.append(correlation_id)
        ok = struct.pack(">i", correlation_id) + b"ok"
        if len(calls) > 1:
            return ok
        if fault == "wrong_correlation_id":
            return struct.pack(">i", correlation_id + 1000) + b"x"
        if fault == "huge_frame":
            return RawResponse(struct.pack(">i", 2**31 - 1) + b"\x00" * 8)
        extra = struct.pack(">i", 999) + b"no"  # a response nobody asked for
        return RawResponse(struct.pack(">i", len(ok)) + ok + struct.pack(">i", len(extra)) + extra)

    broker.script = misbehave
    proxy = await _start(broker)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.bootstrap_port)
        writer.write(_request(ApiKey.LIST_OFFSETS, 1, 1, b"\x00" * 8))
        # The proxy closes this client's connection
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            while True:
                await asyncio.wait_for(_read_frame(reader), 10)
        # And another client is served as usual
        reader2, writer2 = await asyncio.open_connection("127.0.0.1", proxy.bootstrap_port)
        writer2.write(_request(ApiKey.LIST_OFFSETS, 1, 2, b"\x00" * 8))
        assert await asyncio.wait_for(_read_frame(reader2), 10) == struct.pack(">i", 2) + b"ok"
        writer2.close()
        errors = proxy.metrics.registry.get_sample_value("insync_proxy_frame_errors_total", {"kind": _kind(fault)})
        assert errors == 1
    finally:
        await proxy.stop(drain_timeout=1)


def _kind(fault: str) -> str:
    return {"wrong_correlation_id": "upstream_protocolerror", "huge_frame": "upstream_too_large",
            "unsolicited": "upstream_protocolerror"}[fault]


KIB = 1024


class RecordingBudget(MemoryBudget):
    """The memory budget, keeping the size of every read it allowed."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self.reads: list[int] = []

    def read_size(self) -> int:
        size = super().read_size()
        self.reads.append(size)
        return size


def _event_loops() -> list[object]:
    loops: list[object] = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return loops
    return [*loops, pytest.param(uvloop.new_event_loop, id="uvloop")]


@pytest.mark.parametrize("new_loop", _event_loops())
def test_reads_sized_by_the_memory_budget_carry_large_answers_whole_on_each_event_loop(
    new_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(_large_answers_through_budget_sized_reads())


async def _large_answers_through_budget_sized_reads() -> None:
    broker = FakeBroker()
    await broker.start()
    answer = random.Random(29).randbytes(3 * 1024 * KIB)

    async def large(key: int, version: int, correlation_id: int, frame: bytes) -> bytes:
        return struct.pack(">i", correlation_id) + answer

    broker.script = large
    proxy = await _start(broker)
    # A budget of 128 KiB: no read is whole (256 KiB); the proxy's reads are recorded
    budget = RecordingBudget(128 * KIB)
    proxy.connection_settings.budget = budget
    proxy.connection_settings.reads = ReadBuffer(budget)
    try:
        # Given a slow consumer (small receive buffer) that pipelines 3 requests of 3 MiB answers, reading nothing:
        # a bare socket, so nothing reads it (a stream reader's transport would take up to twice its limit)
        loop = asyncio.get_running_loop()
        slow_socket = socket.socket()
        slow_socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * KIB)
        slow_socket.setblocking(False)
        await loop.sock_connect(slow_socket, ("127.0.0.1", proxy.bootstrap_port))
        for correlation_id in (1, 2, 3):
            await loop.sock_sendall(slow_socket, _request(ApiKey.LIST_OFFSETS, 1, correlation_id, b"\x00" * 8))
        # Then the budget holds it back, within the budget and a smallest read for each of its 2 buffers
        for _ in range(3000):  # up to 30 s
            if budget.paused:
                break
            await asyncio.sleep(0.01)
        assert budget.paused == 1
        assert budget.buffered <= budget.max_bytes + 2 * MIN_READ_BYTES
        # And a consumer beside it reads its answer whole, in reads no larger than the budget allows
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.bootstrap_port)
        writer.write(_request(ApiKey.LIST_OFFSETS, 1, 9, b"\x00" * 8))
        async with asyncio.timeout(30):
            assert await _read_frame(reader) == struct.pack(">i", 9) + answer
            # And the slow consumer, reading at last, gets its 3 answers whole and in order
            slow_reader, slow_writer = await asyncio.open_connection(sock=slow_socket, limit=4 * 1024 * KIB)
            for correlation_id in (1, 2, 3):
                assert await _read_frame(slow_reader) == struct.pack(">i", correlation_id) + answer
        assert budget.reads and all(MIN_READ_BYTES <= size <= 128 * KIB for size in budget.reads)
        assert len(budget.reads) >= 4 * len(answer) // (128 * KIB)
        writer.close()
        slow_writer.close()
    finally:
        await proxy.stop(drain_timeout=1)
        assert broker.server is not None
        broker.server.close()
