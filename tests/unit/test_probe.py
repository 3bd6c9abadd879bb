"""The dev cluster's probe speaks the schema's bytes: checked by a scripted broker that decodes them."""

from __future__ import annotations

import pytest

from harness.scripted_broker import Received, ScriptedBroker
from insync_proxy.devcluster.probe import ProbeConnection, ProbeError, metadata_from_any
from insync_proxy.protocol import (
    ApiKey,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from insync_proxy.protocol.messages import (
    CreatableReplicaAssignment,
    CreatableTopicConfig,
    CreatableTopicResult,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    PartitionProduceResponse,
    TopicProduceResponse,
)
from insync_proxy.protocol.records import encode_record_batch
from insync_proxy.protocol.schema import Message


def cluster(request: Received) -> Message:
    decoded = request.decoded()
    if isinstance(decoded, MetadataRequest):
        return MetadataResponse(
            brokers=(MetadataResponseBroker(node_id=1, host="127.0.0.1", port=1),
                     MetadataResponseBroker(node_id=2, host="127.0.0.1", port=2)),
            controller_id=2,
            topics=(MetadataResponseTopic(name="t", partitions=(
                MetadataResponsePartition(partition_index=0, leader_id=1, replica_nodes=(1, 2), isr_nodes=(1,)),)),))
    if isinstance(decoded, CreateTopicsRequest):
        return CreateTopicsResponse(topics=tuple(CreatableTopicResult(name=t.name, error_code=36)
                                                 for t in decoded.topics))
    assert isinstance(decoded, ProduceRequest)
    return ProduceResponse(responses=(TopicProduceResponse(name="t", partition_responses=(
        PartitionProduceResponse(index=0, error_code=19),)),))


def test_metadata_reads_brokers_and_partitions() -> None:
    with ScriptedBroker(cluster) as broker, ProbeConnection("127.0.0.1", broker.port) as probe:
        info = probe.metadata(["t"])
    assert info.brokers == {1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2)} and info.controller_id == 2
    p = info.topics["t"].partitions[0]
    assert (p.leader, p.replicas, p.isr) == (1, [1, 2], [1])


def test_create_topic_sends_assignments_and_configs() -> None:
    with ScriptedBroker(cluster) as broker, ProbeConnection("127.0.0.1", broker.port) as probe:
        code = probe.create_topic("t", configs={"min.insync.replicas": "2"}, assignments={1: [2, 1], 0: [1, 2]})
    assert code == 36
    request = broker.received[0].decoded()
    assert isinstance(request, CreateTopicsRequest)
    [topic] = request.topics
    assert (topic.num_partitions, topic.replication_factor) == (-1, -1)
    assert topic.assignments == (CreatableReplicaAssignment(partition_index=0, broker_ids=(1, 2)),
                                 CreatableReplicaAssignment(partition_index=1, broker_ids=(2, 1)))
    assert topic.configs == (CreatableTopicConfig(name="min.insync.replicas", value="2"),)


def test_produce_returns_the_partition_error_code() -> None:
    batch = encode_record_batch([b"ready"])
    with ScriptedBroker(cluster) as broker, ProbeConnection("127.0.0.1", broker.port) as probe:
        assert probe.produce("t", 0, batch, acks=-1) == 19
    request = broker.received[0].decoded()
    assert isinstance(request, ProduceRequest) and request.acks == -1
    assert bytes(request.topic_data[0].partition_data[0].records or b"") == batch


def test_metadata_from_any_skips_brokers_that_do_not_answer() -> None:
    with ScriptedBroker(lambda r: b"") as silent, ScriptedBroker(cluster) as live:
        dead = ScriptedBroker(cluster)
        dead.stop()
        info = metadata_from_any([("127.0.0.1", dead.port), ("127.0.0.1", silent.port), ("127.0.0.1", live.port)],
                                 timeout=0.3)
        assert 1 in info.brokers
        with pytest.raises(ProbeError, match="no broker answered"):
            metadata_from_any([("127.0.0.1", dead.port)], timeout=0.3)


def test_each_request_uses_the_highest_version_both_sides_speak() -> None:
    # Given a Kafka 2.8-like broker (Metadata up to v11, Produce up to v9)
    kafka_28: dict[int, tuple[int, int]] = {ApiKey.METADATA: (0, 11), ApiKey.PRODUCE: (0, 9), ApiKey.CREATE_TOPICS: (0, 7),
                ApiKey.API_VERSIONS: (0, 3)}
    with ScriptedBroker(cluster, api_versions=kafka_28) as broker, \
            ProbeConnection("127.0.0.1", broker.port) as probe:
        probe.metadata(["t"])
        probe.create_topic("t")
        probe.produce("t", 0, encode_record_batch([b"x"]))
    assert [(r.header.request_api_key, r.header.request_api_version) for r in broker.received] == [
        (ApiKey.METADATA, 11), (ApiKey.CREATE_TOPICS, 7), (ApiKey.PRODUCE, 9)]
