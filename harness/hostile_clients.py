"""Hostile clients beside a healthy one, through a real proxy: the fuzz load of issue #29's acceptance.

Each hostile connection sends one malformed frame and waits for the proxy to close it, so what was sent
per cause is exactly what the proxy must count (insync_proxy_bad_input_total{cause}):

- bad_frame: an unknown API key, or a header cut short;
- oversized_frame: a 2 GiB or a negative size prefix;
- broker_closed: a ListOffsets request (no behaviour reads it) whose body is garbage: the proxy forwards
  it, the broker cannot parse it and closes the connection with the request in flight.

Used by tests/integration/test_hostile_clients.py and benchmarks/hostile_bench.py.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from insync_proxy.client.blocking_client import request_frame
from insync_proxy.protocol import ApiKey
from insync_proxy.proxy.observability.logs import BAD_FRAME, BROKER_CLOSED, OVERSIZED_FRAME

#: The causes a hostile client can provoke (a refused connection needs a connection limit).
CAUSES = (BAD_FRAME, OVERSIZED_FRAME, BROKER_CLOSED)

_MALFORMED: dict[str, tuple[bytes, ...]] = {
    BAD_FRAME: (
        bytes(request_frame(9999, 0, b"", client_id="hostile")),  # no such API
        struct.pack(">i", 3) + b"\x00\x03\x00",  # a request header cut after 3 bytes
    ),
    OVERSIZED_FRAME: (
        struct.pack(">i", 2**31 - 1) + b"\x00" * 8,
        struct.pack(">i", -2),
    ),
    BROKER_CLOSED: (bytes(request_frame(ApiKey.LIST_OFFSETS, 1, b"\xde\xad\xbe\xef", client_id="hostile")),),
}


def malformed(cause: str, i: int) -> bytes:
    """The i-th malformed frame of a cause (its variants in turn)."""
    variants = _MALFORMED[cause]
    return variants[i % len(variants)]


@dataclass
class HostileResult:
    """What the hostile clients sent, and how their connections ended."""

    sent: Counter[str] = field(default_factory=Counter)
    #: Connections the proxy closed after the frame (the expected end).
    closed_by_proxy: int = 0
    #: Connections the proxy did not close within the wait, or could not be opened.
    not_closed: int = 0
    connect_failures: int = 0
    seconds: float = 0.0


async def _one(host: str, port: int, frame: bytes, wait: float) -> str:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return "connect_failure"
    try:
        writer.write(frame)
        try:
            while await asyncio.wait_for(reader.read(4096), wait):
                pass  # nothing is owed; whatever comes, the connection must end
            return "closed"
        except (ConnectionError, OSError):
            return "closed"
        except TimeoutError:
            return "not_closed"
    finally:
        writer.close()


async def send_malformed(host: str, port: int, frames: int, connections: int = 48, wait: float = 30.0,
                         progress: Any = None) -> HostileResult:
    """`frames` malformed frames, one per connection, causes in turn, from `connections` clients at once."""
    result = HostileResult()
    next_index = 0
    started = time.monotonic()

    async def client() -> None:
        nonlocal next_index
        while next_index < frames:
            i = next_index
            next_index += 1
            cause = CAUSES[i % len(CAUSES)]
            outcome = await _one(host, port, malformed(cause, i // len(CAUSES)), wait)
            if outcome == "connect_failure":
                result.connect_failures += 1
                continue
            result.sent[cause] += 1
            if outcome == "closed":
                result.closed_by_proxy += 1
            else:
                result.not_closed += 1
            if progress is not None and (i + 1) % 50_000 == 0:
                progress(i + 1, time.monotonic() - started)

    await asyncio.gather(*(client() for _ in range(connections)))
    result.seconds = time.monotonic() - started
    return result


class HealthyProducer:
    """A librdkafka producer (acks=all) beside the hostile clients: every delivery error or client error
    (a broken connection, a timeout) it reports is a healthy-client error."""

    def __init__(self, bootstrap: str, topic: str, rate_per_second: float = 200.0) -> None:
        from confluent_kafka import Producer

        self.errors: list[str] = []
        self.delivered = 0
        self.topic = topic
        self.rate = rate_per_second
        self._stop = threading.Event()
        self._producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
            "error_cb": lambda err: self.errors.append(f"client error: {err}"),
        })
        self._thread = threading.Thread(target=self._run, name="healthy-producer", daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"delivery: {err}")
        else:
            self.delivered += 1

    def _run(self) -> None:
        i = 0
        started = time.monotonic()
        while not self._stop.is_set():
            self._producer.produce(self.topic, f"healthy-{i}".encode(), on_delivery=self._delivered)
            i += 1
            self._producer.poll(0)
            ahead = i / self.rate - (time.monotonic() - started)
            if ahead > 0:
                self._producer.poll(ahead)

    def start(self) -> HealthyProducer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> int:
        """Stop producing and flush; returns how many records are still undelivered."""
        self._stop.set()
        self._thread.join(timeout)
        left = int(self._producer.flush(timeout))
        del self._producer  # its connections close now, not when the proxy goes away after it
        return left
