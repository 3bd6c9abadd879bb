"""Streaming mode over Spark's file source: the same parse step and the 1-minute window aggregates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from insync_proxy.audit.buckets import RELATIVE_ERROR
from insync_proxy.pipeline.report import _collect
from insync_proxy.pipeline.stream import start_streams

from .events import at, decision, readiness, summary, write_jsonl


def test_windowed_aggregates_from_a_stream(spark: SparkSession, tmp_path: Path) -> None:
    # Given minute 0: 3 forwarded (latency 1, 2, 3 ms, 100 B each) and 1 refusal; minute 1: 2 with acks=1;
    # a bad line; and an event 10 minutes later that moves the watermark past both windows.
    evs: list[dict[str, Any] | str] = [decision(t, latency_ms=float(t + 1)) for t in range(3)]
    evs += [decision(30, decision="answered_not_enough_replicas", acks_sent=None, isr_size=1)]
    evs += [decision(60 + t, acks_requested=1, acks_sent=1) for t in range(2)]
    evs += ["not json", decision(600)]
    write_jsonl(tmp_path / "in" / "audit-a.jsonl", evs)
    lines = spark.readStream.schema("value string").text(str(tmp_path / "in")).select(
        "value", F.col("_metadata.file_path").alias("source"))
    # When the streaming job runs over what is there
    queries = start_streams(spark, lines, tmp_path / "out", tmp_path / "ckpt", watermark="1 minute",
                            available_now=True)
    for query in queries:
        query.awaitTermination(120)
        assert query.exception() is None
    # Then the two closed windows are written with their counts, bytes and latency percentiles
    rows = _collect(spark.read.parquet(str(tmp_path / "out" / "windows")))
    got = {(r["window_start"], r["decision"]): r for r in rows}
    assert set(got) == {(at(0), "forwarded"), (at(0), "answered_not_enough_replicas"), (at(60), "forwarded")}
    first = got[(at(0), "forwarded")]
    assert (first["requests"], first["record_bytes"], first["exposed_bytes"], first["latency_n"]) == (3, 300, 0, 3)
    # p50 of 1, 2, 3 ms from the merged buckets: 2 ms's bucket's upper bound (at most +18.9%), max exact
    assert 2.0 <= first["latency_p50_ms"] <= 2.0 * (1 + RELATIVE_ERROR) and first["latency_max_ms"] == 3.0
    assert got[(at(0), "answered_not_enough_replicas")]["below_min_decisions"] == 1
    assert got[(at(60), "forwarded")]["exposed_bytes"] == 200
    rejected = spark.read.json(str(tmp_path / "out" / "rejected")).collect()
    assert [r["reason"] for r in rejected] == ["bad_json"]


def test_stream_command_over_a_directory_of_v2_summaries(spark: SparkSession, tmp_path: Path) -> None:
    # Given minute 0: two sidecars' summaries of orders-0 (10 requests at 1 ms, 5 at 100 ms); minute 1:
    # acks=1 traffic; readiness events (no traffic); and a summary 10 minutes later that moves the watermark
    evs: list[dict[str, Any] | str] = [
        summary(0, requests=10, records=20, record_bytes=1000, latencies_ms=[1.0] * 10),
        summary(10, proxy_id="sidecar-b", requests=5, records=5, record_bytes=50, latencies_ms=[100.0] * 5),
        readiness(20, False, 1), readiness(30, True, 3),
        summary(60, acks_requested=1, acks_sent=1, requests=3, records=3, record_bytes=30, latencies_ms=[2.0] * 3),
        summary(600),
    ]
    write_jsonl(tmp_path / "in" / "audit-sidecar-a-20261121T070000Z.jsonl", evs)
    # When `python -m insync_proxy.pipeline.stream` processes the directory (available-now)
    proc = subprocess.run(
        [sys.executable, "-m", "insync_proxy.pipeline.stream", "--input-dir", str(tmp_path / "in"), "--output",
         str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ckpt"), "--master", "local[1]", "--watermark",
         "1 minute", "--available-now"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Then both closed windows hold the summed summaries and percentiles from the merged buckets
    rows = {(r["window_start"], r["decision"]): r for r in _collect(spark.read.parquet(str(tmp_path / "out" / "windows")))}
    assert set(rows) == {(at(0), "forwarded"), (at(60), "forwarded")}
    first = rows[(at(0), "forwarded")]
    assert (first["requests"], first["records"], first["record_bytes"], first["latency_n"]) == (15, 25, 1050, 15)
    assert 1.0 <= first["latency_p50_ms"] <= 1.0 * (1 + RELATIVE_ERROR)
    assert 100.0 <= first["latency_p99_ms"] <= 100.0 * (1 + RELATIVE_ERROR) and first["latency_max_ms"] == 100.0
    assert rows[(at(60), "forwarded")]["exposed_bytes"] == 30
