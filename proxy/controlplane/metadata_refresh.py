"""The proxy's own Metadata: the periodic refresh (brokers, and the leader and ISR of each partition of the
topics in use) and the targeted re-reads behaviours ask for (a failed acks precheck, a leader's error, a topic
coming into use), on the control connection.

Demand-driven: the periodic refresh asks for the topics the proxy's clients use (`TopicDemand`), never for
all topics, so its cost follows the clients, not the cluster's size. Once, at start (`min_insync_warm_up`),
the first Metadata asks for every topic and every topic's min.insync.replicas is read (in batches): until
that is done `warming_up` holds /readyz back, so the first all-topics answer a client sees carries tag 637
for every topic. That costs one read of the cluster's topics per start, not per refresh. A topic coming into use (a Produce to
a topic not tracked yet, a Metadata request naming it) is read at once, in one request with the others
that came into use in the same loop turn. After each periodic refresh: listeners follow the brokers, topics
no longer in use leave the view, and the readiness sweep runs (over the topics in use).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from insync_proxy.protocol import MetadataResponse
from insync_proxy.proxy.controlplane.background import report_failure
from insync_proxy.proxy.controlplane.control import ControlConnection, ControlError
from insync_proxy.proxy.controlplane.min_insync import MinInsyncCache
from insync_proxy.proxy.controlplane.readiness import PartitionReadiness
from insync_proxy.proxy.datapath.cluster_view import ClusterView
from insync_proxy.proxy.datapath.listeners import Listeners
from insync_proxy.proxy.observability.logs import error_text
from insync_proxy.proxy.observability.metrics import ProxyMetrics

log = logging.getLogger("insync_proxy")


@dataclass(eq=False)
class MetadataRefresh:
    """Keeps the cluster view current from the control connection."""

    control: ControlConnection
    cluster_view: ClusterView
    min_insync: MinInsyncCache
    metrics: ProxyMetrics
    listeners: Listeners
    readiness: PartitionReadiness
    interval_seconds: float
    #: The start's warm-up (min_insync_warm_up): the min.insync.replicas read of every topic, once the
    #: first Metadata has named them.
    warm_up: bool = False
    _background: set[asyncio.Task[Any]] = field(default_factory=set, init=False)
    _warm_up: asyncio.Future[None] | None = field(default=None, init=False)
    #: Topics that came into use in this loop turn, read in one Metadata request.
    _new_topics: list[str] = field(default_factory=list, init=False)
    #: Why the last Metadata of the control connection failed (none since it last worked), secrets masked:
    #: /readyz says it beside "no broker metadata yet", as the log does.
    last_upstream_error: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.min_insync.demand.on_new.append(self._topic_in_use)

    def _topic_in_use(self, topic: str) -> None:
        """A topic came into use: read its partitions soon (with the others of this loop turn) unless known."""
        if topic in self.cluster_view.topic_partition_counts:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous test): the periodic refresh reads it
        if not self._new_topics:
            loop.call_soon(self._read_new_topics)
        self._new_topics.append(topic)

    def _read_new_topics(self) -> None:
        topics, self._new_topics = self._new_topics, []
        if topics:
            self.refresh_topics_soon(topics)

    async def refresh_metadata(self) -> MetadataResponse:
        """The control connection's own Metadata: brokers (listeners follow) and the topics in use (ISR)."""
        demand = self.min_insync.demand
        in_use = demand.in_use()
        warm_up = self.warm_up and self._warm_up is None
        try:
            response = await self.control.metadata(None if warm_up else in_use)
        except ControlError as exc:
            self.metrics.upstream_up.set(0)
            self.metrics.metadata_cache_refreshes_total.labels("metadata", "error").inc()
            self.last_upstream_error = self._masked(error_text(exc))
            raise
        self.last_upstream_error = None
        self.metrics.upstream_up.set(1)
        self.metrics.metadata_cache_refreshes_total.labels("metadata", "ok").inc()
        if warm_up:
            self._start_warm_up(response)
            # The view follows the clients, not the cluster: of the warm-up's all-topics answer, only the
            # topics in use (none at start, unless a client named one already) go into it.
            response = replace(response, topics=tuple(t for t in response.topics if t.name in demand))
        self.cluster_view.update(response)
        await self.listeners.sync(remove_missing=True)
        # Topics no longer in use leave the view (a client's all-topics answer teaches only the topics in use,
        # so what is left is what earlier use or a hide_unready_partitions listener put there).
        self.cluster_view.forget_topics_but(demand, older_than=demand.idle_seconds)
        self.readiness.sweep(in_use)
        return response

    def _start_warm_up(self, response: MetadataResponse) -> None:
        """Read every topic's min.insync.replicas once (the cache's batches); `warming_up` until done."""
        topics = [t.name for t in response.topics if t.error_code == 0 and t.name is not None]
        log.info("warm-up: reading min.insync.replicas of %d topic(s) once before /readyz turns ready "
                 "(min_insync_warm_up)", len(topics))
        started = time.monotonic()
        self._warm_up = self.min_insync.fetch(topics)
        count = len(topics)
        self._warm_up.add_done_callback(lambda _: log.info(
            "warm-up done: min.insync.replicas of %d topic(s) read in %.1fs (%d cached now)",
            count, time.monotonic() - started, len(self.min_insync.entries)))

    async def finish_warm_up(self) -> None:
        """Wait for the start's warm-up if it is reading (its requests time out: this ends)."""
        if self._warm_up is not None:
            await self._warm_up

    @property
    def warming_up(self) -> bool:
        """The start's warm-up is still reading (or has not started: no Metadata answer yet)."""
        return self.warm_up and (self._warm_up is None or not self._warm_up.done())

    def _masked(self, text: str) -> str:
        """`text` without the control connection's secrets (a broker's refusal may quote what it got)."""
        for name in ("password", "oauthbearer_client_secret"):
            secret = getattr(self.control.sasl, name, None)
            if secret:
                text = text.replace(secret, "***")
        return text

    def unready_reason(self) -> str | None:
        """Why /readyz must fail because of the proxy's own Metadata: none yet, too old (with the last upstream
        error, when there is one), or the warm-up."""
        error = f"; last upstream error: {self.last_upstream_error}" if self.last_upstream_error else ""
        if not self.cluster_view.brokers:
            return "no broker metadata yet" + error
        if self.warming_up:
            return "warm-up: reading every topic's min.insync.replicas once (min_insync_warm_up)"
        age = time.monotonic() - self.cluster_view.updated_at
        if age > max(3 * self.interval_seconds, 30):
            return f"metadata is {age:.0f}s old: upstream unreachable?" + error
        return None

    async def run(self, after_each: Callable[[], None]) -> None:
        """Refresh every interval until cancelled; `after_each` runs after each attempt, failed or not."""
        while True:
            await asyncio.sleep(self.interval_seconds)
            try:
                await self.refresh_metadata()
                await self.finish_warm_up()  # "ready" is said when the warm-up is done, not a refresh later
            except Exception as exc:  # logged once and counted; the next refresh tries again
                report_failure(self.metrics, "metadata_refresh", "the proxy's periodic full Metadata", exc)
            after_each()

    async def refresh_topics(self, topics: Iterable[str]) -> None:
        """Re-read some topics' partitions (leader, ISR) now."""
        topics = list(topics)
        try:
            response = await self.control.metadata(topics)
        except ControlError as exc:
            report_failure(self.metrics, "isr_refresh", f"Metadata of {topics}", exc)
            return
        self.cluster_view.update(response)

    def refresh_topics_soon(self, topics: Iterable[str]) -> None:
        """Re-read some topics' partitions (leader, ISR) in the background."""
        self._spawn(self.refresh_topics(topics))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        """A background task's failure is logged once with context and counted, never left unretrieved."""
        self._background.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            report_failure(self.metrics, "refresh", str(task.get_coro()), error)

