"""The generated grammar (protocol/kafka_walkers.py) against the generic codec, for every walked message and version up
to the caps: random messages of the generated classes, encoded by the codec, are skipped whole by the message's skip
function, and its top-level tagged fields start where the codec wrote them. Regenerating changes nothing
(tests/protocol/test_generated.py: scripts/generate-protocol --check covers kafka_walkers.py too)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from insync_proxy.protocol import kafka_walkers
from insync_proxy.protocol.errors import MalformedFrame, TruncatedData
from insync_proxy.protocol.kafka_messages import (
    MetadataResponse,
    NodeEndpoint,
    ProduceResponse,
    ShareAcknowledgeResponse,
    ShareFetchResponse,
)
from insync_proxy.protocol.messages import encode_response
from insync_proxy.protocol.primitives import Reader, skip_tagged_fields_at
from insync_proxy.protocol.schema import Message, decode_struct

from .frames import fetch_response_frame
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
