"""Kafka's wire format, written by hand for the scenario runner's samplers (benchmarks/scenario/).

The runner checks what the proxy answers, so it must not read those answers with the proxy's own code
(`protocol/`): this module frames ApiVersions v0, SaslHandshake v1, SaslAuthenticate v0, Metadata v12 and Fetch v4
(the slow consumers), and reads a Metadata v12 answer's brokers, topics, ISRs and each topic's tagged field 637,
from Kafka's message specs alone.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from dataclasses import dataclass, field

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
METADATA = 3
FETCH = 1
#: KIP-637's tagged field on a MetadataResponse topic (int16 min.insync.replicas).
TAG_MIN_INSYNC = 637


class WireError(RuntimeError):
    """An answer that could not be read, or an error code where none was expected."""


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return _uvarint(len(data) + 1) + data


def request(api_key: int, version: int, correlation_id: int, body: bytes, flexible: bool = False) -> bytes:
    """A size-prefixed request: header v1 (v2 with `flexible`: an empty tag buffer after the client id)."""
    header = struct.pack(">hhi", api_key, version, correlation_id) + _string("year-sampler")
    if flexible:
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def fetch_request(correlation_id: int, topic: str, partition: int, offset: int, max_bytes: int) -> bytes:
    """Fetch v4 of one partition from `offset`, at most `max_bytes` (the whole answer and the partition alike)."""
    body = struct.pack(">iiiib", -1, 500, 1, max_bytes, 0)  # replica_id, max_wait_ms, min_bytes, max_bytes, isolation
    body += struct.pack(">i", 1) + _string(topic) + struct.pack(">i", 1)
    body += struct.pack(">iqi", partition, offset, max_bytes)
    return request(FETCH, 4, correlation_id, body)


def metadata_request(correlation_id: int, topics: list[str]) -> bytes:
    """MetadataRequest v12 for `topics` (no auto-creation)."""
    body = _uvarint(len(topics) + 1)
    for name in topics:
        body += b"\x00" * 16 + _compact_string(name) + b"\x00"
    body += b"\x00\x00\x00"  # allow_auto_topic_creation, include_topic_authorized_operations, tags
    return request(METADATA, 12, correlation_id, body, flexible=True)


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise WireError(f"answer cut short at byte {self.at} (wanted {n} more of {len(self.data)})")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def int8(self) -> int:
        return int(struct.unpack(">b", self.take(1))[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1).decode()

    def int32_array(self) -> list[int]:
        return [self.int32() for _ in range(self.uvarint() - 1)]

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.take(self.uvarint())
        return out


@dataclass
class TopicAnswer:
    error_code: int
    #: partition -> (leader, isr)
    partitions: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    #: Tagged field 637 when the proxy set it.
    min_insync: int | None = None


@dataclass
class MetadataAnswer:
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicAnswer]


def read_metadata_v12(payload: bytes) -> MetadataAnswer:
    """A MetadataResponse v12 body after the correlation id (response header v1: its tags come first)."""
    r = Reader(payload)
    r.tags()
    r.int32()  # throttle_time_ms
    brokers = {}
    for _ in range(r.uvarint() - 1):
        node_id, host, port = r.int32(), r.compact_string() or "", r.int32()
        r.compact_string()  # rack
        r.tags()
        brokers[node_id] = (host, port)
    r.compact_string()  # cluster_id
    r.int32()  # controller_id
    topics = {}
    for _ in range(r.uvarint() - 1):
        error_code, name = r.int16(), r.compact_string() or ""
        r.take(16)  # topic_id
        r.int8()  # is_internal
        answer = TopicAnswer(error_code)
        for _ in range(r.uvarint() - 1):
            r.int16()
            index, leader = r.int32(), r.int32()
            r.int32()  # leader_epoch
            r.int32_array()  # replica_nodes
            isr = r.int32_array()
            r.int32_array()  # offline_replicas
            r.tags()
            answer.partitions[index] = (leader, isr)
        r.int32()  # topic_authorized_operations
        tags = r.tags()
        if TAG_MIN_INSYNC in tags:
            answer.min_insync = int(struct.unpack(">h", tags[TAG_MIN_INSYNC])[0])
        topics[name] = answer
    return MetadataAnswer(brokers, topics)


class WireConnection:
    """A blocking connection that sends one request at a time and reads its answer."""

    def __init__(self, host: str, port: int, timeout: float = 5.0, ssl_context: ssl.SSLContext | None = None,
                 receive_buffer: int | None = None) -> None:
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:  # set before connecting: the window the kernel offers the proxy
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        raw.settimeout(timeout)
        try:
            raw.connect((host, port))
            self.sock: socket.socket = (ssl_context.wrap_socket(raw, server_hostname=host) if ssl_context is not None
                                        else raw)
        except BaseException:
            raw.close()
            raise
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise WireError("the connection closed before the answer was whole")
            out += chunk
        return bytes(out)

    def call(self, frame_of: object, *args: object) -> bytes:
        """Send the frame `frame_of(correlation_id, *args)` built; the answer after its correlation id."""
        self.correlation_id += 1
        self.sock.sendall(frame_of(self.correlation_id, *args))  # type: ignore[operator]
        size = struct.unpack(">i", self._read_exactly(4))[0]
        answer = self._read_exactly(size)
        if struct.unpack(">i", answer[:4])[0] != self.correlation_id:
            raise WireError("an answer to another request")
        return answer[4:]

    def api_versions(self) -> int:
        """ApiVersions v0: its error code."""
        answer = self.call(lambda cid: request(API_VERSIONS, 0, cid, b""))
        return int(struct.unpack(">h", answer[:2])[0])

    def sasl_plain(self, username: str, password: str) -> None:
        """SaslHandshake v1 (PLAIN) and SaslAuthenticate v0."""
        answer = self.call(lambda cid: request(SASL_HANDSHAKE, 1, cid, _string("PLAIN")))
        if struct.unpack(">h", answer[:2])[0] != 0:
            raise WireError(f"SaslHandshake PLAIN refused (error {struct.unpack('>h', answer[:2])[0]})")
        token = b"\x00" + username.encode() + b"\x00" + password.encode()
        answer = self.call(lambda cid: request(SASL_AUTHENTICATE, 0, cid, struct.pack(">i", len(token)) + token))
        if struct.unpack(">h", answer[:2])[0] != 0:
            raise WireError(f"SaslAuthenticate refused (error {struct.unpack('>h', answer[:2])[0]})")

    def metadata(self, topics: list[str]) -> MetadataAnswer:
        return read_metadata_v12(self.call(metadata_request, topics))

    def slow_fetch(self, topic: str, partition: int, offset: int, max_bytes: int, chunk: int, pause: float,
                   until: float) -> int:
        """One Fetch v4, its answer read `chunk` bytes at a time with `pause` seconds between reads (a consumer that
        reads its socket slowly), until the answer is whole or time.monotonic() passes `until`: bytes read."""
        self.correlation_id += 1
        self.sock.sendall(fetch_request(self.correlation_id, topic, partition, offset, max_bytes))
        size = struct.unpack(">i", self._read_exactly(4))[0]
        done = 0
        while done < size and time.monotonic() < until:
            data = self.sock.recv(min(chunk, size - done))
            if not data:
                raise WireError("the connection closed before the answer was whole")
            done += len(data)
            time.sleep(pause)
        return done + 4
