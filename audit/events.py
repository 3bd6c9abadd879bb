"""Audit events: their names, the decisions they record, the envelope, and builders of events.

A builder returns an event's own fields; the writer (`insync_proxy.proxy.audit.AuditLog`) adds the
envelope (`schema_version`, `ts`, `proxy_id`: :func:`envelope`). The JSON schemas beside this module
are the reference (tests validate the builders' output against them).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

#: The version the proxy writes; the pipeline reads every one of SCHEMA_VERSIONS.
SCHEMA_VERSION: Final = 2
SCHEMA_VERSIONS: Final = (1, 2)
#: The JSON Schema (2020-12) of each version.
SCHEMA_FILES: Final = {v: Path(__file__).with_name(f"schema-v{v}.json") for v in SCHEMA_VERSIONS}

EVENT_PRODUCE_DECISION: Final = "produce_decision"
EVENT_ISR_CHANGE: Final = "isr_change"
EVENT_PRODUCE_SUMMARY: Final = "produce_summary"
EVENT_PARTITION_READINESS: Final = "partition_readiness"
#: Event kinds each schema version knows.
EVENT_KINDS_BY_VERSION: Final[dict[int, tuple[str, ...]]] = {
    1: (EVENT_PRODUCE_DECISION, EVENT_ISR_CHANGE),
    2: (EVENT_PRODUCE_SUMMARY, EVENT_ISR_CHANGE, EVENT_PARTITION_READINESS, EVENT_PRODUCE_DECISION),
}

#: What the proxy did with a Produce partition (`decision`).
DECISION_FORWARDED: Final = "forwarded"
DECISION_RAISED_BY_FLOOR: Final = "raised_by_floor"
DECISION_ANSWERED_NOT_ENOUGH_REPLICAS: Final = "answered_not_enough_replicas"
DECISION_ANSWERED_INVALID_REQUIRED_ACKS: Final = "answered_invalid_required_acks"
DECISIONS: Final = (DECISION_FORWARDED, DECISION_RAISED_BY_FLOOR, DECISION_ANSWERED_NOT_ENOUGH_REPLICAS,
                    DECISION_ANSWERED_INVALID_REQUIRED_ACKS)
#: Decisions where the proxy answered the partition itself (the broker never saw it).
PROXY_ANSWERED_DECISIONS: Final = (DECISION_ANSWERED_NOT_ENOUGH_REPLICAS, DECISION_ANSWERED_INVALID_REQUIRED_ACKS)

Event = dict[str, Any]


def format_ts(epoch_seconds: float) -> str:
    """RFC 3339 UTC with microseconds, e.g. 2026-11-21T07:33:16.123456Z."""
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def envelope(event: Event, at: float, proxy_id: str) -> Event:
    """The line as written: the envelope every event carries, then the event's own fields."""
    return {"schema_version": SCHEMA_VERSION, "ts": format_ts(at), "proxy_id": proxy_id, **event}


def isr_change_event(topic: str, partition: int, isr_size: int, min_isr: int | None, leader_id: int | None) -> Event:
    """The proxy's view of a partition's ISR, effective min ISR or leader changed."""
    return {"event": EVENT_ISR_CHANGE, "topic": topic, "partition": partition, "isr_size": isr_size, "min_isr": min_isr,
            "leader_id": leader_id}


def partition_readiness_event(topic: str, partition: int, ready: bool, isr_size: int, min_isr: int,
                              leader_id: int | None) -> Event:
    """A partition turned unready (ISR below the effective min ISR) or ready again in the proxy's view."""
    return {"event": EVENT_PARTITION_READINESS, "topic": topic, "partition": partition, "ready": ready,
            "isr_size": isr_size, "min_isr": min_isr, "leader_id": leader_id}

