"""A loopback TCP server that answers Kafka requests from a script: unit tests of the project's own
clients (the tests' and the benchmarks' own tests) without a JVM.

The script gets each request's decoded header and raw body and returns what to send back: a
response message (encoded at the request's version, with the right header), raw bytes written as
they are (wrong correlation ids, broken frames), ``None`` (no answer: the request waits), or
``CLOSE`` (the connection is closed). ApiVersions is answered by the broker itself (every version
protocol/ supports, or the ``api_versions`` given) unless ``api_versions`` is None.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass

from insync_proxy.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ApiVersionsResponse,
    FrameSplitter,
    RequestHeader,
    decode_request,
    decode_request_header,
    encode_frame,
    encode_response,
    encode_response_with_header,
)
from insync_proxy.protocol.messages import ApiVersion
from insync_proxy.protocol.schema import Message

CLOSE = object()
#: ApiVersions of a broker that speaks every version protocol/ knows.
EVERY_SUPPORTED_VERSION: dict[int, tuple[int, int]] = {int(k): v for k, v in SUPPORTED_VERSIONS.items()}

Answer = Message | bytes | object | None


@dataclass
class Received:
    header: RequestHeader
    body: bytes

    def decoded(self) -> Message:
        """The request body decoded with the schema (the codec checks our clients' bytes)."""
        return decode_request(self.header.request_api_key, self.header.request_api_version, self.body)


def response_frame(header: RequestHeader, message: Message) -> bytes:
    """The whole response frame (size prefix included) answering ``header`` with ``message``."""
    body = encode_response(message, header.request_api_version)
    return encode_frame(encode_response_with_header(
        header.request_api_key, header.request_api_version, header.correlation_id, body))


class ScriptedBroker:
    """Accepts connections on 127.0.0.1 (optionally TLS) and answers each request with ``script``."""

    def __init__(self, script: Callable[[Received], Answer], ssl_context: ssl.SSLContext | None = None,
                 api_versions: dict[int, tuple[int, int]] | None = EVERY_SUPPORTED_VERSION) -> None:
        self.script = script
        self.api_versions = api_versions
        self.ssl_context = ssl_context
        self.received: list[Received] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._stopped = threading.Event()
        self._connections: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedBroker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop listening and close every connection."""
        self._stopped.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._listener.close()
        for conn in list(self._connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        if self._thread.is_alive():
            self._thread.join(5)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if self.ssl_context is not None:
                try:
                    conn = self.ssl_context.wrap_socket(conn, server_side=True)
                except OSError:
                    conn.close()
                    continue
            self._connections.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        splitter = FrameSplitter()
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                for frame in splitter.feed(data):
                    header, offset = decode_request_header(frame)
                    request = Received(header, bytes(frame[offset:]))
                    if header.request_api_key == ApiKey.API_VERSIONS and self.api_versions is not None:
                        conn.sendall(response_frame(header, ApiVersionsResponse(api_keys=tuple(
                            ApiVersion(api_key=k, min_version=lo, max_version=hi)
                            for k, (lo, hi) in sorted(self.api_versions.items())))))
                        continue
                    self.received.append(request)
                    answer = self.script(request)
                    if answer is CLOSE:
                        return
                    if isinstance(answer, Message):
                        conn.sendall(response_frame(header, answer))
                    elif isinstance(answer, bytes | bytearray):
                        conn.sendall(answer)
