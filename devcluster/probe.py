"""The dev cluster's own readiness checks: Metadata, CreateTopics and Produce over the blocking client.

It lets the dev cluster tell on its own, with no client library installed, that brokers are
registered, ISRs have a given size and a replicated topic accepts acks=all. Each connection asks the
broker's ApiVersions once and uses the highest version both sides speak (Kafka 2.8 to 4.x); the
bytes come from protocol/.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from insync_proxy.client.blocking_client import BlockingKafkaClient
from insync_proxy.protocol import (
    ApiKey,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from insync_proxy.protocol.messages import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    MetadataRequestTopic,
    PartitionProduceData,
    TopicProduceData,
)

__all__ = ["ClusterInfo", "PartitionInfo", "ProbeConnection", "ProbeError", "TopicInfo", "metadata_from_any"]

#: Versions the probe can use, per API: (lowest, highest). Produce stops at v12 (v13 names topics by id).
VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.METADATA: (1, 13),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.PRODUCE: (3, 12),
}
CLIENT_ID = "insync-probe"


class ProbeError(Exception):
    """The probe could not get an answer from any broker."""


@dataclass
class PartitionInfo:
    partition: int
    error_code: int
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass
class TopicInfo:
    name: str
    error_code: int
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


@dataclass
class ClusterInfo:
    brokers: dict[int, tuple[str, int]]
    controller_id: int
    topics: dict[str, TopicInfo]


def cluster_info(response: MetadataResponse) -> ClusterInfo:
    """The parts of a Metadata response the dev cluster waits on."""
    topics: dict[str, TopicInfo] = {}
    for t in response.topics:
        info = TopicInfo(t.name or "", t.error_code)
        for p in t.partitions:
            info.partitions[p.partition_index] = PartitionInfo(
                p.partition_index, p.error_code, p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
        topics[info.name] = info
    return ClusterInfo({b.node_id: (b.host, b.port) for b in response.brokers}, response.controller_id, topics)


class ProbeConnection:
    """One blocking connection to a broker; request/response, one at a time."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self.client = BlockingKafkaClient(host, port, timeout=timeout, client_id=CLIENT_ID)
        self._broker_versions: dict[int, tuple[int, int]] | None = None

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> ProbeConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version(self, api_key: int) -> int:
        """The highest version of ``api_key`` the probe and this broker both speak."""
        if self._broker_versions is None:
            self._broker_versions = self.client.api_versions()
        return self.client.highest_common_version(api_key, VERSIONS[api_key], self._broker_versions)

    def metadata(self, topics: list[str] | None = None) -> ClusterInfo:
        """Brokers, controller, and the topics' partitions with leader/replicas/ISR (None = all topics).

        Topics are auto-created if the broker allows it, as every client's Metadata request would.
        """
        request = MetadataRequest(
            topics=None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics))
        return cluster_info(self.client.request(request, self.version(ApiKey.METADATA), MetadataResponse))

    def create_topic(
        self,
        name: str,
        num_partitions: int = 1,
        replication_factor: int = 3,
        configs: dict[str, str] | None = None,
        assignments: dict[int, list[int]] | None = None,
        timeout_ms: int = 30000,
    ) -> int:
        """Create one topic; returns its error code (0, or 36 TOPIC_ALREADY_EXISTS, ...)."""
        topic = CreatableTopic(
            name=name,
            num_partitions=-1 if assignments else num_partitions,
            replication_factor=-1 if assignments else replication_factor,
            assignments=tuple(CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(r))
                              for p, r in sorted((assignments or {}).items())),
            configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()),
        )
        return self.create_topics([topic], timeout_ms)[name]

    def create_topics(self, topics: list[CreatableTopic], timeout_ms: int = 30000) -> dict[str, int]:
        """Create several topics in one request; returns each topic's error code."""
        response = self.client.request(CreateTopicsRequest(topics=tuple(topics), timeout_ms=timeout_ms),
                                       self.version(ApiKey.CREATE_TOPICS), CreateTopicsResponse)
        return {t.name: t.error_code for t in response.topics}

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 10000) -> int:
        """Produce one batch to one partition; returns the partition's error code."""
        request = ProduceRequest(acks=acks, timeout_ms=timeout_ms, topic_data=(TopicProduceData(
            name=topic, partition_data=(PartitionProduceData(index=partition, records=batch),)),))
        response = self.client.request(request, self.version(ApiKey.PRODUCE), ProduceResponse)
        return response.responses[0].partition_responses[0].error_code


def metadata_from_any(
    brokers: list[tuple[str, int]], topics: list[str] | None = None, timeout: float = 3.0
) -> ClusterInfo:
    """Metadata from the first broker that answers (some may be paused or down)."""
    last: Exception | None = None
    for host, port in brokers:
        try:
            with ProbeConnection(host, port, timeout) as conn:
                return conn.metadata(topics)
        except OSError as exc:
            last = exc
    raise ProbeError(f"no broker answered Metadata: {last}")
