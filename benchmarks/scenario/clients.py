"""The load through the proxy: Kafka's VerifiableProducer (idempotent, acks=all), kafka-python with acks=-2 one
record at a time, kafka-python with acks=-2 partitioned by the project's KIP-637 partitioner, librdkafka with acks=1
and acks=0, and the members of the consumer group `year-group`. What each was acknowledged, refused or read goes to
the findings, stamped with the run's clock."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from benchmarks.scenario.clock import Clock, say
from benchmarks.scenario.cluster import ScenarioCluster
from benchmarks.scenario.credentials import CLIENT_USER, MECHANISM, Users
from benchmarks.scenario.findings import Acks2Send, Findings
from benchmarks.scenario.proxy import ScenarioProxy
from benchmarks.scenario.topics import (
    ACKS0_BASE,
    ACKS01_TOPIC,
    ACKS2_TOPIC,
    IDEMPOTENT_TOPIC,
    PARTITIONER_TOPIC,
    PARTITIONS,
)
from insync_proxy.devcluster.cluster import _die_with_parent
from insync_proxy.devcluster.distribution import kafka_libs

#: Records a second of each of the acks=1 and acks=0 producers.
ACKS01_RATE = 20.0

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


class Clients:
    """The producers and the consumer group, each in a thread of its own until `stop` is set."""

    def __init__(self, work: Path, cluster: ScenarioCluster, proxy: ScenarioProxy, users: Users, clock: Clock,
                 found: Findings, stop: threading.Event, rate: int) -> None:
        self.work, self.cluster, self.proxy, self.users = work, cluster, proxy, users
        self.clock, self.found, self.stop_event = clock, found, stop
        #: VerifiableProducer's records a second
        self.rate = rate
        self.processes: list[subprocess.Popen[Any]] = []

    # ------------------------------------------------------------------ VerifiableProducer
    def start_verifiable_producer(self) -> None:
        libs = kafka_libs(self.cluster.old_version)
        props = self.proxy.java_client_properties("producer.properties", _PRODUCER_CONFIG)
        stderr = open(self.work / "verifiable-producer.log", "ab")  # noqa: SIM115 - the child keeps it
        process = subprocess.Popen(
            self.cluster.java(libs, "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server",
                              self.proxy.bootstrap, "--topic", IDEMPOTENT_TOPIC, "--max-messages", "-1",
                              "--throughput", str(self.rate), "--producer.config", str(props)),
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
                self.found.acked.append((int(event["partition"]), int(event["offset"]), int(event["value"])))
            elif event.get("name") == "producer_send_error":
                self.found.producer_errors += 1

    def stop_verifiable_producer(self) -> None:
        """SIGTERM, and every acknowledgement it printed read."""
        self.verifiable.send_signal(signal.SIGTERM)
        try:
            self.verifiable.wait(300)
        except subprocess.TimeoutExpired:
            self.verifiable.kill()
        self._verifiable_reader.join(30)

    # ------------------------------------------------------------------ kafka-python and librdkafka
    def acks2_producer(self) -> None:
        """kafka-python with acks=-2 through the proxy, one record at a time, 20 a second."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.proxy.bootstrap, acks=-2, retries=0, request_timeout_ms=10000,
                                 client_id="year-acks2", **self.proxy.kafka_python_security())
        n = 0
        try:
            while not self.stop_event.is_set():
                partition = n % PARTITIONS
                sent = self.clock.now()
                try:
                    producer.send(ACKS2_TOPIC, value=str(n).encode(), partition=partition).get(timeout=20)
                    ok, error = True, ""
                except Exception as exc:  # noqa: BLE001 - the error is the result
                    ok, error = False, type(exc).__name__
                with self.found.lock:
                    self.found.acks2.append(Acks2Send(partition, sent, self.clock.now(), ok, error))
                n += 1
                self.stop_event.wait(0.05)
        finally:
            producer.close(timeout=10)

    def acks01_producer(self, acks: int) -> None:
        """librdkafka through the proxy with acks=1 or acks=0, 20 records a second: what acks=1 acknowledged is
        checked at its offset at the end, acks=0 records are counted in the log."""
        from confluent_kafka import Producer

        producer = Producer({**self.proxy.librdkafka_settings(), "acks": str(acks), "linger.ms": 5,
                             "enable.idempotence": False, "message.timeout.ms": 60000, "client.id": f"year-acks{acks}",
                             "log_level": 2})
        found, clock = self.found, self.clock

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                with found.lock:
                    found.acks01_errors[f"acks={acks} {err.name()}"] += 1
            elif acks == 1:
                with found.lock:
                    found.acks1.append((msg.partition(), msg.offset(), int(msg.value()), clock.now()))

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

    def partitioner_producer(self) -> None:
        """kafka-python with acks=-2 through the proxy, its partitions chosen by the project's KIP-637 partitioner
        (insync_proxy.client.partitioner: the proxy's Metadata over TLS, logged in), 10 records a second."""
        from kafka import KafkaProducer

        from insync_proxy.client.partitioner import MinInsyncMetadata
        from insync_proxy.proxy.config.settings import SaslConfig

        metadata = MinInsyncMetadata(self.proxy.bootstrap, max_age_seconds=2.0, ssl_context=self.proxy.client_context(),
                                     sasl=SaslConfig(mechanism=MECHANISM, username=CLIENT_USER,
                                                     password=self.users.client_password))
        producer = KafkaProducer(bootstrap_servers=self.proxy.bootstrap, acks=-2, retries=0, request_timeout_ms=10000,
                                 client_id="year-partitioner", partitioner=metadata.partitioner(PARTITIONER_TOPIC, -2),
                                 **self.proxy.kafka_python_security())
        n = 0
        try:
            while not self.stop_event.is_set():
                try:
                    sent = producer.send(PARTITIONER_TOPIC, value=str(n).encode()).get(timeout=20)
                    self.found.partitioner_acked.append((sent.partition, sent.offset, n))
                except Exception as exc:  # noqa: BLE001 - the error is the result
                    if not self.found.partitioner_refused:
                        say(f"the partitioner's producer: first refusal: {type(exc).__name__}: {exc}")
                    self.found.partitioner_refused[type(exc).__name__] += 1
                n += 1
                self.stop_event.wait(0.1)
        finally:
            producer.close(timeout=10)

    # ------------------------------------------------------------------ the consumer group
    def group_member(self, name: str, until: threading.Event) -> None:
        """A member of the consumer group year-group (kafka-python through the proxy) on the idempotent topic,
        until `until` is set: what it reads is counted by time."""
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            IDEMPOTENT_TOPIC, bootstrap_servers=self.proxy.bootstrap, group_id="year-group", client_id=name,
            auto_offset_reset="earliest", session_timeout_ms=10000, heartbeat_interval_ms=3000,
            request_timeout_ms=30000, **self.proxy.kafka_python_security(),
        )
        try:
            while not until.is_set() and not self.stop_event.is_set():
                try:
                    records = sum(len(r) for r in consumer.poll(timeout_ms=500).values())
                except Exception:  # noqa: BLE001 - a rebalance or a broker away: the next poll goes on
                    records = 0
                if records:
                    with self.found.lock:
                        self.found.consumed.append((self.clock.now(), records))
        finally:
            consumer.close()

    def threads(self) -> list[threading.Thread]:
        """One thread per client that runs until the end (VerifiableProducer is a process of its own)."""
        return [
            threading.Thread(target=self.acks2_producer, daemon=True),
            threading.Thread(target=self.partitioner_producer, daemon=True),
            threading.Thread(target=self.acks01_producer, args=(1,), daemon=True),
            threading.Thread(target=self.acks01_producer, args=(0,), daemon=True),
            threading.Thread(target=self.group_member, args=("year-member-1", self.stop_event), daemon=True),
            threading.Thread(target=self.group_member, args=("year-member-2", self.stop_event), daemon=True),
        ]
