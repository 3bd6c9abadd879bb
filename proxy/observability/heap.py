"""Gives the C heap's free pages back to the system now and then (glibc's malloc_trim), so RSS follows what the
process holds, not the most it ever held.

A TLS connection (OpenSSL's handshake and buffers, on either leg) allocates and frees many chunks in glibc's heap.
glibc keeps what was freed inside the heap for later allocations and returns only a free top of the heap: measured
(issue #39, 4,000 client connections through a TLS upstream, 20 at once), the heap in use stayed at 8 MiB while
the free space kept inside it reached 54 MiB and RSS rose by 22 MiB, levelling off; `malloc_trim(0)` took RSS
back to +2 MiB. The scenario run's RSS rose the same way, concave, with Python's own allocations flat. Where the C
library is not glibc (musl), nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from typing import Final

#: How often the free pages are given back; a trim walks the heap (well under a millisecond at tens of MiB).
TRIM_SECONDS: Final = 60.0


def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Give the heap's free pages back to the system now; False where the C library has no malloc_trim."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


async def release_free_memory_every(seconds: float = TRIM_SECONDS) -> None:
    """`release_free_memory` every `seconds`, for as long as the proxy runs."""
    if _TRIM is None:
        return
    while True:
        await asyncio.sleep(seconds)
        release_free_memory()
