"""Metadata test helpers: frames of generated answers, the splice done the slow way (decode, enrich, encode) to
compare the fast one with, and the scan compared with the full decode."""

from __future__ import annotations

import dataclasses
from typing import Any

from insync_proxy.protocol.headers import (
    encode_response_with_header,
    split_response,
)
from insync_proxy.protocol.messages import (
    MetadataResponse,
    MetadataResponsePartition,
    decode_response,
    encode_response,
)
from insync_proxy.protocol.metadata_scan import (
    MetadataScan,
    ScannedPartition,
)


def frame_of(msg: MetadataResponse, version: int, correlation_id: int = 3) -> bytes:
    return encode_response_with_header(3, version, correlation_id, encode_response(msg, version))


def generic_enrich(msg: MetadataResponse, version: int, min_isr: dict[Any, int],
                   addresses: dict[int, tuple[str, int]], leaderless: set[tuple[str, int]]) -> MetadataResponse:
    brokers = tuple(dataclasses.replace(b, host=addresses[b.node_id][0], port=addresses[b.node_id][1])
                    if b.node_id in addresses else b for b in msg.brokers)
    topics = []
    for t in msg.topics:
        parts = tuple(dataclasses.replace(p, error_code=5, leader_id=-1) if (t.name, p.partition_index) in leaderless
                      else p for p in t.partitions)
        value = min_isr.get(t.name) if t.name is not None else None
        if value is None and version >= 10:
            value = min_isr.get(t.topic_id)
        if version >= 9 and value is not None:
            t = dataclasses.replace(t, min_insync_replicas=value)
        topics.append(dataclasses.replace(t, partitions=parts))
    return dataclasses.replace(msg, brokers=brokers, topics=tuple(topics))


def decoded(frame: bytes, version: int) -> MetadataResponse:
    msg = decode_response(METADATA, version, split_response(frame, METADATA, version)[1])
    assert isinstance(msg, MetadataResponse)
    return msg


def assert_scan_equals_decode(scan: MetadataScan, msg: MetadataResponse, version: int, correlation_id: int) -> None:
    assert scan.api_version == version
    assert scan.correlation_id == correlation_id
    assert scan.throttle_time_ms == msg.throttle_time_ms
    assert [(b.node_id, b.host, b.port, b.rack) for b in scan.brokers] == [
        (b.node_id, b.host, b.port, b.rack) for b in msg.brokers]
    assert scan.cluster_id == msg.cluster_id
    assert scan.controller_id == msg.controller_id
    assert scan.cluster_authorized_operations == msg.cluster_authorized_operations
    assert scan.error_code == msg.error_code
    assert len(scan.topics) == len(msg.topics)
    for topic, expected in zip(scan.topics, msg.topics, strict=True):
        assert topic.error_code == expected.error_code
        assert topic.name == expected.name
        assert topic.topic_id == (expected.topic_id if version >= 10 else None)
        assert topic.is_internal == expected.is_internal
        assert topic.partition_count == len(expected.partitions)
        assert topic.topic_authorized_operations == expected.topic_authorized_operations
        assert topic.min_insync_replicas == expected.min_insync_replicas
        assert scan.partitions(topic) == [as_scanned(p, version) for p in expected.partitions]
        assert len(scan.partition_offsets(topic)) == topic.partition_count


def options_for(msg: MetadataResponse) -> dict[str, Any]:
    """Splice options touching every other topic, broker and partition (by name and by topic id)."""
    names = [t.name for t in msg.topics if t.name is not None]
    min_isr: dict[Any, int] = {n: 2 for n in names[::2]}
    min_isr.update({t.topic_id: 3 for t in msg.topics[1::2]})
    return {
        "min_insync_replicas": min_isr,
        "broker_addresses": {b.node_id: ("proxy-host", 19092 + i) for i, b in enumerate(msg.brokers[::2])},
        "leaderless": {(t.name, p.partition_index) for t in msg.topics if t.name is not None
                       for p in t.partitions[::2]},
    }


METADATA = 3


def as_scanned(p: MetadataResponsePartition, version: int) -> ScannedPartition:
    """What the scan reads for a decoded partition (fields a version lacks at their scan defaults)."""
    return ScannedPartition(p.partition_index, p.error_code, p.leader_id, p.leader_epoch if version >= 7 else -1,
                            p.replica_nodes, p.isr_nodes, p.offline_replicas if version >= 5 else ())
