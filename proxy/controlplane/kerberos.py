"""SASL GSSAPI (Kerberos V5, RFC 4752) for the proxy's own login: the client side.

Client connections never come here: their SASL frames pass through the proxy untouched. After a
SaslHandshake that chose GSSAPI, gssapi_exchange() runs the GSS-API context establishment with the
broker's service principal (`<service_name>/<broker host>@REALM`), then RFC 4752's security-layer
negotiation (the proxy never asks for a security layer: integrity and privacy come from TLS, if any).

Credentials come from a keytab through MIT's credential store extension: the keytab is the client keytab and
the tickets live in a MEMORY credential cache of this process (one per principal and keytab), so nothing
depends on `kinit`, on KRB5CCNAME or on KRB5_CLIENT_KTNAME; MIT renews the tickets from the keytab as they
near their end. Without a keytab the default credential cache is used (whatever `kinit` put there).

krb5.conf: libkrb5 reads KRB5_CONFIG each time it makes a context, and there is no other way to name the
file to GSS-API; a login with `krb5_conf` therefore sets os.environ["KRB5_CONFIG"] (process-wide) before
its first use. One process has one krb5.conf: the proxy has one login, so it is set once. The broker's host
name is used as given (the krb5.conf should say `dns_canonicalize_hostname = false` and `rdns = false`): it
must be the host part of the brokers' principals, i.e. what they advertise.

Blocking work (keytab and KDC exchanges: the first context step asks the KDC for tickets) runs in a thread
(asyncio.to_thread), never on the event loop. Failures raise KerberosError with one line saying what is
wrong and what to do (no traceback for the user).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import gssapi
    from gssapi.raw.misc import GSSError

__all__ = ["KerberosError", "KerberosLogin", "explain", "gssapi_exchange", "use_krb5_conf"]

#: RFC 4752 section 3.3: the security layer bit for "no security layer".
NO_SECURITY_LAYER = 0x01

# MIT krb5 error codes (com_err table krb5, <krb5/krb5.h>) as GSS-API minor status codes.
KRB5KDC_ERR_C_PRINCIPAL_UNKNOWN = -1765328378
KRB5KDC_ERR_S_PRINCIPAL_UNKNOWN = -1765328377
KRB5KDC_ERR_CLIENT_REVOKED = -1765328366
KRB5KDC_ERR_PREAUTH_FAILED = -1765328360
KRB5KRB_AP_ERR_BAD_INTEGRITY = -1765328353
KRB5KRB_AP_ERR_SKEW = -1765328347
KRB5_KDCREP_SKEW = -1765328236
KRB5_REALM_UNKNOWN = -1765328230
KRB5_KDC_UNREACH = -1765328228
KRB5_KT_NOTFOUND = -1765328203
KRB5_FCC_NOFILE = -1765328189
KRB5_REALM_CANT_RESOLVE = -1765328164
KRB5_CONFIG_NODEFREALM = -1765328160

_CONFIG_LOCK = threading.Lock()


@dataclass(frozen=True)
class KerberosLogin:
    """The proxy's Kerberos identity towards the brokers."""

    principal: str  # e.g. "insync-proxy@INSYNC.TEST"
    keytab: str | None  # path; None: the default credential cache
    service_name: str = "kafka"
    krb5_conf: str | None = None


class KerberosError(Exception):
    """The Kerberos login failed; the message is one line that says why and what to do."""


def use_krb5_conf(path: str) -> None:
    """Make libkrb5 read `path` (KRB5_CONFIG, process-wide) from its next context on."""
    with _CONFIG_LOCK:
        if os.environ.get("KRB5_CONFIG") != path:
            if not os.path.isfile(path):
                raise KerberosError(f"krb5.conf {path} does not exist")
            os.environ["KRB5_CONFIG"] = path


def _require_gssapi() -> None:
    """KerberosError when the gssapi package (an optional dependency) is missing."""
    try:
        import gssapi  # noqa: F401
    except ImportError:
        raise KerberosError("Kerberos (GSSAPI) needs the gssapi package: pip install gssapi "
                            "(it builds against libkrb5-dev / krb5-devel)") from None


def _ccache_name(login: KerberosLogin) -> str:
    """The MEMORY credential cache of a login: the same for the same principal and keytab, so later logins
    reuse the tickets; never the cache of another login of the process."""
    digest = hashlib.sha256(f"{login.principal}\0{login.keytab}".encode()).hexdigest()[:16]
    return f"MEMORY:insync-proxy-{digest}"


def _realm(principal: str) -> str:
    return principal.rsplit("@", 1)[1] if "@" in principal else "the default realm"


def _signed(code: int) -> int:
    """A minor status as libkrb5's (signed 32-bit) error code: python-gssapi gives it unsigned."""
    return code - 2**32 if code >= 2**31 else code


def _minor_text(exc: GSSError) -> str:
    """libkrb5's own text of the minor status, e.g. "Server kafka/x@R not found in Kerberos database".

    Made when the exception was (MIT keeps the detailed text per thread: asking again from another thread,
    e.g. the event loop's, gives only the generic one)."""
    found = re.search(r"Minor \(\d+\): (.*)$", str(exc), re.S)
    if found:
        return found.group(1).strip()
    return "; ".join(exc.get_all_statuses(exc.min_code, False)) or f"minor code {exc.min_code}"


def explain(exc: GSSError, login: KerberosLogin, broker_host: str) -> KerberosError:
    """One line for a GSS-API failure: the usual causes by name, with what to do; others with libkrb5's text."""
    code = _signed(exc.min_code)
    realm = _realm(login.principal)
    keytab = login.keytab
    text = _minor_text(exc)
    if code in (KRB5KRB_AP_ERR_SKEW, KRB5_KDCREP_SKEW):
        return KerberosError("clock skew too great: the proxy's clock and the KDC's differ by more than 5 minutes: "
                             "sync the clocks (NTP)")
    if code == KRB5KDC_ERR_S_PRINCIPAL_UNKNOWN:
        found = re.search(r"Server (\S+) not found", text)
        service = found.group(1) if found else f"{login.service_name}/{broker_host}@{realm}"
        if service.startswith("krbtgt/"):
            return KerberosError(
                f"host {broker_host} is in no realm the KDC knows (krb5.conf's [domain_realm] maps it elsewhere, so "
                f"the KDC was asked for {service}): the brokers' principals use another host name: connect by "
                "those names, or set control_sasl.kerberos_service_host (e.g. {label}.example.com)")
        return KerberosError(
            f"no service principal {service}: the brokers' principals use another host name than {broker_host}: "
            "connect by the names in their principals, or set control_sasl.kerberos_service_host (e.g. "
            "{label}.example.com)")
    if code == KRB5_KDC_UNREACH:
        found = re.search(r"realm '([^']*)'", text)
        return KerberosError(f"cannot reach a KDC for realm {found.group(1) if found else realm}: "
                             "check krb5.conf's [realms] and that the KDC is up")
    if code in (KRB5_REALM_UNKNOWN, KRB5_REALM_CANT_RESOLVE, KRB5_CONFIG_NODEFREALM):
        return KerberosError(f"no KDC known for realm {realm}: krb5.conf "
                             f"({os.environ.get('KRB5_CONFIG', '/etc/krb5.conf')}) has no [realms] entry for it "
                             f"({text})")
    if keytab is not None and code in (KRB5_FCC_NOFILE, KRB5_KT_NOTFOUND):
        # MIT: no cached ticket and no key for the principal in the client keytab.
        return KerberosError(f"keytab {keytab} has no key for principal {login.principal}: "
                             f"list it with `klist -kt {keytab}`")
    if keytab is None and code == KRB5_FCC_NOFILE:
        return KerberosError(f"no Kerberos ticket for {login.principal} in the default credential cache: "
                             "run kinit, or give a keytab")
    if code == KRB5KDC_ERR_C_PRINCIPAL_UNKNOWN:
        return KerberosError(f"principal {login.principal} is not in the KDC's database: check its name and realm")
    if code in (KRB5KDC_ERR_PREAUTH_FAILED, KRB5KRB_AP_ERR_BAD_INTEGRITY):
        return KerberosError(f"the KDC refused the key of {login.principal} from keytab {keytab}: the keytab is "
                             "out of date (the principal's key changed since it was made): export a new one")
    if code == KRB5KDC_ERR_CLIENT_REVOKED:
        return KerberosError(f"principal {login.principal} is locked or disabled in the KDC")
    return KerberosError(f"Kerberos login as {login.principal} to {login.service_name}@{broker_host} failed: {text}")


def _acquire(login: KerberosLogin) -> gssapi.Credentials:
    """The login's initiator credentials (blocking: may read the keytab and ask the KDC for a ticket)."""
    import gssapi as g

    name = g.Name(login.principal, g.NameType.kerberos_principal)
    if login.keytab is None:
        return g.Credentials(name=name, usage="initiate")
    return g.Credentials(name=name, usage="initiate",
                         store={"client_keytab": login.keytab, "ccache": _ccache_name(login)})


def _check_keytab(keytab: str) -> None:
    if not os.path.isfile(keytab):
        raise KerberosError(f"keytab {keytab} does not exist")
    if not os.access(keytab, os.R_OK):
        raise KerberosError(f"keytab {keytab} is not readable by this process (uid {os.getuid()})")


async def gssapi_exchange(send: Callable[[bytes], Awaitable[bytes]], login: KerberosLogin, broker_host: str) -> None:
    """After SaslHandshake(GSSAPI) succeeded: `send(token)` sends one SaslAuthenticate with `token` and returns
    the broker's auth bytes (raising on a broker error). Runs the GSS context establishment with service
    `service_name@broker_host`, then RFC 4752's security-layer negotiation (unwrap the server's 4 bytes, answer
    with no security layer, max size 0, and the authorization id), never blocking the event loop for long
    (credentials and every context step run in a thread: asyncio.to_thread).

    Raises KerberosError for Kerberos failures; whatever `send` raises (the broker's refusal) passes through.
    """
    _require_gssapi()
    import gssapi as g
    from gssapi.raw.misc import GSSError

    if login.krb5_conf is not None:
        use_krb5_conf(login.krb5_conf)
    if login.keytab is not None:
        _check_keytab(login.keytab)

    def establish_first() -> tuple[g.SecurityContext, bytes]:
        creds = _acquire(login)
        target = g.Name(f"{login.service_name}@{broker_host}", g.NameType.hostbased_service)
        flags = g.RequirementFlag.mutual_authentication | g.RequirementFlag.integrity
        context = g.SecurityContext(name=target, creds=creds, usage="initiate", flags=flags)
        return context, context.step() or b""

    def step(context: g.SecurityContext, token: bytes) -> bytes:
        return context.step(token) or b""

    try:
        context, token = await asyncio.to_thread(establish_first)
    except GSSError as exc:
        raise explain(exc, login, broker_host) from None
    while True:
        challenge = await send(token)
        if context.complete:
            break
        try:
            token = await asyncio.to_thread(step, context, challenge)
        except GSSError as exc:
            raise explain(exc, login, broker_host) from None
        # Mutual authentication done and nothing left to say: an empty response asks for the security layers.
    try:
        offer = context.unwrap(challenge).message
    except GSSError as exc:
        raise KerberosError(f"the broker's GSSAPI security-layer message from {broker_host} is invalid: "
                            f"{_minor_text(exc)}") from None
    if len(offer) != 4:
        raise KerberosError(f"the broker's GSSAPI security-layer message from {broker_host} has {len(offer)} "
                            "bytes, RFC 4752 says 4")
    if not offer[0] & NO_SECURITY_LAYER:
        raise KerberosError(f"broker {broker_host} requires a GSSAPI security layer (offered mask "
                            f"{offer[0]:#04x}): Kafka never does; is this a Kafka broker?")
    authorization_id = str(context.initiator_name).encode()
    answer = bytes([NO_SECURITY_LAYER]) + (0).to_bytes(3, "big") + authorization_id
    await send(context.wrap(answer, encrypt=False).message)
