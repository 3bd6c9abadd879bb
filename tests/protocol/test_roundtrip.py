"""Round-trip properties for every supported version of every message, generated from the schema."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from insync_proxy.protocol.messages import decode_request, decode_response, encode_request, encode_response
from insync_proxy.protocol.schema import Message

from .schema_gen import all_message_versions, message_strategy

CASES = all_message_versions()


@pytest.mark.parametrize(("kind", "cls", "version"), CASES, ids=[f"{c.__name__}-v{v}" for _, c, v in CASES])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_message_survives_encode_decode_and_reencodes_byte_identically(
    kind: str, cls: type[Message], version: int, data: Any
) -> None:
    # Given a random message holding only fields that exist in this version
    msg = data.draw(message_strategy(cls, version))
    encode = encode_request if kind == "request" else encode_response
    decode = decode_request if kind == "request" else decode_response
    # When it is encoded and decoded again
    wire = encode(msg, version)
    back = decode(cls.API_KEY, version, wire)
    # Then it is equal, and re-encoding gives the very same bytes
    assert back == msg
    assert encode(back, version) == wire
