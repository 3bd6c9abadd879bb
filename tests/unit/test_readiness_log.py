"""The "listening" and "ready" log lines agree with /readyz: "ready" is logged when /readyz turns ready."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from insync_proxy.devcluster.cluster import free_port
from insync_proxy.proxy.config import AuditConfig, ListenerConfig, ProxyConfig
from insync_proxy.proxy.server import InsyncProxy
from tests.proxy_harness import free_port_base
from tests.unit.test_connection_pipeline import FakeBroker


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
