"""One scan of a MetadataResponse: what it reads must equal the full decode, and the splice from it
must give the same bytes as the splice and the KIP-637 layout always did."""

from __future__ import annotations

import dataclasses
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insync_proxy.protocol.errors import ProtocolError, UnsupportedVersion
from insync_proxy.protocol.headers import (
    ResponseHeader,
    encode_response_header,
    encode_response_with_header,
    split_response,
)
from insync_proxy.protocol.messages import (
    Kip637MetadataResponseTopic,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponseKip637,
    MetadataResponsePartition,
    MetadataResponseTopic,
    decode_metadata_response_kip637,
    decode_response,
    encode_metadata_response_kip637,
    encode_response,
)
from insync_proxy.protocol.metadata_scan import (
    MetadataScanner,
    scan_metadata_response,
)
from insync_proxy.protocol.metadata_splice import (
    MetadataSplicer,
    enrich_metadata_response,
    splice_metadata_response,
)
from insync_proxy.protocol.primitives import encode_uvarint
from tests.protocol.metadata_helpers import (
    METADATA,
    assert_scan_equals_decode,
    decoded,
    frame_of,
    generic_enrich,
    options_for,
)

from .fuzz import mutate
from .schema_gen import message_strategy

#: KIP-637's literal layout answers a "v10" request that went upstream as v9.
KIP637_VERSION = 10
GOLDEN = Path(__file__).parent / "golden"


def old_kip637_layout(spliced_v9: bytes) -> bytes:
    """The KIP-637 path the proxy had: decode the spliced v9 answer, re-encode it as KIP-637's "v10"."""
    correlation_id, body = split_response(spliced_v9, METADATA, 9)
    response = decode_response(METADATA, 9, body)
    assert isinstance(response, MetadataResponse)
    kip637 = MetadataResponseKip637(
        throttle_time_ms=response.throttle_time_ms,
        brokers=response.brokers,
        cluster_id=response.cluster_id,
        controller_id=response.controller_id,
        topics=tuple(
            Kip637MetadataResponseTopic(
                error_code=t.error_code,
                name=t.name or "",
                is_internal=t.is_internal,
                partitions=t.partitions,
                topic_authorized_operations=t.topic_authorized_operations,
                min_insync_replicas=t.min_insync_replicas,
            )
            for t in response.topics
        ),
        cluster_authorized_operations=response.cluster_authorized_operations,
    )
    return encode_response_with_header(METADATA, KIP637_VERSION, correlation_id, encode_metadata_response_kip637(kip637))


def generic_enrich_with(msg: MetadataResponse, version: int, options: dict[str, Any]) -> MetadataResponse:
    return generic_enrich(msg, version, options["min_insync_replicas"], options["broker_addresses"],
                          options["leaderless"])


# -- the scan reads what the full decode reads --------------------------------------------------


@pytest.mark.parametrize("version", range(0, 14))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_scan_reads_what_the_full_decode_reads(version: int, data: Any) -> None:
    # Given any MetadataResponse of this version, as the proxy gets it (header + body)
    msg = data.draw(message_strategy(MetadataResponse, version))
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    frame = frame_of(msg, version, correlation_id)
    # When it is scanned once
    scan = scan_metadata_response(frame, version)
    # Then brokers, cluster fields, topic heads and every partition equal the full decode
    assert_scan_equals_decode(scan, decoded(frame, version), version, correlation_id)


@pytest.mark.parametrize("version", range(0, 14))
def test_long_replica_and_isr_arrays_are_read_whole(version: int) -> None:
    # Given partitions with more replicas than the precompiled array readers cover (and, compact, a
    # two-byte varint length)
    many = tuple(range(200))
    msg = MetadataResponse(controller_id=1, topics=(MetadataResponseTopic(name="wide", partitions=(
        MetadataResponsePartition(partition_index=0, leader_id=7, leader_epoch=3, replica_nodes=many,
                                  isr_nodes=many[:17], offline_replicas=many[:16]),
        MetadataResponsePartition(partition_index=1, leader_id=-1, replica_nodes=(), isr_nodes=()))),))
    frame = frame_of(msg, version)
    # When scanned, Then the partitions read equal the decode
    assert_scan_equals_decode(scan_metadata_response(frame, version), decoded(frame, version), version, 3)


def test_partitions_are_read_on_demand_from_the_recorded_offsets() -> None:
    # Given a scan that recorded no partition offsets
    msg = _cluster()
    scan = scan_metadata_response(frame_of(msg, 12), 12)
    topic = scan.topics[1]
    # When one topic's partitions are read, Then they are that topic's, and its offsets are cached
    assert [p.partition_index for p in scan.partitions(topic)] == [0, 1, 2]
    assert scan.partitions(topic)[2].isr_nodes == (1, 2)
    offsets = scan.partition_offsets(topic)
    assert offsets is scan.partition_offsets(topic) and len(offsets) == 3
    assert offsets[0] == topic.partitions_start


def test_scan_keeps_the_broker_host_port_spans() -> None:
    frame = frame_of(_cluster(), 12)
    scan = scan_metadata_response(frame, 12)
    for (start, end), broker in zip(scan.broker_spans, scan.brokers, strict=True):
        # compact string (length + 1, host) then int32 port
        assert bytes(frame[start + 1:end - 4]).decode() == broker.host
        assert int.from_bytes(frame[end - 4:end], "big") == broker.port


# -- the splice from a scan gives the bytes the splice always gave ------------------------------


@pytest.mark.parametrize("version", range(0, 14))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_splice_from_a_scan_equals_the_splice_of_the_frame(version: int, data: Any) -> None:
    # Given any MetadataResponse, without the tag-637 values the generator may set
    msg = data.draw(message_strategy(MetadataResponse, version))
    msg = dataclasses.replace(msg, topics=tuple(dataclasses.replace(t, min_insync_replicas=-1) for t in msg.topics))
    frame = frame_of(msg, version)
    options = options_for(msg)
    expected = frame_of(generic_enrich_with(msg, version, options), version)
    # When the frame is scanned once and spliced from the scan: offsets recorded during the scan,
    # walked on first use, or cached by reading the partitions first
    with_offsets = scan_metadata_response(frame, version, partition_offsets=True)
    lazy = scan_metadata_response(frame, version)
    read_first = scan_metadata_response(frame, version)
    for topic in read_first.topics:
        read_first.partitions(topic)
    # Then every way gives the bytes of enrich_metadata_response and of decode -> modify -> encode
    assert enrich_metadata_response(frame, version, **options) == expected
    for scan in (with_offsets, lazy, read_first):
        assert splice_metadata_response(scan, **options) == expected


@pytest.mark.parametrize("version", range(0, 14))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_a_scan_and_splice_in_steps_equal_the_whole_ones(version: int, data: Any) -> None:
    # Given any MetadataResponse (tag 637 unset) and a step size
    msg = data.draw(message_strategy(MetadataResponse, version))
    msg = dataclasses.replace(msg, topics=tuple(dataclasses.replace(t, min_insync_replicas=-1) for t in msg.topics))
    frame = frame_of(msg, version)
    options = options_for(msg)
    size = data.draw(st.integers(min_value=1, max_value=4))
    # When it is scanned, then spliced, a few topics at a time
    scanner = MetadataScanner(frame, version, partition_offsets=True)
    assert scanner.topic_count == len(msg.topics)
    steps = 1
    while not scanner.step(size):
        steps += 1
    scan = scanner.scan()
    splicer = MetadataSplicer(scan, **options)
    while not splicer.step(size):
        pass
    # Then the steps were as many as the topics need, and the scan and the frame are the whole walk's
    assert steps == max(1, -(-len(msg.topics) // size))
    assert_scan_equals_decode(scan, msg, version, scan.correlation_id)
    assert splicer.done and splicer.frame() == splice_metadata_response(scan_metadata_response(frame, version),
                                                                        **options)


def test_a_scan_in_steps_is_not_read_before_it_is_done() -> None:
    # Given a 3-topic answer scanned one topic at a time
    scanner = MetadataScanner(frame_of(_cluster(), 12), 12)
    # When 2 steps have run, Then the scan is not ready and says how far it got
    assert not scanner.step(1) and not scanner.step(1) and not scanner.done
    with pytest.raises(RuntimeError, match="2 of 3 topics"):
        scanner.scan()
    # And the third step finishes it (more steps change nothing)
    assert scanner.step(1) and scanner.step(1)
    assert [t.name for t in scanner.scan().topics] == ["t0", "t1", "t2"]


@pytest.mark.parametrize("version", [1, 9, 12])
def test_every_truncation_raises_protocol_error_in_steps(version: int) -> None:
    # Given every cut of an answer, When scanned a topic at a time, Then only ProtocolError escapes
    frame = frame_of(_cluster(), version)
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            scanner = MetadataScanner(frame[:cut], version)
            while not scanner.step(1):
                pass


def test_splice_from_a_scan_leaves_the_scan_reusable() -> None:
    # Given one scan spliced twice with different options
    frame = frame_of(_cluster(), 12)
    scan = scan_metadata_response(frame, 12)
    first = splice_metadata_response(scan, min_insync_replicas={"t0": 2}, leaderless={("t1", 0)})
    second = splice_metadata_response(scan, min_insync_replicas={"t0": 3})
    # Then each equals its own splice of the frame, and the frame is unchanged
    assert first == enrich_metadata_response(frame, 12, min_insync_replicas={"t0": 2}, leaderless={("t1", 0)})
    assert second == enrich_metadata_response(frame, 12, min_insync_replicas={"t0": 3})
    assert splice_metadata_response(scan) == frame


def test_min_insync_lookup_is_asked_once_per_topic_in_order() -> None:
    # Given a lookup that records what it is asked (the proxy's lookup records its cache misses)
    asked: list[Any] = []

    class Lookup(dict[Any, int]):
        def get(self, key: Any, default: Any = None) -> Any:
            asked.append(key)
            return {"t1": 2}.get(key, default)

        def __bool__(self) -> bool:
            return True

    msg = _cluster()
    msg = dataclasses.replace(msg, topics=tuple(dataclasses.replace(t, topic_id=uuid.UUID(int=i + 1))
                                                for i, t in enumerate(msg.topics)))
    scan = scan_metadata_response(frame_of(msg, 12), 12)
    # When spliced
    splice_metadata_response(scan, min_insync_replicas=Lookup())
    # Then each topic was looked up by name, then by id when the name had no value
    assert asked == ["t0", uuid.UUID(int=1), "t1", "t2", uuid.UUID(int=3)]


# -- KIP-637's literal layout straight from the v9 bytes -----------------------------------------


@settings(max_examples=150, deadline=None)
@given(msg=message_strategy(MetadataResponse, 9), data=st.data())
def test_kip637_layout_from_the_splice_equals_decode_and_reencode(msg: MetadataResponse, data: Any) -> None:
    # Given any v9 answer (tag-637 values and unknown tags the broker may send kept), sometimes with
    # tagged fields in its response header
    header_tags = data.draw(st.sampled_from([(), ((3, b"x"),), ((1, b""), (700, b"abc"))]))
    body = encode_response(msg, 9)
    frame = encode_response_header(ResponseHeader(correlation_id=41, unknown_tagged_fields=header_tags), 1) + body
    options = options_for(msg)
    # When the splice writes the KIP-637 layout from one scan
    out = splice_metadata_response(scan_metadata_response(frame, 9), layout="kip637", **options)
    # Then it is byte for byte what splicing v9, decoding and re-encoding as KIP-637 gave
    assert out == old_kip637_layout(enrich_metadata_response(frame, 9, **options))
    # And it reads back as KIP-637's layout, -1 where min.insync.replicas is unknown
    correlation_id, kip_body = split_response(out, METADATA, KIP637_VERSION)
    back = decode_metadata_response_kip637(kip_body)
    assert correlation_id == 41
    for topic, original in zip(back.topics, msg.topics, strict=True):
        value = options["min_insync_replicas"].get(original.name)  # v9 topics have no id
        assert topic.min_insync_replicas == (original.min_insync_replicas if value is None else value)


def test_kip637_layout_writes_minus_one_for_an_unknown_min_insync() -> None:
    frame = frame_of(_cluster(), 9)
    out = splice_metadata_response(scan_metadata_response(frame, 9), layout="kip637",
                                   min_insync_replicas={"t1": 2}, broker_addresses={1: ("proxy", 1)})
    back = decode_metadata_response_kip637(split_response(out, METADATA, KIP637_VERSION)[1])
    assert [t.min_insync_replicas for t in back.topics] == [-1, 2, -1]
    assert back.brokers[0].host == "proxy" and back.brokers[1].host == "broker-2"
    assert out == old_kip637_layout(enrich_metadata_response(frame, 9, min_insync_replicas={"t1": 2},
                                                             broker_addresses={1: ("proxy", 1)}))


@pytest.mark.parametrize("version", [v for v in range(0, 14) if v != 9])
def test_kip637_layout_needs_a_v9_answer(version: int) -> None:
    scan = scan_metadata_response(frame_of(_cluster(), version), version)
    with pytest.raises(UnsupportedVersion):
        splice_metadata_response(scan, layout="kip637")


def test_kip637_layout_refuses_a_tag_637_that_is_not_an_int16() -> None:
    frame = frame_of(_cluster(1), 9)
    tags = scan_metadata_response(frame, 9).topics[0].tags_start
    # Given a topic whose tag 637 holds 3 bytes
    bad = frame[:tags] + b"\x01" + encode_uvarint(637) + b"\x03abc" + frame[tags + 1:]
    bad_scan = scan_metadata_response(bad, 9)
    assert bad_scan.topics[0].min_insync_replicas == -1
    # Then the kafka layout still splices (the value replaces it) and the KIP-637 layout refuses it
    assert splice_metadata_response(bad_scan, min_insync_replicas={"t0": 2}) == enrich_metadata_response(
        bad, 9, min_insync_replicas={"t0": 2})
    with pytest.raises(ProtocolError):
        splice_metadata_response(bad_scan, layout="kip637")


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 14))
def test_every_truncation_raises_protocol_error(version: int) -> None:
    frame = frame_of(_cluster(), version)
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            scan_metadata_response(frame[:cut], version)
    with pytest.raises(ProtocolError):
        scan_metadata_response(frame + b"\x00", version)


@pytest.mark.parametrize("version", range(0, 14))
def test_garbled_frames_raise_only_protocol_errors(version: int) -> None:
    # Given many mutations (bit flips, cut and inserted bytes, corrupted lengths) of valid frames
    rng = random.Random(version)
    frames = [frame_of(_cluster(), version), frame_of(_cluster(2, partitions=20), version)]
    for i in range(1500):
        data = mutate(frames[i % 2], rng)
        # When scanned, read and spliced, Then nothing but ProtocolError escapes
        try:
            scan = scan_metadata_response(data, version)
            for topic in scan.topics:
                scan.partitions(topic)
            splice_metadata_response(scan, min_insync_replicas={"t0": 2}, broker_addresses={1: ("p", 1)},
                                     leaderless={("t1", 0)}, layout="kip637" if version == 9 else "kafka")
        except ProtocolError:
            pass


def test_unknown_versions_are_refused() -> None:
    for version in (-1, 14):
        with pytest.raises(UnsupportedVersion):
            scan_metadata_response(frame_of(_cluster(), 13), version)


# -- real brokers' answers --------------------------------------------------------------------------


def _golden_metadata() -> list[Path]:
    return sorted(GOLDEN.glob("Metadata-v*.response.bin"))


@pytest.mark.skipif(not _golden_metadata(), reason="no Metadata frames captured in tests/protocol/golden")
@pytest.mark.parametrize("path", _golden_metadata(), ids=lambda p: p.name)
def test_real_broker_metadata_answers(path: Path) -> None:
    # Given a Metadata answer captured from a real broker
    version = int(path.name.split("-")[1][1:])
    frame = path.read_bytes()
    msg = decoded(frame, version)
    # When scanned, Then the scan equals the decode
    scan = scan_metadata_response(frame, version)
    assert_scan_equals_decode(scan, msg, version, split_response(frame, METADATA, version)[0])
    # And the splice from the scan equals the splice of the frame and the generic path
    options = options_for(msg)
    expected = frame_of(generic_enrich_with(msg, version, options), version, scan.correlation_id)
    assert splice_metadata_response(scan, **options) == expected == enrich_metadata_response(frame, version, **options)
    if version == 9:
        assert splice_metadata_response(scan, layout="kip637", **options) == old_kip637_layout(
            enrich_metadata_response(frame, version, **options))


def _cluster(n_topics: int = 3, partitions: int = 3) -> MetadataResponse:
    return MetadataResponse(
        brokers=(MetadataResponseBroker(node_id=1, host="broker-1", port=9092, rack="r1"),
                 MetadataResponseBroker(node_id=2, host="broker-2", port=9092)),
        cluster_id="c", controller_id=1,
        topics=tuple(MetadataResponseTopic(name=f"t{i}", partitions=tuple(
            MetadataResponsePartition(partition_index=p, leader_id=1, leader_epoch=4, replica_nodes=(1, 2),
                                      isr_nodes=(1, 2)) for p in range(partitions))) for i in range(n_topics)))
