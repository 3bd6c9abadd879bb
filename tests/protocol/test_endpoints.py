"""rewrite_endpoints: the one host/port rewrite every answer carrying broker addresses goes through; the table of
rewriters by API key, FindCoordinator's and DescribeCluster's against the whole decode the proxy used before."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from insync_proxy.protocol.api_keys import ApiKey
from insync_proxy.protocol.endpoints import (
    ENDPOINT_REWRITERS,
    rewrite_describe_cluster_endpoints,
    rewrite_endpoints,
    rewrite_find_coordinator_endpoints,
)
from insync_proxy.protocol.headers import encode_response_with_header, split_response
from insync_proxy.protocol.messages import (
    Coordinator,
    DescribeClusterBroker,
    DescribeClusterResponse,
    DescribeQuorumListener,
    FindCoordinatorResponse,
    MetadataResponseBroker,
    NodeEndpoint,
    decode_response,
    encode_response,
)
from insync_proxy.protocol.schema import Message

from .schema_gen import message_strategy

hosts = st.sampled_from(["broker-1", "broker-2", "10.0.0.7", "localhost", "proxy.local"])
ports = st.integers(1, 65535)
node_ids = st.integers(0, 6)
endpoints = st.lists(st.builds(NodeEndpoint, node_id=node_ids, host=hosts, port=ports,
                               rack=st.none() | st.just("rack-a")), max_size=6)
address_maps = st.dictionaries(node_ids, st.tuples(hosts, ports), max_size=7)


@settings(max_examples=300, deadline=None)
@given(eps=endpoints, addresses=address_maps)
def test_mapped_nodes_get_the_proxy_address_and_the_rest_stays_the_same_object(
    eps: list[NodeEndpoint], addresses: dict[int, tuple[str, int]]
) -> None:
    # When the endpoints are rewritten
    got = rewrite_endpoints(eps, addresses)
    # Then None means no endpoint of a mapped node had another address
    moved = [ep for ep in eps if ep.node_id in addresses and (ep.host, ep.port) != addresses[ep.node_id]]
    if not moved:
        assert got is None
        return
    assert got is not None and len(got) == len(eps)
    for old, new in zip(eps, got, strict=True):
        if old.node_id in addresses:
            # a mapped node: the proxy's address, every other field kept
            assert (new.node_id, new.host, new.port, new.rack) == (old.node_id, *addresses[old.node_id], old.rack)
        else:
            assert new is old
        if (old.host, old.port) == (new.host, new.port):
            assert new is old  # unchanged endpoints are the same object: a splice can tell which changed


@settings(max_examples=200, deadline=None)
@given(listeners=st.lists(st.builds(DescribeQuorumListener, name=st.sampled_from(["CONTROLLER", "PLAINTEXT"]),
                                    host=hosts, port=ports), max_size=4),
       node_id=node_ids, addresses=address_maps)
def test_listeners_of_one_node_all_get_that_nodes_address(
    listeners: list[DescribeQuorumListener], node_id: int, addresses: dict[int, tuple[str, int]]
) -> None:
    got = rewrite_endpoints(listeners, addresses, node_id)
    new = addresses.get(node_id)
    if new is None or all((ln.host, ln.port) == new for ln in listeners):
        assert got is None
    else:
        assert got is not None
        assert [(ln.name, ln.host, ln.port) for ln in got] == [(ln.name, *new) for ln in listeners]


def test_metadata_brokers_rewritten_by_node_id() -> None:
    brokers = (MetadataResponseBroker(node_id=1, host="b1", port=9092, rack=None),
               MetadataResponseBroker(node_id=2, host="b2", port=9092, rack="r"))
    got = rewrite_endpoints(brokers, {2: ("127.0.0.1", 19092), 3: ("x", 1)})
    assert got == (brokers[0], MetadataResponseBroker(node_id=2, host="127.0.0.1", port=19092, rack="r"))
    assert got[0] is brokers[0]
    assert rewrite_endpoints(brokers, {1: ("b1", 9092)}) is None  # already the proxy's address
    assert rewrite_endpoints((), {1: ("b1", 9092)}) is None


def _reference_rewrite(key: int, version: int, frame: bytes, addresses: dict[int, tuple[str, int]]) -> bytes:
    """FindCoordinator and DescribeCluster as the proxy rewrote them by hand before the table: decode,
    replace every address, encode (the rewriters must give the same answer)."""
    correlation_id, body = split_response(frame, key, version)
    response = decode_response(key, version, body)
    if isinstance(response, FindCoordinatorResponse):
        if version < 4:
            if response.node_id >= 0:
                host, port = addresses[response.node_id]
                response = replace(response, host=host, port=port)
            else:
                response = replace(response, host="", port=-1)
        else:
            response = replace(response, coordinators=tuple(
                replace(c, host=addresses[c.node_id][0], port=addresses[c.node_id][1])
                if c.node_id >= 0 else replace(c, host="", port=-1)
                for c in response.coordinators))
    elif isinstance(response, DescribeClusterResponse):
        response = replace(response, brokers=tuple(
            replace(b, host=addresses[b.broker_id][0], port=addresses[b.broker_id][1]) for b in response.brokers))
    return encode_response_with_header(key, version, correlation_id, encode_response(response, version))


def _every_node(node_id: int) -> tuple[str, int]:
    return ("proxy.local", 19000 + node_id % 1000)


class _EveryNode(dict[int, tuple[str, int]]):
    """Every node id >= 0 has an address (as the proxy's ListenerAddresses); a negative one is missing."""

    def __missing__(self, node_id: int) -> tuple[str, int]:
        if node_id < 0:
            raise KeyError(node_id)
        return _every_node(node_id)


@pytest.mark.parametrize(("cls", "version"), [(FindCoordinatorResponse, v) for v in range(7)]
                         + [(DescribeClusterResponse, v) for v in range(3)])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_find_coordinator_and_describe_cluster_rewrites_agree_with_the_whole_decode(
        cls: type[Message], version: int, data: st.DataObject) -> None:
    # Given any answer of the version (node ids from the schema: negative ones included)
    response = data.draw(message_strategy(cls, version))
    key = cls.API_KEY
    frame = encode_response_with_header(key, version, 7, encode_response(response, version))
    addresses = _EveryNode()
    try:
        expected = _reference_rewrite(key, version, frame, addresses)
    except KeyError:
        # a DescribeCluster broker without an address: refused, never passed on with the broker's own
        with pytest.raises(KeyError):
            ENDPOINT_REWRITERS[key](frame, version, addresses)
        return
    # When the table's rewriter rewrites it
    got = ENDPOINT_REWRITERS[key](frame, version, addresses)
    # Then it is the answer the whole decode gives, and the very frame when no address changed
    assert bytes(got) == expected
    if expected == frame:
        assert got is frame


def test_find_coordinator_v0_v3_coordinator_and_v4_per_key() -> None:
    addresses = {1: ("127.0.0.1", 19092)}
    old = FindCoordinatorResponse(node_id=1, host="broker-1", port=9092)
    frame = encode_response_with_header(ApiKey.FIND_COORDINATOR, 3, 5, encode_response(old, 3))
    out = rewrite_find_coordinator_endpoints(frame, 3, addresses)
    assert decode_response(ApiKey.FIND_COORDINATOR, 3, split_response(out, ApiKey.FIND_COORDINATOR, 3)[1]) == \
        replace(old, host="127.0.0.1", port=19092)
    batched = FindCoordinatorResponse(coordinators=(
        Coordinator(key="g", node_id=1, host="broker-1", port=9092),
        Coordinator(key="h", node_id=-1, host="x", port=1, error_code=15)))
    frame = encode_response_with_header(ApiKey.FIND_COORDINATOR, 4, 5, encode_response(batched, 4))
    out = rewrite_find_coordinator_endpoints(frame, 4, addresses)
    got = decode_response(ApiKey.FIND_COORDINATOR, 4, split_response(out, ApiKey.FIND_COORDINATOR, 4)[1])
    assert isinstance(got, FindCoordinatorResponse)
    assert [(c.key, c.node_id, c.host, c.port) for c in got.coordinators] == [
        ("g", 1, "127.0.0.1", 19092), ("h", -1, "", -1)]  # not found: no address at all


def test_describe_cluster_brokers_get_the_proxy_address_of_their_id() -> None:
    brokers = (DescribeClusterBroker(broker_id=1, host="b1", port=9092, rack="a"),
               DescribeClusterBroker(broker_id=2, host="127.0.0.1", port=19093))
    frame = encode_response_with_header(ApiKey.DESCRIBE_CLUSTER, 2, 5,
                                        encode_response(DescribeClusterResponse(brokers=brokers), 2))
    out = rewrite_describe_cluster_endpoints(frame, 2, {1: ("127.0.0.1", 19092), 2: ("127.0.0.1", 19093)})
    got = decode_response(ApiKey.DESCRIBE_CLUSTER, 2, split_response(out, ApiKey.DESCRIBE_CLUSTER, 2)[1])
    assert isinstance(got, DescribeClusterResponse)
    assert got.brokers == (replace(brokers[0], host="127.0.0.1", port=19092), brokers[1])
    same = encode_response_with_header(ApiKey.DESCRIBE_CLUSTER, 2, 5, encode_response(got, 2))
    assert rewrite_describe_cluster_endpoints(same, 2, {1: ("127.0.0.1", 19092), 2: ("127.0.0.1", 19093)}) is same


def test_the_table_names_every_answer_that_carries_an_address_but_metadata() -> None:
    assert set(ENDPOINT_REWRITERS) == {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER,
                                       ApiKey.DESCRIBE_QUORUM, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE}
