"""What the runner watches while the events run: the proxy's process (/proc), its /metrics, /readyz beside an
ApiVersions through it; the brokers' own ISR of the acks=-2 topic (straight to the brokers); the proxy's Metadata
answers, read by the hand-written client (harness/kafka_wire.py) and judged by the oracle as they come."""

from __future__ import annotations

import os
import re
import threading
import urllib.error
from pathlib import Path

from benchmarks.scenario.clock import Clock
from benchmarks.scenario.cluster import ScenarioCluster
from benchmarks.scenario.credentials import SAMPLER_USER, Users
from benchmarks.scenario.findings import Findings, Sample
from benchmarks.scenario.oracle import check_metadata_answer
from benchmarks.scenario.proxy import ScenarioProxy
from benchmarks.scenario.topics import ACKS2_TOPIC, Topics
from harness.kafka_wire import WireConnection, WireError


class Samplers:
    """One thread per sampler, each until `stop` is set."""

    def __init__(self, cluster: ScenarioCluster, proxy: ScenarioProxy, topics: Topics, users: Users, clock: Clock,
                 found: Findings, stop: threading.Event) -> None:
        self.cluster, self.proxy, self.topics, self.users = cluster, proxy, topics, users
        self.clock, self.found, self.stop_event = clock, found, stop

    def monitor(self, interval: float) -> None:
        """RSS, fds, threads of the proxy; /metrics; /readyz and whether the proxy serves an ApiVersions."""
        assert self.proxy.process is not None
        pid = self.proxy.process.pid
        while not self.stop_event.wait(interval):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]
                threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
                fds = len(os.listdir(f"/proc/{pid}/fd"))
            except (OSError, AttributeError):
                self.found.errors.append(f"{self.clock.now():.0f}s: the proxy process is gone")
                return
            ready, _ = self.proxy.readyz()
            can_serve = self.proxy.serves()
            tasks = control = None
            try:
                text = self.proxy.metrics_text()
                control = sum(float(v) for v in re.findall(r"^insync_proxy_control_requests_total\{[^}]*\} (\S+)$",
                                                             text, re.M))
                m = re.search(r"^insync_proxy_(?:asyncio_)?tasks\S* (\S+)$", text, re.M)
                tasks = float(m.group(1)) if m else None
            except (urllib.error.URLError, OSError, ValueError):
                pass
            with open(self.proxy.log, "rb") as f:
                lines = sum(1 for _ in f)
            self.found.samples.append(Sample(self.clock.now(), rss, fds, threads, tasks, ready, can_serve, lines,
                                             control if control is not None else float("nan")))

    def isr(self, interval: float) -> None:
        """The brokers' own ISR of the acks=-2 topic, straight from the brokers (kafka-python, PLAINTEXT)."""
        admin = None
        while not self.stop_event.wait(interval):
            try:
                if admin is None:
                    admin = self.cluster.admin()
                for topic in admin.describe_topics([ACKS2_TOPIC]):
                    for p in topic["partitions"]:
                        if p.get("error_code", 0) == 0 and p["leader"] >= 0:
                            self.found.isr.setdefault((ACKS2_TOPIC, p["partition"]), []).append(
                                (self.clock.now(), len(p["isr"])))
            except Exception:  # noqa: BLE001 - a broker down: the next round asks again
                self.cluster.close_quietly(admin)
                admin = None

    def metadata(self, interval: float) -> None:
        """Metadata v12 through the proxy (hand-written client, SASL PLAIN): tag 637 of every topic the runner
        made against the value it set, and no broker address of the real cluster in the answer."""
        real_ports = self.cluster.real_ports()
        context = self.proxy.client_context()
        while not self.stop_event.wait(interval):
            topics = self.topics.sampled()
            asked = self.clock.now()
            try:
                with WireConnection("127.0.0.1", self.proxy.bootstrap_port, timeout=10, ssl_context=context) as conn:
                    conn.sasl_plain(SAMPLER_USER, self.users.sampler_password)
                    answer = conn.metadata(topics)
            except (OSError, WireError):
                self.found.metadata_failures += 1
                continue
            check_metadata_answer(answer, asked, real_ports, self.topics, self.found)

    def threads(self, interval: float) -> list[threading.Thread]:
        """The proxy every `interval` seconds, the ISRs every 0.5 s, Metadata every 3 s."""
        return [
            threading.Thread(target=self.monitor, args=(interval,), daemon=True),
            threading.Thread(target=self.isr, args=(0.5,), daemon=True),
            threading.Thread(target=self.metadata, args=(3.0,), daemon=True),
        ]
