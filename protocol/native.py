"""The compiled core of the walks (protocol/_wire.c and its generated protocol/_wire_walkers.h), when it is built,
configured from the generated tables.

`scripts/compile` and the image's compiled wheel build it; a plain install has none and every name here is
None: the Python walks (protocol/headers.py, protocol/produce.py) then do all the work, as they do whenever
the core answers None (a frame it leaves to them). tests/protocol/test_wire_core.py holds the two to the
same results.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Final, SupportsIndex

from .api_keys import ApiKey
from .kafka_versions import (
    FIRST_FLEXIBLE_VERSION,
    PRODUCE_FLEXIBLE_SINCE,
    PRODUCE_MAX_VERSION,
)
from .primitives import Buffer

__all__ = ["WIRE", "configure", "int16_at", "int32_at", "is_whole_read", "peek_request_header", "produce_acks_offset",
           "scan_produce_response", "split_frame", "view_of", "walk_produce_exchange", "walk_produce_request"]


def load() -> ModuleType | None:
    """The configured core, or None where it was not built."""
    try:
        core = importlib.import_module("._wire", __package__)  # a C extension: no import of its own
    except ImportError:
        return None
    configure(core)
    return core


def configure(core: ModuleType) -> None:
    """Give a core module the wire facts it reads by version (a test's own build too): those of the header peeks; the
    Produce grammar is compiled in (protocol/_wire_walkers.h, generated)."""
    core.configure(
        FIRST_FLEXIBLE_VERSION,
        int(ApiKey.CONTROLLED_SHUTDOWN),
        PRODUCE_MAX_VERSION,
        PRODUCE_FLEXIBLE_SINCE,
    )


#: The core's module (None: not built).
WIRE: Final = load()
#: (api_key, api_version, correlation_id, client_id: None | the cached bytes | new bytes, header_size).
peek_request_header: Final[Callable[[Buffer, bytes], tuple[int, int, int, bytes | None, int] | None] | None] = (
    None if WIRE is None else WIRE.peek_request_header)
#: Where a Produce request's acks is, given its header's size; -1: left to the Python reader.
produce_acks_offset: Final[Callable[[Buffer, int], int] | None] = None if WIRE is None else WIRE.produce_acks_offset
#: (acks, [(topic, partition, record bytes, records), ...]), as produce.py's `produce_partition_records`.
walk_produce_request: Final[Callable[[Buffer, int, Callable[[bytes], uuid.UUID]],
                                     tuple[int, list[tuple[str | uuid.UUID, int, int, int]]] | None] | None] = (
    None if WIRE is None else WIRE.walk_produce_request)
#: (acks offset, acks, the partitions as `walk_produce_request` gives them for acks -1, 0 and 1, else None) of a Produce
#: request whose header is read: one call for what a Produce exchange reads of every request.
walk_produce_exchange: Final[Callable[[Buffer, int, Callable[[bytes], uuid.UUID]],
                                      tuple[int, int, list[tuple[str | uuid.UUID, int, int, int]] | None] | None]
                             | None] = None if WIRE is None else WIRE.walk_produce_exchange
#: (partitions answered, where the responses end) of a Produce response no partition of which failed.
scan_produce_response: Final[Callable[[Buffer, int], tuple[int, int] | None] | None] = (
    None if WIRE is None else WIRE.scan_produce_response)
#: (framed, payload, end) of the whole frame at a position of a memoryview (protocol/framing.py's fast path).
#: The maximum frame size is any int object (SupportsIndex): a compiled caller passes the object it keeps, not an int
#: it would box for every call.
split_frame: Final[Callable[[memoryview, int, SupportsIndex], tuple[memoryview, memoryview, int] | None] | None] = (
    None if WIRE is None else WIRE.split_frame)
#: Whether a list of pieces gathered from a read (bytes) are byte views of it adding up to its size (None: not built).
is_whole_read: Final[Callable[[bytes, list[Buffer]], bool] | None] = None if WIRE is None else WIRE.is_whole_read
#: memoryview(data) without the type call (None: not built).
view_of: Final[Callable[[bytes], memoryview] | None] = None if WIRE is None else WIRE.view_of
#: The big-endian int32 / int16 at a position of a memoryview; None where struct must read it.
int32_at: Final[Callable[[Buffer, int], int | None] | None] = None if WIRE is None else WIRE.int32_at
int16_at: Final[Callable[[Buffer, int], int | None] | None] = None if WIRE is None else WIRE.int16_at
