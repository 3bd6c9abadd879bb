"""Kafka's messages and the version-aware encode/decode entry points over them.

The message classes are generated from Kafka's JSON specs (protocol/kafka_messages.py, by
scripts/generate-protocol): one frozen dataclass per message and struct, one class for every version,
field names Kafka's in snake_case. This module adds what is not Kafka's: KIP-637's literal "v10" layout of
MetadataResponse, and the entry points that pick the class by API key from the one registry of message
classes (``REQUEST_TYPES`` / ``RESPONSE_TYPES``, generated). Besides what the proxy reads on client paths,
CreateTopics, SaslHandshake and SaslAuthenticate serve the project's own clients (the control connection's
login, the dev cluster).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import insync_proxy.protocol.kafka_messages as _kafka_messages  # `from . import` would name the package itself
from insync_proxy.protocol.kafka_messages import *  # noqa: F403  (the generated classes are this module's too)

from .api_keys import ApiKey
from .errors import UnsupportedVersion
from .kafka_messages import (
    REQUEST_TYPES,
    RESPONSE_TYPES,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
)
from .kafka_versions import (
    METADATA_RESPONSE_TOPICS_MIN_INSYNC_REPLICAS_TAG,
    SHARE_FETCH_MAX_VERSION,
    SHARE_FETCH_MIN_VERSION,
)
from .primitives import Buffer
from .schema import (
    BOOL,
    INT16,
    INT32,
    STRING,
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
    "AUTHORIZED_OPERATIONS_OMITTED",
    "MIN_INSYNC_REPLICAS_TAG",
    "SHARE_VERSIONS",
    "SUPPORTED_VERSIONS",
    "Kip637MetadataResponseTopic",
    "MetadataResponseKip637",
    "decode_describe_quorum_response",
    "decode_metadata_response_kip637",
    "decode_request",
    "decode_response",
    "encode_describe_quorum_request",
    "encode_describe_quorum_response",
    "encode_metadata_response_kip637",
    "encode_request",
    "encode_response",
]
__all__ += _kafka_messages.__all__
# Compiled with mypyc, `import *` only imports the module (absolute: mypyc would not resolve `from .x import *`)
# and binds no name here: the generated classes are bound by name, as the interpreter's `import *` did already.
globals().update({_name: getattr(_kafka_messages, _name) for _name in _kafka_messages.__all__})

#: Kafka's "authorized operations not requested" sentinel (Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)
#: Tag of the proxy's topic-level ``min_insync_replicas`` extension (after KIP-637's number): the
#: generated ``MetadataResponseTopic.min_insync_replicas`` (protocolgen/config.py: PROJECT_FIELDS).
MIN_INSYNC_REPLICAS_TAG: Final = METADATA_RESPONSE_TOPICS_MIN_INSYNC_REPLICAS_TAG
#: Versions of ShareFetch and ShareAcknowledge protocol/ speaks (both flexible in every version).
SHARE_VERSIONS: Final = (SHARE_FETCH_MIN_VERSION, SHARE_FETCH_MAX_VERSION)


# ---------------------------------------------------------------------------------------------
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

    throttle_time_ms: int = kfield(INT32, "0+", default=0)
    brokers: tuple[MetadataResponseBroker, ...] = kfield(ArrayOf(MetadataResponseBroker), "0+", default=())
    cluster_id: str | None = kfield(STRING, "0+", nullable="0+", default=None)
    controller_id: int = kfield(INT32, "0+", default=-1)
    topics: tuple[Kip637MetadataResponseTopic, ...] = kfield(
        ArrayOf(Kip637MetadataResponseTopic), "0+", default=())
    cluster_authorized_operations: int = kfield(INT32, "0+", default=AUTHORIZED_OPERATIONS_OMITTED)


# Message's class attributes, set after the class is made, as the generated classes' are (MESSAGE_VERSIONS):
# compiled with mypyc, a dataclass's body would hand them to dataclass as fields.
MetadataResponseKip637.API_KEY = ApiKey.METADATA
MetadataResponseKip637.VALID_VERSIONS = (10, 10)
MetadataResponseKip637.FLEXIBLE_FROM = 10

# The KIP-637 body is encoded with the v9 rules (flexible; nested structs as in v9).
_KIP637_LAYOUT_VERSION = 9


def encode_metadata_response_kip637(msg: MetadataResponseKip637) -> bytes:
    """Encode a body in KIP-637's literal "v10" layout (not Kafka's real MetadataResponse v10)."""
    return encode_struct(msg, _KIP637_LAYOUT_VERSION, True)


def decode_metadata_response_kip637(body: Buffer) -> MetadataResponseKip637:
    """Decode a body in KIP-637's literal "v10" layout."""
    return decode_struct(MetadataResponseKip637, _KIP637_LAYOUT_VERSION, body, True)


# ---------------------------------------------------------------------------------------------
# Entry points: the class by API key from the registry (protocol/kafka_messages.py).

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


def encode_describe_quorum_request(msg: DescribeQuorumRequest, version: int) -> bytes:
    """Encode a DescribeQuorumRequest body at ``version`` (``encode_request`` does the same)."""
    return encode_request(msg, version)


def decode_describe_quorum_response(version: int, body: Buffer) -> DescribeQuorumResponse:
    """Decode a DescribeQuorumResponse body (the bytes after the response header)."""
    response = decode_response(ApiKey.DESCRIBE_QUORUM, version, body)
    assert isinstance(response, DescribeQuorumResponse)
    return response


def encode_describe_quorum_response(msg: DescribeQuorumResponse, version: int) -> bytes:
    """Encode a DescribeQuorumResponse body at ``version`` (``encode_response`` does the same)."""
    return encode_response(msg, version)
