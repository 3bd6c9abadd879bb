"""Metadata: rewrite broker addresses, add each topic's min.insync.replicas (KIP-637), learn the ISR view.

One walk over the response bytes (`scan_metadata_response`) yields what every step needs: the
brokers (listeners for new ones are opened before the client reads the answer), each partition's
leader, replicas and ISR (read on demand from the scan, for the ISR view), and the offsets the splice
rewrites from (`splice_metadata_response`: tag 637, listener addresses, hidden partitions, or
KIP-637's literal layout) without walking again. Only topics present in the broker's answer to this
client are enriched, so nothing about other topics is revealed. The topics a request names come into use
(min_insync.py `TopicDemand`): the proxy follows them. Clients' answers teach the ISR view of the topics in
use only (an all-topics answer of 3,000 topics then costs what its few topics in use do), at most once a
second, after the answer is on its way (except on `hide_unready_partitions` listeners, which decide on
this very answer's ISR: they learn every topic of it). An answer of more than `SLICE_TOPICS` topics is
scanned, learnt and spliced in slices of that many, the event loop running other connections' work between
them (`BehaviourContext.pause`): a 10,000-topic answer does not hold the loop for its whole cost.
"""

from __future__ import annotations

import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from insync_proxy.protocol import (
    NO_SUCH_TOPIC_ERRORS,
    ApiKey,
    MetadataScan,
    MetadataScanner,
    MetadataSplicer,
    ProtocolError,
    ScannedTopic,
    decode_request,
    decode_request_header,
    encode_request,
    encode_request_header,
    peek_request_header,
)
from insync_proxy.protocol.primitives import read_uvarint_at
from insync_proxy.proxy.behaviours.api_versions import KIP637_METADATA_VERSION
from insync_proxy.proxy.controlplane.context import BehaviourContext
from insync_proxy.proxy.datapath.exchange import (
    FORWARD,
    BehaviourBase,
    Exchange,
    Frame,
    RequestResult,
    forward,
)

log: Final = logging.getLogger("insync_proxy.metadata")

#: Clients' Metadata answers update the ISR view at most this often.
LEARN_INTERVAL_SECONDS: Final = 1.0

#: The real Metadata version a KIP-637 "v10" request is sent upstream as.
KIP637_UPSTREAM_VERSION: Final = 9

#: An answer of more topics is worked on in slices of this many, the event loop free between them: a slice
#: costs ~0.5 ms compiled (~2 ms interpreted), where a whole 10,000-topic answer costs 10-80 ms.
SLICE_TOPICS: Final = 500


@dataclass(frozen=True, slots=True)
class Kip637Request:
    """MetadataEnricher's state: this exchange is KIP-637's "v10", sent upstream as v9."""

    upstream_version: int


@dataclass(frozen=True, slots=True)
class NamedTopics:
    """MetadataEnricher's state: this request named its topics (not all topics): they come into use."""


NAMED_TOPICS: Final = NamedTopics()


def names_topics(request_frame: memoryview) -> bool:
    """True when a Metadata request names topics (an array of one or more); False for all topics (null, or
    v0's empty array) and for none (an empty array, v1+: brokers only)."""
    peek = peek_request_header(request_frame)
    offset = peek.header_size
    if peek.api_version >= 9:
        compact_count: int = read_uvarint_at(request_frame, offset)[0]
        return compact_count > 1  # compact: n + 1, 0 for null
    count: int = struct.unpack_from(">i", request_frame, offset)[0]
    return count > 0


class _MinInsyncLookup:
    """What the splice needs of one answer: the cached values of its topics (a plain dict: the splice asks it
    once per topic), and the topics it had to leave out; hits and misses counted once per answer.

    The topics the broker answered as not there (`NO_SUCH_TOPIC_ERRORS`: a made-up name, one the client may not
    see) are not looked up: their answer has no partitions, so nothing to splice, and a client naming random
    topics must not make the proxy send DescribeConfigs, wait, or keep back-off entries for them."""

    __slots__ = ("values", "missing", "hits", "names", "by_name", "found")

    def __init__(self, context: BehaviourContext, scan: MetadataScan, count: bool = True) -> None:
        view = context.cluster_view
        names: list[str] = []
        by_id: dict[str, uuid.UUID] = {}
        for topic in scan.topics:
            if topic.error_code in NO_SUCH_TOPIC_ERRORS:
                continue
            name = topic.name
            if name is None and topic.topic_id is not None:
                name = view.topic_ids.get(topic.topic_id)
                if name is not None:
                    by_id[name] = topic.topic_id
            if name is not None:
                names.append(name)
        found = self.found = context.min_insync.values_for(names, count)  #: the cache's answer (for `served`)
        values = found.values
        self.missing = found.missing  #: the topics with no value to serve (the miss path)
        self.names = names  #: the topics looked up
        self.by_name = values  #: their values to serve, fresh or stale (by name only)
        self.hits = len(values)
        self.values: dict[str | uuid.UUID, int] = {}
        self.values.update(values)
        for name, topic_id in by_id.items():
            value = values.get(name)
            if value is not None:
                self.values[topic_id] = value


class _SplicedAnswer:
    """A big all-topics answer as last spliced for one listener, version and layout: the next answer of the same
    bytes (but its correlation id and controller id), while the min.insync.replicas values it carries are the
    cache's ones (fresh or served stale), is the same splice with those two ids."""

    __slots__ = ("listener", "controller_at", "original", "spliced", "spliced_controller_at", "scan", "names",
                 "values", "hits", "size")

    def __init__(self, listener: object, scan: MetadataScan, spliced: bytes, lookup: _MinInsyncLookup) -> None:
        self.listener = listener  #: the ListenerSettings it was spliced for (a reload makes new ones)
        #: Where the controller id is in the broker's answer, and in ours (-1: none, v0)
        self.controller_at = scan.controller_id_start
        self.spliced_controller_at = -1 if self.controller_at < 0 else \
            MetadataScanner(spliced, scan.api_version).controller_id_start
        #: The broker's answer after its correlation id, its controller id zeroed
        self.original = _without_controller(scan.frame, self.controller_at)
        self.spliced = spliced[4:]  #: the proxy's answer after its correlation id
        self.scan = scan  #: for the ISR view (the same bytes: the same partitions)
        self.names = lookup.names
        self.values = lookup.by_name
        self.hits = lookup.hits
        #: What keeping it costs, about: the scan's topic tuples, the broker's bytes and the splice (measured
        #: 8.2x the answer for 3,000 topics, 7.6x for 10,000).
        self.size = KEPT_BYTES_PER_ANSWER_BYTE * len(scan.frame)

    def same_bytes(self, frame: Frame) -> bool:
        """The broker's `frame` is this answer's, but for its correlation id and controller id."""
        return len(frame) == len(self.original) + 4 and _without_controller(frame, self.controller_at) == self.original

    def answer(self, frame: Frame) -> bytearray:
        """The kept splice with `frame`'s correlation id and controller id."""
        out = bytearray(frame[:4])
        out += self.spliced
        if self.controller_at >= 0:
            at = self.spliced_controller_at
            out[at:at + 4] = frame[self.controller_at:self.controller_at + 4]
        return out


def _without_controller(frame: Frame, controller_at: int) -> bytearray:
    """`frame` after its correlation id, with its controller id (KRaft: a random live broker) zeroed."""
    rest = bytearray(frame[4:])
    if controller_at >= 0:
        rest[controller_at - 4:controller_at] = b"\0\0\0\0"
    return rest


#: Listener, version and layout combinations whose last big answer is kept.
_SPLICED_ANSWERS_MAX: Final = 4
#: What the kept answers may hold in all (`MetadataEnricher.kept_bytes_max`): 2.9 MB for a 3,000-topic answer,
#: 8.8 MB for 10,000; an answer of more than ~18,000 topics is not kept (each of its repeats scanned again).
KEPT_BYTES_MAX: Final = 16 * 1024 * 1024
KEPT_BYTES_PER_ANSWER_BYTE: Final = 8


class _UnreadyPartitions:
    """(topic, partition) whose ISR is below the effective min ISR in the proxy's view."""

    def __init__(self, context: BehaviourContext) -> None:
        self.context = context
        self.hidden = 0

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple):
            return False
        topic: str = key[0]
        partition: int = key[1]
        context = self.context
        if context.cluster_view.readiness(topic, partition, context.min_insync.peek(topic)).below_min_isr:
            self.hidden += 1
            return True
        return False


class MetadataEnricher(BehaviourBase):
    """Address rewrite + min.insync.replicas enrichment of Metadata responses, and the ISR view."""

    request_keys = frozenset({ApiKey.METADATA})
    response_keys = frozenset({ApiKey.METADATA})

    def __init__(self, context: BehaviourContext) -> None:
        self.context = context
        self._last_learnt = 0.0
        #: (listener name, upstream version, KIP-637 layout) -> its last big all-topics answer, spliced.
        self._spliced: dict[tuple[str, int, bool], _SplicedAnswer] = {}
        self.kept_bytes_max = KEPT_BYTES_MAX

    def on_request(self, exchange: Exchange) -> RequestResult:
        result = FORWARD
        if exchange.listener.metadata_schema == "kip637" and exchange.api_version == KIP637_METADATA_VERSION:
            # KIP-637's "v10" is Kafka's v9 plus one field: ask the broker for v9.
            header, offset = decode_request_header(exchange.request_frame)
            request = decode_request(ApiKey.METADATA, KIP637_METADATA_VERSION, exchange.request_frame[offset:])
            result = forward(encode_request_header(
                replace(header, request_api_version=KIP637_UPSTREAM_VERSION)
            ) + encode_request(request, KIP637_UPSTREAM_VERSION))
            exchange.put(Kip637Request(KIP637_UPSTREAM_VERSION))
        try:
            if names_topics(exchange.request_frame):
                exchange.put(NAMED_TOPICS)
        except (ProtocolError, IndexError, struct.error) as exc:
            log.debug("cannot read the topics of a Metadata v%d request: %s", exchange.api_version, exc)
        return result

    def on_response(self, exchange: Exchange, frame: Frame) -> Frame | Awaitable[Frame]:
        kip637 = exchange.get(Kip637Request)
        version = kip637.upstream_version if kip637 is not None else exchange.api_version
        if self._spliced:
            same = self._same_answer(exchange, frame, (exchange.listener.name, version, kip637 is not None))
            if same is not None:
                return same
        scanner = MetadataScanner(frame, version, partition_offsets=exchange.listener.hide_unready_partitions)
        if scanner.topic_count > SLICE_TOPICS:
            return self._in_slices(exchange, scanner)
        scanner.step(scanner.topic_count)
        scan = scanner.scan()
        if exchange.get(NamedTopics) is not None:
            self._in_use(scan)
        listeners = exchange.listener.broker_listeners
        if any(b.node_id not in listeners for b in scan.brokers):
            # A client may connect to a broker's listener as soon as it reads this answer.
            return self._after_listeners(exchange, scan)
        return self._enrich(exchange, scan)

    async def _in_slices(self, exchange: Exchange, scanner: MetadataScanner) -> Frame:
        """A big answer, the same steps as `on_response`'s in slices of `SLICE_TOPICS` topics, the loop free between."""
        pause = self.context.pause
        while not scanner.step(SLICE_TOPICS):
            await pause()
        scan = scanner.scan()
        if exchange.get(NamedTopics) is not None:
            self._in_use(scan)
        listeners = exchange.listener.broker_listeners
        if any(b.node_id not in listeners for b in scan.brokers):
            self._learn(scan)
            await self.context.open_broker_listeners()
        if exchange.listener.hide_unready_partitions:
            for first in range(0, len(scan.topics), SLICE_TOPICS):
                await pause()
                self._learn(scan, every_topic=True, topics=scan.topics[first:first + SLICE_TOPICS])
        lookup = _MinInsyncLookup(self.context, scan)
        if lookup.missing and self.context.min_insync.miss_wait > 0:
            await self.context.min_insync.wait_for(lookup.missing)
            lookup = _MinInsyncLookup(self.context, scan, count=False)
        splicer, unready = self._splicer(exchange, scan, lookup)
        while True:
            await pause()
            if splicer.step(SLICE_TOPICS):
                break
        self._count_hidden(unready)
        new = splicer.frame()
        if not lookup.missing and unready is None and exchange.get(NamedTopics) is None:
            self._keep(exchange, scan, new, lookup)
        return self._finish(exchange, scan, new, lookup)

    def _keep(self, exchange: Exchange, scan: MetadataScan, new: bytes, lookup: _MinInsyncLookup) -> None:
        """Keep a big all-topics answer (every topic with a value to serve) for the next one of the same bytes."""
        kip637 = exchange.get(Kip637Request)
        key = (exchange.listener.name, scan.api_version, kip637 is not None)
        spliced = self._spliced
        spliced.pop(key, None)
        kept = _SplicedAnswer(exchange.listener, scan, new, lookup)
        if kept.size > self.kept_bytes_max:
            return
        while spliced and (len(spliced) >= _SPLICED_ANSWERS_MAX
                           or sum(a.size for a in spliced.values()) + kept.size > self.kept_bytes_max):
            del spliced[next(iter(spliced))]
        spliced[key] = kept

    def _same_answer(self, exchange: Exchange, frame: Frame, key: tuple[str, int, bool]) -> bytearray | None:
        """The kept splice when this answer is the kept one's bytes (all topics asked, the same listener) and the
        values it carries are still the cache's (fresh or served stale): a copy and a compare instead of a scan and
        a splice."""
        last = self._spliced.get(key)
        if (last is None or last.listener is not exchange.listener or exchange.get(NamedTopics) is not None
                or not last.same_bytes(frame)):
            return None
        min_insync = self.context.min_insync
        found = min_insync.values_for(last.names, count=False)
        if found.missing or found.values != last.values:
            return None  # the slow path looks (and counts) again
        min_insync.count_lookups(len(found.values), 0)
        min_insync.served(found)
        if last.hits:
            self.context.metrics.topics_enriched_total.inc(last.hits)
        self._learn_soon(last.scan)
        return last.answer(frame)

    def _in_use(self, scan: MetadataScan) -> None:
        """The topics a request named (and the broker knows) come into use: the proxy follows them."""
        touch, view = self.context.min_insync.demand.touch, self.context.cluster_view
        for topic in scan.topics:
            if topic.error_code != 0:
                continue
            name = topic.name
            if name is None and topic.topic_id is not None:
                name = view.topic_ids.get(topic.topic_id)
            if name is not None:
                touch(name)

    async def _after_listeners(self, exchange: Exchange, scan: MetadataScan) -> Frame:
        self._learn(scan)
        await self.context.open_broker_listeners()
        result = self._enrich(exchange, scan)
        return result if isinstance(result, bytes | bytearray | memoryview) else await result

    def _enrich(self, exchange: Exchange, scan: MetadataScan) -> Frame | Awaitable[Frame]:
        if exchange.listener.hide_unready_partitions:
            self._learn(scan, every_topic=True)  # decide on this answer's own ISR
        lookup = _MinInsyncLookup(self.context, scan)
        new = self._splice(exchange, scan, lookup)
        if lookup.missing and self.context.min_insync.miss_wait > 0:
            return self._after_fetch(exchange, scan, lookup.missing)
        return self._finish(exchange, scan, new, lookup)

    async def _after_fetch(self, exchange: Exchange, scan: MetadataScan, missing: list[str]) -> Frame:
        await self.context.min_insync.wait_for(missing)
        lookup = _MinInsyncLookup(self.context, scan, count=False)
        new = self._splice(exchange, scan, lookup)
        return self._finish(exchange, scan, new, lookup)

    def _splice(self, exchange: Exchange, scan: MetadataScan, lookup: _MinInsyncLookup) -> bytes:
        splicer, unready = self._splicer(exchange, scan, lookup)
        splicer.step(len(scan.topics))
        self._count_hidden(unready)
        return splicer.frame()

    def _splicer(self, exchange: Exchange, scan: MetadataScan, lookup: _MinInsyncLookup
                 ) -> tuple[MetadataSplicer, _UnreadyPartitions | None]:
        addresses = exchange.listener.addresses
        unready = _UnreadyPartitions(self.context) if exchange.listener.hide_unready_partitions else None
        splicer = MetadataSplicer(
            scan,
            min_insync_replicas=lookup.values,
            broker_addresses={b.node_id: addresses[b.node_id] for b in scan.brokers},
            leaderless=unready,
            layout="kip637" if exchange.get(Kip637Request) is not None else "kafka",
        )
        return splicer, unready

    def _count_hidden(self, unready: _UnreadyPartitions | None) -> None:
        if unready is not None and unready.hidden:
            self.context.metrics.partitions_hidden_total.inc(unready.hidden)

    def _finish(self, exchange: Exchange, scan: MetadataScan, new: bytes, lookup: _MinInsyncLookup) -> bytes:
        # What was missing or served stale is read for next time, in the background: never a longer wait.
        self.context.min_insync.served(lookup.found)
        if lookup.hits:
            self.context.metrics.topics_enriched_total.inc(lookup.hits)
        if not exchange.listener.hide_unready_partitions:
            # Reading every partition costs more than the answer itself: learn at most once a second
            # from clients' answers (the proxy's own refresh keeps the view current between them).
            self._learn_soon(scan)
        return new

    def _learn_soon(self, scan: MetadataScan) -> None:
        """Teach the ISR view this answer's topics in use after it is on its way, at most once a second."""
        now = time.monotonic()
        if now - self._last_learnt >= LEARN_INTERVAL_SECONDS:
            self._last_learnt = now
            self.context.call_soon(lambda: self._learn(scan))

    def _learn(self, scan: MetadataScan, every_topic: bool = False, topics: Sequence[ScannedTopic] | None = None
               ) -> None:
        """Teach the ISR view this answer's topics in use (every topic: for a hide_unready_partitions listener);
        with `topics`, only those of the answer's topics (a slice)."""
        try:
            self.context.cluster_view.update_from_scan(
                scan, only=None if every_topic else self.context.min_insync.demand, topics=topics)
        except ProtocolError as exc:
            log.debug("could not learn from a Metadata v%d response: %s", scan.api_version, exc)
