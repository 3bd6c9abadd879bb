"""One run of the scenario, composed of one object per concern: the cluster (cluster.py) and the proxy (proxy.py)
with their users and certificates (credentials.py), the topics (topics.py), the clients (clients.py, latency.py),
the samplers (samplers.py), the events (events.py, rotations.py), the oracle (oracle.py) and the report
(report.py). What they see goes to one Findings (findings.py), stamped by one Clock (clock.py)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

from benchmarks.scenario import report
from benchmarks.scenario.clients import Clients
from benchmarks.scenario.clock import Clock, end_process, say, wait_until
from benchmarks.scenario.cluster import NEW_VERSION, OLD_VERSION, ScenarioCluster
from benchmarks.scenario.credentials import RunCertificates, Users
from benchmarks.scenario.events import Events
from benchmarks.scenario.findings import Findings
from benchmarks.scenario.latency import LatencyProducers
from benchmarks.scenario.oracle import Oracle
from benchmarks.scenario.proxy import ScenarioProxy
from benchmarks.scenario.rotations import Rotations
from benchmarks.scenario.samplers import Samplers
from benchmarks.scenario.topics import ACKS2_TOPIC, IDEMPOTENT_TOPIC, PARTITIONS, Topics
from insync_proxy.devcluster.distribution import kafka_libs
from insync_proxy.devcluster.kafka_tools import write_log_configuration


class YearRun:
    """Set-up, the schedule under the clients and samplers, the stop, the oracle: `run()` returns summary.json."""

    def __init__(self, minutes: float, work: Path, *, old_version: str = OLD_VERSION,
                 new_version: str = NEW_VERSION, rate: int = 100, latency_rate: float = 0.0,
                 build: str = "unknown") -> None:
        self.minutes = minutes
        self.seconds = minutes * 60
        self.work = work
        self.build = build
        self.found = Findings()
        self.clock = Clock()
        self.stop_event = threading.Event()
        self.users = Users()
        self.pki: RunCertificates | None = None
        self.old_version, self.new_version = old_version, new_version
        self.rate, self.latency_rate = rate, latency_rate
        self.cluster: ScenarioCluster | None = None
        self.proxy: ScenarioProxy | None = None
        self.clients: Clients | None = None
        self.latency: LatencyProducers | None = None

    def now(self) -> float:
        return self.clock.now()

    def compose(self) -> tuple[ScenarioCluster, ScenarioProxy, Topics]:
        """Every part, wired to the others (certificates are made here: a second or two of openssl)."""
        found, clock, stop, work = self.found, self.clock, self.stop_event, self.work
        self.pki = pki = RunCertificates(work / "pki")
        self.cluster = cluster = ScenarioCluster(work, self.users, pki, clock, found, stop,
                                                 ((IDEMPOTENT_TOPIC, ACKS2_TOPIC), PARTITIONS), self.old_version,
                                                 self.new_version, progress=say)
        self.proxy = proxy = ScenarioProxy(work, cluster, self.users, pki)
        self.clients = Clients(work, cluster, proxy, self.users, clock, found, stop, self.rate)
        self.latency = LatencyProducers(work, cluster, proxy, self.users, pki, clock, found, stop, self.latency_rate)
        return cluster, proxy, Topics(cluster, clock, found, stop)

    def run(self) -> dict[str, Any]:
        write_log_configuration(self.work)
        kafka_libs(self.new_version)  # both versions' jars in place before anything starts
        cluster, proxy, topics = self.compose()
        assert self.pki is not None and self.clients is not None and self.latency is not None
        clients, latency = self.clients, self.latency
        cluster.start()
        try:
            topics.create_all()
            proxy.start()
            latency.choose_rate(5.0 if self.minutes <= 10 else 15.0)
            say(f"latency producers: {latency.rate:.0f} records/s each"
                + (f" (half of {latency.max:.0f}, one at a time directly)" if latency.max else ""))
            self.clock.restart()
            clients.start_verifiable_producer()
            samplers = Samplers(cluster, proxy, topics, self.users, self.clock, self.found, self.stop_event)
            events = Events(cluster, proxy, clients, Rotations(cluster, proxy, self.pki, self.clock, self.found),
                            self.users, self.clock, self.found, self.stop_event, self.minutes)
            threads = [
                *samplers.threads(2.0 if self.minutes > 10 else 1.0),
                *clients.threads(),
                *latency.threads(),
                threading.Thread(target=topics.run_churn, args=(max(6.0, self.seconds / 60),), daemon=True),
            ]
            for thread in threads:
                thread.start()
            started = events.run_schedule()
            self.stop_event.wait(max(0.0, self.seconds - self.now()))
            for thread in started:
                thread.join(600)
            last_end = max((w.end or 0.0 for w in self.found.windows), default=0.0)
            try:  # the clients settle: the group reads again after the last event (its invariant says if not)
                wait_until(lambda: any(t > last_end for t, _ in list(self.found.consumed)), 120,
                           "the consumer group to read after the last event")
            except RuntimeError:
                pass
            self.stop_event.set()
            say("schedule done; stopping the producers")
            clients.stop_verifiable_producer()
            for thread in threads:
                thread.join(60)
            cluster.wait_full_isr(timeout=180)
            oracle = Oracle(cluster, topics, latency, self.found, self.seconds)
            read_back = oracle.read_back()
            verdict = oracle.judge(read_back, self.build, proxy.compiled, self.now())
            return report.summary(
                verdict, read_back, self.found, minutes=self.minutes,
                kafka=f"{self.old_version} -> {self.new_version if cluster.upgraded else self.old_version}",
                mv_bump=cluster.mv_bump, compiled=proxy.compiled, build=self.build)
        finally:
            self.stop_event.set()
            self.shutdown()

    def shutdown(self) -> None:
        children: list[subprocess.Popen[Any] | None] = [
            *(self.clients.processes if self.clients else []), *(self.latency.processes if self.latency else []),
            self.proxy.process if self.proxy else None]
        for process in children:
            if process is not None:
                end_process(process, 40)
        if self.cluster is not None:
            self.cluster.stop()
