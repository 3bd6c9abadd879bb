"""Brokers numbered as real clusters number them (1001+, and one above 60,000) through the proxy.

One cluster, brokers 1001, 1002 and 65001 (65001 + any base would overflow the port range under "base +
node id"). Listener `default` maps all three with node_id_ranges ["1001-1002", "65001"]; listener
`partial` leaves 65001 out, as a cluster that grew a broker the configuration does not know yet.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.errors import KafkaConnectionError

from harness.proxy_process import ProxyProcess
from harness.waiting import wait_until
from insync_proxy.cli.preflight import check_connection
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster
from insync_proxy.proxy.config.broker_ports import NO_PORT
from insync_proxy.proxy.config.loader import load_config
from tests.helpers import consume_values

NODE_IDS = [1001, 1002, 65001]
RANGES = {"default": ("1001-1002", "65001"), "partial": ("1001-1002",)}


def _kafka_python_brokers(bootstrap: str) -> dict[int, tuple[str, int]]:
    """The brokers kafka-python learnt from Metadata through `bootstrap`."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        consumer.topics()  # a Metadata round trip
        brokers = consumer._client.cluster.brokers()
        # kafka-python 3 names the field node_id; 2.x named it nodeId
        return {int(b.node_id if hasattr(b, "node_id") else b.nodeId): (b.host, b.port) for b in brokers}
    finally:
        consumer.close()


@pytest.mark.own_cluster
def test_brokers_numbered_1001_1002_and_65001_work_through_the_proxy(
    exclusive_cluster_slot: None, java_client: Any
) -> None:
    # Given a cluster whose brokers are 1001, 1002 and 65001, and a proxy with node_id_ranges for them
    cluster = LocalKafkaCluster(ClusterSettings(node_ids=NODE_IDS)).start()
    proxy = ProxyProcess(cluster, groups=("default", "partial"), node_id_ranges=RANGES)
    real_ports = {node.port for node in cluster.brokers.values()}
    try:
        proxy.start()
        mapped = {n: proxy.broker_port(n) for n in NODE_IDS}
        assert mapped == {1001: proxy.ports["default"][1], 1002: proxy.ports["default"][1] + 1,
                          65001: proxy.ports["default"][1] + 2}

        # When librdkafka and kafka-python read Metadata through the proxy
        brokers = AdminClient({"bootstrap.servers": proxy.bootstrap()}).list_topics(timeout=30).brokers
        # Then every broker is at the proxy's host and its mapped port, and no real broker port shows
        assert {b.id: (b.host, b.port) for b in brokers.values()} == {n: ("127.0.0.1", p) for n, p in mapped.items()}
        assert _kafka_python_brokers(proxy.bootstrap()) == {n: ("127.0.0.1", p) for n, p in mapped.items()}

        # When records are produced (acks=all, idempotent) to partitions led by each broker, and consumed
        topic = f"ids-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, assignments={0: [1001, 1002, 65001], 1: [1002, 65001, 1001],
                                                 2: [65001, 1001, 1002]})
        assert {cluster.wait_for_leader(topic, p) for p in range(3)} == set(NODE_IDS)
        producer = Producer({"bootstrap.servers": proxy.bootstrap(), "acks": "all", "enable.idempotence": True})
        delivered: list[Any] = []
        values = [f"v-{i}".encode() for i in range(300)]
        for i, value in enumerate(values):
            producer.produce(topic, value, partition=i % 3, on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(60) == 0 and delivered == [None] * len(values)
        # Then a consumer group (its coordinator on any of the three) reads every record back
        assert sorted(consume_values({"bootstrap.servers": proxy.bootstrap()}, topic, len(values))) == sorted(values)

        # And the Java client (Admin, DescribeCluster, producer, consumer group) sees only the mapped ports
        out = java_client.run("roundtrip", proxy.bootstrap(), f"java-{topic}")
        assert "OK roundtrip" in out
        seen = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^broker (\d+) \S+:(\d+)$", out, re.M)}
        assert seen == mapped

        # And the listener whose ranges leave 65001 out says so: one ERROR line, the gauge
        log = proxy.log_file.read_text()
        errors = [line for line in log.splitlines() if "has no port" in line]
        assert len(errors) == 1 and "ERROR" in errors[0], errors
        assert "listener partial: broker 65001" in errors[0] and "node_id_ranges" in errors[0]
        assert proxy.metric("insync_proxy_brokers_without_port", listener="partial") == 1
        assert proxy.metric("insync_proxy_brokers_without_port", listener="default") == 0
        # and check-config --connect on the same configuration fails with the very line `run` logged (exit 1)
        lines: list[str] = []
        assert not check_connection(load_config(str(proxy.config_file)), lines.append)
        failed = [line for line in lines if line.startswith("FAIL")]
        assert failed == [f"FAIL node_ids: {errors[0].split(' ERROR insync_proxy: ', 1)[1]}"], (failed, errors)
        # and serves the brokers it maps: 65001 is named at port 0, never at its real address
        partial = proxy.ports["partial"][1]
        expected = {1001: ("127.0.0.1", partial), 1002: ("127.0.0.1", partial + 1), 65001: ("127.0.0.1", NO_PORT)}
        brokers = AdminClient({"bootstrap.servers": proxy.bootstrap("partial")}).list_topics(timeout=30).brokers
        assert {b.id: (b.host, b.port) for b in brokers.values()} == expected
        # (kafka-python's topics() raises when the node it picks for Metadata refuses, as for a down broker)
        assert wait_until(lambda: _kafka_python_brokers(proxy.bootstrap("partial")), 60,
                          retry_on=(KafkaConnectionError,), what="kafka-python Metadata via partial") == expected
        led = f"ids-partial-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(led, assignments={0: [1001, 1002]})
        assert cluster.wait_for_leader(led, 0) == 1001
        _round_trip_without_group(proxy.bootstrap("partial"), led)

        # And no response carried a real broker address (debug_address_leak_check)
        assert proxy.metric("insync_proxy_address_leaks_total") == 0
        assert not {p for p in real_ports if f":{p}" in out}

        # When the proxy restarts with the same configuration, every broker keeps its port
        proxy.stop()
        proxy.start()
        wait_until(lambda: _kafka_python_brokers(proxy.bootstrap()) == {n: ("127.0.0.1", p) for n, p in mapped.items()},
                   30, what="the same ports after a restart")
        assert proxy.alive()
    finally:
        proxy.stop()
        cluster.stop()
        cluster.cleanup()


def _round_trip_without_group(bootstrap: str, topic: str) -> None:
    """librdkafka produces to partition 0 and reads it back by assignment (no group: a coordinator may sit
    on the unreachable broker)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    delivered: list[Any] = []
    for i in range(20):
        producer.produce(topic, f"p-{i}".encode(), partition=0, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0 and delivered == [None] * 20
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []

    def read() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value() or b"")
        return len(got) >= 20

    try:
        wait_until(read, 60, interval=0, what=f"records of {topic} through the partial listener")
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"p-{i}".encode() for i in range(20))
