"""`insync-proxy chaos`: Kafka's own VerifiableProducer through the proxy while brokers are killed and restarted.

1. A local 3-broker cluster of its own (it kills brokers; or a running cluster handed to ChaosRun, which is
   left running: the test suite's shared one) and a topic with replication factor 3 and
   min.insync.replicas=2; the proxy (`insync-proxy run`, a separate process) in front of it.
2. org.apache.kafka.tools.VerifiableProducer (idempotent, acks=all, retries until delivery.timeout.ms)
   writes sequential values through the proxy and reports every acknowledged record.
3. Each bounce SIGKILLs one broker (round robin), waits until every partition's ISR has dropped it,
   starts it again, waits until the ISR is full again and the producer has acknowledged more records.
4. The producer stops (flushing what it holds); GetOffsetShell counts the records in the log (the sum of the
   end offsets) and Kafka's ConsoleConsumer reads that many back from the beginning through the proxy.
   Lost = acknowledged values never read; duplicates = values read twice.

Nothing here runs inside the proxy: the CLI imports this module only for `insync-proxy chaos`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from insync_proxy.devcluster.cluster import (
    ClusterError,
    ClusterSettings,
    LocalKafkaCluster,
    _die_with_parent,
    free_ports,
)
from insync_proxy.devcluster.distribution import kafka_libs
from insync_proxy.devcluster.kafka_tools import java_command, tool_class, write_log_configuration

TOPIC = "chaos"
PARTITIONS = 3

_PRODUCER_CONFIG = """\
enable.idempotence=true
acks=all
max.in.flight.requests.per.connection=5
retries=2147483647
delivery.timeout.ms=180000
request.timeout.ms=15000
linger.ms=5
"""


class ChaosError(RuntimeError):
    """The chaos run could not be carried out (not: records were lost, which is a result)."""


@dataclass
class ChaosResult:
    bounces: int
    acked: int
    consumed: int
    lost: int
    duplicates: int
    send_errors: int
    seconds: float
    lost_examples: list[int] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [
            f"bounces:     {self.bounces}",
            f"acked:       {self.acked}",
            f"consumed:    {self.consumed}",
            f"lost:        {self.lost}" + (f" (e.g. values {self.lost_examples})" if self.lost_examples else ""),
            f"duplicates:  {self.duplicates}",
            f"send errors: {self.send_errors} (records the producer gave up on: never acknowledged, not lost)",
            f"duration:    {self.seconds:.0f}s",
        ]
        return out


class ProducerReport:
    """Reads VerifiableProducer's JSON lines in a thread: acknowledged values and errors."""

    def __init__(self, stream: IO[str]) -> None:
        self.acked: list[int] = []
        self.errors = 0
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            name = event.get("name")
            if name == "producer_send_success":
                self.acked.append(int(event["value"]))
            elif name == "producer_send_error":
                self.errors += 1
        self.done.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def _free_port_base(span: int) -> int:
    """A base port with base+1 .. base+span free (the proxy's per-broker ports)."""
    for _ in range(200):
        base = random.randrange(20000, 60000, 10)
        ok = True
        for port in range(base + 1, base + span + 1):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise ChaosError("no free port range for the proxy's broker listeners")


def _get_offset_shell(libs: Path) -> tuple[str, str]:
    """GetOffsetShell's class and server flag: org.apache.kafka.tools' (3.5+) takes --bootstrap-server, kafka.tools'
    (older) --broker-list."""
    main = tool_class(libs, "get-offsets")
    return main, "--bootstrap-server" if main.startswith("org.apache.kafka.tools.") else "--broker-list"


class ChaosRun:
    def __init__(
        self,
        bounces: int,
        version: str | None = None,
        throughput: int = 300,
        say: Callable[[str], None] | None = None,
        work_dir: Path | None = None,
        cluster: LocalKafkaCluster | None = None,
    ) -> None:
        """`cluster`: a running cluster to bounce instead of starting one of its own; it is left running, with
        every broker back, and the run writes to a topic of its own name (chaos-<random>)."""
        self.bounces = bounces
        self.version = cluster.version if cluster is not None else version
        self.throughput = throughput
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.dir = work_dir or Path(tempfile.mkdtemp(prefix="insync-chaos-"))
        self.given_cluster = cluster
        self.topic = TOPIC if cluster is None else f"{TOPIC}-{uuid.uuid4().hex[:8]}"
        self.cluster: LocalKafkaCluster | None = None
        self.proxy: subprocess.Popen[bytes] | None = None
        self.producer: subprocess.Popen[str] | None = None

    # ------------------------------------------------------------------ processes
    def _java(self, main: str, *args: str) -> list[str]:
        assert self.cluster is not None and self.cluster.libs is not None
        return java_command(self.cluster.libs, main, args, self.dir)

    def _start_proxy(self, cluster: LocalKafkaCluster) -> str:
        bootstrap_port, admin_port = free_ports(2)
        base = _free_port_base(len(cluster.brokers))
        log = open(self.dir / "proxy.log", "ab")  # noqa: SIM115 - the child keeps it
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "insync_proxy", "run", "--bootstrap-servers", cluster.bootstrap_servers,
             "--bootstrap-port", str(bootstrap_port), "--broker-port-base", str(base),
             "--admin-port", str(admin_port), "--no-audit", "--proxy-id", "chaos"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()

        def ready() -> bool:
            assert self.proxy is not None
            if self.proxy.poll() is not None:
                raise ChaosError(f"the proxy exited with {self.proxy.returncode}; see {self.dir / 'proxy.log'}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=2) as r:
                    return bool(r.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        cluster.wait_for(ready, 60, "the proxy to be ready")
        return f"127.0.0.1:{bootstrap_port}"

    def _start_producer(self, bootstrap: str) -> ProducerReport:
        (self.dir / "producer.properties").write_text(_PRODUCER_CONFIG)
        stderr = open(self.dir / "producer.log", "ab")  # noqa: SIM115 - the child keeps it
        self.producer = subprocess.Popen(
            self._java(
                "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", bootstrap, "--topic", self.topic,
                "--acks", "-1", "--max-messages", "-1", "--throughput", str(self.throughput),
                "--producer.config", str(self.dir / "producer.properties"),
            ),
            stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True,
            preexec_fn=_die_with_parent,
        )
        stderr.close()
        assert self.producer.stdout is not None
        return ProducerReport(self.producer.stdout)

    def _stop_producer(self, report: ProducerReport) -> None:
        assert self.producer is not None
        # SIGTERM: VerifiableProducer's shutdown hook closes the producer, which delivers what it holds.
        self.producer.send_signal(signal.SIGTERM)
        try:
            self.producer.wait(240)
        except subprocess.TimeoutExpired:
            self.producer.kill()
            self.producer.wait(30)
        report.join(30)

    def _log_end_offsets(self) -> int:
        """The records in the topic: the sum of its partitions' log end offsets (Kafka's GetOffsetShell, asked
        of the brokers directly). A fresh topic written without transactions: one offset per record."""
        assert self.cluster is not None and self.cluster.libs is not None
        main, server_flag = _get_offset_shell(self.cluster.libs)
        result = subprocess.run(
            self._java(main, server_flag, self.cluster.bootstrap_servers, "--topic", self.topic, "--time", "-1"),
            capture_output=True, stdin=subprocess.DEVNULL, text=True, preexec_fn=_die_with_parent, timeout=180,
        )
        offsets = [int(line.rsplit(":", 1)[1]) for line in result.stdout.splitlines()
                   if line.startswith(f"{self.topic}:") and line.rsplit(":", 1)[1].isdigit()]
        if result.returncode != 0 or len(offsets) != PARTITIONS:
            raise ChaosError(f"GetOffsetShell gave {len(offsets)} of {PARTITIONS} partitions' end offsets "
                             f"(exit {result.returncode}): {result.stderr.strip()[-500:]}")
        return sum(offsets)

    def _consume(self, bootstrap: str, records: int) -> Counter[int]:
        """Every value of the topic, read from the beginning through the proxy by Kafka's ConsoleConsumer: it
        stops after `records` values (the whole log), or after 20 s without a new one (a stalled read)."""
        assert self.cluster is not None and self.cluster.libs is not None
        args = ["--bootstrap-server", bootstrap, "--topic", self.topic, "--from-beginning", "--timeout-ms", "20000",
                "--max-messages", str(records), "--group", f"chaos-check-{os.getpid()}-{time.monotonic_ns()}"]
        with open(self.dir / "consumer.log", "ab") as stderr:
            result = subprocess.run(
                self._java(tool_class(self.cluster.libs, "console-consumer"), *args),
                stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True,
                preexec_fn=_die_with_parent, timeout=600 + records / 500,
            )
        values: Counter[int] = Counter()
        for line in result.stdout.splitlines():
            line = line.strip()
            if line.isdigit():
                values[int(line)] += 1
        return values

    # ------------------------------------------------------------------ the run
    def run(self) -> ChaosResult:
        started = time.monotonic()
        write_log_configuration(self.dir)
        kafka_libs(self.version)  # fetched before anything starts (first run only)
        self.cluster = cluster = self.given_cluster or LocalKafkaCluster(
            ClusterSettings(version=self.version, replica_lag_time_max_ms=5000), progress=self.say
        )
        try:
            if self.given_cluster is None:
                cluster.start()
            cluster.create_topic(self.topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
            bootstrap = self._start_proxy(cluster)
            self.say(f"proxy at {bootstrap}; VerifiableProducer (idempotent, acks=all, "
                     f"{self.throughput} records/s) through it; {self.bounces} bounce(s)")
            report = self._start_producer(bootstrap)
            self._wait_for_progress(report, 0)
            node_ids = sorted(cluster.brokers)
            for bounce in range(self.bounces):
                victim = node_ids[bounce % len(node_ids)]
                self._bounce(victim, report, bounce + 1)
            self._stop_producer(report)
            acked = set(report.acked)
            records = self._log_end_offsets()
            self.say(f"producer stopped: {len(acked)} acknowledged, {records} in the log; "
                     "reading the topic back through the proxy")
            values = self._consume(bootstrap, records)
        finally:
            self._shutdown()
        lost = sorted(acked - set(values))
        return ChaosResult(
            bounces=self.bounces,
            acked=len(acked),
            consumed=sum(values.values()),
            lost=len(lost),
            duplicates=sum(n - 1 for n in values.values() if n > 1),
            send_errors=report.errors,
            seconds=time.monotonic() - started,
            lost_examples=lost[:10],
        )

    def _wait_for_progress(self, report: ProducerReport, since: int, timeout: float = 180.0) -> None:
        """Until the producer has acknowledged records beyond `since` (it is alive and writing)."""
        assert self.cluster is not None
        target = since + max(10, self.throughput // 2)

        def progressed() -> bool:
            if self.producer is not None and self.producer.poll() is not None:
                raise ChaosError(f"VerifiableProducer exited with {self.producer.returncode}; "
                                 f"see {self.dir / 'producer.log'}")
            return len(report.acked) >= target

        self.cluster.wait_for(progressed, timeout, f"the producer to acknowledge {target} records")

    def _bounce(self, victim: int, report: ProducerReport, number: int) -> None:
        assert self.cluster is not None
        cluster = self.cluster
        t0 = time.monotonic()
        cluster.kill_broker(victim)
        for partition in range(PARTITIONS):
            cluster.wait_for_isr(self.topic, partition, 2)
        cluster.start_broker(victim)
        for partition in range(PARTITIONS):
            cluster.wait_for_isr(self.topic, partition, 3)
        self._wait_for_progress(report, len(report.acked))
        self.say(f"bounce {number}/{self.bounces}: broker {victim} killed and back in every ISR "
                 f"({time.monotonic() - t0:.0f}s); {len(report.acked)} acknowledged so far")

    def _shutdown(self) -> None:
        for process in (self.producer, self.proxy):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(40)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)
        if self.cluster is not None and self.given_cluster is None:
            self.cluster.stop()
            self.cluster.cleanup()
        elif self.cluster is not None:  # a cluster we were lent goes back with every broker running
            for node_id, node in self.cluster.brokers.items():
                if not node.alive():
                    self.cluster.start_broker(node_id)


def main(bounces: int, version: str | None, throughput: int) -> int:
    """The `insync-proxy chaos` command: prints the figures; exit 1 when an acknowledged record was lost."""
    run = ChaosRun(bounces, version, throughput)
    try:
        result = run.run()
    except (ChaosError, ClusterError) as exc:
        print(f"insync-proxy chaos: {exc}", file=sys.stderr)
        return 2
    for line in result.lines():
        print(line)
    if result.lost:
        print(f"FAILED: {result.lost} acknowledged record(s) were not read back; logs kept in {run.dir}",
              file=sys.stderr)
        return 1
    shutil.rmtree(run.dir, ignore_errors=True)
    return 0
