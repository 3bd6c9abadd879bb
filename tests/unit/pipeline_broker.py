"""A scripted broker for the proxied connection's unit tests: it answers what the test scripts, as a real broker's
socket would (`FakeBroker`)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

from insync_proxy.protocol import (
    ApiKey,
    ApiVersionsResponse,
    DescribeConfigsResponse,
    FrameSplitter,
    MetadataResponse,
    encode_response,
    encode_response_with_header,
    peek_request_header,
)
from insync_proxy.protocol.messages import (
    ApiVersion,
    DescribeConfigsResourceResult,
    DescribeConfigsResult,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)


class FakeBroker:
    """Answers Metadata and DescribeConfigs like a one-broker cluster; other APIs as the script says."""

    def __init__(self) -> None:
        self.port = 0
        self.script: Script | None = None
        self.describe_delay = 0.0
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        splitter = FrameSplitter()
        lock = asyncio.Lock()
        try:
            while data := await reader.read(65536):
                for frame in splitter.feed(data):
                    peek = peek_request_header(frame)
                    response = await self._answer(peek.api_key, peek.api_version, peek.correlation_id, bytes(frame))
                    if response is not None:
                        async with lock:
                            # A RawResponse answer carries its own (possibly broken) framing.
                            framed = response if isinstance(response, RawResponse) else struct.pack(">i", len(response)) + response
                            writer.write(framed)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _answer(self, key: int, version: int, correlation_id: int, frame: bytes) -> bytes | None:
        if key == ApiKey.METADATA:
            body = encode_response(MetadataResponse(
                brokers=(MetadataResponseBroker(node_id=1, host="127.0.0.1", port=self.port),),
                cluster_id="fake", controller_id=1,
                topics=(MetadataResponseTopic(name="t", partitions=(MetadataResponsePartition(
                    partition_index=0, leader_id=1, leader_epoch=0, replica_nodes=(1,), isr_nodes=(1,)),)),),
            ), version)
            return encode_response_with_header(key, version, correlation_id, body)
        if key == ApiKey.API_VERSIONS:
            # Like a broker: the proxy's control connection negotiates versions first.
            body = encode_response(ApiVersionsResponse(api_keys=tuple(
                ApiVersion(api_key=k, min_version=0, max_version=v) for k, v in (
                    (ApiKey.METADATA, 12), (ApiKey.DESCRIBE_CONFIGS, 4), (ApiKey.API_VERSIONS, 3))
            )), 0 if version == 0 else min(version, 3))
            return encode_response_with_header(key, 0 if version == 0 else min(version, 3), correlation_id, body)
        if key == ApiKey.DESCRIBE_CONFIGS:
            await asyncio.sleep(self.describe_delay)
            body = encode_response(DescribeConfigsResponse(results=(DescribeConfigsResult(
                resource_type=2, resource_name="t",
                configs=(DescribeConfigsResourceResult(name="min.insync.replicas", value="1"),)),)), version)
            return encode_response_with_header(key, version, correlation_id, body)
        assert self.script is not None
        return await self.script(key, version, correlation_id, frame)


Script = Callable[[int, int, int, bytes], Awaitable[bytes | None]]


class RawResponse(bytes):
    """A response whose bytes already carry their own (possibly broken) framing."""
