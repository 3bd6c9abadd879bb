"""Ctrl-C while a development command starts Kafka: remembered, not only raised.

Python's default SIGINT handler raises KeyboardInterrupt wherever the main thread is. Some places swallow what
they raise: an at-fork callback's exception is printed ("Exception ignored in: <function _releaseLock>") and
dropped, and the subprocesses that start Kafka fork many times. One Ctrl-C lost there left `demo` serving with
nobody to stop it. So the handler here also records the request, and the command asks at its checkpoints
(`raise_if_requested`); inside logging's fork-lock callbacks it only records (raising there would leave logging's
module lock held as well as lose the interrupt).
"""

from __future__ import annotations

import logging
import signal
import types
import typing


def _fork_callbacks() -> frozenset[types.CodeType]:
    """The code of logging's at-fork callbacks (their names differ between Python versions)."""
    names = ("_acquireLock", "_releaseLock", "_prepareFork", "_afterFork")
    return frozenset(function.__code__ for name in names
                     if isinstance(function := getattr(logging, name, None), types.FunctionType))


class Interrupts:
    """SIGINT recorded (`requested`) and raised as KeyboardInterrupt where raising is safe, while installed."""

    def __init__(self) -> None:
        self.requested = False
        self._fork_callbacks = _fork_callbacks()
        self._previous: typing.Any = None

    def on_signal(self, signum: int, frame: types.FrameType | None) -> None:
        self.requested = True
        if frame is not None and frame.f_code in self._fork_callbacks:
            return  # raised here it would be printed and dropped, and logging's lock left held: the next checkpoint
        raise KeyboardInterrupt

    def raise_if_requested(self) -> None:
        """A checkpoint: KeyboardInterrupt if a Ctrl-C came and was not raised (or was swallowed where it was)."""
        if self.requested:
            raise KeyboardInterrupt

    def __enter__(self) -> Interrupts:
        self._previous = signal.getsignal(signal.SIGINT)
        if self._previous is not signal.SIG_IGN:  # a background job's Ctrl-C stays ignored
            signal.signal(signal.SIGINT, self.on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self._previous)
