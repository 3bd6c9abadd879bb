"""The proxy's own control connection: Metadata and DescribeConfigs it needs for itself.

Separate from every client connection (clients' sessions and quotas stay theirs), with its own
TLS settings and credentials. Reconnects to the next bootstrap broker on failure.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import struct
from typing import Any

from insync_proxy.protocol import (
    ApiKey,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    FrameSplitter,
    MetadataRequest,
    MetadataResponse,
    ProtocolError,
    RequestHeader,
    decode_response,
    encode_request,
    encode_request_header,
    response_header_version,
)
from insync_proxy.protocol.headers import decode_response_header
from insync_proxy.protocol.messages import DescribeConfigsResource, MetadataRequestTopic
from insync_proxy.protocol.schema import Message
from insync_proxy.proxy.sasl import authenticate

log = logging.getLogger("insync_proxy.control")

METADATA_VERSION = 12  # served by Kafka 3.1 and later, names + topic ids
DESCRIBE_CONFIGS_VERSION = 4
TOPIC_RESOURCE = 2
CLIENT_ID = "insync-proxy-control"
OFFLOAD_DECODE_BYTES = 64 * 1024


class ControlError(Exception):
    """The control connection could not get an answer."""


class ControlConnection:
    """Request/response client over one connection to any broker; pipelined by correlation id."""

    def __init__(
        self,
        addresses: list[tuple[str, int]],
        ssl_context: ssl.SSLContext | None = None,
        sasl: Any = None,
        timeout: float = 10.0,
        max_frame_bytes: int = 104_857_600,
    ) -> None:
        self.addresses = addresses
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.timeout = timeout
        self.max_frame_bytes = max_frame_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, tuple[asyncio.Future[bytes], int, int]] = {}
        self._correlation = itertools.count(1)
        self._read_task: asyncio.Task[None] | None = None
        self._connect_lock = asyncio.Lock()
        self._next_address = 0
        self.connected_to: tuple[str, int] | None = None

    async def _connect(self) -> None:
        async with self._connect_lock:
            if self._writer is not None and not self._writer.is_closing():
                return
            errors = []
            for i in range(len(self.addresses)):
                host, port = self.addresses[(self._next_address + i) % len(self.addresses)]
                try:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(
                            host, port, ssl=self.ssl_context, server_hostname=host if self.ssl_context else None
                        ),
                        self.timeout,
                    )
                except (TimeoutError, OSError) as exc:
                    errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
                    continue
                self._reader, self._writer = reader, writer
                self._read_task = asyncio.get_running_loop().create_task(self._read_loop(reader))
                self.connected_to = (host, port)
                self._next_address = (self._next_address + i + 1) % len(self.addresses)
                if self.sasl is not None and self.sasl.mechanism:
                    try:
                        await authenticate(self._raw_request, self.sasl)
                    except Exception:
                        self._drop(ControlError("SASL authentication failed"))
                        raise
                return
            raise ControlError("no broker reachable: " + "; ".join(errors))

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        splitter = FrameSplitter(self.max_frame_bytes)
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    raise ControlError("broker closed the control connection")
                for frame in splitter.feed(data):
                    (correlation_id,) = struct.unpack_from(">i", frame, 0)
                    entry = self._pending.pop(correlation_id, None)
                    if entry is None:
                        raise ControlError(f"unexpected correlation id {correlation_id}")
                    future, api_key, version = entry
                    if not future.done():
                        future.set_result(bytes(frame))
        except asyncio.CancelledError:
            raise
        except (OSError, ControlError, ProtocolError) as exc:
            self._drop(exc)

    def _drop(self, exc: BaseException) -> None:
        for future, _, _ in self._pending.values():
            if not future.done():
                future.set_exception(ControlError(f"control connection lost: {exc}"))
        self._pending.clear()
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        self._reader = None
        self.connected_to = None

    async def _raw_request(self, api_key: int, version: int, body: bytes) -> bytes:
        """Send one request (header built here); return the response body bytes."""
        if self._writer is None or self._writer.is_closing():
            raise ControlError("not connected")
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        header = encode_request_header(
            RequestHeader(
                request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                client_id=CLIENT_ID,
            )
        )
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (future, api_key, version)
        payload = header + body
        self._writer.write(struct.pack(">i", len(payload)) + payload)
        try:
            frame = await asyncio.wait_for(future, self.timeout)
        except TimeoutError:
            self._pending.pop(correlation_id, None)
            self._drop(ControlError("request timed out"))
            raise ControlError(f"{ApiKey(api_key).name} timed out after {self.timeout}s") from None
        _, offset = decode_response_header(frame, response_header_version(api_key, version))
        return frame[offset:]

    async def request(self, message: Message, version: int) -> Message:
        """Send a decoded request, return the decoded response; reconnects once on a broken connection."""
        api_key = int(message.API_KEY)
        body = encode_request(message, version)
        for attempt in (1, 2):
            try:
                await self._connect()
                response_body = await self._raw_request(api_key, version, body)
                if len(response_body) > OFFLOAD_DECODE_BYTES:
                    # A large cluster's full Metadata takes tens of ms to decode: let the loop breathe.
                    return await asyncio.get_running_loop().run_in_executor(
                        None, decode_response, api_key, version, response_body
                    )
                return decode_response(api_key, version, response_body)
            except (ControlError, OSError) as exc:
                self._drop(exc)
                if attempt == 2:
                    raise ControlError(str(exc)) from None
        raise AssertionError("unreachable")

    async def metadata(self, topics: list[str] | None = None) -> MetadataResponse:
        request = MetadataRequest(
            topics=None if topics is None else tuple(MetadataRequestTopic(name=t) for t in topics),
            allow_auto_topic_creation=False,
        )
        response = await self.request(request, METADATA_VERSION)
        assert isinstance(response, MetadataResponse)
        return response

    async def describe_topic_configs(self, topics: list[str], keys: list[str]) -> DescribeConfigsResponse:
        request = DescribeConfigsRequest(
            resources=tuple(
                DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=t, configuration_keys=tuple(keys))
                for t in topics
            )
        )
        response = await self.request(request, DESCRIBE_CONFIGS_VERSION)
        assert isinstance(response, DescribeConfigsResponse)
        return response

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def close(self) -> None:
        if self._read_task is not None:
            self._read_task.cancel()
        self._drop(ControlError("closed"))
