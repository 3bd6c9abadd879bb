"""Real clients through the proxy, against the real 3-broker cluster: nothing but the proxy's port.

Each client produces, consumes in a group with committed offsets, and creates and deletes a topic with
its admin API; records round-trip byte for byte.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.proxy_process import ProxyProcess
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster


def random_records(n: int) -> list[tuple[bytes, bytes]]:
    """Binary keys and values, including every byte value, so a byte-level corruption would show."""
    return [(os.urandom(8), os.urandom(1 + (i * 37) % 3000) + bytes(range(256))) for i in range(n)]


# ---------------------------------------------------------------------------------------------- librdkafka
def test_confluent_kafka_produce_consume_admin_through_proxy(
    proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster
) -> None:
    bootstrap = proxy.bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"ck-{uuid.uuid4().hex[:8]}"
    # Given a topic created through the proxy
    for future in admin.create_topics([NewTopic(topic, 3, 3)]).values():
        future.result(60)
    metadata = admin.list_topics(timeout=30)
    # Then every broker address the client learnt is a proxy listener
    assert {b.port for b in metadata.brokers.values()} <= proxy.listener_ports()
    assert {b.port for b in metadata.brokers.values()}.isdisjoint(n.port for n in kafka_cluster.brokers.values())

    # When records are produced and consumed in a group
    records = random_records(300)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    for key, value in records:
        producer.produce(topic, value=value, key=key, headers=[("h", b"\x00\xff")],
                         on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(60) == 0
    assert errors == [None] * len(records)

    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[tuple[bytes, bytes, Any]] = []

    def read_all() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.key(), msg.value(), msg.headers()))
        return len(got) >= len(records)

    wait_until(read_all, 90, interval=0, what="all records through the proxy")
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
    consumer.close()

    # Then they round-trip byte for byte and the group's offsets are committed at the end
    assert sorted((k, v) for k, v, _ in got) == sorted(records)
    assert all(h == [("h", b"\x00\xff")] for _, _, h in got)
    assert sum(tp.offset for tp in committed) == len(records)

    # And the topic can be deleted through the proxy
    for future in admin.delete_topics([topic]).values():
        future.result(60)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 60, what="topic deletion")


def test_confluent_kafka_transactions_read_committed_through_proxy(proxy: ProxyProcess, topic_name: str,
                                                                  kafka_cluster: LocalKafkaCluster) -> None:
    kafka_cluster.create_topic(topic_name, 1, 3)
    bootstrap = proxy.bootstrap()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic_name}"})
    producer.init_transactions(60)
    # Given one committed and one aborted transaction
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic_name, value=f"committed-{i}".encode())
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic_name, value=f"aborted-{i}".encode())
    producer.flush(30)
    producer.abort_transaction(60)
    producer.begin_transaction()
    producer.produce(topic_name, value=b"marker")
    producer.commit_transaction(60)

    # When a read_committed consumer reads the topic
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic_name}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([topic_name])
    values: list[bytes] = []

    def until_marker() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
        return b"marker" in values

    wait_until(until_marker, 90, interval=0, what="the committed marker")
    consumer.close()
    # Then it sees only committed records
    assert values == [f"committed-{i}".encode() for i in range(10)] + [b"marker"]


# ---------------------------------------------------------------------------------------------- kafka-python
def test_kafka_python_produce_consume_admin_through_proxy(proxy: ProxyProcess) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import NewTopic as KNewTopic

    bootstrap = proxy.bootstrap()
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60000)
    admin.create_topics([KNewTopic(topic, 2, 3)])
    records = random_records(200)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    futures = [producer.send(topic, key=k, value=v) for k, v in records]
    producer.flush(60)
    assert all(f.get(30).offset >= 0 for f in futures)
    producer.close()

    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=1000)
    got: list[tuple[bytes, bytes]] = []

    def read_all() -> bool:
        for msg in consumer.poll(timeout_ms=500).values():
            got.extend((m.key, m.value) for m in msg)
        return len(got) >= len(records)

    wait_until(read_all, 90, interval=0, what="kafka-python to read everything")
    consumer.commit()
    committed = sum(consumer.committed(KTopicPartition(topic, p)) or 0 for p in range(2))
    consumer.close()
    assert sorted(got) == sorted(records)
    assert committed == len(records)
    admin.delete_topics([topic])
    admin.close()


# ---------------------------------------------------------------------------------------------- aiokafka
async def test_aiokafka_produce_consume_admin_through_proxy(proxy: ProxyProcess) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as ANewTopic

    bootstrap = proxy.bootstrap()
    topic = f"ak-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([ANewTopic(topic, 2, 3)])
        records = random_records(200)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
        await producer.start()
        try:
            for key, value in records:
                await producer.send_and_wait(topic, value=value, key=key)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"g-{topic}",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        got: list[tuple[bytes, bytes]] = []
        try:
            async def read_all() -> None:
                while len(got) < len(records):
                    batch = await consumer.getmany(timeout_ms=500)
                    for messages in batch.values():
                        got.extend((m.key, m.value) for m in messages)

            await asyncio.wait_for(read_all(), 90)
            await consumer.commit()
        finally:
            await consumer.stop()
        assert sorted(got) == sorted(records)
        await admin.delete_topics([topic])
    finally:
        await admin.close()


# ---------------------------------------------------------------------------------------------- failover
def test_idempotent_producer_recovers_when_leader_is_killed(
    proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    kafka_cluster.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    leader = kafka_cluster.wait_for_leader(topic_name, 0)
    producer = Producer({"bootstrap.servers": proxy.bootstrap(), "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 120000})
    acked: list[bytes] = []
    failed: list[Any] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        (failed if err else acked).append(err or msg.value())

    try:
        # Given an idempotent producer sending through the proxy
        for i in range(200):
            producer.produce(topic_name, value=f"before-{i}".encode(), on_delivery=on_delivery)
        producer.poll(0)
        # When the partition leader's broker is killed mid-stream
        kafka_cluster.kill_broker(leader)
        for i in range(300):
            producer.produce(topic_name, value=f"after-{i}".encode(), on_delivery=on_delivery)
            producer.poll(0)
        assert producer.flush(150) == 0
        new_leader = kafka_cluster.wait_for_leader(topic_name, 0)
        assert new_leader != leader
    finally:
        kafka_cluster.start_broker(leader)
    # Then every record was acknowledged through the proxy, and each is stored exactly once
    assert failed == []
    assert len(acked) == 500
    consumer = Consumer({"bootstrap.servers": proxy.bootstrap(), "group.id": f"g-{topic_name}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic_name])
    seen: list[bytes] = []

    def read_all() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append(msg.value())
        return len(seen) >= len(acked)

    wait_until(read_all, 90, interval=0, what="every acknowledged record")
    for _ in range(6):  # nothing more: no duplicates
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append(msg.value())
    consumer.close()
    assert sorted(seen) == sorted(acked)
    kafka_cluster.wait_for_isr(topic_name, 0, 3)


@pytest.mark.parametrize("group", ["default", "producers"])
def test_every_listener_group_serves_metadata_with_its_own_ports(proxy: ProxyProcess, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap(group)})
    brokers = admin.list_topics(timeout=30).brokers
    assert {b.port for b in brokers.values()} == {proxy.broker_port(n, group) for n in brokers}


# ---------------------------------------------------------------------------------------------- Java
def test_java_client_produce_consume_admin_through_proxy(proxy: ProxyProcess, java_client: Any) -> None:
    topic = f"java-{uuid.uuid4().hex[:8]}"
    out = java_client.run("roundtrip", proxy.bootstrap(), topic)
    assert "OK roundtrip" in out
    ports = {int(line.rsplit(":", 1)[1]) for line in out.splitlines() if line.startswith("broker ")}
    assert ports and ports <= proxy.listener_ports()


def test_java_transactional_producer_and_read_committed_consumer_through_proxy(
    proxy: ProxyProcess, java_client: Any, kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    kafka_cluster.create_topic(topic_name, 1, 3)
    assert "OK transactions" in java_client.run("transactions", proxy.bootstrap(), topic_name)
