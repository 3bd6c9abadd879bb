"""The control connection fails over past a hung broker; background failures are one WARNING and a count."""

from __future__ import annotations

import asyncio
import gc
import logging
import struct
import time

import pytest

from insync_proxy.protocol import (
    ApiKey,
    ApiVersionsResponse,
    MetadataResponse,
    decode_request_header,
    encode_response,
)
from insync_proxy.protocol.messages import ApiVersion, MetadataResponseBroker
from insync_proxy.proxy.controlplane.control import ControlConnection, ControlError
from insync_proxy.proxy.controlplane.min_insync import MinInsyncCache
from insync_proxy.proxy.observability.metrics import ProxyMetrics

#: What a Kafka 2.8 broker advertises for the APIs the control connection uses.
KAFKA_28_VERSIONS = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 11), ApiKey.DESCRIBE_CONFIGS: (0, 4)}


class FakeBroker:
    """Answers ApiVersions and Metadata like a broker of the given versions; `hung` accepts and never answers."""

    def __init__(self, node_id: int, hung: bool = False, versions: dict[int, tuple[int, int]] | None = None):
        self.node_id = node_id
        self.hung = hung
        self.versions = versions or KAFKA_28_VERSIONS
        self.seen: list[tuple[int, int]] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return ("127.0.0.1", self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                if self.hung:
                    continue
                header, _ = decode_request_header(frame)
                key, version = header.request_api_key, header.request_api_version
                self.seen.append((key, version))
                if key == ApiKey.API_VERSIONS:
                    body = encode_response(ApiVersionsResponse(api_keys=tuple(
                        ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in self.versions.items()
                    )), min(version, 3))
                    head = struct.pack(">i", header.correlation_id)
                else:
                    body = encode_response(MetadataResponse(brokers=(MetadataResponseBroker(
                        node_id=self.node_id, host="127.0.0.1", port=1),)), version)
                    head = struct.pack(">i", header.correlation_id) + (b"\0" if version >= 9 else b"")
                writer.write(struct.pack(">i", len(head) + len(body)) + head + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


async def test_a_hung_broker_costs_one_request_timeout_then_the_next_broker_answers() -> None:
    # Given a first bootstrap broker that accepts connections but never answers (SIGSTOP-like) and a healthy one
    hung, healthy = FakeBroker(1, hung=True), FakeBroker(2)
    addresses = [await hung.start(), await healthy.start()]
    control = ControlConnection(addresses, request_timeout=0.5)
    try:
        # When the control connection asks for Metadata
        started = time.monotonic()
        response = await control.metadata(None)
        elapsed = time.monotonic() - started
        # Then the healthy broker answered, after about one request timeout, at the version it speaks
        assert [b.node_id for b in response.brokers] == [2]
        assert control.connected_to == addresses[1]
        assert elapsed < 3.0, elapsed
        assert (ApiKey.METADATA, 11) in healthy.seen  # Kafka 2.8 has no Metadata v12
        # And the hung broker goes last: the next request does not wait for it again
        started = time.monotonic()
        await control.metadata(None)
        assert time.monotonic() - started < 0.4
    finally:
        await control.close()
        hung.close()
        healthy.close()


async def test_a_request_fails_with_every_broker_named_when_none_answers() -> None:
    hung = [FakeBroker(1, hung=True), FakeBroker(2, hung=True)]
    addresses = [await b.start() for b in hung]
    control = ControlConnection(addresses, request_timeout=0.3)
    try:
        with pytest.raises(ControlError, match="no answer within 0.3s") as failure:
            await control.metadata(None)
        assert all(f"{host}:{port}" in str(failure.value) for host, port in addresses)
    finally:
        await control.close()
        for b in hung:
            b.close()


class FailingControl:
    async def describe_topic_configs(self, topics: list[str], keys: list[str]) -> object:
        raise ControlError("DESCRIBE_CONFIGS to 127.0.0.1:9092 timed out after 2.0s")


async def test_a_failed_background_fetch_is_one_warning_and_a_count_never_an_unretrieved_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = ProxyMetrics()
    cache = MinInsyncCache(FailingControl(), metrics)  # type: ignore[arg-type]
    caplog.set_level(logging.WARNING)
    # When a fetch fails and its future is dropped (as a Metadata answer's background fetch is)
    cache.fetch(["orders"])
    for _ in range(5):
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    gc.collect()
    await asyncio.sleep(0)
    # Then one WARNING names the task and the topic, the failure is counted, and nothing is "never retrieved"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "min_insync_fetch failed" in warnings[0] and "orders" in warnings[0] and "timed out" in warnings[0]
    assert metrics.registry.get_sample_value(
        "insync_proxy_background_task_failures_total", {"task": "min_insync_fetch"}) == 1
    assert not any("never retrieved" in r.getMessage() for r in caplog.records)
