"""A deliberately tiny, blocking Kafka client for the dev cluster's own readiness checks.

It speaks only non-flexible versions (Metadata v1, CreateTopics v2, Produce v3) so that the dev
cluster can tell on its own, with no client library installed, that brokers are registered, ISRs
have a given size and a replicated topic accepts acks=all. It is not the proxy's codec (protocol/)
and is not on any hot path.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

from insync_proxy.protocol.records import encode_record_batch
from insync_proxy.proxy.sockets import read_exact

__all__ = ["ClusterInfo", "ProbeConnection", "ProbeError", "encode_record_batch", "metadata_from_any"]

class ProbeError(Exception):
    """The probe could not get an answer from the broker."""


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


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def int32_array(self) -> list[int]:
        return [self.take(">i") for _ in range(self.take(">i"))]


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


class ProbeConnection:
    """One blocking connection; request/response, one at a time."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._correlation_id = 0

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> ProbeConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, api_key: int, api_version: int, body: bytes) -> bytes:
        self._correlation_id += 1
        header = struct.pack(">hhi", api_key, api_version, self._correlation_id) + _string("insync-probe")
        payload = header + body
        self._sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", read_exact(self._sock, 4))[0]
        response = read_exact(self._sock, size)
        (correlation_id,) = struct.unpack_from(">i", response, 0)
        if correlation_id != self._correlation_id:
            raise ProbeError(f"correlation id {correlation_id} != {self._correlation_id}")
        return response[4:]

    def metadata(self, topics: list[str] | None = None) -> ClusterInfo:
        """Metadata v1: brokers, controller, and the topics' partitions with leader/replicas/ISR."""
        if topics is None:
            body = struct.pack(">i", -1)
        else:
            body = struct.pack(">i", len(topics)) + b"".join(_string(t) for t in topics)
        r = _Reader(self.request(3, 1, body))
        brokers: dict[int, tuple[str, int]] = {}
        for _ in range(r.take(">i")):
            node_id = r.take(">i")
            host = r.string() or ""
            port = r.take(">i")
            r.string()  # rack
            brokers[node_id] = (host, port)
        controller_id = r.take(">i")
        result: dict[str, TopicInfo] = {}
        for _ in range(r.take(">i")):
            error_code = r.take(">h")
            name = r.string() or ""
            r.take(">b")  # is_internal
            info = TopicInfo(name, error_code)
            for _ in range(r.take(">i")):
                p_error = r.take(">h")
                index = r.take(">i")
                leader = r.take(">i")
                replicas = r.int32_array()
                isr = r.int32_array()
                info.partitions[index] = PartitionInfo(index, p_error, leader, replicas, isr)
            result[name] = info
        return ClusterInfo(brokers, controller_id, result)

    def create_topic(
        self,
        name: str,
        num_partitions: int = 1,
        replication_factor: int = 3,
        configs: dict[str, str] | None = None,
        assignments: dict[int, list[int]] | None = None,
        timeout_ms: int = 30000,
    ) -> int:
        """CreateTopics v2; returns the topic's error code (0, or 36 TOPIC_ALREADY_EXISTS, ...)."""
        configs = configs or {}
        body = struct.pack(">i", 1) + _string(name)
        if assignments:
            body += struct.pack(">ih", -1, -1) + struct.pack(">i", len(assignments))
            for partition, replicas in sorted(assignments.items()):
                body += struct.pack(">ii", partition, len(replicas)) + b"".join(
                    struct.pack(">i", r) for r in replicas
                )
        else:
            body += struct.pack(">ih", num_partitions, replication_factor) + struct.pack(">i", 0)
        body += struct.pack(">i", len(configs))
        for key, value in configs.items():
            body += _string(key) + _string(value)
        body += struct.pack(">ib", timeout_ms, 0)
        r = _Reader(self.request(19, 2, body))
        r.take(">i")  # throttle
        r.take(">i")  # topics count
        r.string()
        error_code = r.take(">h")
        return error_code

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 10000) -> int:
        """Produce v3 of one batch to one partition; returns the partition's error code."""
        body = _string(None) + struct.pack(">hi", acks, timeout_ms)
        body += struct.pack(">i", 1) + _string(topic) + struct.pack(">i", 1)
        body += struct.pack(">ii", partition, len(batch)) + batch
        r = _Reader(self.request(0, 3, body))
        r.take(">i")
        r.string()
        r.take(">i")
        r.take(">i")  # partition index
        return r.take(">h")


def metadata_from_any(
    brokers: list[tuple[str, int]], topics: list[str] | None = None, timeout: float = 3.0
) -> ClusterInfo:
    """Metadata from the first broker that answers (some may be paused or down)."""
    last: Exception | None = None
    for host, port in brokers:
        try:
            with ProbeConnection(host, port, timeout) as conn:
                return conn.metadata(topics)
        except (OSError, ProbeError, struct.error) as exc:
            last = exc
    raise ProbeError(f"no broker answered Metadata: {last}")

