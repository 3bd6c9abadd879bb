"""Downstream TLS: clients reach the proxy over TLS (the proxy's own certificate), brokers stay plaintext."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from harness.proxy_process import TEST_POLICIES, ProxyProcess
from insync_proxy.devcluster.cluster import LocalKafkaCluster
from tests.helpers import consume_values


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    cert, key = tmp_path / "proxy.pem", tmp_path / "proxy.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


def test_clients_produce_and_consume_over_tls_to_the_proxy(
    kafka_cluster: LocalKafkaCluster, certificate: tuple[Path, Path], topic_name: str
) -> None:
    cert, key = certificate
    tls = f'\n[downstream_tls]\nenabled = true\ncert_file = "{cert}"\nkey_file = "{key}"\n'
    proxy = ProxyProcess(kafka_cluster, extra_toml=TEST_POLICIES + tls, groups=("default",)).start()
    try:
        kafka_cluster.create_topic(topic_name, 1, 3)
        common = {"bootstrap.servers": proxy.bootstrap(), "security.protocol": "SSL", "ssl.ca.location": str(cert)}
        producer = Producer({**common, "acks": "all"})
        delivered: list[Any] = []
        for i in range(20):
            producer.produce(topic_name, f"tls-{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(60) == 0 and delivered == [None] * 20
        got = consume_values(common, topic_name, 20)
        assert sorted(got) == sorted(f"tls-{i}".encode() for i in range(20))
        # A plaintext client on the TLS port is refused without harming the proxy
        host, port = proxy.bootstrap().rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as plain:
            plain.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
            # The TLS layer may answer with an alert first; then the proxy closes the connection
            received = b"".join(iter(lambda: plain.recv(1024), b""))
            assert b"\x00\x12" not in received  # no Kafka answer to the plaintext ApiVersions
        assert proxy.alive()
    finally:
        proxy.stop()
