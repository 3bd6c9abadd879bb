"""Fetch v16+ node_endpoints: rewritten in place of the tagged field; untouched otherwise."""

from __future__ import annotations

import uuid

import pytest

from insync_proxy.protocol.errors import ProtocolError
from insync_proxy.protocol.fetch import find_fetch_node_endpoints, rewrite_fetch_node_endpoints
from insync_proxy.protocol.messages import NodeEndpoint

from .frames import fetch_response_frame

ENDPOINTS = [NodeEndpoint(node_id=1, host="broker-1", port=9092, rack="r1"),
             NodeEndpoint(node_id=2, host="broker-2", port=9093)]


def topics(version: int) -> list[tuple[str | uuid.UUID, list[tuple[int, bytes | None]]]]:
    return [(uuid.UUID(int=5) if version >= 13 else "orders", [(0, b"R" * 500), (1, None)])]


@pytest.mark.parametrize("version", [16, 17, 18])
def test_node_endpoints_rewritten_records_untouched(version: int) -> None:
    # Given a Fetch response with records and node endpoints for brokers 1 and 2
    frame = fetch_response_frame(version, topics(version), ENDPOINTS, extra_top_level_tags=[(7, b"keep")])
    # When broker 1 is mapped to the proxy's address
    out = rewrite_fetch_node_endpoints(frame, version, {1: ("proxy", 19092)})
    # Then only that endpoint changed, and everything before the top-level tags is the same bytes
    assert list(find_fetch_node_endpoints(out, version)) == [
        NodeEndpoint(node_id=1, host="proxy", port=19092, rack="r1"), ENDPOINTS[1]]
    no_tags = fetch_response_frame(version, topics(version))
    assert bytes(out).startswith(no_tags[:-1])
    assert b"\x07\x04keep" in bytes(out)


@pytest.mark.parametrize("version", [12, 13, 15, 16, 18])
def test_response_without_node_endpoints_is_returned_as_is(version: int) -> None:
    frame = fetch_response_frame(version, topics(version))
    assert rewrite_fetch_node_endpoints(frame, version, {1: ("proxy", 1)}) is frame
    assert find_fetch_node_endpoints(frame, version) == ()


def test_unmapped_node_endpoints_are_returned_as_is() -> None:
    frame = fetch_response_frame(16, topics(16), ENDPOINTS)
    assert rewrite_fetch_node_endpoints(frame, 16, {9: ("proxy", 1)}) is frame


def test_versions_before_16_are_not_even_parsed() -> None:
    assert rewrite_fetch_node_endpoints(b"garbage", 11, {1: ("p", 1)}) == b"garbage"


def test_truncated_fetch_response_raises_protocol_error() -> None:
    frame = fetch_response_frame(16, topics(16), ENDPOINTS)
    for cut in range(0, len(frame) - 1, 13):
        with pytest.raises(ProtocolError):
            rewrite_fetch_node_endpoints(frame[:cut], 16, {1: ("proxy", 1)})
