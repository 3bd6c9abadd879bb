"""The proxy's own Metadata: the periodic refresh (brokers, every partition's leader and ISR) and the
targeted re-reads behaviours ask for (a failed acks precheck, a leader's error), on the control connection.

After each periodic refresh: listeners follow the brokers, min.insync.replicas is kept warm for the
topics seen, and the readiness sweep runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from insync_proxy.protocol import MetadataResponse
from insync_proxy.proxy.background import report_failure
from insync_proxy.proxy.cluster_view import ClusterView
from insync_proxy.proxy.control import ControlConnection, ControlError
from insync_proxy.proxy.listeners import Listeners
from insync_proxy.proxy.metrics import ProxyMetrics
from insync_proxy.proxy.min_insync import MinInsyncCache
from insync_proxy.proxy.readiness import PartitionReadiness

log = logging.getLogger("insync_proxy")


class MetadataRefresh:
    """Keeps the cluster view current from the control connection."""

    def __init__(self, control: ControlConnection, cluster_view: ClusterView, min_insync: MinInsyncCache,
                 metrics: ProxyMetrics, listeners: Listeners, readiness: PartitionReadiness,
                 interval_seconds: float) -> None:
        self.control = control
        self.cluster_view = cluster_view
        self.min_insync = min_insync
        self.metrics = metrics
        self.listeners = listeners
        self.readiness = readiness
        self.interval_seconds = interval_seconds
        self._background: set[asyncio.Task[Any]] = set()

    async def refresh_metadata(self) -> MetadataResponse:
        """The control connection's own full Metadata: brokers (listeners follow) and every partition's ISR."""
        try:
            response = await self.control.metadata(None)
        except ControlError:
            self.metrics.upstream_up.set(0)
            self.metrics.metadata_cache_refreshes_total.labels("metadata", "error").inc()
            raise
        self.metrics.upstream_up.set(1)
        self.metrics.metadata_cache_refreshes_total.labels("metadata", "ok").inc()
        self.cluster_view.update(response, all_topics=True)
        await self.listeners.sync(remove_missing=True)
        # Keep min.insync.replicas warm for every topic, so prechecks rarely meet a cold cache.
        cold = [t for t in self.cluster_view.topic_partition_counts if not self.min_insync.has_fresh(t)]
        if cold:
            self.min_insync.fetch(cold)  # its failures are logged and counted where they happen
        self.readiness.sweep()
        return response

    async def run(self, after_each: Callable[[], None]) -> None:
        """Refresh every interval until cancelled; `after_each` runs after each attempt, failed or not."""
        while True:
            await asyncio.sleep(self.interval_seconds)
            try:
                await self.refresh_metadata()
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
