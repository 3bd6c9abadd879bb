"""rewrite_endpoints: the one host/port rewrite every answer carrying broker addresses goes through."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from insync_proxy.protocol.endpoints import rewrite_endpoints
from insync_proxy.protocol.messages import DescribeQuorumListener, MetadataResponseBroker, NodeEndpoint

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
