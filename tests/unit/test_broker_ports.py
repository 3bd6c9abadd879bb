"""Node ids to broker ports: node_id_ranges, the start-up checks, and a broker no range covers.

The mapping (proxy/config/broker_ports.py) is the one object listeners and every address rewrite use; the last
tests run the real proxy in front of a scripted broker that names node ids 1001, 65001 and 2**31-1.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.proxy_process import free_port_base
from insync_proxy.devcluster.cluster import (
    ClusterError,
    ClusterSettings,
    LocalKafkaCluster,
    broker_node_ids,
    controller_node_id,
)
from insync_proxy.protocol import (
    ApiKey,
    ApiVersionsResponse,
    FrameSplitter,
    MetadataResponse,
    RequestHeader,
    decode_response,
    encode_request_header,
    encode_response,
    encode_response_with_header,
    peek_request_header,
    split_response,
)
from insync_proxy.protocol.messages import ApiVersion, MetadataResponseBroker
from insync_proxy.proxy.config.broker_ports import (
    MAX_NODE_ID,
    NO_PORT,
    BrokerPorts,
    BrokerPortsError,
    ListenerPorts,
    check_listener_ports,
    parse_node_id_ranges,
)
from insync_proxy.proxy.config.loader import load_config
from insync_proxy.proxy.config.schema import validate
from insync_proxy.proxy.config.settings import AuditConfig, ConfigError, ListenerConfig, ProxyConfig
from insync_proxy.proxy.datapath.exchange import ListenerAddresses
from insync_proxy.proxy.server import InsyncProxy

# ---------------------------------------------------------------- the mapping


def test_default_keeps_node_id_at_base_plus_node_id_for_ids_0_to_89() -> None:
    ports = BrokerPorts(9100)
    assert [ports.port_for(i) for i in (0, 1, 2, 3, 89)] == [9100, 9101, 9102, 9103, 9189]
    assert ports.port_for(90) is None  # 9190 is the default admin port
    assert ports.last_port == 9189


def test_default_configuration_is_valid_and_clear_of_the_admin_port() -> None:
    config = validate(ProxyConfig(bootstrap_servers=("k:9092",)))
    listener = config.listeners[0]
    ports = BrokerPorts.from_settings(listener.broker_port_base, listener.node_id_ranges)
    assert config.admin_port not in range(ports.base, ports.last_port + 1)


def test_ranges_take_consecutive_ports_in_the_order_listed() -> None:
    ports = BrokerPorts.from_settings(9100, ["1001-1003", "65001"])
    assert [ports.port_for(i) for i in (1001, 1002, 1003, 65001)] == [9100, 9101, 9102, 9103]
    assert ports.port_for(1000) is None and ports.port_for(1004) is None and ports.port_for(65000) is None
    # a range appended later never moves the ports of the earlier ones
    later = BrokerPorts.from_settings(9100, ["1001-1003", "65001", "7-8"])
    assert [later.port_for(i) for i in (1001, 1002, 1003, 65001, 7, 8)] == [9100, 9101, 9102, 9103, 9104, 9105]


def test_node_id_at_is_the_inverse_of_port_for() -> None:
    ports = BrokerPorts.from_settings(30000, ["5", "1001-1003", "2147483640-2147483647"])
    for node_id in (5, 1001, 1002, 1003, 2147483640, MAX_NODE_ID):
        port = ports.port_for(node_id)
        assert port is not None and ports.node_id_at(port) == node_id
    assert ports.node_id_at(29999) is None and ports.node_id_at(ports.last_port + 1) is None


def test_int32_extremes_map_and_never_raise() -> None:
    ports = BrokerPorts.from_settings(9100, ["0", str(MAX_NODE_ID)])
    assert ports.port_for(0) == 9100
    assert ports.port_for(MAX_NODE_ID) == 9101
    for node_id in (-(2**31), -1, 1, 2**31 - 2, 2**31, 2**63):
        assert ports.port_for(node_id) is None


def test_a_port_depends_on_the_configuration_and_node_id_only_never_on_discovery_order() -> None:
    ids = [1001, 1002, 1003, 65001, 7, 2**31 - 1, 5000]
    seen = []
    for _ in range(5):
        random.shuffle(ids)
        ports = BrokerPorts.from_settings(9100, ["1001-1003", "65001", "2147483647"])
        addresses = ListenerAddresses("127.0.0.1", ports)
        seen.append({i: addresses[i] for i in ids})  # looked up (and cached) in a different order each time
    assert all(s == seen[0] for s in seen)
    assert seen[0][65001] == ("127.0.0.1", 9103)


@pytest.mark.parametrize(("entries", "expected"), [
    (["1001-1003"], ((1001, 1003),)),
    (["65001"], ((65001, 65001),)),
    ([" 7 - 9 ", 42], ((7, 9), (42, 42))),
    ("1001-1003, 65001", ((1001, 1003), (65001, 65001))),  # a string, as an environment variable holds it
    ([f"0-{MAX_NODE_ID}"], ((0, MAX_NODE_ID),)),  # parses; the port check refuses it (see below)
])
def test_node_id_ranges_parse(entries: object, expected: tuple[tuple[int, int], ...]) -> None:
    assert tuple((r.first, r.last) for r in parse_node_id_ranges(entries)) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("entries", "message"), [
    ([], "is empty"),
    (["abc"], "is not a node id range"),
    (["1-2-3"], "is not a node id range"),
    (["-1"], "is not a node id range"),
    ([True], "is not a node id range"),
    ([1.5], "is not a node id range"),
    ([str(2**31)], "node ids are 0 to 2147483647"),
    ([-4], "node ids are 0 to 2147483647"),
    (["9-3"], 'ends before it starts: write "3-9"'),
    (["1001-1003", "1003-1005"], "node id 1003 is in both 1001-1003 and 1003-1005"),
    (["5", "1-9"], "node id 5 is in both 1-9 and 5"),
])
def test_bad_node_id_ranges_are_refused_with_what_to_write(entries: list[object], message: str) -> None:
    with pytest.raises(BrokerPortsError, match=message):
        parse_node_id_ranges(entries)


def test_unmapped_node_id_is_named_at_port_0_and_negative_ids_have_no_address() -> None:
    addresses = ListenerAddresses("proxy.local", BrokerPorts.from_settings(9100, ["1001"]))
    assert addresses[1001] == ("proxy.local", 9100)
    assert addresses[65001] == ("proxy.local", NO_PORT)
    assert addresses.get(MAX_NODE_ID) == ("proxy.local", NO_PORT)
    assert 65001 in addresses and -1 not in addresses
    with pytest.raises(KeyError):
        addresses[-1]


# ---------------------------------------------------------------- the start-up check


def _config(*listeners: ListenerConfig, admin_port: int = 9190) -> ProxyConfig:
    return ProxyConfig(bootstrap_servers=("k:9092",), listeners=listeners, admin_port=admin_port)


@pytest.mark.parametrize(("config", "names"), [
    (_config(ListenerConfig(broker_port_base=9150)),  # 9150-9239 holds the admin port 9190
     ("admin_port 9190", "broker_port_base 9150", "node_id_ranges", "listener default")),
    (_config(ListenerConfig(node_id_ranges=("0-90",))),  # today's node 90 on the admin port
     ("admin_port 9190", "node_id_ranges", '["0-90"]')),
    (_config(ListenerConfig(), ListenerConfig(name="b", bootstrap_port=9120, broker_port_base=9300)),
     ("listener b bootstrap_port 9120", "listener default")),
    (_config(ListenerConfig(bootstrap_port=9105)),
     ("listener default bootstrap_port 9105",)),
    (_config(ListenerConfig(), ListenerConfig(name="b", bootstrap_port=9093, broker_port_base=9150)),
     ("overlap listener", "9100-9189", "broker_port_base")),
    (_config(ListenerConfig(broker_port_base=65500)),
     ("past 65535", "broker_port_base 65500", "node_id_ranges")),
    (_config(ListenerConfig(node_id_ranges=(f"0-{MAX_NODE_ID}",))),
     ("past 65535", "2147483648 ports")),
    (_config(ListenerConfig(node_id_ranges=("1001-1003", "1002"))),
     ("listener default: node_id_ranges", "node id 1002 is in both")),
])
def test_colliding_or_impossible_broker_ports_are_a_one_line_configuration_error(
    config: ProxyConfig, names: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(config)
    message = str(caught.value)
    assert "\n" not in message
    for name in names:
        assert name in message, message


def test_ports_of_every_listener_side_by_side_are_accepted() -> None:
    config = validate(_config(
        ListenerConfig(node_id_ranges=("1001-1003", "65001")),  # 9100-9103
        ListenerConfig(name="b", bootstrap_port=9093, broker_port_base=9104, node_id_ranges=("1001-1003", "65001")),
        ListenerConfig(name="c", bootstrap_port=0, broker_port_base=9108),  # 9108-9197 holds no fixed port
        admin_port=9300,
    ))
    mappings = check_listener_ports(
        [ListenerPorts(lc.name, lc.bootstrap_port, lc.broker_port_base, lc.node_id_ranges) for lc in config.listeners],
        config.admin_port)
    assert mappings["b"].port_for(65001) == 9107 and mappings["c"].port_for(0) == 9108


def test_node_id_ranges_from_a_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('bootstrap_servers = ["k:9092"]\n[[listener]]\nname = "default"\n'
                    'node_id_ranges = ["1001-1003", "65001"]\n')
    listener = load_config(str(path), env={}).listeners[0]
    ports = BrokerPorts.from_settings(listener.broker_port_base, listener.node_id_ranges)
    assert ports.port_for(65001) == 9103


def test_a_collision_exits_2_with_one_line_naming_the_settings(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('bootstrap_servers = ["k:9092"]\nadmin_port = 9101\n[[listener]]\nname = "default"\n'
                    'broker_port_base = 9100\nnode_id_ranges = ["1001-1003"]\n')
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "insync_proxy", "run", "--config", str(path)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - started < 10
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "admin_port 9101" in lines[0] and "node_id_ranges" in lines[0] and "broker_port_base" in lines[0]


# ---------------------------------------------------------------- the dev cluster's node ids


def test_dev_cluster_brokers_take_the_chosen_node_ids_and_the_controller_another() -> None:
    cluster = LocalKafkaCluster(ClusterSettings(node_ids=[1001, 1002, 65001]))
    try:
        assert sorted(cluster.brokers) == [1001, 1002, 65001]
        assert cluster.controller.node_id == 0
        properties = cluster._properties(cluster.brokers[65001])
        assert "node.id=65001\n" in properties or "broker.id=65001\n" in properties
    finally:
        cluster.cleanup()
    assert controller_node_id([0, 1, 2]) == 3
    assert controller_node_id([0, 2]) == 1
    assert broker_node_ids(ClusterSettings()) == [1, 2, 3]


def test_dev_cluster_zookeeper_mode_raises_reserved_broker_max_id() -> None:
    cluster = LocalKafkaCluster(ClusterSettings(version="2.8.2", node_ids=[1001, 1002, 65001]))
    try:
        properties = cluster._properties(cluster.brokers[1001])
        assert "broker.id=1001\n" in properties
        assert "reserved.broker.max.id=65001\n" in properties
    finally:
        cluster.cleanup()


@pytest.mark.parametrize(("node_ids", "message"), [
    ([1, 2], "name 2 brokers"),
    ([1, 1, 2], "repeat a node id"),
    ([1, 2, 2**31], "0 to 2147483647"),
])
def test_dev_cluster_refuses_node_ids_kafka_would_refuse(node_ids: list[int], message: str,
                                                        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ClusterError, match=message):
        LocalKafkaCluster(ClusterSettings(node_ids=node_ids))
    assert list(tmp_path.iterdir()) == []  # no data directory left behind


# ---------------------------------------------------------------- the running proxy


class NodeIdBroker:
    """A scripted upstream answering Metadata with brokers of the given node ids, all at its own port."""

    def __init__(self, node_ids: tuple[int, ...]) -> None:
        self.node_ids = node_ids
        self.port = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        splitter = FrameSplitter()
        try:
            while data := await reader.read(65536):
                for frame in splitter.feed(data):
                    peek = peek_request_header(frame)
                    response = self._answer(peek.api_key, peek.api_version, peek.correlation_id)
                    writer.write(struct.pack(">i", len(response)) + response)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _answer(self, key: int, version: int, correlation_id: int) -> bytes:
        if key == ApiKey.API_VERSIONS:
            answered = 0 if version == 0 else min(version, 3)
            body = encode_response(ApiVersionsResponse(api_keys=tuple(
                ApiVersion(api_key=k, min_version=0, max_version=v)
                for k, v in ((ApiKey.METADATA, 12), (ApiKey.API_VERSIONS, 3)))), answered)
            return encode_response_with_header(key, answered, correlation_id, body)
        assert key == ApiKey.METADATA
        body = encode_response(MetadataResponse(
            brokers=tuple(MetadataResponseBroker(node_id=i, host="127.0.0.1", port=self.port) for i in self.node_ids),
            cluster_id="fake", controller_id=self.node_ids[0], topics=()), version)
        return encode_response_with_header(key, version, correlation_id, body)

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


async def _proxy(broker: NodeIdBroker, *listeners: ListenerConfig) -> InsyncProxy:
    config = ProxyConfig(bootstrap_servers=(f"127.0.0.1:{broker.port}",), listeners=listeners, admin_port=0,
                         audit=AuditConfig(enabled=False), metadata_refresh_seconds=3600)
    proxy = InsyncProxy(config)
    await proxy.start()
    return proxy


async def _client_metadata(port: int) -> MetadataResponse:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        payload = encode_request_header(RequestHeader(
            request_api_key=ApiKey.METADATA, request_api_version=12, correlation_id=7, client_id="t")) + b"\x01\x00\x00\x00"
        writer.write(struct.pack(">i", len(payload)) + payload)  # topics: null (all), no auto-create, tags
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))[0]
        frame = await reader.readexactly(size)
    finally:
        writer.close()
    _, body = split_response(frame, ApiKey.METADATA, 12)
    response = decode_response(ApiKey.METADATA, 12, body)
    assert isinstance(response, MetadataResponse)
    return response


async def test_proxy_serves_the_brokers_it_can_map_and_names_the_other_at_port_0(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given brokers 1001, 65001 and 2**31-1, and a listener whose ranges leave 65001 out
    broker = NodeIdBroker((1001, 65001, MAX_NODE_ID))
    await broker.start()
    base = free_port_base(2)
    caplog.set_level(logging.INFO, logger="insync_proxy")
    proxy = await _proxy(broker, ListenerConfig(bootstrap_port=0, broker_port_base=base,
                                                node_id_ranges=("1001", str(MAX_NODE_ID))))
    try:
        group = proxy.listeners.groups[0]
        # Then the mapped brokers have listeners at their ports, the other none
        assert {i: listener.port for i, listener in group.brokers.items()} == {1001: base, MAX_NODE_ID: base + 1}
        assert group.unmapped == {65001}
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert "broker 65001 has no port" in errors[0] and "listener default" in errors[0]
        assert "node_id_ranges" in errors[0] and '"65001"' in errors[0]
        assert proxy.metrics.brokers_without_port.labels("default")._value.get() == 1
        assert proxy.ready == (True, "ok")  # it serves what it can
        # When a client reads Metadata through the proxy
        response = await _client_metadata(proxy.bootstrap_port)
        # Then every broker is at a proxy address: the mapped ports, port 0 for the unmapped one
        assert {b.node_id: (b.host, b.port) for b in response.brokers} == {
            1001: ("127.0.0.1", base), MAX_NODE_ID: ("127.0.0.1", base + 1), 65001: ("127.0.0.1", NO_PORT)}
        # and the broker listener of 2**31-1 reaches the broker
        via_broker_port = await _client_metadata(base + 1)
        assert {b.node_id for b in via_broker_port.brokers} == {1001, 65001, MAX_NODE_ID}
        # And a refresh says nothing new: one ERROR line per broker
        await proxy.metadata.refresh_metadata()
        assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    finally:
        await proxy.stop(drain_timeout=1)
        await broker.stop()


async def test_proxy_is_not_ready_while_a_listener_has_a_port_for_no_broker() -> None:
    broker = NodeIdBroker((1001, 1002, 1003))
    await broker.start()
    proxy = await _proxy(broker, ListenerConfig(bootstrap_port=0, broker_port_base=free_port_base()))  # default 0-89
    try:
        ready, reason = proxy.ready
        assert not ready
        assert "listener default" in reason and "1001, 1002, 1003" in reason and "node_id_ranges" in reason
        assert proxy.listeners.groups[0].brokers == {}
        assert proxy.metrics.brokers_without_port.labels("default")._value.get() == 3
    finally:
        await proxy.stop(drain_timeout=1)
        await broker.stop()


def test_a_per_broker_advertised_host_names_each_broker_by_its_node_id() -> None:
    # Given advertised_host = "kafka-{node_id}.example.com" (Kerberos: each broker's principal's host)
    addresses = ListenerAddresses("kafka-{node_id}.example.com", BrokerPorts.from_settings(9100, ["1-3", "1001"]))
    # Then each broker's port is advertised under its own name; one without a port still never gets a real one
    assert addresses[2] == ("kafka-2.example.com", 9101)
    assert addresses[1001] == ("kafka-1001.example.com", 9103)
    assert addresses[7] == ("kafka-7.example.com", NO_PORT)


@pytest.mark.parametrize(("host", "refused"), [
    ("kafka-{node}.example.com", "the only placeholder is {node_id}"),
    ("kafka {node_id}.example.com", "is not a host name"),
    ("{node_id", "the only placeholder is {node_id}"),
])
def test_an_advertised_host_template_that_cannot_name_a_host_is_refused(host: str, refused: str) -> None:
    from insync_proxy.proxy.config.schema import validate
    from insync_proxy.proxy.config.settings import ConfigError, ProxyConfig

    with pytest.raises(ConfigError, match=re.escape(refused)):
        validate(ProxyConfig(bootstrap_servers=("k:1",), advertised_host=host))
    assert validate(ProxyConfig(bootstrap_servers=("k:1",), advertised_host="kafka-{node_id}.example.com"))
