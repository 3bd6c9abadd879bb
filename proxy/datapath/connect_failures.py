"""Failed connects to brokers, per upstream address: what the data path remembers of a broker that is down,
paused or black-holed (sans-IO: a clock in, decisions out).

Two decisions come from it. A bootstrap connection tries the addresses whose connects failed recently last,
so it does not wait a connect timeout on a broker the proxy already found unreachable (a paused broker stays
registered in Metadata). And a client connection to a broker's own port whose connects keep failing is held
(not answered) for a back-off that grows with each failure in a row, before the proxy tries that broker again:
a client that sees its TCP connect succeed and the connection close reconnects at once (librdkafka, Java), so
without the hold a down broker's port turns into a storm of accepts and closes. A success forgets the address.

Bounded: at most `MAX_ADDRESSES` addresses are remembered (the oldest failure goes first), and at most
`MAX_HELD_CONNECTIONS` client connections are held at once (each keeps a descriptor); beyond it a connection
tries at once, as if nothing failed.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

Address = tuple[str, int]

#: Seconds a failed connect puts its address last among a bootstrap connection's candidates.
RECENT_FAILURE_SECONDS: Final = 30.0
#: Seconds a client connection to a broker is held after one failed connect; doubled per failure in a row.
HOLD_INITIAL_SECONDS: Final = 0.25
#: The longest hold: well below the clients' connection setup timeouts (Java's socket.connection.setup.timeout.ms
#: is 10 s, librdkafka's 30 s), so a held client sees a close, not its own timeout.
HOLD_MAX_SECONDS: Final = 4.0
#: Client connections held at once, over every broker (each holds a socket and ~10 KB).
MAX_HELD_CONNECTIONS: Final = 1024
#: Upstream addresses remembered (a cluster's brokers and bootstrap servers: a few to a few hundred).
MAX_ADDRESSES: Final = 1024


class _Failures:
    """One address's failed connects in a row, and when the latest was."""

    __slots__ = ("in_a_row", "latest")

    def __init__(self, latest: float) -> None:
        self.in_a_row = 1
        self.latest = latest


@dataclass(eq=False, kw_only=True)
class ConnectFailures:
    """Failed connects per upstream address, bounded; see the module's docstring."""

    recent_seconds: float = RECENT_FAILURE_SECONDS
    hold_initial: float = HOLD_INITIAL_SECONDS
    hold_max: float = HOLD_MAX_SECONDS
    max_held: int = MAX_HELD_CONNECTIONS
    max_addresses: int = MAX_ADDRESSES
    clock: Callable[[], float] = time.monotonic
    _failures: OrderedDict[Address, _Failures] = field(default_factory=OrderedDict, init=False)
    #: Client connections held now.
    held: int = field(default=0, init=False)

    def __len__(self) -> int:
        return len(self._failures)

    def failed(self, address: Address) -> None:
        """A connect to `address` failed (refused, timed out, unreachable)."""
        now = self.clock()
        failures = self._failures.get(address)
        if failures is None:
            self._failures[address] = _Failures(now)
            if len(self._failures) > self.max_addresses:
                self._failures.popitem(last=False)
            return
        failures.in_a_row += 1
        failures.latest = now
        self._failures.move_to_end(address)

    def succeeded(self, address: Address) -> None:
        """A connect to `address` succeeded: nothing about it is held against it any more."""
        self._failures.pop(address, None)

    def in_a_row(self, address: Address) -> int:
        """Failed connects to `address` since its last success (0: none remembered)."""
        failures = self._failures.get(address)
        return 0 if failures is None else failures.in_a_row

    def failed_recently(self, address: Address) -> bool:
        """A connect to `address` failed within `recent_seconds`, and none succeeded since."""
        failures = self._failures.get(address)
        return failures is not None and self.clock() - failures.latest < self.recent_seconds

    def order(self, addresses: Sequence[Address]) -> list[Address]:
        """`addresses` with those that failed recently last, each part in its order."""
        if not self._failures:
            return list(addresses)
        recent = [self.failed_recently(a) for a in addresses]
        return [a for a, r in zip(addresses, recent, strict=True) if not r] + \
            [a for a, r in zip(addresses, recent, strict=True) if r]

    def hold_seconds(self, addresses: Sequence[Address]) -> float:
        """How long a new client connection to `addresses` should wait before trying them: 0 unless every one is
        within its back-off (after its latest failed connect: `hold_initial` doubled per failure in a row,
        at most `hold_max`); then until the first back-off ends."""
        if not self._failures or not addresses:
            return 0.0
        now = self.clock()
        wait = self.hold_max
        for address in addresses:
            failures = self._failures.get(address)
            if failures is None:
                return 0.0
            backoff = min(self.hold_initial * 2.0 ** min(failures.in_a_row - 1, 32), self.hold_max)
            wait = min(wait, failures.latest + backoff - now)
            if wait <= 0:
                return 0.0
        return wait

    def hold(self) -> bool:
        """Take a place for one held connection; False when `max_held` are held already."""
        if self.held >= self.max_held:
            return False
        self.held += 1
        return True

    def release(self) -> None:
        """A held connection's hold is over (it tries its broker now, or it closed)."""
        self.held -= 1
