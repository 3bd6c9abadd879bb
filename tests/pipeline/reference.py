"""Reference implementations of the report's intermediates, straight from the events one by one.

The report cuts its tables from the one pass's aggregate (`pipeline.single_pass`); these say what
that aggregate must amount to, in the plainest form: Python over the normalised events
(`pipeline.schema.summaries`), or the observations one by one for the below-min intervals. Tests
compare the one pass with them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pyspark.sql import DataFrame

from insync_proxy.pipeline import single_pass, tables
from insync_proxy.pipeline.report import _collect

#: The traffic keys of `single_pass.cube`.
CUBE_KEYS = single_pass.CUBE_KEYS


def traffic_cube(summaries: DataFrame) -> list[dict[str, Any]]:
    """Summaries summed per CUBE_KEYS: requests, records (None when no summary of the group carried a
    record count: v1 decisions), record bytes, first interval start, last end."""
    cube: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in _collect(summaries):
        key = tuple(row[k] for k in CUBE_KEYS)
        group = cube.setdefault(key, {**dict(zip(CUBE_KEYS, key, strict=True)), "requests": 0, "records": None,
                                      "record_bytes": 0, "first_seen": row["interval_start"],
                                      "last_seen": row["ts"]})
        group["requests"] += row["requests"]
        if row["records"] is not None:
            group["records"] = (group["records"] or 0) + row["records"]
        group["record_bytes"] += row["record_bytes"] or 0
        group["first_seen"] = min(group["first_seen"], row["interval_start"])
        group["last_seen"] = max(group["last_seen"], row["ts"])
    return list(cube.values())


def latency_histograms(summaries: DataFrame) -> list[dict[str, Any]]:
    """Per `tables.LATENCY_KEYS`, the merged latency histogram of the summaries with a measured latency:
    count, sum, min, max and the (bucket, count) pairs summed bucket by bucket, sorted by bucket."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    counts: dict[tuple[Any, ...], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for row in _collect(summaries):
        if not row["latency_count"]:
            continue
        key = tuple(row[k] for k in tables.LATENCY_KEYS)
        group = groups.setdefault(key, {**dict(zip(tables.LATENCY_KEYS, key, strict=True)), "latency_count": 0,
                                        "latency_sum_ms": 0.0, "latency_min_ms": row["latency_min_ms"],
                                        "latency_max_ms": row["latency_max_ms"]})
        group["latency_count"] += row["latency_count"]
        group["latency_sum_ms"] += row["latency_sum_ms"]
        group["latency_min_ms"] = min(group["latency_min_ms"], row["latency_min_ms"])
        group["latency_max_ms"] = max(group["latency_max_ms"], row["latency_max_ms"])
        for pair in row["latency_buckets"]:
            counts[key][pair["bucket"]] += pair["count"]
    for key, group in groups.items():
        group["hist"] = [{"bucket": b, "count": n} for b, n in sorted(counts[key].items())]
    return list(groups.values())


def isr_below_min_intervals(observations: DataFrame) -> DataFrame:
    """The below-min intervals from every observation one by one (`pipeline.schema.observations`), each
    a run of one: what the report's runs of whole granules must give."""
    return tables.isr_below_min_intervals_from_runs(single_pass.observation_runs(observations))
