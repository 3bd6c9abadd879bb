"""Configuration, the files it names: TLS certificates, keys and CA bundles loaded the way `run` loads them.

`validate` (schema.py) checks values; `check_files` checks what the values point at, with the very
functions `run` uses (tls.py), so `check-config` refuses what `run` would refuse, with one line naming the
setting instead of OpenSSL's words. It also reads each certificate's validity dates: a certificate that
expired or is not yet valid is refused, one that expires within `EXPIRY_WARNING_DAYS` is a warning.

The dates come from the certificates' DER (X.509's TBSCertificate: version, serial number, signature
algorithm, issuer, then validity), read with a few lines of DER here: the standard library's ssl module
parses certificates only inside a handshake, and a new dependency for two dates is not worth it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import logging
import re
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

from insync_proxy.proxy.config.settings import ENV_PREFIX, ConfigError, ProxyConfig, TlsConfig
from insync_proxy.proxy.config.tls import client_ssl_context, server_ssl_context

#: A certificate that expires within this many days is a warning (time to renew before it is an outage).
EXPIRY_WARNING_DAYS = 7

_CERTIFICATE = re.compile(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.S)
_PRIVATE_KEY = re.compile(r"-----BEGIN ((?:ENCRYPTED |RSA |EC |DSA )?PRIVATE KEY)-----")


def check_files(config: ProxyConfig, now: datetime.datetime | None = None) -> list[str]:
    """Load each side's TLS files as `run` does; ConfigError naming the setting when one is unusable.
    Returns warnings (one line each): certificates that expire within EXPIRY_WARNING_DAYS, TLS files named
    on a side whose TLS is off."""
    now = now or datetime.datetime.now(datetime.UTC)
    warnings: list[str] = []
    _check_side("upstream_tls", config.upstream_tls, lambda: client_ssl_context(config.upstream_tls), now, warnings)
    _check_side("downstream_tls", config.downstream_tls, lambda: server_ssl_context(config.downstream_tls), now,
                warnings)
    return warnings


def _check_side(side: str, tls: TlsConfig, load: Callable[[], ssl.SSLContext | None],
                now: datetime.datetime, warnings: list[str]) -> None:
    if not tls.enabled:
        named = [attr for attr in ("ca_file", "cert_file", "key_file") if getattr(tls, attr)]
        if named:  # a forgotten `enabled = true` shows later as a plaintext connection to a TLS port
            warnings.append(f"{side}.{named[0]} is set but {side}.enabled = false: the TLS files are not used "
                            f"(set {side}.enabled = true to use them)")
        return
    if tls.ca_file:
        _check_ca_file(f"{side}.ca_file", tls.ca_file, now, warnings)
    if tls.cert_file:
        _check_certificates(f"{side}.cert_file", tls.cert_file, now, warnings)
    if tls.key_file:
        _check_key_file(side, tls)
    try:
        with _quiet(logging.getLogger("insync_proxy")):  # run logs what tls.py says; a check says it as errors
            load()
    except ssl.SSLError as exc:
        raise ConfigError(_tls_error(side, tls, exc)) from None
    except OSError as exc:
        raise ConfigError(f"{side}: cannot read its files ({exc.strerror or exc})") from None


def _tls_error(side: str, tls: TlsConfig, exc: ssl.SSLError) -> str:
    """OpenSSL's reason in words naming the setting at fault."""
    reason, text = exc.reason or "", str(exc)
    if reason == "KEY_VALUES_MISMATCH":
        return (f"{side}.key_file = {tls.key_file!r} is not the key of {side}.cert_file = {tls.cert_file!r} "
                "(give the key the certificate was made for)")
    if reason in ("BAD_DECRYPT", "BAD_PASSWORD_READ") or (tls.key_password and "PEM lib" in text):
        return f"{side}.key_password does not decrypt {side}.key_file = {tls.key_file!r} (a wrong password?)"
    if reason == "NO_CERTIFICATE_OR_CRL_FOUND":
        return f"{side}.ca_file = {tls.ca_file!r}: no PEM certificate in it"
    return f"{side}: cannot load cert_file/key_file/ca_file ({text})"


@contextlib.contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    """No log lines from `logger` inside: a check loads contexts only to see that they load."""

    def drop(record: logging.LogRecord) -> bool:
        return False

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _read(setting: str, path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError as exc:
        raise ConfigError(f"{setting} = {path!r}: cannot read it ({exc.strerror or exc})") from None


def _check_ca_file(setting: str, path: str, now: datetime.datetime, warnings: list[str]) -> None:
    """A CA bundle: PEM certificates OpenSSL accepts; refused when none of them is valid now."""
    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError as exc:
        raise ConfigError(f"{setting} = {path!r}: not a PEM CA bundle OpenSSL can read "
                          f"({exc.reason or exc}); expected -----BEGIN CERTIFICATE----- blocks") from None
    except OSError as exc:
        raise ConfigError(f"{setting} = {path!r}: cannot read it ({exc.strerror or exc})") from None
    dates = [_validity(setting, path, i, der) for i, der in enumerate(_pem_certificates(setting, path))]
    usable = [d for d in dates if d[0] <= now < d[1]]
    if dates and not usable:
        raise ConfigError(_expired_message(setting, path, dates[0], now, len(dates)))
    for _, not_after in usable:
        _warn_soon(setting, path, not_after, now, warnings)


def _check_certificates(setting: str, path: str, now: datetime.datetime, warnings: list[str]) -> None:
    """The certificate the proxy presents and its chain: each valid now."""
    ders = _pem_certificates(setting, path)
    if not ders:
        raise ConfigError(f"{setting} = {path!r}: no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)")
    for i, der in enumerate(ders):
        dates = _validity(setting, path, i, der)
        if not dates[0] <= now < dates[1]:
            raise ConfigError(_expired_message(setting, path, dates, now, 1, i))
        _warn_soon(setting, path, dates[1], now, warnings, i)


def _check_key_file(side: str, tls: TlsConfig) -> None:
    assert tls.key_file
    text = _read(f"{side}.key_file", tls.key_file)
    found = _PRIVATE_KEY.search(text)
    if found is None:
        raise ConfigError(f"{side}.key_file = {tls.key_file!r}: no PEM private key in it "
                          "(expected -----BEGIN PRIVATE KEY-----)")
    encrypted = found.group(1).startswith("ENCRYPTED") or "Proc-Type: 4,ENCRYPTED" in text
    if encrypted and not tls.key_password:
        # Without a password OpenSSL would ask for one on the terminal: a service has none.
        variable = f"{ENV_PREFIX}{side.upper()}_KEY_PASSWORD"
        raise ConfigError(f"{side}.key_file = {tls.key_file!r} is encrypted: set {side}.key_password_file "
                          f"(or {variable})")


def _pem_certificates(setting: str, path: str) -> list[bytes]:
    ders = []
    for block in _CERTIFICATE.findall(_read(setting, path)):
        try:
            ders.append(base64.b64decode("".join(block.split()), validate=True))
        except (binascii.Error, ValueError):
            raise ConfigError(f"{setting} = {path!r}: a certificate block is not valid base64 (PEM)") from None
    return ders


def _expired_message(setting: str, path: str, dates: tuple[datetime.datetime, datetime.datetime],
                     now: datetime.datetime, count: int, index: int = 0) -> str:
    which = "every certificate in it" if count > 1 else ("its certificate" if index == 0
                                                        else f"certificate {index + 1} of its chain")
    if now < dates[0]:
        return f"{setting} = {path!r}: {which} is not valid before {_day(dates[0])} (the clock, or a renewal too early?)"
    return f"{setting} = {path!r}: {which} expired on {_day(dates[1])}: renew it"


def _warn_soon(setting: str, path: str, not_after: datetime.datetime, now: datetime.datetime,
               warnings: list[str], index: int = 0) -> None:
    if not_after - now < datetime.timedelta(days=EXPIRY_WARNING_DAYS):
        which = "its certificate" if index == 0 else f"certificate {index + 1} of it"
        warnings.append(f"{setting} = {path!r}: {which} expires on {_day(not_after)} (in less than "
                        f"{EXPIRY_WARNING_DAYS} days): renew it")


def _day(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


# ------------------------------------------------------------------------------------ DER, just enough


def _validity(setting: str, path: str, index: int, der: bytes) -> tuple[datetime.datetime, datetime.datetime]:
    """(notBefore, notAfter) of one DER certificate; ConfigError when it is not an X.509 certificate."""
    try:
        return certificate_validity(der)
    except ValueError as exc:
        raise ConfigError(f"{setting} = {path!r}: certificate {index + 1} is not an X.509 certificate ({exc})") \
            from None


def certificate_validity(der: bytes) -> tuple[datetime.datetime, datetime.datetime]:
    """notBefore and notAfter (UTC) of an X.509 certificate in DER; ValueError when the DER is not one."""
    _, body, _ = _tlv(der, 0, 0x30)  # Certificate
    _, tbs, _ = _tlv(der, body, 0x30)  # TBSCertificate
    at = tbs
    if der[at:at + 1] == b"\xa0":  # [0] EXPLICIT version, absent in v1 certificates
        at = _tlv(der, at, 0xA0)[2]
    at = _tlv(der, at, 0x02)[2]  # serialNumber
    at = _tlv(der, at, 0x30)[2]  # signature AlgorithmIdentifier
    at = _tlv(der, at, 0x30)[2]  # issuer Name
    _, validity, _ = _tlv(der, at, 0x30)
    not_before, start, end = _time(der, validity)
    not_after, _, _ = _time(der, end)
    return not_before, not_after


def _tlv(der: bytes, at: int, tag: int) -> tuple[int, int, int]:
    """(tag, start of the content, end of the element) of the DER element at `at`, which must be `tag`."""
    if at + 2 > len(der) or der[at] != tag:
        raise ValueError(f"expected DER tag 0x{tag:02x} at byte {at}")
    length, start = der[at + 1], at + 2
    if length & 0x80:
        size = length & 0x7F
        if not 0 < size <= 4 or start + size > len(der):
            raise ValueError(f"bad DER length at byte {at}")
        length, start = int.from_bytes(der[start:start + size], "big"), start + size
    if start + length > len(der):
        raise ValueError(f"DER element at byte {at} runs past the end")
    return tag, start, start + length


def _time(der: bytes, at: int) -> tuple[datetime.datetime, int, int]:
    """An X.509 Time (UTCTime or GeneralizedTime, UTC, to the second) at `at`."""
    if der[at:at + 1] == b"\x17":
        _, start, end = _tlv(der, at, 0x17)
        text = der[start:end].decode("ascii")
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"  # RFC 5280: YY >= 50 is 19YY
    else:
        _, start, end = _tlv(der, at, 0x18)
        text = der[start:end].decode("ascii")
    try:
        moment = datetime.datetime.strptime(text, "%Y%m%d%H%M%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        raise ValueError(f"unreadable time {text!r}") from None
    return moment, start, end
