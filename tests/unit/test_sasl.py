"""The control connection's SASL login (PLAIN, SCRAM) against a scripted broker's side of the exchange."""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

import pytest

from insync_proxy.protocol import (
    ApiKey,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    decode_request,
    encode_response,
)
from insync_proxy.proxy.controlplane.sasl import SaslError, authenticate

SALT = b"pepper"
ITERATIONS = 4096


@dataclass
class Login:
    mechanism: str
    username: str | None = "alice"
    password: str | None = "s3cret"


class ScramBroker:
    """The broker's half of RFC 5802, answering the bodies the client sends."""

    def __init__(self, password: str = "s3cret", digest: str = "sha256", mechanisms: tuple[str, ...] = (
            "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), forge_signature: bool = False) -> None:
        self.password, self.digest, self.mechanisms, self.forge = password, digest, mechanisms, forge_signature
        self.seen: list[tuple[int, int, Any]] = []
        self.state: dict[str, str] = {}

    async def __call__(self, api_key: int, version: int, body: bytes) -> bytes:
        request = decode_request(api_key, version, body)
        self.seen.append((api_key, version, request))
        if isinstance(request, SaslHandshakeRequest):
            enabled = request.mechanism in self.mechanisms
            return encode_response(SaslHandshakeResponse(error_code=0 if enabled else 33,
                                                         mechanisms=self.mechanisms), version)
        assert isinstance(request, SaslAuthenticateRequest)
        return encode_response(self._answer(request.auth_bytes.decode()), version)

    def _answer(self, message: str) -> SaslAuthenticateResponse:
        if "\0" in message:  # PLAIN
            _, user, password = message.split("\0")
            ok = password == self.password
            return SaslAuthenticateResponse(error_code=0 if ok else 58, error_message=None if ok else "bad login")
        if message.startswith("n,,"):
            self.state["client_first_bare"] = message[3:]
            nonce = dict(i.split("=", 1) for i in message[3:].split(","))["r"] + "server"
            self.state["server_first"] = f"r={nonce},s={base64.b64encode(SALT).decode()},i={ITERATIONS}"
            return SaslAuthenticateResponse(auth_bytes=self.state["server_first"].encode())
        final_bare, proof = message.rsplit(",p=", 1)
        auth = f"{self.state['client_first_bare']},{self.state['server_first']},{final_bare}".encode()
        salted = hashlib.pbkdf2_hmac(self.digest, self.password.encode(), SALT, ITERATIONS)
        client_key = hmac.new(salted, b"Client Key", self.digest).digest()
        stored = hashlib.new(self.digest, client_key).digest()
        signature = hmac.new(stored, auth, self.digest).digest()
        if bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=True)) != client_key:
            return SaslAuthenticateResponse(error_code=58, error_message="invalid credentials")
        server_key = hmac.new(salted, b"Server Key", self.digest).digest()
        verifier = hmac.new(server_key if not self.forge else b"forged", auth, self.digest).digest()
        return SaslAuthenticateResponse(auth_bytes=b"v=" + base64.b64encode(verifier))


async def test_plain_login_uses_handshake_v1_and_authenticate_v1() -> None:
    broker = ScramBroker()
    await authenticate(broker, Login("PLAIN"))
    assert [(k, v) for k, v, _ in broker.seen] == [(ApiKey.SASL_HANDSHAKE, 1), (ApiKey.SASL_AUTHENTICATE, 1)]
    assert broker.seen[1][2].auth_bytes == b"\0alice\0s3cret"


@pytest.mark.parametrize(("mechanism", "digest"), [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")])
async def test_scram_login_proves_the_password_and_checks_the_server(mechanism: str, digest: str) -> None:
    await authenticate(ScramBroker(digest=digest), Login(mechanism))


async def test_a_wrong_password_fails_with_the_brokers_message() -> None:
    with pytest.raises(SaslError, match="invalid credentials"):
        await authenticate(ScramBroker(password="other"), Login("SCRAM-SHA-256"))


async def test_a_server_that_cannot_sign_is_refused() -> None:
    with pytest.raises(SaslError, match="server signature does not match"):
        await authenticate(ScramBroker(forge_signature=True), Login("SCRAM-SHA-256"))


async def test_a_mechanism_the_broker_does_not_enable_names_the_enabled_ones() -> None:
    with pytest.raises(SaslError, match=r"enabled: \['PLAIN'\], error 33"):
        await authenticate(ScramBroker(mechanisms=("PLAIN",)), Login("SCRAM-SHA-512"))


async def test_an_undecodable_answer_is_a_sasl_error() -> None:
    async def garbage(api_key: int, version: int, body: bytes) -> bytes:
        return b"\x00"

    with pytest.raises(SaslError, match="undecodable SaslHandshake"):
        await authenticate(garbage, Login("PLAIN"))
