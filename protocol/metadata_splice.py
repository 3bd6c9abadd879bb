"""Metadata fast path: splice ``min_insync_replicas`` (tag 637) into MetadataResponse bytes.

Re-encoding a whole MetadataResponse costs per field (tens of ms for 10,000 partitions); the splice
works from one scan of the original bytes (:func:`~protocol.metadata_scan.scan_metadata_response`,
which skips partitions with a few integer reads each) and only rebuilds the small pieces it changes:
a topic's tagged-field section, a broker's host/port, a partition's (error_code, partition_index,
leader_id) when it is presented as leaderless. Everything else is copied as slices of the original
frame. The same pieces give KIP-637's literal layout (an int16 per topic) without a full decode.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Container, Mapping
from typing import Literal, TypedDict, Unpack

from .addresses import rewrite_endpoints
from .errors import MalformedFrame, UnsupportedVersion
from .kafka_versions import METADATA_FLEXIBLE_SINCE
from .messages import MIN_INSYNC_REPLICAS_TAG
from .metadata_scan import MetadataScan, MetadataSteps, scan_metadata_response
from .primitives import Buffer, Reader, Writer, encode_uvarint

__all__ = [
    "KIP637_LAYOUT_SOURCE_VERSION",
    "MIN_INSYNC_REPLICAS_TAG",
    "Layout",
    "MetadataSplicer",
    "SpliceOptions",
    "enrich_metadata_response",
    "splice_metadata_response",
]

#: ``"kafka"``: the scanned version's own layout; ``"kip637"``: KIP-637's literal "v10" layout.
Layout = Literal["kafka", "kip637"]
#: The MetadataResponse version KIP-637's layout is built from (v9 + an int16 per topic).
KIP637_LAYOUT_SOURCE_VERSION = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_LEADERLESS = struct.Struct(">hii")
_LEADER_NOT_AVAILABLE = 5
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
    """Rewrite a MetadataResponse frame (response header + body): scan it, then splice.

    - ``min_insync_replicas``: per topic (by name, or by topic_id for topics without a name), the
      value put in the topic-level tagged field 637 (v9+ only: older versions have no tags).
    - ``broker_addresses``: node_id -> (host, port) replacing the brokers' addresses.
    - ``leaderless``: (topic name, partition) pairs to present as LEADER_NOT_AVAILABLE (error 5)
      with leader_id -1 and the leader epoch unchanged, as brokers send a partition without leader.

    Returns the new frame payload; raises :class:`~protocol.errors.ProtocolError` on bad input.
    To read brokers or partitions as well, call :func:`scan_metadata_response` once and
    :func:`splice_metadata_response` on its result.
    """
    scan = scan_metadata_response(frame, api_version, partition_offsets=leaderless is not None)
    return splice_metadata_response(scan, min_insync_replicas=min_insync_replicas,
                                    broker_addresses=broker_addresses, leaderless=leaderless)


class SpliceOptions(TypedDict, total=False):
    """What a splice changes: :class:`MetadataSplicer`'s keyword arguments (see :func:`enrich_metadata_response`)."""

    min_insync_replicas: Mapping[str | uuid.UUID, int] | None
    broker_addresses: Mapping[int, tuple[str, int]] | None
    leaderless: Container[tuple[str, int]] | None
    layout: Layout


def splice_metadata_response(scan: MetadataScan, **options: Unpack[SpliceOptions]) -> bytes:
    """Rewrite the scanned frame without walking it again (options as :func:`enrich_metadata_response`).

    ``layout="kafka"`` keeps the scanned version's layout (tag 637 in v9+). ``layout="kip637"``
    (a v9 scan only) writes KIP-637's literal "v10" (response header v1 without tags, then the v9
    body with a plain int16 ``min_insync_replicas`` after each topic's ``topic_authorized_operations``,
    -1 when unknown, and no topic or top-level tagged fields): the bytes
    :func:`~protocol.messages.encode_metadata_response_kip637` writes for the same response.
    A tag 637 the broker sent counts as the topic's value when the mapping has none.
    :class:`MetadataSplicer` does the same in steps.
    """
    splicer = MetadataSplicer(scan, **options)
    splicer.step(len(scan.topics))
    return splicer.frame()


class MetadataSplicer(MetadataSteps[bytes]):
    """The splice of :func:`splice_metadata_response` in steps: :meth:`step` splices up to ``max_topics`` more
    topics, :meth:`frame` gives the new frame once :attr:`done` (for a caller that must not hold its thread for a
    whole 10,000-topic answer). The constructor checks the options and rewrites the brokers' addresses. The
    mappings are read as the steps go. Raises :class:`~protocol.errors.ProtocolError` on bad input."""

    def __init__(
        self,
        scan: MetadataScan,
        *,
        min_insync_replicas: Mapping[str | uuid.UUID, int] | None = None,
        broker_addresses: Mapping[int, tuple[str, int]] | None = None,
        leaderless: Container[tuple[str, int]] | None = None,
        layout: Layout = "kafka",
    ) -> None:
        kip637 = layout == "kip637"
        if kip637 and scan.api_version != KIP637_LAYOUT_SOURCE_VERSION:
            raise UnsupportedVersion(
                f"the KIP-637 layout is built from a v{KIP637_LAYOUT_SOURCE_VERSION} response, not v{scan.api_version}")
        if layout != "kafka" and not kip637:
            raise ValueError(f"unknown Metadata layout {layout!r}")
        super().__init__(scan.api_version, "splice")
        self._scan = scan
        self._min_isr: Mapping[str | uuid.UUID, int] = min_insync_replicas or {}
        self._leaderless = leaderless
        self._kip637 = kip637
        self._next_topic = 0
        self._out: list[bytes | memoryview] = []
        self._copied = 0  # everything before this offset is already in ``_out``
        buf = scan.frame
        out = self._out
        if kip637:
            # Response header v1 with no tagged fields, as the generic encoder writes it.
            out.append(_I32.pack(scan.correlation_id) + b"\x00")
            self._copied = scan.body_start
        moved = rewrite_endpoints(scan.brokers, broker_addresses) if broker_addresses else None
        if moved is not None:
            flexible = scan.api_version >= METADATA_FLEXIBLE_SINCE
            for broker, new, (host_start, port_end) in zip(scan.brokers, moved, scan.broker_spans, strict=True):
                if new is not broker:
                    out.append(buf[self._copied:host_start])
                    out.append(_encoded_address(new.host, new.port, flexible))
                    self._copied = port_end

    def frame(self) -> bytes:
        """The new frame payload (after :meth:`step` returned True)."""
        return self._finished()

    def _progress(self) -> tuple[int, int]:
        return self._next_topic, len(self._scan.topics)

    def _advance(self, max_topics: int) -> None:
        scan = self._scan
        buf = scan.frame
        flexible = scan.api_version >= METADATA_FLEXIBLE_SINCE
        min_isr = self._min_isr
        leaderless = self._leaderless
        kip637 = self._kip637
        out = self._out
        copied = self._copied
        unpack_i32 = _I32.unpack_from
        topics = scan.topics
        first = self._next_topic
        last = min(first + max_topics, len(topics))
        for i in range(first, last):
            topic = topics[i]
            name = topic.name
            if leaderless is not None and name is not None and topic.partition_count:
                for p in scan.partition_offsets(topic):
                    idx = unpack_i32(buf, p + 2)[0]
                    if (name, idx) in leaderless:
                        out.append(buf[copied:p])
                        out.append(_LEADERLESS.pack(_LEADER_NOT_AVAILABLE, idx, -1))
                        copied = p + 10
            if not flexible:
                continue
            value = None
            if min_isr:
                value = min_isr.get(name) if name is not None else None
                if value is None and topic.topic_id is not None:
                    value = min_isr.get(topic.topic_id)
            tag_start = topic.tags_start
            if kip637:
                if value is None:
                    value = _min_insync_tag(buf, tag_start)
                out.append(buf[copied:tag_start])
                out.append(_I16.pack(value) + b"\x00")  # the int16, then no tagged fields
                copied = topic.end
            elif value is None:
                continue
            elif buf[tag_start] == 0:
                # The common case: no tagged fields yet.
                out.append(buf[copied:tag_start])
                out.append(_tag637_section(value))
                copied = tag_start + 1
            else:
                out.append(buf[copied:tag_start])
                out.append(_tagged_section_with_min_insync(Reader(buf, tag_start), value))
                copied = topic.end
        self._next_topic = last
        self._copied = copied
        if last < len(topics):
            return
        if kip637:
            out.append(buf[copied:scan.tags_start])
            out.append(b"\x00")  # no top-level tagged fields
            self._finish(b"".join(out))
        elif not out:
            self._finish(bytes(buf))
        else:
            out.append(buf[copied:])
            self._finish(b"".join(out))
        self._out = []


def _tag637_section(value: int) -> bytes:
    """A tagged-field section holding only tag 637 = ``value`` (built once per value: a splice writes thousands)."""
    section = _TAG637_SECTIONS.get(value)
    if section is None:
        section = _TAG637_SECTIONS[value] = b"\x01" + _TAG637_HEAD + _I16.pack(value)
    return section


#: value -> its tagged-field section (min.insync.replicas values are few).
_TAG637_SECTIONS: dict[int, bytes] = {}


@functools.lru_cache(maxsize=1024)
def _encoded_address(host: str, port: int, compact: bool) -> bytes:
    """A broker's host (compact or classic STRING) and int32 port, as the splice writes them."""
    w = Writer()
    w.string(host, nullable=False, compact=compact)
    w.int32(port)
    return bytes(w.out)


def _min_insync_tag(buf: memoryview, tag_start: int) -> int:
    """The tag-637 value of the tagged section at ``tag_start``, -1 if absent."""
    if buf[tag_start] == 0:
        return -1
    for tag, data in Reader(buf, tag_start).tagged_fields():
        if tag == MIN_INSYNC_REPLICAS_TAG:
            if len(data) != 2:
                raise MalformedFrame(f"tag {MIN_INSYNC_REPLICAS_TAG} holds {len(data)} bytes, not an int16")
            value: int = _I16.unpack_from(data)[0]
            return value
    return -1
