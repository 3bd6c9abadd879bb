"""The sans-IO connection core, driven with plain bytes: no sockets, no event loop, no Kafka."""

from __future__ import annotations

import struct
from collections.abc import Awaitable
from typing import ClassVar

from insync_proxy.protocol import ApiKey, RequestHeader, encode_request_header
from insync_proxy.proxy.core import CloseReason, ConnectionCore
from insync_proxy.proxy.exchange import (
    BehaviourBase,
    BehaviourRegistry,
    Exchange,
    Frame,
    ListenerAddresses,
    ListenerSettings,
)

LISTENER = ListenerSettings(
    name="default", label="bootstrap", metadata_schema="tagged", hide_unready_partitions=False,
    addresses=ListenerAddresses("127.0.0.1", 9100), broker_listeners=frozenset(),
)


class RecordingIO:
    """Records every action the core asks for."""

    def __init__(self) -> None:
        self.to_client: list[bytes] = []
        self.to_upstream: list[bytes] = []
        self.pending_async: list[tuple[Exchange, Awaitable[Frame | None]]] = []
        self.closed: list[CloseReason] = []

    def write_client(self, data: Frame) -> None:
        self.to_client.append(bytes(data))

    def write_upstream(self, data: Frame) -> None:
        self.to_upstream.append(bytes(data))

    def run_async(self, exchange: Exchange, result: Awaitable[Frame | None]) -> None:
        self.pending_async.append((exchange, result))

    def close(self, reason: CloseReason) -> None:
        self.closed.append(reason)


def request(api_key: int, correlation_id: int, body: bytes = b"", version: int = 1) -> bytes:
    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                           client_id="c")
    payload = encode_request_header(header) + body
    return struct.pack(">i", len(payload)) + payload


def response(correlation_id: int, body: bytes) -> bytes:
    payload = struct.pack(">i", correlation_id) + body
    return struct.pack(">i", len(payload)) + payload


def request_ids(frames: list[bytes]) -> list[int]:
    """Correlation ids of size-prefixed requests (after api key and version)."""
    return [struct.unpack_from(">i", f, 8)[0] for f in frames]


def response_ids(frames: list[bytes]) -> list[int]:
    """Correlation ids of size-prefixed responses."""
    return [struct.unpack_from(">i", f, 4)[0] for f in frames]


def core_with(*behaviours: object) -> tuple[ConnectionCore, RecordingIO]:
    io = RecordingIO()
    registry = BehaviourRegistry(list(behaviours))  # type: ignore[arg-type]
    return ConnectionCore(registry, LISTENER, io, max_frame_bytes=1 << 20), io


class AnswersListOffsetsLocally(BehaviourBase):
    request_keys: ClassVar[frozenset[int]] = frozenset({ApiKey.LIST_OFFSETS})

    def on_request(self, exchange: Exchange) -> None:
        exchange.answer_locally(struct.pack(">i", exchange.correlation_id) + b"local")


class NoResponseForFindCoordinator(BehaviourBase):
    """Stands for acks=0: the request is forwarded and nothing comes back."""

    request_keys: ClassVar[frozenset[int]] = frozenset({ApiKey.FIND_COORDINATOR})
    complete_keys: ClassVar[frozenset[int]] = frozenset({ApiKey.FIND_COORDINATOR})

    def __init__(self) -> None:
        self.completed: list[tuple[int, float | None]] = []

    def on_request(self, exchange: Exchange) -> None:
        exchange.expects_response = False

    def on_complete(self, exchange: Exchange, latency_seconds: float | None) -> None:
        self.completed.append((exchange.correlation_id, latency_seconds))


def test_pipelined_requests_are_answered_in_request_order() -> None:
    # Given two pipelined requests forwarded upstream
    core, io = core_with()
    core.receive_client_data(request(ApiKey.METADATA, 1) + request(ApiKey.METADATA, 2))
    assert request_ids(io.to_upstream) == [1, 2]
    # When the broker answers both in one read, split across two reads at an odd byte
    data = response(1, b"one") + response(2, b"two")
    core.receive_upstream_data(data[:7])
    core.receive_upstream_data(data[7:])
    # Then the client gets both, in order, byte for byte
    assert io.to_client == [response(1, b"one"), response(2, b"two")]
    assert not core.pending and not io.closed


def test_a_local_answer_waits_for_the_forwarded_request_before_it() -> None:
    # Given a forwarded request, then one the proxy answers itself, then another forwarded one
    core, io = core_with(AnswersListOffsetsLocally())
    core.receive_client_data(
        request(ApiKey.METADATA, 1) + request(ApiKey.LIST_OFFSETS, 2) + request(ApiKey.METADATA, 3)
    )
    # Then only the forwarded ones went upstream, and nothing was answered yet (1 is still owed)
    assert request_ids(io.to_upstream) == [1, 3]
    assert io.to_client == []
    # When the broker answers 1: the client gets 1 and the local answer 2, not 3
    core.receive_upstream_data(response(1, b"a"))
    assert response_ids(io.to_client) == [1, 2]
    assert io.to_client[1] == response(2, b"local")
    core.receive_upstream_data(response(3, b"c"))
    assert response_ids(io.to_client) == [1, 2, 3]


def test_a_request_without_response_between_others_is_completed_at_once() -> None:
    # Given acks=0-like requests between two awaited ones
    no_response = NoResponseForFindCoordinator()
    core, io = core_with(no_response)
    core.receive_client_data(
        request(ApiKey.METADATA, 1) + request(ApiKey.FIND_COORDINATOR, 2) + request(ApiKey.METADATA, 3)
    )
    # Then all three went upstream, the middle one is complete (no latency) and owes nothing
    assert request_ids(io.to_upstream) == [1, 2, 3]
    assert no_response.completed == [(2, None)]
    assert [e.correlation_id for e in core.pending] == [1, 3]
    # And the broker's answers to 1 and 3 match their requests, without waiting for 2
    core.receive_upstream_data(response(1, b"a") + response(3, b"c"))
    assert response_ids(io.to_client) == [1, 3]
    assert not io.closed


class MergesProduceAnswer(BehaviourBase):
    """Stands for a partial acks=-2 answer: part forwarded, the proxy's part merged into the reply."""

    request_keys: ClassVar[frozenset[int]] = frozenset({ApiKey.PRODUCE})

    def on_request(self, exchange: Exchange) -> None:
        exchange.upstream_frame = [bytes(exchange.request_frame), b"-trimmed"]
        exchange.response_hooks.append(lambda ex, frame: bytes(frame) + b"+proxy-part")


def test_a_partial_answer_is_merged_with_the_brokers() -> None:
    # Given a request of which the behaviour forwards a rewritten part and answers the rest itself
    core, io = core_with(MergesProduceAnswer())
    original = request(ApiKey.PRODUCE, 7, b"body", version=9)
    core.receive_client_data(original)
    # Then the rewritten frame went upstream with a size prefix covering every chunk
    (sent,) = io.to_upstream
    assert struct.unpack_from(">i", sent)[0] == len(sent) - 4
    assert sent.endswith(b"-trimmed")
    # When the broker answers, the client gets the merged answer
    core.receive_upstream_data(response(7, b"broker-part"))
    assert io.to_client == [response(7, b"broker-part+proxy-part")]


class AnswersAsynchronously(BehaviourBase):
    response_keys: ClassVar[frozenset[int]] = frozenset({ApiKey.METADATA})

    def on_response(self, exchange: Exchange, frame: Frame) -> Frame | Awaitable[Frame]:
        async def later() -> Frame:
            return bytes(frame) + b"!"

        return later() if exchange.correlation_id == 1 else frame


def test_an_asynchronous_answer_keeps_its_place_in_the_order() -> None:
    # Given request 1 answered asynchronously and request 2 synchronously
    core, io = core_with(AnswersAsynchronously())
    core.receive_client_data(request(ApiKey.METADATA, 1) + request(ApiKey.METADATA, 2))
    core.receive_upstream_data(response(1, b"a") + response(2, b"b"))
    # Then nothing is written while 1 is being worked on
    assert io.to_client == [] and len(io.pending_async) == 1
    exchange, awaitable = io.pending_async[0]
    coroutine = awaitable.__await__()
    try:
        next(coroutine)
    except StopIteration as done:
        result = done.value
    # When the adapter reports it finished, both go out in order
    core.async_done(exchange, result)
    assert io.to_client == [response(1, b"a!"), response(2, b"b")]


def test_a_wrong_correlation_id_from_the_broker_closes_the_connection() -> None:
    core, io = core_with()
    core.receive_client_data(request(ApiKey.METADATA, 1))
    core.receive_upstream_data(response(1001, b"x"))
    (reason,) = io.closed
    assert reason.kind == "upstream_bad_frame" and reason.frame_error == "protocolerror"
    assert "correlation id 1001, expected 1" in reason.detail
    assert io.to_client == []
    # Nothing more happens on a closed core
    core.receive_client_data(request(ApiKey.METADATA, 2))
    assert len(io.to_upstream) == 1


def test_an_unsolicited_response_closes_the_connection() -> None:
    core, io = core_with()
    core.receive_client_data(request(ApiKey.METADATA, 1))
    core.receive_upstream_data(response(1, b"ok") + response(999, b"nobody asked"))
    assert io.to_client == [response(1, b"ok")]
    (reason,) = io.closed
    assert reason.kind == "upstream_bad_frame" and "nobody asked for" in reason.detail


def test_garbled_and_oversized_client_frames_close_with_a_reason() -> None:
    core, io = core_with()
    core.receive_client_data(struct.pack(">i", 2**31 - 1) + b"\x00" * 8)
    assert [r.frame_error for r in io.closed] == ["too_large"]
    core2, io2 = core_with()
    core2.receive_client_data(struct.pack(">i", 11) + struct.pack(">hhih", 999, 0, 1, -1) + b"\x00")
    assert io2.closed[0].kind == "client_bad_frame" and "unknown API key 999" in io2.closed[0].detail


class Broken(BehaviourBase):
    request_keys: ClassVar[frozenset[int]] = frozenset({ApiKey.METADATA})

    def on_request(self, exchange: Exchange) -> None:
        raise RuntimeError("a bug")


def test_a_bug_in_a_behaviour_costs_this_connection_only() -> None:
    core, io = core_with(Broken())
    core.receive_client_data(request(ApiKey.METADATA, 1))
    (reason,) = io.closed
    assert reason.kind == "internal" and isinstance(reason.error, RuntimeError)


def test_drain_closes_once_every_owed_response_is_written() -> None:
    core, io = core_with()
    core.receive_client_data(request(ApiKey.METADATA, 1))
    core.drain()
    assert io.closed == []
    core.receive_upstream_data(response(1, b"a"))
    assert io.to_client == [response(1, b"a")]
    assert [r.kind for r in io.closed] == ["drained"]
