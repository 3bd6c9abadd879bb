"""Metadata splice fast path: must give the same bytes as decode -> modify -> encode."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insync_proxy.protocol.errors import ProtocolError
from insync_proxy.protocol.headers import split_response
from insync_proxy.protocol.messages import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    decode_response,
)
from insync_proxy.protocol.metadata_splice import enrich_metadata_response
from tests.protocol.metadata_helpers import frame_of, generic_enrich

from .schema_gen import message_strategy


@pytest.mark.parametrize("version", range(0, 14))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_splice_equals_full_decode_modify_encode(version: int, data: Any) -> None:
    # Given any MetadataResponse of this version
    msg = data.draw(message_strategy(MetadataResponse, version))
    # Strip the tag-637 values the generator may have set, so only the splice sets them
    msg = dataclasses.replace(msg, topics=tuple(dataclasses.replace(t, min_insync_replicas=-1) for t in msg.topics))
    names = [t.name for t in msg.topics if t.name is not None]
    min_isr: dict[Any, int] = {n: 2 for n in names[::2]}
    min_isr.update({t.topic_id: 3 for t in msg.topics[1::2]})
    addresses = {b.node_id: ("proxy-host", 19092 + i) for i, b in enumerate(msg.brokers[::2])}
    leaderless = {(t.name, p.partition_index) for t in msg.topics if t.name is not None for p in t.partitions[::2]}
    # When the splice path enriches the bytes
    out = enrich_metadata_response(frame_of(msg, version), version, min_insync_replicas=min_isr,
                                   broker_addresses=addresses, leaderless=leaderless)
    # Then the result is exactly what the generic path would produce
    expected = generic_enrich(msg, version, min_isr, addresses, leaderless)
    assert out == frame_of(expected, version)


def _cluster(n_topics: int = 3) -> MetadataResponse:
    return MetadataResponse(
        brokers=(MetadataResponseBroker(node_id=1, host="broker-1", port=9092),
                 MetadataResponseBroker(node_id=2, host="broker-2", port=9092)),
        cluster_id="c", controller_id=1,
        topics=tuple(MetadataResponseTopic(name=f"t{i}", partitions=tuple(
            MetadataResponsePartition(partition_index=p, leader_id=1, leader_epoch=4, replica_nodes=(1, 2),
                                      isr_nodes=(1, 2)) for p in range(3))) for i in range(n_topics)))


def test_min_insync_tag_637_is_added_per_topic_and_decodes() -> None:
    out = enrich_metadata_response(frame_of(_cluster(), 12), 12, min_insync_replicas={"t0": 2, "t2": 3})
    decoded = decode_response(3, 12, split_response(out, 3, 12)[1])
    assert isinstance(decoded, MetadataResponse)
    assert [t.min_insync_replicas for t in decoded.topics] == [2, -1, 3]


def test_existing_tag_637_is_replaced_and_other_tags_kept() -> None:
    msg = _cluster(1)
    msg = dataclasses.replace(msg, topics=(dataclasses.replace(
        msg.topics[0], min_insync_replicas=1, unknown_tagged_fields=((5, b"a"), (900, b"b"))),))
    out = enrich_metadata_response(frame_of(msg, 13), 13, min_insync_replicas={"t0": 2})
    decoded = decode_response(3, 13, split_response(out, 3, 13)[1])
    assert isinstance(decoded, MetadataResponse)
    assert decoded.topics[0].min_insync_replicas == 2
    assert decoded.topics[0].unknown_tagged_fields == ((5, b"a"), (900, b"b"))


def test_leaderless_partition_keeps_its_leader_epoch() -> None:
    out = enrich_metadata_response(frame_of(_cluster(), 9), 9, leaderless={("t1", 2)})
    decoded = decode_response(3, 9, split_response(out, 3, 9)[1])
    assert isinstance(decoded, MetadataResponse)
    p = decoded.topics[1].partitions[2]
    assert (p.error_code, p.leader_id, p.leader_epoch) == (5, -1, 4)


def test_nothing_to_change_returns_equal_bytes() -> None:
    frame = frame_of(_cluster(), 12)
    assert enrich_metadata_response(frame, 12) == frame


def test_truncated_metadata_raises_protocol_error() -> None:
    frame = frame_of(_cluster(), 12)
    for cut in range(0, len(frame) - 1, 7):
        with pytest.raises(ProtocolError):
            enrich_metadata_response(frame[:cut], 12, min_insync_replicas={"t0": 2})
