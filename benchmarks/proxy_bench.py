"""End-to-end benchmark of the proxy against a direct connection (not a test).

    python benchmarks/proxy_bench.py [--quick]

Starts its own 3-broker KRaft Kafka (devcluster/) and the real proxy as a separate process
(harness/proxy_process.py), runs four sections, prints aligned tables with ratios against a direct
connection to the brokers, writes a JSON summary to bench-results/proxy-bench-<timestamp>.json, and
stops everything, also on Ctrl-C, SIGTERM or an exception. What each number means: docs/performance.md.

1. ProducerPerformance (Apache Kafka's own tool), 1 KiB records, acks=all, RF 3: max throughput and a
   fixed rate's latency percentiles, direct and through the proxy, interleaved A B A B.
2. acks=-2 vs acks=-1 through the proxy (raw pipelined Produce, v12 unless --produce-version), and the round trip of a
   NOT_ENOUGH_REPLICAS the proxy answers itself.
3. Metadata v12 round trips for one 100-partition topic, direct vs through the proxy.
4. The cost of rendering /metrics with 1,000 topics' per-topic series.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a script: the checkout first on sys.path; imported as benchmarks.*, it is there
    sys.path.insert(0, str(ROOT))

from benchmarks.shared import CHILDREN, cpu_meter, cpu_seconds, run_threads, say, write_summary  # noqa: E402
from harness.proxy_process import ProxyProcess  # noqa: E402
from harness.raw_client import RawKafkaClient, batch, produce_request  # noqa: E402
from insync_proxy.client.blocking_client import CORRELATION_ID_OFFSET, BlockingKafkaClient  # noqa: E402
from insync_proxy.client.blocking_client import request_frame as encode_request_frame  # noqa: E402
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster, _die_with_parent  # noqa: E402
from insync_proxy.devcluster.distribution import java_executable  # noqa: E402
from insync_proxy.protocol import (  # noqa: E402
    ApiKey,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceResponse,
    decode_response,
    encode_request,
    split_response,
)
from insync_proxy.protocol.messages import CreatableTopic, MetadataRequestTopic  # noqa: E402

RECORD_SIZE = 1024
NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21

#: The benchmark proxy: one listener group, no debug checks, per-topic labels for 1,000 topics.
PROXY_TOML = "topic_label_limit = 1000\n"

GOALS = {
    "throughput_ratio_min": 0.95,
    "p99_added_ms_max": 1.0,
    "acks_minus2_vs_minus1_within": 0.03,
    "not_enough_replicas_p99_ms_max": 0.2,
    "metadata_p99_added_ms_max": 0.5,
    "scrape_p99_ms_max": 5.0,
}


@dataclass(frozen=True)
class Plan:
    """How long each section runs; `--quick` halves most of it."""

    rounds: int  # A/B rounds of ProducerPerformance and of the raw acks runs
    max_seconds: float  # target duration of one max-throughput run (records sized from the warm-up)
    rate: int  # records/s of the fixed-rate run
    rate_seconds: int
    warmup_records: int
    raw_rounds: int  # interleaved slices of section 2a (direct -1, proxy -1, proxy -2)
    raw_seconds: float
    raw_connections: int
    raw_window: int
    raw_batch_records: int
    ner_requests: int
    metadata_requests: int
    scrape_topics: int
    scrapes: int
    audit_records: int = 1_000_000  # ProducerPerformance records per record size in the audit section


FULL = Plan(rounds=3, max_seconds=20, rate=5000, rate_seconds=20, warmup_records=30_000, raw_rounds=6, raw_seconds=4,
            raw_connections=4, raw_window=4, raw_batch_records=16, ner_requests=2000, metadata_requests=2000,
            scrape_topics=1000, scrapes=200)
QUICK = Plan(rounds=1, max_seconds=8, rate=5000, rate_seconds=8, warmup_records=15_000, raw_rounds=3, raw_seconds=3,
             raw_connections=4, raw_window=4, raw_batch_records=16, ner_requests=1000, metadata_requests=1000,
             scrape_topics=1000, scrapes=200, audit_records=200_000)


# ---------------------------------------------------------------------------------------------- output
def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An aligned text table: text columns left-aligned, numbers right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    numeric = [all(_is_number(row[i]) for row in rows) if rows else False for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric, strict=True))

    out = [f"\n{title}", line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    text = "\n".join(out)
    print(text, flush=True)
    return text


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _cell(v: object) -> str:
    if isinstance(v, float):
        if v != v:  # NaN
            return "-"
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank on the sorted values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def yes(met: bool) -> str:
    return "MET" if met else "NOT MET"


# ---------------------------------------------------------------------------------------------- section 1
PERF_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th"
)
PERF_FIELDS = ("records", "records_per_sec", "mb_per_sec", "avg_ms", "max_ms", "p50_ms", "p95_ms", "p99_ms",
               "p999_ms")

LOG4J2_QUIET = """status = error
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d %p %c: %m%n
rootLogger.level = error
rootLogger.appenderRef.console.ref = STDERR
"""


def parse_perf_summary(output: str) -> dict[str, float]:
    """ProducerPerformance's final summary line (the one with percentiles) as numbers."""
    matches = PERF_SUMMARY.findall(output)
    if not matches:
        raise RuntimeError(f"no ProducerPerformance summary line in its output:\n{output[-2000:]}")
    return {k: float(v) for k, v in zip(PERF_FIELDS, matches[-1], strict=True)}


def producer_performance(libs: Path, work: Path, bootstrap: str, topic: str, records: int, throughput: int,
                         proxy_pid: int | None, record_size: int = RECORD_SIZE) -> dict[str, float]:
    """One run of org.apache.kafka.tools.ProducerPerformance; its summary plus the proxy's CPU seconds."""
    log4j = work / "log4j2-tools.properties"
    if not log4j.exists():
        log4j.write_text(LOG4J2_QUIET)
    cmd = [
        java_executable(), "-Xmx384m", "-XX:+UseSerialGC", f"-Dlog4j2.configurationFile={log4j}",
        "-cp", f"{libs}/*", "org.apache.kafka.tools.ProducerPerformance",
        "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
        "--record-size", str(record_size), "--throughput", str(throughput),
        "--command-property", "acks=all", "client.id=insync-proxy-bench",
    ]
    cpu_before = cpu_seconds(proxy_pid) if proxy_pid else 0.0
    started = time.perf_counter()
    returncode, text = CHILDREN.run(cmd)
    if returncode != 0:
        raise RuntimeError(f"ProducerPerformance exited with {returncode}:\n{text[-2000:]}")
    result = parse_perf_summary(text)
    result["wall_s"] = time.perf_counter() - started
    if proxy_pid:
        result["proxy_cpu_s"] = cpu_seconds(proxy_pid) - cpu_before
    return result


def section_producer_performance(cluster: LocalKafkaCluster, proxy: ProxyProcess, plan: Plan, work: Path,
                                 results: dict[str, Any]) -> None:
    assert cluster.libs is not None and proxy.process is not None
    libs, pid = cluster.libs, proxy.process.pid
    topic = "bench-perf"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    targets = {"direct": cluster.bootstrap_servers, "proxy": proxy.bootstrap()}

    say(f"[1] warm-up: {plan.warmup_records:,} records direct and through the proxy")
    warm = {name: producer_performance(libs, work, bootstrap, topic, plan.warmup_records, -1, pid)
            for name, bootstrap in targets.items()}
    rate = max(warm["direct"]["records_per_sec"], warm["proxy"]["records_per_sec"])
    max_records = int(min(400_000, max(20_000, rate * plan.max_seconds)))
    rate_records = plan.rate * plan.rate_seconds

    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        "max": {"direct": [], "proxy": []}, "fixed": {"direct": [], "proxy": []},
    }
    for r in range(plan.rounds):
        for name in ("direct", "proxy"):
            say(f"[1] round {r + 1}/{plan.rounds}: {name}, max throughput, {max_records:,} records")
            runs["max"][name].append(producer_performance(libs, work, targets[name], topic, max_records, -1, pid))
        for name in ("direct", "proxy"):
            say(f"[1] round {r + 1}/{plan.rounds}: {name}, {plan.rate:,} records/s for {plan.rate_seconds}s")
            runs["fixed"][name].append(
                producer_performance(libs, work, targets[name], topic, rate_records, plan.rate, pid))

    def mean(kind: str, name: str, key: str) -> float:
        return statistics.fmean(run[key] for run in runs[kind][name])

    rows = []
    for kind, label in (("max", "max throughput"), ("fixed", f"{plan.rate:,} rec/s")):
        for name in ("direct", "proxy"):
            for i, run in enumerate(runs[kind][name]):
                cpu = run["proxy_cpu_s"] / run["wall_s"] * 100 if name == "proxy" else float("nan")
                rows.append((label, name, i + 1, run["records_per_sec"], run["mb_per_sec"], run["avg_ms"],
                             run["p50_ms"], run["p99_ms"], run["max_ms"], cpu))
    table("1. ProducerPerformance, 1 KiB records, acks=all, RF 3, 3 partitions (every run)",
          ("run", "path", "#", "records/s", "MB/s", "avg ms", "p50 ms", "p99 ms", "max ms", "proxy CPU %"), rows)

    ratio = mean("max", "proxy", "records_per_sec") / mean("max", "direct", "records_per_sec")
    pair_ratios = [p["records_per_sec"] / d["records_per_sec"]
                   for d, p in zip(runs["max"]["direct"], runs["max"]["proxy"], strict=True)]
    p99_added = mean("fixed", "proxy", "p99_ms") - mean("fixed", "direct", "p99_ms")
    p50_added = mean("fixed", "proxy", "p50_ms") - mean("fixed", "direct", "p50_ms")
    achieved = mean("fixed", "proxy", "records_per_sec")
    proxy_cpu_us_per_record = statistics.fmean(
        run["proxy_cpu_s"] / run["records"] * 1e6 for run in runs["max"]["proxy"])
    table("1. ProducerPerformance summary (means over rounds)", ("measure", "direct", "proxy", "ratio / added",
                                                                 "goal", "result"), [
        ("max records/s", mean("max", "direct", "records_per_sec"), mean("max", "proxy", "records_per_sec"),
         ratio, ">= 0.95", yes(ratio >= GOALS["throughput_ratio_min"])),
        ("max MB/s", mean("max", "direct", "mb_per_sec"), mean("max", "proxy", "mb_per_sec"), ratio, "", ""),
        ("max records/s, median of per-round ratios", "", "", statistics.median(pair_ratios), "", ""),
        (f"p50 ms at {plan.rate:,}/s", mean("fixed", "direct", "p50_ms"), mean("fixed", "proxy", "p50_ms"),
         p50_added, "", ""),
        (f"p99 ms at {plan.rate:,}/s", mean("fixed", "direct", "p99_ms"), mean("fixed", "proxy", "p99_ms"),
         p99_added, "<= +1 ms", yes(p99_added <= GOALS["p99_added_ms_max"])),
        (f"achieved rec/s at {plan.rate:,}/s", mean("fixed", "direct", "records_per_sec"), achieved, "", "", ""),
        ("proxy CPU us/record (max)", "", proxy_cpu_us_per_record, "", "", ""),
    ])
    if achieved < 0.9 * plan.rate:
        say(f"[1] note: the cluster sustained only {achieved:,.0f} of {plan.rate:,} records/s: the fixed-rate "
            "latencies are those of a saturated cluster, not of a steady rate")
    results["producer_performance"] = {
        "topic": {"partitions": 3, "replication_factor": 3}, "record_size": RECORD_SIZE, "acks": "all",
        "max_records": max_records, "fixed_rate": plan.rate, "fixed_seconds": plan.rate_seconds,
        "warmup": warm, "runs": runs, "throughput_ratio": ratio, "throughput_ratio_per_round": pair_ratios,
        "p50_added_ms": p50_added, "p99_added_ms": p99_added,
        "proxy_cpu_us_per_record_max": proxy_cpu_us_per_record,
        "goals": {"throughput_ratio>=0.95": ratio >= GOALS["throughput_ratio_min"],
                  "p99_added_ms<=1": p99_added <= GOALS["p99_added_ms_max"]},
    }


# ---------------------------------------------------------------------------------------------- raw client helpers
def request_frame(api_key: int, version: int, body: bytes, client_id: str = "insync-proxy-bench") -> bytearray:
    """A whole request frame (size prefix included) whose correlation id is patched at CORRELATION_ID_OFFSET."""
    return encode_request_frame(api_key, version, body, client_id=client_id)


#: The Produce version of the raw load: 12 is what Apache Kafka's Java client 4.0 sends (librdkafka 2.x: 7-10,
#: kafka-python: 7-8). Before 2026-11-22 the raw load sent v9, which skipped the proxy's v10+ node_endpoints
#: path (a whole decode of every response until then): `--produce-version 9` measures as before.
PRODUCE_VERSION = 12


def produce_frame(topic: str, partition: int, records: bytes, acks: int) -> bytearray:
    """A Produce frame (PRODUCE_VERSION) of one batch with any acks value."""
    v = PRODUCE_VERSION
    return request_frame(ApiKey.PRODUCE, v, encode_request(produce_request({(topic, partition): records}, acks), v))


def produce_errors(frame: bytes, version: int | None = None) -> list[int]:
    version = PRODUCE_VERSION if version is None else version
    _, body = split_response(frame, ApiKey.PRODUCE, version)
    response = decode_response(ApiKey.PRODUCE, version, body)
    assert isinstance(response, ProduceResponse)
    return [p.error_code for t in response.responses for p in t.partition_responses]


def round_trips(port: int, frame: bytearray, count: int, check: Callable[[bytes], None] | None) -> list[float]:
    """`count` sequential request/response round trips on one persistent connection; seconds each.

    `check` verifies the first responses and the last one (None: an echo server, nothing to verify).
    """
    timings = []
    with BlockingKafkaClient("127.0.0.1", port) as client:
        for i in range(count):
            struct.pack_into(">i", frame, CORRELATION_ID_OFFSET, i + 1)
            t0 = time.perf_counter()
            client.send_bytes(frame)
            response = client.receive_frame()
            timings.append(time.perf_counter() - t0)
            if check is not None and (i < 3 or i == count - 1):
                (correlation_id,) = struct.unpack_from(">i", response, 0)
                assert correlation_id == i + 1, (correlation_id, i + 1)
                check(response)
    return timings


@dataclass
class LoadResult:
    requests: int = 0
    record_bytes: int = 0
    errors: int = 0
    error_codes: set[int] | None = None

    def add_response(self, response: bytes, expected_correlation_id: int, record_bytes: int) -> None:
        """One Produce response of the load: its correlation id checked, then counted as answered (with the
        request's record bytes) or as an error response (with its error codes)."""
        (correlation_id,) = struct.unpack_from(">i", response, 0)
        if correlation_id != expected_correlation_id:
            raise RuntimeError(f"correlation id {correlation_id}, expected {expected_correlation_id}")
        codes = produce_errors(response)
        if any(codes):
            self.errors += 1
            assert self.error_codes is not None
            self.error_codes.update(c for c in codes if c)
        else:
            self.requests += 1
            self.record_bytes += record_bytes


def produce_load(port: int, topic: str, partitions: Sequence[int], acks: int, seconds: float, window: int,
                 batch_records: int) -> dict[str, float]:
    """Pipelined Produce (PRODUCE_VERSION): one thread and connection per partition, `window` requests in flight each."""
    payload = batch(*[bytes([65 + i % 26]) * RECORD_SIZE for i in range(batch_records)])
    stop_at = time.perf_counter() + seconds
    results: list[LoadResult] = []
    failures: list[BaseException] = []

    def worker(partition: int) -> None:
        result = LoadResult(error_codes=set())
        results.append(result)
        try:
            with BlockingKafkaClient("127.0.0.1", port) as client:
                frame = produce_frame(topic, partition, payload, acks)
                sent = received = 0
                while sent < window:
                    sent += 1
                    struct.pack_into(">i", frame, CORRELATION_ID_OFFSET, sent)
                    client.send_bytes(frame)
                while received < sent:
                    received += 1
                    result.add_response(client.receive_frame(), received, len(payload))
                    if time.perf_counter() < stop_at:
                        sent += 1
                        struct.pack_into(">i", frame, CORRELATION_ID_OFFSET, sent)
                        client.send_bytes(frame)
        except BaseException as exc:  # reported by the caller
            failures.append(exc)

    elapsed = run_threads(worker, [(p,) for p in partitions], seconds + 120)
    if failures:
        raise RuntimeError(f"load generator failed: {failures[0]!r}")
    total = sum(r.record_bytes for r in results)
    codes = sorted({c for r in results for c in (r.error_codes or set())})
    return {"seconds": elapsed, "requests": sum(r.requests for r in results), "record_bytes": total,
            "mb_per_sec": total / elapsed / 1e6, "requests_per_sec": sum(r.requests for r in results) / elapsed,
            "error_responses": sum(r.errors for r in results), "error_codes": codes}  # type: ignore[dict-item]


# ---------------------------------------------------------------------------------------------- section 2
def section_acks(cluster: LocalKafkaCluster, proxy: ProxyProcess, plan: Plan, results: dict[str, Any]) -> None:
    assert proxy.process is not None
    pid = proxy.process.pid
    # Every partition led by broker 1 (replicas 1,2,3), so one proxy listener carries the whole load.
    topic = "bench-acks"
    count = plan.raw_connections
    cluster.create_topic(topic, configs={"min.insync.replicas": "2"},
                         assignments={p: [1, 2, 3] if p % 2 == 0 else [1, 3, 2] for p in range(count)})
    leader = 1
    for p in range(count):
        cluster.wait_for_leader(topic, p)
    cluster.wait_for(lambda: all(cluster.leader_of(topic, p) == leader for p in range(count)), 60,
                     f"broker {leader} to lead every partition of {topic}")
    variants = (("direct acks=-1", cluster.brokers[leader].port, -1),
                ("proxy acks=-1", proxy.broker_port(leader), -1),
                ("proxy acks=-2", proxy.broker_port(leader), -2))
    say(f"[2] warm-up: {topic}, acks=-2 and -1 through the proxy")
    for _, port, acks in variants:
        produce_load(port, topic, range(count), acks, 1.5, plan.raw_window, plan.raw_batch_records)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in variants}
    say(f"[2] {plan.raw_rounds} interleaved rounds of {plan.raw_seconds:.0f}s per variant")
    for _ in range(plan.raw_rounds):
        for name, port, acks in variants:
            meter: dict[str, float] = {}
            with cpu_meter(pid, meter):
                run = produce_load(port, topic, range(count), acks, plan.raw_seconds, plan.raw_window,
                                   plan.raw_batch_records)
            run["proxy_cpu_us_per_request"] = meter["cpu_s"] / max(1, run["requests"]) * 1e6
            run["proxy_cpu_percent"] = meter["cpu_s"] / meter["wall_s"] * 100
            runs[name].append(run)

    def mean(name: str, key: str) -> float:
        return statistics.fmean(run[key] for run in runs[name])

    rows = []
    for name, _, _ in variants:
        for i, run in enumerate(runs[name]):
            rows.append((name, i + 1, run["mb_per_sec"], run["requests_per_sec"], run["error_responses"],
                         run["proxy_cpu_percent"] if name.startswith("proxy") else float("nan"),
                         run["proxy_cpu_us_per_request"] if name.startswith("proxy") else float("nan")))
    batch_kib = plan.raw_batch_records * RECORD_SIZE // 1024
    table(f"2a. Produce v{PRODUCE_VERSION} through the proxy, {count} connections x {plan.raw_window} in flight, "
          f"{batch_kib} KiB batches (every run)",
          ("variant", "#", "MB/s", "requests/s", "errors", "proxy CPU %", "proxy CPU us/req"), rows)
    ratio = mean("proxy acks=-2", "mb_per_sec") / mean("proxy acks=-1", "mb_per_sec")
    cpu_ratio = mean("proxy acks=-2", "proxy_cpu_us_per_request") / mean("proxy acks=-1", "proxy_cpu_us_per_request")
    pair_ratios = [b["mb_per_sec"] / a["mb_per_sec"]
                   for a, b in zip(runs["proxy acks=-1"], runs["proxy acks=-2"], strict=True)]
    direct = mean("direct acks=-1", "mb_per_sec")
    table("2a. acks=-2 vs acks=-1 summary (means over rounds)",
          ("measure", "direct -1", "proxy -1", "proxy -2", "-2 / -1", "goal", "result"), [
              ("MB/s", direct, mean("proxy acks=-1", "mb_per_sec"), mean("proxy acks=-2", "mb_per_sec"), ratio,
               "within 3%", yes(abs(1 - ratio) <= GOALS["acks_minus2_vs_minus1_within"])),
              ("proxy CPU us/request", "", mean("proxy acks=-1", "proxy_cpu_us_per_request"),
               mean("proxy acks=-2", "proxy_cpu_us_per_request"), cpu_ratio, "", ""),
              ("MB/s, median of per-round ratios", "", "", "", statistics.median(pair_ratios), "", ""),
              ("proxy -1 / direct -1", "", mean("proxy acks=-1", "mb_per_sec") / direct, "", "", "", ""),
          ])
    errors = sum(run["error_responses"] for rs in runs.values() for run in rs)
    if errors:
        say(f"[2] WARNING: {errors} Produce responses carried errors; their bytes are not counted")
    results["acks"] = {
        "topic": {"partitions": count, "replication_factor": 3, "min.insync.replicas": 2, "leader": leader},
        "batch_bytes": plan.raw_batch_records * RECORD_SIZE, "connections": count, "window": plan.raw_window,
        "runs": runs, "ratio_minus2_over_minus1": ratio, "ratio_per_round": pair_ratios, "cpu_ratio_minus2_over_minus1": cpu_ratio,
        "goals": {"acks=-2 within 3% of acks=-1": abs(1 - ratio) <= GOALS["acks_minus2_vs_minus1_within"]},
    }
    section_not_enough_replicas(cluster, proxy, plan, results)


def section_not_enough_replicas(cluster: LocalKafkaCluster, proxy: ProxyProcess, plan: Plan,
                                results: dict[str, Any]) -> None:
    """Pause a follower of a min.insync.replicas=3 topic; time the proxy's own NOT_ENOUGH_REPLICAS answers."""
    topic, leader, follower = "bench-ner", 1, 3
    cluster.create_topic(topic, configs={"min.insync.replicas": "3"}, assignments={0: [leader, 2, follower]})
    cluster.wait_for_leader(topic, 0)
    # The proxy's control connection starts at the first bootstrap server (broker 1): never pause that one.
    say(f"[2] pausing broker {follower} until the ISR of {topic}-0 shrinks below min.insync.replicas=3")
    cluster.pause_broker(follower)
    try:
        cluster.wait_for_isr(topic, 0, 2, timeout=90)
        cluster.wait_for(lambda: proxy.metric("insync_proxy_partitions_below_min_isr") > 0, 60,
                         "the proxy to see a partition below min ISR")
        frame = produce_frame(topic, 0, batch(b"x" * RECORD_SIZE), -2)

        def check(response: bytes) -> None:
            codes = produce_errors(response)
            if codes != [NOT_ENOUGH_REPLICAS]:
                raise RuntimeError(f"expected NOT_ENOUGH_REPLICAS from the proxy, got {codes}")

        round_trips(proxy.broker_port(leader), frame, 200, check)  # warm-up
        say(f"[2] {plan.ner_requests} acks=-2 round trips answered by the proxy")
        timings = round_trips(proxy.broker_port(leader), frame, plan.ner_requests, check)
        answered = proxy.metric("insync_proxy_proxy_answered_errors_total", topic=topic)
    finally:
        cluster.resume_broker(follower)
    say(f"[2] floor: {plan.ner_requests} round trips of the same frame to a uvloop echo server process")
    floor = echo_floor(frame, plan.ner_requests)
    stats, floor_stats = latency_stats(timings), latency_stats(floor)
    p99 = stats["p99_ms"]
    table("2b. NOT_ENOUGH_REPLICAS answered by the proxy (acks=-2, ISR 2 < min.insync.replicas 3), "
          "1 KiB batch, one request at a time on one connection",
          ("path", "requests", "p50 ms", "p90 ms", "p99 ms", "max ms"),
          [latency_row("proxy answers NOT_ENOUGH_REPLICAS", timings),
           latency_row("floor: uvloop echo process", floor),
           ("proxy - floor", "", stats["p50_ms"] - floor_stats["p50_ms"], stats["p90_ms"] - floor_stats["p90_ms"],
            p99 - floor_stats["p99_ms"], "")])
    table("2b. NOT_ENOUGH_REPLICAS summary", ("measure", "value", "goal", "result"), [
        ("p99 ms (client-observed)", p99, "<= 0.2 ms", yes(p99 <= GOALS["not_enough_replicas_p99_ms_max"])),
        ("p99 ms above the echo floor", p99 - floor_stats["p99_ms"], "", ""),
    ])
    results["not_enough_replicas"] = {
        **stats, "floor_echo": floor_stats, "proxy_answered_counter": answered,
        "goals": {"p99_ms<=0.2": p99 <= GOALS["not_enough_replicas_p99_ms_max"]},
    }
    say(f"[2] broker {follower} resumed; waiting for the ISR of {topic}-0 to recover")
    cluster.wait_for_isr(topic, 0, 3, timeout=120)
    cluster.wait_for(lambda: proxy.metric("insync_proxy_partitions_below_min_isr") == 0, 60,
                     "the proxy to see every ISR recovered")


#: A uvloop echo server in its own process: the floor of a Python round trip on this machine.
ECHO_SERVER = """
import asyncio
try:
    import uvloop
except ImportError:
    uvloop = None

class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)

async def main():
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

(uvloop.run if uvloop else asyncio.run)(main())
"""


def echo_floor(frame: bytearray, count: int) -> list[float]:
    """Round trips of the same frame to a uvloop echo server process (no Kafka logic at all)."""
    proc = subprocess.Popen([sys.executable, "-c", ECHO_SERVER], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            preexec_fn=_die_with_parent)
    CHILDREN.running.add(proc)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        round_trips(port, frame, 200, None)
        return round_trips(port, frame, count, None)
    finally:
        proc.kill()
        proc.wait(10)
        CHILDREN.running.discard(proc)


def latency_row(name: str, seconds: Sequence[float]) -> tuple[object, ...]:
    ms = [t * 1000 for t in seconds]
    return (name, len(ms), pct(ms, 50), pct(ms, 90), pct(ms, 99), max(ms))


def latency_stats(seconds: Sequence[float]) -> dict[str, float]:
    ms = [t * 1000 for t in seconds]
    return {"requests": len(ms), "p50_ms": pct(ms, 50), "p90_ms": pct(ms, 90), "p99_ms": pct(ms, 99),
            "max_ms": max(ms)}


# ---------------------------------------------------------------------------------------------- section 3
def section_metadata(cluster: LocalKafkaCluster, proxy: ProxyProcess, plan: Plan, results: dict[str, Any]) -> None:
    topic, broker = "bench-meta", 1
    cluster.create_topic(topic, partitions=100, replication_factor=3, timeout=120)
    body = encode_request(MetadataRequest(topics=(MetadataRequestTopic(name=topic),),
                                          allow_auto_topic_creation=False), 12)
    frame = request_frame(ApiKey.METADATA, 12, body)

    def check(response: bytes) -> None:
        _, payload = split_response(response, ApiKey.METADATA, 12)
        decoded = decode_response(ApiKey.METADATA, 12, payload)
        assert isinstance(decoded, MetadataResponse)
        [t] = decoded.topics
        if t.error_code != 0 or len(t.partitions) != 100:
            raise RuntimeError(f"Metadata for {topic}: error {t.error_code}, {len(t.partitions)} partitions")

    ports = {"direct": cluster.brokers[broker].port, "proxy": proxy.broker_port(broker)}
    for port in ports.values():  # warm: the proxy's min.insync.replicas cache, the broker's metadata
        round_trips(port, frame, 50, check)
    timings: dict[str, list[float]] = {"direct": [], "proxy": []}
    blocks = 4
    say(f"[3] {plan.metadata_requests} Metadata v12 round trips each, direct and proxy, in {blocks} interleaved "
        "blocks")
    for _ in range(blocks):
        for name, port in ports.items():
            timings[name] += round_trips(port, frame, plan.metadata_requests // blocks, check)
    stats = {name: {"p50_ms": pct([t * 1000 for t in ts], 50), "p90_ms": pct([t * 1000 for t in ts], 90),
                    "p99_ms": pct([t * 1000 for t in ts], 99), "max_ms": max(ts) * 1000, "requests": len(ts)}
             for name, ts in timings.items()}
    added_p99 = stats["proxy"]["p99_ms"] - stats["direct"]["p99_ms"]
    added_p50 = stats["proxy"]["p50_ms"] - stats["direct"]["p50_ms"]
    table(f"3. Metadata v12, one topic of 100 partitions, cache warm, {plan.metadata_requests} sequential round "
          f"trips each (broker {broker}'s listener)",
          ("path", "requests", "p50 ms", "p90 ms", "p99 ms", "max ms"),
          [(name, s["requests"], s["p50_ms"], s["p90_ms"], s["p99_ms"], s["max_ms"]) for name, s in stats.items()]
          + [("proxy - direct", "", added_p50, stats["proxy"]["p90_ms"] - stats["direct"]["p90_ms"], added_p99, "")])
    table("3. Metadata summary", ("measure", "value", "goal", "result"), [
        ("p99 added (ms)", added_p99, "<= 0.5 ms", yes(added_p99 <= GOALS["metadata_p99_added_ms_max"])),
        ("p50 ratio proxy/direct", stats["proxy"]["p50_ms"] / stats["direct"]["p50_ms"], "", ""),
    ])
    results["metadata"] = {
        "topic_partitions": 100, "version": 12, "stats": stats, "p50_added_ms": added_p50, "p99_added_ms": added_p99,
        "goals": {"p99_added_ms<=0.5": added_p99 <= GOALS["metadata_p99_added_ms_max"]},
    }


# ---------------------------------------------------------------------------------------------- section 4
def create_topics(cluster: LocalKafkaCluster, names: Sequence[str], chunk: int = 100) -> None:
    """CreateTopics, many topics per request (1 partition, RF 1); waits until every one has a leader."""
    host, port = cluster.broker_addresses[0]
    with BlockingKafkaClient(host, port, timeout=120, client_id="insync-proxy-bench") as client:
        version = client.highest_common_version(ApiKey.CREATE_TOPICS, (2, 7))
        for i in range(0, len(names), chunk):
            request = CreateTopicsRequest(
                topics=tuple(CreatableTopic(name=name, num_partitions=1, replication_factor=1)
                             for name in names[i:i + chunk]),
                timeout_ms=60000)
            response = client.request(request, version, CreateTopicsResponse)
            failed = {t.name: t.error_code for t in response.topics if t.error_code not in (0, 36)}
            if failed:
                raise RuntimeError(f"CreateTopics failed: {failed}")

    def ready() -> bool:
        info = cluster.metadata(list(names))
        return all(name in info.topics and info.topics[name].error_code == 0
                   and all(p.leader >= 0 for p in info.topics[name].partitions.values()) for name in names)

    cluster.wait_for(ready, 180, f"{len(names)} topics to have leaders")


def scrape_times(proxy: ProxyProcess, count: int) -> tuple[list[float], int, int]:
    """Times `count` GET /metrics (connect to last byte); returns seconds each, body bytes, sample lines."""
    timings, body = [], b""
    for _ in range(count):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"{proxy.admin_url}/metrics", timeout=30) as r:
            body = r.read()
        timings.append(time.perf_counter() - t0)
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return timings, len(body), samples


def section_scrape(cluster: LocalKafkaCluster, proxy: ProxyProcess, plan: Plan, results: dict[str, Any]) -> None:
    say(f"[4] baseline: {plan.scrapes} scrapes before the {plan.scrape_topics} topics")
    base, base_bytes, base_samples = scrape_times(proxy, plan.scrapes)
    names = [f"bench-scrape-{i:04d}" for i in range(plan.scrape_topics)]
    say(f"[4] creating {len(names)} topics (1 partition, RF 1)")
    create_topics(cluster, names)
    info = cluster.metadata(names)
    by_leader: dict[int, list[str]] = {}
    for name in names:
        by_leader.setdefault(info.topics[name].partitions[0].leader, []).append(name)
    # Let the proxy's own refresh learn the topics and their min.insync.replicas, so prechecks pass.
    time.sleep(5)
    say("[4] producing acks=-2 and acks=-1 to every topic through the proxy (per-topic series)")
    payload = batch(b"scrape")
    for leader, topics in by_leader.items():
        with RawKafkaClient(f"127.0.0.1:{proxy.broker_port(leader)}", timeout=60) as client:
            for acks in (-2, -1):
                for i in range(0, len(topics), 100):
                    client.produce({(t, 0): payload for t in topics[i:i + 100]}, acks=acks)
    labels = set(re.findall(r'\btopic="([^"]*)"', proxy.metrics_text())) - {"__overflow__"}
    say(f"[4] {len(labels)} topic label values (limit 1000); {plan.scrapes} scrapes")
    scrape_times(proxy, 10)  # warm
    timings, size, samples = scrape_times(proxy, plan.scrapes)
    stall = loop_stall(proxy, by_leader, plan)
    ms, base_ms = [t * 1000 for t in timings], [t * 1000 for t in base]
    p99 = pct(ms, 99)
    table(f"4. GET /metrics, {plan.scrapes} sequential scrapes (HTTP round trip, full body)",
          ("state", "topics w/ series", "samples", "body KiB", "p50 ms", "p99 ms", "max ms", "goal p99", "result"), [
              ("before", 0, base_samples, base_bytes / 1024, pct(base_ms, 50), pct(base_ms, 99), max(base_ms), "", ""),
              (f"{len(labels)} topics", len(labels), samples, size / 1024, pct(ms, 50), p99, max(ms), "< 5 ms",
               yes(p99 < GOALS["scrape_p99_ms_max"])),
          ])
    results["scrape"] = {
        "topics_with_series": len(labels), "samples": samples, "body_bytes": size, "scrapes": len(ms),
        "p50_ms": pct(ms, 50), "p99_ms": p99, "max_ms": max(ms),
        "baseline": {"samples": base_samples, "body_bytes": base_bytes, "p50_ms": pct(base_ms, 50),
                     "p99_ms": pct(base_ms, 99)},
        "loop_stall": stall, "goals": {"p99_ms<5": p99 < GOALS["scrape_p99_ms_max"]},
    }


def loop_stall(proxy: ProxyProcess, by_leader: dict[int, list[str]], plan: Plan) -> dict[str, Any]:
    """What a scrape costs the clients: proxy-answered round trips (acks=3 -> INVALID_REQUIRED_ACKS, no
    broker involved), alone and while another thread scrapes /metrics back to back."""
    leader, topics = next(iter(sorted(by_leader.items())))
    port = proxy.broker_port(leader)
    frame = produce_frame(topics[0], 0, batch(b"x" * RECORD_SIZE), 3)

    def check(response: bytes) -> None:
        if produce_errors(response) != [INVALID_REQUIRED_ACKS]:
            raise RuntimeError(f"expected INVALID_REQUIRED_ACKS, got {produce_errors(response)}")

    count = plan.ner_requests
    round_trips(port, frame, 200, check)
    alone = round_trips(port, frame, count, check)
    stop, scrapes = threading.Event(), [0]

    def scraper() -> None:
        while not stop.is_set():
            scrape_times(proxy, 1)
            scrapes[0] += 1

    thread = threading.Thread(target=scraper, daemon=True)
    thread.start()
    try:
        during = round_trips(port, frame, count, check)
    finally:
        stop.set()
        thread.join(60)
    table("4. What scrapes cost clients: proxy-answered Produce round trips (acks=3, INVALID_REQUIRED_ACKS)",
          ("while", "requests", "p50 ms", "p90 ms", "p99 ms", "max ms"),
          [latency_row("no scrape", alone), latency_row(f"scraping back to back ({scrapes[0]} scrapes)", during)])
    return {"no_scrape": latency_stats(alone), "while_scraping": latency_stats(during), "scrapes": scrapes[0]}


# ---------------------------------------------------------------------------------------------- main
# ---------------------------------------------------------------------------------------------- section 6
AUDIT_PARTITIONS = 6


def audit_summaries(audit_dir: Path, topic: str) -> list[dict[str, Any]]:
    """The produce_summary events of one topic in an audit directory."""
    events = []
    for path in sorted(audit_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                event = json.loads(line)
                if event.get("event") == "produce_summary" and event.get("topic") == topic:
                    events.append(event)
    return events


def audit_bytes(audit_dir: Path) -> int:
    return sum(p.stat().st_size for p in audit_dir.glob("*.jsonl"))


def log_end_offsets(bootstrap: str, topic: str, partitions: Sequence[int]) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "insync-proxy-bench-leo"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    finally:
        consumer.close()


def section_audit(cluster: LocalKafkaCluster, plan: Plan, work: Path, results: dict[str, Any]) -> None:
    """Audit v2: its volume against the produce volume, its exactness, and its CPU cost per request."""
    assert cluster.libs is not None
    on = ProxyProcess(cluster, extra_toml=PROXY_TOML, groups=("default",), debug_checks=False,
                      audit_interval_seconds=10).start()
    off = ProxyProcess(cluster, extra_toml=PROXY_TOML, groups=("default",), debug_checks=False,
                       audit_enabled=False).start()
    try:
        assert on.process is not None and off.process is not None
        volume_rows, volume = [], {}
        for size in (1024, 100):
            topic = f"bench-audit-{size}"
            cluster.create_topic(topic, AUDIT_PARTITIONS, 3)
            for p in range(AUDIT_PARTITIONS):
                cluster.wait_for_leader(topic, p)
            before = audit_bytes(on.audit_dir)
            say(f"[6] ProducerPerformance: {plan.audit_records} records of {size} B through the audited proxy")
            run = producer_performance(cluster.libs, work, on.bootstrap(), topic, plan.audit_records, -1,
                                       on.process.pid, record_size=size)
            counted = on.metric("insync_proxy_produce_partitions_total", topic=topic)
            # The last interval is written when it ends (10 s): wait until the summaries hold every request.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and \
                    sum(e["requests"] for e in audit_summaries(on.audit_dir, topic)) < counted:
                time.sleep(0.5)
            summaries = audit_summaries(on.audit_dir, topic)
            written = audit_bytes(on.audit_dir) - before
            produced = plan.audit_records * size
            per_partition: dict[int, list[int]] = {}
            for e in summaries:
                acc = per_partition.setdefault(e["partition"], [0, 0, 0])
                acc[0] += e["requests"]
                acc[1] += e["records"]
                acc[2] += e["record_bytes"]
            leo = log_end_offsets(cluster.bootstrap_servers, topic, range(AUDIT_PARTITIONS))
            exact = (
                sum(a[0] for a in per_partition.values()) == counted
                and sum(a[1] for a in per_partition.values()) == on.metric("insync_proxy_produce_records_total",
                                                                           topic=topic) == plan.audit_records
                and sum(a[2] for a in per_partition.values()) == on.metric("insync_proxy_produce_record_bytes_total",
                                                                           topic=topic)
                and {p: a[1] for p, a in per_partition.items()} == {p: n for p, n in leo.items() if n}
            )
            ratio = written / produced
            volume_rows.append((f"{size} B", plan.audit_records, produced / 1e6, run["mb_per_sec"], written / 1e3,
                                len(summaries), ratio * 100, "<= 0.1 %", yes(ratio <= 0.001), yes(exact)))
            volume[size] = {"records": plan.audit_records, "produce_bytes": produced, "audit_bytes": written,
                            "summaries": len(summaries), "ratio": ratio, "exact": exact, "requests": counted,
                            "per_partition": per_partition, "log_end_offsets": leo, "run": run}
        table("6a. Audit volume: ProducerPerformance (acks=all, 6 partitions) through the proxy, audit v2 at 10 s",
              ("records", "count", "produce MB", "MB/s", "audit KB", "summaries", "audit/produce %", "goal",
               "result", "summaries = metrics = log end offsets"), volume_rows)

        # 6b: CPU per forwarded 16 KiB Produce, audit on vs off. Paired rounds: both proxies carry the same load
        # at the same time, so whatever else the machine does weighs on both alike; the ratio is taken per round.
        topic = "bench-audit-cpu"
        count = plan.raw_connections
        cluster.create_topic(topic, assignments={p: [1, 2, 3] if p % 2 == 0 else [1, 3, 2] for p in range(count)})
        cluster.wait_for(lambda: all(cluster.leader_of(topic, p) == 1 for p in range(count)), 60,
                         f"broker 1 to lead every partition of {topic}")
        variants = (("audit on", on), ("audit off", off))
        for _, proxy in variants:
            produce_load(proxy.broker_port(1), topic, range(count), -1, 1.5, plan.raw_window, plan.raw_batch_records)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
        rounds = max(plan.raw_rounds, 5)
        say(f"[6] {rounds} paired rounds of {plan.raw_seconds:.0f}s, audit on and off side by side")
        for _ in range(rounds):
            for name, run in paired_produce_load(variants, topic, count, plan).items():
                runs[name].append(run)
        ratios = sorted(on_run["proxy_cpu_us_per_request"] / off_run["proxy_cpu_us_per_request"]
                        for on_run, off_run in zip(runs["audit on"], runs["audit off"], strict=True))
        cpu = {name: statistics.median(r["proxy_cpu_us_per_request"] for r in rs) for name, rs in runs.items()}
        mbps = {name: statistics.median(r["mb_per_sec"] for r in rs) for name, rs in runs.items()}
        cpu_ratio = statistics.median(ratios)
        table(f"6b. Proxy CPU per forwarded {plan.raw_batch_records * RECORD_SIZE // 1024} KiB Produce (acks=-1), "
              f"{count} connections x {plan.raw_window} in flight per proxy, both proxies loaded at once "
              f"(medians of {rounds} paired rounds)",
              ("variant", "MB/s", "proxy CPU us/req", "on / off (median of rounds)", "min - max", "goal", "result"), [
                  ("audit on", mbps["audit on"], cpu["audit on"], cpu_ratio, f"{ratios[0]:.3f} - {ratios[-1]:.3f}",
                   "<= 1.10", yes(cpu_ratio <= 1.10)),
                  ("audit off", mbps["audit off"], cpu["audit off"], "", "", "", ""),
              ])
        results["audit"] = {"volume": volume, "cpu_runs": runs, "cpu_us_per_request": cpu, "cpu_ratio_on_off": cpu_ratio,
                            "cpu_ratios_per_round": ratios,
                            "goals": {"audit <= 0.1% of produce bytes": all(v["ratio"] <= 0.001 for v in volume.values()),
                                      "audit CPU within 10%": cpu_ratio <= 1.10,
                                      "summaries exact": all(v["exact"] for v in volume.values())}}
    finally:
        for proxy in (on, off):
            proxy.stop()
            shutil.rmtree(proxy.dir, ignore_errors=True)


def paired_produce_load(variants: Sequence[tuple[str, ProxyProcess]], topic: str, count: int, plan: Plan
                        ) -> dict[str, dict[str, Any]]:
    """The same raw Produce load through every proxy at once; each run gets its proxy's CPU per request."""
    out: dict[str, dict[str, Any]] = {}
    failures: list[BaseException] = []

    def one(name: str, proxy: ProxyProcess) -> None:
        assert proxy.process is not None
        meter: dict[str, float] = {}
        try:
            with cpu_meter(proxy.process.pid, meter):
                run = produce_load(proxy.broker_port(1), topic, range(count), -1, plan.raw_seconds, plan.raw_window,
                                   plan.raw_batch_records)
        except BaseException as exc:  # reported below
            failures.append(exc)
            return
        run["proxy_cpu_us_per_request"] = meter["cpu_s"] / max(1, run["requests"]) * 1e6
        out[name] = run

    run_threads(one, list(variants), plan.raw_seconds + 180)
    if failures or len(out) != len(variants):
        raise RuntimeError(f"paired load failed: {failures[0] if failures else 'a load thread did not finish'!r}")
    return out


SECTIONS = ("perf", "acks", "metadata", "scrape", "audit")


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    global PRODUCE_VERSION
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="shorter runs, 1 round (under ~4 minutes)")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)")
    parser.add_argument("--rate", type=int, help="records/s of section 1's fixed-rate runs (default 5000)")
    parser.add_argument("--output", type=Path, default=ROOT / "bench-results", help="directory of the JSON summary")
    parser.add_argument("--produce-version", type=int, default=PRODUCE_VERSION,
                        help=f"Produce version of the raw load (default {PRODUCE_VERSION}, the Java client 4.0's)")
    args = parser.parse_args(argv)
    PRODUCE_VERSION = args.produce_version
    plan = QUICK if args.quick else FULL
    if args.rate:
        plan = Plan(**{**plan.__dict__, "rate": args.rate})
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; use {', '.join(SECTIONS)}")

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`&`)
    started = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    results: dict[str, Any] = {
        "started_utc": stamp, "mode": "quick" if args.quick else "full", "plan": plan.__dict__,
        "produce_version": PRODUCE_VERSION,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_at_start": os.getloadavg()},
        "goals": GOALS,
    }
    work = Path(tempfile.mkdtemp(prefix="insync-proxy-bench-"))
    cluster: LocalKafkaCluster | None = None
    proxy: ProxyProcess | None = None
    code = 0
    try:
        cluster = LocalKafkaCluster(ClusterSettings())
        cluster.start()
        results["kafka_version"] = cluster.version
        proxy = ProxyProcess(cluster, extra_toml=PROXY_TOML, groups=("default",), debug_checks=False).start()
        say(f"proxy ready at {proxy.bootstrap()} (admin {proxy.admin_url}); load average "
            f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        runners: dict[str, Callable[[], None]] = {
            "perf": lambda: section_producer_performance(cluster, proxy, plan, work, results),  # type: ignore[arg-type]
            "acks": lambda: section_acks(cluster, proxy, plan, results),  # type: ignore[arg-type]
            "metadata": lambda: section_metadata(cluster, proxy, plan, results),  # type: ignore[arg-type]
            "scrape": lambda: section_scrape(cluster, proxy, plan, results),  # type: ignore[arg-type]
            "audit": lambda: section_audit(cluster, plan, work, results),  # type: ignore[arg-type]
        }
        for name in SECTIONS:
            if name in sections:
                t0 = time.monotonic()
                runners[name]()
                results.setdefault("section_seconds", {})[name] = round(time.monotonic() - t0, 1)
        print_goals(results)
    except KeyboardInterrupt:
        say("interrupted: stopping the proxy and the cluster")
        results["interrupted"] = True
        code = 130
    except Exception as exc:
        say(f"benchmark failed: {exc!r}")
        if proxy is not None:
            say(f"proxy log tail:\n{proxy.log_tail(30)}")
        results["error"] = repr(exc)
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        CHILDREN.kill_all()
        if proxy is not None:
            proxy.stop()
            shutil.rmtree(proxy.dir, ignore_errors=True)
        if cluster is not None:
            cluster.stop()
            cluster.cleanup()
        shutil.rmtree(work, ignore_errors=True)
        results["total_seconds"] = round(time.monotonic() - started, 1)
        out = write_summary(results, args.output, "proxy-bench", stamp)
        say(f"wrote {out} (total {results['total_seconds']:.0f}s)")
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return code


def print_goals(results: dict[str, Any]) -> None:
    rows = []
    pp, acks, ner = results.get("producer_performance"), results.get("acks"), results.get("not_enough_replicas")
    meta, scrape = results.get("metadata"), results.get("scrape")
    if pp:
        rows.append(("1 throughput ratio proxy/direct", f"{pp['throughput_ratio']:.3f}", ">= 0.95",
                     yes(pp["throughput_ratio"] >= GOALS["throughput_ratio_min"])))
        rows.append((f"1 p99 added at {pp['fixed_rate']:,} rec/s", f"{pp['p99_added_ms']:+.1f} ms", "<= 1 ms",
                     yes(pp["p99_added_ms"] <= GOALS["p99_added_ms_max"])))
    if acks:
        r = acks["ratio_minus2_over_minus1"]
        rows.append(("2 MB/s acks=-2 / acks=-1", f"{r:.3f}", "0.97 .. 1.03",
                     yes(abs(1 - r) <= GOALS["acks_minus2_vs_minus1_within"])))
    if ner:
        rows.append(("2 NOT_ENOUGH_REPLICAS p99", f"{ner['p99_ms']:.3f} ms", "<= 0.2 ms",
                     yes(ner["p99_ms"] <= GOALS["not_enough_replicas_p99_ms_max"])))
    if meta:
        rows.append(("3 Metadata p99 added", f"{meta['p99_added_ms']:+.3f} ms", "<= 0.5 ms",
                     yes(meta["p99_added_ms"] <= GOALS["metadata_p99_added_ms_max"])))
    if scrape:
        rows.append((f"4 /metrics p99, {scrape['topics_with_series']} topics", f"{scrape['p99_ms']:.2f} ms",
                     "< 5 ms", yes(scrape["p99_ms"] < GOALS["scrape_p99_ms_max"])))
    if rows:
        table(f"Goals (load average now {' '.join(f'{x:.1f}' for x in os.getloadavg())}, {os.cpu_count()} shared "
              "cores: numbers are noisy)", ("goal", "measured", "target", "result"), rows)


if __name__ == "__main__":
    sys.exit(main())
