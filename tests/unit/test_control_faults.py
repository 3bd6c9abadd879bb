"""The control connection fails over past a hung broker; background failures are one WARNING and a count."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest

from insync_proxy.protocol import (
    ApiKey,
)
from insync_proxy.proxy.controlplane.control import ControlConnection, ControlError
from insync_proxy.proxy.controlplane.min_insync import MinInsyncCache
from insync_proxy.proxy.observability.metrics import ProxyMetrics
from tests.unit.control_brokers import FakeBroker


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
