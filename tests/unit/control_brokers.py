"""Scripted brokers for the control connection's unit tests: one that speaks SASL PLAIN and SCRAM (`PlainBroker`), and
one that answers ApiVersions, Metadata and DescribeConfigs as a Kafka 2.8 broker, whose faults the test scripts
(`FakeBroker`)."""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass

from insync_proxy.protocol import (
    ApiKey,
    ApiVersionsResponse,
    MetadataResponse,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
    decode_request_header,
    encode_response,
)
from insync_proxy.protocol.messages import ApiVersion, MetadataResponseBroker

VERSIONS = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 11), ApiKey.SASL_HANDSHAKE: (0, 1),
            ApiKey.SASL_AUTHENTICATE: (0, 2), ApiKey.DESCRIBE_CONFIGS: (0, 4)}


PASSWORD = "the-right-password"


@dataclass
class Login:
    mechanism: str = "PLAIN"
    username: str = "insync-proxy"
    password: str = "a-wrong-password"
    password_file: str | None = None


class PlainBroker:
    """Answers ApiVersions, SaslHandshake, SaslAuthenticate (PLAIN: PASSWORD only) and Metadata.

    `session_lifetime_ms`: the sessions it grants (KIP-368); a request it reads after its connection's session ended
    closes that connection, as Kafka does. `stall_seconds`: it stands still that long before reading its first
    Metadata request (a paused broker), the request already sent."""

    def __init__(self, refusal: str = "Authentication failed: Invalid username or password",
                 mechanisms: tuple[str, ...] = ("PLAIN",), session_lifetime_ms: int = 0,
                 stall_seconds: float = 0.0) -> None:
        self.server: asyncio.Server | None = None
        self.refusal = refusal
        self.mechanisms = mechanisms
        self.session_lifetime_ms = session_lifetime_ms
        self.stall_seconds = stall_seconds
        self.logins = 0
        self.closed_for_session_end = 0

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return ("127.0.0.1", self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session_ends_at: float | None = None
        try:
            while True:
                frame = await reader.readexactly(struct.unpack(">i", await reader.readexactly(4))[0])
                header, offset = decode_request_header(frame)
                key, version = header.request_api_key, header.request_api_version
                if key == ApiKey.METADATA and self.stall_seconds:
                    stall, self.stall_seconds = self.stall_seconds, 0.0
                    await asyncio.sleep(stall)
                if key not in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE) and session_ends_at is not None \
                        and time.monotonic() >= session_ends_at:
                    self.closed_for_session_end += 1
                    writer.close()  # KIP-368: a request after the session's end closes the connection
                    return
                head = struct.pack(">i", header.correlation_id)
                if key == ApiKey.API_VERSIONS:
                    body = encode_response(ApiVersionsResponse(api_keys=tuple(
                        ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in VERSIONS.items()
                    )), min(version, 3))
                elif key == ApiKey.SASL_HANDSHAKE:
                    body = encode_response(SaslHandshakeResponse(
                        # a PLAINTEXT listener answers ILLEGAL_SASL_STATE (34) with no mechanism
                        error_code=0 if "PLAIN" in self.mechanisms else 33 if self.mechanisms else 34,
                        mechanisms=self.mechanisms), version)
                elif key == ApiKey.SASL_AUTHENTICATE:
                    ok = bytes(frame[offset:]).endswith(PASSWORD.encode())
                    lifetime = self.session_lifetime_ms if ok and version >= 1 else 0
                    if ok:
                        self.logins += 1
                        session_ends_at = time.monotonic() + lifetime / 1000 if lifetime else None
                    body = encode_response(SaslAuthenticateResponse(
                        error_code=0 if ok else 58, error_message=None if ok else self.refusal,
                        session_lifetime_ms=lifetime), version)
                else:
                    body = encode_response(MetadataResponse(brokers=(MetadataResponseBroker(
                        node_id=1, host="127.0.0.1", port=1),)), version)
                    head += b"\0" if version >= 9 else b""
                writer.write(struct.pack(">i", len(head) + len(body)) + head + body)
                if key == ApiKey.SASL_AUTHENTICATE and not ok:
                    await writer.drain()
                    writer.close()  # as Kafka does after a failed authentication
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


class FakeBroker:
    """Answers ApiVersions and Metadata like a broker of the given versions; `hung` accepts and never answers."""

    def __init__(self, node_id: int, hung: bool = False, versions: dict[int, tuple[int, int]] | None = None):
        self.node_id = node_id
        self.hung = hung
        self.versions = versions or KAFKA_28_VERSIONS
        self.seen: list[tuple[int, int]] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return ("127.0.0.1", self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                if self.hung:
                    continue
                header, _ = decode_request_header(frame)
                key, version = header.request_api_key, header.request_api_version
                self.seen.append((key, version))
                if key == ApiKey.API_VERSIONS:
                    body = encode_response(ApiVersionsResponse(api_keys=tuple(
                        ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in self.versions.items()
                    )), min(version, 3))
                    head = struct.pack(">i", header.correlation_id)
                else:
                    body = encode_response(MetadataResponse(brokers=(MetadataResponseBroker(
                        node_id=self.node_id, host="127.0.0.1", port=1),)), version)
                    head = struct.pack(">i", header.correlation_id) + (b"\0" if version >= 9 else b"")
                writer.write(struct.pack(">i", len(head) + len(body)) + head + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


#: What a Kafka 2.8 broker advertises for the APIs the control connection uses.
KAFKA_28_VERSIONS = {ApiKey.API_VERSIONS: (0, 3), ApiKey.METADATA: (0, 11), ApiKey.DESCRIBE_CONFIGS: (0, 4)}
