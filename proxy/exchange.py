"""One request/response exchange as it moves through a client connection, and the behaviour API.

A behaviour is one small object with one job (address rewrite, metadata enrichment, acks policy),
registered for the API keys whose requests or responses it touches. Frames no behaviour registered
for pass through as opaque bytes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from insync_proxy.protocol import ApiKey

if TYPE_CHECKING:
    from insync_proxy.proxy.connection import ClientConnection

Frame = bytes | bytearray | memoryview
ResponseResult = Frame | Awaitable[Frame]


def api_name(api_key: int) -> str:
    """Kafka's own name of an API key, e.g. 'ApiVersions'; 'Unknown<N>' for keys Kafka never defined."""
    try:
        return _API_NAMES[api_key]
    except KeyError:
        return f"Unknown{api_key}"


_API_NAMES = {int(k): "".join(part.capitalize() for part in k.name.split("_")) for k in ApiKey}


class Exchange:
    """A request from a client and, once known, the response it gets back.

    Behaviours may: replace `upstream_frame` (what goes to the broker; None: nothing does),
    set `local_response` (a full response payload the proxy answers itself), or add a
    `response_hook` that turns the broker's response into the client's.
    """

    __slots__ = (
        "api_key",
        "api_version",
        "client_id",
        "connection",
        "context",
        "correlation_id",
        "expects_response",
        "forwarded_at",
        "local_response",
        "received_at",
        "request_frame",
        "response",
        "response_hooks",
        "upstream_frame",
    )

    def __init__(
        self,
        connection: ClientConnection,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None,
        request_frame: memoryview,
    ) -> None:
        self.connection = connection
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.request_frame = request_frame
        self.upstream_frame: Frame | list[Any] | None = request_frame
        self.local_response: Frame | None = None
        self.expects_response = True
        self.response_hooks: list[Callable[[Exchange, Frame], ResponseResult]] = []
        self.response: Frame | None = None
        self.received_at = time.perf_counter()
        self.forwarded_at = 0.0
        self.context: dict[str, Any] = {}

    @property
    def done(self) -> bool:
        return self.response is not None


class Behaviour(Protocol):
    """What the connection pipeline calls; each implementation registers for the keys it touches."""

    request_keys: ClassVar[frozenset[int]]
    response_keys: ClassVar[frozenset[int]]

    def on_request(self, exchange: Exchange) -> None:
        """Inspect or change a request before it goes upstream (may answer it locally)."""

    def on_response(self, exchange: Exchange, frame: Frame) -> ResponseResult:
        """Turn the broker's response frame (header + body) into the client's."""


class BehaviourBase:
    """Defaults: touch nothing."""

    request_keys: ClassVar[frozenset[int]] = frozenset()
    response_keys: ClassVar[frozenset[int]] = frozenset()

    def on_request(self, exchange: Exchange) -> None:
        return None

    def on_response(self, exchange: Exchange, frame: Frame) -> ResponseResult:
        return frame


class BehaviourRegistry:
    """API key -> the behaviours that registered for its requests / responses, in registration order."""

    def __init__(self, behaviours: list[Behaviour]) -> None:
        self.behaviours = behaviours
        self.requests: dict[int, list[Behaviour]] = {}
        self.responses: dict[int, list[Behaviour]] = {}
        for b in behaviours:
            for key in b.request_keys:
                self.requests.setdefault(key, []).append(b)
            for key in b.response_keys:
                self.responses.setdefault(key, []).append(b)
