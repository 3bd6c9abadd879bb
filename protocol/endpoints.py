"""Broker addresses in answers: one table, by API key, of the rewriter of every response that carries one.

Kafka hands clients broker addresses in several answers: FindCoordinator (the coordinator: at the top
level in v0-v3, one per key in v4+), DescribeCluster brokers, Produce v10+ and Fetch v16+
``node_endpoints``, ShareFetch/ShareAcknowledge ``node_endpoints`` and DescribeQuorum v2+ node
listeners. `ENDPOINT_REWRITERS` names the rewriter of each, and a proxy rewrites exactly the answers
it lists. Every rewriter takes the response frame (header + body), its version and the proxy's
addresses (node id -> host, port) and returns the frame itself when no address changes. The walkers
that find Produce's, Fetch's, the share answers' and DescribeQuorum's endpoints stand in their own
modules; FindCoordinator and DescribeCluster, small and rare, are decoded whole and encoded back here.
Which endpoints change is decided for all of them alike (`rewrite_endpoints`, from protocol/addresses.py,
which the walkers import too).

Metadata's brokers carry addresses too, but they are not in the table: the splice rewrites them in
the same pass that adds each topic's min.insync.replicas (`protocol.metadata_splice`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Final, TypeVar

from .addresses import Address, HostPort, NodeAddress, rewrite_endpoints
from .api_keys import ApiKey
from .fetch import rewrite_fetch_node_endpoints
from .headers import encode_response_with_header, split_response
from .kafka_messages import DescribeClusterResponse, FindCoordinatorResponse
from .kafka_versions import FIND_COORDINATOR_RESPONSE_COORDINATORS_SINCE
from .messages import decode_response, encode_response
from .primitives import Buffer
from .produce import rewrite_produce_node_endpoints
from .quorum import rewrite_describe_quorum_endpoints
from .share import rewrite_share_acknowledge_node_endpoints, rewrite_share_fetch_node_endpoints

__all__ = [
    "ENDPOINT_REWRITERS",
    "Address",
    "EndpointRewriter",
    "HostPort",
    "NodeAddress",
    "rewrite_describe_cluster_endpoints",
    "rewrite_endpoints",
    "rewrite_find_coordinator_endpoints",
]

#: (response frame, api version, node id -> proxy address) -> the frame with the proxy's addresses.
EndpointRewriter = Callable[[Buffer, int, Mapping[int, Address]], Buffer]

#: The address of a coordinator that was not found (node_id -1): none, as Kafka writes it, whatever the
#: broker put there.
_NO_COORDINATOR: Final = ("", -1)
#: FindCoordinator v4 (KIP-699) answers one coordinator per key instead of one at the top level.
_FIRST_BATCHED_VERSION: Final = FIND_COORDINATOR_RESPONSE_COORDINATORS_SINCE

H = TypeVar("H", bound=HostPort)


def _at(endpoint: H, address: Address) -> H:
    """``endpoint`` with host and port ``address``: itself when it has them already."""
    if (endpoint.host, endpoint.port) == address:
        return endpoint
    return replace(endpoint, host=address[0], port=address[1])


def _coordinator_address(node_id: int, addresses: Mapping[int, Address]) -> Address:
    return addresses[node_id] if node_id >= 0 else _NO_COORDINATOR


def rewrite_find_coordinator_endpoints(frame: Buffer, api_version: int, addresses: Mapping[int, Address]) -> Buffer:
    """Put the proxy's address of the coordinator's node in a FindCoordinator response frame (every
    version): the top-level host/port in v0-v3, each coordinator's in v4+. A coordinator not found
    (node_id -1) gets none ("", -1). A node id missing from ``addresses`` raises KeyError: no
    coordinator's address passes unchanged. ``frame`` itself when nothing changes."""
    correlation_id, body = split_response(frame, ApiKey.FIND_COORDINATOR, api_version)
    response = decode_response(ApiKey.FIND_COORDINATOR, api_version, body)
    assert isinstance(response, FindCoordinatorResponse)
    if api_version < _FIRST_BATCHED_VERSION:
        rewritten = _at(response, _coordinator_address(response.node_id, addresses))
    else:
        coordinators = tuple(_at(c, _coordinator_address(c.node_id, addresses)) for c in response.coordinators)
        changed = any(new is not old for new, old in zip(coordinators, response.coordinators, strict=True))
        rewritten = replace(response, coordinators=coordinators) if changed else response
    if rewritten is response:
        return frame
    return encode_response_with_header(ApiKey.FIND_COORDINATOR, api_version, correlation_id,
                                       encode_response(rewritten, api_version))


def rewrite_describe_cluster_endpoints(frame: Buffer, api_version: int, addresses: Mapping[int, Address]) -> Buffer:
    """Put the proxy's address of each broker in a DescribeCluster response frame (every version). A
    broker id missing from ``addresses`` raises KeyError: no broker's address passes unchanged.
    ``frame`` itself when nothing changes."""
    correlation_id, body = split_response(frame, ApiKey.DESCRIBE_CLUSTER, api_version)
    response = decode_response(ApiKey.DESCRIBE_CLUSTER, api_version, body)
    assert isinstance(response, DescribeClusterResponse)
    brokers = tuple(_at(b, addresses[b.broker_id]) for b in response.brokers)
    if all(new is old for new, old in zip(brokers, response.brokers, strict=True)):
        return frame
    return encode_response_with_header(ApiKey.DESCRIBE_CLUSTER, api_version, correlation_id,
                                       encode_response(replace(response, brokers=brokers), api_version))


#: Every response that carries a broker or controller address (Metadata apart: see above), by API key.
ENDPOINT_REWRITERS: Final[dict[int, EndpointRewriter]] = {
    ApiKey.PRODUCE: rewrite_produce_node_endpoints,
    ApiKey.FETCH: rewrite_fetch_node_endpoints,
    ApiKey.FIND_COORDINATOR: rewrite_find_coordinator_endpoints,
    ApiKey.DESCRIBE_CLUSTER: rewrite_describe_cluster_endpoints,
    ApiKey.DESCRIBE_QUORUM: rewrite_describe_quorum_endpoints,
    ApiKey.SHARE_FETCH: rewrite_share_fetch_node_endpoints,
    ApiKey.SHARE_ACKNOWLEDGE: rewrite_share_acknowledge_node_endpoints,
}
