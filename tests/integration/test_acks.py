"""KIP-926 acks=-2, KIP-1 acks validation, acks_floor and the audit trail, against the real cluster."""

from __future__ import annotations

import json
import uuid
from typing import Any

import jsonschema
import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from harness.proxy_process import ProxyProcess
from harness.raw_client import RawKafkaClient, batch
from harness.waiting import wait_until
from insync_proxy.audit.events import SCHEMA_FILES
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.protocol import ApiKey, ErrorCode


def consume_values(bootstrap: str, topic: str, partition: int, expected: int, timeout: float = 60) -> list[bytes]:
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []

    def enough() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
        return len(values) >= expected

    try:
        wait_until(enough, timeout, interval=0, what=f"{expected} records from {topic}-{partition}")
    finally:
        consumer.close()
    return values


def end_offset(client: RawKafkaClient, topic: str, partition: int) -> int:
    """The partition's log end offset, read as the base offset of an acks=-1 marker record."""
    results = []

    def appended() -> bool:
        # A new leader may not have applied its leadership yet (NOT_LEADER_OR_FOLLOWER): retry.
        results.append(client.produce({(topic, partition): batch(b"marker")}, acks=-1)[(topic, partition)])
        assert results[-1].error_code in (0, 3, 5, 6), results[-1]
        return results[-1].error_code == 0

    wait_until(appended, 60, interval=0.2, what=f"a marker appended to {topic}-{partition}")
    return results[-1].base_offset


def via_leader(proxy: ProxyProcess, cluster: LocalKafkaCluster, topic: str, partition: int = 0) -> str:
    """The proxy listener standing for the partition's leader (Produce must reach the leader)."""
    return f"127.0.0.1:{proxy.broker_port(cluster.wait_for_leader(topic, partition))}"


def proxy_sees_isr(proxy: ProxyProcess, below: bool) -> bool:
    count = proxy.metric("insync_proxy_partitions_below_min_isr")
    return count > 0 if below else count == 0


def test_acks_minus_two_with_full_isr_is_appended_and_read_back(
    proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    # Given a healthy topic with min.insync.replicas=2
    kafka_cluster.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    with RawKafkaClient(via_leader(proxy, kafka_cluster, topic_name)) as client:
        # When a raw client produces with acks=-2 through the proxy
        result = client.produce({(topic_name, 0): batch(b"one", b"two")}, acks=-2)
    # Then the records are acknowledged and can be read back
    assert result[(topic_name, 0)].error_code == 0
    assert consume_values(proxy.bootstrap(), topic_name, 0, 2) == [b"one", b"two"]


def test_kafka_python_puts_acks_minus_two_on_the_wire(proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster,
                                                      topic_name: str) -> None:
    from kafka import KafkaProducer

    kafka_cluster.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap(), acks=-2)
    metadata = producer.send(topic_name, b"from-kafka-python").get(30)
    producer.close()
    assert metadata.offset == 0
    wait_until(lambda: any(e["topic"] == topic_name and e.get("acks_requested") == -2 and e.get("acks_sent") == -1
                           for e in proxy.audit_events()), 30, what="the audit event of kafka-python's acks=-2")


def test_acks_minus_two_answers_not_enough_replicas_only_for_the_unready_partition(
    proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    # Given partition 0 on brokers 1,2 and partition 1 on brokers 1,3 (both led by 1), min.insync.replicas=2
    kafka_cluster.create_topic(topic_name, configs={"min.insync.replicas": "2"}, assignments={0: [1, 2], 1: [1, 3]})
    with RawKafkaClient(via_leader(proxy, kafka_cluster, topic_name, 1)) as client:
        assert kafka_cluster.wait_for_leader(topic_name, 0) == 1
        before = {p: end_offset(client, topic_name, p) for p in (0, 1)}
        answered_before = proxy.metric("insync_proxy_proxy_answered_errors_total", error_code="19")
        # When broker 2 is paused, partition 0's ISR shrinks to 1 < 2, and the proxy sees it
        kafka_cluster.pause_broker(2)
        try:
            kafka_cluster.wait_for_isr(topic_name, 0, 1)
            wait_until(lambda: proxy_sees_isr(proxy, below=True), 60, what="the proxy to see ISR below min")
            # And one acks=-2 request carries both partitions
            result = client.produce(
                {(topic_name, 0): batch(b"must-not-land"), (topic_name, 1): batch(b"lands")}, acks=-2
            )
        finally:
            kafka_cluster.resume_broker(2)
        # Then the proxy answered NOT_ENOUGH_REPLICAS for partition 0, the broker appended partition 1
        assert list(result) == [(topic_name, 0), (topic_name, 1)]  # one merged response, request order
        assert result[(topic_name, 0)].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert result[(topic_name, 1)].error_code == 0
        assert result[(topic_name, 1)].base_offset == before[1] + 1
        assert proxy.metric("insync_proxy_proxy_answered_errors_total", error_code="19") == answered_before + 1
        # And partition 0's log did not move
        kafka_cluster.wait_for_isr(topic_name, 0, 2)
        assert end_offset(client, topic_name, 0) == before[0] + 1  # only the first marker is before it
    values = consume_values(proxy.bootstrap(), topic_name, 0, 2)
    assert b"must-not-land" not in values


@pytest.mark.parametrize("version", [3, 9])
@pytest.mark.parametrize("acks", [2, 3, 100, -3])
def test_invalid_acks_are_rejected_with_invalid_required_acks(
    proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, acks: int, version: int
) -> None:
    topic = f"bad-acks-{uuid.uuid4().hex[:8]}"
    kafka_cluster.create_topic(topic, assignments={0: [1, 2, 3], 1: [1, 3, 2]})
    with RawKafkaClient(via_leader(proxy, kafka_cluster, topic, 1)) as client:
        assert kafka_cluster.wait_for_leader(topic, 0) == 1
        before = {p: end_offset(client, topic, p) for p in (0, 1)}
        result = client.produce({(topic, 0): batch(b"x"), (topic, 1): batch(b"y")}, acks=acks, version=version)
        assert {r.error_code for r in result.values()} == {ErrorCode.INVALID_REQUIRED_ACKS}
        assert len(result) == 2
        # Nothing was appended: the next marker lands right after the first one
        assert {p: end_offset(client, topic, p) for p in (0, 1)} == {p: before[p] + 1 for p in (0, 1)}


def test_acks_zero_does_not_stall_the_connection(
    proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    kafka_cluster.create_topic(topic_name, 1, 3)
    with RawKafkaClient(via_leader(proxy, kafka_cluster, topic_name)) as client:
        assert end_offset(client, topic_name, 0) == 0  # the leader is ready (acks=0 errors close connections)
        # Given an acks=0 request, which gets no response
        client.produce({(topic_name, 0): batch(b"fire-and-forget")}, acks=0)
        # When more requests follow on the same connection, each is answered with its own correlation id
        first = end_offset(client, topic_name, 0)
        second = end_offset(client, topic_name, 0)
    assert first == 2 and second == 3


def test_idempotent_acks_minus_two_producer_survives_broker_kill_and_restart(
    proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, topic_name: str
) -> None:
    from kafka import KafkaProducer

    kafka_cluster.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    leader = kafka_cluster.wait_for_leader(topic_name, 0)
    # kafka-python refuses acks=-2 with idempotence in its config check; the sender itself sends it as is.
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap(), acks="all", enable_idempotence=True,
                             linger_ms=5, retries=100, request_timeout_ms=10000)
    producer._sender.config["acks"] = -2
    futures = [producer.send(topic_name, f"before-{i}".encode()) for i in range(100)]
    kafka_cluster.kill_broker(leader)
    try:
        futures += [producer.send(topic_name, f"after-{i}".encode()) for i in range(200)]
        producer.flush(120)
        acked = [f.get(60).offset for f in futures]
    finally:
        kafka_cluster.start_broker(leader)
    producer.close()
    assert len(set(acked)) == 300
    values = consume_values(proxy.bootstrap(), topic_name, 0, 300)
    assert sorted(values) == sorted([f"before-{i}".encode() for i in range(100)] +
                                    [f"after-{i}".encode() for i in range(200)])
    events = wait_until(lambda: [e for e in proxy.audit_events()
                                 if e["topic"] == topic_name and e["event"] == "produce_summary"], 30,
                        what="the audit summaries")
    assert all(e["acks_requested"] == -2 for e in events)
    kafka_cluster.wait_for_isr(topic_name, 0, 3)


def test_acks_floor_turns_acks_one_into_acks_all(proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster) -> None:
    topic = f"floor-{uuid.uuid4().hex[:8]}"
    kafka_cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    leader = kafka_cluster.wait_for_leader(topic, 0)
    followers = [b for b in kafka_cluster.brokers if b != leader]
    producer = Producer({"bootstrap.servers": proxy.bootstrap(), "acks": 1, "retries": 0,
                         "enable.idempotence": False})
    results: list[Any] = []
    producer.produce(topic, b"healthy", on_delivery=lambda err, msg: results.append(err))
    producer.flush(30)
    assert results == [None]
    # When both followers are paused, an acks=1 write would succeed; raised to acks=-1 it must fail.
    # (A write the leader takes just before it applies the ISR shrink waits for the paused followers and
    # times out instead: retry until the broker answers NOT_ENOUGH_REPLICAS.)
    strict = Producer({"bootstrap.servers": proxy.bootstrap(), "acks": 1, "retries": 0,
                       "enable.idempotence": False, "request.timeout.ms": 5000, "message.timeout.ms": 10000})
    for node_id in followers:
        kafka_cluster.pause_broker(node_id)
    try:
        kafka_cluster.wait_for_isr(topic, 0, 1)

        def fails_with_not_enough_replicas() -> bool:
            strict.produce(topic, b"too-few-replicas", on_delivery=lambda err, msg: results.append(err))
            strict.flush(30)
            return results[-1] is not None and results[-1].code() == KafkaError.NOT_ENOUGH_REPLICAS

        wait_until(fails_with_not_enough_replicas, 120, interval=0.5, what="NOT_ENOUGH_REPLICAS from the broker")
    finally:
        for node_id in followers:
            kafka_cluster.resume_broker(node_id)
    # (an attempt that timed out inside the client before reaching the proxy leaves no event)
    def summaries() -> list[dict[str, Any]]:
        return [e for e in proxy.audit_events() if e["topic"] == topic and e["event"] == "produce_summary"]

    events = wait_until(lambda: (found := summaries()) and any(
        e["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS for e in found) and found,
        30, what="the audit summary of the failed write")
    assert sum(e["requests"] for e in events) >= 2
    # Every write went upstream with acks=-1, raised by the floor; the failed one as the broker said
    assert {(e["acks_requested"], e["acks_sent"], e["decision"]) for e in events} == {(1, -1, "raised_by_floor")}
    assert {e["error_code"] for e in events} >= {0, ErrorCode.NOT_ENOUGH_REPLICAS}
    kafka_cluster.wait_for_isr(topic, 0, 3)


def test_audit_files_match_the_documented_schema(proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster) -> None:
    topic = f"audit-{uuid.uuid4().hex[:8]}"
    kafka_cluster.create_topic(topic, assignments={0: [1, 2, 3], 1: [1, 3, 2]})
    assert kafka_cluster.wait_for_leader(topic, 0) == 1 and kafka_cluster.wait_for_leader(topic, 1) == 1
    # Broker 1 takes the lead of a new topic's partitions one after the other, after its metadata names it: until it
    # has taken both, a write to the later one is answered NOT_LEADER_OR_FOLLOWER. Written to directly (no audit
    # event), until both partitions take a record.
    with RawKafkaClient(f"127.0.0.1:{kafka_cluster.brokers[1].port}") as direct:
        wait_until(lambda: {r.error_code for r in direct.produce(
            {(topic, 0): batch(b"warm"), (topic, 1): batch(b"warm")}, acks=1).values()} == {0}, 60,
            what="broker 1 leading both partitions")
    with RawKafkaClient(via_leader(proxy, kafka_cluster, topic, 1)) as client:
        client.produce({(topic, 0): batch(b"a"), (topic, 1): batch(b"b")}, acks=-2)
        client.produce({(topic, 0): batch(b"c")}, acks=7)
    wait_until(lambda: sum(e["requests"] for e in proxy.audit_events() if e["topic"] == topic
                           and e["event"] == "produce_summary") >= 3, 30, what="audit summaries")
    # The proxy's view of the new topic's partitions shows up as isr_change events (next refresh at the latest)
    wait_until(lambda: {e["partition"] for e in proxy.audit_events() if e["topic"] == topic
                        and e["event"] == "isr_change"} == {0, 1}, 30, what="isr_change events")
    schema = json.loads(SCHEMA_FILES[2].read_text())
    events = proxy.audit_events()
    for event in events:
        jsonschema.validate(event, schema)
    mine = [e for e in events if e["topic"] == topic and e["event"] == "produce_summary"]
    # One summary per key (partition, acks, decision, error code), each of one request of one record
    assert sorted((e["partition"], e["acks_requested"], e["decision"], e["error_code"]) for e in mine) == [
        (0, -2, "forwarded", 0), (0, 7, "answered_invalid_required_acks", ErrorCode.INVALID_REQUIRED_ACKS),
        (1, -2, "forwarded", 0),
    ]
    assert all(e["requests"] == 1 and e["records"] == 1 and e["record_bytes"] > 0 for e in mine)
    assert all(e["latency_count"] == 1 and sum(c for _, c in e["latency_buckets"]) == 1 for e in mine)


def test_too_new_api_versions_request_gets_the_brokers_v0_answer(proxy: ProxyProcess) -> None:
    from insync_proxy.protocol import ApiVersionsResponse, decode_response

    with RawKafkaClient(proxy.bootstrap()) as client:
        # ApiVersions answers always carry response header v0, whatever the request's version
        body = client.request_raw(ApiKey.API_VERSIONS, 99, b"")
    response = decode_response(ApiKey.API_VERSIONS, 0, body)
    assert isinstance(response, ApiVersionsResponse)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.max_version) for k in response.api_keys] == [(ApiKey.API_VERSIONS, 4)]


def test_audit_events_also_reach_the_audit_topic(proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster) -> None:
    from confluent_kafka import TopicPartition

    from harness.proxy_process import AUDIT_TOPIC

    topic = f"audit-kafka-{uuid.uuid4().hex[:8]}"
    kafka_cluster.create_topic(topic, 1, 3)
    with RawKafkaClient(via_leader(proxy, kafka_cluster, topic)) as client:
        client.produce({(topic, 0): batch(b"to-the-topic")}, acks=-2)
    consumer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(AUDIT_TOPIC, 0, 0)])
    schema = json.loads(SCHEMA_FILES[2].read_text())
    found: list[dict[str, Any]] = []

    def decision_arrived() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            event = json.loads(msg.value())
            jsonschema.validate(event, schema)
            assert msg.key() == b"test-proxy"
            if event.get("topic") == topic and event["event"] == "produce_summary":
                found.append(event)
        return bool(found)

    try:
        wait_until(decision_arrived, 60, interval=0, what="the decision in the audit topic")
    finally:
        consumer.close()
    assert found[0]["acks_requested"] == -2 and found[0]["acks_sent"] == -1
    assert proxy.metric("insync_proxy_audit_events_written_total", sink="kafka") > 0
