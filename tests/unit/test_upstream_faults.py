"""Broker faults as a long scenario run met them (issue 39), each against real sockets on loopback:
a broker that accepts nothing, one that refuses, one whose network goes silent.

Every wait is on a condition, bounded; nothing sleeps a fixed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest

from harness.connection_core import LISTENER
from insync_proxy.protocol import ApiKey, RequestHeader, encode_request_header
from insync_proxy.proxy.controlplane.background import report_failure
from insync_proxy.proxy.controlplane.control import ControlError, _Link
from insync_proxy.proxy.datapath.connect_failures import (
    RECENT_FAILURE_SECONDS,
    ConnectFailures,
)
from insync_proxy.proxy.datapath.connection import ClientConnection, ConnectionSettings
from insync_proxy.proxy.datapath.core import NoObserver
from insync_proxy.proxy.datapath.exchange import (
    FORWARD_WITHOUT_RESPONSE,
    BehaviourBase,
    BehaviourRegistry,
    Exchange,
    RequestResult,
)
from insync_proxy.proxy.observability.logs import error_text, forget_all
from insync_proxy.proxy.observability.metrics import ProxyMetrics
from tests.helpers import Clock

Address = tuple[str, int]


def _event_loops() -> list[object]:
    loops: list[object] = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
        return loops
    return [*loops, pytest.param(uvloop.new_event_loop, id="uvloop")]


#: The proxy runs on uvloop by default; the tests of what its sockets do run on both.
EVENT_LOOPS = _event_loops()


def _settings(metrics: ProxyMetrics, candidates: Callable[[], list[Address]] = list,
              connect_timeout: float = 0.3) -> ConnectionSettings:
    return ConnectionSettings(
        registry=BehaviourRegistry([]), observer=NoObserver(), metrics=metrics, max_frame_bytes=64 << 20,
        connect_timeout_seconds=connect_timeout, upstream_ssl=None, bootstrap_candidates=candidates,
    )


def _request(correlation_id: int, body: bytes = b"\x00" * 8) -> bytes:
    payload = encode_request_header(RequestHeader(
        request_api_key=ApiKey.LIST_OFFSETS, request_api_version=1, correlation_id=correlation_id,
        client_id="t")) + body
    return struct.pack(">i", len(payload)) + payload


async def _until(condition: Callable[[], bool], within: float = 10.0, what: str = "the condition") -> None:
    """Wait for `condition`, polling the loop; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(0.01)


@asynccontextmanager
async def _proxy_port(settings: ConnectionSettings, upstream: Address | None) -> AsyncIterator[int]:
    """A listener whose connections are the proxy's ClientConnection towards `upstream` (None: bootstrap)."""
    server = await asyncio.get_running_loop().create_server(
        lambda: ClientConnection(settings, LISTENER, upstream), "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        for connection in list(settings.connections):
            connection.close()


@contextmanager
def _full_backlog() -> Iterator[Address]:
    """A listening socket that accepts nothing: its backlog is full, so a new connect gets no SYN-ACK."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    address = listener.getsockname()
    fillers: list[socket.socket] = []
    try:
        for _ in range(4):  # Linux queues backlog + 1; a few more in case the kernel rounds up
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(address)
            fillers.append(filler)
        probe = socket.socket()
        probe.settimeout(0.2)
        try:
            probe.connect(address)
        except (TimeoutError, OSError):
            pass
        else:
            pytest.skip("this kernel completed a connect beyond the listen backlog")
        finally:
            probe.close()
        yield address[0], address[1]
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


# ------------------------------------------------------------------------------ 1. a connect that times out


async def test_a_connect_timeout_says_timed_out_with_the_timeout_and_the_address(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "insync_proxy.connection")
    forget_all()
    metrics = ProxyMetrics()
    settings = _settings(metrics, connect_timeout=0.3)
    # Given a broker port that accepts no connection within the connect timeout
    with _full_backlog() as broker:
        async with _proxy_port(settings, broker) as port:
            # When a client connects to the proxy's port for that broker
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_request(1))
            # Then the proxy closes it once the connect timed out
            with contextlib.suppress(ConnectionResetError):  # a reset: the proxy closed with our request unread
                assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
    # And the line says why: timed out, after how long, and where
    lines = [r.getMessage() for r in caplog.records if "no broker reachable" in r.getMessage()]
    assert len(lines) == 1, lines
    assert f"127.0.0.1:{broker[1]}: timed out after 0.3 s" in lines[0], lines[0]
    assert not lines[0].rstrip().endswith(":"), lines[0]


@pytest.mark.parametrize(("error", "said"), [
    (TimeoutError(), "timed out"),
    (ConnectionResetError(), "connection reset by the peer"),
    (ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)"), "[Errno 111] Connection refused"),
    (RuntimeError(), "RuntimeError"),
    (ValueError("bad value"), "bad value"),
])
def test_a_failed_background_task_says_why_even_when_its_error_has_no_message(
        caplog: pytest.LogCaptureFixture, error: BaseException, said: str) -> None:
    caplog.set_level(logging.WARNING, "insync_proxy")
    forget_all()
    # When a background task fails with an error whose str() may be empty
    report_failure(ProxyMetrics(), "metadata_refresh", "the proxy's periodic full Metadata", error)
    # Then its line ends with why
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"metadata_refresh failed (the proxy's periodic full Metadata): {said}"]
    assert error_text(error) == said


# ------------------------------------------------------------------------- 4. a client leaving a silent broker


class SilentBroker:
    """A broker whose network went silent: it accepts, reads nothing (or only what it is told to), answers
    nothing. Its receive buffer is small, so what the proxy sends beyond it waits in the proxy's kernel."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by accepted sockets
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.address: Address = ("127.0.0.1", int(self.listener.getsockname()[1]))

    async def accept(self) -> socket.socket:
        connection, _ = await asyncio.wait_for(asyncio.get_running_loop().sock_accept(self.listener), 10)
        connection.setblocking(False)
        return connection

    @staticmethod
    async def read_to_the_end(connection: socket.socket) -> tuple[int, str]:
        """Read until the peer's end: (bytes read, "eof" or "reset")."""
        received = 0
        loop = asyncio.get_running_loop()
        while True:
            try:
                data = await asyncio.wait_for(loop.sock_recv(connection, 1 << 20), 10)
            except ConnectionResetError:
                return received, "reset"
            if not data:
                return received, "eof"
            received += len(data)

    def close(self) -> None:
        self.listener.close()


def _client_in(metrics: ProxyMetrics) -> float:
    return metrics.registry.get_sample_value("insync_proxy_network_bytes_total", {"direction": "client_in"}) or 0.0


@pytest.mark.parametrize("new_loop", EVENT_LOOPS)
def test_a_client_leaving_with_a_request_in_flight_resets_the_broker_connection_and_drops_unsent_bytes(new_loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(_a_client_leaving_with_a_request_in_flight_resets_the_broker_connection_and_drops_unsent_bytes())


async def _a_client_leaving_with_a_request_in_flight_resets_the_broker_connection_and_drops_unsent_bytes() -> None:
    metrics = ProxyMetrics()
    settings = _settings(metrics)
    broker = SilentBroker()
    # A request larger than what the silent broker's receive buffer and the proxy's kernel take at once
    request = _request(1, b"\x00" * (4 << 20))
    try:
        async with _proxy_port(settings, broker.address) as port:
            # Given a client whose request the proxy took and is forwarding to a broker that reads nothing
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            upstream = await broker.accept()
            writer.write(request)
            await _until(lambda: _client_in(metrics) == len(request), what="the proxy to read the whole request")
            (connection,) = settings.connections
            assert connection.pending == 1
            # When the client gives up (its request timed out) and closes its connection
            writer.close()
            await _until(lambda: not settings.connections, what="the proxy to close the client's connection")
            # Then the broker's connection is reset, and what the proxy had not sent yet never arrives
            received, end = await SilentBroker.read_to_the_end(upstream)
            assert end == "reset"
            assert received < len(request)
            assert metrics.registry.get_sample_value(
                "insync_proxy_upstream_connections_aborted_total", {"broker": f"127.0.0.1:{broker.address[1]}"}) == 1
            upstream.close()
    finally:
        broker.close()


@pytest.mark.parametrize("new_loop", EVENT_LOOPS)
def test_a_client_leaving_a_silent_broker_resets_it_at_once_even_when_the_request_was_all_sent(new_loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(_a_client_leaving_a_silent_broker_resets_it_at_once_even_when_the_request_was_all_sent())


async def _a_client_leaving_a_silent_broker_resets_it_at_once_even_when_the_request_was_all_sent() -> None:
    metrics = ProxyMetrics()
    settings = _settings(metrics)
    broker = SilentBroker()
    request = _request(7)
    try:
        async with _proxy_port(settings, broker.address) as port:
            # Given a request the broker read whole and never answered (its network went silent)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            upstream = await broker.accept()
            writer.write(request)
            loop = asyncio.get_running_loop()
            assert await asyncio.wait_for(loop.sock_recv(upstream, 1 << 16), 10) == request
            # When the client's request times out and it closes its connection
            writer.close()
            # Then the broker sees a reset at once (as a client that gave up; no FIN it might take for a goodbye)
            started = time.monotonic()
            assert await SilentBroker.read_to_the_end(upstream) == (0, "reset")
            assert time.monotonic() - started < 5
            upstream.close()
    finally:
        broker.close()


@pytest.mark.parametrize("new_loop", EVENT_LOOPS)
def test_a_client_leaving_with_nothing_in_flight_closes_the_broker_connection_in_order(new_loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(_a_client_leaving_with_nothing_in_flight_closes_the_broker_connection_in_order())


async def _a_client_leaving_with_nothing_in_flight_closes_the_broker_connection_in_order() -> None:
    metrics = ProxyMetrics()
    settings = _settings(metrics)
    broker = SilentBroker()
    try:
        async with _proxy_port(settings, broker.address) as port:
            # Given a client connection with nothing in flight
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            upstream = await broker.accept()
            await _until(lambda: len(settings.connections) == 1 and next(iter(settings.connections)).upstream
                         is not None, what="the upstream connection")
            # When the client closes it
            writer.close()
            # Then the broker connection ends with a FIN, as any client's goodbye
            assert await SilentBroker.read_to_the_end(upstream) == (0, "eof")
            upstream.close()
    finally:
        broker.close()


# -------------------------------------------------------------- 2. bootstrap candidates: failed brokers last


A, B, C = ("10.0.0.1", 9092), ("10.0.0.2", 9092), ("10.0.0.3", 9092)


def test_an_address_that_failed_recently_goes_last_and_a_success_brings_it_back() -> None:
    clock = Clock()
    failures = ConnectFailures(clock=clock)
    assert failures.order([A, B, C]) == [A, B, C]
    # Given A's connect failed
    failures.failed(A)
    # Then A goes last, the others keep their order
    assert failures.order([A, B, C]) == [B, C, A]
    assert failures.order([C, A, B]) == [C, B, A]
    # And after RECENT_FAILURE_SECONDS it takes its place again
    clock.now += RECENT_FAILURE_SECONDS - 0.1
    assert failures.order([A, B, C]) == [B, C, A]
    clock.now += 0.2
    assert failures.order([A, B, C]) == [A, B, C]
    # A failure again, then a success: its place at once
    failures.failed(A)
    failures.failed(B)
    assert failures.order([A, B, C]) == [C, A, B]
    failures.succeeded(A)
    assert failures.order([A, B, C]) == [A, C, B]


def test_the_addresses_remembered_are_bounded_the_oldest_failure_forgotten_first() -> None:
    failures = ConnectFailures(max_addresses=3, clock=Clock())
    for port in range(10):
        failures.failed(("10.0.0.1", port))
    assert len(failures) == 3
    assert [failures.failed_recently(("10.0.0.1", port)) for port in range(10)] == [False] * 7 + [True] * 3


def test_the_hold_grows_with_each_failure_in_a_row_up_to_its_ceiling() -> None:
    clock = Clock()
    failures = ConnectFailures(hold_initial=0.25, hold_max=4.0, clock=clock)
    assert failures.hold_seconds([A]) == 0.0
    holds = []
    for _ in range(8):
        failures.failed(A)
        holds.append(failures.hold_seconds([A]))
    assert holds == [0.25, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    # The hold runs from the latest failure
    clock.now += 3.0
    assert failures.hold_seconds([A]) == pytest.approx(1.0)
    clock.now += 1.0
    assert failures.hold_seconds([A]) == 0.0
    # A bootstrap connection is held only while every candidate is in its back-off, until the first ends
    failures.failed(A)
    assert failures.hold_seconds([A, B]) == 0.0
    failures.failed(B)
    assert failures.hold_seconds([A, B]) == pytest.approx(0.25)
    failures.succeeded(B)
    assert failures.hold_seconds([A, B]) == 0.0


def test_held_connections_are_bounded() -> None:
    failures = ConnectFailures(max_held=2)
    assert failures.hold() and failures.hold()
    assert not failures.hold()
    failures.release()
    assert failures.hold()


def _connect_errors(metrics: ProxyMetrics, address: Address) -> float:
    return metrics.registry.get_sample_value(
        "insync_proxy_upstream_connection_errors_total", {"broker": f"{address[0]}:{address[1]}", "kind": "connect"}
    ) or 0.0


class EchoBroker:
    """Answers every request frame with its correlation id and b"ok"; counts connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.address: Address = ("127.0.0.1", 0)

    async def start(self, sock: socket.socket | None = None) -> EchoBroker:
        if sock is None:
            self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        else:
            self.server = await asyncio.start_server(self._serve, sock=sock)
        self.address = ("127.0.0.1", int(self.server.sockets[0].getsockname()[1]))
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                answer = frame[4:8] + b"ok"
                writer.write(struct.pack(">i", len(answer)) + answer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def _served(port: int, correlation_id: int = 1) -> bool:
    """A client connects, sends one request and gets its answer (False: closed without one)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_request(correlation_id))
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 15))[0]
        return await reader.readexactly(size) == struct.pack(">i", correlation_id) + b"ok"
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    finally:
        writer.close()


async def test_bootstrap_connections_try_a_black_holed_broker_last_once_it_failed() -> None:
    metrics = ProxyMetrics()
    broker = await EchoBroker().start()
    try:
        with _full_backlog() as black_hole:
            # Given bootstrap candidates whose first is a broker that accepts nothing (still in Metadata)
            timeout = 2.0
            settings = _settings(metrics, candidates=lambda: [black_hole, broker.address], connect_timeout=timeout)
            async with _proxy_port(settings, None) as port:
                # When a first client connects: it waits the connect timeout on it, then is served by the next
                assert await _served(port)
                assert _connect_errors(metrics, black_hole) == 1
                # Then the next bootstrap connections go to the working broker first, no connect timeout waited
                for i in range(3):
                    started = time.monotonic()
                    assert await _served(port, 2 + i)
                    assert time.monotonic() - started < timeout
                assert _connect_errors(metrics, black_hole) == 1
                assert broker.connections == 4
    finally:
        broker.close()


# ------------------------------------------------------------------- 3. a down broker's port: no reconnect storm


@contextmanager
def _refusing_port() -> Iterator[socket.socket]:
    """A port bound but not listening: every connect to it is refused, until `listen()` is called on it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock
    finally:
        sock.close()


async def _reconnecting_client(port: int, until: float) -> int:
    """A client that reconnects at once each time its connection closes (the worst case); its closes."""
    closes = 0
    while time.monotonic() < until:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_request(1))
        with contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(reader.read(), 15) == b""
        writer.close()
        closes += 1
    return closes


#: Clients reconnecting at once to a down broker's port, and for how long, in the storm test.
STORM_CLIENTS = 8
STORM_SECONDS = 3.0


async def test_a_down_brokers_port_holds_reconnecting_clients_instead_of_a_close_storm(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "insync_proxy.connection")
    forget_all()
    metrics = ProxyMetrics()
    settings = _settings(metrics)
    with _refusing_port() as down:
        broker: Address = ("127.0.0.1", int(down.getsockname()[1]))
        async with _proxy_port(settings, broker) as port:
            # Given clients that reconnect at once each time the proxy closes them, on a down broker's port
            until = time.monotonic() + STORM_SECONDS
            closes = sum(await asyncio.gather(*(_reconnecting_client(port, until)
                                                for _ in range(STORM_CLIENTS))))
    # Then the proxy closes each a few times in the window, not as fast as they reconnect
    print(f"{closes} closes of {STORM_CLIENTS} reconnecting clients in {STORM_SECONDS:g} s")
    assert closes <= STORM_CLIENTS * 5, closes
    assert _connect_errors(metrics, broker) == closes
    # And the holds are counted and said (rate-limited: one line, the rest in its summary)
    held = metrics.registry.get_sample_value("insync_proxy_client_connections_held_total",
                                             {"listener": "default", "result": "held"})
    assert held is not None and held >= closes - STORM_CLIENTS
    lines = [r.getMessage() for r in caplog.records if "holding client" in r.getMessage()]
    assert len(lines) == 1, lines
    assert f"connects to 127.0.0.1:{broker[1]} failed" in lines[0]


async def test_a_held_client_is_served_when_its_broker_comes_back() -> None:
    metrics = ProxyMetrics()
    settings = _settings(metrics)
    with _refusing_port() as down:
        broker: Address = ("127.0.0.1", int(down.getsockname()[1]))
        async with _proxy_port(settings, broker) as port:
            # Given a broker whose connect was refused
            assert not await _served(port, 1)
            # When a client connects within its back-off: it is held, not closed
            second = asyncio.ensure_future(_served(port, 2))
            await _until(lambda: settings.connect_failures.held == 1, what="the second client to be held")
            # And the broker comes back meanwhile
            echo = await EchoBroker().start(sock=down)
            try:
                # Then the held client is served
                assert await asyncio.wait_for(second, 15)
                # And once a connect succeeded, a new client is not held (the count below stays 1)
                assert await _served(port, 3)
            finally:
                echo.close()
    assert metrics.registry.get_sample_value("insync_proxy_client_connections_held_total",
                                             {"listener": "default", "result": "held"}) == 1


async def test_beyond_the_held_bound_a_connection_tries_its_broker_at_once() -> None:
    metrics = ProxyMetrics()
    settings = _settings(metrics)
    settings.connect_failures = ConnectFailures(max_held=1)
    with _refusing_port() as down:
        broker: Address = ("127.0.0.1", int(down.getsockname()[1]))
        async with _proxy_port(settings, broker) as port:
            assert not await _served(port, 1)
            held = asyncio.ensure_future(_served(port, 2))
            await _until(lambda: settings.connect_failures.held == 1, what="a held client")
            # When one more client comes while the bound is taken: tried at once, closed as before
            assert not await _served(port, 3)
            assert settings.connect_failures.held == 1
            assert not await asyncio.wait_for(held, 15)
    assert metrics.registry.get_sample_value("insync_proxy_client_connections_held_total",
                                             {"listener": "default", "result": "over_limit"}) == 1


class _Writer:
    def close(self) -> None:
        pass


@pytest.mark.parametrize(("error", "said"), [
    (ConnectionResetError(), "connection reset by the broker"),
    (TimeoutError(), "timed out"),
])
async def test_a_lost_control_connection_says_why_to_the_requests_it_held(error: BaseException, said: str) -> None:
    link = _Link(("127.0.0.1", 9092), asyncio.StreamReader(), _Writer())  # type: ignore[arg-type]
    waiting: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    link.pending[1] = waiting
    # When the connection breaks with an error whose str() is empty
    link.close(error)
    # Then the request it held fails saying why
    with pytest.raises(ControlError) as failed:
        await waiting
    assert str(failed.value) == f"control connection to 127.0.0.1:9092 lost: {said}"


class AnswerExpected(BehaviourBase):
    """ListOffsets stands in for a Produce request with acks=0 (AcksPolicy says the same of those): no answer."""

    request_keys = frozenset({int(ApiKey.LIST_OFFSETS)})

    def on_request(self, exchange: Exchange) -> RequestResult:
        return FORWARD_WITHOUT_RESPONSE


@pytest.mark.parametrize("new_loop", EVENT_LOOPS)
def test_a_client_leaving_after_requests_that_owe_no_answer_still_delivers_them(
        new_loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(_a_client_leaving_after_requests_that_owe_no_answer_still_delivers_them())


async def _a_client_leaving_after_requests_that_owe_no_answer_still_delivers_them() -> None:
    metrics = ProxyMetrics()
    settings = _settings(metrics)
    settings.registry = BehaviourRegistry([AnswerExpected()])
    broker = SilentBroker()
    # Requests that owe no answer (acks=0), more than the broker's receive buffer and the proxy's kernel take
    requests = b"".join(_request(i, b"\x00" * (1 << 20)) for i in range(4))
    try:
        async with _proxy_port(settings, broker.address) as port:
            # Given a client that sent them, the proxy holding some of them for a broker slow to read
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            upstream = await broker.accept()
            writer.write(requests)
            await _until(lambda: _client_in(metrics) == len(requests), what="the proxy to read every request")
            (connection,) = settings.connections
            assert connection.pending == 0
            upstream_side = connection.upstream
            assert upstream_side is not None and upstream_side.write_buffer is not None
            assert upstream_side.write_buffer.buffered() > 0
            # When the client closes its connection (as a direct client would after sending them)
            writer.close()
            await _until(lambda: not settings.connections, what="the proxy to close the client's connection")
            # Then the broker still reads all of them, then the end: as from the client itself
            assert await SilentBroker.read_to_the_end(upstream) == (len(requests), "eof")
            upstream.close()
    finally:
        broker.close()


# ------------------------------------------------------------------------------ a client gone while its broker connects


class CountingBroker:
    """Accepts connections, reads until each closes; counts those open now."""

    def __init__(self) -> None:
        self.open = 0
        self.accepted = 0
        self.server: asyncio.Server | None = None
        self.address: Address = ("127.0.0.1", 0)

    async def start(self) -> CountingBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
        self.address = ("127.0.0.1", int(self.server.sockets[0].getsockname()[1]))
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.accepted += 1
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        finally:
            self.open -= 1
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.mark.parametrize("new_loop", EVENT_LOOPS)
def test_clients_gone_while_their_broker_connection_is_made_leave_no_broker_connection_open(
        new_loop: Callable[[], asyncio.AbstractEventLoop]) -> None:
    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(_clients_gone_while_their_broker_connection_is_made_leave_no_broker_connection_open())


async def _clients_gone_while_their_broker_connection_is_made_leave_no_broker_connection_open() -> None:
    # Given clients that connect and close at once (a connection storm, a port scanner), some of them while the
    # proxy's connection to their broker is still being made
    metrics = ProxyMetrics()
    settings = _settings(metrics, connect_timeout=5.0)
    broker = await CountingBroker().start()
    try:
        async with _proxy_port(settings, broker.address) as port:
            for _ in range(10):
                clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
                for _, writer in clients:
                    writer.transport.abort()
                await asyncio.sleep(0)
            await _until(lambda: not settings.connections, what="the proxy to close every client connection")
            await _until(lambda: broker.accepted > 0, what="a broker connection")
            # Then every broker connection the proxy made for them is closed too (none left open, holding a file
            # descriptor, its buffers and the closed client's state, until the broker's idle timeout)
            await _until(lambda: broker.open == 0, within=5.0,
                         what=f"the broker connections to close ({broker.open} of {broker.accepted} open)")
            assert metrics.registry.get_sample_value(
                "insync_proxy_upstream_connections_active", {"broker": f"127.0.0.1:{broker.address[1]}"}) in (0, None)
    finally:
        broker.close()
