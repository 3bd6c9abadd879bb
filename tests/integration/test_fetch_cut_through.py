"""Large Fetch responses through the proxy: cut through as they arrive, byte for byte, and v16+
node_endpoints still name the proxy's listeners (issue 13)."""

from __future__ import annotations

import struct
import uuid

import pytest

from harness.proxy_process import ProxyProcess
from harness.raw_client import RawKafkaClient
from insync_proxy.client.blocking_client import BlockingKafkaClient
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.devcluster.distribution import selected_version
from insync_proxy.protocol import ApiKey, MetadataRequest, MetadataResponse
from insync_proxy.protocol.fetch import find_fetch_node_endpoints
from insync_proxy.protocol.messages import MetadataRequestTopic
from insync_proxy.protocol.primitives import Reader, Writer
from insync_proxy.protocol.records import encode_record_batch

NOT_LEADER_OR_FOLLOWER = 6
FETCH_VERSION = 17  # Kafka 4.x's newest but one; v16+ carries node_endpoints

needs_kafka_4 = pytest.mark.skipif(not selected_version().startswith("4."), reason="Fetch v17 needs Kafka 4.x")


def _topic_ids(bootstrap: str, names: list[str]) -> dict[str, uuid.UUID]:
    with BlockingKafkaClient.connect(bootstrap.split(",")[0]) as client:
        md = client.request(MetadataRequest(topics=tuple(MetadataRequestTopic(name=n) for n in names)), 12,
                            MetadataResponse)
    return {t.name: t.topic_id for t in md.topics if t.name is not None and t.topic_id is not None}


def _fetch_v17(partitions: list[uuid.UUID]) -> bytes:
    """A Fetch v17 body: partition 0 of each topic id, from offset 0, up to 8 MiB."""
    w = Writer()
    w.int32(500)  # max_wait_ms
    w.int32(1)  # min_bytes
    w.int32(8 << 20)  # max_bytes
    w.int8(0)  # isolation_level
    w.int32(0)  # session_id
    w.int32(-1)  # session_epoch: no session
    w.array_length(len(partitions), True)
    for topic_id in partitions:
        w.uuid(topic_id)
        w.array_length(1, True)
        w.raw(struct.pack(">iiqiqi", 0, -1, 0, -1, -1, 4 << 20))
        w.uvarint(0)
        w.uvarint(0)
    w.array_length(0, True)  # forgotten topics
    w.string("", False, True)  # rack id
    w.uvarint(0)
    return bytes(w.out)


def _fetch_frame(address: str, body: bytes) -> memoryview:
    """The whole response frame (header included) to one Fetch v17."""
    with BlockingKafkaClient.connect(address) as client:
        correlation_id = client.send_raw(ApiKey.FETCH, FETCH_VERSION, body)
        frame = memoryview(client.receive_frame())
    assert struct.unpack_from(">i", frame)[0] == correlation_id
    return frame


def _partitions(frame: memoryview) -> list[tuple[int, int]]:
    """(error code, records size) of every partition of a Fetch v17 response, in order."""
    r = Reader(frame)
    r.int32()
    r.tagged_fields()
    r.take(10)
    out = []
    for _ in range(r.array_length(True)):
        r.take(16)
        for _ in range(r.array_length(True)):
            r.int32()
            error = r.int16()
            r.take(24)
            for _ in range(max(r.array_length(True), 0)):
                r.take(16)
                r.tagged_fields()
            r.int32()
            records = r.compact_nullable_bytes()
            r.tagged_fields()
            out.append((error, len(records) if records is not None else -1))
        r.tagged_fields()
    return out


@needs_kafka_4
def test_a_large_fetch_v17_with_a_moved_leader_is_passed_through_with_proxy_addresses(
        proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, topic_name: str) -> None:
    # Given broker 1, leader of a partition holding ~3 MiB, and another partition broker 1 does not host
    # (a follower would serve the read itself: KIP-392)
    brokers = sorted(kafka_cluster.brokers)
    here, leader = brokers[0], brokers[1]
    data_topic, moved_topic = f"{topic_name}-data", f"{topic_name}-moved"
    kafka_cluster.create_topic(data_topic, 1, 1, assignments={0: [here]})
    kafka_cluster.create_topic(moved_topic, 1, 1, assignments={0: [leader]})
    batch = encode_record_batch([bytes([i % 256]) * 1024 for i in range(900)])
    with RawKafkaClient(f"127.0.0.1:{kafka_cluster.brokers[here].port}") as producer:
        for _ in range(3):
            assert producer.produce({(data_topic, 0): batch}, acks=1)[(data_topic, 0)].error_code == 0
    ids = _topic_ids(kafka_cluster.bootstrap_servers, [data_topic, moved_topic])
    body = _fetch_v17([ids[data_topic], ids[moved_topic]])
    # When one Fetch v17 asks broker 1 for both, directly and through the proxy's listener for broker 1
    raw = _fetch_frame(f"127.0.0.1:{kafka_cluster.brokers[here].port}", body)
    proxied = _fetch_frame(f"127.0.0.1:{proxy.broker_port(here)}", body)
    # Then the broker answers the records (large: the proxy cuts it through) and NOT_LEADER_OR_FOLLOWER,
    # naming the leader's real address
    assert [e for e, _ in _partitions(raw)] == [0, NOT_LEADER_OR_FOLLOWER]
    assert _partitions(raw)[0][1] > 2 << 20
    assert [(e.node_id, e.host, e.port) for e in find_fetch_node_endpoints(raw, FETCH_VERSION)] == [
        (leader, "127.0.0.1", kafka_cluster.brokers[leader].port)]
    # And through the proxy: the same partitions and records, the proxy's listener for that leader
    assert _partitions(proxied) == _partitions(raw)
    assert [(e.node_id, e.host, e.port) for e in find_fetch_node_endpoints(proxied, FETCH_VERSION)] == [
        (leader, "127.0.0.1", proxy.broker_port(leader))]
    assert len(proxied) == len(raw)
    assert proxy.metric("insync_proxy_address_leaks_total") == 0
