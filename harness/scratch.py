"""Scratch directories: made under the temporary directory, removed together at the end of a passing test run
(a failing one keeps them for the post-mortem: the proxies' configuration, logs and audit files)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

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
