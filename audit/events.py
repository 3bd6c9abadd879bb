"""Audit events: their names, the decisions they record, their fields, the envelope, and the builders.

`FIELDS` is the one list of the fields an event may carry, with their types and the schema version
that brought each: the pipeline's Spark schema is built from it, and the JSON schemas beside this
module (schema-v1.json, schema-v2.json, with their descriptions and per-event requirements) are
tested against it. Every event the proxy emits is built here: a builder returns an event's own
fields; the writer (`insync_proxy.proxy.audit.AuditLog`) adds the envelope (`schema_version`, `ts`,
`proxy_id`: :func:`envelope`). Tests validate the builders' output against the JSON schemas.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, NamedTuple

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

#: Field types, in Kafka's words; JSON_TYPES says how each is written.
INT32: Final = "int32"
INT64: Final = "int64"
FLOAT64: Final = "float64"
STRING: Final = "string"
BOOLEAN: Final = "boolean"
#: `produce_summary.latency_buckets`: [bucket index, count] pairs of int64 (audit/buckets.py).
BUCKETS: Final = "buckets"
#: The JSON type of each field type (the JSON schemas' "type", null aside).
JSON_TYPES: Final = {INT32: "integer", INT64: "integer", FLOAT64: "number", STRING: "string", BOOLEAN: "boolean",
                     BUCKETS: "array"}


class Field(NamedTuple):
    """A field an audit event may carry: its name, its type, and the schema version that brought it."""

    name: str
    type: str
    since: int


#: Every field of every schema version, each once: the envelope and the events' own fields, in the order
#: the pipeline reads them (its parse schema and staged copies keep this order).
FIELDS: Final[tuple[Field, ...]] = (
    Field("schema_version", INT32, 1),
    Field("event", STRING, 1),
    Field("ts", STRING, 1),
    Field("proxy_id", STRING, 1),
    Field("listener", STRING, 1),
    Field("client_id", STRING, 1),
    Field("topic", STRING, 1),
    Field("partition", INT32, 1),
    Field("acks_requested", INT32, 1),
    Field("acks_sent", INT32, 1),
    Field("isr_size", INT32, 1),
    Field("min_isr", INT32, 1),
    Field("decision", STRING, 1),
    Field("error_code", INT32, 1),
    Field("latency_ms", FLOAT64, 1),
    Field("record_bytes", INT64, 1),
    Field("api_version", INT32, 1),
    Field("correlation_id", INT32, 1),
    Field("leader_id", INT32, 1),
    Field("interval_start", STRING, 2),
    Field("interval_seconds", FLOAT64, 2),
    Field("requests", INT64, 2),
    Field("records", INT64, 2),
    Field("latency_count", INT64, 2),
    Field("latency_sum_ms", FLOAT64, 2),
    Field("latency_min_ms", FLOAT64, 2),
    Field("latency_max_ms", FLOAT64, 2),
    Field("latency_buckets", BUCKETS, 2),
    Field("ready", BOOLEAN, 2),
)
#: Each field by name.
FIELDS_BY_NAME: Final = {f.name: f for f in FIELDS}
#: The fields of a `produce_summary` event, as its builder writes them (after `event`; the envelope aside).
PRODUCE_SUMMARY_FIELDS: Final = (
    "interval_start", "interval_seconds", "listener", "client_id", "topic", "partition", "acks_requested", "acks_sent",
    "decision", "error_code", "requests", "records", "record_bytes", "latency_count", "latency_sum_ms",
    "latency_min_ms", "latency_max_ms", "latency_buckets",
)


def fields_of_version(version: int) -> tuple[Field, ...]:
    """The fields schema ``version`` knows (its JSON schema's properties)."""
    return tuple(f for f in FIELDS if f.since <= version)


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


def produce_summary_event(*, interval_start: str, interval_seconds: float, listener: str, client_id: str | None,
                          topic: str, partition: int, acks_requested: int, acks_sent: int | None, decision: str,
                          error_code: int | None, requests: int, records: int, record_bytes: int, latency_count: int,
                          latency_sum_ms: float, latency_min_ms: float | None, latency_max_ms: float | None,
                          latency_buckets: list[list[int]]) -> Event:
    """One key's Produce traffic over one interval (schema v2; proxy/audit/summary.py accumulates it)."""
    return {"event": EVENT_PRODUCE_SUMMARY, "interval_start": interval_start, "interval_seconds": interval_seconds,
            "listener": listener, "client_id": client_id, "topic": topic, "partition": partition,
            "acks_requested": acks_requested, "acks_sent": acks_sent, "decision": decision, "error_code": error_code,
            "requests": requests, "records": records, "record_bytes": record_bytes, "latency_count": latency_count,
            "latency_sum_ms": latency_sum_ms, "latency_min_ms": latency_min_ms, "latency_max_ms": latency_max_ms,
            "latency_buckets": latency_buckets}


def produce_decision_event(*, listener: str, client_id: str | None, topic: str, partition: int, acks_requested: int,
                           acks_sent: int | None, isr_size: int | None, min_isr: int | None, decision: str,
                           error_code: int | None, latency_ms: float | None, record_bytes: int, records: int,
                           api_version: int, correlation_id: int) -> Event:
    """What the proxy did with one partition of one Produce request (audit.detail = "every_request" only)."""
    return {"event": EVENT_PRODUCE_DECISION, "listener": listener, "client_id": client_id, "topic": topic,
            "partition": partition, "acks_requested": acks_requested, "acks_sent": acks_sent, "isr_size": isr_size,
            "min_isr": min_isr, "decision": decision, "error_code": error_code, "latency_ms": latency_ms,
            "record_bytes": record_bytes, "records": records, "api_version": api_version,
            "correlation_id": correlation_id}
