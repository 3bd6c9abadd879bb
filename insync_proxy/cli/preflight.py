"""`check-config --connect`'s engine: the control connection's way into the cluster, checked one step at a time.

Each step is one line through `say`: ``ok   <step>: <what>``, ``FAIL <step>: <what went wrong, what to
do>``, ``skip <step>: <why>`` or ``note <step>: <what to know>``. The steps are the control connection's
own: a bootstrap server over TCP, TLS with the [upstream_tls] settings, ApiVersions, the SASL login of
[control_sasl], Metadata, every broker's advertised address, then one topic's DescribeConfigs (the
DESCRIBE_CONFIGS permission KIP-637 needs). It uses the proxy's own pieces (the upstream TLS context,
the blocking client, the SASL exchange, the control connection's request versions), not a second client.
No line carries a secret: the SASL password is never formatted, and any line that would contain it is
masked before it is said.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Callable

from insync_proxy.client.blocking_client import BlockingKafkaClient, ConnectionClosed, KafkaClientError
from insync_proxy.protocol import (
    ApiKey,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ErrorCode,
    MetadataRequest,
    MetadataResponse,
)
from insync_proxy.protocol.messages import DescribeConfigsResource
from insync_proxy.proxy.config.broker_ports import (
    NODE_ID_PLACEHOLDER,
    BrokerPorts,
    advertised_name,
    unmapped_broker_line,
)
from insync_proxy.proxy.config.settings import ProxyConfig, SaslConfig
from insync_proxy.proxy.config.tls import PLAINTEXT_LISTENER_HINT, client_ssl_context, closed_during_handshake
from insync_proxy.proxy.controlplane.control import (
    DESCRIBE_CONFIGS_VERSION,
    HTTP_ANSWER,
    METADATA_VERSION,
    TOPIC_RESOURCE,
)
from insync_proxy.proxy.controlplane.min_insync import CONFIG_KEY
from insync_proxy.proxy.controlplane.sasl import (
    SaslError,
    authenticate_blocking,
    credentials_hint,
    login_name,
    mechanisms_hint,
)

__all__ = ["check_connection"]

Say = Callable[[str], None]
CLIENT_ID = "insync-proxy-check"


def _token_step(sasl: SaslConfig, steps: _Steps) -> bool:
    """OAUTHBEARER: a token from the token endpoint, said as its own step; False when none came."""
    import time

    from insync_proxy.proxy.controlplane.oauth import TokenEndpointError, token_source

    try:
        token = token_source(sasl).fetch()
    except TokenEndpointError as exc:
        return steps.fail("token", str(exc))
    steps.ok("token", f"client {sasl.oauthbearer_client_id!r} got a token from {sasl.oauthbearer_token_endpoint_url} "
             f"(sub {token.subject!r}, valid {token.expires_at - time.time():.0f}s)"
             + ("" if token.subject else "; not a JWT with a `sub`: Kafka's brokers validate JWTs"))
    return True


def _node_ids_step(config: ProxyConfig, node_ids: list[int], steps: _Steps) -> None:
    """Each listener's node_id_ranges must give every broker a port (brokers numbered 1001+ need theirs)."""
    unmapped, mapped = [], []
    for listener in config.listeners:
        ports = BrokerPorts.from_settings(listener.broker_port_base, listener.node_id_ranges)
        for node_id in sorted(node_ids):
            port = ports.port_for(node_id)
            if port is None:
                unmapped.append(unmapped_broker_line(listener.name, node_id, ports))
            else:
                mapped.append(f"{listener.name}/{node_id}:{port}")
    if unmapped:
        steps.fail("node_ids", "; ".join(unmapped))
    else:
        steps.ok("node_ids", f"every broker has a port of each listener ({', '.join(mapped[:6])}"
                 + (", ..." if len(mapped) > 6 else "") + ")")


def _advertised_step(config: ProxyConfig, node_ids: list[int], steps: _Steps) -> None:
    """Each broker's advertised name must resolve here to the address the proxy listens on (loopback for a
    sidecar): clients are told those names (Kerberos clients ask for their principals' tickets by them)."""
    wanted = "127.0.0.1" if config.bind_host in ("0.0.0.0", "127.0.0.1", "", "localhost") else config.bind_host
    names = [advertised_name(config.advertised_host, node_id) for node_id in sorted(node_ids)]
    wrong = []
    for name in names:
        try:
            found = sorted({str(info[4][0]) for info in socket.getaddrinfo(name, None, socket.AF_INET)})
        except socket.gaierror:
            found = []
        if found != [wanted]:
            wrong.append(f"{name} ({'resolves to ' + ', '.join(found) if found else 'does not resolve'})")
    if wrong:
        steps.fail("advertised", f"clients are told {', '.join(names)}, and each must resolve to {wanted} where they "
                   f"run: {'; '.join(wrong)}: add `{wanted} <name>` lines to /etc/hosts, or Kubernetes hostAliases "
                   "(deploy/kubernetes/kerberos/)")
    else:
        steps.ok("advertised", f"clients are told {', '.join(names)}: each resolves to {wanted} here")


def _name(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class _Steps:
    """Says each step's line (secrets masked) and remembers whether any failed."""

    def __init__(self, say: Say, secrets: list[str]) -> None:
        self._say = say
        self._secrets = [s for s in secrets if s]
        self.failed = False

    def _line(self, status: str, step: str, text: str) -> None:
        line = f"{status:<4} {step}: {text}"
        for secret in self._secrets:
            line = line.replace(secret, "***")
        self._say(line)

    def ok(self, step: str, text: str) -> None:
        self._line("ok", step, text)

    def fail(self, step: str, text: str) -> bool:
        self.failed = True
        self._line("FAIL", step, text)
        return False

    def skip(self, step: str, text: str) -> None:
        self._line("skip", step, text)

    def note(self, step: str, text: str) -> None:
        self._line("note", step, text)


def _tls_hint(exc: BaseException) -> str:
    """What a TLS failure most likely means, in the settings' words."""
    if closed_during_handshake(exc):
        return PLAINTEXT_LISTENER_HINT
    text = str(exc).lower()
    if "certificate verify failed" in text or "self-signed" in text or "unable to get local issuer" in text:
        if "hostname" in text or "ip address mismatch" in text:
            return ("the broker's certificate does not name this host: use the name it was issued for in "
                    "bootstrap_servers (upstream_tls.check_hostname = false turns the check off: not in production)")
        return "the broker's certificate is not trusted: set upstream_tls.ca_file to the CA that issued it"
    if any(word in text for word in ("certificate required", "bad certificate", "unknown ca", "certificate unknown",
                                     "handshake failure", "access denied")):
        return ("the broker refused the proxy's certificate: set upstream_tls.cert_file and key_file, issued by a CA "
                "in the broker's truststore (ssl.client.auth=required)")
    if "wrong version number" in text or "record layer failure" in text or "packet length too long" in text:
        return "the port does not speak TLS: a PLAINTEXT or SASL_PLAINTEXT listener? (upstream_tls.enabled = false)"
    return "check [upstream_tls] and the broker's SSL listener"


def _is_tls_error(exc: BaseException) -> bool:
    return isinstance(exc, ssl.SSLError) or isinstance(exc.__cause__, ssl.SSLError)


def _tls_record(exc: BaseException) -> bool:
    """A "frame size" that is a TLS record header (alert 0x15 or handshake 0x16, version 3.x): a TLS port."""
    match = re.search(r"frame size of (-?\d+) bytes", str(exc))
    return match is not None and (int(match.group(1)) >> 16) in (0x1503, 0x1603)


#: The first 4 bytes of an HTTP answer ("HTTP/1.1 400 ..."), read as a Kafka frame size.
HTTP_FRAME_SIZE = int.from_bytes(b"HTTP", "big")


def _not_kafka_hint(exc: BaseException, max_frame_size: int) -> str:
    """For a first answer whose size is no Kafka frame's: what the port speaks instead, or that it is not Kafka."""
    match = re.search(r"frame size of (-?\d+) bytes", str(exc))
    if match is None:
        return ""
    if int(match.group(1)) == HTTP_FRAME_SIZE:
        return f": {HTTP_ANSWER}"
    if not 0 <= int(match.group(1)) <= max_frame_size:
        return (f" (above the {max_frame_size} bytes a frame may have): the first answer is not a Kafka frame: is it "
                "the broker's listener port, and its protocol (TLS or not) the one [upstream_tls] says?")
    return ""


def _principal(config: ProxyConfig) -> str:
    if config.control_sasl.mechanism == "OAUTHBEARER":
        return "User:<the token's sub> (Kafka's default sasl.oauthbearer.sub.claim.name)"
    if config.control_sasl.mechanism == "AWS_MSK_IAM":
        return "the proxy's IAM role or user (MSK IAM access control: kafka-cluster:Connect, DescribeTopic, ...)"
    if config.control_sasl.mechanism == "GSSAPI":
        short = str(config.control_sasl.kerberos_principal).split("@")[0].split("/")[0]
        return f"User:{short} (Kafka's default sasl.kerberos.principal.to.local.rules)"
    if config.control_sasl.mechanism:
        return f"User:{config.control_sasl.username}"
    if config.upstream_tls.enabled and config.upstream_tls.cert_file:
        return "the principal of upstream_tls.cert_file (by default User:<its subject, e.g. CN=insync-proxy>)"
    return "User:ANONYMOUS (no SASL, no client certificate)"


def check_connection(config: ProxyConfig, say: Say, *, topic: str | None = None) -> bool:
    """Connect as the control connection would and say each step on one line; True when every step passed.

    `topic`: the topic whose DescribeConfigs is checked (default: [audit] kafka_topic when the cluster has
    it, else the first topic Metadata shows).
    """
    steps = _Steps(say, [config.control_sasl.password or "", config.control_sasl.oauthbearer_client_secret or ""])
    try:
        return _check(config, steps, topic)
    except Exception as exc:  # a check reports, it never ends in a traceback
        return steps.fail("check", f"stopped by an unexpected {type(exc).__name__}: {exc}")


def _check(config: ProxyConfig, steps: _Steps, topic: str | None) -> bool:
    timeout = config.connect_timeout_seconds
    addresses = config.upstream_addresses()

    # 1. TCP to a bootstrap server, in the configured order (as the control connection tries them).
    reached: tuple[str, int] | None = None
    errors = []
    for address in addresses:
        try:
            with socket.create_connection(address, timeout=timeout):
                reached = address
                break
        except OSError as exc:
            errors.append(f"{_name(address)}: {exc.strerror or exc}")
    if reached is None:
        return steps.fail("tcp", "no bootstrap server reachable (" + "; ".join(errors) + "): check bootstrap_servers, "
                          "the brokers' listeners and the network between")
    steps.ok("tcp", f"connected to {_name(reached)}" + (f" (not reachable: {'; '.join(errors)})" if errors else ""))

    # 2. TLS, proven by an ApiVersions round trip (under TLS 1.3 a refused client certificate shows only then).
    try:
        context = client_ssl_context(config.upstream_tls)
    except (OSError, ValueError) as exc:
        return steps.fail("tls", f"cannot load the [upstream_tls] files: {exc}")
    try:
        client = BlockingKafkaClient(reached[0], reached[1], timeout=timeout, client_id=CLIENT_ID, ssl_context=context)
    except KafkaClientError as exc:
        cause = exc.__cause__ or exc
        return steps.fail("tls", f"handshake with {_name(reached)} failed: {cause}; {_tls_hint(cause)}")
    with client:
        try:
            versions = client.api_versions()
        except KafkaClientError as exc:
            if context is not None and _is_tls_error(exc):
                cause = exc.__cause__ or exc
                return steps.fail("tls", f"{_name(reached)} ended the TLS session: {cause}; {_tls_hint(cause)}")
            if context is None and (isinstance(exc, ConnectionClosed) or _tls_record(exc)):
                return steps.fail("api_versions", f"{exc}: {_name(reached)} is a TLS listener (SSL or SASL_SSL): set "
                                  "[upstream_tls] enabled = true and ca_file")
            return steps.fail("api_versions", f"{exc}{_not_kafka_hint(exc, client.max_frame_size)}")
        if context is not None:
            tls = client.sock
            assert isinstance(tls, ssl.SSLSocket)
            subject = dict(item[0] for item in (tls.getpeercert() or {}).get("subject", ()))  # type: ignore[misc]
            steps.ok("tls", f"handshake with {_name(reached)} ({tls.version()}), broker certificate "
                     f"CN={subject.get('commonName', '?')} verified"
                     + (" and its host name checked" if config.upstream_tls.check_hostname else ", host name NOT checked")
                     + (", the proxy's certificate presented" if config.upstream_tls.cert_file else ""))
        else:
            steps.skip("tls", "upstream_tls is off: plaintext to the brokers")
        missing = [ApiKey(k).name for k in (ApiKey.METADATA, ApiKey.DESCRIBE_CONFIGS) if k not in versions]
        if missing:
            return steps.fail("api_versions", f"{_name(reached)} does not offer {', '.join(missing)}")
        metadata_version = client.highest_common_version(ApiKey.METADATA, (1, METADATA_VERSION), versions)
        configs_version = client.highest_common_version(ApiKey.DESCRIBE_CONFIGS, (1, DESCRIBE_CONFIGS_VERSION),
                                                        versions)
        steps.ok("api_versions", f"{len(versions)} APIs; the control connection will use Metadata v{metadata_version}, "
                 f"DescribeConfigs v{configs_version}")

        # 3. SASL login of the control connection (OAUTHBEARER: its token first).
        sasl = config.control_sasl
        mechanism, who = login_name(sasl)
        if sasl.mechanism == "OAUTHBEARER" and not _token_step(sasl, steps):
            return False
        if sasl.mechanism:
            try:
                lifetime_ms = authenticate_blocking(client.request_raw, sasl, reached[0])
            except SaslError as exc:
                if exc.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED:
                    refused = "the broker refused the token" if mechanism == "OAUTHBEARER" else \
                        "wrong password or unknown user"
                    whom = f"client {who!r}" if mechanism == "OAUTHBEARER" else f"user {who!r}"
                    return steps.fail("sasl", f"{mechanism} authentication failed for {whom}: {refused} "
                                      f"(broker: {exc}); check {credentials_hint(sasl)}")
                if exc.enabled is not None:  # the handshake was refused (33, or 34 from a PLAINTEXT listener)
                    return steps.fail("sasl", f"{mechanism} login as {who!r} failed: {exc}: "
                                      f"{mechanisms_hint(exc, mechanism)}")
                return steps.fail("sasl", f"{mechanism} login as {who!r} failed: {exc}")
            except KafkaClientError as exc:
                return steps.fail("sasl", f"{mechanism} login as {who!r} failed: {exc} (is "
                                  f"{_name(reached)} a SASL_SSL or SASL_PLAINTEXT listener?)")
            steps.ok("sasl", f"{mechanism} login as {who!r}"
                     + (f"; the broker ends the session after {lifetime_ms / 1000:.0f}s (connections.max.reauth.ms, "
                        "or the credential's expiry): the proxy renews its sessions in place" if lifetime_ms else ""))
        else:
            steps.skip("sasl", "no [control_sasl] mechanism: the control connection does not log in")

        # 4. Metadata: the brokers and the topics the proxy's principal may see.
        try:
            metadata = client.request(MetadataRequest(topics=None, allow_auto_topic_creation=False),
                                      metadata_version, MetadataResponse)
        except KafkaClientError as exc:
            hint = " (the listener wants a login: set [control_sasl])" if isinstance(exc, ConnectionClosed) \
                and not sasl.mechanism else ""
            return steps.fail("metadata", f"{exc}{hint}")
        visible = sorted((t.name or "" for t in metadata.topics if t.error_code == 0), key=lambda n: (n.startswith("_"), n))
        brokers = sorted(metadata.brokers, key=lambda b: b.node_id)
        steps.ok("metadata", f"cluster {metadata.cluster_id}, {len(brokers)} broker(s) "
                 f"({', '.join(f'{b.node_id} at {b.host}:{b.port}' for b in brokers[:5])}"
                 f"{', ...' if len(brokers) > 5 else ''}), controller "
                 f"{metadata.controller_id}, {len(visible)} topic(s) visible to the proxy's principal"
                 + ("" if visible else " (an empty cluster, or no DESCRIBE on topics)"))

        # 5. DescribeConfigs of one topic: the permission KIP-637's min_insync_replicas needs.
        chosen = topic or (config.audit.kafka_topic if config.audit.kafka_topic in visible else None) \
            or (visible[0] if visible else None)
        if chosen is None:
            steps.skip("describe_configs", "no topic to ask about: DESCRIBE_CONFIGS on topics is not checked")
        else:
            request = DescribeConfigsRequest(resources=(DescribeConfigsResource(
                resource_type=TOPIC_RESOURCE, resource_name=chosen, configuration_keys=(CONFIG_KEY,)),))
            try:
                described = client.request(request, configs_version, DescribeConfigsResponse)
            except KafkaClientError as exc:
                steps.fail("describe_configs", f"topic {chosen!r}: {exc}")
            else:
                result = described.results[0] if described.results else None
                if result is None:
                    steps.fail("describe_configs", f"topic {chosen!r}: the broker answered no result")
                elif result.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                    steps.fail("describe_configs", f"topic {chosen!r}: TOPIC_AUTHORIZATION_FAILED: {_principal(config)} "
                               "lacks DESCRIBE_CONFIGS on topics: Metadata would go out without min_insync_replicas "
                               "(KIP-637) and acks=-2 would be forwarded as -1 (grant DESCRIBE_CONFIGS on the topics)")
                elif result.error_code != 0:
                    steps.fail("describe_configs", f"topic {chosen!r}: {_error_name(result.error_code)}"
                               + (f": {result.error_message}" if result.error_message else ""))
                else:
                    value = next((c.value for c in result.configs if c.name == CONFIG_KEY), None)
                    steps.ok("describe_configs", f"topic {chosen!r}: {CONFIG_KEY} = {value}")

    # 6. Every broker at its advertised address: client connections of the proxy go there.
    unreachable = []
    for broker in brokers:
        try:
            with BlockingKafkaClient(broker.host, broker.port, timeout=timeout, client_id=CLIENT_ID, ssl_context=context):
                pass
        except KafkaClientError as exc:
            unreachable.append(f"broker {broker.node_id} at {broker.host}:{broker.port}: {exc.__cause__ or exc}")
    if unreachable:
        steps.fail("brokers", "; ".join(unreachable) + ": the proxy connects clients to the brokers' advertised "
                   "addresses (advertised.listeners of the listener in bootstrap_servers)")
    else:
        steps.ok("brokers", f"{len(brokers)} of {len(brokers)} reachable at their advertised addresses"
                 + (" (TLS)" if context is not None else ""))

    # 7. A port for every broker in each [[listener]] (node_id_ranges): `run` says the same line per broker.
    _node_ids_step(config, [b.node_id for b in brokers], steps)

    # 8. Per-broker advertised names (advertised_host with {node_id}): each must lead clients back to the proxy.
    if NODE_ID_PLACEHOLDER in config.advertised_host:
        _advertised_step(config, [b.node_id for b in brokers], steps)

    needs = "DESCRIBE on topics (Metadata) and DESCRIBE_CONFIGS on topics (KIP-637)"
    if config.audit.kafka_topic:
        needs += f", WRITE and DESCRIBE on topic {config.audit.kafka_topic!r} ([audit] kafka_topic)"
    steps.note("acls", f"the proxy's own principal, {_principal(config)}, needs {needs}")
    return not steps.failed
