"""check_connection (`check-config --connect`) without Kafka: each step one line, the right result, no secret."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

from insync_proxy.proxy.config import ProxyConfig, SaslConfig
from insync_proxy.proxy.config_schema import validate
from insync_proxy.proxy.preflight import check_connection
from tests.unit.test_control_login import PlainBroker


@pytest.fixture
def hostile_broker() -> Iterator[tuple[str, int]]:
    """A broker (in a thread of its own: the check is blocking) whose refusal echoes the password it got."""
    loop = asyncio.new_event_loop()
    broker = PlainBroker(refusal="invalid credentials: password 'a-wrong-password' is not right")
    address = loop.run_until_complete(broker.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield address
    loop.call_soon_threadsafe(broker.close)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_no_reachable_bootstrap_server_is_one_failed_tcp_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free again once closed: nothing listens there
    lines: list[str] = []
    config = validate(ProxyConfig(bootstrap_servers=(f"127.0.0.1:{port}",), proxy_id="t", connect_timeout_seconds=2))
    assert check_connection(config, lines.append) is False
    assert len(lines) == 1 and lines[0].startswith("FAIL tcp: no bootstrap server reachable"), lines


def test_a_refused_login_fails_the_sasl_step_and_no_line_carries_the_password(hostile_broker: tuple[str, int]) -> None:
    # Given a broker that refuses the login and repeats the password in its error message
    host, port = hostile_broker
    config = validate(ProxyConfig(bootstrap_servers=(f"{host}:{port}",), proxy_id="t", connect_timeout_seconds=5,
                         control_sasl=SaslConfig(mechanism="PLAIN", username="insync-proxy",
                                                 password="a-wrong-password")))
    lines: list[str] = []
    # When the connection is checked
    passed = check_connection(config, lines.append)
    # Then it fails at the SASL step, after TCP and ApiVersions, and the password is masked
    assert passed is False
    assert [line.split(":")[0] for line in lines] == ["ok   tcp", "skip tls", "ok   api_versions", "FAIL sasl"], lines
    assert "PLAIN authentication failed for user 'insync-proxy': wrong password or unknown user" in lines[-1]
    assert "a-wrong-password" not in "\n".join(lines) and "***" in lines[-1]
