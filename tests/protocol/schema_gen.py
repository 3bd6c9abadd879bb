"""Test-side generators derived from the codec's own schema: hypothesis strategies and seeded
random instances for every (message class, version)."""

from __future__ import annotations

import random
import uuid
from typing import Any

from hypothesis import strategies as st

from insync_proxy.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES
from insync_proxy.protocol.schema import (
    BOOL,
    BYTES,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UINT16,
    UINT32,
    UUID,
    ArrayOf,
    KType,
    Message,
    Prim,
    Struct,
    is_flexible_version,
    schema_fields,
)

INT_RANGES: dict[Prim, tuple[int, int]] = {
    INT8: (-(2**7), 2**7 - 1),
    INT16: (-(2**15), 2**15 - 1),
    INT32: (-(2**31), 2**31 - 1),
    INT64: (-(2**63), 2**63 - 1),
    UINT16: (0, 2**16 - 1),
    UINT32: (0, 2**32 - 1),
}

_text = st.text(st.characters(codec="utf-8"), max_size=12)


def all_message_versions() -> list[tuple[str, type[Message], int]]:
    """("request"/"response", class, version) for everything the codec supports."""
    out: list[tuple[str, type[Message], int]] = []
    for kind, table in (("request", REQUEST_TYPES), ("response", RESPONSE_TYPES)):
        for cls in table.values():
            lo, hi = cls.VALID_VERSIONS
            out.extend((kind, cls, v) for v in range(lo, hi + 1))
    return out


def _value_strategy(t: KType, version: int, flexible: bool, nullable: bool) -> st.SearchStrategy[Any]:
    if isinstance(t, Prim):
        if t in INT_RANGES:
            lo, hi = INT_RANGES[t]
            s: st.SearchStrategy[Any] = st.integers(lo, hi)
        elif t is BOOL:
            s = st.booleans()
        elif t is FLOAT64:
            s = st.floats(allow_nan=False)
        elif t is UUID:
            s = st.uuids() | st.just(uuid.UUID(int=0))
        elif t is STRING:
            s = _text
        elif t is BYTES or t is RECORDS:
            s = st.binary(max_size=24)
        else:  # pragma: no cover
            raise AssertionError(t)
    elif isinstance(t, ArrayOf):
        s = st.lists(_value_strategy(t.element, version, flexible, False), max_size=3).map(tuple)
    else:
        s = struct_strategy(t, version, flexible)
    if nullable or t is RECORDS:
        s = st.none() | s
    return s


def struct_strategy(cls: type[Struct], version: int, flexible: bool) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` holding random values in the fields ``version`` has (defaults elsewhere)."""
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    known_tags: set[int] = set()
    for name, spec, _ in schema_fields(cls):
        if version not in spec.versions:
            continue
        if spec.tag is not None:
            if not (flexible and version in spec.tagged_versions):
                continue
            known_tags.add(spec.tag)
        kwargs[name] = _value_strategy(spec.type, version, flexible, version in spec.nullable)
    if flexible:
        unknown = st.dictionaries(
            st.integers(0, 2000).filter(lambda t: t not in known_tags), st.binary(max_size=6), max_size=2
        ).map(lambda d: tuple(sorted(d.items())))
        kwargs["unknown_tagged_fields"] = unknown
    return st.builds(cls, **kwargs)


def message_strategy(cls: type[Message], version: int) -> st.SearchStrategy[Any]:
    """Random ``cls`` messages valid for ``version``."""
    return struct_strategy(cls, version, is_flexible_version(cls, version))


def random_value(t: KType, version: int, flexible: bool, nullable: bool, rng: random.Random) -> Any:
    """A seeded random value of Kafka type ``t``."""
    if nullable and rng.random() < 0.1:
        return None
    if isinstance(t, Prim):
        if t in INT_RANGES:
            lo, hi = INT_RANGES[t]
            return rng.choice([v for v in (0, -1, 1, lo, hi, rng.randint(lo, hi)) if lo <= v <= hi])
        if t is BOOL:
            return rng.random() < 0.5
        if t is FLOAT64:
            return rng.uniform(-1e9, 1e9)
        if t is UUID:
            return uuid.UUID(int=rng.getrandbits(128))
        if t is STRING:
            return "".join(rng.choice("abcxyz-._é") for _ in range(rng.randint(0, 10)))
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40)))
    if isinstance(t, ArrayOf):
        return tuple(random_value(t.element, version, flexible, False, rng) for _ in range(rng.randint(0, 3)))
    return random_instance(t, version, flexible, rng)


def random_instance(cls: type[Struct], version: int, flexible: bool, rng: random.Random) -> Any:
    """A seeded random instance of ``cls`` for ``version`` (used to seed the fuzzer)."""
    kwargs: dict[str, Any] = {}
    for name, spec, _ in schema_fields(cls):
        if version not in spec.versions:
            continue
        if spec.tag is not None and not (flexible and version in spec.tagged_versions):
            continue
        kwargs[name] = random_value(spec.type, version, flexible, version in spec.nullable, rng)
    if flexible and rng.random() < 0.3:
        kwargs["unknown_tagged_fields"] = ((rng.randint(1000, 3000), b"\x01\x02"),)
    return cls(**kwargs)
