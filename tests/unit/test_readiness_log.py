"""The "listening" and "ready" log lines agree with /readyz: "ready" is logged when /readyz turns ready; while not
ready, /readyz says why, with the last upstream error (never a secret)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from harness.proxy_process import free_port_base
from insync_proxy.devcluster.cluster import free_port
from insync_proxy.proxy.config.settings import (
    AuditConfig,
    ListenerConfig,
    ProxyConfig,
    SaslConfig,
    UpstreamTlsConfig,
)
from insync_proxy.proxy.config.tls import PLAINTEXT_LISTENER_HINT
from insync_proxy.proxy.controlplane.control import HTTP_ANSWER
from insync_proxy.proxy.server import InsyncProxy
from tests.unit.control_brokers import PlainBroker
from tests.unit.pipeline_broker import FakeBroker


async def _readyz(port: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    status = int((await reader.readline()).split()[1])
    writer.close()
    return status


class _Lines(logging.Handler):
    """Each insync_proxy log message, with what /readyz would have said at that moment."""

    def __init__(self) -> None:
        super().__init__()
        self.proxy: InsyncProxy | None = None
        self.seen: list[tuple[str, bool]] = []
        self.ready_logged = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        assert self.proxy is not None
        self.seen.append((record.getMessage(), self.proxy.ready[0]))
        if record.getMessage().startswith("ready"):
            self.ready_logged.set()

    def starting(self, word: str) -> list[bool]:
        return [ready for message, ready in self.seen if message.startswith(word)]


@pytest.fixture
def lines() -> Iterator[_Lines]:
    handler = _Lines()
    logger = logging.getLogger("insync_proxy")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


async def test_ready_is_logged_exactly_when_readyz_turns_ready(lines: _Lines) -> None:
    # Given a proxy whose broker is not up yet
    port = free_port()
    proxy = InsyncProxy(ProxyConfig(
        bootstrap_servers=(f"127.0.0.1:{port}",),
        listeners=(ListenerConfig(bootstrap_port=0, broker_port_base=free_port_base()),),
        admin_port=0, audit=AuditConfig(enabled=False), metadata_refresh_seconds=1,
        connect_timeout_seconds=1, control_request_timeout_seconds=1,
    ))
    lines.proxy = proxy
    broker = FakeBroker()
    await proxy.start()
    try:
        # Then it says it is listening, not that it is ready, and /readyz agrees
        assert lines.starting("listening") == [False]
        assert lines.starting("ready") == []
        assert await _readyz(proxy.admin.port) == 503
        # When the broker comes up
        broker.server = await asyncio.start_server(broker._serve, "127.0.0.1", port)
        broker.port = port
        await asyncio.wait_for(lines.ready_logged.wait(), 30)
        # Then "ready" is logged once, when /readyz already says ready
        assert lines.starting("ready") == [True]
        assert await _readyz(proxy.admin.port) == 200
        for _ in range(2):  # more refreshes: no second "ready" line
            await proxy.metadata.refresh_metadata()
            proxy._note_readiness()
        assert lines.starting("ready") == [True] and lines.starting("not ready") == []
    finally:
        await proxy.stop(drain_timeout=1)
        if broker.server is not None:
            broker.server.close()


async def _readyz_body(port: int) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = (await asyncio.wait_for(reader.read(), 10)).decode()
    writer.close()
    head, _, body = answer.partition("\r\n\r\n")
    return int(head.split()[1]), body


def _proxy_towards(port: int, **settings: Any) -> InsyncProxy:
    return InsyncProxy(ProxyConfig(
        bootstrap_servers=(f"127.0.0.1:{port}",),
        listeners=(ListenerConfig(bootstrap_port=0, broker_port_base=free_port_base()),),
        admin_port=0, audit=AuditConfig(enabled=False), metadata_refresh_seconds=60,
        connect_timeout_seconds=2, control_request_timeout_seconds=2, **settings,
    ))


async def test_readyz_carries_the_last_upstream_error(lines: _Lines) -> None:
    # Given a proxy whose broker is not listening
    port = free_port()
    proxy = _proxy_towards(port)
    lines.proxy = proxy
    await proxy.start()
    try:
        # When /readyz is asked
        status, body = await _readyz_body(proxy.admin.port)
        # Then it says why it is not ready and what the upstream last said, as the log does
        assert status == 503
        assert body.startswith(f"not ready: no broker metadata yet; last upstream error: no broker reachable: "
                               f"127.0.0.1:{port}: [Errno 111] Connection refused"), body
        assert any("upstream not reachable yet" in m and "Connection refused" in m for m, _ in lines.seen), lines.seen
    finally:
        await proxy.stop(drain_timeout=1)


async def test_tls_towards_a_plaintext_listener_says_so_in_the_log_and_readyz(lines: _Lines) -> None:
    # Given upstream TLS on, towards a listener that closes the connection at the ClientHello (PLAINTEXT)
    async def plaintext(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.close()

    server = await asyncio.start_server(plaintext, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = _proxy_towards(port, upstream_tls=UpstreamTlsConfig(enabled=True))
    lines.proxy = proxy
    await proxy.start()
    try:
        # Then the log line and /readyz say the listener may be plaintext and upstream TLS should be off
        said = [m for m, _ in lines.seen if "upstream not reachable yet" in m]
        assert len(said) == 1 and PLAINTEXT_LISTENER_HINT in said[0], lines.seen
        status, body = await _readyz_body(proxy.admin.port)
        assert status == 503 and PLAINTEXT_LISTENER_HINT in body, body
    finally:
        await proxy.stop(drain_timeout=1)
        server.close()


async def test_readyz_never_carries_the_password(lines: _Lines) -> None:
    # Given a broker that refuses the proxy's login and quotes the password it got in its error message
    password = "a-wrong-password"
    broker = PlainBroker(refusal=f"invalid credentials: password '{password}' is not right")
    _, port = await broker.start()
    proxy = _proxy_towards(port, control_sasl=SaslConfig(mechanism="PLAIN", username="u", password=password))
    lines.proxy = proxy
    await proxy.start()
    try:
        # Then /readyz says the login failed, the password masked
        status, body = await _readyz_body(proxy.admin.port)
        assert status == 503 and "authentication as 'u' failed" in body and "***" in body, body
        assert password not in body
    finally:
        await proxy.stop(drain_timeout=1)
        broker.close()


async def test_an_http_port_as_bootstrap_server_is_named_in_the_log_and_readyz(lines: _Lines) -> None:
    # Given bootstrap_servers naming a port that answers HTTP
    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(http, "127.0.0.1", 0)
    proxy = _proxy_towards(server.sockets[0].getsockname()[1])
    lines.proxy = proxy
    await proxy.start()
    try:
        # Then the log and /readyz say the port answers HTTP (not "raise max_frame_bytes")
        said = [m for m, _ in lines.seen if "upstream not reachable yet" in m]
        assert len(said) == 1 and HTTP_ANSWER in said[0] and "max_frame_bytes" not in said[0], lines.seen
        status, body = await _readyz_body(proxy.admin.port)
        assert status == 503 and HTTP_ANSWER in body, body
    finally:
        await proxy.stop(drain_timeout=1)
        server.close()
