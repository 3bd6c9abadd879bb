"""The memory budget: a process-wide bound on the bytes the proxy holds for peers that do not read.

Sans-IO: it sees numbers and asks its adapter (proxy/datapath/connection.py) to act. Each write buffer of a
connection (towards the client: responses; towards the broker: requests) is an account. A write buffer
grows when its reader is slower than its source; the per-connection ceiling already stops a source when
its buffer passes `per_connection_bytes` (the transport's high-water mark). The budget bounds the sum:
once the process holds `max_bytes`, an account that holds anything more is *held*: its source stops
(its adapter lowers the buffer's high-water mark to 0, so the transport pauses the source now and says
when the buffer is empty) until its own reader has taken every byte. Accounts that hold nothing (a
producer whose responses leave at once, a consumer that keeps up) keep flowing: the budget stops the
connections that hold bytes, the slow ones, not everyone.

A buffer learns it holds bytes only after a write its socket did not take whole, i.e. after its source
was read: every buffer not held may still take one read. So the budget also sizes every read of a socket
(`read_size`, asked by the adapter before each read): a whole read (`read_bytes`, 256 KiB) while the budget
has room for it beyond a smallest read (`min_read_bytes`, 16 KiB) in reserve for every other buffer not
held; then the room left, and never less than `min_read_bytes`. The reserve is counted as held already, so
what the process holds stays within `max_bytes` however many connections turn slow at once, as long as
their smallest reads fit in it (two buffers a connection: 2,048 connections at 64 MiB). With more than
that, or connections opened after the budget was reached, each buffer not held may still take one
smallest read: the process holds at most the budget plus `min_read_bytes` for each of them, whatever the
event loop's own read size.

Sizing a read costs Python calls and a copy out of a shared buffer per read, which a plain protocol does not pay
(the event loop reads up to 256 KiB into its own buffer and hands over the bytes). So the adapter sizes reads only
while they need it: `watch_room` tells it when the room for a whole read is gone (reads are sized from the next one
on) and when it is back with a whole read to spare (`RESUME_WHOLE_READS`: a budget at the edge does not switch
every connection at every write).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from insync_proxy.proxy.config.defaults import DEFAULT_MAX_BUFFERED_BYTES, DEFAULT_PER_CONNECTION_BYTES

#: A whole read, while the budget has room for it (the event loops' own read size: uvloop and asyncio read up
#: to 256 KiB): fewer, larger reads cost less CPU per byte.
READ_BYTES: Final = 256 * 1024
#: The smallest read, once the budget is tight: what every buffer not held keeps in reserve. Small against a
#: whole read (the overshoot past the budget is this per connection at most), large enough that a 16 KiB
#: Produce request still takes a read or two.
MIN_READ_BYTES: Final = 16 * 1024
#: Whole reads come back when the room left is this many whole reads (one more than it takes to leave them).
RESUME_WHOLE_READS: Final = 2


#: What the process takes besides its write buffers (interpreter, event loop, metrics, caches, connection
#: state; measured: 34-40 MiB idle), with room to spare: the first term of `memory_limit_bytes`.
PROCESS_BYTES: Final = 64 * 1024 * 1024
#: Beyond the budget: a smallest read left in the buffer of each connection still reading when the budget
#: was reached, and frames the core reassembles for behaviours (Metadata answers, Produce requests).
OVERSHOOT_BYTES: Final = 32 * 1024 * 1024


def memory_limit_bytes(max_buffered_bytes: int) -> int:
    """The container memory limit for a budget (docs/operations.md, "Memory and connections"; the Kubernetes
    example's limit is this of its ConfigMap's budget): the process, the budget, the overshoot."""
    return PROCESS_BYTES + max_buffered_bytes + OVERSHOOT_BYTES


class BufferIO(Protocol):
    """What the budget asks of one write buffer's adapter."""

    def buffered(self) -> int:
        """Bytes in the write buffer now."""

    def hold(self) -> None:
        """Stop this buffer's source until the buffer is empty (then call `BudgetAccount.update(0)`)."""

    def release(self) -> None:
        """The buffer is empty: back to the per-connection ceiling."""


class MemoryBudget:
    """The process's write buffers: what they hold together, and which are held back by the budget."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
                 per_connection_bytes: int = DEFAULT_PER_CONNECTION_BYTES, read_bytes: int = READ_BYTES,
                 min_read_bytes: int = MIN_READ_BYTES) -> None:
        """`max_bytes`: the process-wide budget; `per_connection_bytes`: one write buffer's ceiling;
        `read_bytes`: a whole read of a socket; `min_read_bytes`: the smallest read once the budget is tight,
        which every buffer not held keeps in reserve (counted as held already)."""
        self.max_bytes = max_bytes
        self.per_connection_bytes = per_connection_bytes
        self.read_bytes = read_bytes
        self.min_read_bytes = min_read_bytes
        #: Accounts open (two per connection once its broker connection is open).
        self.accounts = 0
        #: Bytes held by every account, as last reported.
        self.buffered = 0
        #: Accounts the budget holds back now (each one write buffer, so a connection counts once per side).
        self.paused = 0
        #: Accounts that held bytes when last reported: the ones `refresh` measures again.
        self.holding: set[BudgetAccount] = set()
        #: Whether whole reads fit (as `watch_room` last said), and who is told when that changes.
        self.whole_reads = True
        self._room_watcher: Callable[[bool], None] | None = None

    def watch_room(self, watcher: Callable[[bool], None]) -> bool:
        """Whether a whole read fits now; from now on `watcher(False)` as soon as it no longer does (an account
        changed or opened), `watcher(True)` once the room for `RESUME_WHOLE_READS` whole reads is back."""
        self._room_watcher = watcher
        self.whole_reads = self.room() >= self.read_bytes
        return self.whole_reads

    def room(self) -> int:
        """Bytes a read may bring beside the reserve of every other buffer not held (`read_size` before its floor)."""
        return self.max_bytes - self.buffered - self.min_read_bytes * (self.accounts - self.paused - 1)

    def changed(self) -> None:
        """An account changed: tell the watcher when whole reads stop fitting, or fit again with room to spare."""
        if self._room_watcher is None:
            return
        room = self.room()
        if self.whole_reads:
            if room < self.read_bytes:
                self.whole_reads = False
                self._room_watcher(False)
        elif room >= RESUME_WHOLE_READS * self.read_bytes:
            self.whole_reads = True
            self._room_watcher(True)

    def account(self, io: BufferIO) -> BudgetAccount:
        """A new write buffer's account (holding nothing)."""
        self.accounts += 1
        self.changed()
        return BudgetAccount(self, io)

    @property
    def exceeded(self) -> bool:
        """The process holds the whole budget, a smallest read for each buffer not held counted in: any
        account that holds more is held back."""
        return self.buffered + self.min_read_bytes * (self.accounts - self.paused) >= self.max_bytes

    def read_size(self) -> int:
        """Bytes the next read of a socket may bring (its buffer is not held, or its source would not read):
        a whole read while the budget has room for it beyond the reserve of every other buffer not held,
        then the room left beside that reserve, at least `min_read_bytes`. A read never takes more than the
        budget has left unless it is a smallest one, so the sum stays within `max_bytes` while the reserve fits.
        """
        room = self.room()
        if room >= self.read_bytes:
            return self.read_bytes
        return room if room > self.min_read_bytes else self.min_read_bytes

    def refresh(self) -> bool:
        """Measure again the accounts that held bytes: a buffer drains without telling (below its low-water
        mark). True while some account still holds bytes (the adapter calls again later)."""
        for account in list(self.holding):
            if not account.paused:
                account.update(account.io.buffered())
        return bool(self.holding)


class BudgetAccount:
    """One write buffer: what it holds, whether the budget holds its source back."""

    __slots__ = ("budget", "closed", "held", "io", "paused")

    def __init__(self, budget: MemoryBudget, io: BufferIO) -> None:
        self.budget = budget
        self.io = io
        self.held = 0
        self.paused = False
        self.closed = False

    def update(self, held: int) -> None:
        """The buffer holds `held` bytes now (after a write, or when it drained)."""
        budget = self.budget
        budget.buffered += held - self.held
        self.held = held
        if held:
            budget.holding.add(self)
            if not self.paused and budget.exceeded:
                self.paused = True
                budget.paused += 1
                self.io.hold()
        else:
            budget.holding.discard(self)
            if self.paused:
                # Its reader took every byte: a reader that keeps up is never held for long.
                self.paused = False
                budget.paused -= 1
                self.io.release()
        budget.changed()

    def close(self) -> None:
        """The connection closed: its bytes no longer count."""
        if self.closed:
            return
        self.closed = True
        budget = self.budget
        budget.accounts -= 1
        budget.buffered -= self.held
        self.held = 0
        budget.holding.discard(self)
        if self.paused:
            self.paused = False
            budget.paused -= 1
        budget.changed()
