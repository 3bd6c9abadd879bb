"""Produce fast paths: acks in place, index, forward part, proxy answers, merged response."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insync_proxy.protocol.api_keys import ApiKey
from insync_proxy.protocol.errors import MalformedFrame, ProtocolError, UnsupportedVersion
from insync_proxy.protocol.headers import encode_response_with_header, peek_request_header, split_response
from insync_proxy.protocol.messages import (
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
    decode_request,
    decode_response,
    encode_response,
)
from insync_proxy.protocol.produce import (
    build_forward_request,
    build_forward_request_chunks,
    build_produce_error_response,
    index_produce_request,
    merge_produce_responses,
    patch_produce_acks,
    produce_acks_offset,
    read_produce_acks,
    rewrite_produce_node_endpoints,
)

from .frames import request_frame

ORDERS_ID = uuid.UUID(int=1)
PAYMENTS_ID = uuid.UUID(int=2)


def produce_request(version: int, acks: int = -2, transactional_id: str | None = "tx") -> ProduceRequest:
    return ProduceRequest(
        transactional_id=transactional_id if version >= 3 else None, acks=acks, timeout_ms=30000,
        topic_data=(
            TopicProduceData(name="orders", topic_id=ORDERS_ID, partition_data=(
                PartitionProduceData(index=0, records=b"A" * 100), PartitionProduceData(index=1, records=b"B" * 10),
                PartitionProduceData(index=2, records=b"C" * 7))),
            TopicProduceData(name="payments", topic_id=PAYMENTS_ID, partition_data=(
                PartitionProduceData(index=0, records=b"D" * 33),)),
        ))


def topic(name: str, version: int) -> str | uuid.UUID:
    return {"orders": ORDERS_ID, "payments": PAYMENTS_ID}[name] if version >= 13 else name


def summary(request: ProduceRequest, version: int) -> list[tuple[object, list[tuple[int, bytes | None]]]]:
    """(topic key, [(partition, records)]) as the version identifies topics."""
    return [(t.topic_id if version >= 13 else t.name,
             [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
            for t in request.topic_data]


def body_of(frame: bytes) -> memoryview:
    return memoryview(frame)[peek_request_header(frame).header_size:]


ALL_VERSIONS = range(0, 14)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_acks_patched_in_place_keeps_record_bytes(version: int) -> None:
    # Given a Produce request with acks=-2
    frame = bytearray(request_frame(produce_request(version), version))
    before = bytes(frame)
    # When acks is read and patched to -1 in place
    offset = produce_acks_offset(frame)
    assert read_produce_acks(frame) == -2
    patch_produce_acks(frame, offset, -1)
    # Then only those two bytes changed and the request decodes with acks=-1 and the same records
    assert {i for i in range(len(frame)) if frame[i] != before[i]} <= {offset, offset + 1}
    assert frame[:offset] == before[:offset] and frame[offset + 2 :] == before[offset + 2 :]
    decoded = decode_request(0, version, body_of(bytes(frame)))
    assert isinstance(decoded, ProduceRequest)
    assert decoded.acks == -1
    assert summary(decoded, version) == summary(produce_request(version), version)


@given(st.text(max_size=300) | st.none(), st.integers(-(2**15), 2**15 - 1), st.sampled_from(list(ALL_VERSIONS)),
       st.text(max_size=200) | st.none())
@settings(max_examples=60, deadline=None)
def test_acks_offset_is_found_for_any_transactional_and_client_id(
    txn: str | None, acks: int, version: int, client_id: str | None
) -> None:
    frame = request_frame(produce_request(version, acks, txn), version, client_id=client_id)
    assert read_produce_acks(frame) == acks
    # And from the header's size a proxy peeked already, the same offset
    assert produce_acks_offset(frame, peek_request_header(frame).header_size) == produce_acks_offset(frame)


def test_acks_fast_path_refuses_other_apis_and_unknown_versions() -> None:
    with pytest.raises(MalformedFrame):
        produce_acks_offset(b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\x00")
    with pytest.raises(UnsupportedVersion):
        produce_acks_offset(b"\x00\x00\x00\x0e\x00\x00\x00\x01\xff\xff\x00")
    with pytest.raises(ProtocolError):
        produce_acks_offset(b"\x00\x00\x00\x09\x00\x00\x00\x01\xff\xff")
    # The same errors when the header's size is known already
    with pytest.raises(UnsupportedVersion):
        produce_acks_offset(b"\x00\x00\x00\x0e\x00\x00\x00\x01\xff\xff\x00", 10)
    with pytest.raises(ProtocolError):
        produce_acks_offset(b"\x00\x00\x00\x09\x00\x00\x00\x01\xff\xff", 10)
    with pytest.raises(MalformedFrame):
        produce_acks_offset(b"\x00\x00\x00\x03\x00\x00\x00\x01\xff\xff\xff\xfe\x00\x00", 10)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_index_locates_every_record_set_without_copying(version: int) -> None:
    frame = request_frame(produce_request(version), version, correlation_id=77)
    index = index_produce_request(frame)
    assert index.correlation_id == 77 and index.acks == -2 and index.timeout_ms == 30000
    spans = list(index.partitions())
    assert [s.key for s in spans] == [(topic("orders", version), 0), (topic("orders", version), 1),
                                      (topic("orders", version), 2), (topic("payments", version), 0)]
    assert [s.records_size for s in spans] == [100, 10, 7, 33]
    records = index.records(spans[0])
    assert records is not None and bytes(records) == b"A" * 100
    assert records.obj is index.frame.obj  # a view into the original frame


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_forward_request_keeps_only_chosen_partitions_with_patched_acks(version: int) -> None:
    # Given a request over orders/0,1,2 and payments/0 with acks=-2
    frame = request_frame(produce_request(version), version, correlation_id=5)
    index = index_produce_request(frame)
    keep = {(topic("orders", version), 1), (topic("orders", version), 2)}
    # When the forward part keeps orders/1 and orders/2 with acks=-1
    chunks = build_forward_request_chunks(index, keep, acks=-1)
    forward = build_forward_request(index, keep, acks=-1)
    # Then it is a valid frame with the same header, acks -1 and only those partitions' records
    assert b"".join(chunks) == len(forward).to_bytes(4, "big") + forward
    assert peek_request_header(forward).correlation_id == 5
    decoded = decode_request(0, version, body_of(forward))
    assert isinstance(decoded, ProduceRequest)
    assert decoded.acks == -1 and decoded.transactional_id == (None if version < 3 else "tx")
    assert [(t.name if version < 13 else t.topic_id, [(p.index, bytes(p.records or b"")) for p in t.partition_data])
            for t in decoded.topic_data] == [(topic("orders", version), [(1, b"B" * 10), (2, b"C" * 7)])]
    # And the record bytes were sliced from the original frame, not copied
    assert any(isinstance(c, memoryview) and c.obj is index.frame.obj for c in chunks)


def test_forward_request_keeps_unknown_tagged_fields_of_kept_entries() -> None:
    msg = ProduceRequest(acks=-2, topic_data=(TopicProduceData(
        name="t", partition_data=(PartitionProduceData(index=0, records=b"r", unknown_tagged_fields=((9, b"x"),)),),
        unknown_tagged_fields=((4, b"y"),)),), unknown_tagged_fields=((3, b"z"),))
    index = index_produce_request(request_frame(msg, 11))
    forward = build_forward_request(index, {("t", 0)})
    decoded = decode_request(0, 11, body_of(forward))
    assert decoded == msg


@pytest.mark.parametrize("version", ALL_VERSIONS)
@pytest.mark.parametrize("code", [19, 21])
def test_proxy_answer_has_error_and_minus_one_offsets_in_request_order(version: int, code: int) -> None:
    frame = request_frame(produce_request(version), version, correlation_id=99)
    index = index_produce_request(frame)
    answers = {(topic("payments", version), 0): code, (topic("orders", version), 2): code}
    response = build_produce_error_response(index, answers)
    correlation_id, body = split_response(response, ApiKey.PRODUCE, version)
    decoded = decode_response(0, version, body)
    assert isinstance(decoded, ProduceResponse) and correlation_id == 99
    got = [((t.name if version < 13 else t.topic_id), p.index, p.error_code, p.base_offset, p.log_append_time_ms,
            p.log_start_offset, p.record_errors, p.error_message)
           for t in decoded.responses for p in t.partition_responses]
    lat = -1
    assert got == [(topic("orders", version), 2, code, -1, lat, -1, (), None),
                   (topic("payments", version), 0, code, -1, lat, -1, (), None)]


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(list(ALL_VERSIONS)), data=st.data())
def test_index_agrees_with_a_full_decode(version: int, data: st.DataObject) -> None:
    from insync_proxy.protocol.messages import decode_request

    from .schema_gen import message_strategy

    # Given any Produce request the schema allows (unknown tagged fields, null and empty records included)
    request = data.draw(message_strategy(ProduceRequest, version))
    frame = request_frame(request, version, correlation_id=5, client_id=data.draw(st.one_of(st.none(), st.text())))
    body = body_of(frame)
    decoded = decode_request(ApiKey.PRODUCE, version, body)
    assert isinstance(decoded, ProduceRequest)
    # Then the index locates exactly what the decoder reads
    index = index_produce_request(frame)
    assert (index.acks, index.timeout_ms, index.transactional_id) == (
        decoded.acks, decoded.timeout_ms, decoded.transactional_id if version >= 3 else None)
    assert [(s.topic, s.partition, None if s.records_size < 0 else bytes(index.records(s) or b""))
            for s in index.partitions()] == [
        (t.topic_id if version >= 13 else t.name, p.index, None if p.records is None else bytes(p.records))
        for t in decoded.topic_data for p in t.partition_data]
    # ... and a forward request keeping every partition is the request itself (topics without partitions
    # are dropped from forward requests)
    keep = {(s.topic, s.partition) for s in index.partitions()}
    if all(t.partition_data for t in decoded.topic_data):
        assert build_forward_request(index, keep) == bytes(frame)


@settings(max_examples=80, deadline=None)
@given(version=st.sampled_from(list(ALL_VERSIONS)), data=st.data())
def test_proxy_answer_written_from_spans_equals_the_generic_encoding(version: int, data: st.DataObject) -> None:
    # Given a request and any subset of its partitions answered by the proxy, with any error code
    frame = request_frame(produce_request(version), version, correlation_id=data.draw(st.integers(-2**31, 2**31 - 1)))
    index = index_produce_request(frame)
    keys = [(p.topic, p.partition) for p in index.partitions()]
    chosen = data.draw(st.lists(st.sampled_from(keys), unique=True))
    errors = {k: data.draw(st.integers(-1, 120)) for k in chosen}
    throttle = data.draw(st.integers(0, 2**31 - 1))
    # Then the answer written straight from the spans is byte for byte the generic encoder's
    assert build_produce_error_response(index, errors, throttle_time_ms=throttle) == \
        merge_produce_responses(index, None, errors, throttle_time_ms=throttle)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_merge_restores_original_order_and_correlation_id(version: int) -> None:
    # Given orders/0 and payments/0 answered by the proxy, orders/1 and orders/2 by the broker
    index = index_produce_request(request_frame(produce_request(version), version, correlation_id=123))
    broker = ProduceResponse(
        responses=(TopicProduceResponse(name="orders", topic_id=ORDERS_ID, partition_responses=(
            PartitionProduceResponse(index=2, base_offset=700, log_start_offset=3),
            PartitionProduceResponse(index=1, error_code=6, base_offset=-1,
                                     current_leader=LeaderIdAndEpoch(leader_id=3, leader_epoch=9)))),),
        throttle_time_ms=15, node_endpoints=(NodeEndpoint(node_id=3, host="b3", port=9094),))
    broker_frame = encode_response_with_header(0, version, 123, encode_response(broker, version))
    # When merged
    merged = merge_produce_responses(index, broker_frame, {(topic("orders", version), 0): 19,
                                                           (topic("payments", version), 0): 19})
    correlation_id, body = split_response(merged, ApiKey.PRODUCE, version)
    decoded = decode_response(0, version, body)
    assert isinstance(decoded, ProduceResponse)
    # Then topics and partitions are in request order, with the broker's throttle and endpoints
    assert correlation_id == 123
    assert [((t.name if version < 13 else t.topic_id), p.index, p.error_code) for t in decoded.responses
            for p in t.partition_responses] == [
        (topic("orders", version), 0, 19), (topic("orders", version), 1, 6), (topic("orders", version), 2, 0),
        (topic("payments", version), 0, 19)]
    assert decoded.throttle_time_ms == (15 if version >= 1 else 0)
    if version >= 10:
        assert decoded.node_endpoints == broker.node_endpoints
        assert decoded.responses[0].partition_responses[1].current_leader.leader_id == 3


def test_partition_missing_from_broker_answer_gets_unknown_server_error() -> None:
    index = index_produce_request(request_frame(produce_request(9), 9))
    empty = encode_response_with_header(0, 9, 1, encode_response(ProduceResponse(), 9))
    merged = merge_produce_responses(index, empty, {("payments", 0): 21})
    decoded = decode_response(0, 9, split_response(merged, 0, 9)[1])
    assert isinstance(decoded, ProduceResponse)
    assert [p.error_code for t in decoded.responses for p in t.partition_responses] == [-1, -1, -1, 21]


def test_produce_node_endpoints_rewritten_and_untouched_when_unmapped() -> None:
    resp = ProduceResponse(node_endpoints=(NodeEndpoint(node_id=1, host="broker-1", port=9092),))
    frame = encode_response_with_header(0, 11, 4, encode_response(resp, 11))
    assert rewrite_produce_node_endpoints(frame, 11, {2: ("x", 1)}) is frame
    out = rewrite_produce_node_endpoints(frame, 11, {1: ("proxy", 19092)})
    decoded = decode_response(0, 11, split_response(out, 0, 11)[1])
    assert isinstance(decoded, ProduceResponse)
    assert (decoded.node_endpoints[0].host, decoded.node_endpoints[0].port) == ("proxy", 19092)


@pytest.mark.parametrize("version", range(10, 14))
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_node_endpoint_rewrite_agrees_with_a_full_decode(version: int, data: st.DataObject) -> None:
    """The lean check (no tagged fields at the end: answer untouched) never skips a response that carries
    node_endpoints; with some mapped, the rewrite equals a decode with those endpoints replaced."""
    from dataclasses import replace

    from .schema_gen import message_strategy

    response = data.draw(message_strategy(ProduceResponse, version))
    frame = encode_response_with_header(ApiKey.PRODUCE, version, 42, encode_response(response, version))
    node_ids = sorted({ep.node_id for ep in response.node_endpoints})
    mapped = data.draw(st.lists(st.sampled_from(node_ids), unique=True)) if node_ids else []
    addresses = {node_id: ("proxy-host", 19000 + i) for i, node_id in enumerate(mapped)}
    out = rewrite_produce_node_endpoints(frame, version, addresses)
    if not mapped:
        assert out is frame
        return
    original = decode_response(ApiKey.PRODUCE, version, split_response(frame, ApiKey.PRODUCE, version)[1])
    rewritten = decode_response(ApiKey.PRODUCE, version, split_response(out, ApiKey.PRODUCE, version)[1])
    assert isinstance(original, ProduceResponse)
    assert rewritten == replace(original, node_endpoints=tuple(
        replace(ep, host=addresses[ep.node_id][0], port=addresses[ep.node_id][1]) if ep.node_id in addresses else ep
        for ep in original.node_endpoints))


@pytest.mark.parametrize("version", ALL_VERSIONS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_error_scan_counts_partitions_and_names_only_the_failed_ones(version: int, data: st.DataObject) -> None:
    # The scan agrees with a full decode: every partition counted, the failed ones named with their codes.
    from insync_proxy.protocol.messages import ProduceResponse, encode_response
    from insync_proxy.protocol.produce import scan_produce_response

    from .schema_gen import message_strategy

    response = data.draw(message_strategy(ProduceResponse, version))
    frame = encode_response_with_header(ApiKey.PRODUCE, version, 42, encode_response(response, version))
    partitions = [(t.topic_id if version >= 13 else t.name, p.index, p.error_code)
                  for t in response.responses for p in t.partition_responses]
    scan = scan_produce_response(frame, version)
    assert (scan.answered, scan.failed) == (len(partitions), [p for p in partitions if p[2]])
