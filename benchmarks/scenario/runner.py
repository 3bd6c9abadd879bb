"""A year in an hour (issue 39): many faults at once, for a long time, against invariants checked by an oracle
that shares no code with the proxy.

    python3 -m benchmarks.scenario [--minutes 60] [--out DIR] [--json FILE] [--interpreted]

1. A 3-broker dev cluster on Kafka 3.9.2 with a SASL_SSL listener (SCRAM-SHA-512 for the proxy's control login
   and the clients, PLAIN for the runner's own Metadata sampler) that also asks for a client certificate (mTLS),
   started as `LocalKafkaCluster`; the SASL_SSL listener of broker 3 is advertised through a TCP relay of this
   process (the silent-network event).
2. The proxy as a user runs it: `python -m insync_proxy run --config FILE`, the compiled build (made first with
   ./scripts/compile when missing; `--interpreted` for the interpreted one), mTLS and SCRAM upstream, TLS
   downstream: clients speak SASL_SSL to it and trust its CAs.
3. Producers through the proxy: Kafka's VerifiableProducer (idempotent, acks=all), kafka-python with acks=-2,
   kafka-python with acks=-2 partitioned by the project's KIP-637 partitioner (insync_proxy.client.partitioner),
   librdkafka with acks=1 and with acks=0. For the added latency, Kafka's Java producer
   (benchmarks/java/LatencyProducer.java: acks=all, linger.ms=0, one request in flight) both through the proxy
   and directly at half its maximum rate: the rate it reaches one record at a time, measured directly for a
   few seconds before the events start (`--latency-rate` fixes it instead). A record's latency runs from when
   it was due to its acknowledgement; the producer prints a histogram (2% buckets) every second.
4. A schedule of overlapping events, spread over the run and repeated in a long one: SIGKILL and restart of a
   broker, a broker paused 30 s, a rolling restart (SIGTERM), topics created/altered/deleted at a steady rate,
   SIGHUP and POST /reload with changed settings, hostile clients and a connection storm, a broker's network
   silent for 60 s (the relay stops forwarding, sockets stay open), certificates rotated on both legs (brokers'
   dynamic keystores, the proxy's client and server certificates, SIGHUP), a CA change on both legs after which
   the brokers trust only the new CA (POST /reload), slow consumers holding large Fetch answers, a rolling
   upgrade to Kafka 4.3.1 with the metadata.version bump (FeatureCommand of the 4.3.1 jars), then a share group.
5. A monitor samples the proxy every few seconds (RSS, fds, threads from /proc; /metrics; /readyz with an
   ApiVersions through the proxy), the brokers' own ISRs (kafka-python, straight to the brokers) and the proxy's
   Metadata answers (a hand-written Metadata v12 client: tag 637, broker addresses).
6. At the end: every record VerifiableProducer and the partitioner's producer had acknowledged is read back at
   its offset straight from the brokers (kafka-python); the invariants print as a table and go to a summary JSON;
   a timeline SVG (made by hand) and a PNG of it (drawn by this module: matplotlib is no dependency and
   ImageMagick may be absent) go beside them.

Exit 0 when every invariant held.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from harness.compiled_build import compiled_extensions
from harness.kafka_wire import MetadataAnswer, WireConnection, WireError
from harness.min_insync_history import allowed_values
from insync_proxy.devcluster.certificates import _key_and_csr, _sign, make_test_certificates
from insync_proxy.devcluster.cluster import (
    ClusterSettings,
    KafkaNode,
    LocalKafkaCluster,
    _die_with_parent,
    free_port,
    free_ports,
)
from insync_proxy.devcluster.distribution import kafka_libs
from insync_proxy.devcluster.kafka_tools import java_command, write_log_configuration
from tests.hostile_clients import send_malformed
from tests.pki import Ca, key_pem, replace_file
from tests.proxy_harness import free_port_base

ROOT = Path(__file__).resolve().parents[2]

OLD_VERSION = "3.9.2"
NEW_VERSION = "4.3.1"
NEW_RELEASE = "4.3"
IDEMPOTENT_TOPIC = "year-idempotent"
ACKS2_TOPIC = "year-acks2"
LATENCY_TOPIC = "year-latency"
#: acks=1 and acks=0 records (librdkafka through the proxy); acks=0 values are ACKS0_BASE + n.
ACKS01_TOPIC = "year-acks01"
ACKS0_BASE = 10**9
#: Records a second of each of the acks=1 and acks=0 producers.
ACKS01_RATE = 20.0
LATENCY_SOURCE = ROOT / "benchmarks" / "java" / "LatencyProducer.java"
#: LatencyProducer's buckets: bucket b holds [LATENCY_BUCKET_BASE**b, LATENCY_BUCKET_BASE**(b+1)) microseconds.
LATENCY_BUCKET_BASE = 1.02
PARTITIONER_TOPIC = "year-partitioner"
#: One partition of large records, read by the slow consumers.
BULK_TOPIC = "year-bulk"
CHURN_PREFIX = "year-churn-"
PARTITIONS = 3
PROXY_USER, CLIENT_USER, SAMPLER_USER = "insync-proxy", "client", "sampler"
MECHANISM = "SCRAM-SHA-512"
#: The proxy's min_insync_ttl_seconds in the run: a tag 637 may lag a change made behind its back this long
#: (plus a refresh and a Metadata round): the sampler allows twice the TTL and 5 s.
MIN_INSYNC_TTL = 5.0
#: The silent relay sits in front of this broker's SASL_SSL listener.
RELAYED_BROKER = 3
#: The brokers' replica.lag.time.max.ms in the run, s: how long before an event an acks=1 record may still be
#: the leader's alone.
REPLICA_LAG_SECONDS = 5.0
#: Bounds of the rates the proxy may reach (per minute, averaged over the run).
LOG_LINES_PER_MINUTE = 300.0
CONTROL_REQUESTS_PER_MINUTE = 600.0
#: Target p99 added latency outside event windows, ms (reported; on a shared 2-core machine, informative).
ADDED_P99_TARGET_MS = 1.0
#: Latency samples this long after an event window closed are "settling" (a leader's ISR refilling, clients
#: reconnecting): neither outside nor inside.
SETTLE_SECONDS = 30.0
#: The proxy's memory budget in the run (max_buffered_bytes) and the RSS rise the slow consumers may cause.
BUFFER_BUDGET_MIB = 32
SLOW_RSS_SLACK_MIB = 48
#: After a rotation, /readyz and the producers must be back within this long.
ROTATION_BOUND_SECONDS = 30.0
#: The brokers' SASL_SSL listener asks for a client certificate (KIP-684): the brokers' truststore decides who
#: may connect, so a CA change locks out a proxy still presenting the old CA's certificate.
BROKER_EXTENSIONS = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
TRUSTSTORE = "listener.name.sasl.ssl.truststore.location"
KEYSTORE = "listener.name.sasl.ssl.keystore.location"

_PRODUCER_CONFIG = """\
enable.idempotence=true
acks=all
max.in.flight.requests.per.connection=5
retries=2147483647
delivery.timeout.ms=300000
request.timeout.ms=15000
linger.ms=5
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
ssl.truststore.type=PEM
"""


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


# --------------------------------------------------------------------------------------------- the relay
class SilentRelay:
    """TCP relay in front of one broker listener (asyncio in a thread). `silence(True)`: bytes stop moving both
    ways and new connections are accepted but never forwarded; every socket stays open (a black-holed network)."""

    def __init__(self, listen_port: int, target_port: int) -> None:
        self.listen_port, self.target_port = listen_port, target_port
        self.silent = False
        self.loop = asyncio.new_event_loop()
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="silent-relay", daemon=True)
        self.thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the relay did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())
        self._ready.set()
        self.loop.run_forever()

    async def _serve(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", self.listen_port)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self.flowing.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    def silence(self, silent: bool) -> None:
        self.silent = silent
        self.loop.call_soon_threadsafe(self.flowing.clear if silent else self.flowing.set)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class RelayedCluster(LocalKafkaCluster):
    """A cluster whose broker RELAYED_BROKER advertises its SASL listener at the relay's port, and whose JVMs are
    all started by one long-lived thread: the kernel's parent-death signal (PR_SET_PDEATHSIG) follows the thread
    that started a child, so a JVM started by an event's thread would be SIGKILLed when that event ends."""

    relay_port: int = 0
    launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jvm-launcher")

    def _launch(self, node: KafkaNode) -> None:
        self.launcher.submit(LocalKafkaCluster._launch, self, node).result()

    def _properties(self, node: KafkaNode) -> str:
        text = super()._properties(node)
        if node.role == "broker" and node.node_id == RELAYED_BROKER and self.relay_port:
            real = self.sasl_ports[node.node_id]
            lines = []
            for line in text.splitlines():
                if line.startswith("advertised.listeners="):
                    line = line.replace(f"SASL://127.0.0.1:{real}", f"SASL://127.0.0.1:{self.relay_port}")
                lines.append(line)
            text = "\n".join(lines) + "\n"
        return text


# --------------------------------------------------------------------------------------------- certificates
def certificate_serial(pem: Path) -> int:
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem.read_bytes()).serial_number


def tls_probe(port: int, trust: Path, client: tuple[Path, Path] | None = None, timeout: float = 10) -> int:
    """The serial of the certificate a TLS server on 127.0.0.1:`port` presents to a new connection, after an
    ApiVersions v0 was answered over it; ssl.SSLError or ConnectionError when the server refuses `client`'s
    certificate (TLS 1.3 says so at the first read, after the handshake)."""
    from cryptography import x509

    context = ssl.create_default_context(cafile=str(trust))
    if client is not None:
        context.load_cert_chain(str(client[0]), str(client[1]))
    with socket.create_connection(("127.0.0.1", port), timeout) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(True)
        request = struct.pack(">hhih", 18, 0, 1, -1)  # ApiVersions v0, correlation id 1, no client id
        tls.sendall(struct.pack(">i", len(request)) + request)
        if len(tls.recv(4)) != 4:
            raise ConnectionError("the server closed the connection")
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


class RunCertificates:
    """Both legs' certificates and the files that name them. Upstream: the brokers' CA (a new one at each CA
    change, openssl like the dev cluster's), the brokers' PEM keystores, the proxy's client certificate and the
    CA bundle it trusts. Downstream: two CAs of the proxy's own, both in the bundle its clients trust from the
    start (a bundle handed out ahead of a CA change), and the proxy's server certificate of one of them.
    Files the proxy reads keep their names and are replaced whole; each broker keystore or truststore is a new
    file, named to the brokers by a dynamic config."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        first = make_test_certificates(directory / "ca-1", ())
        self.generation = 1
        self.ca_cert, self.ca_key = first.ca_cert, directory / "ca-1" / "ca.key"
        self.broker_keystore = first.broker_keystore
        self.upstream_ca = directory / "upstream-ca.pem"
        self.upstream_ca.write_bytes(self.ca_cert.read_bytes())
        self.broker_trust = self.bundle("broker-trust-1.pem", self.ca_cert)
        self.proxy_cert, self.proxy_key = directory / "proxy-client.crt", directory / "proxy-client.key"
        self.direct_cert, self.direct_key = directory / "direct-client.crt", directory / "direct-client.key"
        self.issue_client(self.proxy_cert, self.proxy_key, PROXY_USER)
        self.issue_client(self.direct_cert, self.direct_key, "year-direct")
        self.downstream = [Ca.new("insync-proxy year downstream CA 1", 366 * 86400),
                           Ca.new("insync-proxy year downstream CA 2", 366 * 86400)]
        self.downstream_index = 0
        self.client_trust = directory / "clients-trust.pem"
        self.client_trust.write_bytes(b"".join(ca.pem for ca in self.downstream))
        self.server_cert, self.server_key = directory / "proxy-server.crt", directory / "proxy-server.key"
        self.issue_server()

    def bundle(self, name: str, *cas: Path) -> Path:
        path = self.dir / name
        path.write_bytes(b"".join(ca.read_bytes() for ca in cas))
        return path

    def issue_client(self, cert: Path, key: Path, name: str, ca: tuple[Path, Path] | None = None) -> int:
        issued = Ca.from_files(*(ca or (self.ca_cert, self.ca_key))).issue(name, valid_seconds=30 * 86400)
        issued.write(cert, key)
        return int(issued.serial)

    def issue_server(self) -> int:
        issued = self.downstream[self.downstream_index].issue("localhost", valid_seconds=30 * 86400, server=True)
        issued.write(self.server_cert, self.server_key)
        return int(issued.serial)

    def new_broker_keystore(self, name: str) -> tuple[Path, int]:
        """A new key and certificate for the brokers from the current CA, same subject and names as the first
        (Kafka refuses a dynamic keystore whose DN or SANs changed)."""
        directory = self.dir / name
        directory.mkdir(parents=True, exist_ok=True)
        key, csr = _key_and_csr(directory, "broker", "/CN=localhost")
        cert = _sign(directory, "broker", csr, self.ca_cert, self.ca_key, BROKER_EXTENSIONS, 30)
        keystore = directory / "broker-keystore.pem"
        keystore.write_text(key.read_text() + cert.read_text() + self.ca_cert.read_text())
        return keystore, certificate_serial(cert)

    def keep(self, cert: Path, key: Path, name: str) -> tuple[Path, Path]:
        """A copy of a pair as it is now (the old certificate, to show it is refused after a CA change)."""
        kept = (self.dir / f"{name}.crt", self.dir / f"{name}.key")
        shutil.copyfile(cert, kept[0])
        shutil.copyfile(key, kept[1])
        return kept


# --------------------------------------------------------------------------------------------- records
@dataclass
class Window:
    name: str
    start: float
    end: float | None = None
    detail: str = ""
    failed: str = ""


@dataclass
class Sample:
    t: float
    rss_mib: float
    fds: int
    threads: int
    tasks: float | None
    ready: bool
    can_serve: bool
    log_lines: int
    control_requests: float


@dataclass
class Acks2Send:
    partition: int
    sent: float
    answered: float
    ok: bool
    error: str = ""


@dataclass
class Findings:
    samples: list[Sample] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    #: (t, topic, partition, isr size) of the brokers' own view
    isr: dict[tuple[str, int], list[tuple[float, int]]] = field(default_factory=dict)
    acks2: list[Acks2Send] = field(default_factory=list)
    tag_checks: int = 0
    tag_wrong: list[str] = field(default_factory=list)
    tag_absent: int = 0
    tag_stale_in_outage: int = 0
    #: (t, records) the consumer group read
    consumed: list[tuple[float, int]] = field(default_factory=list)
    address_leaks: list[str] = field(default_factory=list)
    metadata_failures: int = 0
    #: kind -> (t, {bucket: count}) once a second from LatencyProducer
    latency: dict[str, list[tuple[float, dict[int, int]]]] = field(default_factory=lambda: {"direct": [], "proxy": []})
    latency_errors: Counter[str] = field(default_factory=Counter)
    latency_restarts: Counter[str] = field(default_factory=Counter)
    #: (partition, offset, value, t) librdkafka's acks=1 producer had acknowledged; acks=0 records sent
    acks1: list[tuple[int, int, int, float]] = field(default_factory=list)
    acks0_sent: int = 0
    acks01_errors: Counter[str] = field(default_factory=Counter)
    #: one record per certificate rotation or CA change: what was checked after it
    rotations: list[dict[str, Any]] = field(default_factory=list)
    slow: list[dict[str, Any]] = field(default_factory=list)
    share_received: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


# --------------------------------------------------------------------------------------------- the run
class YearRun:
    def __init__(self, minutes: float, work: Path, *, old_version: str = OLD_VERSION,
                 new_version: str = NEW_VERSION, rate: int = 100, latency_rate: float = 0.0) -> None:
        self.minutes = minutes
        self.seconds = minutes * 60
        self.work = work
        self.old_version, self.new_version = old_version, new_version
        self.rate = rate
        #: LatencyProducer's records a second (0: half its maximum, measured at the start) and that maximum
        self.latency_rate = latency_rate
        self.latency_max = 0.0
        self.found = Findings()
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()
        self.passwords = {PROXY_USER: secrets.token_urlsafe(12), CLIENT_USER: secrets.token_urlsafe(12)}
        self.sampler_password = secrets.token_urlsafe(12)
        #: topic -> [(t, min.insync.replicas)] as the runner set it
        self.min_insync: dict[str, list[tuple[float, int]]] = {}
        self.churn: list[str] = []
        self.churn_lock = threading.Lock()
        #: topic -> the min.insync.replicas being set now (asked of the brokers, not yet seen in effect): a tag may
        #: carry it before the runner sees the change take effect
        self.min_insync_pending: dict[str, int] = {}
        self.broker_locks = {n: threading.Lock() for n in (1, 2, 3)}
        self.processes: list[subprocess.Popen[Any]] = []
        self.proxy: subprocess.Popen[bytes] | None = None
        self.cluster: RelayedCluster | None = None
        self.relay: SilentRelay | None = None
        self.acked: list[tuple[int, int, int]] = []  # (partition, offset, value) VerifiableProducer acknowledged
        self.acked_at: list[float] = []  # when each of them was acknowledged
        #: (partition, offset, value) the Python partitioner's producer had acknowledged (acks=-2), and its refusals
        self.partitioner_acked: list[tuple[int, int, int]] = []
        self.partitioner_refused: Counter[str] = Counter()
        self.tls_lock = threading.Lock()
        #: bumped when the direct latency producer must start again with a new client certificate (a CA change)
        self.direct_generation = 0
        self.build = "unknown"
        self.producer_errors = 0
        self.upgraded = False
        self.mv_bump = ""
        #: (node id, start, end): a broker the proxy could not reach (killed, stopped, paused or silent)
        self.outages: list[tuple[int, float, float]] = []

    def now(self) -> float:
        return time.monotonic() - self.t0

    # ------------------------------------------------------------------ set-up
    def start_cluster(self) -> RelayedCluster:
        self.pki = RunCertificates(self.work / "pki")
        settings = ClusterSettings(
            version=self.old_version, sasl_scram_users=self.passwords,
            sasl_plain_users={SAMPLER_USER: self.sampler_password}, sasl_ssl=True,
            tls_keystore_pem=self.pki.broker_keystore, replica_lag_time_max_ms=int(REPLICA_LAG_SECONDS * 1000), class_archive=False,
            data_dir=self.work / "kafka",
            # The relay's connections and the storms' are idle between events: kept by the brokers.
            extra_broker_config={"connections.max.idle.ms": "3600000", "listener.name.sasl.ssl.client.auth": "required",
                                 "listener.name.sasl.ssl.truststore.type": "PEM", TRUSTSTORE: str(self.pki.broker_trust)},
        )
        cluster = RelayedCluster(settings, progress=say)
        cluster.relay_port = free_port()
        self.relay = SilentRelay(cluster.relay_port, cluster.sasl_ports[RELAYED_BROKER])
        self.cluster = cluster
        cluster.start()
        return cluster

    def upstream_servers(self) -> list[str]:
        assert self.cluster is not None
        return [f"127.0.0.1:{p}" for p in self.cluster.sasl_ports.values()]

    def proxy_toml(self, metadata_refresh: float = 2, summary_interval: float = 60) -> str:
        password_file = self.work / "proxy.password"
        password_file.write_text(self.passwords[PROXY_USER] + "\n")
        password_file.chmod(0o600)
        servers = json.dumps(self.upstream_servers())
        return (
            f"bootstrap_servers = {servers}\nadmin_port = {self.admin_port}\nproxy_id = \"year\"\n"
            f"metadata_refresh_seconds = {metadata_refresh}\nmin_insync_ttl_seconds = {MIN_INSYNC_TTL}\n"
            f"log_summary_interval_seconds = {summary_interval}\nlog_level = \"INFO\"\n"
            # Certificates are picked up by the runner's SIGHUP and POST /reload once both files of a pair are
            # written, not by the periodic check (which could meet a certificate before its key)
            f"tls_reload_seconds = 86400\nmax_buffered_bytes = {BUFFER_BUDGET_MIB * 1024 * 1024}\n"
            f"[[listener]]\nname = \"clients\"\nbootstrap_port = {self.bootstrap_port}\n"
            f"broker_port_base = {self.broker_port_base}\nnode_id_ranges = [\"0-9\"]\n"
            f"[upstream_tls]\nenabled = true\nca_file = \"{self.pki.upstream_ca}\"\n"
            f"cert_file = \"{self.pki.proxy_cert}\"\nkey_file = \"{self.pki.proxy_key}\"\n"
            f"[downstream_tls]\nenabled = true\ncert_file = \"{self.pki.server_cert}\"\n"
            f"key_file = \"{self.pki.server_key}\"\n"
            f"[control_sasl]\nmechanism = \"{MECHANISM}\"\nusername = \"{PROXY_USER}\"\n"
            f"password_file = \"{password_file}\"\n"
            f"[audit]\nenabled = false\n"
        )

    def start_proxy(self) -> None:
        assert self.cluster is not None
        self.admin_port, self.bootstrap_port = free_ports(2)
        self.broker_port_base = free_port_base(10)
        self.config_file = self.work / "proxy.toml"
        self.config_file.write_text(self.proxy_toml())
        self.proxy_log = self.work / "proxy.log"
        with open(self.proxy_log, "ab") as log:
            self.proxy = subprocess.Popen(
                [sys.executable, "-m", "insync_proxy", "run", "--config", str(self.config_file)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.wait(lambda: self.readyz()[0], 90, "the proxy to be ready")
        build = re.search(r'insync_proxy_build_info\{[^}]*compiled="(\w+)"', self.metrics_text())
        self.compiled = build.group(1) if build else "unknown"
        say(f"proxy pid {self.proxy.pid} at 127.0.0.1:{self.bootstrap_port} (TLS; compiled: {self.compiled})")

    # ------------------------------------------------------------------ client settings (TLS towards the proxy)
    def client_context(self) -> ssl.SSLContext:
        """What a Python client trusts towards the proxy: the downstream CAs' bundle."""
        return ssl.create_default_context(cafile=str(self.pki.client_trust))

    def kafka_python_security(self) -> dict[str, Any]:
        return {"security_protocol": "SASL_SSL", "ssl_cafile": str(self.pki.client_trust), "sasl_mechanism": MECHANISM,
                "sasl_plain_username": CLIENT_USER, "sasl_plain_password": self.passwords[CLIENT_USER]}

    def librdkafka_through_proxy(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.proxy_bootstrap, "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(self.pki.client_trust), "sasl.mechanism": MECHANISM,
                "sasl.username": CLIENT_USER, "sasl.password": self.passwords[CLIENT_USER]}

    def java_client_properties(self, name: str, base: str = "") -> Path:
        path = self.work / name
        path.write_text(base + "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.type=PEM\n"
                        f"ssl.truststore.location={self.pki.client_trust}\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                        f'required username="{CLIENT_USER}" password="{self.passwords[CLIENT_USER]}";\n')
        return path

    @property
    def proxy_bootstrap(self) -> str:
        return f"127.0.0.1:{self.bootstrap_port}"

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if condition():
                    return
            except Exception:  # noqa: BLE001 - a condition that fails is one not yet met
                pass
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")

    def readyz(self) -> tuple[bool, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=3) as r:
                return r.status == 200, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return False, e.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as e:
            return False, str(e)

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def java(self, libs: Path, main: str, *args: str) -> list[str]:
        return java_command(libs, main, list(args), self.work, heap="192m")

    def admin(self) -> Any:
        from kafka.admin import KafkaAdminClient

        assert self.cluster is not None
        return KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap_servers, request_timeout_ms=10000,
                                client_id="year-admin")

    def create_topic(self, name: str, min_insync: int, partitions: int = PARTITIONS) -> None:
        assert self.cluster is not None
        self.cluster.create_topic(name, partitions, 3, {"min.insync.replicas": str(min_insync)}, timeout=90)
        self.min_insync[name] = [(self.now(), min_insync)]

    # ------------------------------------------------------------------ producers
    def start_verifiable_producer(self) -> None:
        libs = kafka_libs(self.old_version)
        props = self.java_client_properties("producer.properties", _PRODUCER_CONFIG)
        stderr = open(self.work / "verifiable-producer.log", "ab")  # noqa: SIM115 - the child keeps it
        process = subprocess.Popen(
            self.java(libs, "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", self.proxy_bootstrap,
                      "--topic", IDEMPOTENT_TOPIC, "--max-messages", "-1", "--throughput", str(self.rate),
                      "--producer.config", str(props)),
            stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True, preexec_fn=_die_with_parent,
        )
        stderr.close()
        self.verifiable = process
        self.processes.append(process)
        assert process.stdout is not None
        self._verifiable_reader = threading.Thread(target=self._read_verifiable, args=(process.stdout,), daemon=True)
        self._verifiable_reader.start()

    def _read_verifiable(self, stream: IO[str]) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("name") == "producer_send_success":
                self.acked.append((int(event["partition"]), int(event["offset"]), int(event["value"])))
                self.acked_at.append(self.now())
            elif event.get("name") == "producer_send_error":
                self.producer_errors += 1

    def acks2_producer(self) -> None:
        """kafka-python with acks=-2 through the proxy, one record at a time, 20 a second."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.proxy_bootstrap, acks=-2, retries=0, request_timeout_ms=10000,
                                 client_id="year-acks2", **self.kafka_python_security())
        n = 0
        try:
            while not self.stop_event.is_set():
                partition = n % PARTITIONS
                sent = self.now()
                try:
                    producer.send(ACKS2_TOPIC, value=str(n).encode(), partition=partition).get(timeout=20)
                    ok, error = True, ""
                except Exception as exc:  # noqa: BLE001 - the error is the result
                    ok, error = False, type(exc).__name__
                with self.found.lock:
                    self.found.acks2.append(Acks2Send(partition, sent, self.now(), ok, error))
                n += 1
                self.stop_event.wait(0.05)
        finally:
            producer.close(timeout=10)

    def acks01_producer(self, acks: int) -> None:
        """librdkafka through the proxy with acks=1 or acks=0, 20 records a second: what acks=1 acknowledged is
        checked at its offset at the end, acks=0 records are counted in the log."""
        from confluent_kafka import Producer

        producer = Producer({**self.librdkafka_through_proxy(), "acks": str(acks), "linger.ms": 5,
                             "enable.idempotence": False, "message.timeout.ms": 60000, "client.id": f"year-acks{acks}",
                             "log_level": 2})
        found = self.found

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                with found.lock:
                    found.acks01_errors[f"acks={acks} {err.name()}"] += 1
            elif acks == 1:
                with found.lock:
                    found.acks1.append((msg.partition(), msg.offset(), int(msg.value()), self.now()))

        n = 0
        due = time.monotonic()
        while not self.stop_event.is_set():
            value = n if acks == 1 else ACKS0_BASE + n
            try:
                producer.produce(ACKS01_TOPIC, str(value).encode(), partition=n % PARTITIONS, on_delivery=delivered)
                if acks == 0:
                    found.acks0_sent += 1
                n += 1
            except BufferError:
                found.acks01_errors[f"acks={acks} queue full"] += 1
            # Paced: poll() returns as soon as it served a delivery report, so one poll(0.05) a record ran at
            # 95-160 records a second, not 20. A producer held back (a full queue) does not burst to catch up.
            due = max(due + 1 / ACKS01_RATE, time.monotonic() - 1.0)
            while (left := due - time.monotonic()) > 0 and not self.stop_event.is_set():
                producer.poll(left)
        producer.flush(60)

    def latency_client(self) -> Any:
        """LatencyProducer compiled against the old Kafka's clients (tests/java_client.JavaClient)."""
        if not hasattr(self, "_latency_client"):
            from tests.java_client import JavaClient

            self._latency_client = JavaClient(self.old_version, source=LATENCY_SOURCE)
        return self._latency_client

    def latency_properties(self, kind: str) -> Path:
        """Through the proxy: SASL_SSL trusting the proxy's CAs. Directly: SASL_SSL to the brokers, whose listener
        asks for a client certificate (a PEM keystore of the direct client's key and certificate of the moment)."""
        if kind == "proxy":
            return self.java_client_properties("latency-proxy.properties")
        keystore = self.work / "latency-direct-keystore.pem"
        keystore.write_bytes(self.pki.direct_key.read_bytes() + self.pki.direct_cert.read_bytes())
        path = self.work / "latency-direct.properties"
        path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                        f"ssl.truststore.type=PEM\nssl.truststore.location={self.pki.upstream_ca}\n"
                        f"ssl.keystore.type=PEM\nssl.keystore.location={keystore}\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                        f'required username="{CLIENT_USER}" password="{self.passwords[CLIENT_USER]}";\n')
        return path

    def latency_bootstrap(self, kind: str) -> str:
        return self.proxy_bootstrap if kind == "proxy" else ",".join(self.upstream_servers())

    def measure_latency_max(self, seconds: float) -> float:
        """The records a second LatencyProducer acknowledges one at a time, directly."""
        out = subprocess.run(
            self.latency_client().command(self.latency_bootstrap("direct"), LATENCY_TOPIC, "0", "0", str(seconds),
                                          str(self.latency_properties("direct"))),
            capture_output=True, text=True, timeout=seconds + 180, stdin=subprocess.DEVNULL)
        found = re.search(r"^MAX ([0-9.]+)", out.stdout, re.M)
        if out.returncode != 0 or not found:
            raise RuntimeError(f"LatencyProducer's maximum could not be measured: {out.stdout[-500:]}{out.stderr[-1500:]}")
        return float(found.group(1))

    def latency_producer(self, kind: str) -> None:
        """LatencyProducer through the proxy or directly at self.latency_rate, its histograms read every second.
        The direct one starts again with a new client certificate after a CA change; either starts again if it
        exits on its own (counted)."""
        log = open(self.work / f"latency-{kind}.log", "ab")  # noqa: SIM115 - closed below
        try:
            while not self.stop_event.is_set():
                generation = self.direct_generation
                process = subprocess.Popen(
                    self.latency_client().command(self.latency_bootstrap(kind), LATENCY_TOPIC, "0",
                                                  str(self.latency_rate), "0", str(self.latency_properties(kind))),
                    stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                    preexec_fn=_die_with_parent)
                self.processes.append(process)
                reader = threading.Thread(target=self._read_latency, args=(kind, process.stdout), daemon=True)
                reader.start()
                while (not self.stop_event.wait(0.5) and process.poll() is None
                       and (kind != "direct" or generation == self.direct_generation)):
                    pass
                if process.poll() is not None and not self.stop_event.is_set():
                    self.found.latency_restarts[kind] += 1
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)
                reader.join(10)
        finally:
            log.close()

    def _read_latency(self, kind: str, stream: IO[str]) -> None:
        out = self.found.latency[kind]
        for line in stream:
            parts = line.split()
            if len(parts) < 3 or parts[0] != "H":
                continue
            self.found.latency_errors[kind] += int(parts[2])
            counts = {int(b): int(c) for b, c in (p.split(":") for p in parts[3:])}
            if counts:
                out.append((self.now(), counts))

    # ------------------------------------------------------------------ samplers
    def monitor(self, interval: float) -> None:
        """RSS, fds, threads of the proxy; /metrics; /readyz and whether the proxy serves an ApiVersions."""
        assert self.proxy is not None
        pid = self.proxy.pid
        while not self.stop_event.wait(interval):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]
                threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
                fds = len(os.listdir(f"/proc/{pid}/fd"))
            except (OSError, AttributeError):
                self.found.errors.append(f"{self.now():.0f}s: the proxy process is gone")
                return
            ready, _ = self.readyz()
            can_serve = self.serves()
            tasks = control = None
            try:
                text = self.metrics_text()
                control = sum(float(v) for v in re.findall(r"^insync_proxy_control_requests_total\{[^}]*\} (\S+)$",
                                                             text, re.M))
                m = re.search(r"^insync_proxy_(?:asyncio_)?tasks\S* (\S+)$", text, re.M)
                tasks = float(m.group(1)) if m else None
            except (urllib.error.URLError, OSError, ValueError):
                pass
            with open(self.proxy_log, "rb") as f:
                lines = sum(1 for _ in f)
            self.found.samples.append(Sample(self.now(), rss, fds, threads, tasks, ready, can_serve, lines,
                                             control if control is not None else float("nan")))

    def serves(self) -> bool:
        """An ApiVersions through the proxy's bootstrap port is answered within its connect_timeout_seconds (10 s)
        and 5 s: a bootstrap connection may meet a frozen broker first and move on after that timeout."""
        try:
            with WireConnection("127.0.0.1", self.bootstrap_port, timeout=15, ssl_context=self.client_context()) as conn:
                return conn.api_versions() == 0
        except (OSError, WireError, ssl.SSLError):
            return False

    def isr_sampler(self, interval: float) -> None:
        """The brokers' own ISR of the acks=-2 topic, straight from the brokers (kafka-python, PLAINTEXT)."""
        admin = None
        while not self.stop_event.wait(interval):
            try:
                if admin is None:
                    admin = self.admin()
                for topic in admin.describe_topics([ACKS2_TOPIC]):
                    for p in topic["partitions"]:
                        if p.get("error_code", 0) == 0 and p["leader"] >= 0:
                            self.found.isr.setdefault((ACKS2_TOPIC, p["partition"]), []).append(
                                (self.now(), len(p["isr"])))
            except Exception:  # noqa: BLE001 - a broker down: the next round asks again
                if admin is not None:
                    try:
                        admin.close()
                    except Exception:  # noqa: BLE001
                        pass
                admin = None

    def metadata_sampler(self, interval: float) -> None:
        """Metadata v12 through the proxy (hand-written client, SASL PLAIN): tag 637 of every topic the runner
        made against the value it set, and no broker address of the real cluster in the answer."""
        assert self.cluster is not None
        real_ports = {n.port for n in self.cluster.brokers.values()} | set(self.cluster.sasl_ports.values()) \
            | set(self.cluster.tls_ports.values()) | {self.cluster.relay_port, self.cluster.controller.port}
        context = self.client_context()
        while not self.stop_event.wait(interval):
            with self.churn_lock:
                topics = [IDEMPOTENT_TOPIC, ACKS2_TOPIC, *self.churn]
            asked = self.now()
            try:
                with WireConnection("127.0.0.1", self.bootstrap_port, timeout=10, ssl_context=context) as conn:
                    conn.sasl_plain(SAMPLER_USER, self.sampler_password)
                    answer = conn.metadata(topics)
            except (OSError, WireError):
                self.found.metadata_failures += 1
                continue
            self.check_metadata(answer, asked, real_ports)

    def brokers_out(self, start: float, end: float) -> int:
        """The most brokers out of the proxy's reach at one moment of [start, end] (outages that ended so far)."""
        spans = [(max(a, start), min(b, end)) for _, a, b in list(self.outages) if a <= end and b >= start]
        return max((sum(1 for a, b in spans if a <= t <= b) for t, _ in spans), default=0)

    def check_metadata(self, answer: MetadataAnswer, asked: float, real_ports: set[int]) -> None:
        for node_id, (host, port) in answer.brokers.items():
            if port in real_ports:
                self.found.address_leaks.append(f"{asked:.0f}s: broker {node_id} at {host}:{port}")
        for name, topic in answer.topics.items():
            history = self.min_insync.get(name)
            if topic.error_code != 0 or not history:
                continue
            self.found.tag_checks += 1
            if topic.min_insync is None:
                self.found.tag_absent += 1
                continue
            allowed = allowed_values(history, asked, 2 * MIN_INSYNC_TTL + 5)
            if name in self.min_insync_pending:
                allowed.add(self.min_insync_pending[name])
            if topic.min_insync not in allowed and self.brokers_out(asked - (2 * MIN_INSYNC_TTL + 5), asked) >= 2:
                # Two brokers out of the proxy's reach: the value it serves may be stale while it cannot re-read
                # (min_insync_max_stale_seconds); counted apart, not a violation.
                self.found.tag_stale_in_outage += 1
            elif topic.min_insync not in allowed:
                self.found.tag_wrong.append(f"{asked:.0f}s {name}: tag 637 = {topic.min_insync}, set {sorted(allowed)}")

    # ------------------------------------------------------------------ events
    def event(self, name: str, action: Callable[[Window], None]) -> None:
        window = Window(name, self.now())
        with self.found.lock:
            self.found.windows.append(window)
        say(f"event {name} begins")
        try:
            action(window)
        except Exception as exc:  # noqa: BLE001 - an event that failed is a finding, the run goes on
            window.failed = f"{type(exc).__name__}: {exc}"
            self.found.errors.append(f"{window.start:.0f}s {name}: {window.failed}")
            traceback.print_exc()
        window.end = self.now()
        say(f"event {name} ends ({window.end - window.start:.0f}s){' FAILED: ' + window.failed if window.failed else ''}")

    def wait_full_isr(self, topics: tuple[str, ...] = (IDEMPOTENT_TOPIC, ACKS2_TOPIC), timeout: float = 120) -> None:
        assert self.cluster is not None
        for topic in topics:
            for partition in range(PARTITIONS):
                self.cluster.wait_for_isr(topic, partition, 3, timeout)

    def kill_and_restart(self, window: Window, node_id: int = 1) -> None:
        assert self.cluster is not None
        with self.broker_locks[node_id]:
            down = self.now()
            self.cluster.kill_broker(node_id)
            window.detail = f"broker {node_id}"
            self.stop_event.wait(10)
            self.cluster.start_broker(node_id)
            self.outages.append((node_id, down, self.now()))
        self.wait_full_isr()

    def pause(self, window: Window, node_id: int = 2) -> None:
        assert self.cluster is not None
        with self.broker_locks[node_id]:
            down = self.now()
            self.cluster.pause_broker(node_id)
            window.detail = f"broker {node_id} 30 s"
            try:
                time.sleep(30)
            finally:
                self.cluster.resume_broker(node_id)
                self.outages.append((node_id, down, self.now()))

    def rolling_restart(self, window: Window) -> None:
        assert self.cluster is not None
        for node_id in sorted(self.cluster.brokers):
            self.restart_broker(node_id)
            self.wait_full_isr()
        window.detail = "SIGTERM each broker"

    def restart_broker(self, node_id: int) -> None:
        """SIGTERM (a controlled shutdown) and start again, on the cluster's jars of the moment."""
        assert self.cluster is not None
        with self.broker_locks[node_id]:
            down = self.now()
            self.cluster.stop_broker(node_id)
            self.cluster.start_broker(node_id)
            self.outages.append((node_id, down, self.now()))

    def rolling_upgrade(self, window: Window) -> None:
        """Every node restarted on the new version's jars, same data and config, ISRs full between nodes; then
        the metadata.version bump with the new version's FeatureCommand."""
        cluster = self.cluster
        assert cluster is not None
        if cluster.version == self.new_version:
            window.detail = "already upgraded"
            return
        cluster.libs = kafka_libs(self.new_version)
        cluster.version = self.new_version
        cluster._class_archive = None
        for node_id in sorted(cluster.brokers):
            self.restart_broker(node_id)
            self.wait_full_isr()
        controller = cluster.controller
        cluster._signal(controller, signal.SIGTERM)
        cluster._reap([controller], 60)
        cluster._launch(controller)
        self.wait(lambda: len(cluster.metadata([]).brokers) == 3, 120, "the brokers after the controller's upgrade")
        self.wait_full_isr()
        self.upgraded = True
        self.mv_bump = self.bump_metadata_version()
        window.detail = f"{self.old_version} -> {self.new_version}; {self.mv_bump}"

    def bump_metadata_version(self) -> str:
        assert self.cluster is not None
        libs = kafka_libs(self.new_version)
        main = "org.apache.kafka.tools.FeatureCommand"
        server = self.cluster.bootstrap_servers.split(",")[0]
        upgrade = subprocess.run(self.java(libs, main, "--bootstrap-server", server, "upgrade", "--release-version",
                                           NEW_RELEASE), capture_output=True, text=True, timeout=120,
                                 preexec_fn=_die_with_parent)
        described = subprocess.run(self.java(libs, main, "--bootstrap-server", server, "describe"),
                                   capture_output=True, text=True, timeout=120, preexec_fn=_die_with_parent)
        found = re.search(r"Feature: metadata\.version\s+SupportedMinVersion: \S+\s+SupportedMaxVersion: \S+\s+"
                          r"FinalizedVersionLevel: (\S+)", described.stdout)
        level = found.group(1) if found else "?"
        if upgrade.returncode != 0 or not level.startswith(NEW_RELEASE):
            raise RuntimeError(f"metadata.version bump: exit {upgrade.returncode}, now {level}: "
                               f"{(upgrade.stdout + upgrade.stderr).strip()[-400:]}")
        return f"metadata.version {level}"

    def silent_network(self, window: Window) -> None:
        assert self.relay is not None
        down = self.now()
        self.relay.silence(True)
        window.detail = f"broker {RELAYED_BROKER}'s SASL_SSL listener silent 60 s"
        try:
            time.sleep(60)
        finally:
            self.relay.silence(False)
            self.outages.append((RELAYED_BROKER, down, self.now()))

    def reload(self, window: Window, how: str) -> None:
        assert self.proxy is not None
        before = self.reload_failures()
        lines_before = self.reload_lines()
        refresh = 3 if how == "SIGHUP" else 2
        self.config_file.write_text(self.proxy_toml(metadata_refresh=refresh,
                                                    summary_interval=30 if how == "SIGHUP" else 60))
        if how == "SIGHUP":
            self.proxy.send_signal(signal.SIGHUP)
            window.detail = f"SIGHUP, metadata_refresh_seconds -> {refresh}"
        else:
            request = urllib.request.Request(f"http://127.0.0.1:{self.admin_port}/reload", method="POST")
            with urllib.request.urlopen(request, timeout=30) as r:
                answer = json.loads(r.read())
            window.detail = f"POST /reload: {answer.get('result')} {answer.get('changed')}"
            if answer.get("result") != "ok":
                raise RuntimeError(f"POST /reload answered {answer}")
        self.wait(lambda: self.reload_lines() > lines_before, 30, "the reload's log line")
        if self.reload_failures() > before:
            raise RuntimeError("a reload failed (insync_proxy_reloads_total{result=\"failed\"} went up)")

    def reload_lines(self) -> int:
        return len(re.findall(r"\breload\b", self.proxy_log.read_text(errors="replace")))

    def reload_failures(self) -> float:
        return sum(float(v) for v in re.findall(r'^insync_proxy_reloads_total\{[^}]*result="failed"[^}]*\} (\S+)$',
                                                 self.metrics_text(), re.M))

    def hostile_and_storm(self, window: Window) -> None:
        result = asyncio.run(send_malformed("127.0.0.1", self.bootstrap_port, frames=60, connections=12, wait=30))
        opened = failed = 0
        sockets: list[socket.socket] = []
        for _ in range(300):
            try:
                s = socket.create_connection(("127.0.0.1", self.bootstrap_port), timeout=5)
                sockets.append(s)
                opened += 1
            except OSError:
                failed += 1
        for s in sockets:
            s.close()
        window.detail = f"{sum(result.sent.values())} malformed frames; storm {opened} opened, {failed} refused"

    def topic_churn(self, period: float) -> None:
        """A topic created every `period` seconds, the previous one's min.insync.replicas moved up or down, the
        oldest deleted once four exist (directly at the brokers, behind the proxy's back)."""
        admin = None
        n = 0
        while not self.stop_event.wait(period):
            n += 1
            name = f"{CHURN_PREFIX}{n}"
            try:
                if admin is None:
                    admin = self.admin()
                self.create_topic(name, 2, partitions=1)
                with self.churn_lock:
                    self.churn.append(name)
                    previous = self.churn[-2] if len(self.churn) > 1 else None
                    oldest = self.churn.pop(0) if len(self.churn) > 4 else None
                if previous is not None:
                    value = 3 if self.min_insync[previous][-1][1] != 3 else 1
                    from kafka.admin import ConfigResource, ConfigResourceType

                    self.min_insync_pending[previous] = value
                    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, previous,
                                                        configs={"min.insync.replicas": str(value)})])
                    # Recorded when the brokers say so: an AlterConfigs sent to a paused broker takes effect
                    # when it resumes, long after the call.
                    self.min_insync[previous].append((self.effective_min_insync(admin, previous, value), value))
                    self.min_insync_pending.pop(previous, None)
                if oldest is not None:
                    admin.delete_topics([oldest])
            except Exception as exc:  # noqa: BLE001 - counted; the next round goes on
                self.found.errors.append(f"{self.now():.0f}s topic churn: {type(exc).__name__}: {exc}")
                if admin is not None:
                    try:
                        admin.close()
                    except Exception:  # noqa: BLE001
                        pass
                admin = None

    def effective_min_insync(self, admin: Any, topic: str, value: int, timeout: float = 90) -> float:
        """When the brokers' DescribeConfigs first shows `value` for the topic (polled; the time given up at)."""
        from kafka.admin import ConfigResource, ConfigResourceType

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stop_event.is_set():
            try:
                found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                               configs={"min.insync.replicas": None})])
                entry = found.get("topic", {}).get(topic, {}).get("min.insync.replicas", {})
                if str(entry.get("value")) == str(value):
                    return self.now()
            except Exception:  # noqa: BLE001 - a broker down: ask again
                pass
            time.sleep(0.3)
        self.found.errors.append(f"{self.now():.0f}s: min.insync.replicas={value} of {topic} not seen in {timeout:.0f}s")
        return self.now()

    def group_member(self, name: str, until: threading.Event) -> None:
        """A member of the consumer group year-group (kafka-python through the proxy) on the idempotent topic,
        until `until` is set: what it reads is counted by time."""
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            IDEMPOTENT_TOPIC, bootstrap_servers=self.proxy_bootstrap, group_id="year-group", client_id=name,
            auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=3000,
            request_timeout_ms=30000, **self.kafka_python_security(),
        )
        try:
            while not until.is_set() and not self.stop_event.is_set():
                try:
                    records = sum(len(r) for r in consumer.poll(timeout_ms=500).values())
                except Exception:  # noqa: BLE001 - a rebalance or a broker away: the next poll goes on
                    records = 0
                if records:
                    with self.found.lock:
                        self.found.consumed.append((self.now(), records))
        finally:
            consumer.close()

    def rebalance(self, window: Window) -> None:
        """A third member joins the group for 20 s, then leaves: two rebalances."""
        leave = threading.Event()
        member = threading.Thread(target=self.group_member, args=("year-member-3", leave), daemon=True)
        member.start()
        time.sleep(20)
        leave.set()
        member.join(60)
        window.detail = "a third member joined for 20 s and left"

    # ------------------------------------------------------------------ certificates, both legs
    def alter_brokers(self, configs: dict[str, str], timeout: float = 180) -> None:
        """A per-broker dynamic config on every broker (IncrementalAlterConfigs, sent by librdkafka to that broker,
        which checks a new keystore or truststore before taking it); a broker down meanwhile is asked again."""
        from confluent_kafka.admin import (
            AdminClient,
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        assert self.cluster is not None
        bootstrap = self.cluster.bootstrap_servers

        def alter(node_id: int) -> None:
            resource = ConfigResource(ResourceType.BROKER, str(node_id), incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
            deadline = time.monotonic() + timeout
            while True:
                try:
                    # A new client each try: one whose broker was paused or restarted can wait on a dead connection
                    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2, "socket.timeout.ms": 10000})
                    admin.incremental_alter_configs([resource], request_timeout=10)[resource].result(timeout=15)
                    return
                except Exception as exc:  # noqa: BLE001 - a broker restarting: again until the deadline
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"broker {node_id} did not take {configs}: {exc}") from exc
                    time.sleep(1)

        with ThreadPoolExecutor(max_workers=len(self.cluster.brokers)) as pool:  # a broker down delays only itself
            for done in [pool.submit(alter, node_id) for node_id in sorted(self.cluster.brokers)]:
                done.result()

    def wait_brokers(self, what: str, check: Callable[[int], bool], timeout: float = 180) -> None:
        """Until `check(port)` holds for every broker's SASL_SSL listener (their real ports, not the relay)."""
        assert self.cluster is not None
        ports = list(self.cluster.sasl_ports.values())
        with ThreadPoolExecutor(max_workers=len(ports)) as pool:
            for done in [pool.submit(self.wait, lambda p=port: check(p), timeout, f"{what} at 127.0.0.1:{port}")
                         for port in ports]:
                done.result()

    def reload_proxy(self, how: str, sides: tuple[str, ...] = ("upstream_tls", "downstream_tls")) -> None:
        """SIGHUP or POST /reload; returns when the TLS `sides` whose files changed reloaded
        (insync_proxy_reloads_total{result="ok"} went up)."""
        assert self.proxy is not None
        before = {side: self.reload_count(side, "ok") for side in sides}
        if how == "SIGHUP":
            self.proxy.send_signal(signal.SIGHUP)
        else:
            request = urllib.request.Request(f"http://127.0.0.1:{self.admin_port}/reload", method="POST")
            with urllib.request.urlopen(request, timeout=30) as r:
                r.read()
        for side, count in before.items():
            self.wait(lambda s=side, c=count: self.reload_count(s, "ok") > c, 30, f"the proxy to reload {side}")

    def reload_count(self, what: str, result: str) -> float:
        return self.metric("insync_proxy_reloads_total", what=what, result=result)

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` in /metrics whose labels include `labels` (0 when none)."""
        total = 0.0
        for line in self.metrics_text().splitlines():
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$", line)
            if not m or m.group(1) != name:
                continue
            found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(m.group(4))
        return total

    def check_after_rotation(self, window: Window, kind: str, client_serial: int, server_serial: int,
                             refused: tuple[Path, Path] | None = None) -> None:
        """What must hold after a rotation: /readyz true and the idempotent producer acknowledging again within
        ROTATION_BOUND_SECONDS, a new client connection served the new server certificate, a new producer
        acknowledged through the proxy (its new upstream connections carry the new client certificate: after a
        CA change no other gets in), the proxy's log naming the new client certificate's serial; after a CA change,
        the old client certificate refused by every broker."""
        done = self.now()
        record: dict[str, Any] = {"kind": kind, "at": round(done, 1), "client_serial": f"{client_serial:x}",
                                  "server_serial": f"{server_serial:x}"}
        acked = len(self.acked)
        deadline = time.monotonic() + ROTATION_BOUND_SECONDS
        ready_at = progress_at = None
        while time.monotonic() < deadline and (ready_at is None or progress_at is None):
            if ready_at is None and self.readyz()[0]:
                ready_at = self.now() - done
            if progress_at is None and len(self.acked) > acked:
                progress_at = self.now() - done
            time.sleep(0.2)
        record["ready_after_s"] = None if ready_at is None else round(ready_at, 1)
        record["producer_progress_after_s"] = None if progress_at is None else round(progress_at, 1)
        try:
            record["server_serial_seen"] = tls_probe(self.bootstrap_port, self.pki.client_trust) == server_serial
        except (OSError, ssl.SSLError) as exc:
            record["server_serial_seen"] = False
            record["server_error"] = str(exc)
        from confluent_kafka import Producer

        fresh = Producer({**self.librdkafka_through_proxy(), "acks": "all", "client.id": f"year-after-{kind}",
                          "message.timeout.ms": 60000, "log_level": 2})
        fresh.produce(LATENCY_TOPIC, f"after {kind}".encode(), partition=0)
        record["new_client_acknowledged"] = fresh.flush(60) == 0
        record["proxy_logged_new_client_serial"] = f"serial {client_serial:x}" in self.proxy_log.read_text(errors="replace")
        if refused is not None:
            assert self.cluster is not None
            kept_out = 0
            for port in self.cluster.sasl_ports.values():
                try:
                    tls_probe(port, self.pki.upstream_ca, refused)
                except (ssl.SSLError, ConnectionError):
                    kept_out += 1
            record["old_client_refused_by_brokers"] = f"{kept_out}/{len(self.cluster.sasl_ports)}"
        ok = (ready_at is not None and progress_at is not None and record["server_serial_seen"]
              and record["new_client_acknowledged"] and record["proxy_logged_new_client_serial"]
              and (refused is None or kept_out == len(self.cluster.sasl_ports)))
        record["ok"] = bool(ok)
        with self.found.lock:
            self.found.rotations.append(record)
        window.detail += f"; ready after {record['ready_after_s']} s, producer on after {record['producer_progress_after_s']} s"
        if not ok:
            raise RuntimeError(f"after the {kind}: {record}")

    def rotate_certificates(self, window: Window) -> None:
        """Same CAs, new certificates on both legs: the brokers' (dynamic keystore), the proxy's client certificate
        towards them and its server certificate towards the clients; the proxy picks its files up on SIGHUP."""
        assert self.cluster is not None
        pki = self.pki
        with self.tls_lock:
            keystore, broker_serial = pki.new_broker_keystore(f"rotation-{len(self.found.rotations) + 1}")
            self.alter_brokers({KEYSTORE: str(keystore)})
            self.wait_brokers("the new broker certificate",
                              lambda port: tls_probe(port, pki.upstream_ca, (pki.proxy_cert, pki.proxy_key)) == broker_serial)
            client_serial = pki.issue_client(pki.proxy_cert, pki.proxy_key, PROXY_USER)
            server_serial = pki.issue_server()
            self.reload_proxy("SIGHUP")
            window.detail = (f"brokers' certificate {broker_serial:x}, proxy client {client_serial:x}, "
                             f"proxy server {server_serial:x} (SIGHUP)")
            self.check_after_rotation(window, "rotation", client_serial, server_serial)

    def change_ca(self, window: Window) -> None:
        """Upstream: a new CA for the brokers and the proxy (the brokers trust both, then every certificate moves to
        the new CA, then the brokers trust only the new one); downstream: the proxy's server certificate moves to
        its other CA. The proxy picks everything up on POST /reload."""
        assert self.cluster is not None
        pki = self.pki
        with self.tls_lock:
            pki.generation += 1
            g = pki.generation
            # A CA of its own name (a real CA change brings one): no certificate can be taken for the other CA's
            ca = Ca.new(f"insync-proxy year CA {g}", 366 * 86400)
            new_ca = (pki.dir / f"ca-{g}.crt", pki.dir / f"ca-{g}.key")
            new_ca[0].write_bytes(ca.pem)
            new_ca[1].write_bytes(key_pem(ca.key))
            old_client = pki.keep(pki.proxy_cert, pki.proxy_key, f"proxy-client-before-ca-{g}")
            staged = (pki.dir / f"proxy-client-ca-{g}.crt", pki.dir / f"proxy-client-ca-{g}.key")
            pki.issue_client(*staged, PROXY_USER, ca=new_ca)
            # 1. the brokers and the proxy trust both CAs
            both = pki.bundle(f"broker-trust-{g}-both.pem", pki.ca_cert, new_ca[0])
            self.alter_brokers({TRUSTSTORE: str(both)})
            replace_file(pki.upstream_ca, both.read_bytes())
            self.wait_brokers("the brokers to trust the new CA", lambda port: tls_probe(port, both, staged) > 0)
            self.reload_proxy("POST", ("upstream_tls",))
            # 2. every certificate from the new CA: the brokers', the proxy's client one, the proxy's server one
            pki.ca_cert, pki.ca_key = new_ca
            pki.broker_keystore, broker_serial = pki.new_broker_keystore(f"ca-{g}-brokers")
            self.alter_brokers({KEYSTORE: str(pki.broker_keystore)})
            self.wait_brokers("the new CA's broker certificate", lambda port: tls_probe(port, both, staged) == broker_serial)
            replace_file(pki.proxy_cert, staged[0].read_bytes())
            replace_file(pki.proxy_key, staged[1].read_bytes())
            client_serial = certificate_serial(staged[0])
            pki.downstream_index = (pki.downstream_index + 1) % len(pki.downstream)
            server_serial = pki.issue_server()
            self.reload_proxy("POST")
            pki.issue_client(pki.direct_cert, pki.direct_key, "year-direct")
            self.direct_generation += 1
            # 3. the brokers and the proxy trust only the new CA: the old client certificate is locked out
            only_new = pki.bundle(f"broker-trust-{g}.pem", new_ca[0])
            self.alter_brokers({TRUSTSTORE: str(only_new)})
            replace_file(pki.upstream_ca, only_new.read_bytes())

            def locked_out(port: int) -> bool:
                try:
                    tls_probe(port, only_new, old_client)
                except (ssl.SSLError, ConnectionError):
                    return tls_probe(port, only_new, staged) == broker_serial
                return False

            self.wait_brokers("the brokers to refuse the old CA's client certificate", locked_out)
            self.reload_proxy("POST", ("upstream_tls",))
            window.detail = (f"upstream CA {g - 1} -> {g} (brokers' certificate {broker_serial:x}, proxy client "
                             f"{client_serial:x}); downstream CA -> {pki.downstream_index + 1} (proxy server "
                             f"{server_serial:x}); POST /reload")
            self.check_after_rotation(window, "CA change", client_serial, server_serial, refused=old_client)

    # ------------------------------------------------------------------ slow consumers, the partitioner, share group
    def slow_consumers(self, window: Window, consumers: int = 3) -> None:
        """A few consumers through the proxy that Fetch 8 MiB of BULK_TOPIC at a time with a small receive buffer
        and read 16 KiB every 50 ms: the proxy's memory budget (max_buffered_bytes) must bound what it holds,
        and the other clients must go on."""
        seconds = 30.0 if self.minutes <= 10 else 60.0

        def leader_address() -> tuple[int, str, int]:
            with WireConnection("127.0.0.1", self.bootstrap_port, timeout=15, ssl_context=self.client_context()) as conn:
                conn.sasl_plain(SAMPLER_USER, self.sampler_password)
                answer = conn.metadata([BULK_TOPIC])
            leader = answer.topics[BULK_TOPIC].partitions[0][0]
            return (leader, *answer.brokers[leader])

        leaders: list[int] = []
        start = self.now()
        rss_before = self.found.samples[-1].rss_mib if self.found.samples else float("nan")
        acked_before = len(self.acked)
        until = time.monotonic() + seconds
        read = [0] * consumers
        errors: list[str] = []

        def consume(i: int) -> None:
            # Its leader's broker may be killed, paused or restarting meanwhile: connect again until the deadline
            while time.monotonic() < until and not self.stop_event.is_set():
                try:
                    leader, host, port = leader_address()
                    leaders.append(leader)
                    with WireConnection(host, port, timeout=60, ssl_context=self.client_context(),
                                        receive_buffer=8192) as slow:
                        slow.sasl_plain(SAMPLER_USER, self.sampler_password)
                        while time.monotonic() < until and not self.stop_event.is_set():
                            read[i] += slow.slow_fetch(BULK_TOPIC, 0, 0, 8 * 1024 * 1024, 16384, 0.1, until)
                except (OSError, WireError, ssl.SSLError, KeyError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(1)

        workers = [threading.Thread(target=consume, args=(i,), daemon=True) for i in range(consumers)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(seconds + 90)
        end = self.now()
        in_window = [s for s in self.found.samples if start <= s.t <= end]
        rss_peak = max((s.rss_mib for s in in_window), default=float("nan"))
        leader = "/".join(str(n) for n in sorted(set(leaders))) or "?"
        record = {"start": round(start, 1), "end": round(end, 1), "consumers": consumers, "leader": leader,
                  "bytes_read": sum(read), "rss_before_mib": round(rss_before, 1), "rss_peak_mib": round(rss_peak, 1),
                  "acked_by_others": len(self.acked) - acked_before,
                  "probes_failed": sum(1 for s in in_window if not s.can_serve), "probes": len(in_window),
                  "reconnects": len(errors), "errors": errors[:5]}
        with self.found.lock:
            self.found.slow.append(record)
        window.detail = (f"{consumers} consumers read {sum(read) / 2**20:.1f} MiB from broker {leader}'s port slowly; "
                         f"RSS {rss_before:.0f} -> peak {rss_peak:.0f} MiB")

    def partitioner_producer(self) -> None:
        """kafka-python with acks=-2 through the proxy, its partitions chosen by the project's KIP-637 partitioner
        (insync_proxy.client.partitioner: the proxy's Metadata over TLS, logged in), 10 records a second."""
        from kafka import KafkaProducer

        from insync_proxy.client.partitioner import MinInsyncMetadata
        from insync_proxy.proxy.config.settings import SaslConfig

        metadata = MinInsyncMetadata(self.proxy_bootstrap, max_age_seconds=2.0, ssl_context=self.client_context(),
                                     sasl=SaslConfig(mechanism=MECHANISM, username=CLIENT_USER,
                                                     password=self.passwords[CLIENT_USER]))
        producer = KafkaProducer(bootstrap_servers=self.proxy_bootstrap, acks=-2, retries=0, request_timeout_ms=10000,
                                 client_id="year-partitioner", partitioner=metadata.partitioner(PARTITIONER_TOPIC, -2),
                                 **self.kafka_python_security())
        n = 0
        try:
            while not self.stop_event.is_set():
                try:
                    sent = producer.send(PARTITIONER_TOPIC, value=str(n).encode()).get(timeout=20)
                    self.partitioner_acked.append((sent.partition, sent.offset, n))
                except Exception as exc:  # noqa: BLE001 - the error is the result
                    if not self.partitioner_refused:
                        say(f"the partitioner's producer: first refusal: {type(exc).__name__}: {exc}")
                    self.partitioner_refused[type(exc).__name__] += 1
                n += 1
                self.stop_event.wait(0.1)
        finally:
            producer.close(timeout=10)

    def share_group(self, window: Window) -> None:
        """Once the cluster runs 4.x with the new metadata.version: share groups on (share.version, FeatureCommand)
        and Kafka's console share consumer (KafkaShareConsumer) reading the idempotent topic through the proxy."""
        upgrade = lambda: [w for w in self.found.windows if w.name == "rolling upgrade"]  # noqa: E731
        self.wait(lambda: bool(upgrade()) and all(w.end is not None for w in upgrade()), 900,
                  "the rolling upgrade to finish")
        if not self.upgraded:
            raise RuntimeError("the cluster was not upgraded: no share group")
        assert self.cluster is not None
        libs = kafka_libs(self.new_version)
        main = "org.apache.kafka.tools.FeatureCommand"
        server = self.cluster.bootstrap_servers.split(",")[0]
        level = self.feature_level(libs, server, "share.version")
        if level in ("0", "?"):
            enable = subprocess.run(self.java(libs, main, "--bootstrap-server", server, "upgrade", "--feature",
                                              "share.version=1"), capture_output=True, text=True, timeout=120,
                                    preexec_fn=_die_with_parent)
            level = self.feature_level(libs, server, "share.version")
            if enable.returncode != 0 or level in ("0", "?"):
                raise RuntimeError(f"share.version=1: exit {enable.returncode}, now {level}: "
                                   f"{(enable.stdout + enable.stderr).strip()[-400:]}")
        props = self.java_client_properties("share-consumer.properties")
        wanted = 20
        consumer = subprocess.run(
            self.java(libs, "org.apache.kafka.tools.consumer.ConsoleShareConsumer", "--bootstrap-server",
                      self.proxy_bootstrap, "--topic", IDEMPOTENT_TOPIC, "--group", "year-share", "--command-config",
                      str(props), "--max-messages", str(wanted), "--timeout-ms", "60000"),
            capture_output=True, text=True, timeout=180, preexec_fn=_die_with_parent)
        received = sum(1 for line in consumer.stdout.splitlines() if line.strip().isdigit())
        with self.found.lock:
            self.found.share_received.append(received)
        window.detail = f"share.version {level}; KafkaShareConsumer through the proxy received {received}/{wanted}"
        if received == 0:
            (self.work / "share-consumer.log").write_text(consumer.stdout + consumer.stderr)
            raise RuntimeError(f"the share consumer received nothing (exit {consumer.returncode}): "
                               f"{consumer.stderr.strip()[-400:]}")

    def feature_level(self, libs: Path, server: str, feature: str) -> str:
        described = subprocess.run(self.java(libs, "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server",
                                             server, "describe"), capture_output=True, text=True, timeout=120,
                                   preexec_fn=_die_with_parent)
        found = re.search(rf"Feature: {re.escape(feature)}\s+SupportedMinVersion: \S+\s+SupportedMaxVersion: \S+\s+"
                          r"FinalizedVersionLevel: (\S+)", described.stdout)
        return found.group(1) if found else "?"

    # ------------------------------------------------------------------ the schedule
    def schedule(self) -> list[tuple[float, str, Callable[[Window], None]]]:
        """(seconds after start, name, action): each event's first time as a fraction of the run, repeated at its
        period in a long run; they overlap by design (e.g. the pause begins while the killed broker restarts)."""
        T = self.seconds
        kinds: list[tuple[float, float, str, Callable[[Window], None]]] = [
            (0.07, 480, "kill+restart", self.kill_and_restart),
            (0.12, 600, "pause 30s", self.pause),
            (0.10, 300, "SIGHUP reload", lambda w: self.reload(w, "SIGHUP")),
            (0.25, 360, "hostile+storm", self.hostile_and_storm),
            (0.30, 300, "POST /reload", lambda w: self.reload(w, "POST")),
            (0.28, 900, "silent network 60s", self.silent_network),
            (0.33, 1200, "rolling restart", self.rolling_restart),
            (0.45, 10 * T, "rolling upgrade", self.rolling_upgrade),
            (0.50, 420, "group rebalance", self.rebalance),
            (0.14, 600, "slow consumers", self.slow_consumers),
            (0.18, 600, "cert rotation", self.rotate_certificates),
            (0.40, 1200, "CA change", self.change_ca),
            # waits for the upgrade's end: share groups need Kafka 4.x and its metadata.version
            (0.46, 10 * T, "share group", self.share_group),
        ]
        out = []
        for first, period, name, action in kinds:
            at = first * T
            out.append((at, name, action))
            while at + period < 0.9 * T:
                at += period
                out.append((at, name, action))
        return sorted(out, key=lambda e: e[0])

    def run(self) -> dict[str, Any]:
        write_log_configuration(self.work)
        kafka_libs(self.new_version)  # both versions' jars in place before anything starts
        self.start_cluster()
        try:
            self.create_topic(IDEMPOTENT_TOPIC, 2)
            self.create_topic(ACKS2_TOPIC, 2)
            self.create_topic(PARTITIONER_TOPIC, 2)
            # Led by broker 1: the direct producer's path does not cross the relay in front of broker 3.
            assert self.cluster is not None
            self.cluster.create_topic(LATENCY_TOPIC, assignments={0: [1, 2, 3]},
                                      configs={"retention.bytes": str(256 * 2**20), "segment.bytes": str(32 * 2**20)})
            self.create_topic(ACKS01_TOPIC, 2)
            self.fill_bulk_topic()
            self.start_proxy()
            if not self.latency_rate:
                self.latency_max = self.measure_latency_max(5.0 if self.minutes <= 10 else 15.0)
                self.latency_rate = max(1.0, round(self.latency_max / 2))
            say(f"latency producers: {self.latency_rate:.0f} records/s each"
                + (f" (half of {self.latency_max:.0f}, one at a time directly)" if self.latency_max else ""))
            self.t0 = time.monotonic()
            self.start_verifiable_producer()
            interval = 2.0 if self.minutes > 10 else 1.0
            threads = [
                threading.Thread(target=self.monitor, args=(interval,), daemon=True),
                threading.Thread(target=self.isr_sampler, args=(0.5,), daemon=True),
                threading.Thread(target=self.metadata_sampler, args=(3.0,), daemon=True),
                threading.Thread(target=self.acks2_producer, daemon=True),
                threading.Thread(target=self.partitioner_producer, daemon=True),
                threading.Thread(target=self.latency_producer, args=("proxy",), daemon=True),
                threading.Thread(target=self.latency_producer, args=("direct",), daemon=True),
                threading.Thread(target=self.acks01_producer, args=(1,), daemon=True),
                threading.Thread(target=self.acks01_producer, args=(0,), daemon=True),
                threading.Thread(target=self.topic_churn, args=(max(6.0, self.seconds / 60),), daemon=True),
                threading.Thread(target=self.group_member, args=("year-member-1", self.stop_event), daemon=True),
                threading.Thread(target=self.group_member, args=("year-member-2", self.stop_event), daemon=True),
            ]
            for thread in threads:
                thread.start()
            events = []
            for at, name, action in self.schedule():
                delay = at - self.now()
                if delay > 0 and self.stop_event.wait(delay):
                    break
                thread = threading.Thread(target=self.event, args=(name, action), daemon=True)
                thread.start()
                events.append(thread)
            self.stop_event.wait(max(0.0, self.seconds - self.now()))
            for thread in events:
                thread.join(600)
            last_end = max((w.end or 0.0 for w in self.found.windows), default=0.0)
            try:  # the clients settle: the group reads again after the last event (its invariant says if not)
                self.wait(lambda: any(t > last_end for t, _ in list(self.found.consumed)), 120,
                          "the consumer group to read after the last event")
            except RuntimeError:
                pass
            self.stop_event.set()
            say("schedule done; stopping the producers")
            self.verifiable.send_signal(signal.SIGTERM)
            try:
                self.verifiable.wait(300)
            except subprocess.TimeoutExpired:
                self.verifiable.kill()
            self._verifiable_reader.join(30)
            for thread in threads:
                thread.join(60)
            self.wait_full_isr(timeout=180)
            oracle = self.read_back()
            return self.summary(oracle)
        finally:
            self.stop_event.set()
            self.shutdown()

    # ------------------------------------------------------------------ the oracle
    def read_back(self) -> dict[str, Any]:
        """Every partition of the idempotent topic read from offset 0 to its end, straight from the brokers
        (kafka-python, PLAINTEXT): each acknowledged (partition, offset) must hold its value, no value twice."""
        log = self.read_topic(IDEMPOTENT_TOPIC)
        values = Counter(log.values())
        missing = [(p, o, v) for p, o, v in self.acked if log.get((p, o)) != v]
        same_epoch, other_epoch = self.duplicates_by_epoch()
        partitioner_log = self.read_topic(PARTITIONER_TOPIC)
        partitioner_missing = [(p, o, v) for p, o, v in self.partitioner_acked if partitioner_log.get((p, o)) != v]
        acks01_log = self.read_topic(ACKS01_TOPIC)
        acks1_missing = [(p, o, v, t) for p, o, v, t in self.found.acks1 if acks01_log.get((p, o)) != v]
        # acks=1: a leader may lose what only it held when it dies or steps down (Kafka's contract): a record
        # acknowledged in an event window or shortly before one began (its followers had not fetched it yet)
        acks1_outside = [(p, o, v, round(t, 1)) for p, o, v, t in acks1_missing if not self.near_event(t)]
        return {"acknowledged": len(self.acked), "in_log": len(log), "missing_or_moved": len(missing),
                "missing_examples": missing[:5], "duplicates": sum(n - 1 for n in values.values() if n > 1),
                "duplicates_same_epoch": same_epoch, "duplicates_after_epoch_bump": other_epoch,
                "send_errors": self.producer_errors,
                "partitioner": {"acknowledged": len(self.partitioner_acked), "missing_or_moved": len(partitioner_missing),
                                "missing_examples": partitioner_missing[:5],
                                "refused": dict(self.partitioner_refused)},
                "acks1": {"acknowledged": len(self.found.acks1), "missing_or_moved": len(acks1_missing),
                          "missing_outside_events": len(acks1_outside), "missing_outside_examples": acks1_outside[:5],
                          "errors": dict(self.found.acks01_errors)},
                "acks0": {"sent": self.found.acks0_sent,
                          "in_log": sum(1 for v in acks01_log.values() if v >= ACKS0_BASE)}}

    def read_topic(self, topic: str) -> dict[tuple[int, int], int]:
        """(partition, offset) -> value of every record of a topic, read from offset 0 straight from the brokers."""
        from kafka import KafkaConsumer, TopicPartition

        assert self.cluster is not None
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

    def fill_bulk_topic(self, records: int = 100, size: int = 100 * 1024) -> None:
        """BULK_TOPIC: one partition of `records` records of `size` bytes (10 MiB), for the slow consumers."""
        from confluent_kafka import Producer

        assert self.cluster is not None
        self.cluster.create_topic(BULK_TOPIC, assignments={0: [1, 2, 3]})
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap_servers, "acks": "all", "log_level": 2})
        for _ in range(records):
            producer.produce(BULK_TOPIC, os.urandom(size), partition=0)
            producer.poll(0)
        if producer.flush(120) != 0:
            raise RuntimeError(f"{BULK_TOPIC}: not every record was acknowledged")

    def duplicates_by_epoch(self) -> tuple[list[str], list[str]]:
        """Values written twice, split by whether both copies carry the same producer id and epoch (what
        idempotence forbids) or not (the Java producer bumped its epoch and re-sent batches whose fate it could
        not tell): read with Kafka's own DumpLogSegments from broker 1's log files."""
        assert self.cluster is not None
        libs = kafka_libs(self.new_version)
        seen: dict[tuple[int, str], list[tuple[str, str, int]]] = {}
        for partition in range(PARTITIONS):
            directory = self.cluster.brokers[1].directory / "data" / f"{IDEMPOTENT_TOPIC}-{partition}"
            files = sorted(str(f) for f in directory.glob("*.log"))
            if not files:
                continue
            dump = subprocess.run(
                self.java(libs, "org.apache.kafka.tools.DumpLogSegments", "--files", ",".join(files),
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

    # ------------------------------------------------------------------ results
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
            min_insync = min(3, min(v for t, v in self.min_insync[ACKS2_TOPIC]))
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
        out: dict[str, Any] = {"rate_per_second": self.latency_rate, "max_per_second": self.latency_max,
                               "errors": dict(self.found.latency_errors),
                               "restarts": dict(self.found.latency_restarts)}
        for where in ("outside", "settling", "inside"):
            row: dict[str, float] = {}
            for kind in ("direct", "proxy"):
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

    def summary(self, oracle: dict[str, Any]) -> dict[str, Any]:
        f = self.found
        minutes = max(self.now() / 60, 1e-9)
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
            ("build the proxy ran", self.compiled == "true" or self.build.startswith("interpreted"),
             f"{self.build}; the proxy's insync_proxy_build_info says compiled={self.compiled}"),
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
             + f"Java producer, acks=all, {self.latency_rate:.0f} records/s each ("
             + (f"half of {self.latency_max:.0f} one at a time directly); " if self.latency_max else "--latency-rate); ")
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
        return {
            "minutes": self.minutes,
            "kafka": f"{self.old_version} -> {self.new_version if self.upgraded else self.old_version}",
            "metadata_version_bump": self.mv_bump,
            "compiled": getattr(self, "compiled", "unknown"),
            "build": self.build,
            "rotations": f.rotations,
            "slow_consumers": f.slow,
            "share_received": f.share_received,
            "invariants": [{"invariant": name, "ok": ok, "detail": detail} for name, ok, detail in rows],
            "ok": all(ok for name, ok, _ in rows if not name.startswith("added latency")),
            "oracle": oracle,
            "latency": latency,
            "trends": {"rss_mib_per_hour": rss_slope, "fds_per_hour": fd_slope, "tasks_or_threads_per_hour": th_slope},
            "rates_per_minute": {"log_lines": log_rate, "control_requests": control_rate},
            "events": [{"name": w.name, "start": round(w.start, 1), "end": round(w.end or 0, 1), "detail": w.detail,
                        "failed": w.failed} for w in f.windows],
            "errors": f.errors[:50],
            "acks2_violations": acks2[:20],
            "ready_but_not_serving_at": [round(t, 1) for t in ready_not_serving[:50]],
            "outages": [{"broker": n, "start": round(a, 1), "end": round(b, 1)} for n, a, b in self.outages],
            "tag_wrong": f.tag_wrong[:20],
            "address_leaks": f.address_leaks[:20],
        }

    def shutdown(self) -> None:
        for process in [*self.processes, self.proxy]:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(40)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)
        if self.cluster is not None:
            self.cluster.stop()
        if self.relay is not None:
            self.relay.stop()


# --------------------------------------------------------------------------------------------- output
def table(summary: dict[str, Any]) -> str:
    width = max(len(row["invariant"]) for row in summary["invariants"])
    lines = [f"{'invariant':<{width}}  result  detail", "-" * (width + 60)]
    for row in summary["invariants"]:
        mark = "PASS" if row["ok"] else "FAIL"
        lines.append(f"{row['invariant']:<{width}}  {mark:<6}  {row['detail']}")
    return "\n".join(lines)


def merge_histograms(histograms: Iterable[dict[int, int]]) -> Counter[int]:
    merged: Counter[int] = Counter()
    for counts in histograms:
        merged.update(counts)
    return merged


def histogram_percentile(counts: dict[int, int], q: float) -> float:
    """The q-quantile of LatencyProducer's buckets, in ms (a bucket's geometric middle), NaN when empty."""
    total = sum(counts.values())
    if not total:
        return float("nan")
    rank, seen = q * total, 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= rank:
            return float(LATENCY_BUCKET_BASE ** (bucket + 0.5) / 1000)
    return float(LATENCY_BUCKET_BASE ** (max(counts) + 0.5) / 1000)


def timeline_svg(run: YearRun, summary: dict[str, Any]) -> str:
    """RSS, fds, latency (proxy and direct, 10 s p99) and the event windows on one time axis, as SVG."""
    w, h, left, top = 1000, 560, 70, 30
    total = max(run.now(), 1.0)
    samples = run.found.samples

    def x(t: float) -> float:
        return left + (w - left - 20) * t / total

    panels = [("RSS MiB", [(s.t, s.rss_mib) for s in samples], "#1f77b4"),
              ("open fds", [(s.t, float(s.fds)) for s in samples], "#2ca02c")]
    latency: dict[str, list[tuple[float, float]]] = {}
    for kind in ("direct", "proxy"):
        buckets: dict[int, list[dict[int, int]]] = {}
        for t, counts in run.found.latency[kind]:
            buckets.setdefault(int(t // 10), []).append(counts)
        latency[kind] = [(b * 10 + 5, histogram_percentile(merge_histograms(v), 0.99)) for b, v in sorted(buckets.items())]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">insync-proxy, a year in an hour: {summary["minutes"]} min, '
           f'Kafka {summary["kafka"]}</text>']
    panel_h = 120
    rows = [*panels, ("p99 latency ms (proxy red, direct grey)", latency["proxy"], "#d62728")]
    for i, (label, points, colour) in enumerate(rows):
        y0 = top + i * (panel_h + 20)
        values = [v for _, v in points] + ([v for _, v in latency["direct"]] if i == 2 else [])
        hi = max(values, default=1.0) or 1.0
        out.append(f'<rect x="{left}" y="{y0}" width="{w - left - 20}" height="{panel_h}" fill="none" stroke="#cccccc"/>')
        out.append(f'<text x="4" y="{y0 + 12}">{label}</text><text x="4" y="{y0 + 26}">max {hi:.1f}</text>')

        def poly(pts: list[tuple[float, float]], col: str, top_value: float = hi, base: int = y0) -> str:
            coords = " ".join(f"{x(t):.1f},{base + panel_h - panel_h * v / top_value:.1f}" for t, v in pts)
            return f'<polyline fill="none" stroke="{col}" stroke-width="1.2" points="{coords}"/>'

        out.append(poly(points, colour))
        if i == 2:
            out.append(poly(latency["direct"], "#888888"))
    y_events = top + 3 * (panel_h + 20)
    names = sorted({wdw.name for wdw in run.found.windows})
    for wdw in run.found.windows:
        row = names.index(wdw.name)
        y = y_events + row * 14
        colour = "#d62728" if wdw.failed else "#ff7f0e"
        end = wdw.end if wdw.end is not None else total
        out.append(f'<rect x="{x(wdw.start):.1f}" y="{y}" width="{max(2.0, x(end) - x(wdw.start)):.1f}" height="10" '
                   f'fill="{colour}" opacity="0.7"/>')
    for row, name in enumerate(names):
        out.append(f'<text x="4" y="{y_events + row * 14 + 9}">{name}</text>')
    for minute in range(0, int(total // 60) + 1, max(1, int(total // 600))):
        out.append(f'<text x="{x(minute * 60):.1f}" y="{h - 4}">{minute}m</text>')
    out.append("</svg>")
    return "\n".join(out)


def _colour(text: str) -> tuple[int, int, int] | None:
    if text in ("white",):
        return (255, 255, 255)
    if text.startswith("#") and len(text) == 7:
        return (int(text[1:3], 16), int(text[3:5], 16), int(text[5:7], 16))
    return None


def svg_to_png(svg: str, path: Path) -> None:
    """A PNG of the timeline SVG, drawn by hand (no ImageMagick, no matplotlib): its rectangles and polylines,
    not its text (the SVG has the labels)."""
    size = re.search(r'<svg[^>]* width="(\d+)" height="(\d+)"', svg)
    assert size is not None
    w, h = int(size.group(1)), int(size.group(2))
    pixels = bytearray(b"\xff" * (w * h * 3))

    def put(x: int, y: int, rgb: tuple[int, int, int]) -> None:
        if 0 <= x < w and 0 <= y < h:
            i = (y * w + x) * 3
            pixels[i:i + 3] = bytes(rgb)

    def line(x0: float, y0: float, x1: float, y1: float, rgb: tuple[int, int, int]) -> None:
        steps = int(max(abs(x1 - x0), abs(y1 - y0), 1))
        for k in range(steps + 1):
            put(round(x0 + (x1 - x0) * k / steps), round(y0 + (y1 - y0) * k / steps), rgb)

    for element in re.finditer(r"<(rect|polyline)([^>]*)/>", svg):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', element.group(2)))
        if element.group(1) == "rect":
            x, y = float(attrs.get("x", 0)), float(attrs.get("y", 0))
            rw, rh = float(attrs["width"]), float(attrs["height"])
            fill, stroke = _colour(attrs.get("fill", "")), _colour(attrs.get("stroke", ""))
            if fill is not None:
                for yy in range(int(y), int(y + rh)):
                    for xx in range(int(x), int(x + rw)):
                        put(xx, yy, fill)
            if stroke is not None:
                for a, b, c, d in ((x, y, x + rw, y), (x, y + rh, x + rw, y + rh), (x, y, x, y + rh),
                                   (x + rw, y, x + rw, y + rh)):
                    line(a, b, c, d, stroke)
        else:
            rgb = _colour(attrs.get("stroke", "")) or (0, 0, 0)
            points = [tuple(map(float, p.split(","))) for p in attrs.get("points", "").split()]
            for (a, b), (c, d) in zip(points, points[1:], strict=False):
                line(a, b, c, d, rgb)
    raw = b"".join(b"\x00" + bytes(pixels[y * w * 3:(y + 1) * w * 3]) for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def write_outputs(run: YearRun, summary: dict[str, Any], out: Path, json_file: Path | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    svg, png = out / "timeline.svg", out / "timeline.png"
    text = timeline_svg(run, summary)
    svg.write_text(text)
    svg_to_png(text, png)
    summary["timeline_svg"], summary["timeline_png"] = str(svg), str(png)
    text = json.dumps(summary, indent=2, default=str)
    (out / "summary.json").write_text(text)
    if json_file is not None:
        json_file.write_text(text)


def choose_build(interpreted: bool) -> str:
    """The build the proxy will run: the compiled one (made now with ./scripts/compile when missing or stale), or,
    with --interpreted, the interpreted one. SystemExit(2) when it cannot be had."""
    found, stale = compiled_extensions()
    if interpreted:
        if found:
            raise SystemExit(f"--interpreted, but {len(found)} compiled modules are in place and Python would import "
                             "them: ./scripts/compile --clean first")
        return "interpreted (--interpreted)"
    if not found or stale:
        say(f"no compiled build ({len(found)} modules, {len(stale)} stale): ./scripts/compile")
        made = subprocess.run([str(ROOT / "scripts" / "compile")], cwd=ROOT, capture_output=True, text=True)
        found, stale = compiled_extensions()
        if made.returncode != 0 or not found or stale:
            raise SystemExit(f"the compiled build could not be made ({made.stdout[-800:]}{made.stderr[-800:]}); "
                             "run ./scripts/compile, or give --interpreted to run the interpreted build")
    return f"compiled (mypyc, {len(found)} modules)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=int, default=100, help="VerifiableProducer records a second (100)")
    parser.add_argument("--latency-rate", type=float, default=0.0,
                        help="records a second of each Java latency producer (default: half its maximum one record "
                             "at a time, measured directly at the start)")
    parser.add_argument("--out", type=Path, help="where the summary, timeline and logs go (a new temporary directory)")
    parser.add_argument("--json", type=Path, help="also write the summary JSON here")
    parser.add_argument("--interpreted", action="store_true",
                        help="run the interpreted build (default: the compiled one, made first when missing)")
    args = parser.parse_args(argv)
    build = choose_build(args.interpreted)
    work = args.out or Path(tempfile.mkdtemp(prefix="insync-year-"))
    work.mkdir(parents=True, exist_ok=True)
    say(f"a year in {args.minutes:g} minutes; working in {work}")
    run = YearRun(args.minutes, work, rate=args.rate, latency_rate=args.latency_rate)
    run.build = build
    summary = run.run()
    write_outputs(run, summary, work, args.json)
    print(table(summary))
    print(f"summary: {work / 'summary.json'}; timeline: {summary['timeline_png']} (labels in {summary['timeline_svg']})")
    return 0 if summary["ok"] else 1

