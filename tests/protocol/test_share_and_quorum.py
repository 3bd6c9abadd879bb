"""ShareFetch/ShareAcknowledge node_endpoints and DescribeQuorum v2 listeners: rewritten, nothing else touched.

The schema classes are checked by round trips for every version; the rewrites against them: the
rewritten frame must be exactly the frame of the same message with only the endpoints replaced.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from insync_proxy.protocol.api_keys import ApiKey
from insync_proxy.protocol.errors import InvalidValue, ProtocolError, UnsupportedVersion
from insync_proxy.protocol.headers import encode_response_with_header
from insync_proxy.protocol.messages import (
    DescribeQuorumListener,
    DescribeQuorumNode,
    DescribeQuorumRequest,
    DescribeQuorumRequestPartition,
    DescribeQuorumRequestTopic,
    DescribeQuorumResponse,
    LeaderIdAndEpoch,
    NodeEndpoint,
    ShareAcknowledgePartitionData,
    ShareAcknowledgeResponse,
    ShareAcknowledgeTopicResponse,
    ShareAcquiredRecords,
    ShareFetchPartitionData,
    ShareFetchResponse,
    ShareFetchTopicResponse,
    decode_describe_quorum_response,
    encode_describe_quorum_request,
    encode_describe_quorum_response,
)
from insync_proxy.protocol.quorum import rewrite_describe_quorum_endpoints
from insync_proxy.protocol.schema import Message, decode_struct, encode_struct
from insync_proxy.protocol.share import (
    find_share_node_endpoints,
    rewrite_share_acknowledge_node_endpoints,
    rewrite_share_fetch_node_endpoints,
)

from .schema_gen import message_strategy, random_instance

MESSAGES: list[tuple[type[Message], int]] = [
    (cls, v)
    for cls in (ShareFetchResponse, ShareAcknowledgeResponse, DescribeQuorumRequest, DescribeQuorumResponse)
    for v in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)
]
SHARE = [(cls, v) for cls, v in MESSAGES if cls in (ShareFetchResponse, ShareAcknowledgeResponse)]
REWRITE = {ApiKey.SHARE_FETCH: rewrite_share_fetch_node_endpoints,
           ApiKey.SHARE_ACKNOWLEDGE: rewrite_share_acknowledge_node_endpoints}
PROXY = {1: ("proxy.local", 19101), 2: ("proxy.local", 19102), 3: ("proxy.local", 19103)}


def frame_of(msg: Message, version: int, correlation_id: int = 42) -> bytes:
    return encode_response_with_header(msg.API_KEY, version, correlation_id, encode_struct(msg, version, True))


def expected_share(msg: Any, addresses: dict[int, tuple[str, int]]) -> Any:
    return replace(msg, node_endpoints=tuple(
        replace(ep, host=addresses[ep.node_id][0], port=addresses[ep.node_id][1]) if ep.node_id in addresses else ep
        for ep in msg.node_endpoints))


# ---------------------------------------------------------------------------------------------
# The schema: round trips for every version.


@pytest.mark.parametrize(("cls", "version"), MESSAGES, ids=lambda x: getattr(x, "__name__", str(x)))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_schema_round_trip_is_byte_identical(cls: type[Message], version: int, data: st.DataObject) -> None:
    msg = data.draw(message_strategy(cls, version))
    encoded = encode_struct(msg, version, True)
    decoded = decode_struct(cls, version, encoded, True)
    assert decoded == msg
    assert encode_struct(decoded, version, True) == encoded


# ---------------------------------------------------------------------------------------------
# ShareFetch / ShareAcknowledge.


@pytest.mark.parametrize(("cls", "version"), SHARE, ids=lambda x: getattr(x, "__name__", str(x)))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_share_rewrite_changes_only_the_mapped_endpoints(cls: type[Message], version: int,
                                                         data: st.DataObject) -> None:
    # Given a random answer whose endpoints name nodes 0-4, some of them mapped to the proxy
    endpoint = st.builds(NodeEndpoint, node_id=st.integers(0, 4), host=st.sampled_from(["b1", "broker-2", "é"]),
                         port=st.integers(0, 70000), rack=st.none() | st.just("r1"))
    msg = replace(data.draw(message_strategy(cls, version)),
                  node_endpoints=tuple(data.draw(st.lists(endpoint, max_size=4))))
    mapped = data.draw(st.dictionaries(st.integers(0, 4), st.tuples(st.just("proxy"), st.integers(1, 65535))))
    frame = frame_of(msg, version)
    # When the proxy rewrites it
    out = REWRITE[ApiKey(cls.API_KEY)](frame, version, mapped)
    # Then it is exactly the answer with only those endpoints replaced, or the very same object
    expected = expected_share(msg, mapped)
    assert bytes(out) == frame_of(expected, version)
    if expected == msg:
        assert out is frame
    assert find_share_node_endpoints(out, cls.API_KEY, version) == expected.node_endpoints


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_records_are_carried_as_they_are(version: int) -> None:
    # Given a ShareFetch answer with 1 MiB of records and a NOT_LEADER_OR_FOLLOWER partition
    records = random.Random(7).randbytes(1 << 20)
    msg = ShareFetchResponse(
        acquisition_lock_timeout_ms=30_000,
        responses=(ShareFetchTopicResponse(topic_id=uuid.UUID(int=9), partitions=(
            ShareFetchPartitionData(partition_index=0, records=records, acquired_records=(
                ShareAcquiredRecords(first_offset=0, last_offset=99, delivery_count=1),)),
            ShareFetchPartitionData(partition_index=1, error_code=6, current_leader=LeaderIdAndEpoch(
                leader_id=2, leader_epoch=7)),
        )),),
        node_endpoints=(NodeEndpoint(node_id=2, host="10.0.0.2", port=9092, rack="az-b"),),
        unknown_tagged_fields=((5, b"keep"),),
    )
    frame = memoryview(frame_of(msg, version))
    # When node 2 is rewritten to its proxy listener
    out = rewrite_share_fetch_node_endpoints(frame, version, PROXY)
    # Then the records and the top-level tagged field are there unchanged, the endpoint is the proxy's
    decoded = decode_struct(ShareFetchResponse, version, bytes(out)[5:], True)
    assert bytes(decoded.responses[0].partitions[0].records or b"") == records
    assert decoded.node_endpoints == (NodeEndpoint(node_id=2, host="proxy.local", port=19102, rack="az-b"),)
    assert decoded.unknown_tagged_fields == ((5, b"keep"),)


def test_share_acknowledge_endpoints_rewritten() -> None:
    msg = ShareAcknowledgeResponse(
        acquisition_lock_timeout_ms=15_000,
        responses=(ShareAcknowledgeTopicResponse(topic_id=uuid.UUID(int=3), partitions=(
            ShareAcknowledgePartitionData(partition_index=4, error_code=6,
                                          current_leader=LeaderIdAndEpoch(leader_id=3, leader_epoch=1)),)),),
        node_endpoints=(NodeEndpoint(node_id=3, host="10.0.0.3", port=9092),),
    )
    out = rewrite_share_acknowledge_node_endpoints(frame_of(msg, 2), 2, PROXY)
    assert find_share_node_endpoints(out, ApiKey.SHARE_ACKNOWLEDGE, 2) == (
        NodeEndpoint(node_id=3, host="proxy.local", port=19103),)


def test_share_answer_without_endpoints_is_returned_as_is() -> None:
    frame = frame_of(ShareFetchResponse(responses=(ShareFetchTopicResponse(partitions=(
        ShareFetchPartitionData(records=b"R" * 100),)),)), 1)
    assert rewrite_share_fetch_node_endpoints(frame, 1, PROXY) is frame


@pytest.mark.parametrize("version", [0, 3])
def test_share_versions_kafka_43_does_not_define_are_refused(version: int) -> None:
    frame = frame_of(ShareFetchResponse(), 1)
    with pytest.raises(UnsupportedVersion):
        rewrite_share_fetch_node_endpoints(frame, version, PROXY)
    with pytest.raises(UnsupportedVersion):
        rewrite_share_acknowledge_node_endpoints(frame, version, PROXY)


@pytest.mark.parametrize(("cls", "version"), SHARE, ids=lambda x: getattr(x, "__name__", str(x)))
def test_truncated_share_answers_raise_protocol_error(cls: type[Message], version: int) -> None:
    rng = random.Random(version)
    for _ in range(20):
        msg = replace(random_instance(cls, version, True, rng),
                      node_endpoints=(NodeEndpoint(node_id=1, host="b1", port=9092),))
        frame = frame_of(msg, version)
        for cut in range(len(frame)):
            with pytest.raises(ProtocolError):
                REWRITE[ApiKey(cls.API_KEY)](frame[:cut], version, PROXY)
        with pytest.raises(ProtocolError):
            REWRITE[ApiKey(cls.API_KEY)](frame + b"\x00", version, PROXY)


@pytest.mark.parametrize(("cls", "version"), SHARE, ids=lambda x: getattr(x, "__name__", str(x)))
def test_garbled_share_answers_raise_only_protocol_error(cls: type[Message], version: int) -> None:
    rng = random.Random(1000 + version)
    rewrite = REWRITE[ApiKey(cls.API_KEY)]
    for _ in range(3000):
        frame = bytearray(frame_of(random_instance(cls, version, True, rng), version))
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(frame))
            choice = rng.random()
            if choice < 0.5:
                frame[pos] ^= 1 << rng.randrange(8)
            elif choice < 0.75:
                frame[pos] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
            else:
                del frame[pos:pos + rng.randint(1, 4)]
                if not frame:
                    frame += b"\x01"
        try:
            rewrite(bytes(frame), version, PROXY)
            find_share_node_endpoints(bytes(frame), cls.API_KEY, version)
        except ProtocolError:
            pass


# ---------------------------------------------------------------------------------------------
# DescribeQuorum.

#: A DescribeQuorum v2 answer body as a Kafka 4.3.1 broker sent it (static voter 0 on CONTROLLER
#: 127.0.0.1:52137, brokers 1-3 observing).
REAL_V2_BODY = bytes.fromhex(
    "00000102135f5f636c75737465725f6d657461646174610200000000000001000000000000000100000000000000b8020000"
    "00000000000000000000000000000000000000000000000000b8000001a2019e9f26000001a2019e9f26000400000003c80c"
    "5cfe1760b6a9359d5564c9a89c6900000000000000b8000001a2019e9e5d000001a2019e9e5d000000000106ac3a8f7f95a1"
    "311b98c93a4ef2e59d00000000000000b8000001a2019e9e65000001a2019e9e650000000002cf07d2f5432b41e6a57e4cfe"
    "ca45bee600000000000000b8000001a2019e9e5d000001a2019e9e5d0000000200000000020b434f4e54524f4c4c45520a31"
    "32372e302e302e31cba9000000"
)


def test_real_broker_describe_quorum_v2_decodes_and_reencodes_identically() -> None:
    response = decode_describe_quorum_response(2, REAL_V2_BODY)
    assert [n.node_id for n in response.nodes] == [0]
    assert response.nodes[0].listeners == (DescribeQuorumListener(name="CONTROLLER", host="127.0.0.1", port=52137),)
    assert [v.replica_id for v in response.topics[0].partitions[0].observers] == [3, 1, 2]
    assert encode_describe_quorum_response(response, 2) == REAL_V2_BODY


def test_real_broker_describe_quorum_v2_controller_listener_is_rewritten() -> None:
    frame = encode_response_with_header(ApiKey.DESCRIBE_QUORUM, 2, 5, REAL_V2_BODY)
    out = rewrite_describe_quorum_endpoints(frame, 2, {0: ("127.0.0.1", 9100)})
    assert b"\xcb\xa9" not in bytes(out)[-20:]
    response = decode_describe_quorum_response(2, bytes(out)[5:])
    assert response.nodes[0].listeners == (DescribeQuorumListener(name="CONTROLLER", host="127.0.0.1", port=9100),)
    assert bytes(out)[:5] == frame[:5]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_describe_quorum_rewrite_changes_only_the_listeners(data: st.DataObject) -> None:
    msg = data.draw(message_strategy(DescribeQuorumResponse, 2))
    listener = st.builds(DescribeQuorumListener, name=st.sampled_from(["CONTROLLER", "SSL"]),
                         host=st.sampled_from(["c1", "10.1.1.1"]), port=st.integers(0, 65535))
    node = st.builds(DescribeQuorumNode, node_id=st.integers(0, 3), listeners=st.lists(listener, max_size=3).map(tuple))
    msg = replace(msg, nodes=tuple(data.draw(st.lists(node, max_size=3))))
    mapped = data.draw(st.dictionaries(st.integers(0, 3), st.tuples(st.just("proxy"), st.integers(1, 65535))))
    frame = frame_of(msg, 2)
    out = rewrite_describe_quorum_endpoints(frame, 2, mapped)
    expected = replace(msg, nodes=tuple(
        replace(n, listeners=tuple(replace(ln, host=mapped[n.node_id][0], port=mapped[n.node_id][1])
                                   for ln in n.listeners)) if n.node_id in mapped else n
        for n in msg.nodes))
    assert bytes(out) == frame_of(expected, 2)
    if expected == msg:
        assert out is frame


@pytest.mark.parametrize("version", [0, 1])
def test_describe_quorum_before_v2_is_not_parsed(version: int) -> None:
    assert rewrite_describe_quorum_endpoints(b"garbage", version, PROXY) == b"garbage"


def test_describe_quorum_port_beyond_uint16_is_refused() -> None:
    msg = DescribeQuorumResponse(nodes=(DescribeQuorumNode(node_id=1, listeners=(
        DescribeQuorumListener(name="CONTROLLER", host="c", port=1),)),))
    with pytest.raises(InvalidValue):
        rewrite_describe_quorum_endpoints(frame_of(msg, 2), 2, {1: ("proxy", 70000)})


def test_describe_quorum_request_encodes_as_the_java_client_does() -> None:
    body = encode_describe_quorum_request(DescribeQuorumRequest(topics=(DescribeQuorumRequestTopic(
        topic_name="__cluster_metadata", partitions=(DescribeQuorumRequestPartition(partition_index=0),)),)), 2)
    assert body == b"\x02\x13__cluster_metadata\x02\x00\x00\x00\x00\x00\x00\x00"


def test_truncated_or_garbled_describe_quorum_raises_protocol_error() -> None:
    frame = encode_response_with_header(ApiKey.DESCRIBE_QUORUM, 2, 5, REAL_V2_BODY)
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            rewrite_describe_quorum_endpoints(frame[:cut], 2, PROXY)
    rng = random.Random(3)
    for _ in range(3000):
        garbled = bytearray(frame)
        for _ in range(rng.randint(1, 3)):
            garbled[rng.randrange(len(garbled))] ^= 1 << rng.randrange(8)
        try:
            rewrite_describe_quorum_endpoints(bytes(garbled), 2, PROXY)
        except ProtocolError:
            pass
