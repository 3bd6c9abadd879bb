"""Fetch v16+ node_endpoints: rewritten in place of the tagged field; untouched otherwise."""

from __future__ import annotations

import random
import uuid

import pytest

from insync_proxy.protocol.errors import ProtocolError
from insync_proxy.protocol.fetch import (
    FetchEndpointsTap,
    find_fetch_node_endpoints,
    rewrite_fetch_node_endpoints,
)
from insync_proxy.protocol.messages import NodeEndpoint
from insync_proxy.protocol.primitives import Reader

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


# ---------------------------------------------------------------------------------------------- streaming tap
def _through_tap(frame: bytes, version: int, addresses: dict[int, tuple[str, int]], cuts: list[int]
                 ) -> tuple[bytes, bytes, FetchEndpointsTap]:
    """Feeds `frame` to a tap in pieces; returns (what passed at once, what finish() made of the rest)."""
    tap = FetchEndpointsTap(version, addresses)
    passed = bytearray()
    held = bytearray()
    bounds = [0, *sorted(set(cuts)), len(frame)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        piece = memoryview(frame[a:b])
        if held:
            assert tap.feed(piece) == 0
            held += piece
            continue
        ok = tap.feed(piece)
        passed += piece[:ok]
        held += piece[ok:]
    return bytes(passed), tap.finish(bytes(held)), tap


def _many_partitions(version: int) -> list[tuple[str | uuid.UUID, list[tuple[int, bytes | None]]]]:
    return [(uuid.UUID(int=t), [(p, bytes([p]) * (p * 37 % 300) if p % 3 else None) for p in range(7)])
            for t in range(3)]


@pytest.mark.parametrize("version", [16, 17, 18])
def test_the_tap_rewrites_node_endpoints_in_place_whatever_the_pieces(version: int) -> None:
    rng = random.Random(version)
    frame = fetch_response_frame(version, _many_partitions(version), ENDPOINTS, extra_top_level_tags=[(7, b"keep")])
    no_tags = fetch_response_frame(version, _many_partitions(version))[:-1]
    for proxy_host in ("proxy", "proxy-12", "proxy-123", "p", "prox"):  # shorter, equal, longer, ...
        for _ in range(20):
            cuts = [rng.randrange(1, len(frame)) for _ in range(rng.randrange(0, 6))]
            passed, tail, tap = _through_tap(frame, version, {1: (proxy_host, 19092)}, cuts)
            out = passed + tail
            # The length never changes (the size prefix went out first); everything before the
            # top-level tags passed at once, untouched
            assert len(out) == len(frame) and passed == no_tags
            endpoints = list(find_fetch_node_endpoints(out, version))
            if tap.dropped:
                assert endpoints == [] and len(proxy_host) > len("broker-1")
            else:
                assert endpoints == [NodeEndpoint(node_id=1, host=proxy_host, port=19092, rack="r1"), ENDPOINTS[1]]
            tags = dict(Reader(out, len(no_tags)).tagged_fields())
            assert bytes(tags[7]) == b"keep"
            assert b"broker-1" not in out


@pytest.mark.parametrize("shorter_by", [0, 1, 2, 3, 4, 5, 6, 130, 200])
def test_a_shorter_rewrite_is_padded_to_the_same_length(shorter_by: int) -> None:
    broker = NodeEndpoint(node_id=1, host="b" * 300, port=9092)
    frame = fetch_response_frame(16, _many_partitions(16), [broker])
    host = "p" * (300 - shorter_by)
    passed, tail, tap = _through_tap(frame, 16, {1: (host, 1)}, [100])
    out = passed + tail
    assert len(out) == len(frame) and not tap.dropped
    assert find_fetch_node_endpoints(out, 16) == (NodeEndpoint(node_id=1, host=host, port=1),)


def test_a_response_without_node_endpoints_passes_untouched() -> None:
    frame = fetch_response_frame(17, _many_partitions(17), extra_top_level_tags=[(3, b"x")])
    passed, tail, tap = _through_tap(frame, 17, {1: ("proxy", 1)}, [5, 500])
    assert passed + tail == frame and not tap.dropped


def test_a_response_ending_before_its_tagged_fields_is_an_error() -> None:
    frame = fetch_response_frame(16, topics(16), ENDPOINTS)
    tap = FetchEndpointsTap(16, {1: ("proxy", 1)})
    assert tap.feed(memoryview(frame[:60])) == 60
    with pytest.raises(ProtocolError):
        tap.finish(b"")


def test_the_tap_takes_only_the_versions_it_knows() -> None:
    for version in (15, 19):
        with pytest.raises(ProtocolError):
            FetchEndpointsTap(version, {})


def test_the_tap_walks_a_response_fed_one_byte_at_a_time() -> None:
    frame = fetch_response_frame(18, _many_partitions(18), ENDPOINTS)
    passed, tail, tap = _through_tap(frame, 18, {2: ("proxy-2", 2)}, list(range(1, len(frame))))
    assert len(passed + tail) == len(frame)
    assert find_fetch_node_endpoints(passed + tail, 18)[1] == NodeEndpoint(node_id=2, host="proxy-2", port=2)
