"""What the run saw, as it saw it: the event windows, the proxy's samples, every acknowledgement and refusal, the
latency histograms, the brokers' outages. The clients, samplers and events write here; the oracle and the report
read it at the end."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Window:
    """One event, from its start to its end (None while it runs)."""

    name: str
    start: float
    end: float | None = None
    detail: str = ""
    failed: str = ""


@dataclass
class Sample:
    """The proxy at one moment: /proc, /readyz, an ApiVersions through it, its log and /metrics."""

    t: float
    rss_mib: float
    fds: int
    threads: int
    tasks: float | None
    ready: bool
    can_serve: bool
    log_lines: int
    control_requests: float


@dataclass
class Acks2Send:
    partition: int
    sent: float
    answered: float
    ok: bool
    error: str = ""


@dataclass
class Findings:
    samples: list[Sample] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    #: (t, topic, partition, isr size) of the brokers' own view
    isr: dict[tuple[str, int], list[tuple[float, int]]] = field(default_factory=dict)
    acks2: list[Acks2Send] = field(default_factory=list)
    #: (partition, offset, value) VerifiableProducer acknowledged, and its send errors
    acked: list[tuple[int, int, int]] = field(default_factory=list)
    producer_errors: int = 0
    #: (partition, offset, value) the Python partitioner's producer had acknowledged (acks=-2), and its refusals
    partitioner_acked: list[tuple[int, int, int]] = field(default_factory=list)
    partitioner_refused: Counter[str] = field(default_factory=Counter)
    tag_checks: int = 0
    tag_wrong: list[str] = field(default_factory=list)
    tag_absent: int = 0
    tag_stale_in_outage: int = 0
    #: (t, records) the consumer group read
    consumed: list[tuple[float, int]] = field(default_factory=list)
    address_leaks: list[str] = field(default_factory=list)
    metadata_failures: int = 0
    #: kind -> (t, {bucket: count}) once a second from LatencyProducer
    latency: dict[str, list[tuple[float, dict[int, int]]]] = field(default_factory=lambda: {"direct": [], "proxy": []})
    latency_errors: Counter[str] = field(default_factory=Counter)
    latency_restarts: Counter[str] = field(default_factory=Counter)
    #: (partition, offset, value, t) librdkafka's acks=1 producer had acknowledged; acks=0 records sent
    acks1: list[tuple[int, int, int, float]] = field(default_factory=list)
    acks0_sent: int = 0
    acks01_errors: Counter[str] = field(default_factory=Counter)
    #: one record per certificate rotation or CA change: what was checked after it
    rotations: list[dict[str, Any]] = field(default_factory=list)
    slow: list[dict[str, Any]] = field(default_factory=list)
    share_received: list[int] = field(default_factory=list)
    #: (node id, start, end): a broker the proxy could not reach (killed, stopped, paused or silent)
    outages: list[tuple[int, float, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
