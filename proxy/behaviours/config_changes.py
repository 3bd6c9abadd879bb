"""Keeps the min.insync.replicas cache true to topic changes that pass through the proxy.

On CreateTopics, DeleteTopics, AlterConfigs and IncrementalAlterConfigs the cache forgets the named
topics, and re-reads them before the client hears back: the client's very next Metadata answer
carries the new value.
"""

from __future__ import annotations

import functools
import logging

from insync_proxy.protocol import ApiKey, ProtocolError
from insync_proxy.protocol.topic_names import TOPIC_CHANGING_APIS, changed_topic_names
from insync_proxy.proxy.context import BehaviourContext
from insync_proxy.proxy.exchange import BehaviourBase, Exchange, Frame

log = logging.getLogger("insync_proxy.config_changes")

#: How long a topic-changing response may wait for the cache to re-read the topics.
REFRESH_WAIT_SECONDS = 5.0


class TopicConfigWatcher(BehaviourBase):
    request_keys = frozenset(TOPIC_CHANGING_APIS)

    def __init__(self, context: BehaviourContext) -> None:
        self.context = context

    def on_request(self, exchange: Exchange) -> None:
        try:
            names, brokers_changed = changed_topic_names(exchange.request_frame)
        except ProtocolError as exc:
            log.debug("cannot read topic names of %s v%d: %s", exchange.api_key, exchange.api_version, exc)
            return
        if names or brokers_changed:
            exchange.response_hooks.append(functools.partial(self._after_change, list(names), brokers_changed))

    async def _after_change(self, names: list[str], brokers_changed: bool, exchange: Exchange, frame: Frame) -> Frame:
        cache = self.context.min_insync
        if brokers_changed:
            cache.invalidate_all()
        else:
            cache.invalidate(names)
        if exchange.api_key == ApiKey.DELETE_TOPICS:
            for name in names:
                self.context.cluster_view.forget_topic(name)
            return frame
        await cache.wait_for(names, bound_seconds=REFRESH_WAIT_SECONDS)
        return frame
