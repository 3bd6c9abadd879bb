"""OAUTHBEARER: brokers that validate JWTs with Kafka's own validator (KIP-768) against a real identity provider,
the proxy logging in with the client-credentials grant, clients' OAuth logins passing through it, and sessions
that end every 10 seconds (connections.max.reauth.ms, KIP-368).

The identity provider is devcluster/identity_provider.py (Authlib's authorization server: registered clients with
secrets, RS256 JWTs, its JWKS); the brokers check each token's signature against that JWKS, its issuer, audience
and expiry, so the first test shows that they refuse what they must before any other test trusts a login.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from joserfc import jwt
from joserfc.jwk import RSAKey

from harness.java_client import JavaClient
from harness.proxy_process import AUDIT_TOPIC, ProxyProcess
from harness.waiting import wait_until
from insync_proxy.cli.preflight import check_connection
from insync_proxy.client.blocking_client import BlockingKafkaClient, parse_address
from insync_proxy.devcluster.cluster import ClusterSettings, LocalKafkaCluster, OAuthBearerValidation
from insync_proxy.devcluster.identity_provider import IdentityProvider
from insync_proxy.protocol import ErrorCode, MetadataRequest, MetadataResponse
from insync_proxy.protocol.messages import MetadataRequestTopic
from insync_proxy.proxy.config.loader import load_config
from insync_proxy.proxy.config.settings import SaslConfig
from insync_proxy.proxy.controlplane.sasl import SaslError, authenticate_blocking, oauthbearer_login
from tests.helpers import consume_values
from tests.integration.own_login import acks_minus_two_is_answered_by_the_proxy, make_room, start_keeping_logs

pytestmark = pytest.mark.own_cluster

#: Sessions end after this long unless renewed (the brokers' SASL listener).
REAUTH_MS = 10_000


@dataclass
class OAuthCluster:
    idp: IdentityProvider
    cluster: LocalKafkaCluster
    proxy: ProxyProcess
    secrets: dict[str, str]

    def sasl(self, client_id: str) -> SaslConfig:
        return SaslConfig(mechanism="OAUTHBEARER", oauthbearer_token_endpoint_url=self.idp.token_endpoint_url,
                          oauthbearer_client_id=client_id, oauthbearer_client_secret=self.secrets[client_id],
                          oauthbearer_scope="kafka")

    def librdkafka(self, client_id: str) -> dict[str, Any]:
        """confluent-kafka's settings for `client_id` through the proxy (librdkafka fetches its own tokens)."""
        return {"bootstrap.servers": self.proxy.bootstrap(), "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": client_id, "sasl.oauthbearer.client.secret": self.secrets[client_id],
                "sasl.oauthbearer.token.endpoint.url": self.idp.token_endpoint_url, "sasl.oauthbearer.scope": "kafka"}


@pytest.fixture(scope="module")
def oauth(cluster_pool: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthCluster]:
    """An identity provider, brokers validating its tokens (10 s sessions), and a proxy logging in with one."""
    make_room(cluster_pool)
    idp = IdentityProvider(token_seconds=300).start()
    secrets = {name: idp.add_client(name) for name in ("insync-proxy", "alice", "rdkafka")}
    directory = tmp_path_factory.mktemp("oauth")
    secret_file = directory / "client-secret"
    secret_file.write_text(secrets["insync-proxy"] + "\n")
    cluster = LocalKafkaCluster(ClusterSettings(
        oauthbearer=OAuthBearerValidation(idp.jwks_endpoint_url, idp.issuer, "kafka"), sasl_reauth_ms=REAUTH_MS))
    cluster_pool.started_cluster_ids.add(cluster.cluster_id)
    proxy = None
    try:
        start_keeping_logs(cluster)
        cluster.create_topic(AUDIT_TOPIC, 1, 3)
        control = (f'\n[control_sasl]\nmechanism = "OAUTHBEARER"\noauthbearer_token_endpoint_url = '
                   f'"{idp.token_endpoint_url}"\noauthbearer_client_id = "insync-proxy"\n'
                   f'oauthbearer_client_secret_file = "{secret_file}"\noauthbearer_scope = "kafka"\n')
        proxy = ProxyProcess(cluster, extra_toml=control, groups=("default",), audit_topic=True,
                             bootstrap_servers=cluster.sasl_bootstrap_servers).start()
        yield OAuthCluster(idp, cluster, proxy, secrets)
    finally:
        if proxy is not None:
            proxy.stop()
        cluster.stop()
        cluster.cleanup()
        idp.stop()


def _token(idp: IdentityProvider, key: RSAKey | None = None, **claims: Any) -> str:
    """A token as the provider would sign it, with some claims changed (or signed by another key)."""
    now = int(time.time())
    values = {"iss": idp.issuer, "aud": "kafka", "sub": "alice", "scope": "kafka", "iat": now, "exp": now + 300,
              **claims}
    signer = key or idp.key
    return jwt.encode({"alg": "RS256", "kid": signer.kid or "k"}, values, signer)


def _login_at_broker(cluster: LocalKafkaCluster, token: str) -> int:
    host, port = parse_address(cluster.sasl_bootstrap_servers.split(",")[0])
    with BlockingKafkaClient(host, port) as client:
        client.request_raw(17, 1, b"\x00\x0bOAUTHBEARER")  # SaslHandshake v1

        async def request(api_key: int, version: int, body: bytes) -> bytes:
            return client.request_raw(api_key, version, body)

        import asyncio

        return asyncio.run(oauthbearer_login(request, token))


def test_the_brokers_refuse_tokens_of_another_key_expired_or_for_another_audience_or_issuer(
        oauth: OAuthCluster) -> None:
    # Given a token as the provider signs it: the brokers take it, and give the session 10 s
    assert _login_at_broker(oauth.cluster, _token(oauth.idp)) == REAUTH_MS
    # When a token is signed by another key, expired, or made for another audience or issuer
    other_key = RSAKey.generate_key(2048, {"kid": oauth.idp.key.kid or "k"})
    refused = {
        "another key": _token(oauth.idp, key=other_key),
        "expired": _token(oauth.idp, iat=int(time.time()) - 600, exp=int(time.time()) - 300),
        "another audience": _token(oauth.idp, aud="not-kafka"),
        "another issuer": _token(oauth.idp, iss="http://127.0.0.1:1"),
    }
    # Then every one is refused with SASL_AUTHENTICATION_FAILED
    for what, token in refused.items():
        with pytest.raises(SaslError) as refusal:
            _login_at_broker(oauth.cluster, token)
        assert refusal.value.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, what


def test_check_config_walks_the_token_and_the_login_and_names_a_wrong_secret(oauth: OAuthCluster) -> None:
    config = load_config(oauth.proxy.config_file)
    lines: list[str] = []
    assert check_connection(config, lines.append), lines
    assert any(line.startswith("ok   token: client 'insync-proxy' got a token") for line in lines), lines
    assert any(line.startswith("ok   sasl: OAUTHBEARER login as 'insync-proxy'; the broker ends the session after 10s")
               for line in lines), lines
    # A wrong client secret fails the token step, says what to check, and never shows the secret
    wrong = "not-the-secret-" + uuid.uuid4().hex
    bad = replace(config, control_sasl=replace(config.control_sasl, oauthbearer_client_secret=wrong,
                                               oauthbearer_client_secret_file=None))
    lines.clear()
    assert not check_connection(bad, lines.append)
    assert lines[-1].startswith("FAIL token: token endpoint ") and "wrong client secret" in lines[-1], lines
    assert not any(wrong in line for line in lines)
    # An endpoint that answers HTML is named as not being a token endpoint
    html = replace(config, control_sasl=replace(config.control_sasl,
                                                oauthbearer_token_endpoint_url=oauth.idp.issuer + "/nowhere"))
    lines.clear()
    assert not check_connection(html, lines.append)
    assert "answered HTTP 404 with text/html, not a JSON token" in lines[-1], lines


def _min_insync(proxy: ProxyProcess, sasl: SaslConfig, topic: str) -> int:
    """Tag 637 of `topic` in a Metadata v12 answer through the proxy, logged in as a client with OAUTHBEARER."""
    with BlockingKafkaClient.connect(proxy.bootstrap()) as client:
        authenticate_blocking(client.request_raw, sasl)
        response = client.request(MetadataRequest(topics=(MetadataRequestTopic(name=topic),)), 12, MetadataResponse)
    return response.topics[0].min_insync_replicas


def test_java_client_and_librdkafka_log_in_through_the_proxy_and_metadata_carries_min_insync(
        oauth: OAuthCluster, tmp_path: Path) -> None:
    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    oauth.cluster.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    # Given the proxy's own OAUTHBEARER login read min.insync.replicas: tag 637 is on a client's Metadata answer
    wait_until(lambda: _min_insync(oauth.proxy, oauth.sasl("alice"), topic) == 2, 60, what="tag 637 = 2")
    # When the Java client logs in with its own token (Kafka's OAuthBearerLoginCallbackHandler) and produces
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url={oauth.idp.token_endpoint_url}\n"
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer."
        "OAuthBearerLoginCallbackHandler\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'clientId="alice" clientSecret="{oauth.secrets["alice"]}" scope="kafka";\n')
    allowed = f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={oauth.idp.token_endpoint_url}"
    out = JavaClient().run("produce-consume", oauth.proxy.bootstrap(), topic, "20", "all", str(properties),
                           jvm_options=(allowed,))
    # Then its records are back, read through the proxy
    assert "OK produce-consume 20" in out
    # And librdkafka's OIDC login (its own token request) produces and reads back through the proxy
    config = oauth.librdkafka("rdkafka")
    producer = Producer({**config, "acks": "all"})
    delivered: list[Any] = []
    for i in range(20):
        producer.produce(topic, f"rdkafka-{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None] * 20, delivered
    values = consume_values(config, topic, 40)
    assert {f"rdkafka-{i}".encode() for i in range(20)} <= set(values)
    assert oauth.proxy.metric("insync_proxy_address_leaks_total") == 0


def test_acks_minus_two_is_answered_not_enough_replicas_by_the_proxy_with_a_paused_broker(
        oauth: OAuthCluster) -> None:
    # The proxy's ISR view came over its OAuth login; the client logs in with a token of its own
    acks_minus_two_is_answered_by_the_proxy(oauth.cluster, oauth.proxy, f"127.0.0.1:{oauth.proxy.broker_port(1)}",
                                            lambda client: authenticate_blocking(client.request_raw, oauth.sasl("alice")))


def test_a_minute_of_ten_second_sessions_loses_no_tag_and_logs_no_error(oauth: OAuthCluster) -> None:
    cluster, proxy = oauth.cluster, oauth.proxy
    topic = f"oauth-reauth-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    wait_until(lambda: _min_insync(proxy, oauth.sasl("alice"), topic) == 2, 60, what="tag 637 = 2")
    log_start = proxy.log_file.stat().st_size
    audit_before = proxy.metric("insync_proxy_audit_events_written_total", sink="kafka")
    # Given a librdkafka producer that stays connected through the proxy (its sessions renewed through it too)
    producer = Producer({**oauth.librdkafka("rdkafka"), "acks": "all"})
    errors: list[Any] = []
    sent = [0]
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            producer.produce(topic, f"r{sent[0]}".encode(),
                             on_delivery=lambda err, msg: errors.append(err) if err else None)
            sent[0] += 1
            producer.poll(0.2)

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    # When a minute passes (6 session lifetimes: each connection renewed 6 times), each few seconds a new client asks
    # for the topic's Metadata
    tags: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            tags.append(_min_insync(proxy, oauth.sasl("alice"), topic))
            time.sleep(3)  # the pace of the check, not a wait for a condition
    finally:
        stop.set()
        writer.join(30)
    assert producer.flush(60) == 0
    # Then every answer carried tag 637, the producer saw no error, the audit topic kept being written
    assert len(tags) >= 10 and set(tags) == {2}, tags
    assert errors == [] and sent[0] > 50, (errors[:5], sent[0])
    assert proxy.metric("insync_proxy_audit_events_written_total", sink="kafka") > audit_before
    assert proxy.metric("insync_proxy_control_authentication_failures_total", mechanism="OAUTHBEARER") == 0
    # And the proxy renewed its sessions in place: no ERROR line, no connection a broker closed, no login refused
    # (a session that ends unrenewed is a broker closing the control connection: "... lost: the broker closed the
    # control connection; trying another broker"). A request that a loaded broker answers late is not this test's
    # matter: its WARNING says "timed out after".
    with proxy.log_file.open() as log:
        log.seek(log_start)
        lines = log.read().splitlines()
    bad = [line for line in lines if re.search(r"\bERROR\b", line)
           or (re.search(r"\bWARNING\b", line) and "timed out after" not in line)]
    assert bad == [], bad
    whole = proxy.log_file.read_text()
    assert "the proxy renews its sessions in place before they end" in whole


def test_a_sasl_listener_without_a_control_login_is_said_once_and_shown_by_readyz(oauth: OAuthCluster) -> None:
    import urllib.error
    import urllib.request

    # Given a proxy in front of the brokers' SASL listener with no [control_sasl]
    proxy = ProxyProcess(oauth.cluster, extra_toml="", groups=("default",),
                         bootstrap_servers=oauth.cluster.sasl_bootstrap_servers).start(wait_ready=False)

    def readyz() -> str:
        try:
            with urllib.request.urlopen(f"{proxy.admin_url}/readyz", timeout=2) as answer:
                return str(answer.read().decode())
        except urllib.error.HTTPError as refused:
            return str(refused.read().decode())
        except OSError:
            return ""

    try:
        # When its control connection's Metadata is closed by the brokers, refresh after refresh
        def refused() -> float:
            try:
                return proxy.metric("insync_proxy_control_authentication_failures_total", mechanism="none")
            except OSError:  # the admin port is not up yet
                return 0

        wait_until(lambda: refused() >= 3, 60, interval=0.5, what="three refreshes refused for want of a login")
        # Then /readyz says what is missing, and the log said it once, as one WARNING
        assert "wants a SASL login" in readyz() and "[control_sasl] is not set" in readyz(), readyz()
        said = [line for line in proxy.log_file.read_text().splitlines() if "wants a SASL login" in line]
        assert len(said) == 1 and " WARNING " in said[0], said
    finally:
        proxy.stop()
