"""OAUTHBEARER of the proxy's own login: the token source against the dev identity provider (Authlib's authorization
server, in this process), RFC 7628's framing against a scripted broker, and what [control_sasl] refuses.

The brokers' side (Kafka's validator refusing bad tokens) is tests/integration/test_oauthbearer.py."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from joserfc import jwt

from insync_proxy.devcluster.identity_provider import IdentityProvider
from insync_proxy.protocol import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    decode_request,
    encode_response,
)
from insync_proxy.proxy.config.settings import ConfigError, SaslConfig
from insync_proxy.proxy.controlplane.control import _Link
from insync_proxy.proxy.controlplane.oauth import OAuthTokenSource, TokenEndpointError, read_token
from insync_proxy.proxy.controlplane.sasl import SaslError, authenticate, oauthbearer_initial_response


@pytest.fixture(scope="module")
def idp() -> Iterator[IdentityProvider]:
    provider = IdentityProvider(token_seconds=120)
    provider.add_client("insync-proxy", "the-secret")
    with provider:
        yield provider


def _sasl(idp: IdentityProvider, **changes: Any) -> SaslConfig:
    values = {"mechanism": "OAUTHBEARER", "oauthbearer_token_endpoint_url": idp.token_endpoint_url,
              "oauthbearer_client_id": "insync-proxy", "oauthbearer_client_secret": "the-secret",
              "oauthbearer_scope": "kafka", **changes}
    return SaslConfig(**values)


def test_a_token_is_fetched_by_the_client_credentials_grant_and_its_jwt_claims_read(idp: IdentityProvider) -> None:
    token = OAuthTokenSource(_sasl(idp)).fetch()
    assert token.subject == "insync-proxy"
    assert 110 <= token.expires_at - time.time() <= 121
    # renewed once 80 % of its lifetime has passed
    assert token.renew_at() == pytest.approx(token.received_at + 0.8 * (token.expires_at - token.received_at))


def test_a_wrong_secret_an_unknown_client_and_an_unreachable_endpoint_each_say_what_to_check(
        idp: IdentityProvider) -> None:
    with pytest.raises(TokenEndpointError, match="wrong client secret or unknown client id") as wrong:
        OAuthTokenSource(_sasl(idp, oauthbearer_client_secret="not-it")).fetch()
    assert "not-it" not in str(wrong.value)
    with pytest.raises(TokenEndpointError, match="refused client 'nobody'"):
        OAuthTokenSource(_sasl(idp, oauthbearer_client_id="nobody")).fetch()
    with pytest.raises(TokenEndpointError, match=r"unreachable \(connection refused\): check "
                                                 "control_sasl.oauthbearer_token_endpoint_url"):
        OAuthTokenSource(_sasl(idp, oauthbearer_token_endpoint_url="http://127.0.0.1:1/token")).fetch()
    with pytest.raises(TokenEndpointError, match="answered HTTP 404 with text/html, not a JSON token"):
        OAuthTokenSource(_sasl(idp, oauthbearer_token_endpoint_url=idp.issuer + "/login")).fetch()


class _Answer(http.server.BaseHTTPRequestHandler):
    """A token endpoint that answers whatever the test put in `body` (HTML with 200, a token without expiry...)."""

    body = b""
    content_type = "application/json"

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def odd_endpoint() -> Iterator[tuple[str, type[_Answer]]]:
    handler = type("Handler", (_Answer,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/token", handler
    server.shutdown()
    server.server_close()


def test_an_html_page_or_a_token_without_expiry_is_a_clear_error(
        idp: IdentityProvider, odd_endpoint: tuple[str, type[_Answer]]) -> None:
    url, handler = odd_endpoint
    source = OAuthTokenSource(_sasl(idp, oauthbearer_token_endpoint_url=url))
    handler.body, handler.content_type = b"<html><body>Sign in</body></html>", "text/html"
    with pytest.raises(TokenEndpointError, match="not a JSON token"):
        source.fetch()
    handler.body, handler.content_type = json.dumps({"access_token": "opaque", "token_type": "Bearer"}).encode(), \
        "application/json"
    with pytest.raises(TokenEndpointError, match="the token has no expiry"):
        source.fetch()
    handler.body = json.dumps({"token_type": "Bearer"}).encode()
    with pytest.raises(TokenEndpointError, match="without an access_token"):
        source.fetch()


def test_an_expired_jwt_is_refused_before_any_broker_sees_it(idp: IdentityProvider) -> None:
    now = int(time.time())
    expired = jwt.encode({"alg": "RS256"}, {"sub": "x", "exp": now - 60}, idp.key)
    with pytest.raises(TokenEndpointError, match="expired 60s before it arrived"):
        read_token(expired, 300, now)
    # an opaque token takes its lifetime from expires_in
    assert read_token("opaque-token", 300, now).expires_at == now + 300


def test_the_token_is_cached_renewed_past_its_window_and_after_a_refusal(idp: IdentityProvider) -> None:
    source = OAuthTokenSource(_sasl(idp))

    async def scenario() -> None:
        first = await source.token()
        assert await source.token() is first and source.fetched == 1
        source.invalidate(first)  # a broker refused it
        second = await source.token()
        assert second is not first and source.fetched == 2
        source._token = type(second)(second.value, second.expires_at, second.received_at - 1000, second.subject)
        third = await source.token()  # past its renewal time
        assert third.value != second.value and source.fetched == 3

    asyncio.run(scenario())


def test_the_initial_response_is_rfc_7628_with_kip_342_extensions() -> None:
    assert oauthbearer_initial_response("abc") == b"n,,\x01auth=Bearer abc\x01\x01"
    assert oauthbearer_initial_response("abc", ("logicalCluster=lkc-1", "identityPoolId=pool-2")) == \
        b"n,,\x01auth=Bearer abc\x01logicalCluster=lkc-1\x01identityPoolId=pool-2\x01\x01"


@dataclass
class OAuthBroker:
    """The broker's half of OAUTHBEARER: accepts `good` tokens; a refusal is RFC 7628's JSON challenge, then 58."""

    good: set[str] = field(default_factory=set)
    lifetime_ms: int = 10_000
    seen: list[str] = field(default_factory=list)

    async def __call__(self, api_key: int, version: int, body: bytes) -> bytes:
        request = decode_request(api_key, version, body)
        if isinstance(request, SaslHandshakeRequest):
            return encode_response(SaslHandshakeResponse(error_code=0, mechanisms=("OAUTHBEARER",)), version)
        assert isinstance(request, SaslAuthenticateRequest)
        message = request.auth_bytes.decode()
        if message == "\x01":
            return encode_response(SaslAuthenticateResponse(error_code=58, error_message="invalid token"), version)
        token = message.split("auth=Bearer ", 1)[1].split("\x01", 1)[0]
        self.seen.append(token)
        if token in self.good:
            return encode_response(SaslAuthenticateResponse(session_lifetime_ms=self.lifetime_ms), version)
        return encode_response(SaslAuthenticateResponse(auth_bytes=b'{"status":"invalid_token"}'), version)


def test_a_login_returns_the_session_lifetime_and_a_refused_token_is_not_used_again(idp: IdentityProvider) -> None:
    sasl = _sasl(idp, oauthbearer_scope="kafka refused-test")  # settings of their own: a token source of their own
    broker = OAuthBroker()

    async def scenario() -> None:
        with pytest.raises(SaslError, match=r"refused the token of client 'insync-proxy'.*invalid_token") as refused:
            await authenticate(broker, sasl)
        assert refused.value.error_code == 58
        broker.good = _Every()  # from now on any token is taken
        assert await authenticate(broker, sasl) == 10_000
        assert broker.seen[0] != broker.seen[1]  # the refused token was dropped, a new one fetched

    asyncio.run(scenario())


class _Every(set[str]):
    def __contains__(self, item: object) -> bool:
        return True


def test_a_session_is_renewed_before_it_ends_leaving_room_for_a_slow_broker() -> None:
    link = _Link(("127.0.0.1", 1), None, None)  # type: ignore[arg-type]
    before = time.monotonic()
    link.start_session(10_000, request_timeout=2.0)
    assert link.session_ends_at is not None and link.reauthenticate_at is not None
    # 10 s sessions, 2 s request timeout: renewed with 3 s left (the timeout and a second), not 1.5 s (15 %)
    assert link.session_ends_at - link.reauthenticate_at == pytest.approx(3.0, abs=0.05)
    assert link.reauthenticate_at >= before + 5
    link.start_session(0, request_timeout=2.0)
    assert link.reauthenticate_at is None and link.session_ends_at is None


@pytest.mark.parametrize(("changes", "message"), [
    ({"oauthbearer_token_endpoint_url": None}, "needs control_sasl.oauthbearer_token_endpoint_url"),
    ({"oauthbearer_token_endpoint_url": "idp.example.com/token"}, "is not an http(s):// URL"),
    ({"oauthbearer_client_id": None}, "needs control_sasl.oauthbearer_client_id"),
    ({"oauthbearer_client_secret": None}, "needs the client's secret"),
    ({"username": "proxy"}, "the brokers take the proxy's principal from the token"),
    ({"password": "pw"}, "set oauthbearer_client_secret(_file) instead"),
    ({"oauthbearer_extensions": ("auth=x",)}, "is not key=value with a key of letters other than `auth`"),
    ({"mechanism": "SCRAM-SHA-512", "username": "u", "password": "p"}, "OAuth settings take effect with mechanism"),
    ({"mechanism": None}, "is set but control_sasl.mechanism is not"),
])
def test_oauthbearer_settings_that_cannot_work_are_refused_with_the_setting_named(
        changes: dict[str, Any], message: str) -> None:
    from insync_proxy.proxy.config.schema import _check_sasl

    values = {"mechanism": "OAUTHBEARER", "oauthbearer_token_endpoint_url": "https://idp.example.com/token",
              "oauthbearer_client_id": "insync-proxy", "oauthbearer_client_secret": "s", **changes}
    with pytest.raises(ConfigError) as refused:
        _check_sasl(SaslConfig(**values))
    assert message in str(refused.value)
