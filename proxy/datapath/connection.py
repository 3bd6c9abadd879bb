"""Thin asyncio adapters around the sans-IO ConnectionCore: a client connection and its upstream one.

Low-level asyncio protocols (not streams): fewer copies and task switches per frame. Each client
connection gets its own upstream connection to the broker its listener stands for, so per-connection
broker state (SASL, throttling, sessions) stays as the client set it up. Ordering, correlation,
local and merged answers live in proxy/datapath/core.py; this module moves bytes, flow control and lifecycle.
Both sides read as plain protocols while the memory budget has room for a whole read, and through a buffered
protocol that sizes each read by the budget once it has not (`ReadBuffer`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from insync_proxy.proxy.datapath.budget import BudgetAccount, MemoryBudget
from insync_proxy.proxy.datapath.connect_failures import ConnectFailures
from insync_proxy.proxy.datapath.core import CUT_THROUGH_FROM, CloseReason, ConnectionCore
from insync_proxy.proxy.datapath.exchange import (
    BehaviourRegistry,
    CoreObserver,
    Exchange,
    Frame,
    ListenerSettings,
)
from insync_proxy.proxy.datapath.reads import ReadBuffer
from insync_proxy.proxy.observability.logs import (
    BAD_FRAME,
    BROKER_CLOSED,
    OVERSIZED_FRAME,
    RateLimitedLog,
    error_text,
    report_bad_input,
)
from insync_proxy.proxy.observability.metrics import LockFreeCounterChild, ProxyMetrics

log: Final = logging.getLogger("insync_proxy.connection")
#: Every connection can say these lines again (the cluster in trouble, a bug hit by a client): rate-limited.
_repeated: Final = RateLimitedLog(log)

#: SO_LINGER on, 0 seconds: close() drops what the kernel holds and sends a reset.
_LINGER_RESET: Final = struct.pack("ii", 1, 0)

#: Seconds between two measures of write buffers that held bytes when last seen (they drain silently).
_BUDGET_REFRESH_SECONDS: Final = 0.5


def _call_later(delay: float, callback: Callable[[], None]) -> None:
    asyncio.get_running_loop().call_later(delay, callback)


@dataclass
class ConnectionSettings:
    """What every client connection shares: behaviours, observers, upstream settings, the live set."""

    registry: BehaviourRegistry
    observer: CoreObserver
    metrics: ProxyMetrics
    max_frame_bytes: int
    connect_timeout_seconds: float
    upstream_ssl: ssl.SSLContext | None
    #: Upstream addresses to try, in order, for a bootstrap connection.
    bootstrap_candidates: Callable[[], list[tuple[str, int]]]
    connections: set[ClientConnection] = field(default_factory=set)
    on_closed: Callable[[], None] = lambda: None
    #: The smallest frame the core may cut through (None: never); see proxy/datapath/core.py.
    cut_through_from: int | None = CUT_THROUGH_FROM
    #: The observer reads whole responses (debug capture, address-leak check): cut-through keeps a copy.
    observe_whole_frames: bool = False
    #: The process's memory budget over every write buffer (proxy/datapath/budget.py), and its ceiling per buffer.
    budget: MemoryBudget = field(default_factory=MemoryBudget)
    #: Failed connects per broker address: bootstrap candidates' order, and the hold of a down broker's clients.
    connect_failures: ConnectFailures = field(default_factory=ConnectFailures)
    #: Runs a callback later (the running loop's call_later; a unit test without a loop records it instead).
    call_later: Callable[[float, Callable[[], None]], None] = _call_later
    _refresh_armed: bool = field(default=False, init=False, repr=False)
    #: How every socket is read: whole, or sized by the budget (set in __post_init__: it needs the budget).
    reads: ReadBuffer = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._refresh_armed = False  # set here too: compiled, an init=False field's default is not applied
        budget = self.budget
        self.reads = ReadBuffer(budget)
        self.metrics.buffered_bytes.set_function(lambda: budget.buffered)
        self.metrics.budget_paused_connections.set_function(lambda: budget.paused)
        self.metrics.client_connections_held.set_function(lambda: self.connect_failures.held)

    def refresh_budget_soon(self) -> None:
        """Measure again, in a while, the write buffers that held bytes (they drain without a callback
        above their low-water mark); armed only while some buffer holds bytes, so an idle proxy sleeps."""
        if not self._refresh_armed:
            self._refresh_armed = True
            self.call_later(_BUDGET_REFRESH_SECONDS, self._refresh_budget)

    def _refresh_budget(self) -> None:
        self._refresh_armed = False
        if self.budget.refresh():
            self.refresh_budget_soon()


class OpenConnections:
    """Client connections open now on one listener group (its max_connections counts them)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class WriteBuffer:
    """One transport's write buffer as an account of the memory budget (proxy/datapath/budget.py's `BufferIO`), and
    the transport's write calls, bound once (a call by name on the untyped transport looks the method up each time)."""

    __slots__ = ("account", "ceiling", "settings", "size", "transport", "write", "writelines")

    def __init__(self, settings: ConnectionSettings, transport: Any) -> None:
        self.settings = settings
        self.transport = transport
        self.write: Callable[[Frame], None] = transport.write
        self.writelines: Callable[[list[Frame]], None] = transport.writelines
        self.size: Callable[[], int] = transport.get_write_buffer_size
        self.ceiling = settings.budget.per_connection_bytes
        transport.set_write_buffer_limits(self.ceiling, self.ceiling // 4)
        self.account: BudgetAccount = settings.budget.account(self)

    def buffered(self) -> int:
        return int(self.size())

    def hold(self) -> None:
        # A high-water mark of 0: the transport pauses its protocol now (it holds bytes), which stops the
        # source, and calls resume_writing once the buffer is empty.
        self.transport.set_write_buffer_limits(0, 0)

    def release(self) -> None:
        self.transport.set_write_buffer_limits(self.ceiling, self.ceiling // 4)

    def written(self) -> None:
        """After a write: report what the buffer holds (nothing, when the socket took it all: no work)."""
        held = self.size()
        if held or self.account.held:
            self.account.update(held)
            if held:
                self.settings.refresh_budget_soon()

    def measure(self) -> None:
        """Report what the buffer holds now (it drained to a mark)."""
        self.account.update(self.buffered())


def _write(buffer: WriteBuffer, data: list[Frame], counter: LockFreeCounterChild) -> None:
    """One write of one or more buffers: uvloop sends a list in one writev, without joining it."""
    if len(data) == 1:
        buffer.write(data[0])
        counter.inc(len(data[0]))
    else:
        buffer.writelines(data)
        counter.inc(sum(len(d) for d in data))
    buffer.written()


class ClientConnection(asyncio.Protocol):
    """Client side: feeds the core, carries out its actions, opens the upstream connection."""

    def __init__(
        self, settings: ConnectionSettings, listener: ListenerSettings, upstream_address: tuple[str, int] | None,
        open_connections: OpenConnections | None = None,
    ) -> None:
        self.settings = settings
        #: Counted in connection_made, uncounted in close (a TLS handshake that fails makes neither call).
        self.open_connections = open_connections or OpenConnections()
        self._counted = False
        self.listener = listener
        self.upstream_address = upstream_address
        self.core = ConnectionCore(
            settings.registry, listener, self, max_frame_bytes=settings.max_frame_bytes, observer=settings.observer,
            cut_through_from=settings.cut_through_from, observe_whole_frames=settings.observe_whole_frames,
        )
        self.transport: asyncio.Transport | None = None
        self.write_buffer: WriteBuffer | None = None
        self.upstream: UpstreamConnection | None = None
        self.peer = "?"
        self.closed = False
        metrics = settings.metrics
        self._metrics = metrics
        self._bytes_in = metrics.network_bytes_total.labels("client_in")
        self._bytes_out = metrics.network_bytes_total.labels("client_out")
        self._connect_task: asyncio.Task[None] | None = None
        self._made: UpstreamConnection | None = None  #: the broker connection, from its connection_made on
        self._early: list[bytes] = []
        self._reads = settings.reads

    @property
    def pending(self) -> int:
        """Requests still owed a response."""
        return len(self.core.pending)

    # ------------------------------------------------------------------ ConnectionIO
    def write_client(self, data: list[Frame]) -> None:
        if self.write_buffer is not None and not self.closed:
            _write(self.write_buffer, data, self._bytes_out)

    def write_upstream(self, data: list[Frame]) -> None:
        upstream = self.upstream
        if upstream is not None and upstream.write_buffer is not None and not upstream.closed:
            _write(upstream.write_buffer, data, upstream._bytes_out)  # its write(), one call less

    def run_async(self, exchange: Exchange, result: Awaitable[Frame | None]) -> None:
        task = asyncio.ensure_future(result)
        task.add_done_callback(functools.partial(self._async_done, exchange))

    def _async_done(self, exchange: Exchange, task: asyncio.Future[Frame | None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        self.core.async_done(exchange, None if error is not None else task.result(), error)

    def close(self, reason: CloseReason | None = None) -> None:
        if reason is not None:
            self._log_close(reason)
        if self.closed:
            return
        self.closed = True
        self._reads.closed(self)
        upstream = self.upstream or self._made
        # Requests the broker has (or is being sent) whose answers nobody will read: the broker must not take
        # them later (a silent network that comes back, the client retrying elsewhere: duplicates). Requests that
        # owe no answer (acks=0) still go out, as from a client that closes after sending them.
        abort = upstream is not None and bool(self.core.awaiting_upstream)
        self.core.lost()
        self.settings.connections.discard(self)
        self.settings.on_closed()
        self._metrics.client_connections_active.labels(self.listener.name).dec()
        if self.write_buffer is not None:
            self.write_buffer.account.close()
        if self._counted:
            self._counted = False
            self.open_connections.count -= 1
        if self._connect_task is not None and not self._connect_task.done():
            self._connect_task.cancel()
        if self.transport is not None:
            self.transport.close()
        if upstream is not None:
            if abort:
                upstream.abort()
            else:
                upstream.close()

    def _log_close(self, reason: CloseReason) -> None:
        metrics = self._metrics
        if reason.kind == "client_bad_frame":
            kind = reason.frame_error or "unknown"
            report_bad_input(metrics, OVERSIZED_FRAME if kind == "too_large" else BAD_FRAME, self.listener.name,
                             "closing client %s on listener %s: bad request frame (%s): %s",
                             self.peer, self.listener.label, kind, reason.detail)
            metrics.frame_errors_total.labels(kind).inc()
        elif reason.kind == "upstream_bad_frame":
            label = self.upstream.label if self.upstream is not None else "?"
            _repeated.error("upstream_bad_frame", "closing connection to broker %s (client %s): bad response: %s",
                            label, self.peer, reason.detail)
            metrics.frame_errors_total.labels("upstream_" + (reason.frame_error or "unknown")).inc()
            metrics.upstream_connection_errors_total.labels(label, "bad_frame").inc()
        elif reason.kind == "internal":
            _repeated.error("internal", "closing client %s on listener %s: internal error: %s", self.peer,
                            self.listener.label, reason.detail, exc_info=reason.error)
            metrics.client_connection_errors_total.labels(self.listener.name, "internal").inc()

    # ------------------------------------------------------------------ client side
    def connection_made(self, transport: Any) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have the same methods.
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.write_buffer = WriteBuffer(self.settings, transport)
        self._reads.opened(self)
        self.open_connections.count += 1
        self._counted = True
        self._metrics.client_connections_total.labels(self.listener.name).inc()
        self._metrics.client_connections_active.labels(self.listener.name).inc()
        self.settings.connections.add(self)
        # Hold client bytes until the upstream connection exists.
        transport.pause_reading()
        self._connect_task = asyncio.get_running_loop().create_task(self._connect_upstream())

    async def _connect_upstream(self) -> None:
        settings = self.settings
        connect_failures = settings.connect_failures
        candidates = [self.upstream_address] if self.upstream_address else \
            connect_failures.order(settings.bootstrap_candidates())
        hold = connect_failures.hold_seconds(candidates)
        if hold > 0:
            await self._hold(hold, candidates)
        failures: list[str] = []
        loop = asyncio.get_running_loop()
        for host, port in candidates:
            label = f"{host}:{port}"
            timeout = settings.connect_timeout_seconds
            try:
                _, upstream = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: UpstreamConnection(self, label, settings),  # noqa: B023 - awaited here
                        host, port, ssl=settings.upstream_ssl,
                        server_hostname=host if settings.upstream_ssl else None,
                    ),
                    timeout,
                )
            except (TimeoutError, OSError) as exc:
                failures.append(f"{label}: {_connect_failure(exc, timeout)}")
                connect_failures.failed((host, port))
                self._metrics.upstream_connection_errors_total.labels(label, "connect").inc()
                continue
            connect_failures.succeeded((host, port))
            self.upstream = upstream
            if self.closed:
                upstream.close()
                return
            early, self._early = self._early, []
            for data in early:
                self.core.receive_client_data(data)
            if self.transport is not None and not self.closed and not self.core.draining:
                self.transport.resume_reading()
            return
        _repeated.warning(
            "upstream_unreachable", "closing client %s on listener %s: no broker reachable (%s)",
            self.peer, self.listener.label, "; ".join(failures) or "no broker address known yet",
        )
        self._metrics.client_connection_errors_total.labels(self.listener.name, "upstream_unreachable").inc()
        self.close()

    async def _hold(self, seconds: float, candidates: list[tuple[str, int]]) -> None:
        """Hold this client (its bytes unread, nothing answered) while its brokers' connects keep failing:
        a client whose connection closes right after its TCP connect reconnects at once, and a down broker's
        port would turn into a storm of accepts and closes. Over the bound, the broker is tried at once."""
        connect_failures = self.settings.connect_failures
        held = connect_failures.hold()
        self._metrics.client_connections_held_total.labels(self.listener.name,
                                                           "held" if held else "over_limit").inc()
        host, port = candidates[0]
        if not held:
            _repeated.warning(
                "upstream_backoff_full", "not holding client %s on listener %s: %d client connections are held "
                "already; connects to %s:%d failed %d time(s) in a row", self.peer, self.listener.label,
                connect_failures.held, host, port, connect_failures.in_a_row((host, port)))
            return
        _repeated.log(
            "upstream_backoff", logging.INFO, "holding client %s on listener %s for %.2f s: connects to %s:%d failed "
            "%d time(s) in a row; then it is tried again", self.peer, self.listener.label, seconds, host, port,
            connect_failures.in_a_row((host, port)))
        try:
            await asyncio.sleep(seconds)
        finally:
            connect_failures.release()

    def data_received(self, data: bytes) -> None:
        """Bytes from the client (one read: the event loop's, or a `SizedReads`' copy)."""
        self._bytes_in.inc(len(data))
        if self.upstream is None:
            # uvloop may deliver bytes before pause_reading() in connection_made takes effect.
            self._early.append(data)
            return
        self.core.receive_client_data(data)

    # ------------------------------------------------------------------ flow control
    def pause_writing(self) -> None:
        # The client reads slower than the broker answers (its ceiling, or the budget): stop reading the broker.
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        # Resume first: the budget may hold the buffer again at once (pause_writing from within measure()).
        if self.upstream is not None:
            self.upstream.resume_reading()
        _measure(self.write_buffer, self.closed)

    def upstream_paused_writing(self) -> None:
        # The broker reads slower than the client sends: stop reading the client.
        _pause_reading(self.transport, self.closed)

    def upstream_resumed_writing(self) -> None:
        if self.transport is not None and not self.closed and not self.core.draining:
            self.transport.resume_reading()

    # ------------------------------------------------------------------ lifecycle
    def drain(self) -> None:
        """Stop reading new requests; close once every pending response has been written."""
        if self.transport is not None and not self.closed:
            try:
                self.transport.pause_reading()
            except RuntimeError:
                pass
        self.core.drain()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def upstream_made(self, upstream: UpstreamConnection) -> None:
        """The broker connection is made; a client that left meanwhile cancelled the connect, which never gets it:
        closed here or by `close`, not left open until the broker's idle timeout (issue #39)."""
        if self.closed:
            upstream.close()
        else:
            self._made = upstream

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            if self.core.pending:
                report_bad_input(self._metrics, BROKER_CLOSED, self.listener.name,
                                 "broker %s closed the connection of client %s on listener %s with %d request(s) "
                                 "in flight", self.upstream.label if self.upstream else "?", self.peer,
                                 self.listener.label, len(self.core.pending))
            self.close()


class UpstreamConnection(asyncio.Protocol):
    """Broker side of one client connection: hands the broker's bytes to the client's core."""

    def __init__(self, client: ClientConnection, label: str, settings: ConnectionSettings) -> None:
        self.client = client
        self.label = label
        self.settings = settings
        self.transport: asyncio.Transport | None = None
        self.write_buffer: WriteBuffer | None = None
        self.closed = False
        metrics = settings.metrics
        self._metrics = metrics
        self._bytes_in = metrics.network_bytes_total.labels("upstream_in")
        self._bytes_out = metrics.network_bytes_total.labels("upstream_out")
        self._reads = settings.reads

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.write_buffer = WriteBuffer(self.settings, transport)
        self._reads.opened(self)
        self._metrics.upstream_connections_total.labels(self.label).inc()
        self._metrics.upstream_connections_active.labels(self.label).inc()
        self.client.upstream_made(self)

    def write(self, *data: Frame) -> None:
        if self.write_buffer is not None and not self.closed:
            _write(self.write_buffer, list(data), self._bytes_out)

    def data_received(self, data: bytes) -> None:
        """Bytes from the broker (one read: the event loop's, or a `SizedReads`' copy)."""
        self._bytes_in.inc(len(data))
        self.client.core.receive_upstream_data(data)

    def pause_writing(self) -> None:
        self.client.upstream_paused_writing()

    def resume_writing(self) -> None:
        self.client.upstream_resumed_writing()
        _measure(self.write_buffer, self.closed)

    def pause_reading(self) -> None:
        _pause_reading(self.transport, self.closed)

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        was_closed = self.closed
        self.close()
        if not was_closed:
            self.client.upstream_lost(exc)

    def close(self) -> None:
        """Close in order: what is buffered still goes out, then a FIN."""
        if self._closing():
            assert self.transport is not None
            self.transport.close()

    def abort(self) -> None:
        """Close at once, as a client that gives up on its requests: what is buffered here and in the kernel is
        dropped and the broker sees a reset (SO_LINGER 0), so it cannot read the rest of a request later."""
        if self._closing():
            assert self.transport is not None
            self._metrics.upstream_connections_aborted_total.labels(self.label).inc()
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                except OSError:
                    pass  # already gone: nothing left to reset
            self.transport.abort()

    def _closing(self) -> bool:
        """Mark closed; True when there is a transport to close."""
        if self.closed:
            return False
        self.closed = True
        self._reads.closed(self)
        self._metrics.upstream_connections_active.labels(self.label).dec()
        if self.write_buffer is not None:
            self.write_buffer.account.close()
        return self.transport is not None


def _connect_failure(exc: BaseException, timeout: float) -> str:
    """Why one connect to a broker failed, never empty (a connect timeout is a bare TimeoutError)."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"timed out after {timeout:g} s"
    return error_text(exc)


def _measure(write_buffer: WriteBuffer | None, closed: bool) -> None:
    """A write buffer drained below its mark: tell the memory budget what it holds now."""
    if write_buffer is not None and not closed:
        write_buffer.measure()


def _pause_reading(transport: asyncio.Transport | None, closed: bool) -> None:
    """Stop reading a side that is open (the other side's backpressure, or the memory budget)."""
    if transport is not None and not closed:
        transport.pause_reading()
