"""Builders of test frames (header + body, no size prefix) for requests and responses."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from insync_proxy.protocol.api_keys import ApiKey
from insync_proxy.protocol.headers import RequestHeader, encode_request_header, encode_response_with_header
from insync_proxy.protocol.kafka_messages import PartitionProduceData, ProduceRequest, TopicProduceData
from insync_proxy.protocol.messages import NodeEndpoint, encode_request, encode_response
from insync_proxy.protocol.primitives import Writer
from insync_proxy.protocol.records import encode_record_batch
from insync_proxy.protocol.schema import ArrayOf, Message, encode_value

#: The topic id of `produce_frame_with_batches`'s v13+ requests.
TOPIC_ID = uuid.UUID("0b9c6a4e-6a6e-4d0b-9b43-9a1f2e3d4c5b")


def request_frame(msg: Message, version: int, correlation_id: int = 1, client_id: str | None = "test") -> bytes:
    """Request header (right version) + encoded body."""
    header = RequestHeader(request_api_key=msg.API_KEY, request_api_version=version,
                           correlation_id=correlation_id, client_id=client_id)
    return encode_request_header(header) + encode_request(msg, version)


def response_frame(msg: Message, version: int, correlation_id: int = 1) -> bytes:
    """Response header (right version) + encoded body."""
    return encode_response_with_header(msg.API_KEY, version, correlation_id, encode_response(msg, version))


def fetch_response_frame(
    version: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[tuple[int, bytes | None]]]],
    node_endpoints: Sequence[NodeEndpoint] = (),
    correlation_id: int = 1,
    extra_top_level_tags: Sequence[tuple[int, bytes]] = (),
) -> bytes:
    """A flexible (v12+) Fetch response with the given (topic, [(partition, records)])."""
    assert version >= 12
    w = Writer()
    w.int32(correlation_id)
    w.uvarint(0)  # response header v1 tagged fields
    w.int32(0)  # throttle_time_ms
    w.int16(0)  # error_code
    w.int32(77)  # session_id
    w.array_length(len(topics), True)
    for topic, parts in topics:
        if version >= 13:
            assert isinstance(topic, uuid.UUID)
            w.uuid(topic)
        else:
            assert isinstance(topic, str)
            w.string(topic, False, True)
        w.array_length(len(parts), True)
        for index, records in parts:
            w.int32(index)
            w.int16(0)
            w.int64(100)  # high_watermark
            w.int64(100)  # last_stable_offset
            w.int64(0)  # log_start_offset
            w.array_length(1, True)  # aborted_transactions
            w.int64(5)
            w.int64(6)
            w.uvarint(0)
            w.int32(-1)  # preferred_read_replica
            w.bytes_(records, True, True)
            w.tagged_fields([(1, b"\x00\x00\x00\x02\x00\x00\x00\x03\x00")])  # current_leader (tag 1)
        w.uvarint(0)
    tags = list(extra_top_level_tags)
    if node_endpoints:
        tags.append((0, encode_value(ArrayOf(NodeEndpoint), version, True, tuple(node_endpoints))))
    w.tagged_fields(sorted(tags))
    return bytes(w.out)


FETCH = ApiKey.FETCH


def produce_frame_with_batches(version: int, acks: int, layout: list[tuple[str, list[tuple[int, list[int] | None]]]],
                               client_id: str | None = "c") -> bytes:
    """A Produce request: per topic, per partition, the sizes of its batches' records (None: null records)."""
    topics = []
    for name, partitions in layout:
        data = []
        for index, batches in partitions:
            records = None if batches is None else b"".join(
                encode_record_batch([b"v" * 3] * n) for n in batches)
            data.append(PartitionProduceData(index=index, records=records))
        topics.append(TopicProduceData(name=name, topic_id=TOPIC_ID, partition_data=tuple(data)))
    header = RequestHeader(request_api_key=0, request_api_version=version, correlation_id=7, client_id=client_id)
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=tuple(topics))
    return encode_request_header(header) + encode_request(request, version)
