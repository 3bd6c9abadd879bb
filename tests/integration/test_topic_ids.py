"""Produce v13 names topics by id: the proxy names them before any decision, against the real cluster."""

from __future__ import annotations

import json
import re
import uuid

from harness.proxy_process import ProxyProcess
from harness.raw_client import batch
from harness.waiting import wait_until
from insync_proxy.client.blocking_client import BlockingKafkaClient
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.protocol import MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse
from insync_proxy.protocol.messages import MetadataRequestTopic, PartitionProduceData, TopicProduceData

UUID_TEXT = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _topic_id(cluster: LocalKafkaCluster, topic: str) -> uuid.UUID:
    """The topic's id, asked of a broker directly (as a client that created it would know it)."""
    with BlockingKafkaClient.connect(cluster.bootstrap_servers.split(",")[0]) as client:
        response = client.request(MetadataRequest(topics=(MetadataRequestTopic(name=topic),)), 12, MetadataResponse)
    (found,) = response.topics
    assert found.error_code == 0
    return found.topic_id


def test_produce_v13_to_a_topic_the_proxy_never_saw_gets_its_acks_floor_on_the_first_request(
    kafka_cluster: LocalKafkaCluster,
) -> None:
    # Given a proxy whose own refresh will not run during the test (it learns the new topic only by asking)
    proxy = ProxyProcess(kafka_cluster, metadata_refresh_seconds=3600).start()
    try:
        # and a topic under the acks_floor=-1 policy (floor-.*), created directly on the cluster just now
        topic = f"floor-v13-{uuid.uuid4().hex[:8]}"
        kafka_cluster.create_topic(topic, 1, 3)
        topic_id = _topic_id(kafka_cluster, topic)
        leader = kafka_cluster.wait_for_leader(topic, 0)
        # When a client's very first request to it is a Produce v13 with acks=1, naming it by id
        request = ProduceRequest(acks=1, timeout_ms=30000, topic_data=(TopicProduceData(
            topic_id=topic_id, partition_data=(PartitionProduceData(index=0, records=batch(b"first")),)),))
        with BlockingKafkaClient.connect(f"127.0.0.1:{proxy.broker_port(leader)}") as client:
            response = client.request(request, 13, ProduceResponse)
        assert response.responses[0].partition_responses[0].error_code == 0
        # Then the floor applied to that very request, under the topic's name
        assert proxy.metric("insync_proxy_acks_floor_applied_total", topic=topic) == 1
        assert proxy.metric("insync_proxy_produce_partitions_total", topic=topic, acks_requested="1",
                            acks_sent="-1", decision="raised_by_floor") == 1
        events = wait_until(lambda: [e for e in proxy.audit_events()
                                     if e["event"] == "produce_summary" and e["topic"] == topic], 30,
                            what="the summary of the v13 request")
        assert [(e["acks_requested"], e["acks_sent"], e["decision"], e["requests"]) for e in events] == [
            (1, -1, "raised_by_floor", 1)]
        # And no audit event or metric label anywhere is a topic id
        assert not [e for e in proxy.audit_events() if UUID_TEXT.fullmatch(str(e.get("topic", "")))]
        assert str(topic_id) not in proxy.metrics_text()
        assert str(topic_id) not in json.dumps(proxy.audit_events())
    finally:
        proxy.stop()
