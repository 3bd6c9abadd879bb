"""Address rewrite: every broker address a client learns leads back through a proxy listener.

Metadata is rewritten by the MetadataEnricher in the same single pass that enriches it; this object
rewrites every other answer that carries an address, exactly those of protocol/endpoints.py's table
(FindCoordinator, DescribeCluster, Produce v10+ and Fetch v16+ node endpoints, ShareFetch and
ShareAcknowledge node endpoints and DescribeQuorum v2+ controller listeners: each node's listeners get
the proxy address of its node id: the proxy carries broker listeners only, so a controller's address
names no open listener unless that node is a broker too; its real address is never shown).
"""

from __future__ import annotations

import logging
from typing import ClassVar, Final

from insync_proxy.protocol import ApiKey, ProduceResponseScan, ProtocolError, rewrite_produce_node_endpoints
from insync_proxy.protocol.endpoints import ENDPOINT_REWRITERS
from insync_proxy.protocol.fetch import FetchEndpointsTap
from insync_proxy.proxy.behaviours.produce_exchange import produce_exchange
from insync_proxy.proxy.datapath.exchange import BehaviourBase, Exchange, Frame, StreamVerdict

log: Final = logging.getLogger("insync_proxy.addresses")


class AddressRewrite(BehaviourBase):
    """Rewrites host/port in every response that carries a broker or controller address."""

    #: The answers that carry an address: the table's keys.
    response_keys = frozenset(ENDPOINT_REWRITERS)

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
        key, version = exchange.api_key, exchange.api_version
        if key == ApiKey.PRODUCE:
            # The hot path, before the table: nothing before v10 carries an address, and the exchange's one scan
            # of the answer serves this rewrite and the accounting at completion.
            if version < 10:
                return frame
            scan: ProduceResponseScan | None
            try:
                scan = produce_exchange(exchange).scan_response(frame, version)
            except ProtocolError:  # a request without readable acks (not Produce's behaviours' to answer)
                scan = None  # the whole decode below says what is wrong with the answer, if anything
            return rewrite_produce_node_endpoints(frame, version, exchange.listener.addresses, scan)
        return ENDPOINT_REWRITERS[key](frame, version, exchange.listener.addresses)


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
