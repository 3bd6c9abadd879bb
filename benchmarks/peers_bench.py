"""Side-by-side benchmark of insync-proxy and other Kafka proxies in front of one cluster (issue 13; not a test).

    python benchmarks/peers_bench.py [--quick] [--sections produce,roundtrip,fetch,perf,memory] [--targets ...]
                                     [--baseline DIR] [--audit-off] [--produce-rate 2000]

Starts its own 3-broker KRaft Kafka (devcluster/) and, in front of it, every target that can run:

  direct         clients talk to the brokers themselves (no proxy process)
  insync-proxy   the real proxy as its own process (harness/proxy_process.ProxyProcess), audit on as shipped,
                 debug checks off (as in benchmarks/proxy_bench.py)
  kafka-proxy    grepplabs/kafka-proxy (Go): one --bootstrap-server-mapping per broker, loopback only;
                 the binary comes from --kafka-proxy-bin (or is built from --kafka-proxy-src)
  kroxylicious   io.kroxylicious:kroxylicious-runtime from Maven Central, started by the benchmark's own
                 launcher (benchmarks/peers/BenchKroxylicious.java), one port per broker, no filters
  relay          benchmarks/byte_relay.py: a bare uvloop byte relay, one port per broker, no Kafka logic
                 (the floor of a Python proxy; it cannot rewrite Metadata: raw sections only)
  socat          one `socat TCP-LISTEN:...,fork` per broker (Debian package; installed when missing)

and, when asked: `--baseline DIR` (repeatable) another checkout's insync-proxy (e.g. `git worktree add /tmp/old <rev>`,
built there with ./scripts/compile) as `insync-proxy@<rev>`, old and new in the same rounds; `--audit-off`
this checkout's insync-proxy with the audit off as `insync-proxy-no-audit`.

and runs five sections, interleaving the targets over rounds (the order rotates every round). Every
proxy cost is CPU seconds of the proxy's processes (with their children) from /proc (threads' schedstat run
time, utime/stime where threads come and go), which stays meaningful on a shared machine where wall time
does not.

  produce  raw Produce v12, 4 connections x 4 in flight, 16 KiB batches (16 x 1 KiB records), acks=-1, to
           the partition leader's port through each target: MiB/s, ratio vs direct, proxy CPU per request
           and per MiB, wakeups (the proxy's threads' context switches) and read/write syscalls per request;
           in every round, after the saturating load, the same at a fixed moderate rate (`--produce-rate`,
           default 2,000 requests/s: a wakeup per request or two, where the cost per wakeup shows)
  roundtrip  one connection, one request in flight, one 100-byte record (raw Produce v12), acks=1 and acks=-1:
           each target's round trip p50/p90/p99/p99.9 in microseconds and what it adds to direct's (paired
           by round), with the proxy's wakeups and syscalls per request at one in flight
  fetch    raw Fetch v11 of one partition (300 MiB, 100 MiB with --quick) from offset 0, 8 MiB per
           response, one connection: MiB/s, ratio vs direct and vs relay, proxy CPU ms per MiB
  perf     Kafka's ProducerPerformance (1 KiB, acks=all, max throughput; and a fixed rate's p50/p99) and
           ConsumerPerformance through the targets that rewrite Metadata
  memory   RSS (and PSS) of each proxy idle and with 1,000 client connections open, each of which sent one
           ApiVersions request and read its answer

then a goals table for insync-proxy (issue 13) and a JSON summary in bench-results/peers-bench-<UTC>.json.
Everything started is stopped at the end, on an exception, on Ctrl-C and on SIGTERM. Peers that cannot be
built or started are skipped with one line. How to build the peers: docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import select
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # run as a script: the checkout first on sys.path; imported as benchmarks.*, it is there
    sys.path.insert(0, str(ROOT))

from benchmarks import proxy_bench as pb  # noqa: E402
from benchmarks.shared import (  # noqa: E402
    CHILDREN,
    activity,
    cpu_between,
    cpu_snapshot,
    run_threads,
    stop_process,
    tree_memory,
    wait_listening,
    write_summary,
)
from harness.proxy_process import ProxyProcess, free_port_base  # noqa: E402
from harness.raw_client import batch, fetch_request_body, next_offset  # noqa: E402
from insync_proxy.client.blocking_client import CORRELATION_ID_OFFSET, BlockingKafkaClient  # noqa: E402
from insync_proxy.devcluster.cluster import (  # noqa: E402
    ClusterSettings,
    LocalKafkaCluster,
    _die_with_parent,
    free_ports,
)
from insync_proxy.devcluster.distribution import cache_dir, java_executable  # noqa: E402
from insync_proxy.protocol import (  # noqa: E402
    ApiKey,
    MetadataRequest,
    MetadataResponse,
    split_response,
)

MIB = 1024 * 1024
TARGETS = ("direct", "insync-proxy", "kafka-proxy", "kroxylicious", "relay", "socat")
COMPILED_PEERS = ("kafka-proxy", "kroxylicious")
AUDIT_OFF = "insync-proxy-no-audit"
SECTIONS = ("produce", "roundtrip", "fetch", "perf", "memory")
KROXYLICIOUS_VERSION = "0.12.0"
PEERS_DIR = cache_dir() / "peers"
LAUNCHER_SOURCE = ROOT / "benchmarks" / "peers" / "BenchKroxylicious.java"

#: Issue 13's goals for insync-proxy.
GOALS = {
    "produce_cpu_us_per_request_max": 50.0,
    "produce_cpu_vs_relay_max": 1.3,
    "fetch_throughput_vs_relay_min": 0.9,
    "fetch_cpu_vs_relay_max": 1.3,
    "perf_throughput_ratio_min": 0.95,
    "perf_p99_added_ms_max": 1.0,
    "rss_with_connections_mib_max": 64.0,
    #: Direct p50 above this at section 3's fixed rate: the cluster is saturated (other jobs, too high a rate)
    #: and the p99s are its queueing, so the p99 goal gets no verdict.
    "saturated_direct_p50_ms": 50.0,
}

#: Issue 37's goals for insync-proxy, measured in the same run as the peers (ratios per round, then the median).
GOALS_37 = {
    "produce_cpu_vs_relay_max": 1.5,  # saturating and at the fixed rate
    "produce_cpu_vs_best_peer_max": 0.7,
    "audit_on_vs_off_max": 1.05,
}


@dataclass(frozen=True)
class Plan:
    """How long each section runs; `--quick` shortens most of it and runs one round."""

    rounds: int
    warmup_seconds: float  # raw Produce through every target before anything is measured
    jit_warmup_seconds: float  # the same for the JVM target (JIT)
    produce_seconds: float
    produce_connections: int
    produce_window: int
    batch_records: int
    fetch_mib: int
    fetch_max_bytes: int
    fetch_min_seconds: float  # a run reads the partition again until this long (at least once)
    perf_warmup_records: int
    perf_max_seconds: float
    perf_rate: int
    perf_rate_seconds: int
    consume_records: int
    connections: int
    rate_explicit: bool = False  # --rate given: no automatic lowering of perf_rate
    produce_rate: int = 2000  # requests/s of the produce section's fixed-rate load (0: none)
    round_trips: int = 3000  # round trips per target, acks value and round (the roundtrip section)


FULL = Plan(rounds=3, warmup_seconds=3, jit_warmup_seconds=20, produce_seconds=5, produce_connections=4,
            produce_window=4, batch_records=16, fetch_mib=300, fetch_max_bytes=8 * MIB, fetch_min_seconds=3, perf_warmup_records=20_000,
            perf_max_seconds=12, perf_rate=5000, perf_rate_seconds=12, consume_records=200_000, connections=1000)
QUICK = Plan(rounds=1, warmup_seconds=1.5, jit_warmup_seconds=8, produce_seconds=3, produce_connections=4,
             produce_window=4, batch_records=16, fetch_mib=100, fetch_max_bytes=8 * MIB, fetch_min_seconds=2, perf_warmup_records=10_000,
             perf_max_seconds=6, perf_rate=5000, perf_rate_seconds=6, consume_records=60_000, connections=1000,
             round_trips=1500)


# ---------------------------------------------------------------------------------------------- statistics
def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of a run's values (NaN when there are none)."""
    clean = [v for v in values if v == v]
    if not clean:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    return {"median": statistics.median(clean), "min": min(clean), "max": max(clean), "n": len(clean)}


def number(v: float) -> str:
    """A number with about 3 significant digits (thousands separated)."""
    if v != v:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def spread(values: Sequence[float]) -> str:
    """'median (min..max)', or just the value for one run; '-' for none."""
    s = summary(values)
    if not s["n"]:
        return "-"
    if s["n"] == 1 or s["min"] == s["max"]:
        return number(s["median"])
    return f"{number(s['median'])} ({number(s['min'])}..{number(s['max'])})"


def ratios(values: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """Per-round ratios value/baseline (rounds where either is missing or the baseline is 0 are left out)."""
    return [v / b for v, b in zip(values, baseline, strict=False) if v == v and b == b and b]


def rotated(names: Sequence[str], round_index: int) -> list[str]:
    """The targets in the order of round `round_index`: every round starts one further along."""
    if not names:
        return []
    k = round_index % len(names)
    return [*names[k:], *names[:k]]


def verdict(value: float | None, ok: Callable[[float], bool]) -> str:
    if value is None or value != value:
        return "n/a"
    return pb.yes(ok(value))


# ---------------------------------------------------------------------------------------------- targets
@dataclass
class Target:
    """One way for clients to reach the cluster."""

    name: str
    rewrites_metadata: bool = True
    description: str = ""
    ports: dict[int, int] = field(default_factory=dict)  # broker node id -> port clients use for it
    bootstrap: str | None = None

    def start(self, cluster: LocalKafkaCluster, work: Path) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        pass

    def pids(self) -> list[int]:
        """The root processes whose trees are the proxy (empty: nothing to measure)."""
        return []

    def log_tail(self) -> str:
        return ""


class Direct(Target):
    def start(self, cluster: LocalKafkaCluster, work: Path) -> None:
        self.ports = {node_id: node.port for node_id, node in cluster.brokers.items()}
        self.bootstrap = cluster.bootstrap_servers


class InsyncProxy(Target):
    proxy: ProxyProcess | None = None
    #: Another checkout's proxy (its source tree), or None for this one.
    checkout: Path | None = None
    audit: bool = True

    def start(self, cluster: LocalKafkaCluster, work: Path) -> None:
        self.proxy = ProxyProcess(cluster, extra_toml=pb.PROXY_TOML, groups=("default",), debug_checks=False,
                                  audit_enabled=self.audit, checkout=self.checkout).start()
        self.bootstrap = self.proxy.bootstrap()
        self.ports = {node_id: self.proxy.broker_port(node_id) for node_id in cluster.brokers}

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
            shutil.rmtree(self.proxy.dir, ignore_errors=True)

    def pids(self) -> list[int]:
        return [self.proxy.process.pid] if self.proxy is not None and self.proxy.process is not None else []

    def log_tail(self) -> str:
        return self.proxy.log_tail(30) if self.proxy is not None else ""


class ExternalTarget(Target):
    """A target made of processes this benchmark starts (their output goes to one log file)."""

    procs: list[subprocess.Popen[bytes]]
    log: Path | None = None

    def launch(self, work: Path, commands: Sequence[Sequence[str]], env: dict[str, str] | None = None) -> None:
        self.procs = []
        self.log = work / f"{self.name}.log"
        with open(self.log, "ab") as log:
            for cmd in commands:
                self.procs.append(subprocess.Popen(
                    list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    preexec_fn=_die_with_parent, env={**os.environ, **(env or {})}))

    def alive(self) -> bool:
        return all(p.poll() is None for p in getattr(self, "procs", []))

    def stop(self) -> None:
        for proc in getattr(self, "procs", []):
            stop_process(proc)

    def pids(self) -> list[int]:
        return [p.pid for p in getattr(self, "procs", []) if p.poll() is None]

    def log_tail(self) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])


def kafka_proxy_args(binary: str, mappings: dict[tuple[str, int], int]) -> list[str]:
    """grepplabs kafka-proxy: one --bootstrap-server-mapping per broker, listening on loopback only."""
    args = [binary, "server", "--default-listener-ip", "127.0.0.1", "--dynamic-listeners-disable",
            "--http-disable", "--log-level", "warning"]
    for (host, port), local in mappings.items():
        args += ["--bootstrap-server-mapping", f"{host}:{port},127.0.0.1:{local}"]
    return args


class KafkaProxyTarget(ExternalTarget):
    binary: str = ""

    def start(self, cluster: LocalKafkaCluster, work: Path) -> None:
        local = free_ports(len(cluster.brokers))
        mappings = {("127.0.0.1", node.port): port for node, port in zip(cluster.brokers.values(), local, strict=True)}
        self.launch(work, [kafka_proxy_args(self.binary, mappings)])
        wait_listening(local, 60, self.alive)
        self.ports = dict(zip(cluster.brokers, local, strict=True))
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in local)


def kroxylicious_yaml(bootstrap_servers: str, bootstrap_port: int, first_node_port: int, node_ids: Sequence[int]) -> str:
    """A Kroxylicious 0.12 config: one virtual cluster, port per node (node n at first_node_port + n - min id),
    brokers advertised as 127.0.0.1, no filters, no management endpoint."""
    return (
        "virtualClusters:\n"
        "  - name: bench\n"
        "    targetCluster:\n"
        f"      bootstrapServers: {bootstrap_servers}\n"
        "    gateways:\n"
        "    - name: loopback\n"
        "      portIdentifiesNode:\n"
        f"        bootstrapAddress: 127.0.0.1:{bootstrap_port}\n"
        "        advertisedBrokerAddressPattern: 127.0.0.1\n"
        f"        nodeStartPort: {first_node_port}\n"
        "        nodeIdRanges:\n"
        "        - name: brokers\n"
        f"          start: {min(node_ids)}\n"
        f"          end: {max(node_ids)}\n"
        "    logNetwork: false\n"
        "    logFrames: false\n"
    )


KROXYLICIOUS_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.insync-proxy.bench</groupId>
  <artifactId>kroxylicious-runtime-deps</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>io.kroxylicious</groupId><artifactId>kroxylicious-runtime</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-simple</artifactId><version>2.0.17</version></dependency>
  </dependencies>
</project>
"""


def prepare_kroxylicious(directory: Path, version: str) -> Path:
    """Fetch the runtime and its dependencies with Maven (once) and compile the launcher; returns `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    pom = KROXYLICIOUS_POM.format(version=version)
    lib, classes = directory / "lib", directory / "classes"
    marker = lib / f".complete-{version}"
    if not marker.exists() or (directory / "pom.xml").read_text() != pom:
        (directory / "pom.xml").write_text(pom)
        shutil.rmtree(lib, ignore_errors=True)
        pb.say(f"kroxylicious: fetching io.kroxylicious:kroxylicious-runtime:{version} and its dependencies with Maven")
        subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={lib}"],
                       cwd=directory, check=True, stdin=subprocess.DEVNULL, capture_output=True, timeout=900)
        marker.touch()
    launcher = classes / "BenchKroxylicious.class"
    if not launcher.exists() or launcher.stat().st_mtime < LAUNCHER_SOURCE.stat().st_mtime \
            or launcher.stat().st_mtime < marker.stat().st_mtime:
        classes.mkdir(exist_ok=True)
        javac = Path(java_executable()).with_name("javac")
        subprocess.run([str(javac) if javac.exists() else "javac", "-cp", f"{lib}/*", "-d", str(classes),
                        str(LAUNCHER_SOURCE)], check=True, stdin=subprocess.DEVNULL, capture_output=True, timeout=300)
    return directory


class KroxyliciousTarget(ExternalTarget):
    directory: Path = PEERS_DIR / "kroxylicious"
    heap: str = "256m"

    def start(self, cluster: LocalKafkaCluster, work: Path) -> None:
        node_ids = sorted(cluster.brokers)
        base = free_port_base(span=len(node_ids) + 2)
        bootstrap_port, first = base + 1, base + 2
        config = work / "kroxylicious.yaml"
        config.write_text(kroxylicious_yaml(cluster.bootstrap_servers, bootstrap_port, first, node_ids))
        self.launch(work, [[java_executable(), f"-Xms{self.heap}", f"-Xmx{self.heap}",
                            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                            "-cp", f"{self.directory / 'classes'}:{self.directory / 'lib'}/*", "BenchKroxylicious",
                            str(config)]])
        ports = [bootstrap_port, *(first + i for i in range(len(node_ids)))]
        wait_listening(ports, 120, self.alive)
        pb.say("kroxylicious: note: 0.12's portIdentifiesNode has no bind address; its ports listen on every "
               "interface while the benchmark runs (clients are given 127.0.0.1)")
        self.bootstrap = f"127.0.0.1:{bootstrap_port}"
        self.ports = {node_id: first + node_id - node_ids[0] for node_id in node_ids}


class RelayTarget(ExternalTarget):
    def start(self, cluster: LocalKafkaCluster, work: Path) -> None:
        local = free_ports(len(cluster.brokers))
        args = [f"{port}:127.0.0.1:{node.port}" for node, port in zip(cluster.brokers.values(), local, strict=True)]
        self.launch(work, [[sys.executable, str(ROOT / "benchmarks" / "byte_relay.py"), *args]])
        wait_listening(local, 30, self.alive)
        self.ports = dict(zip(cluster.brokers, local, strict=True))


class SocatTarget(ExternalTarget):
    binary: str = "socat"

    def start(self, cluster: LocalKafkaCluster, work: Path) -> None:
        local = free_ports(len(cluster.brokers))
        self.launch(work, [[self.binary, f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr,backlog=2048,nodelay",
                            f"TCP:127.0.0.1:{node.port},nodelay"]
                           for node, port in zip(cluster.brokers.values(), local, strict=True)])
        wait_listening(local, 30, self.alive)
        self.ports = dict(zip(cluster.brokers, local, strict=True))


def find_socat(install: bool) -> str | None:
    found = shutil.which("socat")
    if found or not install or not shutil.which("apt-get") or os.geteuid() != 0:
        return found
    pb.say("socat: not installed; apt-get install -y socat")
    subprocess.run(["apt-get", "install", "-y", "-q", "socat"], stdin=subprocess.DEVNULL, capture_output=True,
                   timeout=600, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return shutil.which("socat")


def prepare_targets(args: argparse.Namespace, names: Sequence[str], skipped: dict[str, str]) -> list[Target]:
    """Target objects for every requested target whose software is there (the others go to `skipped`)."""
    targets: list[Target] = []
    for name in names:
        try:
            if name == "direct":
                targets.append(Direct(name, description="client to broker"))
            elif name == "insync-proxy":
                targets.append(InsyncProxy(name, description="audit on, debug checks off"))
                if args.audit_off:
                    quiet = InsyncProxy(AUDIT_OFF, description="this checkout, audit off, debug checks off")
                    quiet.audit = False
                    targets.append(quiet)
                for baseline in args.baseline:
                    checkout = baseline.resolve()
                    rev = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                                         capture_output=True, text=True).stdout.strip() or checkout.name
                    old = InsyncProxy(f"insync-proxy@{rev}", description=f"{checkout}, audit on, debug checks off")
                    old.checkout = checkout
                    targets.append(old)
            elif name == "kafka-proxy":
                binary = args.kafka_proxy_bin
                if not Path(binary).exists() and args.kafka_proxy_src:
                    pb.say(f"kafka-proxy: go build -mod=vendor in {args.kafka_proxy_src}")
                    Path(binary).parent.mkdir(parents=True, exist_ok=True)
                    vendor = ["-mod=vendor"] if (Path(args.kafka_proxy_src) / "vendor").is_dir() else []
                    subprocess.run(["go", "build", *vendor, "-o", str(binary), "."], cwd=args.kafka_proxy_src,
                                   check=True, stdin=subprocess.DEVNULL, capture_output=True, timeout=1800)
                if not Path(binary).exists():
                    raise RuntimeError(f"no binary at {binary} (build it, see docs/performance.md, or pass "
                                       "--kafka-proxy-bin / --kafka-proxy-src)")
                target = KafkaProxyTarget(name, description="grepplabs kafka-proxy (Go)")
                target.binary = str(binary)
                targets.append(target)
            elif name == "kroxylicious":
                if shutil.which("mvn") is None:
                    raise RuntimeError("Maven (mvn) is not installed")
                kroxy = KroxyliciousTarget(name, description=f"kroxylicious-runtime {args.kroxylicious_version}, "
                                                             "no filters")
                kroxy.directory = prepare_kroxylicious(Path(args.kroxylicious_dir), args.kroxylicious_version)
                kroxy.heap = args.kroxylicious_heap
                targets.append(kroxy)
            elif name == "relay":
                targets.append(RelayTarget(name, rewrites_metadata=False, description="uvloop byte relay"))
            elif name == "socat":
                binary = args.socat_bin or find_socat(not args.no_install)
                if not binary:
                    raise RuntimeError("socat is not installed and could not be installed (apt-get install socat)")
                socat = SocatTarget(name, rewrites_metadata=False, description="socat, fork per connection")
                socat.binary = binary
                targets.append(socat)
        except Exception as exc:  # one line, the run goes on
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            if isinstance(exc, subprocess.CalledProcessError) and exc.stderr:
                reason += ": " + exc.stderr.decode(errors="replace").strip().splitlines()[-1]
            skipped[name] = reason
            print(f"skipped {name}: {reason}", flush=True)
    return targets


def start_targets(targets: list[Target], cluster: LocalKafkaCluster, work: Path, skipped: dict[str, str]) -> list[Target]:
    running = []
    for target in targets:
        try:
            target.start(cluster, work)
            if target.rewrites_metadata and target.bootstrap:
                advertised = advertised_ports(target.bootstrap)
                if advertised != target.ports:
                    raise RuntimeError(f"its Metadata advertises ports {advertised}, expected {target.ports}")
            running.append(target)
            pb.say(f"{target.name}: ready (ports {target.ports}, pids {target.pids()})")
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            skipped[target.name] = f"did not start: {reason}"
            print(f"skipped {target.name}: did not start: {reason}", flush=True)
            tail = target.log_tail()
            if tail:
                pb.say(f"{target.name} log tail:\n{tail}")
            target.stop()
    return running


def advertised_ports(bootstrap: str) -> dict[int, int]:
    """node id -> port, from a Metadata v12 answer (no topics) through the target's bootstrap address."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with BlockingKafkaClient(host, int(port), timeout=30, client_id="insync-proxy-peers-bench") as client:
        response = client.request(MetadataRequest(topics=(), allow_auto_topic_creation=False), 12, MetadataResponse)
    return {b.node_id: b.port for b in response.brokers}


# ---------------------------------------------------------------------------------------------- raw Fetch
@dataclass
class FetchedPartition:
    error_code: int
    high_watermark: int
    records: memoryview


def parse_fetch_response(frame: bytes | memoryview) -> list[FetchedPartition]:
    """The partitions of a Fetch v11 response frame (header v0 included, size prefix stripped)."""
    view = memoryview(frame)
    pos = 4  # correlation id
    _throttle, error_code, _session, topics = struct.unpack_from(">ihii", view, pos)
    pos += 14
    if error_code:
        raise RuntimeError(f"Fetch error {error_code}")
    out = []
    for _ in range(topics):
        (name_len,) = struct.unpack_from(">h", view, pos)
        pos += 2 + name_len
        (partitions,) = struct.unpack_from(">i", view, pos)
        pos += 4
        for _ in range(partitions):
            _index, p_error, high_watermark, _lso, _log_start, aborted = struct.unpack_from(">ihqqqi", view, pos)
            pos += 34
            pos += max(0, aborted) * 16
            pos += 4  # preferred read replica
            (size,) = struct.unpack_from(">i", view, pos)
            pos += 4
            records = view[pos:pos + max(0, size)]
            pos += max(0, size)
            out.append(FetchedPartition(p_error, high_watermark, records))
    return out


def fetch_all(port: int, topic: str, end_offset: int, max_bytes: int, limit_bytes: int | None = None,
              min_seconds: float = 0.0) -> dict[str, float]:
    """Reads partition 0 of `topic` from offset 0 to `end_offset` on one connection, one Fetch at a time;
    again from offset 0 until `min_seconds` have passed (CPU readings have a 10 ms resolution)."""
    offset, received, requests, passes = 0, 0, 0, 1
    started = time.perf_counter()
    with BlockingKafkaClient("127.0.0.1", port, timeout=60, client_id="insync-proxy-peers-bench") as client:
        while limit_bytes is None or received < limit_bytes:
            if offset >= end_offset:
                if time.perf_counter() - started >= min_seconds:
                    break
                offset, passes = 0, passes + 1
            requests += 1
            frame = pb.request_frame(ApiKey.FETCH, 11, fetch_request_body(topic, offset, max_bytes))
            struct.pack_into(">i", frame, CORRELATION_ID_OFFSET, requests)
            client.send_bytes(frame)
            response = client.receive_frame()
            [part] = parse_fetch_response(response)
            if part.error_code:
                raise RuntimeError(f"Fetch of {topic}-0 at {offset} through port {port}: error {part.error_code}")
            received += len(part.records)
            new = next_offset(part.records, offset)
            if new == offset:
                raise RuntimeError(f"Fetch of {topic}-0 at {offset} through port {port} made no progress")
            offset = new
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "bytes": received, "requests": requests, "passes": passes,
            "mib_per_sec": received / MIB / seconds}


def fill_partition(port: int, topic: str, mib: int, batch_records: int = 512) -> int:
    """Produces `mib` MiB of 1 KiB records to partition 0 (acks=1, 4 in flight); returns the end offset."""
    payload = batch(*[bytes([97 + i % 26]) * pb.RECORD_SIZE for i in range(batch_records)])
    frame = pb.produce_frame(topic, 0, payload, 1)
    total = max(1, mib * MIB // (batch_records * pb.RECORD_SIZE))
    sent = received = 0
    with BlockingKafkaClient("127.0.0.1", port, timeout=120, client_id="insync-proxy-peers-bench") as client:
        while received < total:
            while sent < total and sent - received < 4:
                sent += 1
                struct.pack_into(">i", frame, CORRELATION_ID_OFFSET, sent)
                client.send_bytes(frame)
            response = client.receive_frame()
            received += 1
            codes = pb.produce_errors(response)
            if any(codes):
                raise RuntimeError(f"filling {topic}: Produce error {codes}")
    return total * batch_records


# ---------------------------------------------------------------------------------------------- sections
#: Targets that failed during a section (name -> what failed): dropped from the rest of the run.
BROKEN: dict[str, str] = {}


def attempt(name: str, what: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """fn(), or None when `name` is already broken or fn fails (then it is dropped with one printed line)."""
    if name in BROKEN:
        return None
    try:
        return fn()
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        BROKEN[name] = f"{what}: {reason}"
        print(f"dropped {name} from the rest of the run: {what} failed: {reason}", flush=True)
        return None


def measure(target: Target, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Runs `run` and adds the CPU seconds the target's processes used meanwhile."""
    pids = target.pids()
    before = cpu_snapshot(pids) if pids else {}
    counts = activity(pids) if pids else {}
    wall = time.perf_counter()
    result = run()
    result["wall_s"] = time.perf_counter() - wall
    result["proxy_cpu_s"] = cpu_between(before, cpu_snapshot(pids)) if pids else float("nan")
    if pids:
        after = activity(pids)
        result.update({f"proxy_{k}": after[k] - v for k, v in counts.items()})
    return result


def produce_topic(cluster: LocalKafkaCluster, plan: Plan) -> str:
    topic, count = "peers-produce", plan.produce_connections
    cluster.create_topic(topic, configs={"min.insync.replicas": "2"},  # "already exists" is fine
                         assignments={p: [1, 2, 3] if p % 2 == 0 else [1, 3, 2] for p in range(count)})
    cluster.wait_for(lambda: all(cluster.leader_of(topic, p) == 1 for p in range(count)), 60,
                     f"broker 1 to lead every partition of {topic}")
    return topic


def raw_produce(target: Target, topic: str, plan: Plan, seconds: float) -> dict[str, Any]:
    return pb.produce_load(target.ports[1], topic, range(plan.produce_connections), -1, seconds, plan.produce_window,
                           plan.batch_records)


def paced_produce(port: int, topic: str, partitions: Sequence[int], rate: float, seconds: float, window: int,
                  batch_records: int) -> dict[str, Any]:
    """Produce (acks=-1) at a fixed rate: one thread and connection per partition, each sending every
    len(partitions) / rate seconds (the connections staggered), at most `window` in flight; a request that
    cannot go at its time (the window full) goes as soon as it can. Same result keys as `pb.produce_load`."""
    payload = batch(*[bytes([65 + i % 26]) * pb.RECORD_SIZE for i in range(batch_records)])
    interval = len(partitions) / rate
    start = time.perf_counter() + 0.05
    stop_at = start + seconds
    results: list[pb.LoadResult] = []
    failures: list[BaseException] = []

    def worker(index: int, partition: int) -> None:
        result = pb.LoadResult(error_codes=set())
        results.append(result)
        try:
            with BlockingKafkaClient("127.0.0.1", port) as client:
                frame = pb.produce_frame(topic, partition, payload, -1)
                next_send = start + index * interval / len(partitions)
                sent = received = 0
                while True:
                    now = time.perf_counter()
                    due = next_send < stop_at
                    if due and now >= next_send and sent - received < window:
                        sent += 1
                        struct.pack_into(">i", frame, CORRELATION_ID_OFFSET, sent)
                        client.send_bytes(frame)
                        next_send += interval
                        continue
                    if not due and received == sent:
                        break
                    if sent == received:
                        time.sleep(next_send - now)
                        continue
                    wait = next_send - now if due and sent - received < window else 30.0
                    if not select.select([client.sock], [], [], max(0.0, wait))[0]:
                        continue
                    received += 1
                    result.add_response(client.receive_frame(), received, len(payload))
        except BaseException as exc:  # reported below
            failures.append(exc)

    elapsed = run_threads(worker, list(enumerate(partitions)), seconds + 120)
    if failures:
        raise RuntimeError(f"paced load generator failed: {failures[0]!r}")
    requests = sum(r.requests for r in results)
    return {"seconds": elapsed, "requests": requests, "record_bytes": sum(r.record_bytes for r in results),
            "requests_per_sec": requests / elapsed, "error_responses": sum(r.errors for r in results),
            "error_codes": sorted({c for r in results for c in (r.error_codes or set())})}


def warm_up(targets: Sequence[Target], cluster: LocalKafkaCluster, plan: Plan) -> None:
    topic = produce_topic(cluster, plan)
    for target in targets:
        seconds = plan.jit_warmup_seconds if target.name == "kroxylicious" else plan.warmup_seconds
        pb.say(f"warm-up: {target.name}, raw Produce for {seconds:.0f}s")

        def run(t: Target = target, sec: float = seconds) -> dict[str, Any]:
            result = raw_produce(t, topic, plan, sec)
            if result["error_responses"]:
                raise RuntimeError(f"{result['error_responses']} Produce errors {result['error_codes']} (is each "
                                   "broker's port routed to that broker?)")
            return result

        attempt(target.name, "raw Produce warm-up", run)


def section_produce(targets: Sequence[Target], cluster: LocalKafkaCluster, plan: Plan,
                    results: dict[str, Any]) -> None:
    """Raw Produce through every target, saturating and (`plan.produce_rate`) at a fixed rate, both in every
    round: the targets' order rotates per round, and a round runs the saturating load through each, then the
    fixed rate through each."""
    topic = produce_topic(cluster, plan)
    names = [t.name for t in targets]
    by_name = {t.name: t for t in targets}
    loads = {"saturating": None, "fixed": plan.produce_rate} if plan.produce_rate else {"saturating": None}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {load: {n: [] for n in names} for load in loads}
    pb.say(f"[produce] {plan.rounds} round(s) of {plan.produce_seconds:.0f}s per target and load "
           f"({', '.join(loads)})")

    def load_run(target: Target, rate: int | None) -> dict[str, Any]:
        if rate is None:
            return raw_produce(target, topic, plan, plan.produce_seconds)
        return paced_produce(target.ports[1], topic, range(plan.produce_connections), rate, plan.produce_seconds,
                             plan.produce_window, plan.batch_records)

    for r in range(plan.rounds):
        for load, rate in loads.items():
            for name in rotated(names, r):
                run = attempt(name, f"raw Produce ({load})", lambda n=name, q=rate: measure(  # type: ignore[misc]
                    by_name[n], lambda: load_run(by_name[n], q)))
                if run is None:
                    continue
                requests = max(1, run["requests"])
                run["round"] = r
                run["mib_per_sec"] = run["record_bytes"] / MIB / run["seconds"]
                run["cpu_us_per_request"] = run["proxy_cpu_s"] / requests * 1e6
                run["cpu_us_per_mib"] = run["proxy_cpu_s"] / max(1e-9, run["record_bytes"] / MIB) * 1e6
                run["cpu_percent"] = run["proxy_cpu_s"] / run["wall_s"] * 100
                for key in ("wakeups", "preempted", "reads", "writes"):
                    run[f"{key}_per_request"] = run.get(f"proxy_{key}", float("nan")) / requests
                runs[load][name].append(run)
                pb.say(f"[produce] round {r + 1}, {load}: {name}: {run['mib_per_sec']:.1f} MiB/s, "
                       f"{run['cpu_us_per_request']:.0f} us/request, {run['wakeups_per_request']:.2f} wakeups and "
                       f"{run['reads_per_request'] + run['writes_per_request']:.2f} syscalls/request, "
                       f"errors {run['error_responses']}")
    out: dict[str, Any] = {}
    relay = {load: [r["cpu_us_per_request"] for r in runs[load].get("relay", [])] for load in loads}
    for load, rate in loads.items():
        direct = [r["mib_per_sec"] for r in runs[load].get("direct", [])]
        rows = []
        for name in names:
            rs = runs[load][name]

            def col(key: str, rs: list[dict[str, Any]] = rs) -> list[float]:
                return [float(r[key]) for r in rs]

            cpu = col("cpu_us_per_request")
            vs_relay = ratios(cpu, relay[load])
            rows.append((name, spread(col("mib_per_sec")), spread(ratios(col("mib_per_sec"), direct)),
                         spread(col("requests_per_sec")), spread(cpu), spread(vs_relay),
                         spread(col("cpu_us_per_mib")), spread(col("cpu_percent")),
                         spread(col("wakeups_per_request")), spread(col("reads_per_request")),
                         spread(col("writes_per_request")), sum(r["error_responses"] for r in rs)))
            out.setdefault(load, {})[name] = {
                "runs": rs, "mib_per_sec": summary(col("mib_per_sec")),
                "vs_direct": summary(ratios(col("mib_per_sec"), direct)),
                "requests_per_sec": summary(col("requests_per_sec")), "cpu_us_per_request": summary(cpu),
                "cpu_vs_relay": summary(vs_relay), "cpu_us_per_mib": summary(col("cpu_us_per_mib")),
                "wakeups_per_request": summary(col("wakeups_per_request")),
                "reads_per_request": summary(col("reads_per_request")),
                "writes_per_request": summary(col("writes_per_request")),
                "errors": sum(r["error_responses"] for r in rs)}
        kib = plan.batch_records * pb.RECORD_SIZE // 1024
        what = (f"{plan.produce_connections} connections x {plan.produce_window} in flight" if rate is None
                else f"{rate:,} requests/s over {plan.produce_connections} connections (at most "
                     f"{plan.produce_window} in flight each)")
        pb.table(f"1{'a' if rate is None else 'b'}. Raw Produce v{pb.PRODUCE_VERSION}, acks=-1, {what}, {kib} KiB "
                 f"batches ({plan.batch_records} x 1 KiB records) to the leader's port; median (min..max) of "
                 f"{plan.rounds} round(s); wakeups: the proxy's voluntary context switches, reads/writes: its "
                 "read(v)/write(v) syscalls",
                 ("target", "MiB/s", "vs direct", "requests/s", "proxy CPU us/request", "CPU vs relay",
                  "proxy CPU us/MiB", "proxy CPU %", "wakeups/request", "reads/request", "writes/request", "errors"),
                 rows)
    fixed = out.get("fixed", {})
    short = [n for n, v in fixed.items() if v["requests_per_sec"]["n"] and
             v["requests_per_sec"]["median"] < 0.9 * plan.produce_rate]
    if short:
        pb.say(f"[produce] note: {', '.join(short)} sustained less than 90% of {plan.produce_rate:,} requests/s: "
               "the fixed rate was the cluster's (or the load generator's) limit there, not a moderate load; "
               "choose a lower --produce-rate (about half what direct takes saturated)")
    results["produce"] = out["saturating"]
    if "fixed" in out:
        results["produce_fixed_rate"] = {"requests_per_sec": plan.produce_rate, "targets": out["fixed"]}


#: The round-trip section's percentiles.
ROUND_TRIP_PERCENTILES = (50, 90, 99, 99.9)


def section_roundtrip(targets: Sequence[Target], cluster: LocalKafkaCluster, plan: Plan,
                      results: dict[str, Any]) -> None:
    """What each target adds to a request's round trip: one connection, one request in flight, one 100-byte record
    to the leader's port, acks=1 and acks=-1; in every round each target in turn (the order rotating), the first
    100 round trips of a run left out (the connection's and the path's warm-up). The added latency is paired by
    round: a target's percentile minus direct's in the same round."""
    topic = produce_topic(cluster, plan)
    names = [t.name for t in targets]
    by_name = {t.name: t for t in targets}
    record = batch(b"r" * 100)
    warm = 100
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {acks: {n: [] for n in names} for acks in (1, -1)}
    pb.say(f"[roundtrip] {plan.rounds} round(s) of {plan.round_trips:,} round trips per target and acks value")

    def one(target: Target, acks: int) -> dict[str, Any]:
        frame = pb.produce_frame(topic, 0, record, acks)
        seconds = pb.round_trips(target.ports[1], frame, plan.round_trips + warm,
                                 lambda answer: _no_produce_error(answer, target.name))[warm:]
        micros = sorted(s * 1e6 for s in seconds)
        return {"requests": len(micros), **{f"p{q}": pb.pct(micros, q) for q in ROUND_TRIP_PERCENTILES}}

    for r in range(plan.rounds):
        for acks in (1, -1):
            for name in rotated(names, r):
                run = attempt(name, f"round trips (acks={acks})", lambda n=name, a=acks: measure(  # type: ignore[misc]
                    by_name[n], lambda: one(by_name[n], a)))
                if run is None:
                    continue
                run["round"] = r
                requests = max(1, run["requests"])
                for key in ("wakeups", "reads", "writes"):
                    run[f"{key}_per_request"] = run.get(f"proxy_{key}", float("nan")) / requests
                run["cpu_us_per_request"] = run["proxy_cpu_s"] / requests * 1e6
                runs[acks][name].append(run)
                pb.say(f"[roundtrip] round {r + 1}, acks={acks}: {name}: p50 {run['p50']:.0f} us, "
                       f"p99 {run['p99']:.0f} us")
    out: dict[str, Any] = {}
    for acks in (1, -1):
        direct = {run["round"]: run for run in runs[acks].get("direct", [])}
        rows = []
        for name in names:
            rs = runs[acks][name]
            entry: dict[str, Any] = {"runs": rs}
            row: list[object] = [name, acks]
            for q in ROUND_TRIP_PERCENTILES:
                values = [run[f"p{q}"] for run in rs]
                entry[f"p{q}_us"] = summary(values)
                row.append(spread(values))
            for q in (50, 99):
                added = [run[f"p{q}"] - direct[run["round"]][f"p{q}"] for run in rs if run["round"] in direct]
                entry[f"added_p{q}_us"] = summary(added)
                row.append(spread(added) if name != "direct" else "")
            for key in ("wakeups_per_request", "reads_per_request", "writes_per_request", "cpu_us_per_request"):
                entry[key] = summary([run[key] for run in rs])
            row += [spread([run["wakeups_per_request"] for run in rs]),
                    spread([run["reads_per_request"] + run["writes_per_request"] for run in rs]),
                    spread([run["cpu_us_per_request"] for run in rs])]
            out.setdefault(str(acks), {})[name] = entry
            rows.append(row)
        pb.table(f"2{'a' if acks == 1 else 'b'}. Round trip, acks={acks}: one connection, one request in flight, one "
                 f"100-byte record (Produce v{pb.PRODUCE_VERSION}); microseconds, median (min..max) of "
                 f"{plan.rounds} round(s) of {plan.round_trips:,}; adds: minus direct's in the same round",
                 ("target", "acks", "p50", "p90", "p99", "p99.9", "adds p50", "adds p99", "wakeups/request",
                  "syscalls/request", "proxy CPU us/request"), rows)
    results["roundtrip"] = out


def _no_produce_error(answer: bytes, target: str) -> None:
    errors = [code for code in pb.produce_errors(answer) if code]
    if errors:
        raise RuntimeError(f"{target}: Produce answered with errors {errors}")


def section_fetch(targets: Sequence[Target], cluster: LocalKafkaCluster, plan: Plan, results: dict[str, Any]) -> None:
    topic = f"peers-fetch-{plan.fetch_mib}"
    names = [t.name for t in targets]
    by_name = {t.name: t for t in targets}
    cluster.create_topic(topic, assignments={0: [1]}, configs={"retention.ms": "-1", "retention.bytes": "-1"})
    cluster.wait_for_leader(topic, 0)
    pb.say(f"[fetch] filling {topic}-0 with {plan.fetch_mib} MiB (1 KiB records, directly to broker 1)")
    t0 = time.monotonic()
    end_offset = fill_partition(cluster.brokers[1].port, topic, plan.fetch_mib)
    pb.say(f"[fetch] {end_offset:,} records in {time.monotonic() - t0:.0f}s; warm-up: 32 MiB through each target")
    for name in names:
        attempt(name, "Fetch warm-up", lambda n=name: fetch_all(by_name[n].ports[1], topic, end_offset,
                                                                plan.fetch_max_bytes, limit_bytes=32 * MIB))
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(plan.rounds):
        for name in rotated(names, r):
            run = attempt(name, "raw Fetch", lambda n=name: measure(by_name[n], lambda: fetch_all(
                by_name[n].ports[1], topic, end_offset, plan.fetch_max_bytes, min_seconds=plan.fetch_min_seconds)))
            if run is None:
                continue
            run["round"] = r
            run["cpu_ms_per_mib"] = run["proxy_cpu_s"] * 1000 / (run["bytes"] / MIB)
            run["cpu_percent"] = run["proxy_cpu_s"] / run["wall_s"] * 100
            runs[name].append(run)
            pb.say(f"[fetch] round {r + 1}: {name}: {run['mib_per_sec']:.0f} MiB/s, "
                   f"{run['cpu_ms_per_mib']:.3f} CPU ms/MiB ({run['passes']} pass(es))")
    direct = [r["mib_per_sec"] for r in runs.get("direct", [])]
    relay = [r["mib_per_sec"] for r in runs.get("relay", [])]
    relay_cpu = [r["cpu_ms_per_mib"] for r in runs.get("relay", [])]
    out: dict[str, Any] = {}
    rows = []
    for name in names:
        rs = runs[name]
        mibs = [r["mib_per_sec"] for r in rs]
        cpu = [r["cpu_ms_per_mib"] for r in rs]
        vs_direct, vs_relay, cpu_vs_relay = ratios(mibs, direct), ratios(mibs, relay), ratios(cpu, relay_cpu)
        rows.append((name, spread(mibs), spread(vs_direct), spread(vs_relay), spread(cpu), spread(cpu_vs_relay),
                     spread([r["cpu_percent"] for r in rs])))
        out[name] = {"runs": rs, "mib_per_sec": summary(mibs), "vs_direct": summary(vs_direct),
                     "vs_relay": summary(vs_relay), "cpu_ms_per_mib": summary(cpu),
                     "cpu_vs_relay": summary(cpu_vs_relay)}
    pb.table(f"2. Raw Fetch v11, one connection, {plan.fetch_mib} MiB partition read from offset 0 (again until "
             f"{plan.fetch_min_seconds:.0f}s passed), {plan.fetch_max_bytes // MIB} MiB per response; median (min..max) "
             f"of {plan.rounds} round(s)",
             ("target", "MiB/s", "vs direct", "vs relay", "proxy CPU ms/MiB", "CPU vs relay", "proxy CPU %"), rows)
    results["fetch"] = {"topic": topic, "records": end_offset, "targets": out}


def moderate_rate(wanted: int, direct_max: float | None, explicit: bool = False) -> int:
    """The fixed rate of section 3: `wanted`, but at most half of what the cluster took direct at full speed
    (rounded down to 500/s, at least 500/s), so that latencies are not those of a saturated cluster."""
    if explicit or not direct_max or direct_max != direct_max:
        return wanted
    return max(500, min(wanted, int(direct_max / 2 // 500 * 500)))


CONSUMER_FIELDS = ("mb", "mb_per_sec", "records", "records_per_sec", "rebalance_ms", "fetch_ms", "fetch_mb_per_sec",
                   "fetch_records_per_sec")


def parse_consumer_performance(output: str) -> dict[str, float]:
    """ConsumerPerformance's result line: start, end, MB, MB/s, records, records/s, rebalance ms, fetch ms,
    fetch MB/s, fetch records/s (the header line is skipped)."""
    for line in reversed(output.splitlines()):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 10:
            continue
        try:
            values = [float(p) for p in parts[2:]]
        except ValueError:
            continue
        return dict(zip(CONSUMER_FIELDS, values, strict=True))
    raise RuntimeError(f"no ConsumerPerformance result line in its output:\n{output[-2000:]}")


def consumer_performance(libs: Path, work: Path, bootstrap: str, topic: str, records: int, group: str) -> dict[str, float]:
    log4j = work / "log4j2-tools.properties"
    if not log4j.exists():
        log4j.write_text(pb.LOG4J2_QUIET)
    cmd = [java_executable(), "-Xmx384m", "-XX:+UseSerialGC", f"-Dlog4j2.configurationFile={log4j}",
           "-cp", f"{libs}/*", "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
           "--topic", topic, "--num-records", str(records), "--group", group, "--timeout", "60000",
           "--command-property", "client.id=insync-proxy-peers-bench"]
    returncode, text = CHILDREN.run(cmd)
    if returncode != 0:
        raise RuntimeError(f"ConsumerPerformance exited with {returncode}:\n{text[-2000:]}")
    result = parse_consumer_performance(text)
    if result["records"] < records:
        raise RuntimeError(f"ConsumerPerformance read {result['records']:.0f} of {records} records")
    return result


def section_perf(targets: Sequence[Target], cluster: LocalKafkaCluster, plan: Plan, work: Path,
                 results: dict[str, Any]) -> None:
    assert cluster.libs is not None
    libs = cluster.libs
    for t in targets:
        if not t.rewrites_metadata:
            print(f"skipped {t.name} in section 3: it cannot rewrite Metadata, Kafka's clients would leave it",
                  flush=True)
    chosen = [t for t in targets if t.rewrites_metadata and t.bootstrap]
    names = [t.name for t in chosen]
    by_name = {t.name: t for t in chosen}
    topic, consume_topic = "peers-perf", "peers-consume"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    cluster.create_topic(consume_topic, partitions=3, replication_factor=3)
    for p in range(3):
        cluster.wait_for_leader(topic, p)
        cluster.wait_for_leader(consume_topic, p)
    pb.say(f"[perf] filling {consume_topic} with {plan.consume_records:,} records of 1 KiB (direct)")
    pb.producer_performance(libs, work, cluster.bootstrap_servers, consume_topic, plan.consume_records, -1, None)
    warm = {}
    for name in names:
        pb.say(f"[perf] warm-up: ProducerPerformance {plan.perf_warmup_records:,} records through {name}")
        result = attempt(name, "ProducerPerformance warm-up", lambda n=name: pb.producer_performance(
            libs, work, by_name[n].bootstrap or "", topic, plan.perf_warmup_records, -1, None))
        if result is not None:
            warm[name] = result
    rate = max([w["records_per_sec"] for w in warm.values()] or [10_000.0])
    max_records = int(min(400_000, max(20_000, rate * plan.perf_max_seconds)))
    fixed_rate = moderate_rate(plan.perf_rate, warm.get("direct", {}).get("records_per_sec"), plan.rate_explicit)
    if fixed_rate != plan.perf_rate:
        pb.say(f"[perf] the cluster took only {warm['direct']['records_per_sec']:,.0f} records/s direct in the warm-up: "
               f"the fixed-rate runs use {fixed_rate:,}/s instead of {plan.perf_rate:,}/s (--rate to choose)")
    plan = Plan(**{**plan.__dict__, "perf_rate": fixed_rate})
    fixed_records = plan.perf_rate * plan.perf_rate_seconds
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        kind: {n: [] for n in names} for kind in ("max", "fixed", "consume")}
    for r in range(plan.rounds):
        order = rotated(names, r)
        for name in order:
            pb.say(f"[perf] round {r + 1}: {name}: ProducerPerformance max throughput, {max_records:,} records")
            target = by_name[name]
            run = attempt(name, "ProducerPerformance", lambda t=target: measure(t, lambda: pb.producer_performance(
                libs, work, t.bootstrap or "", topic, max_records, -1, None)))
            if run is None:
                continue
            run["cpu_us_per_record"] = run["proxy_cpu_s"] / run["records"] * 1e6
            runs["max"][name].append(run)
        for name in order:
            pb.say(f"[perf] round {r + 1}: {name}: ProducerPerformance {plan.perf_rate:,} records/s for "
                   f"{plan.perf_rate_seconds}s")
            target = by_name[name]
            run = attempt(name, "ProducerPerformance at a fixed rate", lambda t=target: measure(
                t, lambda: pb.producer_performance(libs, work, t.bootstrap or "", topic, fixed_records, plan.perf_rate,
                                                   None)))
            if run is not None:
                runs["fixed"][name].append(run)
        for name in order:
            pb.say(f"[perf] round {r + 1}: {name}: ConsumerPerformance {plan.consume_records:,} records")
            target = by_name[name]
            group = f"peers-bench-{name}-{r}-{time.monotonic_ns()}"
            run = attempt(name, "ConsumerPerformance", lambda t=target, g=group: measure(
                t, lambda: consumer_performance(libs, work, t.bootstrap or "", consume_topic, plan.consume_records, g)))
            if run is None:
                continue
            run["cpu_ms_per_mib"] = run["proxy_cpu_s"] * 1000 / run["mb"] if run["mb"] else float("nan")  # the tool's MB are MiB
            runs["consume"][name].append(run)

    def col(kind: str, name: str, key: str) -> list[float]:
        return [float(run[key]) for run in runs[kind][name]]

    out: dict[str, Any] = {"max_records": max_records, "fixed_rate": plan.perf_rate, "warmup": warm, "runs": runs,
                           "targets": {}}
    produce_rows, consume_rows = [], []
    for name in names:
        thr = col("max", name, "records_per_sec")
        vs_direct = ratios(thr, col("max", "direct", "records_per_sec")) if "direct" in names else []
        p99 = col("fixed", name, "p99_ms")
        p99_added = [a - b for a, b in zip(p99, col("fixed", "direct", "p99_ms"), strict=False)] \
            if "direct" in names else []
        p50_added = [a - b for a, b in zip(col("fixed", name, "p50_ms"), col("fixed", "direct", "p50_ms"),
                                           strict=False)] if "direct" in names else []
        cpu = col("max", name, "cpu_us_per_record")
        produce_rows.append((name, spread(thr), spread(col("max", name, "mb_per_sec")), spread(vs_direct), spread(cpu),
                             spread(col("fixed", name, "p50_ms")), spread(p99),
                             "" if name == "direct" else spread(p50_added), "" if name == "direct" else spread(p99_added),
                             spread(col("fixed", name, "records_per_sec"))))
        cthr = col("consume", name, "fetch_mb_per_sec")
        c_vs = ratios(cthr, col("consume", "direct", "fetch_mb_per_sec")) if "direct" in names else []
        consume_rows.append((name, spread(col("consume", name, "mb_per_sec")), spread(cthr), spread(c_vs),
                             spread(col("consume", name, "rebalance_ms")), spread(col("consume", name, "cpu_ms_per_mib"))))
        out["targets"][name] = {
            "records_per_sec": summary(thr), "vs_direct": summary(vs_direct), "cpu_us_per_record": summary(cpu),
            "p50_ms": summary(col("fixed", name, "p50_ms")), "p99_ms": summary(p99),
            "p50_added_ms": summary(p50_added), "p99_added_ms": summary(p99_added),
            "consume_fetch_mb_per_sec": summary(cthr), "consume_vs_direct": summary(c_vs),
        }
    pb.table(f"3a. ProducerPerformance, 1 KiB records, acks=all, 3 partitions RF 3: max throughput "
             f"({max_records:,} records) and {plan.perf_rate:,} records/s for {plan.perf_rate_seconds}s; median "
             f"(min..max) of {plan.rounds} round(s)",
             ("target", "max rec/s", "max MiB/s", "vs direct", "proxy CPU us/record", f"p50 ms @{plan.perf_rate}",
              f"p99 ms @{plan.perf_rate}", "p50 added", "p99 added", "achieved rec/s"), produce_rows)
    pb.table(f"3b. ConsumerPerformance, {plan.consume_records:,} records of 1 KiB, 3 partitions, a new group each run; "
             f"median (min..max) of {plan.rounds} round(s)",
             ("target", "MiB/s (incl. join)", "fetch MiB/s", "fetch vs direct", "rebalance ms", "proxy CPU ms/MiB"),
             consume_rows)
    if any(summary(col("fixed", n, "records_per_sec"))["median"] < 0.9 * plan.perf_rate for n in names):
        pb.say(f"[perf] note: some runs sustained less than 90% of {plan.perf_rate:,} records/s: their latencies are "
               "a saturated cluster's")
    results["perf"] = out


def api_versions_frame() -> bytes:
    return bytes(pb.request_frame(ApiKey.API_VERSIONS, 2, b""))


def open_connections(port: int, count: int, chunk: int = 50) -> list[socket.socket]:
    """`count` connections to 127.0.0.1:`port`, each of which sent one ApiVersions v2 and read its answer."""
    frame = api_versions_frame()
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < count:
            batch_socks = []
            for _ in range(min(chunk, count - len(sockets))):
                s = socket.create_connection(("127.0.0.1", port), timeout=60)
                sockets.append(s)
                batch_socks.append(s)
                s.sendall(frame)
            for s in batch_socks:
                (size,) = struct.unpack(">i", _read_exact(s, 4))
                body = _read_exact(s, size)
                _, payload = split_response(body, ApiKey.API_VERSIONS, 2)
                if len(payload) < 2 or struct.unpack_from(">h", payload)[0] != 0:
                    raise RuntimeError("ApiVersions failed")
        return sockets
    except BaseException:
        for s in sockets:
            s.close()
        raise


def _read_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise RuntimeError("connection closed")
        buf += chunk
    return bytes(buf)


def section_memory(targets: Sequence[Target], plan: Plan, results: dict[str, Any]) -> None:
    n = plan.connections
    out: dict[str, Any] = {}
    rows: list[tuple[object, ...]] = []
    for target in targets:
        if not target.pids() or target.name in BROKEN:
            continue
        idle = tree_memory(target.pids())
        pb.say(f"[memory] {target.name}: idle RSS {idle['rss_mib']:.1f} MiB; opening {n} connections")
        try:
            t0 = time.monotonic()
            sockets = open_connections(target.ports[1], n)
            opened = time.monotonic() - t0
        except Exception as exc:
            pb.say(f"[memory] {target.name}: opening {n} connections failed: {exc!r}")
            out[target.name] = {"idle": idle, "error": repr(exc)}
            rows.append((target.name, idle["rss_mib"], idle["pss_mib"], "-", "-", "-", "-", "-", "failed"))
            continue
        try:
            time.sleep(2)
            loaded = tree_memory(target.pids())
        finally:
            for s in sockets:
                s.close()
        time.sleep(2)
        after = tree_memory(target.pids())
        per_conn = (loaded["rss_mib"] - idle["rss_mib"]) * 1024 / n
        per_conn_pss = (loaded["pss_mib"] - idle["pss_mib"]) * 1024 / n
        rows.append((target.name, idle["rss_mib"], idle["pss_mib"], loaded["rss_mib"], loaded["pss_mib"], per_conn,
                     per_conn_pss, loaded["processes"], after["rss_mib"]))
        out[target.name] = {"idle": idle, "with_connections": loaded, "after_close": after,
                            "rss_kib_per_connection": per_conn, "pss_kib_per_connection": per_conn_pss,
                            "open_seconds": opened}
    pb.table(f"4. Memory (MiB; RSS summed over the proxy's processes, PSS from smaps_rollup): idle, and with {n:,} "
             "client connections open to broker 1's port, each of which sent one ApiVersions v2 and read its answer",
             ("target", "idle RSS", "idle PSS", f"RSS {n} conns", f"PSS {n} conns", "RSS KiB/conn", "PSS KiB/conn",
              "processes", "RSS after close"), rows)
    results["memory"] = {"connections": n, "kind": "ApiVersions v2 answered on each", "targets": out}


# ---------------------------------------------------------------------------------------------- goals
def goal_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Issue 13's goals for insync-proxy: (goal, measured, target, verdict); 'n/a' where a number is missing."""
    rows: list[tuple[str, str, str, str]] = []
    me = "insync-proxy"
    produce = results.get("produce", {})
    if me in produce:
        cpu = produce[me]["cpu_us_per_request"]["median"]
        rows.append(("Produce 16 KiB, proxy CPU per request", f"{number(cpu)} us", "<= 50 us",
                     verdict(cpu, lambda v: v <= GOALS["produce_cpu_us_per_request_max"])))
        for peer in COMPILED_PEERS:
            other = produce.get(peer, {}).get("cpu_us_per_request", {}).get("median")
            rows.append((f"Produce CPU/request below {peer}", f"{number(cpu)} vs {number(other or float('nan'))} us",
                         "below", verdict(other, lambda v: cpu < v)))
        relay = produce.get("relay", {}).get("cpu_us_per_request", {}).get("median")
        ratio = cpu / relay if relay else None
        rows.append(("Produce CPU/request vs relay", f"{number(ratio or float('nan'))}x", "<= 1.3x",
                     verdict(ratio, lambda v: v <= GOALS["produce_cpu_vs_relay_max"])))
    fetch = results.get("fetch", {}).get("targets", {})
    if me in fetch:
        vs_relay = fetch[me]["vs_relay"]["median"] if fetch[me]["vs_relay"]["n"] else None
        rows.append(("Fetch throughput vs relay", f"{number(vs_relay or float('nan'))}x", ">= 0.9x",
                     verdict(vs_relay, lambda v: v >= GOALS["fetch_throughput_vs_relay_min"])))
        cpu_vs = fetch[me]["cpu_vs_relay"]["median"] if fetch[me]["cpu_vs_relay"]["n"] else None
        rows.append(("Fetch CPU per MiB vs relay", f"{number(cpu_vs or float('nan'))}x", "<= 1.3x",
                     verdict(cpu_vs, lambda v: v <= GOALS["fetch_cpu_vs_relay_max"])))
        mine = fetch[me]["mib_per_sec"]["median"]
        for peer in COMPILED_PEERS:
            other = fetch.get(peer, {}).get("mib_per_sec", {}).get("median")
            rows.append((f"Fetch throughput above {peer}", f"{number(mine)} vs {number(other or float('nan'))} MiB/s",
                         "above", verdict(other, lambda v: mine > v)))
    perf = results.get("perf", {}).get("targets", {})
    if me in perf:
        ratio = perf[me]["vs_direct"]["median"] if perf[me]["vs_direct"]["n"] else None
        rows.append(("ProducerPerformance max throughput vs direct", f"{number(ratio or float('nan'))}",
                     ">= 0.95", verdict(ratio, lambda v: v >= GOALS["perf_throughput_ratio_min"])))
        added = perf[me]["p99_added_ms"]["median"] if perf[me]["p99_added_ms"]["n"] else None
        rate = results.get("perf", {}).get("fixed_rate", 0)
        direct_p50 = perf.get("direct", {}).get("p50_ms", {}).get("median")
        saturated = direct_p50 is not None and direct_p50 > GOALS["saturated_direct_p50_ms"]
        rows.append((f"ProducerPerformance p99 added at {rate:,}/s",
                     f"{'-' if added is None else f'{added:+.1f}'} ms", "<= 1 ms",
                     f"n/a: saturated (direct p50 {direct_p50:.0f} ms)" if saturated
                     else verdict(added, lambda v: v <= GOALS["perf_p99_added_ms_max"])))
    memory = results.get("memory", {})
    mem = memory.get("targets", {}).get(me)
    if mem:
        loaded = mem.get("with_connections", {}).get("rss_mib")
        rows.append((f"RSS with {memory.get('connections', 0):,} client connections", f"{number(loaded or float('nan'))} MiB",
                     "<= 64 MiB", verdict(loaded, lambda v: v <= GOALS["rss_with_connections_mib_max"])))
    return rows


def per_round(runs: Sequence[dict[str, Any]], key: str) -> dict[int, float]:
    return {int(r["round"]): float(r[key]) for r in runs}


def goal_rows_37(results: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Issue 37's goals: CPU per Produce request against the relay (both loads), the better compiled peer and
    the audit off, each a median of per-round ratios (the same round's runs)."""
    rows: list[tuple[str, str, str, str]] = []
    me = "insync-proxy"
    loads = [("saturating", results.get("produce", {}))]
    if "produce_fixed_rate" in results:
        rate = results["produce_fixed_rate"]["requests_per_sec"]
        loads.append((f"{rate:,}/s", results["produce_fixed_rate"]["targets"]))
    for load, targets in loads:
        if me not in targets:
            continue
        mine = per_round(targets[me]["runs"], "cpu_us_per_request")

        def against(others: Sequence[str], targets: dict[str, Any] = targets, mine: dict[int, float] = mine
                    ) -> list[float]:
            """Per round: mine / the smallest of `others` that ran in that round."""
            theirs: dict[int, list[float]] = {}
            for other in others:
                for r, v in per_round(targets.get(other, {}).get("runs", []), "cpu_us_per_request").items():
                    theirs.setdefault(r, []).append(v)
            return [mine[r] / min(v) for r, v in theirs.items() if r in mine and min(v) > 0]

        vs_relay = summary(against(["relay"]))["median"]
        rows.append((f"Produce CPU/request vs relay ({load})", f"{number(vs_relay)}x", "<= 1.5x",
                     verdict(vs_relay, lambda v: v <= GOALS_37["produce_cpu_vs_relay_max"])))
        if load == "saturating":
            vs_peer = summary(against(COMPILED_PEERS))["median"]
            rows.append(("Produce CPU/request vs the better peer", f"{number(vs_peer)}x", "<= 0.7x",
                         verdict(vs_peer, lambda v: v <= GOALS_37["produce_cpu_vs_best_peer_max"])))
        if AUDIT_OFF in targets:
            vs_off = summary(against([AUDIT_OFF]))["median"]
            rows.append((f"Produce CPU/request audit on vs off ({load})", f"{number(vs_off)}x", "<= 1.05x",
                         verdict(vs_off, lambda v: v <= GOALS_37["audit_on_vs_off_max"])))
    return rows


def print_goals(results: dict[str, Any]) -> None:
    rows = goal_rows(results)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    if rows:
        pb.table(f"Goals of issue 13 for insync-proxy (load average now {load}, {os.cpu_count()} shared cores)",
                 ("goal", "measured", "target", "result"), rows)
    results["goal_rows"] = rows
    rows_37 = goal_rows_37(results)
    if rows_37:
        pb.table(f"Goals of issue 37 for insync-proxy (load average now {load})", ("goal", "measured", "target",
                                                                                  "result"), rows_37)
    results["goal_rows_37"] = rows_37


# ---------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Targets: " + ", ".join(TARGETS) + ". Sections: " + ", ".join(SECTIONS)
        + ". Full details: the module docstring and docs/performance.md.")
    parser.add_argument("--quick", action="store_true", help="one round, shorter runs, a 100 MiB Fetch partition")
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset (default: all)")
    parser.add_argument("--targets", default=",".join(TARGETS),
                        help="comma-separated subset (default: all; direct is always useful as the baseline)")
    parser.add_argument("--rounds", type=int, help="rounds per section (default 3, 1 with --quick)")
    parser.add_argument("--fetch-mib", type=int, help="size of the Fetch partition (default 300, 100 with --quick)")
    parser.add_argument("--rate", type=int, help="records/s of section 3's fixed-rate runs (default 5000, lowered to "
                                                 "half the cluster's direct max throughput when that is less)")
    parser.add_argument("--connections", type=int, help="client connections of the memory section (default 1000)")
    parser.add_argument("--produce-rate", type=int, help="requests/s of the produce section's fixed-rate load "
                                                         "(default 2000; 0: the saturating load only)")
    parser.add_argument("--baseline", type=Path, action="append", default=[],
                        help="another checkout of insync-proxy (built as it should be measured: ./scripts/compile "
                             "there) as a target of its own (repeatable)")
    parser.add_argument("--audit-off", action="store_true", help="also this checkout's insync-proxy with the audit "
                                                                 "off (insync-proxy-no-audit)")
    parser.add_argument("--kafka-proxy-bin", default=str(PEERS_DIR / "kafka-proxy"),
                        help="grepplabs kafka-proxy binary (default: %(default)s)")
    parser.add_argument("--kafka-proxy-src", help="its source tree: built with `go build -mod=vendor` into "
                                                  "--kafka-proxy-bin when that is missing")
    parser.add_argument("--kroxylicious-dir", default=str(PEERS_DIR / "kroxylicious"),
                        help="where the runtime's jars (Maven) and the compiled launcher go (default: %(default)s)")
    parser.add_argument("--kroxylicious-version", default=KROXYLICIOUS_VERSION, help="default: %(default)s")
    parser.add_argument("--kroxylicious-heap", default="256m", help="-Xms/-Xmx of the Kroxylicious JVM "
                                                                  "(default: %(default)s)")
    parser.add_argument("--socat-bin", help="socat binary (default: from PATH; apt-get install socat when missing)")
    parser.add_argument("--no-install", action="store_true", help="never apt-get install socat")
    parser.add_argument("--output", type=Path, default=ROOT / "bench-results", help="directory of the JSON summary")
    parser.add_argument("--produce-version", type=int, default=pb.PRODUCE_VERSION,
                        help=f"Produce version of the raw load (default {pb.PRODUCE_VERSION}, the Java client 4.0's)")
    args = parser.parse_args(argv)
    pb.PRODUCE_VERSION = args.produce_version
    for option, allowed in (("sections", SECTIONS), ("targets", TARGETS)):
        chosen = [s.strip() for s in getattr(args, option).split(",") if s.strip()]
        unknown = set(chosen) - set(allowed)
        if unknown:
            parser.error(f"unknown {option} {', '.join(sorted(unknown))}; use {', '.join(allowed)}")
        setattr(args, option, [s for s in allowed if s in chosen])
    return args


def raise_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, wanted) if hard != resource.RLIM_INFINITY else wanted,
                                                    hard))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    overrides: dict[str, Any] = {k: v for k, v in (("rounds", args.rounds), ("fetch_mib", args.fetch_mib),
                                                   ("connections", args.connections)) if v}
    if args.produce_rate is not None:
        overrides["produce_rate"] = args.produce_rate
    if args.rate:
        overrides.update(perf_rate=args.rate, rate_explicit=True)
    plan = Plan(**{**plan.__dict__, **overrides})
    raise_fd_limit(plan.connections * 3 + 4096)
    signal.signal(signal.SIGTERM, pb._terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    skipped: dict[str, str] = {}
    results: dict[str, Any] = {
        "started_utc": stamp, "mode": "quick" if args.quick else "full", "plan": plan.__dict__,
        "produce_version": pb.PRODUCE_VERSION,
        "sections": args.sections, "requested_targets": args.targets, "skipped": skipped, "dropped": BROKEN,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_at_start": os.getloadavg()},
        "goals": GOALS,
    }
    work = Path(tempfile.mkdtemp(prefix="insync-proxy-peers-bench-"))
    cluster: LocalKafkaCluster | None = None
    running: list[Target] = []
    code = 0
    try:
        targets = prepare_targets(args, args.targets, skipped)
        cluster = LocalKafkaCluster(ClusterSettings())
        cluster.start()
        results["kafka_version"] = cluster.version
        running = start_targets(targets, cluster, work, skipped)
        results["targets"] = {t.name: {"description": t.description, "ports": t.ports, "bootstrap": t.bootstrap}
                              for t in running}
        results["rss_at_start_mib"] = {t.name: tree_memory(t.pids())["rss_mib"] for t in running if t.pids()}
        pb.say(f"targets: {', '.join(t.name for t in running)}; load average "
               f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        if any(s in args.sections for s in ("produce", "roundtrip", "fetch")):
            warm_up(running, cluster, plan)
        runners: dict[str, Callable[[], None]] = {
            "produce": lambda: section_produce(running, cluster, plan, results),
            "roundtrip": lambda: section_roundtrip(running, cluster, plan, results),
            "fetch": lambda: section_fetch(running, cluster, plan, results),
            "perf": lambda: section_perf(running, cluster, plan, work, results),
            "memory": lambda: section_memory(running, plan, results),
        }
        for name in args.sections:
            t0 = time.monotonic()
            runners[name]()
            results.setdefault("section_seconds", {})[name] = round(time.monotonic() - t0, 1)
            for t in running:
                if isinstance(t, ExternalTarget | InsyncProxy) and len(t.pids()) < len(getattr(t, "procs", [0])) \
                        and t.name not in BROKEN:
                    BROKEN[t.name] = f"its process exited during section {name}"
                    print(f"dropped {t.name}: its process exited during section {name}", flush=True)
        for name, reason in skipped.items():
            print(f"skipped {name}: {reason}", flush=True)
        for name, reason in BROKEN.items():
            print(f"dropped {name} during the run: {reason}", flush=True)
        print_goals(results)
    except KeyboardInterrupt:
        pb.say("interrupted: stopping the targets and the cluster")
        results["interrupted"] = True
        code = 130
    except Exception as exc:
        pb.say(f"benchmark failed: {exc!r}")
        for target in running:
            tail = target.log_tail()
            if tail:
                pb.say(f"{target.name} log tail:\n{tail}")
        results["error"] = repr(exc)
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        CHILDREN.kill_all()
        for target in running:
            try:
                target.stop()
            except Exception as exc:  # keep stopping the rest
                pb.say(f"stopping {target.name}: {exc!r}")
        if cluster is not None:
            cluster.stop()
            cluster.cleanup()
        shutil.rmtree(work, ignore_errors=True)
        results["total_seconds"] = round(time.monotonic() - started, 1)
        out = write_summary(results, args.output, "peers-bench", stamp)
        pb.say(f"wrote {out} (total {results['total_seconds']:.0f}s)")
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return code


if __name__ == "__main__":
    sys.exit(main())
