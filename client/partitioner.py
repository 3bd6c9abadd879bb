"""KIP-637's partitioner for Python producers that talk to insync-proxy.

`MinInsyncMetadata` reads the proxy's enriched Metadata (each topic's min.insync.replicas in tagged
field 637) and tells which partitions are ready, with KIP-637's semantics
(`require_min_insync_acks`): acks 0/1 -> partitions with a leader; acks all/-1/-2 -> partitions with a
leader whose ISR is at least the effective min ISR = min(min.insync.replicas, replica count).
`ReadyPartitioner` plugs that into kafka-python (2.x calls it, 3.x its `partition`) and aiokafka (`partitioner=`): keyless records go to
ready partitions only; keyed records hash over all partitions as before (moving them would break
per-key ordering).

kafka-python's and aiokafka's partitioner interface gets no topic name, so one ReadyPartitioner serves
one topic (`MinInsyncMetadata.partitioner(topic, acks)`); `partition_for()` serves any topic.
"""

from __future__ import annotations

import random
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from insync_proxy.client.blocking_client import BlockingKafkaClient, KafkaClientError, parse_address
from insync_proxy.protocol import ApiKey, MetadataRequest, MetadataResponse
from insync_proxy.protocol.messages import MetadataRequestTopic

if TYPE_CHECKING:  # a producer importing the partitioner loads none of the proxy's modules
    from insync_proxy.proxy.config.settings import SaslConfig

#: Metadata versions that can carry the tagged min.insync.replicas (v9+), up to what protocol/ knows.
METADATA_VERSIONS = (9, 13)
CLIENT_ID = "insync-ready-partitioner"


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class TopicInfo:
    name: str
    min_insync_replicas: int | None
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


def require_min_insync_acks(acks: int | str) -> bool:
    """KIP-637: only acks=all (-1) and acks=min.insync.replicas (-2) need enough in-sync replicas."""
    return str(acks).lower() in ("all", "-1", "-2")


class MinInsyncMetadata:
    """Enriched Metadata from the proxy, refreshed at most every `max_age_seconds`; over TLS with `ssl_context`
    (a proxy with [downstream_tls]) and logged in with `sasl` (a proxy in front of SASL listeners, whose brokers
    answer nothing before a login)."""

    def __init__(self, bootstrap: str, max_age_seconds: float = 5.0, timeout: float = 10.0, *,
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslConfig | None = None) -> None:
        self.address = parse_address(bootstrap)
        self.max_age = max_age_seconds
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.topics: dict[str, TopicInfo] = {}
        self._fetched_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._metadata_version: int | None = None  # negotiated once, again after any failure

    def refresh(self, topics: Sequence[str]) -> None:
        """Ask the proxy for these topics' Metadata now."""
        request = MetadataRequest(
            topics=tuple(MetadataRequestTopic(name=t) for t in topics), allow_auto_topic_creation=False
        )
        try:
            with BlockingKafkaClient(*self.address, timeout=self.timeout, client_id=CLIENT_ID,
                                     ssl_context=self.ssl_context) as client:
                if self.sasl is not None:
                    self._login(client, self.sasl)
                if self._metadata_version is None:
                    self._metadata_version = client.highest_common_version(ApiKey.METADATA, METADATA_VERSIONS)
                response = client.request(request, self._metadata_version, MetadataResponse)
        except OSError:
            self._metadata_version = None
            raise
        now = time.monotonic()
        for t in response.topics:
            if t.error_code != 0 or t.name is None:
                continue
            info = TopicInfo(t.name, t.min_insync_replicas if t.min_insync_replicas >= 0 else None)
            for p in t.partitions:
                info.partitions[p.partition_index] = PartitionInfo(
                    p.partition_index, p.leader_id if p.error_code == 0 else -1,
                    tuple(p.replica_nodes), tuple(p.isr_nodes),
                )
            with self._lock:
                self.topics[t.name] = info
                self._fetched_at[t.name] = now

    @staticmethod
    def _login(client: BlockingKafkaClient, sasl: SaslConfig) -> None:
        # the proxy's own SASL exchange, when asked for
        from insync_proxy.proxy.controlplane.sasl import SaslError, authenticate_blocking

        try:
            authenticate_blocking(client.request_raw, sasl)
        except SaslError as exc:
            raise KafkaClientError(f"SASL login to {client.address} refused: {exc}") from exc

    def topic(self, topic: str) -> TopicInfo | None:
        if time.monotonic() - self._fetched_at.get(topic, 0.0) > self.max_age:
            try:
                self.refresh([topic])
            except OSError:  # the blocking client's errors included
                pass  # keep serving the last known view
        return self.topics.get(topic)

    def ready_partitions(self, topic: str, acks: int | str) -> list[int]:
        """Partitions a record may go to under KIP-637's rule (never empty while any has a leader)."""
        info = self.topic(topic)
        if info is None:
            return []
        available = [p.partition for p in info.partitions.values() if p.leader >= 0]
        if not require_min_insync_acks(acks) or info.min_insync_replicas is None:
            return available
        ready = [
            p.partition for p in info.partitions.values()
            if p.leader >= 0 and len(p.isr) >= min(info.min_insync_replicas, len(p.replicas))
        ]
        return ready

    def partition_for(self, topic: str, acks: int | str, key: bytes | None = None) -> int | None:
        """A partition for a record: keyed -> murmur2 over all partitions; keyless -> a ready one."""
        info = self.topic(topic)
        if info is None or not info.partitions:
            return None
        if key is not None:
            return murmur2_partition(key, len(info.partitions))
        ready = self.ready_partitions(topic, acks)
        if not ready:
            ready = [p.partition for p in info.partitions.values() if p.leader >= 0] or list(info.partitions)
        return random.choice(ready)

    def partitioner(self, topic: str, acks: int | str) -> ReadyPartitioner:
        return ReadyPartitioner(self, topic, acks)


class ReadyPartitioner:
    """`partitioner=` for kafka-python and aiokafka: (key_bytes, all_partitions, available) -> partition."""

    def __init__(self, metadata: MinInsyncMetadata, topic: str, acks: int | str) -> None:
        self.metadata = metadata
        self.topic = topic
        self.acks = acks

    def __call__(self, key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]) -> int:
        if key is not None:
            return sorted(all_partitions)[murmur2_partition(key, len(all_partitions))]
        ready = set(self.metadata.ready_partitions(self.topic, self.acks)) & set(available or all_partitions)
        candidates = sorted(ready) or list(available or all_partitions)
        return random.choice(candidates)

    def partition(self, topic: str, key: bytes | None, cluster: Any) -> int:
        """kafka-python 3's interface for a partitioner that is no `kafka.partitioner.Partitioner`
        (`partition(topic, serialized_key, cluster_metadata)`): the same choice, from the producer's own view of
        the topic's partitions."""
        return self(key, sorted(cluster.partitions_for_topic(topic) or ()),
                    sorted(cluster.available_partitions_for_topic(topic) or ()))


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's default partitioner hash)."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = length - rest
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """As the Java client: toPositive(murmur2(key)) % partitions."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
