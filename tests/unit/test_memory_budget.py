"""The memory budget (proxy/datapath/budget.py) with plain numbers, and its adapter over fake transports."""

from __future__ import annotations

import random
from typing import Any

from insync_proxy.proxy.datapath.budget import MIN_READ_BYTES, READ_BYTES, MemoryBudget
from insync_proxy.proxy.datapath.connection import ConnectionSettings, WriteBuffer
from insync_proxy.proxy.datapath.core import NoObserver
from insync_proxy.proxy.datapath.exchange import BehaviourRegistry
from insync_proxy.proxy.datapath.reads import ReadBuffer, SizedReads
from insync_proxy.proxy.observability.metrics import ProxyMetrics

KIB = 1024


class FakeBuffer:
    """A write buffer: what it holds, and whether the budget holds its source back."""

    def __init__(self) -> None:
        self.size = 0
        self.held_back = False

    def buffered(self) -> int:
        return self.size

    def hold(self) -> None:
        self.held_back = True

    def release(self) -> None:
        self.held_back = False


def test_below_the_budget_nothing_is_held_back() -> None:
    budget = MemoryBudget(max_bytes=100 * KIB, per_connection_bytes=64 * KIB, min_read_bytes=0)
    buffers = [FakeBuffer() for _ in range(3)]
    accounts = [budget.account(b) for b in buffers]
    for account in accounts:
        account.update(30 * KIB)
    assert budget.buffered == 90 * KIB
    assert budget.paused == 0 and not any(b.held_back for b in buffers)


def test_at_the_budget_the_connections_holding_bytes_stop_and_the_others_keep_flowing() -> None:
    budget = MemoryBudget(max_bytes=100 * KIB, per_connection_bytes=64 * KIB, min_read_bytes=0)
    slow = [FakeBuffer() for _ in range(4)]
    slow_accounts = [budget.account(b) for b in slow]
    producer = FakeBuffer()
    producer_account = budget.account(producer)
    # Given slow consumers whose buffers fill up to the budget
    for account in slow_accounts[:3]:
        account.update(40 * KIB)
    assert budget.buffered == 120 * KIB and budget.exceeded
    # The third one crossed the budget: it is held back; the first two were below it when they wrote
    assert [b.held_back for b in slow] == [False, False, True, False]
    # When the others write again (still holding bytes) they are held back too
    slow_accounts[0].update(50 * KIB)
    slow_accounts[1].update(41 * KIB)
    slow_accounts[3].update(8 * KIB)
    assert all(b.held_back for b in slow)
    assert budget.paused == 4
    # But a producer whose responses leave at once (its buffer empty after each write) is never held back
    for _ in range(10):
        producer_account.update(0)
    assert not producer.held_back
    # And a buffer held back is released once its reader took every byte, even over the budget
    slow_accounts[3].update(0)
    assert not slow[3].held_back and budget.paused == 3
    assert budget.buffered == 50 * KIB + 41 * KIB + 40 * KIB


def test_a_read_for_every_buffer_not_held_counts_as_held_already() -> None:
    # Given 8 buffers that may each take a read of 16 KiB before they know they hold bytes
    budget = MemoryBudget(max_bytes=256 * KIB, per_connection_bytes=64 * KIB, min_read_bytes=16 * KIB)
    buffers = [FakeBuffer() for _ in range(8)]
    accounts = [budget.account(b) for b in buffers]
    assert not budget.exceeded  # 8 x 16 KiB in reserve
    # When they hold 128 KiB between them, the reserve makes the budget: the next that holds bytes is held
    accounts[0].update(100 * KIB)
    assert not buffers[0].held_back
    accounts[1].update(28 * KIB)
    assert buffers[1].held_back
    # And a buffer held no longer needs its read in reserve
    assert budget.buffered + 16 * KIB * (8 - budget.paused) == 240 * KIB
    # And however many turn slow at once, each after one read, the sum stays within the budget
    for account in accounts[2:]:
        account.update(16 * KIB)
    assert all(b.held_back for b in buffers[1:])
    assert budget.buffered <= budget.max_bytes


def test_reads_are_whole_while_the_budget_has_room_then_the_room_left_never_below_the_smallest() -> None:
    budget = MemoryBudget(max_bytes=1024 * KIB, per_connection_bytes=1024 * KIB, read_bytes=256 * KIB,
                          min_read_bytes=16 * KIB)
    buffers = [FakeBuffer() for _ in range(8)]
    accounts = [budget.account(b) for b in buffers]
    # Given a budget with room for a whole read beside a smallest one in reserve for the 7 other buffers
    assert budget.read_size() == 256 * KIB
    accounts[0].update(600 * KIB)
    assert budget.read_size() == 256 * KIB  # 1024 - 600 - 7 x 16 = 312 KiB left
    # When the room left beside the reserve is less than a whole read, a read takes that room
    accounts[1].update(150 * KIB)
    assert not buffers[1].held_back
    assert budget.read_size() == (1024 - 750 - 7 * 16) * KIB
    # And once the budget is reached (reserve counted in) the next buffer holding bytes is held (its reserve
    # is no longer needed), and reads take what is left, or a smallest read
    accounts[2].update(150 * KIB)
    assert buffers[2].held_back
    assert budget.read_size() == (1024 - 900 - 6 * 16) * KIB
    accounts[3].update(30 * KIB)
    assert buffers[3].held_back
    assert budget.read_size() == 16 * KIB
    # And when the slow readers took their bytes, reads are whole again
    for account in accounts[:4]:
        account.update(0)
    assert budget.read_size() == 256 * KIB and budget.paused == 0


def test_an_idle_proxy_with_many_connections_reads_whole() -> None:
    # 1,000 connections (two buffers each) holding nothing: the reserve is 1,000 x 2 x 16 KiB of 64 MiB
    budget = MemoryBudget()
    for _ in range(2000):
        budget.account(FakeBuffer())
    assert budget.read_size() == READ_BYTES and not budget.exceeded


def _turn_slow_at_once(budget: MemoryBudget, buffers: list[FakeBuffer], seed: int) -> int:
    """Every buffer's source reads, in a random order, what `read_size` allows; its reader takes a random part
    or nothing, until every buffer is held. Returns the most the budget held at any time."""
    rng = random.Random(seed)
    accounts = [budget.account(b) for b in buffers]
    most = 0
    while not all(b.held_back for b in buffers):
        for i in rng.sample(range(len(buffers)), len(buffers)):
            if buffers[i].held_back:
                continue
            read = budget.read_size()
            assert MIN_READ_BYTES <= read <= READ_BYTES
            buffers[i].size += read - rng.choice((0, 0, rng.randrange(read)))  # what its socket did not take
            accounts[i].update(buffers[i].size)
            most = max(most, budget.buffered)
    return most


def test_however_many_buffers_turn_slow_at_once_reads_sized_by_the_budget_keep_it_within_the_budget() -> None:
    # Given 100 buffers with a smallest read each in reserve (1.6 MiB of 4 MiB): reads start whole
    for seed in range(5):
        budget = MemoryBudget(max_bytes=4096 * KIB, per_connection_bytes=1024 * KIB)
        most = _turn_slow_at_once(budget, [FakeBuffer() for _ in range(100)], seed)
        # Then what they hold never passes the budget (a whole read each would be 25 MiB)
        assert most <= budget.max_bytes, (seed, most)


def test_with_more_buffers_than_smallest_reads_fit_the_budget_each_takes_one_smallest_read() -> None:
    # Given 400 buffers: 400 x 16 KiB in reserve is more than the 4 MiB budget
    budget = MemoryBudget(max_bytes=4096 * KIB, per_connection_bytes=1024 * KIB)
    most = _turn_slow_at_once(budget, [FakeBuffer() for _ in range(400)], seed=1)
    # Then they hold at most a smallest read each (before: a whole read each, 100 MiB)
    assert most <= 400 * MIN_READ_BYTES


def test_buffers_opened_after_the_budget_was_reached_take_one_smallest_read_each() -> None:
    budget = MemoryBudget(max_bytes=4096 * KIB, per_connection_bytes=1024 * KIB)
    # Given slow readers that took the budget (4 buffers of up to 1 MiB)
    first = _turn_slow_at_once(budget, [FakeBuffer() for _ in range(4)], seed=2)
    assert first <= budget.max_bytes and budget.paused == 4
    # When 50 more buffers open and turn slow
    most = _turn_slow_at_once(budget, [FakeBuffer() for _ in range(50)], seed=3)
    # Then each took one smallest read past the budget at most
    assert most <= budget.max_bytes + 50 * MIN_READ_BYTES


def test_closing_a_connection_gives_its_bytes_back() -> None:
    budget = MemoryBudget(max_bytes=10 * KIB, per_connection_bytes=64 * KIB, min_read_bytes=0)
    buffer = FakeBuffer()
    account = budget.account(buffer)
    account.update(20 * KIB)
    assert buffer.held_back and budget.paused == 1
    account.close()
    assert budget.buffered == 0 and budget.paused == 0 and not budget.holding
    # A second close changes nothing
    account.close()
    assert budget.buffered == 0 and budget.paused == 0


def test_refresh_measures_buffers_that_drained_without_a_callback() -> None:
    budget = MemoryBudget(max_bytes=100 * KIB, per_connection_bytes=64 * KIB, min_read_bytes=0)
    buffer = FakeBuffer()
    account = budget.account(buffer)
    buffer.size = 30 * KIB
    account.update(buffer.size)
    assert budget.refresh()  # still holding: the adapter calls again later
    buffer.size = 0  # its reader took it, below the low-water mark: no callback
    assert not budget.refresh()
    assert budget.buffered == 0 and not budget.holding


class FakeTransport:
    """The write-buffer side of a transport, with asyncio's flow-control rules."""

    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.size = 0
        self.high = self.low = 0
        self.protocol_paused = False

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        self.high, self.low = high, low
        self._maybe_pause()

    def get_write_buffer_size(self) -> int:
        return self.size

    def write(self, data: bytes) -> None:
        self.size += len(data)  # the peer reads nothing
        self._maybe_pause()

    def writelines(self, data: tuple[bytes, ...]) -> None:
        self.write(b"".join(data))

    def drain(self, n: int) -> None:
        """The peer read n bytes."""
        self.size -= n
        if self.protocol_paused and self.size <= self.low:
            self.protocol_paused = False
            self.protocol.resume_writing()

    def _maybe_pause(self) -> None:
        if not self.protocol_paused and self.size > self.high:
            self.protocol_paused = True
            self.protocol.pause_writing()


class Source:
    """What a write buffer's source sees: paused or reading (the protocol's pause/resume_writing)."""

    def __init__(self) -> None:
        self.reading = True
        self.buffer: WriteBuffer | None = None

    def pause_writing(self) -> None:
        self.reading = False

    def resume_writing(self) -> None:
        self.reading = True
        assert self.buffer is not None
        self.buffer.measure()


def _scraped(gauge: Any) -> float:
    """What a scrape reads of a gauge (ours are read from the budget at scrape time)."""
    return float(gauge.collect()[0].samples[0].value)


def _settings(budget: MemoryBudget, armed: list[bool] | None = None) -> ConnectionSettings:
    """Settings with the budget; the budget's re-measure is recorded in `armed` (no event loop here)."""
    record = [] if armed is None else armed
    return ConnectionSettings(
        registry=BehaviourRegistry([]), observer=NoObserver(), metrics=ProxyMetrics(), max_frame_bytes=1 << 20,
        connect_timeout_seconds=1.0, upstream_ssl=None, bootstrap_candidates=list, budget=budget,
        call_later=lambda _delay, _callback: record.append(True),
    )


def _buffer(settings: ConnectionSettings) -> tuple[FakeTransport, Source, WriteBuffer]:
    source = Source()
    transport = FakeTransport(source)
    buffer = WriteBuffer(settings, transport)
    source.buffer = buffer
    return transport, source, buffer


def test_the_adapter_stops_a_slow_reader_at_the_budget_and_resumes_it_when_it_read_everything() -> None:
    budget = MemoryBudget(max_bytes=256 * KIB, per_connection_bytes=128 * KIB, min_read_bytes=0)
    settings = _settings(budget)
    slow = [_buffer(settings) for _ in range(3)]
    # Each buffer's ceiling is the per-connection one
    assert slow[0][0].high == 128 * KIB and slow[0][0].low == 32 * KIB
    # Given two slow readers holding 100 KiB each (below their ceiling and the budget): they keep reading
    for transport, source, buffer in slow[:2]:
        transport.write(b"x" * 100 * KIB)
        buffer.written()
        assert source.reading
    # When a third one takes the process to the budget, it stops (its high-water mark drops to 0) ...
    transport, source, buffer = slow[2]
    transport.write(b"x" * 60 * KIB)
    buffer.written()
    assert not source.reading and transport.high == 0
    assert _scraped(settings.metrics.budget_paused_connections) == 1
    assert _scraped(settings.metrics.buffered_bytes) == 260 * KIB
    # ... and the first one, writing again, stops too
    transport0, source0, buffer0 = slow[0]
    transport0.write(b"x" * KIB)
    buffer0.written()
    assert not source0.reading
    # When the third one's reader takes everything it reads again, at its ceiling
    transport.drain(60 * KIB)
    assert source.reading and transport.high == 128 * KIB
    assert budget.paused == 1 and budget.buffered == 201 * KIB
    # And a slow reader held back that reads only part stays stopped (no resume, no spin)
    transport0.drain(50 * KIB)
    assert not source0.reading


def test_the_read_buffer_hands_out_what_the_budget_allows_and_each_read_is_copied_out() -> None:
    budget = MemoryBudget(max_bytes=1024 * KIB, per_connection_bytes=1024 * KIB)
    settings = _settings(budget)
    reads = settings.reads
    assert isinstance(reads, ReadBuffer)
    # While the budget has room: the whole buffer
    view = reads.get()
    assert len(view) == READ_BYTES
    # A read is copied out: the next read into the same buffer leaves it as it was
    view[:5] = b"first"
    first = reads.take(5)
    reads.get()[:6] = b"second"
    assert first == b"first" and reads.take(6) == b"second"
    assert isinstance(first, bytes)
    # When a slow reader holds most of the budget: the start of the buffer, the room left
    transport, _source, buffer = _buffer(settings)
    transport.write(b"z" * 900 * KIB)
    buffer.written()
    assert len(reads.get()) == budget.read_size() == 1024 * KIB - 900 * KIB


def test_a_buffer_emptied_at_once_costs_the_budget_nothing() -> None:
    budget = MemoryBudget(max_bytes=64 * KIB, per_connection_bytes=32 * KIB, min_read_bytes=0)
    armed: list[bool] = []
    settings = _settings(budget, armed)
    transport, source, buffer = _buffer(settings)
    for _ in range(100):
        transport.write(b"y" * 1000)
        transport.size = 0  # the socket took it all
        buffer.written()
    assert source.reading and budget.buffered == 0 and not budget.holding and not armed


def test_the_budget_says_when_whole_reads_stop_fitting_and_when_they_fit_again_with_room_to_spare() -> None:
    budget = MemoryBudget(max_bytes=1024 * KIB, per_connection_bytes=1024 * KIB, read_bytes=256 * KIB,
                          min_read_bytes=16 * KIB)
    said: list[bool] = []
    # Given a budget with room for whole reads, and 4 buffers
    assert budget.watch_room(said.append)
    accounts = [budget.account(FakeBuffer()) for _ in range(4)]
    assert said == []
    # When a slow reader leaves less than a whole read beside the others' reserve, the watcher hears it at once
    accounts[0].update(700 * KIB)  # 1024 - 700 - 3 x 16 = 276 KiB: still whole
    assert said == []
    accounts[0].update(730 * KIB)  # 246 KiB
    assert said == [False] and not budget.whole_reads
    # And a little room back is not enough (no switching at every write of a budget at the edge) ...
    accounts[0].update(600 * KIB)  # 376 KiB
    assert said == [False]
    # ... room for two whole reads is
    accounts[0].update(400 * KIB)  # 576 KiB
    assert said == [False, True] and budget.whole_reads
    # And connections opened take room too (each buffer's smallest read in reserve), closed ones give it back
    more = [budget.account(FakeBuffer()) for _ in range(6)]  # 576 - 6 x 16 = 480 KiB
    accounts[1].update(300 * KIB)  # 180 KiB
    assert said == [False, True, False]
    for account in [accounts[1], *more]:
        account.close()  # 1024 - 400 - 2 x 16 = 592 KiB
    assert said == [False, True, False, True]


class SwitchingTransport(FakeTransport):
    """A fake transport whose protocol can be switched (asyncio's and uvloop's set_protocol)."""

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol


class Side:
    """A connection side as ReadBuffer sees it: a plain protocol over its transport."""

    def __init__(self) -> None:
        self.transport: SwitchingTransport | None = None
        self.closed = False
        self.received: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        self.received.append(data)

    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True


def _side(reads: ReadBuffer) -> Side:
    side = Side()
    side.transport = SwitchingTransport(side)
    reads.opened(side)
    return side


def test_sides_read_whole_as_plain_protocols_until_the_budget_is_tight_then_each_read_is_sized() -> None:
    budget = MemoryBudget(max_bytes=1024 * KIB, per_connection_bytes=1024 * KIB)
    settings = _settings(budget)
    reads = settings.reads
    # Given two open sides while the budget has room: each is its transport's protocol (the loop's own reads)
    sides = [_side(reads) for _ in range(2)]
    assert all(side.transport is not None and side.transport.protocol is side for side in sides)
    # When a slow reader takes the room for a whole read
    transport, _source, buffer = _buffer(settings)
    transport.write(b"z" * 900 * KIB)
    buffer.written()
    # Then every side's next read is sized by the budget, and handed to the side as a copy
    for side in sides:
        assert side.transport is not None
        sized = side.transport.protocol
        assert isinstance(sized, SizedReads) and sized.side is side
        view = sized.get_buffer(-1)
        assert len(view) == budget.read_size() < READ_BYTES
        view[:4] = b"abcd"
        sized.buffer_updated(4)
        assert side.received[-1] == b"abcd" and isinstance(side.received[-1], bytes)
    # And a side opened while the budget is tight is sized from its first read
    late = _side(reads)
    assert late.transport is not None and isinstance(late.transport.protocol, SizedReads)
    # And the transport's other calls reach the side
    late.transport.protocol.connection_lost(None)
    assert late.closed
    # When the slow reader took its bytes, every open side reads whole again
    transport.drain(900 * KIB)
    buffer.measure()
    assert all(side.transport is not None and side.transport.protocol is side for side in sides)
    # And a closed side is switched no more
    reads.closed(sides[0])
    assert sides[0] not in reads.sides
