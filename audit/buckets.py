"""Fixed latency histogram buckets of audit schema v2 (`produce_summary.latency_buckets`).

Bucket i holds latencies in (bound(i-1), bound(i)] milliseconds, bound(i) = 0.01 ms x 2^(i/4) for
i = 0..LAST_BOUNDED; bucket 0 also holds everything at or below 0.01 ms, and bucket OVERFLOW
everything above bound(LAST_BOUNDED) (about 336 s). The bounds never change within a schema version,
so summaries of any number of sidecars and intervals merge by adding counts. A percentile read from
merged buckets is off by at most one bucket width: a factor of 2^(1/4), i.e. at most +18.9%.
"""

from __future__ import annotations

import math
from typing import Final

BASE_MS: Final = 0.01
STEPS_PER_DOUBLING: Final = 4
LAST_BOUNDED: Final = 100
OVERFLOW: Final = LAST_BOUNDED + 1
#: Upper bound of bucket i, in milliseconds.
BOUNDS_MS: Final[tuple[float, ...]] = tuple(BASE_MS * 2 ** (i / STEPS_PER_DOUBLING) for i in range(LAST_BOUNDED + 1))
#: The largest relative error of a percentile read as its bucket's upper bound.
RELATIVE_ERROR: Final = 2 ** (1 / STEPS_PER_DOUBLING) - 1

_STEPS_PER_E: Final = STEPS_PER_DOUBLING / math.log(2)


def bucket_index(latency_ms: float) -> int:
    """The bucket a latency falls in (see the module docstring): the smallest i with latency <= bound(i),
    exactly (OVERFLOW past the last one). Computed from the logarithm, then checked against the bounds
    themselves (floating-point rounding may put the estimate one off), instead of a bisection: it runs
    once per Produce request."""
    if latency_ms <= BASE_MS:
        return 0
    if latency_ms > BOUNDS_MS[LAST_BOUNDED]:
        return OVERFLOW
    i = min(int(math.log(latency_ms / BASE_MS) * _STEPS_PER_E), LAST_BOUNDED)
    while latency_ms > BOUNDS_MS[i]:
        i += 1
    while i > 0 and latency_ms <= BOUNDS_MS[i - 1]:
        i -= 1
    return i

