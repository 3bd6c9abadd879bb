"""Builders for audit events whose report answers are known by construction."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

T0 = datetime(2026, 11, 21, 7, 0, 0, tzinfo=UTC)


def ts(seconds: float) -> str:
    """RFC 3339 UTC with microseconds, ``seconds`` after :data:`T0`."""
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def at(seconds: float) -> datetime:
    """The aware datetime ``seconds`` after :data:`T0`."""
    return T0 + timedelta(seconds=seconds)


def decision(
    t: float,
    *,
    topic: str = "orders",
    partition: int = 0,
    decision: str = "forwarded",
    acks_requested: int | None = -1,
    acks_sent: int | None = -1,
    isr_size: int | None = 3,
    min_isr: int | None = 2,
    latency_ms: float | None = 5.0,
    record_bytes: int | None = 100,
    client_id: str | None = "app-1",
    proxy_id: str = "sidecar-a",
    error_code: int | None = 0,
) -> dict[str, Any]:
    """A ``produce_decision`` event at ``t`` seconds after T0."""
    return {
        "schema_version": 1, "event": "produce_decision", "ts": ts(t), "proxy_id": proxy_id,
        "listener": "broker-1", "client_id": client_id, "topic": topic, "partition": partition,
        "acks_requested": acks_requested, "acks_sent": acks_sent, "isr_size": isr_size, "min_isr": min_isr,
        "decision": decision, "error_code": error_code, "latency_ms": latency_ms, "record_bytes": record_bytes,
        "api_version": 11, "correlation_id": 7, "leader_id": None,
    }


def isr_change(t: float, isr_size: int | None, *, topic: str = "orders", partition: int = 0, min_isr: int | None = 2,
               proxy_id: str = "sidecar-a") -> dict[str, Any]:
    """An ``isr_change`` event at ``t`` seconds after T0."""
    return {
        "schema_version": 1, "event": "isr_change", "ts": ts(t), "proxy_id": proxy_id, "listener": None,
        "client_id": None, "topic": topic, "partition": partition, "acks_requested": None, "acks_sent": None,
        "isr_size": isr_size, "min_isr": min_isr, "decision": None, "error_code": None, "latency_ms": None,
        "record_bytes": None, "api_version": None, "correlation_id": None, "leader_id": 1,
    }


def write_jsonl(path: Path, events: Iterable[dict[str, Any] | str]) -> Path:
    """Write events (dicts as JSON, strings verbatim) one per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for e in events:
            fh.write((e if isinstance(e, str) else json.dumps(e)) + "\n")
    return path


def summary(
    t: float,
    *,
    interval_s: float = 10.0,
    topic: str = "orders",
    partition: int = 0,
    decision: str = "forwarded",
    acks_requested: int = -1,
    acks_sent: int | None = -1,
    error_code: int | None = 0,
    requests: int = 10,
    records: int = 20,
    record_bytes: int = 1000,
    latencies_ms: list[float] | None = None,
    client_id: str | None = "app-1",
    proxy_id: str = "sidecar-a",
    listener: str = "broker-1",
) -> dict[str, Any]:
    """A v2 ``produce_summary`` for the interval [t, t + interval_s); ``latencies_ms`` are bucketed as the
    proxy does (default: ``requests`` latencies of 5 ms; ``[]`` for acks=0)."""
    from insync_proxy.audit.buckets import bucket_index

    lat = [5.0] * requests if latencies_ms is None else latencies_ms
    counts: dict[int, int] = {}
    for v in lat:
        counts[bucket_index(v)] = counts.get(bucket_index(v), 0) + 1
    return {
        "schema_version": 2, "event": "produce_summary", "ts": ts(t + interval_s), "proxy_id": proxy_id,
        "interval_start": ts(t), "interval_seconds": interval_s, "listener": listener, "client_id": client_id,
        "topic": topic, "partition": partition, "acks_requested": acks_requested, "acks_sent": acks_sent,
        "decision": decision, "error_code": error_code, "requests": requests, "records": records,
        "record_bytes": record_bytes, "latency_count": len(lat), "latency_sum_ms": sum(lat),
        "latency_min_ms": min(lat) if lat else None, "latency_max_ms": max(lat) if lat else None,
        "latency_buckets": [[i, n] for i, n in sorted(counts.items())],
    }


def readiness(t: float, ready: bool, isr_size: int, *, topic: str = "orders", partition: int = 0, min_isr: int = 2,
              proxy_id: str = "sidecar-a", leader_id: int | None = 1) -> dict[str, Any]:
    """A v2 ``partition_readiness`` event at ``t`` seconds after T0."""
    return {
        "schema_version": 2, "event": "partition_readiness", "ts": ts(t), "proxy_id": proxy_id, "topic": topic,
        "partition": partition, "ready": ready, "isr_size": isr_size, "min_isr": min_isr, "leader_id": leader_id,
    }


def isr_change_v2(t: float, isr_size: int | None, *, topic: str = "orders", partition: int = 0,
                  min_isr: int | None = 2, proxy_id: str = "sidecar-a") -> dict[str, Any]:
    """A v2 ``isr_change`` event (only the fields v2 keeps)."""
    return {
        "schema_version": 2, "event": "isr_change", "ts": ts(t), "proxy_id": proxy_id, "topic": topic,
        "partition": partition, "isr_size": isr_size, "min_isr": min_isr, "leader_id": 1,
    }


def audited_requests(events: Iterable[dict[str, Any]], topic: str) -> int:
    """Produce requests to ``topic`` the audit events account for, whatever the schema version: one per
    v1 ``produce_decision``, ``requests`` per v2 ``produce_summary`` (v2's per-request debug events are
    already in the summaries)."""
    total = 0
    for e in events:
        if e.get("topic") != topic:
            continue
        if e.get("event") == "produce_decision" and e.get("schema_version") == 1:
            total += 1
        elif e.get("event") == "produce_summary":
            total += int(e["requests"])
    return total
