"""Which port of a listener stands for which broker: node ids to ports, from the configuration alone.

Each listener has `node_id_ranges`, a list of "first-last" node id ranges (or single ids); the node ids
they cover take consecutive ports from `broker_port_base`, range after range in the order listed. The
default, ["0-89"], keeps node id N at broker_port_base + N and stops below the default admin port
(9100 + 90 = 9190). A port depends on the configuration and the node id only, never on the order brokers
are discovered in, so it is the same after every restart; appending a range never moves an earlier one.

A node id no range covers has no port: the server logs it and counts it, and every response names that
broker at port 0, which no one can listen on (clients see it as an unreachable broker, never its real
address). Every int32 node id is accepted; negative ids (Kafka's "no node") have no address at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from insync_proxy.proxy.config.defaults import DEFAULT_NODE_ID_RANGES

#: Kafka node ids are int32; negative ones mean "no node".
MAX_NODE_ID: Final = 2**31 - 1
MAX_PORT: Final = 65535
#: The port every response gives a broker that has no port on a listener: nothing can listen on port 0.
NO_PORT: Final = 0


class BrokerPortsError(ValueError):
    """node_id_ranges that cannot be used as written; the message names the setting and the fix."""


@dataclass(frozen=True, slots=True)
class NodeIdRange:
    """Node ids first..last, both included."""

    first: int
    last: int

    def __len__(self) -> int:
        return self.last - self.first + 1

    def __contains__(self, node_id: object) -> bool:
        return isinstance(node_id, int) and self.first <= node_id <= self.last

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


def parse_node_id_ranges(entries: Iterable[object], where: str = "node_id_ranges") -> tuple[NodeIdRange, ...]:
    """Parse entries such as "1001-1003", "65001" or 7 into ranges; BrokerPortsError names what is wrong."""
    if isinstance(entries, str):
        entries = [e for e in entries.split(",") if e.strip()]
    ranges: list[NodeIdRange] = []
    for entry in entries:
        ranges.append(_parse_range(entry, where))
    if not ranges:
        raise BrokerPortsError(f'{where} is empty: list the node ids of the brokers, e.g. ["1001-1003"]')
    ordered = sorted(ranges, key=lambda r: r.first)
    for before, after in zip(ordered, ordered[1:], strict=False):
        if after.first <= before.last:
            raise BrokerPortsError(
                f"{where}: node id {after.first} is in both {before} and {after}: each node id takes one port, "
                "list it once")
    return tuple(ranges)


def _parse_range(entry: object, where: str) -> NodeIdRange:
    if isinstance(entry, bool):
        raise BrokerPortsError(f"{where}: {entry!r} is not a node id range (e.g. \"1001-1003\" or \"65001\")")
    if isinstance(entry, int):
        first = last = entry
    elif isinstance(entry, str):
        text = entry.strip()
        head, dash, tail = text.partition("-")
        try:
            first = int(head)
            last = int(tail) if dash else first
        except ValueError:
            raise BrokerPortsError(
                f"{where}: {entry!r} is not a node id range: write \"first-last\" (e.g. \"1001-1003\") "
                "or one node id (e.g. \"65001\")") from None
    else:
        raise BrokerPortsError(f"{where}: {entry!r} is not a node id range (e.g. \"1001-1003\" or \"65001\")")
    for value in (first, last):
        if not 0 <= value <= MAX_NODE_ID:
            raise BrokerPortsError(f"{where}: {entry!r}: node ids are 0 to {MAX_NODE_ID} (a Kafka int32)")
    if last < first:
        raise BrokerPortsError(f"{where}: {entry!r} ends before it starts: write \"{last}-{first}\"")
    return NodeIdRange(first, last)


class BrokerPorts:
    """One listener's node id -> port mapping: the ids of `ranges` at consecutive ports from `base`."""

    __slots__ = ("base", "ranges", "size")

    def __init__(self, base: int, ranges: Sequence[NodeIdRange] | None = None) -> None:
        self.base = base
        self.ranges = tuple(ranges) if ranges is not None else parse_node_id_ranges(DEFAULT_NODE_ID_RANGES)
        #: How many ports the ranges take: base .. base + size - 1.
        self.size = sum(len(r) for r in self.ranges)

    @classmethod
    def from_settings(cls, base: int, node_id_ranges: Iterable[object], where: str = "node_id_ranges") -> BrokerPorts:
        return cls(base, parse_node_id_ranges(node_id_ranges, where))

    @property
    def last_port(self) -> int:
        return self.base + self.size - 1

    def port_for(self, node_id: int) -> int | None:
        """The port standing for this broker, or None when no range covers its node id."""
        offset = 0
        for node_range in self.ranges:
            if node_range.first <= node_id <= node_range.last:
                return self.base + offset + node_id - node_range.first
            offset += len(node_range)
        return None

    def node_id_at(self, port: int) -> int | None:
        """The node id whose port this is, or None."""
        offset = port - self.base
        if offset < 0:
            return None
        for node_range in self.ranges:
            if offset < len(node_range):
                return node_range.first + offset
            offset -= len(node_range)
        return None

    def port_span(self) -> str:
        """E.g. `9100-9102`."""
        return str(self.base) if self.size == 1 else f"{self.base}-{self.last_port}"

    def describe(self) -> str:
        """E.g. `9100-9102 (node ids 1001-1003)`, for log lines."""
        return f"{self.port_span()} (node ids {', '.join(str(r) for r in self.ranges)})"

    def settings_text(self) -> str:
        """The ranges as the setting is written: `["1001-1003", "65001"]`."""
        return "[" + ", ".join(f'"{r}"' for r in self.ranges) + "]"


@dataclass(frozen=True, slots=True)
class ListenerPorts:
    """What the start-up check needs of one listener."""

    name: str
    bootstrap_port: int
    broker_port_base: int
    node_id_ranges: Sequence[object]


def check_listener_ports(listeners: Sequence[ListenerPorts], admin_port: int) -> dict[str, BrokerPorts]:
    """Every listener's broker ports fit in 0-65535 and collide with no other port of the proxy
    (admin_port, any bootstrap_port, any other listener's broker ports); port 0 (any free port) is left
    out. Returns each listener's mapping; BrokerPortsError names the settings and what to change."""
    mappings: dict[str, BrokerPorts] = {}
    for listener in listeners:
        where = f"listener {listener.name}: node_id_ranges"
        ports = BrokerPorts.from_settings(listener.broker_port_base, listener.node_id_ranges, where)
        if ports.last_port > MAX_PORT:
            raise BrokerPortsError(
                f"listener {listener.name}: node_id_ranges {ports.settings_text()} take {ports.size} ports from "
                f"broker_port_base {ports.base}, up to {ports.last_port}, past {MAX_PORT}: lower broker_port_base "
                "or list only the brokers' node ids in node_id_ranges")
        mappings[listener.name] = ports
    singles: list[tuple[int, str]] = [(admin_port, "admin_port")]
    singles += [(lis.bootstrap_port, f"listener {lis.name} bootstrap_port") for lis in listeners]
    for listener in listeners:
        ports = mappings[listener.name]
        what = (f"listener {listener.name}: broker ports {ports.port_span()} (broker_port_base {ports.base}, "
                f"node_id_ranges {ports.settings_text()})")
        for port, name in singles:
            if port and ports.base <= port <= ports.last_port:
                raise BrokerPortsError(
                    f"{what} include {name} {port}: move {name} or broker_port_base, or narrow node_id_ranges")
        for other in listeners:
            if other.name == listener.name:
                continue
            theirs = mappings[other.name]
            if ports.base <= theirs.last_port and theirs.base <= ports.last_port:
                raise BrokerPortsError(
                    f"{what} overlap listener {other.name}'s broker ports {theirs.port_span()}: give each listener its own "
                    "broker_port_base, at least as far apart as its node_id_ranges are long")
    return mappings


#: The placeholder of a per-broker advertised host (advertised_host = "kafka-{node_id}.example.com").
NODE_ID_PLACEHOLDER = "{node_id}"


def advertised_name(advertised_host: str, node_id: int) -> str:
    """The host clients are told for broker `node_id`: advertised_host with {node_id} filled in."""
    return advertised_host.replace(NODE_ID_PLACEHOLDER, str(node_id))


def bootstrap_host(advertised_host: str, bind_host: str) -> str:
    """The host of the bootstrap port as the proxy names it: advertised_host, or with a per-broker advertised
    host (whose bootstrap name no one is told) the address it binds (loopback for a wildcard)."""
    if NODE_ID_PLACEHOLDER not in advertised_host:
        return advertised_host
    return "127.0.0.1" if bind_host in ("0.0.0.0", "", "::") else bind_host


def unmapped_broker_line(listener: str, node_id: int, ports: BrokerPorts) -> str:
    """What `run` logs (ERROR) and `check-config --connect` fails with for a broker no port stands for."""
    return (f"listener {listener}: broker {node_id} has no port: node id {node_id} is outside node_id_ranges "
            f"{ports.settings_text()} (broker ports {ports.port_span()}); add it to that [[listener]]'s node_id_ranges "
            f"(e.g. \"{node_id}\") and restart. Until then clients are told port {NO_PORT} for it and cannot reach it "
            "through this listener")
