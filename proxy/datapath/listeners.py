"""The client listeners: each listener group's bootstrap port, and one port per broker the cluster names.

Broker listeners follow the cluster: a broker first seen in Metadata gets its port (node_id_ranges say
which), a broker that left keeps its port through a grace period (a rolling restart), then it is closed.

Connections are bounded: a listener group holds at most `max_connections` client connections, and the
process keeps file descriptors in hand for its own work (control and broker connections, audit files,
the admin port). A connection beyond either bound is accepted and closed at once, counted
(`insync_proxy_bad_input_total{cause="refused_connection"}`) and logged rate-limited: the client sees a
clean close instead of a hang in the backlog, the listener does not meet EMFILE on a client's account
(asyncio's accept loop answers it with an error line and a second without accepting, nothing counted),
and established connections carry on. Accepting needs a descriptor for a moment: the headroom keeps it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import ssl
import time
from collections.abc import Callable, Container, Iterable
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import Any, Final

from insync_proxy.proxy.config.broker_ports import BrokerPorts, advertised_name, unmapped_broker_line
from insync_proxy.proxy.config.settings import ListenerConfig
from insync_proxy.proxy.datapath.cluster_view import ClusterView
from insync_proxy.proxy.datapath.connection import OpenConnections
from insync_proxy.proxy.datapath.exchange import ListenerAddresses, ListenerSettings
from insync_proxy.proxy.observability.logs import REFUSED_CONNECTION, report_bad_input
from insync_proxy.proxy.observability.metrics import ProxyMetrics

log = logging.getLogger("insync_proxy")

#: How long a broker may be missing from Metadata before its listener is closed.
BROKER_LISTENER_GRACE_SECONDS = 300.0

#: Makes the protocol object of one accepted client connection: (the listener's settings, the broker it
#: stands for or None for a bootstrap port, the group's count of open connections to keep).
ConnectionFactory = Callable[[ListenerSettings, "tuple[str, int] | None", OpenConnections], asyncio.BaseProtocol]

#: File descriptors one client connection takes: its own and its upstream connection's.
FDS_PER_CONNECTION: Final = 2
#: File descriptors kept in hand for the proxy's own work beside client connections (control and audit
#: connections, audit files, admin requests, broker listeners opened later).
FD_HEADROOM: Final = 32


class FileDescriptors:
    """The process's file descriptor limit (RLIMIT_NOFILE's soft limit) and whether a connection fits under it."""

    def __init__(self, limit: int | None = None, count_open: Callable[[], int] | None = None) -> None:
        """`limit`: None reads RLIMIT_NOFILE; `count_open`: the descriptors open now (tests pass their own)."""
        if limit is None:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            limit = soft if soft != resource.RLIM_INFINITY else 2**31 - 1
        self.limit = limit
        self.count_open = count_open or _count_open_fds
        #: Descriptors open before any client connection (set when the listeners are bound).
        self.base = 0

    def full(self, client_connections: int) -> bool:
        """No room for one more client connection (and its upstream one) beside the headroom.

        Far from the limit an estimate does (two per connection, the headroom for the rest); near it the open
        descriptors are counted too (/proc/self/fd), so what else the process opened is seen; the estimate
        still counts upstream connections being opened (a burst of accepts).
        """
        estimate = self.base + FDS_PER_CONNECTION * (client_connections + 1)
        if estimate + 4 * FD_HEADROOM < self.limit // 2:
            return False
        # The accepted socket is open already: one more (upstream) for this connection, then the headroom.
        return max(estimate, self.count_open() + FDS_PER_CONNECTION - 1) + FD_HEADROOM > self.limit


def _count_open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the directory listdir opened
    except OSError:  # no /proc: the estimate only
        return 0


class RefusedConnection(asyncio.Protocol):
    """A connection over a bound: closed as soon as it is made, counted, logged rate-limited."""

    def __init__(self, metrics: ProxyMetrics, listener: str, label: str, why: str) -> None:
        self.metrics = metrics
        self.listener = listener
        self.label = label
        self.why = why

    def connection_made(self, transport: Any) -> None:
        peer = transport.get_extra_info("peername")
        transport.close()
        report_bad_input(self.metrics, REFUSED_CONNECTION, self.listener,
                         "listener %s: refused a connection from %s: %s", self.label,
                         f"{peer[0]}:{peer[1]}" if peer else "?", self.why)


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
        #: Client connections open on any port of the group (max_connections bounds them).
        self.open_connections = OpenConnections()
        #: Brokers of the latest Metadata that node_id_ranges do not cover (named at port 0, logged once).
        self.unmapped: set[int] = set()
        #: Node ids there is nothing more to open for: a listener is open, or the node id has no port.
        self.settled = _SettledNodeIds(self)

    @property
    def name(self) -> str:
        return self.config.name

    def all(self) -> list[Listener]:
        """Every open listener of the group."""
        return ([self.bootstrap] if self.bootstrap else []) + list(self.brokers.values())


class _SettledNodeIds(Container[int]):
    """A live view: node ids with a broker listener open, or that the listener's node_id_ranges leave out."""

    __slots__ = ("group",)

    def __init__(self, group: ListenerGroup) -> None:
        self.group = group

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.group.brokers or node_id in self.group.unmapped


@dataclass(eq=False)
class Listeners:
    """Every client listener of the process, opened and closed as the cluster view's brokers come and go."""

    configs: InitVar[Iterable[ListenerConfig]]
    _: KW_ONLY
    bind_host: str
    advertised_host: str
    #: The downstream TLS context new listeners use (None: plaintext).
    ssl_context: Callable[[], ssl.SSLContext | None]
    cluster_view: ClusterView
    metrics: ProxyMetrics
    connection_factory: ConnectionFactory
    file_descriptors: FileDescriptors = field(default_factory=FileDescriptors)
    groups: list[ListenerGroup] = field(init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    _closed: bool = field(default=False, init=False)
    _missing_since: dict[int, float] = field(default_factory=dict, init=False)

    def __post_init__(self, configs: Iterable[ListenerConfig]) -> None:
        self.groups = [ListenerGroup(c, self.advertised_host) for c in configs]

    @property
    def bootstrap_port(self) -> int:
        """The first listener group's bootstrap port (resolved if configured as 0)."""
        bootstrap = self.groups[0].bootstrap
        assert bootstrap is not None
        return bootstrap.port

    async def open_bootstrap(self) -> None:
        """Bind every group's bootstrap port (an OSError when one cannot be bound)."""
        self.file_descriptors.base = self.file_descriptors.count_open()
        for group in self.groups:
            group.bootstrap = await self._listen(group, None, group.config.bootstrap_port)
            log.info(
                "listener %s: bootstrap %s:%d (advertised %s), brokers at %s:%s, metadata_schema=%s%s",
                group.name, self.bind_host, group.bootstrap.port, self.advertised_host,
                self.advertised_host, group.ports.describe(), group.config.metadata_schema,
                ", hide_unready_partitions" if group.config.hide_unready_partitions else "",
            )

    async def _listen(self, group: ListenerGroup, node_id: int | None, port: int) -> Listener:
        holder: list[Listener] = []

        def factory() -> asyncio.BaseProtocol:
            listener = holder[0]
            why = self._refusal(group)
            if why is not None:
                return RefusedConnection(self.metrics, group.name, listener.label, why)
            upstream = None if node_id is None else self.cluster_view.known_brokers.get(node_id)
            return self.connection_factory(listener.settings, upstream, group.open_connections)

        server = await asyncio.get_running_loop().create_server(
            factory, self.bind_host, port, ssl=self.ssl_context(), reuse_address=True, backlog=1024
        )
        listener = Listener(group, node_id, server, server.sockets[0].getsockname()[1])
        holder.append(listener)
        return listener

    def _refusal(self, group: ListenerGroup) -> str | None:
        """Why a new connection to `group` must be refused now, or None."""
        if group.open_connections.count >= group.config.max_connections:
            return f"max_connections ({group.config.max_connections}) connections open on this listener"
        if self.file_descriptors.full(sum(g.open_connections.count for g in self.groups)):
            return (f"the process is at its file descriptor limit ({self.file_descriptors.limit}, RLIMIT_NOFILE; "
                    f"{FD_HEADROOM} kept for the proxy's own connections): raise it (ulimit -n) or lower "
                    f"max_connections")
        return None

    async def sync(self, remove_missing: bool) -> None:
        """Open a listener for every broker of the cluster view that has none; with `remove_missing`, close
        the listeners of brokers gone for longer than the grace period."""
        async with self._lock:
            if self._closed:
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
                            "broker: pick a free broker_port_base", group.name, self.bind_host, port, node_id, exc,
                        )
                        continue
                    log.info("listener %s: broker %d (%s:%d) now at %s:%d", group.name, node_id,
                             *self.cluster_view.brokers[node_id], advertised_name(self.advertised_host, node_id),
                             port)
                if remove_missing:
                    self._close_departed(group, wanted)

    def _note_unmapped(self, group: ListenerGroup, wanted: set[int]) -> None:
        """Brokers the listener's node_id_ranges do not cover: one ERROR line each when first seen, and the
        gauge. They keep no listener; responses name them at port 0 (the proxy serves the other brokers)."""
        unmapped = {node_id for node_id in wanted if group.ports.port_for(node_id) is None}
        for node_id in sorted(unmapped - group.unmapped):
            log.error("%s", unmapped_broker_line(group.name, node_id, group.ports))
        group.unmapped = unmapped
        self.metrics.brokers_without_port.labels(group.name).set(len(unmapped))

    def _close_departed(self, group: ListenerGroup, wanted: set[int]) -> None:
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

    def unready_reason(self) -> str | None:
        """Why /readyz must fail because of the listeners: a group with a port for none of the brokers."""
        brokers = set(self.cluster_view.brokers)
        for group in self.groups:
            if group.unmapped and group.unmapped >= brokers:
                ids = ", ".join(map(str, sorted(group.unmapped)))
                return (f"listener {group.name} has a port for none of the brokers ({ids}): add their node "
                        f"ids to its node_id_ranges (now {group.ports.settings_text()})")
        return None

    def close(self) -> None:
        """Stop accepting on every listener; later syncs open nothing."""
        self._closed = True
        for group in self.groups:
            for listener in group.all():
                listener.server.close()
