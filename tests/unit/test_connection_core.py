"""The sans-IO connection core, driven with plain bytes: no sockets, no event loop, no Kafka."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Awaitable
from typing import ClassVar

from harness.connection_core import (
    LISTENER,
    RecordingIO,
    core_with,
    request,
    request_ids,
    response,
    response_ids,
)
from insync_proxy.protocol import ApiKey
from insync_proxy.protocol.fetch import find_fetch_node_endpoints
from insync_proxy.protocol.messages import NodeEndpoint
from insync_proxy.proxy.behaviours.addresses import AddressRewrite
from insync_proxy.proxy.datapath.core import CUT_THROUGH_FROM, ConnectionCore
from insync_proxy.proxy.datapath.exchange import (
    FORWARD_WITHOUT_RESPONSE,
    BehaviourBase,
    BehaviourRegistry,
    CoreObserver,
    Exchange,
    Frame,
    RequestResult,
    StreamVerdict,
    forward,
    respond,
)
from tests.protocol.frames import fetch_response_frame


class AnswersListOffsetsLocally(BehaviourBase):
    request_keys: ClassVar[frozenset[int]] = frozenset({ApiKey.LIST_OFFSETS})

    def on_request(self, exchange: Exchange) -> RequestResult:
        return respond(struct.pack(">i", exchange.correlation_id) + b"local")


class NoResponseForFindCoordinator(BehaviourBase):
    """Stands for acks=0: the request is forwarded and nothing comes back."""

    request_keys: ClassVar[frozenset[int]] = frozenset({ApiKey.FIND_COORDINATOR})
    complete_keys: ClassVar[frozenset[int]] = frozenset({ApiKey.FIND_COORDINATOR})

    def __init__(self) -> None:
        self.completed: list[tuple[int, float | None]] = []

    def on_request(self, exchange: Exchange) -> RequestResult:
        return FORWARD_WITHOUT_RESPONSE

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


def test_frames_that_arrive_together_leave_together_as_they_came() -> None:
    # Given three pipelined requests in one chunk, one of them answered by the proxy itself
    core, io = core_with(AnswersListOffsetsLocally())
    chunk = request(ApiKey.METADATA, 1) + request(ApiKey.LIST_OFFSETS, 2) + request(ApiKey.METADATA, 3)
    core.receive_client_data(chunk)
    # Then the two forwarded ones go upstream in one write, each the client's own bytes (views of the
    # chunk, size prefix included: no copy, no new prefix)
    assert io.upstream_writes == 1 and request_ids(io.to_upstream) == [1, 3]
    (buffers,) = io.upstream_buffers
    assert all(isinstance(b, memoryview) and b.obj is chunk for b in buffers)
    # When the broker answers both in one chunk
    answers = response(1, b"one") + response(3, b"three")
    core.receive_upstream_data(answers)
    # Then the client gets all three in order, in one write, the broker's frames as they came
    assert io.client_writes == 1
    assert io.to_client == [response(1, b"one"), response(2, b"local"), response(3, b"three")]
    (buffers,) = io.client_buffers
    assert buffers[0].obj is answers and buffers[2].obj is answers  # type: ignore[union-attr]
    assert not core.pending and not io.closed


def test_a_read_whose_every_frame_goes_as_it_came_is_written_as_the_read_itself() -> None:
    # Given requests the proxy forwards as they came, read in one chunk, then one alone
    core, io = core_with()
    chunk = request(ApiKey.METADATA, 1) + request(ApiKey.METADATA, 2)
    core.receive_client_data(chunk)
    alone = request(ApiKey.METADATA, 3)
    core.receive_client_data(alone)
    # Then each read goes upstream as the one buffer it was read into: no view of each frame to make
    assert io.upstream_buffers == [(chunk,), (alone,)]
    assert io.upstream_buffers[0][0] is chunk and io.upstream_buffers[1][0] is alone
    # When the broker's answers come in one read, and the last one cut at an odd byte
    answers = response(1, b"one") + response(2, b"two")
    core.receive_upstream_data(answers)
    last = response(3, b"three")
    core.receive_upstream_data(last[:5])
    core.receive_upstream_data(last[5:])
    # Then the read of whole answers goes to the client as it was read; the answer assembled from two reads goes
    # as its own bytes, and every frame arrives once, in order
    assert io.client_buffers[0][0] is answers and len(io.client_buffers[0]) == 1
    assert io.to_client == [response(1, b"one"), response(2, b"two"), last]
    assert not core.pending and not io.closed


def test_what_was_answered_before_a_bad_frame_still_goes_out() -> None:
    # Given a good response followed by garbage in the same chunk
    core, io = core_with()
    core.receive_client_data(request(ApiKey.METADATA, 1) + request(ApiKey.METADATA, 2))
    core.receive_upstream_data(response(1, b"one") + response(99, b"wrong"))
    # Then the good one reached the client before the connection was closed
    assert io.to_client == [response(1, b"one")]
    assert [r.kind for r in io.closed] == ["upstream_bad_frame"]


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

    def on_request(self, exchange: Exchange) -> RequestResult:
        return forward([bytes(exchange.request_frame), b"-trimmed"],
                       response_hook=lambda ex, frame: bytes(frame) + b"+proxy-part")


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

    def on_request(self, exchange: Exchange) -> RequestResult:
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


# ---------------------------------------------------------------------------------------------- cut-through
BIG = CUT_THROUGH_FROM * 3  #: a response body large enough to be cut through


def big_body(seed: int, size: int = BIG) -> bytes:
    return bytes((seed + i) % 251 for i in range(size))


class RecordingObserver(CoreObserver):
    def __init__(self) -> None:
        self.events: list[tuple[str, int, bytes, float]] = []

    def request_received(self, exchange: Exchange) -> None:
        self.events.append(("request", exchange.correlation_id, b"", 0.0))

    def upstream_answered(self, exchange: Exchange, frame: memoryview, seconds: float) -> None:
        self.events.append(("upstream", exchange.correlation_id, bytes(frame), seconds))

    def response_written(self, exchange: Exchange, payload: Frame, seconds: float) -> None:
        self.events.append(("written", exchange.correlation_id, bytes(payload), seconds))


def test_a_large_response_goes_to_the_client_as_it_arrives() -> None:
    # Given a forwarded request and its large response, split by the network at odd points
    core, io = core_with()
    core.receive_client_data(request(ApiKey.FETCH, 1))
    data = response(1, big_body(1))
    cuts = [0, 3, 11, 40_001, 40_002, len(data) - 1, len(data)]
    written = 0
    for a, b in zip(cuts, cuts[1:], strict=False):
        core.receive_upstream_data(data[a:b])
        # Then every byte that arrived (once the size prefix and correlation id are known) is already
        # with the client, and the core holds none of it
        sent = sum(len(c) for c in io.to_client)
        assert sent == (b if b >= 8 else 0) and sent >= written
        written = sent
        if b >= 8 and b < len(data):
            assert core.upstream_frames.buffered == 0 and core.pending
    # And the client got the response byte for byte, and nothing is owed any more
    assert b"".join(io.to_client) == data
    assert not core.pending and not core.awaiting_upstream and not io.closed


def test_answers_behind_a_cut_through_response_wait_for_its_last_byte() -> None:
    # Given a large forwarded response (1), a local answer (2) and a small forwarded one (3) behind it
    core, io = core_with(AnswersListOffsetsLocally())
    core.receive_client_data(
        request(ApiKey.FETCH, 1) + request(ApiKey.LIST_OFFSETS, 2) + request(ApiKey.METADATA, 3)
    )
    first = response(1, big_body(2))
    # When half of 1 arrives, only (part of) 1 reaches the client
    core.receive_upstream_data(first[: len(first) // 2])
    assert b"".join(io.to_client) == first[: len(first) // 2]
    # When the rest of 1 and all of 3 arrive in one read, the client gets 1, then 2, then 3
    core.receive_upstream_data(first[len(first) // 2:] + response(3, b"three"))
    assert b"".join(io.to_client) == first + response(2, b"local") + response(3, b"three")
    assert not core.pending


def test_a_large_response_behind_an_unfinished_answer_is_assembled_and_keeps_its_place() -> None:
    # Given request 1 answered asynchronously and request 2 with a large response
    core, io = core_with(AnswersAsynchronously())
    core.receive_client_data(request(ApiKey.METADATA, 1) + request(ApiKey.FETCH, 2))
    second = response(2, big_body(3))
    core.receive_upstream_data(response(1, b"a") + second[:1000])
    core.receive_upstream_data(second[1000:])
    # Then nothing is written while 1 is being worked on: 2 was not cut through ahead of it
    assert io.to_client == []
    exchange, awaitable = io.pending_async[0]
    try:
        awaitable.__await__().send(None)
    except StopIteration as done:
        core.async_done(exchange, done.value)
    assert io.to_client == [response(1, b"a!"), second]


def test_a_response_a_behaviour_needs_whole_is_not_cut_through() -> None:
    # Given a behaviour that rewrites Metadata responses (it needs them whole)
    core, io = core_with(AnswersAsynchronously())
    core.receive_client_data(request(ApiKey.METADATA, 2))
    data = response(2, big_body(4))
    core.receive_upstream_data(data[:5000])
    # Then nothing goes out before the whole response is there, and it goes out in one write
    assert io.to_client == []
    core.receive_upstream_data(data[5000:])
    assert io.to_client == [data]


class HoldsTheLastBytes(BehaviourBase):
    """A tap that lets everything but the response's last 10 bytes pass, then upper-cases those."""

    response_keys: ClassVar[frozenset[int]] = frozenset({ApiKey.FETCH})

    def __init__(self, total: int) -> None:
        self.total = total

    def response_stream(self, exchange: Exchange) -> StreamVerdict:
        behaviour = self

        class Tap:
            seen = 0

            def feed(self, data: memoryview) -> int:
                free = max(0, behaviour.total - 10 - self.seen)
                self.seen += len(data)
                return min(free, len(data))

            def finish(self, held: bytes) -> Frame:
                return held.upper()

        return Tap()


def test_a_tap_rewrites_the_held_tail_of_a_cut_through_response() -> None:
    body = big_body(5)[:-10] + b"abcdefghij"
    data = response(7, body)
    core, io = core_with(HoldsTheLastBytes(len(data) - 4))
    core.receive_client_data(request(ApiKey.FETCH, 7))
    core.receive_upstream_data(data[:-3])
    # Everything before the tail went out as it came; the tail is held
    assert b"".join(io.to_client) == data[:-10]
    core.receive_upstream_data(data[-3:])
    assert b"".join(io.to_client) == data[:-10] + b"ABCDEFGHIJ"


def test_the_observer_sees_a_cut_through_response_start_and_end() -> None:
    observer = RecordingObserver()
    core, io = core_with(observer=observer)
    core.receive_client_data(request(ApiKey.FETCH, 4))
    data = response(4, big_body(6))
    core.receive_upstream_data(data[:100])
    # The upstream latency is taken when the response starts (its first bytes)
    assert [(kind, cid) for kind, cid, _, _ in observer.events] == [("request", 4), ("upstream", 4)]
    assert observer.events[1][2] == data[4:100]
    core.receive_upstream_data(data[100:])
    # The request latency once its last byte went out, for the right exchange (per-API metrics)
    kind, cid, _, latency = observer.events[2]
    assert (kind, cid) == ("written", 4) and latency >= observer.events[1][3] >= 0


def test_the_exchanges_of_one_read_take_its_time_and_latencies_run_from_read_to_read() -> None:
    # Given a clock that moves 1 s at each reading
    readings: list[float] = []

    def clock() -> float:
        readings.append(float(len(readings)))
        return readings[-1]

    observer = RecordingObserver()
    io = RecordingIO()
    core = ConnectionCore(BehaviourRegistry([]), LISTENER, io, max_frame_bytes=1 << 20, observer=observer, clock=clock)
    # When three requests come in one read and their answers in another
    core.receive_client_data(b"".join(request(ApiKey.LIST_OFFSETS, i) for i in (1, 2, 3)))
    assert len(readings) == 1  # one reading for the whole read
    core.receive_upstream_data(b"".join(response(i, b"") for i in (1, 2, 3)))
    assert len(readings) == 2
    # Then each exchange was received, forwarded and answered at its read's time
    assert [(kind, cid, seconds) for kind, cid, _, seconds in observer.events if kind != "request"] == [
        ("upstream", 1, 1.0), ("written", 1, 1.0), ("upstream", 2, 1.0), ("written", 2, 1.0),
        ("upstream", 3, 1.0), ("written", 3, 1.0)]


def test_an_observer_of_whole_frames_still_gets_them_whole() -> None:
    # Given an observer that reads whole responses (capture, leak check) and a tap rewriting the tail
    observer = RecordingObserver()
    data = response(7, big_body(7)[:-10] + b"abcdefghij")
    core, io = core_with(HoldsTheLastBytes(len(data) - 4), observer=observer, observe_whole_frames=True)
    core.receive_client_data(request(ApiKey.FETCH, 7))
    core.receive_upstream_data(data[:50_000])
    assert io.to_client  # still cut through
    core.receive_upstream_data(data[50_000:])
    upstream = next(e for e in observer.events if e[0] == "upstream")
    written = next(e for e in observer.events if e[0] == "written")
    # The broker's response as it came, and what the client got
    assert upstream[2] == data[4:]
    assert written[2] == data[4:-10] + b"ABCDEFGHIJ" == b"".join(io.to_client)[4:]


def test_a_connection_closed_mid_cut_through_writes_nothing_more() -> None:
    core, io = core_with()
    core.receive_client_data(request(ApiKey.FETCH, 1) + request(ApiKey.METADATA, 2))
    data = response(1, big_body(8))
    core.receive_upstream_data(data[:20_000])
    sent = len(io.to_client)
    # When the adapter sees a side go away
    core.lost()
    core.receive_upstream_data(data[20_000:] + response(2, b"x"))
    assert len(io.to_client) == sent and io.closed == []


def test_drain_waits_for_the_last_byte_of_a_cut_through_response() -> None:
    core, io = core_with()
    core.receive_client_data(request(ApiKey.FETCH, 1))
    data = response(1, big_body(9))
    core.receive_upstream_data(data[:20_000])
    core.drain()
    assert io.closed == []
    core.receive_upstream_data(data[20_000:])
    assert b"".join(io.to_client) == data
    assert [r.kind for r in io.closed] == ["drained"]


def test_a_wrong_correlation_id_on_a_large_response_closes_before_anything_is_written() -> None:
    core, io = core_with()
    core.receive_client_data(request(ApiKey.FETCH, 1))
    core.receive_upstream_data(response(99, big_body(10))[:1000])
    assert io.to_client == []
    (reason,) = io.closed
    assert reason.kind == "upstream_bad_frame" and "correlation id 99, expected 1" in reason.detail


def test_a_large_request_nobody_reads_goes_upstream_as_it_arrives() -> None:
    # Given a large request of an API no behaviour reads, split by the network
    core, io = core_with(MergesProduceAnswer())
    data = request(ApiKey.ALTER_CONFIGS, 5, big_body(11))
    core.receive_client_data(data[:7])
    core.receive_client_data(data[7:30_000])
    # Then its first bytes are already with the broker
    assert b"".join(io.to_upstream) == data[:30_000]
    core.receive_client_data(data[30_000:] + request(ApiKey.METADATA, 6))
    assert b"".join(io.to_upstream) == data + request(ApiKey.METADATA, 6)
    # And the broker's answers match their requests, in order
    core.receive_upstream_data(response(5, b"five") + response(6, b"six"))
    assert io.to_client == [response(5, b"five"), response(6, b"six")]
    assert core.client_id == "c"


def test_a_large_request_a_behaviour_reads_is_assembled() -> None:
    # Given a large Produce request, which a behaviour reads (and rewrites)
    core, io = core_with(MergesProduceAnswer())
    data = request(ApiKey.PRODUCE, 5, big_body(12), version=9)
    core.receive_client_data(data[:30_000])
    assert io.to_upstream == []
    core.receive_client_data(data[30_000:])
    (sent,) = io.to_upstream
    assert sent[4:].startswith(data[4:]) and sent.endswith(b"-trimmed")


def test_a_large_fetch_v16_response_is_cut_through_with_its_node_endpoints_rewritten() -> None:
    # Given the address rewrite and a Fetch v17 request whose large response names broker 2's real address
    core, io = core_with(AddressRewrite())
    core.receive_client_data(request(ApiKey.FETCH, 3, version=17))
    payload = fetch_response_frame(17, [(uuid.UUID(int=1), [(0, big_body(13)), (1, None)])],
                                   [NodeEndpoint(node_id=2, host="kafka-broker-2.internal", port=9092)],
                                   correlation_id=3)
    data = struct.pack(">i", len(payload)) + payload
    core.receive_upstream_data(data[:50_000])
    # Then the records went out before the response was whole
    assert sum(len(c) for c in io.to_client) == 50_000
    core.receive_upstream_data(data[50_000:])
    out = b"".join(io.to_client)
    # And the client sees the proxy's address for broker 2, in a response of the same length
    assert len(out) == len(data) and b"kafka-broker-2" not in out
    assert find_fetch_node_endpoints(out[4:], 17) == (
        NodeEndpoint(node_id=2, host="127.0.0.1", port=9102),)
    # A small one is rewritten whole, as before
    core.receive_client_data(request(ApiKey.FETCH, 4, version=17))
    small = fetch_response_frame(17, [(uuid.UUID(int=1), [(0, b"r" * 10)])],
                                 [NodeEndpoint(node_id=2, host="kafka-broker-2.internal", port=9092)], correlation_id=4)
    core.receive_upstream_data(struct.pack(">i", len(small)) + small)
    assert find_fetch_node_endpoints(io.to_client[-1][4:], 17) == (
        NodeEndpoint(node_id=2, host="127.0.0.1", port=9102),)


def test_a_tapped_response_in_many_pieces_is_rewritten_the_same() -> None:
    # Given a tapped response arriving in pieces of every size, the tail cut in the middle of one
    body = big_body(14)[:-10] + b"abcdefghij"
    data = response(8, body)
    for piece in (1, 7, 4093, 30_000):
        core, io = core_with(HoldsTheLastBytes(len(data) - 4))
        core.receive_client_data(request(ApiKey.FETCH, 8))
        for i in range(0, len(data), piece):
            core.receive_upstream_data(data[i:i + piece])
        # Then what passed and the rewritten tail add up to the response, whatever the pieces
        assert b"".join(io.to_client) == data[:-10] + b"ABCDEFGHIJ", piece
        assert not core.pending and not io.closed
