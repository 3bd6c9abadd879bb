"""What the proxy observes of every exchange: request counts and latencies, debug capture, leak check."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final, TypeVar

from insync_proxy.proxy.datapath.capture import FrameCapture
from insync_proxy.proxy.datapath.exchange import CoreObserver, Exchange, Frame, api_name
from insync_proxy.proxy.observability.metrics import (
    LockFreeCounterChild,
    LockFreeHistogram,
    LockFreeHistogramChild,
    ProxyMetrics,
)

log: Final = logging.getLogger("insync_proxy")


class ExchangeObserver(CoreObserver):
    """The connection core's observer: Prometheus series per API (children cached), and debug aids."""

    def __init__(
        self,
        metrics: ProxyMetrics,
        capture: FrameCapture | None = None,
        leak_check_brokers: Mapping[int, tuple[str, int]] | None = None,
    ) -> None:
        self.metrics = metrics
        self.capture = capture
        #: Real broker addresses to look for in responses (debug_address_leak_check), else None.
        self.leak_check_brokers = leak_check_brokers
        # Each family's child per API, looked up once per API (labels() costs microseconds), then found by the API
        # key's index in a list (a list read, not a dict probe). Typed, so the compiled build updates them natively.
        self._requests: list[LockFreeCounterChild | None] = []
        self._request_latency: list[LockFreeHistogramChild | None] = []
        self._upstream_latency: list[LockFreeHistogramChild | None] = []

    def request_received(self, exchange: Exchange) -> None:
        key = exchange.api_key
        cache = self._requests
        child = cache[key] if 0 <= key < len(cache) else None
        if child is None:
            child = self.metrics.requests_total.labels(api_name(key))
            _cache_child(cache, key, child)
        child.value += 1.0

    def upstream_answered(self, exchange: Exchange, frame: memoryview, seconds: float) -> None:
        _latency_child(self._upstream_latency, self.metrics.upstream_latency_seconds, exchange.api_key).observe(seconds)
        if self.capture is not None:
            self.capture.record(exchange, frame)

    def response_written(self, exchange: Exchange, payload: Frame, seconds: float) -> None:
        _latency_child(self._request_latency, self.metrics.request_latency_seconds, exchange.api_key).observe(seconds)
        if self.leak_check_brokers is not None:
            self._check_address_leak(exchange, payload)

    def _check_address_leak(self, exchange: Exchange, payload: Frame) -> None:
        """Debug aid for tests: a real broker's host immediately followed by its port (int32, or the uint16
        of DescribeQuorum's listeners)."""
        data = bytes(payload)
        assert self.leak_check_brokers is not None
        for host, port in self.leak_check_brokers.values():
            name = host.encode()
            if name + port.to_bytes(4, "big") in data or name + port.to_bytes(2, "big") in data:
                self.metrics.address_leaks_total.labels(api_name(exchange.api_key)).inc()
                log.error("ADDRESS LEAK: %s v%d response on listener %s carries broker address %s:%d",
                          api_name(exchange.api_key), exchange.api_version, exchange.listener.label, host, port)


def _latency_child(cache: list[LockFreeHistogramChild | None], family: LockFreeHistogram,
                   api_key: int) -> LockFreeHistogramChild:
    """The family's child for this API, looked up once per API (labels() costs microseconds)."""
    child = cache[api_key] if 0 <= api_key < len(cache) else None
    if child is None:
        child = family.labels(api_name(api_key))
        _cache_child(cache, api_key, child)
    return child


_Child = TypeVar("_Child")


def _cache_child(cache: list[_Child | None], api_key: int, child: _Child) -> None:
    """Keep an API's child at its key's index (the exchange's API key is a known one: a small non-negative number)."""
    if api_key < 0:
        return
    if api_key >= len(cache):
        cache.extend([None] * (api_key + 1 - len(cache)))
    cache[api_key] = child
