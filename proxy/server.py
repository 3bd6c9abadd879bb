"""The proxy process: listeners, upstream connections, the control connection, lifecycle."""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import time
from pathlib import Path
from typing import Any

from insync_proxy.protocol import ApiKey, MetadataResponse, decode_response, split_response
from insync_proxy.proxy.admin import AdminServer
from insync_proxy.proxy.audit import AuditLog
from insync_proxy.proxy.audit.kafka_sink import KafkaAuditSink
from insync_proxy.proxy.behaviours.acks import AcksPolicy
from insync_proxy.proxy.behaviours.addresses import AddressRewrite, ListenerAddresses
from insync_proxy.proxy.behaviours.api_versions import ApiVersionsNegotiation
from insync_proxy.proxy.behaviours.config_changes import TopicConfigWatcher
from insync_proxy.proxy.behaviours.metadata import MetadataEnricher
from insync_proxy.proxy.capture import FrameCapture
from insync_proxy.proxy.cluster_view import ClusterView
from insync_proxy.proxy.config import ListenerConfig, ProxyConfig, TlsConfig
from insync_proxy.proxy.connection import ClientConnection, UpstreamConnection
from insync_proxy.proxy.control import ControlConnection, ControlError
from insync_proxy.proxy.exchange import BehaviourRegistry, Exchange, api_name
from insync_proxy.proxy.metrics import ProxyMetrics
from insync_proxy.proxy.min_insync import MinInsyncCache, effective_min_isr

log = logging.getLogger("insync_proxy")

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
        context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


def server_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """Downstream TLS: the proxy's own certificate and key."""
    if not tls.enabled:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    assert tls.cert_file
    context.load_cert_chain(tls.cert_file, tls.key_file)
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

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def label(self) -> str:
        """`bootstrap` or `broker-<id>`, prefixed by the group name when it is not `default`."""
        part = "bootstrap" if self.node_id is None else f"broker-{self.node_id}"
        return part if self.group.name == "default" else f"{self.group.name}/{part}"


class ListenerGroup:
    """A bootstrap listener plus one listener per broker, at broker_port_base + node id."""

    def __init__(self, config: ListenerConfig, advertised_host: str) -> None:
        self.config = config
        self.addresses = ListenerAddresses(advertised_host, config.broker_port_base)
        self.bootstrap: Listener | None = None
        self.brokers: dict[int, Listener] = {}

    @property
    def name(self) -> str:
        return self.config.name

    def has_broker_listener(self, node_id: int) -> bool:
        return node_id in self.brokers


class InsyncProxy:
    """Everything one proxy process runs; `start()` then `serve_until_stopped()` or `stop()`."""

    def __init__(self, config: ProxyConfig, metrics: ProxyMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or ProxyMetrics(topic_label_limit=config.topic_label_limit)
        self.cluster_view = ClusterView()
        self.groups = [ListenerGroup(lc, config.advertised_host) for lc in config.listeners]
        self.connections: set[ClientConnection] = set()
        self.upstream_ssl = client_ssl_context(config.upstream_tls)
        self.downstream_ssl = server_ssl_context(config.downstream_tls)
        self.control = ControlConnection(
            config.upstream_addresses(),
            ssl_context=self.upstream_ssl,
            sasl=config.control_sasl if config.control_sasl.mechanism else None,
            timeout=config.connect_timeout_seconds,
            max_frame_bytes=config.max_frame_bytes,
        )
        self.min_insync = MinInsyncCache(
            self.control, self.metrics, config.min_insync_ttl_seconds, config.min_insync_miss_wait_ms / 1000
        )
        self.capture = FrameCapture(Path(config.debug_capture_dir)) if config.debug_capture_dir else None
        self.audit = AuditLog(config.audit, config.proxy_id, self.metrics) if config.audit.enabled else None
        self.audit_to_kafka: KafkaAuditSink | None = None
        if self.audit is not None and config.audit.kafka_topic:
            self.audit_to_kafka = KafkaAuditSink(self, config.audit.kafka_topic, config.audit.queue_size)
            self.audit.kafka_sink = self.audit_to_kafka
        self.acks_policy = AcksPolicy(self)
        if self.audit is not None:
            self.cluster_view.on_partition_changed.append(self._audit_isr_change)
        self.behaviours: list[Any] = [
            ApiVersionsNegotiation(),
            MetadataEnricher(self),
            AddressRewrite(),
            TopicConfigWatcher(self),
            self.acks_policy,
        ]
        self.registry = BehaviourRegistry(self.behaviours)
        self.admin = AdminServer(self, config.admin_host, config.admin_port)
        self._bootstrap_cycle = itertools.count()
        self._tasks: list[asyncio.Task[Any]] = []
        self._listener_lock = asyncio.Lock()
        self._stopping = False
        self._missing_since: dict[int, float] = {}
        self._drained = asyncio.Event()
        self.started_at = time.monotonic()
        self._requests: dict[int, Any] = {}
        self._request_latency: dict[int, Any] = {}
        self._upstream_latency: dict[int, Any] = {}
        self.loop: asyncio.AbstractEventLoop

    # ------------------------------------------------------------------ metrics, cached children
    def requests_counter(self, api_key: int) -> Any:
        child = self._requests.get(api_key)
        if child is None:
            child = self._requests[api_key] = self.metrics.requests_total.labels(api_name(api_key))
        return child

    def request_latency(self, api_key: int) -> Any:
        child = self._request_latency.get(api_key)
        if child is None:
            child = self._request_latency[api_key] = self.metrics.request_latency_seconds.labels(api_name(api_key))
        return child

    def upstream_latency(self, api_key: int) -> Any:
        child = self._upstream_latency.get(api_key)
        if child is None:
            child = self._upstream_latency[api_key] = self.metrics.upstream_latency_seconds.labels(api_name(api_key))
        return child

    def connection_closed(self, connection: ClientConnection) -> None:
        self.connections.discard(connection)
        if self._stopping and not self.connections:
            self._drained.set()

    def check_address_leak(self, exchange: Exchange, payload: Any) -> None:
        """Debug aid for tests: a real broker's host immediately followed by its int32 port."""
        data = bytes(payload)
        for host, port in self.cluster_view.known_brokers.values():
            if host.encode() + port.to_bytes(4, "big") in data:
                self.metrics.address_leaks_total.labels(api_name(exchange.api_key)).inc()
                log.error("ADDRESS LEAK: %s v%d response to %s carries broker address %s:%d",
                          api_name(exchange.api_key), exchange.api_version, exchange.connection.peer, host, port)

    def on_exchange_done(self, exchange: Exchange, latency_seconds: float | None) -> None:
        """Called once an exchange's response was written (or, for acks=0, once it was forwarded)."""
        if "acks" in exchange.context:
            self.acks_policy.record(exchange, latency_seconds)

    def _audit_isr_change(self, topic: str, partition: int, old: Any, new: Any) -> None:
        """An `isr_change` audit event whenever the proxy's view of a partition's ISR or leader changes."""
        assert self.audit is not None
        self.audit.emit({
            "event": "isr_change",
            "listener": None,
            "client_id": None,
            "topic": topic,
            "partition": partition,
            "acks_requested": None,
            "acks_sent": None,
            "isr_size": len(new.isr),
            "min_isr": effective_min_isr(self.min_insync.peek(topic), len(new.replicas)),
            "decision": None,
            "error_code": None,
            "latency_ms": None,
            "record_bytes": None,
            "api_version": None,
            "correlation_id": None,
            "leader_id": new.leader_id,
        })

    def refresh_topics_soon(self, topics: list[str]) -> None:
        """Re-read some topics' partitions (leader, ISR) in the background."""
        self.loop.create_task(self.refresh_topics(topics))

    async def refresh_topics(self, topics: list[str]) -> None:
        """Re-read some topics' partitions (leader, ISR) now."""
        try:
            response = await self.control.metadata(topics)
        except ControlError as exc:
            log.debug("ISR refresh of %s failed: %s", topics, exc)
            return
        self.cluster_view.update(response)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        for group in self.groups:
            group.bootstrap = await self._listen(group, None, group.config.bootstrap_port)
        await self.admin.start()
        self.min_insync.start()
        if self.audit is not None:
            self.audit.start()
        if self.audit_to_kafka is not None:
            self.audit_to_kafka.start()
        try:
            await self.refresh_metadata()
        except ControlError as exc:
            log.warning("upstream not reachable yet (%s); retrying every %.0fs", exc, self.config.metadata_refresh_seconds)
        self._tasks.append(self.loop.create_task(self._refresh_loop()))
        for group in self.groups:
            assert group.bootstrap is not None
            log.info(
                "listener %s: bootstrap %s:%d (advertised %s), brokers at %s:%d + node id, metadata_schema=%s%s",
                group.name, self.config.bind_host, group.bootstrap.port, self.config.advertised_host,
                self.config.advertised_host, group.config.broker_port_base, group.config.metadata_schema,
                ", hide_unready_partitions" if group.config.hide_unready_partitions else "",
            )

    async def _listen(self, group: ListenerGroup, node_id: int | None, port: int) -> Listener:
        holder: dict[str, Listener] = {}

        def factory() -> ClientConnection:
            listener = holder["listener"]
            if node_id is None:
                return ClientConnection(self, listener, None)
            return ClientConnection(self, listener, self.cluster_view.known_brokers.get(node_id))

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
            except ControlError as exc:
                log.warning("metadata refresh failed: %s", exc)
            except Exception:
                log.exception("metadata refresh failed")

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
            self.min_insync.fetch(cold).add_done_callback(lambda f: f.exception())
        self.metrics.partitions_below_min_isr.set(self.count_partitions_below_min_isr())
        return response

    def count_partitions_below_min_isr(self) -> int:
        count = 0
        for (topic, _), state in self.cluster_view.partitions.items():
            min_isr = effective_min_isr(self.min_insync.peek(topic), len(state.replicas))
            if min_isr is not None and len(state.isr) < min_isr:
                count += 1
        return count

    async def learn_brokers_from_response(self, frame: Any, version: int) -> None:
        """A client's Metadata answer named a broker with no listener yet: create it before the client reads it."""
        _, body = split_response(frame, ApiKey.METADATA, version)
        response = decode_response(ApiKey.METADATA, version, body)
        assert isinstance(response, MetadataResponse)
        self.cluster_view.update(response)
        await self.sync_broker_listeners(remove_missing=False)

    async def sync_broker_listeners(self, remove_missing: bool) -> None:
        async with self._listener_lock:
            if self._stopping:
                return
            wanted = set(self.cluster_view.brokers)
            for group in self.groups:
                for node_id in sorted(wanted - set(group.brokers)):
                    port = group.config.broker_port_base + node_id
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

    async def open_upstream(self, client: ClientConnection, host: str, port: int) -> UpstreamConnection:
        label = f"{host}:{port}"
        _, upstream = await asyncio.wait_for(
            self.loop.create_connection(
                lambda: UpstreamConnection(client, label, self.config.max_frame_bytes, self.metrics),
                host,
                port,
                ssl=self.upstream_ssl,
                server_hostname=host if self.upstream_ssl else None,
            ),
            self.config.connect_timeout_seconds,
        )
        return upstream

    @property
    def ready(self) -> tuple[bool, str]:
        """Ready: the control connection reached a broker and the proxy knows the brokers."""
        if not self.cluster_view.brokers:
            return False, "no broker metadata yet"
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
        in_flight = sum(len(c.pending) for c in self.connections)
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
        if self.audit is not None:
            self.audit.close()
        if self.audit_to_kafka is not None:
            await self.audit_to_kafka.stop()
        await self.control.close()
        await self.admin.stop()
        log.info("stopped")
