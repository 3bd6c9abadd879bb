"""Audit events to a Kafka topic, through the proxy's own connections (never a client's).

Events are batched once a second (or sooner when many are waiting) into one record batch per flush,
keyed by proxy id, to one partition of the audit topic chosen by the proxy id, with acks=-1. The queue
is bounded: when Kafka is unreachable for long, the oldest events are dropped and counted
(reason `kafka_queue_full`); the file sink is unaffected. Never on the produce path.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from insync_proxy.protocol import ProduceRequest, ProduceResponse
from insync_proxy.protocol.messages import PartitionProduceData, TopicProduceData
from insync_proxy.protocol.records import encode_record_batch
from insync_proxy.proxy.controlplane.background import report_failure
from insync_proxy.proxy.controlplane.control import ControlConnection, ControlError
from insync_proxy.proxy.datapath.cluster_view import ClusterView
from insync_proxy.proxy.observability.metrics import ProxyMetrics

log = logging.getLogger("insync_proxy.audit.kafka")

PRODUCE_VERSION = 9
MAX_RECORDS_PER_BATCH = 500
FLUSH_SECONDS = 1.0


@dataclass(eq=False)
class KafkaAuditSink:
    """The audit events' queue (at most `queue_size`) and the task that produces them to `topic`."""

    topic: str
    queue_size: int
    _: KW_ONLY
    proxy_id: str
    cluster_view: ClusterView
    refresh_topics: Callable[[Iterable[str]], Awaitable[None]]
    connect: Callable[[tuple[str, int]], ControlConnection]
    metrics: ProxyMetrics
    loop: asyncio.AbstractEventLoop | None = field(default=None, init=False)
    queue: collections.deque[bytes] = field(default_factory=collections.deque, init=False)
    _leaders: dict[int, ControlConnection] = field(default_factory=dict, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _warned: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._written = self.metrics.audit_events_written_total.labels("kafka")
        self._dropped = self.metrics.audit_events_dropped_total.labels("kafka_queue_full")

    def offer(self, lines: list[bytes]) -> None:
        """From the audit writer thread: hand JSON lines over (thread-safe, one loop callback per batch)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._append, lines)

    def _append(self, lines: list[bytes]) -> None:
        for line in lines:
            if len(self.queue) >= self.queue_size:
                self.queue.popleft()
                self._dropped.inc()
            self.queue.append(line)

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._task = self.loop.create_task(self._run())

    def leaders(self) -> list[ControlConnection]:
        """The connections to the audit topic's leaders open now."""
        return list(self._leaders.values())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        try:
            await asyncio.wait_for(self._flush(), 5)
        except (TimeoutError, ControlError, OSError):
            pass
        for connection in self._leaders.values():
            await connection.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            try:
                while self.queue:
                    if not await self._flush():
                        break
            except Exception as exc:  # a broken sink must never take the proxy down
                report_failure(self.metrics, "audit_to_kafka", f"topic {self.topic}", exc)

    def _partition(self, count: int) -> int:
        return zlib.crc32(self.proxy_id.encode()) % max(count, 1)

    async def _flush(self) -> bool:
        """Send up to one batch; True when it was acknowledged."""
        if not self.queue:
            return True
        view = self.cluster_view
        count = view.topic_partition_counts.get(self.topic)
        if count is None:
            await self.refresh_topics([self.topic])
            count = view.topic_partition_counts.get(self.topic)
            if count is None:
                if not self._warned:
                    self._warned = True
                    log.warning("audit topic %s does not exist (create it): events wait in a bounded queue",
                                self.topic)
                return False
        partition = self._partition(count)
        state = view.partition(self.topic, partition)
        address = view.known_brokers.get(state.leader_id) if state is not None else None
        if address is None:
            await self.refresh_topics([self.topic])
            return False
        lines = [self.queue[i] for i in range(min(len(self.queue), MAX_RECORDS_PER_BATCH))]
        key = self.proxy_id.encode()
        # The batch checksum (CRC-32C) is computed in pure Python: keep it off the event loop.
        records = await asyncio.get_running_loop().run_in_executor(
            None, encode_record_batch, lines, [key] * len(lines)
        )
        request = ProduceRequest(
            acks=-1, timeout_ms=30000,
            topic_data=(TopicProduceData(name=self.topic, partition_data=(
                PartitionProduceData(index=partition, records=records),)),),
        )
        connection = self._leaders.get(state.leader_id) if state is not None else None
        if connection is None:
            connection = self.connect(address)
            self._leaders[state.leader_id] = connection  # type: ignore[union-attr]
        try:
            response: Any = await connection.request(request, PRODUCE_VERSION)
        except ControlError as exc:
            log.debug("audit batch to %s failed: %s", self.topic, exc)
            self._leaders.pop(state.leader_id, None)  # type: ignore[union-attr]
            return False
        assert isinstance(response, ProduceResponse)
        error = response.responses[0].partition_responses[0].error_code
        if error != 0:
            log.debug("audit batch to %s-%d: error %d", self.topic, partition, error)
            await self.refresh_topics([self.topic])
            return False
        for _ in lines:
            self.queue.popleft()
        self._written.inc(len(lines))
        return True
