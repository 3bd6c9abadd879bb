"""What a behaviour may use of the proxy: a narrow context, never the process object.

Built once by the server and handed to each behaviour's constructor. Everything here is either a
shared view (cluster, min.insync.replicas cache), a sink (metrics, audit), one verb the behaviour
needs (re-read topics, open listeners for newly seen brokers, defer work off the latency path), or the
proxy's own requests a behaviour may send on the control connection (as a Kroxylicious filter sends its
own requests through its context).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from insync_proxy.protocol import MetadataResponse
from insync_proxy.proxy.controlplane.min_insync import MinInsyncCache
from insync_proxy.proxy.datapath.cluster_view import ClusterView
from insync_proxy.proxy.observability.metrics import ProxyMetrics


class AuditSink(Protocol):
    """Where behaviours send audit events (proxy/audit)."""

    def emit(self, event: dict[str, Any], at: float | None = None) -> None: ...


class ControlRequests(Protocol):
    """The requests a behaviour may send on the proxy's own control connection (never a client's)."""

    async def metadata_by_ids(self, topic_ids: list[uuid.UUID]) -> MetadataResponse:
        """Metadata of these topic ids (names, partitions, ISR); raises ControlError when no broker answers."""
        ...


def call_soon_on_the_loop(callback: Callable[[], None]) -> None:
    """`BehaviourContext.call_soon` of the running proxy: the callback runs on the event loop's next turn."""
    asyncio.get_running_loop().call_soon(callback)


async def next_turn() -> None:
    """`BehaviourContext.pause` of the running proxy: resume on the event loop's next turn, after the I/O and
    callbacks ready now (other connections' reads and writes) have run."""
    await asyncio.sleep(0)


@dataclass(slots=True)
class BehaviourContext:
    cluster_view: ClusterView
    min_insync: MinInsyncCache
    metrics: ProxyMetrics
    audit: AuditSink | None
    #: Re-read these topics' partitions (leader, ISR) in the background.
    refresh_topics: Callable[[Iterable[str]], None]
    #: Open listeners for brokers the cluster view knows but no listener serves yet; awaited before a
    #: client reads a Metadata answer that names them.
    open_broker_listeners: Callable[[], Awaitable[None]]
    #: Run a callable soon on the event loop, after the current response is on its way.
    call_soon: Callable[[Callable[[], None]], None]
    #: The proxy's own requests on its control connection.
    control: ControlRequests
    #: Let the event loop run other connections' work before a long job goes on (between the slices of a
    #: 10,000-topic Metadata answer): no single answer holds the loop for its whole cost.
    pause: Callable[[], Awaitable[None]] = next_turn
