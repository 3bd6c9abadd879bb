"""DescribeQuorum (key 55): the KRaft metadata quorum, and the rewrite of its controller endpoints.

v2 (KIP-853) adds ``nodes``: every voter's listeners with host and port (uint16), addresses a client
must not learn through a proxy. The message is small and rare, so the rewrite decodes the whole
answer with the schema below and encodes it back (byte-identical apart from the rewritten
endpoints); v0-v1 carry no address and are never parsed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar

from .api_keys import ApiKey
from .endpoints import rewrite_endpoints
from .errors import UnsupportedVersion
from .headers import split_response
from .messages import NULL_UUID
from .primitives import Buffer, Writer, bytes_view
from .schema import (
    INT16,
    INT32,
    INT64,
    STRING,
    UINT16,
    UUID,
    ArrayOf,
    Message,
    Struct,
    check_version,
    decode_struct,
    encode_struct,
    kfield,
)

__all__ = [
    "DescribeQuorumListener",
    "DescribeQuorumNode",
    "DescribeQuorumPartitionData",
    "DescribeQuorumReplicaState",
    "DescribeQuorumRequest",
    "DescribeQuorumRequestPartition",
    "DescribeQuorumRequestTopic",
    "DescribeQuorumResponse",
    "DescribeQuorumTopicData",
    "decode_describe_quorum_response",
    "encode_describe_quorum_request",
    "encode_describe_quorum_response",
    "rewrite_describe_quorum_endpoints",
]

_FIRST_NODES_VERSION = 2


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


def rewrite_describe_quorum_endpoints(
    frame: Buffer, api_version: int, addresses: Mapping[int, tuple[str, int]]
) -> Buffer:
    """Replace host/port of every listener of every mapped node in a DescribeQuorum v2+ response frame.

    Every listener of a node (whatever its name) gets that node's address in ``addresses``. Before
    v2 the frame is returned unparsed; when nothing changes, ``frame`` itself is returned. A port
    that does not fit the field's uint16 raises :class:`protocol.errors.InvalidValue`.
    """
    if api_version < _FIRST_NODES_VERSION:
        return frame
    if api_version > DescribeQuorumResponse.VALID_VERSIONS[1]:
        raise UnsupportedVersion(f"DescribeQuorum v{api_version} is not supported (known: up to v2)")
    mv = bytes_view(frame)
    correlation_id, body = split_response(mv, ApiKey.DESCRIBE_QUORUM, api_version)
    header_size = len(mv) - len(body)
    response = decode_describe_quorum_response(api_version, body)
    changed = False
    nodes = []
    for node in response.nodes:
        listeners = rewrite_endpoints(node.listeners, addresses, node.node_id)
        if listeners is not None:
            node = replace(node, listeners=listeners)
            changed = True
        nodes.append(node)
    if not changed:
        return frame
    w = Writer()
    w.raw(mv[:header_size])
    encode_struct(replace(response, nodes=tuple(nodes)), api_version, True, w)
    return w.getvalue()
