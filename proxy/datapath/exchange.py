"""One request/response exchange, the listener it came in on, and the behaviour API.

A behaviour is one small object with one job (address rewrite, metadata enrichment, acks policy),
registered for the API keys whose requests, responses or completions it touches. It sees the
exchange and the narrow `BehaviourContext` it was built with (proxy/controlplane/context.py), never the process.
Frames no behaviour registered for pass through as opaque bytes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Container, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, Final, Protocol, TypeVar

from mypy_extensions import mypyc_attr

from insync_proxy.protocol import ApiKey
from insync_proxy.proxy.config.broker_ports import NO_PORT, BrokerPorts, advertised_name

Frame = bytes | bytearray | memoryview
ResponseResult = Frame | Awaitable[Frame]
ResponseHook = Callable[["Exchange", Frame], ResponseResult]
State = TypeVar("State")


def api_name(api_key: int) -> str:
    """Kafka's own name of an API key, e.g. 'ApiVersions'; 'Unknown<N>' for keys Kafka never defined."""
    try:
        return _API_NAMES[api_key]
    except KeyError:
        return f"Unknown{api_key}"


_API_NAMES: Final = {int(k): "".join(part.capitalize() for part in k.name.split("_")) for k in ApiKey}


class ListenerAddresses(Mapping[int, tuple[str, int]]):
    """node id -> the address of that broker's listener in one listener group (`BrokerPorts`, cached).

    Every node id >= 0 has an address: one the listener's node_id_ranges do not cover is named at port 0
    (NO_PORT), which no one can listen on, so no real broker address is ever passed on (the server logs
    and counts such brokers when it learns them).
    """

    def __init__(self, host: str, ports: BrokerPorts) -> None:
        #: The advertised host; with {node_id} in it, each broker's own name (Kerberos: its principal's host).
        self.host = host
        self.ports = ports
        self._cache: dict[int, tuple[str, int]] = {}

    def __getitem__(self, node_id: int) -> tuple[str, int]:
        address = self._cache.get(node_id)
        if address is None:
            if node_id < 0:
                raise KeyError(node_id)
            port = self.ports.port_for(node_id)
            address = (advertised_name(self.host, node_id), NO_PORT if port is None else port)
            if len(self._cache) < _ADDRESS_CACHE_LIMIT:
                self._cache[node_id] = address
        return address

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return True  # covers every node id, though it lists none

    def __contains__(self, node_id: object) -> bool:
        return isinstance(node_id, int) and node_id >= 0


#: Node ids remembered per listener (a bound, whatever node ids responses name).
_ADDRESS_CACHE_LIMIT: Final = 4096


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """What a behaviour may know of the listener an exchange came in on."""

    name: str  #: the listener group's name (`default`, ...)
    label: str  #: `bootstrap` or `broker-<id>`, prefixed by the group name when it is not `default`
    metadata_schema: str  #: `tagged` or `kip637`
    hide_unready_partitions: bool
    addresses: ListenerAddresses  #: node id -> the address clients must use for that broker
    #: node ids with nothing left to open (live view): a broker listener is open, or node_id_ranges give no port
    broker_listeners: Container[int]


class Exchange:
    """A request from a client and, once known, the response it gets back.

    Behaviours read it and keep their own typed per-exchange state with `put(state)` / `get(StateClass)`, the state
    all the behaviours of its API share in `shared`; what
    goes upstream (`upstream_frame`: bytes, or a list of chunks; None: nothing does), a local answer
    (`local_response`), whether a response comes (`expects_response`) and the response hooks are the core's to
    set, from the `RequestResult`s the behaviours return.
    """

    __slots__ = (
        "api_key",
        "api_version",
        "client_id",
        "correlation_id",
        "expects_response",
        "forwarded_at",
        "header_size",
        "listener",
        "local_response",
        "received_at",
        "request_frame",
        "request_framed",
        "response",
        "response_framed",
        "response_hooks",
        "shared",
        "states",
        "upstream_frame",
    )

    def __init__(
        self,
        listener: ListenerSettings,
        api_key: int,
        api_version: int,
        correlation_id: int,
        client_id: str | None,
        request_frame: memoryview,
        received_at: float | None = None,
        header_size: int = -1,
    ) -> None:
        self.listener = listener
        #: The request header's size as the core read it (where the body starts), -1 when not known.
        self.header_size = header_size
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.request_frame = request_frame
        self.upstream_frame: Frame | list[Frame] | None = request_frame
        self.local_response: Frame | None = None
        self.expects_response = True
        self.response_hooks: list[ResponseHook] = []
        self.response: Frame | None = None
        #: The connection core's: the request / the broker's response as they came, size prefix included,
        #: so that a frame forwarded unchanged is written without a copy (None: not known or not kept).
        self.request_framed: memoryview | None = None
        self.response_framed: memoryview | None = None
        self.received_at = time.perf_counter() if received_at is None else received_at
        self.forwarded_at = 0.0
        self.states: dict[type, object] | None = None
        #: The state every behaviour of this request's API shares (a Produce's `ProduceExchange`), made by the first
        #: that asks: one slot, where `put`/`get` would take a dict and a lookup by class per call.
        self.shared: object = None

    def put(self, state: object) -> None:
        """Attach a behaviour's own per-exchange state, found again by its class."""
        if self.states is None:
            self.states = {}
        self.states[type(state)] = state

    def get(self, kind: type[State]) -> State | None:
        """The state of class `kind` a behaviour attached, if any."""
        if self.states is None:
            return None
        state = self.states.get(kind)
        return state if isinstance(state, kind) else None

    def answer_locally(self, response: Frame) -> None:
        """The proxy answers this request itself; nothing goes upstream."""
        self.upstream_frame = None
        self.expects_response = True
        self.local_response = response

    @property
    def modified(self) -> bool:
        """True when what goes upstream is not the client's request as it came."""
        return self.upstream_frame is not self.request_frame

    @property
    def done(self) -> bool:
        return self.response is not None


class RequestResult:
    """What a behaviour decided about a request, in the manner of Kroxylicious's filter results: the core acts on it
    (proxy/datapath/core.py), a behaviour never changes what goes upstream itself.

    - `FORWARD`: the request goes on as it stands (to the next behaviour, then upstream);
    - `forward(frame, response_hook=...)`: something else goes upstream (bytes, or a list of chunks sent as one
      frame), and/or a hook turns the broker's response into the client's;
    - `FORWARD_WITHOUT_RESPONSE`: it goes on, and no response will come (Produce acks=0);
    - `respond(response)`: the proxy answers it now; nothing goes upstream and later behaviours do not see it;
    - `wait(work)`: something must be looked up first; the connection's later requests wait behind it, and the
      next behaviour sees it once `work` is done.
    """

    __slots__ = ("kind", "response", "response_hook", "upstream_frame", "work")

    def __init__(self, kind: int, *, upstream_frame: Frame | list[Frame] | None = None, response: Frame | None = None,
                 response_hook: ResponseHook | None = None, work: Awaitable[None] | None = None) -> None:
        self.kind = kind
        self.upstream_frame = upstream_frame
        self.response = response
        self.response_hook = response_hook
        self.work = work

    def __repr__(self) -> str:
        return f"RequestResult({_RESULT_NAMES[self.kind]})"


#: `RequestResult.kind`s.
FORWARD_KIND: Final = 0
FORWARD_WITHOUT_RESPONSE_KIND: Final = 1
RESPOND_KIND: Final = 2
WAIT_KIND: Final = 3
_RESULT_NAMES: Final = {FORWARD_KIND: "forward", FORWARD_WITHOUT_RESPONSE_KIND: "forward without response",
                        RESPOND_KIND: "respond", WAIT_KIND: "wait"}

#: The request goes on as it stands (built once: the hot path compares it by identity).
FORWARD: Final = RequestResult(FORWARD_KIND)
#: The request goes on, and no response will come (Produce acks=0).
FORWARD_WITHOUT_RESPONSE: Final = RequestResult(FORWARD_WITHOUT_RESPONSE_KIND)


def forward(upstream_frame: Frame | list[Frame] | None = None, *, response_hook: ResponseHook | None = None
            ) -> RequestResult:
    """Send `upstream_frame` upstream instead (None: the request as it stands), and/or run `response_hook` on the
    broker's response."""
    return RequestResult(FORWARD_KIND, upstream_frame=upstream_frame, response_hook=response_hook)


def respond(response: Frame) -> RequestResult:
    """The proxy answers now with `response` (a whole response payload: header and body)."""
    return RequestResult(RESPOND_KIND, response=response)


def wait(work: Awaitable[None]) -> RequestResult:
    """Look something up first (`work`); the next behaviour sees the request when it is done."""
    return RequestResult(WAIT_KIND, work=work)


class ResponseTap(Protocol):
    """Sees a response's bytes as they pass through to the client (cut-through); may rewrite its tail.

    The core feeds it the payload (size prefix excluded) in order, chunk by chunk. The size prefix has
    already gone to the client: whatever it rewrites must keep the response's length."""

    def feed(self, data: memoryview) -> int:
        """The next bytes of the response; returns how many of them may go to the client now. Once it
        returns less than ``len(data)``, the rest of this chunk and of the response is held."""

    def finish(self, held: bytes) -> Frame:
        """The response is complete; ``held`` is what was held back (its tail, possibly empty). Returns
        what goes to the client instead: exactly as many bytes."""


#: What a behaviour answers to `response_stream`: False = it needs the whole response (`on_response`);
#: True = it leaves this response as it is; a tap = it watches the bytes as they pass.
StreamVerdict = bool | ResponseTap


@mypyc_attr(allow_interpreted_subclasses=True)  # behaviours outside the compiled set (scripts/compile)
class BehaviourBase:
    """What the connection core calls; each behaviour subclasses it and registers for the keys it touches. The
    defaults touch nothing. A native class when compiled: the core calls its methods through the class's vtable,
    not by name (a Protocol-typed call is a lookup by name per call, hundreds of instructions each)."""

    request_keys: ClassVar[frozenset[int]] = frozenset()
    response_keys: ClassVar[frozenset[int]] = frozenset()
    complete_keys: ClassVar[frozenset[int]] = frozenset()

    def on_request(self, exchange: Exchange) -> RequestResult:
        """What happens to a request before it goes upstream (`RequestResult`: `FORWARD` as it stands, `forward`
        something else, `respond` now, `wait` for a lookup first: the connection's later requests wait behind it,
        so the broker sees them in the client's order)."""
        return FORWARD

    def on_response(self, exchange: Exchange, frame: Frame) -> ResponseResult:
        """Turn the broker's response frame (header + body) into the client's."""
        return frame

    def on_complete(self, exchange: Exchange, latency_seconds: float | None) -> None:
        """The response was written to the client (latency known), or an acks=0 request was forwarded
        (no response will come: latency None)."""
        return None

    def response_stream(self, exchange: Exchange) -> StreamVerdict:
        """May this exchange's response pass through to the client as it arrives (cut-through), before
        it is whole? Asked only for responses of this behaviour's `response_keys`, once their size and
        correlation id are known and they are next in the client's order. False: give me the whole
        frame (`on_response`); True: I leave it as it is; a `ResponseTap`: I watch its bytes."""
        return False


@mypyc_attr(allow_interpreted_subclasses=True)  # observers outside the compiled set (tests)
class CoreObserver:
    """Per-exchange observations (metrics, debug capture); the core works without knowing which. The defaults
    observe nothing; a native class when compiled, as `BehaviourBase` is."""

    def request_received(self, exchange: Exchange) -> None:
        return None

    def upstream_answered(self, exchange: Exchange, frame: memoryview, seconds: float) -> None:
        """The broker's response started (`frame`: the whole response, or the first bytes of one cut
        through, unless the core was built with `observe_whole_frames`)."""
        return None

    def response_written(self, exchange: Exchange, payload: Frame, seconds: float) -> None:
        """The whole response went to the client (`payload`: as `upstream_answered`'s frame)."""
        return None


class BehaviourRegistry:
    """API key -> the behaviours registered for its requests / responses / completions, in order."""

    def __init__(self, behaviours: list[BehaviourBase]) -> None:
        self.behaviours = behaviours
        self.requests: dict[int, list[BehaviourBase]] = {}
        self.responses: dict[int, list[BehaviourBase]] = {}
        self.completions: dict[int, list[BehaviourBase]] = {}
        # Keyed by plain ints: behaviours name their keys as ApiKey members, whose hash is the int's but whose
        # identity is not, so every lookup by a request's int key would end in a rich comparison.
        for b in behaviours:
            for key in b.request_keys:
                self.requests.setdefault(int(key), []).append(b)
            for key in b.response_keys:
                self.responses.setdefault(int(key), []).append(b)
            for key in b.complete_keys:
                self.completions.setdefault(int(key), []).append(b)
