"""SASL's client messages, sans-IO: what the proxy's own login sends and how it reads the broker's answers.

PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and OAUTHBEARER's initial response (RFC 7628, with
Kafka's KIP-342 extensions): bytes out, bytes in, no socket and no clock. The exchange itself (SaslHandshake,
then SaslAuthenticate round trips on a connection) is proxy/controlplane/sasl.py's; GSSAPI and AWS_MSK_IAM
build their tokens with their own libraries (proxy/controlplane/kerberos.py, aws_msk_iam.py).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

__all__ = ["SCRAM_DIGESTS", "SaslError", "ScramClient", "oauthbearer_initial_response", "plain_initial_response"]

#: Kafka's SCRAM mechanisms and the digest each uses.
SCRAM_DIGESTS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SaslError(Exception):
    """Authentication failed; the message never contains the password.

    `error_code`: the broker's Kafka error code when it refused (33 UNSUPPORTED_SASL_MECHANISM,
    58 SASL_AUTHENTICATION_FAILED), None when the exchange itself went wrong.
    """

    def __init__(self, message: str, error_code: int | None = None, *, credentials_refused: bool = False) -> None:
        super().__init__(message)
        self.error_code = error_code
        #: The broker (or the token endpoint) refused these credentials: retrying them elsewhere is no use.
        self.credentials_refused = credentials_refused or error_code == 58
        #: A refused SaslHandshake: the mechanisms the listener enables.
        self.enabled: tuple[str, ...] | None = None


def plain_initial_response(username: str, password: str) -> bytes:
    """PLAIN's one message: no authorization identity, the user, the password (RFC 4616)."""
    return b"\0" + username.encode() + b"\0" + password.encode()


def oauthbearer_initial_response(token: str, extensions: tuple[str, ...] = ()) -> bytes:
    """RFC 7628's client initial response as Kafka reads it: GS2 header, `auth=Bearer <token>`, KIP-342
    extensions (key=value), each followed by 0x01, and a closing 0x01."""
    fields = [f"auth=Bearer {token}", *extensions]
    return ("n,,\x01" + "".join(f"{f}\x01" for f in fields) + "\x01").encode()


class ScramClient:
    """One SCRAM login (RFC 5802 without channel binding, as Kafka's brokers speak it).

    `first_message()`, then `final_message(server_first)` with the broker's first answer, then
    `verify(server_final)` with its last: SaslError when the broker sent an error, a nonce that does not extend
    ours, or a signature that proves it does not know the password's salted key.
    """

    def __init__(self, digest: str, username: str, password: str, nonce: str | None = None) -> None:
        """`digest`: sha256 or sha512 (`SCRAM_DIGESTS`); `nonce`: the client nonce (random by default; tests give
        RFC 7677's)."""
        if digest not in SCRAM_DIGESTS.values():
            raise ValueError(f"SCRAM digest {digest!r} is not one of {sorted(SCRAM_DIGESTS.values())}")
        self.digest = digest
        self._password = password
        self.nonce = nonce if nonce is not None else base64.b64encode(os.urandom(24)).decode()
        self._client_first_bare = f"n={_escape(username)},r={self.nonce}"
        self._auth_message = b""
        self._salted = b""

    def first_message(self) -> bytes:
        """client-first-message: GS2 header (no channel binding, no authzid), user name, nonce."""
        return ("n,," + self._client_first_bare).encode()

    def final_message(self, server_first: bytes) -> bytes:
        """client-final-message, with the proof, for the broker's server-first-message."""
        text = server_first.decode("utf-8", "replace")
        fields = _attributes(text, "rsi")
        server_nonce = fields["r"]
        if not server_nonce.startswith(self.nonce):
            raise SaslError("SCRAM server nonce does not extend the client nonce")
        try:
            salt, iterations = base64.b64decode(fields["s"], validate=True), int(fields["i"])
        except ValueError:
            raise SaslError("malformed SCRAM salt or iteration count from the broker") from None
        if iterations < 1:
            raise SaslError(f"SCRAM iteration count {iterations} from the broker")
        digest = self.digest
        salted = self._salted = hashlib.pbkdf2_hmac(digest, self._password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        stored_key = hashlib.new(digest, client_key).digest()
        client_final_bare = f"c=biws,r={server_nonce}"
        auth_message = self._auth_message = f"{self._client_first_bare},{text},{client_final_bare}".encode()
        signature = hmac.new(stored_key, auth_message, digest).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        return f"{client_final_bare},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        """The broker's server-final-message must carry the signature only the password's owner can compute."""
        if not self._auth_message:
            raise RuntimeError("verify() before final_message()")
        received = _attributes(server_final.decode("utf-8", "replace"), "v")["v"]
        server_key = hmac.new(self._salted, b"Server Key", self.digest).digest()
        expected = base64.b64encode(hmac.new(server_key, self._auth_message, self.digest).digest()).decode()
        if not hmac.compare_digest(received.encode(), expected.encode()):
            raise SaslError("SCRAM server signature does not match: the broker is not who it claims to be")


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
