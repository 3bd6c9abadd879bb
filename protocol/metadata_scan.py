"""One walk over a MetadataResponse frame: what every later step needs, without a full decode.

The scan reads the brokers, the cluster fields and each topic's head (error code, name, id, partition
count, tag 637) and skips the partitions with a few integer reads each, recording byte offsets. A topic's
partitions (leader, replicas, ISR) are read on demand from those offsets
(:meth:`MetadataScan.partitions`), and the splice
(:func:`~protocol.metadata_splice.splice_metadata_response`) rewrites the frame from the scan
without walking it again.

The byte walks are generated from Kafka's spec (protocol/kafka_walkers.py: ``METADATA_RESPONSE_WALK`` to the
topics, ``METADATA_RESPONSE_TOPICS_WALK`` over a few topics, ``METADATA_RESPONSE_AFTER_TOPICS_WALK``, the partitions'
``METADATA_RESPONSE_PARTITIONS_WALK`` and ``_READ``); written here: their hooks (`_ScanHooks`, what the scan keeps),
the response header, the walk in steps and the offsets it keeps.
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
from .kafka_walkers import (
    METADATA_RESPONSE_AFTER_TOPICS_WALK,
    METADATA_RESPONSE_PARTITIONS_READ,
    METADATA_RESPONSE_PARTITIONS_WALK,
    METADATA_RESPONSE_TOPICS_WALK,
    METADATA_RESPONSE_WALK,
    MetadataResponseHooks,
    ScannedPartition,
)
from .messages import AUTHORIZED_OPERATIONS_OMITTED
from .primitives import Buffer, Reader

__all__ = [
    "METADATA_MAX_VERSION",
    "MetadataScan",
    "MetadataScanner",
    "ScannedBroker",
    "ScannedPartition",
    "ScannedTopic",
    "scan_metadata_response",
]

@dataclass(frozen=True, slots=True)
class ScannedBroker:
    """A broker of a MetadataResponse, as the broker sent it (before any address rewrite)."""

    node_id: int
    host: str
    port: int
    rack: str | None


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
            walk = _version_of(METADATA_RESPONSE_PARTITIONS_WALK, self.api_version)
            data: Buffer = self.frame
            if self.api_version >= _FLEXIBLE_SINCE:
                if self._frame_bytes is None:
                    self._frame_bytes = bytes(self.frame)  # one copy per answer, for native byte reads
                data = self._frame_bytes
            try:
                walk(data, topic.partitions_start, topic.partition_count, starts)
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
        read = _version_of(METADATA_RESPONSE_PARTITIONS_READ, self.api_version)
        try:
            return read(self.frame, topic.partitions_start, topic.partition_count, starts)
        except BaseException:
            self._partition_starts.pop(topic.partitions_start, None)
            raise


#: One of the generated tables of walks, by version.
W = TypeVar("W")


def _version_of(table: tuple[W | None, ...], api_version: int) -> W:
    """The generated walk of ``api_version`` in ``table`` (None outside the caps: refused)."""
    walk = table[api_version] if 0 <= api_version < len(table) else None
    if walk is None:
        raise UnsupportedVersion(
            f"MetadataResponse v{api_version} is not supported (known: v0-v{METADATA_MAX_VERSION})")
    return walk


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


class _ScanHooks(MetadataResponseHooks):
    """The hooks of the generated MetadataResponse walks: what the scan keeps of the brokers, the cluster fields and
    each topic (as a `ScannedTopic`, positions included; no tagged-field section before v9: -1)."""

    __slots__ = ("_flexible", "_append_topic", "brokers_found", "broker_spans", "topics_found", "throttle_time_ms",
                 "cluster_id", "controller_id", "controller_id_start", "topic_count", "cluster_authorized_operations",
                 "error_code", "topics_end", "tags_start")

    def __init__(self, flexible: bool) -> None:
        self._flexible = flexible
        self.brokers_found: list[ScannedBroker] = []
        self.broker_spans: list[tuple[int, int]] = []
        self.topics_found: list[ScannedTopic] = []
        self._append_topic = self.topics_found.append
        self.throttle_time_ms = 0
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.controller_id_start = -1
        self.topic_count = 0
        self.cluster_authorized_operations = AUTHORIZED_OPERATIONS_OMITTED
        self.error_code = 0
        self.topics_end = -1
        self.tags_start = -1

    def brokers(self, node_id: int, host: str, port: int, rack: str | None, host_start: int, port_end: int,
                start: int, tags_start: int, end: int) -> None:
        self.brokers_found.append(ScannedBroker(node_id, host, port, rack))
        self.broker_spans.append((host_start, port_end))

    def metadata_response_head(self, throttle_time_ms: int, cluster_id: str | None, controller_id: int,
                               controller_id_start: int, controller_id_end: int, topics_count: int, start: int,
                               end: int) -> None:
        self.throttle_time_ms = throttle_time_ms
        self.cluster_id = cluster_id
        self.controller_id = controller_id
        self.controller_id_start = controller_id_start
        self.topic_count = topics_count

    def topics(self, error_code: int, name: str | None, topic_id: uuid.UUID | None, is_internal: bool,
               partitions_count: int, partitions_start: int, partitions_end: int, topic_authorized_operations: int,
               min_insync_replicas: int, start: int, tags_start: int, end: int) -> None:
        # tuple.__new__: a NamedTuple's own constructor costs twice as much.
        self._append_topic(tuple.__new__(ScannedTopic, (
            error_code, name, topic_id, is_internal, partitions_count, topic_authorized_operations, min_insync_replicas,
            start, partitions_start, partitions_end, tags_start if self._flexible else -1, end)))

    def metadata_response(self, cluster_authorized_operations: int, error_code: int, start: int, tags_start: int,
                          end: int) -> None:
        self.cluster_authorized_operations = cluster_authorized_operations
        self.error_code = error_code
        self.topics_end = start
        self.tags_start = tags_start if self._flexible else -1


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
        self._offsets: dict[int, list[int]] | None = {} if partition_offsets else None
        self._hooks = _ScanHooks(api_version >= _FLEXIBLE_SINCE)
        self._walk_topics = _version_of(METADATA_RESPONSE_TOPICS_WALK, api_version)
        run_walk(api_version, lambda: self._read_head(frame))

    def _read_head(self, frame: Buffer) -> None:
        v = self.api_version
        r = Reader(frame)
        self._frame = r.buf
        self._correlation_id = r.int32()
        if response_header_version(ApiKey.METADATA, v) == 1:
            r.tagged_fields()
        self._body_start = r.pos
        hooks = self._hooks
        self._pos = _version_of(METADATA_RESPONSE_WALK, v)(r.buf, r.pos, hooks)
        self.topic_count = hooks.topic_count
        #: Offset of the controller id (v1+; -1 before): a KRaft broker names a random live broker there, so
        #: two answers of the same cluster differ in these 4 bytes.
        self.controller_id_start = hooks.controller_id_start
        # One copy of the frame (~30 us for 364 KB) makes every byte read of the topics' walk a native one.
        self._data: Buffer = bytes(r.buf) if v >= _FLEXIBLE_SINCE else r.buf

    def scan(self) -> MetadataScan:
        """The finished scan (after :meth:`step` returned True)."""
        return self._finished()

    def _progress(self) -> tuple[int, int]:
        return len(self._hooks.topics_found), self.topic_count

    def _advance(self, max_topics: int) -> None:
        hooks = self._hooks
        topics = hooks.topics_found
        count = min(max_topics, self.topic_count - len(topics))
        if count > 0:
            self._pos = self._walk_topics(self._data, self._pos, count, hooks, self._offsets)
        if len(topics) < self.topic_count:
            return
        buf = self._frame
        v = self.api_version
        end = _version_of(METADATA_RESPONSE_AFTER_TOPICS_WALK, v)(buf, self._pos, hooks)
        if end != len(buf):
            raise MalformedFrame(f"{len(buf) - end} unexpected trailing bytes at offset {end}")
        scan = MetadataScan(buf, v, self._correlation_id, hooks.throttle_time_ms, tuple(hooks.brokers_found),
                            hooks.cluster_id, hooks.controller_id, tuple(topics), hooks.cluster_authorized_operations,
                            hooks.error_code, tuple(hooks.broker_spans), self._body_start, hooks.topics_end,
                            hooks.tags_start, hooks.controller_id_start)
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
