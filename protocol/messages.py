"""Typed Kafka messages declared with the schema DSL, and version-aware encode/decode entry points.

Written from Apache Kafka's ``clients/src/main/resources/common/message/*.json`` (trunk of late
2024 for 3.9, plus the 4.0/4.1 additions: Metadata v13, Produce v12-v13, DescribeCluster v2).
Besides what the proxy reads on client paths, CreateTopics, SaslHandshake and SaslAuthenticate are
declared here for the project's own clients (the control connection's login, the dev cluster).
Field names are Kafka's, in snake_case. One dataclass covers every version of a message.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol, TypeVar, overload

from .api_keys import ApiKey
from .errors import UnsupportedVersion
from .primitives import Buffer
from .schema import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UINT16,
    UUID,
    ArrayOf,
    Message,
    Struct,
    check_version,
    decode_struct,
    encode_struct,
    is_flexible_version,
    kfield,
)

__all__ = [
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
    "SHARE_VERSIONS",
    "SUPPORTED_VERSIONS",
    "Address",
    "ApiVersion",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "BatchIndexAndErrorMessage",
    "Coordinator",
    "CreatableReplicaAssignment",
    "CreatableTopic",
    "CreatableTopicConfig",
    "CreatableTopicConfigs",
    "CreatableTopicResult",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DescribeClusterBroker",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResource",
    "DescribeConfigsResourceResult",
    "DescribeConfigsResponse",
    "DescribeConfigsResult",
    "DescribeConfigsSynonym",
    "DescribeQuorumListener",
    "DescribeQuorumNode",
    "DescribeQuorumPartitionData",
    "DescribeQuorumReplicaState",
    "DescribeQuorumRequest",
    "DescribeQuorumRequestPartition",
    "DescribeQuorumRequestTopic",
    "DescribeQuorumResponse",
    "DescribeQuorumTopicData",
    "FinalizedFeatureKey",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "HostPort",
    "Kip637MetadataResponseTopic",
    "LeaderIdAndEpoch",
    "MetadataRequest",
    "MetadataRequestTopic",
    "MetadataResponse",
    "MetadataResponseBroker",
    "MetadataResponseKip637",
    "MetadataResponsePartition",
    "MetadataResponseTopic",
    "NodeAddress",
    "NodeEndpoint",
    "PartitionProduceData",
    "PartitionProduceResponse",
    "ProduceRequest",
    "ProduceResponse",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "ShareAcknowledgePartitionData",
    "ShareAcknowledgeResponse",
    "ShareAcknowledgeTopicResponse",
    "ShareAcquiredRecords",
    "ShareFetchPartitionData",
    "ShareFetchResponse",
    "ShareFetchTopicResponse",
    "SupportedFeatureKey",
    "TopicProduceData",
    "TopicProduceResponse",
    "decode_describe_quorum_response",
    "decode_metadata_response_kip637",
    "decode_request",
    "decode_response",
    "encode_describe_quorum_request",
    "encode_describe_quorum_response",
    "encode_metadata_response_kip637",
    "encode_request",
    "encode_response",
    "rewrite_endpoints",
]

NULL_UUID = uuid.UUID(int=0)
#: Kafka's "authorized operations not requested" sentinel (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


# ---------------------------------------------------------------------------------------------
# ApiVersions (key 18): v0-v4 in 3.9 and 4.x, flexible v3+.


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsRequest(Message):
    """ApiVersionsRequest v0-v4."""

    API_KEY: ClassVar[int] = ApiKey.API_VERSIONS
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 4)
    FLEXIBLE_FROM: ClassVar[int | None] = 3

    client_software_name: str = kfield(STRING, "3+", default="")
    client_software_version: str = kfield(STRING, "3+", default="")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersion(Struct):
    """One API's supported version range."""

    api_key: int = kfield(INT16, "0+", default=0)
    min_version: int = kfield(INT16, "0+", default=0)
    max_version: int = kfield(INT16, "0+", default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class SupportedFeatureKey(Struct):
    """A feature the broker supports."""

    name: str = kfield(STRING, "3+", default="")
    min_version: int = kfield(INT16, "3+", default=0)
    max_version: int = kfield(INT16, "3+", default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class FinalizedFeatureKey(Struct):
    """A cluster-wide finalized feature."""

    name: str = kfield(STRING, "3+", default="")
    max_version_level: int = kfield(INT16, "3+", default=0)
    min_version_level: int = kfield(INT16, "3+", default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponse(Message):
    """ApiVersionsResponse v0-v4 (always sent with response header v0)."""

    API_KEY: ClassVar[int] = ApiKey.API_VERSIONS
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 4)
    FLEXIBLE_FROM: ClassVar[int | None] = 3

    error_code: int = kfield(INT16, "0+", default=0)
    api_keys: tuple[ApiVersion, ...] = kfield(ArrayOf(ApiVersion), "0+", default=())
    throttle_time_ms: int = kfield(INT32, "1+", default=0)
    supported_features: tuple[SupportedFeatureKey, ...] = kfield(
        ArrayOf(SupportedFeatureKey), "3+", tag=0, default=())
    finalized_features_epoch: int = kfield(INT64, "3+", tag=1, default=-1)
    finalized_features: tuple[FinalizedFeatureKey, ...] = kfield(
        ArrayOf(FinalizedFeatureKey), "3+", tag=2, default=())
    zk_migration_ready: bool = kfield(BOOL, "3+", tag=3, default=False)


# ---------------------------------------------------------------------------------------------
# Metadata (key 3): v0-v12 in 3.9, v13 in 4.0 (top-level error_code); flexible v9+.


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRequestTopic(Struct):
    """A topic asked for, by name or (v10+) by id."""

    topic_id: uuid.UUID = kfield(UUID, "10+", default=NULL_UUID)
    name: str | None = kfield(STRING, "0+", nullable="10+", default="")


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRequest(Message):
    """MetadataRequest v0-v13 (``topics`` None = all topics, v1+)."""

    API_KEY: ClassVar[int] = ApiKey.METADATA
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 13)
    FLEXIBLE_FROM: ClassVar[int | None] = 9

    topics: tuple[MetadataRequestTopic, ...] | None = kfield(
        ArrayOf(MetadataRequestTopic), "0+", nullable="1+", default=())
    allow_auto_topic_creation: bool = kfield(BOOL, "4+", default=True)
    include_cluster_authorized_operations: bool = kfield(BOOL, "8-10", default=False)
    include_topic_authorized_operations: bool = kfield(BOOL, "8+", default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponseBroker(Struct):
    """A broker of the cluster: its address is what a proxy rewrites."""

    node_id: int = kfield(INT32, "0+", default=0)
    host: str = kfield(STRING, "0+", default="")
    port: int = kfield(INT32, "0+", default=0)
    rack: str | None = kfield(STRING, "1+", nullable="1+", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponsePartition(Struct):
    """One partition's leader, replicas and ISR."""

    error_code: int = kfield(INT16, "0+", default=0)
    partition_index: int = kfield(INT32, "0+", default=0)
    leader_id: int = kfield(INT32, "0+", default=0)
    leader_epoch: int = kfield(INT32, "7+", default=-1)
    replica_nodes: tuple[int, ...] = kfield(ArrayOf(INT32), "0+", default=())
    isr_nodes: tuple[int, ...] = kfield(ArrayOf(INT32), "0+", default=())
    offline_replicas: tuple[int, ...] = kfield(ArrayOf(INT32), "5+", default=())


#: Tag of the proxy's topic-level ``min_insync_replicas`` extension (after KIP-637's number).
MIN_INSYNC_REPLICAS_TAG = 637


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponseTopic(Struct):
    """A topic of a MetadataResponse.

    ``min_insync_replicas`` is this project's extension, not Kafka's: a tagged field (tag 637) in
    the flexible versions v9+, invisible to clients that do not know it; -1 = absent.
    """

    error_code: int = kfield(INT16, "0+", default=0)
    name: str | None = kfield(STRING, "0+", nullable="12+", default="")
    topic_id: uuid.UUID = kfield(UUID, "10+", default=NULL_UUID)
    is_internal: bool = kfield(BOOL, "1+", default=False)
    partitions: tuple[MetadataResponsePartition, ...] = kfield(
        ArrayOf(MetadataResponsePartition), "0+", default=())
    topic_authorized_operations: int = kfield(INT32, "8+", default=AUTHORIZED_OPERATIONS_OMITTED)
    min_insync_replicas: int = kfield(INT16, "9+", tag=MIN_INSYNC_REPLICAS_TAG, default=-1)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponse(Message):
    """MetadataResponse v0-v13."""

    API_KEY: ClassVar[int] = ApiKey.METADATA
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 13)
    FLEXIBLE_FROM: ClassVar[int | None] = 9

    throttle_time_ms: int = kfield(INT32, "3+", default=0)
    brokers: tuple[MetadataResponseBroker, ...] = kfield(ArrayOf(MetadataResponseBroker), "0+", default=())
    cluster_id: str | None = kfield(STRING, "2+", nullable="2+", default=None)
    controller_id: int = kfield(INT32, "1+", default=-1)
    topics: tuple[MetadataResponseTopic, ...] = kfield(ArrayOf(MetadataResponseTopic), "0+", default=())
    cluster_authorized_operations: int = kfield(INT32, "8-10", default=AUTHORIZED_OPERATIONS_OMITTED)
    error_code: int = kfield(INT16, "13+", default=0)


# KIP-637's proposed "v10": the v9 layout plus a plain int16 after topic_authorized_operations.
# It collides with Kafka's real v10 (topic_id), so it is a separate schema, never a version of
# MetadataResponse: serve it only to clients that explicitly speak it.


@dataclass(frozen=True, slots=True, kw_only=True)
class Kip637MetadataResponseTopic(Struct):
    """A topic in KIP-637's literal layout (v9 topic + ``min_insync_replicas`` int16)."""

    error_code: int = kfield(INT16, "0+", default=0)
    name: str = kfield(STRING, "0+", default="")
    is_internal: bool = kfield(BOOL, "0+", default=False)
    partitions: tuple[MetadataResponsePartition, ...] = kfield(
        ArrayOf(MetadataResponsePartition), "0+", default=())
    topic_authorized_operations: int = kfield(INT32, "0+", default=AUTHORIZED_OPERATIONS_OMITTED)
    min_insync_replicas: int = kfield(INT16, "0+", default=-1)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponseKip637(Message):
    """KIP-637's MetadataResponse "v10" (v9 + topic ``min_insync_replicas``), an explicit variant."""

    API_KEY: ClassVar[int] = ApiKey.METADATA
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (10, 10)
    FLEXIBLE_FROM: ClassVar[int | None] = 10

    throttle_time_ms: int = kfield(INT32, "0+", default=0)
    brokers: tuple[MetadataResponseBroker, ...] = kfield(ArrayOf(MetadataResponseBroker), "0+", default=())
    cluster_id: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    controller_id: int = kfield(INT32, "0+", default=-1)
    topics: tuple[Kip637MetadataResponseTopic, ...] = kfield(
        ArrayOf(Kip637MetadataResponseTopic), "0+", default=())
    cluster_authorized_operations: int = kfield(INT32, "0+", default=AUTHORIZED_OPERATIONS_OMITTED)


# The KIP-637 body is encoded with the v9 rules (flexible; nested structs as in v9).
_KIP637_LAYOUT_VERSION = 9


def encode_metadata_response_kip637(msg: MetadataResponseKip637) -> bytes:
    """Encode a body in KIP-637's literal "v10" layout (not Kafka's real MetadataResponse v10)."""
    return encode_struct(msg, _KIP637_LAYOUT_VERSION, True)


def decode_metadata_response_kip637(body: Buffer) -> MetadataResponseKip637:
    """Decode a body in KIP-637's literal "v10" layout."""
    return decode_struct(MetadataResponseKip637, _KIP637_LAYOUT_VERSION, body, True)


# ---------------------------------------------------------------------------------------------
# Produce (key 0): v0-v11 in 3.9, v12 in 4.0, v13 in 4.1 (topic_id); flexible v9+.


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProduceData(Struct):
    """Records for one partition, kept as an opaque zero-copy view."""

    index: int = kfield(INT32, "0+", default=0)
    records: memoryview | bytes | None = kfield(RECORDS, "0+", nullable="0+", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProduceData(Struct):
    """A topic to produce to: by name (v0-v12) or by topic_id (v13+)."""

    name: str = kfield(STRING, "0-12", default="")
    topic_id: uuid.UUID = kfield(UUID, "13+", default=NULL_UUID)
    partition_data: tuple[PartitionProduceData, ...] = kfield(
        ArrayOf(PartitionProduceData), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceRequest(Message):
    """ProduceRequest v0-v13 (4.0 brokers reject v0-v2 but the codec still reads them)."""

    API_KEY: ClassVar[int] = ApiKey.PRODUCE
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 13)
    FLEXIBLE_FROM: ClassVar[int | None] = 9

    transactional_id: str | None = kfield(STRING, "3+", nullable="3+", default=None)
    acks: int = kfield(INT16, "0+", default=-1)
    timeout_ms: int = kfield(INT32, "0+", default=0)
    topic_data: tuple[TopicProduceData, ...] = kfield(ArrayOf(TopicProduceData), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchIndexAndErrorMessage(Struct):
    """A record that made its batch fail."""

    batch_index: int = kfield(INT32, "8+", default=0)
    batch_index_error_message: str | None = kfield(STRING, "8+", nullable="8+", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderIdAndEpoch(Struct):
    """The current leader of a partition (KIP-951): in Produce v10+ and the share answers.

    Its fields exist in every version of the struct; where it stands decides the versions it is on the
    wire in (Produce's ``current_leader`` from v10, ShareFetch's and ShareAcknowledge's in all).
    """

    leader_id: int = kfield(INT32, "0+", default=-1)
    leader_epoch: int = kfield(INT32, "0+", default=-1)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProduceResponse(Struct):
    """The outcome for one partition."""

    index: int = kfield(INT32, "0+", default=0)
    error_code: int = kfield(INT16, "0+", default=0)
    base_offset: int = kfield(INT64, "0+", default=-1)
    log_append_time_ms: int = kfield(INT64, "2+", default=-1)
    log_start_offset: int = kfield(INT64, "5+", default=-1)
    record_errors: tuple[BatchIndexAndErrorMessage, ...] = kfield(
        ArrayOf(BatchIndexAndErrorMessage), "8+", default=())
    error_message: str | None = kfield(STRING, "8+", nullable="8+", default=None)
    current_leader: LeaderIdAndEpoch = kfield(LeaderIdAndEpoch, "10+", tag=0, default=LeaderIdAndEpoch())


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProduceResponse(Struct):
    """The outcome for one topic: by name (v0-v12) or by topic_id (v13+)."""

    name: str = kfield(STRING, "0-12", default="")
    topic_id: uuid.UUID = kfield(UUID, "13+", default=NULL_UUID)
    partition_responses: tuple[PartitionProduceResponse, ...] = kfield(
        ArrayOf(PartitionProduceResponse), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeEndpoint(Struct):
    """A broker address carried in Produce v10+ / Fetch v16+ responses (KIP-951)."""

    node_id: int = kfield(INT32, "0+", default=0)
    host: str = kfield(STRING, "0+", default="")
    port: int = kfield(INT32, "0+", default=0)
    rack: str | None = kfield(STRING, "0+", nullable="0+", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResponse(Message):
    """ProduceResponse v0-v13."""

    API_KEY: ClassVar[int] = ApiKey.PRODUCE
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 13)
    FLEXIBLE_FROM: ClassVar[int | None] = 9

    responses: tuple[TopicProduceResponse, ...] = kfield(ArrayOf(TopicProduceResponse), "0+", default=())
    throttle_time_ms: int = kfield(INT32, "1+", default=0)
    node_endpoints: tuple[NodeEndpoint, ...] = kfield(ArrayOf(NodeEndpoint), "10+", tag=0, default=())


# ---------------------------------------------------------------------------------------------
# FindCoordinator (key 10): v0-v6 (v4 batches keys); flexible v3+.


@dataclass(frozen=True, slots=True, kw_only=True)
class FindCoordinatorRequest(Message):
    """FindCoordinatorRequest v0-v6."""

    API_KEY: ClassVar[int] = ApiKey.FIND_COORDINATOR
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 6)
    FLEXIBLE_FROM: ClassVar[int | None] = 3

    key: str = kfield(STRING, "0-3", default="")
    key_type: int = kfield(INT8, "1+", default=0)
    coordinator_keys: tuple[str, ...] = kfield(ArrayOf(STRING), "4+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class Coordinator(Struct):
    """One coordinator answer (v4+)."""

    key: str = kfield(STRING, "4+", default="")
    node_id: int = kfield(INT32, "4+", default=0)
    host: str = kfield(STRING, "4+", default="")
    port: int = kfield(INT32, "4+", default=0)
    error_code: int = kfield(INT16, "4+", default=0)
    error_message: str | None = kfield(STRING, "4+", nullable="4+", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class FindCoordinatorResponse(Message):
    """FindCoordinatorResponse v0-v6 (host/port at top level in v0-v3, per key in v4+)."""

    API_KEY: ClassVar[int] = ApiKey.FIND_COORDINATOR
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 6)
    FLEXIBLE_FROM: ClassVar[int | None] = 3

    throttle_time_ms: int = kfield(INT32, "1+", default=0)
    error_code: int = kfield(INT16, "0-3", default=0)
    error_message: str | None = kfield(STRING, "1-3", nullable="1-3", default=None)
    node_id: int = kfield(INT32, "0-3", default=0)
    host: str = kfield(STRING, "0-3", default="")
    port: int = kfield(INT32, "0-3", default=0)
    coordinators: tuple[Coordinator, ...] = kfield(ArrayOf(Coordinator), "4+", default=())


# ---------------------------------------------------------------------------------------------
# DescribeCluster (key 60): v0-v1 in 3.9, v2 in 4.0 (fenced brokers); flexible always.


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterRequest(Message):
    """DescribeClusterRequest v0-v2."""

    API_KEY: ClassVar[int] = ApiKey.DESCRIBE_CLUSTER
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 2)
    FLEXIBLE_FROM: ClassVar[int | None] = 0

    include_cluster_authorized_operations: bool = kfield(BOOL, "0+", default=False)
    endpoint_type: int = kfield(INT8, "1+", default=1)
    include_fenced_brokers: bool = kfield(BOOL, "2+", default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterBroker(Struct):
    """A broker (or controller) address."""

    broker_id: int = kfield(INT32, "0+", default=0)
    host: str = kfield(STRING, "0+", default="")
    port: int = kfield(INT32, "0+", default=0)
    rack: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    is_fenced: bool = kfield(BOOL, "2+", default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterResponse(Message):
    """DescribeClusterResponse v0-v2."""

    API_KEY: ClassVar[int] = ApiKey.DESCRIBE_CLUSTER
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 2)
    FLEXIBLE_FROM: ClassVar[int | None] = 0

    throttle_time_ms: int = kfield(INT32, "0+", default=0)
    error_code: int = kfield(INT16, "0+", default=0)
    error_message: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    endpoint_type: int = kfield(INT8, "1+", default=1)
    cluster_id: str = kfield(STRING, "0+", default="")
    controller_id: int = kfield(INT32, "0+", default=-1)
    brokers: tuple[DescribeClusterBroker, ...] = kfield(ArrayOf(DescribeClusterBroker), "0+", default=())
    cluster_authorized_operations: int = kfield(INT32, "0+", default=AUTHORIZED_OPERATIONS_OMITTED)


# ---------------------------------------------------------------------------------------------
# DescribeConfigs (key 32): v0-v4; flexible v4+.


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResource(Struct):
    """A resource (TOPIC = 2, BROKER = 4, ...) whose configs are asked for."""

    resource_type: int = kfield(INT8, "0+", default=0)
    resource_name: str = kfield(STRING, "0+", default="")
    configuration_keys: tuple[str, ...] | None = kfield(ArrayOf(STRING), "0+", nullable="0+", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsRequest(Message):
    """DescribeConfigsRequest v0-v4."""

    API_KEY: ClassVar[int] = ApiKey.DESCRIBE_CONFIGS
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 4)
    FLEXIBLE_FROM: ClassVar[int | None] = 4

    resources: tuple[DescribeConfigsResource, ...] = kfield(ArrayOf(DescribeConfigsResource), "0+", default=())
    include_synonyms: bool = kfield(BOOL, "1+", default=False)
    include_documentation: bool = kfield(BOOL, "3+", default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsSynonym(Struct):
    """Where else a config value comes from."""

    name: str = kfield(STRING, "1+", default="")
    value: str | None = kfield(STRING, "1+", nullable="0+", default=None)
    source: int = kfield(INT8, "1+", default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResourceResult(Struct):
    """One config entry (``config_source``: 1 topic, 2 dynamic broker, ..., 5 default)."""

    name: str = kfield(STRING, "0+", default="")
    value: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    read_only: bool = kfield(BOOL, "0+", default=False)
    is_default: bool = kfield(BOOL, "0", default=False)
    config_source: int = kfield(INT8, "1+", default=-1)
    is_sensitive: bool = kfield(BOOL, "0+", default=False)
    synonyms: tuple[DescribeConfigsSynonym, ...] = kfield(ArrayOf(DescribeConfigsSynonym), "1+", default=())
    config_type: int = kfield(INT8, "3+", default=0)
    documentation: str | None = kfield(STRING, "3+", nullable="0+", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResult(Struct):
    """The configs of one resource, or its error."""

    error_code: int = kfield(INT16, "0+", default=0)
    error_message: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    resource_type: int = kfield(INT8, "0+", default=0)
    resource_name: str = kfield(STRING, "0+", default="")
    configs: tuple[DescribeConfigsResourceResult, ...] = kfield(
        ArrayOf(DescribeConfigsResourceResult), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResponse(Message):
    """DescribeConfigsResponse v0-v4."""

    API_KEY: ClassVar[int] = ApiKey.DESCRIBE_CONFIGS
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 4)
    FLEXIBLE_FROM: ClassVar[int | None] = 4

    throttle_time_ms: int = kfield(INT32, "0+", default=0)
    results: tuple[DescribeConfigsResult, ...] = kfield(ArrayOf(DescribeConfigsResult), "0+", default=())


# ---------------------------------------------------------------------------------------------
# CreateTopics (key 19): v0-v7 in 3.9, v2-v7 in 4.x; flexible v5+. Not on any proxy path: the dev
# cluster and the benchmarks create their topics with it.


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableReplicaAssignment(Struct):
    """The brokers one partition is placed on (manual assignment)."""

    partition_index: int = kfield(INT32, "0+", default=0)
    broker_ids: tuple[int, ...] = kfield(ArrayOf(INT32), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicConfig(Struct):
    """A topic config to set at creation."""

    name: str = kfield(STRING, "0+", default="")
    value: str | None = kfield(STRING, "0+", nullable="0+", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopic(Struct):
    """A topic to create; -1 partitions / replication factor = the broker's default (v4+) or assignments."""

    name: str = kfield(STRING, "0+", default="")
    num_partitions: int = kfield(INT32, "0+", default=-1)
    replication_factor: int = kfield(INT16, "0+", default=-1)
    assignments: tuple[CreatableReplicaAssignment, ...] = kfield(
        ArrayOf(CreatableReplicaAssignment), "0+", default=())
    configs: tuple[CreatableTopicConfig, ...] = kfield(ArrayOf(CreatableTopicConfig), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsRequest(Message):
    """CreateTopicsRequest v0-v7."""

    API_KEY: ClassVar[int] = ApiKey.CREATE_TOPICS
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 7)
    FLEXIBLE_FROM: ClassVar[int | None] = 5

    topics: tuple[CreatableTopic, ...] = kfield(ArrayOf(CreatableTopic), "0+", default=())
    timeout_ms: int = kfield(INT32, "0+", default=60000)
    validate_only: bool = kfield(BOOL, "1+", default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicConfigs(Struct):
    """A config of a created topic, as the broker reports it (v5+)."""

    name: str = kfield(STRING, "5+", default="")
    value: str | None = kfield(STRING, "5+", nullable="5+", default=None)
    read_only: bool = kfield(BOOL, "5+", default=False)
    config_source: int = kfield(INT8, "5+", default=-1)
    is_sensitive: bool = kfield(BOOL, "5+", default=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicResult(Struct):
    """The outcome for one topic (36 TOPIC_ALREADY_EXISTS, ...)."""

    name: str = kfield(STRING, "0+", default="")
    topic_id: uuid.UUID = kfield(UUID, "7+", default=NULL_UUID)
    error_code: int = kfield(INT16, "0+", default=0)
    error_message: str | None = kfield(STRING, "1+", nullable="0+", default=None)
    topic_config_error_code: int = kfield(INT16, "5+", tag=0, default=0)
    num_partitions: int = kfield(INT32, "5+", default=-1)
    replication_factor: int = kfield(INT16, "5+", default=-1)
    configs: tuple[CreatableTopicConfigs, ...] | None = kfield(
        ArrayOf(CreatableTopicConfigs), "5+", nullable="5+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsResponse(Message):
    """CreateTopicsResponse v0-v7 (v7 adds the new topic's id)."""

    API_KEY: ClassVar[int] = ApiKey.CREATE_TOPICS
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 7)
    FLEXIBLE_FROM: ClassVar[int | None] = 5

    throttle_time_ms: int = kfield(INT32, "2+", default=0)
    topics: tuple[CreatableTopicResult, ...] = kfield(ArrayOf(CreatableTopicResult), "0+", default=())


# ---------------------------------------------------------------------------------------------
# SaslHandshake (key 17): v0-v1, never flexible (KAFKA-9577). SaslAuthenticate (key 36): v0-v2,
# flexible v2+. Clients' SASL frames pass through the proxy opaque; these serve its own logins.


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslHandshakeRequest(Message):
    """SaslHandshakeRequest v0-v1 (v1: the tokens follow in SaslAuthenticate requests)."""

    API_KEY: ClassVar[int] = ApiKey.SASL_HANDSHAKE
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 1)
    FLEXIBLE_FROM: ClassVar[int | None] = None

    mechanism: str = kfield(STRING, "0+", default="")


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslHandshakeResponse(Message):
    """SaslHandshakeResponse v0-v1: an error if the mechanism is not enabled, and the enabled ones."""

    API_KEY: ClassVar[int] = ApiKey.SASL_HANDSHAKE
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 1)
    FLEXIBLE_FROM: ClassVar[int | None] = None

    error_code: int = kfield(INT16, "0+", default=0)
    mechanisms: tuple[str, ...] = kfield(ArrayOf(STRING), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslAuthenticateRequest(Message):
    """SaslAuthenticateRequest v0-v2: one client token of the mechanism's exchange."""

    API_KEY: ClassVar[int] = ApiKey.SASL_AUTHENTICATE
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 2)
    FLEXIBLE_FROM: ClassVar[int | None] = 2

    auth_bytes: bytes = kfield(BYTES, "0+", default=b"")


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslAuthenticateResponse(Message):
    """SaslAuthenticateResponse v0-v2: the server's token, or an error (58 SASL_AUTHENTICATION_FAILED)."""

    API_KEY: ClassVar[int] = ApiKey.SASL_AUTHENTICATE
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 2)
    FLEXIBLE_FROM: ClassVar[int | None] = 2

    error_code: int = kfield(INT16, "0+", default=0)
    error_message: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    auth_bytes: bytes = kfield(BYTES, "0+", default=b"")
    session_lifetime_ms: int = kfield(INT64, "1+", default=0)


# ---------------------------------------------------------------------------------------------
# DescribeQuorum (key 55): v0-v2, flexible always; v2 (KIP-853) adds the nodes and their listeners.


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumRequestPartition(Struct):
    """A partition of the quorum's topic to describe (``__cluster_metadata`` has one, 0)."""

    partition_index: int = kfield(INT32, "0+", default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumRequestTopic(Struct):
    """A topic to describe (``__cluster_metadata``)."""

    topic_name: str = kfield(STRING, "0+", default="")
    partitions: tuple[DescribeQuorumRequestPartition, ...] = kfield(
        ArrayOf(DescribeQuorumRequestPartition), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumRequest(Message):
    """DescribeQuorumRequest v0-v2."""

    API_KEY: ClassVar[int] = ApiKey.DESCRIBE_QUORUM
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 2)
    FLEXIBLE_FROM: ClassVar[int | None] = 0

    topics: tuple[DescribeQuorumRequestTopic, ...] = kfield(ArrayOf(DescribeQuorumRequestTopic), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumReplicaState(Struct):
    """A voter or observer as the quorum leader sees it."""

    replica_id: int = kfield(INT32, "0+", default=0)
    replica_directory_id: uuid.UUID = kfield(UUID, "2+", default=NULL_UUID)
    log_end_offset: int = kfield(INT64, "0+", default=0)
    last_fetch_timestamp: int = kfield(INT64, "1+", default=-1)
    last_caught_up_timestamp: int = kfield(INT64, "1+", default=-1)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumPartitionData(Struct):
    """The quorum state of one partition."""

    partition_index: int = kfield(INT32, "0+", default=0)
    error_code: int = kfield(INT16, "0+", default=0)
    error_message: str | None = kfield(STRING, "2+", nullable="2+", default=None)
    leader_id: int = kfield(INT32, "0+", default=-1)
    leader_epoch: int = kfield(INT32, "0+", default=0)
    high_watermark: int = kfield(INT64, "0+", default=0)
    current_voters: tuple[DescribeQuorumReplicaState, ...] = kfield(
        ArrayOf(DescribeQuorumReplicaState), "0+", default=())
    observers: tuple[DescribeQuorumReplicaState, ...] = kfield(ArrayOf(DescribeQuorumReplicaState), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumTopicData(Struct):
    """A described topic."""

    topic_name: str = kfield(STRING, "0+", default="")
    partitions: tuple[DescribeQuorumPartitionData, ...] = kfield(
        ArrayOf(DescribeQuorumPartitionData), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumListener(Struct):
    """One listener of a quorum node (v2+): its name, host and port."""

    name: str = kfield(STRING, "2+", default="")
    host: str = kfield(STRING, "2+", default="")
    port: int = kfield(UINT16, "2+", default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumNode(Struct):
    """A quorum node (v2+) and its listeners."""

    node_id: int = kfield(INT32, "2+", default=0)
    listeners: tuple[DescribeQuorumListener, ...] = kfield(ArrayOf(DescribeQuorumListener), "2+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeQuorumResponse(Message):
    """DescribeQuorumResponse v0-v2."""

    API_KEY: ClassVar[int] = ApiKey.DESCRIBE_QUORUM
    VALID_VERSIONS: ClassVar[tuple[int, int]] = (0, 2)
    FLEXIBLE_FROM: ClassVar[int | None] = 0

    error_code: int = kfield(INT16, "0+", default=0)
    error_message: str | None = kfield(STRING, "2+", nullable="2+", default=None)
    topics: tuple[DescribeQuorumTopicData, ...] = kfield(ArrayOf(DescribeQuorumTopicData), "0+", default=())
    nodes: tuple[DescribeQuorumNode, ...] = kfield(ArrayOf(DescribeQuorumNode), "2+", default=())


def encode_describe_quorum_request(msg: DescribeQuorumRequest, version: int) -> bytes:
    """Encode a DescribeQuorumRequest body at ``version``."""
    check_version(DescribeQuorumRequest, version)
    return encode_struct(msg, version, True)


def decode_describe_quorum_response(version: int, body: Buffer) -> DescribeQuorumResponse:
    """Decode a DescribeQuorumResponse body (the bytes after the response header)."""
    check_version(DescribeQuorumResponse, version)
    return decode_struct(DescribeQuorumResponse, version, body, True)


def encode_describe_quorum_response(msg: DescribeQuorumResponse, version: int) -> bytes:
    """Encode a DescribeQuorumResponse body at ``version``."""
    check_version(DescribeQuorumResponse, version)
    return encode_struct(msg, version, True)


# ---------------------------------------------------------------------------------------------
# ShareFetch (key 78) and ShareAcknowledge (key 79): share groups (KIP-932), flexible always.

#: Versions of ShareFetch and ShareAcknowledge Kafka 4.3 defines (both flexible in every version).
SHARE_VERSIONS = (1, 2)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareAcquiredRecords(Struct):
    """A range of offsets the share consumer now holds the acquisition lock on."""

    first_offset: int = kfield(INT64, "0+", default=0)
    last_offset: int = kfield(INT64, "0+", default=0)
    delivery_count: int = kfield(INT16, "0+", default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareFetchPartitionData(Struct):
    """One partition of a ShareFetch answer: errors, the leader, the records and what was acquired."""

    partition_index: int = kfield(INT32, "0+", default=0)
    error_code: int = kfield(INT16, "0+", default=0)
    error_message: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    acknowledge_error_code: int = kfield(INT16, "0+", default=0)
    acknowledge_error_message: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    current_leader: LeaderIdAndEpoch = kfield(LeaderIdAndEpoch, "0+", default=LeaderIdAndEpoch())
    records: memoryview | bytes | None = kfield(RECORDS, "0+", nullable="0", default=None)
    acquired_records: tuple[ShareAcquiredRecords, ...] = kfield(ArrayOf(ShareAcquiredRecords), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareFetchTopicResponse(Struct):
    """A topic of a ShareFetch answer, by id."""

    topic_id: uuid.UUID = kfield(UUID, "0+", default=NULL_UUID)
    partitions: tuple[ShareFetchPartitionData, ...] = kfield(ArrayOf(ShareFetchPartitionData), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareFetchResponse(Message):
    """ShareFetchResponse v1-v2."""

    API_KEY: ClassVar[int] = ApiKey.SHARE_FETCH
    VALID_VERSIONS: ClassVar[tuple[int, int]] = SHARE_VERSIONS
    FLEXIBLE_FROM: ClassVar[int | None] = 0

    throttle_time_ms: int = kfield(INT32, "0+", default=0)
    error_code: int = kfield(INT16, "0+", default=0)
    error_message: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    acquisition_lock_timeout_ms: int = kfield(INT32, "1+", default=0)
    responses: tuple[ShareFetchTopicResponse, ...] = kfield(ArrayOf(ShareFetchTopicResponse), "0+", default=())
    node_endpoints: tuple[NodeEndpoint, ...] = kfield(ArrayOf(NodeEndpoint), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareAcknowledgePartitionData(Struct):
    """One partition of a ShareAcknowledge answer."""

    partition_index: int = kfield(INT32, "0+", default=0)
    error_code: int = kfield(INT16, "0+", default=0)
    error_message: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    current_leader: LeaderIdAndEpoch = kfield(LeaderIdAndEpoch, "0+", default=LeaderIdAndEpoch())


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareAcknowledgeTopicResponse(Struct):
    """A topic of a ShareAcknowledge answer, by id."""

    topic_id: uuid.UUID = kfield(UUID, "0+", default=NULL_UUID)
    partitions: tuple[ShareAcknowledgePartitionData, ...] = kfield(
        ArrayOf(ShareAcknowledgePartitionData), "0+", default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ShareAcknowledgeResponse(Message):
    """ShareAcknowledgeResponse v1-v2."""

    API_KEY: ClassVar[int] = ApiKey.SHARE_ACKNOWLEDGE
    VALID_VERSIONS: ClassVar[tuple[int, int]] = SHARE_VERSIONS
    FLEXIBLE_FROM: ClassVar[int | None] = 0

    throttle_time_ms: int = kfield(INT32, "0+", default=0)
    error_code: int = kfield(INT16, "0+", default=0)
    error_message: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    acquisition_lock_timeout_ms: int = kfield(INT32, "2+", default=0)
    responses: tuple[ShareAcknowledgeTopicResponse, ...] = kfield(
        ArrayOf(ShareAcknowledgeTopicResponse), "0+", default=())
    node_endpoints: tuple[NodeEndpoint, ...] = kfield(ArrayOf(NodeEndpoint), "0+", default=())


# ---------------------------------------------------------------------------------------------
# Registry and entry points.

REQUEST_TYPES: dict[int, type[Message]] = {
    ApiKey.PRODUCE: ProduceRequest,
    ApiKey.METADATA: MetadataRequest,
    ApiKey.FIND_COORDINATOR: FindCoordinatorRequest,
    ApiKey.API_VERSIONS: ApiVersionsRequest,
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsRequest,
    ApiKey.DESCRIBE_CLUSTER: DescribeClusterRequest,
    ApiKey.CREATE_TOPICS: CreateTopicsRequest,
    ApiKey.SASL_HANDSHAKE: SaslHandshakeRequest,
    ApiKey.SASL_AUTHENTICATE: SaslAuthenticateRequest,
}
RESPONSE_TYPES: dict[int, type[Message]] = {
    ApiKey.PRODUCE: ProduceResponse,
    ApiKey.METADATA: MetadataResponse,
    ApiKey.FIND_COORDINATOR: FindCoordinatorResponse,
    ApiKey.API_VERSIONS: ApiVersionsResponse,
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsResponse,
    ApiKey.DESCRIBE_CLUSTER: DescribeClusterResponse,
    ApiKey.CREATE_TOPICS: CreateTopicsResponse,
    ApiKey.SASL_HANDSHAKE: SaslHandshakeResponse,
    ApiKey.SASL_AUTHENTICATE: SaslAuthenticateResponse,
}
#: Versions the codec decodes and encodes fully, per API key (request and response alike).
SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey(k): c.VALID_VERSIONS for k, c in REQUEST_TYPES.items()
}


def _message_type(table: dict[int, type[Message]], api_key: int, version: int) -> type[Message]:
    cls = table.get(api_key)
    if cls is None:
        raise UnsupportedVersion(f"API key {api_key} is not decoded by this codec")
    check_version(cls, version)
    return cls


def decode_request(api_key: int, version: int, body: Buffer) -> Message:
    """Decode a request body (the bytes after the request header)."""
    cls = _message_type(REQUEST_TYPES, api_key, version)
    return decode_struct(cls, version, body, is_flexible_version(cls, version))


def decode_response(api_key: int, version: int, body: Buffer) -> Message:
    """Decode a response body (the bytes after the response header)."""
    cls = _message_type(RESPONSE_TYPES, api_key, version)
    return decode_struct(cls, version, body, is_flexible_version(cls, version))


def encode_request(msg: Message, version: int) -> bytes:
    """Encode a request body at ``version`` (fields absent from that version are not written)."""
    cls = type(msg)
    check_version(cls, version)
    return encode_struct(msg, version, is_flexible_version(cls, version))


def encode_response(msg: Message, version: int) -> bytes:
    """Encode a response body at ``version``."""
    cls = type(msg)
    if cls is MetadataResponseKip637:
        raise UnsupportedVersion("use encode_metadata_response_kip637 for the KIP-637 layout")
    check_version(cls, version)
    return encode_struct(msg, version, is_flexible_version(cls, version))


# ---------------------------------------------------------------------------------------------
# Broker addresses in answers: the one host/port rewrite of the endpoints every walker finds (the
# walkers and the table of them by API key: protocol/endpoints.py).

#: node_id -> (host, port) the proxy puts in place of the broker's.
Address = tuple[str, int]


class HostPort(Protocol):
    """A dataclass with a host and a port (a DescribeQuorum listener)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class NodeAddress(HostPort, Protocol):
    """A dataclass with a node id, a host and a port (a NodeEndpoint, a Metadata broker)."""

    @property
    def node_id(self) -> int: ...


N = TypeVar("N", bound=NodeAddress)
H = TypeVar("H", bound=HostPort)


@overload
def rewrite_endpoints(endpoints: Sequence[N], addresses: Mapping[int, Address]) -> tuple[N, ...] | None: ...


@overload
def rewrite_endpoints(endpoints: Sequence[H], addresses: Mapping[int, Address], node_id: int
                      ) -> tuple[H, ...] | None: ...


def rewrite_endpoints(endpoints: Sequence[Any], addresses: Mapping[int, Address], node_id: int | None = None
                      ) -> tuple[Any, ...] | None:
    """``endpoints`` with host and port replaced for every node in ``addresses``, or None when none changes.

    Each endpoint belongs to its own ``node_id``, or with ``node_id`` given all belong to that node (the
    listeners of one DescribeQuorum node). An endpoint that keeps its address is the same object in the
    result, so a caller splicing bytes can tell which ones changed (``new is not old``).
    """
    out: list[Any] | None = None
    for i, ep in enumerate(endpoints):
        new = addresses.get(ep.node_id if node_id is None else node_id)
        if new is not None and (ep.host, ep.port) != new:
            if out is None:
                out = list(endpoints)
            out[i] = replace(ep, host=new[0], port=new[1])
    return None if out is None else tuple(out)
