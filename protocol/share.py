"""ShareFetch (key 78) and ShareAcknowledge (key 79) responses: share groups (KIP-932).

Both answers end with ``node_endpoints``, the host/port of the leaders a client must move to after
NOT_LEADER_OR_FOLLOWER: broker addresses a proxy must rewrite. Their schemas (protocol/messages.py)
decode and encode every version Kafka 4.3 defines (v1-v2; v0 was 4.0's early access, removed in
4.1). The proxy's path is the walk here: it skips every partition (records by their length, never
decoded) to the ``node_endpoints`` array, rewrites host/port of the mapped nodes and keeps every
other byte as a slice of the broker's answer. A response without endpoints to change comes back as
the same object.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from .addresses import rewrite_endpoints
from .api_keys import ApiKey
from .errors import MalformedFrame, ProtocolError, UnsupportedVersion
from .kafka_messages import NodeEndpoint
from .messages import SHARE_VERSIONS
from .primitives import Buffer, Reader, Writer, bytes_view
from .schema import decode_struct, encode_struct

__all__ = [
    "find_share_node_endpoints",
    "rewrite_share_acknowledge_node_endpoints",
    "rewrite_share_fetch_node_endpoints",
]

#: The version from which each answer carries acquisition_lock_timeout_ms.
_LOCK_TIMEOUT_FROM = {ApiKey.SHARE_FETCH: 1, ApiKey.SHARE_ACKNOWLEDGE: 2}


def _walk(mv: memoryview, api_key: int, version: int) -> tuple[int, int, tuple[NodeEndpoint, ...]]:
    """(start, end, endpoints) of the ``node_endpoints`` array in a whole response frame.

    Every byte is walked (the top-level tagged fields and the frame's end included), so a frame
    that is not a well-formed answer raises :class:`ProtocolError` even when nothing is rewritten.
    """
    lo, hi = SHARE_VERSIONS
    if not lo <= version <= hi:
        raise UnsupportedVersion(f"{ApiKey(api_key).name} v{version} is not supported (known: v{lo}-v{hi})")
    fetch = api_key == ApiKey.SHARE_FETCH
    try:
        r = Reader(mv)
        r.int32()  # correlation id (response header v1)
        r.tagged_fields()
        r.take(6)  # throttle_time_ms, error_code
        r.compact_nullable_bytes()  # error_message: skipped, not decoded
        if version >= _LOCK_TIMEOUT_FROM[ApiKey(api_key)]:
            r.take(4)  # acquisition_lock_timeout_ms
        for _ in range(r.array_length(True)):
            r.take(16)  # topic_id
            for _ in range(r.array_length(True)):
                r.take(6)  # partition_index, error_code
                r.compact_nullable_bytes()  # error_message
                if fetch:
                    r.take(2)  # acknowledge_error_code
                    r.compact_nullable_bytes()  # acknowledge_error_message
                r.take(8)  # current_leader: leader_id, leader_epoch
                r.tagged_fields()
                if fetch:
                    r.compact_nullable_bytes()  # records: skipped by their length
                    for _ in range(r.array_length(True)):
                        r.take(18)  # first_offset, last_offset, delivery_count
                        r.tagged_fields()
                r.tagged_fields()
            r.tagged_fields()
        start = r.pos
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
