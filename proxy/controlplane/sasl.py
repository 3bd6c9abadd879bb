"""SASL for the proxy's own control connection: PLAIN and SCRAM-SHA-256/512 (RFC 5802/7677).

Client connections never come here: their SASL frames pass through the proxy untouched.
SaslHandshake v1 and SaslAuthenticate v1 bodies come from the schema in protocol/messages.py; the
caller's ``request`` adds the header and returns the response body.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
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
from insync_proxy.protocol.schema import Message

HANDSHAKE_VERSION = 1
AUTHENTICATE_VERSION = 1

#: (api_key, api_version, request body) -> response body
RawRequest = Callable[[int, int, bytes], Awaitable[bytes]]


class SaslError(Exception):
    """Authentication failed; the message never contains the password.

    `error_code`: the broker's Kafka error code when it refused (33 UNSUPPORTED_SASL_MECHANISM,
    58 SASL_AUTHENTICATION_FAILED), None when the exchange itself went wrong.
    """

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


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
        raise SaslError(f"broker does not enable SASL mechanism {mechanism} "
                        f"(enabled: {list(response.mechanisms)}, error {response.error_code})", response.error_code)


async def _authenticate(request: RawRequest, token: bytes) -> bytes:
    response = await _ask(request, AUTHENTICATE_VERSION, SaslAuthenticateRequest(auth_bytes=token),
                          SaslAuthenticateResponse)
    if response.error_code != 0:
        raise SaslError(f"SASL authentication failed (error {response.error_code}): {response.error_message}",
                        response.error_code)
    return response.auth_bytes


async def authenticate(request: RawRequest, sasl: Any) -> None:
    """Authenticate a fresh connection with the configured mechanism."""
    mechanism = sasl.mechanism
    username = sasl.username or ""
    password = sasl.password or ""
    await _handshake(request, mechanism)
    if mechanism == "PLAIN":
        await _authenticate(request, b"\0" + username.encode() + b"\0" + password.encode())
        return
    if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        await _scram(request, "sha256" if mechanism.endswith("256") else "sha512", username, password)
        return
    raise SaslError(f"unsupported SASL mechanism {mechanism}")


def _attributes(message: str, required: str) -> dict[str, str]:
    """A SCRAM message's attributes (RFC 5802 section 5); SaslError if the server sent an error or garbage."""
    try:
        attributes = dict(item.split("=", 1) for item in message.split(","))
    except ValueError:
        raise SaslError("malformed SCRAM message from the broker") from None
    if "e" in attributes:
        raise SaslError(f"SCRAM error from the broker: {attributes['e']}")
    missing = [name for name in required if name not in attributes]
    if missing:
        raise SaslError(f"SCRAM message from the broker lacks {', '.join(missing)}")
    return attributes


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


async def _scram(request: RawRequest, digest: str, username: str, password: str) -> None:
    nonce = base64.b64encode(os.urandom(24)).decode()
    client_first_bare = f"n={_escape(username)},r={nonce}"
    server_first = (await _authenticate(request, ("n,," + client_first_bare).encode())).decode()
    fields = _attributes(server_first, "rsi")
    server_nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
    if not server_nonce.startswith(nonce):
        raise SaslError("SCRAM server nonce does not extend the client nonce")
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    client_final_bare = f"c=biws,r={server_nonce}"
    auth_message = f"{client_first_bare},{server_first},{client_final_bare}".encode()
    signature = hmac.new(stored_key, auth_message, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = f"{client_final_bare},p={base64.b64encode(proof).decode()}"
    server_final = (await _authenticate(request, final.encode())).decode()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, digest).digest()).decode()
    received = _attributes(server_final, "v")["v"]
    if not hmac.compare_digest(received.encode(), expected.encode()):
        raise SaslError("SCRAM server signature does not match: the broker is not who it claims to be")
