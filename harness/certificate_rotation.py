"""A certificate rotation under load, for the suite (30 s, tests/integration/test_reload.py) and as a command
(benchmarks/rotation_soak.py, 10 minutes): the proxy's upstream client certificate is replaced every `period`
seconds by a new one from the same CA, each valid `validity` seconds, while Kafka's Java producer and
librdkafka produce through the proxy without pause.

The proxy runs in this process (its event loop in a thread), so the run can look at every upstream connection
it opens: each TLS connection keeps the SSLContext it was made with, and the proxy's TlsMaterial knows which
certificate each context presents.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Producer

from harness.java_client import JavaClient
from harness.pki import Ca
from harness.proxy_process import free_port_base
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster, free_port
from insync_proxy.proxy.config.loader import load_config
from insync_proxy.proxy.datapath.connection import ClientConnection
from insync_proxy.proxy.server import InsyncProxy

T = TypeVar("T")


class InProcessProxy:
    """The proxy of a TOML file, on a uvloop event loop in a thread of this process; `call` runs on that loop."""

    def __init__(self, config_file: Path) -> None:
        import uvloop

        self.config_file = config_file
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="proxy-loop", daemon=True)
        self.thread.start()
        try:
            self.proxy: InsyncProxy = self.run(self._start())
        except BaseException:
            self._stop_loop()
            raise

    def _load(self) -> Any:
        return load_config(str(self.config_file), env={})

    async def _start(self) -> InsyncProxy:
        proxy = InsyncProxy(self._load(), load=self._load)
        await proxy.start()
        return proxy

    def run(self, coroutine: Awaitable[T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)  # type: ignore[arg-type]

    def call(self, function: Callable[[], T], timeout: float = 60) -> T:
        async def on_loop() -> T:
            return function()

        return self.run(on_loop(), timeout)

    def ready(self) -> bool:
        return self.call(lambda: self.proxy.ready[0])

    def stop(self) -> None:
        try:
            self.run(self.proxy.stop(drain_timeout=5), timeout=60)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


def upstream_toml(cluster: LocalKafkaCluster, ca_file: Path, cert: Path, key: Path, admin_port: int,
                  bootstrap_port: int, broker_port_base: int, tls_reload_seconds: float = 1) -> str:
    """A proxy in front of the cluster's mTLS listeners, its client certificate in `cert`/`key`."""
    servers = json.dumps(cluster.tls_bootstrap_servers.split(","))
    return (f"bootstrap_servers = {servers}\nadmin_port = {admin_port}\ntls_reload_seconds = {tls_reload_seconds}\n"
            f"metadata_refresh_seconds = 2\nlog_level = \"INFO\"\n"
            f"[[listener]]\nbootstrap_port = {bootstrap_port}\nbroker_port_base = {broker_port_base}\n"
            f'[upstream_tls]\nenabled = true\nca_file = "{ca_file}"\ncert_file = "{cert}"\nkey_file = "{key}"\n'
            f"[audit]\nenabled = false\n")


@dataclass
class ProducerCounts:
    sent: int = 0
    acked: int = 0
    errors: int = 0
    #: Connections the client opened and closed after its warm-up (a reconnect).
    connects: int = 0
    closes: int = 0
    first_errors: list[str] = field(default_factory=list)


class LibrdkafkaProducer:
    """librdkafka producing without pause (acks=all, one record every `interval` s, 2 ms unless told) in a thread."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.002) -> None:
        self.topic = topic
        self.interval = interval
        self.counts = ProducerCounts()
        self._stats: dict[str, int] = {}
        self._warm: dict[str, int] | None = None
        self._stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "statistics.interval.ms": 500, "stats_cb": self._on_stats})
        self.thread = threading.Thread(target=self._run, name="librdkafka-producer", daemon=True)
        self.thread.start()

    def _on_stats(self, text: str) -> None:
        brokers = json.loads(text).get("brokers", {}).values()
        self._stats = {"connects": sum(b.get("connects", 0) for b in brokers),
                       "disconnects": sum(b.get("disconnects", 0) for b in brokers)}

    def _delivered(self, error: Any, _message: Any) -> None:
        if error is None:
            self.counts.acked += 1
        else:
            self.counts.errors += 1
            if len(self.counts.first_errors) < 5:
                self.counts.first_errors.append(str(error))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, key=b"k%d" % self.counts.sent, value=b"librdkafka-%d" % self.counts.sent,
                                  on_delivery=self._delivered)
            self.counts.sent += 1
            self.producer.poll(0)
            time.sleep(self.interval)
        self.producer.flush(120)
        self.producer.poll(1)  # the last statistics
        # The producer's stats callback holds this object: drop the producer now, not at a later GC
        # (until then it would keep reconnecting to a proxy that is gone)
        del self.producer

    def warm(self) -> bool:
        """Mark the end of the warm-up once its connections are open and records are acknowledged."""
        if self.counts.acked == 0 or not self._stats:
            return False
        self._warm = dict(self._stats)
        return True

    def stop(self) -> ProducerCounts:
        self._stop.set()
        self.thread.join(180)
        assert self._warm is not None, "stopped before the warm-up ended"
        self.counts.connects = self._stats["connects"] - self._warm["connects"]
        self.counts.closes = self._stats["disconnects"] - self._warm["disconnects"]
        return self.counts


def java_counts(process: subprocess.Popen[str], timeout: float) -> ProducerCounts:
    """Stop the Java producer (a line on its stdin) and read what it counted."""
    out, err = process.communicate("stop\n", timeout=timeout)
    match = re.search(r"sent=(\d+) acked=(\d+) errors=(\d+) connects=(-?\d+) closes=(-?\d+)", out)
    assert process.returncode == 0 and match, f"Java producer failed ({process.returncode}):\n{out}\n{err[-3000:]}"
    sent, acked, errors, connects, closes = (int(g) for g in match.groups())
    return ProducerCounts(sent, acked, errors, connects, closes,
                          [line for line in err.splitlines() if "send error" in line][:5])


@dataclass
class RotationResult:
    rotations: int
    java: ProducerCounts
    librdkafka: ProducerCounts
    #: Upstream connections opened after a rotation was picked up, each checked for the certificate it presents.
    new_connections_checked: int
    #: Those that presented another certificate than the newest (should be none).
    wrong_certificate: list[str]
    #: Client connections open at the end of the warm-up that were closed by the end (should be none).
    warm_connections_closed: int
    #: Who closed each of those: "client" (the client's side went away) or "broker" (the upstream did).
    closed_by: list[str]
    #: Established upstream connections still in use at the end whose certificate has expired.
    expired_certificates_in_use: int
    #: Seconds the proxy took to use a rotated certificate (from its file write to the swap), the slowest.
    slowest_pickup_seconds: float
    #: CPU seconds of this process during the rotations (the proxy, librdkafka and the test).
    cpu_seconds: float
    #: CPU seconds of the proxy's event loop thread during the rotations (the proxy's own work).
    proxy_cpu_seconds: float

    def summary(self) -> str:
        return (f"rotations={self.rotations} java(sent={self.java.sent} acked={self.java.acked} "
                f"errors={self.java.errors} connects={self.java.connects} closes={self.java.closes}) "
                f"librdkafka(sent={self.librdkafka.sent} acked={self.librdkafka.acked} errors={self.librdkafka.errors} "
                f"connects={self.librdkafka.connects} closes={self.librdkafka.closes}) "
                f"new_upstream_connections_checked={self.new_connections_checked} "
                f"wrong_certificate={len(self.wrong_certificate)} warm_connections_closed={self.warm_connections_closed} "
                f"{self.closed_by or ''} "
                f"expired_certificates_in_use={self.expired_certificates_in_use} "
                f"slowest_pickup={self.slowest_pickup_seconds:.1f}s process_cpu_seconds={self.cpu_seconds:.1f} "
                f"proxy_loop_cpu_seconds={self.proxy_cpu_seconds:.1f}")


def _watch_closes(connections: set[ClientConnection], closed_by: list[str]) -> None:
    """Note who ends each of these connections: the client (connection_lost) or the broker (upstream_lost)."""
    for connection in connections:
        def client_lost(exc: Exception | None, c: ClientConnection = connection,
                        original: Callable[[Exception | None], None] = connection.connection_lost) -> None:
            if not c.closed:
                closed_by.append(f"client {c.peer} at {c.listener.label} ({exc!r})")
            original(exc)

        def broker_lost(exc: Exception | None, c: ClientConnection = connection,
                        original: Callable[[Exception | None], None] = connection.upstream_lost) -> None:
            if not c.closed:
                closed_by.append(f"broker of {c.peer} at {c.listener.label} ({exc!r})")
            original(exc)

        try:
            connection.connection_lost = client_lost  # type: ignore[method-assign]
            connection.upstream_lost = broker_lost  # type: ignore[method-assign]
        except (AttributeError, TypeError):
            return  # a compiled connection.py cannot be patched: the count of closed connections still says it


def _upstream_serials(proxy: InsyncProxy, connections: set[ClientConnection]) -> dict[ClientConnection, Any]:
    """The certificate each connection's upstream TLS connection presents (by its SSLContext)."""
    found = {}
    for connection in connections:
        upstream = connection.upstream
        transport = getattr(upstream, "transport", None)
        ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
        if ssl_object is not None:
            found[connection] = proxy.upstream_tls.presented.get(ssl_object.context)
    return found


def run_rotation(cluster: LocalKafkaCluster, ca: Ca, ca_file: Path, workdir: Path, java: JavaClient, *,
                 period: float, validity: float, duration: float, send_interval: float = 0.002,
                 say: Callable[[str], None] = print) -> RotationResult:
    """Rotate the proxy's client certificate every `period` s (each valid `validity` s) for `duration` s while
    both producers produce through it, a record every `send_interval` s each; see RotationResult for what is
    measured."""
    topic = f"rotation-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 3, 3)
    cert, key = workdir / "proxy.crt", workdir / "proxy.key"
    ca.issue("insync-proxy", valid_seconds=validity).write(cert, key)
    config = workdir / "proxy.toml"
    config.write_text(upstream_toml(cluster, ca_file, cert, key, free_port(), free_port(), free_port_base()))
    proxy = InProcessProxy(config)
    java_process: subprocess.Popen[str] | None = None
    librdkafka: LibrdkafkaProducer | None = None
    try:
        wait_until(proxy.ready, 60, what="the proxy ready")
        bootstrap = f"127.0.0.1:{proxy.proxy.bootstrap_port}"
        warmup = 12
        # Java runs until told to stop (its own bound: well after the rotations)
        java_process = java.start("produce-for", bootstrap, topic, str(int(duration * 2 + 300)), str(warmup),
                                  str(max(1, round(send_interval * 1000))))
        librdkafka = LibrdkafkaProducer(bootstrap, topic, send_interval)
        started = time.monotonic()
        wait_until(librdkafka.warm, 60, what="librdkafka's first acknowledgements")
        assert java_process.stdout is not None
        line = java_process.stdout.readline()  # the Java producer says WARM after its warm-up
        assert line.strip() == "WARM", line
        warm = proxy.call(lambda: set(proxy.proxy.connections))
        closed_by: list[str] = []
        proxy.call(lambda: _watch_closes(warm, closed_by))
        cpu_before, loop_cpu_before = time.process_time(), proxy.call(time.thread_time)
        say(f"warm after {time.monotonic() - started:.0f}s: {len(warm)} client connections; rotating every "
            f"{period:.0f}s for {duration:.0f}s, each certificate valid {validity:.0f}s")
        checked, wrong, rotations, slowest = 0, [], 0, 0.0
        begin = time.monotonic()
        for rotations in range(1, int(duration // period) + 1):
            at = begin + rotations * period
            wait_until(lambda t=at: time.monotonic() >= t, period + 30, interval=0.2, what="the next rotation")
            issued = ca.issue("insync-proxy", valid_seconds=validity)
            written = time.monotonic()
            issued.write(cert, key)

            def serial_in_use() -> int | None:
                current = proxy.proxy.upstream_tls.current.certificate
                return current.serial if current is not None else None

            wait_until(lambda s=issued.serial: proxy.call(serial_in_use) == s, 30, interval=0.1,
                       what=f"the proxy to use rotation {rotations}")
            pickup = time.monotonic() - written
            slowest = max(slowest, pickup)
            # New connections after the rotation: a fresh client opens bootstrap and broker connections
            before = proxy.call(lambda: set(proxy.proxy.connections))
            probe = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
            probe.produce(topic, b"probe-%d" % rotations)
            assert probe.flush(60) == 0, "the probe's record was not acknowledged"
            fresh = proxy.call(lambda b=before: _upstream_serials(proxy.proxy, set(proxy.proxy.connections) - b))
            del probe
            assert fresh, "the probe opened no connection through the proxy"
            for connection, certificate in fresh.items():
                checked += 1
                if certificate is None or certificate.serial != issued.serial:
                    wrong.append(f"rotation {rotations}: {connection.listener.label} presented "
                                 f"{certificate.serial if certificate else None:x}, not {issued.serial:x}")
            say(f"rotation {rotations}: serial {issued.serial:x} in use after {pickup:.1f}s; "
                f"{len(fresh)} new upstream connection(s) present it")
        cpu, loop_cpu = time.process_time() - cpu_before, proxy.call(time.thread_time) - loop_cpu_before
        now = time.time()
        still = proxy.call(lambda: set(proxy.proxy.connections))
        closed_by = list(closed_by)  # the clients' own closes at their stop come later: not counted
        in_use = proxy.call(lambda: _upstream_serials(proxy.proxy, warm & still))
        expired = sum(1 for c in in_use.values() if c is not None and c.not_after < now)
        counts = librdkafka.stop()
        librdkafka = None
        java_result = java_counts(java_process, timeout=180)
        java_process = None
        return RotationResult(rotations, java_result, counts, checked, wrong, len(warm - still), closed_by, expired,
                              slowest, cpu, loop_cpu)
    finally:
        if librdkafka is not None:
            librdkafka.stop()
        if java_process is not None:
            java_process.kill()
            java_process.wait(30)
        proxy.stop()
