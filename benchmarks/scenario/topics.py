"""The run's topics: their names, the min.insync.replicas the runner set on each and when the brokers showed it
(what a tag 637 is judged by), the large records the slow consumers read, and the churn: topics created, their
min.insync.replicas moved and deleted at a steady rate, straight at the brokers (behind the proxy's back)."""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Any

from benchmarks.scenario.clock import Clock
from benchmarks.scenario.findings import Findings

if TYPE_CHECKING:
    from benchmarks.scenario.cluster import ScenarioCluster

IDEMPOTENT_TOPIC = "year-idempotent"
ACKS2_TOPIC = "year-acks2"
LATENCY_TOPIC = "year-latency"
#: acks=1 and acks=0 records (librdkafka through the proxy); acks=0 values are ACKS0_BASE + n.
ACKS01_TOPIC = "year-acks01"
ACKS0_BASE = 10**9
PARTITIONER_TOPIC = "year-partitioner"
#: One partition of large records, read by the slow consumers.
BULK_TOPIC = "year-bulk"
CHURN_PREFIX = "year-churn-"
PARTITIONS = 3


class Topics:
    """The topics the runner made, with each one's min.insync.replicas history."""

    def __init__(self, cluster: ScenarioCluster, clock: Clock, found: Findings, stop: threading.Event) -> None:
        self.cluster, self.clock, self.found, self.stop_event = cluster, clock, found, stop
        #: topic -> [(t, min.insync.replicas)] as the runner set it
        self.min_insync: dict[str, list[tuple[float, int]]] = {}
        #: topic -> the min.insync.replicas being set now (asked of the brokers, not yet seen in effect): a tag may
        #: carry it before the runner sees the change take effect
        self.min_insync_pending: dict[str, int] = {}
        self.churn: list[str] = []
        self.churn_lock = threading.Lock()

    def create(self, name: str, min_insync: int, partitions: int = PARTITIONS) -> None:
        self.cluster.cluster.create_topic(name, partitions, 3, {"min.insync.replicas": str(min_insync)}, timeout=90)
        self.min_insync[name] = [(self.clock.now(), min_insync)]

    def create_all(self) -> None:
        """Every topic the clients and the slow consumers need, before the proxy starts."""
        self.create(IDEMPOTENT_TOPIC, 2)
        self.create(ACKS2_TOPIC, 2)
        self.create(PARTITIONER_TOPIC, 2)
        # Led by broker 1: the direct producer's path does not cross the relay in front of broker 3.
        self.cluster.cluster.create_topic(LATENCY_TOPIC, assignments={0: [1, 2, 3]},
                                          configs={"retention.bytes": str(256 * 2**20), "segment.bytes": str(32 * 2**20)})
        self.create(ACKS01_TOPIC, 2)
        self.fill_bulk_topic()

    def fill_bulk_topic(self, records: int = 100, size: int = 100 * 1024) -> None:
        """BULK_TOPIC: one partition of `records` records of `size` bytes (10 MiB), for the slow consumers."""
        from confluent_kafka import Producer

        self.cluster.cluster.create_topic(BULK_TOPIC, assignments={0: [1, 2, 3]})
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap_servers, "acks": "all", "log_level": 2})
        for _ in range(records):
            producer.produce(BULK_TOPIC, os.urandom(size), partition=0)
            producer.poll(0)
        if producer.flush(120) != 0:
            raise RuntimeError(f"{BULK_TOPIC}: not every record was acknowledged")

    def sampled(self) -> list[str]:
        """The topics whose tag 637 the Metadata sampler checks: the producers' and the churn's of the moment."""
        with self.churn_lock:
            return [IDEMPOTENT_TOPIC, ACKS2_TOPIC, *self.churn]

    def run_churn(self, period: float) -> None:
        """A topic created every `period` seconds, the previous one's min.insync.replicas moved up or down, the
        oldest deleted once four exist (directly at the brokers, behind the proxy's back)."""
        admin = None
        n = 0
        while not self.stop_event.wait(period):
            n += 1
            name = f"{CHURN_PREFIX}{n}"
            try:
                if admin is None:
                    admin = self.cluster.admin()
                self.create(name, 2, partitions=1)
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
                self.found.errors.append(f"{self.clock.now():.0f}s topic churn: {type(exc).__name__}: {exc}")
                self.cluster.close_quietly(admin)
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
                    return self.clock.now()
            except Exception:  # noqa: BLE001 - a broker down: ask again
                pass
            time.sleep(0.3)
        self.found.errors.append(f"{self.clock.now():.0f}s: min.insync.replicas={value} of {topic} not seen in {timeout:.0f}s")
        return self.clock.now()
