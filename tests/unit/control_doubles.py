"""Stand-ins for the control plane in unit tests: a control connection that records what it is asked
(`RecordingControl`), listeners that open nothing (`NoListeners`)."""

from __future__ import annotations

from insync_proxy.protocol import (
    DescribeConfigsResponse,
    MetadataResponse,
)
from insync_proxy.protocol.messages import (
    DescribeConfigsResourceResult,
    DescribeConfigsResult,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)


class RecordingControl:
    """The control connection as MetadataRefresh and the cache use it; records what they ask."""

    request_timeout = 2.0

    def __init__(self) -> None:
        self.metadata_asked: list[list[str] | None] = []
        self.described: list[list[str]] = []

    async def metadata(self, topics: list[str] | None = None) -> MetadataResponse:
        self.metadata_asked.append(None if topics is None else list(topics))
        return MetadataResponse(
            brokers=(MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092),),
            topics=tuple(MetadataResponseTopic(name=t, partitions=(MetadataResponsePartition(
                partition_index=0, leader_id=1, replica_nodes=(1,), isr_nodes=(1,)),)) for t in topics or ()))

    async def describe_topic_configs(self, topics: list[str], keys: list[str]) -> DescribeConfigsResponse:
        self.described.append(list(topics))
        return DescribeConfigsResponse(results=tuple(DescribeConfigsResult(resource_type=2, resource_name=t, configs=(
            DescribeConfigsResourceResult(name="min.insync.replicas", value="2"),)) for t in topics))


class NoListeners:
    async def sync(self, remove_missing: bool) -> None:
        return None
