"""Blocking socket helpers for the project's small synchronous Kafka clients (probe, partitioner, tests)."""

from __future__ import annotations

import socket


def read_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes from `sock`; ConnectionError if the peer closes first."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed by the peer")
        data += chunk
    return bytes(data)
