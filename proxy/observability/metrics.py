"""Prometheus metrics of one proxy instance (its own registry, served on the admin port).

Names follow Prometheus conventions: `insync_proxy_` prefix, base units, `_total` counters,
`_seconds` histograms. Per-topic labels are bounded (`topic_label_limit`); topics beyond the limit
share the label value OVERFLOW_TOPIC. docs/metrics.md's table is made from this module
(proxy/observability/metrics_reference.py).
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Final, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from insync_proxy.proxy import __version__
from insync_proxy.proxy.observability.compiled import compiled_modules

OVERFLOW_TOPIC: Final = "__overflow__"

# `_created` series double the scrape size and cost for no dashboard or alert of ours.
disable_created_metrics()  # type: ignore[no-untyped-call]

# Sub-millisecond resolution matters: the proxy's own cost is measured in tens of microseconds.
LATENCY_BUCKETS: Final = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
#: Ages of served min.insync.replicas values: within the TTL (30 s by default) up to the max stale age (1 h) and over.
SERVED_AGE_BUCKETS: Final = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 86400.0)


class TopicLabels:
    """Maps topic names to label values, at most `limit` distinct ones; the rest share OVERFLOW_TOPIC."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, topic: str) -> str:
        if topic in self._known:
            return topic
        with self._lock:
            if len(self._known) < self.limit:
                self._known.add(topic)
                return topic
        return OVERFLOW_TOPIC


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class LockFreeCounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class TopicCounterChild(LockFreeCounterChild):
    __slots__ = ("line_prefix",)

    def __init__(self, line_prefix: str) -> None:
        super().__init__()
        self.line_prefix = line_prefix


class _CounterFamily:
    """A labelled counter's name, labels and children, collected as a prometheus-client counter family."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self._name = name
        self._labelnames = tuple(labelnames)
        self.documentation = documentation
        self._children: dict[tuple[str, ...], LockFreeCounterChild] = {}

    def collect(self) -> list[CounterMetricFamily]:
        family = CounterMetricFamily(self._name, self.documentation, labels=list(self._labelnames))
        for values, child in list(self._children.items()):
            family.add_metric(list(values), child.value)
        return [family]


class TopicCounter(_CounterFamily):
    """A counter with a per-topic label, rendered by hand: thousands of series in about a millisecond.

    prometheus-client formats every sample anew on each scrape (tens of ms at 1,000 topics, measured);
    here each series' text up to its value is built once. Also a prometheus-client collector (`collect`),
    so the registry, tests and tools see it like any other counter. Updated from the event loop only
    (`child.inc(n)`, or `child.value += n` where a method call per update matters).
    """

    def __init__(self, name: str, documentation: str, labelnames: list[str]) -> None:
        super().__init__(name, documentation, labelnames)
        self.sample_name = name + "_total"
        self._header = (
            f"# HELP {self.sample_name} {documentation}\n# TYPE {self.sample_name} counter\n"
        )

    def labels(self, *values: str) -> TopicCounterChild:
        child = self._children.get(values)
        if child is None:
            pairs = sorted(zip(self._labelnames, values, strict=True))
            labels = ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs)
            child = self._children[values] = TopicCounterChild(f"{self.sample_name}{{{labels}}} ")
        return cast(TopicCounterChild, child)  # every child of a TopicCounter is one

    def render(self) -> str:
        """Exposition text, as prometheus-client writes it."""
        if not self._children:
            return ""
        lines = [self._header]
        for child in list(self._children.values()):
            lines.append(f"{cast(TopicCounterChild, child).line_prefix}{float(child.value)!r}\n")
        return "".join(lines)


class LockFreeCounter(_CounterFamily):
    """A labelled counter for per-request series, updated from the event loop thread only.

    prometheus-client takes a lock on every increment (about a microsecond each, several per request);
    here an increment is one float addition and the scrape thread reads the values at collect time.
    Exposition is the same as a prometheus-client Counter's.
    """

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        super().__init__(name, documentation, labelnames)
        registry.register(self)

    def labels(self, *values: str) -> LockFreeCounterChild:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self._labelnames):
                raise ValueError(f"{self._name} takes labels {self._labelnames}, got {values}")
            child = self._children[values] = LockFreeCounterChild()
        return child


class LockFreeHistogramChild:
    """One label set's buckets. Observations falling in the same bucket as the one before (most do: a steady
    workload's latencies stay in one or two buckets) are counted in a native run counter, added to that bucket's
    count when one falls elsewhere or the buckets are read (`bucket_counts`); every access is on the event loop's
    thread (the admin server collects there too), so nothing is read half-updated."""

    __slots__ = ("_counts", "_low", "_high", "_run", "_run_bucket", "bounds", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        #: Per bucket, not cumulative; the last one is +Inf. Without the current run (`bucket_counts` adds it).
        self._counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        #: The current run: `_run` observations in bucket `_run_bucket`, whose range is (`_low`, `_high`].
        self._low = 0.0
        self._high = -1.0  # an empty range: the first observation starts a run
        self._run = 0
        self._run_bucket = 0

    def observe(self, value: float) -> None:
        self.sum += value
        if self._low < value <= self._high:
            self._run += 1  # the hot path: the bucket of the observation before
            return
        self._new_run(value)

    def _new_run(self, value: float) -> None:
        """Count the run that ends, then start one in the first bucket whose bound is >= value (le: value <=
        bound), found by a scan from the smallest bound: latencies sit in the first few buckets, and compiled it
        is a few native float compares (bisect makes a rich comparison call per step)."""
        run = self._run
        if run:
            counts = self._counts
            bucket = self._run_bucket
            counts[bucket] = counts[bucket] + run  # compiled: a native add (`+=` on a list item is a generic one)
        bounds = self.bounds
        i = 0
        n = len(bounds)
        while i < n and value > bounds[i]:
            i += 1
        self._run_bucket = i
        self._run = 1
        # The run's range: the bucket's own, or (at either end) as much of it as a literal reaches; a value outside
        # the range starts a run of its own, in the same bucket when it belongs there (a module's `math.inf` would be
        # an attribute lookup per call, compiled).
        self._low = bounds[i - 1] if i > 0 else -1e300
        self._high = bounds[i] if i < n else 1e300

    def bucket_counts(self) -> list[int]:
        """Each bucket's count, not cumulative, the last one +Inf (a copy)."""
        counts = list(self._counts)
        counts[self._run_bucket] += self._run
        return counts


class LockFreeHistogram:
    """A labelled histogram for per-request latencies, updated from the event loop thread only.

    An observation is a short scan of the bounds and two additions (prometheus-client: a lock per bucket it
    walks).
    `_count` is the sum of the buckets read at collect time, so `+Inf` and `_count` always agree.
    Exposition is the same as a prometheus-client Histogram's.
    """

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self._name = name
        self._labelnames = tuple(labelnames)
        self.documentation = documentation
        self._bounds = tuple(float(b) for b in buckets)
        if list(self._bounds) != sorted(set(self._bounds)):
            raise ValueError(f"{name}: buckets must be distinct and increasing")
        self._le = [floatToGoString(b) for b in self._bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._children: dict[tuple[str, ...], LockFreeHistogramChild] = {}
        registry.register(self)

    def labels(self, *values: str) -> LockFreeHistogramChild:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self._labelnames):
                raise ValueError(f"{self._name} takes labels {self._labelnames}, got {values}")
            child = self._children[values] = LockFreeHistogramChild(self._bounds)
        return child

    def collect(self) -> list[HistogramMetricFamily]:
        family = HistogramMetricFamily(self._name, self.documentation, labels=list(self._labelnames))
        for values, child in list(self._children.items()):
            counts, total = child.bucket_counts(), child.sum
            cumulative, buckets = 0, []
            for le, count in zip(self._le, counts, strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)))
            family.add_metric(list(values), buckets, total)
        return [family]


class _AllMetrics:
    """One collector over the scrape registry and the per-topic counters."""

    def __init__(self, registry: CollectorRegistry, counters: list[TopicCounter]) -> None:
        self.sources: list[Any] = [registry, *counters]

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


class ProxyMetrics:
    """Every metric the proxy exports. One instance per proxy; tests get isolated registries."""

    def __init__(self, registry: CollectorRegistry | None = None, topic_label_limit: int = 200) -> None:
        #: Everything, for tools and tests; `scrape_registry` + the hand-rendered per-topic counters for /metrics.
        self.registry = registry or CollectorRegistry()
        self.scrape_registry = CollectorRegistry()
        self.topic = TopicLabels(topic_label_limit)
        r = self.scrape_registry
        p = "insync_proxy_"

        self.build_info = Info(p + "build", "Build of the running proxy (compiled: the data path runs compiled, scripts/compile)",
                               registry=r)
        self.build_info.info({"version": __version__, "python": platform.python_version(),
                              "compiled": "true" if compiled_modules() else "false"})

        # Connections
        self.client_connections_active = Gauge(
            p + "client_connections_active", "Client connections open now", ["listener"], registry=r
        )
        self.client_connections_total = Counter(
            p + "client_connections", "Client connections accepted", ["listener"], registry=r
        )
        self.client_connection_errors_total = Counter(
            p + "client_connection_errors", "Client connections closed by an error of the proxy (internal) or "
            "the cluster (upstream_unreachable); a client's own bad input is in bad_input_total",
            ["listener", "kind"], registry=r,
        )
        self.client_connections_held_total = Counter(
            p + "client_connections_held", "Client connections whose brokers' connects kept failing, by result: "
            "held (not answered) for a back-off growing per failure in a row before the broker is tried again, "
            "or over_limit (too many held already: tried at once)", ["listener", "result"], registry=r,
        )
        self.client_connections_held = Gauge(
            p + "client_connections_held_now", "Client connections held now because their brokers' connects keep "
            "failing (bounded: proxy/datapath/connect_failures.py, MAX_HELD_CONNECTIONS)", registry=r,
        )
        self.bad_input_total = Counter(
            p + "bad_input", "Bad input from clients, by cause (bad_frame, oversized_frame, broker_closed: the "
            "broker closed a connection with requests in flight, refused_connection); every one counted, "
            "logged rate-limited (proxy/observability/logs.py)", ["listener", "cause"], registry=r,
        )
        self.buffered_bytes = Gauge(
            p + "buffered_bytes", "Bytes the proxy holds in write buffers for clients and brokers slower than "
            "their peer (bounded by max_buffered_bytes, proxy/datapath/budget.py)", registry=r,
        )
        self.budget_paused_connections = Gauge(
            p + "budget_paused_connections", "Write buffers (a connection's responses or requests) whose source "
            "the memory budget holds back until their reader takes what they hold", registry=r,
        )
        self.upstream_connections_active = Gauge(
            p + "upstream_connections_active", "Connections to brokers open now", ["broker"], registry=r
        )
        self.upstream_connections_total = Counter(
            p + "upstream_connections", "Connections opened to brokers", ["broker"], registry=r
        )
        self.upstream_connection_errors_total = Counter(
            p + "upstream_connection_errors", "Failed or broken connections to brokers", ["broker", "kind"],
            registry=r,
        )
        self.upstream_connections_aborted_total = Counter(
            p + "upstream_connections_aborted", "Connections to brokers the proxy reset (SO_LINGER 0, its unsent "
            "bytes dropped) because their client closed with requests in flight: as a client that gives up, so "
            "the broker cannot take them later", ["broker"], registry=r,
        )
        self.brokers_without_port = Gauge(
            p + "brokers_without_port", "Brokers of the latest Metadata that a listener's node_id_ranges give no "
            "port (clients cannot reach them through it; each is logged once as an ERROR)", ["listener"], registry=r,
        )
        self.upstream_up = Gauge(
            p + "upstream_up", "1 when the control connection reached a broker at its last attempt", registry=r
        )
        self.control_authentication_failures_total = Counter(
            p + "control_authentication_failures", "SASL logins of the proxy's own connections (control, audit) "
            "the brokers refused, by mechanism; the first is logged once as a WARNING", ["mechanism"], registry=r,
        )
        self.background_task_failures_total = Counter(
            p + "background_task_failures", "Failed background work (cache fetches, refreshes), by task; "
            "each failure is also logged as a WARNING, its repeats as one summary per log_summary_interval_seconds", ["task"], registry=r,
        )

        # Live reloads (proxy/reload.py): TLS material on its interval, the configuration on SIGHUP / POST /reload
        self.reloads_total = Counter(
            p + "reloads", "Reload attempts by what (upstream_tls, downstream_tls, control_sasl, config) and "
            "result (ok, failed: the working material or configuration stays; each failure logged as an ERROR)",
            ["what", "result"], registry=r,
        )
        self.reload_failing = Gauge(
            p + "reload_failing", "1 while the latest reload of `what` failed (the old material is in use)",
            ["what"], registry=r,
        )
        self.tls_certificate_expiry = Gauge(
            p + "tls_certificate_expiry_timestamp_seconds", "notAfter (UNIX seconds) of the certificate in use, "
            "by side (upstream_tls, downstream_tls) and file (cert_file; ca_file: its CA expiring first)",
            ["side", "file"], registry=r,
        )

        # Requests
        # Per request: lock-free (updated from the event loop only), same exposition as prometheus-client's.
        self.requests_total = LockFreeCounter(
            p + "requests", "Requests received from clients", ["api"], registry=r
        )
        self.request_latency_seconds = LockFreeHistogram(
            p + "request_latency_seconds",
            "Client-observed latency: request received to response written back",
            ["api"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.upstream_latency_seconds = LockFreeHistogram(
            p + "upstream_latency_seconds",
            "Broker latency: request forwarded to response received",
            ["api"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.network_bytes_total = LockFreeCounter(
            p + "network_bytes", "Bytes moved, by direction (client_in, client_out, upstream_in, upstream_out)",
            ["direction"], registry=r,
        )
        self.frame_errors_total = Counter(
            p + "frame_errors", "Bad frames from clients or brokers, by parse error (too_large, protocolerror, ...; "
            "a broker's: upstream_...)", ["kind"], registry=r
        )

        self.address_leaks_total = Counter(
            p + "address_leaks", "Responses that carried a real broker address to a client "
            "(counted only with debug_address_leak_check)", ["api"], registry=r,
        )

        # KIP-637 caches
        self.metadata_cache_hits_total = Counter(
            p + "metadata_cache_hits", "min.insync.replicas lookups answered from the cache", registry=r
        )
        self.metadata_cache_misses_total = Counter(
            p + "metadata_cache_misses", "min.insync.replicas lookups not in the cache", registry=r
        )
        self.metadata_cache_refreshes_total = Counter(
            p + "metadata_cache_refreshes", "Cache refreshes by kind and outcome", ["kind", "outcome"], registry=r
        )
        self.metadata_cache_age_seconds = Gauge(
            p + "metadata_cache_age_seconds", "Age of the oldest min.insync.replicas entry of a topic in use "
            "(re-read ahead of expiry: above min_insync_ttl_seconds, reads fail)", registry=r
        )
        self.metadata_cache_entries = Gauge(
            p + "metadata_cache_entries", "Topics with a cached min.insync.replicas (at most min_insync_max_entries)",
            registry=r
        )
        self.metadata_cache_evicted_total = Counter(
            p + "metadata_cache_evicted", "min.insync.replicas entries dropped, those read longest ago, to stay "
            "within min_insync_max_entries", registry=r
        )
        self.min_insync_served_age_seconds = Histogram(
            p + "min_insync_served_age_seconds", "Age of the oldest min.insync.replicas a Metadata answer carried "
            "(one observation per answer carrying any; above min_insync_ttl_seconds: served stale while re-read)",
            buckets=SERVED_AGE_BUCKETS, registry=r,
        )
        self.min_insync_stale_served_total = Counter(
            p + "min_insync_stale_served", "Topics whose Metadata answer carried a min.insync.replicas older than "
            "min_insync_ttl_seconds (at most min_insync_max_stale_seconds more), served while it is re-read",
            registry=r
        )
        self.min_insync_miss_wait_exceeded_total = Counter(
            p + "min_insync_miss_wait_exceeded", "Metadata answers that waited min_insync_miss_wait_ms for "
            "DescribeConfigs and went out without some topics' min.insync.replicas", registry=r
        )
        self.describe_configs_latency_seconds = Histogram(
            p + "describe_configs_latency_seconds", "DescribeConfigs round trips of the control connection",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.describe_configs_errors_total = Counter(
            p + "describe_configs_errors", "DescribeConfigs failures by error", ["error"], registry=r
        )
        self.topic_configs_read_total = Counter(
            p + "topic_configs_read", "Topic configs the control connection asked for in DescribeConfigs (one per "
            "topic per request): with the control requests, the proxy's load on the brokers", registry=r
        )
        self.topics_in_use = Gauge(
            p + "topics_in_use", "Topics the proxy tracks: named by its clients' requests (Metadata of some topics, "
            "Produce) within topic_idle_seconds, at most max_topics_in_use", registry=r
        )
        self.topics_not_followed_total = Counter(
            p + "topics_not_followed", "Topics clients named (each topic of a Metadata request, each Produce "
            "partition) while max_topics_in_use were in use: served, but not followed (not refreshed ahead)",
            registry=r,
        )
        self.control_requests_total = Counter(
            p + "control_requests", "Requests the proxy's control connection sent, by API (Metadata, "
            "DescribeConfigs; failovers count again)", ["api"], registry=r
        )
        self.min_insync_unauthorized_total = Counter(
            p + "min_insync_unauthorized", "Topics left unenriched: no DESCRIBE_CONFIGS for the proxy", registry=r
        )
        self.topic_ids_unresolved_total = Counter(
            p + "topic_ids_unresolved", "Produce requests' topic ids the proxy could not name in time (forwarded as "
            "they are)", registry=r
        )
        self.topics_enriched_total = Counter(
            p + "topics_enriched", "Topics in Metadata responses that got min_insync_replicas", registry=r
        )
        self.partitions_below_min_isr = Gauge(
            p + "partitions_below_min_isr", "Partitions whose ISR is below the effective min ISR, as the proxy sees them",
            registry=r,
        )
        self.partitions_hidden_total = Counter(
            p + "partitions_hidden", "Partitions presented as leaderless by hide_unready_partitions", registry=r
        )

        # Acks policy (per partition decision)
        # Per-topic families: hand-rendered (see TopicCounter), in `registry` but not in `scrape_registry`.
        self.produce_partitions_total = TopicCounter(
            p + "produce_partitions", "Produce partition decisions by acks requested and sent",
            ["topic", "acks_requested", "acks_sent", "decision"],
        )
        self.proxy_answered_errors_total = TopicCounter(
            p + "proxy_answered_errors", "Partitions the proxy answered itself, by Kafka error code",
            ["topic", "error_code"],
        )
        self.precheck_total = TopicCounter(
            p + "precheck", "ISR prechecks (acks=-2, fast_fail) by outcome (passed, failed, unknown)",
            ["topic", "outcome"],
        )
        self.acks_floor_applied_total = TopicCounter(
            p + "acks_floor_applied", "Partitions whose acks an acks_floor policy raised", ["topic"]
        )
        self.produce_records_total = TopicCounter(
            p + "produce_records", "Records in Produce requests the proxy handled (from batch headers)", ["topic"]
        )
        self.produce_record_bytes_total = TopicCounter(
            p + "produce_record_bytes", "Record-set bytes in Produce requests the proxy handled", ["topic"]
        )
        self.topic_counters = [
            self.produce_partitions_total, self.proxy_answered_errors_total, self.precheck_total,
            self.acks_floor_applied_total, self.produce_records_total, self.produce_record_bytes_total,
        ]

        # Audit
        self.audit_events_written_total = Counter(
            p + "audit_events_written", "Audit events written, by sink", ["sink"], registry=r
        )
        self.audit_events_dropped_total = Counter(
            p + "audit_events_dropped", "Audit events dropped, by reason", ["reason"], registry=r
        )
        self.registry.register(_AllMetrics(self.scrape_registry, self.topic_counters))
