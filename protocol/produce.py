"""Produce fast paths: read/patch ``acks`` in place, index record sets, split and answer requests.

The proxy calls these on every Produce request, so nothing here decodes or copies record batches:
the index keeps byte spans into the original frame, the forward request is a list of slices of it,
and only the (small) responses are built with the generic codec.

All frames here are frame payloads: request/response header + body, without the size prefix. The walks of a
request and of a response are generated from Kafka's specs (protocol/kafka_walkers.py: `PRODUCE_REQUEST_WALK`,
`PRODUCE_RESPONSE_WALK`, and the same in C for the compiled core); what they hand over is built here, in their hooks
(`_RequestRows`, `_RequestIndex`, `_ResponseScan`). Every version fact the rest reads is generated too (protocol/kafka_versions.py).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Container, Iterator, Mapping
from dataclasses import replace
from typing import ClassVar, Final

from .addresses import rewrite_endpoints
from .api_keys import ApiKey
from .errors import ErrorCode, MalformedFrame, ProtocolError, TruncatedData, UnsupportedVersion
from .headers import encode_response_with_header, peek_request_header, split_response
from .kafka_messages import PartitionProduceResponse, ProduceResponse, TopicProduceResponse
from .kafka_versions import (
    PRODUCE_FLEXIBLE_SINCE,
    PRODUCE_MAX_VERSION,
    PRODUCE_REQUEST_TRANSACTIONAL_ID_SINCE,
    PRODUCE_RESPONSE_NODE_ENDPOINTS_SINCE,
    PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_ERROR_MESSAGE_SINCE,
    PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_LOG_APPEND_TIME_MS_SINCE,
    PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_LOG_START_OFFSET_SINCE,
    PRODUCE_RESPONSE_RESPONSES_TOPIC_ID_SINCE,
    PRODUCE_RESPONSE_THROTTLE_TIME_MS_SINCE,
)
from .kafka_walkers import (
    PRODUCE_REQUEST_ACKS_AT,
    PRODUCE_REQUEST_WALK,
    PRODUCE_RESPONSE_WALK,
    ProduceRequestHooks,
    ProduceResponseHooks,
)
from .messages import decode_response, encode_response
from .native import produce_acks_offset as _core_acks_offset
from .native import scan_produce_response as _core_scan_response
from .native import walk_produce_exchange as _core_walk_exchange
from .native import walk_produce_request as _core_walk_request
from .primitives import (
    Buffer,
    Reader,
    SlottedRecord,
    encode_uvarint,
    skip_tagged_fields_at,
    uuid_of,
)

__all__ = [
    "PartitionKey",
    "PartitionSpan",
    "ProduceRequestIndex",
    "TopicSpan",
    "build_forward_request",
    "build_forward_request_chunks",
    "build_produce_error_response",
    "index_produce_request",
    "merge_produce_responses",
    "count_records",
    "patch_produce_acks",
    "produce_acks_offset",
    "produce_partition_records",
    "walk_produce_exchange",
    "read_produce_acks",
    "rewrite_produce_node_endpoints",
]

#: A partition as the request names it: (topic name, or topic_id for v13+, partition index).
PartitionKey = tuple[str | uuid.UUID, int]

_HEAD: Final = struct.Struct(">hhih")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")


def _request_head(frame: Buffer) -> tuple[int, int, int]:
    """(api_version, header_size, acks_offset) of a Produce request frame: the header and
    ``transactional_id`` (v3+: int16-length nullable string, compact for the flexible v9+) read once."""
    # Typed locals: the compiled build then compares and adds native ints (struct's results are Any).
    api_key: int
    version: int
    n: int
    try:
        api_key, version, _, n = _HEAD.unpack_from(frame, 0)
        if api_key != 0:  # ApiKey.PRODUCE, as a literal: a native compare in the compiled build
            raise MalformedFrame(f"not a Produce request (api_key {api_key})")
        if version < 0 or version > PRODUCE_MAX_VERSION:
            raise UnsupportedVersion(f"Produce v{version} is not supported (known: v0-v{PRODUCE_MAX_VERSION})")
        if n < -1:
            raise MalformedFrame(f"negative client_id length {n}")
        pos = 10 + n if n > 0 else 10
        if version >= PRODUCE_FLEXIBLE_SINCE:
            pos = skip_tagged_fields_at(frame, pos)  # request header v2
        header_size = pos
        pos = _acks_at(frame, version, pos)
    except (struct.error, IndexError):
        raise TruncatedData("Produce request ends before acks") from None
    return version, header_size, pos


def _acks_at(frame: Buffer, version: int, pos: int) -> int:
    """Where ``acks`` starts, from the body's start ``pos`` (the generated `PRODUCE_REQUEST_ACKS_AT`: past
    ``transactional_id`` from v3), checked to be in the frame (struct.error / IndexError on a cut frame: the caller's
    to turn into TruncatedData). ``version``: one the caller accepted."""
    acks_at = PRODUCE_REQUEST_ACKS_AT[version]
    if acks_at is None:
        raise UnsupportedVersion(f"Produce v{version} is not supported (known: v0-v{PRODUCE_MAX_VERSION})")
    pos = acks_at(frame, pos)
    if pos + 2 > len(frame):
        raise TruncatedData("Produce request ends before acks")
    return pos


def produce_acks_offset(frame: Buffer, header_size: int = -1) -> int:
    """Offset of the int16 ``acks`` inside a Produce request frame (header + body).

    v0-v2: the body starts with acks; v3+: after ``transactional_id``. Reads the header only: what the
    acks decision needs of every request before (or without) walking the topics. ``header_size``: the
    header's size when the caller read it already (a proxy peeks every request's header): only the
    version and ``transactional_id`` are read then, with the same checks and errors.
    """
    if header_size < 0:
        return _request_head(frame)[2]
    core_acks_offset = _core_acks_offset  # one lookup of the module global (a dict lookup each, compiled)
    if core_acks_offset is not None:
        offset = core_acks_offset(frame, header_size)  # the compiled core (protocol/native.py)
        if offset >= 0:
            return offset
    version: int
    try:
        version = _I16.unpack_from(frame, 2)[0]
        if version < 0 or version > PRODUCE_MAX_VERSION:
            raise UnsupportedVersion(f"Produce v{version} is not supported (known: v0-v{PRODUCE_MAX_VERSION})")
        return _acks_at(frame, version, header_size)
    except (struct.error, IndexError):
        raise TruncatedData("Produce request ends before acks") from None


def read_produce_acks(frame: Buffer) -> int:
    """The ``acks`` of a Produce request frame."""
    acks: int = _I16.unpack_from(frame, produce_acks_offset(frame))[0]
    return acks


def patch_produce_acks(buf: bytearray | memoryview, offset: int, acks: int) -> None:
    """Overwrite ``acks`` in place (``buf`` must be writable; the record bytes stay untouched)."""
    try:
        _I16.pack_into(buf, offset, acks)
    except (struct.error, TypeError, IndexError) as e:
        raise ProtocolError(f"cannot patch acks at offset {offset}: {e}") from None


class PartitionSpan(SlottedRecord):
    """One partition of a Produce request: where its entry and its record set are in the frame.

    ``start``/``end``: the whole partition entry (index, records, tagged fields), what a forward request
    copies. ``records_start``/``records_size``: the record set bytes; ``records_size`` is -1 for null records.
    ``records``: how many records the set holds when it is one record batch (from its header; 0 for null or
    empty records), else -1: `ProduceRequestIndex.record_count` counts every batch header on demand.
    """

    __slots__ = ("topic", "partition", "start", "end", "records_start", "records_size", "records")
    _fields: ClassVar[tuple[str, ...]] = ("topic", "partition", "start", "end", "records_start", "records_size",
                                          "records")

    def __init__(self, topic: str | uuid.UUID, partition: int, start: int, end: int, records_start: int,
                 records_size: int, records: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.records_start = records_start
        self.records_size = records_size
        self.records = records

    @property
    def key(self) -> PartitionKey:
        """(topic, partition)."""
        return (self.topic, self.partition)


class TopicSpan(SlottedRecord):
    """One topic entry of a Produce request: its name (or topic_id) bytes as encoded (``key_start``,
    ``key_end``), its partitions, and its tagged-field section (empty span in non-flexible versions)."""

    __slots__ = ("topic", "key_start", "key_end", "partitions", "tagged_start", "tagged_end")
    _fields: ClassVar[tuple[str, ...]] = ("topic", "key_start", "key_end", "partitions", "tagged_start", "tagged_end")

    def __init__(self, topic: str | uuid.UUID, key_start: int, key_end: int, partitions: tuple[PartitionSpan, ...],
                 tagged_start: int, tagged_end: int) -> None:
        self.topic = topic
        self.key_start = key_start
        self.key_end = key_end
        self.partitions = partitions
        self.tagged_start = tagged_start
        self.tagged_end = tagged_end


class ProduceRequestIndex(SlottedRecord):
    """A Produce request located byte by byte, without copying any record. ``tagged_start``/``tagged_end``:
    the top-level tagged-field section (empty span in non-flexible versions). ``client_id`` and
    ``transactional_id`` (and ``correlation_id``, ``header_size``) are read from the frame when asked for (the
    hot path never asks)."""

    __slots__ = ("frame", "api_version", "acks_offset", "acks", "timeout_ms", "topics", "tagged_start", "tagged_end")
    _fields: ClassVar[tuple[str, ...]] = ("frame", "api_version", "correlation_id", "client_id", "header_size",
                                          "transactional_id", "acks_offset", "acks", "timeout_ms", "topics",
                                          "tagged_start", "tagged_end")

    def __init__(self, *, frame: memoryview, api_version: int, acks_offset: int, acks: int, timeout_ms: int,
                 topics: tuple[TopicSpan, ...], tagged_start: int, tagged_end: int) -> None:
        self.frame = frame
        self.api_version = api_version
        self.acks_offset = acks_offset
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics = topics
        self.tagged_start = tagged_start
        self.tagged_end = tagged_end

    @property
    def correlation_id(self) -> int:
        """The request header's correlation id."""
        correlation_id: int = _I32.unpack_from(self.frame, 4)[0]
        return correlation_id

    @property
    def header_size(self) -> int:
        """Where the body starts (after the request header)."""
        return _request_head(self.frame)[1]

    @property
    def client_id(self) -> str | None:
        """The request header's client_id."""
        return peek_request_header(self.frame).client_id

    @property
    def transactional_id(self) -> str | None:
        """The request's transactional_id (None before v3)."""
        if self.api_version < PRODUCE_REQUEST_TRANSACTIONAL_ID_SINCE:
            return None
        r = Reader(self.frame, self.header_size)
        return r.compact_nullable_string() if self.api_version >= PRODUCE_FLEXIBLE_SINCE else r.nullable_string()

    @property
    def flexible(self) -> bool:
        """Whether the request uses the flexible encoding (v9+)."""
        return self.api_version >= PRODUCE_FLEXIBLE_SINCE

    def partitions(self) -> Iterator[PartitionSpan]:
        """Every partition, in request order."""
        for t in self.topics:
            yield from t.partitions

    def record_count(self, span: PartitionSpan) -> int:
        """How many records a partition's record set holds, from its batch headers (`count_records`)."""
        if span.records >= 0:
            return span.records
        return count_records(self.frame, span.records_start, span.records_size)

    def records(self, span: PartitionSpan) -> memoryview | None:
        """The record set of a partition (a view into the frame) or None."""
        if span.records_size < 0:
            return None
        return self.frame[span.records_start : span.records_start + span.records_size]


def index_produce_request(frame: Buffer, acks_offset: int = -1) -> ProduceRequestIndex:
    """Index a Produce request frame (header + body): topics, partitions, record-set spans, one-batch record counts.

    What the acks decision, the accounting and the topic-id resolution each read of a request, from the
    one walk of the request grammar. ``acks_offset``: the frame's `produce_acks_offset`, when the caller
    has it already (the header is then not read again).
    """
    index = _walk_request(frame, acks_offset, None)[1]
    assert index is not None
    return index


def _batch_records(frame: memoryview, start: int, size: int) -> int:
    """How many records a non-empty record set holds when it is one record batch (what producers send), from that
    header in one read; -1 for anything else (several batches, an old message set)."""
    batch_length: int
    magic: int
    records: int
    if size < _BATCH_HEADER:
        return -1
    batch_length, magic, records = _BATCH_HEAD.unpack_from(frame, start)
    return records if magic >= 2 and batch_length + _LOG_OVERHEAD == size else -1


class _RequestRows(ProduceRequestHooks):
    """The hooks of the accounting's walk of a Produce request (the generated `PRODUCE_REQUEST_WALK`): each partition
    as a row (topic, partition, record bytes, records), every batch header counted, no span objects."""

    __slots__ = ("frame", "rows", "acks")

    def __init__(self, frame: memoryview, rows: list[tuple[str | uuid.UUID, int, int, int]]) -> None:
        self.frame = frame
        self.rows = rows
        self.acks = 0

    def partition_data(self, key: str | uuid.UUID, key_end: int, index: int, records_start: int, records_size: int,
                       start: int, tags_start: int, end: int) -> None:
        if records_size <= 0:
            self.rows.append((key, index, 0, 0))
            return
        records = _batch_records(self.frame, records_start, records_size)
        if records < 0:  # several batches or an old message set: every header
            records = _record_count(self.frame, records_start, records_size)
            if records < 0:
                raise MalformedFrame(f"unreadable record batch headers in partition {index}")
        self.rows.append((key, index, records_size, records))

    def topic_data(self, key: str | uuid.UUID, key_end: int, start: int, tags_start: int, end: int) -> None:
        pass

    def produce_request(self, acks: int, timeout_ms: int, start: int, tags_start: int, end: int) -> None:
        self.acks = acks


class _RequestIndex(ProduceRequestHooks):
    """The hooks of the index's walk of a Produce request: the spans of every topic and partition, a one-batch record
    set's record count (any other counted on demand: `ProduceRequestIndex.record_count`)."""

    __slots__ = ("frame", "parts", "topics", "acks", "timeout_ms", "tagged_start", "tagged_end")

    def __init__(self, frame: memoryview) -> None:
        self.frame = frame
        self.parts: list[PartitionSpan] = []
        self.topics: list[TopicSpan] = []
        self.acks = 0
        self.timeout_ms = 0
        self.tagged_start = 0
        self.tagged_end = 0

    def partition_data(self, key: str | uuid.UUID, key_end: int, index: int, records_start: int, records_size: int,
                       start: int, tags_start: int, end: int) -> None:
        records = 0 if records_size <= 0 else _batch_records(self.frame, records_start, records_size)
        self.parts.append(PartitionSpan(key, index, start, end, records_start, records_size, records))

    def topic_data(self, key: str | uuid.UUID, key_end: int, start: int, tags_start: int, end: int) -> None:
        self.topics.append(TopicSpan(key, start, key_end, tuple(self.parts), tags_start, end))
        self.parts = []

    def produce_request(self, acks: int, timeout_ms: int, start: int, tags_start: int, end: int) -> None:
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.tagged_start = tags_start
        self.tagged_end = end


def _walk_request(frame: Buffer, acks_offset: int, lean: list[tuple[str | uuid.UUID, int, int, int]] | None
                  ) -> tuple[int, ProduceRequestIndex | None]:
    """The one walk of a Produce request (every version; the grammar is the generated `PRODUCE_REQUEST_WALK`'s): (acks,
    the index). With ``lean``, each partition is appended there as (topic, partition, record bytes, records) and no
    index is built (the accounting's hot path: no span objects)."""
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)  # a memoryview of bytes, as Buffer says
    version: int
    if acks_offset < 0:
        version, _, acks_offset = _request_head(mv)
    else:
        version = mv[3]  # the caller read the header: a version it accepted (0-13) fits the low byte
    walk = PRODUCE_REQUEST_WALK[version] if version <= PRODUCE_MAX_VERSION else None
    if walk is None:
        raise UnsupportedVersion(f"Produce v{version} is not supported (known: v0-v{PRODUCE_MAX_VERSION})")
    hooks: _RequestRows | _RequestIndex = _RequestIndex(mv) if lean is None else _RequestRows(mv, lean)
    try:
        pos = walk(mv, acks_offset, hooks)
    except ProtocolError:
        raise
    except (struct.error, ValueError, IndexError, UnicodeError) as e:
        raise TruncatedData(f"cannot index Produce request: {e!r}") from None
    n = len(mv)
    if pos != n:
        raise MalformedFrame(f"{n - pos} unexpected trailing bytes at offset {pos}")
    if isinstance(hooks, _RequestRows):
        return hooks.acks, None
    return hooks.acks, ProduceRequestIndex(
        frame=mv,
        api_version=version,
        acks_offset=acks_offset,
        acks=hooks.acks,
        timeout_ms=hooks.timeout_ms,
        topics=tuple(hooks.topics),
        tagged_start=hooks.tagged_start,
        tagged_end=hooks.tagged_end,
    )


def produce_partition_records(
    frame: Buffer, acks_offset: int | None = None
) -> tuple[int, list[tuple[str | uuid.UUID, int, int, int]]]:
    """(acks, [(topic or topic_id, partition, record bytes, record count), ...]) of a Produce request frame.

    The request's one walk (`index_produce_request`'s) as plain tuples, without span objects: what the
    accounting reads of every forwarded request. ``record bytes`` is 0 for null records. ``acks_offset``: the
    frame's `produce_acks_offset`, when the caller has it already. Raises ProtocolError where a record set's
    batch headers do not read cleanly.
    """
    core_walk = _core_walk_request  # one lookup of the module global (a dict lookup each, compiled)
    if core_walk is not None and acks_offset is not None:
        walked = core_walk(frame, acks_offset, _topic_id)  # the compiled core (protocol/native.py)
        if walked is not None:
            return walked
    out: list[tuple[str | uuid.UUID, int, int, int]] = []
    acks = _walk_request(frame, -1 if acks_offset is None else acks_offset, out)[0]
    return acks, out


def walk_produce_exchange(
    frame: Buffer, header_size: int
) -> tuple[int, int, list[tuple[str | uuid.UUID, int, int, int]] | None] | None:
    """(acks offset, acks, partitions) of a Produce request whose header is `header_size` bytes, in one call of the
    compiled core: `produce_acks_offset`, the acks there and, for acks -1, 0 and 1, `produce_partition_records`'
    partitions (None for other acks, or where the Python walk must read or refuse the request). None: no core, or
    the acks offset is the Python reader's to find (then every one of the three is asked for on its own)."""
    core_walk = _core_walk_exchange  # one lookup of the module global (a dict lookup each, compiled)
    if core_walk is None or header_size < 0:
        return None
    return core_walk(frame, header_size, _topic_id)


#: Offsets inside a record batch (magic 2): batchLength, magic, recordsCount.
_BATCH_LENGTH_AT: Final = 8
_MAGIC_AT: Final = 16
_RECORDS_COUNT_AT: Final = 57
_BATCH_HEADER: Final = 61
_LOG_OVERHEAD: Final = 12  # baseOffset + batchLength (or offset + size in message sets v0/v1)
#: batchLength, magic and recordsCount of a record batch's header, in one read.
_BATCH_HEAD: Final = struct.Struct(f">{_BATCH_LENGTH_AT}xi{_MAGIC_AT - _BATCH_LENGTH_AT - 4}xb"
                                   f"{_RECORDS_COUNT_AT - _MAGIC_AT - 1}xi")


def count_records(frame: Buffer, start: int, size: int) -> int:
    """How many records a record set holds, from its batch headers only (nothing decompressed).

    Record batches (magic 2) carry the count in their header. Old message sets (magic 0/1, Produce
    v0-v2) count one per entry (a compressed wrapper counts as one).
    """
    end = start + size
    count = 0
    pos = start
    unpack = _I32.unpack_from
    try:
        while pos + _LOG_OVERHEAD <= end:
            length = unpack(frame, pos + _BATCH_LENGTH_AT)[0]
            if length < 0:
                raise MalformedFrame(f"negative record batch length {length}")
            if frame[pos + _MAGIC_AT] >= 2:
                if pos + _BATCH_HEADER > end:
                    raise TruncatedData("record batch header runs past its record set")
                count += unpack(frame, pos + _RECORDS_COUNT_AT)[0]
            else:
                count += 1
            pos += _LOG_OVERHEAD + length
    except (struct.error, IndexError):
        raise TruncatedData("record set is truncated") from None
    return count


def _record_count(frame: memoryview, start: int, size: int) -> int:
    """`count_records` of a non-empty record set, -1 where it does not read cleanly (the broker judges)."""
    try:
        return count_records(frame, start, size)
    except ProtocolError:
        return -1


#: A topic id from its 16 bytes (cached: ids repeat), what the compiled core's walk calls for a v13+ topic.
_topic_id: Final = uuid_of


def _count(n: int, flexible: bool) -> bytes:
    return encode_uvarint(n + 1) if flexible else _I32.pack(n)


def build_forward_request_chunks(
    index: ProduceRequestIndex, keep: Container[PartitionKey], acks: int | None = None
) -> list[bytes | memoryview]:
    """The request restricted to the ``keep`` partitions, as chunks ready for ``writelines``.

    The first chunk is the 4-byte size prefix; the rest are slices of the original frame (records
    are never copied) plus re-encoded array counts. Header and correlation id are unchanged;
    ``acks`` replaces the request's acks if given. Topics left without partitions are dropped.
    """
    frame = index.frame
    flexible = index.flexible
    a = index.acks_offset
    out: list[bytes | memoryview] = [b"", frame[:a], _I16.pack(index.acks if acks is None else acks),
                                     frame[a + 2 : a + 6]]
    kept_topics: list[list[bytes | memoryview]] = []
    for t in index.topics:
        parts = [frame[p.start : p.end] for p in t.partitions if (p.topic, p.partition) in keep]
        if not parts:
            continue
        chunk: list[bytes | memoryview] = [frame[t.key_start : t.key_end], _count(len(parts), flexible)]
        chunk.extend(parts)
        if t.tagged_end > t.tagged_start:
            chunk.append(frame[t.tagged_start : t.tagged_end])
        kept_topics.append(chunk)
    out.append(_count(len(kept_topics), flexible))
    for chunk in kept_topics:
        out.extend(chunk)
    if index.tagged_end > index.tagged_start:
        out.append(frame[index.tagged_start : index.tagged_end])
    out[0] = _I32.pack(sum(len(c) for c in out))
    return out


def build_forward_request(
    index: ProduceRequestIndex, keep: Container[PartitionKey], acks: int | None = None
) -> bytes:
    """Like :func:`build_forward_request_chunks`, joined, without the size prefix."""
    return b"".join(build_forward_request_chunks(index, keep, acks)[1:])


def _error_partition(partition: int, error_code: int, error_message: str | None) -> PartitionProduceResponse:
    return PartitionProduceResponse(
        index=partition,
        error_code=error_code,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=(),
        error_message=error_message,
    )


def _topic_response(
    version: int, topic: str | uuid.UUID, partitions: tuple[PartitionProduceResponse, ...],
    unknown: tuple[tuple[int, bytes], ...] = (),
) -> TopicProduceResponse:
    if isinstance(topic, uuid.UUID):
        return TopicProduceResponse(topic_id=topic, partition_responses=partitions, unknown_tagged_fields=unknown)
    return TopicProduceResponse(name=topic, partition_responses=partitions, unknown_tagged_fields=unknown)


def build_produce_error_response(
    index: ProduceRequestIndex,
    errors: Mapping[PartitionKey, int],
    *,
    error_message: str | None = None,
    throttle_time_ms: int = 0,
) -> bytes:
    """A Produce response (header + body) answering the ``errors`` partitions, in request order.

    Each answered partition gets its error code (e.g. 19 NOT_ENOUGH_REPLICAS, 21
    INVALID_REQUIRED_ACKS), base_offset/log_append_time/log_start_offset -1, no record errors.
    Without an error message (the proxy's own answers) it is written straight from the request's
    spans: the topic keys are the request's own bytes (a Produce response encodes names and ids as
    its request does), no message objects, no generic encoder.
    """
    if error_message is not None:
        return merge_produce_responses(index, None, errors, error_message=error_message,
                                       throttle_time_ms=throttle_time_ms)
    version = index.api_version
    flexible = version >= PRODUCE_FLEXIBLE_SINCE
    frame = index.frame
    tail = _ERROR_PARTITION_TAILS[version]
    out = bytearray(_I32.pack(index.correlation_id))
    if flexible:
        out.append(0)  # response header v1: no tagged fields
    answered = [(t, [(p.partition, code) for p in t.partitions if (code := errors.get((p.topic, p.partition)))
                     is not None]) for t in index.topics]
    answered = [(t, parts) for t, parts in answered if parts]
    out += _count(len(answered), flexible)
    pack_partition = _PARTITION_ERROR.pack
    for t, parts in answered:
        out += frame[t.key_start:t.key_end]
        out += _count(len(parts), flexible)
        for partition, code in parts:
            out += pack_partition(partition, code)
            out += tail
        if flexible:
            out.append(0)
    if version >= PRODUCE_RESPONSE_THROTTLE_TIME_MS_SINCE:
        out += _I32.pack(throttle_time_ms)
    if flexible:
        out.append(0)
    return bytes(out)


_PARTITION_ERROR: Final = struct.Struct(">ih")


def _error_partition_tail(version: int) -> bytes:
    """What follows index and error_code in a partition the proxy answers: offsets -1, nothing else."""
    tail = b"\xff" * 8  # base_offset
    if version >= PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_LOG_APPEND_TIME_MS_SINCE:
        tail += b"\xff" * 8  # log_append_time_ms
    if version >= PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_LOG_START_OFFSET_SINCE:
        tail += b"\xff" * 8  # log_start_offset
    if version >= PRODUCE_RESPONSE_RESPONSES_PARTITION_RESPONSES_ERROR_MESSAGE_SINCE:
        # record_errors empty, error_message null (then, flexible, no tagged fields)
        tail += b"\x01\x00\x00" if version >= PRODUCE_FLEXIBLE_SINCE else _I32.pack(0) + _I16.pack(-1)
    return tail


def merge_produce_responses(
    index: ProduceRequestIndex,
    broker_response: Buffer | None,
    proxy_errors: Mapping[PartitionKey, int],
    *,
    error_message: str | None = None,
    throttle_time_ms: int = 0,
) -> bytes:
    """One response (header + body) for the original request, from the broker's and the proxy's.

    ``broker_response`` is the broker's response frame to the forward request (same correlation
    id), or None when the proxy answered everything. Partitions keep the original request order;
    those in ``proxy_errors`` get the proxy's error; a partition answered by neither (a broker bug)
    gets UNKNOWN_SERVER_ERROR so the client is never left waiting. Throttle time, node endpoints
    and tagged fields come from the broker's response.
    """
    version = index.api_version
    broker_parts: dict[PartitionKey, PartitionProduceResponse] = {}
    broker_topic_tags: dict[str | uuid.UUID, tuple[tuple[int, bytes], ...]] = {}
    broker: ProduceResponse | None = None
    if broker_response is not None:
        _, body = split_response(broker_response, ApiKey.PRODUCE, version)
        decoded = decode_response(ApiKey.PRODUCE, version, body)
        assert isinstance(decoded, ProduceResponse)
        broker = decoded
        for bt in broker.responses:
            tkey: str | uuid.UUID = bt.topic_id if version >= PRODUCE_RESPONSE_RESPONSES_TOPIC_ID_SINCE else bt.name
            if bt.unknown_tagged_fields:
                broker_topic_tags[tkey] = bt.unknown_tagged_fields
            for bp in bt.partition_responses:
                broker_parts[(tkey, bp.index)] = bp
    topics: list[TopicProduceResponse] = []
    for t in index.topics:
        parts: list[PartitionProduceResponse] = []
        for p in t.partitions:
            key = (p.topic, p.partition)
            code = proxy_errors.get(key)
            if code is not None:
                parts.append(_error_partition(p.partition, code, error_message))
            elif broker is not None:
                got = broker_parts.get(key)
                parts.append(got if got is not None else _error_partition(
                    p.partition, ErrorCode.UNKNOWN_SERVER_ERROR, "no answer from the broker for this partition"))
        if parts:
            topics.append(_topic_response(version, t.topic, tuple(parts), broker_topic_tags.get(t.topic, ())))
    if broker is not None:
        response = ProduceResponse(
            responses=tuple(topics),
            throttle_time_ms=broker.throttle_time_ms,
            node_endpoints=broker.node_endpoints,
            unknown_tagged_fields=broker.unknown_tagged_fields,
        )
    else:
        response = ProduceResponse(responses=tuple(topics), throttle_time_ms=throttle_time_ms)
    body_bytes = encode_response(response, version)
    return encode_response_with_header(ApiKey.PRODUCE, version, index.correlation_id, body_bytes)


def rewrite_produce_node_endpoints(
    frame: Buffer, api_version: int, addresses: Mapping[int, tuple[str, int]], scan: ProduceResponseScan | None = None
) -> Buffer:
    """Replace host/port in a Produce v10+ response's ``node_endpoints`` (frame = header + body).

    Returns ``frame`` itself when the version has no node endpoints or none of them is mapped. ``scan``:
    the frame's `scan_produce_response`, when the caller has it already.
    """
    if api_version < PRODUCE_RESPONSE_NODE_ENDPOINTS_SINCE:
        return frame
    if api_version <= PRODUCE_MAX_VERSION and not (
        _has_response_tags(frame, api_version) if scan is None else scan.has_tags
    ):
        return frame  # the common case: no node_endpoints (only leadership errors bring them)
    correlation_id, body = split_response(frame, ApiKey.PRODUCE, api_version)
    decoded = decode_response(ApiKey.PRODUCE, api_version, body)
    assert isinstance(decoded, ProduceResponse)
    endpoints = rewrite_endpoints(decoded.node_endpoints, addresses)
    if endpoints is None:
        return frame
    body_bytes = encode_response(replace(decoded, node_endpoints=endpoints), api_version)
    return encode_response_with_header(ApiKey.PRODUCE, api_version, correlation_id, body_bytes)


class ProduceResponseScan(SlottedRecord):
    """What one lean walk of a Produce response tells: partitions answered, the failed ones, and whether it
    may carry top-level tagged fields (node_endpoints, v10+)."""

    __slots__ = ("answered", "failed", "has_tags")
    _fields: ClassVar[tuple[str, ...]] = ("answered", "failed", "has_tags")

    def __init__(self, answered: int, failed: list[tuple[str | uuid.UUID, int, int]], has_tags: bool) -> None:
        self.answered = answered
        #: (topic or topic_id, partition, error_code) of every partition answered with an error.
        self.failed = failed
        #: False only when the walk ended on throttle_time_ms and an empty tag section at the frame's end
        #: (always False before the flexible v9).
        self.has_tags = has_tags


def scan_produce_response(frame: Buffer, api_version: int) -> ProduceResponseScan:
    """One lean walk of a Produce response (header + body): in the common case (no error, no tags) nothing
    is decoded, not even the topic names. Raises ProtocolError when the frame does not read cleanly."""
    failed: list[tuple[str | uuid.UUID, int, int]]
    core_scan = _core_scan_response  # one lookup of the module global (a dict lookup each, compiled)
    scanned = None if core_scan is None else core_scan(frame, api_version)
    if scanned is not None:  # the compiled core walked it: no partition failed (protocol/native.py)
        answered, end = scanned
        failed = []
    else:
        answered, failed, end = _walk_response(frame, api_version)
    return ProduceResponseScan(answered, failed,
                               api_version >= PRODUCE_FLEXIBLE_SINCE and not (end + 5 == len(frame) and frame[end + 4] == 0))


class _ResponseScan(ProduceResponseHooks):
    """The hooks of the one walk of a Produce response (the generated `PRODUCE_RESPONSE_WALK`): partitions answered,
    the failed ones, where the responses end."""

    __slots__ = ("answered", "failed", "end")

    def __init__(self) -> None:
        self.answered = 0
        self.failed: list[tuple[str | uuid.UUID, int, int]] = []
        self.end = 0

    def partition_responses(self, key: str | uuid.UUID, key_end: int, index: int, error_code: int, start: int,
                            tags_start: int, end: int) -> None:
        self.failed.append((key, index, error_code))

    def produce_response(self, partition_responses_count: int, start: int, tags_start: int, end: int) -> None:
        self.answered = partition_responses_count
        self.end = end


def _walk_response(frame: Buffer, version: int) -> tuple[int, list[tuple[str | uuid.UUID, int, int]], int]:
    """The one walk of a Produce response (every version; the grammar is the generated `PRODUCE_RESPONSE_WALK`'s):
    (partitions answered, (topic, partition, error_code) of the failed ones, where the responses end). A topic's
    name is decoded only for a failure; an acknowledged v9+ partition is skipped by its three bytes 1, 0, 0."""
    walk_version = PRODUCE_RESPONSE_WALK[version] if 0 <= version <= PRODUCE_MAX_VERSION else None
    if walk_version is None:
        raise UnsupportedVersion(f"Produce v{version} is not supported (known: v0-v{PRODUCE_MAX_VERSION})")
    scan = _ResponseScan()
    try:
        # correlation id, then (v9+, response header v1) the header's tagged fields
        pos = skip_tagged_fields_at(frame, 4) if version >= PRODUCE_FLEXIBLE_SINCE else 4
        pos = walk_version(frame, pos, scan)
        if pos > len(frame):
            raise TruncatedData("Produce response runs past its end")
    except ProtocolError:
        raise
    except (struct.error, ValueError, IndexError, UnicodeError) as e:
        raise TruncatedData(f"Produce v{version} response is truncated or corrupt: {e!r}") from None
    return scan.answered, scan.failed, pos


def _has_response_tags(frame: Buffer, version: int) -> bool:
    """Whether a v9+ Produce response (header + body) may carry top-level tagged fields (node_endpoints is
    tag 0). A frame that does not read cleanly answers True (the full decode then says what is wrong)."""
    try:
        return scan_produce_response(frame, version).has_tags
    except ProtocolError:
        return True


_ERROR_PARTITION_TAILS: Final = {v: _error_partition_tail(v) for v in range(PRODUCE_MAX_VERSION + 1)}
