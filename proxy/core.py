"""The sans-IO core of one proxied connection: frames in, actions out.

Like h11's `Connection`, `ConnectionCore` owns a connection's protocol state without a socket: the
requests that are owed a response and their order, which were forwarded and await the broker,
correlation checks, answers given locally, partially or merged, and acks=0 requests that get no
answer. Bytes go in with `receive_client_data` / `receive_upstream_data`; what to do comes out as
calls on a `ConnectionIO` (write to the client, write upstream, run this awaitable, close with a
reason). The asyncio protocols in proxy/connection.py are thin adapters around it; unit tests drive
it with plain bytes.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from insync_proxy.protocol import ApiKey, FrameSplitter, ProtocolError, peek_request_header
from insync_proxy.protocol.errors import FrameTooLarge
from insync_proxy.proxy.exchange import Behaviour, BehaviourRegistry, Exchange, Frame, ListenerSettings

_SIZE = struct.Struct(">i")
_KNOWN_KEYS = frozenset(int(k) for k in ApiKey)


@dataclass(frozen=True, slots=True)
class CloseReason:
    """Why the core closed the connection (both sides)."""

    #: `client_bad_frame`, `upstream_bad_frame`, `internal` or `drained`.
    kind: str
    detail: str = ""
    #: For bad frames: `too_large`, `truncateddata`, ... (the frame error metric's label).
    frame_error: str | None = None
    #: For `internal`: the exception (a bug), so the adapter can log its traceback.
    error: BaseException | None = None


class ConnectionIO(Protocol):
    """The actions the core asks of its adapter."""

    def write_client(self, data: Frame) -> None:
        """Send these bytes (whole frames, size prefix included) to the client."""

    def write_upstream(self, data: Frame) -> None:
        """Send these bytes (whole frames, size prefix included) to the broker."""

    def run_async(self, exchange: Exchange, result: Awaitable[Frame | None]) -> None:
        """Run a behaviour's asynchronous work (a request it must look something up for, or an answer);
        report back with `ConnectionCore.async_done`."""

    def close(self, reason: CloseReason) -> None:
        """Close both sides; called once."""


class CoreObserver(Protocol):
    """Per-exchange observations (metrics, debug capture); the core works without knowing which."""

    def request_received(self, exchange: Exchange) -> None: ...

    def upstream_answered(self, exchange: Exchange, frame: memoryview, seconds: float) -> None: ...

    def response_written(self, exchange: Exchange, payload: Frame, seconds: float) -> None: ...


class NoObserver:
    """Observes nothing (tests, tools)."""

    def request_received(self, exchange: Exchange) -> None:
        return None

    def upstream_answered(self, exchange: Exchange, frame: memoryview, seconds: float) -> None:
        return None

    def response_written(self, exchange: Exchange, payload: Frame, seconds: float) -> None:
        return None


def frame_error_kind(exc: ProtocolError) -> str:
    """The `kind` label of a bad frame."""
    if isinstance(exc, FrameTooLarge):
        return "too_large"
    return type(exc).__name__.lower()


class ConnectionCore:
    """One client connection and its upstream connection, as a state machine over frames."""

    def __init__(
        self,
        registry: BehaviourRegistry,
        listener: ListenerSettings,
        io: ConnectionIO,
        *,
        max_frame_bytes: int,
        observer: CoreObserver | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.registry = registry
        self.listener = listener
        self.io = io
        self.observer: CoreObserver = observer or NoObserver()
        self.clock = clock
        self.client_frames = FrameSplitter(max_frame_bytes)
        self.upstream_frames = FrameSplitter(max_frame_bytes)
        self.pending: deque[Exchange] = deque()  #: every exchange that owes the client a response, in order
        self.awaiting_upstream: deque[Exchange] = deque()  #: forwarded, response not yet received
        self.client_id: str | None = None
        self.closed = False
        self.draining = False
        #: A request whose behaviour is looking something up (exchange, next behaviour's index): later
        #: requests wait in `_held`, so the broker sees them in the client's order.
        self._deferred: tuple[Exchange, int] | None = None
        self._held: deque[memoryview] = deque()

    # ------------------------------------------------------------------ client side
    def receive_client_data(self, data: Frame) -> None:
        """Bytes from the client: every whole request frame is handled in order."""
        if self.closed:
            return
        try:
            for frame in self.client_frames.feed(data):
                self._on_request(frame)
                if self.closed:
                    return
        except ProtocolError as exc:
            self._close(CloseReason("client_bad_frame", str(exc), frame_error_kind(exc)))
        except Exception as exc:  # a bug must cost one connection, never the process
            self._close(CloseReason("internal", f"request handling failed: {exc!r}", error=exc))

    def _on_request(self, frame: memoryview) -> None:
        if self._deferred is not None:
            self._held.append(frame)
            return
        peek = peek_request_header(frame)
        api_key = peek.api_key
        if api_key not in _KNOWN_KEYS:
            raise ProtocolError(f"unknown API key {api_key} (version {peek.api_version})")
        if peek.client_id is not None:
            self.client_id = peek.client_id
        exchange = Exchange(self.listener, api_key, peek.api_version, peek.correlation_id, peek.client_id, frame,
                            self.clock())
        self.observer.request_received(exchange)
        self._run_request_behaviours(exchange, 0)

    def _run_request_behaviours(self, exchange: Exchange, start: int) -> None:
        behaviours = self.registry.requests.get(exchange.api_key)
        if behaviours:
            for i in range(start, len(behaviours)):
                wait = behaviours[i].on_request(exchange)
                if wait is not None:
                    self._deferred = (exchange, i + 1)
                    self.io.run_async(exchange, wait)
                    return
                if exchange.upstream_frame is None and exchange.local_response is not None:
                    break
        self._dispatch(exchange)

    def _dispatch(self, exchange: Exchange) -> None:
        if exchange.expects_response:
            self.pending.append(exchange)
        if exchange.upstream_frame is not None:
            self._forward(exchange)
            if not exchange.expects_response:
                self._completed(exchange, None)  # acks=0: nothing will come back
        elif exchange.local_response is not None:
            self._respond(exchange, exchange.local_response)

    def _forward(self, exchange: Exchange) -> None:
        frame = exchange.upstream_frame
        assert frame is not None
        if isinstance(frame, list):
            size = sum(len(c) for c in frame)
            data = b"".join([_SIZE.pack(size), *frame])
        else:
            data = _SIZE.pack(len(frame)) + frame
        exchange.forwarded_at = self.clock()
        if exchange.expects_response:
            self.awaiting_upstream.append(exchange)
        # One buffer, one send: writelines() sends chunk by chunk (a syscall each).
        self.io.write_upstream(data)

    # ------------------------------------------------------------------ upstream side
    def receive_upstream_data(self, data: Frame) -> None:
        """Bytes from the broker: every whole response frame is matched to its request."""
        if self.closed:
            return
        try:
            for frame in self.upstream_frames.feed(data):
                self._on_response(frame)
                if self.closed:
                    return
        except ProtocolError as exc:
            self._close(CloseReason("upstream_bad_frame", str(exc), frame_error_kind(exc)))
        except Exception as exc:  # a bug must cost one connection, never the process
            self._close(CloseReason("internal", f"response handling failed: {exc!r}", error=exc))

    def _on_response(self, frame: memoryview) -> None:
        if not self.awaiting_upstream:
            raise ProtocolError("broker sent a response nobody asked for")
        exchange = self.awaiting_upstream.popleft()
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        if correlation_id != exchange.correlation_id:
            raise ProtocolError(f"broker answered correlation id {correlation_id}, expected {exchange.correlation_id}")
        self.observer.upstream_answered(exchange, frame, self.clock() - exchange.forwarded_at)
        behaviours = self.registry.responses.get(exchange.api_key)
        if not behaviours and not exchange.response_hooks:
            self._respond(exchange, frame)
            return
        steps = [*exchange.response_hooks, *(b.on_response for b in behaviours or ())]
        result: Frame = frame
        for i, step in enumerate(steps):
            out = step(exchange, result)
            if not isinstance(out, bytes | bytearray | memoryview):
                self.io.run_async(exchange, _finish_chain(exchange, out, steps[i + 1:]))
                return
            result = out
        self._respond(exchange, result)

    def async_done(self, exchange: Exchange, response: Frame | None, error: BaseException | None = None) -> None:
        """The adapter reports that asynchronous work (`run_async`) finished."""
        if self.closed:
            return
        deferred = self._deferred
        if deferred is not None and deferred[0] is exchange:
            self._resume_request(exchange, deferred[1], error)
            return
        if error is not None or response is None:
            self._close(CloseReason("internal", f"answering {exchange.api_key} v{exchange.api_version} failed: "
                                    f"{error!r}", error=error))
            return
        self._respond(exchange, response)

    def _resume_request(self, exchange: Exchange, next_behaviour: int, error: BaseException | None) -> None:
        self._deferred = None
        try:
            if error is not None:
                raise error
            self._run_request_behaviours(exchange, next_behaviour)
            while self._held and self._deferred is None and not self.closed:
                self._on_request(self._held.popleft())
        except ProtocolError as exc:
            self._close(CloseReason("client_bad_frame", str(exc), frame_error_kind(exc)))
        except Exception as exc:  # a bug must cost one connection, never the process
            self._close(CloseReason("internal", f"request handling failed: {exc!r}", error=exc))

    # ------------------------------------------------------------------ answers, in request order
    def _respond(self, exchange: Exchange, response: Frame) -> None:
        exchange.response = response
        if self.closed:
            return
        pending = self.pending
        if not pending or pending[0] is not exchange:
            return  # an earlier request is still owed its answer: this one waits its turn
        now = self.clock()
        while pending and pending[0].response is not None:
            done = pending.popleft()
            payload = done.response
            assert payload is not None
            self.io.write_client(_SIZE.pack(len(payload)) + payload)
            latency = now - done.received_at
            self.observer.response_written(done, payload, latency)
            self._completed(done, latency)
        if self.draining and self._idle:
            self._close(CloseReason("drained"))

    def _completed(self, exchange: Exchange, latency: float | None) -> None:
        behaviours: list[Behaviour] | None = self.registry.completions.get(exchange.api_key)
        if behaviours:
            for behaviour in behaviours:
                behaviour.on_complete(exchange, latency)

    # ------------------------------------------------------------------ lifecycle
    def drain(self) -> None:
        """Take no new requests; close once every owed response has been written."""
        self.draining = True
        if self._idle:
            self._close(CloseReason("drained"))

    @property
    def _idle(self) -> bool:
        """Nothing owed to the client and nothing held back."""
        return not self.pending and self._deferred is None and not self._held

    def _close(self, reason: CloseReason) -> None:
        if self.closed:
            return
        self.closed = True
        self.io.close(reason)

    def lost(self) -> None:
        """The adapter saw a side go away: nothing more will be written."""
        self.closed = True


async def _finish_chain(
    exchange: Exchange, first: Awaitable[Frame], rest: list[Callable[[Exchange, Frame], Frame | Awaitable[Frame]]]
) -> Frame:
    result = await first
    for step in rest:
        out = step(exchange, result)
        result = out if isinstance(out, bytes | bytearray | memoryview) else await out
    return result
