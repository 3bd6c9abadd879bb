"""A real Apache Kafka cluster on loopback: one KRaft controller and N brokers as local JVM processes.

The controller is a separate process so that pausing or killing brokers never costs the quorum:
ISR changes keep being committed while two of three brokers are down. Kafka 2.x runs in ZooKeeper
mode instead: a single-node ZooKeeper (from the jars Kafka 2.8 depends on) takes the controller's
place, started the same way (loopback only, dies with this process).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from insync_proxy.devcluster.class_archive import ClassArchive
from insync_proxy.devcluster.distribution import (
    cache_dir,
    java_executable,
    kafka_libs,
    kafka_major,
    selected_version,
    uses_zookeeper,
)
from insync_proxy.devcluster.probe import (
    ClusterInfo,
    ProbeConnection,
    ProbeError,
    metadata_from_any,
)
from insync_proxy.protocol.records import encode_record_batch

#: Every JVM of a dev cluster carries this system property, so leftovers can always be found.
JVM_MARKER = "-Dinsync.proxy.devcluster="
CONTROLLER_NODE_ID = 0
READY_TOPIC = "__insync_proxy_ready"

NOT_CONTROLLER = 41
RETRIABLE_ERRORS = {3, 5, 6, 7, 15, 19, 20}  # unknown topic, no leader, not leader, timeout, coord, ISR


#: How many times `LocalKafkaCluster.start` tries, with new ports each time, when a port it drew was taken before its
#: JVM bound it.
PORT_RACE_ATTEMPTS = 3


class ClusterError(RuntimeError):
    """The cluster did not start or did not reach the asked state; the message says why."""


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: all held open at once, so none is handed out twice."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the kernel SIGKILLs the JVM if this Python process dies, even by SIGKILL.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)


@dataclass
class KafkaNode:
    """One JVM: the controller (node 0; ZooKeeper for Kafka 2.x) or a broker."""

    node_id: int
    role: str  # "controller" | "zookeeper" | "broker"
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    #: The class archive this JVM writes when it exits (see class_archive.py), until it is settled.
    archive_candidate: Path | None = None

    @property
    def config_file(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.directory / "logs" / "server.log"

    @property
    def stdout_file(self) -> Path:
        return self.directory / "logs" / "stdout.log"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for path in (self.stdout_file, self.log_file):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(out)


def broker_heap_for(partitions: int, replication_factor: int = 3, brokers: int = 3) -> str:
    """A broker -Xmx for a cluster of `partitions` partitions: 384 MB plus ~100 KB per replica a broker holds
    (3,000 topics x 2 partitions x RF 3 on 3 brokers: 6,000 replicas a broker, 1 GB)."""
    replicas_per_broker = -(-partitions * replication_factor // max(brokers, 1))
    return f"{384 + (replicas_per_broker * 100 + 1023) // 1024}m"


@dataclass(frozen=True)
class OAuthBearerValidation:
    """What the brokers check of an OAUTHBEARER token: signed by a key at `jwks_url`, from `issuer`, for
    `audience`, not expired (Kafka's OAuthBearerValidatorCallbackHandler)."""

    jwks_url: str
    issuer: str
    audience: str

    def allowed_urls_option(self) -> str:
        """Kafka 4 refuses every OAuth URL the JVM does not allow (org.apache.kafka.sasl.oauthbearer.allowed.urls)."""
        return f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.jwks_url}"


@dataclass(frozen=True)
class KerberosListener:
    """A SASL_PLAINTEXT listener offering GSSAPI on every broker, each broker with its own service principal
    `kafka/<host>@<realm>` (its key in `keytabs[node_id]`), advertised as `host_template` with {node_id}
    filled in (names that must resolve to 127.0.0.1: devcluster.kerberos.ensure_hosts)."""

    krb5_conf: Path
    realm: str
    keytabs: dict[int, Path]
    host_template: str = "kafka-{node_id}.insync.test"

    def host(self, node_id: int) -> str:
        return self.host_template.replace("{node_id}", str(node_id))


@dataclass
class ClusterSettings:
    """What a cluster looks like; the defaults fit 2 cores and a few hundred MB per JVM."""

    version: str | None = None
    brokers: int = 3
    #: The brokers' node ids (default 1..brokers); the KRaft controller takes 0, or the lowest id none uses.
    node_ids: list[int] | None = None
    broker_ports: list[int] | None = None
    controller_port: int | None = None
    data_dir: Path | None = None
    #: -Xmx of each broker: 384m holds a few hundred partitions; a cluster of thousands of topics needs more
    #: (`broker_heap_for`, `insync-proxy dev-cluster up --broker-heap`): with 384m, 3,000 topics x 2
    #: partitions x RF 3 end in OutOfMemoryError.
    broker_heap: str = "384m"
    controller_heap: str = "256m"
    replica_lag_time_max_ms: int = 5000
    min_insync_replicas: int | None = None  # broker default; None keeps Kafka's default (1)
    extra_broker_config: dict[str, str] = field(default_factory=dict)
    die_with_parent: bool = True
    #: Start the JVMs from a class archive of the version's jars, made by the first broker that exits
    #: (devcluster/class_archive.py): a cluster starts on about 40 % less CPU, in about half the time.
    class_archive: bool = True
    #: user -> password: each broker gets a second, SASL_PLAINTEXT listener (PLAIN) for these users;
    #: inter-broker traffic and the readiness probe stay on PLAINTEXT.
    sasl_plain_users: dict[str, str] | None = None
    #: user -> password: the SASL_PLAINTEXT listener also (or only) offers SCRAM-SHA-512 for these users,
    #: whose credentials are created before the brokers start (KRaft: at format time, Kafka 3.5+;
    #: ZooKeeper: written to ZooKeeper by Kafka's ConfigCommand).
    sasl_scram_users: dict[str, str] | None = None
    #: PEM file with the brokers' private key and certificate chain: each broker gets an SSL listener.
    tls_keystore_pem: Path | None = None
    #: PEM certificates the SSL listeners trust for client certificates (mTLS required when set).
    tls_client_ca_pem: Path | None = None
    #: The SASL listener speaks SASL_SSL (TLS with tls_keystore_pem, no client certificate asked) instead of
    #: SASL_PLAINTEXT. Needs tls_keystore_pem and SASL users.
    sasl_ssl: bool = False
    #: OAUTHBEARER on the SASL listener (beside or instead of PLAIN/SCRAM): tokens validated by Kafka's own
    #: validator (KIP-768) against this identity provider's JWKS, issuer and audience.
    oauthbearer: OAuthBearerValidation | None = None
    #: connections.max.reauth.ms of the SASL listener (KIP-368): a session not renewed within it ends.
    sasl_reauth_ms: int | None = None
    #: GSSAPI listeners (a KERBEROS listener on every broker, under a name per broker).
    kerberos: KerberosListener | None = None
    #: More JVM options for every node (system properties such as Kafka 4's allowed OAuth URLs).
    extra_jvm_options: tuple[str, ...] = ()
    #: ACLs on: StandardAuthorizer (KRaft; AclAuthorizer in ZooKeeper mode), nothing allowed without an ACL.
    #: Super users: User:ANONYMOUS (the PLAINTEXT and CONTROLLER listeners: brokers, controller, the dev
    #: cluster's own probe) and `super_users` (principal names, e.g. "admin" or "CN=admin").
    acls: bool = False
    super_users: tuple[str, ...] = ()


class LocalKafkaCluster:
    """Starts, controls and stops a cluster of Apache Kafka JVMs on 127.0.0.1 (KRaft; ZooKeeper for 2.x)."""

    def __init__(self, settings: ClusterSettings | None = None, progress: Callable[[str], None] | None = None):
        self.settings = settings or ClusterSettings()
        self.version = selected_version(self.settings.version)
        self._progress = progress
        self._say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.cluster_id = _random_cluster_id()
        # Every port this cluster needs, drawn at once: ports drawn one by one may repeat.
        n = self.settings.brokers
        pool = free_ports(n * 4 + 1)
        ports = self.settings.broker_ports or pool[:n]
        if len(ports) != self.settings.brokers:
            raise ClusterError(f"{self.settings.brokers} brokers need as many ports, got {ports}")
        self.zookeeper_mode = uses_zookeeper(self.version)
        node_ids = broker_node_ids(self.settings)
        # Made once the settings are known good: a refused cluster leaves no directory behind.
        self._owns_data_dir = self.settings.data_dir is None
        self.data_dir = self.settings.data_dir or Path(tempfile.mkdtemp(prefix="insync-kafka-"))
        self.controller = KafkaNode(
            controller_node_id(node_ids), "zookeeper" if self.zookeeper_mode else "controller",
            self.settings.controller_port or pool[3 * n],
            self.data_dir / ("zookeeper" if self.zookeeper_mode else "controller"),
        )
        self.brokers: dict[int, KafkaNode] = {
            node_id: KafkaNode(node_id, "broker", port, self.data_dir / f"broker-{node_id}")
            for node_id, port in zip(node_ids, ports, strict=True)
        }
        self.libs: Path | None = None
        self._class_archive: ClassArchive | None = None
        self.sasl_ports: dict[int, int] = (
            {node_id: pool[n + i] for i, node_id in enumerate(self.brokers)}
            if self.settings.sasl_plain_users or self.settings.sasl_scram_users or self.settings.oauthbearer
            else {}
        )
        self.tls_ports: dict[int, int] = (
            {node_id: pool[2 * n + i] for i, node_id in enumerate(self.brokers)}
            if self.settings.tls_keystore_pem
            else {}
        )
        self.kerberos_ports: dict[int, int] = (
            {node_id: pool[3 * n + 1 + i] for i, node_id in enumerate(self.brokers)} if self.settings.kerberos else {})

    # ----------------------------------------------------------------- lifecycle
    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.brokers.values())

    @property
    def tls_bootstrap_servers(self) -> str:
        """The brokers' SSL listeners, when tls_keystore_pem is set."""
        return ",".join(f"127.0.0.1:{port}" for port in self.tls_ports.values())

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The brokers' SASL listeners (SASL_PLAINTEXT, or SASL_SSL with sasl_ssl), when SASL users are set."""
        return ",".join(f"127.0.0.1:{port}" for port in self.sasl_ports.values())

    @property
    def kerberos_bootstrap_servers(self) -> str:
        """The brokers' GSSAPI listeners, by the names their principals use."""
        kerberos = self.settings.kerberos
        assert kerberos is not None
        return ",".join(f"{kerberos.host(node_id)}:{port}" for node_id, port in self.kerberos_ports.items())

    @property
    def security_protocols(self) -> dict[str, str]:
        """Each client listener's security protocol in Kafka's terms, by listener name (PLAINTEXT, SASL, SSL)."""
        protocols = {"PLAINTEXT": "PLAINTEXT"}
        if self.sasl_ports:
            protocols["SASL"] = "SASL_SSL" if self.settings.sasl_ssl else "SASL_PLAINTEXT"
        if self.tls_ports:
            protocols["SSL"] = "SSL"
        return protocols

    @property
    def broker_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", n.port) for n in self.brokers.values()]

    def nodes(self) -> list[KafkaNode]:
        return [self.controller, *self.brokers.values()]

    def start(self, timeout: float = 180.0) -> LocalKafkaCluster:
        """Fetch jars if needed, format storage, start every JVM, and wait until ready.

        A port drawn for the cluster can be taken by another process before its JVM binds it (any outgoing
        connection on this machine may get a port of the ephemeral range): the cluster then starts over with new
        ports, up to PORT_RACE_ATTEMPTS times, unless the settings fixed its ports."""
        started = time.monotonic()
        # No progress callback: the jar download draws one updating line on a terminal.
        self.libs = kafka_libs(self.version, self._progress)
        if self.settings.class_archive:
            self._class_archive = ClassArchive.for_kafka(java_executable(), self.libs, cache_dir() / "class-archives")
        for attempt in range(1, PORT_RACE_ATTEMPTS + 1):
            try:
                self._start_nodes(max(1.0, timeout - (time.monotonic() - started)))
                break
            except ClusterError:
                taken = self._ports_taken()
                if attempt == PORT_RACE_ATTEMPTS or not taken or self.settings.broker_ports \
                        or self.settings.controller_port:
                    raise
                self._say(f"port(s) {', '.join(map(str, taken))} of the cluster were taken by another process before "
                          f"its JVMs bound them: starting over with new ports (attempt {attempt + 1})")
                self._start_over(attempt)
        self._say(
            f"Kafka {self.version}{' (ZooKeeper)' if self.zookeeper_mode else ''}: {len(self.brokers)} brokers "
            f"ready at {self.bootstrap_servers} "
            f"in {time.monotonic() - started:.1f}s (data: {self.data_dir})"
        )
        return self

    def _start_nodes(self, timeout: float) -> None:
        started = time.monotonic()
        for node in self.nodes():
            (node.directory / "logs").mkdir(parents=True, exist_ok=True)
            (node.directory / "data").mkdir(parents=True, exist_ok=True)
            node.config_file.write_text(self._properties(node))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2)
        (self.data_dir / "log4j.properties").write_text(_LOG4J1)
        if not self.zookeeper_mode:
            self._format_storage()
        try:
            self._launch(self.controller)
            if self.zookeeper_mode:
                self._wait_for_zookeeper(max(1.0, timeout - (time.monotonic() - started)))
                self._add_scram_users_to_zookeeper()
            for broker in self.brokers.values():
                self._launch(broker)
            self.wait_until_ready(timeout - (time.monotonic() - started))
        except BaseException:
            self.stop()
            raise

    def _ports_taken(self) -> list[int]:
        """The ports a JVM of the last start could not bind because another process held them."""
        taken: list[int] = []
        for node in self.nodes():
            text = ""
            for path in (node.stdout_file, node.log_file):
                try:
                    text += path.read_text(errors="replace")
                except OSError:
                    pass
            if "Address already in use" not in text:
                continue
            found = [int(p) for p in re.findall(r"bind to [0-9.]+:(\d+): Address already in use", text)]
            taken.extend(found or [node.port])
        return sorted(set(taken))

    def _start_over(self, attempt: int) -> None:
        """New ports for every node, fresh storage; the failed start's logs are kept beside (logs.attempt-N)."""
        for node in self.nodes():
            logs = node.directory / "logs"
            if logs.exists():
                shutil.rmtree(node.directory / f"logs.attempt-{attempt}", ignore_errors=True)
                logs.rename(node.directory / f"logs.attempt-{attempt}")
            shutil.rmtree(node.directory / "data", ignore_errors=True)
        n = self.settings.brokers
        pool = free_ports(n * 4 + 1)
        for i, (node_id, node) in enumerate(self.brokers.items()):
            node.port = pool[i]
            if node_id in self.sasl_ports:
                self.sasl_ports[node_id] = pool[n + i]
            if node_id in self.tls_ports:
                self.tls_ports[node_id] = pool[2 * n + i]
            if node_id in self.kerberos_ports:
                self.kerberos_ports[node_id] = pool[3 * n + 1 + i]
        self.controller.port = pool[3 * n]

    def stop(self, graceful_timeout: float = 15.0) -> None:
        """Stop every JVM (brokers first, then the controller); never leaves a process behind."""
        for node in [*self.brokers.values(), self.controller]:
            if node.paused and node.alive():
                self._signal(node, signal.SIGCONT)
                node.paused = False
        brokers = [n for n in self.brokers.values() if n.alive()]
        for node in brokers:
            self._signal(node, signal.SIGTERM)
        self._reap(brokers, graceful_timeout)
        if self.controller.alive():
            self._signal(self.controller, signal.SIGTERM)
            self._reap([self.controller], graceful_timeout)

    def cleanup(self) -> None:
        """Remove the data directory if this cluster created it."""
        if self._owns_data_dir and self.data_dir.exists():
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalKafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()

    # ----------------------------------------------------------------- broker controls
    def stop_broker(self, node_id: int, timeout: float = 60.0) -> None:
        """SIGTERM: a controlled shutdown; waits for the process to exit."""
        node = self.brokers[node_id]
        if node.paused:
            self.resume_broker(node_id)
        self._signal(node, signal.SIGTERM)
        self._reap([node], timeout)

    def kill_broker(self, node_id: int) -> None:
        """SIGKILL: the broker dies without a word."""
        node = self.brokers[node_id]
        self._signal(node, signal.SIGKILL)
        self._reap([node], 10.0)
        node.paused = False

    def pause_broker(self, node_id: int) -> None:
        """SIGSTOP: the broker freezes with its sockets open, as in a long GC pause or a hung host."""
        node = self.brokers[node_id]
        self._signal(node, signal.SIGSTOP)
        node.paused = True
        # SIGSTOP takes effect as each thread is next scheduled: return once the whole JVM is stopped.
        self.wait_for(lambda: _all_threads_stopped(node), 10.0, f"broker {node_id} to stop (SIGSTOP)", nodes=[])

    def resume_broker(self, node_id: int) -> None:
        """SIGCONT after pause_broker."""
        node = self.brokers[node_id]
        self._signal(node, signal.SIGCONT)
        node.paused = False

    def start_broker(self, node_id: int, timeout: float = 120.0) -> None:
        """Start a stopped or killed broker again and wait until it is registered."""
        node = self.brokers[node_id]
        if node.alive():
            raise ClusterError(f"broker {node_id} is already running")
        self._launch(node)
        self.wait_for(
            lambda: node_id in self.metadata([]).brokers,
            timeout,
            f"broker {node_id} to register again",
            nodes=[node],
        )

    # ----------------------------------------------------------------- observation
    def live_addresses(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", n.port) for n in self.brokers.values() if n.alive() and not n.paused]

    def metadata(self, topics: list[str] | None = None) -> ClusterInfo:
        return metadata_from_any(self.live_addresses() or self.broker_addresses, topics)

    def wait_for(
        self,
        condition: Callable[[], bool],
        timeout: float,
        what: str,
        nodes: list[KafkaNode] | None = None,
        interval: float = 0.2,
    ) -> None:
        """Poll `condition` until true; fail with `what` (and dead JVMs' logs) after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            for node in nodes if nodes is not None else self.nodes():
                if node.process is not None and not node.alive():
                    raise ClusterError(
                        f"{node.role} {node.node_id} exited with {node.process.returncode} while waiting "
                        f"for {what}\n{node.log_tail()}"
                    )
            try:
                if condition():
                    return
            except (OSError, ProbeError, KeyError) as exc:
                last_error = exc
            time.sleep(interval)
        raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error})")

    def wait_for_isr(self, topic: str, partition: int, size: int, timeout: float = 90.0) -> list[int]:
        """Wait until every live broker sees the partition's ISR with exactly `size` replicas; returns it."""
        seen: list[int] = []

        def check() -> bool:
            nonlocal seen
            for address in self.live_addresses() or self.broker_addresses:
                seen = metadata_from_any([address], [topic]).topics[topic].partitions[partition].isr
                if len(seen) != size:
                    return False
            return True

        self.wait_for(check, timeout, f"ISR of {topic}-{partition} to reach size {size} (now {seen})", nodes=[])
        return seen

    def wait_for_leader(self, topic: str, partition: int, timeout: float = 90.0) -> int:
        """Wait until the partition has a live leader; returns its node id."""
        leader = -1

        def check() -> bool:
            nonlocal leader
            p = self.metadata([topic]).topics[topic].partitions[partition]
            leader = p.leader
            node = self.brokers.get(leader)
            return p.error_code == 0 and node is not None and node.alive() and not node.paused

        self.wait_for(check, timeout, f"a live leader for {topic}-{partition}", nodes=[])
        return leader

    def leader_of(self, topic: str, partition: int) -> int:
        return self.metadata([topic]).topics[topic].partitions[partition].leader

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        configs: Mapping[str, str] | None = None,
        assignments: dict[int, list[int]] | None = None,
        timeout: float = 60.0,
    ) -> None:
        """Create a topic and wait until every partition has a leader and a full ISR."""
        codes: list[int] = []

        def created() -> bool:
            # KRaft: any live broker will do (it forwards to the controller); one that registered a moment
            # ago may not accept connections yet. ZooKeeper mode: only the controller broker creates topics.
            addresses = self.live_addresses() or self.broker_addresses
            if self.zookeeper_mode:
                controller = self.brokers.get(self.metadata([]).controller_id)
                if controller is None:
                    return False
                addresses = [("127.0.0.1", controller.port)]
            for host, port in addresses:
                try:
                    with ProbeConnection(host, port, timeout=30) as conn:
                        code = conn.create_topic(name, partitions, replication_factor, dict(configs or {}), assignments)
                except OSError:
                    continue
                if code == NOT_CONTROLLER:
                    return False  # the controller moved: ask again
                codes.append(code)
                return True
            return False

        self.wait_for(created, timeout, f"a broker to accept CreateTopics {name}", nodes=[])
        code = codes[-1]
        if code not in (0, 36):
            raise ClusterError(f"CreateTopics {name} failed with error code {code}")
        count = len(assignments) if assignments else partitions
        rf = len(next(iter(assignments.values()))) if assignments else replication_factor
        self.wait_for_topic(name, count, rf, timeout)

    def wait_for_topic(self, name: str, partitions: int, replication_factor: int, timeout: float = 60.0) -> None:
        """Wait until every live broker knows the topic, each partition with a leader and a full ISR.

        A topic created through a client (CreateTopics answered by the controller) is not yet known to
        every broker: until then a broker answers UNKNOWN_TOPIC_OR_PARTITION for it.
        """

        def ready() -> bool:
            for address in self.live_addresses() or self.broker_addresses:
                info = metadata_from_any([address], [name]).topics.get(name)
                if info is None or info.error_code != 0 or len(info.partitions) != partitions:
                    return False
                if not all(p.leader >= 0 and len(p.isr) == replication_factor for p in info.partitions.values()):
                    return False
            return True

        self.wait_for(ready, timeout, f"topic {name} to have leaders and full ISRs on every broker", nodes=[])

    def wait_until_ready(self, timeout: float = 180.0) -> None:
        """Ready: every broker registered, and a replication-factor-3 topic accepts acks=all."""
        deadline = time.monotonic() + timeout
        expected = set(self.brokers)
        self.wait_for(
            lambda: set(self.metadata([]).brokers) >= expected,
            max(1.0, deadline - time.monotonic()),
            f"brokers {sorted(expected)} to register",
        )
        rf = min(3, len(self.brokers))
        self.create_topic(READY_TOPIC, 1, rf, timeout=max(1.0, deadline - time.monotonic()))
        batch = encode_record_batch([b"ready"])

        def produced() -> bool:
            leader = self.metadata([READY_TOPIC]).topics[READY_TOPIC].partitions[0].leader
            node = self.brokers[leader]
            with ProbeConnection("127.0.0.1", node.port, timeout=15) as conn:
                code = conn.produce(READY_TOPIC, 0, batch, acks=-1)
            if code != 0 and code not in RETRIABLE_ERRORS:
                raise ClusterError(f"acks=all produce to {READY_TOPIC} failed with error {code}")
            return code == 0

        self.wait_for(produced, max(1.0, deadline - time.monotonic()), "an acks=all produce to succeed")

    # ----------------------------------------------------------------- detached state (dev-cluster up/down)
    def state(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "cluster_id": self.cluster_id,
            "bootstrap_servers": self.bootstrap_servers,
            "data_dir": str(self.data_dir),
            "nodes": [
                {
                    "node_id": n.node_id,
                    "role": n.role,
                    "port": n.port,
                    "pid": n.process.pid if n.process else None,
                    "log": str(n.log_file),
                }
                for n in self.nodes()
            ],
        }

    # ----------------------------------------------------------------- internals
    def _java_command(self, node: KafkaNode, main: str, *args: str, archive: list[str] | None = None) -> list[str]:
        """The JVM's command line; ``archive``: class archive options (default: map the archive if there is one)."""
        assert self.libs is not None
        if archive is None:
            archive = self._class_archive.use_options() if self._class_archive is not None else []
        heap = self.settings.controller_heap if node.role == "controller" else self.settings.broker_heap
        logging = (
            [f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}"]
            if kafka_major(self.version) >= 4
            else [f"-Dlog4j.configuration=file:{self.data_dir / 'log4j.properties'}"]
        )
        return [
            java_executable(),
            f"-Xmx{heap}",
            "-Xms64m",
            "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            *([self.settings.oauthbearer.allowed_urls_option()] if self.settings.oauthbearer else []),
            *([f"-Djava.security.krb5.conf={self.settings.kerberos.krb5_conf}"] if self.settings.kerberos else []),
            *self.settings.extra_jvm_options,
            *archive,
            f"{JVM_MARKER}{self.cluster_id}",
            f"-Dkafka.logs.dir={node.directory / 'logs'}",
            *logging,
            "-cp",
            f"{self.libs}/*",
            main,
            *args,
        ]

    def _format_storage(self) -> None:
        scram = [
            arg
            for user, password in (self.settings.sasl_scram_users or {}).items()
            for arg in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]")
        ]
        if scram and kafka_major(self.version) == 3 and int(self.version.split(".")[1]) < 5:
            raise ClusterError(f"SCRAM users need Kafka 3.5+ in KRaft mode (format --add-scram); got {self.version}")
        procs = []
        for node in self.nodes():
            cmd = self._java_command(
                node, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(node.config_file),
                "--ignore-formatted", *scram,
            )
            out = open(node.directory / "logs" / "format.log", "wb")  # noqa: SIM115 - closed below
            procs.append((node, out, subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
            )))
        failures = []
        for node, out, proc in procs:
            code = proc.wait(timeout=120)
            out.close()
            if code != 0:
                failures.append(f"{node.role} {node.node_id}: exit {code}\n" + (
                    node.directory / "logs" / "format.log").read_text(errors="replace")[-2000:])
        if failures:
            raise ClusterError("formatting KRaft storage failed:\n" + "\n".join(failures))

    def _wait_for_zookeeper(self, timeout: float) -> None:
        """Brokers give up on ZooKeeper after zookeeper.connection.timeout.ms: start them once it listens."""

        def listening() -> bool:
            with socket.create_connection(("127.0.0.1", self.controller.port), timeout=2):
                return True

        self.wait_for(listening, timeout, f"ZooKeeper to listen on 127.0.0.1:{self.controller.port}",
                      nodes=[self.controller])

    def _add_scram_users_to_zookeeper(self) -> None:
        """SCRAM credentials in ZooKeeper mode live in ZooKeeper: written before any broker starts."""
        for user, password in (self.settings.sasl_scram_users or {}).items():
            out = self.controller.directory / "logs" / "scram.log"
            with open(out, "ab") as log_out:
                code = subprocess.run(
                    self._java_command(
                        self.controller, "kafka.admin.ConfigCommand", "--zookeeper",
                        f"127.0.0.1:{self.controller.port}", "--alter", "--add-config",
                        f"SCRAM-SHA-512=[iterations=4096,password={password}]",
                        "--entity-type", "users", "--entity-name", user,
                    ),
                    stdout=log_out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent, timeout=120,
                ).returncode
            if code != 0:
                raise ClusterError(f"creating SCRAM user {user} failed (exit {code}):\n"
                                   + out.read_text(errors="replace")[-2000:])

    def _launch(self, node: KafkaNode) -> None:
        self._settle_class_archive(node)
        archive = None
        if (self._class_archive is not None and not self._class_archive.ready() and node.role == "broker"
                and self.settings.die_with_parent and not any(n.archive_candidate for n in self.nodes())):
            # No archive yet: this broker writes one when it exits (one JVM per cluster is enough). Not in a
            # detached cluster (`dev-cluster up`): `down`, another process, ends it with SIGKILL, which writes none.
            archive, node.archive_candidate = self._class_archive.dump_options()
        out = open(node.stdout_file, "ab")  # noqa: SIM115 - the child keeps it
        main = "org.apache.zookeeper.server.ZooKeeperServerMain" if node.role == "zookeeper" else "kafka.Kafka"
        node.process = subprocess.Popen(
            self._java_command(node, main, str(node.config_file), archive=archive),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches us, and we stop the JVMs in order
            preexec_fn=_die_with_parent if self.settings.die_with_parent else None,
        )
        out.close()
        node.paused = False

    def _signal(self, node: KafkaNode, sig: signal.Signals) -> None:
        if node.process is not None and node.process.poll() is None:
            try:
                node.process.send_signal(sig)
            except ProcessLookupError:
                pass

    def _reap(self, nodes: list[KafkaNode], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for node in nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=30)
            self._settle_class_archive(node)

    def _settle_class_archive(self, node: KafkaNode) -> None:
        """Once the JVM that writes a class archive has exited: check the archive and put it in place."""
        if node.archive_candidate is None or self._class_archive is None or node.alive():
            return
        candidate, node.archive_candidate = node.archive_candidate, None
        self._class_archive.settle(candidate)

    def _properties(self, node: KafkaNode) -> str:
        if node.role == "zookeeper":
            return "".join(f"{k}={v}\n" for k, v in {
                "dataDir": str(node.directory / "data"),
                "clientPort": str(node.port),
                "clientPortAddress": "127.0.0.1",  # loopback only
                "tickTime": "1000",
                "maxClientCnxns": "0",
                "admin.enableServer": "false",
            }.items())
        voters = f"{self.controller.node_id}@127.0.0.1:{self.controller.port}"
        common = {
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
        }
        if self.zookeeper_mode:
            common = {
                "broker.id": str(node.node_id),
                "zookeeper.connect": f"127.0.0.1:{self.controller.port}",
                # A paused or killed broker leaves the cluster (and the controller role moves) within seconds.
                "zookeeper.session.timeout.ms": "6000",
                # The last broker's controlled shutdown has nowhere to move leaders: do not wait 3 x 5 s.
                "controlled.shutdown.retry.backoff.ms": "500",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT",
                # broker.id may not exceed reserved.broker.max.id (default 1000) in ZooKeeper mode.
                "reserved.broker.max.id": str(max(1000, *self.brokers)),
                **{k: v for k, v in common.items() if not k.startswith(("node.", "controller.", "listener."))},
            }
        if node.role == "controller":
            props = {
                **common,
                "process.roles": "controller",
                "listeners": f"CONTROLLER://127.0.0.1:{node.port}",
                # An idle quorum appends a no-op record every 500 ms by default, and every broker wakes to fetch
                # it; fencing rides on heartbeats, not on these. With this and the replica fetches at Kafka's
                # default wait (500 ms), an idle cluster costs 9.5 % of a core (13.9 % with a no-op every 500 ms
                # and replica fetches waiting 200 ms; the suite keeps three clusters up at a time).
                "metadata.max.idle.interval.ms": "5000",
            }
        else:
            props = {
                **common,
                "process.roles": "broker",
                "listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
                "inter.broker.listener.name": "PLAINTEXT",
                "num.partitions": "1",
                "default.replication.factor": str(min(3, self.settings.brokers)),
                "offsets.topic.replication.factor": str(min(3, self.settings.brokers)),
                "offsets.topic.num.partitions": "3",
                "transaction.state.log.replication.factor": str(min(3, self.settings.brokers)),
                "transaction.state.log.min.isr": "1",
                "transaction.state.log.num.partitions": "3",
                "group.initial.rebalance.delay.ms": "0",
                "replica.lag.time.max.ms": str(self.settings.replica_lag_time_max_ms),
                "log.segment.bytes": str(16 * 1024 * 1024),
                "log.cleaner.enable": "false",
                "share.coordinator.state.topic.replication.factor": str(min(3, self.settings.brokers)),
                "share.coordinator.state.topic.min.isr": "1",
            }
        if node.role == "broker" and self.sasl_ports:
            sasl_port = self.sasl_ports[node.node_id]
            props["listeners"] += f",SASL://127.0.0.1:{sasl_port}"
            props["advertised.listeners"] += f",SASL://127.0.0.1:{sasl_port}"
            props["listener.security.protocol.map"] += ",SASL:SASL_PLAINTEXT"
            mechanisms = []
            if self.settings.sasl_plain_users:
                mechanisms.append("PLAIN")
                users = " ".join(f'user_{u}="{pw}"' for u, pw in self.settings.sasl_plain_users.items())
                props["listener.name.sasl.plain.sasl.jaas.config"] = (
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
                )
            if self.settings.sasl_scram_users:
                mechanisms.append("SCRAM-SHA-512")
                props["listener.name.sasl.scram-sha-512.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
            if self.settings.oauthbearer is not None:
                mechanisms.append("OAUTHBEARER")
                props.update(self._oauthbearer_properties(self.settings.oauthbearer))
            props["listener.name.sasl.sasl.enabled.mechanisms"] = ",".join(mechanisms)
            if self.settings.sasl_reauth_ms is not None:
                props["listener.name.sasl.connections.max.reauth.ms"] = str(self.settings.sasl_reauth_ms)
        if node.role == "broker" and self.sasl_ports and self.settings.sasl_ssl:
            if not self.settings.tls_keystore_pem:
                raise ClusterError("sasl_ssl needs tls_keystore_pem (the brokers' key and certificate chain)")
            props["listener.security.protocol.map"] = props["listener.security.protocol.map"].replace(
                "SASL:SASL_PLAINTEXT", "SASL:SASL_SSL")
            props["listener.name.sasl.ssl.keystore.type"] = "PEM"
            props["listener.name.sasl.ssl.keystore.location"] = str(self.settings.tls_keystore_pem)
        if self.settings.acls:
            props.update(self._authorizer_properties())
        if node.role == "broker" and self.settings.tls_keystore_pem:
            tls_port = self.tls_ports[node.node_id]
            props["listeners"] += f",SSL://127.0.0.1:{tls_port}"
            props["advertised.listeners"] += f",SSL://127.0.0.1:{tls_port}"
            props["listener.security.protocol.map"] += ",SSL:SSL"
            props["listener.name.ssl.ssl.keystore.type"] = "PEM"
            props["listener.name.ssl.ssl.keystore.location"] = str(self.settings.tls_keystore_pem)
            if self.settings.tls_client_ca_pem:
                props["listener.name.ssl.ssl.truststore.type"] = "PEM"
                props["listener.name.ssl.ssl.truststore.location"] = str(self.settings.tls_client_ca_pem)
                props["listener.name.ssl.ssl.client.auth"] = "required"
        if node.role == "broker" and self.settings.kerberos is not None:
            kerberos = self.settings.kerberos
            host, port = kerberos.host(node.node_id), self.kerberos_ports[node.node_id]
            props["listeners"] += f",KERBEROS://127.0.0.1:{port}"
            props["advertised.listeners"] += f",KERBEROS://{host}:{port}"
            props["listener.security.protocol.map"] += ",KERBEROS:SASL_PLAINTEXT"
            props.update(self._kerberos_properties(node, kerberos))
        if self.zookeeper_mode:
            props.pop("process.roles", None)
        if self.settings.min_insync_replicas is not None:
            props["min.insync.replicas"] = str(self.settings.min_insync_replicas)
        props.update(self.settings.extra_broker_config if node.role == "broker" else {})
        return "".join(f"{k}={v}\n" for k, v in props.items())


    def _kerberos_properties(self, node: KafkaNode, kerberos: KerberosListener) -> dict[str, str]:
        """A KERBEROS (SASL_PLAINTEXT, GSSAPI) listener under this broker's own name and principal."""
        principal = f"kafka/{kerberos.host(node.node_id)}@{kerberos.realm}"
        return {
            "listener.name.kerberos.sasl.enabled.mechanisms": "GSSAPI",
            "listener.name.kerberos.gssapi.sasl.jaas.config":
                "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
                f'keyTab="{kerberos.keytabs[node.node_id]}" principal="{principal}";',
            "sasl.kerberos.service.name": "kafka",
        }

    def _oauthbearer_properties(self, oauth: OAuthBearerValidation) -> dict[str, str]:
        """The SASL listener's OAUTHBEARER with Kafka's own JWT validation (KIP-768): the signature against the
        provider's JWKS, the issuer, the audience and the expiry."""
        prefix = "listener.name.sasl.oauthbearer."
        props = {
            prefix + "sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            prefix + "sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            "sasl.oauthbearer.jwks.endpoint.url": oauth.jwks_url,
            "sasl.oauthbearer.expected.issuer": oauth.issuer,
            "sasl.oauthbearer.expected.audience": oauth.audience,
        }
        major, minor = (int(part) for part in self.version.split(".")[:2])
        if (major, minor) >= (4, 1):
            # 4.1.0 and 4.1.1 check no signature, audience, issuer or expiry by default: name the validator.
            props["sasl.oauthbearer.jwt.validator.class"] = \
                "org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator"
        return props

    def _authorizer_properties(self) -> dict[str, str]:
        """ACLs on, for every node: nothing is allowed without an ACL, except to the super users."""
        authorizer = (
            "kafka.security.authorizer.AclAuthorizer" if self.zookeeper_mode
            else "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        )
        # ANONYMOUS: the principal of PLAINTEXT connections, i.e. inter-broker, broker-to-controller and the probe.
        users = ["ANONYMOUS", *self.settings.super_users]
        return {
            "authorizer.class.name": authorizer,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join(f"User:{u}" for u in users),
        }


def broker_node_ids(settings: ClusterSettings) -> list[int]:
    """The brokers' node ids: settings.node_ids (checked), else 1..settings.brokers."""
    if settings.node_ids is None:
        return list(range(1, settings.brokers + 1))
    ids = list(settings.node_ids)
    if len(ids) != settings.brokers:
        raise ClusterError(f"node_ids {ids} name {len(ids)} brokers, brokers = {settings.brokers}: give one id per broker")
    if len(set(ids)) != len(ids):
        raise ClusterError(f"node_ids {ids} repeat a node id: each broker needs its own")
    bad = [i for i in ids if not 0 <= i <= 2**31 - 1]
    if bad:
        raise ClusterError(f"node_ids {bad}: a Kafka node id is 0 to {2**31 - 1}")
    return ids


def controller_node_id(broker_ids: list[int]) -> int:
    """The KRaft controller's node id: CONTROLLER_NODE_ID (0), or the lowest id no broker uses."""
    taken = set(broker_ids)
    return next(i for i in range(CONTROLLER_NODE_ID, len(taken) + 1) if i not in taken)


def _all_threads_stopped(node: KafkaNode) -> bool:
    """Every thread of the node's process is stopped (state T in /proc), or the process is gone."""
    if node.process is None or node.process.poll() is not None:
        return True
    try:
        tasks = list(Path(f"/proc/{node.process.pid}/task").iterdir())
    except FileNotFoundError:
        return True
    for task in tasks:
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("T", "t", "Z", "X"):
            return False
    return True


def _random_cluster_id() -> str:
    import base64

    # As Kafka's own Uuid.randomUuid(): never starting with '-', which command lines read as an option.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def find_devcluster_jvms() -> list[tuple[int, str]]:
    """Every running JVM started by any dev cluster on this machine: (pid, cluster id)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for arg in cmdline:
            if arg.startswith(JVM_MARKER.encode()):
                found.append((int(entry.name), arg[len(JVM_MARKER):].decode(errors="replace")))
                break
    return found


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def write_state(path: Path, cluster: LocalKafkaCluster) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cluster.state(), indent=2))


_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""

_LOG4J1 = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
"""
