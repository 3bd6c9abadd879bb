"""SASL for the proxy's own control connection: PLAIN, SCRAM-SHA-256/512 (RFC 5802/7677) and OAUTHBEARER (RFC 7628,
with a token from proxy/controlplane/oauth.py).

Client connections never come here: their SASL frames pass through the proxy untouched. The messages themselves are
protocol/sasl.py's (sans-IO); here they are exchanged. `authenticate` runs one login on a fresh connection, or again on a live one (KIP-368's re-authentication: a broker with
`connections.max.reauth.ms` ends a session that is not renewed), and returns the session's lifetime.
SaslHandshake v1 and SaslAuthenticate v1 bodies come from the schema in protocol/messages.py; the
caller's ``request`` adds the header and returns the response body.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from insync_proxy.protocol import (
    ProtocolError,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    decode_response,
    encode_request,
)
from insync_proxy.protocol.sasl import (
    SCRAM_DIGESTS,
    SaslError,
    ScramClient,
    oauthbearer_initial_response,
    plain_initial_response,
)
from insync_proxy.protocol.schema import Message

__all__ = ["SaslError", "authenticate", "authenticate_blocking", "credentials_hint", "login_name", "mechanisms_hint",
           "oauthbearer_initial_response", "oauthbearer_login", "service_host"]

HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 1

#: (api_key, api_version, request body) -> response body
RawRequest = Callable[[int, int, bytes], Awaitable[bytes]]
#: The same, answered at once (a blocking client's `request_raw`).
BlockingRequest = Callable[[int, int, bytes], bytes]


M = TypeVar("M", bound=Message)


async def _ask(request: RawRequest, version: int, message: Message, answer: type[M]) -> M:
    """Send one SASL request and decode its answer; an error code in it is the caller's to read."""
    api_key = message.API_KEY
    body = await request(api_key, version, encode_request(message, version))
    try:
        response = decode_response(api_key, version, body)
    except ProtocolError as exc:
        raise SaslError(f"undecodable {answer.__name__.removesuffix('Response')} response: {exc}") from None
    assert isinstance(response, answer)
    return response


async def _handshake(request: RawRequest, mechanism: str) -> None:
    response = await _ask(request, HANDSHAKE_VERSION, SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse)
    if response.error_code != 0:
        error = SaslError(f"broker does not enable SASL mechanism {mechanism} "
                          f"(enabled: {list(response.mechanisms)}, error {response.error_code})", response.error_code)
        error.enabled = tuple(response.mechanisms)
        raise error


def mechanisms_hint(exc: SaslError, mechanism: str) -> str:
    """What a refused SaslHandshake means: no SASL on that listener at all, or other mechanisms."""
    enabled = getattr(exc, "enabled", None)
    if not enabled:
        return ("the listener offers no SASL at all (a PLAINTEXT or SSL listener): point bootstrap_servers at the "
                "brokers' SASL_PLAINTEXT or SASL_SSL listener, or remove [control_sasl] if this listener needs no login")
    return f"set control_sasl.mechanism to one the listener enables ({', '.join(enabled)})"


def login_name(sasl: Any) -> tuple[str, str]:
    """(mechanism, who logs in) as log lines name them: the user, the OAuth client id, the Kerberos principal."""
    mechanism = str(sasl.mechanism)
    if mechanism == "OAUTHBEARER":
        return mechanism, str(sasl.oauthbearer_client_id)
    if mechanism == "GSSAPI":
        return mechanism, str(sasl.kerberos_principal)
    if mechanism == "AWS_MSK_IAM":
        return mechanism, "AWS profile " + str(sasl.aws_profile) if sasl.aws_profile else "AWS default credentials"
    return mechanism, str(sasl.username)


def credentials_hint(sasl: Any) -> str:
    """Which settings a refused login points at, named where they came from (never their values)."""
    if sasl.mechanism == "OAUTHBEARER":
        return ("[control_sasl] oauthbearer_token_endpoint_url, oauthbearer_client_id and the client secret ("
                + ("oauthbearer_client_secret_file" if getattr(sasl, "oauthbearer_client_secret_file", None)
                   else "oauthbearer_client_secret or INSYNC_PROXY_CONTROL_SASL_OAUTHBEARER_CLIENT_SECRET")
                + "), and that the brokers accept this provider's tokens (issuer, audience, JWKS)")
    if sasl.mechanism == "AWS_MSK_IAM":
        return ("the proxy's AWS credentials (its IAM role, or the environment's keys; control_sasl.aws_profile) and "
                "that role's kafka-cluster:Connect permission on the cluster")
    if sasl.mechanism == "GSSAPI":
        return ("[control_sasl] kerberos_principal, kerberos_keytab and kerberos_service_name, the krb5.conf's "
                "realm, and that the brokers' principals name the host connected to (kerberos_service_host)")
    where = ("control_sasl.password_file " + repr(sasl.password_file) if getattr(sasl, "password_file", None)
             else "INSYNC_PROXY_CONTROL_SASL_PASSWORD or control_sasl.password")
    return f"[control_sasl] username and its password ({where})"


class _Session:
    """The last SaslAuthenticate answer's session lifetime (0: the broker does not end sessions)."""

    lifetime_ms = 0


async def _authenticate(request: RawRequest, token: bytes, session: _Session | None = None) -> bytes:
    response = await _ask(request, AUTHENTICATE_VERSION, SaslAuthenticateRequest(auth_bytes=token),
                          SaslAuthenticateResponse)
    if response.error_code != 0:
        raise SaslError(f"SASL authentication failed (error {response.error_code}): {response.error_message}",
                        response.error_code)
    if session is not None:
        session.lifetime_ms = response.session_lifetime_ms
    return response.auth_bytes


async def authenticate(request: RawRequest, sasl: Any, broker_host: str = "") -> int:
    """Authenticate a connection (fresh, or again: KIP-368) with the configured mechanism; returns the session
    lifetime in ms the broker gave (0: none, the session lasts as long as the connection). `broker_host`: the
    host connected to (GSSAPI asks for the ticket of <service>/<that host>)."""
    mechanism = sasl.mechanism
    session = _Session()
    await _handshake(request, mechanism)
    if mechanism == "PLAIN":
        await _authenticate(request, plain_initial_response(sasl.username or "", sasl.password or ""), session)
    elif mechanism in SCRAM_DIGESTS:
        scram = ScramClient(SCRAM_DIGESTS[mechanism], sasl.username or "", sasl.password or "")
        server_first = await _authenticate(request, scram.first_message())
        scram.verify(await _authenticate(request, scram.final_message(server_first), session))
    elif mechanism == "OAUTHBEARER":
        await _oauthbearer(request, sasl, session)
    elif mechanism == "GSSAPI":
        await _gssapi(request, sasl, broker_host, session)
    elif mechanism == "AWS_MSK_IAM":
        await _aws_msk_iam(request, sasl, broker_host, session)
    else:
        raise SaslError(f"unsupported SASL mechanism {mechanism}")
    return session.lifetime_ms


def authenticate_blocking(request: BlockingRequest, sasl: Any, broker_host: str = "") -> int:
    """`authenticate` over a blocking client's requests (check-config --connect, the partitioner); not on a running
    event loop."""

    async def ask(api_key: int, version: int, body: bytes) -> bytes:
        return request(api_key, version, body)

    return asyncio.run(authenticate(ask, sasl, broker_host))


async def oauthbearer_login(request: RawRequest, token: str, extensions: tuple[str, ...] = ()) -> int:
    """OAUTHBEARER with a given token (the handshake done): the session lifetime in ms; SaslError when refused."""
    session = _Session()
    challenge = await _authenticate(request, oauthbearer_initial_response(token, extensions), session)
    if challenge:
        # RFC 7628 3.2.2: an error (a JSON status) comes as a challenge; the client answers 0x01 and the broker
        # then fails the exchange with SASL_AUTHENTICATION_FAILED.
        status = challenge.decode("utf-8", "replace")
        try:
            await _authenticate(request, b"\x01")
        except SaslError as exc:
            raise SaslError(f"{exc} (broker: {status})", exc.error_code) from None
        raise SaslError(f"the broker refused the token ({status})", 58)
    return session.lifetime_ms


async def _oauthbearer(request: RawRequest, sasl: Any, session: _Session) -> None:
    from insync_proxy.proxy.controlplane.oauth import TokenEndpointError, token_source

    source = token_source(sasl)
    try:
        token = await source.token()
    except TokenEndpointError as exc:
        raise SaslError(str(exc), credentials_refused=True) from None
    try:
        session.lifetime_ms = await oauthbearer_login(request, token.value, tuple(sasl.oauthbearer_extensions))
    except SaslError as exc:
        if exc.error_code == 58:
            source.invalidate(token)  # the next login asks for a new token (revoked, rotated key, expired early)
            raise SaslError(f"the broker refused the token of client {sasl.oauthbearer_client_id!r} "
                            f"(sub {token.subject!r}, expires in {token.expires_at - time.time():.0f}s): {exc}", 58) \
                from None
        raise


async def _gssapi(request: RawRequest, sasl: Any, broker_host: str, session: _Session) -> None:
    from insync_proxy.proxy.controlplane.kerberos import KerberosError, KerberosLogin, gssapi_exchange

    login = KerberosLogin(principal=sasl.kerberos_principal, keytab=sasl.kerberos_keytab,
                          service_name=sasl.kerberos_service_name, krb5_conf=sasl.kerberos_krb5_conf)
    host = service_host(sasl.kerberos_service_host, broker_host)
    try:
        await gssapi_exchange(lambda token: _authenticate(request, token, session), login, host)
    except KerberosError as exc:
        raise SaslError(str(exc), credentials_refused=True) from None


def service_host(setting: str | None, broker_host: str) -> str:
    """The host of the broker's service principal: kerberos_service_host ({label}: the first label of the host
    connected to), or the host connected to."""
    if not setting:
        return broker_host
    return setting.replace("{label}", broker_host.split(".", 1)[0])


async def _aws_msk_iam(request: RawRequest, sasl: Any, broker_host: str, session: _Session) -> None:
    import asyncio

    from insync_proxy.proxy.controlplane.aws_msk_iam import (
        AwsIamError,
        credentials,
        region_of,
        signed_payload,
    )

    region = sasl.aws_region or region_of(broker_host)
    if region is None:
        raise SaslError(f"the AWS region cannot be read from the broker's host {broker_host!r}: set "
                        "control_sasl.aws_region", credentials_refused=True)
    try:
        frozen = await asyncio.to_thread(credentials, sasl.aws_profile)
    except AwsIamError as exc:
        raise SaslError(str(exc), credentials_refused=True) from None
    await _authenticate(request, signed_payload(broker_host, region, frozen), session)
