"""Cross-check against kio (Aiven's generated Kafka types), used only as a test oracle.

Our bytes must be readable by kio's reader for the same version, and kio's writer must give the
very same bytes back: two independent codecs agree on the layout. Skipped when kio is missing.
"""

from __future__ import annotations

import importlib
import io
import uuid
from typing import Any

import pytest

from insync_proxy.protocol.messages import (
    ApiVersion,
    ApiVersionsResponse,
    Coordinator,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeClusterBroker,
    DescribeClusterResponse,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
    FindCoordinatorResponse,
    LeaderIdAndEpoch,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    NodeEndpoint,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    TopicProduceData,
    TopicProduceResponse,
    encode_request,
    encode_response,
)
from insync_proxy.protocol.schema import Message

kio_serial = pytest.importorskip("kio.serial")

TOPIC_ID = uuid.UUID("0b8e6c51-2f5f-4a43-9c3e-6c1b5c1f0a01")

SAMPLES: list[tuple[str, str, Message, range]] = [
    ("metadata", "response", MetadataResponse(
        throttle_time_ms=5,
        brokers=(MetadataResponseBroker(node_id=1, host="broker-1", port=9092, rack="r1"),
                 MetadataResponseBroker(node_id=2, host="broker-2", port=9093)),
        cluster_id="cluster", controller_id=1,
        topics=(MetadataResponseTopic(name="orders", topic_id=TOPIC_ID, partitions=(
            MetadataResponsePartition(partition_index=0, leader_id=1, leader_epoch=3, replica_nodes=(1, 2, 3),
                                      isr_nodes=(1, 2), offline_replicas=(3,)),
            MetadataResponsePartition(error_code=5, partition_index=1, leader_id=-1, leader_epoch=3,
                                      replica_nodes=(2, 3), isr_nodes=())),
            topic_authorized_operations=0),)), range(0, 14)),
    ("metadata", "request", MetadataRequest(
        topics=(MetadataRequestTopic(name="orders", topic_id=TOPIC_ID),), allow_auto_topic_creation=False,
        include_topic_authorized_operations=True), range(0, 14)),
    ("produce", "request", ProduceRequest(
        transactional_id="tx-1", acks=-1, timeout_ms=30000,
        topic_data=(TopicProduceData(name="orders", topic_id=TOPIC_ID, partition_data=(
            PartitionProduceData(index=0, records=b"\x00" * 70),)),)), range(3, 14)),
    ("produce", "response", ProduceResponse(
        responses=(TopicProduceResponse(name="orders", topic_id=TOPIC_ID, partition_responses=(
            PartitionProduceResponse(index=0, error_code=6, base_offset=10, log_append_time_ms=-1,
                                     log_start_offset=0, error_message="moved",
                                     current_leader=LeaderIdAndEpoch(leader_id=2, leader_epoch=4)),)),),
        throttle_time_ms=0, node_endpoints=(NodeEndpoint(node_id=2, host="broker-2", port=9093),)), range(3, 14)),
    ("api_versions", "response", ApiVersionsResponse(
        api_keys=(ApiVersion(api_key=0, min_version=3, max_version=12),
                  ApiVersion(api_key=18, min_version=0, max_version=4)),
        throttle_time_ms=0), range(0, 5)),
    ("find_coordinator", "response", FindCoordinatorResponse(
        node_id=1, host="broker-1", port=9092,
        coordinators=(Coordinator(key="group", node_id=1, host="broker-1", port=9092),)), range(0, 7)),
    ("describe_cluster", "response", DescribeClusterResponse(
        cluster_id="cluster", controller_id=1,
        brokers=(DescribeClusterBroker(broker_id=1, host="broker-1", port=9092, rack="r1"),)), range(0, 3)),
    ("describe_configs", "response", DescribeConfigsResponse(results=(DescribeConfigsResult(
        resource_type=2, resource_name="orders", configs=(DescribeConfigsResourceResult(
            name="min.insync.replicas", value="2", config_source=1, documentation="doc",
            synonyms=(DescribeConfigsSynonym(name="min.insync.replicas", value="2", source=1),)),)),)),
     range(1, 5)),
    ("create_topics", "request", CreateTopicsRequest(
        topics=(CreatableTopic(name="orders", num_partitions=3, replication_factor=3,
                               configs=(CreatableTopicConfig(name="min.insync.replicas", value="2"),
                                        CreatableTopicConfig(name="retention.ms", value=None))),
                CreatableTopic(name="placed", assignments=(
                    CreatableReplicaAssignment(partition_index=0, broker_ids=(1, 2, 3)),
                    CreatableReplicaAssignment(partition_index=1, broker_ids=(2, 3, 1))))),
        timeout_ms=30000, validate_only=True), range(2, 8)),
    ("create_topics", "response", CreateTopicsResponse(throttle_time_ms=3, topics=(
        CreatableTopicResult(name="orders", topic_id=TOPIC_ID, num_partitions=3, replication_factor=3,
                             configs=(CreatableTopicConfigs(name="min.insync.replicas", value="2", config_source=1),
                                      CreatableTopicConfigs(name="password", read_only=True, is_sensitive=True))),
        CreatableTopicResult(name="placed", error_code=36, error_message="exists", topic_config_error_code=29,
                             configs=None))), range(2, 8)),
    ("sasl_handshake", "request", SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), range(0, 2)),
    ("sasl_handshake", "response", SaslHandshakeResponse(
        error_code=33, mechanisms=("PLAIN", "SCRAM-SHA-256")), range(0, 2)),
    ("sasl_authenticate", "request", SaslAuthenticateRequest(auth_bytes=b"n,,n=user,r=abc"), range(0, 3)),
    ("sasl_authenticate", "response", SaslAuthenticateResponse(
        error_message="welcome", auth_bytes=b"r=abcdef,s=c2FsdA==,i=4096", session_lifetime_ms=3600000),
     range(0, 3)),
]

CASES = [(api, kind, msg, v) for api, kind, msg, versions in SAMPLES for v in versions]


def _kio_class(api: str, kind: str, version: int) -> Any:
    try:
        module = importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")
    except ImportError:
        pytest.skip(f"kio has no {api} v{version} {kind}")
    return getattr(module, "".join(p.capitalize() for p in api.split("_")) + kind.capitalize())


@pytest.mark.parametrize(("api", "kind", "msg", "version"), CASES,
                         ids=[f"{a}-{k}-v{v}" for a, k, _, v in CASES])
def test_kio_reads_our_bytes_and_writes_them_back_identically(api: str, kind: str, msg: Message,
                                                               version: int) -> None:
    # Given our encoding of a realistic message
    ours = encode_request(msg, version) if kind == "request" else encode_response(msg, version)
    kio_cls = _kio_class(api, kind, version)
    # When kio decodes it and encodes its own value again
    value, size = kio_serial.entity_reader(kio_cls)(memoryview(ours), 0)
    out = io.BytesIO()
    kio_serial.entity_writer(kio_cls)(out, value)
    # Then kio consumed every byte and produced exactly our bytes
    assert size == len(ours)
    assert out.getvalue() == ours
