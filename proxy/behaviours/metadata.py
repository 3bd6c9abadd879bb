"""Metadata: rewrite broker addresses, add each topic's min.insync.replicas (KIP-637), learn the ISR view.

All of it in one pass over the response bytes (protocol.enrich_metadata_response): re-encoding a
whole MetadataResponse costs per field, the splice costs per topic. Only topics present in the
broker's answer to this client are enriched, so nothing about other topics is revealed. The ISR view
is learnt from a full decode scheduled after the response is written, off the client's latency path
(except on `hide_unready_partitions` listeners, which decide on this very answer's ISR).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import dataclass, replace

from insync_proxy.protocol import (
    ApiKey,
    MetadataResponse,
    MetadataResponseKip637,
    ProtocolError,
    decode_request,
    decode_request_header,
    decode_response,
    encode_metadata_response_kip637,
    encode_request,
    encode_request_header,
    encode_response_with_header,
    enrich_metadata_response,
    split_response,
)
from insync_proxy.protocol.headers import response_header_version
from insync_proxy.protocol.messages import Kip637MetadataResponseTopic
from insync_proxy.protocol.primitives import Reader
from insync_proxy.proxy.behaviours.api_versions import KIP637_METADATA_VERSION
from insync_proxy.proxy.context import BehaviourContext
from insync_proxy.proxy.exchange import BehaviourBase, Exchange, Frame

log = logging.getLogger("insync_proxy.metadata")

#: Clients' Metadata answers update the ISR view at most this often.
LEARN_INTERVAL_SECONDS = 1.0

#: The real Metadata version a KIP-637 "v10" request is sent upstream as.
KIP637_UPSTREAM_VERSION = 9


def metadata_broker_ids(frame: Frame, version: int) -> list[int]:
    """Node ids of a MetadataResponse's brokers, reading only the brokers array."""
    r = Reader(frame)
    r.int32()
    flexible = version >= 9
    if response_header_version(ApiKey.METADATA, version) >= 1:
        r.tagged_fields()
    if version >= 3:
        r.int32()
    ids = []
    for _ in range(max(r.array_length(flexible), 0)):
        ids.append(r.int32())
        r.compact_string() if flexible else r.string()
        r.int32()
        if version >= 1:
            r.compact_nullable_string() if flexible else r.nullable_string()
        if flexible:
            r.tagged_fields()
    return ids


@dataclass(frozen=True, slots=True)
class Kip637Request:
    """MetadataEnricher's state: this exchange is KIP-637's "v10", sent upstream as v9."""

    upstream_version: int


class _MinInsyncLookup(Mapping[str | uuid.UUID, int]):
    """What the splice asks per topic: the cached value; records the topics it had to leave out."""

    def __init__(self, context: BehaviourContext) -> None:
        self.cache = context.min_insync
        self.view = context.cluster_view
        self.missing: list[str] = []
        self.hits = 0

    def __getitem__(self, topic: str | uuid.UUID) -> int:
        name = self.view.topic_name(topic)
        value = self.cache.get(name) if name is not None else None
        if value is None:
            if name is not None and not self.cache.has_fresh(name):
                self.missing.append(name)
            raise KeyError(topic)
        self.hits += 1
        return value

    def __iter__(self) -> Iterator[str | uuid.UUID]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return True


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

    def on_request(self, exchange: Exchange) -> None:
        if exchange.listener.metadata_schema == "kip637" and exchange.api_version == KIP637_METADATA_VERSION:
            # KIP-637's "v10" is Kafka's v9 plus one field: ask the broker for v9.
            header, offset = decode_request_header(exchange.request_frame)
            request = decode_request(ApiKey.METADATA, KIP637_METADATA_VERSION, exchange.request_frame[offset:])
            exchange.upstream_frame = encode_request_header(
                replace(header, request_api_version=KIP637_UPSTREAM_VERSION)
            ) + encode_request(request, KIP637_UPSTREAM_VERSION)
            exchange.put(Kip637Request(KIP637_UPSTREAM_VERSION))

    def on_response(self, exchange: Exchange, frame: Frame) -> Frame | Awaitable[Frame]:
        kip637 = exchange.get(Kip637Request)
        version = kip637.upstream_version if kip637 is not None else exchange.api_version
        broker_ids = metadata_broker_ids(frame, version)
        listeners = exchange.listener.broker_listeners
        if any(node_id not in listeners for node_id in broker_ids):
            # A client may connect to a broker's listener as soon as it reads this answer.
            return self._after_listeners(exchange, frame, version, broker_ids)
        return self._enrich(exchange, frame, version, broker_ids)

    async def _after_listeners(self, exchange: Exchange, frame: Frame, version: int, broker_ids: list[int]) -> Frame:
        self._learn(frame, version)
        await self.context.open_broker_listeners()
        result = self._enrich(exchange, frame, version, broker_ids)
        return await result if not isinstance(result, bytes | bytearray | memoryview) else result

    def _enrich(self, exchange: Exchange, frame: Frame, version: int, broker_ids: list[int]) -> Frame | Awaitable[Frame]:
        if exchange.listener.hide_unready_partitions:
            self._learn(frame, version)  # decide on this answer's own ISR
        lookup = _MinInsyncLookup(self.context)
        new = self._splice(exchange, frame, version, broker_ids, lookup)
        if lookup.missing and self.context.min_insync.miss_wait > 0:
            return self._after_fetch(exchange, frame, version, broker_ids, lookup.missing)
        return self._finish(exchange, frame, new, version, lookup)

    async def _after_fetch(
        self, exchange: Exchange, frame: Frame, version: int, broker_ids: list[int], missing: list[str]
    ) -> Frame:
        await self.context.min_insync.wait_for(missing)
        lookup = _MinInsyncLookup(self.context)
        new = self._splice(exchange, frame, version, broker_ids, lookup)
        return self._finish(exchange, frame, new, version, lookup)

    def _splice(
        self, exchange: Exchange, frame: Frame, version: int, broker_ids: list[int], lookup: _MinInsyncLookup
    ) -> bytes:
        addresses = exchange.listener.addresses
        unready = _UnreadyPartitions(self.context) if exchange.listener.hide_unready_partitions else None
        new = enrich_metadata_response(
            frame,
            version,
            min_insync_replicas=lookup,
            broker_addresses={node_id: addresses[node_id] for node_id in broker_ids},
            leaderless=unready,
        )
        if unready is not None and unready.hidden:
            self.context.metrics.partitions_hidden_total.inc(unready.hidden)
        return new

    def _finish(self, exchange: Exchange, original: Frame, new: bytes, version: int, lookup: _MinInsyncLookup) -> Frame:
        if lookup.missing:
            self.context.min_insync.fetch(lookup.missing)  # for next time: never block a client longer
        if lookup.hits:
            self.context.metrics.topics_enriched_total.inc(lookup.hits)
        if not exchange.listener.hide_unready_partitions:
            # A full decode costs far more than the answer itself: learn at most once a second from
            # clients' answers (the proxy's own refresh keeps the view current between them).
            now = time.monotonic()
            if now - self._last_learnt >= LEARN_INTERVAL_SECONDS:
                self._last_learnt = now
                self.context.call_soon(lambda: self._learn(original, version))
        if exchange.get(Kip637Request) is not None:
            return self._to_kip637_layout(exchange, new)
        return new

    def _to_kip637_layout(self, exchange: Exchange, frame: bytes) -> bytes:
        correlation_id, body = split_response(frame, ApiKey.METADATA, KIP637_UPSTREAM_VERSION)
        response = decode_response(ApiKey.METADATA, KIP637_UPSTREAM_VERSION, body)
        assert isinstance(response, MetadataResponse)
        kip637 = MetadataResponseKip637(
            throttle_time_ms=response.throttle_time_ms,
            brokers=response.brokers,
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
            topics=tuple(
                Kip637MetadataResponseTopic(
                    error_code=t.error_code,
                    name=t.name or "",
                    is_internal=t.is_internal,
                    partitions=t.partitions,
                    topic_authorized_operations=t.topic_authorized_operations,
                    min_insync_replicas=t.min_insync_replicas,
                )
                for t in response.topics
            ),
            cluster_authorized_operations=response.cluster_authorized_operations,
        )
        return encode_response_with_header(
            ApiKey.METADATA, KIP637_METADATA_VERSION, correlation_id, encode_metadata_response_kip637(kip637)
        )

    def _learn(self, frame: Frame, version: int) -> None:
        try:
            _, body = split_response(frame, ApiKey.METADATA, version)
            response = decode_response(ApiKey.METADATA, version, body)
        except ProtocolError as exc:
            log.debug("could not learn from a Metadata v%d response: %s", version, exc)
            return
        assert isinstance(response, MetadataResponse)
        self.context.cluster_view.update(response)
