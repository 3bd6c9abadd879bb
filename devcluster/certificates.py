"""Certificates for a secured dev cluster: a throw-away CA, the brokers' certificate and client certificates.

Made with the openssl command line (no Python dependency): RSA keys in PKCS#8 (what Kafka's PEM keystore
reads), the brokers' certificate valid for 127.0.0.1 and localhost, client certificates named CN=<name>
(the principal an SSL listener with ssl.client.auth=required sees: User:CN=<name>). Test use only: the
private keys are not encrypted and live as long as the directory.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CertificateError", "DevCertificates", "make_test_certificates"]


class CertificateError(RuntimeError):
    """openssl is missing or failed; the message says which step."""


@dataclass(frozen=True)
class DevCertificates:
    """PEM files of one throw-away PKI."""

    ca_cert: Path
    #: Kafka's PEM keystore for the brokers (ssl.keystore.type=PEM): private key, certificate, CA.
    broker_keystore: Path
    broker_cert: Path
    broker_key: Path
    #: name -> (certificate, private key) of each client certificate (subject CN=name).
    clients: dict[str, tuple[Path, Path]] = field(default_factory=dict)


def _openssl(*args: str, what: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise CertificateError("the openssl command is not installed: cannot make test certificates")
    result = subprocess.run([openssl, *args], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise CertificateError(f"openssl failed making {what}: {result.stderr.strip()[-500:]}")


def _key_and_csr(directory: Path, name: str, subject: str) -> tuple[Path, Path]:
    key, csr = directory / f"{name}.key", directory / f"{name}.csr"
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key), what=f"{name} key")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr), what=f"{name} request")
    return key, csr


def _sign(directory: Path, name: str, csr: Path, ca_cert: Path, ca_key: Path, extensions: str, days: int) -> Path:
    cert, ext = directory / f"{name}.crt", directory / f"{name}.ext"
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", str(days), "-sha256", "-extfile", str(ext), "-out", str(cert), what=f"{name} certificate")
    return cert


def make_test_certificates(directory: Path, clients: tuple[str, ...] = ("insync-proxy",), days: int = 30) -> DevCertificates:
    """A CA, a broker certificate for 127.0.0.1/localhost and one client certificate per name, in `directory`,
    each valid for `days` (well past the 7 days within which check-config and run warn of an expiry)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(ca_key), what="CA key")
    _openssl("req", "-x509", "-new", "-key", str(ca_key), "-subj", "/CN=insync-proxy test CA", "-days", str(days),
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-out", str(ca_cert), what="CA certificate")
    broker_key, broker_csr = _key_and_csr(directory, "broker", "/CN=localhost")
    broker_cert = _sign(directory, "broker", broker_csr, ca_cert, ca_key,
                        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n", days)
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(broker_key.read_text() + broker_cert.read_text() + ca_cert.read_text())
    made: dict[str, tuple[Path, Path]] = {}
    for name in clients:
        key, csr = _key_and_csr(directory, name, f"/CN={name}")
        made[name] = (_sign(directory, name, csr, ca_cert, ca_key, "extendedKeyUsage=clientAuth\n", days), key)
    return DevCertificates(ca_cert=ca_cert, broker_keystore=keystore, broker_cert=broker_cert,
                           broker_key=broker_key, clients=made)
