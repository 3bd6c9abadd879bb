"""No hidden API: share groups (KIP-932) and the metadata quorum work through the proxy, and every
address they carry (ShareFetch/ShareAcknowledge node_endpoints, DescribeQuorum v2 listeners) names a
proxy listener, never a broker or a controller."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from harness.java_client import JavaClient
from harness.proxy_process import ProxyProcess
from insync_proxy.client.blocking_client import BlockingKafkaClient, parse_address
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from insync_proxy.devcluster.distribution import selected_version
from insync_proxy.protocol import ApiKey, MetadataRequest, MetadataResponse
from insync_proxy.protocol.messages import (
    DescribeQuorumRequest,
    DescribeQuorumRequestPartition,
    DescribeQuorumRequestTopic,
    DescribeQuorumResponse,
    MetadataRequestTopic,
    ShareFetchResponse,
    decode_describe_quorum_response,
    encode_describe_quorum_request,
)
from insync_proxy.protocol.primitives import Writer
from insync_proxy.protocol.schema import decode_struct

SHARE_CHECK = Path(__file__).parent.parent / "java" / "ShareCheck.java"
NOT_LEADER_OR_FOLLOWER = 6

needs_kafka_4 = pytest.mark.skipif(not selected_version().startswith("4."), reason="share groups need Kafka 4.x")


@pytest.fixture(scope="module")
def share_check() -> JavaClient:
    """tests/java/ShareCheck.java compiled against the selected Kafka's kafka-clients."""
    return JavaClient(selected_version(), SHARE_CHECK)


@needs_kafka_4
def test_every_api_the_broker_advertises_is_advertised_through_the_proxy(
        proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster) -> None:
    # Given the broker's own ApiVersions answer and the proxy's
    with BlockingKafkaClient.connect(kafka_cluster.bootstrap_servers) as direct:
        broker = direct.api_versions()
    with BlockingKafkaClient.connect(proxy.bootstrap()) as client:
        through_proxy = client.api_versions()
    # Then no API is hidden and none is capped: share groups and the quorum come with every version
    assert set(through_proxy) == set(broker)
    for key in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE, ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.DESCRIBE_QUORUM):
        assert through_proxy[key] == broker[key], ApiKey(key).name
    assert through_proxy[ApiKey.DESCRIBE_QUORUM][1] >= 2
    assert {ApiKey(k).name: v for k, v in through_proxy.items() if broker[k] != v} == {}


@needs_kafka_4
def test_share_group_consumer_consumes_through_the_proxy(
        proxy: ProxyProcess, share_check: JavaClient, topic_name: str) -> None:
    # Given 300 records produced through the proxy
    # When Kafka's KafkaShareConsumer reads them through the proxy, acknowledging each explicitly
    out = share_check.run("consume", proxy.bootstrap(), topic_name, "300")
    # Then it got every record, the group's lag is 0 on every partition (acknowledgements arrived)
    assert "consumed 300 of 300" in out, out
    assert "lag 0 on 3 partitions" in out, out
    # And the share APIs went through the proxy, with no broker address in any answer
    assert proxy.metric("insync_proxy_requests_total", api="ShareGroupHeartbeat") > 0
    assert proxy.metric("insync_proxy_requests_total", api="ShareFetch") > 0
    assert proxy.metric("insync_proxy_requests_total", api="ShareAcknowledge") > 0
    assert proxy.metric("insync_proxy_address_leaks_total") == 0


def _topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    with BlockingKafkaClient.connect(bootstrap) as client:
        response = client.request(MetadataRequest(topics=(MetadataRequestTopic(name=topic),)), 12, MetadataResponse)
    return response.topics[0].topic_id


def _share_fetch_v1(group: str, topic_id: uuid.UUID, partition: int) -> bytes:
    """A ShareFetch v1 request body opening a share session (epoch 0) on one partition."""
    w = Writer()
    w.string(group, True, True)
    w.string(str(uuid.uuid4()), True, True)  # member_id
    w.int32(0)  # share_session_epoch: a new session
    w.int32(100)  # max_wait_ms
    w.int32(1)  # min_bytes
    w.int32(1 << 20)  # max_bytes
    w.int32(100)  # max_records
    w.int32(100)  # batch_size
    w.array_length(1, True)
    w.uuid(topic_id)
    w.array_length(1, True)
    w.int32(partition)
    w.array_length(0, True)  # acknowledgement_batches
    w.uvarint(0)
    w.uvarint(0)
    w.array_length(0, True)  # forgotten_topics_data
    w.uvarint(0)
    return w.getvalue()


@needs_kafka_4
def test_share_fetch_to_a_follower_names_the_leader_by_its_proxy_listener(
        proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, topic_name: str) -> None:
    # Given a one-partition topic and a broker that is not its leader
    kafka_cluster.create_topic(topic_name, 1, 2)
    info = kafka_cluster.metadata([topic_name])
    partition = info.topics[topic_name].partitions[0]
    follower = next(n for n in sorted(info.brokers) if n != partition.leader)
    topic_id = _topic_id(kafka_cluster.bootstrap_servers, topic_name)
    body = _share_fetch_v1(f"share-{topic_name}", topic_id, 0)
    # When a share consumer sends ShareFetch to that broker directly and through its proxy listener
    host, port = info.brokers[follower]
    with BlockingKafkaClient.connect(f"{host}:{port}") as direct:
        raw = decode_struct(ShareFetchResponse, 1, direct.request_raw(ApiKey.SHARE_FETCH, 1, body), True)
    with BlockingKafkaClient.connect(f"127.0.0.1:{proxy.broker_port(follower)}") as client:
        frame = client.request_raw(ApiKey.SHARE_FETCH, 1, body)
        proxied = decode_struct(ShareFetchResponse, 1, frame, True)
    # Then the broker names the leader's real address, and the proxy its own listener for that leader
    assert raw.responses[0].partitions[0].error_code == NOT_LEADER_OR_FOLLOWER, raw
    assert [(e.node_id, e.host, e.port) for e in raw.node_endpoints] == [(partition.leader, *info.brokers[
        partition.leader])]
    assert proxied.responses[0].partitions[0].error_code == NOT_LEADER_OR_FOLLOWER
    assert proxied.responses[0].partitions[0].current_leader.leader_id == partition.leader
    assert [(e.node_id, e.host, e.port) for e in proxied.node_endpoints] == [
        (partition.leader, "127.0.0.1", proxy.broker_port(partition.leader))]
    assert proxy.metric("insync_proxy_address_leaks_total") == 0


def _describe_quorum_v2_directly_and_through(
        proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster) -> tuple[DescribeQuorumResponse, DescribeQuorumResponse]:
    """The quorum as a broker describes it (v2), and as the proxy passes it on; the proxy's frame has
    no trace of the controller's real port."""
    controller = ("127.0.0.1", kafka_cluster.controller.port)
    request = encode_describe_quorum_request(DescribeQuorumRequest(topics=(DescribeQuorumRequestTopic(
        topic_name="__cluster_metadata", partitions=(DescribeQuorumRequestPartition(partition_index=0),)),)), 2)
    with BlockingKafkaClient.connect(kafka_cluster.bootstrap_servers) as direct:
        raw = decode_describe_quorum_response(2, direct.request_raw(ApiKey.DESCRIBE_QUORUM, 2, request))
    assert [(ln.host, ln.port) for n in raw.nodes for ln in n.listeners] == [controller]
    with BlockingKafkaClient.connect(proxy.bootstrap()) as client:
        body = client.request_raw(ApiKey.DESCRIBE_QUORUM, 2, request)
    assert controller[1].to_bytes(2, "big") + b"\x00" not in body[-8:]
    return raw, decode_describe_quorum_response(2, body)


def _assert_only_proxy_addresses(proxy: ProxyProcess, raw: DescribeQuorumResponse,
                                 proxied: DescribeQuorumResponse) -> None:
    assert [n.node_id for n in proxied.nodes] == [n.node_id for n in raw.nodes]
    for node in proxied.nodes:
        assert node.listeners and all(
            (ln.host, ln.port) == ("127.0.0.1", proxy.broker_port(node.node_id)) for ln in node.listeners)
    # Two requests apart, the replicas' offsets and timestamps move; the quorum's leader does not.
    assert proxied.topics[0].partitions[0].leader_id == raw.topics[0].partitions[0].leader_id


@needs_kafka_4
def test_describe_quorum_v2_through_the_proxy_names_only_proxy_addresses(
        proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster, share_check: JavaClient) -> None:
    # Given the quorum as a broker describes it (the controller's real listener)
    # When the same DescribeQuorum v2 goes through the proxy
    raw, proxied = _describe_quorum_v2_directly_and_through(proxy, kafka_cluster)
    # Then every listener of every node is the proxy's address for that node id, the rest unchanged
    _assert_only_proxy_addresses(proxy, raw, proxied)
    # And Kafka's own Admin (describeMetadataQuorum negotiates v2) sees the same
    controller = ("127.0.0.1", kafka_cluster.controller.port)
    out = share_check.run("quorum", proxy.bootstrap())
    nodes = [line.split() for line in out.splitlines() if line.startswith("node ")]
    assert nodes, out
    for _, node_id, _name, address in nodes:
        assert parse_address(address) == ("127.0.0.1", proxy.broker_port(int(node_id))), out
        assert parse_address(address) != controller


@pytest.mark.kafka39
def test_describe_quorum_v2_of_kafka_39_through_the_proxy_names_only_proxy_addresses(
        proxy: ProxyProcess, kafka_cluster: LocalKafkaCluster) -> None:
    # DescribeQuorum v2 (KIP-853) shipped in 3.9: the same rewrite on the second supported version
    raw, proxied = _describe_quorum_v2_directly_and_through(proxy, kafka_cluster)
    _assert_only_proxy_addresses(proxy, raw, proxied)
