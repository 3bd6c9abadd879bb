"""Hand-built frames decode to the expected typed values (and encode back to the same bytes)."""

from __future__ import annotations

import struct
import uuid

import pytest

from insync_proxy.protocol.api_keys import ApiKey
from insync_proxy.protocol.errors import MalformedFrame, ProtocolError, UnsupportedVersion
from insync_proxy.protocol.messages import (
    SUPPORTED_VERSIONS,
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    Coordinator,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    Kip637MetadataResponseTopic,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseKip637,
    MetadataResponsePartition,
    ProduceRequest,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    decode_metadata_response_kip637,
    decode_request,
    decode_response,
    encode_metadata_response_kip637,
    encode_request,
    encode_response,
)
from insync_proxy.protocol.schema import STRING, encode_value

TOPIC_ID = uuid.UUID("0b8e6c51-2f5f-4a43-9c3e-6c1b5c1f0a01")


def h(*parts: str) -> bytes:
    return bytes.fromhex("".join(parts))


def check(api_key: int, version: int, wire: bytes, expected: object, response: bool = True) -> None:
    decode = decode_response if response else decode_request
    encode = encode_response if response else encode_request
    got = decode(api_key, version, wire)
    assert got == expected
    assert encode(got, version) == wire  # type: ignore[arg-type]


def test_supported_versions_cover_kafka_3_9_and_4_x() -> None:
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE] == (0, 13)
    assert SUPPORTED_VERSIONS[ApiKey.METADATA] == (0, 13)
    assert SUPPORTED_VERSIONS[ApiKey.API_VERSIONS] == (0, 4)
    assert SUPPORTED_VERSIONS[ApiKey.FIND_COORDINATOR] == (0, 6)
    assert SUPPORTED_VERSIONS[ApiKey.DESCRIBE_CLUSTER] == (0, 2)
    assert SUPPORTED_VERSIONS[ApiKey.DESCRIBE_CONFIGS] == (0, 4)
    assert SUPPORTED_VERSIONS[ApiKey.CREATE_TOPICS] == (0, 7)
    assert SUPPORTED_VERSIONS[ApiKey.SASL_HANDSHAKE] == (0, 1)
    assert SUPPORTED_VERSIONS[ApiKey.SASL_AUTHENTICATE] == (0, 2)


def test_api_versions_response_v0_decodes() -> None:
    wire = h("0000", "00000001", "0012", "0000", "0003")
    check(18, 0, wire, ApiVersionsResponse(api_keys=(ApiVersion(api_key=18, min_version=0, max_version=3),)))


def test_api_versions_response_v3_reads_tagged_finalized_epoch() -> None:
    wire = h("0000", "02", "0012", "0000", "0004", "00", "00000000", "01", "01", "08", "0000000000000005")
    msg = decode_response(18, 3, wire)
    assert isinstance(msg, ApiVersionsResponse)
    assert msg.finalized_features_epoch == 5 and msg.api_keys[0].max_version == 4
    assert encode_response(msg, 3) == wire


def test_api_versions_request_v3_carries_client_software() -> None:
    check(18, 3, h("05", "6b696f", "00"[:0], "02", "31", "00").replace(b"\x05kio", b"\x04kio"),
          ApiVersionsRequest(client_software_name="kio", client_software_version="1"), response=False)


def test_metadata_response_v12_decodes_brokers_topics_partitions() -> None:
    wire = h(
        "00000000",  # throttle_time_ms
        "02", "00000001", "0262", "00002384", "00", "00",  # brokers: 1 "b" 9092 rack=null
        "0263",  # cluster_id "c"
        "00000001",  # controller_id
        "02", "0000", "0274", TOPIC_ID.hex, "00",  # topic: error 0, "t", topic_id, internal false
        "02", "0000", "00000000", "00000001", "00000005", "04000000010000000200000003", "030000000100000002", "01",
        "00",  # partition 0
        "80000000", "00",  # topic_authorized_operations, tags
        "00",  # top-level tags
    )
    msg = decode_response(3, 12, wire)
    assert isinstance(msg, MetadataResponse)
    assert (msg.brokers[0].node_id, msg.brokers[0].host, msg.brokers[0].port, msg.brokers[0].rack) == (1, "b", 9092,
                                                                                                        None)
    topic = msg.topics[0]
    assert (topic.name, topic.topic_id, topic.min_insync_replicas) == ("t", TOPIC_ID, -1)
    assert topic.partitions[0] == MetadataResponsePartition(partition_index=0, leader_id=1, leader_epoch=5,
                                                            replica_nodes=(1, 2, 3), isr_nodes=(1, 2))
    assert encode_response(msg, 12) == wire
    # v13 adds the top-level error_code before the tagged fields
    assert encode_response(msg, 13) == wire[:-1] + h("0000", "00")


def test_metadata_request_v1_null_topics_means_all_topics() -> None:
    check(3, 1, h("ffffffff"), MetadataRequest(topics=None), response=False)
    check(3, 0, h("00000000"), MetadataRequest(topics=()), response=False)


def test_produce_request_v3_keeps_records_as_views() -> None:
    wire = h("ffff", "ffff", "00007530", "00000001", "0001", "74", "00000001", "00000002", "00000003", "616263")
    msg = decode_request(0, 3, wire)
    assert isinstance(msg, ProduceRequest)
    assert (msg.transactional_id, msg.acks, msg.timeout_ms) == (None, -1, 30000)
    records = msg.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and bytes(records) == b"abc"
    assert encode_request(msg, 3) == wire


def test_find_coordinator_v0_and_v4_shapes() -> None:
    check(10, 0, h("0000", "00000001", "0001", "68", "00002384"),
          FindCoordinatorResponse(node_id=1, host="h", port=9092))
    check(10, 4, h("00000000", "02", "0267", "00000001", "0268", "00002384", "0000", "00", "00", "00"),
          FindCoordinatorResponse(coordinators=(Coordinator(key="g", node_id=1, host="h", port=9092),)))
    check(10, 4, h("01", "02", "0267", "00"), FindCoordinatorRequest(key_type=1, coordinator_keys=("g",)),
          response=False)


def test_describe_cluster_v1_and_v2_fenced_broker() -> None:
    base = h("00000000", "0000", "00", "01", "0263", "00000001",
             "02", "00000001", "0268", "00002384", "00")
    v1 = base + h("00", "80000000", "00")
    check(60, 1, v1, DescribeClusterResponse(cluster_id="c", controller_id=1,
                                             brokers=(DescribeClusterBroker(broker_id=1, host="h", port=9092),)))
    v2 = base + h("01", "00", "80000000", "00")
    check(60, 2, v2, DescribeClusterResponse(cluster_id="c", controller_id=1, brokers=(
        DescribeClusterBroker(broker_id=1, host="h", port=9092, is_fenced=True),)))
    check(60, 2, h("00", "01", "01", "00"), DescribeClusterRequest(include_fenced_brokers=True), response=False)


def test_describe_configs_request_and_response_v4() -> None:
    check(32, 4, h("02", "02", "0274", "02", "146d696e2e696e73796e632e7265706c69636173", "00", "00", "00", "00"),
          DescribeConfigsRequest(resources=(DescribeConfigsResource(
              resource_type=2, resource_name="t", configuration_keys=("min.insync.replicas",)),)),
          response=False)
    wire = h("00000000", "02", "0000", "00", "02", "0274",
             "02", "146d696e2e696e73796e632e7265706c69636173", "0232", "00", "01", "00", "01", "00", "00", "00",
             "00", "00")
    msg = decode_response(32, 4, wire)
    assert isinstance(msg, DescribeConfigsResponse)
    config = msg.results[0].configs[0]
    assert (config.name, config.value, config.config_source) == ("min.insync.replicas", "2", 1)
    assert encode_response(msg, 4) == wire


def test_create_topics_request_v2_with_assignments_and_configs() -> None:
    # The layout the dev cluster's probe used to write by hand
    wire = h("00000001", "0001", "74", "ffffffff", "ffff",  # one topic "t", -1 partitions, -1 replication
             "00000001", "00000000", "00000002", "00000001", "00000002",  # partition 0 on brokers 1, 2
             "00000001", "0001", "6b", "ffff",  # config k = null
             "00007530", "00")  # timeout 30 s, validate_only false
    check(19, 2, wire, CreateTopicsRequest(
        topics=(CreatableTopic(name="t", assignments=(CreatableReplicaAssignment(partition_index=0, broker_ids=(1, 2)),),
                               configs=(CreatableTopicConfig(name="k", value=None),)),),
        timeout_ms=30000), response=False)


def test_create_topics_response_v2_and_v7() -> None:
    check(19, 2, h("00000000", "00000001", "0001", "74", "0024", "ffff"),
          CreateTopicsResponse(topics=(CreatableTopicResult(name="t", error_code=36),)))
    # v7: topic_id after the name; num_partitions, replication_factor, null configs; tag 0 = config error
    wire = h("00000000", "02", "0274", TOPIC_ID.hex, "0000", "00", "00000003", "0003", "00",
             "01", "00", "02", "001d", "00")
    check(19, 7, wire, CreateTopicsResponse(topics=(CreatableTopicResult(
        name="t", topic_id=TOPIC_ID, num_partitions=3, replication_factor=3, configs=None,
        topic_config_error_code=29),)))


def test_sasl_handshake_v1_and_authenticate_v1_v2() -> None:
    check(17, 1, h("0005", "504c41494e"), SaslHandshakeRequest(mechanism="PLAIN"), response=False)
    check(17, 1, h("0021", "00000001", "0005", "504c41494e"),
          SaslHandshakeResponse(error_code=33, mechanisms=("PLAIN",)))
    check(36, 1, h("00000002", "0000"), SaslAuthenticateRequest(auth_bytes=b"\0\0"), response=False)
    check(36, 1, h("0000", "ffff", "00000003", "723d61", "0000000000000e10"),
          SaslAuthenticateResponse(auth_bytes=b"r=a", session_lifetime_ms=3600))
    # v2 is flexible: compact bytes and strings, tagged fields
    check(36, 2, h("03", "0000", "00"), SaslAuthenticateRequest(auth_bytes=b"\0\0"), response=False)
    check(36, 2, h("003a", "03", "6e6f", "01", "0000000000000000", "00"),
          SaslAuthenticateResponse(error_code=58, error_message="no", auth_bytes=b""))


def test_kip637_layout_puts_min_insync_after_authorized_operations_without_topic_id() -> None:
    # Given KIP-637's literal "v10" and Kafka's real v9 for the same topic
    kip = MetadataResponseKip637(topics=(Kip637MetadataResponseTopic(name="t", min_insync_replicas=2),))
    real_v9 = encode_response(MetadataResponse(topics=(
        __import__("insync_proxy.protocol.messages", fromlist=["MetadataResponseTopic"]).MetadataResponseTopic(name="t"),)), 9)
    wire = encode_metadata_response_kip637(kip)
    # Then the KIP layout is v9 with int16 2 inserted before the topic's tagged fields
    topic_tags_at = real_v9.index(h("80000000", "00")) + 4
    assert wire == real_v9[:topic_tags_at] + struct.pack(">h", 2) + real_v9[topic_tags_at:]
    assert decode_metadata_response_kip637(wire) == kip
    # And it can never be passed off as Kafka's real MetadataResponse v10
    with pytest.raises(UnsupportedVersion):
        encode_response(kip, 10)


def test_unknown_api_or_version_is_unsupported_version() -> None:
    with pytest.raises(UnsupportedVersion):
        decode_response(3, 14, b"")
    with pytest.raises(UnsupportedVersion):
        decode_request(1, 12, b"")


def test_trailing_bytes_are_malformed() -> None:
    with pytest.raises(MalformedFrame):
        decode_request(3, 0, h("00000000", "00"))


def test_none_in_non_nullable_field_is_refused() -> None:
    # The encoder refuses a None it would have to write in a non-nullable place...
    with pytest.raises(ProtocolError):
        encode_value(STRING, 0, False, None)
    # ... and a message holding one: interpreted, when it is encoded; compiled (mypyc), the typed attribute
    # already refuses it when the object is made.
    with pytest.raises((ProtocolError, TypeError)):
        encode_response(FindCoordinatorResponse(host=None), 0)  # type: ignore[arg-type]


def test_unknown_tagged_fields_survive_a_round_trip_in_tag_order() -> None:
    wire = h("0000", "02", "0012", "0000", "0004", "00", "00000000", "03", "01", "08", "0000000000000005",
             "05", "01", "ff", "8a06", "00")  # known tag 1, unknown tags 5 and 778
    msg = decode_response(18, 3, wire)
    assert msg.unknown_tagged_fields == ((5, b"\xff"), (778, b""))
    assert encode_response(msg, 3) == wire
