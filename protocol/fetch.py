"""Fetch responses, only as far as a proxy needs: rewrite the v16+ top-level ``node_endpoints``.

The walk skips every partition's records by their length (never decodes them) to reach the
top-level tagged fields; a response without ``node_endpoints`` comes back as the very same object.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import replace

from .api_keys import ApiKey
from .errors import MalformedFrame, ProtocolError, TruncatedData, UnsupportedVersion
from .headers import response_header_version
from .messages import NodeEndpoint
from .primitives import Buffer, Reader, Writer
from .schema import ArrayOf, decode_value, encode_value

__all__ = ["FETCH_NODE_ENDPOINTS_TAG", "find_fetch_node_endpoints", "rewrite_fetch_node_endpoints"]

FETCH_NODE_ENDPOINTS_TAG = 0
_FIRST_NODE_ENDPOINTS_VERSION = 16
_MAX_VERSION = 18
_NODE_ENDPOINTS = ArrayOf(NodeEndpoint)


def _top_level_tags_offset(mv: memoryview, v: int) -> int:
    """Offset of the top-level tagged-field section of a flexible (v12+) Fetch response."""
    r = Reader(mv)
    r.int32()  # correlation id
    if response_header_version(ApiKey.FETCH, v) == 1:
        r.tagged_fields()
    r.int32()  # throttle_time_ms
    r.int16()  # error_code
    r.int32()  # session_id
    n_topics = r.array_length(True)
    for _ in range(max(n_topics, 0)):
        if v >= 13:
            r.take(16)  # topic_id
        else:
            r.compact_string()
        n_parts = r.array_length(True)
        for _ in range(max(n_parts, 0)):
            # partition_index, error_code, high_watermark, last_stable_offset, log_start_offset
            r.take(30)
            n_aborted = r.array_length(True)
            for _ in range(max(n_aborted, 0)):
                r.take(16)  # producer_id, first_offset
                r.tagged_fields()
            r.int32()  # preferred_read_replica
            r.compact_nullable_bytes()  # records: skipped, not decoded
            r.tagged_fields()
        r.tagged_fields()
    return r.pos


def find_fetch_node_endpoints(frame: Buffer, api_version: int) -> tuple[NodeEndpoint, ...]:
    """The ``node_endpoints`` of a Fetch response frame (empty before v16 or when absent)."""
    if api_version < _FIRST_NODE_ENDPOINTS_VERSION:
        return ()
    mv = memoryview(frame).cast("B") if not isinstance(frame, memoryview) else frame
    try:
        r = Reader(mv, _top_level_tags_offset(mv, api_version))
        for tag, data in r.tagged_fields():
            if tag == FETCH_NODE_ENDPOINTS_TAG:
                value: tuple[NodeEndpoint, ...] = decode_value(_NODE_ENDPOINTS, api_version, True, data)
                return value
        r.expect_end()
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError) as e:
        raise MalformedFrame(f"cannot walk Fetch response: {e!r}") from None
    return ()


def rewrite_fetch_node_endpoints(
    frame: Buffer, api_version: int, addresses: Mapping[int, tuple[str, int]]
) -> Buffer:
    """Replace host/port of the Fetch response's ``node_endpoints`` for the mapped node ids.

    ``frame`` is the response frame payload (header + body). Before v16, or when the response has
    no ``node_endpoints`` (or none that is mapped), ``frame`` itself is returned untouched.
    """
    if api_version < _FIRST_NODE_ENDPOINTS_VERSION:
        return frame
    if api_version > _MAX_VERSION:
        raise UnsupportedVersion(f"Fetch v{api_version} is not supported (known: up to v{_MAX_VERSION})")
    mv = memoryview(frame) if not isinstance(frame, memoryview) else frame
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    try:
        start = _top_level_tags_offset(mv, api_version)
        r = Reader(mv, start)
        fields = r.tagged_fields()
        r.expect_end()
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError) as e:
        raise TruncatedData(f"cannot walk Fetch response: {e!r}") from None
    changed = False
    new_fields: list[tuple[int, bytes]] = []
    for tag, data in fields:
        if tag == FETCH_NODE_ENDPOINTS_TAG:
            endpoints: tuple[NodeEndpoint, ...] = decode_value(_NODE_ENDPOINTS, api_version, True, data)
            rewritten = []
            for ep in endpoints:
                new = addresses.get(ep.node_id)
                if new is not None and (ep.host, ep.port) != new:
                    ep = replace(ep, host=new[0], port=new[1])
                    changed = True
                rewritten.append(ep)
            new_fields.append((tag, encode_value(_NODE_ENDPOINTS, api_version, True, tuple(rewritten))))
        else:
            new_fields.append((tag, bytes(data)))
    if not changed:
        return frame
    w = Writer()
    w.tagged_fields(new_fields)
    return bytes(mv[:start]) + bytes(w.out)
