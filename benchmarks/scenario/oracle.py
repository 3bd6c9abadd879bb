"""The invariants and what they check, from what the run saw and what the brokers hold, never from the proxy's
own code: tag 637 and broker addresses in each Metadata answer as it comes; at the end, every acknowledged record
read back at its offset straight from the brokers, duplicates told apart by producer epoch (DumpLogSegments),
acks=-2 against the brokers' ISR, /readyz against ApiVersions, trends of RSS, fds and tasks, rates, rotations,
slow consumers, the share group, the consumer group and the added latency."""

from __future__ import annotations

import bisect
import re
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from benchmarks.scenario.cluster import REPLICA_LAG_SECONDS, ScenarioCluster
from benchmarks.scenario.findings import Findings
from benchmarks.scenario.latency import KINDS, LatencyProducers, histogram_percentile, merge_histograms
from benchmarks.scenario.proxy import BUFFER_BUDGET_MIB, MIN_INSYNC_TTL
from benchmarks.scenario.rotations import ROTATION_BOUND_SECONDS
from benchmarks.scenario.topics import (
    ACKS0_BASE,
    ACKS01_TOPIC,
    ACKS2_TOPIC,
    IDEMPOTENT_TOPIC,
    PARTITIONER_TOPIC,
    PARTITIONS,
    Topics,
)
from harness.kafka_wire import MetadataAnswer
from harness.min_insync_history import allowed_values
from insync_proxy.devcluster.cluster import _die_with_parent
from insync_proxy.devcluster.distribution import kafka_libs

#: Bounds of the rates the proxy may reach (per minute, averaged over the run).
LOG_LINES_PER_MINUTE = 300.0
CONTROL_REQUESTS_PER_MINUTE = 600.0
#: Target p99 added latency outside event windows, ms (reported; on a shared 2-core machine, informative).
ADDED_P99_TARGET_MS = 1.0
#: Latency samples this long after an event window closed are "settling" (a leader's ISR refilling, clients
#: reconnecting): neither outside nor inside.
SETTLE_SECONDS = 30.0
#: The RSS rise the slow consumers may cause beyond the proxy's memory budget.
SLOW_RSS_SLACK_MIB = 48


# --------------------------------------------------------------------------------------------- as the run goes
def brokers_out(outages: list[tuple[int, float, float]], start: float, end: float) -> int:
    """The most brokers out of the proxy's reach at one moment of [start, end] (outages that ended so far)."""
    spans = [(max(a, start), min(b, end)) for _, a, b in list(outages) if a <= end and b >= start]
    return max((sum(1 for a, b in spans if a <= t <= b) for t, _ in spans), default=0)


def check_metadata_answer(answer: MetadataAnswer, asked: float, real_ports: set[int], topics: Topics,
                          found: Findings) -> None:
    """No real broker address in the answer; each topic's tag 637 one of the values the runner set that may still
    be served (allowed_values, the TTL's lag), or the one it is setting now."""
    for node_id, (host, port) in answer.brokers.items():
        if port in real_ports:
            found.address_leaks.append(f"{asked:.0f}s: broker {node_id} at {host}:{port}")
    lag = 2 * MIN_INSYNC_TTL + 5
    for name, topic in answer.topics.items():
        history = topics.min_insync.get(name)
        if topic.error_code != 0 or not history:
            continue
        found.tag_checks += 1
        if topic.min_insync is None:
            found.tag_absent += 1
            continue
        allowed = allowed_values(history, asked, lag)
        if name in topics.min_insync_pending:
            allowed.add(topics.min_insync_pending[name])
        if topic.min_insync not in allowed and brokers_out(found.outages, asked - lag, asked) >= 2:
            # Two brokers out of the proxy's reach: the value it serves may be stale while it cannot re-read
            # (min_insync_max_stale_seconds); counted apart, not a violation.
            found.tag_stale_in_outage += 1
        elif topic.min_insync not in allowed:
            found.tag_wrong.append(f"{asked:.0f}s {name}: tag 637 = {topic.min_insync}, set {sorted(allowed)}")


# --------------------------------------------------------------------------------------------- at the end
@dataclass
class Verdict:
    """The invariants' table, (name, held, detail) a row, and the figures behind it."""

    rows: list[tuple[str, bool, str]]
    latency: dict[str, Any]
    trends: dict[str, float]
    rates_per_minute: dict[str, float]
    acks2_violations: list[str]
    ready_but_not_serving_at: list[float]

    @property
    def ok(self) -> bool:
        """Every invariant held but the added latency's (reported, not asserted)."""
        return all(ok for name, ok, _ in self.rows if not name.startswith("added latency"))


class Oracle:
    def __init__(self, cluster: ScenarioCluster, topics: Topics, latency: LatencyProducers, found: Findings,
                 seconds: float) -> None:
        self.cluster, self.topics, self.latency, self.found = cluster, topics, latency, found
        #: the run's planned length: events still open are taken to end there
        self.seconds = seconds

    # ------------------------------------------------------------------ the brokers' logs
    def read_back(self) -> dict[str, Any]:
        """Every partition of the idempotent topic read from offset 0 to its end, straight from the brokers
        (kafka-python, PLAINTEXT): each acknowledged (partition, offset) must hold its value, no value twice."""
        f = self.found
        log = self.read_topic(IDEMPOTENT_TOPIC)
        values = Counter(log.values())
        missing = [(p, o, v) for p, o, v in f.acked if log.get((p, o)) != v]
        same_epoch, other_epoch = self.duplicates_by_epoch()
        partitioner_log = self.read_topic(PARTITIONER_TOPIC)
        partitioner_missing = [(p, o, v) for p, o, v in f.partitioner_acked if partitioner_log.get((p, o)) != v]
        acks01_log = self.read_topic(ACKS01_TOPIC)
        acks1_missing = [(p, o, v, t) for p, o, v, t in f.acks1 if acks01_log.get((p, o)) != v]
        # acks=1: a leader may lose what only it held when it dies or steps down (Kafka's contract): a record
        # acknowledged in an event window or shortly before one began (its followers had not fetched it yet)
        acks1_outside = [(p, o, v, round(t, 1)) for p, o, v, t in acks1_missing if not self.near_event(t)]
        return {"acknowledged": len(f.acked), "in_log": len(log), "missing_or_moved": len(missing),
                "missing_examples": missing[:5], "duplicates": sum(n - 1 for n in values.values() if n > 1),
                "duplicates_same_epoch": same_epoch, "duplicates_after_epoch_bump": other_epoch,
                "send_errors": f.producer_errors,
                "partitioner": {"acknowledged": len(f.partitioner_acked), "missing_or_moved": len(partitioner_missing),
                                "missing_examples": partitioner_missing[:5],
                                "refused": dict(f.partitioner_refused)},
                "acks1": {"acknowledged": len(f.acks1), "missing_or_moved": len(acks1_missing),
                          "missing_outside_events": len(acks1_outside), "missing_outside_examples": acks1_outside[:5],
                          "errors": dict(f.acks01_errors)},
                "acks0": {"sent": f.acks0_sent,
                          "in_log": sum(1 for v in acks01_log.values() if v >= ACKS0_BASE)}}

    def read_topic(self, topic: str) -> dict[tuple[int, int], int]:
        """(partition, offset) -> value of every record of a topic, read from offset 0 straight from the brokers."""
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.cluster.bootstrap_servers, enable_auto_commit=False,
                                 group_id=None, client_id="year-oracle", request_timeout_ms=30000)
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        log: dict[tuple[int, int], int] = {}
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and any(consumer.position(tp) < ends[tp] for tp in parts):
            for tp, records in consumer.poll(timeout_ms=1000, max_records=5000).items():
                for record in records:
                    log[(tp.partition, record.offset)] = int(record.value)
        consumer.close()
        return log

    def duplicates_by_epoch(self) -> tuple[list[str], list[str]]:
        """Values written twice, split by whether both copies carry the same producer id and epoch (what
        idempotence forbids) or not (the Java producer bumped its epoch and re-sent batches whose fate it could
        not tell): read with Kafka's own DumpLogSegments from broker 1's log files."""
        libs = kafka_libs(self.cluster.new_version)
        seen: dict[tuple[int, str], list[tuple[str, str, int]]] = {}
        for partition in range(PARTITIONS):
            directory = self.cluster.cluster.brokers[1].directory / "data" / f"{IDEMPOTENT_TOPIC}-{partition}"
            files = sorted(str(f) for f in directory.glob("*.log"))
            if not files:
                continue
            dump = subprocess.run(
                self.cluster.java(libs, "org.apache.kafka.tools.DumpLogSegments", "--files", ",".join(files),
                                  "--print-data-log", "--deep-iteration"),
                capture_output=True, text=True, timeout=300, preexec_fn=_die_with_parent)
            producer = ("", "")
            for line in dump.stdout.splitlines():
                batch = re.search(r"producerId: (-?\d+) producerEpoch: (-?\d+)", line)
                if line.startswith("baseOffset") and batch:
                    producer = (batch.group(1), batch.group(2))
                record = re.search(r"\| offset: (\d+).* payload: (\S+)", line)
                if record:
                    seen.setdefault((partition, record.group(2)), []).append((*producer, int(record.group(1))))
        same, other = [], []
        for (partition, value), copies in seen.items():
            if len(copies) < 2:
                continue
            text = f"partition {partition} value {value} at offsets {[c[2] for c in copies]} " \
                   f"(producer id/epoch {sorted({c[:2] for c in copies})})"
            (same if len({c[:2] for c in copies}) < len(copies) else other).append(text)
        return same, other

    # ------------------------------------------------------------------ time against the event windows
    def in_window(self, t: float, slack: float = 5.0) -> bool:
        return any(w.start <= t <= (w.end if w.end is not None else self.seconds) + slack for w in self.found.windows)

    def near_event(self, t: float, before: float = REPLICA_LAG_SECONDS, after: float = 5.0) -> bool:
        """t falls in an event window, or `before` seconds before one began, or `after` seconds after it ended."""
        return any(w.start - before <= t <= (w.end if w.end is not None else self.seconds) + after
                   for w in self.found.windows)

    def latency_bucket(self, t: float) -> str:
        """"inside" an event window, "settling" within SETTLE_SECONDS after one closed, else "outside"."""
        if self.in_window(t, slack=0.0):
            return "inside"
        return "settling" if self.in_window(t, slack=SETTLE_SECONDS) else "outside"

    # ------------------------------------------------------------------ figures
    def acks2_violations(self) -> list[str]:
        """A success whose partition's ISR the brokers reported below the effective min.insync.replicas both at
        the last sample before it was sent and at every sample up to the first one after its answer."""
        out = []
        for send in self.found.acks2:
            if not send.ok:
                continue
            history = self.found.isr.get((ACKS2_TOPIC, send.partition), [])
            times = [t for t, _ in history]
            lo = bisect.bisect_right(times, send.sent) - 1
            hi = bisect.bisect_left(times, send.answered)
            if lo < 0 or hi >= len(history):
                continue
            min_insync = min(3, min(v for t, v in self.topics.min_insync[ACKS2_TOPIC]))
            if all(size < min_insync for _, size in history[lo:hi + 1]):
                out.append(f"{send.sent:.1f}s partition {send.partition}: acknowledged while ISR {history[lo][1]}")
        return out

    def trend(self, values: list[tuple[float, float]]) -> tuple[float, float]:
        """Least-squares slope (per hour) over the last three quarters of the run, and the rise it makes over it."""
        tail = [(t, v) for t, v in values if t >= self.seconds / 4 and v == v]
        if len(tail) < 3:
            return 0.0, 0.0
        n = len(tail)
        mt = sum(t for t, _ in tail) / n
        mv = sum(v for _, v in tail) / n
        var = sum((t - mt) ** 2 for t, _ in tail)
        slope = sum((t - mt) * (v - mv) for t, v in tail) / var if var else 0.0
        return slope * 3600, slope * (tail[-1][0] - tail[0][0])

    def latency_figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rate_per_second": self.latency.rate, "max_per_second": self.latency.max,
                               "errors": dict(self.found.latency_errors),
                               "restarts": dict(self.found.latency_restarts)}
        for where in ("outside", "settling", "inside"):
            row: dict[str, float] = {}
            for kind in KINDS:
                # The first SETTLE_SECONDS are the producers' own start (connections, metadata): settling too
                merged = merge_histograms(
                    counts for t, counts in self.found.latency[kind]
                    if (self.latency_bucket(t) if t > SETTLE_SECONDS else "settling") == where)
                row[f"{kind}_count"] = sum(merged.values())
                row[f"{kind}_p50_ms"] = histogram_percentile(merged, 0.5)
                row[f"{kind}_p99_ms"] = histogram_percentile(merged, 0.99)
            row["added_p50_ms"] = row["proxy_p50_ms"] - row["direct_p50_ms"]
            row["added_p99_ms"] = row["proxy_p99_ms"] - row["direct_p99_ms"]
            out[where] = row
        return out

    # ------------------------------------------------------------------ the table
    def judge(self, oracle: dict[str, Any], build: str, compiled: str, elapsed: float) -> Verdict:
        """Every invariant of the table, from `oracle` (read_back's), the findings and the run's `elapsed` seconds."""
        f = self.found
        minutes = max(elapsed / 60, 1e-9)
        samples = f.samples
        rss_slope, rss_rise = self.trend([(s.t, s.rss_mib) for s in samples])
        fd_slope, fd_rise = self.trend([(s.t, float(s.fds)) for s in samples])
        th_slope, th_rise = self.trend([(s.t, float(s.tasks if s.tasks is not None else s.threads)) for s in samples])
        mean_rss = sum(s.rss_mib for s in samples) / max(len(samples), 1)
        log_rate = (samples[-1].log_lines - samples[0].log_lines) / minutes if len(samples) > 1 else 0.0
        controls = [s.control_requests for s in samples if s.control_requests == s.control_requests]
        control_rate = (controls[-1] - controls[0]) / minutes if len(controls) > 1 else 0.0
        ready_not_serving = [s.t for s in samples if s.ready and not s.can_serve]
        # One failed ApiVersions beside a ready proxy can be a probe that met a broker restarting: two in a row count.
        ready_violations = sum(1 for a, b in zip(samples, samples[1:], strict=False)
                               if a.ready and not a.can_serve and b.ready and not b.can_serve)
        acks2 = self.acks2_violations()
        latency = self.latency_figures()
        acks2_ok = sum(1 for s in f.acks2 if s.ok)
        last_event_end = max((w.end or 0.0 for w in f.windows), default=0.0)
        consumed_after = sum(n for t, n in f.consumed if t > last_event_end)
        part = oracle["partitioner"]
        rotations, ca_changes = f.rotations, [r for r in f.rotations if r["kind"] == "CA change"]
        ready_bound = max((r["ready_after_s"] or 0.0 for r in rotations), default=0.0)
        progress_bound = max((r["producer_progress_after_s"] or 0.0 for r in rotations), default=0.0)
        rotation_windows = [w for w in f.windows if w.name in ("cert rotation", "CA change")]
        slow_ok = bool(f.slow) and all(
            r["bytes_read"] > 0 and r["rss_peak_mib"] - r["rss_before_mib"] <= BUFFER_BUDGET_MIB + SLOW_RSS_SLACK_MIB
            and r["acked_by_others"] > 0 for r in f.slow)
        rows: list[tuple[str, bool, str]] = [
            ("build the proxy ran", compiled == "true" or build.startswith("interpreted"),
             f"{build}; the proxy's insync_proxy_build_info says compiled={compiled}"),
            ("acknowledged records readable at their offsets", oracle["missing_or_moved"] == 0 and oracle["acknowledged"] > 0,
             f"{oracle['acknowledged']} acknowledged, {oracle['missing_or_moved']} missing or moved, {oracle['in_log']} in the log"),
            ("no duplicates within a producer epoch (idempotence)", not oracle["duplicates_same_epoch"],
             f"{len(oracle['duplicates_same_epoch'])} within an epoch; {oracle['duplicates']} duplicate values in all, "
             f"{len(oracle['duplicates_after_epoch_bump'])} re-sent after an epoch bump"),
            ("the Python partitioner's acks=-2 records readable", part["acknowledged"] > 0 and part["missing_or_moved"] == 0,
             f"{part['acknowledged']} acknowledged (insync_proxy.client.partitioner, kafka-python, acks=-2), "
             f"{part['missing_or_moved']} missing or moved, refused {part['refused'] or 0}"),
            ("acks=1 and acks=0 through the proxy (librdkafka)",
             oracle["acks1"]["acknowledged"] > 0 and oracle["acks1"]["missing_outside_events"] == 0
             and oracle["acks0"]["in_log"] > 0,
             f"acks=1: {oracle['acks1']['acknowledged']} acknowledged, {oracle['acks1']['missing_or_moved']} missing "
             f"({oracle['acks1']['missing_outside_events']} outside event windows); acks=0: {oracle['acks0']['sent']} "
             f"sent, {oracle['acks0']['in_log']} in the log; errors {oracle['acks1']['errors'] or 0}"),
            ("acks=-2 never acknowledged below min ISR", not acks2 and acks2_ok > 0,
             f"{acks2_ok} acknowledged, {len(f.acks2) - acks2_ok} refused, {len(acks2)} violations"),
            ("tag 637 equals the topic's min.insync.replicas", not f.tag_wrong and f.tag_checks > 0,
             f"{f.tag_checks} topic answers, {len(f.tag_wrong)} wrong, {f.tag_stale_in_outage} stale while 2+ brokers "
             f"were out of reach (allowed), {f.tag_absent} without the tag, "
             f"{f.metadata_failures} samples failed"),
            ("no real broker address in any answer", not f.address_leaks, f"{len(f.address_leaks)} leaks"),
            ("/readyz true only when the proxy serves", ready_violations == 0,
             f"{len(samples)} samples, {sum(s.ready for s in samples)} ready, {len(ready_not_serving)} ready but "
             f"ApiVersions failed ({ready_violations} twice in a row)"),
            ("RSS: no upward trend (last 3/4)", rss_rise <= max(0.05 * mean_rss, 8.0),
             f"{rss_slope:+.2f} MiB/h, {rss_rise:+.1f} MiB over the span (bound {max(0.05 * mean_rss, 8.0):.1f})"),
            ("open fds: no upward trend", fd_rise <= 20, f"{fd_slope:+.1f}/h, {fd_rise:+.1f} over the span (bound 20)"),
            ("tasks (threads when not exposed): no upward trend", th_rise <= 5,
             f"{th_slope:+.1f}/h, {th_rise:+.1f} over the span (bound 5; "
             f"{'tasks' if samples and samples[-1].tasks is not None else 'threads'})"),
            ("log lines per minute", log_rate <= LOG_LINES_PER_MINUTE, f"{log_rate:.1f} (bound {LOG_LINES_PER_MINUTE:.0f})"),
            ("control-plane requests per minute", control_rate <= CONTROL_REQUESTS_PER_MINUTE,
             f"{control_rate:.1f} (bound {CONTROL_REQUESTS_PER_MINUTE:.0f})"),
            ("certificates rotated on both legs, CA changed: served on",
             bool(ca_changes) and all(r["ok"] for r in rotations) and not any(w.failed for w in rotation_windows),
             f"{len(rotations)} rotations ({len(ca_changes)} CA changes): /readyz within {ready_bound:.1f} s, "
             f"producer on within {progress_bound:.1f} s (bound {ROTATION_BOUND_SECONDS:.0f}), "
             f"{sum(bool(r['new_client_acknowledged']) for r in rotations)} new clients acknowledged over new "
             f"upstream connections, {sum(bool(r['server_serial_seen']) for r in rotations)} saw the new server "
             f"certificate; old client certificate refused by brokers "
             f"{', '.join(r.get('old_client_refused_by_brokers', '?') for r in ca_changes) or '-'}"),
            ("slow consumers: RSS bounded, others unaffected", slow_ok,
             "; ".join(f"{r['consumers']} consumers read {r['bytes_read'] / 2**20:.1f} MiB, RSS {r['rss_before_mib']:.0f}"
                       f" -> peak {r['rss_peak_mib']:.0f} MiB (bound +{BUFFER_BUDGET_MIB + SLOW_RSS_SLACK_MIB}), "
                       f"{r['acked_by_others']} records acknowledged meanwhile to others" for r in f.slow) or "not run"),
            ("a share group reads through the proxy on 4.x", bool(f.share_received) and all(n > 0 for n in f.share_received),
             f"records received per run of the share consumer: {f.share_received or 'not run'}"),
            ("added latency p99 outside events <= 1 ms", latency["outside"]["added_p99_ms"] <= ADDED_P99_TARGET_MS,
             "p50 {added_p50_ms:+.2f} ms, p99 {added_p99_ms:+.2f} ms (direct p99 {direct_p99_ms:.1f}, "
             "proxy p99 {proxy_p99_ms:.1f}; samples: direct {direct_count}, proxy {proxy_count}; ".format(**latency["outside"])
             + f"Java producer, acks=all, {self.latency.rate:.0f} records/s each ("
             + (f"half of {self.latency.max:.0f} one at a time directly); " if self.latency.max else "--latency-rate); ")
             + "excluded while settling {SETTLE:.0f} s after an event: direct {direct_count}, proxy {proxy_count})".format(
                 SETTLE=SETTLE_SECONDS, **latency["settling"])),
            ("added latency inside event windows (reported)", True,
             "p50 {added_p50_ms:+.2f} ms, p99 {added_p99_ms:+.2f} ms (samples: direct {direct_count}, "
             "proxy {proxy_count})".format(**latency["inside"])),
            ("the consumer group reads on after the last event", consumed_after > 0,
             f"{sum(n for _, n in f.consumed)} records read by the group, {consumed_after} after the last event "
             f"ended ({last_event_end:.0f}s)"),
            ("every scheduled event completed", not any(w.failed for w in f.windows),
             f"{len(f.windows)} events, {sum(bool(w.failed) for w in f.windows)} failed"),
        ]
        return Verdict(rows=rows, latency=latency,
                       trends={"rss_mib_per_hour": rss_slope, "fds_per_hour": fd_slope,
                               "tasks_or_threads_per_hour": th_slope},
                       rates_per_minute={"log_lines": log_rate, "control_requests": control_rate},
                       acks2_violations=acks2, ready_but_not_serving_at=ready_not_serving)
