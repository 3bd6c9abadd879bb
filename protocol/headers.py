"""Request headers (v0/v1/v2) and response headers (v0/v1), and a cheap request-header peek.

The header version follows from (api_key, api_version): flexible versions use request header v2 /
response header v1, others v1 / v0. Two exceptions, both Kafka's: ApiVersions responses always use
header v0 (a client must be able to read it before it knows what the broker speaks), and
ControlledShutdown v0 uses request header v0 (no client_id). The header versions' facts (client_id from
request header v1, tagged fields from request header v2 and response header v1) and which API versions are
flexible come from Kafka's specs (protocol/kafka_versions.py, generated).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Final

from .api_keys import ApiKey, is_flexible
from .errors import InvalidValue, MalformedFrame, ProtocolError, TruncatedData
from .kafka_versions import REQUEST_HEADER_CLIENT_ID_SINCE as _CLIENT_ID_SINCE
from .kafka_versions import REQUEST_HEADER_FLEXIBLE_SINCE as _REQUEST_FLEXIBLE
from .kafka_versions import RESPONSE_HEADER_FLEXIBLE_SINCE as _RESPONSE_FLEXIBLE
from .native import peek_request_header as _core_peek
from .primitives import Buffer, Reader, SlottedRecord, Writer

__all__ = [
    "RequestHeader",
    "RequestHeaderPeek",
    "RequestHeaderPeeker",
    "ResponseHeader",
    "decode_request_header",
    "decode_response_header",
    "encode_request_header",
    "encode_response_header",
    "encode_response_with_header",
    "peek_request_header",
    "request_header_version",
    "response_header_version",
    "split_response",
]

_HEAD_V0: Final = struct.Struct(">hhi")
_I16: Final = struct.Struct(">h")


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header version (0, 1 or 2) used by (api_key, api_version)."""
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return _REQUEST_FLEXIBLE if is_flexible(api_key, api_version) else _CLIENT_ID_SINCE


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header version (0 or 1) used by the response to (api_key, api_version)."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return _RESPONSE_FLEXIBLE if is_flexible(api_key, api_version) else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestHeader:
    """A request header; ``client_id`` is absent (None) only in header v0."""

    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None = None
    unknown_tagged_fields: tuple[tuple[int, bytes], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseHeader:
    """A response header: only the correlation id (and tagged fields in v1)."""

    correlation_id: int
    unknown_tagged_fields: tuple[tuple[int, bytes], ...] = ()


class RequestHeaderPeek(SlottedRecord):
    """What a proxy needs to route a request; ``header_size`` is the offset of the body (one per request: a
    `SlottedRecord`, not a NamedTuple)."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "header_size")
    _fields: ClassVar[tuple[str, ...]] = ("api_key", "api_version", "correlation_id", "client_id", "header_size")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                 header_size: int) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.header_size = header_size


def peek_request_header(frame: Buffer) -> RequestHeaderPeek:
    """Read the request header of ``frame`` (size prefix stripped) without touching the body."""
    return _peek(frame, None)


class RequestHeaderPeeker:
    """``peek_request_header`` for one connection: a client sends the same client id with every request,
    so it is decoded once and reused while its raw bytes stay the same."""

    __slots__ = ("_core_peek", "_raw", "_text")

    def __init__(self) -> None:
        self._raw = b""
        self._text = ""
        self._core_peek = _core_peek  # kept here: a module global is a dict lookup per use, compiled

    def peek(self, frame: Buffer) -> RequestHeaderPeek:
        core_peek = self._core_peek
        if core_peek is not None:
            peeked = core_peek(frame, self._raw)
            if peeked is not None:  # the compiled core read it (protocol/native.py)
                api_key, api_version, correlation_id, raw, header_size = peeked
                client_id: str | None = None
                if raw is self._raw:
                    client_id = self._text
                elif raw is not None:
                    try:
                        client_id = str(raw, "utf-8")
                    except UnicodeDecodeError:
                        raise MalformedFrame("client_id is not valid UTF-8") from None
                    self._raw, self._text = raw, client_id
                return RequestHeaderPeek(api_key, api_version, correlation_id, client_id, header_size)
        return _peek(frame, self)


def _peek(frame: Buffer, cache: RequestHeaderPeeker | None) -> RequestHeaderPeek:
    # Typed locals: the compiled build then compares native ints (struct's results are Any).
    api_key: int
    api_version: int
    correlation_id: int
    n: int
    try:
        api_key, api_version, correlation_id = _HEAD_V0.unpack_from(frame, 0)
        hv = request_header_version(api_key, api_version)
        if hv == 0:
            return RequestHeaderPeek(api_key, api_version, correlation_id, None, 8)
        n = _I16.unpack_from(frame, 8)[0]
    except struct.error:
        raise TruncatedData(f"request header needs 10 bytes, frame has {len(frame)}") from None
    pos = 10
    client_id: str | None = None
    # client_id keeps its int16 length even in header v2 (flexibleVersions "none" in Kafka's spec).
    if n >= 0:
        end = pos + n
        if end > len(frame):
            raise TruncatedData(f"client_id of {n} bytes runs past the frame end ({len(frame)})")
        raw = frame[pos:end]
        if cache is not None and raw == cache._raw:
            client_id = cache._text
        else:
            try:
                client_id = str(raw, "utf-8")
            except UnicodeDecodeError:
                raise MalformedFrame("client_id is not valid UTF-8") from None
            if cache is not None:
                cache._raw, cache._text = bytes(raw), client_id
        pos = end
    elif n != -1:
        raise MalformedFrame(f"negative client_id length {n}")
    if hv >= _REQUEST_FLEXIBLE:
        if pos < len(frame) and frame[pos] == 0:
            pos += 1  # no tagged fields: the common case, without a Reader
        else:
            r = Reader(frame, pos)
            r.tagged_fields()
            pos = r.pos
    return RequestHeaderPeek(api_key, api_version, correlation_id, client_id, pos)


def decode_request_header(frame: Buffer) -> tuple[RequestHeader, int]:
    """Decode the request header of ``frame``; return it and the offset of the body."""
    peek = peek_request_header(frame)
    unknown: tuple[tuple[int, bytes], ...] = ()
    if request_header_version(peek.api_key, peek.api_version) >= _REQUEST_FLEXIBLE:
        n = -1 if peek.client_id is None else len(peek.client_id.encode("utf-8"))
        r = Reader(frame, 10 + max(n, 0))
        unknown = tuple((t, bytes(d)) for t, d in r.tagged_fields())
    header = RequestHeader(
        request_api_key=peek.api_key,
        request_api_version=peek.api_version,
        correlation_id=peek.correlation_id,
        client_id=peek.client_id,
        unknown_tagged_fields=unknown,
    )
    return header, peek.header_size


def encode_request_header(header: RequestHeader) -> bytes:
    """Encode a request header in the version its (api_key, api_version) calls for."""
    hv = request_header_version(header.request_api_key, header.request_api_version)
    w = Writer()
    try:
        w.int16(header.request_api_key)
        w.int16(header.request_api_version)
        w.int32(header.correlation_id)
        if hv >= _CLIENT_ID_SINCE:
            w.string(header.client_id, nullable=True, compact=False)
        if hv >= _REQUEST_FLEXIBLE:
            w.tagged_fields(sorted(header.unknown_tagged_fields))
    except struct.error as e:
        raise InvalidValue(f"cannot encode request header: {e}") from None
    return w.getvalue()


def decode_response_header(frame: Buffer, header_version: int) -> tuple[ResponseHeader, int]:
    """Decode a response header of the given version; return it and the offset of the body."""
    r = Reader(frame)
    correlation_id = r.int32()
    unknown: tuple[tuple[int, bytes], ...] = ()
    if header_version >= _RESPONSE_FLEXIBLE:
        unknown = tuple((t, bytes(d)) for t, d in r.tagged_fields())
    return ResponseHeader(correlation_id=correlation_id, unknown_tagged_fields=unknown), r.pos


def encode_response_header(header: ResponseHeader, header_version: int) -> bytes:
    """Encode a response header of the given version."""
    w = Writer()
    try:
        w.int32(header.correlation_id)
    except struct.error as e:
        raise InvalidValue(f"cannot encode response header: {e}") from None
    if header_version >= _RESPONSE_FLEXIBLE:
        w.tagged_fields(sorted(header.unknown_tagged_fields))
    return w.getvalue()


def encode_response_with_header(api_key: int, api_version: int, correlation_id: int, body: Buffer) -> bytes:
    """Response header (right version for the request) + body: a frame payload without size prefix."""
    hv = response_header_version(api_key, api_version)
    return encode_response_header(ResponseHeader(correlation_id=correlation_id), hv) + body


def split_response(frame: Buffer, api_key: int, api_version: int) -> tuple[int, memoryview]:
    """Split a response frame into (correlation_id, body view), given the request's key/version."""
    try:
        header, offset = decode_response_header(frame, response_header_version(api_key, api_version))
    except ProtocolError:
        raise
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)
    return header.correlation_id, mv[offset:]
