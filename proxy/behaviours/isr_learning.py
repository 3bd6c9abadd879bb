"""ISR learning: the leaders' answers to forwarded Produce requests teach the proxy's ISR view at once.

NOT_ENOUGH_REPLICAS(_AFTER_APPEND) from a leader marks its partition below min ISR (for a few seconds,
while the re-read it triggers catches up: `ClusterView.broker_said_below_min_isr`), so the next acks=-2
request to it is answered by the proxy; leadership errors re-read the topic. Only the broker's own answers
teach: the partitions the proxy answered itself (merged into the same response) do not. It runs at
completion, with the audit on or off, after the accounting (produce_exchange.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Final

from insync_proxy.protocol import ApiKey, ErrorCode
from insync_proxy.proxy.behaviours.produce_exchange import produce_exchange
from insync_proxy.proxy.controlplane.context import BehaviourContext
from insync_proxy.proxy.datapath.exchange import BehaviourBase, Exchange

_BELOW_MIN_ISR_ERRORS: Final = frozenset(
    int(c) for c in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND))
_STALE_LEADER_ERRORS: Final = frozenset(int(c) for c in (
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
))
_UNKNOWN_TOPIC_OR_PARTITION: Final = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

#: Topics the re-reads remember (when each was last re-read); past it, those re-read over a second ago go.
REREADS_KEPT: Final = 1024


class IsrRereads:
    """Re-reads a topic's partitions (leader, ISR) at most once a second: for a failed acks precheck and for
    the leaders' errors alike (one instance shared by both)."""

    def __init__(self, refresh_topics: Callable[[Iterable[str]], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._refresh_topics = refresh_topics
        #: A parameter, not a patched module global: tests step it by hand (and the compiled build binds globals).
        self._clock = clock
        self._last: dict[str, float] = {}
        self._prune_at = REREADS_KEPT

    def soon(self, topic: str) -> None:
        now = self._clock()
        if now - self._last.get(topic, 0.0) < 1.0:
            return
        last = self._last
        if len(last) >= self._prune_at and topic not in last:
            # Only a topic re-read within the last second matters: the rest go (topics deleted, names made up).
            # The next pass waits for twice what stays, so a flood of new names costs amortised O(1) each.
            self._last = last = {t: at for t, at in last.items() if now - at < 1.0}
            self._prune_at = max(REREADS_KEPT, 2 * len(last))
        last[topic] = now
        self._refresh_topics([topic])


class IsrLearning(BehaviourBase):
    """Lets each forwarded Produce request's answer teach the ISR view."""

    complete_keys = frozenset({ApiKey.PRODUCE})

    def __init__(self, context: BehaviourContext, rereads: IsrRereads) -> None:
        self.view = context.cluster_view
        self.rereads = rereads

    def on_complete(self, exchange: Exchange, latency_seconds: float | None) -> None:
        if exchange.response is None or exchange.upstream_frame is None:
            return  # acks=0, or the proxy answered every partition itself: the broker said nothing
        shared = produce_exchange(exchange)
        scan = shared.response_scan(exchange)
        if scan is None or not scan.failed:
            return  # the common case: every partition acknowledged
        by_proxy = shared.decisions.proxy_errors if shared.decisions is not None else None
        view = self.view
        for topic, partition, code in scan.failed:
            if by_proxy and (topic, partition) in by_proxy:
                continue  # the proxy's own answer, merged in
            name = view.topic_name(topic)
            if name is None:
                continue  # a topic id the proxy cannot name: nothing to mark or re-read
            if code in _BELOW_MIN_ISR_ERRORS:
                view.broker_said_below_min_isr(name, partition)
                self.rereads.soon(name)
            elif code in _STALE_LEADER_ERRORS:
                if code == _UNKNOWN_TOPIC_OR_PARTITION and name not in view.topic_partition_counts:
                    continue  # a name the proxy never saw (made up, or gone already): nothing of it to re-read
                self.rereads.soon(name)
