"""Ctrl-C while a development command starts Kafka (insync_proxy/cli/interrupts.py): never lost, never leaving
logging's lock held."""

from __future__ import annotations

import logging
import random
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator

import pytest

from insync_proxy.cli.interrupts import Interrupts


@pytest.fixture
def ctrl_c_delivered() -> Iterator[None]:
    """SIGINT at Python's default, as a terminal's foreground command has it: a run started in the background (a
    script's `&`, CI) inherits it ignored, and `Interrupts` keeps an ignored Ctrl-C ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_a_ctrl_c_swallowed_where_it_was_raised_is_still_seen_at_the_next_checkpoint() -> None:
    with Interrupts() as interrupts:
        # Given code that drops what it raises (as an at-fork callback's caller does)
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass
        # Then the command's checkpoint raises it
        with pytest.raises(KeyboardInterrupt):
            interrupts.raise_if_requested()


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_no_checkpoint_raises_without_a_ctrl_c() -> None:
    with Interrupts() as interrupts:
        interrupts.raise_if_requested()
        assert not interrupts.requested


def _releaselock_frame() -> types.FrameType:
    """A real frame of logging's at-fork callback (a profile hook sees it called)."""
    seen: list[types.FrameType] = []

    def profile(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_name in ("_releaseLock", "_afterFork"):
            seen.append(frame)

    callback = getattr(logging, "_releaseLock", None) or logging._afterFork  # type: ignore[attr-defined]
    if callback.__name__ == "_releaseLock":
        logging._acquireLock()  # type: ignore[attr-defined]
    else:
        logging._prepareFork()  # type: ignore[attr-defined]
    sys.setprofile(profile)
    try:
        callback()
    finally:
        sys.setprofile(None)
    assert seen, "the profile hook saw logging's fork callback called"
    return seen[0]


def test_inside_loggings_fork_callback_a_ctrl_c_is_recorded_not_raised() -> None:
    interrupts = Interrupts()
    # When SIGINT lands in logging's fork-lock callback (raised there, it is printed and dropped, the lock held)
    interrupts.on_signal(signal.SIGINT, _releaselock_frame())
    # Then nothing is raised there, and the checkpoint raises
    assert interrupts.requested
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_if_requested()
    # Anywhere else it is raised at once
    with pytest.raises(KeyboardInterrupt):
        Interrupts().on_signal(signal.SIGINT, sys._getframe())


def _nothing() -> None:
    pass


def _interrupt_soon(main: int, delay: float, sent: threading.Event) -> None:
    time.sleep(delay)
    signal.pthread_kill(main, signal.SIGINT)
    sent.set()


def _loggings_lock_is_free() -> bool:
    """Another thread can take logging's module lock (a KeyboardInterrupt in its fork callback left it held)."""
    lock = logging._lock  # type: ignore[attr-defined]
    taken: list[bool] = []

    def take_and_release() -> None:
        taken.append(lock.acquire(timeout=5))
        if taken[-1]:
            lock.release()

    worker = threading.Thread(target=take_and_release)
    worker.start()
    worker.join()
    return taken == [True]


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_ctrl_c_at_random_points_of_forks_is_never_lost_and_leaves_loggings_lock_free() -> None:
    # Given a main thread that forks children (as Kafka's start does) while SIGINTs come at random moments
    rng = random.Random(637)
    for _ in range(20):
        with Interrupts() as interrupts:
            raised = False
            sent = threading.Event()
            try:
                threading.Thread(target=_interrupt_soon, args=(threading.get_ident(), rng.uniform(0.0, 0.05), sent),
                                 daemon=True).start()
                while not sent.is_set():  # a preexec_fn, as the JVMs' start has: the at-fork callbacks run
                    subprocess.run(["true"], check=True, preexec_fn=_nothing)
                subprocess.run(["true"], check=True, preexec_fn=_nothing)  # the signal is handled by now
                interrupts.raise_if_requested()
            except KeyboardInterrupt:
                raised = True
            # Then every Ctrl-C surfaced as KeyboardInterrupt, raised where it landed or at the checkpoint
            assert raised and interrupts.requested
        # and logging's module lock is free for another thread
        assert _loggings_lock_is_free()


def test_a_ctrl_c_ignored_by_the_parent_stays_ignored_and_the_previous_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with Interrupts():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with Interrupts() as interrupts:
            assert signal.getsignal(signal.SIGINT) == interrupts.on_signal
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
