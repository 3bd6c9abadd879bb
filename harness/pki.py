"""Certificates made in the test process (cryptography): short-lived ones, to the second, for rotations.

The dev cluster's certificates (openssl, devcluster/certificates.py) live for days; a rotation test
needs certificates valid for 30 s, already expired, or signed by a second CA.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Key = CertificateIssuerPrivateKeyTypes


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def key_pem(key: Key, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def load_key(pem: bytes) -> Key:
    key = serialization.load_pem_private_key(pem, None)
    # The kinds that sign certificates, named (cryptography 50 warns at a mention of its Diffie-Hellman class).
    assert isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
                      | ed448.Ed448PrivateKey), f"a {type(key).__name__} cannot sign"
    return key


@dataclass
class Ca:
    """A CA that signs certificates; from a key of its own or an existing CA's PEM files (the dev cluster's)."""

    cert: x509.Certificate
    key: Key

    @classmethod
    def new(cls, name: str = "insync-proxy test CA", valid_seconds: float = 86400) -> Ca:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(_now() - datetime.timedelta(minutes=5))
                .not_valid_after(_now() + datetime.timedelta(seconds=valid_seconds))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(cert, key)

    @classmethod
    def from_files(cls, cert: Path, key: Path) -> Ca:
        """An existing CA (e.g. the dev cluster's, whose certificate the brokers trust)."""
        return cls(x509.load_pem_x509_certificate(cert.read_bytes()), load_key(key.read_bytes()))

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, name: str, valid_seconds: float = 3600, server: bool = False,
              not_before: datetime.datetime | None = None) -> Issued:
        """A certificate CN=name (a server one for 127.0.0.1/localhost with `server`), valid `valid_seconds` from
        `not_before` (default: from now, and a minute before it for clock slack)."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or _now()
        end = start + datetime.timedelta(seconds=valid_seconds)
        if not_before is None:
            start -= datetime.timedelta(minutes=1)  # clock slack: valid from now on, wherever it is checked
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(self.cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end))
        if server:
            import ipaddress

            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        else:
            usage = [ExtendedKeyUsageOID.CLIENT_AUTH]
        cert = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False).sign(self.key, hashes.SHA256())
        return Issued(cert, key)


@dataclass
class Issued:
    cert: x509.Certificate
    key: Key

    @property
    def serial(self) -> int:
        return self.cert.serial_number

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self, password: str | None = None) -> bytes:
        return key_pem(self.key, password)

    def write(self, cert_file: Path, key_file: Path, password: str | None = None) -> None:
        """Write the pair, each file replaced whole (written aside, then renamed over), the certificate first."""
        replace_file(cert_file, self.cert_pem)
        replace_file(key_file, self.key_pem(password))


def replace_file(path: Path, data: bytes) -> None:
    """Replace a file whole, as cert-manager's volume does (never a half-written file seen by a reader)."""
    aside = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    aside.write_bytes(data)
    os.replace(aside, path)
