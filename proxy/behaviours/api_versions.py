"""ApiVersions: advertise only what the proxy can carry safely.

For APIs the proxy decodes or rewrites, max version = min(broker's, what protocol/ supports) and
min version = max(broker's, the first one protocol/ knows); an API left with no version is not
advertised; every other API is advertised exactly as the broker does (its min versions kept).
"""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Final

from insync_proxy.protocol import (
    ApiKey,
    ApiVersionsResponse,
    ErrorCode,
    decode_response,
    encode_response,
    encode_response_with_header,
    split_response,
)
from insync_proxy.protocol.messages import ApiVersion
from insync_proxy.proxy.datapath.exchange import (
    FORWARD,
    BehaviourBase,
    Exchange,
    Frame,
    RequestResult,
    respond,
)

#: Highest version of each API whose requests or responses the proxy reads or rewrites.
VERSION_CAPS: Final[dict[int, int]] = {
    ApiKey.PRODUCE: 13,
    ApiKey.FETCH: 18,
    ApiKey.METADATA: 13,
    ApiKey.FIND_COORDINATOR: 6,
    ApiKey.API_VERSIONS: 4,
    ApiKey.DESCRIBE_CLUSTER: 2,
    ApiKey.DESCRIBE_QUORUM: 2,
    ApiKey.SHARE_FETCH: 2,
    ApiKey.SHARE_ACKNOWLEDGE: 2,
}
#: Lowest version of an API the proxy rewrites, where it is above what a broker may advertise:
#: ShareFetch/ShareAcknowledge v0 (Kafka 4.0's early access) were never a stable layout.
VERSION_FLOORS: Final[dict[int, int]] = {
    ApiKey.SHARE_FETCH: 1,
    ApiKey.SHARE_ACKNOWLEDGE: 1,
}
#: Metadata max version a `metadata_schema = "kip637"` listener advertises (KIP-637's literal "v10").
KIP637_METADATA_VERSION: Final = 10

_KNOWN: Final = frozenset(int(k) for k in ApiKey)


class ApiVersionsNegotiation(BehaviourBase):
    """Caps advertised versions; answers a too-new ApiVersions request as a broker would."""

    request_keys = frozenset({ApiKey.API_VERSIONS})
    response_keys = frozenset({ApiKey.API_VERSIONS})

    def on_request(self, exchange: Exchange) -> RequestResult:
        cap = VERSION_CAPS[ApiKey.API_VERSIONS]
        if exchange.api_version > cap:
            # A broker answers an unknown ApiVersions version with a v0 body: error 35 and its range.
            body = encode_response(
                ApiVersionsResponse(
                    error_code=ErrorCode.UNSUPPORTED_VERSION,
                    api_keys=(ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=cap),),
                ),
                0,
            )
            return respond(encode_response_with_header(ApiKey.API_VERSIONS, 0, exchange.correlation_id, body))
        return FORWARD

    def on_response(self, exchange: Exchange, frame: Frame) -> Frame:
        correlation_id, body = split_response(frame, ApiKey.API_VERSIONS, exchange.api_version)
        (error_code,) = struct.unpack_from(">h", body, 0)
        # UNSUPPORTED_VERSION answers always come in the v0 layout.
        version = 0 if error_code == ErrorCode.UNSUPPORTED_VERSION else exchange.api_version
        response = decode_response(ApiKey.API_VERSIONS, version, body)
        assert isinstance(response, ApiVersionsResponse)
        kip637 = exchange.listener.metadata_schema == "kip637"
        api_keys = []
        for entry in response.api_keys:
            key = entry.api_key
            if key not in _KNOWN:
                continue
            max_version = entry.max_version
            min_version = max(entry.min_version, VERSION_FLOORS.get(key, entry.min_version))
            if key == ApiKey.METADATA and kip637:
                max_version = KIP637_METADATA_VERSION
            elif key in VERSION_CAPS:
                max_version = min(max_version, VERSION_CAPS[key])
            if max_version < min_version:
                continue  # nothing the proxy can carry
            if (min_version, max_version) != (entry.min_version, entry.max_version):
                entry = replace(entry, min_version=min_version, max_version=max_version)
            api_keys.append(entry)
        new_body = encode_response(replace(response, api_keys=tuple(api_keys)), version)
        return encode_response_with_header(ApiKey.API_VERSIONS, version, correlation_id, new_body)
