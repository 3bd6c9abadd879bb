"""The tests' raw Produce client: the blocking client plus Produce helpers that put any acks value
on the wire (e.g. -2, 3, -3), which no client library lets through."""

from __future__ import annotations

from dataclasses import dataclass

from insync_proxy.client.blocking_client import BlockingKafkaClient, parse_address
from insync_proxy.protocol import ApiKey, ProduceRequest, ProduceResponse
from insync_proxy.protocol.messages import PartitionProduceData, TopicProduceData
from insync_proxy.protocol.records import encode_record_batch


@dataclass
class PartitionResult:
    error_code: int
    base_offset: int


def produce_request(batches: dict[tuple[str, int], bytes], acks: int, transactional_id: str | None = None,
                    timeout_ms: int = 30000) -> ProduceRequest:
    """One ProduceRequest (by topic name) carrying each (topic, partition)'s batch."""
    topics: dict[str, list[PartitionProduceData]] = {}
    for (topic, partition), records in batches.items():
        topics.setdefault(topic, []).append(PartitionProduceData(index=partition, records=records))
    return ProduceRequest(
        transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
        topic_data=tuple(TopicProduceData(name=t, partition_data=tuple(p)) for t, p in topics.items()),
    )


class RawKafkaClient(BlockingKafkaClient):
    """A blocking client to "host:port" with ``produce``."""

    def __init__(self, bootstrap: str, timeout: float = 30.0, client_id: str = "insync-raw-test") -> None:
        host, port = parse_address(bootstrap)
        super().__init__(host, port, timeout=timeout, client_id=client_id)

    def __enter__(self) -> RawKafkaClient:
        return self

    def produce(self, batches: dict[tuple[str, int], bytes], acks: int, version: int = 9, timeout_ms: int = 30000
                ) -> dict[tuple[str, int], PartitionResult]:
        """One Produce request; returns each partition's error code and base offset, in response order.

        acks=0 gets no answer: an empty dict.
        """
        correlation_id = self.send(produce_request(batches, acks, timeout_ms=timeout_ms), version)
        if acks == 0:
            return {}
        response = self.receive(ApiKey.PRODUCE, version, correlation_id, ProduceResponse)
        return {
            (t.name, p.index): PartitionResult(p.error_code, p.base_offset)
            for t in response.responses
            for p in t.partition_responses
        }


def batch(*values: bytes) -> bytes:
    """A record batch (magic 2, uncompressed) of these values."""
    return encode_record_batch(list(values))
