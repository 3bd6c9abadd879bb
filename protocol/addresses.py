"""Which broker addresses an answer gets: the one host/port rewrite every endpoint rewriter uses.

Every answer that carries a broker or controller address (protocol/endpoints.py: ``ENDPOINT_REWRITERS``,
and Metadata's brokers in protocol/metadata_splice.py) decides here, alike, which endpoints change: those
of the nodes the proxy has an address for. The walkers that find the endpoints import it, and
protocol/endpoints.py imports the walkers, so it stands on its own below both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Protocol, TypeVar, overload

__all__ = ["Address", "HostPort", "NodeAddress", "rewrite_endpoints"]

#: node_id -> (host, port) the proxy puts in place of the broker's.
Address = tuple[str, int]


class HostPort(Protocol):
    """A dataclass with a host and a port (a DescribeQuorum listener)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class NodeAddress(HostPort, Protocol):
    """A dataclass with a node id, a host and a port (a NodeEndpoint, a Metadata broker)."""

    @property
    def node_id(self) -> int: ...


N = TypeVar("N", bound=NodeAddress)
H = TypeVar("H", bound=HostPort)


@overload
def rewrite_endpoints(endpoints: Sequence[N], addresses: Mapping[int, Address]) -> tuple[N, ...] | None: ...


@overload
def rewrite_endpoints(endpoints: Sequence[H], addresses: Mapping[int, Address], node_id: int
                      ) -> tuple[H, ...] | None: ...


def rewrite_endpoints(endpoints: Sequence[Any], addresses: Mapping[int, Address], node_id: int | None = None
                      ) -> tuple[Any, ...] | None:
    """``endpoints`` with host and port replaced for every node in ``addresses``, or None when none changes.

    Each endpoint belongs to its own ``node_id``, or with ``node_id`` given all belong to that node (the
    listeners of one DescribeQuorum node). An endpoint that keeps its address is the same object in the
    result, so a caller splicing bytes can tell which ones changed (``new is not old``).
    """
    out: list[Any] | None = None
    for i, ep in enumerate(endpoints):
        new = addresses.get(ep.node_id if node_id is None else node_id)
        if new is not None and (ep.host, ep.port) != new:
            if out is None:
                out = list(endpoints)
            out[i] = replace(ep, host=new[0], port=new[1])
    return None if out is None else tuple(out)
