"""TLS of the proxy, made in one place: `run` (the client listeners and every upstream connection) and
`check-config --connect` (preflight) load certificates, keys and CA bundles the same way.

A sidecar outlives its certificates (cert-manager, Vault or a platform CA rotate them every few days), so
`run` holds each side's material in a `TlsMaterial`: its files are re-read when their content changes
(Kubernetes swaps a symlink, so content, not mtime, says so) and a new pair replaces the old only once it
loads, matches and has not expired. New connections take the current context; established ones keep theirs.
"""

from __future__ import annotations

import hashlib
import logging
import re
import ssl
import time
import weakref
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from insync_proxy.proxy.config.settings import TlsConfig, UpstreamTlsConfig

log = logging.getLogger("insync_proxy")

Side = Literal["upstream_tls", "downstream_tls"]


#: What a TLS handshake that met a closed connection most likely means (the opposite mistake, plaintext towards
#: a TLS port, is named by check-config --connect's api_versions step).
PLAINTEXT_LISTENER_HINT = ("the broker's listener may be PLAINTEXT or SASL_PLAINTEXT (no TLS): set "
                           "upstream_tls.enabled = false, or use the port of its SSL or SASL_SSL listener")


def closed_during_handshake(exc: BaseException) -> bool:
    """The peer closed (FIN: UNEXPECTED_EOF) or reset the connection during our TLS handshake, as a Kafka
    PLAINTEXT listener does when it reads a ClientHello as a frame size far above socket.request.max.bytes."""
    if isinstance(exc, ssl.SSLError):
        return isinstance(exc, ssl.SSLEOFError) or exc.reason == "UNEXPECTED_EOF_WHILE_READING"
    return isinstance(exc, ConnectionResetError | ConnectionAbortedError | BrokenPipeError)


def client_ssl_context(tls: UpstreamTlsConfig) -> ssl.SSLContext | None:
    """Upstream TLS: trust ca_file (else the system store), optional client cert, hostname checked."""
    if not tls.enabled:
        return None
    context = ssl.create_default_context(cafile=tls.ca_file)
    context.check_hostname = tls.check_hostname
    if not tls.check_hostname:
        log.warning("upstream TLS hostname verification is OFF (upstream_tls.check_hostname = false)")
    if tls.cert_file:
        context.load_cert_chain(tls.cert_file, tls.key_file, password=tls.key_password)
    return context


def server_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """Downstream TLS: the proxy's own certificate and key; with ca_file, clients must present a certificate."""
    if not tls.enabled:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    assert tls.cert_file
    context.load_cert_chain(tls.cert_file, tls.key_file, password=tls.key_password)
    if tls.ca_file:
        context.load_verify_locations(tls.ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


# ------------------------------------------------------------------------------------- certificate facts

_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n(.+?)\r?\n-----END CERTIFICATE-----", re.S)


@dataclass(frozen=True)
class Certificate:
    """What the proxy needs to know of one certificate: its serial number and validity (UNIX seconds)."""

    serial: int
    not_before: float
    not_after: float


def _der_item(data: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the DER item at `at`."""
    tag, length = data[at], data[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[at:at + count], "big")
        at += count
    if at + length > len(data):
        raise ValueError("truncated DER")
    return tag, at, at + length


def _der_time(tag: int, text: bytes) -> float:
    value = text.decode("ascii")
    layout = "%y%m%d%H%M%SZ" if tag == 0x17 else "%Y%m%d%H%M%SZ"  # UTCTime, else GeneralizedTime
    return datetime.strptime(value, layout).replace(tzinfo=UTC).timestamp()


def parse_certificate(der: bytes) -> Certificate:
    """Serial and validity of a DER certificate (X.509: Certificate -> TBSCertificate -> serial, validity)."""
    _, start, _ = _der_item(der, 0)  # Certificate
    _, at, _ = _der_item(der, start)  # TBSCertificate
    tag, begin, end = _der_item(der, at)
    if tag == 0xA0:  # [0] version, then the serial
        tag, begin, end = _der_item(der, end)
    serial = int.from_bytes(der[begin:end], "big", signed=True)
    _, _, end = _der_item(der, end)  # signature algorithm
    _, _, end = _der_item(der, end)  # issuer
    _, begin, _ = _der_item(der, end)  # validity
    tag_before, b0, b1 = _der_item(der, begin)
    tag_after, a0, a1 = _der_item(der, b1)
    return Certificate(serial, _der_time(tag_before, der[b0:b1]), _der_time(tag_after, der[a0:a1]))


def pem_certificates(pem: bytes, what: str) -> list[Certificate]:
    """Every certificate of a PEM file; ValueError (saying why, e.g. a truncated file) when there is none or
    one does not parse."""
    blocks = _PEM_CERT.findall(pem)
    if not blocks:
        raise ValueError(f"{what} holds no complete PEM certificate (empty or truncated?)")
    certificates = []
    for block in blocks:
        try:
            der = ssl.PEM_cert_to_DER_cert("-----BEGIN CERTIFICATE-----\n" + block.decode("ascii")
                                           + "\n-----END CERTIFICATE-----\n")
            certificates.append(parse_certificate(der))
        except (ValueError, IndexError, UnicodeDecodeError) as exc:
            raise ValueError(f"{what} holds a certificate that does not parse ({exc})") from None
    return certificates


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------- reloadable material


class TlsReloadError(ValueError):
    """New TLS material that must not replace the working one; the message names the setting and why."""


@dataclass(frozen=True)
class Loaded:
    """One generation of a side's TLS material."""

    context: ssl.SSLContext | None
    #: Content hash of every file and the settings it came from: equal hashes, nothing to do.
    fingerprint: str
    #: The certificate the proxy presents (cert_file's first), if any.
    certificate: Certificate | None
    #: The CA certificate of ca_file that expires first, if any.
    ca: Certificate | None


def _read(tls: TlsConfig, side: Side) -> tuple[dict[str, bytes], str]:
    """The bytes of every file of the side, and their fingerprint (with the settings naming them)."""
    contents: dict[str, bytes] = {}
    digest = hashlib.sha256(repr(replace(tls, key_password=None)).encode())
    if tls.key_password and not tls.key_password_file:
        digest.update(hashlib.sha256(tls.key_password.encode()).digest())
    for attr in ("ca_file", "cert_file", "key_file", "key_password_file"):
        path = getattr(tls, attr)
        if not path or not tls.enabled:
            continue
        try:
            contents[attr] = Path(path).read_bytes()
        except OSError as exc:
            raise TlsReloadError(f"{side}.{attr} = {path!r}: cannot read it ({exc.strerror or exc})") from None
        digest.update(attr.encode() + b"\0" + hashlib.sha256(contents[attr]).digest())
    return contents, digest.hexdigest()


def load_material(tls: TlsConfig, side: Side, now: float | None = None) -> Loaded:
    """Read, check and load one side's files; TlsReloadError naming the setting when they must not be used:
    unreadable, no complete certificate, expired, or a key that does not belong to the certificate."""
    now = time.time() if now is None else now
    contents, fingerprint = _read(tls, side)
    if not tls.enabled:
        return Loaded(None, fingerprint, None, None)
    certificate = ca = None
    if "cert_file" in contents:
        certificate = pem_certificates_named(contents["cert_file"], f"{side}.cert_file = {tls.cert_file!r}")[0]
        if certificate.not_after <= now:
            raise TlsReloadError(f"{side}.cert_file = {tls.cert_file!r}: the certificate (serial "
                                 f"{certificate.serial:x}) expired at {_utc(certificate.not_after)}")
    if "ca_file" in contents:
        cas = pem_certificates_named(contents["ca_file"], f"{side}.ca_file = {tls.ca_file!r}")
        valid = [c for c in cas if c.not_after > now]
        if not valid:
            raise TlsReloadError(f"{side}.ca_file = {tls.ca_file!r}: every CA certificate in it has expired "
                                 f"(the last at {_utc(max(c.not_after for c in cas))})")
        ca = min(valid, key=lambda c: c.not_after)
    given = tls
    if "key_password_file" in contents:  # the file's content now, not the password read at start
        password = contents["key_password_file"].decode("utf-8", "replace").rstrip("\r\n")
        tls = replace(tls, key_password=password)
    try:
        if side == "upstream_tls":
            context = client_ssl_context(tls if isinstance(tls, UpstreamTlsConfig)
                                         else UpstreamTlsConfig(**{f.name: getattr(tls, f.name) for f in fields(tls)}))
        else:
            context = server_ssl_context(tls)
    except ssl.SSLError as exc:
        why = "the key does not belong to the certificate (half-written pair?)" if "KEY_VALUES_MISMATCH" in str(exc) \
            else f"the certificate, its key or the key's password does not load ({exc.reason or exc})"
        raise TlsReloadError(f"{side}.cert_file/key_file = {tls.cert_file!r}/{tls.key_file!r}: {why}") from None
    except (OSError, ValueError) as exc:
        raise TlsReloadError(f"{side}: cannot load its files ({exc})") from None
    # A file changed while it was loaded (a rotation in progress): the next check loads it whole.
    if _read(given, side)[1] != fingerprint:
        raise _Changing()
    return Loaded(context, fingerprint, certificate, ca)


def pem_certificates_named(pem: bytes, what: str) -> list[Certificate]:
    """`pem_certificates`, its ValueError as the TlsReloadError of a reload."""
    try:
        return pem_certificates(pem, what)
    except ValueError as exc:
        raise TlsReloadError(str(exc)) from None


class _Changing(Exception):
    """The files changed while being loaded: not an error, the next check tries again."""


Outcome = Literal["unchanged", "reloaded", "failed"]


class TlsMaterial:
    """The current TLS context of one side, replaced when its files change and the new ones load.

    Upstream connections take `context` when they connect. A listener keeps the context it was created with,
    so listeners get `listener_context()`: its SNI callback (OpenSSL calls it on every handshake, SNI or not)
    hands each new client connection the current context.
    """

    def __init__(self, side: Side, tls: TlsConfig) -> None:
        """Load the files once (TlsReloadError when they cannot be used: the proxy does not start)."""
        self.side: Side = side
        self.tls = tls
        self.current = load_material(tls, side)
        #: The fingerprint of the material that failed last (logged once, until the files change again).
        self.failed_fingerprint: str | None = None
        self.failure: str | None = None
        #: Every context handed out -> the certificate it presents: tells which one a connection used.
        self.presented: weakref.WeakKeyDictionary[ssl.SSLContext, Certificate | None] = weakref.WeakKeyDictionary()
        self._note(self.current)
        self._front: ssl.SSLContext | None = None

    @property
    def context(self) -> ssl.SSLContext | None:
        """The context new connections use (None: plaintext)."""
        return self.current.context

    def listener_context(self) -> ssl.SSLContext | None:
        """The context to create a listener with: it hands every new connection the current context."""
        if self.current.context is None:
            return None
        if self._front is None:
            self._front = self.current.context
            self._front.sni_callback = self._pick
        return self._front

    def _pick(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
              context: ssl.SSLContext) -> None:
        current = self.current.context
        if current is not None and current is not context:
            connection.context = current

    def _note(self, loaded: Loaded) -> None:
        if loaded.context is not None:
            self.presented[loaded.context] = loaded.certificate

    def check(self, tls: TlsConfig | None = None, force: bool = False) -> tuple[Outcome, str]:
        """Re-read the files (of `tls`, new settings, when given); swap in new material that loads.

        ("unchanged", ""), ("reloaded", what changed) or ("failed", why: the old material stays). A failure
        is reported once per content: the same broken files are not reported again unless `force`.
        """
        tls = self.tls if tls is None else tls
        try:
            _, fingerprint = _read(tls, self.side)
        except TlsReloadError as exc:
            return self._failed(f"unreadable:{exc}", str(exc), force)
        if fingerprint == self.current.fingerprint:
            self.failed_fingerprint = self.failure = None
            return "unchanged", ""
        if fingerprint == self.failed_fingerprint and not force:
            return "unchanged", ""
        try:
            loaded = load_material(tls, self.side)
        except _Changing:
            return "unchanged", ""
        except TlsReloadError as exc:
            return self._failed(fingerprint, str(exc), force)
        old = self.current
        self.current, self.tls = loaded, tls
        self.failed_fingerprint = self.failure = None
        self._note(loaded)
        return "reloaded", self._describe(old, loaded)

    def _failed(self, fingerprint: str, why: str, force: bool) -> tuple[Outcome, str]:
        if fingerprint == self.failed_fingerprint and not force:
            return "unchanged", ""
        self.failed_fingerprint, self.failure = fingerprint, why
        return "failed", why

    def _describe(self, old: Loaded, new: Loaded) -> str:
        parts = []
        if new.certificate is not None and (old.certificate is None or new.certificate != old.certificate):
            parts.append(f"certificate serial {new.certificate.serial:x} valid until {_utc(new.certificate.not_after)}")
        if new.ca != old.ca:
            parts.append("CA bundle" + (f" (first expiry {_utc(new.ca.not_after)})" if new.ca else ""))
        return f"{self.side}: " + (", ".join(parts) or "files changed") + "; new connections use it"
