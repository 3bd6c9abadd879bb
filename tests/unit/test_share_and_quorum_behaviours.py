"""ApiVersions advertises share groups and DescribeQuorum v2; AddressRewrite rewrites their endpoints."""

from __future__ import annotations

import uuid

import pytest

from insync_proxy.protocol import ApiKey, ApiVersionsResponse, decode_response, encode_response_with_header
from insync_proxy.protocol.messages import (
    ApiVersion,
    DescribeQuorumListener,
    DescribeQuorumNode,
    DescribeQuorumResponse,
    NodeEndpoint,
    ShareAcknowledgeResponse,
    ShareFetchPartitionData,
    ShareFetchResponse,
    ShareFetchTopicResponse,
    decode_describe_quorum_response,
    encode_describe_quorum_response,
    encode_response,
)
from insync_proxy.protocol.schema import decode_struct, encode_struct
from insync_proxy.protocol.share import find_share_node_endpoints
from insync_proxy.proxy.behaviours.addresses import AddressRewrite
from insync_proxy.proxy.behaviours.api_versions import ApiVersionsNegotiation
from insync_proxy.proxy.config.broker_ports import BrokerPorts
from insync_proxy.proxy.datapath.exchange import Exchange, ListenerAddresses, ListenerSettings

LISTENER = ListenerSettings(
    name="default", label="bootstrap", metadata_schema="tagged", hide_unready_partitions=False,
    addresses=ListenerAddresses("127.0.0.1", BrokerPorts(9100)), broker_listeners=frozenset({1, 2, 3}),
)


def exchange(api_key: int, version: int) -> Exchange:
    return Exchange(LISTENER, api_key, version, 7, "test", memoryview(b""))


def advertised(broker: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    response = ApiVersionsResponse(api_keys=tuple(
        ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in broker.items()))
    frame = encode_response_with_header(ApiKey.API_VERSIONS, 3, 7, encode_response(response, 3))
    out = ApiVersionsNegotiation().on_response(exchange(ApiKey.API_VERSIONS, 3), frame)
    assert isinstance(out, bytes)
    decoded = decode_response(ApiKey.API_VERSIONS, 3, out[4:])
    assert isinstance(decoded, ApiVersionsResponse)
    return {e.api_key: (e.min_version, e.max_version) for e in decoded.api_keys}


def test_kafka_43_share_apis_and_describe_quorum_v2_are_advertised_as_the_broker_does() -> None:
    broker = {ApiKey.SHARE_FETCH: (1, 2), ApiKey.SHARE_ACKNOWLEDGE: (1, 2), ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
              ApiKey.DESCRIBE_QUORUM: (0, 2)}
    assert advertised(broker) == broker


@pytest.mark.parametrize(("broker", "expected"), [
    ((0, 0), None),  # Kafka 4.0's early-access v0 only: nothing the proxy can rewrite
    ((0, 1), (1, 1)),
    ((1, 3), (1, 2)),  # a newer broker's v3: not advertised until protocol/ knows it
])
def test_share_versions_outside_what_the_proxy_rewrites_are_not_advertised(
        broker: tuple[int, int], expected: tuple[int, int] | None) -> None:
    got = advertised({ApiKey.SHARE_FETCH: broker, ApiKey.SHARE_ACKNOWLEDGE: broker, ApiKey.PRODUCE: (3, 13)})
    assert got.get(ApiKey.SHARE_FETCH) == expected
    assert got.get(ApiKey.SHARE_ACKNOWLEDGE) == expected
    assert got[ApiKey.PRODUCE] == (3, 13)


def test_describe_quorum_beyond_v2_is_capped() -> None:
    assert advertised({ApiKey.DESCRIBE_QUORUM: (0, 3)}) == {ApiKey.DESCRIBE_QUORUM: (0, 2)}


@pytest.mark.parametrize("api_key", [ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE])
def test_share_node_endpoints_name_the_listener_of_their_node(api_key: ApiKey) -> None:
    cls = ShareFetchResponse if api_key == ApiKey.SHARE_FETCH else ShareAcknowledgeResponse
    msg = cls(node_endpoints=(NodeEndpoint(node_id=2, host="10.0.0.2", port=9092, rack="b"),
                              NodeEndpoint(node_id=3, host="10.0.0.3", port=9092)))
    if cls is ShareFetchResponse:
        msg = ShareFetchResponse(responses=(ShareFetchTopicResponse(topic_id=uuid.UUID(int=1), partitions=(
            ShareFetchPartitionData(error_code=6, records=b"x" * 64),)),), node_endpoints=msg.node_endpoints)
    frame = encode_response_with_header(api_key, 2, 7, encode_struct(msg, 2, True))
    out = AddressRewrite().on_response(exchange(api_key, 2), frame)
    assert isinstance(out, bytes)
    assert find_share_node_endpoints(out, api_key, 2) == (
        NodeEndpoint(node_id=2, host="127.0.0.1", port=9102, rack="b"),
        NodeEndpoint(node_id=3, host="127.0.0.1", port=9103))
    assert decode_struct(cls, 2, out[5:], True).responses == msg.responses


def test_describe_quorum_listeners_name_the_proxy_address_of_their_node() -> None:
    msg = DescribeQuorumResponse(nodes=(DescribeQuorumNode(node_id=0, listeners=(
        DescribeQuorumListener(name="CONTROLLER", host="10.0.0.9", port=9093),)),))
    frame = encode_response_with_header(ApiKey.DESCRIBE_QUORUM, 2, 7, encode_describe_quorum_response(msg, 2))
    out = AddressRewrite().on_response(exchange(ApiKey.DESCRIBE_QUORUM, 2), frame)
    assert isinstance(out, bytes)
    assert decode_describe_quorum_response(2, out[5:]).nodes[0].listeners == (
        DescribeQuorumListener(name="CONTROLLER", host="127.0.0.1", port=9100),)
