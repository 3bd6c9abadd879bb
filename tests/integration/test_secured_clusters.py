"""Secured clusters: SASL_SSL (SCRAM-SHA-512 and PLAIN) and mTLS brokers with ACLs on, through the proxy.

One cluster carries every listener kind at once (a JVM start costs tens of seconds on 2 cores): each
broker has PLAINTEXT (inter-broker, the dev cluster's probe: the super user ANONYMOUS), SASL_SSL (PLAIN
and SCRAM-SHA-512) and SSL with ssl.client.auth=required, certificates made by the test, and
StandardAuthorizer with nothing allowed without an ACL. Two proxies sit in front of it: one on the
SASL_SSL listeners (its control connection logs in with SCRAM, clients' logins pass through), one on the
mTLS listeners (every upstream connection presents the proxy's certificate).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from harness.java_client import JavaClient
from harness.proxy_process import TEST_POLICIES, ProxyProcess
from harness.waiting import wait_until
from insync_proxy.cli.preflight import check_connection
from insync_proxy.client.blocking_client import BlockingKafkaClient
from insync_proxy.devcluster.certificates import DevCertificates, make_test_certificates
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster
from insync_proxy.devcluster.distribution import selected_version
from insync_proxy.protocol import MetadataRequest, MetadataResponse
from insync_proxy.protocol.messages import MetadataRequestTopic
from insync_proxy.proxy.config.loader import load_config
from insync_proxy.proxy.config.settings import ProxyConfig, SaslConfig
from insync_proxy.proxy.controlplane.sasl import authenticate_blocking
from tests.helpers import consume_values

pytestmark = pytest.mark.own_cluster

PASSWORDS = {"alice": "alice-secret-7", "insync-proxy": "proxy-secret-7", "no-configs": "no-configs-secret-7",
             "admin": "admin-secret-7"}
#: acks=-2 semantics for clients that refuse acks=-2 (Java, librdkafka): their acks=1 is checked as -2.
POLICIES = TEST_POLICIES + '\n[[acks_policy]]\ntopics = "floor2-.*"\nacks_floor = -2\n'
PASSWORD_ENV = "INSYNC_PROXY_CONTROL_SASL_PASSWORD"


@dataclass
class Secured:
    cluster: LocalKafkaCluster
    certs: DevCertificates
    scram_proxy: ProxyProcess
    mtls_proxy: ProxyProcess


@contextlib.contextmanager
def control_password(password: str) -> Iterator[None]:
    """The control connection's password, only in the environment of the proxy started inside."""
    old = os.environ.get(PASSWORD_ENV)
    os.environ[PASSWORD_ENV] = password
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(PASSWORD_ENV, None)
        else:
            os.environ[PASSWORD_ENV] = old


def _acls() -> list[AclBinding]:
    def allow(resource: ResourceType, name: str, principal: str, operation: AclOperation) -> AclBinding:
        return AclBinding(resource, name, ResourcePatternType.LITERAL, principal, "*", operation,
                          AclPermissionType.ALLOW)

    bindings = []
    # Clients: alice by SASL; through the mTLS proxy every client is the proxy's certificate.
    for principal in ("User:alice", "User:CN=insync-proxy"):
        bindings += [allow(ResourceType.TOPIC, "*", principal, AclOperation.ALL),
                     allow(ResourceType.GROUP, "*", principal, AclOperation.ALL)]
    # The proxy's own SASL principal: exactly what the README's security table says.
    bindings += [allow(ResourceType.TOPIC, "*", "User:insync-proxy", AclOperation.DESCRIBE),
                 allow(ResourceType.TOPIC, "*", "User:insync-proxy", AclOperation.DESCRIBE_CONFIGS)]
    # A principal that may see topics but not their configs.
    bindings.append(allow(ResourceType.TOPIC, "*", "User:no-configs", AclOperation.DESCRIBE))
    return bindings


def _tls_toml(certs: DevCertificates, client_cert: bool) -> str:
    toml = f'\n[upstream_tls]\nenabled = true\nca_file = "{certs.ca_cert}"\n'
    if client_cert:
        cert, key = certs.clients["insync-proxy"]
        toml += f'cert_file = "{cert}"\nkey_file = "{key}"\n'
    return toml


def _control_toml(user: str, mechanism: str = "SCRAM-SHA-512") -> str:
    return f'\n[control_sasl]\nmechanism = "{mechanism}"\nusername = "{user}"\n'


@pytest.fixture(scope="module")
def secured(cluster_pool: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """The secured cluster and its two proxies, for every test of this module (the shared cluster stops)."""
    from tests import (
        cluster_fixtures,  # the pool's own module: release the shared proxy and cluster (one at a time)
    )

    assert cluster_fixtures._POOL is cluster_pool
    cluster_fixtures._PROXIES.release()
    cluster_pool.release()
    cluster_fixtures._OWN.release()  # a named own cluster (the SASL/TLS tests' "secured") is not needed any more
    certs = make_test_certificates(tmp_path_factory.mktemp("pki"), ("insync-proxy", "alice"))
    cluster = LocalKafkaCluster(ClusterSettings(
        sasl_plain_users=PASSWORDS, sasl_scram_users=PASSWORDS, sasl_ssl=True,
        tls_keystore_pem=certs.broker_keystore, tls_client_ca_pem=certs.ca_cert,
        acls=True, super_users=("admin",),
    ))
    cluster_pool.started_cluster_ids.add(cluster.cluster_id)  # the suite's leftover-JVM check covers it
    proxies: list[ProxyProcess] = []
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # PLAINTEXT: ANONYMOUS, a super user
        for future in admin.create_acls(_acls()).values():
            future.result(60)
        with control_password(PASSWORDS["insync-proxy"]):
            scram = ProxyProcess(cluster, extra_toml=POLICIES + _tls_toml(certs, False) + _control_toml("insync-proxy"),
                                 groups=("default",), bootstrap_servers=cluster.sasl_bootstrap_servers)
            proxies.append(scram)
            scram.start()  # ready: TLS, the SCRAM login and Metadata of the control connection worked
        mtls = ProxyProcess(cluster, extra_toml=POLICIES + _tls_toml(certs, True), groups=("default",),
                            bootstrap_servers=cluster.tls_bootstrap_servers)
        proxies.append(mtls)
        mtls.start()
        yield Secured(cluster, certs, scram, mtls)
    finally:
        for proxy in proxies:
            proxy.stop()
        cluster.stop()
        cluster.cleanup()


def _topic(cluster: LocalKafkaCluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, 3, 3, {"min.insync.replicas": "2"})
    return name


def _min_insync_through(bootstrap: str, topic: str, sasl: SaslConfig | None) -> int:
    """Tag 637 of `topic` in a Metadata v12 answer from the proxy (logged in as a client would be)."""
    with BlockingKafkaClient.connect(bootstrap) as client:
        if sasl is not None:
            authenticate_blocking(client.request_raw, sasl)
        response = client.request(MetadataRequest(topics=(MetadataRequestTopic(name=topic),)), 12, MetadataResponse)
    return response.topics[0].min_insync_replicas


def _produce(config: dict[str, Any], topic: str, count: int, acks: str) -> None:
    producer = Producer({**config, "acks": acks, "enable.idempotence": acks == "all"})
    delivered: list[Any] = []
    for i in range(count):
        producer.produce(topic, f"{acks}-{i}".encode(), key=f"k{i}".encode(),
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None] * count, delivered


def _through_proxy(proxy: ProxyProcess, client: dict[str, Any], sasl: SaslConfig | None,
                   cluster: LocalKafkaCluster, produce: Any) -> None:
    """acks=all on a fast_fail topic and acks=1 on an acks_floor = -2 topic, both read back; tag 637; no leak."""
    checked, floored = _topic(cluster, "fastfail"), _topic(cluster, "floor2")
    # The control connection read min.insync.replicas (DescribeConfigs): Metadata carries tag 637
    for topic in (checked, floored):
        wait_until(lambda t=topic: _min_insync_through(proxy.bootstrap(), t, sasl) == 2, 30,
                   what=f"tag 637 = 2 on {topic}")
    # acks=all is prechecked (fast_fail); acks=1 is raised and checked as acks=-2 (acks_floor = -2). Just after a
    # topic is created, a refresh from a broker that does not know it yet can leave the proxy without its ISR for
    # a moment: that record's precheck is "unknown" (forwarded, the broker decides), so produce until one passed.
    for topic, acks in ((checked, "all"), (floored, "1")):
        wait_until(lambda t=topic, a=acks: produce(t, a) or proxy.metric(
            "insync_proxy_precheck_total", topic=t, outcome="passed") > 0, 60, interval=1,
            what=f"a precheck passed on {topic}")
    for topic in (checked, floored):
        assert len(consume_values(client, topic, 20)) >= 20
    assert proxy.metric("insync_proxy_acks_floor_applied_total", topic=floored) > 0
    assert proxy.metric("insync_proxy_address_leaks_total") == 0


def test_librdkafka_through_the_proxy_to_sasl_ssl_scram_and_plain(secured: Secured) -> None:
    # Given clients that log in as alice with SCRAM-SHA-512 (the proxy passes the login through to SASL_SSL)
    proxy = secured.scram_proxy
    scram: dict[str, Any] = {
        "bootstrap.servers": proxy.bootstrap(), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORDS["alice"]}
    sasl = SaslConfig(mechanism="SCRAM-SHA-512", username="alice", password=PASSWORDS["alice"])
    # When they produce (acks=all, and acks=-2 semantics through acks_floor) and consume: Then every record is back
    _through_proxy(proxy, scram, sasl, secured.cluster, lambda topic, acks: _produce(scram, topic, 20, acks))
    # And a PLAIN login passes through the same way
    plain = {**scram, "sasl.mechanism": "PLAIN"}
    topic = _topic(secured.cluster, "plain")
    _produce(plain, topic, 20, "all")
    assert sorted(consume_values(plain, topic, 20)) == sorted(f"all-{i}".encode() for i in range(20))
    assert proxy.metric("insync_proxy_address_leaks_total") == 0
    assert PASSWORDS["insync-proxy"] not in proxy.log_file.read_text()


def test_librdkafka_keeps_its_sasl_ssl_settings_with_downstream_tls(secured: Secured) -> None:
    # Given a proxy that also ends TLS towards clients (its certificate issued by the same CA as the brokers')
    certs = secured.certs
    downstream = f'\n[downstream_tls]\nenabled = true\ncert_file = "{certs.broker_cert}"\nkey_file = "{certs.broker_key}"\n'
    with control_password(PASSWORDS["insync-proxy"]):
        proxy = ProxyProcess(secured.cluster, extra_toml=POLICIES + _tls_toml(certs, False)
                             + _control_toml("insync-proxy") + downstream, groups=("default",),
                             bootstrap_servers=secured.cluster.sasl_bootstrap_servers, audit_enabled=False)
        try:
            proxy.start()
            # When a client keeps its SASL_SSL settings and only points bootstrap.servers at the proxy
            client: dict[str, Any] = {
                "bootstrap.servers": proxy.bootstrap(), "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(certs.ca_cert), "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                "sasl.password": PASSWORDS["alice"]}
            topic = _topic(secured.cluster, "downstream")
            _produce(client, topic, 20, "all")
            # Then it produces and consumes as it would from the brokers, and learns no broker address
            assert sorted(consume_values(client, topic, 20)) == sorted(f"all-{i}".encode() for i in range(20))
            assert proxy.metric("insync_proxy_address_leaks_total") == 0
        finally:
            proxy.stop()


def test_librdkafka_through_the_proxy_to_mtls(secured: Secured) -> None:
    # Given plaintext clients of the proxy: the proxy's certificate is their identity towards the brokers
    proxy = secured.mtls_proxy
    client = {"bootstrap.servers": proxy.bootstrap()}
    _through_proxy(proxy, client, None, secured.cluster, lambda topic, acks: _produce(client, topic, 20, acks))


@pytest.fixture(scope="module")
def java(secured: Secured) -> JavaClient:
    return JavaClient(selected_version())


def test_java_client_through_the_proxy_to_sasl_ssl_scram(secured: Secured, java: JavaClient, tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{PASSWORDS["alice"]}";\n'
    )
    sasl = SaslConfig(mechanism="SCRAM-SHA-512", username="alice", password=PASSWORDS["alice"])
    proxy = secured.scram_proxy

    def produce(topic: str, acks: str) -> None:
        assert "OK produce-consume 20" in java.run("produce-consume", proxy.bootstrap(), topic, "20", acks,
                                                   str(properties))

    client = {"bootstrap.servers": proxy.bootstrap(), "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORDS["alice"]}
    _through_proxy(proxy, client, sasl, secured.cluster, produce)


def test_java_client_through_the_proxy_to_mtls(secured: Secured, java: JavaClient, tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text("security.protocol=PLAINTEXT\n")
    proxy = secured.mtls_proxy

    def produce(topic: str, acks: str) -> None:
        assert "OK produce-consume 20" in java.run("produce-consume", proxy.bootstrap(), topic, "20", acks,
                                                   str(properties))

    _through_proxy(proxy, {"bootstrap.servers": proxy.bootstrap()}, None, secured.cluster, produce)


# ---------------------------------------------------------------------------------------------- check_connection
def _config(secured: Secured, kind: str, directory: Path) -> ProxyConfig:
    """The proxy's configuration for one way into the cluster, loaded as `run` loads it (TOML + environment)."""
    cluster, certs = secured.cluster, secured.certs

    def servers(bootstrap: str) -> str:
        return "bootstrap_servers = [" + ", ".join(f'"{s}"' for s in bootstrap.split(",")) + "]\n"

    sasl_ssl, mtls = servers(cluster.sasl_bootstrap_servers), servers(cluster.tls_bootstrap_servers)
    toml, password = {
        "plaintext": (servers(cluster.bootstrap_servers), None),
        "sasl_ssl_scram": (sasl_ssl + _tls_toml(certs, False) + _control_toml("insync-proxy"), PASSWORDS["insync-proxy"]),
        "sasl_ssl_plain": (sasl_ssl + _tls_toml(certs, False) + _control_toml("insync-proxy", "PLAIN"),
                           PASSWORDS["insync-proxy"]),
        "mtls": (mtls + _tls_toml(certs, True), None),
        "wrong_password": (sasl_ssl + _tls_toml(certs, False) + _control_toml("insync-proxy"), "not-the-password-7"),
        "no_describe_configs": (sasl_ssl + _tls_toml(certs, False) + _control_toml("no-configs"), PASSWORDS["no-configs"]),
        "mtls_without_certificate": (mtls + _tls_toml(certs, False), None),
        "plaintext_to_tls_port": (mtls, None),
    }[kind]
    path = directory / f"{kind}.toml"
    path.write_text('proxy_id = "check"\n' + toml)
    return load_config(str(path), env={PASSWORD_ENV: password} if password else {})


#: kind -> (passes, {step: status}); every step not named must be "ok" or "skip".
CHECKS: dict[str, tuple[bool, dict[str, str]]] = {
    "plaintext": (True, {"tls": "skip", "sasl": "skip"}),
    "sasl_ssl_scram": (True, {}),
    "sasl_ssl_plain": (True, {}),
    "mtls": (True, {"sasl": "skip"}),
    "wrong_password": (False, {"sasl": "FAIL"}),
    "no_describe_configs": (False, {"describe_configs": "FAIL"}),
    "mtls_without_certificate": (False, {"tls": "FAIL"}),
    "plaintext_to_tls_port": (False, {"api_versions": "FAIL"}),
}
STEPS = ("tcp", "tls", "api_versions", "sasl", "metadata", "describe_configs", "brokers", "node_ids", "acls")


@pytest.mark.parametrize("kind", list(CHECKS))
def test_check_connection_says_each_step_on_one_line(secured: Secured, kind: str, tmp_path: Path) -> None:
    # Given a topic for DescribeConfigs, and a configuration of the proxy for one way into the cluster
    topic = _topic(secured.cluster, "check")
    config = _config(secured, kind, tmp_path)
    lines: list[str] = []
    # When the connection is checked
    passed = check_connection(config, lines.append, topic=topic)
    print(f"--- {kind}: {passed}\n" + "\n".join(lines))
    # Then the result is right, each step is one line, and the first failing step is the one expected
    expected_pass, expected_steps = CHECKS[kind]
    text = "\n".join(lines)
    assert passed is expected_pass, text
    statuses = {}
    for line in lines:
        assert "\n" not in line
        status, _, rest = line.partition(" ")
        step = rest.strip().split(":", 1)[0]
        assert status in ("ok", "FAIL", "skip", "note"), line
        assert step in STEPS, line
        statuses[step] = status
    for step in STEPS:
        if step in expected_steps:
            assert statuses.get(step) == expected_steps[step], text
        elif step in statuses:
            assert statuses[step] in ("ok", "skip", "note"), text
    if expected_pass:
        assert [s for s in STEPS if s in statuses] == list(STEPS), text  # every step said, in order
        assert f"topic {topic!r}: min.insync.replicas = 2" in text
    # And no secret is ever said
    for password in [*PASSWORDS.values(), "not-the-password-7"]:
        assert password not in text
    if kind == "wrong_password":
        assert "authentication failed for user 'insync-proxy': wrong password or unknown user" in text
    if kind == "no_describe_configs":
        assert "TOPIC_AUTHORIZATION_FAILED" in text and "User:no-configs lacks DESCRIBE_CONFIGS" in text


@pytest.mark.parametrize(("password", "code"), [(PASSWORDS["insync-proxy"], 0), ("not-the-password-7", 1)])
def test_check_config_connect_exits_by_the_checks(secured: Secured, tmp_path: Path, password: str, code: int) -> None:
    # Given the proxy's configuration for SASL_SSL (SCRAM), its password in the environment, as `run` takes it
    config = tmp_path / "proxy.toml"
    servers = ", ".join(f'"{s}"' for s in secured.cluster.sasl_bootstrap_servers.split(","))
    config.write_text(f"bootstrap_servers = [{servers}]\n" + _tls_toml(secured.certs, False)
                      + _control_toml("insync-proxy"))
    # When `insync-proxy check-config --connect` runs
    result = subprocess.run([sys.executable, "-m", "insync_proxy", "check-config", "--config", str(config), "--connect"],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, PASSWORD_ENV: password})
    # Then it exits 0 when every step passed and 1 when the login was refused, saying which, never the secret
    assert result.returncode == code, result.stdout + result.stderr
    if code == 0:
        assert "ok   sasl: SCRAM-SHA-512 login as 'insync-proxy'" in result.stdout
    else:
        assert "FAIL sasl: SCRAM-SHA-512 authentication failed for user 'insync-proxy'" in result.stdout
    assert password not in result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------- the running proxy
def test_running_proxy_reports_a_wrong_control_password_once(secured: Secured) -> None:
    # Given a proxy whose control connection has a wrong password, refreshing Metadata every second
    with control_password("not-the-password-7"):
        proxy = ProxyProcess(secured.cluster, extra_toml=_tls_toml(secured.certs, False) + _control_toml("insync-proxy"),
                             groups=("default",), bootstrap_servers=secured.cluster.sasl_bootstrap_servers,
                             metadata_refresh_seconds=1, audit_enabled=False)
        try:
            # Then it never gets ready
            with pytest.raises(RuntimeError, match="not ready"):
                proxy.start(timeout=6)
            # And every refused login is counted, while the log says it once, without the password
            wait_until(lambda: proxy.metric("insync_proxy_control_authentication_failures_total",
                                            mechanism="SCRAM-SHA-512") >= 4, 30, what="4 refused logins counted")
            log = proxy.log_file.read_text()
            lines = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line]
            assert len([line for line in lines if "SASL SCRAM-SHA-512 login as 'insync-proxy'" in line]) == 1, log
            assert len(lines) == 1, log
            assert "not-the-password-7" not in log and "never retrieved" not in log
        finally:
            proxy.stop()


def test_running_proxy_reports_a_principal_without_describe_configs_once(secured: Secured) -> None:
    # Given a proxy whose principal may DESCRIBE topics but not DESCRIBE_CONFIGS them
    with control_password(PASSWORDS["no-configs"]):
        proxy = ProxyProcess(secured.cluster, extra_toml=_tls_toml(secured.certs, False) + _control_toml("no-configs"),
                             groups=("default",), bootstrap_servers=secured.cluster.sasl_bootstrap_servers,
                             metadata_refresh_seconds=1, audit_enabled=False)
        try:
            proxy.start()  # Metadata works: it is ready
            topics = [_topic(secured.cluster, "noconf") for _ in range(2)]
            # When clients ask for Metadata of several topics, again and again
            sasl = SaslConfig(mechanism="SCRAM-SHA-512", username="alice", password=PASSWORDS["alice"])
            for topic in topics:
                assert _min_insync_through(proxy.bootstrap(), topic, sasl) == -1
            wait_until(lambda: proxy.metric("insync_proxy_min_insync_unauthorized_total") >= 2, 30,
                       what="unauthorized DescribeConfigs counted")
            for topic in topics:  # Then Metadata goes out without tag 637
                assert _min_insync_through(proxy.bootstrap(), topic, sasl) == -1
            # And one warning says what is missing, for whom, not one per topic or per retry
            log = proxy.log_file.read_text()
            warnings = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line]
            assert len(warnings) == 1 and "DESCRIBE_CONFIGS" in warnings[0], log
        finally:
            proxy.stop()


# ---------------------------------------------------------------------------------------------- acks=-2 below min ISR
def test_acks_floor_minus_two_fails_fast_below_min_isr_through_the_sasl_ssl_proxy(secured: Secured) -> None:
    # Given two topics on brokers 1-3 with min.insync.replicas = 3: floor2-* has acks_floor = -2, the other no policy
    cluster, proxy = secured.cluster, secured.scram_proxy
    floored, unpoliced = f"floor2-{uuid.uuid4().hex[:8]}", f"nopolicy-{uuid.uuid4().hex[:8]}"
    for topic in (floored, unpoliced):
        cluster.create_topic(topic, configs={"min.insync.replicas": "3"}, assignments={0: [1, 2, 3]})
    sasl = SaslConfig(mechanism="SCRAM-SHA-512", username="alice", password=PASSWORDS["alice"])
    # (a client names both: the proxy's view, its below-min gauge included, covers the topics in use)
    for topic in (floored, unpoliced):
        wait_until(lambda t=topic: _min_insync_through(proxy.bootstrap(), t, sasl) == 3, 30, what="tag 637 = 3")
    client: dict[str, Any] = {
        "bootstrap.servers": proxy.bootstrap(), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORDS["alice"],
        "retries": 0, "enable.idempotence": False, "message.timeout.ms": 30000}
    # When a follower stops (frozen, as in a long GC pause) and the ISR shrinks below 3
    cluster.pause_broker(3)
    try:
        cluster.wait_for_isr(floored, 0, 2)
        wait_until(lambda: proxy.metric("insync_proxy_partitions_below_min_isr") >= 2, 30,
                   what="the proxy's view to see both partitions below min ISR")

        def produce_acks_1(topic: str) -> list[Any]:
            producer = Producer({**client, "acks": "1"})
            results: list[Any] = []
            producer.produce(topic, b"acks-1", on_delivery=lambda err, msg: results.append(err))
            producer.flush(60)
            return results

        # Then librdkafka's acks=1 on the floored topic is refused by the proxy: NOT_ENOUGH_REPLICAS, as acks=-2 would be
        (error,) = produce_acks_1(floored)
        assert error is not None and error.code() == 19, error
        assert proxy.metric("insync_proxy_proxy_answered_errors_total", topic=floored, error_code="19") > 0
        # And acks=1 on a topic without the policy is still accepted by the leader, as Kafka would
        assert produce_acks_1(unpoliced) == [None]
    finally:
        cluster.resume_broker(3)
    cluster.wait_for_isr(floored, 0, 3)
