"""The proxy process: listeners, upstream connections, the control connection, lifecycle."""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import time
import uuid
from collections.abc import Callable, Container, Iterable
from pathlib import Path
from typing import Any

from insync_proxy.audit.events import isr_change_event, partition_readiness_event
from insync_proxy.protocol import MetadataResponse
from insync_proxy.proxy.admin import AdminServer
from insync_proxy.proxy.audit import AuditLog
from insync_proxy.proxy.audit.kafka_sink import KafkaAuditSink
from insync_proxy.proxy.audit.summary import ProduceSummaries
from insync_proxy.proxy.background import report_failure
from insync_proxy.proxy.behaviours.accounting import ProduceAccounting
from insync_proxy.proxy.behaviours.acks import AcksPolicy
from insync_proxy.proxy.behaviours.addresses import AddressRewrite
from insync_proxy.proxy.behaviours.api_versions import ApiVersionsNegotiation
from insync_proxy.proxy.behaviours.config_changes import TopicConfigWatcher
from insync_proxy.proxy.behaviours.isr_learning import IsrLearning, IsrRereads
from insync_proxy.proxy.behaviours.metadata import MetadataEnricher
from insync_proxy.proxy.behaviours.topic_ids import TopicIdResolution
from insync_proxy.proxy.broker_ports import NO_PORT, BrokerPorts
from insync_proxy.proxy.capture import FrameCapture
from insync_proxy.proxy.cluster_view import ClusterView, PartitionState, Readiness, effective_min_isr
from insync_proxy.proxy.config import ListenerConfig, ProxyConfig, TlsConfig
from insync_proxy.proxy.connection import ClientConnection, ConnectionSettings
from insync_proxy.proxy.context import BehaviourContext
from insync_proxy.proxy.control import ControlConnection, ControlError
from insync_proxy.proxy.exchange import Behaviour, BehaviourRegistry, ListenerAddresses, ListenerSettings
from insync_proxy.proxy.metrics import ProxyMetrics
from insync_proxy.proxy.min_insync import MinInsyncCache
from insync_proxy.proxy.observer import ExchangeObserver

log = logging.getLogger("insync_proxy")

#: How long a Produce naming an unknown topic id waits for the control connection to learn its name.
TOPIC_ID_WAIT_SECONDS = 2.5

#: How long a broker may be missing from Metadata before its listener is closed.
BROKER_LISTENER_GRACE_SECONDS = 300.0


def client_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """Upstream TLS: trust ca_file (else the system store), optional client cert, hostname checked."""
    if not tls.enabled:
        return None
    context = ssl.create_default_context(cafile=tls.ca_file)
    context.check_hostname = tls.check_hostname
    if not tls.check_hostname:
        log.warning("upstream TLS hostname verification is OFF (upstream_tls.check_hostname = false)")
    if tls.cert_file:
        context.load_cert_chain(tls.cert_file, tls.key_file, password=tls.key_password)
    return context


def server_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """Downstream TLS: the proxy's own certificate and key."""
    if not tls.enabled:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    assert tls.cert_file
    context.load_cert_chain(tls.cert_file, tls.key_file, password=tls.key_password)
    if tls.ca_file:
        context.load_verify_locations(tls.ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class Listener:
    """One listening socket: a group's bootstrap port, or the port standing for one broker."""

    def __init__(self, group: ListenerGroup, node_id: int | None, server: asyncio.Server, port: int) -> None:
        self.group = group
        self.node_id = node_id
        self.server = server
        self.port = port
        config = group.config
        #: What behaviours see of this listener.
        self.settings = ListenerSettings(
            name=group.name, label=self.label, metadata_schema=config.metadata_schema,
            hide_unready_partitions=config.hide_unready_partitions, addresses=group.addresses,
            broker_listeners=group.settled,
        )

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def label(self) -> str:
        """`bootstrap` or `broker-<id>`, prefixed by the group name when it is not `default`."""
        part = "bootstrap" if self.node_id is None else f"broker-{self.node_id}"
        return part if self.group.name == "default" else f"{self.group.name}/{part}"


class ListenerGroup:
    """A bootstrap listener plus one listener per broker, at the port its node_id_ranges give its node id."""

    def __init__(self, config: ListenerConfig, advertised_host: str) -> None:
        self.config = config
        #: The one node id -> port mapping of this listener: listeners opened, addresses rewritten.
        self.ports = BrokerPorts.from_settings(
            config.broker_port_base, config.node_id_ranges, f"listener {config.name}: node_id_ranges")
        self.addresses = ListenerAddresses(advertised_host, self.ports)
        self.bootstrap: Listener | None = None
        self.brokers: dict[int, Listener] = {}
        #: Brokers of the latest Metadata that node_id_ranges do not cover (named at port 0, logged once).
        self.unmapped: set[int] = set()
        #: Node ids there is nothing more to open for: a listener is open, or the node id has no port.
        self.settled = _SettledNodeIds(self)

    @property
    def name(self) -> str:
        return self.config.name

    def has_broker_listener(self, node_id: int) -> bool:
        return node_id in self.brokers


class _SettledNodeIds(Container[int]):
    """A live view: node ids with a broker listener open, or that the listener's node_id_ranges leave out."""

    __slots__ = ("group",)

    def __init__(self, group: ListenerGroup) -> None:
        self.group = group

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.group.brokers or node_id in self.group.unmapped


class InsyncProxy:
    """Everything one proxy process runs; `start()` then `serve_until_stopped()` or `stop()`."""

    def __init__(self, config: ProxyConfig, metrics: ProxyMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or ProxyMetrics(topic_label_limit=config.topic_label_limit)
        self.cluster_view = ClusterView()
        self.groups = [ListenerGroup(lc, config.advertised_host) for lc in config.listeners]
        self.upstream_ssl = client_ssl_context(config.upstream_tls)
        self.downstream_ssl = server_ssl_context(config.downstream_tls)
        self.control = ControlConnection(
            config.upstream_addresses(),
            ssl_context=self.upstream_ssl,
            sasl=config.control_sasl if config.control_sasl.mechanism else None,
            timeout=config.connect_timeout_seconds,
            max_frame_bytes=config.max_frame_bytes,
            request_timeout=config.control_request_timeout_seconds,
            metrics=self.metrics,
        )
        self.min_insync = MinInsyncCache(
            self.control, self.metrics, config.min_insync_ttl_seconds, config.min_insync_miss_wait_ms / 1000
        )
        self.capture = FrameCapture(Path(config.debug_capture_dir)) if config.debug_capture_dir else None
        self.audit = AuditLog(config.audit, config.proxy_id, self.metrics) if config.audit.enabled else None
        self.audit_to_kafka: KafkaAuditSink | None = None
        if self.audit is not None and config.audit.kafka_topic:
            self.audit_to_kafka = KafkaAuditSink(
                config.audit.kafka_topic, config.audit.queue_size, proxy_id=config.proxy_id,
                cluster_view=self.cluster_view, refresh_topics=self.refresh_topics, connect=self._leader_connection,
                metrics=self.metrics,
            )
            self.audit.kafka_sink = self.audit_to_kafka
        #: Audit v2 produce_summary accumulators (drained every audit.interval_seconds).
        self.summaries = ProduceSummaries(config.audit.interval_seconds) if self.audit is not None else None
        self._readiness: dict[tuple[str, int], bool] = {}
        if self.audit is not None:
            self.cluster_view.on_partition_changed.append(self._audit_isr_change)
        context = BehaviourContext(
            cluster_view=self.cluster_view,
            min_insync=self.min_insync,
            metrics=self.metrics,
            audit=self.audit,
            refresh_topics=self.refresh_topics_soon,
            open_broker_listeners=lambda: self.sync_broker_listeners(remove_missing=False),
            call_soon=self._call_soon,
            resolve_topic_ids=self.resolve_topic_ids,
        )
        #: A topic's ISR re-read at most once a second, for a failed acks precheck and a leader's error alike.
        rereads = IsrRereads(context.refresh_topics)
        behaviours: list[Behaviour] = [
            ApiVersionsNegotiation(),
            MetadataEnricher(context),
            AddressRewrite(),
            TopicConfigWatcher(context),
            # Produce, one concern each, in this order (proxy/behaviours/produce_exchange.py): topic ids named, the
            # acks decided, then at completion the partitions counted and the leaders' errors learnt.
            TopicIdResolution(context),
            AcksPolicy(context, config.acks_policies, rereads),
            ProduceAccounting(context, self.summaries, every_request=config.audit.detail == "every_request"),
            IsrLearning(context, rereads),
        ]
        self.registry = BehaviourRegistry(behaviours)
        self.connection_settings = ConnectionSettings(
            registry=self.registry,
            observer=ExchangeObserver(
                self.metrics, self.capture,
                self.cluster_view.known_brokers if config.debug_address_leak_check else None,
            ),
            metrics=self.metrics,
            max_frame_bytes=config.max_frame_bytes,
            connect_timeout_seconds=config.connect_timeout_seconds,
            upstream_ssl=self.upstream_ssl,
            bootstrap_candidates=self.bootstrap_candidates,
            on_closed=self._connection_closed,
            observe_whole_frames=self.capture is not None or config.debug_address_leak_check,
        )
        self.admin = AdminServer(self.metrics, lambda: self.ready, config.admin_host, config.admin_port)
        self._bootstrap_cycle = itertools.count()
        self._tasks: list[asyncio.Task[Any]] = []
        self._listener_lock = asyncio.Lock()
        self._stopping = False
        self._missing_since: dict[int, float] = {}
        self._drained = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()
        self._resolving: dict[uuid.UUID, asyncio.Task[None]] = {}
        self.started_at = time.monotonic()
        #: What /readyz said when last looked at: the "ready" / "not ready" log lines follow its turns.
        self._was_ready = False
        self.loop: asyncio.AbstractEventLoop

    @property
    def connections(self) -> set[ClientConnection]:
        """Client connections open now."""
        return self.connection_settings.connections

    def _connection_closed(self) -> None:
        if self._stopping and not self.connections:
            self._drained.set()

    def _call_soon(self, callback: Callable[[], None]) -> None:
        self.loop.call_soon(callback)

    def _leader_connection(self, address: tuple[str, int]) -> ControlConnection:
        """A connection of the proxy's own to one broker (the audit topic's leader)."""
        return ControlConnection(
            [address], ssl_context=self.upstream_ssl, sasl=self.control.sasl,
            timeout=self.config.connect_timeout_seconds,
            request_timeout=self.config.control_request_timeout_seconds, metrics=self.metrics,
        )

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

    def _audit_readiness(self, topic: str, partition: int, state: PartitionState,
                         readiness: Readiness | None = None) -> None:
        """A partition_readiness event when the view turns a partition unready (ISR below min) or ready again."""
        assert self.audit is not None
        if readiness is None:
            readiness = self.cluster_view.readiness(topic, partition, self.min_insync.peek(topic))
        if readiness.min_isr is None or readiness.isr_size is None:
            return  # unknown: neither
        ready = not readiness.below_min_isr
        key = (topic, partition)
        was = self._readiness.get(key)
        self._readiness[key] = ready
        if was is None and ready:
            return  # first sight of a healthy partition: nothing turned
        if was != ready:
            self.audit.emit(partition_readiness_event(topic, partition, ready, readiness.isr_size, readiness.min_isr,
                                                      state.leader_id))

    def _audit_isr_change(self, topic: str, partition: int, old: PartitionState | None, new: PartitionState) -> None:
        """An `isr_change` audit event whenever the proxy's view of a partition's ISR or leader changes."""
        assert self.audit is not None
        self.audit.emit(isr_change_event(topic, partition, len(new.isr),
                                         effective_min_isr(self.min_insync.peek(topic), len(new.replicas)),
                                         new.leader_id))
        self._audit_readiness(topic, partition, new)

    async def resolve_topic_ids(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """Learn the names of topic ids the view does not know (a topic created moments ago): one Metadata
        by id on the control connection per id at a time, shared by every request that waits for it;
        waits at most TOPIC_ID_WAIT_SECONDS. Ids still unknown then are counted."""
        wanted = [i for i in dict.fromkeys(topic_ids) if i not in self.cluster_view.topic_ids]
        if not wanted:
            return
        new = [i for i in wanted if i not in self._resolving]
        if new:
            task = self.loop.create_task(self._metadata_by_ids(new))
            for topic_id in new:
                self._resolving[topic_id] = task
        waits = {self._resolving[i] for i in wanted if i in self._resolving}
        if waits:
            await asyncio.wait([asyncio.shield(w) for w in waits], timeout=TOPIC_ID_WAIT_SECONDS)
        unresolved = [i for i in wanted if i not in self.cluster_view.topic_ids]
        if unresolved:
            self.metrics.topic_ids_unresolved_total.inc(len(unresolved))
            log.warning("topic id(s) %s still unknown after %.1fs: forwarded as they are (the broker decides)",
                        ", ".join(map(str, unresolved)), TOPIC_ID_WAIT_SECONDS)

    async def _metadata_by_ids(self, topic_ids: list[uuid.UUID]) -> None:
        try:
            response = await self.control.metadata_by_ids(topic_ids)
            self.cluster_view.update(response)
        except ControlError as exc:
            log.warning("Metadata for topic id(s) %s failed: %s", ", ".join(map(str, topic_ids)), exc)
            self.metrics.background_task_failures_total.labels("topic_id_lookup").inc()
        finally:
            for topic_id in topic_ids:
                self._resolving.pop(topic_id, None)

    def refresh_topics_soon(self, topics: Iterable[str]) -> None:
        """Re-read some topics' partitions (leader, ISR) in the background."""
        self._spawn(self.refresh_topics(topics))

    def _spawn(self, coroutine: Any) -> None:
        task = self.loop.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        """A background task's failure is logged once with context and counted, never left unretrieved."""
        self._background.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            report_failure(self.metrics, "refresh", str(task.get_coro()), error)

    async def refresh_topics(self, topics: Iterable[str]) -> None:
        """Re-read some topics' partitions (leader, ISR) now."""
        topics = list(topics)
        try:
            response = await self.control.metadata(topics)
        except ControlError as exc:
            report_failure(self.metrics, "isr_refresh", f"Metadata of {topics}", exc)
            return
        self.cluster_view.update(response)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        for group in self.groups:
            group.bootstrap = await self._listen(group, None, group.config.bootstrap_port)
        await self.admin.start()
        for group in self.groups:
            assert group.bootstrap is not None
            log.info(
                "listener %s: bootstrap %s:%d (advertised %s), brokers at %s:%s, metadata_schema=%s%s",
                group.name, self.config.bind_host, group.bootstrap.port, self.config.advertised_host,
                self.config.advertised_host, group.ports.describe(), group.config.metadata_schema,
                ", hide_unready_partitions" if group.config.hide_unready_partitions else "",
            )
        log.info("listening: bootstrap %s:%d, admin %s (/readyz turns ready once the brokers are known)",
                 self.config.advertised_host, self.bootstrap_port, self.admin.url)
        self.min_insync.start()
        if self.audit is not None:
            self.audit.start()
        if self.audit_to_kafka is not None:
            self.audit_to_kafka.start()
        try:
            await self.refresh_metadata()
        except ControlError as exc:
            if not getattr(exc, "already_logged", False):  # a refused login was said once where it happened
                log.warning("upstream not reachable yet (%s); retrying every %.0fs", exc,
                            self.config.metadata_refresh_seconds)
        self._note_readiness()
        self._tasks.append(self.loop.create_task(self._refresh_loop()))
        if self.summaries is not None:
            self._tasks.append(self.loop.create_task(self._summary_loop()))

    def _note_readiness(self) -> None:
        """Log "ready" when /readyz turns ready, and "not ready" (with why) when it turns back."""
        ready, reason = self.ready
        if ready and not self._was_ready:
            log.info("ready: %d broker(s) known; /readyz answers 200", len(self.cluster_view.brokers))
        elif self._was_ready and not ready:
            log.warning("not ready: %s; /readyz answers 503", reason)
        self._was_ready = ready

    async def _listen(self, group: ListenerGroup, node_id: int | None, port: int) -> Listener:
        holder: dict[str, Listener] = {}

        def factory() -> ClientConnection:
            listener = holder["listener"]
            upstream = None if node_id is None else self.cluster_view.known_brokers.get(node_id)
            return ClientConnection(self.connection_settings, listener.settings, upstream)

        server = await self.loop.create_server(
            factory, self.config.bind_host, port, ssl=self.downstream_ssl, reuse_address=True, backlog=1024
        )
        actual_port = server.sockets[0].getsockname()[1]
        listener = Listener(group, node_id, server, actual_port)
        holder["listener"] = listener
        return listener

    @property
    def bootstrap_port(self) -> int:
        """The first listener group's bootstrap port (resolved if configured as 0)."""
        bootstrap = self.groups[0].bootstrap
        assert bootstrap is not None
        return bootstrap.port

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.metadata_refresh_seconds)
            try:
                await self.refresh_metadata()
            except Exception as exc:  # logged once and counted; the next refresh tries again
                report_failure(self.metrics, "metadata_refresh", "the proxy's periodic full Metadata", exc)
            self._note_readiness()

    async def refresh_metadata(self) -> MetadataResponse:
        """The control connection's own full Metadata: brokers (listeners follow) and every partition's ISR."""
        try:
            response = await self.control.metadata(None)
        except ControlError:
            self.metrics.upstream_up.set(0)
            self.metrics.metadata_cache_refreshes_total.labels("metadata", "error").inc()
            raise
        self.metrics.upstream_up.set(1)
        self.metrics.metadata_cache_refreshes_total.labels("metadata", "ok").inc()
        self.cluster_view.update(response, all_topics=True)
        await self.sync_broker_listeners(remove_missing=True)
        # Keep min.insync.replicas warm for every topic, so prechecks rarely meet a cold cache.
        cold = [t for t in self.cluster_view.topic_partition_counts if not self.min_insync.has_fresh(t)]
        if cold:
            self.min_insync.fetch(cold)  # its failures are logged and counted where they happen
        # One pass: the below-min gauge, and readiness events (min.insync.replicas may have become known
        # or changed since the ISR last did).
        below = 0
        view, peek = self.cluster_view, self.min_insync.peek
        for (topic, partition), state in list(view.partitions.items()):
            readiness = view.readiness(topic, partition, peek(topic))
            below += readiness.below_min_isr
            if self.audit is not None:
                self._audit_readiness(topic, partition, state, readiness)
        self.metrics.partitions_below_min_isr.set(below)
        return response

    async def sync_broker_listeners(self, remove_missing: bool) -> None:
        async with self._listener_lock:
            if self._stopping:
                return
            wanted = set(self.cluster_view.brokers)
            for group in self.groups:
                self._note_unmapped(group, wanted)
                for node_id in sorted(wanted - set(group.brokers) - group.unmapped):
                    port = group.ports.port_for(node_id)
                    assert port is not None  # _note_unmapped took the others out
                    try:
                        group.brokers[node_id] = await self._listen(group, node_id, port)
                    except OSError as exc:
                        log.error(
                            "listener %s: cannot listen on %s:%d for broker %d (%s); clients cannot reach that "
                            "broker: pick a free broker_port_base", group.name, self.config.bind_host, port, node_id, exc,
                        )
                        continue
                    log.info("listener %s: broker %d (%s:%d) now at %s:%d", group.name, node_id,
                             *self.cluster_view.brokers[node_id], self.config.advertised_host, port)
                if remove_missing:
                    self._close_departed_listeners(group, wanted)

    def _note_unmapped(self, group: ListenerGroup, wanted: set[int]) -> None:
        """Brokers the listener's node_id_ranges do not cover: one ERROR line each when first seen, and the
        gauge. They keep no listener; responses name them at port 0 (the proxy serves the other brokers)."""
        unmapped = {node_id for node_id in wanted if group.ports.port_for(node_id) is None}
        for node_id in sorted(unmapped - group.unmapped):
            log.error(
                "listener %s: broker %d has no port: node id %d is outside node_id_ranges %s (broker ports %s); "
                "add it to that [[listener]]'s node_id_ranges (e.g. \"%d\") and restart. Until then clients are "
                "told port %d for it and cannot reach it through this listener",
                group.name, node_id, node_id, group.ports.settings_text(), group.ports.port_span(), node_id, NO_PORT,
            )
        group.unmapped = unmapped
        self.metrics.brokers_without_port.labels(group.name).set(len(unmapped))

    def _close_departed_listeners(self, group: ListenerGroup, wanted: set[int]) -> None:
        # A broker missing from Metadata may be restarting (rolling restart, fenced after a pause): keep its
        # listener through a grace period, so clients with its address meet the broker, not a refused port.
        now = time.monotonic()
        for node_id in set(group.brokers) - wanted:
            since = self._missing_since.setdefault(node_id, now)
            if now - since < BROKER_LISTENER_GRACE_SECONDS:
                continue
            listener = group.brokers.pop(node_id)
            listener.server.close()
            log.info("listener %s: broker %d left the cluster %.0fs ago; its listener is closed",
                     group.name, node_id, now - since)
        for node_id in wanted:
            self._missing_since.pop(node_id, None)

    def bootstrap_candidates(self) -> list[tuple[str, int]]:
        """Upstream addresses for a bootstrap connection, rotated so load spreads over the brokers.

        Brokers registered in the latest Metadata come first: a fenced or hung broker may still accept
        TCP connections and then never answer.
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
        """Ready: the control connection reached a broker and the proxy knows the brokers."""
        if not self.cluster_view.brokers:
            return False, "no broker metadata yet"
        for group in self.groups:
            if group.unmapped and group.unmapped >= set(self.cluster_view.brokers):
                ids = ", ".join(map(str, sorted(group.unmapped)))
                return False, (f"listener {group.name} has a port for none of the brokers ({ids}): add their node "
                               f"ids to its node_id_ranges (now {group.ports.settings_text()})")
        age = time.monotonic() - self.cluster_view.updated_at
        if age > max(3 * self.config.metadata_refresh_seconds, 30):
            return False, f"metadata is {age:.0f}s old: upstream unreachable?"
        return True, "ok"

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish (up to the drain timeout), then close everything."""
        if self._stopping:
            return
        self._stopping = True
        timeout = self.config.drain_timeout_seconds if drain_timeout is None else drain_timeout
        listeners = [g.bootstrap for g in self.groups if g.bootstrap]
        listeners += [listener for g in self.groups for listener in g.brokers.values()]
        for listener in listeners:
            listener.server.close()
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
