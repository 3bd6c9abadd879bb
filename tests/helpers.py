"""Small helpers for tests: waiting on conditions, never on fixed sleeps."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    pass


def wait_until(
    condition: Callable[[], T | None],
    timeout: float = 60.0,
    interval: float = 0.1,
    what: str = "condition",
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll until `condition()` is truthy and return its value; fail after a generous bound.

    Exceptions of the `retry_on` types (e.g. OSError while a server starts) count as "not yet"; the
    last one is named in the failure.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except retry_on as exc:
            last_error = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error is not None else ""
            raise WaitTimeout(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(interval)


def consume_values(
    config: dict[str, object], topic: str, expected: int, timeout: float = 90.0, drain_polls: int = 0
) -> list[bytes]:
    """Values of `topic` read from the beginning by a fresh consumer group until `expected` arrived.

    `config` holds at least bootstrap.servers (plus security settings); `drain_polls` more polls after
    that let a test see records that should not be there.
    """
    import uuid

    from confluent_kafka import Consumer

    consumer = Consumer({"group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **config})
    consumer.subscribe([topic])
    values: list[bytes] = []

    def poll_once() -> None:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value())

    try:
        wait_until(lambda: poll_once() or len(values) >= expected, timeout, interval=0,
                   what=f"{expected} records from {topic}")
        for _ in range(drain_polls):
            poll_once()
    finally:
        consumer.close()
    return values


#: The scratch directories this process made (scratch_directory), removed at the end of a passing run.
_SCRATCH: list[Path] = []


def scratch_directory(prefix: str) -> Path:
    """A new directory under the temporary directory, removed by remove_scratch_directories."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    _SCRATCH.append(directory)
    return directory


def remove_scratch_directories() -> None:
    """Remove every scratch directory this process made: the end of a passing test run (a failing one keeps
    them, e.g. the proxies' configuration, log and audit files, for the post-mortem)."""
    while _SCRATCH:
        shutil.rmtree(_SCRATCH.pop(), ignore_errors=True)


class Clock:
    """A clock a test steps by hand: `clock.now += 1.5`; called, it says the time (starts at 1000 s)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
