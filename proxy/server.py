"""The proxy process: wires the parts together, starts and stops them; it hosts no service itself (listeners.py,
metadata_refresh.py, readiness.py, tls.py and behaviours/ do)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from insync_proxy.proxy.audit.kafka_sink import KafkaAuditSink
from insync_proxy.proxy.audit.summary import ProduceSummaries
from insync_proxy.proxy.audit.writer import AuditLog
from insync_proxy.proxy.behaviours.accounting import ProduceAccounting
from insync_proxy.proxy.behaviours.acks import AcksPolicy
from insync_proxy.proxy.behaviours.addresses import AddressRewrite
from insync_proxy.proxy.behaviours.api_versions import ApiVersionsNegotiation
from insync_proxy.proxy.behaviours.config_changes import TopicConfigWatcher
from insync_proxy.proxy.behaviours.isr_learning import IsrLearning, IsrRereads
from insync_proxy.proxy.behaviours.metadata import MetadataEnricher
from insync_proxy.proxy.behaviours.order import in_order
from insync_proxy.proxy.behaviours.topic_ids import TopicIdResolution
from insync_proxy.proxy.config.broker_ports import bootstrap_host
from insync_proxy.proxy.config.settings import ProxyConfig
from insync_proxy.proxy.config.tls import TlsMaterial
from insync_proxy.proxy.controlplane.context import BehaviourContext, call_soon_on_the_loop
from insync_proxy.proxy.controlplane.control import ControlConnection, ControlError
from insync_proxy.proxy.controlplane.metadata_refresh import MetadataRefresh
from insync_proxy.proxy.controlplane.min_insync import MinInsyncCache, TopicDemand
from insync_proxy.proxy.controlplane.readiness import PartitionReadiness
from insync_proxy.proxy.datapath.budget import MemoryBudget
from insync_proxy.proxy.datapath.capture import FrameCapture
from insync_proxy.proxy.datapath.cluster_view import ClusterView
from insync_proxy.proxy.datapath.connection import ClientConnection, ConnectionSettings
from insync_proxy.proxy.datapath.exchange import BehaviourBase, BehaviourRegistry
from insync_proxy.proxy.datapath.listeners import Listeners
from insync_proxy.proxy.datapath.observer import ExchangeObserver
from insync_proxy.proxy.observability.admin import AdminServer
from insync_proxy.proxy.observability.heap import release_free_memory_every
from insync_proxy.proxy.observability.metrics import ProxyMetrics
from insync_proxy.proxy.reload import Reloads

log = logging.getLogger("insync_proxy")


class InsyncProxy:
    """Everything one proxy process runs; `start()` then `stop()`; `load` re-reads the settings (reload.py), from
    `config_file` among its sources, whose changed content reloads too."""

    def __init__(self, config: ProxyConfig, metrics: ProxyMetrics | None = None,
                 load: Callable[[], ProxyConfig] | None = None, config_file: str | None = None) -> None:
        self.config = config
        self.metrics = metrics or ProxyMetrics(topic_label_limit=config.topic_label_limit)
        self.cluster_view = ClusterView()
        self.upstream_tls = TlsMaterial("upstream_tls", config.upstream_tls)
        self.downstream_tls = TlsMaterial("downstream_tls", config.downstream_tls)
        self.control = self._control_connection(config.upstream_addresses())
        self.min_insync = MinInsyncCache(
            self.control, self.metrics, config.min_insync_ttl_seconds, config.min_insync_miss_wait_ms / 1000,
            TopicDemand(config.topic_idle_seconds, max_topics=config.max_topics_in_use),
            config.describe_configs_batch_topics, config.min_insync_max_stale_seconds, config.min_insync_max_entries)
        self.capture = FrameCapture(Path(config.debug_capture_dir)) if config.debug_capture_dir else None
        self.audit = AuditLog(config.audit, config.proxy_id, self.metrics) if config.audit.enabled else None
        #: Audit v2 produce_summary accumulators (drained every audit.interval_seconds).
        self.summaries = ProduceSummaries(config.audit.interval_seconds) if self.audit is not None else None
        self.listeners = Listeners(
            config.listeners, bind_host=config.bind_host, advertised_host=config.advertised_host,
            ssl_context=self.downstream_tls.listener_context, cluster_view=self.cluster_view, metrics=self.metrics,
            connection_factory=lambda listener, upstream, count: ClientConnection(self.connection_settings, listener,
                                                                                   upstream, count))
        self.readiness = PartitionReadiness(self.cluster_view, self.min_insync, self.metrics, self.audit)
        self.metadata = MetadataRefresh(self.control, self.cluster_view, self.min_insync, self.metrics,
                                        self.listeners, self.readiness, config.metadata_refresh_seconds,
                                        config.min_insync_warm_up)
        self.audit_to_kafka: KafkaAuditSink | None = None
        if self.audit is not None and config.audit.kafka_topic:
            self.audit_to_kafka = KafkaAuditSink(
                config.audit.kafka_topic, config.audit.queue_size, proxy_id=config.proxy_id,
                cluster_view=self.cluster_view, refresh_topics=self.metadata.refresh_topics,
                connect=lambda address: self._control_connection([address]), metrics=self.metrics,
            )
            self.audit.kafka_sink = self.audit_to_kafka
        self.registry = BehaviourRegistry(self._behaviours())
        self.connection_settings = ConnectionSettings(
            registry=self.registry, metrics=self.metrics, max_frame_bytes=config.max_frame_bytes,
            observer=ExchangeObserver(self.metrics, self.capture,
                                      self.cluster_view.known_brokers if config.debug_address_leak_check else None),
            connect_timeout_seconds=config.connect_timeout_seconds, upstream_ssl=self.upstream_tls.context,
            bootstrap_candidates=self.bootstrap_candidates, on_closed=self._connection_closed,
            observe_whole_frames=self.capture is not None or config.debug_address_leak_check,
            budget=MemoryBudget(config.max_buffered_bytes, config.max_buffered_bytes_per_connection),
        )
        self.reloads = Reloads(self, load, config_file)
        self.admin = AdminServer(self.metrics, lambda: self.ready, config.admin_host, config.admin_port,
                                 reload=lambda: self.reloads.reload("POST /reload"))
        self._bootstrap_cycle = itertools.count()
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopping = False
        self._drained = asyncio.Event()
        #: What /readyz said when last looked at: the "ready" / "not ready" log lines follow its turns.
        self._was_ready = False

    def _behaviours(self) -> list[BehaviourBase]:
        """Every behaviour, in the order they see an exchange."""
        context = BehaviourContext(
            cluster_view=self.cluster_view, min_insync=self.min_insync, metrics=self.metrics, audit=self.audit,
            refresh_topics=self.metadata.refresh_topics_soon,
            open_broker_listeners=lambda: self.listeners.sync(remove_missing=False),
            call_soon=call_soon_on_the_loop, control=self.control,
        )
        #: A topic's ISR re-read at most once a second, for a failed acks precheck and a leader's error alike.
        rereads = IsrRereads(context.refresh_topics)
        # in the one order every exchange meets them (proxy/behaviours/order.py)
        return in_order([
            ApiVersionsNegotiation(),
            MetadataEnricher(context),
            AddressRewrite(),
            TopicConfigWatcher(context),
            TopicIdResolution(context),
            AcksPolicy(context, self.config.acks_policies, rereads),
            ProduceAccounting(context, self.summaries, every_request=self.config.audit.detail == "every_request"),
            IsrLearning(context, rereads),
        ])

    def _control_connection(self, addresses: list[tuple[str, int]]) -> ControlConnection:
        """A connection of the proxy's own: the control connection, or one to the audit topic's leader."""
        config = self.config
        return ControlConnection(
            addresses, ssl_context=self.upstream_tls.context, sasl=config.control_sasl if config.control_sasl.mechanism else None,
            timeout=config.connect_timeout_seconds, request_timeout=config.control_request_timeout_seconds,
            metrics=self.metrics, max_frame_bytes=config.max_frame_bytes,
        )

    @property
    def connections(self) -> set[ClientConnection]:
        """Client connections open now."""
        return self.connection_settings.connections

    @property
    def bootstrap_port(self) -> int:
        """The first listener group's bootstrap port (resolved if configured as 0)."""
        return self.listeners.bootstrap_port

    def _connection_closed(self) -> None:
        if self._stopping and not self.connections:
            self._drained.set()

    def _flush_summaries(self) -> None:
        """End the audit interval: one produce_summary event per key that saw traffic."""
        if self.summaries is None or self.audit is None:
            return
        end, events = self.summaries.drain()
        self.audit.emit_many(events, at=end)

    async def _summary_loop(self) -> None:
        assert self.summaries is not None
        while True:
            await asyncio.sleep(self.summaries.interval_seconds)
            self._flush_summaries()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        await self.listeners.open_bootstrap()
        await self.admin.start()
        log.info("listening: bootstrap %s:%d, admin %s (/readyz turns ready once the brokers are known)",
                 bootstrap_host(self.config.advertised_host, self.config.bind_host), self.bootstrap_port,
                 self.admin.url)
        self.min_insync.start()
        if self.audit is not None:
            self.audit.start()
        if self.audit_to_kafka is not None:
            self.audit_to_kafka.start()
        try:
            await self.metadata.refresh_metadata()
            await self.metadata.finish_warm_up()
        except ControlError as exc:
            if not getattr(exc, "already_logged", False):  # a refused login was said once where it happened
                log.warning("upstream not reachable yet (%s); retrying every %.0fs", exc,
                            self.config.metadata_refresh_seconds)
        self._note_readiness()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self.metadata.run(after_each=self._note_readiness)))
        self._tasks.append(loop.create_task(self.reloads.run()))
        self._tasks.append(loop.create_task(release_free_memory_every()))  # RSS follows what is held (heap.py)
        if self.summaries is not None:
            self._tasks.append(loop.create_task(self._summary_loop()))

    def _note_readiness(self) -> None:
        """Log "ready" when /readyz turns ready, and "not ready" (with why) when it turns back."""
        ready, reason = self.ready
        if ready and not self._was_ready:
            log.info("ready: %d broker(s) known; /readyz answers 200", len(self.cluster_view.brokers))
        elif self._was_ready and not ready:
            log.warning("not ready: %s; /readyz answers 503", reason)
        self._was_ready = ready

    def bootstrap_candidates(self) -> list[tuple[str, int]]:
        """Upstream addresses for a bootstrap connection, rotated so load spreads over the brokers.

        Brokers registered in the latest Metadata come first: a fenced or hung broker may still accept
        TCP connections and then never answer. The connection puts those whose connect failed recently last
        (`ConnectFailures.order`, proxy/datapath/connect_failures.py): a paused broker stays registered.
        """
        addresses = self.config.upstream_addresses()
        start = next(self._bootstrap_cycle) % len(addresses)
        rotated = addresses[start:] + addresses[:start]
        registered = set(self.cluster_view.brokers.values())
        if not registered:
            return rotated
        return [a for a in rotated if a in registered] + [a for a in rotated if a not in registered]

    @property
    def ready(self) -> tuple[bool, str]:
        """Ready: the proxy knows the brokers (recently), has warmed up, and has a port for each broker."""
        reason = self.metadata.unready_reason() or self.listeners.unready_reason()
        return (False, reason) if reason is not None else (True, "ok")

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish (up to the drain timeout), then close everything."""
        if self._stopping:
            return
        self._stopping = True
        timeout = self.config.drain_timeout_seconds if drain_timeout is None else drain_timeout
        self.listeners.close()
        in_flight = sum(c.pending for c in self.connections)
        log.info("stopping: %d connection(s), %d request(s) in flight; draining up to %.0fs",
                 len(self.connections), in_flight, timeout)
        for connection in list(self.connections):
            connection.drain()
        if self.connections:
            try:
                await asyncio.wait_for(self._drained.wait(), timeout)
            except TimeoutError:
                log.warning("drain timeout: closing %d connection(s) with requests still in flight",
                            len(self.connections))
        for connection in list(self.connections):
            connection.close()
        for task in self._tasks:
            task.cancel()
        self.min_insync.stop()
        self._flush_summaries()  # the last, partial interval: nothing accounted is lost
        if self.audit is not None:
            self.audit.close()
        if self.audit_to_kafka is not None:
            await self.audit_to_kafka.stop()
        await self.control.close()
        await self.admin.stop()
        log.info("stopped")
