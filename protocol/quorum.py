"""DescribeQuorum (key 55): the rewrite of its controller endpoints (the schema: protocol/messages.py).

v2 (KIP-853) adds ``nodes``: every voter's listeners with host and port (uint16), addresses a client
must not learn through a proxy. The message is small and rare, so the rewrite decodes the whole
answer with its schema and encodes it back (byte-identical apart from the rewritten endpoints);
v0-v1 carry no address and are never parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from .addresses import rewrite_endpoints
from .api_keys import ApiKey
from .errors import UnsupportedVersion
from .headers import split_response
from .kafka_versions import DESCRIBE_QUORUM_RESPONSE_NODES_SINCE
from .messages import DescribeQuorumResponse, decode_describe_quorum_response
from .primitives import Buffer, Writer, bytes_view
from .schema import encode_struct

__all__ = ["rewrite_describe_quorum_endpoints"]


def rewrite_describe_quorum_endpoints(
    frame: Buffer, api_version: int, addresses: Mapping[int, tuple[str, int]]
) -> Buffer:
    """Replace host/port of every listener of every mapped node in a DescribeQuorum v2+ response frame.

    Every listener of a node (whatever its name) gets that node's address in ``addresses``. Before
    v2 the frame is returned unparsed; when nothing changes, ``frame`` itself is returned. A port
    that does not fit the field's uint16 raises :class:`protocol.errors.InvalidValue`.
    """
    if api_version < DESCRIBE_QUORUM_RESPONSE_NODES_SINCE:
        return frame
    if api_version > DescribeQuorumResponse.VALID_VERSIONS[1]:
        raise UnsupportedVersion(f"DescribeQuorum v{api_version} is not supported (known: up to v2)")
    mv = bytes_view(frame)
    correlation_id, body = split_response(mv, ApiKey.DESCRIBE_QUORUM, api_version)
    header_size = len(mv) - len(body)
    response = decode_describe_quorum_response(api_version, body)
    changed = False
    nodes = []
    for node in response.nodes:
        listeners = rewrite_endpoints(node.listeners, addresses, node.node_id)
        if listeners is not None:
            node = replace(node, listeners=listeners)
            changed = True
        nodes.append(node)
    if not changed:
        return frame
    w = Writer()
    w.raw(mv[:header_size])
    encode_struct(replace(response, nodes=tuple(nodes)), api_version, True, w)
    return w.getvalue()
