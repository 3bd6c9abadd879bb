"""Address rewrite: every broker address a client learns leads back through a proxy listener.

Metadata is rewritten by the MetadataEnricher in the same single pass that enriches it; this object
covers FindCoordinator, DescribeCluster, Produce v10+ and Fetch v16+ node endpoints, ShareFetch and
ShareAcknowledge node endpoints and DescribeQuorum v2+ controller listeners (each node's listeners get
the proxy address of its node id: the proxy carries broker listeners only, so a controller's address
names no open listener unless that node is a broker too; its real address is never shown).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import ClassVar, Final

from insync_proxy.protocol import (
    ApiKey,
    DescribeClusterResponse,
    FindCoordinatorResponse,
    ProduceResponseScan,
    ProtocolError,
    decode_response,
    encode_response,
    encode_response_with_header,
    rewrite_fetch_node_endpoints,
    rewrite_produce_node_endpoints,
    scan_produce_response,
    split_response,
)
from insync_proxy.protocol.fetch import FetchEndpointsTap
from insync_proxy.protocol.quorum import rewrite_describe_quorum_endpoints
from insync_proxy.protocol.share import (
    rewrite_share_acknowledge_node_endpoints,
    rewrite_share_fetch_node_endpoints,
)
from insync_proxy.proxy.exchange import BehaviourBase, Exchange, Frame, StreamVerdict

log: Final = logging.getLogger("insync_proxy.addresses")


class AddressRewrite(BehaviourBase):
    """Rewrites host/port in every response that carries a broker or controller address."""

    response_keys = frozenset({
        ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER, ApiKey.PRODUCE, ApiKey.FETCH,
        ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE, ApiKey.DESCRIBE_QUORUM,
    })

    def response_stream(self, exchange: Exchange) -> StreamVerdict:
        """Large Fetch responses pass through as they arrive: untouched before v16, through a tap that
        rewrites the trailing node_endpoints in place from v16 on. Everything else is rewritten whole."""
        key, version = exchange.api_key, exchange.api_version
        if key == ApiKey.FETCH:
            if version < 16:
                return True
            if version <= FETCH_STREAMED_UP_TO:
                return _LoggingFetchTap(version, exchange.listener.addresses)
        return False

    def on_response(self, exchange: Exchange, frame: Frame) -> Frame:
        addresses = exchange.listener.addresses
        key, version = exchange.api_key, exchange.api_version
        if key == ApiKey.PRODUCE:
            if version < 10:
                return frame
            try:
                scan: ProduceResponseScan | None = scan_produce_response(frame, version)
            except ProtocolError:
                scan = None  # the whole decode below says what is wrong
            else:
                exchange.put(scan)  # the acks policy's accounting reads the same walk
            return rewrite_produce_node_endpoints(frame, version, addresses, scan)
        if key == ApiKey.FETCH:
            return rewrite_fetch_node_endpoints(frame, version, addresses) if version >= 16 else frame
        if key == ApiKey.SHARE_FETCH:
            return rewrite_share_fetch_node_endpoints(frame, version, addresses)
        if key == ApiKey.SHARE_ACKNOWLEDGE:
            return rewrite_share_acknowledge_node_endpoints(frame, version, addresses)
        if key == ApiKey.DESCRIBE_QUORUM:
            return rewrite_describe_quorum_endpoints(frame, version, addresses)
        correlation_id, body = split_response(frame, key, version)
        response = decode_response(key, version, body)
        if isinstance(response, FindCoordinatorResponse):
            if version < 4:
                if response.node_id >= 0:
                    host, port = addresses[response.node_id]
                    response = replace(response, host=host, port=port)
                else:
                    response = replace(response, host="", port=-1)
            else:
                response = replace(response, coordinators=tuple(
                    replace(c, host=addresses[c.node_id][0], port=addresses[c.node_id][1])
                    if c.node_id >= 0 else replace(c, host="", port=-1)
                    for c in response.coordinators
                ))
        elif isinstance(response, DescribeClusterResponse):
            response = replace(response, brokers=tuple(
                replace(b, host=addresses[b.broker_id][0], port=addresses[b.broker_id][1]) for b in response.brokers
            ))
        return encode_response_with_header(key, version, correlation_id, encode_response(response, version))


#: The highest Fetch version whose responses the tap can walk (protocol/fetch.py).
FETCH_STREAMED_UP_TO: Final = 18


class _LoggingFetchTap(FetchEndpointsTap):
    """The Fetch tap, saying once per process when rewritten endpoints did not fit (see FetchEndpointsTap)."""

    warned: ClassVar[bool] = False

    def finish(self, held: bytes) -> bytes:
        out = super().finish(held)
        if self.dropped and not _LoggingFetchTap.warned:
            _LoggingFetchTap.warned = True
            log.warning("a Fetch v%d response passed through before its end had arrived named brokers whose proxy "
                        "addresses are longer than theirs: its node_endpoints were left out (the client looks "
                        "the new leader up with Metadata instead); said once", self.api_version)
        return out
