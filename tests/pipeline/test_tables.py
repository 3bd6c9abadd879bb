"""Report tables on generated audit events whose answers are known by construction."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from insync_proxy.pipeline import single_pass, tables
from insync_proxy.pipeline.report import _collect
from insync_proxy.pipeline.schema import observations, parse_audit_events, valid_events

from .events import at, decision, isr_change
from .reference import isr_below_min_intervals


def _parsed(spark: SparkSession, events: list[dict[str, Any]]) -> DataFrame:
    return parse_audit_events(spark.createDataFrame([(json.dumps(e),) for e in events], "value string"))


def _events(spark: SparkSession, events: list[dict[str, Any]]) -> DataFrame:
    return valid_events(_parsed(spark, events))


def _aggregate(spark: SparkSession, events: list[dict[str, Any]]) -> DataFrame:
    """The one pass's aggregate, which the report cuts every table from."""
    return single_pass.aggregate(_parsed(spark, events))


def _cube(spark: SparkSession, events: list[dict[str, Any]]) -> DataFrame:
    return single_pass.cube(_aggregate(spark, events))


def _hist(spark: SparkSession, events: list[dict[str, Any]]) -> DataFrame:
    return single_pass.histograms(_aggregate(spark, events))


def test_decisions_counted_by_kind_and_by_acks(spark: SparkSession) -> None:
    # Given 5 forwarded, 2 raised by the floor, 3 refused for ISR and 1 refused for acks=3
    evs = [decision(i) for i in range(5)]
    evs += [decision(10 + i, decision="raised_by_floor", acks_requested=1, acks_sent=-1) for i in range(2)]
    evs += [decision(20 + i, decision="answered_not_enough_replicas", acks_sent=None, isr_size=1) for i in range(3)]
    evs += [decision(30, decision="answered_invalid_required_acks", acks_requested=3, acks_sent=None)]
    evs += [isr_change(40, 3)]  # not a decision: counted nowhere here
    cube = _cube(spark, evs)
    # When aggregated
    by_kind = {r["decision"]: (r["requests"], r["record_bytes"]) for r in _collect(tables.decisions_by_kind(cube))}
    by_acks = {(r["acks_requested"], r["acks_sent"]): r["requests"] for r in _collect(tables.decisions_by_acks(cube))}
    # Then
    assert by_kind == {
        "forwarded": (5, 500), "raised_by_floor": (2, 200),
        "answered_not_enough_replicas": (3, 300), "answered_invalid_required_acks": (1, 100),
    }
    assert by_acks == {(-1, -1): 5, (1, -1): 2, (-1, None): 3, (3, None): 1}


def test_below_min_intervals_have_exact_boundaries(spark: SparkSession) -> None:
    # Given partition 0: healthy, ISR drops to 1 (< min 2) at t=10, refusals at 11-12, an unknown-ISR
    # event at 13 (no observation), recovery at 20; then ISR 2 < min 3 at 30, ISR 1 at 31, and still
    # below at the partition's last event (t=35): an open interval.
    p0 = [decision(t) for t in range(0, 10)]
    p0 += [isr_change(10, 1)]
    p0 += [decision(t, decision="answered_not_enough_replicas", acks_sent=None, isr_size=1) for t in (11, 12)]
    p0 += [isr_change(13, None)]
    p0 += [isr_change(20, 3), decision(21)]
    p0 += [isr_change(30, 2, min_isr=3), isr_change(31, 1, min_isr=3), decision(35, isr_size=2, min_isr=3)]
    # Partition 1 never below min; partition 2 below only in produce decisions (another sidecar sees recovery).
    p1 = [decision(t, partition=1) for t in range(0, 40, 5)]
    p2 = [decision(5, partition=2, isr_size=1, acks_requested=1, acks_sent=1),
          decision(7.5, partition=2, isr_size=3, proxy_id="sidecar-b")]
    events = _events(spark, p0 + p1 + p2)
    # When the intervals are computed
    rows = sorted(_collect(isr_below_min_intervals(observations(events))), key=lambda r: (r["partition"], r["start"]))
    got = [(r["partition"], r["start"], r["end"], r["duration_s"], r["min_isr"], r["lowest_isr"], r["open"],
            r["observations"]) for r in rows]
    # Then
    assert got == [
        (0, at(10), at(20), 10.0, 2, 1, False, 3),
        (0, at(30), at(35), 5.0, 3, 1, True, 3),
        (2, at(5), at(7.5), 2.5, 2, 1, False, 1),
    ]
    assert str(rows[0]["date"]) == "2026-11-21"


def test_latency_percentiles_from_merged_buckets_within_the_stated_error(spark: SparkSession) -> None:
    # Given latencies 1..1000 ms for acks=-1 (as v1 decisions) and 1..200 ms for acks=1, and acks=0 without latency
    evs = [decision(i / 100, latency_ms=float(i)) for i in range(1, 1001)]
    evs += [decision(20 + i / 100, acks_requested=1, acks_sent=1, latency_ms=float(i)) for i in range(1, 201)]
    evs += [decision(30, acks_requested=0, acks_sent=0, latency_ms=None)]
    # When
    rows = {(r["acks_requested"], r["acks_sent"]): r for r in _collect(tables.latency_overall(_hist(spark, evs)))}
    # Then each percentile is at or above the exact (nearest-rank) one and at most +18.9% above it
    assert set(rows) == {(-1, -1), (1, 1)}
    for key, n in (((-1, -1), 1000), ((1, 1), 200)):
        assert rows[key]["requests"] == n
        for p in tables.PERCENTILES:
            value = rows[key][f"p{round(p * 100)}_ms"]
            exact = math.ceil(p * n)
            assert exact <= value <= exact * (1 + tables.PERCENTILE_RELATIVE_ERROR) + 1e-9, (key, p, value)
        assert rows[key]["max_ms"] == float(n) and rows[key]["min_ms"] == 1.0
        assert rows[key]["mean_ms"] == pytest.approx((n + 1) / 2)


def test_exposure_share_is_bytes_with_acks_0_or_1_over_bytes_sent(spark: SparkSession) -> None:
    # Given 600 B with acks=-1, 300 B with acks=1, 100 B with acks=0 and 50 B answered by the proxy
    evs = [decision(1, record_bytes=600), decision(2, acks_requested=1, acks_sent=1, record_bytes=300),
           decision(3, acks_requested=0, acks_sent=0, record_bytes=100, latency_ms=None),
           decision(4, decision="answered_not_enough_replicas", acks_sent=None, record_bytes=50),
           decision(5, topic="idle", decision="answered_not_enough_replicas", acks_sent=None)]
    rows = {r["topic"]: r for r in _collect(tables.durability_exposure(_cube(spark, evs)))}
    # Then
    orders = rows["orders"]
    assert (orders["bytes_acks_all"], orders["bytes_acks_1"], orders["bytes_acks_0"]) == (600, 300, 100)
    assert (orders["bytes_sent"], orders["bytes_answered_by_proxy"]) == (1000, 50)
    assert orders["exposed_share"] == pytest.approx(0.4, abs=1e-12)
    assert rows["idle"]["exposed_share"] is None  # nothing sent upstream: no share


def test_top_clients_ranked_by_proxy_answered_errors(spark: SparkSession) -> None:
    # Given client a: 3 NOT_ENOUGH_REPLICAS + 1 INVALID_REQUIRED_ACKS, b: 2, anonymous: 1, c: only forwarded
    ner: dict[str, Any] = {"decision": "answered_not_enough_replicas", "acks_sent": None}
    ira: dict[str, Any] = {"decision": "answered_invalid_required_acks", "acks_sent": None, "acks_requested": 3}
    evs = [decision(i, client_id="a", **ner) for i in range(3)] + [decision(4, client_id="a", **ira)]
    evs += [decision(5 + i, client_id="b", partition=i, **ner) for i in range(2)]
    evs += [decision(8, client_id=None, **ira), decision(9, client_id="c")]
    rows = _collect(tables.top_clients(single_pass.clients(_aggregate(spark, evs))))
    # Then ordered by errors, with the split by kind
    got = [(r["client_id"], r["partition"], r["not_enough_replicas"], r["invalid_required_acks"], r["answered_errors"])
           for r in rows]
    assert got == [("a", 0, 3, 1, 4), (None, 0, 0, 1, 1), ("b", 0, 1, 0, 1), ("b", 1, 1, 0, 1)]


def test_timeline_bucket_keeps_at_most_120_buckets() -> None:
    assert tables.timeline_bucket_seconds(30) == 1
    assert tables.timeline_bucket_seconds(3600) == 60
    assert tables.timeline_bucket_seconds(2 * 86400) == 3600
    assert tables.timeline_bucket_seconds(10**9) == 86400
