"""What the Produce behaviours share of one exchange: its request walked once, its answer scanned once, the
acks decision.

Four behaviours handle Produce, one concern each, registered in this order (proxy/server.py):

1. `TopicIdResolution` (topic_ids.py): Produce v13 names topics by id; unknown ids are looked up first,
   since everything after it works with names.
2. `AcksPolicy` (acks.py): the acks decision (KIP-926 acks=-2, KIP-1, fast_fail, acks_floor).
3. `ProduceAccounting` (accounting.py): the per-topic metrics and the audit summary, counted at completion.
4. `IsrLearning` (isr_learning.py): at completion, after the accounting, the leaders' errors teach the ISR view.

None of them walks the frame itself, nor keeps another's state: they share the exchange's `ProduceExchange`
(`produce_exchange(exchange)`, attached by the first that asks: the id resolution for v13, else the
decision). It walks the request once, when it is built, while the frame is fresh in the CPU's caches
(measured: a fifth of the cost of the same walk when the response comes back): the lean walk of the
partitions' records (`produce_partition_records`) for acks -1, 0 and 1, the `ProduceRequestIndex` for acks=-2
and invalid values, which the decision always answers or rewrites from. A policy that makes the decision
answer an acks -1 or 1 request itself (fast_fail, an acks_floor of -2) indexes it then. It scans the
broker's answer once (the address rewrite's scan of Produce v10+ answers, kept on the exchange under its
class, when there is one). And it carries the decision's outcome (`ProduceDecisions`), which the two at
completion read.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

from insync_proxy.protocol import (
    ErrorCode,
    ProduceResponseScan,
    ProtocolError,
    index_produce_request,
    produce_acks_offset,
    scan_produce_response,
)
from insync_proxy.protocol.native import int16_at as _core_int16_at
from insync_proxy.protocol.produce import (
    PartitionKey,
    ProduceRequestIndex,
    produce_partition_records,
    walk_produce_exchange,
)
from insync_proxy.proxy.datapath.cluster_view import Readiness
from insync_proxy.proxy.datapath.exchange import Exchange, Frame

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


class ProduceDecisions:
    """The acks decision of one Produce exchange (a plain class: built per decided request, see
    `SlottedRecord`). An exchange without one was forwarded as it came."""

    __slots__ = ("acks_sent", "codes", "floor_topics", "proxy_errors", "readiness")

    def __init__(self, acks_sent: int | None, codes: list[int], proxy_errors: dict[PartitionKey, int],
                 floor_topics: set[str] | None, readiness: list[Readiness] | None) -> None:
        #: The acks the forwarded partitions went upstream with (None: nothing was forwarded).
        self.acks_sent = acks_sent
        #: Per partition, in request order: 0 when it was forwarded, else the error code the proxy answered.
        self.codes = codes
        #: The partitions the proxy answered itself (never forwarded), with that code.
        self.proxy_errors = proxy_errors
        #: Topics whose acks_floor raised the request's acks.
        self.floor_topics = floor_topics
        #: Each partition's ISR against its min ISR when the decision was taken, in request order (if known).
        self.readiness = readiness

    def outcome(self, i: int, name: str) -> tuple[str, int | None, int | None]:
        """(decision label, acks sent, the proxy's own error code or None) of the request's i-th partition."""
        code = self.codes[i]
        if code:
            label = ANSWERED_NOT_ENOUGH_REPLICAS if code == _NOT_ENOUGH_REPLICAS else ANSWERED_INVALID_REQUIRED_ACKS
            return label, None, code
        floor = self.floor_topics
        return RAISED_BY_FLOOR if floor and name in floor else FORWARDED, self.acks_sent, None


class ProduceExchange:
    """A Produce exchange as its behaviours share it (a plain class: built per request, see `SlottedRecord`).
    Built when the request arrives: a request without a readable acks raises ProtocolError there; one that
    does not read cleanly past it raises when its partitions are asked for."""

    __slots__ = ("_error", "_index", "_partitions", "_scan", "_scanned", "acks", "acks_offset", "decisions", "frame")

    def __init__(self, frame: memoryview, header_size: int = -1) -> None:
        """`header_size`: the request header's size, when read already (the exchange's peek)."""
        self.frame = frame
        #: The acks decision's outcome (AcksPolicy's), None when the request went as it came.
        self.decisions: ProduceDecisions | None = None
        self._index: ProduceRequestIndex | None = None
        self._partitions: list[PartitionRecords] | None = None
        self._error: ProtocolError | None = None
        self._scan: ProduceResponseScan | None = None
        self._scanned = False
        walked = walk_produce_exchange(frame, header_size)  # the compiled core reads all three at once
        if walked is not None:
            self.acks_offset, self.acks, self._partitions = walked
            if self._partitions is not None:
                return
        else:
            self.acks_offset = produce_acks_offset(frame, header_size)
            int16_at = _core_int16_at  # the compiled core's (protocol/native.py); one lookup of the module global
            acks = None if int16_at is None else int16_at(frame, self.acks_offset)
            self.acks = _I16.unpack_from(frame, self.acks_offset)[0] if acks is None else acks
        try:
            if -1 <= self.acks <= 1:
                self._partitions = produce_partition_records(frame, self.acks_offset)[1]
            else:
                self._partitions = _records(self.index())
        except ProtocolError as exc:
            self._error = exc

    def index(self) -> ProduceRequestIndex:
        """The request indexed byte by byte (what the decision answers or splits it with)."""
        index = self._index
        if index is None:
            index = self._index = index_produce_request(self.frame, self.acks_offset)
        return index

    def partitions(self) -> list[PartitionRecords]:
        """Every partition with its record bytes and count, in request order; raises ProtocolError when the
        request does not read cleanly."""
        partitions = self._partitions
        if partitions is None:
            assert self._error is not None
            raise self._error
        return partitions

    def scan_response(self, frame: Frame, api_version: int) -> ProduceResponseScan | None:
        """The broker's answer, scanned once: what the address rewrite (node_endpoints, v10+) and the completion's
        accounting both read. None: it does not read cleanly (the full decode then says what is wrong)."""
        if not self._scanned:
            self._scanned = True
            try:
                self._scan = scan_produce_response(frame, api_version)
            except ProtocolError:
                self._scan = None
        return self._scan

    def response_scan(self, exchange: Exchange) -> ProduceResponseScan | None:
        """The answer's scan at completion: the one the address rewrite took, else the response written to the
        client, scanned now (the same partitions and codes). None: no response (acks=0) or one that does not read
        cleanly."""
        if not self._scanned and exchange.response is not None:
            return self.scan_response(exchange.response, exchange.api_version)
        return self._scan


def _records(index: ProduceRequestIndex) -> list[PartitionRecords]:
    return [(span.topic, span.partition, max(span.records_size, 0),
             index.record_count(span) if span.records_size > 0 else 0)
            for topic in index.topics for span in topic.partitions]


def produce_exchange(exchange: Exchange) -> ProduceExchange:
    """The exchange's shared Produce state, attached by the first behaviour that asks (raises ProtocolError
    when the request has no readable acks)."""
    shared = exchange.shared
    if isinstance(shared, ProduceExchange):
        return shared
    made = exchange.shared = ProduceExchange(exchange.request_frame, exchange.header_size)
    return made
