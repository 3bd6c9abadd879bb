"""Audit schema v2 in the batch report: summaries, merged histograms, readiness intervals, v1+v2 mixed,
and every table empty (healthy run, one event, only rejected lines, an empty directory)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from insync_proxy.audit import buckets
from insync_proxy.pipeline import report, tables
from insync_proxy.pipeline.schema import bucket_index
from insync_proxy.pipeline.spark_env import Progress

from .events import at, decision, isr_change, isr_change_v2, readiness, summary, write_jsonl


def _run(spark: SparkSession, inputs: list[str], out: Path) -> report.ReportResult:
    return report.run_report(spark, inputs, out, progress=Progress(enabled=False))


def test_spark_bucket_index_matches_the_proxys(spark: SparkSession) -> None:
    # Given latencies at, just below and just above every bound, and random ones over the whole range
    rng = random.Random(12)
    values = [0.0, 0.001, 1e6]
    for b in buckets.BOUNDS_MS:
        values += [b, math.nextafter(b, 0), math.nextafter(b, math.inf), b * 1.0001, b * 0.9999]
    values += [10 ** rng.uniform(-3, 6) for _ in range(3000)]
    df = spark.createDataFrame([(v,) for v in values], "v double")
    # When the Spark expression buckets them
    got = [r["i"] for r in df.select(bucket_index(F.col("v")).alias("i")).collect()]
    # Then it agrees with the bounds' definition: the smallest i with v <= BOUNDS_MS[i]
    def expected(v: float) -> int:
        return next((i for i, b in enumerate(buckets.BOUNDS_MS) if v <= b), buckets.OVERFLOW)
    assert got == [expected(v) for v in values]
    # ... and with the proxy's own function, everywhere
    assert got == [buckets.bucket_index(v) for v in values]


@pytest.fixture(scope="module")
def v2_result(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> report.ReportResult:
    # Two sidecars, flat layout as the proxy writes it; 6 intervals of 10 s each on orders-0 from both.
    root = tmp_path_factory.mktemp("v2") / "audit"
    a: list[dict[str, Any] | str] = []
    b: list[dict[str, Any] | str] = []
    for k in range(6):
        a.append(summary(10 * k, requests=10, records=40, record_bytes=4000,
                         latencies_ms=[1.0 + j for j in range(10)]))
        b.append(summary(10 * k, requests=5, records=5, record_bytes=500, proxy_id="sidecar-b", client_id="app-2",
                         latencies_ms=[100.0 + j for j in range(5)]))
    # acks=0 traffic (no latency, no error code) and proxy answers on orders-1 while it is unready
    a.append(summary(0, partition=1, acks_requested=0, acks_sent=0, error_code=None, requests=7, records=7,
                     record_bytes=70, latencies_ms=[]))
    a += [readiness(12, False, 1, partition=1), isr_change_v2(12, 1, partition=1)]
    a.append(summary(10, partition=1, decision="answered_not_enough_replicas", acks_requested=-2, acks_sent=None,
                     error_code=19, requests=3, records=6, record_bytes=300, client_id="billing",
                     latencies_ms=[0.05, 0.05, 0.06]))
    a += [readiness(27.5, True, 2, partition=1)]
    b += [readiness(13, False, 1, partition=1, proxy_id="sidecar-b"), readiness(26, True, 2, partition=1,
                                                                                   proxy_id="sidecar-b")]
    write_jsonl(root / "audit-sidecar-a-20261121T070000000000Z.jsonl", a)
    write_jsonl(root / "audit-sidecar-b-20261121T070000000000Z.jsonl", b)
    return _run(spark, [str(root)], tmp_path_factory.mktemp("out"))


def test_v2_per_partition_requests_records_and_bytes(v2_result: report.ReportResult) -> None:
    traffic = {r["partition"]: r for r in v2_result.tables["partition_traffic"]}
    assert set(traffic) == {0, 1}
    p0, p1 = traffic[0], traffic[1]
    assert (p0["requests"], p0["records"], p0["record_bytes"]) == (6 * 15, 6 * 45, 6 * 4500)
    assert (p0["written_requests"], p0["written_records"], p0["written_record_bytes"]) == (90, 270, 27000)
    # acks=0 requests were written (no error code); the proxy's answers were not
    assert (p1["requests"], p1["records"], p1["record_bytes"]) == (10, 13, 370)
    assert (p1["written_requests"], p1["written_records"], p1["answered_by_proxy_requests"]) == (7, 7, 3)
    assert v2_result.counts["produce_summaries"] == 14 and v2_result.counts["partition_readiness"] == 4
    by_kind = {(r["partition"], r["decision"]): r["requests"] for r in v2_result.tables["decisions_by_kind"]}
    assert by_kind == {(0, "forwarded"): 90, (1, "forwarded"): 7, (1, "answered_not_enough_replicas"): 3}
    (client,) = v2_result.tables["top_clients_overall"]
    assert (client["client_id"], client["not_enough_replicas"]) == ("billing", 3)


def test_v2_latency_percentiles_from_merged_buckets(v2_result: report.ReportResult) -> None:
    # orders-0 acks -1: 60 latencies 1..10 ms (sidecar a) and 30 latencies 100..104 ms (sidecar b),
    # merged over 6 intervals and 2 sidecars.
    exact = sorted([1.0 + j for j in range(10)] * 6 + [100.0 + j for j in range(5)] * 6)
    (row,) = [r for r in v2_result.tables["latency_by_acks"] if r["partition"] == 0]
    assert row["requests"] == 90 and row["min_ms"] == 1.0 and row["max_ms"] == 104.0
    assert row["mean_ms"] == pytest.approx(sum(exact) / 90)
    for p in tables.PERCENTILES:
        truth = exact[math.ceil(p * 90) - 1]
        value = row[f"p{round(p * 100)}_ms"]
        assert truth <= value <= truth * (1 + buckets.RELATIVE_ERROR), (p, truth, value)
    # acks=0 has no latency row; the report states the bucket error
    assert {(r["acks_requested"], r["acks_sent"]) for r in v2_result.tables["latency_overall"]} == {(-1, -1), (-2, None)}
    assert "at most +18.9%" in v2_result.html_path.read_text(encoding="utf-8")


def test_v2_below_min_interval_from_readiness_events(v2_result: report.ReportResult) -> None:
    # Sidecar a saw orders-1 unready from 12 s to 27.5 s, sidecar b from 13 s to 26 s: merged, one
    # interval from the first unready view to the first ready view after the run (26 s).
    (interval,) = v2_result.tables["isr_below_min_intervals"]
    assert (interval["partition"], interval["start"], interval["end"], interval["open"]) == (1, at(12), at(26), False)
    assert (interval["lowest_isr"], interval["min_isr"], interval["proxies"]) == (1, 2, ["sidecar-a", "sidecar-b"])


def test_v1_and_v2_mixed_in_one_directory(spark: SparkSession, tmp_path: Path) -> None:
    # Given an old sidecar's v1 decisions and a new one's v2 summaries for the same partition
    root = tmp_path / "audit"
    v1: list[dict[str, Any] | str] = [decision(t, latency_ms=2.0, record_bytes=100) for t in range(20)]
    v1 += [isr_change(20, 1), decision(21, decision="answered_not_enough_replicas", acks_sent=None, isr_size=1,
                                       error_code=19), isr_change(25, 3)]
    write_jsonl(root / "audit-old-20261121T070000Z.jsonl", v1)
    write_jsonl(root / "new" / "audit-new-20261121T070000Z.jsonl",
                [summary(0, requests=30, records=60, record_bytes=3000, proxy_id="new", latencies_ms=[2.0] * 30)])
    # When reported together
    result = _run(spark, [str(root)], tmp_path / "out")
    # Then the v1 decisions count as one request each next to the summaries
    assert (result.counts["v1_events"], result.counts["v2_events"]) == (23, 1)
    by_kind = {r["decision"]: r for r in result.tables["decisions_by_kind"]}
    assert by_kind["forwarded"]["requests"] == 50 and by_kind["forwarded"]["record_bytes"] == 5000
    assert by_kind["forwarded"]["records"] == 60  # v1 decisions carry no record count
    assert by_kind["answered_not_enough_replicas"]["requests"] == 1
    (lat,) = [r for r in result.tables["latency_overall"] if r["acks_sent"] == -1]
    assert lat["requests"] == 50 and 2.0 <= lat["p99_ms"] <= 2.0 * (1 + buckets.RELATIVE_ERROR)
    (interval,) = result.tables["isr_below_min_intervals"]
    assert (interval["start"], interval["end"]) == (at(20), at(25))


def _assert_all_tables_readable_with_schema(spark: SparkSession, result: report.ReportResult) -> None:
    for name, schema in tables.TABLE_SCHEMAS.items():
        # Read without a schema: a data file carrying the schema must exist even for an empty table.
        df = spark.read.parquet(str(result.table_paths[name]))
        assert sorted(df.columns) == sorted(f.name for f in schema.fields), name
        assert [df.schema[f.name].dataType for f in schema.fields] == [f.dataType for f in schema.fields], name


@pytest.mark.parametrize("case", ["healthy", "one_event", "only_rejected", "empty_directory"])
def test_empty_tables_are_written_with_their_schema(spark: SparkSession, tmp_path: Path, case: str) -> None:
    # Given a healthy run (forwarded traffic only: no interval, no proxy answer, no ISR change), one
    # event, a file of rejected lines only, or a directory without any audit file
    root = tmp_path / "audit"
    root.mkdir()
    if case == "healthy":
        write_jsonl(root / "audit-a-1.jsonl", [summary(10 * k) for k in range(5)])
    elif case == "one_event":
        write_jsonl(root / "audit-a-1.jsonl", [readiness(0, True, 3)])
    elif case == "only_rejected":
        write_jsonl(root / "audit-a-1.jsonl", ["{truncated", json.dumps({"schema_version": 7}), "not json"])
    (root / "README.txt").write_text("not audit data")
    # When the report runs
    result = _run(spark, [str(root)], tmp_path / "out")
    # Then it succeeds, every table exists with its schema, and the report says "none"
    _assert_all_tables_readable_with_schema(spark, result)
    assert result.tables["isr_below_min_intervals"] == [] and result.tables["top_clients"] == []
    text = report.console_summary(result)
    assert "below-min-ISR intervals: none" in text and "proxy-answered errors: none" in text
    page = result.html_path.read_text(encoding="utf-8")
    assert "Below-min-ISR intervals: none" in page
    if case == "healthy":
        assert result.tables["partition_traffic"][0]["requests"] == 50
    else:
        assert "produce requests: none" in text and "Latency: none measured" in page
        assert result.tables["partition_traffic"] == [] and result.tables["latency_overall"] == []
    if case == "only_rejected":
        assert result.counts["rejected"] == 3 and result.counts["valid"] == 0
    if case == "empty_directory":
        assert result.counts["lines"] == 0 and "events: none" in text


def test_compaction_with_rollup_gives_the_same_tables(spark: SparkSession, tmp_path: Path) -> None:
    from insync_proxy.cli import main as cli_main

    # Given two sidecars' 10 s summaries over 4 minutes on two partitions, with varied latencies,
    # a v1 file, readiness events and a bad line
    rng = random.Random(7)
    audit = tmp_path / "audit"
    lines: list[dict[str, Any] | str] = []
    for k in range(24):
        for proxy in ("a", "b"):
            for part in (0, 1):
                n = rng.randint(1, 20)
                lines.append(summary(10 * k, partition=part, proxy_id=proxy, requests=n, records=2 * n,
                                     record_bytes=100 * n, latencies_ms=[rng.uniform(0.5, 300) for _ in range(n)]))
    lines += [readiness(33, False, 1, partition=1), readiness(95, True, 2, partition=1), "{bad"]
    write_jsonl(audit / "audit-a-1.jsonl", lines)
    write_jsonl(audit / "old" / "audit-old-1.jsonl", [decision(t, latency_ms=3.0) for t in range(5)])
    # When reported directly, and from a compaction that rolls summaries up per minute
    direct = _run(spark, [str(audit)], tmp_path / "direct")
    staged = tmp_path / "staged"
    assert cli_main(["compact", "--input", str(audit), "--output", str(staged), "--rollup-seconds", "60"]) == 0
    via = report.run_report(spark, [], tmp_path / "via", staged=[str(staged)], progress=Progress(enabled=False))
    # Then the compaction kept fewer rows and every table but the timeline (now per minute) is equal
    assert via.counts["produce_summaries"] == 4 * 2 * 2 < direct.counts["produce_summaries"] == 96
    assert via.counts["rejected"] == direct.counts["rejected"] == 1
    for name in tables.TABLES:
        if name != "decisions_timeline":
            assert _same_rows(via.tables[name], direct.tables[name]), name
    assert via.tables["isr_below_min_intervals"] and via.tables["latency_by_acks"]


def _same_rows(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Equal rows, floats to within rounding: a mean is a floating-point sum over a count, and sums
    added in another order (another grouping, another shuffle) may differ in the last bit."""
    def key(r: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in r.items() if not isinstance(v, float)}, sort_keys=True, default=str)

    def same(x: dict[str, Any], y: dict[str, Any]) -> bool:
        return x.keys() == y.keys() and all(
            math.isclose(v, y[k], rel_tol=1e-12) if isinstance(v, float) and isinstance(y[k], float) else v == y[k]
            for k, v in x.items()
        )

    return len(a) == len(b) and all(same(x, y) for x, y in zip(sorted(a, key=key), sorted(b, key=key), strict=True))


def test_v2_schema_file_accepts_the_documented_example_and_the_test_events() -> None:
    import re

    import jsonschema

    root = Path(__file__).resolve().parents[2]
    validator = jsonschema.Draft202012Validator(json.loads((root / "audit/schema-v2.json").read_text()))
    doc = (root / "docs/audit-events.md").read_text(encoding="utf-8")
    example = json.loads(re.search(r"```json\n(.*?)\n```", doc, re.S).group(1))  # type: ignore[union-attr]
    assert sum(n for _, n in example["latency_buckets"]) == example["latency_count"]
    assert all(buckets.bucket_index(example[k]) in {b for b, _ in example["latency_buckets"]}
               for k in ("latency_min_ms", "latency_max_ms"))
    for event in [example, summary(0), summary(0, acks_sent=0, error_code=None, latencies_ms=[]),
                  readiness(1, False, 1), isr_change_v2(2, 2)]:
        assert list(validator.iter_errors(event)) == [], event
    broken = {**summary(0), "latency_buckets": [[102, 1]]}
    assert list(validator.iter_errors(broken))
