"""The lock-free per-request families expose exactly what prometheus-client's Counter and Histogram would."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from insync_proxy.proxy.observability.metrics import (
    LATENCY_BUCKETS,
    LockFreeCounter,
    LockFreeHistogram,
    ProxyMetrics,
)


def test_lock_free_counter_and_histogram_render_like_prometheus_client() -> None:
    # Given the same series in prometheus-client's families and in the lock-free ones
    reference, ours = CollectorRegistry(), CollectorRegistry()
    ref_counter = Counter("x_requests", "Requests", ["api"], registry=reference)
    ref_histogram = Histogram("x_latency_seconds", "Latency", ["api"], buckets=LATENCY_BUCKETS, registry=reference)
    counter = LockFreeCounter("x_requests", "Requests", ["api"], registry=ours)
    histogram = LockFreeHistogram("x_latency_seconds", "Latency", ["api"], buckets=LATENCY_BUCKETS, registry=ours)
    # When both see the same observations, including values exactly on bucket bounds and beyond the last
    rng = random.Random(7)
    values = [*LATENCY_BUCKETS, 0.0, 31.0, 1e9] + [rng.lognormvariate(-7, 2) for _ in range(2000)]
    for i, value in enumerate(values):
        api = ("Produce", "Fetch", 'we"ird\\name')[i % 3]
        ref_counter.labels(api).inc()
        counter.labels(api).inc()
        ref_histogram.labels(api).observe(value)
        histogram.labels(api).observe(value)
    ref_counter.labels("Produce").inc(2.5)
    counter.labels("Produce").inc(2.5)
    # Then the scrape text is identical, byte for byte
    assert generate_latest(ours) == generate_latest(reference)


def test_runs_in_one_bucket_scraped_midway_render_like_prometheus_client() -> None:
    # Given a histogram that counts a run of observations in one bucket natively until one falls elsewhere
    reference, ours = CollectorRegistry(), CollectorRegistry()
    ref_histogram = Histogram("r_latency_seconds", "Latency", ["api"], buckets=LATENCY_BUCKETS, registry=reference)
    histogram = LockFreeHistogram("r_latency_seconds", "Latency", ["api"], buckets=LATENCY_BUCKETS, registry=ours)
    lows = (0.0, *LATENCY_BUCKETS)
    highs = (*LATENCY_BUCKETS, 100.0)
    rng = random.Random(11)
    # When runs of 1-20 observations land in one bucket each (its bounds included), bucket after bucket, with a
    # scrape in the middle of runs
    for step in range(400):
        bucket = rng.randrange(len(highs))
        for _ in range(rng.randint(1, 20)):
            value = rng.choice((highs[bucket], rng.uniform(lows[bucket], highs[bucket]) or highs[bucket]))
            ref_histogram.labels("Produce").observe(value)
            histogram.labels("Produce").observe(value)
        # Then every scrape, mid-run too, is the same text as prometheus-client's, byte for byte
        if step % 9 == 0:
            assert generate_latest(ours) == generate_latest(reference), step
    assert generate_latest(ours) == generate_latest(reference)


def test_empty_lock_free_families_render_like_prometheus_client() -> None:
    reference, ours = CollectorRegistry(), CollectorRegistry()
    Counter("y_requests", "Requests", ["api"], registry=reference)
    Histogram("y_latency_seconds", "Latency", ["api"], buckets=LATENCY_BUCKETS, registry=reference)
    LockFreeCounter("y_requests", "Requests", ["api"], registry=ours)
    LockFreeHistogram("y_latency_seconds", "Latency", ["api"], buckets=LATENCY_BUCKETS, registry=ours)
    assert generate_latest(ours) == generate_latest(reference)


def test_proxy_metrics_per_request_series_are_readable_by_name() -> None:
    metrics = ProxyMetrics()
    metrics.requests_total.labels("Produce").inc()
    metrics.request_latency_seconds.labels("Produce").observe(0.0003)
    registry = metrics.registry
    assert registry.get_sample_value("insync_proxy_requests_total", {"api": "Produce"}) == 1.0
    assert registry.get_sample_value("insync_proxy_request_latency_seconds_bucket",
                                     {"api": "Produce", "le": "0.0005"}) == 1.0
    assert registry.get_sample_value("insync_proxy_request_latency_seconds_bucket",
                                     {"api": "Produce", "le": "0.00025"}) == 0.0
    assert registry.get_sample_value("insync_proxy_request_latency_seconds_count", {"api": "Produce"}) == 1.0


def test_wrong_label_count_is_an_error() -> None:
    counter = LockFreeCounter("z_requests", "Requests", ["api"], registry=CollectorRegistry())
    try:
        counter.labels("Produce", "extra")
    except ValueError as exc:
        assert "takes labels" in str(exc)
    else:
        raise AssertionError("labels() accepted a wrong label count")
