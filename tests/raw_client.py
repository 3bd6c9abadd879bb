"""The project's own raw protocol client for tests: puts any acks value on the wire (e.g. -2, 3, -3).

Built on protocol/ (the codec under test elsewhere) and the dev cluster's record batch encoder.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from insync_proxy.protocol import (
    ApiKey,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
    decode_response,
    encode_request,
    encode_request_header,
    split_response,
)
from insync_proxy.protocol.messages import PartitionProduceData, TopicProduceData
from insync_proxy.proxy.devcluster.probe import encode_record_batch
from insync_proxy.proxy.sockets import read_exact


@dataclass
class PartitionResult:
    error_code: int
    base_offset: int


class RawKafkaClient:
    def __init__(self, bootstrap: str, timeout: float = 30.0, client_id: str = "insync-raw-test") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0
        self.client_id = client_id

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawKafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, body: bytes) -> int:
        self.correlation_id += 1
        header = encode_request_header(RequestHeader(
            request_api_key=api_key, request_api_version=version, correlation_id=self.correlation_id,
            client_id=self.client_id,
        ))
        payload = header + body
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        return self.correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self) -> bytes:
        size = struct.unpack(">i", read_exact(self.sock, 4))[0]
        return read_exact(self.sock, size)

    def produce_request(self, batches: dict[tuple[str, int], bytes], acks: int, version: int = 9,
                        transactional_id: str | None = None) -> bytes:
        topics: dict[str, list[PartitionProduceData]] = {}
        for (topic, partition), batch in batches.items():
            topics.setdefault(topic, []).append(PartitionProduceData(index=partition, records=batch))
        request = ProduceRequest(
            transactional_id=transactional_id, acks=acks, timeout_ms=30000,
            topic_data=tuple(TopicProduceData(name=t, partition_data=tuple(p)) for t, p in topics.items()),
        )
        return encode_request(request, version)

    def produce(self, batches: dict[tuple[str, int], bytes], acks: int, version: int = 9) -> dict[tuple[str, int], PartitionResult]:
        """One Produce request; returns each partition's error code and base offset, in response order."""
        correlation_id = self.send(ApiKey.PRODUCE, version, self.produce_request(batches, acks, version))
        if acks == 0:
            return {}
        frame = self.receive()
        got, body = split_response(frame, ApiKey.PRODUCE, version)
        assert got == correlation_id, (got, correlation_id)
        response = decode_response(ApiKey.PRODUCE, version, body)
        assert isinstance(response, ProduceResponse)
        return {
            (t.name, p.index): PartitionResult(p.error_code, p.base_offset)
            for t in response.responses
            for p in t.partition_responses
        }


def batch(*values: bytes) -> bytes:
    return encode_record_batch(list(values))
