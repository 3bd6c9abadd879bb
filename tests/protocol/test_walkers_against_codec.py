"""Every fast walker against the generated codec, for every version up to the caps.

The walkers (Produce request index and response scan, Metadata scan and splice, the request and response
headers) do not use the message classes: they read their version facts from protocol/kafka_versions.py.
Both come from the same Kafka specs (scripts/generate-protocol); here, for every version the registry
supports (the caps come from the generated tables, so a Kafka bump that raises a cap is tested at once),
random messages of the generated classes are encoded by the generic codec and walked, and the walk must
read exactly what the full decode reads.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insync_proxy.protocol import kafka_versions
from insync_proxy.protocol.api_keys import FIRST_FLEXIBLE_VERSION, ApiKey, is_flexible
from insync_proxy.protocol.errors import UnsupportedVersion
from insync_proxy.protocol.headers import (
    RequestHeader,
    decode_request_header,
    encode_request_header,
    encode_response_with_header,
    peek_request_header,
    request_header_version,
    response_header_version,
    split_response,
)
from insync_proxy.protocol.kafka_messages import (
    REQUEST_TYPES,
    RESPONSE_TYPES,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from insync_proxy.protocol.messages import decode_request, encode_request, encode_response
from insync_proxy.protocol.metadata_scan import METADATA_MAX_VERSION, scan_metadata_response
from insync_proxy.protocol.metadata_splice import splice_metadata_response
from insync_proxy.protocol.produce import (
    build_forward_request,
    build_produce_error_response,
    index_produce_request,
    merge_produce_responses,
    read_produce_acks,
    scan_produce_response,
)
from insync_proxy.protocol.schema import Message, Struct, VersionRange, schema_fields
from tests.protocol.metadata_helpers import assert_scan_equals_decode, decoded, generic_enrich, options_for

from .frames import request_frame
from .schema_gen import message_strategy

PRODUCE_VERSIONS = range(kafka_versions.PRODUCE_MIN_VERSION, kafka_versions.PRODUCE_MAX_VERSION + 1)
METADATA_VERSIONS = range(kafka_versions.METADATA_MIN_VERSION, kafka_versions.METADATA_MAX_VERSION + 1)


def _topic_key(topic: Any, version: int) -> str | uuid.UUID:
    return topic.topic_id if version >= kafka_versions.PRODUCE_REQUEST_TOPIC_DATA_TOPIC_ID_SINCE else topic.name


# -- the walkers' caps are the registry's ----------------------------------------------------------


def test_the_walkers_support_exactly_the_registrys_versions() -> None:
    assert ProduceRequest.VALID_VERSIONS == ProduceResponse.VALID_VERSIONS == (
        PRODUCE_VERSIONS.start, PRODUCE_VERSIONS.stop - 1)
    assert MetadataResponse.VALID_VERSIONS == (METADATA_VERSIONS.start, METADATA_MAX_VERSION)
    above = PRODUCE_VERSIONS.stop
    frame = bytearray(request_frame(ProduceRequest(), PRODUCE_VERSIONS.stop - 1))
    frame[2:4] = above.to_bytes(2, "big")
    with pytest.raises(UnsupportedVersion):
        index_produce_request(frame)
    with pytest.raises(UnsupportedVersion):
        scan_produce_response(b"\x00" * 16, above)
    with pytest.raises(UnsupportedVersion):
        scan_metadata_response(b"\x00" * 16, METADATA_MAX_VERSION + 1)


def test_the_walkers_facts_are_the_codecs() -> None:
    # Given the generated classes and the generated version tables (one source, two outputs)
    # Then every fact a walker reads is what the class says, and the flexible versions agree
    for api_key, cls in [*REQUEST_TYPES.items(), *RESPONSE_TYPES.items()]:
        name = ApiKey(api_key).name
        lo, hi = cls.VALID_VERSIONS
        assert (getattr(kafka_versions, f"{name}_MIN_VERSION"), getattr(kafka_versions, f"{name}_MAX_VERSION")) == (lo, hi)
        assert getattr(kafka_versions, f"{name}_FLEXIBLE_SINCE") == (-1 if cls.FLEXIBLE_FROM is None else cls.FLEXIBLE_FROM)
        assert FIRST_FLEXIBLE_VERSION[api_key] == cls.FLEXIBLE_FROM
        kind = "REQUEST" if cls.__name__.endswith("Request") else "RESPONSE"
        expected: dict[str, int] = {}
        _expected_facts(f"{name}_{kind}", cls, VersionRange(0, 0x7FFF), expected)
        actual = {k: v for k, v in vars(kafka_versions).items() if k.startswith(f"{name}_{kind}_")}
        assert actual == expected


def _expected_facts(prefix: str, cls: type[Struct], within: VersionRange, out: dict[str, int]) -> None:
    for field_name, spec, _ in schema_fields(cls):
        name = f"{prefix}_{field_name.upper()}"
        lo, hi = max(spec.versions.low, within.low), min(spec.versions.high, within.high)
        if lo > within.low:
            out[f"{name}_SINCE"] = lo
        if hi < within.high:
            out[f"{name}_UNTIL"] = hi
        nullable_lo = max(spec.nullable.low, lo)
        if nullable_lo <= min(spec.nullable.high, hi) and nullable_lo > lo:
            out[f"{name}_NULLABLE_SINCE"] = nullable_lo
        if spec.tag is not None:
            out[f"{name}_TAG"] = spec.tag
            if max(spec.tagged_versions.low, lo) > lo:
                out[f"{name}_TAGGED_SINCE"] = max(spec.tagged_versions.low, lo)
        element = getattr(spec.type, "element", spec.type)
        if isinstance(element, type) and issubclass(element, Struct):
            _expected_facts(name, element, VersionRange(lo, hi), out)


# -- Produce -------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_produce_request_walk_reads_what_the_codec_reads(version: int, data: st.DataObject) -> None:
    # Given any Produce request of the generated class, encoded by the generic codec
    request = data.draw(message_strategy(ProduceRequest, version))
    frame = request_frame(request, version, correlation_id=7, client_id=data.draw(st.none() | st.text(max_size=8)))
    body = frame[peek_request_header(frame).header_size:]
    full = decode_request(ApiKey.PRODUCE, version, body)
    assert isinstance(full, ProduceRequest)
    # When the walkers read it (the record sets stay opaque: produce_partition_records, which counts the
    # records of real batches, is tested with real ones in test_produce_partition_records.py)
    index = index_produce_request(frame)
    # Then they read what the full decode reads
    assert read_produce_acks(frame) == index.acks == full.acks
    assert (index.timeout_ms, index.transactional_id, index.flexible) == (
        full.timeout_ms, full.transactional_id if version >= kafka_versions.PRODUCE_REQUEST_TRANSACTIONAL_ID_SINCE
        else None, is_flexible(ApiKey.PRODUCE, version))
    partitions = [(_topic_key(t, version), p.index, None if p.records is None else bytes(p.records))
                  for t in full.topic_data for p in t.partition_data]
    assert [(s.topic, s.partition, None if s.records_size < 0 else bytes(index.records(s) or b""))
            for s in index.partitions()] == partitions
    if all(t.partition_data for t in full.topic_data):
        assert build_forward_request(index, {(s.topic, s.partition) for s in index.partitions()}) == bytes(frame)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_produce_response_walk_reads_what_the_codec_reads(version: int, data: st.DataObject) -> None:
    # Given any Produce response of the generated class
    response = data.draw(message_strategy(ProduceResponse, version))
    frame = encode_response_with_header(ApiKey.PRODUCE, version, 42, encode_response(response, version))
    # When the response walk reads it
    scan = scan_produce_response(frame, version)
    # Then it counts every partition, names the failed ones, and sees the top-level tagged fields
    partitions = [(_topic_key(t, version), p.index, p.error_code)
                  for t in response.responses for p in t.partition_responses]
    assert (scan.answered, scan.failed) == (len(partitions), [p for p in partitions if p[2]])
    top_level_tags = is_flexible(ApiKey.PRODUCE, version) and bool(
        response.unknown_tagged_fields or (version >= kafka_versions.PRODUCE_RESPONSE_NODE_ENDPOINTS_SINCE
                                           and response.node_endpoints))
    assert scan.has_tags == top_level_tags


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_produce_answers_written_by_the_walker_are_the_codecs(version: int, data: st.DataObject) -> None:
    # Given a request and errors for some of its partitions
    request = data.draw(message_strategy(ProduceRequest, version))
    index = index_produce_request(request_frame(request, version, correlation_id=3))
    keys = [(s.topic, s.partition) for s in index.partitions()]
    errors = {k: data.draw(st.integers(-1, 120)) for k in data.draw(st.lists(st.sampled_from(keys), unique=True))
              } if keys else {}
    # Then the answer written from byte templates is the generic encoding of the same ProduceResponse
    assert build_produce_error_response(index, errors) == merge_produce_responses(index, None, errors)


# -- Metadata ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", METADATA_VERSIONS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_metadata_scan_and_splice_read_and_write_what_the_codec_does(version: int, data: st.DataObject) -> None:
    # Given any Metadata response of the generated class
    response = data.draw(message_strategy(MetadataResponse, version))
    frame = encode_response_with_header(ApiKey.METADATA, version, 11, encode_response(response, version))
    # When it is scanned: the scan reads what the full decode reads
    scan = scan_metadata_response(frame, version)
    assert_scan_equals_decode(scan, decoded(frame, version), version, 11)
    # And spliced (min.insync.replicas, broker addresses, leaderless partitions): the bytes are those of
    # decode, modify, encode
    options = options_for(response)
    spliced = splice_metadata_response(scan, **options)
    expected = generic_enrich(decoded(frame, version), version, options["min_insync_replicas"],
                              options["broker_addresses"], options["leaderless"])
    assert decoded(spliced, version) == expected
    assert spliced == encode_response_with_header(ApiKey.METADATA, version, 11, encode_response(expected, version))


# -- Headers -------------------------------------------------------------------------------------


def _registry_versions() -> list[tuple[type[Message], int]]:
    return [(cls, v) for cls in REQUEST_TYPES.values()
            for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)]


@pytest.mark.parametrize(("cls", "version"), _registry_versions(),
                         ids=[f"{c.__name__}-v{v}" for c, v in _registry_versions()])
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_header_walk_finds_the_body_the_codec_wrote(cls: type[Message], version: int, data: st.DataObject) -> None:
    # Given a request of every registered API and version, with any client id and header tagged fields
    message = data.draw(message_strategy(cls, version))
    flexible = cls.FLEXIBLE_FROM is not None and version >= cls.FLEXIBLE_FROM
    tags = data.draw(st.lists(st.tuples(st.integers(0, 50), st.binary(max_size=4)), max_size=2,
                              unique_by=lambda t: t[0])) if flexible else []
    header = RequestHeader(request_api_key=cls.API_KEY, request_api_version=version,
                           correlation_id=data.draw(st.integers(-(2**31), 2**31 - 1)),
                           client_id=data.draw(st.none() | st.text(max_size=8)),
                           unknown_tagged_fields=tuple(sorted(tags)))
    body = encode_request(message, version)
    frame = encode_request_header(header) + body
    # Then the peek finds the body where the codec put it, and reads the header the codec wrote
    peek = peek_request_header(frame)
    assert frame[peek.header_size:] == body
    assert (peek.api_key, peek.api_version, peek.correlation_id, peek.client_id) == (
        header.request_api_key, header.request_api_version, header.correlation_id, header.client_id)
    assert decode_request_header(frame) == (header, peek.header_size)
    # And the header versions follow the spec's flexible versions (request v2 / response v1 when flexible)
    assert request_header_version(cls.API_KEY, version) == (
        kafka_versions.REQUEST_HEADER_FLEXIBLE_SINCE if flexible else kafka_versions.REQUEST_HEADER_CLIENT_ID_SINCE)
    response_cls = RESPONSE_TYPES[cls.API_KEY]
    response = data.draw(message_strategy(response_cls, version))
    response_body = encode_response(response, version)
    correlation_id, split = split_response(
        encode_response_with_header(cls.API_KEY, version, 9, response_body), cls.API_KEY, version)
    assert (correlation_id, bytes(split)) == (9, response_body)
    expected_response_header = 0 if cls.API_KEY == ApiKey.API_VERSIONS or not flexible else \
        kafka_versions.RESPONSE_HEADER_FLEXIBLE_SINCE
    assert response_header_version(cls.API_KEY, version) == expected_response_header


def test_every_generated_class_is_a_frozen_dataclass_of_the_registry() -> None:
    for cls in [*REQUEST_TYPES.values(), *RESPONSE_TYPES.values()]:
        assert dataclasses.is_dataclass(cls)
        assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert (REQUEST_TYPES if cls.__name__.endswith("Request") else RESPONSE_TYPES)[cls.API_KEY] is cls
