"""Metadata: rewrite broker addresses, add each topic's min.insync.replicas (KIP-637), learn the ISR view.

All of it in one pass over the response bytes (protocol.enrich_metadata_response): re-encoding a
whole MetadataResponse costs per field, the splice costs per topic. The ISR view is learnt from a
full decode scheduled after the response has been written back, off the client's latency path.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from protocol import (
    ApiKey,
    MetadataResponse,
    ProtocolError,
    decode_response,
    enrich_metadata_response,
    split_response,
)
from protocol.headers import response_header_version
from protocol.primitives import Reader
from proxy.exchange import Exchange, Frame

if TYPE_CHECKING:
    from proxy.server import InsyncProxy

log = logging.getLogger("insync_proxy.metadata")


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


class MetadataEnricher:
    """Address rewrite + min.insync.replicas enrichment of Metadata responses, and the ISR view."""

    request_keys: frozenset[int] = frozenset()
    response_keys = frozenset({ApiKey.METADATA})

    def __init__(self, proxy: InsyncProxy) -> None:
        self.proxy = proxy

    def on_request(self, exchange: Exchange) -> None:
        return None

    def on_response(self, exchange: Exchange, frame: Frame) -> Frame | Awaitable[Frame]:
        version = exchange.api_version
        broker_ids = metadata_broker_ids(frame, version)
        group = exchange.connection.listener.group
        missing = [node_id for node_id in broker_ids if not group.has_broker_listener(node_id)]
        if missing:
            # A client may connect to a broker's listener as soon as it reads this answer.
            return self._after_listeners(exchange, frame, missing)
        return self._rewrite(exchange, frame, broker_ids)

    async def _after_listeners(self, exchange: Exchange, frame: Frame, missing: list[int]) -> Frame:
        await self.proxy.learn_brokers_from_response(frame, exchange.api_version)
        return self._rewrite(exchange, frame, metadata_broker_ids(frame, exchange.api_version))

    def _rewrite(self, exchange: Exchange, frame: Frame, broker_ids: list[int]) -> Frame:
        version = exchange.api_version
        addresses = exchange.connection.listener.group.addresses
        new = enrich_metadata_response(
            frame, version, broker_addresses={node_id: addresses[node_id] for node_id in broker_ids}
        )
        self.proxy.loop.call_soon(self._learn, frame, version)
        return new

    def _learn(self, frame: Frame, version: int) -> None:
        try:
            _, body = split_response(frame, ApiKey.METADATA, version)
            response = decode_response(ApiKey.METADATA, version, body)
        except ProtocolError as exc:
            log.debug("could not learn from a Metadata v%d response: %s", version, exc)
            return
        assert isinstance(response, MetadataResponse)
        self.proxy.cluster_view.update(response)

