"""SASL: clients' SASL/PLAIN passes through the proxy untouched; the control connection has its own login."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from harness.proxy_process import ProxyProcess
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster
from insync_proxy.devcluster.distribution import KAFKA_28_VERSION
from tests.helpers import consume_values

from .conftest import PLAIN_USERS as USERS
from .conftest import SCRAM_USERS, SECURED, SecuredCluster


@pytest.mark.own_cluster(SECURED)
def test_client_sasl_plain_passes_through_and_the_proxy_logs_in_with_its_own_credentials(
    secured_cluster: SecuredCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the secured cluster: brokers with a SASL listener offering PLAIN for USERS
    cluster = secured_cluster.cluster
    # The proxy reaches the brokers only through their SASL listeners, as the user insync-proxy
    monkeypatch.setenv("INSYNC_PROXY_CONTROL_SASL_PASSWORD", USERS["insync-proxy"])
    control = '\n[control_sasl]\nmechanism = "PLAIN"\nusername = "insync-proxy"\n'
    proxy = ProxyProcess(cluster, extra_toml=control, groups=("default",),
                         bootstrap_servers=cluster.sasl_bootstrap_servers)
    try:
        proxy.start()  # ready means: the control connection logged in and read Metadata
        assert "proxy-secret" not in proxy.log_file.read_text()
        topic = f"sasl-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, 1, 3)
        sasl = {"bootstrap.servers": proxy.bootstrap(), "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": USERS["alice"]}
        # When a client logs in as alice through the proxy, it produces and consumes as usual
        producer = Producer({**sasl, "acks": "all"})
        delivered: list[Any] = []
        for i in range(10):
            producer.produce(topic, f"sasl-{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(60) == 0 and delivered == [None] * 10
        got = consume_values(sasl, topic, 10)
        assert sorted(got) == sorted(f"sasl-{i}".encode() for i in range(10))
        # And a wrong password is refused by the broker, as it would be without the proxy
        errors: list[Any] = []
        bad = Producer({**sasl, "sasl.password": "wrong", "error_cb": errors.append, "message.timeout.ms": 5000})
        bad.produce(topic, b"denied")
        bad.flush(15)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
        assert proxy.alive()
    finally:
        proxy.stop()


@pytest.mark.parametrize("version", [
    # the default version's is the secured cluster (the PLAIN test's); 2.8 (ZooKeeper) has its own
    pytest.param(None, id="kafka-default", marks=pytest.mark.own_cluster(SECURED)),
    pytest.param(KAFKA_28_VERSION, id="kafka-2.8.2-zookeeper", marks=pytest.mark.own_cluster),
])
def test_control_connection_logs_in_with_scram_sha_512_and_a_wrong_password_fails_clearly(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, version: str | None
) -> None:
    # Given brokers whose SASL listener offers SCRAM-SHA-512 (credentials made at format time, or in ZooKeeper)
    own: LocalKafkaCluster | None = None
    if version is None:
        cluster = request.getfixturevalue("secured_cluster").cluster
    else:
        request.getfixturevalue("exclusive_cluster_slot")
        cluster = own = LocalKafkaCluster(ClusterSettings(version=version, sasl_scram_users=SCRAM_USERS)).start()
    control = '\n[control_sasl]\nmechanism = "SCRAM-SHA-512"\nusername = "insync-proxy"\n'
    proxies: list[ProxyProcess] = []
    try:
        # When the proxy reaches the brokers only through that listener, with the right password
        monkeypatch.setenv("INSYNC_PROXY_CONTROL_SASL_PASSWORD", SCRAM_USERS["insync-proxy"])
        proxy = ProxyProcess(cluster, extra_toml=control, groups=("default",),
                             bootstrap_servers=cluster.sasl_bootstrap_servers)
        proxies.append(proxy)
        # Then it gets ready: its control connection logged in (the broker checked the proof, the proxy the
        # server's signature) and read Metadata; and a SCRAM client's login passes through to the broker
        proxy.start()
        topic = f"scram-{uuid.uuid4().hex[:8]}"
        cluster.create_topic(topic, 1, 3)
        scram = {"bootstrap.servers": proxy.bootstrap(), "security.protocol": "SASL_PLAINTEXT",
                 "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": SCRAM_USERS["alice"]}
        producer = Producer({**scram, "acks": "all"})
        delivered: list[Any] = []
        for i in range(5):
            producer.produce(topic, f"scram-{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(60) == 0 and delivered == [None] * 5
        assert "proxy-scram-secret" not in proxy.log_file.read_text()

        # When a proxy's control connection uses a wrong password
        monkeypatch.setenv("INSYNC_PROXY_CONTROL_SASL_PASSWORD", "not-the-password")
        wrong = ProxyProcess(cluster, extra_toml=control, groups=("default",),
                             bootstrap_servers=cluster.sasl_bootstrap_servers)
        proxies.append(wrong)
        # Then it never gets ready, and its log says why in one clear line (without the password)
        with pytest.raises(RuntimeError, match="not ready"):
            wrong.start(timeout=15)
        log = wrong.log_file.read_text()
        assert "SASL SCRAM-SHA-512 login as 'insync-proxy'" in log and "failed" in log, log[-3000:]
        assert "not-the-password" not in log
        assert "never retrieved" not in log
    finally:
        for p in proxies:
            p.stop()
        if own is not None:
            own.stop()
            own.cleanup()
