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
from dataclasses import replace
from typing import TYPE_CHECKING

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
from insync_proxy.proxy.exchange import Exchange, Frame
from insync_proxy.proxy.min_insync import effective_min_isr

if TYPE_CHECKING:
    from insync_proxy.proxy.server import InsyncProxy

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


class _MinInsyncLookup(Mapping[str | uuid.UUID, int]):
    """What the splice asks per topic: the cached value; records the topics it had to leave out."""

    def __init__(self, proxy: InsyncProxy) -> None:
        self.cache = proxy.min_insync
        self.view = proxy.cluster_view
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

    def __init__(self, proxy: InsyncProxy) -> None:
        self.proxy = proxy
        self.hidden = 0

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple):
            return False
        topic: str = key[0]
        partition: int = key[1]
        state = self.proxy.cluster_view.partition(topic, partition)
        if state is None:
            return False
        min_isr = effective_min_isr(self.proxy.min_insync.peek(topic), len(state.replicas))
        if min_isr is not None and len(state.isr) < min_isr:
            self.hidden += 1
            return True
        return False


class MetadataEnricher:
    """Address rewrite + min.insync.replicas enrichment of Metadata responses, and the ISR view."""

    request_keys = frozenset({ApiKey.METADATA})
    response_keys = frozenset({ApiKey.METADATA})

    def __init__(self, proxy: InsyncProxy) -> None:
        self.proxy = proxy
        self._last_learnt = 0.0

    def on_request(self, exchange: Exchange) -> None:
        group = exchange.connection.listener.group
        if group.config.metadata_schema == "kip637" and exchange.api_version == KIP637_METADATA_VERSION:
            # KIP-637's "v10" is Kafka's v9 plus one field: ask the broker for v9.
            header, offset = decode_request_header(exchange.request_frame)
            request = decode_request(ApiKey.METADATA, KIP637_METADATA_VERSION, exchange.request_frame[offset:])
            exchange.upstream_frame = encode_request_header(
                replace(header, request_api_version=KIP637_UPSTREAM_VERSION)
            ) + encode_request(request, KIP637_UPSTREAM_VERSION)
            exchange.context["kip637"] = True

    def on_response(self, exchange: Exchange, frame: Frame) -> Frame | Awaitable[Frame]:
        version = KIP637_UPSTREAM_VERSION if exchange.context.get("kip637") else exchange.api_version
        broker_ids = metadata_broker_ids(frame, version)
        group = exchange.connection.listener.group
        if any(not group.has_broker_listener(node_id) for node_id in broker_ids):
            # A client may connect to a broker's listener as soon as it reads this answer.
            return self._after_listeners(exchange, frame, version, broker_ids)
        return self._enrich(exchange, frame, version, broker_ids)

    async def _after_listeners(self, exchange: Exchange, frame: Frame, version: int, broker_ids: list[int]) -> Frame:
        await self.proxy.learn_brokers_from_response(frame, version)
        result = self._enrich(exchange, frame, version, broker_ids)
        return await result if not isinstance(result, bytes | bytearray | memoryview) else result

    def _enrich(self, exchange: Exchange, frame: Frame, version: int, broker_ids: list[int]) -> Frame | Awaitable[Frame]:
        group = exchange.connection.listener.group
        hide = group.config.hide_unready_partitions
        if hide:
            self._learn(frame, version)  # decide on this answer's own ISR
        lookup = _MinInsyncLookup(self.proxy)
        new = self._splice(exchange, frame, version, broker_ids, lookup)
        if lookup.missing and self.proxy.min_insync.miss_wait > 0:
            return self._after_fetch(exchange, frame, version, broker_ids, lookup.missing)
        return self._finish(exchange, frame, new, version, lookup)

    async def _after_fetch(
        self, exchange: Exchange, frame: Frame, version: int, broker_ids: list[int], missing: list[str]
    ) -> Frame:
        await self.proxy.min_insync.wait_for(missing)
        lookup = _MinInsyncLookup(self.proxy)
        new = self._splice(exchange, frame, version, broker_ids, lookup)
        return self._finish(exchange, frame, new, version, lookup)

    def _splice(
        self, exchange: Exchange, frame: Frame, version: int, broker_ids: list[int], lookup: _MinInsyncLookup
    ) -> bytes:
        group = exchange.connection.listener.group
        addresses = group.addresses
        unready = _UnreadyPartitions(self.proxy) if group.config.hide_unready_partitions else None
        new = enrich_metadata_response(
            frame,
            version,
            min_insync_replicas=lookup,
            broker_addresses={node_id: addresses[node_id] for node_id in broker_ids},
            leaderless=unready,
        )
        if unready is not None and unready.hidden:
            self.proxy.metrics.partitions_hidden_total.inc(unready.hidden)
        return new

    def _finish(self, exchange: Exchange, original: Frame, new: bytes, version: int, lookup: _MinInsyncLookup) -> Frame:
        if lookup.missing:
            self.proxy.min_insync.fetch(lookup.missing)  # for next time: never block a client longer
        if lookup.hits:
            self.proxy.metrics.topics_enriched_total.inc(lookup.hits)
        if not exchange.connection.listener.group.config.hide_unready_partitions:
            # A full decode costs far more than the answer itself: learn at most once a second from
            # clients' answers (the proxy's own refresh keeps the view current between them).
            now = time.monotonic()
            if now - self._last_learnt >= LEARN_INTERVAL_SECONDS:
                self._last_learnt = now
                self.proxy.loop.call_soon(self._learn, original, version)
        if exchange.context.get("kip637"):
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
        self.proxy.cluster_view.update(response)
