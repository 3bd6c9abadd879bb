"""check_connection (`check-config --connect`) without Kafka: each step one line, the right result, no secret."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from insync_proxy.cli.preflight import check_connection
from insync_proxy.proxy.config.schema import validate
from insync_proxy.proxy.config.settings import ProxyConfig, SaslConfig, UpstreamTlsConfig
from tests.unit.control_brokers import PlainBroker


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


class NotKafka:
    """A port that is no Kafka listener of the kind configured: on each connection it reads what comes, then
    writes `answer` and closes (a FIN), or resets the connection (`reset`: an RST, as a Kafka PLAINTEXT
    listener's close with a ClientHello's bytes unread gives)."""

    def __init__(self, answer: bytes = b"", reset: bool = False) -> None:
        self.answer, self.reset = answer, reset
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return  # closed
            with connection:
                connection.settimeout(10)
                try:
                    connection.recv(65536)
                    if self.reset:
                        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    else:
                        connection.sendall(self.answer)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def not_kafka() -> Iterator[Callable[..., NotKafka]]:
    started: list[NotKafka] = []

    def start(answer: bytes = b"", reset: bool = False) -> NotKafka:
        started.append(NotKafka(answer, reset))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_tls_towards_a_plaintext_listener_says_upstream_tls_should_be_off(
        not_kafka: Callable[..., NotKafka], reset: bool) -> None:
    # Given upstream TLS on, towards a port that closes the connection at the ClientHello (a PLAINTEXT listener)
    broker = not_kafka(reset=reset)
    config = validate(ProxyConfig(bootstrap_servers=(broker.address,), proxy_id="t", connect_timeout_seconds=5,
                                  upstream_tls=UpstreamTlsConfig(enabled=True)))
    lines: list[str] = []
    # When the connection is checked
    assert check_connection(config, lines.append) is False
    # Then the TLS step fails, saying the listener may be plaintext and TLS should be off
    assert [line.split(":")[0] for line in lines] == ["ok   tcp", "FAIL tls"], lines
    assert "PLAINTEXT or SASL_PLAINTEXT" in lines[-1] and "upstream_tls.enabled = false" in lines[-1], lines


def test_an_http_port_is_named_instead_of_a_frame_size(not_kafka: Callable[..., NotKafka]) -> None:
    # Given bootstrap_servers naming a port that answers HTTP (a broker's admin or metrics port, a web proxy)
    server = not_kafka(answer=b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    config = validate(ProxyConfig(bootstrap_servers=(server.address,), proxy_id="t", connect_timeout_seconds=5))
    lines: list[str] = []
    # When the connection is checked
    assert check_connection(config, lines.append) is False
    # Then ApiVersions fails saying the port answers HTTP, and asks whether it is the listener port
    assert [line.split(":")[0] for line in lines] == ["ok   tcp", "FAIL api_versions"], lines
    assert "this port answers HTTP, not the Kafka protocol: is it the broker's listener port?" in lines[-1], lines


def test_a_first_answer_above_the_frame_limit_suggests_a_wrong_port(not_kafka: Callable[..., NotKafka]) -> None:
    # Given a port whose first answer starts with a size no Kafka frame has (another protocol)
    server = not_kafka(answer=b"\x7f\xff\xff\xffSSH-2.0")
    config = validate(ProxyConfig(bootstrap_servers=(server.address,), proxy_id="t", connect_timeout_seconds=5))
    lines: list[str] = []
    assert check_connection(config, lines.append) is False
    # Then the line says the answer is not a Kafka frame and asks about the port and its protocol
    assert lines[-1].startswith("FAIL api_versions"), lines
    assert "the first answer is not a Kafka frame: is it the broker's listener port" in lines[-1], lines
