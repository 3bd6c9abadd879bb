"""A big Metadata answer is worked on in slices, the event loop free between them: the same bytes as at once.

Driven through the sans-IO connection core with plain bytes; the behaviour's `pause` is counted (and, in the
loop test, is the proxy's own: other work runs between the slices).
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from collections.abc import Awaitable

import pytest

from harness.connection_core import RecordingIO, request
from harness.metadata_slices import (
    BROKERS,
    PORTS,
    Pauses,
    all_topics_request,
    answer,
    core_for,
)
from insync_proxy.protocol import ApiKey, MetadataRequest, encode_request, scan_metadata_response
from insync_proxy.protocol.messages import (
    MetadataRequestTopic,
)
from insync_proxy.protocol.metadata_splice import splice_metadata_response
from insync_proxy.proxy.behaviours.metadata import SLICE_TOPICS, MetadataEnricher
from insync_proxy.proxy.controlplane.min_insync import CachedValue
from insync_proxy.proxy.datapath.core import ConnectionCore
from insync_proxy.proxy.datapath.exchange import Frame, ListenerAddresses
from tests.unit.enricher_harness import RecordingControl


def expected(frame: bytes, min_insync: int | None = 2, **values_of: int) -> bytes:
    """What the proxy must answer: the broker's answer spliced at once (tag 637, the listener's addresses)."""
    scan = scan_metadata_response(memoryview(frame)[4:], 12)
    values: dict[str | uuid.UUID, int] = {}
    if min_insync is not None:
        values = {t.name: min_insync for t in scan.topics if t.name is not None}
    values.update(values_of)
    spliced = splice_metadata_response(scan, min_insync_replicas=values,
                                       broker_addresses={n: ListenerAddresses("127.0.0.1", PORTS)[n] for n in BROKERS})
    return struct.pack(">i", len(spliced)) + spliced


def run_to_the_end(io: RecordingIO, core: ConnectionCore) -> None:
    """Finish the asynchronous answer the core handed over, as the proxy's adapter does."""
    assert len(io.pending_async) == 1
    exchange, awaitable = io.pending_async.pop()

    async def finish() -> Frame | None:
        return await awaitable

    try:
        result = asyncio.run(finish())
    except Exception as error:  # what the adapter hands the core
        core.async_done(exchange, None, error)
        return
    core.async_done(exchange, result)


def test_an_answer_of_more_than_a_slice_is_spliced_in_slices_into_the_same_bytes() -> None:
    # Given an all-topics answer of 4.5 slices' worth of topics, every topic's min.insync cached
    topics = SLICE_TOPICS * 9 // 2
    pauses = Pauses()
    core, io, _, metrics = core_for(topics, pauses)
    frame = answer(topics)
    # When it passes through the proxy
    core.receive_client_data(all_topics_request())
    core.receive_upstream_data(frame)
    assert io.to_client == []  # worked on asynchronously
    run_to_the_end(io, core)
    # Then the client gets exactly the at-once splice (tag 637 on every topic, the proxy's addresses)
    assert io.to_client == [expected(frame)]
    # And the work paused between slices: 4 more scan steps, 5 splice steps
    assert pauses.count == 4 + 5
    assert metrics.topics_enriched_total._value.get() == topics


def test_an_answer_of_one_slice_is_answered_at_once() -> None:
    # Given an answer of exactly one slice
    pauses = Pauses()
    core, io, _, _ = core_for(SLICE_TOPICS, pauses)
    frame = answer(SLICE_TOPICS)
    # When it passes, Then it is answered in the same call, never paused
    core.receive_client_data(all_topics_request())
    core.receive_upstream_data(frame)
    assert io.to_client == [expected(frame)] and io.pending_async == [] and pauses.count == 0


def test_a_hide_unready_listener_learns_and_hides_in_slices() -> None:
    # Given a hide_unready_partitions listener, min.insync.replicas 3 and every ISR of 2: all unready
    topics = SLICE_TOPICS * 2 + 1
    pauses = Pauses()
    core, io, _, metrics = core_for(topics, pauses, hide=True, min_insync=3)
    frame = answer(topics, isr=(1, 2))
    # When the big answer passes
    core.receive_client_data(all_topics_request())
    core.receive_upstream_data(frame)
    run_to_the_end(io, core)
    # Then every partition was presented leaderless (the view learnt every slice before the splice)
    assert metrics.partitions_hidden_total._value.get() == topics * 2
    scan = scan_metadata_response(memoryview(io.to_client[0])[4:], 12)
    assert all(p.leader_id == -1 and p.error_code == 5 for t in scan.topics for p in scan.partitions(t))
    # And it paused between the scan's, the learning's and the splice's slices
    assert pauses.count == 2 + 3 + 3


def test_a_garbled_big_answer_closes_the_connection_as_a_bad_upstream_frame() -> None:
    # Given a big answer cut short inside its last slice (the size prefix says what is there)
    topics = SLICE_TOPICS * 2
    core, io, _, _ = core_for(topics, Pauses())
    frame = answer(topics)
    payload = frame[4:-40]
    core.receive_client_data(all_topics_request())
    core.receive_upstream_data(struct.pack(">i", len(payload)) + payload)
    run_to_the_end(io, core)
    # Then nothing went to the client and the connection closed for the broker's bad frame
    assert io.to_client == []
    assert [r.kind for r in io.closed] == ["upstream_bad_frame"]


def test_other_work_runs_on_the_loop_between_the_slices() -> None:
    # Given a 10,000-topic answer worked on by the proxy's own pause, and a ticker task on the same loop
    topics = 10_000
    pauses = Pauses(loop=True)
    core, io, _, _ = core_for(topics, pauses)
    frame = answer(topics)
    core.receive_client_data(all_topics_request())
    core.receive_upstream_data(frame)
    exchange, awaitable = io.pending_async.pop()
    ticks: list[int] = []

    async def ticker(done: asyncio.Event) -> None:
        while not done.is_set():
            ticks.append(pauses.count)
            await asyncio.sleep(0)

    async def main() -> Frame | None:
        done = asyncio.Event()
        task = asyncio.ensure_future(ticker(done))
        try:
            return await _awaited(awaitable)
        finally:
            done.set()
            await task

    result = asyncio.run(main())
    core.async_done(exchange, result)
    # Then the ticker ran between the slices (not only before or after the whole answer)
    assert len({t for t in ticks if 0 < t < pauses.count}) >= pauses.count // 2
    assert io.to_client == [expected(frame)]


async def _awaited(awaitable: Awaitable[Frame | None]) -> Frame | None:
    return await awaitable


def _answer_and_fetches(core: ConnectionCore, io: RecordingIO, frame: bytes, correlation_id: int,
                        control: RecordingControl, topics_read: int) -> bytes:
    """`_answer_through`, on one event loop that then runs until the control connection was asked for
    `topics_read` topic configs in all (the cache's fetches for next time run as tasks after the answer)."""

    async def main() -> None:
        payload = struct.pack(">i", correlation_id) + frame[8:]
        core.receive_client_data(all_topics_request(correlation_id))
        core.receive_upstream_data(struct.pack(">i", len(payload)) + payload)
        while io.pending_async:
            exchange, awaitable = io.pending_async.pop()
            core.async_done(exchange, await _awaited(awaitable))
        for _ in range(10_000):
            if sum(len(batch) for batch in control.described) >= topics_read:
                return
            await asyncio.sleep(0)

    asyncio.run(main())
    return io.to_client.pop()


@pytest.mark.parametrize("topics", [SLICE_TOPICS + 1, 3 * SLICE_TOPICS])
def test_an_uncached_big_answer_is_answered_and_its_topics_fetched_for_next_time(topics: int) -> None:
    # Given nothing cached (and no wait for misses): the answer goes out without tag 637, misses are fetched
    control = RecordingControl()
    core, io, _, _ = core_for(topics, Pauses(), min_insync=None, control=control)
    frame = answer(topics)
    assert _answer_and_fetches(core, io, frame, 7, control, topics) == expected(frame, None)
    assert sorted(t for batch in control.described for t in batch) == [f"t{i:05d}" for i in range(topics)]


def _answer_through(core: ConnectionCore, io: RecordingIO, frame: bytes, correlation_id: int) -> bytes:
    """One all-topics request and the broker's `frame` (re-numbered) through the core; what the client got."""
    payload = struct.pack(">i", correlation_id) + frame[8:]
    core.receive_client_data(all_topics_request(correlation_id))
    core.receive_upstream_data(struct.pack(">i", len(payload)) + payload)
    if io.pending_async:
        run_to_the_end(io, core)
    return io.to_client.pop()


def _renumbered(frame: bytes, correlation_id: int) -> bytes:
    return frame[:4] + struct.pack(">i", correlation_id) + frame[8:]


def test_the_same_big_answer_again_is_the_kept_splice_renumbered() -> None:
    # Given a big all-topics answer spliced once
    topics = SLICE_TOPICS * 3
    pauses = Pauses()
    core, io, _, metrics = core_for(topics, pauses)
    frame = answer(topics)
    first = _answer_through(core, io, frame, 7)
    sliced = pauses.count
    # When the broker sends the same bytes to the next all-topics requests
    second = _answer_through(core, io, frame, 8)
    third = _answer_through(core, io, frame, 9)
    # Then each is the splice, with its own correlation id, answered at once (no slices, nothing async)
    assert first == expected(frame)
    assert second == _renumbered(expected(frame), 8) and third == _renumbered(expected(frame), 9)
    assert pauses.count == sliced
    assert metrics.topics_enriched_total._value.get() == 3 * topics
    assert metrics.metadata_cache_hits_total._value.get() == 3 * topics


def test_a_changed_value_a_stale_entry_or_changed_bytes_are_spliced_again() -> None:
    topics = SLICE_TOPICS + 10
    control = RecordingControl()
    core, io, cache, _ = core_for(topics, Pauses(), control=control)
    frame = answer(topics)
    assert _answer_through(core, io, frame, 1) == _renumbered(expected(frame), 1)
    # When one topic's min.insync.replicas changed in the cache: Then the answer carries the new value
    cache.entries["t00003"] = CachedValue(3, time.monotonic())
    changed = _answer_through(core, io, frame, 2)
    scan = scan_metadata_response(memoryview(changed)[4:], 12)
    assert {t.name: t.min_insync_replicas for t in scan.topics}["t00003"] == 3
    # When the broker's bytes change (an ISR shrank): Then the new bytes are spliced, not the kept ones
    shrunk = answer(topics, isr=(1, 2))
    assert _answer_through(core, io, shrunk, 3) == _renumbered(expected(shrunk, t00003=3), 3)
    # When an entry is older than the TTL plus the max stale age: Then it is left out and fetched for next time, as
    # without a kept splice
    cache.entries["t00004"] = CachedValue(2, time.monotonic() - 30 - 3600 - 1)
    stale = scan_metadata_response(memoryview(_answer_and_fetches(core, io, shrunk, 4, control, 1))[4:], 12)
    assert {t.name: t.min_insync_replicas for t in stale.topics}["t00004"] == -1
    assert control.described == [["t00004"]]


def test_a_request_naming_topics_is_never_answered_from_a_kept_splice() -> None:
    # Given a kept splice of a big all-topics answer
    topics = SLICE_TOPICS + 1
    core, io, _, _ = core_for(topics, Pauses())
    frame = answer(topics)
    _answer_through(core, io, frame, 1)
    # When a request naming every topic gets the same bytes
    named = encode_request(MetadataRequest(topics=tuple(
        MetadataRequestTopic(name=f"t{i:05d}") for i in range(topics))), 12)
    core.receive_client_data(request(ApiKey.METADATA, 2, named, version=12))
    core.receive_upstream_data(_renumbered(frame, 2))
    # Then it takes the full path (its topics come into use), and the answer is the same splice
    assert io.pending_async
    run_to_the_end(io, core)
    assert io.to_client.pop() == _renumbered(expected(frame), 2)
    assert len(core.registry.responses[ApiKey.METADATA][0].context.min_insync.demand) == topics  # type: ignore[attr-defined]


def test_an_answer_naming_another_controller_is_the_kept_splice_with_that_controller() -> None:
    # Given a kept splice (a KRaft broker names a random live broker as the controller in each answer)
    topics = SLICE_TOPICS * 2
    pauses = Pauses()
    core, io, _, _ = core_for(topics, pauses)
    _answer_through(core, io, answer(topics, controller=1), 1)
    sliced = pauses.count
    # When the next answer is the same but for its controller id
    other = answer(topics, controller=3)
    out = _answer_through(core, io, other, 2)
    # Then it is the kept splice with that controller id, answered at once
    assert out == _renumbered(expected(other), 2) and pauses.count == sliced
    assert scan_metadata_response(memoryview(out)[4:], 12).controller_id == 3


def test_kip637_layout_answers_are_kept_and_renumbered_too() -> None:
    # Given a kip637 listener: a client's "v10" goes upstream as v9, the answer is KIP-637's literal layout
    topics = SLICE_TOPICS * 2
    pauses = Pauses()
    core, io, _, _ = core_for(topics, pauses, schema="kip637")
    outs = []
    for correlation_id, controller in ((1, 1), (2, 2)):
        v9 = answer(topics, correlation_id=correlation_id, controller=controller, version=9)
        core.receive_client_data(request(ApiKey.METADATA, correlation_id,
                                         encode_request(MetadataRequest(topics=None), 10), version=10))
        core.receive_upstream_data(v9)
        if io.pending_async:
            run_to_the_end(io, core)
        scan = scan_metadata_response(memoryview(v9)[4:], 9)
        spliced = splice_metadata_response(
            scan, min_insync_replicas={t.name: 2 for t in scan.topics if t.name is not None},
            broker_addresses={n: ListenerAddresses("127.0.0.1", PORTS)[n] for n in BROKERS}, layout="kip637")
        outs.append((io.to_client.pop(), struct.pack(">i", len(spliced)) + spliced, pauses.count))
    # Then both equal the splice in KIP-637's layout; the second was the kept one (no slices)
    assert outs[0][0] == outs[0][1] and outs[1][0] == outs[1][1]
    assert outs[1][2] == outs[0][2]


def test_an_answer_too_big_to_keep_is_scanned_and_spliced_again_each_time() -> None:
    # Given a proxy allowed to keep less than a 1,000-topic answer costs
    topics = SLICE_TOPICS * 2
    pauses = Pauses()
    core, io, _, _ = core_for(topics, pauses)
    enricher = core.registry.responses[ApiKey.METADATA][0]
    assert isinstance(enricher, MetadataEnricher)
    frame = answer(topics)
    enricher.kept_bytes_max = 4 * len(frame)
    # When the same answer comes twice, Then both are right and the second is sliced again (nothing kept)
    assert _answer_through(core, io, frame, 1) == _renumbered(expected(frame), 1)
    sliced = pauses.count
    assert _answer_through(core, io, frame, 2) == _renumbered(expected(frame), 2)
    assert pauses.count == 2 * sliced
    # And with room for it, it is kept
    enricher.kept_bytes_max = 10 * len(frame)
    _answer_through(core, io, frame, 3)
    third = pauses.count
    assert _answer_through(core, io, frame, 4) == _renumbered(expected(frame), 4) and pauses.count == third
