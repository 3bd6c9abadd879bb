"""The blocking client against a scripted loopback broker: requests, pipelining, and every failure."""

from __future__ import annotations

import ast
import shutil
import ssl
import struct
import subprocess
from pathlib import Path

import pytest

from harness.scripted_broker import CLOSE, Received, ScriptedBroker
from insync_proxy.client.blocking_client import (
    CORRELATION_ID_OFFSET,
    BlockingKafkaClient,
    ConnectionClosed,
    KafkaClientError,
    RequestTimedOut,
    UnexpectedResponse,
    parse_address,
    request_frame,
)
from insync_proxy.protocol import (
    ApiKey,
    ApiVersionsResponse,
    ErrorCode,
    MetadataRequest,
    MetadataResponse,
    ProduceResponse,
    encode_frame,
    encode_request,
    encode_response,
    encode_response_with_header,
)
from insync_proxy.protocol.messages import ApiVersion, MetadataRequestTopic, MetadataResponseBroker

ROOT = Path(__file__).resolve().parents[2]


def metadata_answer(request: Received) -> MetadataResponse:
    return MetadataResponse(brokers=(MetadataResponseBroker(node_id=1, host="b", port=9092),), controller_id=1)


def test_request_sends_a_header_and_decodes_the_answer() -> None:
    with ScriptedBroker(metadata_answer) as broker, \
            BlockingKafkaClient.connect(broker.address, client_id="me") as client:
        # When the client asks twice
        first = client.request(MetadataRequest(topics=(MetadataRequestTopic(name="t"),)), 12, MetadataResponse)
        second = client.request(MetadataRequest(topics=None), 1)
    # Then each answer is decoded, and the broker saw our client id and increasing correlation ids
    assert first.brokers[0].host == "b" and isinstance(second, MetadataResponse)
    assert [(r.header.request_api_version, r.header.client_id) for r in broker.received] == [(12, "me"), (1, "me")]
    assert broker.received[1].header.correlation_id == broker.received[0].header.correlation_id + 1
    assert broker.received[0].decoded() == MetadataRequest(topics=(MetadataRequestTopic(name="t"),))


def test_pipelined_requests_are_answered_in_order() -> None:
    with ScriptedBroker(metadata_answer) as broker, BlockingKafkaClient.connect(broker.address) as client:
        ids = [client.send(MetadataRequest(), 12) for _ in range(3)]
        answers = [client.receive(ApiKey.METADATA, 12, i, MetadataResponse) for i in ids]
    assert len(answers) == 3 and len(set(ids)) == 3


def test_request_raw_returns_the_body_bytes() -> None:
    with ScriptedBroker(metadata_answer) as broker, BlockingKafkaClient.connect(broker.address) as client:
        body = client.request_raw(ApiKey.METADATA, 9, encode_request(MetadataRequest(), 9))
    assert body == encode_response(metadata_answer(broker.received[0]), 9)


def test_a_wrong_correlation_id_is_refused() -> None:
    def wrong_id(request: Received) -> bytes:
        return encode_frame(struct.pack(">i", request.header.correlation_id + 7) + b"\x00" * 8)

    with ScriptedBroker(wrong_id) as broker, BlockingKafkaClient.connect(broker.address) as client:
        with pytest.raises(UnexpectedResponse, match="correlation id"):
            client.request(MetadataRequest(), 1)


def test_errors_are_os_errors_naming_the_peer() -> None:
    with ScriptedBroker(lambda r: CLOSE) as broker, BlockingKafkaClient.connect(broker.address) as client:
        with pytest.raises(ConnectionClosed, match=broker.address) as closed:
            client.request(MetadataRequest(), 1)
    assert isinstance(closed.value, OSError)


def test_no_answer_within_the_timeout() -> None:
    with ScriptedBroker(lambda r: None) as broker, \
            BlockingKafkaClient.connect(broker.address, timeout=0.3) as client:
        with pytest.raises(RequestTimedOut, match="0.3"):
            client.request(MetadataRequest(), 1)


def test_connection_refused_is_a_client_error() -> None:
    broker = ScriptedBroker(metadata_answer)
    address = broker.address
    broker.stop()  # nothing listens there any more
    with pytest.raises(KafkaClientError, match=f"cannot connect to {address}"):
        BlockingKafkaClient.connect(address, timeout=2)


def test_absurd_frame_sizes_and_undecodable_bodies_are_refused() -> None:
    with ScriptedBroker(lambda r: struct.pack(">i", -5)) as broker, \
            BlockingKafkaClient.connect(broker.address) as client:
        with pytest.raises(UnexpectedResponse, match="frame size"):
            client.request(MetadataRequest(), 1)

    def truncated(request: Received) -> bytes:
        return encode_frame(struct.pack(">i", request.header.correlation_id) + b"\x00\x00\x00\x05")

    with ScriptedBroker(truncated) as broker, BlockingKafkaClient.connect(broker.address) as client:
        with pytest.raises(UnexpectedResponse, match="undecodable METADATA v1"):
            client.request(MetadataRequest(), 1)


def test_api_versions_falls_back_when_the_peer_does_not_know_our_version() -> None:
    def answer(request: Received) -> ApiVersionsResponse:
        if request.header.request_api_version > 2:  # an old broker: error 35 and its range, v0 layout
            return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                       api_keys=(ApiVersion(api_key=ApiKey.API_VERSIONS, max_version=2),))
        return ApiVersionsResponse(api_keys=(ApiVersion(api_key=ApiKey.API_VERSIONS, max_version=2),
                                             ApiVersion(api_key=ApiKey.METADATA, min_version=0, max_version=9)))

    def v0_layout(request: Received) -> bytes | ApiVersionsResponse:
        response = answer(request)
        if response.error_code:
            body = encode_response(response, 0)
            return encode_frame(encode_response_with_header(18, request.header.request_api_version,
                                                            request.header.correlation_id, body))
        return response

    with ScriptedBroker(v0_layout, api_versions=None) as broker, \
            BlockingKafkaClient.connect(broker.address) as client:
        versions = client.api_versions()
        assert versions[ApiKey.METADATA] == (0, 9)
        assert client.highest_common_version(ApiKey.METADATA, (0, 13), versions) == 9
        with pytest.raises(UnexpectedResponse, match="no common METADATA version"):
            client.highest_common_version(ApiKey.METADATA, (10, 13), versions)
    assert [r.header.request_api_version for r in broker.received] == [3, 2]


def test_request_frame_can_be_sent_many_times_with_patched_correlation_ids() -> None:
    frame = request_frame(ApiKey.METADATA, 1, encode_request(MetadataRequest(), 1), client_id="bench")
    with ScriptedBroker(metadata_answer) as broker, BlockingKafkaClient.connect(broker.address) as client:
        for i in (41, 42):
            struct.pack_into(">i", frame, CORRELATION_ID_OFFSET, i)
            client.send_bytes(frame)
            assert client.receive(ApiKey.METADATA, 1, i, MetadataResponse).controller_id == 1
    assert [r.header.correlation_id for r in broker.received] == [41, 42]


def test_a_response_of_another_type_is_refused() -> None:
    with ScriptedBroker(metadata_answer) as broker, BlockingKafkaClient.connect(broker.address) as client:
        with pytest.raises(UnexpectedResponse, match="not ProduceResponse"):
            client.request(MetadataRequest(), 1, ProduceResponse)


def test_parse_address() -> None:
    assert parse_address("h:1,k:2") == ("h", 1)
    assert parse_address("[::1]:9092") == ("::1", 9092)
    with pytest.raises(ValueError):
        parse_address("no-port")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_connection(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client_context = ssl.create_default_context(cafile=str(cert))
    with ScriptedBroker(metadata_answer, ssl_context=server) as broker, \
            BlockingKafkaClient.connect(broker.address, ssl_context=client_context) as client:
        assert client.request(MetadataRequest(), 12, MetadataResponse).brokers[0].port == 9092
    untrusting = ssl.create_default_context()
    with ScriptedBroker(metadata_answer, ssl_context=server) as broker:
        with pytest.raises(KafkaClientError, match="TLS handshake"):
            BlockingKafkaClient.connect(broker.address, ssl_context=untrusting)


def test_the_proxy_runtime_never_imports_the_blocking_client() -> None:
    # Only the producer-side partitioner, the dev cluster and the one-shot connection check of
    # `check-config --connect` (and tests, benchmarks) may use it.
    allowed = {ROOT / "proxy" / "partitioner.py", ROOT / "proxy" / "blocking_client.py", ROOT / "proxy" / "preflight.py"}
    offenders = []
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        if path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n.endswith("blocking_client") or n.endswith("partitioner") for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
