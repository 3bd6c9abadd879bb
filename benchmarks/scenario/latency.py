"""The added latency: Kafka's Java producer (benchmarks/java/LatencyProducer.java: acks=all, linger.ms=0, one
request in flight) once through the proxy and once straight to the brokers, at the same rate; each prints a
histogram of 2 % buckets every second, read here into the findings."""

from __future__ import annotations

import re
import subprocess
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from benchmarks.scenario.clock import Clock, end_process
from benchmarks.scenario.cluster import ScenarioCluster
from benchmarks.scenario.credentials import RunCertificates, Users
from benchmarks.scenario.findings import Findings
from benchmarks.scenario.proxy import ROOT, ScenarioProxy
from benchmarks.scenario.topics import LATENCY_TOPIC
from insync_proxy.devcluster.cluster import _die_with_parent

LATENCY_SOURCE = ROOT / "benchmarks" / "java" / "LatencyProducer.java"
#: LatencyProducer's buckets: bucket b holds [LATENCY_BUCKET_BASE**b, LATENCY_BUCKET_BASE**(b+1)) microseconds.
LATENCY_BUCKET_BASE = 1.02
KINDS = ("direct", "proxy")


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


class LatencyProducers:
    """LatencyProducer both ways at `rate` records a second (0: half its maximum, measured directly at the start).
    The direct one presents a client certificate and starts again with a new one after a CA change."""

    def __init__(self, work: Path, cluster: ScenarioCluster, proxy: ScenarioProxy, users: Users,
                 pki: RunCertificates, clock: Clock, found: Findings, stop: threading.Event, rate: float) -> None:
        self.work, self.cluster, self.proxy, self.users, self.pki = work, cluster, proxy, users, pki
        self.clock, self.found, self.stop_event = clock, found, stop
        #: LatencyProducer's records a second (0: half its maximum, measured at the start) and that maximum
        self.rate = rate
        self.max = 0.0
        self.processes: list[subprocess.Popen[Any]] = []

    def client(self) -> Any:
        """LatencyProducer compiled against the old Kafka's clients (harness/java_client.JavaClient)."""
        if not hasattr(self, "_client"):
            from harness.java_client import JavaClient

            self._client = JavaClient(self.cluster.old_version, source=LATENCY_SOURCE)
        return self._client

    def properties(self, kind: str) -> Path:
        """Through the proxy: SASL_SSL trusting the proxy's CAs. Directly: SASL_SSL to the brokers, whose listener
        asks for a client certificate (a PEM keystore of the direct client's key and certificate of the moment)."""
        if kind == "proxy":
            return self.proxy.java_client_properties("latency-proxy.properties")
        keystore = self.work / "latency-direct-keystore.pem"
        keystore.write_bytes(self.pki.direct_key.read_bytes() + self.pki.direct_cert.read_bytes())
        path = self.work / "latency-direct.properties"
        path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                        f"ssl.truststore.type=PEM\nssl.truststore.location={self.pki.upstream_ca}\n"
                        f"ssl.keystore.type=PEM\nssl.keystore.location={keystore}\n" + self.users.client_jaas())
        return path

    def bootstrap(self, kind: str) -> str:
        return self.proxy.bootstrap if kind == "proxy" else ",".join(self.cluster.upstream_servers())

    def choose_rate(self, seconds: float) -> None:
        """Half the maximum, measured for `seconds`, unless a rate was given."""
        if not self.rate:
            self.max = self.measure_max(seconds)
            self.rate = max(1.0, round(self.max / 2))

    def measure_max(self, seconds: float) -> float:
        """The records a second LatencyProducer acknowledges one at a time, directly."""
        out = subprocess.run(
            self.client().command(self.bootstrap("direct"), LATENCY_TOPIC, "0", "0", str(seconds),
                                  str(self.properties("direct"))),
            capture_output=True, text=True, timeout=seconds + 180, stdin=subprocess.DEVNULL)
        found = re.search(r"^MAX ([0-9.]+)", out.stdout, re.M)
        if out.returncode != 0 or not found:
            raise RuntimeError(f"LatencyProducer's maximum could not be measured: {out.stdout[-500:]}{out.stderr[-1500:]}")
        return float(found.group(1))

    def run(self, kind: str) -> None:
        """LatencyProducer through the proxy or directly at self.rate, its histograms read every second.
        The direct one starts again with a new client certificate after a CA change; either starts again if it
        exits on its own (counted)."""
        log = open(self.work / f"latency-{kind}.log", "ab")  # noqa: SIM115 - closed below
        try:
            while not self.stop_event.is_set():
                generation = self.pki.direct_generation
                process = subprocess.Popen(
                    self.client().command(self.bootstrap(kind), LATENCY_TOPIC, "0", str(self.rate), "0",
                                          str(self.properties(kind))),
                    stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                    preexec_fn=_die_with_parent)
                self.processes.append(process)
                reader = threading.Thread(target=self._read, args=(kind, process.stdout), daemon=True)
                reader.start()
                while (not self.stop_event.wait(0.5) and process.poll() is None
                       and (kind != "direct" or generation == self.pki.direct_generation)):
                    pass
                if process.poll() is not None and not self.stop_event.is_set():
                    self.found.latency_restarts[kind] += 1
                end_process(process, 30)
                reader.join(10)
        finally:
            log.close()

    def _read(self, kind: str, stream: IO[str]) -> None:
        out = self.found.latency[kind]
        for line in stream:
            parts = line.split()
            if len(parts) < 3 or parts[0] != "H":
                continue
            self.found.latency_errors[kind] += int(parts[2])
            counts = {int(b): int(c) for b, c in (p.split(":") for p in parts[3:])}
            if counts:
                out.append((self.clock.now(), counts))

    def threads(self) -> list[threading.Thread]:
        return [threading.Thread(target=self.run, args=(kind,), daemon=True) for kind in ("proxy", "direct")]
