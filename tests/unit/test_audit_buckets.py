"""The proxy's latency bucket function is exactly the bounds' definition, at every bound and between them."""

from __future__ import annotations

import math
import random

from insync_proxy.audit import buckets


def _definition(v: float) -> int:
    return next((i for i, b in enumerate(buckets.BOUNDS_MS) if v <= b), buckets.OVERFLOW)


def test_bucket_index_is_the_smallest_bound_at_or_above_the_latency() -> None:
    rng = random.Random(3)
    values = [0.0, 1e-12, buckets.BASE_MS, 1e9, math.inf]
    for b in buckets.BOUNDS_MS:
        values += [b, math.nextafter(b, 0), math.nextafter(b, math.inf)]
    values += [10 ** rng.uniform(-4, 7) for _ in range(20_000)]
    assert [buckets.bucket_index(v) for v in values] == [_definition(v) for v in values]


def test_bounds_double_every_four_buckets_and_overflow_follows_the_last() -> None:
    assert len(buckets.BOUNDS_MS) == buckets.OVERFLOW == buckets.LAST_BOUNDED + 1
    assert buckets.BOUNDS_MS[0] == buckets.BASE_MS
    assert all(math.isclose(buckets.BOUNDS_MS[i + 4], 2 * buckets.BOUNDS_MS[i]) for i in range(buckets.LAST_BOUNDED - 3))


def test_the_summaries_bucket_of_a_latency_is_bucket_index_in_runs_and_jumps() -> None:
    # Given the summaries' latency_bucket, which checks the range of the bucket it gave last first
    from insync_proxy.proxy.audit.summary import ProduceSummaries

    summaries = ProduceSummaries(60.0)
    rng = random.Random(5)
    values = [0.0, buckets.BASE_MS, math.inf, 1e9]
    for b in buckets.BOUNDS_MS:  # each bound with its neighbours, in the order a run across a bound takes them
        values += [math.nextafter(b, 0), b, math.nextafter(b, math.inf), b]
    for _ in range(500):  # runs in one bucket's neighbourhood, then a jump elsewhere
        centre = 10 ** rng.uniform(-3, 6)
        values += [centre * rng.uniform(0.9, 1.1) for _ in range(rng.randint(1, 15))]
    # When each value is bucketed in that order
    got = [summaries.latency_bucket(v) for v in values]
    # Then every answer is the definition's
    assert got == [_definition(v) for v in values]
