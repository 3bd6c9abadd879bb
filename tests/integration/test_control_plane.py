"""Demand-driven control plane (issue #29): an idle proxy in front of many topics reads configs only for the
topics its clients use, whatever the cluster holds (and nothing for the made-up topics a client names)."""

from __future__ import annotations

import shutil
import struct
import time
import uuid

from harness.proxy_process import ProxyProcess
from insync_proxy.client.blocking_client import BlockingKafkaClient, request_frame
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.protocol import (
    NO_SUCH_TOPIC_ERRORS,
    ApiKey,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
)
from insync_proxy.protocol.messages import CreatableTopic, MetadataRequestTopic

TOPICS = 300
#: Made-up topic names a client asks Metadata of: they must cost the proxy no control request.
MADE_UP = 50


def _create(cluster: LocalKafkaCluster, names: list[str]) -> None:
    with BlockingKafkaClient.connect(cluster.bootstrap_servers, timeout=120) as client:
        for i in range(0, len(names), 100):
            response = client.request(CreateTopicsRequest(topics=tuple(
                CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in names[i:i + 100]),
                timeout_ms=60000), 4, CreateTopicsResponse)
            assert all(t.error_code in (0, 36) for t in response.topics), response.topics[:3]
    cluster.wait_for(lambda: all(n in cluster.metadata(names).topics for n in names), 120, f"{len(names)} topics")


def _delete(cluster: LocalKafkaCluster, names: list[str]) -> None:
    """DeleteTopics v1 (topic_names, timeout_ms): the shared cluster is left as this test found it."""
    body = struct.pack(">i", len(names)) + b"".join(struct.pack(">h", len(n)) + n.encode() for n in names)
    with BlockingKafkaClient.connect(cluster.bootstrap_servers, timeout=120) as client:
        client.send_bytes(request_frame(ApiKey.DELETE_TOPICS, 1, body + struct.pack(">i", 60000), client_id="t"))
        client.receive_frame()


def _wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def test_an_idle_proxy_in_front_of_many_topics_reads_configs_only_for_the_topics_in_use(
    kafka_cluster: LocalKafkaCluster,
) -> None:
    prefix = f"cp-{uuid.uuid4().hex[:6]}-"
    names = [f"{prefix}{i:03d}" for i in range(TOPICS)]
    _create(kafka_cluster, names)
    # metadata_refresh_seconds 2 and a 5 s min.insync TTL (the harness's): many refreshes and TTLs in a few seconds
    proxy = ProxyProcess(kafka_cluster, groups=("default",), audit_enabled=False).start()
    try:
        # Given a proxy that has started: its warm-up read every topic's min.insync.replicas once
        warmed = proxy.metric("insync_proxy_topic_configs_read_total")
        assert warmed >= TOPICS
        # When a client names only made-up topics (the broker answers each as not there), again and again
        described = proxy.metric("insync_proxy_control_requests_total", api="DESCRIBE_CONFIGS")
        misses = proxy.metric("insync_proxy_metadata_cache_misses_total")
        made_up = [f"{prefix}made-up-{i:02d}" for i in range(MADE_UP)]
        with BlockingKafkaClient.connect(proxy.bootstrap(), timeout=30) as client:
            for _ in range(3):
                response = client.request(MetadataRequest(topics=tuple(MetadataRequestTopic(name=t) for t in made_up),
                                                          allow_auto_topic_creation=False), 12, MetadataResponse)
                assert sorted(t.name or "" for t in response.topics) == made_up
                assert all(t.error_code in NO_SUCH_TOPIC_ERRORS and t.min_insync_replicas == -1
                           for t in response.topics), response.topics[:3]
        # Then they were not looked up: no cache miss (counted before the answer goes out)
        assert proxy.metric("insync_proxy_metadata_cache_misses_total") == misses
        # And while idle (three periodic refreshes): no client named a real topic, so it follows none, sends no
        # DescribeConfigs and reads no config (the made-up names neither)
        refreshes = proxy.metric("insync_proxy_control_requests_total", api="METADATA")
        _wait(lambda: proxy.metric("insync_proxy_control_requests_total", api="METADATA") >= refreshes + 3, 60,
              "three periodic Metadata refreshes")
        assert proxy.metric("insync_proxy_topics_in_use") == 0
        assert proxy.metric("insync_proxy_topic_configs_read_total") == warmed
        assert proxy.metric("insync_proxy_control_requests_total", api="DESCRIBE_CONFIGS") == described
        # When a client asks Metadata of three of them
        used = names[:3]
        with BlockingKafkaClient.connect(proxy.bootstrap(), timeout=30) as client:
            def carried() -> bool:
                response = client.request(MetadataRequest(topics=tuple(MetadataRequestTopic(name=t) for t in used)),
                                          12, MetadataResponse)
                return all(t.min_insync_replicas >= 1 for t in response.topics)

            _wait(carried, 10, "tag 637 on the three topics")
        read_after_first = proxy.metric("insync_proxy_topic_configs_read_total")
        # Then only those three come into use (the gauge follows at the cache's next tick: the warm-up's values
        # served the answer without a read), and over two TTLs only they are read again (ahead of expiry)
        _wait(lambda: proxy.metric("insync_proxy_topics_in_use") == 3, 30, "three topics in use")
        started = time.monotonic()
        refreshes = proxy.metric("insync_proxy_control_requests_total", api="METADATA")
        _wait(lambda: proxy.metric("insync_proxy_control_requests_total", api="METADATA") >= refreshes + 5, 60,
              "five periodic Metadata refreshes (two TTLs)")
        read = proxy.metric("insync_proxy_topic_configs_read_total") - read_after_first
        # Each topic in use is read at most once per half TTL (its refresh point is at 50-80%), never the 300
        assert 1 <= read <= 3 * ((time.monotonic() - started) / 2.5 + 1), read
        assert proxy.metric("insync_proxy_topics_in_use") == 3
    finally:
        proxy.stop()
        shutil.rmtree(proxy.dir, ignore_errors=True)
        _delete(kafka_cluster, names)
