"""Topic-id resolution: Produce v13 names topics by id; ids the proxy does not know yet are looked up first.

It runs before the acks decision, which (like the accounting) needs each topic's name: policies match
names, the ISR view and min.insync.replicas are kept by name. An unknown id (a topic created moments ago)
waits for one Metadata-by-id lookup on the proxy's control connection (`BehaviourContext.control`), shared
by concurrent requests and bounded in time (TOPIC_ID_WAIT_SECONDS); the connection's later requests wait
behind it, in order. An id still unknown then goes on as it is: the decision does not guess (acks=-2 is
forwarded as -1).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable

from insync_proxy.protocol import ApiKey, ProtocolError
from insync_proxy.proxy.behaviours.produce_exchange import produce_exchange
from insync_proxy.proxy.controlplane.context import BehaviourContext
from insync_proxy.proxy.datapath.exchange import FORWARD, BehaviourBase, Exchange, RequestResult, wait
from insync_proxy.proxy.observability.logs import RateLimitedLog, error_text

log = logging.getLogger("insync_proxy")
#: A client can name unknown ids in every request: the lines are rate-limited (the counters count each).
_repeated = RateLimitedLog(log)

#: How long a Produce naming an unknown topic id waits for the control connection to learn its name.
TOPIC_ID_WAIT_SECONDS = 2.5


class TopicIdResolution(BehaviourBase):
    """Holds a Produce v13 request until every topic id it names has a name, or the lookup gave up."""

    request_keys = frozenset({ApiKey.PRODUCE})

    def __init__(self, context: BehaviourContext) -> None:
        self.view = context.cluster_view
        self.control = context.control
        self.metrics = context.metrics
        #: Lookups under way, by the id they look up: concurrent requests naming one id share one lookup.
        self._resolving: dict[uuid.UUID, asyncio.Task[None]] = {}

    def on_request(self, exchange: Exchange) -> RequestResult:
        if exchange.api_version < 13:
            return FORWARD  # names on the wire
        try:
            partitions = produce_exchange(exchange).partitions()
        except ProtocolError:
            return FORWARD  # the decision or the broker says what is wrong with it
        known = self.view.topic_ids
        unknown = [t for t in dict.fromkeys(p[0] for p in partitions) if isinstance(t, uuid.UUID) and t not in known]
        return wait(self.resolve(unknown)) if unknown else FORWARD

    async def resolve(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """Learn the names of topic ids the view does not know: one Metadata by id on the control connection
        per id at a time, shared by every request that waits for it; waits at most TOPIC_ID_WAIT_SECONDS.
        Ids still unknown then are counted."""
        wanted = [i for i in dict.fromkeys(topic_ids) if i not in self.view.topic_ids]
        if not wanted:
            return
        new = [i for i in wanted if i not in self._resolving]
        if new:
            task = asyncio.get_running_loop().create_task(self._metadata_by_ids(new))
            for topic_id in new:
                self._resolving[topic_id] = task
        waits = {self._resolving[i] for i in wanted if i in self._resolving}
        if waits:
            await asyncio.wait([asyncio.shield(w) for w in waits], timeout=TOPIC_ID_WAIT_SECONDS)
        unresolved = [i for i in wanted if i not in self.view.topic_ids]
        if unresolved:
            self.metrics.topic_ids_unresolved_total.inc(len(unresolved))
            _repeated.warning("topic_ids_unresolved", "topic id(s) %s still unknown after %.1fs: forwarded as they "
                              "are (the broker decides)", ", ".join(map(str, unresolved)), TOPIC_ID_WAIT_SECONDS)

    async def _metadata_by_ids(self, topic_ids: list[uuid.UUID]) -> None:
        try:
            response = await self.control.metadata_by_ids(topic_ids)
            self.view.update(response)
        except Exception as exc:  # ControlError, or a broken answer: the request goes on as it is
            _repeated.warning("topic_id_lookup", "Metadata for topic id(s) %s failed: %s",
                              ", ".join(map(str, topic_ids)), error_text(exc))
            self.metrics.background_task_failures_total.labels("topic_id_lookup").inc()
        finally:
            for topic_id in topic_ids:
                self._resolving.pop(topic_id, None)
