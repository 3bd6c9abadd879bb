"""Small helpers for tests: waiting on conditions, never on fixed sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    pass


def wait_until(
    condition: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.1, what: str = "condition"
) -> T:
    """Poll until `condition()` is truthy and return its value; fail after a generous bound."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
