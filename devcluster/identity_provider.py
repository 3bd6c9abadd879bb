"""A local OAuth 2.0 identity provider for the dev cluster and the tests (`dev-cluster up --security oauthbearer`).

Built on Authlib's authorization server (RFC 6749's client-credentials grant, RFC 9068 JWT access tokens):
registered clients with secrets (a wrong secret is refused with `invalid_client`), RS256 tokens signed with a key
of its own, its JWKS at `/jwks` and its metadata at `/.well-known/openid-configuration`, on 127.0.0.1 only. The
brokers validate the tokens with Kafka's own validator against that JWKS (issuer, audience, expiry and
signature), so nothing in a test accepts a token that a real provider's broker would refuse.

Two ways to run it: `IdentityProvider(...).start()` in a thread of the caller (the tests), or as a process,
`python -m insync_proxy.devcluster.identity_provider --dir DIR --port N`, which `dev-cluster up` leaves running
beside the brokers; its clients, key and settings are in DIR/identity-provider.json (mode 0600).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

#: Authlib refuses plain-HTTP token endpoints unless this is set; the provider listens on loopback only.
os.environ.setdefault("AUTHLIB_INSECURE_TRANSPORT", "1")

from authlib.oauth2.rfc6749 import AuthorizationServer, ClientMixin, OAuth2Request  # noqa: E402
from authlib.oauth2.rfc6749.grants import ClientCredentialsGrant  # noqa: E402
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload  # noqa: E402
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator  # noqa: E402
from joserfc.jwk import KeySet, RSAKey  # noqa: E402

STATE_FILE = "identity-provider.json"
#: The audience the brokers expect (sasl.oauthbearer.expected.audience) and the tokens carry.
DEFAULT_AUDIENCE = "kafka"
DEFAULT_SCOPE = "kafka"
DEFAULT_TOKEN_SECONDS = 3600


@dataclass
class _Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    client_secret: str
    scope: str

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return None

    def get_allowed_scope(self, scope: str | None) -> str:
        wanted = (scope or self.scope).split()
        return " ".join(s for s in wanted if s in self.scope.split())

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return False

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret.encode(), self.client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return endpoint == "token" and method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return False

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "client_credentials"


class _ClientCredentials(ClientCredentialsGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]


class _Tokens(JWTBearerTokenGenerator):  # type: ignore[misc]
    def __init__(self, provider: IdentityProvider) -> None:
        self._provider = provider
        super().__init__(issuer=provider.issuer, alg="RS256")

    @property
    def issuer(self) -> str:
        """The provider's URL, known once its port is bound."""
        return self._provider.issuer

    @issuer.setter
    def issuer(self, value: str) -> None:
        pass

    def get_jwks(self) -> KeySet:
        return KeySet([self._provider.key])

    def get_audiences(self, client: Any, user: Any, scope: Any) -> str:
        return self._provider.audience

    def _get_expires_in(self, client: Any, grant_type: str) -> int:
        return self._provider.token_seconds


class _Request(OAuth2Request):  # type: ignore[misc]
    """An Authlib request from what the HTTP handler read."""

    def __init__(self, uri: str, headers: Mapping[str, str], form: dict[str, str]) -> None:
        super().__init__("POST", uri, headers=headers)
        self._form = form
        self.payload = BasicOAuth2Payload(form)

    @property
    def args(self) -> dict[str, str]:
        return {}

    @property
    def form(self) -> dict[str, str]:
        return self._form


class _Server(AuthorizationServer):  # type: ignore[misc]
    def __init__(self, provider: IdentityProvider) -> None:
        super().__init__(scopes_supported=None)
        self._provider = provider
        self.register_grant(_ClientCredentials)
        self.register_token_generator("default", _Tokens(provider))

    def query_client(self, client_id: str) -> _Client | None:
        return self._provider.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: Any) -> None:
        self._provider.issued += 1

    def create_oauth2_request(self, request: Any) -> OAuth2Request:
        assert isinstance(request, OAuth2Request)
        return request

    def handle_response(self, status: int, body: Any, headers: Any) -> tuple[int, bytes, list[tuple[str, str]]]:
        return status, json.dumps(body).encode(), list(headers)

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        pass


@dataclass
class IdentityProvider:
    """An OAuth 2.0 authorization server on 127.0.0.1:`port` (0: a free one) issuing RS256 JWTs to `clients`."""

    clients: dict[str, _Client] = field(default_factory=dict)
    port: int = 0
    audience: str = DEFAULT_AUDIENCE
    token_seconds: int = DEFAULT_TOKEN_SECONDS
    key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048, {"kid": secrets.token_hex(8), "use": "sig",
                                                                             "alg": "RS256"}))
    #: Tokens issued so far.
    issued: int = 0
    _http: ThreadingHTTPServer | None = field(default=None, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def add_client(self, client_id: str, client_secret: str | None = None, scope: str = DEFAULT_SCOPE) -> str:
        """Register a client; returns its secret (a random one unless given)."""
        secret = client_secret or secrets.token_urlsafe(18)
        self.clients[client_id] = _Client(client_id, secret, scope)
        return secret

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_endpoint_url(self) -> str:
        return f"{self.issuer}/token"

    @property
    def jwks_endpoint_url(self) -> str:
        return f"{self.issuer}/jwks"

    def jwks(self) -> dict[str, Any]:
        """The public keys, as /jwks serves them."""
        return {"keys": [self.key.as_dict(private=False)]}

    def bind(self) -> None:
        """Take the port (a free one when 0), so the issuer URL is known before the brokers are configured."""
        if self._http is None:
            self._http = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
            self._http.daemon_threads = True
            self.port = self._http.server_address[1]

    def start(self) -> IdentityProvider:
        """Serve in a daemon thread of this process."""
        self.bind()
        assert self._http is not None
        self._thread = threading.Thread(target=self._http.serve_forever, name="identity-provider", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.bind()
        assert self._http is not None
        self._http.serve_forever()

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def __enter__(self) -> IdentityProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ state for the process form
    def save(self, directory: Path) -> Path:
        """Write clients, key and settings to `directory` (0600): what the process form starts from."""
        path = directory / STATE_FILE
        state = {"port": self.port, "audience": self.audience, "token_seconds": self.token_seconds,
                 "key": self.key.as_dict(private=True),
                 "clients": {c.client_id: {"secret": c.client_secret, "scope": c.scope} for c in self.clients.values()}}
        path.touch(mode=0o600)
        path.write_text(json.dumps(state, indent=2))
        return path

    @classmethod
    def load(cls, directory: Path) -> IdentityProvider:
        state = json.loads((directory / STATE_FILE).read_text())
        provider = cls(port=state["port"], audience=state["audience"], token_seconds=state["token_seconds"],
                       key=RSAKey.import_key(state["key"]))
        for client_id, client in state["clients"].items():
            provider.add_client(client_id, client["secret"], client["scope"])
        return provider


def _handler(provider: IdentityProvider) -> type[BaseHTTPRequestHandler]:
    server = _Server(provider)

    class Handler(BaseHTTPRequestHandler):
        server_version = "insync-dev-idp"

        def _send(self, status: int, body: bytes, headers: list[tuple[str, str]] | None = None,
                  content_type: str = "application/json") -> None:
            self.send_response(status)
            sent = {name.lower() for name, _ in headers or []}
            for name, value in headers or []:
                self.send_header(name, value)
            if "content-type" not in sent:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/jwks":
                self._send(200, json.dumps(provider.jwks()).encode())
            elif self.path == "/.well-known/openid-configuration":
                self._send(200, json.dumps({
                    "issuer": provider.issuer, "token_endpoint": provider.token_endpoint_url,
                    "jwks_uri": provider.jwks_endpoint_url, "grant_types_supported": ["client_credentials"],
                    "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                }).encode())
            else:
                self._send(404, b"<html><body>not found</body></html>", content_type="text/html")

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/token":
                self._send(404, b"<html><body>not found</body></html>", content_type="text/html")
                return
            length = int(self.headers.get("Content-Length") or 0)
            form = dict(parse_qsl(self.rfile.read(length).decode("utf-8", "replace")))
            request = _Request(provider.token_endpoint_url, dict(self.headers.items()), form)
            status, body, headers = server.create_token_response(request)
            self._send(status, body, headers)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            pass  # the dev cluster's provider is quiet; a refused client shows in the client's own error

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m insync_proxy.devcluster.identity_provider",
        description="Serve the dev cluster's OAuth 2.0 identity provider (client-credentials grant, JWKS) on "
                    "127.0.0.1, from the state `dev-cluster up --security oauthbearer` wrote.")
    parser.add_argument("--dir", required=True, type=Path, help=f"the directory holding {STATE_FILE}")
    args = parser.parse_args(argv)
    try:
        provider = IdentityProvider.load(args.dir)
    except (OSError, ValueError, KeyError) as exc:
        print(f"identity provider: cannot read {args.dir / STATE_FILE}: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        provider.bind()
    except OSError as exc:
        print(f"identity provider: cannot listen on 127.0.0.1:{provider.port}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"identity provider: {provider.issuer} (token endpoint /token, JWKS /jwks), {len(provider.clients)} "
          f"client(s), started {time.strftime('%H:%M:%S')}", flush=True)
    try:
        provider.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
