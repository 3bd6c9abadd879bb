"""Request/response headers: version choice, peek without decoding the body, round trips."""

from __future__ import annotations

import struct

import pytest

from insync_proxy.protocol.api_keys import FIRST_FLEXIBLE_VERSION, ApiKey, is_flexible
from insync_proxy.protocol.errors import ErrorCode, MalformedFrame, TruncatedData
from insync_proxy.protocol.headers import (
    RequestHeader,
    RequestHeaderPeek,
    ResponseHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    peek_request_header,
    request_header_version,
    response_header_version,
)


def test_api_key_table_covers_every_key_up_to_kafka_4() -> None:
    assert set(FIRST_FLEXIBLE_VERSION) == set(range(0, 93))
    assert ApiKey(0).name == "PRODUCE" and ApiKey(3).name == "METADATA" and ApiKey(60).name == "DESCRIBE_CLUSTER"
    assert FIRST_FLEXIBLE_VERSION[ApiKey.PRODUCE] == 9 and FIRST_FLEXIBLE_VERSION[ApiKey.SASL_HANDSHAKE] is None


def test_error_code_table_has_kafka_names() -> None:
    assert ErrorCode.NOT_ENOUGH_REPLICAS == 19
    assert ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND == 20
    assert ErrorCode.INVALID_REQUIRED_ACKS == 21
    assert ErrorCode.LEADER_NOT_AVAILABLE == 5
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert max(ErrorCode) >= 133


@pytest.mark.parametrize(("key", "version", "req", "resp"), [
    (ApiKey.PRODUCE, 8, 1, 0), (ApiKey.PRODUCE, 9, 2, 1), (ApiKey.METADATA, 12, 2, 1),
    (ApiKey.API_VERSIONS, 3, 2, 0), (ApiKey.API_VERSIONS, 4, 2, 0), (ApiKey.API_VERSIONS, 2, 1, 0),
    (ApiKey.CONTROLLED_SHUTDOWN, 0, 0, 0), (ApiKey.SASL_HANDSHAKE, 1, 1, 0), (ApiKey.DESCRIBE_CLUSTER, 0, 2, 1),
    (99, 0, 2, 1),
])
def test_header_versions_follow_flexibility(key: int, version: int, req: int, resp: int) -> None:
    assert request_header_version(key, version) == req
    assert response_header_version(key, version) == resp
    assert is_flexible(key, version) == (req == 2)


def test_peek_v1_header_reads_client_id_without_the_body() -> None:
    frame = struct.pack(">hhih", 0, 7, 42, 3) + b"cli" + b"BODY"
    peek = peek_request_header(frame)
    assert (peek.api_key, peek.api_version, peek.correlation_id, peek.client_id, peek.header_size) == (
        0, 7, 42, "cli", 13)
    assert peek == RequestHeaderPeek(0, 7, 42, "cli", 13)
    assert frame[peek.header_size:] == b"BODY"


def test_peek_v2_header_keeps_int16_client_id_then_skips_tagged_fields() -> None:
    # Given a flexible Metadata v12 header with a null client_id and one unknown tagged field
    frame = struct.pack(">hhih", 3, 12, 9, -1) + bytes.fromhex("01" "07" "02" "abcd") + b"BODY"
    # When it is peeked
    peek = peek_request_header(frame)
    # Then the client id is None and the body starts after the tagged section
    assert peek.client_id is None
    assert frame[peek.header_size:] == b"BODY"
    header, offset = decode_request_header(frame)
    assert header.unknown_tagged_fields == ((7, b"\xab\xcd"),)
    assert encode_request_header(header) == frame[:offset]


def test_peek_controlled_shutdown_v0_has_no_client_id() -> None:
    assert peek_request_header(struct.pack(">hhi", 7, 0, 5)).header_size == 8


def test_truncated_or_corrupt_headers_raise_protocol_errors() -> None:
    with pytest.raises(TruncatedData):
        peek_request_header(b"\x00\x00\x00")
    with pytest.raises(TruncatedData):
        peek_request_header(struct.pack(">hhih", 0, 7, 1, 50) + b"short")
    with pytest.raises(MalformedFrame):
        peek_request_header(struct.pack(">hhih", 0, 7, 1, -5))
    with pytest.raises(MalformedFrame):
        peek_request_header(struct.pack(">hhih", 0, 7, 1, 2) + b"\xff\xfe")


@pytest.mark.parametrize("client_id", [None, "", "producer-1", "ünï"])
@pytest.mark.parametrize(("key", "version"), [(0, 3), (0, 9), (3, 13), (18, 4), (7, 0)])
def test_request_header_round_trips(client_id: str | None, key: int, version: int) -> None:
    header = RequestHeader(request_api_key=key, request_api_version=version, correlation_id=-7,
                           client_id=client_id if request_header_version(key, version) else None)
    data = encode_request_header(header)
    assert decode_request_header(data + b"x") == (header, len(data))


def test_response_header_v1_keeps_tagged_fields() -> None:
    header = ResponseHeader(correlation_id=12, unknown_tagged_fields=((3, b"z"),))
    data = encode_response_header(header, 1)
    assert data == bytes.fromhex("0000000c" "01" "03" "01" "7a")
    assert decode_response_header(data, 1) == (header, len(data))
    assert encode_response_header(ResponseHeader(correlation_id=12), 0) == b"\x00\x00\x00\x0c"
