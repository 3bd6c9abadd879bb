"""Keeps the min.insync.replicas cache true to topic changes that pass through the proxy.

On CreateTopics, DeleteTopics, AlterConfigs and IncrementalAlterConfigs the cache forgets the named
topics, and re-reads them before the client hears back: the client's very next Metadata answer
carries the new value.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Final

from insync_proxy.protocol import ApiKey, ProtocolError, topic_names
from insync_proxy.proxy.controlplane.context import BehaviourContext
from insync_proxy.proxy.datapath.exchange import (
    FORWARD,
    BehaviourBase,
    Exchange,
    Frame,
    RequestResult,
    forward,
)

log: Final = logging.getLogger("insync_proxy.config_changes")

#: How long a topic-changing response may wait for the cache to re-read the topics.
REFRESH_WAIT_SECONDS: Final = 5.0
#: Pause between re-reads of a topic whose new min.insync.replicas the brokers do not show yet.
RETRY_SECONDS: Final = 0.1


class TopicConfigWatcher(BehaviourBase):
    request_keys = frozenset(topic_names.TOPIC_CHANGING_APIS)

    def __init__(self, context: BehaviourContext) -> None:
        self.context = context

    def on_request(self, exchange: Exchange) -> RequestResult:
        try:
            names, brokers_changed, requested = topic_names.changed_topic_configs(exchange.request_frame)
        except ProtocolError as exc:
            log.debug("cannot read topic names of %s v%d: %s", exchange.api_key, exchange.api_version, exc)
            return FORWARD
        if names or brokers_changed:
            return forward(response_hook=functools.partial(self._after_change, list(names), brokers_changed, requested))
        return FORWARD

    async def _after_change(self, names: list[str], brokers_changed: bool, requested: dict[str, int],
                            exchange: Exchange, frame: Frame) -> Frame:
        cache = self.context.min_insync
        if brokers_changed:
            cache.invalidate_all()
        else:
            cache.invalidate(names)
        if exchange.api_key == ApiKey.DELETE_TOPICS:
            for name in names:
                self.context.cluster_view.forget_topic(name)
            return frame
        deadline = time.monotonic() + REFRESH_WAIT_SECONDS
        await cache.wait_for(names, bound_seconds=REFRESH_WAIT_SECONDS)
        # The broker that answers DescribeConfigs may not have applied the change yet: re-read the topics
        # whose request set min.insync.replicas (and the broker accepted it) until they show the new value.
        accepted = _accepted(frame, exchange, requested)
        while (stale := [t for t, value in accepted.items() if cache.peek(t) != value]) and \
                (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(RETRY_SECONDS, left))
            cache.invalidate(stale)
            await cache.wait_for(stale, bound_seconds=max(deadline - time.monotonic(), 0.0))
        return frame


def _accepted(frame: Frame, exchange: Exchange, requested: dict[str, int]) -> dict[str, int]:
    """The requested min.insync.replicas values of the topics whose change the broker accepted."""
    if not requested:
        return requested
    try:
        codes = topic_names.topic_change_error_codes(frame, exchange.api_key, exchange.api_version)
    except ProtocolError as exc:
        log.debug("cannot read the answer of %s v%d: %s", exchange.api_key, exchange.api_version, exc)
        return {}
    return {t: v for t, v in requested.items() if codes.get(t) == 0}
