"""Streaming mode over Spark's file source: the same parse step and the 1-minute window aggregates."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from insync_proxy.audit.buckets import RELATIVE_ERROR
from insync_proxy.cli import build_parser, stream_options
from insync_proxy.pipeline.report import _collect, run_report
from insync_proxy.pipeline.spark_env import Progress
from insync_proxy.pipeline.stream import run_stream, start_streams, stream_audit_files

from .events import at, decision, readiness, summary, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_stream_run_over_a_directory_of_v2_summaries_closes_the_last_window(spark: SparkSession, tmp_path: Path) -> None:
    # Given minute 0: two sidecars' summaries of orders-0 (10 requests at 1 ms, 5 at 100 ms); minute 1:
    # acks=1 traffic; readiness events (no traffic); and nothing after that: the end of input closes minute 1
    evs: list[dict[str, Any] | str] = [
        summary(0, requests=10, records=20, record_bytes=1000, latencies_ms=[1.0] * 10),
        summary(10, proxy_id="sidecar-b", requests=5, records=5, record_bytes=50, latencies_ms=[100.0] * 5),
        readiness(20, False, 1), readiness(30, True, 3),
        summary(60, acks_requested=1, acks_sent=1, requests=3, records=3, record_bytes=30, latencies_ms=[2.0] * 3),
    ]
    write_jsonl(tmp_path / "in" / "audit-sidecar-a-20261121T070000Z.jsonl", evs)
    # When the stream command's run processes the directory (available-now), in this test's Spark session (the
    # command itself, in its own process, is the docs' command's test below)
    options = stream_options(build_parser().parse_args(
        ["stream", "--input-dir", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--checkpoint",
         str(tmp_path / "ckpt"), "--watermark", "1 minute", "--available-now"]))
    assert run_stream(spark, stream_audit_files(spark, str(options.input_dir)), options, Progress(enabled=False)) == 0
    # Then both closed windows hold the summed summaries and percentiles from the merged buckets
    rows = {(r["window_start"], r["decision"]): r for r in _collect(spark.read.parquet(str(tmp_path / "out" / "windows")))}
    assert set(rows) == {(at(0), "forwarded"), (at(60), "forwarded")}
    first = rows[(at(0), "forwarded")]
    assert (first["requests"], first["records"], first["record_bytes"], first["latency_n"]) == (15, 25, 1050, 15)
    assert 1.0 <= first["latency_p50_ms"] <= 1.0 * (1 + RELATIVE_ERROR)
    assert 100.0 <= first["latency_p99_ms"] <= 100.0 * (1 + RELATIVE_ERROR) and first["latency_max_ms"] == 100.0
    assert rows[(at(60), "forwarded")]["exposed_bytes"] == 30


def _docs_stream_command(**paths: str) -> list[str]:
    """docs/pipeline.md's `insync-proxy stream --input-dir ... --available-now` command, its paths replaced (run
    as `python -m insync_proxy`, the same command line, with this interpreter)."""
    docs = (ROOT / "docs" / "pipeline.md").read_text()
    line = next(x for x in docs.splitlines() if re.match(r"insync-proxy stream --input-dir", x))
    argv = shlex.split(line)
    for option, value in paths.items():
        argv[argv.index(f"--{option.replace('_', '-')}") + 1] = value
    return [sys.executable, "-m", "insync_proxy", *argv[1:]]


def test_available_now_over_a_finished_run_equals_the_batch_report(spark: SparkSession, tmp_path: Path) -> None:
    # Given a finished 150 s run: two sidecars' v2 summaries (acks all and 1, proxy answers), v1 decisions
    # of an older sidecar, readiness events, a bad line, and nothing after the last interval
    evs: list[dict[str, Any] | str] = []
    for i in range(15):
        t = 5 + 10 * i
        for proxy in ("sidecar-a", "sidecar-b"):
            evs.append(summary(t, proxy_id=proxy, requests=10 + i, records=20 + i, record_bytes=1000 + i,
                               latencies_ms=[1.0 + i] * (10 + i)))
            evs.append(summary(t, proxy_id=proxy, topic="audit", partition=i % 3, acks_requested=1, acks_sent=1,
                               requests=3, records=3, record_bytes=30, latencies_ms=[2.0] * 3))
        if i % 4 == 0:
            evs.append(summary(t, decision="answered_not_enough_replicas", acks_sent=None, error_code=19,
                               requests=2, records=2, record_bytes=20, latencies_ms=[0.1] * 2))
        evs.append(decision(t + 1, proxy_id="sidecar-v1", partition=1, latency_ms=3.0))
        evs.append(readiness(t, i % 5 != 0, 2))
    evs.append("{not json")
    write_jsonl(tmp_path / "in" / "audit-sidecar-a-20261121T070000Z.jsonl", evs)
    # When the docs' streaming command processes it (default watermark, available-now) ...
    command = _docs_stream_command(input_dir=str(tmp_path / "in"), output=str(tmp_path / "out"),
                                   checkpoint=str(tmp_path / "ckpt"))
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # ... and the batch report runs over the same files
    report = run_report(spark, [str(tmp_path / "in")], tmp_path / "report", progress=Progress(enabled=False))

    # Then the windows, summed per date, topic, partition and decision, equal the report's tables
    windows = _collect(spark.read.parquet(str(tmp_path / "out" / "windows")))
    streamed: dict[tuple[Any, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for w in windows:
        for c in ("requests", "records", "record_bytes"):
            streamed[(w["date"], w["topic"], w["partition"], w["decision"])][c] += w[c] or 0
    batch = {(r["date"], r["topic"], r["partition"], r["decision"]): {c: r[c] or 0 for c in ("requests", "records",
                                                                                          "record_bytes")}
             for r in report.tables["decisions_by_kind"]}
    assert {k: dict(v) for k, v in streamed.items()} == batch
    per_partition: dict[tuple[Any, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for w in windows:
        key = (w["date"], w["topic"], w["partition"])
        for c in ("exposed_bytes", "proxy_answered", "latency_n"):
            per_partition[key][c] += w[c]
    expected: dict[tuple[Any, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in report.tables["durability_exposure"]:
        expected[(r["date"], r["topic"], r["partition"])]["exposed_bytes"] += r["bytes_acks_0"] + r["bytes_acks_1"]
    for r in report.tables["partition_traffic"]:
        expected[(r["date"], r["topic"], r["partition"])]["proxy_answered"] += r["answered_by_proxy_requests"]
    for r in report.tables["latency_by_acks"]:
        expected[(r["date"], r["topic"], r["partition"])]["latency_n"] += r["requests"]
    assert {k: dict(v) for k, v in per_partition.items()} == {k: dict(v) for k, v in expected.items()}
    # And every minute of the run is there, the last one (closed by the end of input) included
    assert {w["window_start"] for w in windows} == {at(60 * m) for m in range(3)}
    # And the rejected lines and the progress lines agree with the report's accounting
    rejected = spark.read.json(str(tmp_path / "out" / "rejected")).collect()
    assert len(rejected) == report.counts["rejected"] == 1
    assert f"read {report.counts['lines']:,} audit lines" in proc.stderr and ": 1 rejected," in proc.stderr
    assert f"wrote {len(windows):,} window rows" in proc.stderr and "no window left open" in proc.stderr
    assert "WARN" not in proc.stderr, proc.stderr[-3000:]  # Spark's own log stays in its log file
