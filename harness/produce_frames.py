"""Produce requests and responses as a client and a broker put them on the wire, built and read with the codec.

Topics are named in tests by their name; for Produce v13+ (topic ids on the wire) the id comes from
`topic_ids`, and decoding maps ids back to names the same way.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from insync_proxy.protocol import (
    ApiKey,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_request_header,
    encode_response,
    encode_response_with_header,
    produce_acks_offset,
    split_response,
)
from insync_proxy.protocol.messages import (
    PartitionProduceData,
    PartitionProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from insync_proxy.protocol.records import encode_record_batch

_SIZE = struct.Struct(">i")

#: topic name -> partitions, in request order (dicts keep insertion order).
Partitions = Mapping[str, list[int]]


def _sized(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


def _unsized(frame: bytes) -> bytes:
    (size,) = _SIZE.unpack_from(frame, 0)
    assert size == len(frame) - 4, f"size prefix {size} does not cover the frame ({len(frame) - 4} bytes)"
    return frame[4:]


def produce_request(
    version: int,
    acks: int,
    partitions: Partitions,
    topic_ids: Mapping[str, uuid.UUID],
    *,
    correlation_id: int = 7,
    transactional_id: str | None = None,
    client_id: str = "producer-1",
) -> bytes:
    """A size-prefixed Produce request, one small record batch per partition."""
    topics = []
    for name, indexes in partitions.items():
        data = tuple(
            PartitionProduceData(index=i, records=encode_record_batch([f"{name}-{i}".encode()])) for i in indexes
        )
        if version >= 13:
            topics.append(TopicProduceData(topic_id=topic_ids[name], partition_data=data))
        else:
            topics.append(TopicProduceData(name=name, partition_data=data))
    body = encode_request(
        ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=1500, topic_data=tuple(topics)),
        version,
    )
    header = encode_request_header(RequestHeader(
        request_api_key=ApiKey.PRODUCE, request_api_version=version, correlation_id=correlation_id,
        client_id=client_id,
    ))
    return _sized(header + body)


def with_acks(frame: bytes, acks: int) -> bytes:
    """The same size-prefixed Produce request with only its acks field changed."""
    payload = bytearray(_unsized(frame))
    struct.pack_into(">h", payload, produce_acks_offset(payload), acks)
    return _sized(bytes(payload))


@dataclass(frozen=True)
class SentProduce:
    """A Produce request as it went upstream."""

    version: int
    correlation_id: int
    acks: int
    partitions: list[tuple[str, int]]  #: (topic name, partition), in request order


def read_produce_request(frame: bytes, topic_ids: Mapping[str, uuid.UUID]) -> SentProduce:
    """Decode a size-prefixed Produce request with the codec."""
    payload = _unsized(frame)
    header, offset = decode_request_header(payload)
    assert header.request_api_key == ApiKey.PRODUCE
    request = decode_request(ApiKey.PRODUCE, header.request_api_version, payload[offset:])
    assert isinstance(request, ProduceRequest)
    names = {v: k for k, v in topic_ids.items()}
    version = header.request_api_version
    return SentProduce(version, header.correlation_id, request.acks, [
        (names[t.topic_id] if version >= 13 else t.name, p.index) for t in request.topic_data for p in t.partition_data
    ])


@dataclass(frozen=True)
class ProduceAnswer:
    """A Produce response as the client read it."""

    correlation_id: int
    partitions: list[tuple[str, int, int]]  #: (topic name, partition, error code), in response order
    base_offsets: dict[tuple[str, int], int]


def read_produce_response(frame: bytes, version: int, topic_ids: Mapping[str, uuid.UUID]) -> ProduceAnswer:
    """Decode a size-prefixed Produce response with the codec."""
    correlation_id, body = split_response(_unsized(frame), ApiKey.PRODUCE, version)
    response = decode_response(ApiKey.PRODUCE, version, body)
    assert isinstance(response, ProduceResponse)
    names = {v: k for k, v in topic_ids.items()}
    rows = []
    offsets = {}
    for t in response.responses:
        name = names[t.topic_id] if version >= 13 else t.name
        for p in t.partition_responses:
            rows.append((name, p.index, p.error_code))
            offsets[(name, p.index)] = p.base_offset
    return ProduceAnswer(correlation_id, rows, offsets)


def broker_response(
    sent: SentProduce,
    topic_ids: Mapping[str, uuid.UUID],
    *,
    errors: Mapping[tuple[str, int], int] | None = None,
    reverse: bool = False,
) -> bytes:
    """The broker's size-prefixed answer to `sent`: base offset 100 + partition, or the given error.

    `reverse` answers topics and partitions in the opposite order (a broker need not keep request order).
    """
    by_topic: dict[str, list[PartitionProduceResponse]] = {}
    for name, index in sent.partitions:
        code = (errors or {}).get((name, index), 0)
        by_topic.setdefault(name, []).append(PartitionProduceResponse(
            index=index, error_code=code, base_offset=-1 if code else 100 + index,
        ))
    topics = []
    for name, parts in by_topic.items():
        ordered = tuple(reversed(parts)) if reverse else tuple(parts)
        if sent.version >= 13:
            topics.append(TopicProduceResponse(topic_id=topic_ids[name], partition_responses=ordered))
        else:
            topics.append(TopicProduceResponse(name=name, partition_responses=ordered))
    if reverse:
        topics.reverse()
    body = encode_response(ProduceResponse(responses=tuple(topics)), sent.version)
    return _sized(encode_response_with_header(ApiKey.PRODUCE, sent.version, sent.correlation_id, body))
