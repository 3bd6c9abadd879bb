"""Raw requests of the tests and benchmarks: the blocking client plus Produce helpers that put any acks value
on the wire (e.g. -2, 3, -3), which no client library lets through, and the one Fetch request builder."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from insync_proxy.client.blocking_client import BlockingKafkaClient, parse_address
from insync_proxy.protocol import ApiKey, ProduceRequest, ProduceResponse
from insync_proxy.protocol.messages import PartitionProduceData, TopicProduceData
from insync_proxy.protocol.primitives import Writer
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


#: The Fetch versions `fetch_request_body` writes: 11 (by topic name), 12 (flexible), 13-14 (by topic id), 15-17
#: (the replica id in a tagged field, not written).
FETCH_VERSIONS = range(11, 18)


def fetch_request_body(topic: str, offset: int, max_bytes: int, *, version: int = 11, partition: int = 0,
                       topic_id: uuid.UUID | None = None, max_wait_ms: int = 500) -> bytes:
    """A consumer's Fetch request body for one partition from `offset`: up to `max_bytes` (the partition's bound
    too), sessionless, no rack. The codec has no Fetch request class (the proxy walks Fetch responses only), so it
    is written here field by field; from v13 the topic is named by `topic_id`. Send it with
    `request_frame(ApiKey.FETCH, version, body, ...)`."""
    if version not in FETCH_VERSIONS:
        raise ValueError(f"Fetch v{version}: fetch_request_body writes v{FETCH_VERSIONS[0]}-v{FETCH_VERSIONS[-1]}")
    flexible = version >= 12
    w = Writer()
    if version < 15:
        w.int32(-1)  # replica id: a consumer
    w.int32(max_wait_ms)
    w.int32(1)  # min bytes
    w.int32(max_bytes)
    w.int8(0)  # isolation level: read uncommitted
    w.int32(0)  # session id and epoch: no session
    w.int32(-1)
    w.array_length(1, flexible)
    if version >= 13:
        if topic_id is None:
            raise ValueError(f"Fetch v{version} names its topic by id: give topic_id")
        w.uuid(topic_id)
    else:
        w.string(topic, nullable=False, compact=flexible)
    w.array_length(1, flexible)
    w.int32(partition)
    w.int32(-1)  # current leader epoch: unknown
    w.int64(offset)
    if version >= 12:
        w.int32(-1)  # last fetched epoch: unknown
    w.int64(-1)  # log start offset (a follower's)
    w.int32(max_bytes)
    if flexible:
        w.tagged_fields([])  # the partition's
        w.tagged_fields([])  # the topic's
    w.array_length(0, flexible)  # forgotten topics
    w.string("", nullable=False, compact=flexible)  # rack id
    if flexible:
        w.tagged_fields([])
    return w.getvalue()


def next_offset(records: memoryview | bytes, current: int) -> int:
    """The offset after the last complete record batch of a Fetch answer's `records` (`current` when there is none):
    where the next Fetch of a reader goes on."""
    pos, end = 0, len(records)
    while pos + 12 <= end:
        base, length = struct.unpack_from(">qi", records, pos)
        if pos + 12 + length > end or length < 49:
            break
        (last_delta,) = struct.unpack_from(">i", records, pos + 23)
        current = base + last_delta + 1
        pos += 12 + length
    return current
