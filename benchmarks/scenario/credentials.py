"""Who is who in the run: the SASL users and their passwords, and the certificates on both legs (the brokers' CA,
keystores and truststores, the proxy's client and server certificates, the CAs its clients trust), with the TLS
probe that tells which certificate a listener presents."""

from __future__ import annotations

import secrets
import shutil
import socket
import ssl
import struct
from dataclasses import dataclass, field
from pathlib import Path

from harness.pki import Ca, key_pem, replace_file
from insync_proxy.devcluster.certificates import _key_and_csr, _sign, make_test_certificates

PROXY_USER, CLIENT_USER, SAMPLER_USER = "insync-proxy", "client", "sampler"
MECHANISM = "SCRAM-SHA-512"
#: The brokers' SASL_SSL listener asks for a client certificate (KIP-684): the brokers' truststore decides who
#: may connect, so a CA change locks out a proxy still presenting the old CA's certificate.
BROKER_EXTENSIONS = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
TRUSTSTORE = "listener.name.sasl.ssl.truststore.location"
KEYSTORE = "listener.name.sasl.ssl.keystore.location"


@dataclass
class Users:
    """SCRAM-SHA-512 for the proxy's control login and the clients, PLAIN for the runner's own samplers."""

    scram: dict[str, str] = field(default_factory=lambda: {PROXY_USER: secrets.token_urlsafe(12),
                                                           CLIENT_USER: secrets.token_urlsafe(12)})
    sampler_password: str = field(default_factory=lambda: secrets.token_urlsafe(12))

    @property
    def client_password(self) -> str:
        return self.scram[CLIENT_USER]

    def client_jaas(self) -> str:
        """A Java client's sasl.jaas.config line for the clients' SCRAM user."""
        return ("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                f'required username="{CLIENT_USER}" password="{self.client_password}";\n')


def certificate_serial(pem: Path) -> int:
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem.read_bytes()).serial_number


def tls_probe(port: int, trust: Path, client: tuple[Path, Path] | None = None, timeout: float = 10) -> int:
    """The serial of the certificate a TLS server on 127.0.0.1:`port` presents to a new connection, after an
    ApiVersions v0 was answered over it; ssl.SSLError or ConnectionError when the server refuses `client`'s
    certificate (TLS 1.3 says so at the first read, after the handshake)."""
    from cryptography import x509

    context = ssl.create_default_context(cafile=str(trust))
    if client is not None:
        context.load_cert_chain(str(client[0]), str(client[1]))
    with socket.create_connection(("127.0.0.1", port), timeout) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(True)
        request = struct.pack(">hhih", 18, 0, 1, -1)  # ApiVersions v0, correlation id 1, no client id
        tls.sendall(struct.pack(">i", len(request)) + request)
        if len(tls.recv(4)) != 4:
            raise ConnectionError("the server closed the connection")
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


class RunCertificates:
    """Both legs' certificates and the files that name them. Upstream: the brokers' CA (a new one at each CA
    change, openssl like the dev cluster's), the brokers' PEM keystores, the proxy's client certificate and the
    CA bundle it trusts. Downstream: two CAs of the proxy's own, both in the bundle its clients trust from the
    start (a bundle handed out ahead of a CA change), and the proxy's server certificate of one of them.
    Files the proxy reads keep their names and are replaced whole; each broker keystore or truststore is a new
    file, named to the brokers by a dynamic config."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        first = make_test_certificates(directory / "ca-1", ())
        self.generation = 1
        self.ca_cert, self.ca_key = first.ca_cert, directory / "ca-1" / "ca.key"
        self.broker_keystore = first.broker_keystore
        self.upstream_ca = directory / "upstream-ca.pem"
        self.upstream_ca.write_bytes(self.ca_cert.read_bytes())
        self.broker_trust = self.bundle("broker-trust-1.pem", self.ca_cert)
        self.proxy_cert, self.proxy_key = directory / "proxy-client.crt", directory / "proxy-client.key"
        self.direct_cert, self.direct_key = directory / "direct-client.crt", directory / "direct-client.key"
        #: bumped when the direct latency producer must start again with a new client certificate (a CA change)
        self.direct_generation = 0
        self.issue_client(self.proxy_cert, self.proxy_key, PROXY_USER)
        self.issue_client(self.direct_cert, self.direct_key, "year-direct")
        self.downstream = [Ca.new("insync-proxy year downstream CA 1", 366 * 86400),
                           Ca.new("insync-proxy year downstream CA 2", 366 * 86400)]
        self.downstream_index = 0
        self.client_trust = directory / "clients-trust.pem"
        self.client_trust.write_bytes(b"".join(ca.pem for ca in self.downstream))
        self.server_cert, self.server_key = directory / "proxy-server.crt", directory / "proxy-server.key"
        self.issue_server()

    def bundle(self, name: str, *cas: Path) -> Path:
        path = self.dir / name
        path.write_bytes(b"".join(ca.read_bytes() for ca in cas))
        return path

    def issue_client(self, cert: Path, key: Path, name: str, ca: tuple[Path, Path] | None = None) -> int:
        issued = Ca.from_files(*(ca or (self.ca_cert, self.ca_key))).issue(name, valid_seconds=30 * 86400)
        issued.write(cert, key)
        return int(issued.serial)

    def issue_server(self) -> int:
        issued = self.downstream[self.downstream_index].issue("localhost", valid_seconds=30 * 86400, server=True)
        issued.write(self.server_cert, self.server_key)
        return int(issued.serial)

    def reissue_direct(self) -> None:
        """A new certificate for the direct latency producer from the current CA; it starts again with it."""
        self.issue_client(self.direct_cert, self.direct_key, "year-direct")
        self.direct_generation += 1

    def new_ca(self) -> tuple[Path, Path]:
        """The next generation's CA, of its own name (a real CA change brings one: no certificate can be taken for
        the other CA's), written beside the others: (certificate, key)."""
        self.generation += 1
        g = self.generation
        ca = Ca.new(f"insync-proxy year CA {g}", 366 * 86400)
        new_ca = (self.dir / f"ca-{g}.crt", self.dir / f"ca-{g}.key")
        new_ca[0].write_bytes(ca.pem)
        new_ca[1].write_bytes(key_pem(ca.key))
        return new_ca

    def trust_upstream(self, bundle: Path) -> None:
        """The CAs the proxy trusts upstream become `bundle`'s (its ca_file replaced whole)."""
        replace_file(self.upstream_ca, bundle.read_bytes())

    def install_proxy_client(self, staged: tuple[Path, Path]) -> None:
        """The proxy's client certificate and key become `staged`'s (both files replaced whole)."""
        replace_file(self.proxy_cert, staged[0].read_bytes())
        replace_file(self.proxy_key, staged[1].read_bytes())

    def new_broker_keystore(self, name: str) -> tuple[Path, int]:
        """A new key and certificate for the brokers from the current CA, same subject and names as the first
        (Kafka refuses a dynamic keystore whose DN or SANs changed)."""
        directory = self.dir / name
        directory.mkdir(parents=True, exist_ok=True)
        key, csr = _key_and_csr(directory, "broker", "/CN=localhost")
        cert = _sign(directory, "broker", csr, self.ca_cert, self.ca_key, BROKER_EXTENSIONS, 30)
        keystore = directory / "broker-keystore.pem"
        keystore.write_text(key.read_text() + cert.read_text() + self.ca_cert.read_text())
        return keystore, certificate_serial(cert)

    def keep(self, cert: Path, key: Path, name: str) -> tuple[Path, Path]:
        """A copy of a pair as it is now (the old certificate, to show it is refused after a CA change)."""
        kept = (self.dir / f"{name}.crt", self.dir / f"{name}.key")
        shutil.copyfile(cert, kept[0])
        shutil.copyfile(key, kept[1])
        return kept
