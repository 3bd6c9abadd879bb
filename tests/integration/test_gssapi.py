"""GSSAPI (Kerberos): a real MIT KDC, brokers each with its own service principal (kafka/kafka-N.insync.test), the
proxy logging in with a keytab, and Kerberos clients through the sidecar.

The proxy advertises each broker's port under the host of that broker's principal (advertised_host =
"kafka-{node_id}.insync.test", the names resolving to 127.0.0.1), so a client asks the KDC for the ticket of the
broker it will reach. Clients list the per-broker ports in bootstrap.servers: the bootstrap port reaches whichever
broker answers, and a ticket names one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.java_client import JavaClient
from harness.proxy_process import AUDIT_TOPIC, ProxyProcess
from harness.waiting import wait_until
from insync_proxy.cli.preflight import check_connection
from insync_proxy.client.blocking_client import BlockingKafkaClient
from insync_proxy.devcluster.cluster import ClusterSettings, KerberosListener, LocalKafkaCluster
from insync_proxy.devcluster.kerberos import INSTALL_HINT, KdcError, LocalKdc, ensure_hosts
from insync_proxy.protocol import MetadataRequest, MetadataResponse
from insync_proxy.protocol.messages import MetadataRequestTopic
from insync_proxy.proxy.config.loader import load_config
from insync_proxy.proxy.config.settings import SaslConfig
from insync_proxy.proxy.controlplane.sasl import authenticate_blocking
from tests.integration.own_login import acks_minus_two_is_answered_by_the_proxy, make_room, start_keeping_logs

pytestmark = pytest.mark.own_cluster

TEMPLATE = "kafka-{node_id}.insync.test"
NODES = (1, 2, 3)


def _missing() -> str | None:
    """Why this machine cannot run the module, or None."""
    if shutil.which("krb5kdc") is None and not Path("/usr/sbin/krb5kdc").exists():
        return f"MIT Kerberos KDC not installed ({INSTALL_HINT})"
    try:
        import gssapi  # noqa: F401
    except ImportError:
        return "the gssapi package is not installed (pip install 'insync-proxy[kerberos]', after libkrb5-dev)"
    return None


@dataclass
class KerberosCluster:
    kdc: LocalKdc
    cluster: LocalKafkaCluster
    proxy: ProxyProcess

    def client_sasl(self, host: str) -> SaslConfig:
        return SaslConfig(mechanism="GSSAPI", kerberos_principal=self.kdc.principal("client"),
                          kerberos_keytab=str(self.kdc.keytab_path("client")), kerberos_krb5_conf=str(self.kdc.krb5_conf),
                          kerberos_service_host=host)

    def proxy_servers(self) -> str:
        """What a Kerberos client puts in bootstrap.servers: the proxy's port of each broker, by its name."""
        return ",".join(f"{TEMPLATE.format(node_id=n)}:{self.proxy.broker_port(n)}" for n in NODES)


@pytest.fixture(scope="module")
def kerberos(cluster_pool: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KerberosCluster]:
    reason = _missing()
    if reason:
        pytest.skip(reason)
    try:
        ensure_hosts([TEMPLATE.format(node_id=n) for n in NODES])
    except KdcError as exc:
        pytest.skip(f"the brokers' names cannot be made to resolve to 127.0.0.1: {exc}")
    make_room(cluster_pool)
    kdc = LocalKdc(tmp_path_factory.mktemp("kdc")).start()
    keytabs = {n: kdc.add_principal(f"kafka/{TEMPLATE.format(node_id=n)}") for n in NODES}
    proxy_keytab = kdc.add_principal("insync-proxy")
    kdc.add_principal("client")
    cluster = LocalKafkaCluster(ClusterSettings(kerberos=KerberosListener(kdc.krb5_conf, kdc.realm, keytabs, TEMPLATE)))
    cluster_pool.started_cluster_ids.add(cluster.cluster_id)
    proxy = None
    try:
        start_keeping_logs(cluster, kdc.log_file, kdc.directory / "krb5kdc.out")
        cluster.create_topic(AUDIT_TOPIC, 1, 3)
        control = (f'advertised_host = "{TEMPLATE}"\n[control_sasl]\nmechanism = "GSSAPI"\n'
                   f'kerberos_principal = "{kdc.principal("insync-proxy")}"\nkerberos_keytab = "{proxy_keytab}"\n'
                   f'kerberos_krb5_conf = "{kdc.krb5_conf}"\n')
        proxy = ProxyProcess(cluster, extra_toml=control, groups=("default",), audit_topic=True,
                             bootstrap_servers=cluster.kerberos_bootstrap_servers).start()
        yield KerberosCluster(kdc, cluster, proxy)
    finally:
        if proxy is not None:
            proxy.stop()
        cluster.stop()
        cluster.cleanup()
        kdc.stop()


def test_check_config_logs_in_with_the_keytab_and_names_each_brokers_advertised_name(
        kerberos: KerberosCluster) -> None:
    lines: list[str] = []
    assert check_connection(load_config(kerberos.proxy.config_file), lines.append), lines
    assert any(line.startswith("ok   sasl: GSSAPI login as 'insync-proxy@INSYNC.TEST'") for line in lines), lines
    assert any(line.startswith("ok   advertised: ") and "kafka-3.insync.test" in line for line in lines), lines


def _min_insync(kerberos: KerberosCluster, node_id: int, topic: str) -> int:
    host = TEMPLATE.format(node_id=node_id)
    with BlockingKafkaClient(host, kerberos.proxy.broker_port(node_id)) as client:
        authenticate_blocking(client.request_raw, kerberos.client_sasl(host), host)
        response = client.request(MetadataRequest(topics=(MetadataRequestTopic(name=topic),)), 12, MetadataResponse)
    brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
    assert brokers == {n: (TEMPLATE.format(node_id=n), kerberos.proxy.broker_port(n)) for n in NODES}, brokers
    return response.topics[0].min_insync_replicas


def test_java_client_and_librdkafka_with_kerberos_through_the_proxy(kerberos: KerberosCluster, tmp_path: Path) -> None:
    topic = f"krb-{uuid.uuid4().hex[:8]}"
    kerberos.cluster.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    # Given the proxy's own Kerberos login read min.insync.replicas: a Kerberos client's Metadata carries tag 637,
    # every broker named by its principal's host at its proxy port
    wait_until(lambda: _min_insync(kerberos, 2, topic) == 2, 60, what="tag 637 = 2")
    # When the Java client logs in with its keytab through the proxy's per-broker names and produces
    keytab = kerberos.kdc.keytab_path("client")
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\nsasl.kerberos.service.name=kafka\n"
        "sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
        f'keyTab="{keytab}" principal="{kerberos.kdc.principal("client")}";\n')
    out = JavaClient().run("produce-consume", kerberos.proxy_servers(), topic, "20", "all", str(properties),
                           jvm_options=(f"-Djava.security.krb5.conf={kerberos.kdc.krb5_conf}",))
    assert "OK produce-consume 20" in out
    # And librdkafka (Debian's, with Cyrus SASL's GSSAPI: kcat) produces and reads back through the proxy
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat (Debian's librdkafka with GSSAPI) is not installed: apt-get install kcat "
                    "libsasl2-modules-gssapi-mit; the Java client passed")
    common = [kcat, "-b", kerberos.proxy_servers(), "-X", "security.protocol=SASL_PLAINTEXT",
              "-X", "sasl.mechanisms=GSSAPI", "-X", "sasl.kerberos.service.name=kafka",
              "-X", f"sasl.kerberos.keytab={keytab}", "-X", f"sasl.kerberos.principal={kerberos.kdc.principal('client')}"]
    env = {**os.environ, "KRB5_CONFIG": str(kerberos.kdc.krb5_conf),
           "KRB5CCNAME": f"FILE:{tmp_path / 'kcat-ccache'}"}
    values = "".join(f"kcat-{i}\n" for i in range(10))
    produced = subprocess.run([*common, "-P", "-t", topic, "-X", "acks=all"], input=values, text=True, env=env,
                              capture_output=True, timeout=120)
    assert produced.returncode == 0, produced.stderr[-2000:]
    consumed = subprocess.run([*common, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], text=True, env=env,
                              capture_output=True, timeout=120)
    assert consumed.returncode == 0, consumed.stderr[-2000:]
    assert {f"kcat-{i}" for i in range(10)} <= set(consumed.stdout.split()), consumed.stdout[-500:]
    assert kerberos.proxy.metric("insync_proxy_address_leaks_total") == 0


def test_acks_minus_two_is_answered_by_the_proxy_and_the_audit_topic_written_over_kerberos(
        kerberos: KerberosCluster) -> None:
    proxy = kerberos.proxy
    host = TEMPLATE.format(node_id=1)
    acks_minus_two_is_answered_by_the_proxy(kerberos.cluster, proxy, f"{host}:{proxy.broker_port(1)}",
                                            lambda client: authenticate_blocking(client.request_raw, kerberos.client_sasl(host), host))
    # The audit topic is written over the proxy's Kerberos login too
    wait_until(lambda: proxy.metric("insync_proxy_audit_events_written_total", sink="kafka") > 0, 60,
               what="audit events written to the audit topic")


def test_a_login_through_another_name_asks_for_the_principal_kerberos_service_host_names(
        kerberos: KerberosCluster) -> None:
    from dataclasses import replace

    # Given the proxy reaching the brokers by other names than their principals' (kafka-N.internal.test), as a
    # sidecar whose pod maps the principals' names to itself must
    ensure_hosts([f"kafka-{n}.internal.test" for n in NODES])
    config = load_config(kerberos.proxy.config_file)
    ports = [server.rsplit(":", 1)[1] for server in kerberos.cluster.kerberos_bootstrap_servers.split(",")]
    internal = replace(config, bootstrap_servers=tuple(f"kafka-{n}.internal.test:{p}" for n, p in zip(NODES, ports,
                                                                                                      strict=True)))
    # When the login asks for the ticket of the host connected to: Then the KDC knows no such service, and the
    # line says so
    lines: list[str] = []
    assert not check_connection(internal, lines.append)
    assert lines[-1].startswith("FAIL sasl: GSSAPI login as 'insync-proxy@INSYNC.TEST' failed: host "
                                "kafka-1.internal.test is in no realm the KDC knows"), lines
    assert "set control_sasl.kerberos_service_host" in lines[-1]
    # When kerberos_service_host maps the first label to the principals' domain: Then the login works
    mapped = replace(internal, control_sasl=replace(internal.control_sasl,
                                                    kerberos_service_host="{label}.insync.test"))
    lines.clear()
    assert check_connection(mapped, lines.append), lines
