"""Slow consumers for the memory budget's test and benchmark (issue #29 item 3): raw connections that each
pipeline Fetches and read nothing, then read every answer whole; the proxy process's RSS from /proc; a
producer's round trips beside them.
"""

from __future__ import annotations

import os
import socket
import statistics
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.raw_client import RawKafkaClient, fetch_request_body
from harness.waiting import wait_until
from insync_proxy.client.blocking_client import request_frame
from insync_proxy.protocol import ApiKey
from insync_proxy.protocol.records import encode_record_batch

MIB = 1024 * 1024
#: Fetch version of the slow consumers (by topic name, not flexible).
FETCH_VERSION = 11


def fill(address: str, topic: str, mib: float) -> None:
    """Write about `mib` MiB of incompressible 1 KiB records to partition 0 of `topic` via `address`."""
    batch = encode_record_batch([os.urandom(1024) for _ in range(256)])
    with RawKafkaClient(address) as client:
        for _ in range(max(1, int(mib * MIB) // len(batch) + 1)):
            # acks=all: the high watermark covers every batch, so a Fetch at once reads them all
            result = client.produce({(topic, 0): batch}, acks=-1)[(topic, 0)]
            if result.error_code:
                raise RuntimeError(f"produce failed: error {result.error_code}")


def fetch_request(correlation_id: int, topic: str, max_bytes: int) -> bytes:
    """A Fetch v11 frame (size prefix included) for partition 0 of `topic` from offset 0, up to `max_bytes`."""
    return bytes(request_frame(ApiKey.FETCH, FETCH_VERSION, fetch_request_body(topic, 0, max_bytes),
                               client_id="slow-consumer", correlation_id=correlation_id))


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """One response frame: (its correlation id, its bytes after the correlation id)."""
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    frame = _read_exactly(sock, size)
    return struct.unpack_from(">i", frame)[0], frame[4:]


def reference_answer(host: str, port: int, topic: str, max_bytes: int) -> bytes:
    """What one Fetch of the slow consumers is answered, read at once (the whole answer to compare with).

    The proxy opens a broker's port once its Metadata named the broker: connecting is retried a while."""
    sock = wait_until(lambda: socket.create_connection((host, port), timeout=60), 30,
                      what=f"the proxy's port {port}", retry_on=(ConnectionRefusedError,))
    with sock:
        sock.sendall(fetch_request(1, topic, max_bytes))
        correlation_id, body = read_response(sock)
        assert correlation_id == 1
        return body


@dataclass
class SlowConsumers:
    """`connections` sockets that each send `fetches` pipelined Fetches and read nothing until `read_all`."""

    host: str
    port: int
    topic: str
    connections: int
    fetches: int
    max_bytes: int
    #: The clients' socket receive buffer: small, so the proxy, not the kernel, is left holding the bytes.
    receive_buffer: int = 64 * 1024
    sockets: list[socket.socket] = field(default_factory=list)

    def open(self) -> SlowConsumers:
        for _ in range(self.connections):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
            sock.settimeout(120)
            sock.connect((self.host, self.port))
            sock.sendall(b"".join(fetch_request(i + 1, self.topic, self.max_bytes) for i in range(self.fetches)))
            self.sockets.append(sock)
        return self

    def read_all(self, expected: bytes) -> int:
        """Read every answer of every connection; each must be `expected` whole, in order. Returns bytes read."""
        total = 0
        for sock in self.sockets:
            for i in range(self.fetches):
                correlation_id, body = read_response(sock)
                if correlation_id != i + 1:
                    raise AssertionError(f"correlation id {correlation_id}, expected {i + 1}")
                if len(body) != len(expected) or body[-4096:] != expected[-4096:]:
                    raise AssertionError(f"answer {i + 1}: {len(body)} bytes, expected {len(expected)}")
                total += len(body) + 8
        return total

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.sockets.clear()


def memory_kib(pid: int) -> dict[str, int]:
    """A process's VmRSS (now) and VmHWM (its peak RSS so far), in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def produce_round_trips(address: str, topic: str, count: int) -> list[float]:
    """Seconds of `count` small acks=1 Produce round trips, one after another, on one connection."""
    batch = encode_record_batch([b"beside the slow consumers"])
    seconds = []
    with RawKafkaClient(address) as client:
        for _ in range(count):
            started = time.perf_counter()
            result = client.produce({(topic, 0): batch}, acks=1)[(topic, 0)]
            seconds.append(time.perf_counter() - started)
            if result.error_code:
                raise RuntimeError(f"produce failed: error {result.error_code}")
    return seconds


def p50(values: list[float]) -> float:
    return statistics.median(values)
