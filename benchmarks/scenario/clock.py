"""The run's time: the clock every record is stamped with, progress lines, waiting for a condition or for a child
process to end."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any


class Clock:
    """Seconds since the run's start (set again when the producers start: the schedule counts from there)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def restart(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Until `condition()` holds (one that raises is one not yet met); RuntimeError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - a condition that fails is one not yet met
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def end_process(process: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM a child still running, and SIGKILL it when it has not ended `grace` seconds later."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
