"""Audit lines that do not match schema v1 are counted and set aside with a reason, never dropped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from insync_proxy.pipeline import schema
from insync_proxy.pipeline.schema import parse_audit_events, read_audit_json, rejected_events, valid_events

from .events import decision, isr_change, isr_change_v2, readiness, summary, write_jsonl


def _parse(spark: SparkSession, lines: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    df = spark.createDataFrame([(line, f"test:{i}") for i, line in enumerate(lines)], "value string, source string")
    parsed = parse_audit_events(df, source_col="source").cache()
    valid = [r.asDict() for r in valid_events(parsed).collect()]
    rejected = [r.asDict() for r in rejected_events(parsed).collect()]
    return valid, rejected


def _with(**changes: Any) -> str:
    event = decision(1.0)
    for key, value in changes.items():
        if value is _DROP:
            del event[key]
        else:
            event[key] = value
    return json.dumps(event)


_DROP = object()


def test_each_malformed_line_is_rejected_with_its_reason(spark: SparkSession) -> None:
    # Given one valid line of each kind and one line per way of breaking the schema
    cases = {
        "bad_json": "{not json",
        "empty_line": "   ",
        "unknown_schema_version": _with(schema_version=3),
        "missing_field:topic": _with(topic=_DROP),
        "missing_field:isr_size": _with(isr_size=_DROP),
        "missing_field:ts": _with(ts=None),
        "wrong_type:partition": _with(partition="3"),
        "wrong_type:latency_ms": _with(latency_ms="fast"),
        "wrong_type:acks_sent": _with(acks_sent=1.5),
        "unknown_event": _with(event="leader_change"),
        "invalid_value:ts": _with(ts="yesterday"),
        "invalid_value:partition": _with(partition=-1),
        "invalid_value:decision": _with(decision="dropped"),
        "invalid_value:record_bytes": _with(record_bytes=-5),
    }
    good = [json.dumps(decision(0.0)), json.dumps(isr_change(0.5, None)), _with(isr_size=None, extra_field="ignored")]
    # When parsed
    valid, rejected = _parse(spark, good + list(cases.values()) + ["[1, 2]"])
    # Then every valid line is kept (unknown fields ignored, a null ISR is allowed) ...
    assert len(valid) == 3
    # ... and every broken line is rejected exactly once with the expected reason and its raw text.
    reasons = sorted(r["reason"] for r in rejected)
    assert reasons == sorted([*cases, "bad_json"])
    by_reason = {r["reason"]: r for r in rejected if r["reason"] != "bad_json"}
    for reason, line in cases.items():
        if reason != "bad_json":
            assert by_reason[reason]["line"] == line
            assert by_reason[reason]["source"].startswith("test:")


def test_valid_events_are_typed_and_dated_in_utc(spark: SparkSession) -> None:
    # Given an event just before midnight UTC
    event = decision(0.0)
    event["ts"] = "2026-11-21T23:59:59.999999Z"
    # When parsed
    valid, rejected = _parse(spark, [json.dumps(event)])
    # Then its date is the UTC date and the values keep their types
    assert rejected == []
    (row,) = valid
    assert str(row["date"]) == "2026-11-21"
    assert row["partition"] == 0 and row["record_bytes"] == 100 and row["latency_ms"] == 5.0


def test_file_reader_path_gives_the_same_reasons(spark: SparkSession, tmp_path: Path) -> None:
    # Given a file with a valid line and lines broken in different ways
    lines = [json.dumps(decision(0.0)), "{not json", _with(partition="3"), _with(topic=None),
             _with(schema_version=3), _with(event="leader_change"), _with(ts="yesterday")]
    write_jsonl(tmp_path / "audit.jsonl", lines)
    # When read with Spark's JSON file reader (the batch report's path)
    parsed = read_audit_json(spark, [str(tmp_path / "audit.jsonl")]).cache()
    # Then the reasons match the line-by-line parser's
    reasons = sorted(r["reason"] for r in rejected_events(parsed).collect())
    assert reasons == sorted(["bad_json", "wrong_type:partition", "missing_field:topic", "unknown_schema_version",
                              "unknown_event", "invalid_value:ts"])
    assert valid_events(parsed).count() == 1


def _v2(**changes: Any) -> str:
    event = summary(0.0, requests=3, latencies_ms=[1.0, 2.0, 40.0])
    for key, value in changes.items():
        if value is _DROP:
            del event[key]
        else:
            event[key] = value
    return json.dumps(event)


def test_v2_lines_are_validated_on_both_parse_paths(spark: SparkSession, tmp_path: Path) -> None:
    # Given valid v2 lines of each kind and v2 lines broken in the ways v2 adds
    good = [_v2(), json.dumps(readiness(1.0, False, 1)), json.dumps(isr_change_v2(2.0, 2)),
            _v2(acks_sent=None, error_code=None, extra="ignored")]
    cases = {
        "missing_field:requests": _v2(requests=_DROP),
        "missing_field:latency_buckets": _v2(latency_buckets=None),
        "missing_field:ready": json.dumps({**readiness(1.0, True, 3), "ready": None}),
        "wrong_type:latency_buckets": _v2(latency_buckets="1:3"),
        "wrong_type:records": _v2(records="many"),
        "invalid_value:latency_buckets": _v2(latency_buckets=[[10, 1]]),  # counts 1, latency_count 3
        "invalid_value:interval_start": _v2(interval_start="noon"),
        "invalid_value:records": _v2(records=-1),
        "invalid_value:latency_count": _v2(latency_count=4, latency_buckets=[[10, 4]]),  # more than requests
        "unknown_event": json.dumps({**json.loads(_v2()), "schema_version": 1}),  # v1 has no summaries
    }
    # When parsed line by line (Kafka, streams) and by the file reader (batch)
    valid, rejected = _parse(spark, good + list(cases.values()))
    write_jsonl(tmp_path / "v2.jsonl", good + list(cases.values()))
    parsed = read_audit_json(spark, [str(tmp_path / "v2.jsonl")]).cache()
    file_reasons = sorted(r["reason"] for r in rejected_events(parsed).collect())
    # Then the valid lines are kept and each broken one is rejected with its reason, on both paths
    assert len(valid) == len(good) == valid_events(parsed).count()
    assert sorted(r["reason"] for r in rejected) == sorted(cases) == file_reasons
    by_reason = {r["reason"]: r["line"] for r in rejected}
    assert all(by_reason[reason] == line for reason, line in cases.items())


def test_the_validation_is_built_once_and_serves_every_query(spark: SparkSession, tmp_path: Path) -> None:
    # Given two different inputs parsed one after the other in the same JVM
    first = spark.createDataFrame([(json.dumps(decision(0.0)), "a:0"), ("{not json", "a:1")], "value string, source string")
    second = spark.createDataFrame([(_with(partition=-1), "b:0")], "value string, source string")
    parse_audit_events(first, source_col="source")
    built = schema._BUILT[1]
    columns = built["parse:text"]
    # When the second one is parsed, then its query selects the very columns built for the first ...
    parsed = parse_audit_events(second, source_col="source")
    assert built["parse:text"] is columns
    # ... and each query still reads its own lines
    assert [r["reason"] for r in rejected_events(parse_audit_events(first, source_col="source")).collect()] == ["bad_json"]
    assert [(r["reason"], r["source"]) for r in rejected_events(parsed).collect()] == [("invalid_value:partition", "b:0")]
    # And the file reader's layout is built on its own
    write_jsonl(tmp_path / "a.jsonl", [decision(0.0)])
    assert len(valid_events(read_audit_json(spark, [str(tmp_path / "a.jsonl")])).collect()) == 1
    assert built["parse:records"] is not columns
