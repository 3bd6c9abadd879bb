"""The Produce behaviours' test harness: one client connection through them, in the proxy's order, with the proxy's
view of the cluster under the test's control (`Sidecar`), the topics and ISRs the tests name, and the Kafka error codes
they check (tests/unit/test_acks_policy.py and every Produce behaviour test; benchmarks/core_bench.py)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from harness.connection_core import LISTENER, RecordingIO
from harness.produce_frames import (
    ProduceAnswer,
    SentProduce,
    broker_response,
    produce_request,
    read_produce_request,
    read_produce_response,
)
from insync_proxy.protocol import ApiKey, MetadataResponse, decode_response, encode_response
from insync_proxy.protocol.messages import (
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from insync_proxy.proxy.audit.summary import ProduceSummaries
from insync_proxy.proxy.behaviours.accounting import ProduceAccounting
from insync_proxy.proxy.behaviours.acks import AcksPolicy
from insync_proxy.proxy.behaviours.isr_learning import IsrLearning, IsrRereads
from insync_proxy.proxy.behaviours.order import in_order
from insync_proxy.proxy.behaviours.topic_ids import TopicIdResolution
from insync_proxy.proxy.config.settings import AcksPolicyConfig
from insync_proxy.proxy.controlplane.context import BehaviourContext
from insync_proxy.proxy.controlplane.min_insync import CachedValue, MinInsyncCache
from insync_proxy.proxy.datapath.cluster_view import ClusterView
from insync_proxy.proxy.datapath.core import ConnectionCore
from insync_proxy.proxy.datapath.exchange import BehaviourBase, BehaviourRegistry
from insync_proxy.proxy.observability.metrics import ProxyMetrics

ORDERS = "orders"
PAYMENTS = "payments"
TOPIC_IDS = {
    ORDERS: uuid.UUID("00000000-0000-4000-8000-00000000000a"),
    PAYMENTS: uuid.UUID("00000000-0000-4000-8000-00000000000b"),
}
REPLICAS = (1, 2, 3)
HEALTHY = (1, 2, 3)
AT_MIN = (1, 2)  # ISR size 2 == min.insync.replicas 2: still enough
BELOW_MIN = (1,)

NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21
NOT_LEADER_OR_FOLLOWER = 6

ALL_VERSIONS = (0, 3, 9, 13)
V1_PLUS = (3, 9, 13)

class ControlNeverUsed:
    """The min.insync.replicas cache's control connection: these tests set the cache's entries directly."""

    async def describe_topic_configs(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("the acks policy must not read configs over the control connection")


def metadata_response(isr: Mapping[str, Sequence[Sequence[int]]]) -> MetadataResponse:
    """A Metadata v12 answer (names and topic ids), encoded and decoded as the proxy would see it."""
    topics = tuple(
        MetadataResponseTopic(
            name=name, topic_id=TOPIC_IDS[name],
            partitions=tuple(
                MetadataResponsePartition(partition_index=i, leader_id=nodes[0] if nodes else -1, leader_epoch=5,
                                          replica_nodes=REPLICAS, isr_nodes=tuple(nodes))
                for i, nodes in enumerate(partitions)
            ),
        )
        for name, partitions in isr.items()
    )
    brokers = tuple(MetadataResponseBroker(node_id=n, host=f"kafka-{n}", port=9092) for n in REPLICAS)
    body = encode_response(MetadataResponse(brokers=brokers, cluster_id="c1", controller_id=1, topics=topics), 12)
    decoded = decode_response(ApiKey.METADATA, 12, body)
    assert isinstance(decoded, MetadataResponse)
    return decoded


class Sidecar:
    """One client connection through the Produce behaviours, with the proxy's view of the cluster under the test's
    control."""

    def __init__(
        self, *policies: AcksPolicyConfig, audit_on: bool = True, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.metrics = ProxyMetrics()
        self.view = ClusterView()
        self.min_insync = MinInsyncCache(ControlNeverUsed(), self.metrics)  # type: ignore[arg-type]
        self.refreshed: list[list[str]] = []
        self.resolved: list[list[uuid.UUID]] = []
        #: What the control connection's Metadata tells the proxy when it looks topic ids up (None: nothing).
        self.lookup_answer: dict[str, Sequence[Sequence[int]]] | None = None
        self.context = context = BehaviourContext(
            cluster_view=self.view,
            min_insync=self.min_insync,
            metrics=self.metrics,
            audit=None,
            refresh_topics=self._refresh,
            open_broker_listeners=self._no_listeners,
            call_soon=lambda f: f(),
            control=self,
        )
        # audit on: plainly forwarded requests are accounted too (audit v2 summaries)
        self.summaries = ProduceSummaries(10.0) if audit_on else None
        rereads = IsrRereads(context.refresh_topics, clock=clock)
        self.policy = AcksPolicy(context, list(policies), rereads)
        self.accounting = ProduceAccounting(context, self.summaries)
        #: The Produce behaviours, in the proxy's one order (proxy/behaviours/order.py).
        self.behaviours: list[BehaviourBase] = in_order([
            self.accounting, IsrLearning(context, rereads), self.policy, TopicIdResolution(context)])
        self.io = RecordingIO()
        self.core = ConnectionCore(BehaviourRegistry(self.behaviours), LISTENER, self.io, max_frame_bytes=1 << 20)

    def _refresh(self, topics: Iterable[str]) -> None:
        self.refreshed.append(list(topics))

    async def _no_listeners(self) -> None:
        return None

    async def metadata_by_ids(self, topic_ids: list[uuid.UUID]) -> MetadataResponse:
        """The control connection's Metadata by topic id, as the test sets it (lookup_answer)."""
        self.resolved.append(list(topic_ids))
        return metadata_response(self.lookup_answer or {})

    # ------------------------------------------------------------------ the cluster as the proxy sees it
    def isr(self, **topics: Sequence[Sequence[int]]) -> None:
        """ISR of each partition of each topic (replicas always 1, 2, 3), through a Metadata response."""
        self.view.update(metadata_response(topics))

    def min_insync_replicas(self, value: int | None = 2, *topics: str, age_seconds: float = 0.0) -> None:
        for topic in topics or (ORDERS, PAYMENTS):
            self.min_insync.entries[topic] = CachedValue(value, time.monotonic() - age_seconds)

    # ------------------------------------------------------------------ the wire
    def produce(self, version: int, acks: int, partitions: Mapping[str, list[int]], **kwargs: object) -> bytes:
        frame = produce_request(version, acks, partitions, TOPIC_IDS, **kwargs)  # type: ignore[arg-type]
        self.core.receive_client_data(frame)
        assert not self.io.closed, self.io.closed
        return frame

    def upstream(self) -> list[SentProduce]:
        return [read_produce_request(f, TOPIC_IDS) for f in self.io.to_upstream]

    def broker_answers(self, sent: SentProduce, **kwargs: object) -> bytes:
        frame = broker_response(sent, TOPIC_IDS, **kwargs)  # type: ignore[arg-type]
        self.core.receive_upstream_data(frame)
        assert not self.io.closed, self.io.closed
        return frame

    def client_got(self, version: int) -> list[ProduceAnswer]:
        return [read_produce_response(f, version, TOPIC_IDS) for f in self.io.to_client]

    @property
    def owed(self) -> list[int]:
        """Correlation ids the client is still owed a response for."""
        return [e.correlation_id for e in self.core.pending]

    # ------------------------------------------------------------------ metrics
    def count(self, metric: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(f"insync_proxy_{metric}_total", labels)
        return 0.0 if value is None else value

    def decisions(self, topic: str, acks_requested: int, acks_sent: int | None, decision: str) -> float:
        return self.count("produce_partitions", topic=topic, acks_requested=str(acks_requested),
                          acks_sent="none" if acks_sent is None else str(acks_sent), decision=decision)

    def prechecks(self, topic: str, outcome: str) -> float:
        return self.count("precheck", topic=topic, outcome=outcome)


def run_to_completion(awaitable: Awaitable[object]) -> object:
    """Drive a lookup (the behaviour's own, against the test's control connection) on an event loop of its own."""

    async def wait() -> object:
        return await awaitable

    return asyncio.run(wait())
