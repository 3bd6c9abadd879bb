"""A small declarative schema DSL and the generic encoder/decoder over it.

A message is a frozen dataclass whose fields are declared with :func:`kfield`: the Kafka type,
the versions the field exists in, the versions it is nullable in and, for tagged fields, the tag.
That dataclass is the single source of truth: the codec compiles one (decoder, encoder) pair per
(class, version) from it, and the tests derive their hypothesis strategies from it too.

Like Kafka's own ``MessageData``, one object represents every version: fields absent from a version
decode to their default and are not written when encoding that version.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .errors import InvalidValue, MalformedFrame, ProtocolError, UnsupportedVersion
from .primitives import Buffer, Reader, Writer

__all__ = [
    "BOOL",
    "BYTES",
    "FLOAT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "RECORDS",
    "STRING",
    "UINT16",
    "UINT32",
    "UUID",
    "ArrayOf",
    "FieldSpec",
    "KType",
    "Message",
    "Prim",
    "Struct",
    "VersionRange",
    "decode_struct",
    "decode_value",
    "encode_struct",
    "encode_value",
    "kfield",
    "schema_fields",
]

MAX_VERSION = 0x7FFF


@dataclass(frozen=True, slots=True)
class VersionRange:
    """Inclusive range of versions, parsed from Kafka's notation ("0+", "3-5", "7", "none")."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        """Parse Kafka's version-range notation."""
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        """No version ("none": ``low > high``)."""
        return self.low > self.high

    def __and__(self, other: VersionRange) -> VersionRange:
        return VersionRange(max(self.low, other.low), min(self.high, other.high))

    def covers(self, other: VersionRange) -> bool:
        """Every version of ``other`` is in this range."""
        return other.empty or (self.low <= other.low and self.high >= other.high)

    def text(self) -> str:
        """Kafka's notation of the range (the inverse of `parse`)."""
        if self.empty:
            return "none"
        if self.high == MAX_VERSION:
            return f"{self.low}+"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


@dataclass(frozen=True, slots=True)
class Prim:
    """A primitive Kafka type."""

    name: str


#: Kafka's primitive types, by their names in the specs (RECORDS: record batches, decoded as a zero-copy
#: memoryview and never parsed).
BOOL, INT8, INT16, INT32, INT64, UINT16, UINT32, FLOAT64, UUID, STRING, BYTES, RECORDS = (
    Prim(name) for name in
    ("bool", "int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "uuid", "string", "bytes", "records")
)


@dataclass(frozen=True, slots=True)
class ArrayOf:
    """``[]T``: an array of a primitive or of a struct."""

    element: Prim | type[Struct]


KType = Prim | ArrayOf | type["Struct"]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """How one dataclass field is put on the wire."""

    type: KType
    versions: VersionRange
    nullable: VersionRange
    tag: int | None
    tagged_versions: VersionRange


def kfield(
    type_: KType,
    versions: str,
    *,
    default: Any,
    nullable: str = "none",
    tag: int | None = None,
    tagged_versions: str | None = None,
) -> Any:
    """Declare a Kafka field on a :class:`Struct` dataclass (returns a ``dataclasses.field``)."""
    spec = FieldSpec(
        type=type_,
        versions=VersionRange.parse(versions),
        nullable=VersionRange.parse(nullable),
        tag=tag,
        tagged_versions=VersionRange.parse(tagged_versions or versions) if tag is not None
        else VersionRange(1, 0),
    )
    return dataclasses.field(default=default, metadata={"kafka": spec})


@dataclass(frozen=True, slots=True, kw_only=True)
class Struct:
    """Base of every message and nested structure.

    ``unknown_tagged_fields`` keeps tagged fields this codec does not know, byte for byte, so they
    are written back unchanged (sorted into place by tag).
    """

    unknown_tagged_fields: tuple[tuple[int, bytes], ...] = ()


class Message(Struct):
    """A top-level request or response body.

    Not a dataclass itself (its subclasses are): compiled with mypyc, a dataclass's body hands every annotated
    name to ``dataclass`` as a field, ``ClassVar``s too. Each message class gets the three after it is made
    (protocol/kafka_messages.py: ``MESSAGE_VERSIONS``). The empty ``__slots__`` keeps the interpreted
    subclasses' instances without a ``__dict__``, as compiled ones are.
    """

    __slots__ = ()

    API_KEY: ClassVar[int]
    VALID_VERSIONS: ClassVar[tuple[int, int]]
    FLEXIBLE_FROM: ClassVar[int | None]


def schema_fields(cls: type[Struct]) -> list[tuple[str, FieldSpec, Any]]:
    """The Kafka fields of a struct class in wire order: (name, spec, default)."""
    out: list[tuple[str, FieldSpec, Any]] = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get("kafka")
        if spec is not None:
            out.append((f.name, spec, f.default))
    return out


# ----------------------------------------------------------------------------------------------
# Compilation: one decoder/encoder per (struct class, version, flexible).

ReadFn = Callable[[Reader], Any]
WriteFn = Callable[[Writer, Any], None]

#: The fixed-width types: their Reader and Writer methods (named alike: the type's name, BOOL's `boolean`).
_FIXED: dict[Prim, tuple[ReadFn, WriteFn]] = {
    t: (getattr(Reader, name), getattr(Writer, name))
    for t in (BOOL, INT8, INT16, INT32, INT64, UINT16, UINT32, FLOAT64, UUID)
    for name in ("boolean" if t is BOOL else t.name,)
}


#: struct codes of the fixed-width numbers that can be read several at a time (not bool, not uuid:
#: Kafka's bool must stay 0/1 strict to re-encode byte-identically).
_STRUCT_CODES: dict[Prim, str] = {
    INT8: "b", INT16: "h", INT32: "i", INT64: "q", UINT16: "H", UINT32: "I", FLOAT64: "d",
}


def _read_array_length(r: Reader, nullable: bool, flexible: bool) -> int:
    """Read an array's length: -1 for null (malformed unless ``nullable``)."""
    n = r.array_length(flexible)
    if n < 0 and not nullable:
        raise MalformedFrame(f"null array for a non-nullable field at offset {r.pos}")
    return n


def _write_array_length(w: Writer, v: tuple[Any, ...] | None, nullable: bool, flexible: bool) -> bool:
    """Write an array's length (or null); True when elements follow."""
    if v is None:
        if not nullable:
            raise InvalidValue("None given for a non-nullable array")
        w.array_length(None, flexible)
        return False
    w.array_length(len(v), flexible)
    return True


def _functions_for(t: KType, version: int, flexible: bool, nullable: bool) -> tuple[ReadFn, WriteFn]:
    """How a value of type ``t`` is read and written at ``version``."""
    if isinstance(t, Prim):
        fixed = _FIXED.get(t)
        if fixed is not None:
            return fixed
        if t is STRING:
            if flexible:
                rs = Reader.compact_nullable_string if nullable else Reader.compact_string
            else:
                rs = Reader.nullable_string if nullable else Reader.string
            return rs, lambda w, v: w.string(v, nullable, flexible)
        if t is RECORDS:
            return (Reader.compact_nullable_bytes if flexible else Reader.nullable_bytes,
                    lambda w, v: w.bytes_(v, True, flexible))
        if flexible:
            rb = Reader.compact_nullable_bytes if nullable else Reader.compact_bytes
        else:
            rb = Reader.nullable_bytes if nullable else Reader.bytes_
        return (lambda r: None if (v := rb(r)) is None else bytes(v)), lambda w, v: w.bytes_(v, nullable, flexible)
    if isinstance(t, ArrayOf):
        code = _STRUCT_CODES.get(t.element) if isinstance(t.element, Prim) else None
        if code is not None:
            width = struct.calcsize(">" + code)

            def read_number_array(r: Reader) -> tuple[Any, ...] | None:
                n = _read_array_length(r, nullable, flexible)
                if n < 0:
                    return None
                # One unpack for the whole array: per-element calls dominate big responses.
                return struct.unpack_from(f">{n}{code}", r.buf, r._need(n * width))

            def write_number_array(w: Writer, v: tuple[Any, ...] | None) -> None:
                if _write_array_length(w, v, nullable, flexible):
                    assert v is not None
                    w.out += struct.pack(f">{len(v)}{code}", *v)

            return read_number_array, write_number_array
        elem_read, elem_write = _functions_for(t.element, version, flexible, False)

        def read_array(r: Reader) -> tuple[Any, ...] | None:
            n = _read_array_length(r, nullable, flexible)
            return None if n < 0 else tuple([elem_read(r) for _ in range(n)])

        def write_array(w: Writer, v: tuple[Any, ...] | None) -> None:
            if _write_array_length(w, v, nullable, flexible):
                assert v is not None
                for item in v:
                    elem_write(w, item)

        return read_array, write_array
    struct_cls = t
    return (lambda r: _codec(struct_cls, version, flexible).decode(r),
            lambda w, v: _codec(struct_cls, version, flexible).encode(w, v))


class _StructCodec:
    """Decoder and encoder of one struct class at one version."""

    __slots__ = ("cls", "flexible", "regular", "steps", "tagged", "tagged_by_tag")

    def __init__(self, cls: type[Struct], version: int, flexible: bool) -> None:
        self.cls = cls
        self.flexible = flexible
        self.regular: list[tuple[str, ReadFn, WriteFn]] = []
        self.tagged: list[tuple[int, str, ReadFn, WriteFn, Any]] = []
        for name, spec, default in schema_fields(cls):
            if version not in spec.versions:
                continue
            nullable = version in spec.nullable
            rd, wr = _functions_for(spec.type, version, flexible, nullable)
            if spec.tag is not None:
                if flexible and version in spec.tagged_versions:
                    self.tagged.append((spec.tag, name, rd, wr, default))
                continue
            self.regular.append((name, rd, wr))
        self.tagged.sort(key=lambda x: x[0])
        self.tagged_by_tag = {t[0]: t for t in self.tagged}
        # Runs of consecutive fixed-width numbers become one struct (un)pack call.
        codes = {name: _STRUCT_CODES.get(spec.type) if isinstance(spec.type, Prim) else None
                 for name, spec, _ in schema_fields(cls)}
        self.steps: list[tuple[struct.Struct | None, tuple[str, ...], ReadFn | None, WriteFn | None]] = []
        run: list[str] = []

        def flush() -> None:
            if run:
                fmt = struct.Struct(">" + "".join(codes[n] or "" for n in run))
                self.steps.append((fmt, tuple(run), None, None))
                run.clear()

        for name, rd, wr in self.regular:
            if codes.get(name) is not None:
                run.append(name)
                continue
            flush()
            self.steps.append((None, (name,), rd, wr))
        flush()

    def decode(self, r: Reader) -> Any:
        kw: dict[str, Any] = {}
        for fmt, names, rd, _ in self.steps:
            if fmt is not None:
                kw.update(zip(names, fmt.unpack_from(r.buf, r._need(fmt.size)), strict=True))
            else:
                kw[names[0]] = rd(r)  # type: ignore[misc]
        if self.flexible:
            unknown: list[tuple[int, bytes]] = []
            for tag, data in r.tagged_fields():
                known = self.tagged_by_tag.get(tag)
                if known is None:
                    unknown.append((tag, bytes(data)))
                    continue
                sub = Reader(data)
                kw[known[1]] = known[2](sub)
                sub.expect_end()
            if unknown:
                kw["unknown_tagged_fields"] = tuple(unknown)
        return self.cls(**kw)

    def encode(self, w: Writer, obj: Any) -> None:
        if not isinstance(obj, self.cls):
            raise InvalidValue(f"expected {self.cls.__name__}, got {type(obj).__name__}")
        for fmt, names, _, wr in self.steps:
            if fmt is not None:
                w.out += fmt.pack(*[getattr(obj, n) for n in names])
            else:
                wr(w, getattr(obj, names[0]))  # type: ignore[misc]
        if self.flexible:
            fields: list[tuple[int, bytes]] = []
            for tag, name, _, wr, default in self.tagged:
                value = getattr(obj, name)
                # Like Kafka, a tagged field equal to its default is simply left out.
                if value != default:
                    sub = Writer()
                    wr(sub, value)
                    fields.append((tag, bytes(sub.out)))
            unknown = obj.unknown_tagged_fields
            if unknown:
                fields.extend((int(t), bytes(d)) for t, d in unknown)
                fields.sort(key=lambda x: x[0])
                tags = [t for t, _ in fields]
                if len(set(tags)) != len(tags):
                    raise InvalidValue(f"duplicate tagged fields in {self.cls.__name__}: {tags}")
            w.tagged_fields(fields)


_CODECS: dict[tuple[type[Struct], int, bool], _StructCodec] = {}


def _codec(cls: type[Struct], version: int, flexible: bool) -> _StructCodec:
    key = (cls, version, flexible)
    c = _CODECS.get(key)
    if c is None:
        c = _CODECS[key] = _StructCodec(cls, version, flexible)
    return c


S = TypeVar("S", bound=Struct)

# Exceptions the generic codec may hit on garbage input or bad values; callers only see ours.
_LOW_LEVEL = (struct.error, IndexError, ValueError, TypeError, OverflowError, UnicodeError, KeyError,
              RecursionError)


def _decoded(read: Callable[[Reader], Any], data: Buffer | Reader, what: Callable[[], str]) -> Any:
    """``read`` from ``data`` (a buffer: every byte must be consumed); the codec's low-level errors become
    :class:`MalformedFrame`, naming ``what()``."""
    try:
        if isinstance(data, Reader):
            return read(data)
        r = Reader(data)
        value = read(r)
        r.expect_end()
        return value
    except ProtocolError:
        raise
    except _LOW_LEVEL as e:
        raise MalformedFrame(f"cannot decode {what()}: {e!r}") from None


def decode_struct(cls: type[S], version: int, data: Buffer | Reader, flexible: bool) -> S:
    """Decode ``cls`` at ``version``; with a buffer, every byte must be consumed."""
    obj: S = _decoded(lambda r: _codec(cls, version, flexible).decode(r), data, lambda: f"{cls.__name__} v{version}")
    return obj


def encode_struct(obj: Struct, version: int, flexible: bool, w: Writer | None = None) -> bytes:
    """Encode ``obj`` at ``version`` (into ``w`` if given; the bytes written are returned)."""
    out = w if w is not None else Writer()
    start = len(out.out)
    try:
        _codec(type(obj), version, flexible).encode(out, obj)
    except ProtocolError:
        raise
    except _LOW_LEVEL as e:
        raise InvalidValue(f"cannot encode {type(obj).__name__} v{version}: {e!r}") from None
    return bytes(out.out[start:])


def check_version(cls: type[Message], version: int) -> None:
    """Raise :class:`UnsupportedVersion` unless ``version`` is one the codec knows for ``cls``."""
    lo, hi = cls.VALID_VERSIONS
    if not lo <= version <= hi:
        raise UnsupportedVersion(f"{cls.__name__} v{version} is not supported (known: v{lo}-v{hi})")


def is_flexible_version(cls: type[Message], version: int) -> bool:
    """Whether ``version`` of ``cls`` uses the flexible encoding."""
    return cls.FLEXIBLE_FROM is not None and version >= cls.FLEXIBLE_FROM


def decode_value(type_: KType, version: int, flexible: bool, data: Buffer, nullable: bool = False) -> Any:
    """Decode one standalone value (e.g. the content of a tagged field); all bytes must be used."""
    return _decoded(lambda r: _functions_for(type_, version, flexible, nullable)[0](r), data, lambda: "value")


def encode_value(type_: KType, version: int, flexible: bool, value: Any, nullable: bool = False) -> bytes:
    """Encode one standalone value."""
    w = Writer()
    try:
        _functions_for(type_, version, flexible, nullable)[1](w, value)
    except ProtocolError:
        raise
    except _LOW_LEVEL as e:
        raise InvalidValue(f"cannot encode value: {e!r}") from None
    return bytes(w.out)
