"""The audit contract: one field list, the JSON schemas agree with it, and every event comes from a builder."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from insync_proxy.audit import events
from insync_proxy.audit.events import (
    DECISION_ANSWERED_NOT_ENOUGH_REPLICAS,
    DECISION_FORWARDED,
    FIELDS,
    FIELDS_BY_NAME,
    JSON_TYPES,
    PRODUCE_SUMMARY_FIELDS,
    SCHEMA_FILES,
    SCHEMA_VERSION,
    SCHEMA_VERSIONS,
    envelope,
    fields_of_version,
    isr_change_event,
    partition_readiness_event,
    produce_decision_event,
    produce_summary_event,
)

ROOT = Path(__file__).resolve().parents[2]


def _json_type(prop: dict[str, Any]) -> str:
    """The one JSON type a schema property allows besides null (an enum's or a const's from its values)."""
    if "type" in prop:
        types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
        (only,) = set(types) - {"null"}
        return str(only)
    values = prop["enum"] if "enum" in prop else [prop["const"]]
    (kind,) = {type(v) for v in values if v is not None}
    return {str: "string", int: "integer"}[kind]


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_each_json_schema_names_exactly_the_fields_of_its_version_with_their_types(version: int) -> None:
    properties = json.loads(SCHEMA_FILES[version].read_text())["properties"]
    assert set(properties) == {f.name for f in fields_of_version(version)}
    assert {name: _json_type(prop) for name, prop in properties.items()} == \
        {name: JSON_TYPES[FIELDS_BY_NAME[name].type] for name in properties}


def test_the_field_list_names_each_field_once() -> None:
    assert len(FIELDS_BY_NAME) == len(FIELDS)
    assert set(PRODUCE_SUMMARY_FIELDS) <= set(FIELDS_BY_NAME)


def _every_event() -> list[events.Event]:
    return [
        produce_summary_event(interval_start=events.format_ts(0.0), interval_seconds=10.0, listener="broker-1",
                              client_id=None, topic="t", partition=0, acks_requested=-1, acks_sent=-1,
                              decision=DECISION_FORWARDED, error_code=0, requests=2, records=20, record_bytes=2000,
                              latency_count=2, latency_sum_ms=3.0, latency_min_ms=1.0, latency_max_ms=2.0,
                              latency_buckets=[[40, 1], [44, 1]]),
        produce_decision_event(listener="bootstrap", client_id="c", topic="t", partition=1, acks_requested=1,
                               acks_sent=None, isr_size=1, min_isr=2, decision=DECISION_ANSWERED_NOT_ENOUGH_REPLICAS,
                               error_code=19, latency_ms=0.5, record_bytes=100, records=1, api_version=9,
                               correlation_id=7),
        isr_change_event("t", 2, 3, None, 1),
        partition_readiness_event("t", 3, False, 1, 2, None),
    ]


def test_every_builder_writes_a_valid_event_of_known_fields() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILES[SCHEMA_VERSION].read_text()))
    for event in _every_event():
        line = envelope(event, 1_700_000_000.0, "p")
        assert list(validator.iter_errors(line)) == [], line
        assert set(line) <= set(FIELDS_BY_NAME), line
    assert tuple(_every_event()[0]) == ("event", *PRODUCE_SUMMARY_FIELDS)


def test_the_proxy_writes_no_event_but_through_the_builders() -> None:
    # A dict literal with an "event" key anywhere in proxy/ would be an event built by hand.
    by_hand = []
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "event" for k in node.keys):
                by_hand.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert by_hand == []
