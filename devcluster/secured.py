"""A secured dev cluster: `dev-cluster up --security sasl_ssl|mtls|oauthbearer|gssapi` and `demo --security ...`.

The brokers get the listener of that kind beside their PLAINTEXT one (inter-broker traffic and the dev
cluster's own probe stay on PLAINTEXT), with certificates made the way the tests make them
(certificates.py); this module says what the proxy needs to reach that listener (its TOML, or the same
settings as overrides for `demo`) and what clients put in their properties to go through the proxy.

- sasl_ssl: a SASL_SSL listener (SCRAM-SHA-512) for the users `insync-proxy` (the proxy's own control
  connection) and `client`. Clients speak SASL_PLAINTEXT to the proxy (their login passes through to the
  brokers over TLS).
- mtls: an SSL listener that requires a client certificate; the proxy presents CN=insync-proxy on every
  upstream connection. Clients speak PLAINTEXT to the proxy.
- oauthbearer: a SASL_PLAINTEXT listener offering OAUTHBEARER, the brokers validating JWTs with Kafka's own
  validator (KIP-768) against a local identity provider (identity_provider.py) that issues them to the clients
  `insync-proxy` and `client` by the client-credentials grant. Clients speak SASL_PLAINTEXT (OAUTHBEARER) to the
  proxy and fetch their own tokens.
- gssapi: a SASL_PLAINTEXT listener offering GSSAPI, a real MIT KDC (kerberos.py) on 127.0.0.1, each broker
  with its own service principal kafka/kafka-N.insync.test (names mapped to 127.0.0.1 in /etc/hosts). The
  proxy logs in with its keytab and advertises each broker's port under that broker's name, so a Kerberos
  client asks for the right ticket; clients list the proxy's per-broker ports in bootstrap.servers.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from insync_proxy.devcluster.certificates import DevCertificates, make_test_certificates
from insync_proxy.devcluster.cluster import (
    ClusterSettings,
    KerberosListener,
    LocalKafkaCluster,
    OAuthBearerValidation,
    free_ports,
)

if TYPE_CHECKING:
    from insync_proxy.devcluster.identity_provider import IdentityProvider
    from insync_proxy.devcluster.kerberos import LocalKdc

SECURITY_MODES = ("sasl_ssl", "mtls", "oauthbearer", "gssapi")
#: gssapi: the brokers' (and the proxy's ports') names; {node_id} filled in.
KERBEROS_HOSTS = "kafka-{node_id}.insync.test"
#: gssapi: the proxy's per-broker ports clients use (the default [[listener]]'s broker_port_base + node id).
DEFAULT_BROKER_PORT_BASE = 9100
NODE_IDS = (1, 2, 3)
#: Days the dev cluster's certificates are valid: beyond check-config's 7-day expiry warning.
CERTIFICATE_DAYS = 30
PROXY_USER = "insync-proxy"
CLIENT_USER = "client"
MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class SecuredSetup:
    """One secured listener kind, its certificates and passwords, in `directory`."""

    security: str
    directory: Path
    certs: DevCertificates
    #: user -> password (sasl_ssl), client id -> client secret (oauthbearer).
    passwords: dict[str, str]
    #: oauthbearer: the identity provider (not serving yet: `identity_provider.start()` in this process, or its
    #: state in `directory` for the process form).
    identity_provider: IdentityProvider | None = None
    #: gssapi: the running KDC, with a keytab for each broker, the proxy and `client`.
    kdc: LocalKdc | None = None

    @property
    def proxy_password_file(self) -> Path:
        return self.directory / f"{PROXY_USER}.password"

    @property
    def client_secret_file(self) -> Path:
        return self.directory / f"{PROXY_USER}.client-secret"

    def cluster_settings(self, **base: Any) -> ClusterSettings:
        """ClusterSettings with this listener added to `base` (version, ports, data directory...)."""
        if self.kdc is not None:
            keytabs = {n: self.kdc.keytab_path(f"kafka/{_host(n)}") for n in NODE_IDS}
            return ClusterSettings(**base, kerberos=KerberosListener(self.kdc.krb5_conf, self.kdc.realm, keytabs,
                                                                     KERBEROS_HOSTS))
        if self.identity_provider is not None:
            idp = self.identity_provider
            return ClusterSettings(**base, oauthbearer=OAuthBearerValidation(idp.jwks_endpoint_url, idp.issuer,
                                                                             idp.audience))
        if self.security == "sasl_ssl":
            return ClusterSettings(**base, sasl_scram_users=self.passwords, sasl_ssl=True,
                                   tls_keystore_pem=self.certs.broker_keystore)
        return ClusterSettings(**base, tls_keystore_pem=self.certs.broker_keystore,
                               tls_client_ca_pem=self.certs.ca_cert)

    def upstream_servers(self, cluster: LocalKafkaCluster) -> str:
        """The brokers' secured listener, what the proxy's bootstrap_servers names."""
        if self.kdc is not None:
            return cluster.kerberos_bootstrap_servers
        return cluster.tls_bootstrap_servers if self.security == "mtls" else cluster.sasl_bootstrap_servers

    def proxy_settings(self, servers: str) -> dict[str, Any]:
        """The proxy's upstream settings by TOML key (what `demo` passes as overrides), towards `servers`."""
        if self.kdc is not None:
            return {"bootstrap_servers": servers, "advertised_host": KERBEROS_HOSTS,
                    "control_sasl.mechanism": "GSSAPI",
                    "control_sasl.kerberos_principal": self.kdc.principal(PROXY_USER),
                    "control_sasl.kerberos_keytab": str(self.kdc.keytab_path(PROXY_USER)),
                    "control_sasl.kerberos_krb5_conf": str(self.kdc.krb5_conf)}
        if self.identity_provider is not None:
            return {"bootstrap_servers": servers, "control_sasl.mechanism": "OAUTHBEARER",
                    "control_sasl.oauthbearer_token_endpoint_url": self.identity_provider.token_endpoint_url,
                    "control_sasl.oauthbearer_client_id": PROXY_USER,
                    "control_sasl.oauthbearer_client_secret_file": str(self.client_secret_file),
                    "control_sasl.oauthbearer_scope": "kafka"}
        settings: dict[str, Any] = {
            "bootstrap_servers": servers,
            "upstream_tls.enabled": True,
            "upstream_tls.ca_file": str(self.certs.ca_cert),
        }
        if self.security == "sasl_ssl":
            settings.update({"control_sasl.mechanism": MECHANISM, "control_sasl.username": PROXY_USER,
                             "control_sasl.password_file": str(self.proxy_password_file)})
        else:
            cert, key = self.certs.clients[PROXY_USER]
            settings.update({"upstream_tls.cert_file": str(cert), "upstream_tls.key_file": str(key)})
        return settings

    def proxy_toml(self, servers: str) -> str:
        """A proxy configuration file towards `servers` (the password in a file, never in the TOML)."""
        listed = ", ".join(f'"{s}"' for s in servers.split(","))
        tables: dict[str, list[str]] = {}
        top: list[str] = []
        for key, value in self.proxy_settings(servers).items():
            if key == "bootstrap_servers":
                continue
            table, _, name = key.rpartition(".")
            shown = "true" if value is True else f'"{value}"'
            (tables.setdefault(table, []) if table else top).append(f"{name} = {shown}")
        lines = [f"# insync-proxy in front of the dev cluster's {self.security.upper()} listener",
                 f"bootstrap_servers = [{listed}]", *top]
        for table, settings in tables.items():
            lines += ["", f"[{table}]", *settings]
        return "\n".join(lines) + "\n"

    def client_properties(self, bootstrap: str) -> str:
        """Kafka client properties (Java) of a client going through the proxy at `bootstrap`."""
        lines = [f"bootstrap.servers={bootstrap}"]
        if self.kdc is not None:
            servers = ",".join(f"{_host(n)}:{DEFAULT_BROKER_PORT_BASE + n}" for n in NODE_IDS)
            keytab, principal = self.kdc.keytab_path(CLIENT_USER), self.kdc.principal(CLIENT_USER)
            lines = ["# Kerberos: each broker's own port of the proxy, by the name of that broker's principal (a",
                     "# ticket names one broker: the bootstrap port would reach any)",
                     f"bootstrap.servers={servers}",
                     "security.protocol=SASL_PLAINTEXT", "sasl.mechanism=GSSAPI", "sasl.kerberos.service.name=kafka",
                     "sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
                     f'storeKey=true keyTab="{keytab}" principal="{principal}";',
                     f"# the JVM reads the realm from KAFKA_OPTS=-Djava.security.krb5.conf={self.kdc.krb5_conf}",
                     f"# librdkafka (with KRB5_CONFIG={self.kdc.krb5_conf}): sasl.mechanisms=GSSAPI "
                     f"sasl.kerberos.keytab={keytab} sasl.kerberos.principal={principal}"]
        elif self.identity_provider is not None:
            url, secret = self.identity_provider.token_endpoint_url, self.passwords[CLIENT_USER]
            lines += ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=OAUTHBEARER",
                      f"sasl.oauthbearer.token.endpoint.url={url}",
                      "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer."
                      "OAuthBearerLoginCallbackHandler",
                      f"sasl.oauthbearer.client.credentials.client.id={CLIENT_USER}",
                      f"sasl.oauthbearer.client.credentials.client.secret={secret}",
                      "sasl.oauthbearer.scope=kafka",
                      "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
                      "# Java clients before Kafka 4.1: the JAAS line's options instead: clientId=... clientSecret=... "
                      'scope="kafka"',
                      "# the Java client (Kafka 4) calls only the URLs its JVM allows: insync-proxy kafka-cli and "
                      f"Kafka's scripts take KAFKA_OPTS=-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={url}",
                      f"# librdkafka: sasl.oauthbearer.method=oidc sasl.oauthbearer.client.id={CLIENT_USER} "
                      f"sasl.oauthbearer.client.secret={secret} sasl.oauthbearer.token.endpoint.url={url} "
                      "sasl.oauthbearer.scope=kafka"]
        elif self.security == "sasl_ssl":
            password = self.passwords[CLIENT_USER]
            lines += ["security.protocol=SASL_PLAINTEXT", f"sasl.mechanism={MECHANISM}",
                      "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                      f'username="{CLIENT_USER}" password="{password}";',
                      f"# librdkafka: sasl.username={CLIENT_USER} sasl.password={password}"]
        else:
            lines += ["security.protocol=PLAINTEXT",
                      "# the proxy presents its certificate (CN=insync-proxy) to the brokers for every client"]
        return "\n".join(lines) + "\n"


def secured_setup(security: str, directory: Path) -> SecuredSetup:
    """Certificates (and for sasl_ssl the users' passwords) for a dev cluster with a `security` listener."""
    if security not in SECURITY_MODES:
        raise ValueError(f"security: {security!r} is not one of {', '.join(SECURITY_MODES)}")
    directory.mkdir(parents=True, exist_ok=True)
    certs = make_test_certificates(directory, (PROXY_USER,), days=CERTIFICATE_DAYS)
    passwords: dict[str, str] = {}
    if security == "oauthbearer":
        from insync_proxy.devcluster.identity_provider import IdentityProvider

        idp = IdentityProvider(port=free_ports(1)[0])
        passwords.update({name: idp.add_client(name) for name in (PROXY_USER, CLIENT_USER)})
        idp.save(directory)
        setup = SecuredSetup(security, directory, certs, passwords, idp)
        setup.client_secret_file.write_text(passwords[PROXY_USER] + "\n")
        setup.client_secret_file.chmod(0o600)
        return setup
    if security == "gssapi":
        return _kerberos_setup(directory, certs)
    setup = SecuredSetup(security, directory, certs, passwords)
    if security == "sasl_ssl":
        passwords.update({PROXY_USER: secrets.token_urlsafe(12), CLIENT_USER: secrets.token_urlsafe(12)})
        setup.proxy_password_file.write_text(passwords[PROXY_USER] + "\n")
        setup.proxy_password_file.chmod(0o600)
    return setup


def _host(node_id: int) -> str:
    return KERBEROS_HOSTS.replace("{node_id}", str(node_id))


def _kerberos_setup(directory: Path, certs: DevCertificates) -> SecuredSetup:
    """A running KDC with the brokers', the proxy's and the client's principals, and the brokers' names mapped
    to 127.0.0.1 (KdcError says what is missing: krb5kdc, or root for /etc/hosts)."""
    from insync_proxy.devcluster.kerberos import LocalKdc, ensure_hosts, install_kdc

    install_kdc()
    ensure_hosts([_host(n) for n in NODE_IDS])
    kdc = LocalKdc(directory / "kdc").start()
    try:
        for name in (*(f"kafka/{_host(n)}" for n in NODE_IDS), PROXY_USER, CLIENT_USER):
            kdc.add_principal(name)
    except BaseException:
        kdc.stop()
        raise
    return SecuredSetup("gssapi", directory, certs, {}, kdc=kdc)
