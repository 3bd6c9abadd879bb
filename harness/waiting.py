"""Waiting on conditions, never on fixed sleeps: poll until a condition holds, fail after a generous bound."""

from __future__ import annotations

import time
from collections.abc import Callable
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
