"""ShareFetch (key 78) and ShareAcknowledge (key 79) responses: share groups (KIP-932).

Both answers end with ``node_endpoints``, the host/port of the leaders a client must move to after
NOT_LEADER_OR_FOLLOWER: broker addresses a proxy must rewrite. Their schemas (protocol/messages.py)
decode and encode every version Kafka 4.3 defines (v1-v2; v0 was 4.0's early access, removed in
4.1). The proxy's path is the walk here: the generated grammar (protocol/kafka_walkers.py) skips
every partition (records by their length, never decoded) to the ``node_endpoints`` array; the walk
rewrites host/port of the mapped nodes and keeps every other byte as a slice of the broker's answer. A response without endpoints to change comes back as
the same object.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

from .addresses import rewrite_endpoints
from .api_keys import ApiKey
from .errors import MalformedFrame, ProtocolError, UnsupportedVersion
from .kafka_messages import NodeEndpoint
from .kafka_walkers import (
    SHARE_ACKNOWLEDGE_RESPONSE_NODE_ENDPOINTS_AT,
    SHARE_FETCH_RESPONSE_NODE_ENDPOINTS_AT,
)
from .messages import SHARE_VERSIONS
from .primitives import Buffer, Reader, Writer, bytes_view, skip_tagged_fields_at
from .schema import decode_struct, encode_struct

__all__ = [
    "find_share_node_endpoints",
    "rewrite_share_acknowledge_node_endpoints",
    "rewrite_share_fetch_node_endpoints",
]

#: Where each answer's ``node_endpoints`` starts, per version, from the body's start: generated from the specs
#: (protocol/kafka_walkers.py; every partition skipped, records by their length).
_NODE_ENDPOINTS_AT: Final = {
    ApiKey.SHARE_FETCH: SHARE_FETCH_RESPONSE_NODE_ENDPOINTS_AT,
    ApiKey.SHARE_ACKNOWLEDGE: SHARE_ACKNOWLEDGE_RESPONSE_NODE_ENDPOINTS_AT,
}


def _walk(mv: memoryview, api_key: int, version: int) -> tuple[int, int, tuple[NodeEndpoint, ...]]:
    """(start, end, endpoints) of the ``node_endpoints`` array in a whole response frame.

    Every byte is walked (the top-level tagged fields and the frame's end included), so a frame
    that is not a well-formed answer raises :class:`ProtocolError` even when nothing is rewritten.
    """
    lo, hi = SHARE_VERSIONS
    if not lo <= version <= hi:
        raise UnsupportedVersion(f"{ApiKey(api_key).name} v{version} is not supported (known: v{lo}-v{hi})")
    endpoints_at = _NODE_ENDPOINTS_AT[ApiKey(api_key)][version]
    assert endpoints_at is not None  # every supported version has node_endpoints
    try:
        start = endpoints_at(mv, skip_tagged_fields_at(mv, 4))  # after the correlation id and header v1's tags
        r = Reader(mv, start)
        endpoints = tuple(decode_struct(NodeEndpoint, version, r, True) for _ in range(r.array_length(True)))
        end = r.pos
        r.tagged_fields()
        r.expect_end()
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError) as e:
        raise MalformedFrame(f"cannot walk {ApiKey(api_key).name} response: {e!r}") from None
    return start, end, endpoints


def find_share_node_endpoints(frame: Buffer, api_key: int, api_version: int) -> tuple[NodeEndpoint, ...]:
    """The ``node_endpoints`` of a ShareFetch or ShareAcknowledge response frame (header + body)."""
    return _walk(bytes_view(frame), api_key, api_version)[2]


def _rewrite(frame: Buffer, api_key: int, api_version: int, addresses: Mapping[int, tuple[str, int]]) -> Buffer:
    mv = bytes_view(frame)
    start, end, endpoints = _walk(mv, api_key, api_version)
    rewritten = rewrite_endpoints(endpoints, addresses)
    if rewritten is None:
        return frame
    w = Writer()
    w.array_length(len(rewritten), True)
    for ep in rewritten:
        encode_struct(ep, api_version, True, w)
    return b"".join((mv[:start], w.out, mv[end:]))


def rewrite_share_fetch_node_endpoints(
    frame: Buffer, api_version: int, addresses: Mapping[int, tuple[str, int]]
) -> Buffer:
    """Replace host/port of a ShareFetch response's ``node_endpoints`` for the mapped node ids.

    ``frame`` is the response frame payload (header + body). When no endpoint changes, ``frame``
    itself is returned; otherwise new bytes: the broker's up to the array, the new array, the rest.
    """
    return _rewrite(frame, ApiKey.SHARE_FETCH, api_version, addresses)


def rewrite_share_acknowledge_node_endpoints(
    frame: Buffer, api_version: int, addresses: Mapping[int, tuple[str, int]]
) -> Buffer:
    """Replace host/port of a ShareAcknowledge response's ``node_endpoints`` (as the ShareFetch one)."""
    return _rewrite(frame, ApiKey.SHARE_ACKNOWLEDGE, api_version, addresses)
