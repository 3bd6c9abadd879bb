"""The generated grammar (protocol/kafka_walkers.py) against the generic codec, for every walked message and version up
to the caps: random messages of the generated classes, encoded by the codec, are skipped whole by the message's skip
function, and its top-level tagged fields start where the codec wrote them; the Produce walks (config.CAPTURED_WALKS)
hand their hooks every captured value where the codec wrote it, every version (their C twins, protocol/_wire_walkers.h:
tests/protocol/test_wire_core.py). Regenerating changes nothing (tests/protocol/test_generated.py: scripts/generate-protocol
--check covers kafka_walkers.py and _wire_walkers.h too)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from insync_proxy.protocol import kafka_walkers
from insync_proxy.protocol.errors import MalformedFrame, TruncatedData
from insync_proxy.protocol.headers import peek_request_header
from insync_proxy.protocol.kafka_messages import (
    MetadataResponse,
    NodeEndpoint,
    ProduceRequest,
    ProduceResponse,
    ShareAcknowledgeResponse,
    ShareFetchResponse,
    TopicProduceData,
)
from insync_proxy.protocol.messages import encode_request, encode_response
from insync_proxy.protocol.primitives import Reader, skip_tagged_fields_at
from insync_proxy.protocol.produce import _RequestIndex, _ResponseScan, produce_acks_offset
from insync_proxy.protocol.schema import Message, decode_struct

from .frames import fetch_response_frame, request_frame
from .schema_gen import message_strategy

#: The walked messages with classes of their own (Fetch has none: its frames come from tests/protocol/frames.py).
WALKED: dict[str, type[Message]] = {"PRODUCE_RESPONSE": ProduceResponse, "METADATA_RESPONSE": MetadataResponse,
                                    "SHARE_FETCH_RESPONSE": ShareFetchResponse,
                                    "SHARE_ACKNOWLEDGE_RESPONSE": ShareAcknowledgeResponse}
CASES = [(prefix, cls, version) for prefix, cls in WALKED.items()
         for version, skip in enumerate(getattr(kafka_walkers, f"{prefix}_SKIP")) if skip is not None]


def test_every_version_of_the_caps_has_its_skip_function() -> None:
    for prefix, cls in WALKED.items():
        low, high = cls.VALID_VERSIONS
        skips = getattr(kafka_walkers, f"{prefix}_SKIP")
        supported = [v for v, skip in enumerate(skips) if skip is not None]
        assert supported and supported[-1] == len(skips) - 1, prefix
        assert set(supported) <= set(range(low, high + 1)), prefix


@pytest.mark.parametrize(("prefix", "cls", "version"), CASES, ids=[f"{p.lower()}-v{v}" for p, _, v in CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_generated_skip_reads_exactly_what_the_codec_writes(prefix: str, cls: type[Message], version: int,
                                                                 data: st.DataObject) -> None:
    # Given a random message of the generated class, encoded by the generic codec
    message = data.draw(message_strategy(cls, version))
    body = encode_response(message, version)
    # When the generated skip function of that version walks it, from an offset (as after a header)
    framed = b"\xee" * 7 + body
    skip = getattr(kafka_walkers, f"{prefix}_SKIP")[version]
    # Then it ends exactly where the body ends
    assert skip(framed, 7) == len(framed)
    tags_at = getattr(kafka_walkers, f"{prefix}_TAGS_AT")[version]
    if tags_at is not None:  # flexible: the top-level tagged fields are the body's last section
        assert skip_tagged_fields_at(framed, tags_at(framed, 7)) == len(framed)
    endpoints_at = getattr(kafka_walkers, f"{prefix}_NODE_ENDPOINTS_AT", None)
    if endpoints_at is not None:  # a field the walkers find (config.WALKED_FIELDS): the codec's value is there
        r = Reader(framed, endpoints_at[version](framed, 7))
        found = tuple(decode_struct(NodeEndpoint, version, r, True) for _ in range(r.array_length(True)))
        assert found == tuple(message.node_endpoints)
        assert skip_tagged_fields_at(framed, r.pos) == len(framed)


FETCH_VERSIONS = [v for v, skip in enumerate(kafka_walkers.FETCH_RESPONSE_SKIP) if skip is not None]


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_the_generated_fetch_skip_reads_a_whole_fetch_response(version: int, data: st.DataObject) -> None:
    # Given a Fetch response (header v1: correlation id and tags, 5 bytes) of random topics, partitions, records and
    # node endpoints
    name = st.text("abc-", min_size=1, max_size=8) if version < 13 else st.uuids()
    parts = st.lists(st.tuples(st.integers(0, 50), st.one_of(st.none(), st.binary(max_size=40))), max_size=3)
    topics = data.draw(st.lists(st.tuples(name, parts), max_size=3))
    endpoints = data.draw(st.lists(st.builds(NodeEndpoint, node_id=st.integers(0, 5), host=st.text("bh.", max_size=9),
                                             port=st.integers(1, 65535), rack=st.none()), max_size=2))
    frame = fetch_response_frame(version, topics, endpoints if version >= 16 else ())
    # When the generated functions of that version walk it; Then the whole body is read, tags last
    skip = kafka_walkers.FETCH_RESPONSE_SKIP[version]
    tags_at = kafka_walkers.FETCH_RESPONSE_TAGS_AT[version]
    assert skip is not None and tags_at is not None
    assert skip(frame, 5) == len(frame)
    assert skip_tagged_fields_at(frame, tags_at(frame, 5)) == len(frame)


def test_a_cut_body_raises_from_a_read_or_ends_past_the_frame() -> None:
    # Given a Produce v9 response with one topic cut short
    body = encode_response(ProduceResponse(responses=()), 9)
    whole = b"\x02" + b"\x04name" + b"\x02"  # one topic "name" with one partition, cut before the partition
    cut = whole + body[1:]
    skip = kafka_walkers.PRODUCE_RESPONSE_SKIP[9]
    assert skip is not None
    try:
        end = skip(cut, 0)
    except (struct.error, IndexError, TruncatedData, MalformedFrame):
        return
    assert end > len(cut)


def test_a_negative_string_length_is_malformed() -> None:
    # Given a Produce v0 response whose topic name length is -5 (non-flexible: int16 lengths)
    frame = struct.pack(">ih", 1, -5)
    skip = kafka_walkers.PRODUCE_RESPONSE_SKIP[0]
    assert skip is not None
    with pytest.raises(MalformedFrame, match="negative length -5 of name"):
        skip(frame, 0)


# -- the Produce walks (config.CAPTURED_WALKS): every version, against the codec ----------------------------------

REQUEST_WALK_VERSIONS = range(ProduceRequest.VALID_VERSIONS[0], ProduceRequest.VALID_VERSIONS[1] + 1)
RESPONSE_WALK_VERSIONS = range(ProduceResponse.VALID_VERSIONS[0], ProduceResponse.VALID_VERSIONS[1] + 1)


def test_every_version_of_the_caps_has_its_produce_walk() -> None:
    assert [v for v, walk in enumerate(kafka_walkers.PRODUCE_REQUEST_WALK) if walk is not None] == list(
        REQUEST_WALK_VERSIONS)
    assert [v for v, at in enumerate(kafka_walkers.PRODUCE_REQUEST_ACKS_AT) if at is not None] == list(
        REQUEST_WALK_VERSIONS)
    assert [v for v, walk in enumerate(kafka_walkers.PRODUCE_RESPONSE_WALK) if walk is not None] == list(
        RESPONSE_WALK_VERSIONS)


@pytest.mark.parametrize("version", REQUEST_WALK_VERSIONS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_generated_request_walk_captures_what_the_codec_writes(version: int, data: st.DataObject) -> None:
    # Given any Produce request of the generated class, encoded by the generic codec behind a request header
    request = data.draw(message_strategy(ProduceRequest, version))
    frame = memoryview(request_frame(request, version))
    acks_offset = produce_acks_offset(frame)
    # (the generated walk to acks finds it from the body's start, where the codec wrote it)
    acks_at = kafka_walkers.PRODUCE_REQUEST_ACKS_AT[version]
    assert acks_at is not None and acks_at(frame, peek_request_header(frame).header_size) == acks_offset
    assert struct.unpack_from(">h", frame, acks_offset)[0] == request.acks
    # When the generated walk of that version runs with the index's hooks
    hooks = _RequestIndex(frame)
    walk = kafka_walkers.PRODUCE_REQUEST_WALK[version]
    assert walk is not None
    end = walk(frame, acks_offset, hooks)
    # Then it reads the whole body, and its hooks saw every captured value where the codec wrote it
    assert end == len(frame)
    assert (hooks.acks, hooks.timeout_ms) == (request.acks, request.timeout_ms)
    assert skip_tagged_fields_at(frame, hooks.tagged_start) == end if version >= 9 else hooks.tagged_start == end
    assert len(hooks.topics) == len(request.topic_data)
    for topic, expected in zip(hooks.topics, request.topic_data, strict=True):
        assert topic.topic == (expected.topic_id if version >= 13 else expected.name)
        encoded_key = encode_request(ProduceRequest(topic_data=(TopicProduceData(
            name=expected.name, topic_id=expected.topic_id),)), version)
        assert bytes(frame[topic.key_start:topic.key_end]) in encoded_key
        assert [p.partition for p in topic.partitions] == [p.index for p in expected.partition_data]
        for span, partition in zip(topic.partitions, expected.partition_data, strict=True):
            records = None if span.records_size < 0 else bytes(frame[span.records_start:span.records_start
                                                                      + span.records_size])
            assert records == (None if partition.records is None else bytes(partition.records))


@pytest.mark.parametrize("version", RESPONSE_WALK_VERSIONS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_generated_response_walk_captures_what_the_codec_writes(version: int, data: st.DataObject) -> None:
    # Given any Produce response of the generated class, encoded by the generic codec (7 bytes before it)
    response = data.draw(message_strategy(ProduceResponse, version))
    body = encode_response(response, version)
    framed = b"\xee" * 7 + body
    # When the generated walk of that version runs with the scan's hooks
    hooks = _ResponseScan()
    walk = kafka_walkers.PRODUCE_RESPONSE_WALK[version]
    assert walk is not None
    end = walk(framed, 7, hooks)
    # Then it stops where throttle_time_ms starts (the body's end before v1), having counted every partition and
    # named every failed one
    if version >= 1:
        assert struct.unpack_from(">i", framed, end)[0] == response.throttle_time_ms
    else:
        assert end == len(framed)
    assert end == hooks.end
    assert hooks.answered == sum(len(t.partition_responses) for t in response.responses)
    assert hooks.failed == [(t.topic_id if version >= 13 else t.name, p.index, p.error_code)
                            for t in response.responses for p in t.partition_responses if p.error_code]


def test_a_null_topics_array_is_refused_by_both_walks() -> None:
    # Given a Produce v3 request and a v3 response whose topics array is null (-1): the specs' arrays are not nullable
    request = request_frame(ProduceRequest(acks=1), 3)
    acks_offset = produce_acks_offset(request)
    null_topics = request[:acks_offset + 6] + struct.pack(">i", -1)
    walk = kafka_walkers.PRODUCE_REQUEST_WALK[3]
    response_walk = kafka_walkers.PRODUCE_RESPONSE_WALK[3]
    assert walk is not None and response_walk is not None
    # Then both walks refuse it
    with pytest.raises(MalformedFrame, match="null topic_data in ProduceRequest"):
        walk(memoryview(null_topics), acks_offset, _RequestIndex(memoryview(null_topics)))
    with pytest.raises(MalformedFrame, match="null responses in ProduceResponse"):
        response_walk(struct.pack(">ii", -1, 0), 0, _ResponseScan())
