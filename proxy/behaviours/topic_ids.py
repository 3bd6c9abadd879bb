"""Topic-id resolution: Produce v13 names topics by id; ids the proxy does not know yet are looked up first.

It runs before the acks decision, which (like the accounting) needs each topic's name: policies match
names, the ISR view and min.insync.replicas are kept by name. An unknown id (a topic created moments ago)
waits for one Metadata-by-id lookup on the proxy's control connection, shared by concurrent requests and
bounded in time (`BehaviourContext.resolve_topic_ids`); the connection's later requests wait behind it, in
order. An id still unknown then goes on as it is: the decision does not guess (acks=-2 is forwarded as -1).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable

from insync_proxy.protocol import ApiKey, ProtocolError
from insync_proxy.proxy.behaviours.produce_exchange import produce_exchange
from insync_proxy.proxy.context import BehaviourContext
from insync_proxy.proxy.exchange import BehaviourBase, Exchange


class TopicIdResolution(BehaviourBase):
    """Holds a Produce v13 request until every topic id it names has a name, or the lookup gave up."""

    request_keys = frozenset({ApiKey.PRODUCE})

    def __init__(self, context: BehaviourContext) -> None:
        self.view = context.cluster_view
        self.resolve_topic_ids = context.resolve_topic_ids

    def on_request(self, exchange: Exchange) -> Awaitable[None] | None:
        if exchange.api_version < 13:
            return None  # names on the wire
        try:
            partitions = produce_exchange(exchange).partitions()
        except ProtocolError:
            return None  # the decision or the broker says what is wrong with it
        known = self.view.topic_ids
        unknown = [t for t in dict.fromkeys(p[0] for p in partitions) if isinstance(t, uuid.UUID) and t not in known]
        return self.resolve_topic_ids(unknown) if unknown else None
