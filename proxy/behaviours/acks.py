"""Acks policy for Produce requests.

Core duty: acks=0 requests get no response from the broker, so the connection must not wait for one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol import ApiKey, read_produce_acks
from proxy.exchange import BehaviourBase, Exchange

if TYPE_CHECKING:
    from proxy.server import InsyncProxy


class AcksPolicy(BehaviourBase):
    """Reads every Produce request's acks in place and decides what goes upstream."""

    request_keys = frozenset({ApiKey.PRODUCE})

    def __init__(self, proxy: InsyncProxy) -> None:
        self.proxy = proxy

    def on_request(self, exchange: Exchange) -> None:
        acks = read_produce_acks(exchange.request_frame)
        if acks == 0:
            exchange.expects_response = False
