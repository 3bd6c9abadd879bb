"""The C heap's free pages go back to the system (proxy/observability/heap.py, issue #39): RSS follows what the
process holds, not the most it ever held."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from insync_proxy.proxy.observability.heap import release_free_memory


def _rss_anon_mib() -> float:
    return int(Path("/proc/self/status").read_text().split("RssAnon:")[1].split()[0]) / 1024


def test_free_memory_kept_inside_the_c_heap_goes_back_to_the_system() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2  # noqa: B018 - glibc only
    except (OSError, AttributeError):
        pytest.skip("not glibc")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    # Given 40 MiB of small chunks (TLS handshakes and buffers are such), all freed but the last one, which keeps
    # the free space inside the heap (glibc returns only a free top of the heap by itself)
    chunks = [libc.malloc(2048) for _ in range(20_480)]
    for address in chunks:
        ctypes.memset(address, 1, 2048)
    for address in chunks[:-1]:
        libc.free(address)
    held = _rss_anon_mib()
    try:
        # When the proxy gives the free pages back
        assert release_free_memory()
        # Then RSS drops by most of what was freed
        assert held - _rss_anon_mib() > 20, (held, _rss_anon_mib())
    finally:
        libc.free(chunks[-1])
