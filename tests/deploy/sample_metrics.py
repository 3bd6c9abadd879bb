"""A stand-in for the proxy's admin port: serves ProxyMetrics with sample values on loopback."""

from __future__ import annotations

import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from insync_proxy.proxy.observability.metrics import ProxyMetrics

APIS = ("Produce", "Metadata", "Fetch", "ApiVersions")
TOPICS = ("orders", "payments")


def add_sample_traffic(metrics: ProxyMetrics, rng: random.Random) -> None:
    """One round of plausible traffic touching every metric and every label the dashboard uses."""
    m = metrics
    m.upstream_up.set(1)
    m.control_authentication_failures_total.labels("SCRAM-SHA-512").inc(0)
    m.brokers_without_port.labels("default").set(0)
    for side in ("upstream_tls", "downstream_tls"):
        m.tls_certificate_expiry.labels(side, "cert_file").set(2_000_000_000)
        m.reloads_total.labels(side, "ok").inc(0)
        m.reload_failing.labels(side).set(0)
    m.reloads_total.labels("config", "failed").inc(0)
    for listener in ("default",):
        m.client_connections_active.labels(listener).set(rng.randint(1, 5))
        m.client_connections_total.labels(listener).inc()
        m.client_connection_errors_total.labels(listener, "reset").inc(rng.randint(0, 1))
        for cause in ("bad_frame", "oversized_frame", "broker_closed"):
            m.bad_input_total.labels(listener, cause).inc(rng.randint(0, 3))
        m.client_connections_held_total.labels(listener, "held").inc(rng.randint(0, 3))
        m.client_connections_held.set(rng.randint(0, 2))
    for broker in ("1", "2", "3"):
        m.upstream_connections_active.labels(broker).set(rng.randint(1, 3))
        m.upstream_connections_total.labels(broker).inc()
        m.upstream_connection_errors_total.labels(broker, "timeout").inc(rng.randint(0, 1))
        m.upstream_connections_aborted_total.labels(broker).inc(rng.randint(0, 1))
    for api in APIS:
        for _ in range(5):
            m.requests_total.labels(api).inc()
            upstream = rng.uniform(0.0005, 0.02)
            m.upstream_latency_seconds.labels(api).observe(upstream)
            m.request_latency_seconds.labels(api).observe(upstream + rng.uniform(0.00002, 0.0002))
    for direction in ("client_in", "client_out", "upstream_in", "upstream_out"):
        m.network_bytes_total.labels(direction).inc(rng.randint(1_000, 100_000))
    m.frame_errors_total.labels("oversized").inc(rng.randint(0, 1))
    m.address_leaks_total.labels("Metadata").inc(0)
    m.metadata_cache_hits_total.inc(rng.randint(5, 20))
    m.metadata_cache_misses_total.inc(rng.randint(0, 2))
    m.metadata_cache_refreshes_total.labels("ttl", "ok").inc()
    m.metadata_cache_refreshes_total.labels("miss", "error").inc(rng.randint(0, 1))
    m.metadata_cache_age_seconds.set(rng.uniform(0, 30))
    m.metadata_cache_entries.set(len(TOPICS))
    m.metadata_cache_evicted_total.inc(rng.randint(0, 1))
    m.min_insync_served_age_seconds.observe(rng.uniform(0, 120))
    m.min_insync_stale_served_total.inc(rng.randint(0, 3))
    m.min_insync_miss_wait_exceeded_total.inc(rng.randint(0, 1))
    m.describe_configs_latency_seconds.observe(rng.uniform(0.001, 0.05))
    m.describe_configs_errors_total.labels("REQUEST_TIMED_OUT").inc(rng.randint(0, 1))
    m.min_insync_unauthorized_total.inc(0)
    m.topics_enriched_total.inc(len(TOPICS))
    m.partitions_below_min_isr.set(rng.randint(0, 1))
    m.buffered_bytes.set(rng.randint(0, 4_000_000))
    m.budget_paused_connections.set(rng.randint(0, 2))
    m.topics_in_use.set(len(TOPICS))
    m.topic_configs_read_total.inc(len(TOPICS))
    m.topics_not_followed_total.inc(rng.randint(0, 1))
    for api in ("Metadata", "DescribeConfigs"):
        m.control_requests_total.labels(api).inc()
    m.partitions_hidden_total.inc(rng.randint(0, 1))
    for name in TOPICS:
        topic = m.topic(name)
        m.produce_partitions_total.labels(topic, "-1", "-1", "forwarded").inc(rng.randint(1, 10))
        m.produce_partitions_total.labels(topic, "-2", "-1", "forwarded").inc(rng.randint(1, 10))
        m.produce_partitions_total.labels(topic, "-2", "none", "answered_not_enough_replicas").inc(
            rng.randint(0, 2)
        )
        m.produce_partitions_total.labels(topic, "1", "-1", "raised_by_floor").inc(rng.randint(0, 3))
        m.produce_partitions_total.labels(topic, "5", "none", "answered_invalid_required_acks").inc(
            rng.randint(0, 1)
        )
        m.proxy_answered_errors_total.labels(topic, "19").inc(rng.randint(0, 2))
        m.proxy_answered_errors_total.labels(topic, "21").inc(rng.randint(0, 1))
        for outcome in ("passed", "failed", "unknown"):
            m.precheck_total.labels(topic, outcome).inc(rng.randint(0, 5))
        m.acks_floor_applied_total.labels(topic).inc(rng.randint(0, 3))
        records = rng.randint(100, 10_000)
        m.produce_records_total.labels(topic).inc(records)
        m.produce_record_bytes_total.labels(topic).inc(records * rng.randint(100, 1024))
    m.audit_events_written_total.labels("file").inc(rng.randint(10, 50))
    m.background_task_failures_total.labels("min_insync_fetch").inc(rng.randint(0, 2))
    m.topic_ids_unresolved_total.inc(rng.randint(0, 2))
    m.audit_events_dropped_total.labels("queue_full").inc(rng.randint(0, 1))


class _QuietServer(ThreadingHTTPServer):
    """Joins its request threads on close and prints no traceback for a scraper that hung up.

    A request thread printing a traceback after its test ended formats it with `ast.parse` (Python 3.11's
    caret anchors) while the main thread may be parsing too: CPython 3.11's AST state is shared between
    threads, and the two raise "AST constructor recursion depth mismatch" (python/cpython#106905).
    """

    daemon_threads = False
    block_on_close = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a scraper that closed its connection early (BrokenPipeError): nothing to report


class SampleMetricsServer:
    """HTTP server on 127.0.0.1:<free port> answering /metrics; every scrape adds a round of traffic."""

    def __init__(self, seed: int = 7) -> None:
        self.metrics = ProxyMetrics()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        add_sample_traffic(self.metrics, self._rng)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                with outer._lock:
                    add_sample_traffic(outer.metrics, outer._rng)
                    body = generate_latest(outer.metrics.registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (base signature)
                pass

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="sample-metrics", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> SampleMetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
