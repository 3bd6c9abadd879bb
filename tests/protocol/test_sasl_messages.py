"""SASL's client messages, sans-IO (protocol/sasl.py): RFC 7677's SCRAM-SHA-256 example byte for byte, and each
way a broker's answer can be wrong."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from insync_proxy.protocol.sasl import (
    SCRAM_DIGESTS,
    SaslError,
    ScramClient,
    oauthbearer_initial_response,
    plain_initial_response,
)

# RFC 7677, section 3: user "user", password "pencil".
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_sha_256_is_rfc_7677s_example() -> None:
    client = ScramClient("sha256", "user", "pencil", nonce=RFC_NONCE)
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)  # the broker proved it knows the salted password


def test_a_broker_that_does_not_know_the_password_is_refused() -> None:
    client = ScramClient("sha256", "user", "pencil", nonce=RFC_NONCE)
    client.final_message(RFC_SERVER_FIRST)
    forged = b"v=" + base64.b64encode(hmac.new(b"guess", b"x", hashlib.sha256).digest())
    with pytest.raises(SaslError, match="signature does not match"):
        client.verify(forged)


@pytest.mark.parametrize(("server_first", "error"), [
    (b"r=someone-elses-nonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend the client nonce"),
    (b"e=unknown-user", "SCRAM error from the broker: unknown-user"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,i=4096", "lacks s"),
    (b"garbage without attributes", "malformed SCRAM message"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=not base64!,i=4096", "malformed SCRAM salt"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=0", "iteration count 0"),
])
def test_a_wrong_first_answer_is_a_clear_error(server_first: bytes, error: str) -> None:
    with pytest.raises(SaslError, match=error):
        ScramClient("sha256", "user", "pencil", nonce=RFC_NONCE).final_message(server_first)


def test_names_are_escaped_and_each_login_has_its_own_nonce() -> None:
    first = ScramClient("sha512", "a=b,c", "pw").first_message()
    assert first.startswith(b"n,,n=a=3Db=2Cc,r=")
    assert ScramClient("sha512", "u", "pw").nonce != ScramClient("sha512", "u", "pw").nonce
    assert set(SCRAM_DIGESTS.values()) == {"sha256", "sha512"}
    with pytest.raises(ValueError, match="md5"):
        ScramClient("md5", "u", "pw")


def test_plain_and_oauthbearer_messages() -> None:
    assert plain_initial_response("alice", "s3cret") == b"\0alice\0s3cret"
    assert oauthbearer_initial_response("tok", ("traceId=1",)) == b"n,,\x01auth=Bearer tok\x01traceId=1\x01\x01"
