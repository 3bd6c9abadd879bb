"""Kafka's primitive wire types: a bounds-checked :class:`Reader` and an appending :class:`Writer`.

The reader works on a ``memoryview`` so that byte fields (record batches) come out as zero-copy
views; every failure is a :class:`~protocol.errors.ProtocolError`, never ``struct.error`` or
``IndexError``.
"""

from __future__ import annotations

import struct
import uuid
from typing import ClassVar, Final

from .errors import InvalidValue, MalformedFrame, TruncatedData

__all__ = [
    "Buffer",
    "Reader",
    "SlottedRecord",
    "Writer",
    "bytes_view",
    "encode_uvarint",
    "encode_varint",
    "encode_varlong",
    "read_array_length_at",
    "read_uvarint_at",
    "skip_tagged_fields_at",
    "zigzag_decode",
    "zigzag_encode",
]

#: Anything the decoders accept as input.
Buffer = bytes | bytearray | memoryview

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_F64: Final = struct.Struct(">d")

_NULL_UUID: Final = uuid.UUID(int=0)


def bytes_view(data: Buffer) -> memoryview:
    """``data`` as a one-dimensional view of unsigned bytes, the one shape every walker indexes: a view
    already in that shape is returned as it is (no new object), any other buffer is viewed or cast."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def zigzag_encode(value: int, bits: int = 64) -> int:
    """Map a signed integer onto an unsigned one (0,-1,1,-2 -> 0,1,2,3) as Kafka's varint does."""
    return (value << 1) ^ (value >> (bits - 1))


def zigzag_decode(value: int) -> int:
    """Inverse of :func:`zigzag_encode`."""
    return (value >> 1) ^ -(value & 1)


def encode_uvarint(value: int) -> bytes:
    """Unsigned LEB128 varint (Kafka's ``UNSIGNED_VARINT``); accepts 0 .. 2**64-1."""
    if value < 0 or value >= 1 << 64:
        raise InvalidValue(f"unsigned varint out of range: {value}")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag-encoded signed 32-bit varint (Kafka's ``VARINT``)."""
    if not -(1 << 31) <= value < 1 << 31:
        raise InvalidValue(f"varint out of int32 range: {value}")
    return encode_uvarint(zigzag_encode(value, 32) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Zigzag-encoded signed 64-bit varint (Kafka's ``VARLONG``)."""
    if not -(1 << 63) <= value < 1 << 63:
        raise InvalidValue(f"varlong out of int64 range: {value}")
    return encode_uvarint(zigzag_encode(value, 64) & 0xFFFFFFFFFFFFFFFF)


def read_uvarint_at(buf: Buffer, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """Read an unsigned varint at ``pos``; return (value, position after it).

    ``max_bytes`` = 5 bounds a 32-bit value (lengths, counts, tags), 10 a 64-bit one. The one-byte
    case (nearly every count and length) returns at once: the varint fast path of every walker.
    """
    try:
        b = buf[pos]
    except IndexError:
        raise TruncatedData(f"varint truncated at offset {pos}") from None
    if b < 0x80:
        return b, pos + 1
    n = len(buf)
    result = b & 0x7F
    shift = 7
    start = pos
    pos += 1
    for _ in range(max_bytes - 1):
        if pos >= n:
            raise TruncatedData(f"varint truncated at offset {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if max_bytes == 5 and result > 0xFFFFFFFF:
                raise MalformedFrame(f"unsigned varint exceeds 32 bits at offset {start}")
            return result, pos
        shift += 7
    raise MalformedFrame(f"varint longer than {max_bytes} bytes at offset {start}")


def read_array_length_at(buf: Buffer, pos: int, compact: bool) -> tuple[int, int]:
    """Element count of an ARRAY (int32, -1 = null) or COMPACT_ARRAY (uvarint N+1, 0 = null) at ``pos``:
    (count, position after it). A count that cannot fit in the bytes left (each element takes one at
    least) is refused, so a hostile length never makes a walker loop or allocate."""
    if compact:
        n, pos = read_uvarint_at(buf, pos)
        n -= 1
    else:
        try:
            n = _I32.unpack_from(buf, pos)[0]
        except struct.error:
            raise TruncatedData(f"array length truncated at offset {pos}") from None
        pos += 4
        if n < -1:
            raise MalformedFrame(f"negative array length {n} at offset {pos - 4}")
    if n > len(buf) - pos:
        raise TruncatedData(f"array of {n} elements cannot fit in {len(buf) - pos} bytes")
    return n, pos


#: UUIDs seen on the wire (topic ids), by their 16 bytes: uuid.UUID() costs a microsecond, and ids repeat.
_UUIDS: Final[dict[bytes, uuid.UUID]] = {}


def uuid_of(raw: bytes) -> uuid.UUID:
    """The UUID of 16 bytes, from a bounded cache (the topic ids a proxy sees are few and recur)."""
    found = _UUIDS.get(raw)
    if found is None:
        if len(_UUIDS) >= 100_000:
            _UUIDS.clear()
        found = _UUIDS[raw] = uuid.UUID(bytes=raw)
    return found


def read_uuid_at(buf: Buffer, pos: int) -> uuid.UUID:
    """The UUID at ``pos`` (the caller checked that 16 bytes are there), `uuid_of` its bytes."""
    return uuid_of(bytes(buf[pos:pos + 16]))


def skip_tagged_fields_at(buf: Buffer, pos: int) -> int:
    """The position after the tagged-field section at ``pos`` (an empty one, the common case, in one step)."""
    try:
        if buf[pos] == 0:
            return pos + 1
    except IndexError:
        raise TruncatedData(f"tagged fields truncated at offset {pos}") from None
    r = Reader(buf, pos)
    r.tagged_fields()
    return r.pos


class SlottedRecord:
    """Value equality, hash and repr from ``_fields``, for the plain classes the data path builds per
    request (`RequestHeaderPeek`, `PartitionSpan`, ...). Not dataclasses or NamedTuples: compiled with mypyc
    a plain class is filled in place, while those run an interpreted ``__init__``/``__new__``. Subclasses
    list their attributes in ``__slots__`` and ``_fields`` and never change them after construction."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlottedRecord) and type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({fields})"


class Reader:
    """Sequential, bounds-checked reader over one buffer (a ``memoryview`` of unsigned bytes)."""

    __slots__ = ("buf", "pos")

    def __init__(self, data: Buffer, pos: int = 0) -> None:
        self.buf: memoryview = bytes_view(data)
        self.pos: int = pos

    # -- fixed width -------------------------------------------------------------------------
    def _need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > len(self.buf):
            raise TruncatedData(f"need {n} bytes at offset {pos}, only {len(self.buf) - pos} left")
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        """Signed 8-bit integer."""
        v: int = _I8.unpack_from(self.buf, self._need(1))[0]
        return v

    def boolean(self) -> bool:
        """Kafka BOOLEAN: one byte, non-zero is true (re-encoded as 1)."""
        pos = self._need(1)
        b = self.buf[pos]
        if b > 1:
            # Java accepts any non-zero byte, but keeping 0/1 strict keeps re-encoding byte-identical.
            raise MalformedFrame(f"boolean byte {b} at offset {pos} is neither 0 nor 1")
        return b == 1

    def int16(self) -> int:
        """Signed big-endian 16-bit integer."""
        v: int = _I16.unpack_from(self.buf, self._need(2))[0]
        return v

    def uint16(self) -> int:
        """Unsigned big-endian 16-bit integer."""
        v: int = _U16.unpack_from(self.buf, self._need(2))[0]
        return v

    def int32(self) -> int:
        """Signed big-endian 32-bit integer."""
        v: int = _I32.unpack_from(self.buf, self._need(4))[0]
        return v

    def uint32(self) -> int:
        """Unsigned big-endian 32-bit integer."""
        v: int = _U32.unpack_from(self.buf, self._need(4))[0]
        return v

    def int64(self) -> int:
        """Signed big-endian 64-bit integer."""
        v: int = _I64.unpack_from(self.buf, self._need(8))[0]
        return v

    def float64(self) -> float:
        """IEEE 754 double, big-endian."""
        v: float = _F64.unpack_from(self.buf, self._need(8))[0]
        return v

    def uuid(self) -> uuid.UUID:
        """16-byte UUID (Kafka's all-zero UUID decodes to ``UUID(int=0)``)."""
        pos = self._need(16)
        return uuid.UUID(bytes=bytes(self.buf[pos : pos + 16]))

    # -- variable width ----------------------------------------------------------------------
    def uvarint(self) -> int:
        """Unsigned varint of at most 32 bits."""
        v, self.pos = read_uvarint_at(self.buf, self.pos, 5)
        return v

    def varint(self) -> int:
        """Zigzag signed 32-bit varint."""
        v, self.pos = read_uvarint_at(self.buf, self.pos, 5)
        return zigzag_decode(v)

    def varlong(self) -> int:
        """Zigzag signed 64-bit varint."""
        v, self.pos = read_uvarint_at(self.buf, self.pos, 10)
        if v >= 1 << 64:
            raise MalformedFrame("varlong exceeds 64 bits")
        return zigzag_decode(v)

    def take(self, n: int) -> memoryview:
        """The next ``n`` bytes as a zero-copy view."""
        pos = self._need(n)
        return self.buf[pos : pos + n]

    def _text(self, n: int) -> str:
        pos = self._need(n)
        try:
            return str(self.buf[pos : pos + n], "utf-8")
        except UnicodeDecodeError as e:
            raise MalformedFrame(f"invalid UTF-8 in string at offset {pos}: {e.reason}") from None

    def _length(self, width: int, nullable: bool, kind: str) -> int:
        """The length before a string or bytes: an int16 or int32 (`width` 2 or 4), or with `width` 0 a compact
        uvarint (length + 1). -1 is null, which only a nullable field may hold; less is malformed."""
        start = self.pos
        n = self.int16() if width == 2 else self.int32() if width == 4 else self.uvarint() - 1
        if n < -1 or (n == -1 and not nullable):
            what = "null" if n == -1 else f"negative length {n}"
            raise MalformedFrame(f"{what} for a {'' if nullable else 'non-'}nullable {kind} at offset {start}")
        return n

    def string(self) -> str:
        """STRING: int16 length then UTF-8; null is malformed."""
        return self._text(self._length(2, False, "string"))

    def nullable_string(self) -> str | None:
        """NULLABLE_STRING: int16 length (-1 = null) then UTF-8."""
        n = self._length(2, True, "string")
        return None if n < 0 else self._text(n)

    def compact_string(self) -> str:
        """COMPACT_STRING: uvarint (length + 1) then UTF-8; null is malformed."""
        return self._text(self._length(0, False, "compact string"))

    def compact_nullable_string(self) -> str | None:
        """COMPACT_NULLABLE_STRING: uvarint (length + 1, 0 = null) then UTF-8."""
        n = self._length(0, True, "compact string")
        return None if n < 0 else self._text(n)

    def bytes_(self) -> memoryview:
        """BYTES: int32 length then raw bytes (zero-copy view); null is malformed."""
        return self.take(self._length(4, False, "bytes"))

    def nullable_bytes(self) -> memoryview | None:
        """NULLABLE_BYTES / RECORDS: int32 length (-1 = null) then raw bytes."""
        n = self._length(4, True, "bytes")
        return None if n < 0 else self.take(n)

    def compact_bytes(self) -> memoryview:
        """COMPACT_BYTES: uvarint (length + 1) then raw bytes; null is malformed."""
        return self.take(self._length(0, False, "compact bytes"))

    def compact_nullable_bytes(self) -> memoryview | None:
        """COMPACT_NULLABLE_BYTES / COMPACT_RECORDS: uvarint (length + 1, 0 = null)."""
        n = self._length(0, True, "compact bytes")
        return None if n < 0 else self.take(n)

    def array_length(self, compact: bool) -> int:
        """Element count of an ARRAY (int32, -1 = null) or COMPACT_ARRAY (uvarint N+1, 0 = null)."""
        n, self.pos = read_array_length_at(self.buf, self.pos, compact)
        return n

    def tagged_fields(self) -> list[tuple[int, memoryview]]:
        """A tagged-field section: uvarint count, then (uvarint tag, uvarint size, bytes) ascending."""
        count = self.uvarint()
        if count == 0:
            return []
        if count > len(self.buf) - self.pos:
            raise TruncatedData(f"{count} tagged fields cannot fit in {len(self.buf) - self.pos} bytes")
        out: list[tuple[int, memoryview]] = []
        last = -1
        for _ in range(count):
            tag = self.uvarint()
            if tag <= last:
                raise MalformedFrame(f"tagged field {tag} after {last}: tags must be strictly ascending")
            last = tag
            size = self.uvarint()
            out.append((tag, self.take(size)))
        return out

    def expect_end(self) -> None:
        """Raise :class:`MalformedFrame` if bytes remain (they would be lost on re-encoding)."""
        if self.pos != len(self.buf):
            raise MalformedFrame(f"{len(self.buf) - self.pos} unexpected trailing bytes at offset {self.pos}")


class Writer:
    """Appends wire-encoded values to a ``bytearray``."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def getvalue(self) -> bytes:
        """Everything written so far."""
        return bytes(self.out)

    def raw(self, data: Buffer) -> None:
        """Append bytes as they are."""
        self.out += data

    def int8(self, v: int) -> None:
        """Signed 8-bit integer."""
        self.out += _I8.pack(v)

    def boolean(self, v: bool) -> None:
        """BOOLEAN as 0/1."""
        self.out.append(1 if v else 0)

    def int16(self, v: int) -> None:
        """Signed 16-bit integer."""
        self.out += _I16.pack(v)

    def uint16(self, v: int) -> None:
        """Unsigned 16-bit integer."""
        self.out += _U16.pack(v)

    def int32(self, v: int) -> None:
        """Signed 32-bit integer."""
        self.out += _I32.pack(v)

    def uint32(self, v: int) -> None:
        """Unsigned 32-bit integer."""
        self.out += _U32.pack(v)

    def int64(self, v: int) -> None:
        """Signed 64-bit integer."""
        self.out += _I64.pack(v)

    def float64(self, v: float) -> None:
        """IEEE 754 double."""
        self.out += _F64.pack(v)

    def uuid(self, v: uuid.UUID | None) -> None:
        """16-byte UUID; None is written as the all-zero UUID."""
        self.out += (v or _NULL_UUID).bytes

    def uvarint(self, v: int) -> None:
        """Unsigned varint."""
        if 0 <= v < 0x80:
            self.out.append(v)
        else:
            self.out += encode_uvarint(v)

    def varint(self, v: int) -> None:
        """Zigzag 32-bit varint."""
        self.out += encode_varint(v)

    def varlong(self, v: int) -> None:
        """Zigzag 64-bit varint."""
        self.out += encode_varlong(v)

    def string(self, v: str | None, nullable: bool, compact: bool) -> None:
        """(COMPACT_)(NULLABLE_)STRING."""
        if v is None:
            if not nullable:
                raise InvalidValue("None given for a non-nullable string")
            if compact:
                self.out.append(0)
            else:
                self.out += b"\xff\xff"
            return
        data = v.encode("utf-8")
        if compact:
            self.uvarint(len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise InvalidValue(f"string of {len(data)} bytes exceeds the int16 length limit")
            self.out += _I16.pack(len(data))
        self.out += data

    def bytes_(self, v: Buffer | None, nullable: bool, compact: bool) -> None:
        """(COMPACT_)(NULLABLE_)BYTES and RECORDS."""
        if v is None:
            if not nullable:
                raise InvalidValue("None given for non-nullable bytes")
            if compact:
                self.out.append(0)
            else:
                self.out += b"\xff\xff\xff\xff"
            return
        n = len(v) if not isinstance(v, memoryview) else v.nbytes
        if compact:
            self.uvarint(n + 1)
        else:
            self.out += _I32.pack(n)
        self.out += v

    def array_length(self, n: int | None, compact: bool) -> None:
        """Element count of an (compact) array; None = null array."""
        if n is None:
            if compact:
                self.out.append(0)
            else:
                self.out += b"\xff\xff\xff\xff"
        elif compact:
            self.uvarint(n + 1)
        else:
            self.out += _I32.pack(n)

    def tagged_fields(self, fields: list[tuple[int, bytes]]) -> None:
        """A tagged-field section from (tag, encoded value) pairs, which must be sorted by tag."""
        self.uvarint(len(fields))
        for tag, data in fields:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.out += data
