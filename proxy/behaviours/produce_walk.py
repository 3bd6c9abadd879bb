"""What the Produce behaviours share of one exchange: one request walk, one response scan, the decision.

Four behaviours handle Produce, one concern each, registered in this order (proxy/server.py):

1. `TopicIdResolution` (topic_ids.py): Produce v13 names topics by id; unknown ids are looked up first.
2. `AcksPolicy` (acks.py): the acks decision (KIP-926 acks=-2, KIP-1, fast_fail, acks_floor).
3. `ProduceAccounting` (accounting.py): the per-topic metrics and the audit summary, at completion.
4. `IsrLearning` (isr_learning.py): the leaders' errors teach the ISR view, at completion.

None of them walks the frame itself. The first to ask attaches the exchange's `ProduceWalk`
(`produce_walk`), which walks the request once, lazily: the lean walk of the partitions' records
(`produce_partition_records`) for the common acks, or the `ProduceRequestIndex` when the decision needs
it (acks=-2, an invalid acks, a policy), from which the partitions are then read without a second walk.
The broker's answer is scanned once (`produce_response_scan`) and kept on the exchange under its own
class: the address rewrite scans Produce v10+ answers first, the others reuse its scan. The decision's
outcome (`ProduceDecisions`) is the contract between the decision and the two that run at completion.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

from insync_proxy.protocol import (
    ErrorCode,
    ProduceResponseScan,
    ProtocolError,
    count_records,
    index_produce_request,
    produce_acks_offset,
    scan_produce_response,
)
from insync_proxy.protocol.produce import PartitionKey, ProduceRequestIndex, produce_partition_records
from insync_proxy.proxy.cluster_view import Readiness
from insync_proxy.proxy.exchange import Exchange

#: The name metrics and audit use for a topic id the proxy could not name (never the id itself).
UNKNOWN_TOPIC_ID: Final = "__unknown_topic_id__"

#: What happened to a partition (the `decision` label of metrics and audit).
FORWARDED: Final = "forwarded"
RAISED_BY_FLOOR: Final = "raised_by_floor"
ANSWERED_NOT_ENOUGH_REPLICAS: Final = "answered_not_enough_replicas"
ANSWERED_INVALID_REQUIRED_ACKS: Final = "answered_invalid_required_acks"

#: (topic or topic id, partition, record bytes, records): one partition of a Produce request.
PartitionRecords = tuple[str | uuid.UUID, int, int, int]

_I16: Final = struct.Struct(">h")
_NOT_ENOUGH_REPLICAS: Final = int(ErrorCode.NOT_ENOUGH_REPLICAS)


class ProduceWalk:
    """One Produce request, walked once for every behaviour that reads it (a plain class: built per request,
    see `SlottedRecord`). `acks` is read when it is built; a frame without a readable acks raises there."""

    __slots__ = ("_error", "_index", "_partitions", "acks", "acks_offset", "frame")

    def __init__(self, frame: memoryview) -> None:
        self.frame = frame
        self.acks_offset = produce_acks_offset(frame)
        self.acks: int = _I16.unpack_from(frame, self.acks_offset)[0]
        self._index: ProduceRequestIndex | None = None
        self._partitions: list[PartitionRecords] | None = None
        self._error: ProtocolError | None = None

    def index(self) -> ProduceRequestIndex:
        """The request indexed byte by byte (what the decision needs to answer or split it)."""
        index = self._index
        if index is None:
            index = self._index = index_produce_request(self.frame)
        return index

    def partitions(self) -> list[PartitionRecords]:
        """Every partition with its record bytes and count, in request order; raises ProtocolError (each time)
        when the request does not read cleanly. From the index when there is one (or will be: acks -2 and
        invalid values are always decided from it), else from the lean walk."""
        partitions = self._partitions
        if partitions is None:
            if self._error is not None:
                raise self._error
            try:
                if self._index is None and -1 <= self.acks <= 1:
                    partitions = produce_partition_records(self.frame, self.acks_offset)[1]
                else:
                    partitions = _records(self.index())
            except ProtocolError as exc:
                self._error = exc
                raise
            self._partitions = partitions
        return partitions


def _records(index: ProduceRequestIndex) -> list[PartitionRecords]:
    frame = index.frame
    return [(span.topic, span.partition, max(span.records_size, 0),
             count_records(frame, span.records_start, span.records_size) if span.records_size > 0 else 0)
            for span in index.partitions()]


def produce_walk(exchange: Exchange) -> ProduceWalk:
    """The exchange's walk, attached by the first behaviour that asks (raises ProtocolError without acks)."""
    walk = exchange.get(ProduceWalk)
    if walk is None:
        walk = ProduceWalk(exchange.request_frame)
        exchange.put(walk)
    return walk


def produce_response_scan(exchange: Exchange) -> ProduceResponseScan | None:
    """The exchange's response scanned once, kept on it under its class (the address rewrite puts it there
    first for Produce v10+). None: no response (acks=0) or one that does not read cleanly."""
    scan = exchange.get(ProduceResponseScan)
    if scan is None:
        response = exchange.response
        if response is None:
            return None
        try:
            scan = scan_produce_response(response, exchange.api_version)
        except ProtocolError:
            return None
        exchange.put(scan)
    return scan


class ProduceDecisions:
    """The acks decision of one Produce exchange, for the accounting and the ISR learning (a plain class:
    built per decided request, see `SlottedRecord`). An exchange without one was forwarded as it came."""

    __slots__ = ("acks_sent", "floor_topics", "proxy_errors", "readiness")

    def __init__(self, acks_sent: int | None, proxy_errors: dict[PartitionKey, int], floor_topics: set[str] | None,
                 readiness: list[Readiness] | None) -> None:
        #: The acks the forwarded partitions went upstream with (None: nothing was forwarded).
        self.acks_sent = acks_sent
        #: Partitions the proxy answered itself (never forwarded), with the error code it answered.
        self.proxy_errors = proxy_errors
        #: Topics whose acks_floor raised the request's acks.
        self.floor_topics = floor_topics
        #: Each partition's ISR against its min ISR when the decision was taken, in request order (if known).
        self.readiness = readiness

    def outcome(self, key: PartitionKey, name: str) -> tuple[str, int | None, int | None]:
        """(decision label, acks sent, the proxy's error code or None) of one partition."""
        code = self.proxy_errors.get(key) if self.proxy_errors else None
        if code is not None:
            label = ANSWERED_NOT_ENOUGH_REPLICAS if code == _NOT_ENOUGH_REPLICAS else ANSWERED_INVALID_REQUIRED_ACKS
            return label, None, code
        floor = self.floor_topics
        return RAISED_BY_FLOOR if floor and name in floor else FORWARDED, self.acks_sent, None
