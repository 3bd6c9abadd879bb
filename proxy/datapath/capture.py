"""Protocol debugging: keep a few raw frames per API and version, as the client and the broker sent them.

Golden tests decode these real frames and re-encode them byte for byte. Off unless
`debug_capture_dir` is set; frames contain record data, so never enable it in production.
"""

from __future__ import annotations

from pathlib import Path

from insync_proxy.protocol import SUPPORTED_VERSIONS, ApiKey
from insync_proxy.proxy.datapath.exchange import Exchange, Frame, api_name

CAPTURED_APIS = frozenset({*(int(k) for k in SUPPORTED_VERSIONS), int(ApiKey.FETCH)})
PER_VERSION = 3


class FrameCapture:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.counts: dict[tuple[int, int], int] = {}

    def record(self, exchange: Exchange, response: Frame) -> None:
        """Write the client's request and the broker's unmodified response, the first few per version."""
        key = (exchange.api_key, exchange.api_version)
        if exchange.api_key not in CAPTURED_APIS or exchange.modified:
            return  # a rewritten request (e.g. KIP-637's v10 sent as v9) does not pair with its response
        n = self.counts.get(key, 0)
        if n >= PER_VERSION:
            return
        self.counts[key] = n + 1
        stem = self.directory / f"{api_name(exchange.api_key)}-v{exchange.api_version}-{n}"
        stem.with_suffix(".request.bin").write_bytes(bytes(exchange.request_frame))
        stem.with_suffix(".response.bin").write_bytes(bytes(response))
