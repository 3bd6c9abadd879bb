"""A small blocking Kafka client built on protocol/: one connection, requests answered in order.

It serves the project's own synchronous callers: the dev cluster's probe, the producer-side
partitioner, the tests and the benchmarks. The proxy's runtime never imports it (its I/O is asyncio).

Every failure to get a usable answer (no connection, a timeout, the peer closing, a wrong
correlation id, an undecodable response) raises a :class:`KafkaClientError`, an ``OSError``, so
callers that treat the network as unreliable catch one type. Kafka's own error codes are not
errors here: they come back in the decoded response.
"""

from __future__ import annotations

import socket
import ssl
import struct
from itertools import count
from types import TracebackType
from typing import TypeVar, overload

from insync_proxy.protocol import (
    ApiKey,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ErrorCode,
    ProtocolError,
    RequestHeader,
    decode_response,
    encode_frame,
    encode_request,
    encode_request_header,
    negotiation,
    split_response,
)
from insync_proxy.protocol.api_keys import api_name
from insync_proxy.protocol.framing import DEFAULT_MAX_FRAME_SIZE
from insync_proxy.protocol.primitives import Buffer
from insync_proxy.protocol.schema import Message

__all__ = [
    "CORRELATION_ID_OFFSET",
    "BlockingKafkaClient",
    "ConnectionClosed",
    "KafkaClientError",
    "RequestTimedOut",
    "UnexpectedResponse",
    "parse_address",
    "request_frame",
]

R = TypeVar("R", bound=Message)

#: Offset of the correlation id in a whole request frame (after the size prefix, api key, version).
CORRELATION_ID_OFFSET = 8
_SIZE = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
_MAX_CORRELATION_ID = 2**31 - 1


class KafkaClientError(OSError):
    """No usable answer: the message says from where, to what and why."""


class ConnectionClosed(KafkaClientError):
    """The peer closed the connection before a whole response arrived."""


class RequestTimedOut(KafkaClientError):
    """No (whole) answer within the client's timeout; the connection is closed."""


class UnexpectedResponse(KafkaClientError):
    """A response with another correlation id, a bad size, or bytes the codec cannot decode."""


def parse_address(address: str) -> tuple[str, int]:
    """("host", port) of "host:port", or of the first entry of a bootstrap list "h1:p1,h2:p2"."""
    first = address.split(",")[0].strip()
    host, sep, port = first.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


def request_frame(api_key: int, version: int, body: Buffer, *, client_id: str | None, correlation_id: int = 0
                  ) -> bytearray:
    """A whole request frame, size prefix included; its correlation id may be patched at
    :data:`CORRELATION_ID_OFFSET` to send the same frame many times."""
    header = encode_request_header(RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id))
    return bytearray(encode_frame(header + bytes(body)))


class BlockingKafkaClient:
    """One blocking connection to a broker (or to the proxy), optionally over TLS.

    ``request`` sends one request and waits for its answer; ``send``/``receive`` pipeline several
    (answers come back in request order); ``send_bytes``/``receive_frame`` move whole frames for
    tests and benchmarks that need exact bytes.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout: float = 30.0,
        client_id: str | None = "insync-proxy-client",
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.address = f"{host}:{port}"
        self.timeout = timeout
        self.client_id = client_id
        self.max_frame_size = max_frame_size
        self._correlation_ids = count(1)
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise KafkaClientError(f"cannot connect to {self.address}: {exc}") from exc
        try:
            # Small request/response exchanges: never wait for Nagle.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
        except OSError as exc:
            sock.close()
            raise KafkaClientError(f"TLS handshake with {self.address} failed: {exc}") from exc
        self.sock = sock

    @classmethod
    def connect(cls, address: str, *, timeout: float = 30.0, client_id: str | None = "insync-proxy-client",
                ssl_context: ssl.SSLContext | None = None) -> BlockingKafkaClient:
        """Connect to "host:port" (or the first server of a bootstrap list)."""
        host, port = parse_address(address)
        return cls(host, port, timeout=timeout, client_id=client_id, ssl_context=ssl_context)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> BlockingKafkaClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ sending
    def next_correlation_id(self) -> int:
        return next(self._correlation_ids) % _MAX_CORRELATION_ID

    def send_raw(self, api_key: int, version: int, body: Buffer) -> int:
        """Send a request whose body is already encoded (any bytes); returns its correlation id."""
        correlation_id = self.next_correlation_id()
        self.send_bytes(request_frame(api_key, version, body, client_id=self.client_id,
                                      correlation_id=correlation_id))
        return correlation_id

    def send(self, message: Message, version: int) -> int:
        """Encode and send a request; returns its correlation id (for :meth:`receive`)."""
        try:
            body = encode_request(message, version)
        except ProtocolError as exc:
            raise ValueError(f"cannot encode {type(message).__name__} v{version}: {exc}") from exc
        return self.send_raw(message.API_KEY, version, body)

    def send_bytes(self, data: Buffer) -> None:
        """Write bytes as they are: whole frames built elsewhere, or deliberately broken ones."""
        try:
            self.sock.sendall(data)
        except TimeoutError:
            self.close()
            raise RequestTimedOut(f"{self.address} did not take our bytes within {self.timeout}s") from None
        except OSError as exc:
            raise KafkaClientError(f"sending to {self.address} failed: {exc}") from exc

    # ------------------------------------------------------------------ receiving
    def _read_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        try:
            while got < n:
                chunk = self.sock.recv_into(view[got:], n - got)
                if chunk == 0:
                    raise ConnectionClosed(f"{self.address} closed the connection "
                                           f"({got} of {n} bytes of a response read)")
                got += chunk
        except TimeoutError:
            self.close()
            raise RequestTimedOut(f"no answer from {self.address} within {self.timeout}s") from None
        except KafkaClientError:
            raise
        except OSError as exc:
            raise KafkaClientError(f"reading from {self.address} failed: {exc}") from exc
        return bytes(buf)

    def receive_frame(self) -> bytes:
        """The next response frame, size prefix stripped (header + body)."""
        (size,) = _SIZE.unpack(self._read_exact(4))
        if not 0 <= size <= self.max_frame_size:
            self.close()
            raise UnexpectedResponse(f"{self.address} sent a frame size of {size} bytes")
        return self._read_exact(size)

    def receive_raw(self, api_key: int, version: int, correlation_id: int) -> memoryview:
        """The body of the next response, which must answer ``correlation_id``."""
        frame = self.receive_frame()
        try:
            got, body = split_response(frame, api_key, version)
        except ProtocolError as exc:
            self.close()
            raise UnexpectedResponse(f"bad {api_name(api_key)} v{version} response header from "
                                     f"{self.address}: {exc}") from exc
        if got != correlation_id:
            self.close()  # the stream is out of step: nothing after this can be trusted
            raise UnexpectedResponse(f"{self.address} answered correlation id {got}, expected {correlation_id} "
                                     f"({api_name(api_key)} v{version})")
        return body

    @overload
    def receive(self, api_key: int, version: int, correlation_id: int) -> Message: ...

    @overload
    def receive(self, api_key: int, version: int, correlation_id: int, expect: type[R]) -> R: ...

    def receive(self, api_key: int, version: int, correlation_id: int, expect: type[Message] = Message
                ) -> Message:
        """The decoded next response, which must answer ``correlation_id`` (and be an ``expect``)."""
        body = self.receive_raw(api_key, version, correlation_id)
        try:
            response = decode_response(api_key, version, body)
        except ProtocolError as exc:
            raise UnexpectedResponse(f"undecodable {api_name(api_key)} v{version} response from "
                                     f"{self.address}: {exc}") from exc
        if not isinstance(response, expect):
            raise UnexpectedResponse(f"{api_name(api_key)} v{version} decoded to {type(response).__name__}, "
                                     f"not {expect.__name__}")
        return response

    # ------------------------------------------------------------------ request/response
    @overload
    def request(self, message: Message, version: int) -> Message: ...

    @overload
    def request(self, message: Message, version: int, expect: type[R]) -> R: ...

    def request(self, message: Message, version: int, expect: type[Message] = Message) -> Message:
        """Send ``message`` at ``version``, return the decoded response (checked to be an ``expect``)."""
        correlation_id = self.send(message, version)
        return self.receive(message.API_KEY, version, correlation_id, expect)

    def request_raw(self, api_key: int, version: int, body: Buffer) -> bytes:
        """Send an encoded body, return the response body bytes (correlation id checked)."""
        correlation_id = self.send_raw(api_key, version, body)
        return bytes(self.receive_raw(api_key, version, correlation_id))

    def api_versions(self, version: int = 3) -> dict[int, tuple[int, int]]:
        """The peer's (min, max) version per API key."""
        body = self.request_raw(ApiKey.API_VERSIONS, version, encode_request(ApiVersionsRequest(
            client_software_name="insync-proxy", client_software_version="1"), version))
        # A peer that does not know our version answers in the v0 layout with UNSUPPORTED_VERSION.
        unsupported = len(body) >= 2 and _ERROR_CODE.unpack_from(body)[0] == ErrorCode.UNSUPPORTED_VERSION
        layout = 0 if unsupported else version
        try:
            response = decode_response(ApiKey.API_VERSIONS, layout, body)
        except ProtocolError as exc:
            raise UnexpectedResponse(f"undecodable ApiVersions response from {self.address}: {exc}") from exc
        assert isinstance(response, ApiVersionsResponse)
        if response.error_code != 0 and layout == version:
            raise UnexpectedResponse(f"ApiVersions v{version} to {self.address} failed with error "
                                     f"{response.error_code}")
        if layout != version:
            offered = {k.api_key: k.max_version for k in response.api_keys}.get(ApiKey.API_VERSIONS, 0)
            return self.api_versions(min(offered, version - 1)) if version > 0 else {}
        return negotiation.version_ranges(response)

    def highest_common_version(self, api_key: int, supported: tuple[int, int],
                               peer: dict[int, tuple[int, int]] | None = None) -> int:
        """The highest version of ``api_key`` both we (``supported``) and the peer speak."""
        ranges = peer if peer is not None else self.api_versions()
        if api_key not in ranges:
            raise UnexpectedResponse(f"{self.address} does not offer {api_name(api_key)}")
        version = negotiation.highest_common_version(supported, ranges[api_key])
        if version is None:
            raise UnexpectedResponse(f"no common {api_name(api_key)} version with {self.address}: "
                                     f"it speaks v{ranges[api_key][0]}-v{ranges[api_key][1]}, "
                                     f"we v{supported[0]}-v{supported[1]}")
        return version
