"""The generated grammar (protocol/kafka_walkers.py) against the generic codec, for every walked message and version up
to the caps: random messages of the generated classes, encoded by the codec, are skipped whole by the message's skip
function, and its top-level tagged fields start where the codec wrote them; the Produce walks (config.CAPTURED_WALKS)
hand their hooks every captured value where the codec wrote it, every version (their C twins, protocol/_wire_walkers.h:
tests/protocol/test_wire_core.py), and so do the Metadata scan's walks (the head, the topics in steps, the rest; every
partition's start recorded, walked and read as a row). Regenerating changes nothing (tests/protocol/test_generated.py: scripts/generate-protocol
--check covers kafka_walkers.py and _wire_walkers.h too)."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from insync_proxy.protocol import kafka_walkers
from insync_proxy.protocol.errors import MalformedFrame, TruncatedData
from insync_proxy.protocol.headers import peek_request_header
from insync_proxy.protocol.kafka_messages import (
    MetadataResponse,
    MetadataResponseTopic,
    NodeEndpoint,
    ProduceRequest,
    ProduceResponse,
    ShareAcknowledgeResponse,
    ShareFetchResponse,
    TopicProduceData,
)
from insync_proxy.protocol.messages import encode_request, encode_response
from insync_proxy.protocol.primitives import Reader, Writer, skip_tagged_fields_at
from insync_proxy.protocol.produce import _RequestIndex, _ResponseScan, produce_acks_offset
from insync_proxy.protocol.schema import Message, decode_struct

from .frames import fetch_response_frame, request_frame
from .metadata_helpers import as_scanned
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


# -- the Metadata scan's walks (config.CAPTURED_WALKS, in steps): every version, against the codec -------------------

METADATA_WALK_VERSIONS = range(MetadataResponse.VALID_VERSIONS[0], MetadataResponse.VALID_VERSIONS[1] + 1)


_Broker = tuple[int, str, int, str | None, int, int, int, int, int]
_Head = tuple[int, str | None, int, int, int, int, int, int]
_Topic = tuple[int, str | None, uuid.UUID | None, bool, int, int, int, int, int, int, int, int]
_End = tuple[int, int, int, int, int]


class _MetadataCalls(kafka_walkers.MetadataResponseHooks):
    """Every hook call of the generated Metadata walks, with all it is handed, and their order."""

    __slots__ = ("order", "brokers_", "head", "topics_", "end")

    def __init__(self) -> None:
        self.order: list[str] = []
        self.brokers_: list[_Broker] = []
        self.head: list[_Head] = []
        self.topics_: list[_Topic] = []
        self.end: list[_End] = []

    def brokers(self, node_id: int, host: str, port: int, rack: str | None, host_start: int, port_end: int,
                start: int, tags_start: int, end: int) -> None:
        self.order.append("brokers")
        self.brokers_.append((node_id, host, port, rack, host_start, port_end, start, tags_start, end))

    def metadata_response_head(self, throttle_time_ms: int, cluster_id: str | None, controller_id: int,
                               controller_id_start: int, controller_id_end: int, topics_count: int, start: int,
                               end: int) -> None:
        self.order.append("head")
        self.head.append((throttle_time_ms, cluster_id, controller_id, controller_id_start, controller_id_end,
                          topics_count, start, end))

    def topics(self, error_code: int, name: str | None, topic_id: uuid.UUID | None, is_internal: bool,
               partitions_count: int, partitions_start: int, partitions_end: int, topic_authorized_operations: int,
               min_insync_replicas: int, start: int, tags_start: int, end: int) -> None:
        self.order.append("topics")
        self.topics_.append((error_code, name, topic_id, is_internal, partitions_count, partitions_start,
                             partitions_end, topic_authorized_operations, min_insync_replicas, start, tags_start, end))

    def metadata_response(self, cluster_authorized_operations: int, error_code: int, start: int, tags_start: int,
                          end: int) -> None:
        self.order.append("end")
        self.end.append((cluster_authorized_operations, error_code, start, tags_start, end))


def _tags_end(frame: bytes, tags_start: int, end: int, flexible: bool) -> None:
    """A hook's tags_start: the element's tagged fields, which run to its end (its end where it has none)."""
    assert skip_tagged_fields_at(frame, tags_start) == end if flexible else tags_start == end


def test_every_version_of_the_caps_has_its_metadata_walks() -> None:
    for table in (kafka_walkers.METADATA_RESPONSE_WALK, kafka_walkers.METADATA_RESPONSE_TOPICS_WALK,
                  kafka_walkers.METADATA_RESPONSE_AFTER_TOPICS_WALK, kafka_walkers.METADATA_RESPONSE_PARTITIONS_WALK,
                  kafka_walkers.METADATA_RESPONSE_PARTITIONS_READ):
        assert [v for v, walk in enumerate(table) if walk is not None] == list(METADATA_WALK_VERSIONS)


@pytest.mark.parametrize("version", METADATA_WALK_VERSIONS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_generated_metadata_walks_capture_what_the_codec_writes(version: int, data: st.DataObject) -> None:
    # Given any Metadata response of the generated class, encoded by the generic codec (7 bytes before it), and a
    # number of topics walked per step
    response = data.draw(message_strategy(MetadataResponse, version))
    frame = b"\xee" * 7 + encode_response(response, version)
    flexible = version >= 9
    step = data.draw(st.integers(1, 3))
    # When the generated walks of that version run: to the topics, over them a few at a time (offsets recorded), to
    # the end
    hooks = _MetadataCalls()
    walk, topics_walk, after = (kafka_walkers.METADATA_RESPONSE_WALK[version],
                                kafka_walkers.METADATA_RESPONSE_TOPICS_WALK[version],
                                kafka_walkers.METADATA_RESPONSE_AFTER_TOPICS_WALK[version])
    assert walk is not None and topics_walk is not None and after is not None
    pos = walk(frame, 7, hooks)
    first_topic = pos
    offsets: dict[int, list[int]] = {}
    for done in range(0, len(response.topics), step):
        pos = topics_walk(frame, pos, min(step, len(response.topics) - done), hooks, offsets)
    end = after(frame, pos, hooks)
    # Then the walk reads the whole body, and the hooks saw every captured value where the codec wrote it
    assert end == len(frame)
    assert hooks.order == (["brokers"] * len(response.brokers) + ["head"]
                                                 + ["topics"] * len(response.topics) + ["end"])
    (throttle, cluster_id, controller_id, controller_start, controller_end, count, start, head_end), = hooks.head
    assert (throttle, cluster_id, controller_id, count, start, head_end) == (
        response.throttle_time_ms, response.cluster_id, response.controller_id, len(response.topics), 7, first_topic)
    if version >= 1:
        assert (controller_end - controller_start, struct.unpack_from(">i", frame, controller_start)[0]) == (
            4, response.controller_id)
    else:
        assert (controller_start, controller_end) == (-1, -1)
    position = 7 + (4 if version >= 3 else 0) + (1 if flexible else 4)  # the brokers' count after the throttle time
    for args, broker in zip(hooks.brokers_, response.brokers, strict=True):
        node_id, host, port, rack, host_start, port_end, b_start, b_tags, b_end = args
        assert (node_id, host, port, rack) == (broker.node_id, broker.host, broker.port, broker.rack)
        assert b_start == position and struct.unpack_from(">i", frame, b_start)[0] == broker.node_id
        w = Writer()
        w.string(broker.host, nullable=False, compact=flexible)
        w.int32(broker.port)
        assert (host_start, frame[host_start:port_end]) == (b_start + 4, bytes(w.out))
        _tags_end(frame, b_tags, b_end, flexible)
        position = b_end
    position = first_topic
    for found, topic in zip(hooks.topics_, response.topics, strict=True):
        (error_code, name, topic_id, is_internal, partitions_count, partitions_start, partitions_end, authorized,
         min_insync, t_start, t_tags, t_end) = found
        assert (error_code, name, topic_id, is_internal, partitions_count, authorized, min_insync) == (
            topic.error_code, topic.name, topic.topic_id if version >= 10 else None, topic.is_internal,
            len(topic.partitions), topic.topic_authorized_operations, topic.min_insync_replicas)
        assert t_start == position and struct.unpack_from(">h", frame, t_start)[0] == topic.error_code
        _tags_end(frame, t_tags, t_end, flexible)
        position = t_end
        # the partitions: their starts recorded by the topics' walk, walked and read again from the first
        partitions_walk = kafka_walkers.METADATA_RESPONSE_PARTITIONS_WALK[version]
        read = kafka_walkers.METADATA_RESPONSE_PARTITIONS_READ[version]
        assert partitions_walk is not None and read is not None
        starts: list[int] = []
        assert partitions_walk(frame, partitions_start, partitions_count, starts) == partitions_end
        assert offsets[partitions_start] == starts and len(starts) == len(topic.partitions)
        read_starts: list[int] = []
        rows = read(frame, partitions_start, partitions_count, read_starts)
        assert rows == [as_scanned(p, version) for p in topic.partitions] and read_starts == starts
        for at, row, partition in zip(starts, rows, topic.partitions, strict=True):
            # each start is its partition's: its error_code and index there, a read from it gives its row
            assert struct.unpack_from(">hi", frame, at) == (partition.error_code, partition.partition_index)
            assert read(frame, at, 1, None) == [row]
    (cluster_authorized, top_error, after_start, tags, after_end), = hooks.end
    assert (cluster_authorized, top_error, after_start, after_end) == (
        response.cluster_authorized_operations, response.error_code, position, len(frame))
    _tags_end(frame, tags, after_end, flexible)


@pytest.mark.parametrize("version", METADATA_WALK_VERSIONS)
def test_a_null_partitions_array_is_refused_by_the_metadata_walks(version: int) -> None:
    # Given a Metadata answer whose one topic's partitions array is null (-1, or 0 compact)
    response = MetadataResponse(topics=(MetadataResponseTopic(name="t"),))
    frame = encode_response(response, version)
    hooks = _MetadataCalls()
    walk, topics_walk = kafka_walkers.METADATA_RESPONSE_WALK[version], kafka_walkers.METADATA_RESPONSE_TOPICS_WALK[version]
    assert walk is not None and topics_walk is not None
    first = walk(frame, 0, hooks)
    topics_walk(frame, first, 1, hooks, None)
    partitions_start = hooks.topics_[0][5]
    null = frame[:partitions_start - (1 if version >= 9 else 4)] + (b"\x00" if version >= 9 else b"\xff\xff\xff\xff")
    # Then the topics' walk refuses it
    with pytest.raises(MalformedFrame, match="null partitions in MetadataResponse"):
        topics_walk(null + frame[partitions_start:], first, 1, _MetadataCalls(), None)
