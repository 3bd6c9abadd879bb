"""Fetch responses, only as far as a proxy needs: rewrite the v16+ top-level ``node_endpoints``.

The walk skips every partition's records by their length (never decodes them) to reach the
top-level tagged fields; a response without ``node_endpoints`` comes back as the very same object.

`FetchEndpointsTap` does the same for a response passing through in pieces (cut-through): it walks
the bytes as they go by (a few steps per partition, records skipped by their length, nothing per byte),
holds back only the top-level tagged fields, and rewrites ``node_endpoints`` there without changing
the response's length (its size prefix has already gone out). Kafka sends ``node_endpoints`` only
with partitions in error NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (KIP-951), so nearly every
response has none and passes untouched.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

from .addresses import rewrite_endpoints
from .api_keys import ApiKey
from .errors import MalformedFrame, ProtocolError, TruncatedData, UnsupportedVersion
from .headers import response_header_version
from .kafka_messages import NodeEndpoint
from .kafka_versions import FETCH_MAX_VERSION as _MAX_VERSION
from .kafka_versions import FETCH_RESPONSE_NODE_ENDPOINTS_SINCE as _FIRST_NODE_ENDPOINTS_VERSION
from .kafka_versions import FETCH_RESPONSE_NODE_ENDPOINTS_TAG as _NODE_ENDPOINTS_TAG
from .kafka_walkers import (
    FETCH_RESPONSE_ABORTED_TRANSACTION_SKIP,
    FETCH_RESPONSE_FETCHABLE_TOPIC_RESPONSE_FIXED_PREFIX,
    FETCH_RESPONSE_FIXED_PREFIX,
    FETCH_RESPONSE_PARTITION_DATA_FIXED_PREFIX,
    FETCH_RESPONSE_TAGS_AT,
)
from .primitives import Buffer, Reader, Writer, bytes_view, read_uvarint_at, skip_tagged_fields_at
from .schema import ArrayOf, decode_value, encode_value

__all__ = [
    "FETCH_NODE_ENDPOINTS_TAG",
    "FETCH_PADDING_TAG",
    "FetchEndpointsTap",
    "find_fetch_node_endpoints",
    "rewrite_fetch_node_endpoints",
]

FETCH_NODE_ENDPOINTS_TAG: Final = _NODE_ENDPOINTS_TAG
#: The first version the generated grammar walks (flexible Fetch: protocolgen/config.py's WALKED_ONLY_APIS).
_FIRST_WALKED_VERSION: Final = next(v for v, f in enumerate(FETCH_RESPONSE_TAGS_AT) if f is not None)
_NODE_ENDPOINTS: Final = ArrayOf(NodeEndpoint)
#: An unknown top-level tag (clients skip unknown tags) whose zero bytes keep a rewritten response's
#: length when the proxy's addresses are shorter than the brokers'.
FETCH_PADDING_TAG: Final = 10_000


def _top_level_tags_offset(mv: memoryview, v: int) -> int:
    """Offset of the top-level tagged-field section of a flexible (v12+) Fetch response: the response header read,
    then the body's fields skipped by the generated grammar (protocol/kafka_walkers.py), records by their length."""
    tags_at = FETCH_RESPONSE_TAGS_AT[v] if 0 <= v < len(FETCH_RESPONSE_TAGS_AT) else None
    if tags_at is None:
        raise UnsupportedVersion(f"Fetch v{v}: the walk knows v{_FIRST_WALKED_VERSION}-v{_MAX_VERSION}")
    pos = 4  # correlation id
    if response_header_version(ApiKey.FETCH, v) == 1:
        pos = skip_tagged_fields_at(mv, pos)
    return tags_at(mv, pos)


def find_fetch_node_endpoints(frame: Buffer, api_version: int) -> tuple[NodeEndpoint, ...]:
    """The ``node_endpoints`` of a Fetch response frame (empty before v16 or when absent)."""
    if api_version < _FIRST_NODE_ENDPOINTS_VERSION:
        return ()
    mv = bytes_view(frame)
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
    mv = bytes_view(frame)
    try:
        start = _top_level_tags_offset(mv, api_version)
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError) as e:
        raise TruncatedData(f"cannot walk Fetch response: {e!r}") from None
    new_fields = _rewritten_top_level_tags(mv, start, api_version, addresses, "walk Fetch response")
    if new_fields is None:
        return frame
    w = Writer()
    w.tagged_fields(new_fields)
    return bytes(mv[:start]) + bytes(w.out)


def _rewritten_top_level_tags(buf: Buffer, start: int, api_version: int, addresses: Mapping[int, tuple[str, int]],
                              what: str) -> list[tuple[int, bytes]] | None:
    """The top-level tagged fields at ``start``, which end ``buf``, with ``node_endpoints`` rewritten; None when
    no endpoint changes. ``what`` the reading was, for the error."""
    try:
        r = Reader(buf, start)
        fields = r.tagged_fields()
        r.expect_end()
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError) as e:
        raise TruncatedData(f"cannot {what}: {e!r}") from None
    return _rewrite_node_endpoints_field(fields, api_version, addresses)


def _rewrite_node_endpoints_field(fields: list[tuple[int, memoryview]], api_version: int,
                                  addresses: Mapping[int, tuple[str, int]]) -> list[tuple[int, bytes]] | None:
    """The top-level tagged fields with ``node_endpoints`` rewritten, or None when no endpoint changes."""
    new_fields: list[tuple[int, bytes]] = []
    changed = False
    for tag, data in fields:
        if tag == FETCH_NODE_ENDPOINTS_TAG:
            endpoints: tuple[NodeEndpoint, ...] = decode_value(_NODE_ENDPOINTS, api_version, True, data)
            rewritten = rewrite_endpoints(endpoints, addresses)
            if rewritten is not None:
                changed = True
                new_fields.append((tag, encode_value(_NODE_ENDPOINTS, api_version, True, rewritten)))
                continue
        new_fields.append((tag, bytes(data)))
    return new_fields if changed else None


# ---------------------------------------------------------------------------------------------- streaming
class _Short(Exception):
    """The structure being read runs past the bytes at hand."""


# Where the walk of a Fetch v13+ response is: before the header, a topic, a partition, the tags after a
# partition's records, a topic's closing tags; done = at the top-level tagged fields.
_HEADER, _TOPIC, _PARTITION, _PARTITION_TAGS, _TOPIC_TAGS, _DONE = range(6)


class FetchEndpointsTap:
    """Rewrites a Fetch v16+ response's ``node_endpoints`` while the response passes through in pieces.

    ``feed`` takes the payload (header + body, no size prefix) in order and answers how many of those
    bytes may go on now: all of them until the top-level tagged fields begin, none after. It reads only
    the structure around the records (a few steps per partition; a step cut by a piece boundary is
    carried over), and skips each partition's records by their length. ``finish`` gets the held bytes
    and returns the same number of bytes with every mapped endpoint's host and port replaced. A shorter
    result is padded (an unknown tag of zero bytes, or for 1-4 bytes a wider encoding of the tag count,
    which Kafka's varint readers accept); when the rewritten endpoints do not fit in the broker's bytes,
    ``node_endpoints`` is left out (padded likewise) and `dropped` is set: a client then learns the new
    leader from Metadata, as before KIP-951, and never sees a broker's address.
    """

    __slots__ = ("_aborted", "_body_head", "_carry", "_partition_head", "_parts", "_skip", "_state", "_topic_head",
                 "_topics", "addresses", "api_version", "dropped")

    def __init__(self, api_version: int, addresses: Mapping[int, tuple[str, int]]) -> None:
        if not _FIRST_NODE_ENDPOINTS_VERSION <= api_version <= _MAX_VERSION:
            raise UnsupportedVersion(f"Fetch v{api_version}: node endpoints are rewritten for "
                                     f"v{_FIRST_NODE_ENDPOINTS_VERSION}-v{_MAX_VERSION}")
        self.api_version = api_version
        self.addresses = addresses
        self.dropped = False
        self._state = _HEADER
        self._topics = 0  # topics left, the current one included
        self._parts = 0  # partitions left in the current topic, the current one included
        self._skip = 0  # record bytes still to skip
        self._carry = b""  # the start of a step cut by the end of the last piece
        # The fixed-width heads and the aborted transaction's skip of this version (protocol/kafka_walkers.py)
        self._body_head = FETCH_RESPONSE_FIXED_PREFIX[api_version]  # throttle_time_ms, error_code, session_id
        self._topic_head = FETCH_RESPONSE_FETCHABLE_TOPIC_RESPONSE_FIXED_PREFIX[api_version]  # topic_id
        self._partition_head = FETCH_RESPONSE_PARTITION_DATA_FIXED_PREFIX[api_version]
        aborted = FETCH_RESPONSE_ABORTED_TRANSACTION_SKIP[api_version]
        assert aborted is not None
        self._aborted = aborted

    def feed(self, data: memoryview) -> int:
        if self._state == _DONE:
            return 0
        n = len(data)
        pos = 0
        while True:
            if self._skip:
                take = min(self._skip, n - pos)
                pos += take
                self._skip -= take
                if self._skip:
                    return n
            if pos >= n:
                return n
            if self._carry:
                carry = self._carry
                window = 256
                while True:
                    buf = carry + bytes(data[pos:pos + window])
                    try:
                        end = self._step(buf, 0)
                        break
                    except (_Short, IndexError, TruncatedData):
                        if pos + window >= n:
                            self._carry = buf
                            return n
                        window *= 8
                self._carry = b""
                pos += end - len(carry)
            else:
                try:
                    pos = self._step(data, pos)
                except (_Short, IndexError, TruncatedData):
                    self._carry = bytes(data[pos:])
                    return n
            if self._state == _DONE:
                return pos

    def _step(self, b: Buffer, p: int) -> int:
        """Read one step at ``b[p]``; move the walk on only if the step was whole."""
        state = self._state
        if state == _PARTITION:
            p += self._partition_head  # partition_index, error_code, high_watermark, last_stable_offset, ...
            aborted, p = read_uvarint_at(b, p)
            skip_aborted = self._aborted
            for _ in range(aborted - 1):
                p = skip_aborted(b, p)  # producer_id, first_offset, tagged fields
            records, p = read_uvarint_at(b, p + 4)  # after preferred_read_replica: compact nullable bytes
            if p > len(b):
                raise _Short
            self._skip = records - 1 if records > 1 else 0
            self._state = _PARTITION_TAGS
            return p
        if state == _PARTITION_TAGS or state == _TOPIC_TAGS:  # the tagged fields closing a partition or a topic
            p = skip_tagged_fields_at(b, p)
            if p > len(b):
                raise _Short
            if state == _PARTITION_TAGS:
                self._parts -= 1
                self._state = _PARTITION if self._parts > 0 else _TOPIC_TAGS
            else:
                self._topics -= 1
                self._state = _TOPIC if self._topics > 0 else _DONE
            return p
        if state == _TOPIC:
            parts, p = read_uvarint_at(b, p + self._topic_head)  # after topic_id
            self._parts = parts - 1
            self._state = _PARTITION if self._parts > 0 else _TOPIC_TAGS
            return p
        # _HEADER: correlation id, header tags, throttle_time_ms, error_code, session_id, topic count
        p = skip_tagged_fields_at(b, p + 4)
        topics, p = read_uvarint_at(b, p + self._body_head)
        self._topics = topics - 1
        self._state = _TOPIC if self._topics > 0 else _DONE
        return p

    def finish(self, held: bytes) -> bytes:
        if self._state != _DONE or self._carry or self._skip:
            raise TruncatedData("Fetch response ends before its top-level tagged fields")
        new_fields = _rewritten_top_level_tags(held, 0, self.api_version, self.addresses,
                                               "read the Fetch response's tagged fields")
        if new_fields is None:
            return held
        out = _tagged_fields_of_length(new_fields, len(held))
        if out is None:
            self.dropped = True
            out = _tagged_fields_of_length([f for f in new_fields if f[0] != FETCH_NODE_ENDPOINTS_TAG], len(held))
        if out is None:  # cannot happen: leaving a field out always makes room
            raise MalformedFrame("cannot keep the Fetch response's length")
        return out


def _uvarint_bytes(value: int, width: int = 0) -> bytes:
    """``value`` as an unsigned varint, widened to ``width`` bytes with continuation bits if asked."""
    out = bytearray()
    while value >= 0x80 or len(out) + 1 < width:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tagged_fields_of_length(fields: list[tuple[int, bytes]], length: int) -> bytes | None:
    """The tagged-field section of ``fields``, exactly ``length`` bytes long (padded), or None if too long."""
    body = b"".join(_uvarint_bytes(tag) + _uvarint_bytes(len(data)) + data for tag, data in sorted(fields))

    def counted(count: int, body: bytes) -> bytes | None:
        width = length - len(body)  # the count's varint takes the rest: 1 to 5 bytes
        if width < len(_uvarint_bytes(count)) or width > 5:
            return None
        return _uvarint_bytes(count, width) + body

    exact = counted(len(fields), body)
    if exact is not None or length - len(body) < 1:
        return exact
    pad_tag = _uvarint_bytes(FETCH_PADDING_TAG)
    size = length - len(body) - len(pad_tag) - 2  # 1-byte count, 1-byte size varint
    while size >= 0:
        padded = counted(len(fields) + 1, body + pad_tag + _uvarint_bytes(size) + bytes(size))
        if padded is not None:
            return padded
        size -= 1
    return None
