"""The sans-IO core of one proxied connection: frames in, actions out.

Like h11's `Connection`, `ConnectionCore` owns a connection's protocol state without a socket: the
requests that are owed a response and their order, which were forwarded and await the broker,
correlation checks, answers given locally, partially or merged, and acks=0 requests that get no
answer. Bytes go in with `receive_client_data` / `receive_upstream_data`; what to do comes out as
calls on a `ConnectionIO` (write to the client, write upstream, run this awaitable, close with a
reason). The asyncio protocols in proxy/datapath/connection.py are thin adapters around it; unit tests drive
it with plain bytes.

Writes are gathered while one chunk of bytes is handled and go out as one write per side when it is
done: pipelined frames that arrived together leave together (one writev), as a byte relay sends a chunk
as it came, instead of a syscall per frame. A frame forwarded unchanged goes out as it came, size prefix
included (a view of the bytes read: no copy).

Cut-through: a large response whose end has not arrived yet goes to the client as it arrives, when it
is next in the client's order and no behaviour needs it whole (`BehaviourBase.response_stream`): no
reassembly, no copy. Everything behind it waits its turn as for any other response. Likewise a large
request for whose API no behaviour is registered goes upstream as it arrives.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol

from insync_proxy.protocol import ApiKey, ProtocolError
from insync_proxy.protocol.errors import FrameTooLarge
from insync_proxy.protocol.framing import FRAME, PART, FrameStream, is_whole_read
from insync_proxy.protocol.headers import RequestHeaderPeeker
from insync_proxy.protocol.native import int32_at as _core_int32_at
from insync_proxy.proxy.datapath.exchange import (
    FORWARD,
    FORWARD_WITHOUT_RESPONSE_KIND,
    RESPOND_KIND,
    WAIT_KIND,
    BehaviourBase,
    BehaviourRegistry,
    CoreObserver,
    Exchange,
    Frame,
    ListenerSettings,
    ResponseTap,
)

_SIZE: Final = struct.Struct(">i")
#: What a behaviour returns when it answers at once (anything else is awaited): a tuple, built once (an
#: `X | Y` union in isinstance is built again at every call).
_FRAME_TYPES: Final = (bytes, bytearray, memoryview)
_KNOWN_KEYS: Final = frozenset(int(k) for k in ApiKey)

#: Frames of at least this many bytes whose end has not arrived may be cut through.
CUT_THROUGH_FROM: Final = 32 * 1024
#: A frame written whole below this size is joined to its size prefix (one small copy, one buffer);
#: above it the two go out as two buffers of one write (no copy).
_JOIN_BELOW: Final = 64 * 1024


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

    def write_client(self, data: list[Frame]) -> None:
        """Send these bytes, in order, to the client (one write: whole frames with their size prefix, or
        the next bytes of a frame being cut through). The list is the adapter's from then on."""

    def write_upstream(self, data: list[Frame]) -> None:
        """Send these bytes, in order, to the broker (as `write_client`)."""

    def run_async(self, exchange: Exchange, result: Awaitable[Frame | None]) -> None:
        """Run a behaviour's asynchronous work (a request it must look something up for, or an answer);
        report back with `ConnectionCore.async_done`."""

    def close(self, reason: CloseReason) -> None:
        """Close both sides; called once."""


class NoObserver(CoreObserver):
    """Observes nothing (tests, tools)."""


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
        cut_through_from: int | None = CUT_THROUGH_FROM,
        observe_whole_frames: bool = False,
    ) -> None:
        """`cut_through_from`: the smallest frame that may be cut through (None: never).
        `observe_whole_frames`: the observer gets whole frames also for cut-through responses (a copy
        is kept while they pass; for debug aids that read them, e.g. the address-leak check)."""
        self.registry = registry
        self.listener = listener
        self.io = io
        # The two writes every exchange makes, bound once: a call through the `ConnectionIO` protocol looks the
        # method up by name each time (compiled, hundreds of instructions a call).
        self._write_client: Callable[[list[Frame]], None] = io.write_client
        self._write_upstream: Callable[[list[Frame]], None] = io.write_upstream
        self._int32_at = _core_int32_at  # the compiled core's (None: not built); a module global is a dict lookup
        self.observer: CoreObserver = observer or NoObserver()
        self.clock = clock
        #: When the chunk being handled was read (-1: none is): every exchange it holds takes that time.
        self._now = -1.0
        self.observe_whole_frames = observe_whole_frames
        self.client_frames = FrameStream(
            max_frame_bytes, pass_from=None if observe_whole_frames else cut_through_from, head_size=10)
        self.upstream_frames = FrameStream(max_frame_bytes, pass_from=cut_through_from, head_size=4)
        self._headers = RequestHeaderPeeker()
        #: The response being cut through to the client, if any (a request being cut through needs no
        #: state here: its bytes follow `client_frames.passing`).
        self._through: _CutThrough | None = None
        self.pending: deque[Exchange] = deque()  #: every exchange that owes the client a response, in order
        self.awaiting_upstream: deque[Exchange] = deque()  #: forwarded, response not yet received
        self.client_id: str | None = None
        self.closed = False
        self.draining = False
        #: A request whose behaviour is looking something up (exchange, next behaviour's index): later
        #: requests wait in `_held`, so the broker sees them in the client's order.
        self._deferred: tuple[Exchange, int] | None = None
        self._held: deque[memoryview] = deque()
        #: Writes gathered while a chunk is handled (None: write at once), sent by `_send_gathered`.
        self._to_client: list[Frame] | None = None
        self._to_upstream: list[Frame] | None = None

    # ------------------------------------------------------------------ client side
    def receive_client_data(self, data: Frame) -> None:
        """Bytes from the client: every whole request frame is handled in order."""
        if self.closed:
            return
        self._handle_chunk(data, self.client_frames, True)

    def _handle_chunk(self, data: Frame, stream: FrameStream, requests: bool) -> None:
        """One read's bytes, the client's (`requests`) or the broker's: each frame event handled in order, a
        failure closing the connection; what was gathered meanwhile goes out at the end, before a close too."""
        self._to_client, self._to_upstream = [], []
        self._now = self.clock()  # one reading of the clock for every frame of the chunk
        try:
            if not requests and self._through is not None and len(data) < stream.passing:
                # The middle of a response a tap watches: no frame events either.
                stream.passing -= len(data)
                self._pass_response_part(data if isinstance(data, memoryview) else memoryview(data))
                return
            stream.feed(data)
            while True:
                kind = FRAME
                value = stream.next_frame()  # the common case: a whole frame the compiled core split, no event pair
                if value is None:
                    event = stream.next()
                    if event is None:
                        break
                    kind, value = event
                if kind == FRAME:
                    if requests:
                        self._on_request(value, stream.framed)
                    else:
                        self._on_response(value, stream.framed)
                elif kind == PART:
                    if requests:
                        self._to_upstream.append(value)
                    else:
                        self._pass_response_part(value)
                elif requests:
                    self._offer_request(value)
                else:
                    self._offer_response(value)
                if self.closed:
                    return
        except ProtocolError as exc:
            side = "client" if requests else "upstream"
            self._close(CloseReason(f"{side}_bad_frame", str(exc), frame_error_kind(exc)))
        except Exception as exc:  # a bug must cost one connection, never the process
            what = "request" if requests else "response"
            self._close(CloseReason("internal", f"{what} handling failed: {exc!r}", error=exc))
        finally:
            self._now = -1.0
            self._send_gathered(data, requests)

    def _time(self) -> float:
        """Now: when the chunk being handled was read, else (an asynchronous answer, a timer) the clock's."""
        now = self._now
        return self.clock() if now < 0.0 else now

    def _send_gathered(self, read: Frame | None = None, requests: bool = False) -> None:
        """What was gathered while a chunk was handled: one write per side (before a close, too); `read`: the chunk,
        the client's (`requests`) or the broker's, when its handling ended."""
        to_client, to_upstream = self._to_client, self._to_upstream
        self._to_client = self._to_upstream = None
        if isinstance(read, bytes):
            # What the read's handling gathered for the other side is the read itself, piece by piece (each frame
            # forwarded as it came, in order: the common case): it goes as the buffer it was read into, which the
            # event loop sends as it is (of a view, it makes a view of its own first: `memoryview(data).cast('b')`).
            gathered = to_upstream if requests else to_client
            if gathered and is_whole_read(read, gathered):
                gathered.clear()
                gathered.append(read)
        if to_upstream:
            self._write_upstream(to_upstream)
        if to_client:
            self._write_client(to_client)

    def _send(self, upstream: bool, data: Frame) -> None:
        """To the broker (`upstream`) or the client: gathered while a chunk is handled, else written at once."""
        gathered = self._to_upstream if upstream else self._to_client
        if gathered is not None:
            gathered.append(data)
        elif upstream:
            self._write_upstream([data])
        else:
            self._write_client([data])

    def _send_all(self, upstream: bool, data: list[Frame]) -> None:
        """`_send` of several buffers, in one write when not gathered."""
        gathered = self._to_upstream if upstream else self._to_client
        if gathered is not None:
            gathered.extend(data)
        elif upstream:
            self._write_upstream(data)
        else:
            self._write_client(data)

    def _on_request(self, frame: memoryview, framed: memoryview | None = None) -> None:
        """A whole request; `framed`: the same bytes with their size prefix, as they came."""
        if self._deferred is not None:
            self._held.append(frame)
            return
        exchange = self._exchange(frame)
        exchange.request_framed = framed
        self.observer.request_received(exchange)
        self._run_request_behaviours(exchange, 0)

    def _exchange(self, frame: memoryview) -> Exchange:
        peek = self._headers.peek(frame)
        api_key = peek.api_key
        if api_key not in _KNOWN_KEYS:
            raise ProtocolError(f"unknown API key {api_key} (version {peek.api_version})")
        if peek.client_id is not None:
            self.client_id = peek.client_id
        return Exchange(self.listener, api_key, peek.api_version, peek.correlation_id, peek.client_id, frame,
                        self._time(), peek.header_size)

    def _offer_request(self, head: memoryview) -> None:
        """A large request has started: forward it as it arrives when no behaviour reads its API's requests
        and nothing is held back; otherwise it is assembled and handled whole."""
        if self._deferred is not None or self.draining:
            return
        key = int.from_bytes(head[0:2], "big", signed=True)
        registry = self.registry
        if key in registry.requests or key in registry.completions or key not in _KNOWN_KEYS:
            return
        try:
            exchange = self._exchange(head)
        except ProtocolError:
            return  # a header longer than what arrived (or a bad one: reported once it is whole)
        exchange.upstream_frame = None  # its bytes go upstream as they come
        self.observer.request_received(exchange)
        self.pending.append(exchange)
        exchange.forwarded_at = self._time()
        self.awaiting_upstream.append(exchange)
        self.client_frames.pass_through()

    def _run_request_behaviours(self, exchange: Exchange, start: int) -> None:
        behaviours = self.registry.requests.get(exchange.api_key)
        if behaviours:
            for i in range(start, len(behaviours)):
                result = behaviours[i].on_request(exchange)
                if result is FORWARD:
                    continue  # the hot path: as it stands
                kind = result.kind
                if kind == WAIT_KIND:
                    assert result.work is not None
                    self._deferred = (exchange, i + 1)
                    self.io.run_async(exchange, result.work)
                    return
                if kind == RESPOND_KIND:
                    assert result.response is not None
                    exchange.answer_locally(result.response)
                    break  # answered: later behaviours do not see it
                if result.upstream_frame is not None:
                    exchange.upstream_frame = result.upstream_frame
                if result.response_hook is not None:
                    exchange.response_hooks.append(result.response_hook)
                if kind == FORWARD_WITHOUT_RESPONSE_KIND:
                    exchange.expects_response = False
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
        exchange.forwarded_at = self._time()
        if exchange.expects_response:
            self.awaiting_upstream.append(exchange)
        if isinstance(frame, list):
            size = sum(len(c) for c in frame)
            if size < _JOIN_BELOW:
                self._send(True, b"".join([_SIZE.pack(size), *frame]))
            else:
                self._send_all(True, [_SIZE.pack(size), *frame])
        elif frame is exchange.request_frame and exchange.request_framed is not None:
            self._send(True, exchange.request_framed)  # unchanged: as it came, no copy
        else:
            self._write_frame(True, frame)

    def _write_frame(self, upstream: bool, payload: Frame) -> None:
        """One frame, its size prefix first, in one write: small ones as one buffer, large ones as two."""
        size = len(payload)
        if size < _JOIN_BELOW:
            self._send(upstream, _SIZE.pack(size) + payload)
        else:
            self._send_all(upstream, [_SIZE.pack(size), payload])

    # ------------------------------------------------------------------ upstream side
    def receive_upstream_data(self, data: Frame) -> None:
        """Bytes from the broker: every response is matched to its request, whole or cut through."""
        if self.closed:
            return
        stream = self.upstream_frames
        through = self._through
        if through is not None and through.plain and len(data) < stream.passing:
            # The middle of a response passing untouched: straight on (the hot path of a large Fetch).
            stream.passing -= len(data)
            self._write_client([data])
            return
        self._handle_chunk(data, stream, False)

    def _next_awaited(self, frame: memoryview) -> Exchange:
        """The exchange this response answers (the oldest forwarded one), checked by correlation id."""
        if not self.awaiting_upstream:
            raise ProtocolError("broker sent a response nobody asked for")
        exchange = self.awaiting_upstream[0]
        read = None if self._int32_at is None else self._int32_at(frame, 0)  # the compiled core, else struct
        correlation_id: int = _SIZE.unpack_from(frame, 0)[0] if read is None else read
        if correlation_id != exchange.correlation_id:
            raise ProtocolError(f"broker answered correlation id {correlation_id}, expected {exchange.correlation_id}")
        return exchange

    def _offer_response(self, head: memoryview) -> None:
        """A large response has started: cut it through when it is next in the client's order and no
        behaviour needs it whole; otherwise it is assembled and handled whole."""
        exchange = self._next_awaited(head)
        pending = self.pending
        if not pending or pending[0] is not exchange or exchange.response_hooks:
            return
        registry = self.registry
        if exchange.api_key in registry.completions:
            return  # completions may read the response
        tap: ResponseTap | None = None
        for behaviour in registry.responses.get(exchange.api_key) or ():
            verdict = behaviour.response_stream(exchange)
            if verdict is False:
                return
            if verdict is not True:
                if tap is not None:
                    return  # one tap at a time
                tap = verdict
        self.awaiting_upstream.popleft()
        seconds = self._time() - exchange.forwarded_at
        self.upstream_frames.pass_through()
        self._through = _CutThrough(exchange, tap, seconds, bytes(head[:64]), self.observe_whole_frames)
        if not self.observe_whole_frames:
            self.observer.upstream_answered(exchange, head, seconds)

    def _pass_response_part(self, data: memoryview) -> None:
        through = self._through
        assert through is not None
        send: memoryview | None = data
        if through.holding:
            through.held.append(bytes(data))
            send = None
        elif through.tap is not None:
            start = 4 if through.first else 0  # the tap sees the payload, not the size prefix
            payload = data[start:]
            ok = through.tap.feed(payload)
            if ok < len(payload):
                through.held.append(bytes(payload[ok:]))
                through.holding = True
                send = data[:start + ok]
        through.first = False
        through.plain = through.tap is None and through.kept is None
        if send:
            self._send(False, send)
            if through.kept is not None:
                through.kept.append(bytes(send))
        if not self.upstream_frames.passing:
            self._end_cut_through(through)

    def _end_cut_through(self, through: _CutThrough) -> None:
        self._through = None
        exchange = through.exchange
        held = b"".join(through.held)
        tail: Frame = held
        if through.tap is not None:
            tail = through.tap.finish(held)
            if len(tail) != len(held):
                raise RuntimeError(f"a response tap turned a {len(held)}-byte tail into {len(tail)} bytes")
        if tail:
            self._send(False, tail)
        popped = self.pending.popleft()
        assert popped is exchange
        exchange.response = through.head
        latency = self._time() - exchange.received_at
        observed: Frame = through.head
        if through.kept is not None:
            original = memoryview(b"".join([*through.kept, held]))[4:]
            self.observer.upstream_answered(exchange, original, through.seconds)
            observed = memoryview(b"".join([*through.kept, tail]))[4:]
        self.observer.response_written(exchange, observed, latency)
        self._completed(exchange, latency)
        self._flush()

    def _on_response(self, frame: memoryview, framed: memoryview | None = None) -> None:
        """A whole response; `framed`: the same bytes with their size prefix, as they came."""
        exchange = self._next_awaited(frame)
        self.awaiting_upstream.popleft()
        self.observer.upstream_answered(exchange, frame, self._time() - exchange.forwarded_at)
        behaviours = self.registry.responses.get(exchange.api_key)
        if not exchange.response_hooks:
            if not behaviours:
                self._respond(exchange, frame, framed)
                return
            if len(behaviours) == 1:  # the common case (Produce: the address rewrite), without building a chain
                out = behaviours[0].on_response(exchange, frame)
                if out is frame:  # answered as it came (the address rewrite had nothing to rewrite)
                    self._respond(exchange, frame, framed)
                elif isinstance(out, _FRAME_TYPES):
                    self._respond(exchange, out, None)
                else:
                    self.io.run_async(exchange, _finish_chain(exchange, out, []))
                return
        steps = [*exchange.response_hooks, *(b.on_response for b in behaviours or ())]
        result: Frame = frame
        for i, step in enumerate(steps):
            out = step(exchange, result)
            if not isinstance(out, _FRAME_TYPES):
                self.io.run_async(exchange, _finish_chain(exchange, out, steps[i + 1:]))
                return
            result = out
        self._respond(exchange, result, framed if result is frame else None)

    def async_done(self, exchange: Exchange, response: Frame | None, error: BaseException | None = None) -> None:
        """The adapter reports that asynchronous work (`run_async`) finished."""
        if self.closed:
            return
        deferred = self._deferred
        if deferred is not None and deferred[0] is exchange:
            self._resume_request(exchange, deferred[1], error)
            return
        if isinstance(error, ProtocolError):  # the broker's answer, read in slices: as if read at once
            self._close(CloseReason("upstream_bad_frame", str(error), frame_error_kind(error)))
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
    def _respond(self, exchange: Exchange, response: Frame, framed: memoryview | None = None) -> None:
        """`response` is ready for the client (`framed`: the broker's frame as it came, when unchanged)."""
        exchange.response = response
        exchange.response_framed = framed
        if self.closed:
            return
        pending = self.pending
        if pending and pending[0] is exchange:
            self._flush()
        # else an earlier request is still owed its answer: this one waits its turn

    def _flush(self) -> None:
        """Write every answer that is next in order and ready (a cut-through one is ready only once whole)."""
        pending = self.pending
        now = self._time()
        while pending and pending[0].response is not None and not self.closed:
            done = pending.popleft()
            payload = done.response
            assert payload is not None
            framed = done.response_framed
            if framed is not None:
                self._send(False, framed)  # the broker's frame unchanged: as it came, no copy
            else:
                self._write_frame(False, payload)
            latency = now - done.received_at
            self.observer.response_written(done, payload, latency)
            self._completed(done, latency)
        if self.draining and self._idle:
            self._close(CloseReason("drained"))

    def _completed(self, exchange: Exchange, latency: float | None) -> None:
        behaviours: list[BehaviourBase] | None = self.registry.completions.get(exchange.api_key)
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
        self._send_gathered()  # what was answered before the fault still goes out
        self.closed = True
        self.io.close(reason)

    def lost(self) -> None:
        """The adapter saw a side go away: nothing more will be written."""
        self.closed = True


class _CutThrough:
    """A response on its way to the client as it arrives."""

    __slots__ = ("exchange", "first", "head", "held", "holding", "kept", "plain", "seconds", "tap")

    def __init__(self, exchange: Exchange, tap: ResponseTap | None, seconds: float, head: bytes, keep: bool) -> None:
        self.exchange = exchange
        self.tap = tap
        self.seconds = seconds  #: upstream latency, to its first bytes
        self.head = head  #: its first bytes (what `Exchange.response` holds once it is done)
        self.first = True
        self.holding = False
        self.held: list[bytes] = []  #: the tail a tap holds back
        self.kept: list[bytes] | None = [] if keep else None  #: a copy of what went out, for the observer
        #: Its first part went out and nothing watches or keeps the rest: later pieces may go straight on.
        self.plain = False


async def _finish_chain(
    exchange: Exchange, first: Awaitable[Frame], rest: list[Callable[[Exchange, Frame], Frame | Awaitable[Frame]]]
) -> Frame:
    result = await first
    for step in rest:
        out = step(exchange, result)
        result = out if isinstance(out, _FRAME_TYPES) else await out
    return result
