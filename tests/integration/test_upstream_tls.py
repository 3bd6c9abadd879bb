"""Upstream TLS with mutual authentication: the proxy verifies the brokers and shows them its own certificate."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from insync_proxy.proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster
from tests.helpers import consume_values
from tests.proxy_harness import ProxyProcess


def self_signed(openssl: str, directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


@pytest.mark.own_cluster
def test_proxy_reaches_tls_brokers_with_verification_and_a_client_certificate(
    exclusive_cluster_slot: None, tmp_path: Path
) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: cannot make test certificates")
    broker_cert, broker_key = self_signed(openssl, tmp_path, "broker")
    proxy_cert, proxy_key = self_signed(openssl, tmp_path, "insync-proxy")
    keystore = tmp_path / "broker-keystore.pem"  # Kafka's PEM keystore: private key, then certificate chain
    keystore.write_text(broker_key.read_text() + broker_cert.read_text())
    cluster = LocalKafkaCluster(ClusterSettings(tls_keystore_pem=keystore, tls_client_ca_pem=proxy_cert)).start()
    upstream = (f'\n[upstream_tls]\nenabled = true\nca_file = "{broker_cert}"\ncert_file = "{proxy_cert}"\n'
                f'key_file = "{proxy_key}"\ncheck_hostname = true\n')
    proxy = ProxyProcess(cluster, extra_toml=upstream, groups=("default",),
                         bootstrap_servers=cluster.tls_bootstrap_servers)
    try:
        proxy.start()  # ready: the control connection completed TLS (verified, mutual) and read Metadata
        topic = f"tls-up-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, 1, 3)
        # When a plaintext client produces and consumes through the proxy, its traffic reaches TLS brokers
        producer = Producer({"bootstrap.servers": proxy.bootstrap(), "acks": "all"})
        delivered: list[Any] = []
        for i in range(10):
            producer.produce(topic, f"up-{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(60) == 0 and delivered == [None] * 10
        got = consume_values({"bootstrap.servers": proxy.bootstrap()}, topic, 10)
        assert sorted(got) == sorted(f"up-{i}".encode() for i in range(10))
        # And the brokers' SSL listeners are all the proxy ever used
        assert all(str(p) in proxy.log_file.read_text() for p in cluster.tls_ports.values())
    finally:
        proxy.stop()
        cluster.stop()
        cluster.cleanup()
