"""Metadata fast path: splice ``min_insync_replicas`` (tag 637) into MetadataResponse bytes.

Re-encoding a whole MetadataResponse costs per field (tens of ms for 10,000 partitions); this walks
the original bytes once, skipping partitions with a few integer reads each, and only rebuilds the
small pieces it changes: a topic's tagged-field section, a broker's host/port, a partition's
(error_code, partition_index, leader_id) when it is presented as leaderless. Everything else is
copied as slices of the original frame.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Container, Mapping

from .api_keys import ApiKey
from .errors import MalformedFrame, ProtocolError, TruncatedData, UnsupportedVersion
from .headers import response_header_version
from .messages import MIN_INSYNC_REPLICAS_TAG
from .primitives import Buffer, Reader, Writer, encode_uvarint, read_uvarint_at

__all__ = ["MIN_INSYNC_REPLICAS_TAG", "enrich_metadata_response"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_LEADERLESS = struct.Struct(">hii")
_LEADER_NOT_AVAILABLE = 5
_MAX_VERSION = 13
# uvarint(637) + uvarint(2): the fixed prefix of our tagged field.
_TAG637_HEAD = encode_uvarint(MIN_INSYNC_REPLICAS_TAG) + b"\x02"


def _tagged_section_with_min_insync(r: Reader, value: int) -> bytes:
    """Re-encode the tagged section at ``r`` with tag 637 set to ``value`` (other tags kept)."""
    fields = [(t, bytes(d)) for t, d in r.tagged_fields() if t != MIN_INSYNC_REPLICAS_TAG]
    fields.append((MIN_INSYNC_REPLICAS_TAG, _I16.pack(value)))
    fields.sort(key=lambda f: f[0])
    w = Writer()
    w.tagged_fields(fields)
    return bytes(w.out)


def enrich_metadata_response(
    frame: Buffer,
    api_version: int,
    *,
    min_insync_replicas: Mapping[str | uuid.UUID, int] | None = None,
    broker_addresses: Mapping[int, tuple[str, int]] | None = None,
    leaderless: Container[tuple[str, int]] | None = None,
) -> bytes:
    """Rewrite a MetadataResponse frame (response header + body) in one pass over its bytes.

    - ``min_insync_replicas``: per topic (by name, or by topic_id for topics without a name), the
      value put in the topic-level tagged field 637 (v9+ only: older versions have no tags).
    - ``broker_addresses``: node_id -> (host, port) replacing the brokers' addresses.
    - ``leaderless``: (topic name, partition) pairs to present as LEADER_NOT_AVAILABLE (error 5)
      with leader_id -1 and the leader epoch unchanged, as brokers send a partition without leader.

    Returns the new frame payload; raises :class:`~protocol.errors.ProtocolError` on bad input.
    """
    if not 0 <= api_version <= _MAX_VERSION:
        raise UnsupportedVersion(f"MetadataResponse v{api_version} is not supported (known: v0-v{_MAX_VERSION})")
    try:
        return _enrich(frame, api_version, min_insync_replicas or {}, broker_addresses or {}, leaderless)
    except ProtocolError:
        raise
    except (IndexError, struct.error, ValueError, UnicodeError) as e:
        raise TruncatedData(f"MetadataResponse v{api_version} is truncated or corrupt: {e!r}") from None


def _enrich(
    frame: Buffer,
    v: int,
    min_isr: Mapping[str | uuid.UUID, int],
    addresses: Mapping[int, tuple[str, int]],
    leaderless: Container[tuple[str, int]] | None,
) -> bytes:
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    buf = mv
    n = len(buf)
    flexible = v >= 9
    r = Reader(buf)
    r.int32()  # correlation id
    if response_header_version(ApiKey.METADATA, v) == 1:
        r.tagged_fields()
    out: list[bytes | memoryview] = []
    copied = 0  # everything before this offset is already in ``out``
    unpack_i32 = _I32.unpack_from

    if v >= 3:
        r.int32()  # throttle_time_ms
    # Brokers: rewrite host/port of the mapped ones.
    n_brokers = r.array_length(flexible)
    for _ in range(max(n_brokers, 0)):
        node_id = r.int32()
        host_start = r.pos
        if flexible:
            r.compact_string()
        else:
            r.string()
        r.int32()  # port
        new = addresses.get(node_id) if addresses else None
        if new is not None:
            out.append(buf[copied:host_start])
            w = Writer()
            w.string(new[0], nullable=False, compact=flexible)
            w.int32(new[1])
            out.append(bytes(w.out))
            copied = r.pos
        if v >= 1:
            if flexible:
                r.compact_nullable_string()
            else:
                r.nullable_string()
        if flexible:
            r.tagged_fields()
    if v >= 2:
        if flexible:
            r.compact_nullable_string()
        else:
            r.nullable_string()
    if v >= 1:
        r.int32()  # controller_id

    n_topics = r.array_length(flexible)
    if n_topics < 0:
        raise MalformedFrame("null topics array in MetadataResponse")
    fixed = 14 if v >= 7 else 10  # error_code, partition_index, leader_id[, leader_epoch]
    n_arrays = 3 if v >= 5 else 2
    for _ in range(n_topics):
        r.int16()  # error_code
        if flexible:
            name = r.compact_nullable_string() if v >= 12 else r.compact_string()
        else:
            name = r.string()
        topic_id: uuid.UUID | None = r.uuid() if v >= 10 else None
        if v >= 1:
            r.boolean()
        n_parts = r.array_length(flexible)
        if n_parts < 0:
            raise MalformedFrame("null partitions array in MetadataResponse")
        p = r.pos
        check_leaderless = leaderless is not None and name is not None
        for _ in range(n_parts):
            if check_leaderless:
                idx = unpack_i32(buf, p + 2)[0]
                if (name, idx) in leaderless:  # type: ignore[operator]
                    out.append(buf[copied:p])
                    out.append(_LEADERLESS.pack(_LEADER_NOT_AVAILABLE, idx, -1))
                    copied = p + 10
            p += fixed
            if flexible:
                for _ in range(n_arrays):
                    c = buf[p]
                    if 0 < c < 0x80:
                        p += 1 + (c - 1) * 4
                    else:
                        c, p = read_uvarint_at(buf, p)
                        if c == 0:
                            raise MalformedFrame("null replica array in MetadataResponse")
                        p += (c - 1) * 4
                c = buf[p]
                if c == 0:
                    p += 1
                else:
                    tr = Reader(buf, p)
                    tr.tagged_fields()
                    p = tr.pos
            else:
                for _ in range(n_arrays):
                    c = unpack_i32(buf, p)[0]
                    if c < 0:
                        raise MalformedFrame("null replica array in MetadataResponse")
                    p += 4 + c * 4
            if p > n:
                raise TruncatedData("MetadataResponse partition runs past the end of the frame")
        r.pos = p
        if v >= 8:
            r.int32()  # topic_authorized_operations
        if flexible:
            value = None
            if min_isr:
                value = min_isr.get(name) if name is not None else None
                if value is None and topic_id is not None:
                    value = min_isr.get(topic_id)
            tag_start = r.pos
            if value is None:
                r.tagged_fields()
            elif buf[tag_start] == 0:
                # The common case: no tagged fields yet.
                r.pos += 1
                out.append(buf[copied:tag_start])
                out.append(b"\x01" + _TAG637_HEAD + _I16.pack(value))
                copied = r.pos
            else:
                section = _tagged_section_with_min_insync(r, value)
                out.append(buf[copied:tag_start])
                out.append(section)
                copied = r.pos
    if 8 <= v <= 10:
        r.int32()  # cluster_authorized_operations
    if v >= 13:
        r.int16()  # error_code
    if flexible:
        r.tagged_fields()
    r.expect_end()
    if not out:
        return bytes(buf)
    out.append(buf[copied:])
    return b"".join(out)
