"""Log lines a client or the cluster can repeat, bounded: per cause, the first at once, then a summary.

A hostile or broken client can make the proxy say the same thing a million times (one bad frame per
connection, reconnecting); a cluster in trouble can too (every client connection finds no broker). Each
such line goes through a `RateLimitedLog` under a cause: the first line of a cause is written at once
with everything it names; the same cause again within the interval (`log_summary_interval_seconds`, 60 by
default) is only counted, and once the interval is over one summary line says how many more there were and
quotes the latest. A steady flood of one cause is thus two lines an interval, whatever its rate; a cause
that goes quiet for an interval is written at once again the next time.

Bad input (`report_bad_input`) is also counted, every time, in `insync_proxy_bad_input_total{listener,
cause}`: the counter is exact, the log is bounded. A new kind of bad input gets a cause in
`BAD_INPUT_CAUSES` (its label value, its log level) and a paragraph in docs/operations.md.

The state is process-wide, as the log is: one per logger and cause, kept by the module that logs
(``_repeated = RateLimitedLog(log)`` beside its ``log``). So is the interval: `set_summary_interval` (the
logging setup at start, and a reload) gives it to every `RateLimitedLog` made without an interval of its
own, those made already and those made later. Nothing here runs on the data path's happy path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from insync_proxy.proxy.config.defaults import SUMMARY_INTERVAL_SECONDS

if TYPE_CHECKING:
    from insync_proxy.proxy.observability.metrics import ProxyMetrics


# Bad-input causes: the `cause` label of insync_proxy_bad_input_total and the rate-limit key of their lines.
#: A request frame the proxy cannot read (unknown API key, a header or body that does not parse).
BAD_FRAME: Final = "bad_frame"
#: A request frame whose size prefix is negative or above max_frame_bytes.
OVERSIZED_FRAME: Final = "oversized_frame"
#: The broker closed a client's connection with requests in flight (it refused what the client sent;
#: a broker restart looks the same).
BROKER_CLOSED: Final = "broker_closed"
#: A listener refused a client's connection (a connection limit).
REFUSED_CONNECTION: Final = "refused_connection"
#: Every bad-input cause and the level its lines are logged at.
BAD_INPUT_CAUSES: Final[dict[str, int]] = {
    BAD_FRAME: logging.WARNING,
    OVERSIZED_FRAME: logging.WARNING,
    BROKER_CLOSED: logging.INFO,
    REFUSED_CONNECTION: logging.WARNING,
}

_every: weakref.WeakSet[RateLimitedLog] = weakref.WeakSet()
#: The process's interval (`log_summary_interval_seconds`), for every RateLimitedLog without one of its own.
_summary_interval = SUMMARY_INTERVAL_SECONDS


class _Cause:
    """One cause's window: when it ends, how many lines it held back, the latest of them."""

    __slots__ = ("held", "latest", "level", "started", "timer_loop", "until")

    def __init__(self, level: int, now: float, interval: float) -> None:
        self.level = level
        self.started = now
        self.until = now + interval
        self.held = 0
        self.latest: tuple[str, tuple[object, ...]] = ("", ())
        #: The loop a summary is scheduled on (None: none scheduled).
        self.timer_loop: asyncio.AbstractEventLoop | None = None


class RateLimitedLog:
    """A logger's repeatable lines: per cause, the first at once, then at most one summary per interval."""

    def __init__(self, logger: logging.Logger, interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`interval`: seconds a cause's repeats are gathered (None: the process's, `log_summary_interval_seconds`,
        followed when it changes); `clock`: monotonic seconds (tests pass their own)."""
        self.logger = logger
        #: False: an interval of its own, which `set_summary_interval` leaves alone.
        self.follows_setting = interval is None
        self.interval = _summary_interval if interval is None else interval
        self.clock = clock
        self._causes: dict[str, _Cause] = {}
        _every.add(self)

    def log(self, cause: str, level: int, msg: str, *args: object,
            exc_info: BaseException | None = None) -> None:
        """Log `msg % args` at `level` unless `cause` was logged within the interval; then count it for
        the cause's summary. `exc_info` (a traceback) goes with the first line only."""
        if not self.logger.isEnabledFor(level):
            return
        now = self.clock()
        state = self._causes.get(cause)
        if state is not None and now >= state.until:
            if state.held:
                self._summarise(cause, state, now)  # no timer wrote it (no event loop): now, late
            else:
                state = None  # quiet for a whole interval: this one is a first line again
        if state is None:
            self._causes[cause] = _Cause(level, now, self.interval)
            self.logger.log(level, msg, *args, exc_info=exc_info)
            return
        state.held += 1
        state.latest = (msg, args)
        self._schedule(cause, state, now)

    def warning(self, cause: str, msg: str, *args: object) -> None:
        """`log` at WARNING."""
        self.log(cause, logging.WARNING, msg, *args)

    def error(self, cause: str, msg: str, *args: object, exc_info: BaseException | None = None) -> None:
        """`log` at ERROR."""
        self.log(cause, logging.ERROR, msg, *args, exc_info=exc_info)

    def flush(self) -> None:
        """Write every summary still owed now (at shutdown; the event loop's timers do it otherwise)."""
        now = self.clock()
        for cause, state in list(self._causes.items()):
            if state.held:
                self._summarise(cause, state, now)

    def forget(self) -> None:
        """Drop every cause's window: the next line of each is a first line (tests)."""
        self._causes.clear()

    def _schedule(self, cause: str, state: _Cause, now: float) -> None:
        """A timer for the window's end, so that a flood that stops is still summarised on time."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a tool, a test): summarised at the cause's next line or by flush()
        if state.timer_loop is loop:
            return
        state.timer_loop = loop
        loop.call_later(max(state.until - now, 0.0), self._window_over, cause, state)

    def _window_over(self, cause: str, state: _Cause) -> None:
        state.timer_loop = None
        if self._causes.get(cause) is not state or not state.held:
            return
        now = self.clock()
        if now < state.until:  # a line summarised this window late and began another: wait for its end
            self._schedule(cause, state, now)
            return
        self._summarise(cause, state, now)

    def _summarise(self, cause: str, state: _Cause, now: float) -> None:
        """One line for the lines held back; a new window starts (repeats keep being gathered)."""
        msg, args = state.latest
        try:
            latest = msg % args if args else msg
        except (TypeError, ValueError):
            latest = f"{msg} {args!r}"
        self.logger.log(state.level, "%d more like this (%s) in the last %.0fs; the latest: %s",
                        state.held, cause, now - state.started, latest)
        state.held = 0
        state.started = now
        state.until = now + self.interval


def set_summary_interval(seconds: float) -> None:
    """The process's summary interval (`log_summary_interval_seconds`): every RateLimitedLog without an interval
    of its own takes it, for each cause's next window (a window under way ends when it was due to)."""
    if not seconds > 0:
        raise ValueError(f"a log summary interval must be above 0 seconds, not {seconds!r}")
    global _summary_interval
    _summary_interval = seconds
    for repeated in list(_every):
        if repeated.follows_setting:
            repeated.interval = seconds


def summary_interval() -> float:
    """The process's summary interval now."""
    return _summary_interval


def flush_all() -> None:
    """Every `RateLimitedLog`'s owed summaries, now (before the process exits)."""
    for repeated in list(_every):
        repeated.flush()


def forget_all() -> None:
    """Every `RateLimitedLog` forgets its windows (tests: each starts from a quiet log)."""
    for repeated in list(_every):
        repeated.forget()


def error_text(exc: BaseException | None) -> str:
    """Why something failed, never empty, for a log line: `str(exc)` is "" for a bare TimeoutError() (what
    asyncio.wait_for raises) and for an empty ConnectionResetError(); asyncio's "Connect call failed (address)"
    says the address again, not why. An OSError with an errno is said in the system's words."""
    if exc is None:
        return "no error given"
    if isinstance(exc, OSError) and exc.errno and not isinstance(exc, socket.gaierror | ssl.SSLError):
        return f"[Errno {exc.errno}] {os.strerror(exc.errno)}"
    text = str(exc)
    if text:
        return text
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionResetError):
        return "connection reset by the peer"
    return type(exc).__name__


_bad_input_log: Final = RateLimitedLog(logging.getLogger("insync_proxy.bad_input"))


def report_bad_input(metrics: ProxyMetrics, cause: str, listener: str, msg: str, *args: object) -> None:
    """Bad input from a client on `listener`: counted in insync_proxy_bad_input_total{listener, cause}
    every time, logged (`msg % args`) rate-limited per cause. `cause` is one of `BAD_INPUT_CAUSES`.

    A listener that refuses a connection says so with
    ``report_bad_input(metrics, REFUSED_CONNECTION, listener_name, "refused a connection from %s ...", peer)``.
    """
    metrics.bad_input_total.labels(listener, cause).inc()
    _bad_input_log.log(cause, BAD_INPUT_CAUSES[cause], msg, *args)
