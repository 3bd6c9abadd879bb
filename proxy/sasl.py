"""SASL for the proxy's own control connection: PLAIN and SCRAM-SHA-256/512 (RFC 5802/7677).

Client connections never come here: their SASL frames pass through the proxy untouched.
SaslHandshake v1 and SaslAuthenticate v1 (non-flexible) are encoded here directly: they are the
only two messages this needs and no client-facing path decodes them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from collections.abc import Awaitable, Callable
from typing import Any

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

RawRequest = Callable[[int, int, bytes], Awaitable[bytes]]


class SaslError(Exception):
    """Authentication failed; the message never contains the password."""


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _read_string(data: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = struct.unpack_from(">h", data, pos)
    pos += 2
    if n < 0:
        return None, pos
    return data[pos : pos + n].decode(), pos + n


async def _handshake(request: RawRequest, mechanism: str) -> None:
    body = await request(SASL_HANDSHAKE, 1, _string(mechanism))
    (error_code,) = struct.unpack_from(">h", body, 0)
    if error_code != 0:
        (count,) = struct.unpack_from(">i", body, 2)
        pos, enabled = 6, []
        for _ in range(max(count, 0)):
            name, pos = _read_string(body, pos)
            enabled.append(name)
        raise SaslError(f"broker does not enable SASL mechanism {mechanism} (enabled: {enabled}, error {error_code})")


async def _authenticate(request: RawRequest, token: bytes) -> bytes:
    body = await request(SASL_AUTHENTICATE, 1, struct.pack(">i", len(token)) + token)
    (error_code,) = struct.unpack_from(">h", body, 0)
    message, pos = _read_string(body, 2)
    if error_code != 0:
        raise SaslError(f"SASL authentication failed (error {error_code}): {message}")
    (n,) = struct.unpack_from(">i", body, pos)
    return body[pos + 4 : pos + 4 + max(n, 0)]


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


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


async def _scram(request: RawRequest, digest: str, username: str, password: str) -> None:
    nonce = base64.b64encode(os.urandom(24)).decode()
    client_first_bare = f"n={_escape(username)},r={nonce}"
    server_first = (await _authenticate(request, ("n,," + client_first_bare).encode())).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
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
    if dict(item.split("=", 1) for item in server_final.split(",")).get("v") != expected:
        raise SaslError("SCRAM server signature does not match: the broker is not who it claims to be")
