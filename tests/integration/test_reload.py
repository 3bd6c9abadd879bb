"""Live reloads against a real secured cluster (issue #28): certificates rotated under Java and librdkafka
traffic, broken rotations that must not replace working material, downstream certificate and CA rotation, and
SIGHUP with a changed acks policy.

One cluster for the module (SSL listeners with ssl.client.auth=required, certificates of a throw-away CA, and
PLAINTEXT), started once through the named own-cluster pool.
"""

from __future__ import annotations

import datetime
import signal
import socket
import ssl
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from cryptography import x509

from harness.certificate_rotation import LibrdkafkaProducer, run_rotation
from harness.java_client import JavaClient
from harness.pki import Ca, Issued, replace_file
from harness.proxy_process import TEST_POLICIES, ProxyProcess
from harness.waiting import wait_until
from insync_proxy.devcluster.certificates import DevCertificates, make_test_certificates
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster, free_port
from tests.cluster_fixtures import OwnClusterPool

pytestmark = pytest.mark.own_cluster("reload")


@dataclass
class Mtls:
    cluster: LocalKafkaCluster
    certs: DevCertificates
    #: The dev cluster's CA (the brokers trust the client certificates it signs).
    ca: Ca


@pytest.fixture(scope="module")
def mtls(own_clusters: OwnClusterPool, tmp_path_factory: pytest.TempPathFactory) -> Mtls:
    directory = tmp_path_factory.mktemp("reload-pki")
    certs = make_test_certificates(directory, ("insync-proxy",))
    cluster = own_clusters.get("reload", ClusterSettings(tls_keystore_pem=certs.broker_keystore,
                                                         tls_client_ca_pem=certs.ca_cert))
    return Mtls(cluster, certs, Ca.from_files(certs.ca_cert, directory / "ca.key"))


def test_upstream_certificate_rotated_every_5s_under_java_and_librdkafka(
        mtls: Mtls, java_client: JavaClient, tmp_path: Path) -> None:
    # Given the proxy in front of the mTLS listeners with a client certificate valid for 15 s, and the Java
    # producer and librdkafka producing through it without pause (a record every 10 ms each: every connection
    # busy at every rotation, at a fifth of the soak command's rate and of its CPU on the suite's 2 cores)
    # When the certificate is replaced every 5 s for 30 s by a new one of the same CA, each valid 15 s (six
    # rotations, the first certificates expired before the end, as with 10 s for 60 s, in half the time)
    result = run_rotation(mtls.cluster, mtls.ca, mtls.certs.ca_cert, tmp_path, java_client,
                          period=5, validity=15, duration=30, send_interval=0.01)
    print(result.summary())
    # Then no send failed and no client reconnected
    for name, counts in (("java", result.java), ("librdkafka", result.librdkafka)):
        assert counts.errors == 0 and counts.acked == counts.sent > 1000, (name, counts)
        assert counts.closes == 0 and counts.connects == 0, (name, counts)
    assert result.warm_connections_closed == 0, result.closed_by
    # And every upstream connection opened after a rotation presented the new certificate
    assert result.rotations == 6
    assert result.new_connections_checked >= result.rotations and result.wrong_certificate == []
    # And connections made with certificates that expired meanwhile carried on
    assert result.expired_certificates_in_use > 0


# ----------------------------------------------------------------------------------- broken rotations


def _tls_proxy(mtls: Mtls, directory: Path, upstream: str = "", downstream: str = "",
               bootstrap_servers: str | None = None, tls_reload_seconds: float = 1) -> ProxyProcess:
    proxy = ProxyProcess(mtls.cluster, extra_toml=f"tls_reload_seconds = {tls_reload_seconds}\n" + TEST_POLICIES
                         + upstream + downstream,
                         groups=("default",), bootstrap_servers=bootstrap_servers or mtls.cluster.tls_bootstrap_servers,
                         debug_checks=False, audit_enabled=False)
    return proxy.start()


def _errors(proxy: ProxyProcess) -> list[str]:
    return [line for line in proxy.log_file.read_text().splitlines() if " ERROR " in line]


def _reloads(proxy: ProxyProcess, what: str, result: str) -> float:
    return proxy.metric("insync_proxy_reloads_total", what=what, result=result)


def _acked_through(bootstrap: str, topic: str, extra: dict[str, Any] | None = None) -> bool:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **(extra or {})})
    producer.produce(topic, b"probe")
    return producer.flush(60) == 0


def test_broken_rotations_never_interrupt_traffic_and_the_good_pair_is_picked_up(mtls: Mtls, tmp_path: Path) -> None:
    cert, key = tmp_path / "proxy.crt", tmp_path / "proxy.key"
    mtls.ca.issue("insync-proxy").write(cert, key)
    proxy = _tls_proxy(mtls, tmp_path, upstream=f'\n[upstream_tls]\nenabled = true\nca_file = "{mtls.certs.ca_cert}"\n'
                                                 f'cert_file = "{cert}"\nkey_file = "{key}"\n')
    topic = f"reload-broken-{uuid.uuid4().hex[:6]}"
    mtls.cluster.create_topic(topic, 3, 3)
    producer = LibrdkafkaProducer(proxy.bootstrap(), topic)
    try:
        wait_until(producer.warm, 60, what="librdkafka's first acknowledgements")
        expired_start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=2)
        cases: list[tuple[str, str]] = [
            ("key of another certificate", "the key does not belong to the certificate"),
            ("truncated PEM", "no complete PEM certificate"),
            ("expired certificate", "expired at"),
            ("certificate written, key 5 s later", "the key does not belong to the certificate"),
        ]
        for case, why in cases:
            failed, ok, errors = _reloads(proxy, "upstream_tls", "failed"), _reloads(proxy, "upstream_tls", "ok"), \
                len(_errors(proxy))
            good = mtls.ca.issue("insync-proxy")
            # When a broken rotation lands
            if case == "key of another certificate":
                replace_file(cert, good.cert_pem)
                replace_file(key, mtls.ca.issue("someone-else").key_pem())
            elif case == "truncated PEM":
                replace_file(cert, good.cert_pem[:300])
            elif case == "expired certificate":
                mtls.ca.issue("insync-proxy", valid_seconds=60, not_before=expired_start).write(cert, key)
            else:
                replace_file(cert, good.cert_pem)
            # Then it is counted and said in one ERROR line naming the setting and why
            wait_until(lambda f=failed: _reloads(proxy, "upstream_tls", "failed") == f + 1, 30, what=f"{case}: counted")
            new_errors = _errors(proxy)[errors:]
            assert len(new_errors) == 1 and "upstream_tls.cert_file" in new_errors[0] and why in new_errors[0], \
                (case, new_errors)
            # And new connections still work with the old material
            assert _acked_through(proxy.bootstrap(), topic), case
            if case.startswith("certificate written"):
                # The half-written pair stays broken for 5 s: checked every second, reported once
                since = time.monotonic()
                wait_until(lambda s=since: time.monotonic() - s >= 5, 10, what="the key 5 s later")
                assert len(_errors(proxy)) == errors + 1
                replace_file(key, good.key_pem())
            else:
                # And the good pair is picked up at the next check
                good.write(cert, key)
            wait_until(lambda o=ok: _reloads(proxy, "upstream_tls", "ok") == o + 1, 30, what=f"{case}: good pair")
            assert f"serial {good.serial:x}" in proxy.log_file.read_text()
            assert proxy.metric("insync_proxy_reload_failing", what="upstream_tls") == 0
        counts = producer.stop()
        producer = None  # type: ignore[assignment]
        assert counts.errors == 0 and counts.acked == counts.sent and counts.closes == 0, counts
        assert proxy.metric("insync_proxy_tls_certificate_expiry_timestamp_seconds", side="upstream_tls",
                            file="cert_file") == pytest.approx(good.cert.not_valid_after_utc.timestamp())
    finally:
        if producer is not None:
            producer.stop()
        assert proxy.stop() == 0


# ----------------------------------------------------------------------------------- downstream TLS


def _server_serial(port: int, trust: Path, client: tuple[Path, Path]) -> int:
    """The serial of the certificate the proxy presents to a new connection; SSLError or ConnectionError when
    the proxy refuses the client's certificate (TLS 1.3 says so at the first read, after the handshake)."""
    context = ssl.create_default_context(cafile=str(trust))
    context.load_cert_chain(str(client[0]), str(client[1]))
    with socket.create_connection(("127.0.0.1", port), 10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(True)
        request = struct.pack(">hhih", 18, 0, 1, -1)  # ApiVersions v0, correlation id 1, no client id
        tls.settimeout(30)
        tls.sendall(struct.pack(">i", len(request)) + request)
        if len(tls.recv(4)) != 4:
            raise ConnectionError("the proxy closed the connection")
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _ssl_client(trust: Path, client: tuple[Path, Path]) -> dict[str, Any]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(trust), "ssl.certificate.location": str(client[0]),
            "ssl.key.location": str(client[1])}


def test_downstream_certificate_and_ca_bundle_rotation(mtls: Mtls, tmp_path: Path) -> None:
    # Given the proxy's own certificate and the CA its clients' certificates are checked against
    server_ca, old_clients, new_clients = Ca.new("server CA"), Ca.new("clients CA 1"), Ca.new("clients CA 2")
    trust = tmp_path / "server-ca.pem"
    trust.write_bytes(server_ca.pem)
    cert, key, bundle = tmp_path / "server.crt", tmp_path / "server.key", tmp_path / "clients-ca.pem"
    first = server_ca.issue("localhost", server=True)
    first.write(cert, key)
    bundle.write_bytes(old_clients.pem)

    def client(ca: Ca, name: str) -> tuple[Path, Path]:
        issued: Issued = ca.issue(name)
        pair = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
        issued.write(*pair)
        return pair

    old_client, new_client = client(old_clients, "old-client"), client(new_clients, "new-client")
    proxy = _tls_proxy(mtls, tmp_path, downstream=f'\n[downstream_tls]\nenabled = true\ncert_file = "{cert}"\n'
                                                   f'key_file = "{key}"\nca_file = "{bundle}"\n',
                       bootstrap_servers=mtls.cluster.bootstrap_servers)
    port = proxy.ports["default"][0]
    topic = f"reload-down-{uuid.uuid4().hex[:6]}"
    # One partition: the open producer's records keep going over the one connection it opened to its leader
    # (a record for another broker would need a new connection, which the old CA's client no longer gets)
    mtls.cluster.create_topic(topic, 1, 3)
    open_producer = Producer({"bootstrap.servers": proxy.bootstrap(), "acks": "all", **_ssl_client(trust, old_client)})
    try:
        open_producer.produce(topic, b"before")
        assert open_producer.flush(60) == 0
        assert _server_serial(port, trust, old_client) == first.serial
        # When the server certificate is rotated
        second = server_ca.issue("localhost", server=True)
        ok = _reloads(proxy, "downstream_tls", "ok")
        second.write(cert, key)
        wait_until(lambda: _reloads(proxy, "downstream_tls", "ok") == ok + 1, 30, what="the new certificate")
        # Then a new connection sees the new serial and the open one keeps working
        assert _server_serial(port, trust, old_client) == second.serial
        open_producer.produce(topic, b"after the certificate")
        assert open_producer.flush(60) == 0
        # When the CA bundle rotates with an overlap: old + new, then new only
        replace_file(bundle, old_clients.pem + new_clients.pem)
        wait_until(lambda: _reloads(proxy, "downstream_tls", "ok") == ok + 2, 30, what="the overlapping bundle")
        assert _server_serial(port, trust, old_client) == second.serial
        assert _server_serial(port, trust, new_client) == second.serial
        assert _acked_through(proxy.bootstrap(), topic, _ssl_client(trust, new_client))
        replace_file(bundle, new_clients.pem)
        wait_until(lambda: _reloads(proxy, "downstream_tls", "ok") == ok + 3, 30, what="the new CA only")
        # Then clients of the new CA connect, the open connection of the old CA's client works on, and no
        # new connection of the old CA's client is accepted any more
        assert _acked_through(proxy.bootstrap(), topic, _ssl_client(trust, new_client))
        open_producer.produce(topic, b"after the CA")
        assert open_producer.flush(60) == 0
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _server_serial(port, trust, old_client)
        assert proxy.metric("insync_proxy_reloads_total", what="downstream_tls", result="failed") == 0
    finally:
        del open_producer
        assert proxy.stop() == 0


# ----------------------------------------------------------------------------------- SIGHUP


def test_sighup_applies_a_changed_acks_policy_without_dropping_a_connection(mtls: Mtls, tmp_path: Path) -> None:
    # Given a proxy (the real command) and a producer of acks=1 with its connections open
    # No periodic checks: they would see the edited file and reload it before the explicit trigger does
    # (that watch is tests/unit/test_reload.py's)
    proxy = _tls_proxy(mtls, tmp_path, bootstrap_servers=mtls.cluster.bootstrap_servers, tls_reload_seconds=0)
    topic = f"reload-hup-{uuid.uuid4().hex[:6]}"
    mtls.cluster.create_topic(topic, 3, 3)
    producer = Producer({"bootstrap.servers": proxy.bootstrap(), "acks": 1, "linger.ms": 5})
    errors: list[str] = []

    def produce(count: int) -> None:
        # every partition each time: the producer holds a connection to every leader before the reload, so a
        # connection opened after it could only be one the reload dropped
        for i in range(count):
            producer.produce(topic, b"v%d" % i, partition=i % 3,
                             on_delivery=lambda e, _m: errors.append(str(e)) if e else None)
        assert producer.flush(60) == 0

    try:
        produce(50)
        floor = "insync_proxy_acks_floor_applied_total"
        assert proxy.metric(floor, topic=topic) == 0
        connections = proxy.metric("insync_proxy_client_connections_total")
        # When the file gains an acks floor for the topic and another admin port, and the proxy gets SIGHUP
        text = proxy.config_file.read_text()
        proxy.config_file.write_text(text.replace(f"admin_port = {proxy.admin_port}\n", f"admin_port = {free_port()}\n")
                                     + '\n[[acks_policy]]\ntopics = "reload-hup-.*"\nacks_floor = -1\n')
        assert proxy.process is not None
        proxy.process.send_signal(signal.SIGHUP)
        wait_until(lambda: "reload (SIGHUP) done" in proxy.log_file.read_text(), 30, what="the reload")
        log = proxy.log_file.read_text()
        assert "WARNING insync_proxy: reload: admin_port changed but needs a restart" in log
        # Then the next Produce follows the new policy, and no connection was dropped or opened again
        produce(50)
        assert proxy.metric(floor, topic=topic) > 0
        assert proxy.metric("insync_proxy_client_connections_total") == connections
        assert proxy.metric("insync_proxy_client_connection_errors_total") == 0
        assert errors == []
        # When the file is broken and the proxy gets SIGHUP again
        proxy.config_file.write_text(proxy.config_file.read_text() + "\nmin_insync_ttl_seconds = -1\n")
        proxy.process.send_signal(signal.SIGHUP)
        wait_until(lambda: proxy.metric("insync_proxy_reloads_total", what="config", result="failed") == 1, 30,
                   what="the failed reload counted")
        # Then nothing changed: one ERROR, the policy still applies, the process runs on
        assert len(_errors(proxy)) == 1 and "min_insync_ttl_seconds" in _errors(proxy)[0]
        applied = proxy.metric(floor, topic=topic)
        produce(20)
        assert proxy.metric(floor, topic=topic) > applied
        assert proxy.alive()
    finally:
        # And the exit code is the one of a clean stop
        assert proxy.stop() == 0


def test_post_reload_answers_what_changed(mtls: Mtls, tmp_path: Path) -> None:
    # No periodic checks: they would see the edited file and reload it before the explicit trigger does
    # (that watch is tests/unit/test_reload.py's)
    proxy = _tls_proxy(mtls, tmp_path, bootstrap_servers=mtls.cluster.bootstrap_servers, tls_reload_seconds=0)
    try:
        import json
        import urllib.request

        proxy.config_file.write_text(proxy.config_file.read_text().replace("metadata_refresh_seconds = 2",
                                                                           "metadata_refresh_seconds = 3"))
        request = urllib.request.Request(f"{proxy.admin_url}/reload", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        assert answer == {"result": "ok", "changed": ["metadata_refresh_seconds"], "needs_restart": [], "tls": []}
    finally:
        assert proxy.stop() == 0


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    left = [t for t in set(threading.enumerate()) - before if t.name in ("proxy-loop", "librdkafka-producer")]
    assert not any(t.is_alive() for t in left), left
