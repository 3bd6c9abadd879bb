"""Upstream TLS with mutual authentication: the proxy verifies the brokers and shows them its own certificate."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from harness.proxy_process import ProxyProcess
from tests.helpers import consume_values

from .conftest import SECURED, SecuredCluster


@pytest.mark.own_cluster(SECURED)
def test_proxy_reaches_tls_brokers_with_verification_and_a_client_certificate(secured_cluster: SecuredCluster) -> None:
    # Given the secured cluster: brokers with an SSL listener that requires the proxy's certificate
    if secured_cluster.certs is None:
        pytest.skip("openssl is not installed: cannot make test certificates")
    cluster, certs = secured_cluster.cluster, secured_cluster.certs
    broker_cert, proxy_cert, proxy_key = certs.broker_cert, certs.proxy_cert, certs.proxy_key
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
