"""One walk over a MetadataResponse frame: what every later step needs, without a full decode.

The scan reads the brokers, the cluster fields and each topic's head (error code, name, id, partition
count) and skips the partitions with a few integer reads each, recording byte offsets. A topic's
partitions (leader, replicas, ISR) are read on demand from those offsets
(:meth:`MetadataScan.partitions`), and the splice
(:func:`~protocol.metadata_splice.splice_metadata_response`) rewrites the frame from the scan
without walking it again.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from .api_keys import ApiKey
from .errors import MalformedFrame, ProtocolError, TruncatedData, UnsupportedVersion
from .headers import response_header_version
from .kafka_versions import METADATA_FLEXIBLE_SINCE as _FLEXIBLE_SINCE
from .kafka_versions import METADATA_MAX_VERSION  # the highest version the scan (and the splice) understands
from .kafka_versions import METADATA_RESPONSE_BROKERS_RACK_SINCE as _RACK_SINCE
from .kafka_versions import (
    METADATA_RESPONSE_CLUSTER_AUTHORIZED_OPERATIONS_SINCE as _CLUSTER_AUTHORIZED_OPERATIONS_SINCE,
)
from .kafka_versions import (
    METADATA_RESPONSE_CLUSTER_AUTHORIZED_OPERATIONS_UNTIL as _CLUSTER_AUTHORIZED_OPERATIONS_UNTIL,
)
from .kafka_versions import METADATA_RESPONSE_CLUSTER_ID_SINCE as _CLUSTER_ID_SINCE
from .kafka_versions import METADATA_RESPONSE_CONTROLLER_ID_SINCE as _CONTROLLER_ID_SINCE
from .kafka_versions import METADATA_RESPONSE_ERROR_CODE_SINCE as _TOP_ERROR_CODE_SINCE
from .kafka_versions import METADATA_RESPONSE_THROTTLE_TIME_MS_SINCE as _THROTTLE_TIME_MS_SINCE
from .kafka_versions import METADATA_RESPONSE_TOPICS_IS_INTERNAL_SINCE as _IS_INTERNAL_SINCE
from .kafka_versions import METADATA_RESPONSE_TOPICS_NAME_NULLABLE_SINCE as _TOPIC_NAME_NULLABLE_SINCE
from .kafka_versions import METADATA_RESPONSE_TOPICS_PARTITIONS_LEADER_EPOCH_SINCE as _LEADER_EPOCH_SINCE
from .kafka_versions import (
    METADATA_RESPONSE_TOPICS_PARTITIONS_OFFLINE_REPLICAS_SINCE as _OFFLINE_REPLICAS_SINCE,
)
from .kafka_versions import (
    METADATA_RESPONSE_TOPICS_TOPIC_AUTHORIZED_OPERATIONS_SINCE as _TOPIC_AUTHORIZED_OPERATIONS_SINCE,
)
from .kafka_versions import METADATA_RESPONSE_TOPICS_TOPIC_ID_SINCE as _TOPIC_ID_SINCE
from .kafka_walkers import METADATA_RESPONSE_PARTITION_FIXED_PREFIX as _PARTITION_FIXED
from .messages import AUTHORIZED_OPERATIONS_OMITTED, MIN_INSYNC_REPLICAS_TAG
from .primitives import Buffer, Reader, read_uvarint_at, uuid_of

__all__ = [
    "METADATA_MAX_VERSION",
    "MetadataScan",
    "MetadataScanner",
    "ScannedBroker",
    "ScannedPartition",
    "ScannedTopic",
    "scan_metadata_response",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">hii")  # error_code, partition_index, leader_id
_PARTITION_HEAD_V7 = struct.Struct(">hiii")  # ... + leader_epoch
# Replica/ISR arrays are short: one precompiled struct per length up to 15.
_INT32_ARRAYS = [struct.Struct(f">{n}i") for n in range(16)]


@dataclass(frozen=True, slots=True)
class ScannedBroker:
    """A broker of a MetadataResponse, as the broker sent it (before any address rewrite)."""

    node_id: int
    host: str
    port: int
    rack: str | None


class ScannedPartition(NamedTuple):
    """One partition's state (a tuple: reading thousands of them stays cheap)."""

    partition_index: int
    error_code: int
    leader_id: int
    leader_epoch: int  # -1 before v7
    replica_nodes: tuple[int, ...]
    isr_nodes: tuple[int, ...]
    offline_replicas: tuple[int, ...]  # () before v5


class ScannedTopic(NamedTuple):
    """A topic's head and where its pieces are in the frame (offsets index :attr:`MetadataScan.frame`).

    A tuple like :class:`ScannedPartition`: a frozen dataclass costs several times as much to build,
    and a response may hold thousands of topics.
    """

    error_code: int
    name: str | None  # None only in v12+ (topics asked for by id)
    topic_id: uuid.UUID | None  # None before v10; Kafka's all-zero id is kept as UUID(int=0)
    is_internal: bool
    partition_count: int
    topic_authorized_operations: int  # -2**31 (omitted) before v8
    min_insync_replicas: int  # tag 637 as found in the frame, -1 if absent (v9+ only)
    start: int  # offset of the topic's error_code
    partitions_start: int  # offset of the first partition (after the array length)
    partitions_end: int  # offset after the last partition
    tags_start: int  # offset of the topic's tagged-field section (v9+), -1 before
    end: int  # offset after the topic


class MetadataScan:
    """A scanned MetadataResponse frame (response header + body); read-only once built.

    A plain class (mypyc compiles it to a native one; a frozen dataclass costs several microseconds more
    to build, on every Metadata response). Holds a view of the frame: keep the scanned buffer unmodified
    while the scan is in use (or scan ``bytes(frame)`` to keep it longer).
    """

    def __init__(
        self,
        frame: memoryview,
        api_version: int,
        correlation_id: int,
        throttle_time_ms: int,
        brokers: tuple[ScannedBroker, ...],
        cluster_id: str | None,
        controller_id: int,
        topics: tuple[ScannedTopic, ...],
        cluster_authorized_operations: int,
        error_code: int,
        broker_spans: tuple[tuple[int, int], ...],
        body_start: int,
        topics_end: int,
        tags_start: int,
        controller_id_start: int = -1,
    ) -> None:
        self.frame = frame
        self._frame_bytes: bytes | None = None
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.throttle_time_ms = throttle_time_ms  # 0 before v3
        self.brokers = brokers
        self.cluster_id = cluster_id  # None before v2
        self.controller_id = controller_id  # -1 before v1
        #: Offset of the controller id, -1 before v1 (a KRaft broker names a random live broker there: two
        #: answers of the same cluster may differ in these 4 bytes only).
        self.controller_id_start = controller_id_start
        self.topics = topics
        self.cluster_authorized_operations = cluster_authorized_operations  # v8-v10, else -2**31 (omitted)
        self.error_code = error_code  # top-level error, v13+ (0 before)
        #: (offset of the host, offset after the port) per broker, in ``brokers`` order.
        self.broker_spans = broker_spans
        self.body_start = body_start  # offset after the response header
        self.topics_end = topics_end  # offset after the last topic
        self.tags_start = tags_start  # offset of the top-level tagged-field section (v9+), -1 before
        self._partition_starts: dict[int, list[int]] = {}

    def __repr__(self) -> str:
        return (f"MetadataScan(v{self.api_version}, correlation_id={self.correlation_id}, "
                f"{len(self.brokers)} broker(s), {len(self.topics)} topic(s))")

    def partitions(self, topic: ScannedTopic) -> list[ScannedPartition]:
        """Read ``topic``'s partitions (index, error, leader, epoch, replicas, ISR, offline) from the frame."""
        try:
            return self._read_partitions(topic)
        except ProtocolError:
            raise
        except (IndexError, struct.error, ValueError) as e:  # only if the frame changed after the scan
            raise TruncatedData(f"MetadataResponse partitions unreadable: {e!r}") from None

    def partition_offsets(self, topic: ScannedTopic) -> list[int]:
        """Offset of each of ``topic``'s partitions (its error_code), walked once then cached."""
        starts = self._partition_starts.get(topic.partitions_start)
        if starts is None:
            starts = []
            try:
                if self.api_version >= _FLEXIBLE_SINCE:
                    if self._frame_bytes is None:
                        self._frame_bytes = bytes(self.frame)  # one copy per answer, for native byte reads
                    _skip_partitions(self._frame_bytes, topic.partitions_start, topic.partition_count,
                                     self.api_version, starts)
                else:
                    _walk_partitions(self.frame, topic.partitions_start, topic.partition_count, self.api_version,
                                     starts)
            except ProtocolError:
                raise
            except (IndexError, struct.error, ValueError) as e:
                raise TruncatedData(f"MetadataResponse partitions unreadable: {e!r}") from None
            self._partition_starts[topic.partitions_start] = starts
        return starts

    def _read_partitions(self, topic: ScannedTopic) -> list[ScannedPartition]:
        starts: list[int] | None = None
        if topic.partitions_start not in self._partition_starts:
            starts = self._partition_starts[topic.partitions_start] = []
        try:
            if self.api_version >= _FLEXIBLE_SINCE:
                return _read_flexible_partitions(self.frame, topic.partitions_start, topic.partition_count, starts)
            return _read_partitions(self.frame, topic.partitions_start, topic.partition_count, self.api_version,
                                    starts)
        except BaseException:
            self._partition_starts.pop(topic.partitions_start, None)
            raise


def _compact_int32_array(buf: memoryview, p: int) -> tuple[tuple[int, ...], int]:
    """A COMPACT_ARRAY of INT32 at ``p`` (any length): (values, offset after it)."""
    c, p = read_uvarint_at(buf, p)
    if c == 0:
        raise MalformedFrame("null replica array in MetadataResponse")
    c -= 1
    return struct.unpack_from(f">{c}i", buf, p), p + 4 * c


def _read_flexible_partitions(buf: memoryview, p: int, count: int, starts: list[int] | None) -> list[ScannedPartition]:
    """Partitions of v9+ (leader epoch, offline replicas, compact arrays, tagged fields)."""
    unpack_head = _PARTITION_HEAD_V7.unpack_from
    arrays = _INT32_ARRAYS
    new = tuple.__new__
    out: list[ScannedPartition] = []
    append = out.append
    # Unrolled on purpose: this runs once per partition, and a helper call per array costs ~10%.
    for _ in range(count):
        if starts is not None:
            starts.append(p)
        error_code, index, leader, epoch = unpack_head(buf, p)
        p += 14
        c = buf[p] - 1
        if 0 <= c < 16:
            replicas = arrays[c].unpack_from(buf, p + 1)
            p += 1 + 4 * c
        else:
            replicas, p = _compact_int32_array(buf, p)
        c = buf[p] - 1
        if 0 <= c < 16:
            isr = arrays[c].unpack_from(buf, p + 1)
            p += 1 + 4 * c
        else:
            isr, p = _compact_int32_array(buf, p)
        c = buf[p] - 1
        if 0 <= c < 16:
            offline = arrays[c].unpack_from(buf, p + 1)
            p += 1 + 4 * c
        else:
            offline, p = _compact_int32_array(buf, p)
        if buf[p] == 0:
            p += 1
        else:
            tr = Reader(buf, p)
            tr.tagged_fields()
            p = tr.pos
        # tuple.__new__: a NamedTuple's own constructor costs twice as much.
        append(new(ScannedPartition, (index, error_code, leader, epoch, replicas, isr, offline)))
    return out


def _read_partitions(buf: memoryview, p: int, count: int, v: int, starts: list[int] | None) -> list[ScannedPartition]:
    """Partitions of v0-v8 (int32-counted arrays; epoch from v7, offline replicas from v5)."""
    has_epoch = v >= _LEADER_EPOCH_SINCE
    n_arrays = 3 if v >= _OFFLINE_REPLICAS_SINCE else 2
    unpack_head = (_PARTITION_HEAD_V7 if has_epoch else _PARTITION_HEAD).unpack_from
    fixed = _PARTITION_FIXED[v]
    unpack_i32 = _I32.unpack_from
    new = tuple.__new__
    out: list[ScannedPartition] = []
    for _ in range(count):
        if starts is not None:
            starts.append(p)
        head = unpack_head(buf, p)
        p += fixed
        values: list[object] = [head[1], head[0], head[2], head[3] if has_epoch else -1]
        for _ in range(n_arrays):
            c = unpack_i32(buf, p)[0]
            if c < 0:
                raise MalformedFrame("null replica array in MetadataResponse")
            values.append(struct.unpack_from(f">{c}i", buf, p + 4))
            p += 4 + 4 * c
        if n_arrays == 2:
            values.append(())
        out.append(new(ScannedPartition, values))
    return out


def scan_metadata_response(frame: Buffer, api_version: int, *, partition_offsets: bool = False) -> MetadataScan:
    """Walk a MetadataResponse frame (response header + body) once; see :class:`MetadataScan`.

    The partitions are checked for structure (and skipped) but not read: use
    :meth:`MetadataScan.partitions` for the topics whose leader/replicas/ISR you need.
    ``partition_offsets`` records every partition's offset during the walk (what a splice with
    ``leaderless`` needs) instead of on first use. Raises :class:`~protocol.errors.ProtocolError`
    on bad input. :class:`MetadataScanner` does the same walk in steps.
    """
    scanner = MetadataScanner(frame, api_version, partition_offsets=partition_offsets)
    scanner.step(scanner.topic_count)
    return scanner.scan()


def _walk_partitions(buf: memoryview, p: int, count: int, v: int, starts: list[int] | None) -> int:
    """Skip ``count`` partitions of a v0-v8 answer (fixed-width arrays) from ``p`` with integer reads only;
    return the offset after them. v9+ answers are walked by `_skip_partitions` over ``bytes``."""
    n = len(buf)
    fixed = _PARTITION_FIXED[v]  # error_code, partition_index, leader_id[, leader_epoch]
    n_arrays = 3 if v >= _OFFLINE_REPLICAS_SINCE else 2
    unpack_i32 = _I32.unpack_from
    for _ in range(count):
        if starts is not None:
            starts.append(p)
        p += fixed
        for _ in range(n_arrays):
            c = unpack_i32(buf, p)[0]
            if c < 0:
                raise MalformedFrame("null replica array in MetadataResponse")
            p += 4 + c * 4
        if p > n:
            raise TruncatedData("MetadataResponse partition runs past the end of the frame")
    return p


def _skip_partitions(data: bytes, p: int, count: int, v: int, starts: list[int] | None) -> int:
    """Skip ``count`` partitions from ``p``; return the offset after them. v9+ (compact arrays, tagged fields)
    over ``bytes``: compiled, ``bytes`` indexing is a native read where a memoryview's goes through the generic
    protocol (a 3,000-topic answer walks 6,000 partitions)."""
    n = len(data)
    fixed = _PARTITION_FIXED[v]
    n_arrays = 3 if v >= _OFFLINE_REPLICAS_SINCE else 2
    if v < _FLEXIBLE_SINCE:
        return _walk_partitions(memoryview(data), p, count, v, starts)
    for _ in range(count):
        if starts is not None:
            starts.append(p)
        p += fixed
        for _ in range(n_arrays):
            c = data[p]
            if 0 < c < 0x80:
                p += 1 + (c - 1) * 4
            else:
                c, p = read_uvarint_at(data, p)
                if c == 0:
                    raise MalformedFrame("null replica array in MetadataResponse")
                p += (c - 1) * 4
        if data[p] == 0:
            p += 1
        else:
            tr = Reader(data, p)
            tr.tagged_fields()
            p = tr.pos
        if p > n:
            raise TruncatedData("MetadataResponse partition runs past the end of the frame")
    return p


def _topic_id(data: bytes, p: int) -> uuid.UUID:
    """The topic id at ``p``: one UUID object per id, not one per answer (a UUID costs ~1 us, 40% of a
    3,000-topic scan), from the bounded cache of `uuid_of` (protocol/primitives.py) the Produce walks share."""
    raw = data[p:p + 16]
    if len(raw) != 16:
        raise TruncatedData("MetadataResponse topic id runs past the end of the frame")
    return uuid_of(raw)


def _scan_flexible_topic(data: bytes, r: Reader, v: int, offsets: dict[int, list[int]] | None) -> ScannedTopic:
    """One topic of a v9+ answer from ``r.pos`` (``r`` left after it), read from ``bytes`` with inlined integer
    reads: compiled, each is a native byte read, where Reader calls and struct cost ~1 us a topic, the
    better part of a 3,000-topic scan. Out-of-range reads raise IndexError (the scan reports it as truncated)."""
    start = p = r.pos
    error_code = (data[p] << 8) | data[p + 1]
    if error_code >= 0x8000:
        error_code -= 0x10000
    p += 2
    c = data[p]
    if c < 0x80:
        p += 1
    else:
        c, p = read_uvarint_at(data, p)
    name: str | None = None
    if c == 0:
        if v < _TOPIC_NAME_NULLABLE_SINCE:
            raise MalformedFrame(f"null topic name in MetadataResponse v{v} at offset {p - 1}")
    else:
        end = p + c - 1
        if end > len(data):
            raise TruncatedData("MetadataResponse topic name runs past the end of the frame")
        name = data[p:end].decode("utf-8")
        p = end
    topic_id: uuid.UUID | None = None
    if v >= _TOPIC_ID_SINCE:
        topic_id = _topic_id(data, p)
        p += 16
    b = data[p]
    if b > 1:
        raise MalformedFrame(f"boolean byte {b} at offset {p} is neither 0 nor 1")
    is_internal = b == 1
    p += 1
    c = data[p]
    if c < 0x80:
        p += 1
    else:
        c, p = read_uvarint_at(data, p)
    if c == 0:
        raise MalformedFrame("null partitions array in MetadataResponse")
    n_parts = c - 1
    partitions_start = p
    starts: list[int] | None = None
    if offsets is not None:
        starts = offsets[partitions_start] = []
    p = _skip_partitions(data, partitions_start, n_parts, v, starts)
    partitions_end = p
    authorized = AUTHORIZED_OPERATIONS_OMITTED
    if v >= _TOPIC_AUTHORIZED_OPERATIONS_SINCE:
        authorized = (data[p] << 24) | (data[p + 1] << 16) | (data[p + 2] << 8) | data[p + 3]
        if authorized >= 0x80000000:
            authorized -= 0x100000000
        p += 4
    min_isr = -1
    tags_start = p
    if data[p] == 0:  # the common case: no tagged fields
        p += 1
    else:
        r.pos = p
        for tag, field_data in r.tagged_fields():
            if tag == MIN_INSYNC_REPLICAS_TAG and len(field_data) == 2:
                min_isr = _I16.unpack_from(field_data)[0]
        p = r.pos
    if p > len(data):
        raise TruncatedData("MetadataResponse topic runs past the end of the frame")
    r.pos = p
    return tuple.__new__(ScannedTopic, (error_code, name, topic_id, is_internal, n_parts, authorized, min_isr, start,
                                        partitions_start, partitions_end, tags_start, p))


#: What a stepwise walk gives when done.
R = TypeVar("R")


class MetadataSteps(Generic[R]):
    """A walk of a MetadataResponse done in steps, for a caller that must not hold its thread for a whole
    10,000-topic answer: :meth:`step` goes on until :attr:`done`, then the result is there (the scan, the
    splice's frame)."""

    def __init__(self, api_version: int, what: str) -> None:
        self._version = api_version
        self._what = what
        self._result: R | None = None
        #: Every topic walked and the answer's end read: the result is ready.
        self.done = False

    def _advance(self, max_topics: int) -> None:
        """Walk up to ``max_topics`` more topics (the end too after the last: then `_finish`)."""
        raise NotImplementedError

    def _progress(self) -> tuple[int, int]:
        """(topics walked, topics in all)."""
        raise NotImplementedError

    def _finish(self, result: R) -> None:
        self._result = result
        self.done = True

    def _finished(self) -> R:
        """The result, once :attr:`done`."""
        if self._result is None:
            walked, of = self._progress()
            raise RuntimeError(f"the {self._what} has done {walked} of {of} topics")
        return self._result

    def step(self, max_topics: int) -> bool:
        """Walk up to ``max_topics`` more topics (the answer's end too once they are all walked); True when done."""
        if not self.done:
            run_walk(self._version, lambda: self._advance(max_topics))
        return self.done


class MetadataScanner(MetadataSteps[MetadataScan]):
    """A MetadataResponse scan in steps: :meth:`step` walks up to ``max_topics`` more topics, :meth:`scan` gives
    the result once :attr:`done`. For a caller that must not hold its thread for a whole 10,000-topic answer
    (the proxy lets its event loop run other connections' work between steps);
    :func:`scan_metadata_response` is one step over every topic. The constructor reads everything before the
    topics (header, brokers, cluster fields, the topic count). Raises
    :class:`~protocol.errors.ProtocolError` on bad input, from the constructor or a step.
    """

    def __init__(self, frame: Buffer, api_version: int, *, partition_offsets: bool = False) -> None:
        if not 0 <= api_version <= METADATA_MAX_VERSION:
            raise UnsupportedVersion(
                f"MetadataResponse v{api_version} is not supported (known: v0-v{METADATA_MAX_VERSION})")
        super().__init__(api_version, "scan")
        self.api_version = api_version
        self._record = partition_offsets
        self._topics: list[ScannedTopic] = []
        self._offsets: dict[int, list[int]] = {}
        run_walk(api_version, lambda: self._read_head(frame))

    def _read_head(self, frame: Buffer) -> None:
        v = self.api_version
        r = self._r = Reader(frame)
        flexible = v >= _FLEXIBLE_SINCE
        self._correlation_id = r.int32()
        if response_header_version(ApiKey.METADATA, v) == 1:
            r.tagged_fields()
        self._body_start = r.pos
        self._throttle_time_ms = r.int32() if v >= _THROTTLE_TIME_MS_SINCE else 0
        brokers: list[ScannedBroker] = []
        spans: list[tuple[int, int]] = []
        for _ in range(max(r.array_length(flexible), 0)):
            node_id = r.int32()
            host_start = r.pos
            host = r.compact_string() if flexible else r.string()
            port = r.int32()
            spans.append((host_start, r.pos))
            rack: str | None = None
            if v >= _RACK_SINCE:
                rack = r.compact_nullable_string() if flexible else r.nullable_string()
            if flexible:
                r.tagged_fields()
            brokers.append(ScannedBroker(node_id, host, port, rack))
        self._brokers = tuple(brokers)
        self._spans = tuple(spans)
        self._cluster_id: str | None = None
        if v >= _CLUSTER_ID_SINCE:
            self._cluster_id = r.compact_nullable_string() if flexible else r.nullable_string()
        #: Offset of the controller id (v1+; -1 before): a KRaft broker names a random live broker there, so
        #: two answers of the same cluster differ in these 4 bytes.
        self.controller_id_start = r.pos if v >= _CONTROLLER_ID_SINCE else -1
        self._controller_id = r.int32() if v >= _CONTROLLER_ID_SINCE else -1
        n_topics = r.array_length(flexible)
        if n_topics < 0:
            raise MalformedFrame("null topics array in MetadataResponse")
        self.topic_count = n_topics
        # One copy of the frame (~30 us for 364 KB) makes every byte read of the walk a native one.
        self._frame_bytes = bytes(r.buf) if flexible else b""

    def scan(self) -> MetadataScan:
        """The finished scan (after :meth:`step` returned True)."""
        return self._finished()

    def _progress(self) -> tuple[int, int]:
        return len(self._topics), self.topic_count

    def _advance(self, max_topics: int) -> None:
        r = self._r
        buf = r.buf
        v = self.api_version
        topics = self._topics
        offsets = self._offsets if self._record else None
        frame_bytes = self._frame_bytes
        new_tuple = tuple.__new__
        for _ in range(min(max_topics, self.topic_count - len(topics))):
            if v >= _FLEXIBLE_SINCE:
                topics.append(_scan_flexible_topic(frame_bytes, r, v, offsets))
                continue
            start = r.pos
            error_code = r.int16()
            name: str | None = r.string()
            topic_id: uuid.UUID | None = None
            is_internal = r.boolean() if v >= _IS_INTERNAL_SINCE else False
            n_parts = r.array_length(False)
            if n_parts < 0:
                raise MalformedFrame("null partitions array in MetadataResponse")
            partitions_start = r.pos
            starts: list[int] | None = None
            if offsets is not None:
                starts = offsets[partitions_start] = []
            r.pos = _walk_partitions(buf, partitions_start, n_parts, v, starts)
            partitions_end = r.pos
            authorized = r.int32() if v >= _TOPIC_AUTHORIZED_OPERATIONS_SINCE else AUTHORIZED_OPERATIONS_OMITTED
            topics.append(new_tuple(ScannedTopic, (error_code, name, topic_id, is_internal, n_parts, authorized, -1,
                                                   start, partitions_start, partitions_end, -1, r.pos)))
        if len(topics) < self.topic_count:
            return
        topics_end = r.pos
        cluster_authorized = r.int32() if _CLUSTER_AUTHORIZED_OPERATIONS_SINCE <= v <= _CLUSTER_AUTHORIZED_OPERATIONS_UNTIL else AUTHORIZED_OPERATIONS_OMITTED
        top_error = r.int16() if v >= _TOP_ERROR_CODE_SINCE else 0
        tags_start = -1
        if v >= _FLEXIBLE_SINCE:
            tags_start = r.pos
            r.tagged_fields()
        r.expect_end()
        scan = MetadataScan(buf, v, self._correlation_id, self._throttle_time_ms, self._brokers, self._cluster_id,
                            self._controller_id, tuple(topics), cluster_authorized, top_error, self._spans,
                            self._body_start, topics_end, tags_start, self.controller_id_start)
        if self._offsets:
            scan._partition_starts.update(self._offsets)
        self._finish(scan)


def run_walk(api_version: int, walk: Callable[[], None]) -> None:
    """Run (a part of) a walk of a MetadataResponse frame: what the frame's bytes make it raise below the
    protocol's errors (a read past the end, a bad string) becomes :class:`~protocol.errors.TruncatedData`."""
    try:
        walk()
    except ProtocolError:
        raise
    except (IndexError, struct.error, ValueError, UnicodeError) as e:
        raise truncated_response(api_version, e) from None


def truncated_response(api_version: int, e: BaseException) -> TruncatedData:
    """What an out-of-range read (IndexError, struct.error, ...) in a MetadataResponse walk is: the error the
    scan and the splice raise for it."""
    return TruncatedData(f"MetadataResponse v{api_version} is truncated or corrupt: {e!r}")
