"""Fixed latency histogram buckets of audit schema v2 (`produce_summary.latency_buckets`).

Bucket i holds latencies in (bound(i-1), bound(i)] milliseconds, bound(i) = 0.01 ms x 2^(i/4) for
i = 0..LAST_BOUNDED; bucket 0 also holds everything at or below 0.01 ms, and bucket OVERFLOW
everything above bound(LAST_BOUNDED) (about 336 s). The bounds never change within a schema version,
so summaries of any number of sidecars and intervals merge by adding counts. A percentile read from
merged buckets is off by at most one bucket width: a factor of 2^(1/4), i.e. at most +18.9%.
"""

from __future__ import annotations

import math
from bisect import bisect_left

BASE_MS = 0.01
STEPS_PER_DOUBLING = 4
LAST_BOUNDED = 100
OVERFLOW = LAST_BOUNDED + 1
#: Upper bound of bucket i, in milliseconds.
BOUNDS_MS: tuple[float, ...] = tuple(BASE_MS * 2 ** (i / STEPS_PER_DOUBLING) for i in range(LAST_BOUNDED + 1))
#: The largest relative error of a percentile read as its bucket's upper bound.
RELATIVE_ERROR = 2 ** (1 / STEPS_PER_DOUBLING) - 1

def bucket_index(latency_ms: float) -> int:
    """The bucket a latency falls in (see the module docstring): the smallest i with latency <= bound(i),
    exactly, by bisection over the bounds (OVERFLOW past the last one)."""
    return bisect_left(BOUNDS_MS, latency_ms)


def upper_bound_ms(index: int) -> float:
    """The upper bound of a bucket (math.inf for OVERFLOW)."""
    return BOUNDS_MS[index] if index <= LAST_BOUNDED else math.inf
