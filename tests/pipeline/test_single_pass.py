"""The report's one pass: its aggregate gives the same tables as the events one by one, including the
cases it handles with a second look (interleaved ISR observations, a wrong span estimate)."""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from insync_proxy.pipeline import report, single_pass, sources, tables
from insync_proxy.pipeline.report import _collect
from insync_proxy.pipeline.schema import observations, parse_audit_events, summaries, valid_events
from insync_proxy.pipeline.spark_env import Progress

from . import reference
from .events import decision, isr_change, readiness, summary, ts, write_jsonl


def _run(spark: SparkSession, tmp_path: Path, events: Sequence[dict[str, Any] | str]) -> tuple[report.ReportResult, str]:
    write_jsonl(tmp_path / "audit" / "audit-a.jsonl", events)
    stream = io.StringIO()
    result = report.run_report(spark, [str(tmp_path / "audit")], tmp_path / "out", progress=Progress(stream=stream))
    return result, stream.getvalue()


def _one_by_one(spark: SparkSession, events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The intervals from every observation, in time order (no aggregation)."""
    df = valid_events(parse_audit_events(spark.createDataFrame([(json.dumps(e),) for e in events], "value string")))
    return _intervals(_collect(reference.isr_below_min_intervals(observations(df))))


def _intervals(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["partition"], r["start"], r["end"], r["min_isr"], r["lowest_isr"], r["open"], r["observations"],
                   tuple(r["proxies"])) for r in rows)


def test_intervals_from_granules_equal_those_from_every_observation(spark: SparkSession, tmp_path: Path) -> None:
    # Given partition 0: below for whole minutes (one run per granule, runs across granules merge);
    # partition 1: below then recovered within one minute, and recovered then below within another
    # (ordered granules); partition 2: two sidecars disagreeing within one minute (interleaved) and a
    # below/not-below pair at the very same time (a tie); partition 3: v2 readiness, still unready at
    # the end (open).
    p0 = [isr_change(t, 1) for t in (0, 30, 60, 90, 150)] + [decision(t) for t in (180, 200)]
    p0 += [isr_change(t, 1) for t in (300, 310)] + [decision(t, decision="answered_not_enough_replicas", acks_sent=None,
                                                             isr_size=1) for t in (320, 330)]
    p0 += [decision(400)]
    p1 = [decision(590, partition=1), isr_change(610, 1, partition=1), isr_change(620, 1, partition=1),
          decision(630, partition=1), decision(725, partition=1), isr_change(730, 1, partition=1),
          isr_change(740, 1, partition=1, min_isr=3), decision(900, partition=1)]
    p2 = [isr_change(1200, 1, partition=2), decision(1205, partition=2, proxy_id="sidecar-b"),
          decision(1210, partition=2, isr_size=1), decision(1215, partition=2, proxy_id="sidecar-b"),
          isr_change(1220, 1, partition=2), decision(1300, partition=2)]
    p2 += [isr_change(1500, 1, partition=2), decision(1500, partition=2, proxy_id="sidecar-b"), decision(1600, partition=2)]
    p3 = [readiness(2000, True, 3, partition=3), readiness(2010, False, 1, partition=3),
          readiness(2100, False, 1, partition=3, proxy_id="sidecar-b")]
    events = p0 + p1 + p2 + p3
    # When the report runs
    result, progress = _run(spark, tmp_path, events)
    # Then the intervals are those of the observations one by one, and only the granules that need
    # it (partition 2's) were read again
    got = _intervals(result.tables["isr_below_min_intervals"])
    assert got == _one_by_one(spark, events)
    assert {g[0] for g in got} == {0, 1, 2, 3}
    assert "2 time granule(s) with interleaved ISR observations" in progress, progress
    # One interval over three granules (their runs merge), then one of 4 observations
    assert [g[6] for g in got if g[0] == 0] == [5, 4]


def test_no_second_look_when_no_granule_interleaves(spark: SparkSession, tmp_path: Path) -> None:
    # Given below-min observations in their own minutes only
    events: list[dict[str, Any] | str] = [isr_change(0, 1), isr_change(30, 1), decision(70), isr_change(130, 1),
                                          decision(200)]
    # When the report runs
    result, progress = _run(spark, tmp_path, events)
    # Then the input was read once, and the intervals are right
    assert "interleaved" not in progress
    assert [(r["start"], r["end"], r["observations"]) for r in result.tables["isr_below_min_intervals"]] == [
        (r["start"], r["end"], r["observations"]) for r in sorted(
            result.tables["isr_below_min_intervals"], key=lambda r: r["start"])
    ]
    assert len(result.tables["isr_below_min_intervals"]) == 2


def test_timeline_granule_divides_the_bucket_and_a_wrong_estimate_falls_back(spark: SparkSession,
                                                                              tmp_path: Path) -> None:
    # Given decisions over 2 hours 10 minutes (a 300 s timeline bucket) whose file starts with a
    # rejected line dated a day earlier: the span estimate (26 h) picks a granule too coarse for it
    early = json.loads(json.dumps(decision(-86400)))
    early["decision"] = "made_up"  # invalid: the real span does not include it
    events: list[dict[str, Any] | str] = [json.dumps(early)] + [decision(t) for t in range(0, 7800, 45)]
    assert single_pass.timeline_granule(_span_lower_bound([str(write_jsonl(tmp_path / "x.jsonl", events))])) > 300
    # When the report runs
    result, progress = _run(spark, tmp_path, events)
    # Then it noticed and counted the timeline from the events: every request in its 300 s bucket
    assert "do not divide" in progress
    assert result.summary["timeline_bucket_seconds"] == 300
    timeline = {(r["bucket_start"], r["decision"]): r["requests"] for r in result.tables["decisions_timeline"]}
    df = valid_events(parse_audit_events(spark.createDataFrame([(json.dumps(e),) for e in events[1:]], "value string")))
    expected = {(r["bucket_start"], r["decision"]): r["requests"]
                for r in _collect(tables.decisions_timeline(summaries(df), 300))}
    assert timeline == expected and sum(timeline.values()) == len(events) - 1


def test_timeline_granule_is_the_bucket_of_the_span_lower_bound() -> None:
    assert single_pass.timeline_granule(None) == 1
    assert single_pass.timeline_granule(0) == 1
    assert single_pass.timeline_granule(2 * 86400) == tables.timeline_bucket_seconds(2 * 86400) == 3600
    # Every longer span's bucket is a multiple of it (the buckets form a chain of multiples).
    for span in (10, 100, 1000, 7200, 86400):
        granule = single_pass.timeline_granule(span)
        assert all(tables.timeline_bucket_seconds(longer) % granule == 0 for longer in (span, span * 3, span * 100))


def _span_lower_bound(files: list[str]) -> float | None:
    """The span the report's timeline granule is picked from: latest minus earliest sampled time."""
    times = sources.sample_times(files)
    return max(times) - min(times) if len(times) >= 2 else None


def test_span_lower_bound_from_first_and_last_lines(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [decision(0), decision(5), decision(60)])
    b = write_jsonl(tmp_path / "b.jsonl", ["not json", decision(100), "{}"])  # no time on its first and last lines
    gz = tmp_path / "c.jsonl.gz"
    gz.write_bytes(gzip.compress((json.dumps(decision(-1000)) + "\n").encode()))  # compressed: not looked at
    assert _span_lower_bound([str(a)]) == 60.0
    assert _span_lower_bound([str(a), str(b), str(gz)]) == 60.0
    assert _span_lower_bound([str(b)]) is None
    assert _span_lower_bound(["hdfs://nn/audit/x.jsonl"]) is None
    assert ts(0) in a.read_text()


def test_a_rejected_line_read_twice_is_written_twice(spark: SparkSession, tmp_path: Path) -> None:
    # Given the same bad line twice and one valid event
    events: list[dict[str, Any] | str] = ["{broken", decision(0), "{broken"]
    # When the report runs
    result, _ = _run(spark, tmp_path, events)
    # Then both copies are in rejected/, with their reason and source
    lines = [json.loads(line) for f in sorted((tmp_path / "out" / "rejected").glob("*.json"))
             for line in f.read_text().splitlines() if line]
    assert [(r["reason"], r["line"]) for r in lines] == [("bad_json", "{broken")] * 2
    assert all(r["source"].endswith("audit-a.jsonl") for r in lines)
    assert result.counts["rejected"] == 2 and result.rejected_by_reason == {"bad_json": 2}


def _mixed_traffic() -> list[dict[str, Any] | str]:
    """v1 decisions and v2 summaries over two dates and several keys: proxy-answered (acks_sent null),
    acks=0 (no latency), broker errors, several sidecars and clients on one key, a rejected line."""
    events: list[dict[str, Any] | str] = [decision(t, latency_ms=float(t % 7) + 0.5) for t in range(0, 40, 3)]
    events += [decision(5, decision="answered_not_enough_replicas", acks_sent=None, isr_size=1, client_id="b"),
               decision(6, acks_requested=0, acks_sent=0, latency_ms=None, partition=1),
               decision(86_400 + 7, partition=2, acks_requested=1, acks_sent=1, latency_ms=900.0)]
    events += [summary(t, latencies_ms=[1.0, 2.5, 40.0] * 3 + [0.001], requests=10) for t in (100, 110)]
    events += [summary(120, proxy_id="sidecar-b", client_id="c", error_code=19, latencies_ms=[3.0] * 10),
               summary(130, acks_requested=0, acks_sent=0, latencies_ms=[], partition=1, records=5),
               summary(86_400 + 50, decision="raised_by_floor", acks_requested=1, acks_sent=-1, partition=2,
                       latencies_ms=[400_000.0] * 10)]
    return [*events, "not json"]


def _parsed(spark: SparkSession, events: Sequence[dict[str, Any] | str]) -> Any:
    lines = [(e if isinstance(e, str) else json.dumps(e),) for e in events]
    return parse_audit_events(spark.createDataFrame(lines, "value string"))


def _one_pass_and_reference(spark: SparkSession, cut: Callable[[Any], Any],
                            reference_of: Callable[[Any], list[dict[str, Any]]],
                            keys: Sequence[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(what `cut` makes of the one pass's aggregate, what `reference_of` makes of the events one by one),
    both sorted by `keys`, for the mixed traffic."""
    parsed = _parsed(spark, _mixed_traffic())
    got = _collect(cut(single_pass.aggregate(parsed)))
    expected = reference_of(summaries(valid_events(parsed)))

    def key(r: dict[str, Any]) -> tuple[str, ...]:
        return tuple(str(r[k]) for k in keys)

    return sorted(got, key=key), sorted(expected, key=key)


def test_cube_equals_the_summaries_summed_one_by_one(spark: SparkSession) -> None:
    # Given v1 and v2 traffic of many keys, and a rejected line; When the one pass's aggregate is cut
    # into the traffic cube; Then it is the normalised events summed per key, one by one
    got, expected = _one_pass_and_reference(spark, single_pass.cube, reference.traffic_cube, reference.CUBE_KEYS)
    assert len(expected) >= 6  # forwarded, answered, acks=0, a broker error, raised by floor, a second date
    assert got == expected


def test_histograms_equal_the_buckets_merged_one_by_one(spark: SparkSession) -> None:
    # Given v1 latencies and v2 bucket histograms (bucket 0, the overflow bucket, acks=0 without latency)
    # When the one pass's aggregate is cut into histograms
    got, expected = _one_pass_and_reference(spark, single_pass.histograms, reference.latency_histograms,
                                            tables.LATENCY_KEYS)
    # Then they are the summaries' buckets added bucket by bucket per key; count, sum, min, max alike
    assert len(expected) >= 3 and any(b["bucket"] == 0 for r in expected for b in r["hist"])
    assert [{k: v for k, v in r.items() if k != "latency_sum_ms"} for r in got] == \
        [{k: v for k, v in r.items() if k != "latency_sum_ms"} for r in expected]
    # sums in another order may differ in the last bit
    assert [r["latency_sum_ms"] for r in got] == pytest.approx([r["latency_sum_ms"] for r in expected], rel=1e-12)
