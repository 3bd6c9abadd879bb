"""OAuth 2.0 access tokens for the proxy's own OAUTHBEARER login (KIP-255, KIP-768's client side).

The client-credentials grant (RFC 6749 section 4.4) against the configured token endpoint, made by Authlib's
client over `requests` (HTTP Basic client authentication, as Kafka's Java client and librdkafka send it; the
scope, an audience where the provider wants one). The token is read as a JWT with joserfc (its `exp` and `sub`,
never its signature: the brokers check that), cached, and renewed before it expires: past
REFRESH_FRACTION of its lifetime, and at once when a broker refuses it. Every failure becomes one
`TokenEndpointError` whose text says what to fix; no secret ever reaches it.

The HTTP request is blocking I/O: `OAuthTokenSource.token()` runs it in a thread, one at a time.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

#: A token is renewed once this fraction of its lifetime has passed (Kafka's sasl.login.refresh.window.factor).
REFRESH_FRACTION = 0.8
#: ... and at least this many seconds before it expires.
REFRESH_MARGIN_SECONDS = 5.0
#: The token endpoint gives up after this long.
TOKEN_REQUEST_TIMEOUT_SECONDS = 10.0
#: A failed token request is not repeated sooner than this (every refresh would ask the provider again).
RETRY_BACKOFF_SECONDS = 2.0


class TokenEndpointError(Exception):
    """No token: the text names the endpoint, what it answered and what to check (never a secret)."""


@dataclass(frozen=True)
class OAuthToken:
    """An access token and what the proxy read of it."""

    value: str
    #: time.time() when it expires (its `exp` claim, else `expires_in` from when it arrived).
    expires_at: float
    #: time.time() when it arrived.
    received_at: float
    #: Its `sub` claim: the principal the brokers will see (User:<sub> by default), when it is a JWT.
    subject: str | None

    def renew_at(self) -> float:
        """time.time() from which the token is renewed ahead of its expiry."""
        lifetime = max(0.0, self.expires_at - self.received_at)
        return min(self.received_at + REFRESH_FRACTION * lifetime, self.expires_at - REFRESH_MARGIN_SECONDS)


def read_token(value: str, expires_in: Any, now: float) -> OAuthToken:
    """What a token endpoint's answer says of its token: a JWT's `exp` and `sub` (read, not verified), else
    `expires_in`; TokenEndpointError when neither gives an expiry."""
    from joserfc.errors import JoseError
    from joserfc.jws import extract_compact

    claims: dict[str, Any] = {}
    try:
        decoded = json.loads(extract_compact(value.encode()).payload)
        if isinstance(decoded, dict):
            claims = decoded
    except (JoseError, ValueError, UnicodeDecodeError):
        claims = {}  # an opaque token: the brokers' validator will say whether it takes it
    expiry = claims.get("exp")
    if isinstance(expiry, (int, float)) and not isinstance(expiry, bool):
        expires_at = float(expiry)
    elif isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) and expires_in > 0:
        expires_at = now + float(expires_in)
    else:
        raise TokenEndpointError("the token has no expiry (no JWT `exp` claim, no `expires_in` in the answer)")
    if expires_at <= now:
        raise TokenEndpointError(f"the token expired {now - expires_at:.0f}s before it arrived: is this machine's "
                                 "clock right (NTP)?")
    subject = claims.get("sub")
    return OAuthToken(value, expires_at, now, subject if isinstance(subject, str) else None)


class OAuthTokenSource:
    """Tokens of one client of one token endpoint, cached and renewed ahead; shared by every connection that
    logs in with the same [control_sasl] settings."""

    def __init__(self, sasl: Any) -> None:
        self.url: str = sasl.oauthbearer_token_endpoint_url
        self.client_id: str = sasl.oauthbearer_client_id
        self._secret: str = sasl.oauthbearer_client_secret or ""
        self.scope: str | None = sasl.oauthbearer_scope
        self.audience: str | None = sasl.oauthbearer_audience
        self.ca_file: str | None = sasl.oauthbearer_ca_file
        self._token: OAuthToken | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._failed_at = 0.0
        self._failure: TokenEndpointError | None = None
        #: Tokens fetched so far (counted by the caller's metric).
        self.fetched = 0

    async def token(self) -> OAuthToken:
        """A token good for a while yet: the cached one, or a new one from the endpoint."""
        token = self._token
        if token is not None and time.time() < token.renew_at():
            return token
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:  # check-config logs in from a loop of its own
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            token = self._token
            if token is not None and time.time() < token.renew_at():
                return token
            if self._failure is not None and time.monotonic() - self._failed_at < RETRY_BACKOFF_SECONDS:
                if token is not None and time.time() < token.expires_at - 1:
                    return token  # the endpoint is failing: the old token still works for a while
                raise self._failure
            try:
                fresh = await asyncio.to_thread(self.fetch)
            except TokenEndpointError as exc:
                self._failure, self._failed_at = exc, time.monotonic()
                if token is not None and time.time() < token.expires_at - 1:
                    return token
                raise
            self._failure = None
            self._token = fresh
            return fresh

    def invalidate(self, token: OAuthToken) -> None:
        """A broker refused `token`: the next login fetches a new one."""
        if self._token is token:
            self._token = None

    def fetch(self) -> OAuthToken:
        """One client-credentials request (blocking); TokenEndpointError with what to fix."""
        import requests
        from authlib.integrations.base_client.errors import OAuthError
        from authlib.integrations.requests_client import OAuth2Session

        extra: dict[str, Any] = {}
        if self.audience:
            extra["audience"] = self.audience
        where = f"token endpoint {self.url}"
        session = OAuth2Session(self.client_id, self._secret, scope=self.scope,
                                token_endpoint_auth_method="client_secret_basic")
        now = time.time()
        try:
            answer = session.fetch_token(self.url, grant_type="client_credentials", timeout=TOKEN_REQUEST_TIMEOUT_SECONDS,
                                         verify=self.ca_file or True, **extra)
        except OAuthError as exc:
            error = str(getattr(exc, "error", "") or "")
            described = getattr(exc, "description", None)
            detail = f"{error}" + (f": {described}" if described else "")
            if error == "invalid_client":
                raise TokenEndpointError(f"{where} refused client {self.client_id!r} ({detail}): wrong client secret "
                                         "or unknown client id: check control_sasl.oauthbearer_client_id and "
                                         "oauthbearer_client_secret(_file)") from None
            if error == "invalid_scope":
                raise TokenEndpointError(f"{where} refused the scope {self.scope!r} ({detail}): check "
                                         "control_sasl.oauthbearer_scope") from None
            raise TokenEndpointError(f"{where} refused the request ({detail})") from None
        except requests.exceptions.SSLError as exc:
            raise TokenEndpointError(f"{where}: TLS failed ({_reason(exc)}): set control_sasl.oauthbearer_ca_file to "
                                     "the CA that issued its certificate") from None
        except requests.exceptions.Timeout:
            raise TokenEndpointError(f"{where}: no answer within {TOKEN_REQUEST_TIMEOUT_SECONDS:.0f}s") from None
        except requests.exceptions.ConnectionError as exc:
            raise TokenEndpointError(f"{where} unreachable ({_reason(exc)}): check "
                                     "control_sasl.oauthbearer_token_endpoint_url and the network to it") from None
        except requests.exceptions.HTTPError as exc:
            response = exc.response
            kind = response.headers.get("Content-Type", "?").split(";")[0] if response is not None else "?"
            status = response.status_code if response is not None else "?"
            raise TokenEndpointError(f"{where} answered HTTP {status} with {kind}, not a JSON token: is it the "
                                     "provider's token endpoint (its OpenID metadata's token_endpoint)?") from None
        except requests.exceptions.RequestException as exc:
            raise TokenEndpointError(f"{where}: {_reason(exc)}") from None
        except ValueError as exc:  # a 2xx answer that is not JSON
            raise TokenEndpointError(f"{where} answered something that is not a JSON token ({exc}): is it the "
                                     "provider's token endpoint?") from None
        value = answer.get("access_token")
        if not isinstance(value, str) or not value:
            raise TokenEndpointError(f"{where} answered without an access_token")
        try:
            token = read_token(value, answer.get("expires_in"), now)
        except TokenEndpointError as exc:
            raise TokenEndpointError(f"{where}: {exc}") from None
        self.fetched += 1
        return token


def _reason(exc: BaseException) -> str:
    """The innermost cause's words (requests wraps urllib3's wraps the socket's)."""
    seen = exc
    while True:
        inner = seen.__cause__ or seen.__context__ or (seen.args[0] if seen.args and
                                                       isinstance(seen.args[0], BaseException) else None)
        reason = getattr(seen, "reason", None)
        if isinstance(reason, BaseException):
            inner = reason
        if inner is None or inner is seen:
            break
        seen = inner
    text = str(seen)
    if "Connection refused" in text:
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text or "Temporary failure in name" in text:
        return "host name not found"
    return text.split(": ", 1)[-1] if len(text) > 200 else text


_SOURCES: OrderedDict[Any, OAuthTokenSource] = OrderedDict()
_SOURCES_LOCK = threading.Lock()
#: Token sources kept (one per distinct [control_sasl] settings; a reload with new settings makes another).
MAX_SOURCES = 4


def token_source(sasl: Any) -> OAuthTokenSource:
    """The token source of these [control_sasl] settings: one per settings, shared by every connection."""
    key = (sasl.oauthbearer_token_endpoint_url, sasl.oauthbearer_client_id, sasl.oauthbearer_client_secret,
           sasl.oauthbearer_scope, sasl.oauthbearer_audience, sasl.oauthbearer_ca_file)
    with _SOURCES_LOCK:
        source = _SOURCES.get(key)
        if source is None:
            source = _SOURCES[key] = OAuthTokenSource(sasl)
            while len(_SOURCES) > MAX_SOURCES:
                _SOURCES.popitem(last=False)
        _SOURCES.move_to_end(key)
        return source
