"""Golden frames from real brokers and real clients: decode, re-encode byte for byte, expected values.

The proxy under test captures (debug_capture_dir) the raw request of each client and the broker's
unmodified response, for every API the codec decodes, at the versions the clients negotiated.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from harness.proxy_process import ProxyProcess
from harness.waiting import wait_until
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.protocol import (
    ApiKey,
    ApiVersionsResponse,
    MetadataResponse,
    ProduceRequest,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_request_header,
    encode_response,
    find_fetch_node_endpoints,
    split_response,
)
from insync_proxy.protocol.messages import REQUEST_TYPES

NAME = re.compile(r"(?P<api>[A-Za-z]+)-v(?P<version>\d+)-(?P<n>\d+)\.request\.bin$")
API_BY_NAME = {"".join(p.capitalize() for p in k.name.split("_")): int(k) for k in ApiKey}


def drive_real_clients(cluster: LocalKafkaCluster, proxy: ProxyProcess, java_client: Any) -> str:
    """Admin, producer and consumer traffic from librdkafka, kafka-python and the Java client."""
    topic = f"golden-{uuid.uuid4().hex[:8]}"
    bootstrap = proxy.bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 3)]).values():
        future.result(60)
    # CreateTopics returns once the controller has it; a broker that has not caught up yet answers
    # UNKNOWN_TOPIC_OR_PARTITION (seen on a loaded machine): wait until every broker knows it.
    cluster.wait_for_topic(topic, 2, 3)
    for future in admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values():
        future.result(60)
    admin.describe_cluster().result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce(topic, f"golden-{i}".encode(), key=f"k{i}".encode())
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: list[bytes] = []

    def read_all() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append(msg.value())
        return len(seen) >= 20

    wait_until(read_all, 90, interval=0, what="the golden records")
    consumer.close()
    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    kp.send(topic, b"from-kafka-python").get(30)
    kp.close()
    java_client.run("roundtrip", bootstrap, f"golden-java-{uuid.uuid4().hex[:8]}")
    return topic


def check_golden_frames(capture_dir: Path, topic: str) -> set[str]:
    """Every captured frame decodes and re-encodes to the same bytes; returns the APIs seen."""
    seen: set[str] = set()
    requests = sorted(capture_dir.glob("*.request.bin"))
    assert requests, f"nothing captured in {capture_dir}"
    produce_topics: set[str] = set()
    for request_path in requests:
        m = NAME.search(request_path.name)
        assert m, request_path
        key, version = API_BY_NAME[m["api"]], int(m["version"])
        seen.add(f"{m['api']} v{version}")
        frame = request_path.read_bytes()
        header, offset = decode_request_header(frame)
        assert encode_request_header(header) == frame[:offset], request_path.name
        if key in REQUEST_TYPES:
            request = decode_request(key, version, frame[offset:])
            assert encode_request(request, version) == frame[offset:], request_path.name
            if isinstance(request, ProduceRequest):
                produce_topics.update(t.name for t in request.topic_data)
        response = request_path.with_name(request_path.name.replace(".request.", ".response.")).read_bytes()
        if key == ApiKey.FETCH:
            find_fetch_node_endpoints(response, version)  # the walk over every partition succeeds
            continue
        correlation_id, body = split_response(response, key, version)
        assert correlation_id == header.correlation_id
        decoded = decode_response(key, version, body)
        assert encode_response(decoded, version) == bytes(body), f"{request_path.name}: re-encode differs"
        if isinstance(decoded, MetadataResponse) and decoded.brokers:
            assert len(decoded.brokers) == 3
        if isinstance(decoded, ApiVersionsResponse) and decoded.error_code == 0:
            assert any(k.api_key == ApiKey.PRODUCE for k in decoded.api_keys)
    assert topic in produce_topics
    return seen


def _run(cluster: LocalKafkaCluster, java_client: Any) -> None:
    # A proxy of its own: its capture directory holds only this test's frames
    proxy = ProxyProcess(cluster).start()
    try:
        topic = drive_real_clients(cluster, proxy, java_client)
    finally:
        proxy.stop()
    seen = check_golden_frames(proxy.capture_dir, topic)
    apis = {s.split()[0] for s in seen}
    assert {"ApiVersions", "Metadata", "Produce", "FindCoordinator", "DescribeConfigs", "DescribeCluster",
            "Fetch"} <= apis, seen
    print(f"golden frames checked: {sorted(seen)}")


def test_golden_frames_from_kafka_4(kafka_cluster: LocalKafkaCluster, java_client: Any) -> None:
    _run(kafka_cluster, java_client)


@pytest.mark.kafka39
def test_golden_frames_from_kafka_39(kafka_cluster: LocalKafkaCluster, java_client: Any) -> None:
    assert kafka_cluster.version.startswith("3.9.")
    _run(kafka_cluster, java_client)
