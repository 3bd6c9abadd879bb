"""Big Metadata answers spliced in slices, the test harness: a core with the MetadataEnricher in front of a recording
adapter (`core_for`), the event loop's pauses between slices recorded (`Pauses`), answers of any number of topics
(tests/unit/test_metadata_slices.py, benchmarks/metadata_bench.py)."""

from __future__ import annotations

import struct
import time
import uuid

from harness.connection_core import RecordingIO, request
from harness.sidecar import ControlNeverUsed
from insync_proxy.protocol import ApiKey, MetadataRequest, encode_request
from insync_proxy.protocol.headers import encode_response_with_header
from insync_proxy.protocol.messages import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    encode_response,
)
from insync_proxy.proxy.behaviours.metadata import MetadataEnricher
from insync_proxy.proxy.config.broker_ports import BrokerPorts
from insync_proxy.proxy.controlplane.context import BehaviourContext, next_turn
from insync_proxy.proxy.controlplane.min_insync import CachedValue, MinInsyncCache
from insync_proxy.proxy.datapath.cluster_view import ClusterView
from insync_proxy.proxy.datapath.core import ConnectionCore, ConnectionIO
from insync_proxy.proxy.datapath.exchange import BehaviourRegistry, ListenerAddresses, ListenerSettings
from insync_proxy.proxy.observability.metrics import ProxyMetrics

PORTS = BrokerPorts(9100)


BROKERS = (1, 2, 3)


def listener(hide: bool = False, schema: str = "tagged") -> ListenerSettings:
    return ListenerSettings(
        name="default", label="bootstrap", metadata_schema=schema, hide_unready_partitions=hide,
        addresses=ListenerAddresses("127.0.0.1", PORTS), broker_listeners=frozenset(BROKERS),
    )


def answer(topics: int, correlation_id: int = 7, isr: tuple[int, ...] = (1, 2, 3), controller: int = 1,
           version: int = 12) -> bytes:
    """A Metadata answer (v12 unless said) of `topics` topics x 2 partitions, size prefix included."""
    msg = MetadataResponse(
        brokers=tuple(MetadataResponseBroker(node_id=n, host=f"broker-{n}.internal", port=9092) for n in BROKERS),
        cluster_id="c", controller_id=controller,
        topics=tuple(MetadataResponseTopic(name=f"t{i:05d}", topic_id=uuid.UUID(int=i + 1), partitions=tuple(
            MetadataResponsePartition(partition_index=p, leader_id=1, leader_epoch=3, replica_nodes=(1, 2, 3),
                                      isr_nodes=isr) for p in range(2))) for i in range(topics)))
    payload = encode_response_with_header(ApiKey.METADATA, version, correlation_id, encode_response(msg, version))
    return struct.pack(">i", len(payload)) + payload


class Pauses:
    """The context's `pause`: counted; `loop=True` also yields to the running event loop (the proxy's own)."""

    def __init__(self, loop: bool = False) -> None:
        self.count = 0
        self.loop = loop

    async def __call__(self) -> None:
        self.count += 1
        if self.loop:
            await next_turn()


def core_for(topics: int, pauses: Pauses, hide: bool = False, min_insync: int | None = 2, schema: str = "tagged",
             control: object | None = None, io: ConnectionIO | None = None
             ) -> tuple[ConnectionCore, RecordingIO, MinInsyncCache, ProxyMetrics]:
    """A core with the metadata enricher alone; its writes go to `io`, else to the RecordingIO returned."""
    metrics = ProxyMetrics()
    cache = MinInsyncCache(control or ControlNeverUsed(), metrics, miss_wait_seconds=0)  # type: ignore[arg-type]
    if min_insync is not None:
        for i in range(topics):
            cache.entries[f"t{i:05d}"] = CachedValue(min_insync, time.monotonic())
    context = BehaviourContext(
        cluster_view=ClusterView(), min_insync=cache, metrics=metrics, audit=None,
        refresh_topics=lambda names: None, open_broker_listeners=_no_listeners, call_soon=lambda f: f(),
        control=None,  # type: ignore[arg-type]
        pause=pauses,
    )
    recording = RecordingIO()
    core = ConnectionCore(BehaviourRegistry([MetadataEnricher(context)]), listener(hide, schema), io or recording,
                          max_frame_bytes=64 << 20)
    return core, recording, cache, metrics


def all_topics_request(correlation_id: int = 7) -> bytes:
    body = encode_request(MetadataRequest(topics=None), 12)
    return request(ApiKey.METADATA, correlation_id, body, version=12)


async def _no_listeners() -> None:
    return None
